"""attnlab.blockwise Flash-Decoding (§8.4), contiguous and paged KV caches, against attention_ref
sequence by sequence. float64 unless a test says otherwise."""

import math

import pytest
import torch
from tests.helpers import F64, abs_err, assert_lse, block_table, decode_ref, qkv, scatter

from attnlab.blockwise import IOStats, flash_decode_blockwise
from attnlab.reference import attention_ref


@pytest.mark.parametrize("Nq", [1, 3])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("paged", [False, True])
def test_decode_matches_reference(Nq, causal, paged):
    B, H, Hkv, L, D = 4, 6, 2, 37, 59
    q = torch.randn(B, H, Nq, D, dtype=F64)
    k_full = torch.randn(B, Hkv, L, D, dtype=F64)
    v_full = torch.randn(B, Hkv, L, D + 2, dtype=F64)
    page = 8
    if paged:
        bt = block_table(B, -(-L // page), extra_blocks=3)
        kc, vc = scatter(k_full, v_full, bt, page)
    else:
        kc, vc, bt = k_full, v_full, None
    capacity = L if not paged else bt.shape[1] * page
    seqlens = [1, L, 17, 0]
    want_o, want_l = decode_ref(q, k_full, v_full, seqlens, causal)
    for S in [1, 2, 3, 4, 5, 6, 7, 50]:  # 50 splits > 37 keys: empty splits merge harmlessly
        o, l = flash_decode_blockwise(q, kc, vc, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32), block_table=bt,
                            num_splits=S, causal=causal)
        print("splits", S, abs_err(o, want_o))
        assert not o.isnan().any()
        torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
        assert_lse(l, want_l, 1e-10)
    # default seqlens: the whole capacity
    o, l = flash_decode_blockwise(q, kc, vc, block_table=bt, causal=causal)
    full = [capacity] * B
    if paged:  # positions past L in the last page hold zeros (_scatter)
        k_pad = torch.zeros(B, Hkv, capacity, D, dtype=F64)
        v_pad = torch.zeros(B, Hkv, capacity, D + 2, dtype=F64)
        k_pad[:, :, :L], v_pad[:, :, :L] = k_full, v_full
        want_o, _ = decode_ref(q, k_pad, v_pad, full, causal)
    else:
        want_o, _ = decode_ref(q, k_full, v_full, full, causal)
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)


def test_decode_is_the_last_rows_of_prefill():
    # decoding the last Nq tokens against a full cache equals the last Nq rows of causal attention
    q, k, v = qkv(1, 4, 1, 50, 50, 16)
    o_all, l_all = attention_ref(q, k, v, causal=True)
    o, l = flash_decode_blockwise(q[:, :, -2:], k, v, num_splits=3)
    torch.testing.assert_close(o, o_all[:, :, -2:], rtol=0, atol=1e-12)
    torch.testing.assert_close(l, l_all[:, :, -2:], rtol=0, atol=1e-12)


def test_decode_counts():
    B, H, Hkv, Nq, L, D = 3, 4, 2, 2, 40, 16
    q = torch.randn(B, H, Nq, D)
    kc, vc = torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    seqlens = [40, 9, 0]
    for S in (1, 3, 7):
        st = IOStats()
        flash_decode_blockwise(q, kc, vc, cache_seqlens=seqlens, num_splits=S, stats=st)
        assert st.reads["K"] == st.reads["V"] == Hkv * sum(seqlens) * D  # every held key read once
        assert st.reads["Q"] == S * B * H * Nq * D
        assert st.writes["O_split"] == st.reads["O_split"] == S * B * H * Nq * D
        assert st.writes["O"] == B * H * Nq * D and st.writes["L"] == B * H * Nq
        seg = math.ceil(40 / S)
        nonempty = sum(1 for s in range(S) for n in seqlens if min(n, (s + 1) * seg) > s * seg)
        assert st.pairs_computed == Hkv * nonempty and st.pairs_computed + st.pairs_skipped == Hkv * B * S


def test_decode_float32_and_gqa_mqa():
    q = torch.randn(2, 8, 1, 64)
    kc, vc = torch.randn(2, 1, 500, 64), torch.randn(2, 1, 500, 64)
    want, _ = attention_ref(q.double(), kc.double(), vc.double(), causal=True)
    o, l = flash_decode_blockwise(q, kc, vc, num_splits=4)
    assert o.dtype == torch.float32 and l.dtype == torch.float32 and abs_err(o, want) < 1e-5


def test_unused_block_table_entries_may_be_padding():
    pages = torch.randn(6, 4, 2, 16, dtype=F64)
    q = torch.randn(1, 2, 1, 16, dtype=F64)
    bt = torch.tensor([[3, -1, -1]], dtype=torch.int64)  # only page 0 is used by a 4-key sequence
    o, _ = flash_decode_blockwise(q, pages, pages, block_table=bt, cache_seqlens=[4])
    k = pages[3].permute(1, 0, 2).unsqueeze(0)  # (1, Hkv, 4, D)
    torch.testing.assert_close(o, attention_ref(q, k, k, causal=True)[0], rtol=0, atol=1e-12)

