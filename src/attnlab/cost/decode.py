"""Inference cost models (§8.2–8.3, exercise 7): KV-cache size, decode attention's arithmetic
intensity, and a transformer layer's prefill vs decode roofline. The Flash-Decoding split models
(§8.4) are in ``splits.py`` and ``calibration.py``.

§8.3 layer model: one Llama-style layer (7B: d_model 4096, 32 heads × 128, SwiGLU FFN 11008) split
into the linear kernels (QKV, O, FFN up/gate, FFN down: weights read once, shared by the batch) and
attention (FlashAttention with K/V in L2: Q, K, V read and O written once; a decode step reads each
sequence's whole KV cache). Times are roofline times without launch overheads.

``decode_roofline``: the limit one decode step's attention is measured against (the cache read once).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, heads_pair, pos_int
from .flops import attention_flops, linear_params
from .gpus import get_gpu
from .io import SOFTMAX_FLOPS
from .roofline import KernelCost, kernel_time

# ---------------------------------------------------------------- §8.2 KV cache


def kv_cache_bytes(*, layers: int, seq: int, batch: int = 1, d_model: int | None = None, kv_heads: int | None = None,
                   head_dim: int | None = None, dtype_bytes=2) -> int:
    """Bytes of a KV cache: 2 (K and V) · layers · batch · seq · width · dtype bytes.

    width = ``d_model`` for multi-head attention, or ``kv_heads · head_dim`` (GQA/MQA). 7B (32
    layers, d_model 4096, FP16): 0.5 MiB per token; batch 128 × 2048 tokens: 128 GiB (§8.2).
    """
    L, N, B = pos_int(layers, "layers"), pos_int(seq, "seq"), pos_int(batch, "batch")
    if d_model is not None and (kv_heads is not None or head_dim is not None):
        raise ValueError("give either d_model or (kv_heads, head_dim), not both")
    if d_model is not None:
        width = pos_int(d_model, "d_model")
    elif kv_heads is not None and head_dim is not None:
        width = pos_int(kv_heads, "kv_heads") * pos_int(head_dim, "head_dim")
    else:
        raise ValueError(f"give d_model, or both kv_heads and head_dim (got kv_heads={kv_heads!r}, head_dim={head_dim!r})")
    return 2 * L * B * N * width * _dtype_bytes(dtype_bytes)


def decode_attention_intensity(*, heads: int, kv_heads: int | None = None, context: int, head_dim: int,
                               dtype_bytes=2) -> float:
    """FLOP per byte of one decode step's attention: 4·H·t·D FLOPs over the K/V cache (2·Hkv·t·D
    elements) plus q and o — about H/Hkv in FP16, whatever the batch (§8.3, exercise 7)."""
    H, Hkv = heads_pair(heads, kv_heads)
    t, D, nb = pos_int(context, "context"), pos_int(head_dim, "head_dim"), _dtype_bytes(dtype_bytes)
    flops = attention_flops(heads=H, seq_q=1, seq_k=t, head_dim=D)
    return flops / ((2 * Hkv * t * D + 2 * H * D) * nb)


# ---------------------------------------------------------------- §8.3 one layer, prefill vs decode


@dataclass(frozen=True)
class LayerCosts:
    """One transformer layer for ``batch`` sequences of ``new_tokens`` tokens attending to ``context``."""

    batch: int
    new_tokens: int
    context: int
    kernels: list[KernelCost]  # the linear kernels and "attention"

    @property
    def attention(self) -> KernelCost:
        return next(k for k in self.kernels if k.name == "attention")

    @property
    def linear(self) -> list[KernelCost]:
        return [k for k in self.kernels if k.name != "attention"]

    @property
    def attention_time(self) -> float:
        return self.attention.time

    @property
    def linear_time(self) -> float:
        return sum(k.time for k in self.linear)

    @property
    def time(self) -> float:
        return self.attention_time + self.linear_time

    @property
    def attention_share(self) -> float:
        """Attention's share of the layer's time (§8.3: 8% at decode batch 1, 91% at batch 128)."""
        return self.attention_time / self.time

    @property
    def time_per_token(self) -> float:
        return self.time / (self.batch * self.new_tokens)

    @property
    def linear_intensity(self) -> float:
        return sum(k.flops for k in self.linear) / sum(k.bytes for k in self.linear)

    def to_dict(self) -> dict:
        return {
            "batch": self.batch, "new_tokens": self.new_tokens, "context": self.context,
            "kernels": [k.to_dict() for k in self.kernels],
            "attention_time": self.attention_time, "linear_time": self.linear_time,
            "attention_share": self.attention_share, "time_per_token": self.time_per_token,
        }


def layer_costs(*, batch: int = 1, new_tokens: int, context: int | None = None, d_model: int = 4096, heads: int = 32,
                kv_heads: int | None = None, head_dim: int | None = None, ffn_dim: int = 11008, swiglu: bool = True,
                causal: bool = True, dtype_bytes=2, gpu="H100") -> LayerCosts:
    """Roofline of one layer: prefill is ``new_tokens = N`` (context N), a decode step is
    ``new_tokens = 1`` with ``context`` = tokens in the KV cache. Defaults: the 7B layer of §8.3.

    Linear kernels: FLOPs 2 · weights · tokens; bytes = weights once + input and output activations.
    Attention: FLOPs of ``attention_flops`` (causal, bottom-right aligned); bytes = Q, K, V read and
    O written once (FlashAttention, K/V in L2). No launch overheads.
    """
    B, Nq = pos_int(batch, "batch"), pos_int(new_tokens, "new_tokens")
    Nk = Nq if context is None else pos_int(context, "context")
    if Nk < Nq:
        raise ValueError(f"context ({Nk}) must be at least new_tokens ({Nq})")
    H, Hkv = heads_pair(heads, kv_heads)
    dm = pos_int(d_model, "d_model")
    D = dm // H if head_dim is None else pos_int(head_dim, "head_dim")
    params = linear_params(d_model=dm, heads=H, kv_heads=Hkv, head_dim=D, ffn_dim=ffn_dim, swiglu=swiglu)
    nb = _dtype_bytes(dtype_bytes)
    flag(causal, "causal")
    g = get_gpu(gpu)
    T = B * Nq  # tokens through the linear layers
    F = pos_int(ffn_dim, "ffn_dim")
    up = (2 if swiglu else 1) * F
    # (name, weights, input width, output width) per token
    linear = [
        ("QKV projection", params["qkv"], dm, (H + 2 * Hkv) * D),
        ("O projection", params["o"], H * D, dm),
        ("FFN up/gate" if swiglu else "FFN up", dm * up, dm, up),
        ("FFN down", F * dm, F, dm),
    ]
    kernels = []
    for name, w, din, dout in linear:
        flops = 2.0 * w * T
        nbytes = (w + T * (din + dout)) * nb
        t, bound = kernel_time(flops, nbytes, g, launch=False)
        kernels.append(KernelCost(name, flops, float(nbytes), t, bound))
    flops = attention_flops(batch=B, heads=H, seq_q=Nq, seq_k=Nk, head_dim=D, causal=causal)
    nbytes = (2 * B * H * Nq * D + 2 * B * Hkv * Nk * D) * nb  # Q read, O written; K, V read
    t, bound = kernel_time(flops, nbytes, g, launch=False)
    kernels.append(KernelCost("attention", flops, float(nbytes), t, bound))
    return LayerCosts(B, Nq, Nk, kernels)


# ---------------------------------------------------------------- §8.3 the limit of one decode step


def decode_roofline(*, batch: int, heads: int, seq: int, head_dim: int, kv_heads: int | None = None,
                    dtype_bytes=2, gpu="H100", launch: bool = False) -> KernelCost:
    """The roofline of one decode step's attention: ``batch`` sequences, one query token each, ``heads``
    query heads over a full cache of ``seq`` tokens and ``kv_heads`` K/V heads, on ``gpu``.

    FLOPs 4·B·H·L·D (``attention_flops``: q·Kᵀ and p·V), the softmax's 5 per score on the FP32 units;
    bytes: K and V read once (2·B·Hkv·L·D, what GQA shares) plus q read and o written (2·B·H·D). Time
    = max(FLOPs / peak, bytes / bandwidth) (+ a launch with ``launch=True``; the peak is the 16-bit
    tensor peak, the FP32 one for 4-byte data) — memory-bound unless H/Hkv is in the hundreds (§8.3)."""
    B, L, D = pos_int(batch, "batch"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    H, Hkv = heads_pair(heads, kv_heads)
    nb = _dtype_bytes(dtype_bytes)
    g = get_gpu(gpu)
    flops = attention_flops(batch=B, heads=H, seq_q=1, seq_k=L, head_dim=D)
    fp32 = float(SOFTMAX_FLOPS * B * H * L)
    nbytes = float((2 * B * Hkv * L * D + 2 * B * H * D) * nb)
    t, bound = kernel_time(flops, nbytes, g, fp32_flops=fp32, launch=flag(launch, "launch"),
                           matmul_peak=g.fp32_flops if nb >= 4 else None)
    return KernelCost("decode attention", flops, nbytes, t, bound, fp32)
