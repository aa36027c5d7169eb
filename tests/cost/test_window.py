"""attnlab.cost.window: the closed forms of a sliding window and of packed batches against brute force
over ``attnlab.variants.Mask.grid`` (the one meaning of a window), on random and awkward sizes.

These are the counts the blockwise loops count: the last tests run ``attnlab.blockwise.flash_forward``
and ``flash_forward_varlen`` with an ``IOStats`` and hold its counts equal to ``window_forward_io`` and
``varlen_forward_io``. Sizes come from hypothesis (derandomized by conftest); tensors from a seed drawn
from the example.
"""

import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnlab import cost
from attnlab.blockwise import IOStats, flash_forward, flash_forward_varlen
from attnlab.variants import Mask

SIDES = st.one_of(st.just(-1), st.integers(0, 70))


def _brute_blocks(mask, Nq, Nk, Br, Bc):
    """(visited, masked, K rows read, Q rows read, scores) from the visibility grid, block by block."""
    g = mask.grid(Nq, Nk)
    visited = masked = kv = qr = sc = 0
    for i0 in range(0, Nq, Br):
        i1 = min(i0 + Br, Nq)
        for j0 in range(0, Nk, Bc):
            j1 = min(j0 + Bc, Nk)
            tile = g[i0:i1, j0:j1]
            if not tile.any():
                assert mask.block_kind(i0, i1, j0, j1, Nk - Nq) == "skip"
                continue
            kind = mask.block_kind(i0, i1, j0, j1, Nk - Nq)
            assert kind == ("full" if tile.all() else "mask")
            visited += 1
            masked += kind == "mask"
            kv += j1 - j0
            qr += i1 - i0
            sc += (i1 - i0) * (j1 - j0)
    return visited, masked, kv, qr, sc


@given(Nq=st.integers(0, 90), Nk=st.integers(0, 90), left=SIDES, right=SIDES)
def test_visible_pairs_is_the_grid_count(Nq, Nk, left, right):
    mask = Mask(left, right)
    want = int(mask.grid(Nq, Nk).sum())
    assert cost.visible_pairs(seq_q=Nq, seq_k=Nk, window=mask) == want
    assert cost.visible_pairs(seq_q=Nq, seq_k=Nk, window=(left, right)) == want
    frac = cost.visible_fraction(seq_q=Nq, seq_k=Nk, window=mask)
    assert frac == (want / (Nq * Nk) if Nq * Nk else 0.0)


@given(Nq=st.integers(0, 70), Nk=st.integers(0, 70), left=SIDES, right=SIDES,
       Br=st.integers(1, 24), Bc=st.integers(1, 24))
