"""attnlab — exact attention from online softmax to FlashAttention-2 and Flash-Decoding.

The companion library of the lecture "Transformers, attention and FlashAttention". This file only
re-exports; names resolve on first use so that ``import attnlab`` stays light (no triton, no
matplotlib, no simulator or model code until asked for).

Shapes everywhere: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D)``, ``lse (B, H, Nq)``; causal masks
and sliding windows are aligned bottom-right when ``Nq != Nk``. Packed variable-length batches use
flash-attn's layout: ``q (total_q, H, D)``, ``k, v (total_k, Hkv, D)``, ``cu_seqlens`` (B + 1,) int32.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    # §4 softmax and the merge ⊕
    "naive_softmax": "attnlab.softmax",
    "safe_softmax": "attnlab.softmax",
    "online_softmax": "attnlab.softmax",
    "Summary": "attnlab.softmax",
    "AttnState": "attnlab.softmax",
    "summarize": "attnlab.softmax",
    "merge": "attnlab.softmax",
    "SoftmaxCounts": "attnlab.softmax",
    "merge_factors": "attnlab.softmax",
    "expected_rescales": "attnlab.softmax",
    # §2.3 the oracle
    "attention_ref": "attnlab.reference",
    "attention_ref_varlen": "attnlab.reference",
    "AttnDims": "attnlab._checks",
    "causal_mask": "attnlab.reference",
    # §5–§8 the entry points: they choose the Triton kernels or the blockwise path
    "flash_attention": "attnlab.api",
    "flash_attention_varlen": "attnlab.api",
    "flash_decode": "attnlab.api",
    "attention_forward": "attnlab.api",
    "attention_backward": "attnlab.api",
    # the variants' one meaning: sliding windows, softcap, ALiBi
    "Mask": "attnlab.variants",
    # §5–§8 blockwise algorithms in PyTorch
    "flash_forward": "attnlab.blockwise",
    "flash_forward_fa1": "attnlab.blockwise",
    "flash_backward": "attnlab.blockwise",
    "IOStats": "attnlab.blockwise",
    "flash_attention_blockwise": "attnlab.blockwise",
    "flash_decode_blockwise": "attnlab.blockwise",
    "flash_forward_varlen": "attnlab.blockwise",
    "flash_attention_varlen_blockwise": "attnlab.blockwise",
    "cpu_block_sizes": "attnlab.blockwise",
    # §8.2 KV caches
    "PagedKVCache": "attnlab.kvcache",
    "ContiguousKVCache": "attnlab.kvcache",
    # cost models (§3, §5.4–5.5, §6–§8)
    "estimate": "attnlab.cost",
    "get_gpu": "attnlab.cost",
    "attention_flops": "attnlab.cost",
    "best_num_splits": "attnlab.cost",
    # the GPU simulator and the lecture's kernels on it (§5.2–5.3)
    "simulate_forward": "attnlab.sim.kernels",
    "run_flash_forward": "attnlab.sim.kernels",
    "run_standard_forward": "attnlab.sim.kernels",
    # the tiny LikesWorld transformer (§2, §7.7, §8)
    "get_model": "attnlab.model",
    "ModelConfig": "attnlab.model",
    # benchmark helpers
    "Benchmark": "attnlab.bench",
}
_SUBMODULES = {"softmax", "reference", "variants", "api", "blockwise", "cost", "sim", "model", "gpu", "kvcache", "demos", "bench",
               "cli"}

__all__ = sorted(_EXPORTS) + sorted(_SUBMODULES) + ["__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"attnlab.{name}")
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__():
    return __all__
