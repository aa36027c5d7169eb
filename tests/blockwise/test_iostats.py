"""attnlab.blockwise's I/O counts (IOStats) against closed forms derived from the causal mask itself and
against the lecture's printed numbers (§5.4, §6.2, §6.3, §7.4)."""

import math

import pytest
import torch
from tests.helpers import qkv

from attnlab.blockwise import IOStats, flash_backward, flash_forward, flash_forward_fa1
from attnlab.reference import causal_mask


def _blocks(n, b):
    return [(a, min(a + b, n)) for a in range(0, n, b)]


def _pair_table(Nq, Nk, Br, Bc, causal):
    """For every (Q block, K/V block): 'skip', 'mask' or 'full', read off the causal mask itself."""
    M = causal_mask(Nq, Nk) if causal else torch.ones(Nq, Nk, dtype=torch.bool)
    out = {}
    for i, (i0, i1) in enumerate(_blocks(Nq, Br)):
        for j, (j0, j1) in enumerate(_blocks(Nk, Bc)):
            sub = M[i0:i1, j0:j1]
            out[i, j] = "skip" if not sub.any() else ("full" if sub.all() else ("mask" if causal else "full"))
    return out


# N multiples of the blocks and not; causal and not; GQA
COUNT_CASES = [(1, 1, 1, 256, 256, 64, 64, 64), (2, 4, 2, 300, 300, 32, 64, 48), (1, 2, 1, 97, 211, 16, 32, 24),
               (1, 1, 1, 211, 97, 16, 24, 32)]


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_fa2_forward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    st = IOStats()
    flash_forward(q, k, v, causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    kb = _blocks(Nk, Bc)
    keys = sum(kb[j][1] - kb[j][0] for (i, j), kind in pairs.items() if kind != "skip")
    G = H // Hkv
    assert st.reads == {"Q": B * H * Nq * D, "K": B * Hkv * keys * D, "V": B * Hkv * keys * D}
    assert st.writes == {"O": B * H * Nq * D, "L": B * H * Nq}
    n_comp = sum(kind != "skip" for kind in pairs.values())
    assert st.pairs_computed == B * Hkv * n_comp
    assert st.pairs_skipped == B * Hkv * (len(pairs) - n_comp)
    assert st.pairs_masked == B * Hkv * sum(kind == "mask" for kind in pairs.values())
    if not causal and Nq % Br == 0:  # §5.4: 2Nd + 2Nd·N/Br + N per head (MHA)
        N = Nq
        assert st.total == B * Hkv * (G * 2 * N * D + 2 * Nk * D * (N // Br) + G * N)


def test_causal_skipping_matches_the_lecture():
    # §6.2: N = 256, B = 64 (T = 4): 10 of 16 pairs; K/V reads 524,288 -> 327,680 bytes (float32, d = 64)
    q, k, v = qkv(1, 1, 1, 256, 256, 64, dtype=torch.float32)
    full, causal = IOStats(), IOStats()
    flash_forward(q, k, v, block_q=64, block_k=64, stats=full)
    flash_forward(q, k, v, causal=True, block_q=64, block_k=64, stats=causal)
    assert (causal.pairs_computed, causal.pairs_computed + causal.pairs_skipped) == (10, 16)
    kv_bytes = lambda s: 4 * (s.reads["K"] + s.reads["V"])  # noqa: E731
    assert (kv_bytes(full), kv_bytes(causal)) == (524_288, 327_680)
    # T = 32: T(T+1)/2 pairs, 51.6 %
    q, k, v = qkv(1, 1, 1, 256, 256, 8, dtype=torch.float32)
    st = IOStats()
    flash_forward(q, k, v, causal=True, block_q=8, block_k=8, stats=st)
    assert st.pairs_computed == 32 * 33 // 2
    assert round(100 * st.pairs_computed / (st.pairs_computed + st.pairs_skipped), 1) == 51.6


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_fa1_forward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    st = IOStats()
    flash_forward_fa1(q, k, v, causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    qb = _blocks(Nq, Br)
    rows = sum(qb[i][1] - qb[i][0] for (i, j), kind in pairs.items() if kind != "skip")  # Q rows per K/V pass
    G = H // Hkv
    R = B * H * rows
    assert st.reads == {"Q": R * D, "K": B * Hkv * Nk * D, "V": B * Hkv * Nk * D, "O": R * D,
                        "l": R + B * H * Nq, "m": R + B * H * Nq}
    init = B * H * Nq
    assert st.writes == {"O": init * D + R * D, "l": init + R, "m": init + R, "L": B * H * Nq}
    if not causal and G == 1:  # §6.3 per head: K, V once + per K/V block (Q, O in, O out) + (ℓ, m in and out)
        Tc = len(_blocks(Nk, Bc))
        per_head = 2 * Nk * D + Tc * (3 * Nq * D + 4 * Nq)
        assert st.total - B * H * (Nq * D + 2 * Nq) - B * H * 3 * Nq == B * H * per_head



def test_counts_at_the_lecture_size():
    # §6.3, exercise 4: one head, N = 4096, d = 128, Br = Bc = 128 — FA2 moves 34.6 M elements, FA1 51.9 M
    # (the lecture's printed totals), counted here by running both loops
    q, k, v = qkv(1, 1, 1, 4096, 4096, 128, dtype=torch.float32)
    fa2, fa1 = IOStats(), IOStats()
    flash_forward(q, k, v, block_q=128, block_k=128, stats=fa2)
    flash_forward_fa1(q, k, v, block_q=128, block_k=128, stats=fa1)
    N = 4096
    # the lecture's FA1 total leaves out the initialisation (O, ℓ, m written once) and the epilogue
    # (m, ℓ read, L written), which the loop counts too
    fa1_loop = fa1.total - (fa1.writes["O"] - fa1.reads["O"]) - 2 * N - (2 * N + N)
    print("FA2", fa2.total, "FA1", fa1.total, "FA1 without init/epilogue", fa1_loop)
    assert (round(fa2.total / 1e6, 1), round(fa1_loop / 1e6, 1)) == (34.6, 51.9)


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    o, l = flash_forward(q, k, v, causal=causal)
    st = IOStats()
    flash_backward(q, k, v, o, l, torch.randn_like(o), causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    qb = _blocks(Nq, Br)
    R = B * H * sum(qb[i][1] - qb[i][0] for (i, j), kind in pairs.items() if kind != "skip")
    assert st.atomic_adds == {"dQ": R * D}
    assert st.reads == {"O": B * H * Nq * D, "dO": B * H * Nq * D + R * D, "Q": R * D, "L": R, "D": R,
                        "K": B * Hkv * Nk * D, "V": B * Hkv * Nk * D}
    assert st.writes == {"D": B * H * Nq, "dK": B * Hkv * Nk * D, "dV": B * Hkv * Nk * D}


def test_backward_atomic_adds_match_the_lecture():
    # §7.4: N = 300, d = 32, Bc = 48: ceil(N/Bc)·N·d = 7 × 300 × 32 = 67,200 dQ atomic adds
    N, d, Bc = 300, 32, 48
    q, k, v = qkv(1, 1, 1, N, N, d)
    o, l = flash_forward(q, k, v)
    st = IOStats()
    flash_backward(q, k, v, o, l, torch.randn_like(o), block_q=64, block_k=Bc, stats=st)
    assert st.atomic_adds["dQ"] == math.ceil(N / Bc) * N * d == 67_200
    assert "dQ" in str(st) and "67,200" in str(st) and st.as_dict()["atomic_adds"]["dQ"] == 67_200


def test_iostats_table_and_dict():
    st = IOStats()
    q, k, v = qkv(1, 1, 1, 97, 97, 16)
    flash_forward(q, k, v, causal=True, block_q=64, block_k=64, stats=st)
    d = st.as_dict()
    assert d["total"] == d["total_reads"] + d["total_writes"] + d["total_atomic_adds"] == st.total
    assert d["pairs_computed"] == 3 and d["pairs_skipped"] == 1 and d["pairs_masked"] == 2
    from rich.console import Console

    con = Console(record=True, width=100)
    con.print(st.table())
    text = con.export_text()
    assert "total" in text and f"{st.total_reads:,}" in text and "2 masked" in str(st)
