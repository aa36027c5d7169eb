"""Triton kernels for GPUs (lecture §5–§7 prefill forward/backward, §8 decoding), loaded on demand.

``flash_attention_cuda`` — FlashAttention-2 forward and backward as a differentiable PyTorch
operator (``flash_fwd.py``, ``flash_bwd.py``, ``ops.py``); ``flash_decode_cuda`` — split-KV
decoding (``decode.py``). Importing this package imports neither triton nor the kernels: they
load when a call first needs them, so ``import attnlab.gpu`` works on machines without triton.
"""

from __future__ import annotations


def is_available() -> bool:
    """True when the Triton kernels can run here: triton is installed and a CUDA GPU of compute
    capability 8.0 or newer is visible."""
    import torch

    from ._common import triton_available

    if not (triton_available() and torch.cuda.is_available()):
        return False
    return torch.cuda.get_device_capability()[0] >= 8


def flash_attention_cuda(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False):
    """FlashAttention-2 (Triton) with autograd; see ``attnlab.gpu.ops.flash_attention_cuda``."""
    from .ops import flash_attention_cuda as f

    return f(q, k, v, causal=causal, scale=scale, return_lse=return_lse)


def flash_decode_cuda(*args, **kwargs):
    """Split-KV decoding kernels; see ``attnlab.gpu.decode.flash_decode_cuda``."""
    from .decode import flash_decode_cuda as f

    return f(*args, **kwargs)


__all__ = ["flash_attention_cuda", "flash_decode_cuda", "is_available"]
