"""One registry type for every family of pluggable parts found by name.

Encodings, extension methods, datasets, tokenizers, synthetic tasks, training objectives and
report views each keep a ``Registry``: a name registered twice is refused (a programming error,
``ValueError``), an unknown name gets a one-line ``PosexpError`` listing the registered ones, and
``discover`` imports every module of a package so that a new part is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from posexp.errors import PosexpError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named parts of one family (``kind`` names it in messages: "pe", "extension", ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register ``item`` as ``name``; a second registration of a name is refused."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of ``add``."""

        def wrap(item: T) -> T:
            return self.add(name, item)

        return wrap

    def get(self, name: object) -> T:
        """The part registered as ``name``, else a one-line error naming every registered one."""
        if not isinstance(name, str) or name not in self._items:
            raise PosexpError(
                f"unknown {self.kind} {name!r}; allowed: {', '.join(sorted(self._items))}"
            )
        return self._items[name]

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._items)

    def items(self) -> Iterable[tuple[str, T]]:
        """(name, part) pairs, in registration order."""
        return self._items.items()

    def values(self) -> Iterable[T]:
        """The parts, in registration order."""
        return self._items.values()

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, name: str) -> T:
        return self._items[name]


def discover(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
    """Import every module of ``package`` (its ``__path__``) except ``skip``, so each registers itself."""
    skip = set(skip)
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda i: i.name):
        if info.name not in skip and not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
