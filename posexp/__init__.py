"""posexp: experiments on positional encodings with tiny decoder-only transformers."""

from typing import Any

__version__ = "0.1.0"
__all__ = ["rope_frequencies", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `posexp --help` and config composition do not pay for importing torch.
    if name == "rope_frequencies":
        from posexp.extension import rope_frequencies

        return rope_frequencies
    raise AttributeError(f"module 'posexp' has no attribute {name!r}")
