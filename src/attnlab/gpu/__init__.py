"""attnlab.gpu — the Triton kernels (lecture §5–§7 prefill forward/backward, §8 decoding), loaded on demand.

    config          launch configurations of the prefill kernels (block-size tables from H200 sweeps)
    prefill_fwd     FlashAttention-2 forward kernel and its launcher ``prefill_forward``
    prefill_gluon   the Hopper forward in Gluon (a TMA loader warp, two consumer warp groups, softmax under
                    the P·V wgmma), which ``prefill_forward`` runs for long dense / causal / window calls
    prefill_bwd     FlashAttention-2 backward kernels (dK/dV, dQ) and their launcher ``prefill_backward``
    prefill_gluon_bwd  the Hopper backward in Gluon (one pass: a TMA loader warp, two consumer warp groups,
                    dQ by TMA bulk reductions), which ``prefill_backward`` runs where the table says
    layout          the outputs' and gradients' memory order (their inputs'), and dQ's store into it
    prefill         the two as a differentiable operator: ``flash_attention_triton``
    decode_kernels  Flash-Decoding split and merge kernels
    decode_gluon    the split and merge kernels in Gluon (each split's first tiles copied before the sequence's
                    length arrives), which decode plans run for contiguous caches with ``GLUON_SPLIT`` on
    decode          their configurations, split count and launcher: ``flash_decode_triton``

These functions run the kernels or raise; they never fall back. ``attnlab.flash_attention`` and
``attnlab.flash_decode`` choose between them and the blockwise PyTorch path. Importing this package
imports neither triton nor the kernels: names load on first use, so ``import attnlab.gpu`` works on
machines without triton.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "flash_attention_triton": "prefill",
    "flash_attention_varlen_triton": "prefill",
    "prefill_forward": "prefill_fwd",
    "prefill_backward": "prefill_bwd",
    "FwdConfig": "config",
    "BwdConfig": "config",
    "default_fwd_config": "config",
    "default_bwd_config": "config",
    "set_config": "config",
    "flash_decode_triton": "decode",
    "DecodeConfig": "decode",
    "decode_configs": "decode",
    "decode_config_for": "decode",
    "choose_num_splits": "decode",
}

__all__ = sorted(_EXPORTS) + ["is_available", "prefill_kernels"]


def is_available() -> bool:
    """True when the Triton kernels can run here: triton is installed and a CUDA GPU of compute
    capability 8.0 or newer is visible."""
    import torch

    from .._runtime import triton_available

    if not (triton_available() and torch.cuda.is_available()):
        return False
    return torch.cuda.get_device_capability()[0] >= 8


def prefill_kernels() -> dict:
    """The prefill ``@triton.jit`` kernels by name ("fwd", "dkdv", "dq"), for ahead-of-time build
    reports (registers, spills, instructions) of the configurations in the tables."""
    from .prefill_bwd import _attn_bwd_dkdv, _attn_bwd_dq
    from .prefill_fwd import _attn_fwd

    return {"fwd": _attn_fwd, "dkdv": _attn_bwd_dkdv, "dq": _attn_bwd_dq}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__
