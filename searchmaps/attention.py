"""Attention kernels, and the measured choice among them (``--attention``).

Every attention the model runs (causal, with a bool mask for memory-shared loops, with an
additive bias for ALiBi) goes through :func:`run`, which computes softmax(q kᵀ/√hs + mask) v
with one of these kernels:

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, the kernel torch picks (on a
  CPU its flash-attention kernel for a causal call, its math path for a mask). What every
  training used before this choice existed; the default of a row that does not name one.
- ``math``: the products written out (``q @ kᵀ``, mask, softmax in fp32, ``@ v``): under bf16
  autocast the two products run on the CPU's matrix units (AMX) where the flash kernel's
  backward does not; inductor fuses the mask and the softmax when the layer is compiled.
- ``chunked``: ``math`` over blocks of :data:`BLOCK` queries; a causal call reads only the keys
  up to its block's end, so it skips the masked upper triangle's products (about half of them
  at a long context) and never holds the whole T x T score matrix.

The three give the same numbers up to float rounding (``tests/test_attention.py``: every PE,
map kind and ``--kv-share`` window). Which is fastest depends on the CPU, the precision and
the shape (on an AVX2 CPU without bf16 matrix units the flash kernel wins at every shape
measured; on one with AMX the products in bf16 are several times faster than it), so
``--attention auto`` does not guess: :func:`resolve` times each kernel's forward and backward at
the training's own shape on this machine once (and keeps ``sdpa`` unless another is at least
:data:`MARGIN` times faster), keeps the answer in the cache
(``$SEARCHMAPS_CACHE/attention.json``, keyed by CPU, torch build, precision, threads and shape),
and a training's row records the kernel that trained it (``config.train.attention``), so a
study never mixes kernels silently.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

KERNELS = ("sdpa", "math", "chunked")  # config.ATTENTION_KERNELS names them for the flags (no torch there)
CHOICES = ("auto", *KERNELS)
BLOCK = 256  # queries per block of the chunked kernel
MARGIN = 1.25  # auto leaves sdpa only for a kernel at least this many times faster


def run(kernel: str, q, k, v, mask=None, causal: bool = False):
    """Attention of ``q`` (..., Tq, hs) over ``k``, ``v`` (..., S, hs) by ``kernel``:
    ``causal`` (Tq == S, each query reads itself and the keys before it) or ``mask`` (None,
    a bool tensor broadcastable to (..., Tq, S) that is True where a query may read a key, or
    an additive float bias)."""
    if kernel == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    if kernel == "math":
        return _products(q, k, v, _causal_mask(q.shape[-2], k.shape[-2], 0, q.device) if causal else mask)
    if kernel == "chunked":
        return _chunked(q, k, v, mask, causal)
    raise ValueError(f"attention kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")


def _causal_mask(rows: int, keys: int, start: int, device):
    """(rows, keys) bool: query ``start + i`` reads keys ``0 .. start + i``."""
    return torch.ones(rows, keys, dtype=torch.bool, device=device).tril(start)


def _products(q, k, v, mask):
    """softmax(q kᵀ / √hs + mask) v, the softmax in fp32, the products in the inputs' dtype."""
    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    low = scores.dtype in (torch.bfloat16, torch.float16)
    return torch.softmax(scores, dim=-1, dtype=torch.float32 if low else None).to(v.dtype) @ v


def _chunked(q, k, v, mask, causal: bool):
    """:func:`_products` over blocks of :data:`BLOCK` queries: causal blocks read only the keys
    up to their last query; a mask's rows are cut along with the queries."""
    T = q.shape[-2]
    if T <= BLOCK:
        return _products(q, k, v, _causal_mask(T, k.shape[-2], 0, q.device) if causal else mask)
    out = []
    for i in range(0, T, BLOCK):
        j = min(i + BLOCK, T)
        if causal:
            out.append(_products(q[..., i:j, :], k[..., :j, :], v[..., :j, :], _causal_mask(j - i, j, i, q.device)))
        else:
            rows = None if mask is None else mask[..., i:j, :] if mask.shape[-2] > 1 else mask
            out.append(_products(q[..., i:j, :], k, v, rows))
    return torch.cat(out, dim=-2)


# --------------------------------------------------------------------------- the measured choice


def resolve(choice: str, *, device: str, precision: str, batch: int, heads: int, seq_len: int, head_dim: int,
            threads: int = 1, compile: bool = False, cache: Path | None = None) -> str:
    """``--attention``'s value as a kernel: a kernel as given; ``auto`` -> ``sdpa`` on a GPU (its
    fused kernels), and on a CPU the kernel :func:`measure` finds fastest at this shape (read from
    the cache when this machine measured it before)."""
    if choice in KERNELS:
        return choice
    if choice != "auto":
        raise ValueError(f"--attention must be one of {', '.join(CHOICES)}, got {choice!r}")
    if not device.startswith("cpu"):
        return "sdpa"
    key = "|".join(map(str, (cpu_name(), torch.__version__, torch.backends.cpu.get_cpu_capability(), precision,
                              threads, "compiled" if compile else "eager", batch, heads, seq_len, head_dim)))
    path = cache or _cache_file()
    table = _read(path)
    if key not in table:
        try:
            times = measure(precision=precision, batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim,
                            threads=threads, compile=compile)
        except (RuntimeError, MemoryError):  # the shape does not fit (torch's CPU allocator raises RuntimeError):
            return "sdpa"  # the default kernel, nothing cached; the training meets the same limit and records it
        best = min(times, key=times.get)
        # sdpa, what every training ran before the choice, stays unless another kernel is clearly
        # faster: timing noise must not flip a machine's choice from one measurement to the next
        table[key] = {"times_s": times, "kernel": best if times[best] * MARGIN < times["sdpa"] else "sdpa"}
        _write(path, table)
    return table[key]["kernel"]


def measure(*, precision: str, batch: int, heads: int, seq_len: int, head_dim: int, threads: int = 1,
            compile: bool = False, repeats: int = 3) -> dict[str, float]:
    """Seconds of one causal forward and backward of each kernel at (batch, heads, seq_len,
    head_dim) under ``precision`` on ``threads`` CPU threads, best of ``repeats`` after a
    warm-up (with ``compile``, each kernel compiled by inductor as a compiled layer would run it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    if compile:  # three kernels, each compiled: past dynamo's default limit a kernel would run eager unannounced
        from torch import _dynamo

        _dynamo.config.recompile_limit = max(_dynamo.config.recompile_limit, 64)
    try:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(batch, heads, seq_len, head_dim, generator=gen).requires_grad_() for _ in range(3))
        dtype = torch.bfloat16 if precision == "bf16" else None
        times = {}
        for kernel in KERNELS:
            def fn(q, k, v, kernel=kernel):
                return run(kernel, q, k, v, causal=True)

            if compile:
                fn = torch.compile(fn, dynamic=False)

            def once():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
                    y = fn(q, k, v)
                y.float().sum().backward()

            once()
            best = math.inf
            for _ in range(repeats):
                t = time.perf_counter()
                once()
                best = min(best, time.perf_counter() - t)
            times[kernel] = best
        return times
    finally:
        torch.set_num_threads(before)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_file() -> Path:
    root = os.environ.get("SEARCHMAPS_CACHE") or Path.home() / ".cache" / "searchmaps"
    return Path(root) / "attention.json"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no table yet, or an unreadable one: measure again


def _write(path: Path, table: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache: the choice is measured again next time, nothing else changes
