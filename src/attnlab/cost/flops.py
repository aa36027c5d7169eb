"""FLOPs and the sizes of attention's N×N intermediates (§3.1–3.2, §7.1–7.2, exercise 1).

One head of attention does ``QKᵀ`` and ``PV``: 2·Nq·Nk·D FLOPs each (a multiply-add counts 2), so
4·B·H·Nq·Nk·D forward; causal attention does half. The backward does 2.0× the forward (dV, dP, dQ,
dK) plus 0.5× to recompute S — 2.5× — and forward + backward 3.5× (the FlashAttention benchmarks'
``# 2.0(bwd) + 0.5(recompute)``). The rest of a transformer layer is ``2 · params`` FLOPs per token.
"""

from __future__ import annotations

from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, pos_int

# pass_ -> multiple of the forward FLOPs
PASS_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def causal_visible_pairs(*, seq_q: int, seq_k: int) -> float:
    """(query, key) pairs a causal mask leaves visible, per head.

    Square (Nq == Nk): N²/2 — the convention of the lecture ("causal attention computes half") and of
    FlashAttention's benchmarks; the exact count N(N+1)/2 differs by N/2. Otherwise bottom-right
    alignment (query i sees keys j <= i + Nk - Nq, as with a KV cache), counted exactly: a decode step
    (Nq = 1) sees all Nk keys.
    """
    Nq, Nk = pos_int(seq_q, "seq_q"), pos_int(seq_k, "seq_k")
    if Nq == Nk:
        return Nq * Nk / 2
    off = Nk - Nq  # query i sees i + off + 1 keys when that is >= 1 (the last query sees all Nk)
    i0 = max(0, -off)  # queries before i0 see nothing (only when Nq > Nk)
    n = Nq - i0
    total = n * ((i0 + off + 1) + Nk) // 2  # arithmetic series i0+off+1, ..., Nk
    return float(total)


def attention_flops(*, batch: int = 1, heads: int = 1, seq_q: int, seq_k: int | None = None, head_dim: int,
                    causal: bool = False, pass_: str = "fwd") -> float:
    """FLOPs of exact attention: 4·B·H·Nq·Nk·D forward (QKᵀ and PV, 2·Nq·Nk·D each).

    ``causal`` counts visible pairs only (half for Nq == Nk, see ``causal_visible_pairs``).
    ``pass_``: "fwd" (1×), "bwd" (2.5× = 2.0 for dV, dP, dQ, dK + 0.5 to recompute S), "fwd_bwd" (3.5×).
    Softmax's exp/max/sum are not counted (they are O(Nq·Nk), not O(Nq·Nk·D)).
    """
    B, H, D = pos_int(batch, "batch"), pos_int(heads, "heads"), pos_int(head_dim, "head_dim")
    Nq = pos_int(seq_q, "seq_q")
    Nk = Nq if seq_k is None else pos_int(seq_k, "seq_k")
    flag(causal, "causal")
    if pass_ not in PASS_FACTOR:
        raise ValueError(f"pass_ must be one of {sorted(PASS_FACTOR)}, got {pass_!r}")
    pairs = causal_visible_pairs(seq_q=Nq, seq_k=Nk) if causal else Nq * Nk
    return 4.0 * B * H * pairs * D * PASS_FACTOR[pass_]  # QKᵀ (2·D per pair) + PV (2·D per pair)


def linear_params(*, d_model: int = 4096, heads: int = 32, kv_heads: int | None = None, head_dim: int | None = None,
                  ffn_dim: int = 11008, swiglu: bool = True) -> dict[str, int]:
    """Weights of one transformer layer's linear parts (biases and norms left out).

    q/o projections d_model × H·D each, k/v projections d_model × Hkv·D each; the FFN has three
    d_model × ffn_dim matrices with SwiGLU (W1, W3 up/gate, W2 down), two without.
    """
    dm, F = pos_int(d_model, "d_model"), pos_int(ffn_dim, "ffn_dim")
    H = pos_int(heads, "heads")
    Hkv = H if kv_heads is None else pos_int(kv_heads, "kv_heads")
    if H % Hkv:
        raise ValueError(f"heads ({H}) must be a multiple of kv_heads ({Hkv})")
    D = dm // H if head_dim is None else pos_int(head_dim, "head_dim")
    if head_dim is None and dm % H:
        raise ValueError(f"d_model ({dm}) is not divisible by heads ({H}); give head_dim")
    flag(swiglu, "swiglu")
    return {
        "qkv": dm * (H + 2 * Hkv) * D,  # W_Q, W_K, W_V
        "o": H * D * dm,  # W_O
        "ffn": (3 if swiglu else 2) * dm * F,  # W1, W3 (gate), W2
    }


def linear_flops(tokens: int, **layer) -> float:
    """FLOPs of a layer's linear parts for ``tokens`` tokens: 2 per weight per token."""
    T = pos_int(tokens, "tokens")
    return 2.0 * T * sum(linear_params(**layer).values())


def scores_bytes(*, heads: int, seq_q: int, seq_k: int | None = None, batch: int = 1, dtype_bytes=2) -> int:
    """Bytes of S (or P) for all heads of one layer: B·H·Nq·Nk elements (§3.2, exercise 1, §7.1)."""
    B, H = pos_int(batch, "batch"), pos_int(heads, "heads")
    Nq = pos_int(seq_q, "seq_q")
    Nk = Nq if seq_k is None else pos_int(seq_k, "seq_k")
    return B * H * Nq * Nk * _dtype_bytes(dtype_bytes)


def lse_bytes(*, heads: int, seq: int, batch: int = 1, stat_bytes: int = 4) -> int:
    """Bytes of the logsumexp L the FlashAttention backward keeps instead of P: one FP32 per row (§7.2)."""
    return pos_int(batch, "batch") * pos_int(heads, "heads") * pos_int(seq, "seq") * _dtype_bytes(stat_bytes, "stat_bytes")