def test_block_pairs_are_the_grid_blocks(Nq, Nk, left, right, Br, Bc):
    mask = Mask(left, right)
    bp = cost.window_block_pairs(seq_q=Nq, seq_k=Nk, block_q=Br, block_k=Bc, window=mask)
    assert (bp.pairs, bp.masked, bp.kv_rows_read, bp.q_rows_read, bp.scores) == _brute_blocks(mask, Nq, Nk, Br, Bc)
    assert bp.total_pairs == -(-Nq // Br) * -(-Nk // Bc)
    assert bp.skipped == bp.total_pairs - bp.pairs


@pytest.mark.parametrize("Nq,Nk,window,causal,Br,Bc", [
    (1, 1, (0, 0), False, 1, 1),
    (1, 1000, (63, 0), False, 64, 64),  # a decode step with a window
    (1000, 1, (-1, 0), False, 64, 64),  # Nq > Nk: most rows see nothing
    (257, 257, (63, -1), True, 64, 64),  # a block edge one past the window
    (300, 97, (0, 0), False, 48, 40),
    (97, 300, (250, 250), False, 7, 128),  # the window wider than the keys
    (128, 128, (127, 0), False, 128, 128),
    (200, 200, (0, 5), False, 13, 1),
])
def test_awkward_sizes(Nq, Nk, window, causal, Br, Bc):
    mask = Mask(window[0], 0 if causal else window[1])
    bp = cost.window_block_pairs(seq_q=Nq, seq_k=Nk, block_q=Br, block_k=Bc, window=window, causal=causal)
    assert (bp.pairs, bp.masked, bp.kv_rows_read, bp.q_rows_read, bp.scores) == _brute_blocks(mask, Nq, Nk, Br, Bc)
    assert cost.visible_pairs(seq_q=Nq, seq_k=Nk, window=window, causal=causal) == int(mask.grid(Nq, Nk).sum())


@given(N=st.integers(1, 400), W=st.integers(1, 400))
def test_known_closed_forms(N, W):
    """Dense N², causal N(N+1)/2, a causal window of W keys N·W − W(W−1)/2 (W <= N), and the causal
    block pairs of square blocks equal to attnlab.cost.block_pairs (§6.2's T(T+1)/2)."""
    assert cost.visible_pairs(seq_q=N, seq_k=N) == N * N
    assert cost.visible_pairs(seq_q=N, seq_k=N, causal=True) == N * (N + 1) // 2
    w = min(W, N)
    assert cost.visible_pairs(seq_q=N, seq_k=N, window=(w - 1, 0)) == N * w - w * (w - 1) // 2
    B = 1 + W % 64
    old = cost.block_pairs(seq=N, block_q=B, block_k=B, causal=True)
    new = cost.window_block_pairs(seq_q=N, seq_k=N, block_q=B, block_k=B, causal=True)
    assert (new.pairs, new.total_pairs, new.kv_rows_read, new.q_rows_read, new.scores) == \
        (old.pairs, old.total_pairs, old.kv_rows_read, old.q_rows_read, old.scores)


def test_closed_forms_scale_without_a_grid():
    """A 10⁶-token sequence with 128-key blocks counts in a fraction of a second (no N² grid); the K/V
    traffic of a causal 4K window grows linearly in N (doubling N doubles it, up to the first blocks),
    the dense causal one quadratically."""
    t0 = time.perf_counter()
    pairs = cost.visible_pairs(seq_q=10**12, seq_k=10**12, window=(4095, 0))
    assert pairs == 10**12 * 4096 - 4096 * 4095 // 2
    kw = dict(head_dim=128, block_q=128, block_k=128)
    w1 = cost.window_kv_bytes(seq=1 << 20, window=(4095, 0), **kw)
    w2 = cost.window_kv_bytes(seq=1 << 21, window=(4095, 0), **kw)
    assert time.perf_counter() - t0 < 5
    assert abs(w2 / w1 - 2) < 1e-2
    d1 = cost.window_kv_bytes(seq=1 << 14, causal=True, **kw)
    d2 = cost.window_kv_bytes(seq=1 << 15, causal=True, **kw)
    assert abs(d2 / d1 - 4) < 0.1
    # per Q block a window reads the blocks of Br + W keys (plus one for an unaligned edge), not N
    bp = cost.window_block_pairs(seq_q=1 << 20, seq_k=1 << 20, block_q=128, block_k=128, window=(4095, 0))
    assert bp.kv_rows_read <= (1 << 20) // 128 * (128 + 4096)
    assert cost.window_kv_bytes(seq=1 << 20, window=(4095, 0), **kw) == 2 * 128 * 2 * bp.kv_rows_read


@given(Nq=st.integers(1, 60), Nk=st.integers(1, 60), left=SIDES, right=SIDES, Br=st.integers(1, 20),
       Bc=st.integers(1, 20), H=st.sampled_from([1, 2, 4]), G=st.sampled_from([1, 2]), B=st.integers(1, 3))
def test_forward_io_counts(Nq, Nk, left, right, Br, Bc, H, G, B):
    """Q once per query head, K and V once per visited block pair per K/V head, O and L written once."""
    Hkv = H
    visited, masked, kv, _, _ = _brute_blocks(Mask(left, right), Nq, Nk, Br, Bc)
    io = cost.window_forward_io(seq_q=Nq, seq_k=Nk, head_dim=8, head_dim_v=5, block_q=Br, block_k=Bc,
                                window=(left, right), batch=B, heads=H * G, kv_heads=Hkv)
    assert io["reads"] == {"Q": B * H * G * Nq * 8, "K": B * Hkv * kv * 8, "V": B * Hkv * kv * 5}
    assert io["writes"] == {"O": B * H * G * Nq * 5, "L": B * H * G * Nq}
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    assert (io["pairs_computed"], io["pairs_masked"], io["pairs_skipped"]) == \
        (B * Hkv * visited, B * Hkv * masked, B * Hkv * (Tr * Tc - visited))


@given(lens=st.lists(st.integers(0, 70), min_size=1, max_size=5), left=SIDES, right=SIDES, Br=st.integers(1, 20),
       Bc=st.integers(1, 20), shift=st.integers(-3, 3))
def test_packed_vs_padded(lens, left, right, Br, Bc, shift):
    """Packed: each document its own grid (its own alignment, its own blocks); padded: every document
    at the longest lengths. Brute force over the grids of both."""
    lens_k = [max(0, n + shift) for n in lens]
    mask = Mask(left, right)
    pv = cost.packed_vs_padded(seqlens_q=lens, seqlens_k=lens_k, block_q=Br, block_k=Bc, window=mask)
    docs = [_brute_blocks(mask, nq, nk, Br, Bc) for nq, nk in zip(lens, lens_k)]
    longest = _brute_blocks(mask, max(lens), max(lens_k), Br, Bc)
    assert pv.pairs == sum(int(mask.grid(nq, nk).sum()) for nq, nk in zip(lens, lens_k))
    assert pv.padded_pairs == len(lens) * int(mask.grid(max(lens), max(lens_k)).sum())
    assert (pv.blocks, pv.kv_rows) == (sum(d[0] for d in docs), sum(d[2] for d in docs))
    assert (pv.padded_blocks, pv.padded_kv_rows) == (len(lens) * longest[0], len(lens) * longest[2])
    assert (pv.tokens, pv.padded_tokens) == (sum(lens), len(lens) * max(lens))
    assert pv.padded_blocks >= pv.blocks
    io = cost.varlen_forward_io(seqlens_q=lens, seqlens_k=lens_k, head_dim=4, block_q=Br, block_k=Bc, window=mask)
    assert io["reads"]["K"] == 4 * pv.kv_rows and io["pairs_computed"] == pv.blocks
    padded = cost.varlen_forward_io(seqlens_q=lens, seqlens_k=lens_k, head_dim=4, block_q=Br, block_k=Bc,
                                    window=mask, padded=True)
    assert padded["reads"]["K"] == 4 * pv.padded_kv_rows and padded["pairs_computed"] == pv.padded_blocks


def test_decode_window_keys():
    # query i of the step at seq − Nq + i: the keys any of them sees start at seq − Nq − left
    assert cost.decode_window_keys(seq=131072, window=(4095, 0)) == 4096
    assert cost.decode_window_keys(seq=131072, queries=4, window=(4095, -1)) == 4099
    assert cost.decode_window_keys(seq=100, window=(4095, 0)) == 100
    assert cost.decode_window_keys(seq=100, causal=True) == 100
    for n, nq, left in [(50, 1, 0), (50, 3, 7), (5, 3, 7), (0, 1, 3)]:
        g = Mask(left, 0).grid(nq, n)
        cols = torch.nonzero(g.any(0)).flatten()
        seen = 0 if cols.numel() == 0 else n - int(cols.min())  # from the first key seen to the end
        assert cost.decode_window_keys(seq=n, queries=nq, window=(left, 0)) >= seen
        assert cost.decode_window_keys(seq=n, queries=nq, window=(left, 0)) == min(n, left + nq)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(window=(3,)), TypeError, "window"),
    (dict(window=(1.5, 0)), TypeError, "window"),
    (dict(window=(-2, 0)), ValueError, "window"),
    (dict(window=(3, 4), causal=True), ValueError, "causal"),
    (dict(causal=1), TypeError, "causal"),
    (dict(seq_q=-1), ValueError, "seq_q"),
    (dict(seq_k=2.0), TypeError, "seq_k"),
])
def test_bad_arguments(kwargs, err, match):
    args = dict(seq_q=4, seq_k=4) | kwargs
    with pytest.raises(err, match=match):
        cost.visible_pairs(**args)


