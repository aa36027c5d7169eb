"""The roofline beside the measurement (lecture §3.2's roofline applied to §5.5/§7.5 prefill and §8.3
decode): the columns the benchmark tables of ``prefill.py``, ``decode.py`` and ``variants.py`` add to
every row — ``roofline_ms``, the time ``attnlab.cost`` says the shape takes at the GPU preset's peak
and bandwidth, and ``of_roofline`` = roofline_ms / measured ms, the share of the physical limit a
kernel reaches (1 would be the limit itself).

Pure functions of a row and a ``attnlab.cost.GPU``: no torch, no GPU, so they are tested on the CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnlab.cost import GPU, GPUS, get_gpu  # noqa: E402
from attnlab.cost.decode import decode_roofline  # noqa: E402
from attnlab.cost.roofline import attention_roofline, varlen_attention_roofline  # noqa: E402

DTYPE_BYTES = 2  # the benchmarks time bfloat16 (float16 in the CPU smoke runs): 2 bytes either way


def preset_for(device_name: str | None, override: str | None = None) -> GPU | None:
    """The ``attnlab.cost`` preset to hold a run to: ``override`` (a preset name, ``--gpu``) if given,
    else the preset whose name parts all appear in the device's name ("NVIDIA H200" -> H200,
    "NVIDIA A100-SXM4-40GB" -> A100-40GB: the most specific match), else None (a CPU run, or a GPU
    with no preset)."""
    if override is not None:
        return get_gpu(override)
    if device_name is None:
        return None
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a string or None, got {device_name!r}")
    words = device_name.upper().replace("-", " ").split()
    found = [g for name, g in GPUS.items() if all(part in words for part in name.upper().split("-"))]
    return max(found, key=lambda g: len(g.name)) if found else None


def prefill_roofline_ms(*, batch: int, heads: int, seq: int, head_dim: int, causal: bool, pass_: str, gpu,
                        kv_heads: int | None = None, window=None, seqlens=None) -> float:
    """Milliseconds of ``attnlab.cost``'s roofline for one prefill row: ``attention_roofline`` of B × H ×
    N × D (``pass_`` "fwd" or "fwd_bwd": the forward and backward kernels summed), or with ``seqlens``
    the packed documents of ``varlen_attention_roofline`` (``batch`` and ``seq`` then unused)."""
    kw = dict(head_dim=head_dim, heads=heads, kv_heads=kv_heads, causal=causal, window=window, pass_=pass_,
              dtype_bytes=DTYPE_BYTES, gpu=gpu)
    if seqlens is not None:
        kernels = varlen_attention_roofline(seqlens_q=list(seqlens), **kw)
    else:
        kernels = attention_roofline(batch=batch, seq_q=seq, **kw)
    return sum(k.time for k in kernels) * 1e3


def decode_roofline_ms(*, batch: int, heads: int, kv_heads: int, seq: int, head_dim: int, gpu) -> float:
    """Milliseconds of ``attnlab.cost.decode.decode_roofline`` for one decode row (full caches)."""
    k = decode_roofline(batch=batch, heads=heads, kv_heads=kv_heads, seq=seq, head_dim=head_dim,
                        dtype_bytes=DTYPE_BYTES, gpu=gpu)
    return k.time * 1e3


def add_fraction(row: dict, roofline_ms: float, *, measured=(("ms", "of_roofline"),)) -> dict:
    """Put ``roofline_ms`` into ``row`` and, for each (time key, fraction key) of ``measured`` whose time
    the row has, roofline_ms / that time. Rows without a time (a provider that was skipped) keep only
    the roofline; a fraction from an earlier preset is dropped with it."""
    if not roofline_ms > 0:
        raise ValueError(f"roofline_ms must be a positive number of milliseconds, got {roofline_ms!r}")
    row["roofline_ms"] = roofline_ms
    for time_key, frac_key in measured:
        row.pop(frac_key, None)
        ms = row.get(time_key)
        if ms is not None:
            if not ms > 0:
                raise ValueError(f"row[{time_key!r}] must be a positive time in ms, got {ms!r}")
            row[frac_key] = roofline_ms / ms
    return row


def percent(fraction, missing: str = "—") -> str:
    """A fraction of the roofline as a table cell: "48%", or ``missing`` when there is none."""
    return missing if fraction is None else f"{100 * fraction:.0f}%"


def preset_text(gpu: GPU) -> str:
    """The preset in words for a caption, its numbers read from it: "the H200 preset (989 TFLOP/s ...)"."""
    return (f"the {gpu.name} preset ({gpu.tensor_flops / 1e12:.0f} TFLOP/s dense 16-bit tensor, "
            f"{gpu.hbm_bw / 1e12:.2f} TB/s HBM)")
