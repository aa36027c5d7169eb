"""Flash-Decoding on the GPU (lecture §8.2–§8.4): the public launcher and what the kernels take.

Decoding has 1 to a few query tokens per sequence, so FlashAttention's grid of (batch, head, query
block) has only B·H programs — too few to keep 132 SMs reading (§8.4). Flash-Decoding splits the keys
of each sequence into S parts, computes a partial result and its logsumexp per part, and merges the
parts with the ⊕ of §4.4 (the kernels: ``attnlab.gpu.decode_kernels``).

* ``flash_decode_triton`` — the public launcher; ``unsupported`` says which inputs the kernels do not
  cover (``attnlab.flash_decode``, the dispatch, sends those to the blockwise PyTorch path).
* The configurations and the split count: ``attnlab.gpu.decode_config``; the plans a call keeps
  for the next call with its signature: ``attnlab.gpu.decode_plan`` (both re-exported here).
* The variants (``attnlab.variants``): a sliding window, softcapping, ALiBi. With a window's left edge
  a call streams only the keys some query can see, ``cost.decode_window_keys`` of them per sequence
  (about the window, whatever the cache holds), and the split count is chosen for that many keys.
"""

from __future__ import annotations

import torch

from .._checks import (
    check_decode_inputs,
    check_positive_int,
    check_variants,
    resolve_scale,
    seqlens_tensor,
)
from .._runtime import NATIVE_DECODE, interpret_mode, interpreter_problem
from .decode_config import (
    DecodeConfig,
    choose_num_splits,
    decode_config_for,
    decode_configs,
    gpu_for_device,
    kernel_config,
    streamed_keys,
)
from .decode_plan import DecodePlan, clear_plans, decode_fn, plan_key, plan_stats, run_planned

SUPPORTED_HEAD_DIMS = (32, 64, 96, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_ROWS = 128  # G·Nq query rows per program (the M dimension of tl.dot)


# -- launcher --------------------------------------------------------------------------------------------


def unsupported(q, dims) -> tuple[str, str] | None:
    """Why the kernels cannot take this call — a reason key and a message — or None if they can."""
    if q.device.type != "cuda" and not (q.device.type == "cpu" and interpret_mode()):
        return "device", f"tensors on {q.device} (the kernels need CUDA, or TRITON_INTERPRET=1 on the CPU)"
    if q.device.type == "cpu" and (problem := interpreter_problem()):
        return "interpreter", problem
    if q.dtype not in SUPPORTED_DTYPES:
        return f"dtype-{q.dtype}", f"dtype {q.dtype} (the kernels take float16 and bfloat16)"
    if dims.Dv != dims.D:
        return "dv", f"value head dim {dims.Dv} differs from the key head dim {dims.D}"
    if dims.D not in SUPPORTED_HEAD_DIMS:
        return f"d-{dims.D}", f"head dim {dims.D} (the kernels take {', '.join(map(str, SUPPORTED_HEAD_DIMS))})"
    if dims.group * dims.Nq > MAX_ROWS:
        return "rows", f"{dims.group} query heads per K/V head × {dims.Nq} queries (more than {MAX_ROWS} rows)"
    return None


def flash_decode_triton(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                        causal: bool = True, window=None, softcap: float | None = None, alibi_slopes=None,
                        scale: float | None = None, config: DecodeConfig | None = None):
    """Flash-Decoding over a KV cache with the Triton kernels (§8.4).

    Arguments:
        q: (B, H, Nq, D) float16/bfloat16, Nq small (1 to a few new tokens per sequence).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D), or paged (num_pages, page_size, Hkv, D)
            when ``block_table`` (B, max_pages) int32 is given; H % Hkv == 0 (GQA/MQA).
        cache_seqlens: (B,) int32 keys held by each sequence (None: the full capacity).
        num_splits: K/V splits per (sequence, K/V head); None asks ``choose_num_splits`` (for the keys
            the call streams: with a window, about the window). Counts beyond one split per key tile
            change nothing and are capped.
        causal: query i of sequence b sits at position pos = cache_seqlens[b] - Nq + i and sees keys
            j <= pos (the window's right side at 0).
        window: (left, right): key j visible iff pos - left <= j <= pos + right, -1 = unbounded side
            (None: (-1, -1)); flash-attn's ``window_size``. Only the keys in the window are read.
        softcap: scores become softcap·tanh(s/softcap) (None: off).
        alibi_slopes: (H,) or (B, H) float32: -slope·|pos - j| is added after the softcap.
        scale: softmax scale, default 1/sqrt(D).
        config: a ``DecodeConfig`` to force (benchmarks, tests); default ``decode_config_for``.
    Returns:
        out (B, H, Nq, D) in q's dtype and lse (B, H, Nq) float32 (natural log). Rows with no
        visible key give out = 0, lse = -inf.

    A call whose inputs have the signature of an earlier call (shapes, strides, dtypes, device,
    variant, stream: ``plan_key``) reuses that call's plan and compiled kernels without checking again.
    On CUDA the lengths and page ids are not read on the host (that would synchronise every call);
    the kernel clamps them into the cache, so bad values give wrong numbers, never a bad access.
    Inputs the kernels do not cover raise a ``ValueError`` (``attnlab.flash_decode`` falls back instead).
    """
    fast = NATIVE_DECODE[0]  # (``native``: a kept plan's call in C++, where it is on)
    if fast is not None and num_splits is None and causal is True and window is None and softcap is None \
            and alibi_slopes is None and scale is None and config is None \
            and (result := fast[0](fast[1], q, k_cache, v_cache, cache_seqlens, block_table)) is not None:
        return result
    key = plan_key(q, k_cache, v_cache, cache_seqlens, block_table, num_splits, causal, window, softcap,
                   alibi_slopes, scale, config)
    if key is not None and (result := run_planned(key, q, k_cache, v_cache, cache_seqlens, block_table,
                                                  alibi_slopes)) is not None:
        return result
    cache_seqlens = seqlens_tensor(cache_seqlens, q)
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table,
                               check_values=q.device.type != "cuda")
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    if config is not None and not isinstance(config, DecodeConfig):
        raise TypeError(f"config must be a DecodeConfig or None, got {type(config).__name__}")
    why = unsupported(q, dims)
    if why is not None:
        raise ValueError(f"flash_decode_triton: the kernels do not take {why[1]}; "
                         "attnlab.flash_decode runs such inputs on the blockwise PyTorch path")
    return decode_fn(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                     num_splits=num_splits, mask=mask, scale=resolve_scale(scale, dims.D), softcap=softcap,
                     slopes=slopes, config=config, key=key)


__all__ = ["DecodeConfig", "DecodePlan", "choose_num_splits", "clear_plans", "decode_config_for", "decode_configs",
           "decode_fn", "flash_decode_triton", "gpu_for_device", "kernel_config", "plan_key", "plan_stats",
           "run_planned", "streamed_keys", "unsupported", "SUPPORTED_HEAD_DIMS", "SUPPORTED_DTYPES", "MAX_ROWS"]