def test_bad_block_and_batch_arguments():
    with pytest.raises(ValueError, match="block_q"):
        cost.window_block_pairs(seq_q=4, seq_k=4, block_q=0, block_k=4)
    with pytest.raises(TypeError, match="seqlens_q"):
        cost.packed_vs_padded(seqlens_q=[], block_q=4, block_k=4)
    with pytest.raises(ValueError, match="seqlens_k"):
        cost.packed_vs_padded(seqlens_q=[3, 4], seqlens_k=[3], block_q=4, block_k=4)
    with pytest.raises(ValueError, match=r"seqlens_q\[1\]"):
        cost.varlen_forward_io(seqlens_q=[3, -4], head_dim=8, block_q=4, block_k=4)
    with pytest.raises(ValueError, match="kv_heads"):
        cost.window_forward_io(seq_q=4, seq_k=4, head_dim=8, block_q=4, block_k=4, heads=4, kv_heads=3)


# -- the closed forms against the blockwise loops' own counts ---------------------------------------------


def _measured(stats: IOStats) -> dict:
    d = stats.as_dict()
    return {k: d[k] for k in ("reads", "writes", "pairs_computed", "pairs_skipped", "pairs_masked")}


@given(Nq=st.integers(1, 40), Nk=st.integers(1, 40), left=SIDES, right=SIDES, Br=st.integers(1, 16),
       Bc=st.integers(1, 16), G=st.sampled_from([1, 2]), seed=st.integers(0, 2**31 - 1))
