"""Standard attention, the oracle every fast path is tested against (lecture §2.3, §3.2).

``attention_ref`` materialises the full score matrix ``S = scale·QKᵀ`` and probabilities
``P = softmax(S)`` exactly as the standard three-kernel implementation does (§3.2): simple, O(N²)
memory, and the definition of the right answer.
"""

from __future__ import annotations

import torch

from ._checks import (
    causal_offset,
    check_alibi,
    check_qkv,
    check_softcap,
    check_varlen,
    check_window,
    resolve_scale,
)
from .variants import score_mod


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


def attention_scores(q, k, *, causal=False, scale=None, window=None, softcap=None, alibi_slopes=None) -> torch.Tensor:
    """Scaled, modified, masked scores ``S`` (B, H, Nq, Nk); masked entries are ``-inf``.

    The variants (``attnlab.variants``): ``softcap·tanh(s/softcap)``, then the ALiBi bias, then the
    window / causal mask."""
    dims = check_qkv(q, k, k)
    scale = resolve_scale(scale, dims.D)
    mask = check_window(window, causal)
    softcap = check_softcap(softcap)
    slopes = check_alibi(alibi_slopes, dims.B, dims.H, q.device)
    s = torch.matmul(q, expand_kv(k, dims.H).transpose(-1, -2)) * scale
    off = causal_offset(dims.Nq, dims.Nk)
    i = torch.arange(dims.Nq, device=q.device).unsqueeze(1)
    j = torch.arange(dims.Nk, device=q.device).unsqueeze(0)
    if softcap is not None or slopes is not None:
        s = score_mod(s, softcap=softcap, slopes=None if slopes is None else slopes[:, :, None, None],
                      i=i, j=j, off=off)
    if not mask.dense:
        s = s.masked_fill(~mask.visible(i, j, off), float("-inf"))
    return s


def attention_ref(q, k, v, *, causal: bool = False, scale: float | None = None, return_probs: bool = False,
                  window=None, softcap: float | None = None, alibi_slopes=None):
    """Standard attention with S and P materialised.

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv), with H % Hkv == 0.
        causal: bottom-right aligned mask (query i sees keys j <= i + Nk - Nq).
        scale: softmax scale, default 1/sqrt(D).
        return_probs: also return P (B, H, Nq, Nk).
        window: (left, right), key j visible to query i iff i+off-left <= j <= i+off+right with
            off = Nk - Nq; -1 = unbounded side (None: (-1, -1)). causal=True is right = 0.
        softcap: scores become softcap·tanh(s/softcap) (None: off).
        alibi_slopes: (H,) or (B, H) float32; adds -slope·|i + off - j| to the scores.
    Returns:
        out (B, H, Nq, Dv) in q's dtype and lse (B, H, Nq) in float32 (float64 for float64 input),
        the natural-log logsumexp of each row of S. Rows with no visible key give out = 0,
        lse = -inf. Computation runs in the input dtype, so a float16 call is the "same-dtype
        PyTorch reference" of flash-attention's error criterion; pass float64 for the oracle.
    """
    dims = check_qkv(q, k, v)
    s = attention_scores(q, k, causal=causal, scale=scale, window=window, softcap=softcap,
                         alibi_slopes=alibi_slopes)  # (B, H, Nq, Nk)
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


def attention_ref_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale: float | None = None,
                         window=None, softcap: float | None = None, alibi_slopes=None):
    """The oracle for a packed variable-length batch: ``attention_ref`` on each sequence alone.

    q (total_q, H, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv), ``cu_seqlens_*`` (B + 1,) cumulative
    lengths, as flash-attn's ``flash_attn_varlen_func``. Each sequence has its own bottom-right
    alignment (off = its Nk - its Nq). Returns out (total_q, H, Dv) and lse (H, total_q).
    """
    dims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    scale = resolve_scale(scale, dims.D)
    slopes = check_alibi(alibi_slopes, dims.B, dims.H, q.device)
    out = q.new_zeros(dims.total_q, dims.H, dims.Dv)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    lse = torch.full((dims.H, dims.total_q), float("-inf"), dtype=acc, device=q.device)
    for b in range(dims.B):
        q0, nq, k0, nk = dims.seq(b)
        if nq == 0:
            continue
        qb = q[q0:q0 + nq].transpose(0, 1).unsqueeze(0)  # (1, H, nq, D)
        kb = k[k0:k0 + nk].transpose(0, 1).unsqueeze(0)  # (1, Hkv, nk, D)
        vb = v[k0:k0 + nk].transpose(0, 1).unsqueeze(0)  # (1, Hkv, nk, Dv)
        ob, lb = attention_ref(qb, kb, vb, causal=causal, scale=scale, window=window, softcap=softcap,
                               alibi_slopes=None if slopes is None else slopes[b:b + 1])
        out[q0:q0 + nq] = ob[0].transpose(0, 1)  # (nq, H, Dv)
        lse[:, q0:q0 + nq] = lb[0]
    return out, lse
