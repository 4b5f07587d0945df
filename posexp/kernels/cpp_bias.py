"""posexp's own CPU kernel for causal attention with a position bias read by distance
(``bias_attention.cpp``): how bias PEs (ALiBi, T5, Kerple, Sandwich, FIRE), and FoX's forget
gate, evaluate on a CPU.

Why a kernel of our own: torch 2.13's compiled FlexAttention template for the CPU hands a
``score_mod`` its query and key indices as loaded buffers, so a table read at ``q_idx - kv_idx``
becomes a gather one lane at a time, and its tiles run well below SDPA's on 256-bit vector units
(ALiBi at 0.34x RoPE's tokens/s at 4,096 tokens on a Zen 3 CPU). Here the bias is a table
reversed by distance, so the keys of a tile read it as one contiguous vector; FIRE's MLP of one
input is piecewise linear, so over a tile only the ReLU units whose kink falls inside it are
evaluated per key. docs/performance.md has the timings.

The kernel is C++ built on first use with the compiler FlexAttention's CPU path needs anyway
(``$CXX``, else ``c++``, ``g++`` or ``clang++``), for this CPU (``-march=native``), and cached
under ``$POSEXP_KERNEL_CACHE`` (default ``~/.cache/posexp/kernels``) by a hash of its source,
compiler, flags and CPU, so later processes load it in milliseconds, once its size and SHA-256
match those recorded at its build. It is loaded with ctypes (no
Python headers, no build tools beyond the compiler) and called without the GIL. Where it cannot
be built, one warning is logged and attention takes FlexAttention, as before.

Layout the C side expects: q, v (rows, T, D) and keys transposed and padded (rows, D, T + KB),
rows = batch x heads (head = row mod heads); tables reversed by distance (entry T - 1 - d holds
distance d) and padded by KB, per head (H, T + KB) or shared (T + KB); FoX's running sum c in
order, padded, per row (rows, T + KB). Forward only, fp32.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

log = logging.getLogger("posexp")

SOURCE = Path(__file__).with_name("bias_attention.cpp")
HEAD_DIMS = (8, 16, 32, 64, 128)  # the head sizes the kernel is instantiated for
KEY_TILE = 128  # the kernel's KB: keys and tables are padded by this much
MAX_UNITS = 256  # piecewise-linear units a bias may bend with
# Tried in order: -march=native is GCC's and x86 Clang's; some Arm compilers take -mcpu only.
FLAG_SETS = (["-march=native"], ["-mcpu=native"], [])
COMMON_FLAGS = ["-O3", "-std=c++17", "-pthread", "-shared", "-fPIC"]


def cache_root() -> Path:
    """Where built kernels are kept: ``$POSEXP_KERNEL_CACHE``, else ``~/.cache/posexp/kernels``."""
    if os.environ.get("POSEXP_KERNEL_CACHE"):
        return Path(os.environ["POSEXP_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "posexp" / "kernels"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_fingerprint() -> str:
    """What -march=native depends on: the CPU's model and feature flags (a shared cache on a
    mixed cluster must not hand one CPU a library built for another)."""
    parts = [platform.machine(), platform.processor()]
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("model name", "flags", "Features", "CPU part"):
                parts.append(line)
                if line.startswith(("flags", "Features")):
                    break
    except OSError:
        pass
    return "|".join(parts)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(root: Path, key: str) -> Path | None:
    """The cached build of ``key`` under ``root`` if it is whole: its size and SHA-256 as
    recorded when it was built (a truncated library would crash the process that maps it, with
    a bus error, before any check of ours could run); None for none, or one that differs."""
    try:
        record = json.loads((root / f"bias_attention-{key}.json").read_text())
        path = root / str(record["file"])
        if path.name != record["file"] or path.stat().st_size != record["size"]:
            return None
        return path if _digest(path) == record["sha256"] else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _build(compiler: str, flags: list[str], root: Path, key: str) -> Path | str:
    """Compile the source under ``root``, named by its content, and record its size and hash
    (``_verified``), each file written whole; the built library's path, or why not in one line
    (``compiler: ...`` when the compiler refused the flags)."""
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".build-", suffix=".so")
        os.close(fd)
        done = subprocess.run(
            [compiler, *COMMON_FLAGS, *flags, str(SOURCE), "-o", tmp],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if "error" in ln] or [done.stderr]
            return "compiler: " + (errors[0].strip()[:200] or f"exit status {done.returncode}")
        digest, size = _digest(Path(tmp)), Path(tmp).stat().st_size
        # Named by its content: a process that reads the record then finds the library it names,
        # whatever another process builds meanwhile.
        target = root / f"bias_attention-{key}-{digest[:12]}.so"
        os.replace(tmp, target)
        record = json.dumps({"file": target.name, "size": size, "sha256": digest})
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".build-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(record)
        os.replace(tmp, root / f"bias_attention-{key}.json")
        return target
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn = lib.posexp_bias_attention
    fn.argtypes = [p, p, p, p, i64, i64, i64, i64, ctypes.c_float, i32, p, p, p, p, p, p, i32, i32]
    fn.restype = i32
    return lib


def _try_load(path: Path) -> ctypes.CDLL | str:
    """The library at ``path``, or why it does not load (not a library; no kernel in it)."""
    try:
        return _load(path)
    except (OSError, AttributeError) as e:
        return f"{type(e).__name__}: {e}"


@functools.cache
def library(vector_floats: int | None = None) -> ctypes.CDLL | None:
    """The built kernel (vectors of ``vector_floats`` floats across keys; None: the CPU's
    width), built now if no whole cached build fits this source, compiler and CPU; None (with
    one warning) where it cannot be built or loaded."""
    compiler = _compiler()
    if compiler is None:
        return _unavailable("no C++ compiler found (set CXX)")
    width = [] if vector_floats is None else [f"-DPOSEXP_VECTOR_FLOATS={vector_floats}"]
    errors = []
    for flags in FLAG_SETS:
        flags = flags + width
        fields = [SOURCE.read_bytes(), compiler, " ".join(COMMON_FLAGS + flags), _cpu_fingerprint()]
        key = hashlib.sha256(repr(fields).encode()).hexdigest()[:16]
        # A cache that cannot be written (a read-only home, a file in its place): the temp dir.
        for root in (cache_root(), Path(tempfile.gettempdir()) / "posexp-kernels"):
            cached = _verified(root, key)
            target = cached if cached is not None else _build(compiler, flags, root, key)
            loaded = _try_load(target) if isinstance(target, Path) else target
            if cached is not None and isinstance(loaded, str):  # whole, yet not ours: rebuild
                target = _build(compiler, flags, root, key)
                loaded = _try_load(target) if isinstance(target, Path) else target
            if not isinstance(loaded, str):
                return loaded
            errors.append(loaded)
            if loaded.startswith("compiler: "):
                break  # the compiler refused these flags: try the next set
    return _unavailable(f"building {SOURCE.name} failed: {errors[0].removeprefix('compiler: ')}")


def _unavailable(why: str) -> None:
    log.warning("posexp's CPU bias-attention kernel is unavailable (%s); using FlexAttention", why)
    return None


def wanted(backend: str, device: torch.device, needs_grad: bool, dropout: float) -> bool:
    """Whether attention with a bias should try this kernel: evaluation on the CPU, with
    ``attention.backend`` auto or cpp (flex and sdpa ask for those kernels)."""
    return backend in ("auto", "cpp") and device.type == "cpu" and not needs_grad and not dropout


def applies(q: torch.Tensor, vector_floats: int | None = None) -> bool:
    """True where the kernel can run attention for queries ``q`` (B, H, T, D): on the CPU, with
    no gradient, a head size it was built for, and a library that builds here."""
    return (
        q.device.type == "cpu"
        and not torch.is_grad_enabled()
        and q.shape[-1] in HEAD_DIMS
        and library(vector_floats) is not None
    )


def _reversed(table: torch.Tensor, length: int) -> torch.Tensor:
    """A table by distance as the kernel reads it: the first ``length`` entries, reversed,
    padded by a key tile (the keys past a query's diagonal read the padding, then are masked)."""
    if table.shape[-1] < length:
        raise ValueError(f"a bias table of {table.shape[-1]} distances for {length} tokens")
    return F.pad(table[..., :length].float().flip(-1), (0, KEY_TILE)).contiguous()


def _run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kind: int,
    tensors: list[torch.Tensor | None],
    units: int = 0,
    vector_floats: int | None = None,
) -> torch.Tensor | None:
    """The kernel of ``kind`` over q, k, v (any dtype; run in fp32, returned in q's) reading
    ``tensors`` (table, row scale, intercept, slope, kinks, gains; None where unused)."""
    batch, heads, length, dim = q.shape
    dtype = q.dtype
    q, v = q.float().contiguous(), v.float().contiguous()
    keys = F.pad(k.float().transpose(-1, -2), (0, KEY_TILE)).contiguous()
    out = torch.empty_like(q)
    pointers = [None if t is None else t.data_ptr() for t in tensors + [None] * (6 - len(tensors))]
    status = library(vector_floats).posexp_bias_attention(
        q.data_ptr(),
        keys.data_ptr(),
        v.data_ptr(),
        out.data_ptr(),
        batch * heads,
        heads,
        length,
        dim,
        dim**-0.5,
        kind,
        *pointers,
        units,
        torch.get_num_threads(),
    )
    return None if status != 0 else out.to(dtype)


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    table: torch.Tensor,
    row_scale: torch.Tensor | None = None,
    piecewise: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    vector_floats: int | None = None,
) -> torch.Tensor | None:
    """softmax(QKᵀ/√d + bias) V under a causal mask, for queries and keys at 0..T-1; None where
    the kernel does not apply (``applies``).

    The bias of query i and key j is ``table[h, i - j]`` for a (H, ≥T) table, or, with
    ``piecewise`` = (intercept (H,), slope (H,), kinks (U,), gains (H, U)), FIRE's
    ``intercept[h] + slope[h]·u + Σ_t gains[h, t]·relu(u - kinks[t])`` at
    ``u = table[i - j]·row_scale[i]`` for a shared (≥T,) table and (≥T,) row scale.
    ``vector_floats``: the build's vector width (tests), by default the CPU's.
    """
    if not applies(q, vector_floats):
        return None
    length = q.shape[2]
    reversed_table = _reversed(table, length)
    if piecewise is None:
        return _run(q, k, v, 1, [reversed_table], vector_floats=vector_floats)
    if piecewise[2].numel() > MAX_UNITS:
        return None
    intercept, slope, kinks, gains = (t.float().contiguous() for t in piecewise)
    scale = row_scale[:length].float().contiguous()
    tensors = [reversed_table, scale, intercept, slope, kinks, gains]
    return _run(q, k, v, 2, tensors, kinks.numel(), vector_floats)


def causal_gated_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor
) -> torch.Tensor | None:
    """softmax(QKᵀ/√d + c_i − c_j) V under a causal mask, ``c`` (B, H, T) a running sum per row
    (FoX's forget gate); None where the kernel does not apply (``applies``)."""
    if not applies(q):
        return None
    return _run(q, k, v, 3, [F.pad(c.float(), (0, KEY_TILE)).contiguous()])