def test_window_forward_io_is_what_flash_forward_counts(Nq, Nk, left, right, Br, Bc, G, seed):
    gen = torch.Generator().manual_seed(seed)
    B, Hkv, D, Dv = 2, 2, 4, 3
    q = torch.randn(B, Hkv * G, Nq, D, generator=gen)
    k = torch.randn(B, Hkv, Nk, D, generator=gen)
    v = torch.randn(B, Hkv, Nk, Dv, generator=gen)
    stats = IOStats()
    flash_forward(q, k, v, window=(left, right), block_q=Br, block_k=Bc, stats=stats)
    want = cost.window_forward_io(seq_q=Nq, seq_k=Nk, head_dim=D, head_dim_v=Dv, block_q=Br, block_k=Bc,
                                  window=(left, right), batch=B, heads=Hkv * G, kv_heads=Hkv)
    assert _measured(stats) == want


@given(lens=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=4), left=SIDES,
       causal=st.booleans(), Br=st.integers(1, 12), Bc=st.integers(1, 12), seed=st.integers(0, 2**31 - 1))
def test_varlen_forward_io_is_what_flash_forward_varlen_counts(lens, left, causal, Br, Bc, seed):
    gen = torch.Generator().manual_seed(seed)
    lq, lk = [a for a, _ in lens], [b for _, b in lens]
    H, Hkv, D = 2, 1, 4
    q = torch.randn(sum(lq), H, D, generator=gen)
    k = torch.randn(sum(lk), Hkv, D, generator=gen)
    v = torch.randn(sum(lk), Hkv, D, generator=gen)
    cu = [torch.tensor([0] + [sum(x[:b + 1]) for b in range(len(x))], dtype=torch.int32) for x in (lq, lk)]
    stats = IOStats()
    flash_forward_varlen(q, k, v, cu[0], cu[1], causal=causal, window=(left, -1), block_q=Br, block_k=Bc,
                         stats=stats)
    want = cost.varlen_forward_io(seqlens_q=lq, seqlens_k=lk, head_dim=D, block_q=Br, block_k=Bc,
                                  window=(left, -1), causal=causal, heads=H, kv_heads=Hkv)
    got = _measured(stats)
    # names with zero elements (a batch of empty documents) are absent from IOStats
    assert {k: v for k, v in got["reads"].items() if v} == {k: v for k, v in want["reads"].items() if v}
    assert {k: v for k, v in got["writes"].items() if v} == {k: v for k, v in want["writes"].items() if v}
    assert [got[k] for k in ("pairs_computed", "pairs_skipped", "pairs_masked")] == \
        [want[k] for k in ("pairs_computed", "pairs_skipped", "pairs_masked")]
