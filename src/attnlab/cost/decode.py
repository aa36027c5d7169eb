"""Inference cost models (§8.2–8.4, exercises 7–8): KV-cache size, a transformer layer's prefill vs
decode roofline, and the Flash-Decoding SM/wave model.

§8.3 layer model: one Llama-style layer (7B: d_model 4096, 32 heads × 128, SwiGLU FFN 11008) split
into the linear kernels (QKV, O, FFN up/gate, FFN down: weights read once, shared by the batch) and
attention (FlashAttention with K/V in L2: Q, K, V read and O written once; a decode step reads each
sequence's whole KV cache). Times are roofline times without launch overheads.

§8.4 wave model (batch B, H heads, S splits): B·H·S thread blocks run in ceil(B·H·S / SMs) waves;
each block reads its 1/(B·H·S) share of K/V at 1/SMs of the HBM bandwidth; a merge kernel then reads
the S partial outputs and logsumexps (FP32) of every (batch, head) and writes O. One launch overhead
is charged for the split kernel — the lecture's model ("32K: 169 µs at S = 4, 268 µs at S = 5");
``merge_launch=True`` also charges the merge kernel's launch, which is what makes splitting a loss at
short contexts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, heads_pair, pos_int
from .flops import attention_flops, linear_params
from .gpus import get_gpu
from .roofline import KernelCost, kernel_time

PARTIAL_BYTES = 4  # Flash-Decoding's partial outputs and logsumexps are FP32

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


# ---------------------------------------------------------------- §8.4 Flash-Decoding waves


def decode_blocks(batch: int, heads: int, splits: int) -> int:
    """Thread blocks of a Flash-Decoding step: one per (batch, head, split), B·H·S (§8.4)."""
    return pos_int(batch, "batch") * pos_int(heads, "heads") * pos_int(splits, "splits")


@dataclass(frozen=True)
class DecodeSplit:
    """The wave model's view of one Flash-Decoding step."""

    splits: int
    blocks: int
    waves: int
    block_bytes: float  # K/V bytes one thread block reads: 2·N·D·dtype / S
    split_time: float  # the split kernel, launch included
    merge_time: float  # the merge kernel (0 when splits == 1)
    sm_use: float  # blocks / (waves · SMs): how full the waves are

    @property
    def time(self) -> float:
        return self.split_time + self.merge_time

    def to_dict(self) -> dict:
        return asdict(self) | {"time": self.time}


def _decode_split(B: int, H: int, N: int, D: int, S: int, g, nb: int, merge_launch: bool) -> DecodeSplit:
    blocks = B * H * S
    waves = -(-blocks // g.sms)
    block_bytes = 2 * N * D * nb / S  # its 1/(B·H·S) share of the K/V cache (q and o are noise)
    split = g.launch_overhead + waves * block_bytes / (g.hbm_bw / g.sms)  # each block gets bw / SMs
    merge = 0.0
    if S > 1:  # read S partial (o, lse) per (b, h), write o
        merge = (B * H * S * (D + 1) * PARTIAL_BYTES + B * H * D * nb) / g.hbm_bw
        merge += g.launch_overhead if merge_launch else 0.0
    return DecodeSplit(S, blocks, waves, block_bytes, split, merge, blocks / (waves * g.sms))


def decode_split_cost(*, batch: int, heads: int, seq: int, head_dim: int, splits: int, gpu, dtype_bytes=2,
                      merge_launch: bool = False) -> DecodeSplit:
    """The wave model of §8.4 for one decode step; ``heads`` = heads that get their own blocks."""
    B, H, N, D = pos_int(batch, "batch"), pos_int(heads, "heads"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    S = pos_int(splits, "splits")
    if S > N:
        raise ValueError(f"splits ({S}) cannot exceed seq ({N}): every split needs at least one key")
    return _decode_split(B, H, N, D, S, get_gpu(gpu), _dtype_bytes(dtype_bytes), flag(merge_launch, "merge_launch"))


def decode_split_time(*, batch: int, heads: int, seq: int, head_dim: int, splits: int, gpu, dtype_bytes=2,
                      merge_launch: bool = False) -> float:
    """Seconds of one Flash-Decoding step with ``splits`` K/V splits (§8.4 wave model).

    Batch 1, 32 heads, D = 128, FP16, H100, 32K context: ≈ 169 µs at 4 splits, ≈ 268 µs at 5.
    """
    return decode_split_cost(batch=batch, heads=heads, seq=seq, head_dim=head_dim, splits=splits, gpu=gpu,
                             dtype_bytes=dtype_bytes, merge_launch=merge_launch).time


def _split_time(B: int, H: int, N: int, D: int, S: int, sms: int, bw: float, launch: float, nb: int,
                merge_launch: bool) -> float:
    """``_decode_split(...).time`` without building the dataclass (best_num_splits' inner loop)."""
    waves = -(-(B * H * S) // sms)
    t = launch + waves * (2 * N * D * nb / S) * sms / bw
    if S > 1:
        t += (B * H * S * (D + 1) * PARTIAL_BYTES + B * H * D * nb) / bw + (launch if merge_launch else 0.0)
    return t


def best_num_splits(*, batch: int, heads: int, seq: int, head_dim: int, gpu, max_splits: int = 64, dtype_bytes=2,
                    merge_launch: bool = False, min_split_len: int = 1, tolerance: float = 0.05) -> int:
    """The fewest K/V splits whose wave-model time is within ``tolerance`` of the fastest.

    Tries S = 1 .. min(max_splits, seq // min_split_len) — every split keeps at least
    ``min_split_len`` keys (a kernel's BLOCK_N, say). The pure argmin (``tolerance=0``) likes block
    counts that are exact multiples of the SM count (batch 1, 32 heads: 33 splits = 8 full waves of
    132, 3% faster than 4 splits in one wave); the model does not see what many small blocks cost
    (scheduling, prologues, a bigger merge), so by default the fewest splits within 5% win — the rule
    FlashAttention's own ``num_splits_heuristic`` follows (smallest split count within 85% of the best
    wave efficiency). Exercise 8 (batch 2, 32 heads, 64K, H100) → 2; batch 1, 32K → 4.

    Cheap (at most ``max_splits`` closed-form evaluations, tens of µs) and valid for any batch,
    heads and seq >= 1 on any ``GPU``, e.g. one built from the running device's SM count.
    """
    B, H, N, D = pos_int(batch, "batch"), pos_int(heads, "heads"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    top = min(pos_int(max_splits, "max_splits"), max(1, N // pos_int(min_split_len, "min_split_len")))
    g, nb, ml = get_gpu(gpu), _dtype_bytes(dtype_bytes), flag(merge_launch, "merge_launch")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    times = [_split_time(B, H, N, D, S, g.sms, g.hbm_bw, g.launch_overhead, nb, ml) for S in range(1, top + 1)]
    limit = min(times) * (1 + tolerance) * (1 + 1e-12)  # 1e-12: exact ties go to the fewer splits
    return next(S for S, t in enumerate(times, start=1) if t <= limit)
