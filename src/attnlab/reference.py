"""Standard attention, the oracle every fast path is tested against (lecture §2.3, §3.2).

``attention_ref`` materialises the full score matrix ``S = scale·QKᵀ`` and probabilities
``P = softmax(S)`` exactly as the standard three-kernel implementation does (§3.2): simple, O(N²)
memory, and the definition of the right answer.
"""

from __future__ import annotations

import torch

from ._checks import causal_offset, check_causal, check_qkv, resolve_scale


def causal_mask(Nq: int, Nk: int, device=None) -> torch.Tensor:
    """Boolean (Nq, Nk) mask, True where a key is *visible*; bottom-right aligned.

    Query ``i`` sees key ``j`` iff ``j <= i + Nk - Nq`` (the last query sees every key, as in
    decoding with a KV cache). Note that SDPA's ``is_causal`` is top-left aligned instead.
    """
    i = torch.arange(Nq, device=device).unsqueeze(1)
    j = torch.arange(Nk, device=device).unsqueeze(0)
    return j <= i + causal_offset(Nq, Nk)


def expand_kv(x: torch.Tensor, H: int) -> torch.Tensor:
    """(B, Hkv, N, D) -> (B, H, N, D) by repeating each K/V head for its group of query heads."""
    Hkv = x.shape[1]
    return x if Hkv == H else x.repeat_interleave(H // Hkv, dim=1)


def attention_scores(q, k, *, causal=False, scale=None) -> torch.Tensor:
    """Scaled, masked scores ``S`` (B, H, Nq, Nk); masked entries are ``-inf``."""
    dims = check_qkv(q, k, k)
    scale = resolve_scale(scale, dims.D)
    s = torch.matmul(q, expand_kv(k, dims.H).transpose(-1, -2)) * scale
    if check_causal(causal):
        s = s.masked_fill(~causal_mask(dims.Nq, dims.Nk, q.device), float("-inf"))
    return s


def attention_ref(q, k, v, *, causal: bool = False, scale: float | None = None, return_probs: bool = False):
    """Standard attention with S and P materialised.

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv), with H % Hkv == 0.
        causal: bottom-right aligned mask (query i sees keys j <= i + Nk - Nq).
        scale: softmax scale, default 1/sqrt(D).
        return_probs: also return P (B, H, Nq, Nk).
    Returns:
        out (B, H, Nq, Dv) in q's dtype and lse (B, H, Nq) in float32 (float64 for float64 input),
        the natural-log logsumexp of each row of S. Rows with no visible key give out = 0,
        lse = -inf. Computation runs in the input dtype, so a float16 call is the "same-dtype
        PyTorch reference" of flash-attention's error criterion; pass float64 for the oracle.
    """
    dims = check_qkv(q, k, v)
    s = attention_scores(q, k, causal=causal, scale=scale)  # (B, H, Nq, Nk)
    if dims.Nk == 0:  # no keys at all: every row is fully masked
        m = s.new_full((*s.shape[:-1], 1), float("-inf"))
    else:
        m = s.amax(dim=-1, keepdim=True)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # fully masked rows: m = -inf
    p = torch.exp(s - m_safe)
    l = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(l == 0, torch.ones_like(l), l)
    out = torch.matmul(p, expand_kv(v, dims.H))
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = (m_safe.to(acc) + torch.log(l.to(acc))).squeeze(-1)
    if return_probs:
        return out, lse, p
    return out, lse
