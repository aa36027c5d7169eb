"""The Gluon backward (attnlab.gpu.prefill_gluon_bwd): dQ, dK, dV in one pass, a TMA loader warp and two
consumer warp groups, dQ by float32 atomics.

Triton's interpreter cannot run Gluon. On the CPU these tests build the kernel for sm_90 (no GPU) and read
what the compiler made of it (ALiBi builds included), and check the dispatch (a Gluon configuration falls
back to the Triton kernels wherever Gluon cannot run, deterministic calls included; ALiBi calls take the
Gluon kernel where it runs) and the refusals. On a Hopper GPU the kernel runs and its gradients are held
to the float64 criterion of the other kernels on awkward shapes, with and without ALiBi.
"""


import pytest
import torch
from tests.helpers import (
    GLUON_CASES,
    GLUON_WINDOW_CASES,
    ROOT,
    fresh_json,
    load_script,
    sm90_reports,
    within_criterion,
)
from tests.helpers import abs_err as _err

from attnlab.reference import attention_ref
from attnlab.variants import Mask

pytest.importorskip("triton")
from tests.gluon_env import DEV, needs_gluon, on_hopper  # noqa: E402

from attnlab.gpu import BwdConfig, prefill_backward, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_bwd as PB  # noqa: E402
from attnlab.gpu import prefill_gluon as G  # noqa: E402
from attnlab.gpu import prefill_gluon_bwd as GB  # noqa: E402
from attnlab.gpu.layout import sum_head_copies  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")


def _gluon_cfg(stages=2, dq_split=1, dq_atomic=False, dq_shared=False, dq_lag=0, block_m=64, persistent=0):
    return BwdConfig(block_m, 128, 4, stages, 64, 128, 4, stages, gluon=True, dq_split=dq_split, dq_atomic=dq_atomic,
                     dq_shared=dq_shared, dq_lag=dq_lag, persistent=persistent)


@needs_gluon
def test_builds_for_sm90_as_one_pass():
    """sm_90 builds (D 64/128, causal or not, float16 and bfloat16, ring depths 2 and 3, dQ whole, in
    slices or shared by the warp groups): Sᵀ is waited for alone while dPᵀ stays in flight (wait_group 1);
    Q and dO arrive by TMA; dQ leaves by TMA bulk reductions from shared memory (or float32 atomics; one
    pass: no second kernel); registers move from the loader warp to the consumers (setmaxnreg); shared
    memory = K and V of the block, the Q/dO ring, the dSᵀ tiles and the dQ staging tiles. At D = 64
    nothing spills (at D = 128 the Triton 3.6 build spills a little: ``benchmarks/NOTES-prefill.md``)."""
    cases = [dict(D=D, causal=c, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    cases += [dict(D=128, causal=True, stages=3, dq_split=2, dq_atomic=True, dtype="float16"),
              dict(D=64, causal=False, stages=3, dtype="bfloat16"),
              dict(D=64, causal=True, dq_atomic=True, dtype="bfloat16"),
              dict(D=128, causal=False, dq_split=2, dtype="float16"),
              dict(D=128, causal=True, dq_shared=True, dtype="bfloat16"),
              dict(D=64, causal=False, dq_shared=True, dq_atomic=True, dtype="bfloat16"),
              dict(D=64, causal=True, dq_lag=1, dtype="bfloat16"), dict(D=64, causal=False, dq_lag=2, dtype="float16")]
    for case, rep in zip(cases, sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases])):
        D, st = case["D"], case.get("stages", 2)
        assert 1 in rep["wait_groups"], (case, rep)
        assert rep["tma_loads"] > 0 and rep["wgmma"] > 0, (case, rep)
        tma_dq = not case.get("dq_atomic")
        if tma_dq:  # dQ by TMA bulk reductions, staged through shared memory
            assert rep["tma_reduces"] > 0 and rep["atomics"] == 0, (case, rep)
        else:  # dQ by float32 atomics (whole or in column slices)
            assert rep["atomics"] > 0 and rep["tma_reduces"] == 0, (case, rep)
        assert 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)
        lag = case.get("dq_lag", 0)
        ds_slots = 4 if lag else 2
        expect_kb = (2 * 128 * D * 2 + 2 * st * 64 * D * 2 + ds_slots * 128 * 64 * 2) / 1024  # K, V; Q/dO; dSᵀ ring
        if tma_dq:
            expect_kb += 2 * 64 * D * 4 / 1024  # each consumer's float32 dQ tile on its way to the reduction
        if GB.LSE_BY_TMA:
            expect_kb += 2 * st * 64 * 4 / 1024  # each ring slot's rows of L₂ and Dᵢ
        assert expect_kb * 1024 == GB.smem_bytes(D, st, case.get("dq_split", 1), case.get("dq_atomic", False), lag)
        if tma_dq:  # one reduction per staged tile: per column slice and per warp group (a lagged dQ also
            # drains its last steps after the loop: a second copy of the product)
            assert rep["tma_reduces"] == 2 * case.get("dq_split", 1) * (2 if lag else 1), (case, rep)
        assert rep["smem_kb"] == pytest.approx(expect_kb, abs=1.0), (case, rep)
        assert rep["smem_kb"] <= 227, (case, rep)
        if D == 64 and rep.get("stack") is not None:
            assert rep["stack"] == 0, (case, rep)


@needs_gluon
def test_the_d128_spills_docs_gpu_quotes_are_triton_36s():
    """docs/gpu.md's spill stacks of the D = 128 Gluon backward under Triton 3.6 (the version measured): the table's
    non-causal and causal builds and the deterministic causal one, read back from their sm_90 builds."""
    import re

    import triton

    if not triton.__version__.startswith("3.6."):
        pytest.skip("the docs quote the builds of triton 3.6")
    text = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    m = re.search(r"a stack of (\d+) bytes in the non-causal build, (\d+) causal, (\d+) deterministic", text)
    assert m, "docs/gpu.md no longer quotes the spill stacks"
    cases = [dict(D=128, causal=False, dq_shared=True, dtype="bfloat16"),
             dict(D=128, causal=True, dq_shared=True, dtype="bfloat16"),
             dict(D=128, causal=True, dq_shared=True, deterministic=True, dtype="bfloat16")]
    assert [r["stack"] for r in sm90_reports("prefill_gluon_bwd", cases)] == [int(x) for x in m.groups()]


def test_dq_tiles_in_register_order_store_sixteen_bytes_per_thread():
    """The default dQ staging (``DQ_PERMUTED``: tiles in the accumulator's register order) stores each
    thread's float32 dQ values four at a time (st.shared.v4): half the store instructions of the row-major
    tile (st.shared.v2; the compiler counts one excess access per wavefront there:
    ``benchmarks/bwd_bank_conflicts.py``), at the same shared memory and TMA reductions, and without
    spilling at D = 64 (the table's builds: D = 64 with the lagged dQ, D = 128 with shared products)."""
    cases = [dict(D=64, causal=True, dq_lag=2), dict(D=64, causal=False, dq_lag=1),
             dict(D=128, causal=True, dq_shared=True)]
    builds = [dict(c, dtype="bfloat16", dq_perm=p) for c in cases for p in (True, False)]
    reps = sm90_reports("prefill_gluon_bwd", [dict(b) for b in builds])
    for case, perm, rows in zip(cases, reps[::2], reps[1::2]):
        v2 = rows["shared_stores"].get("v2.b32", 0) - perm["shared_stores"].get("v2.b32", 0)
        v4 = perm["shared_stores"].get("v4.b32", 0) - rows["shared_stores"].get("v4.b32", 0)
        assert v4 > 0 and v2 == 2 * v4, (case, perm, rows)  # the dQ tile's pairs became half as many quads
        assert perm["shared_stores"].get("v2.b32", 0) <= 3, (case, perm)  # (the bookkeeping's few words)
        assert (perm["smem_kb"], perm["tma_reduces"]) == (rows["smem_kb"], rows["tma_reduces"]), (case, perm, rows)
        if case["D"] == 64 and perm.get("stack") is not None:  # (at D = 128 both spill a little, by build)
            assert perm["stack"] == 0, (case, perm)


@needs_gluon
def test_lse_and_delta_come_by_tma_into_the_ring():
    """``LSE_BY_TMA``: the loader brings each step's 64 rows of L₂ and Dᵢ by 1-D TMA loads into the Q/dO ring
    (2 float32 rows per slot: 1 KB at two stages), and the consumers make no global loads of them (the
    build without: eight 64-bit loads per thread for each, every step). Same wgmmas and TMA reductions."""
    case = dict(D=64, causal=True, dq_lag=2, dtype="bfloat16")
    on, off = sm90_reports("prefill_gluon_bwd", [dict(case, lse_tma=True), dict(case, lse_tma=False)])
    assert on["smem_kb"] - off["smem_kb"] == pytest.approx(1.0, abs=0.1), (on, off)
    assert on["tma_loads"] > off["tma_loads"], (on, off)
    assert on["global_loads"] == 0 < off["global_loads"], (on, off)
    assert (on["wgmma"], on["tma_reduces"]) == (off["wgmma"], off["tma_reduces"])
    assert GB.smem_bytes(64, 2, lse_tma=True) - GB.smem_bytes(64, 2, lse_tma=False) == 1024


def test_lse_rows_are_padded_to_whole_query_blocks_without_a_copy_where_possible():
    """The TMA loads of L₂ and Dᵢ take 64 rows at a time from a 16-byte aligned start: each head's rows are
    padded to a multiple of 64 (``lse_rows``). A view of such a buffer (what ``prefill_backward`` makes) is
    read in place; any other (B, H, Nq) tensor is copied into one."""
    assert [GB.lse_rows(n) for n in (1, 63, 64, 65, 257)] == [64, 64, 64, 128, 320]
    buf = torch.randn(2, 3, 128)
    view = buf[..., :70]
    same = GB._rows_of(view, 128)
    assert same.data_ptr() == buf.data_ptr() and same.shape == (2, 3, 128) and torch.equal(same, buf)
    dense = torch.randn(2, 3, 70)
    padded = GB._rows_of(dense, 128)
    assert padded.shape == (2, 3, 128) and padded.data_ptr() != dense.data_ptr()
    assert torch.equal(padded[..., :70], dense)
    assert GB._rows_of(dense[:, :, :64].contiguous(), 64).is_contiguous()
    odd = torch.randn(3, 2, 128).transpose(0, 1)[..., :70]  # strides of another buffer: copied
    assert torch.equal(GB._rows_of(odd, 128)[..., :70], odd)


def test_programs_go_head_first_only_for_uneven_walks_on_a_small_grid():
    """The measured sides of the rule (H200, 132 SMs): a causal GQA 32/8 layer at 8K (64 key blocks x 8
    K/V heads) goes head first; causal MHA at 16K (128 x 16) and at 4K with 4 sequences (32 x 128) go key
    block first, and so does every non-causal, non-windowed call."""
    assert GB.heads_first_default(True, 64 * 8, 132)
    assert not GB.heads_first_default(True, 128 * 16, 132)
    assert not GB.heads_first_default(True, 32 * 128, 132)
    assert not GB.heads_first_default(False, 64 * 8, 132)
    assert GB.heads_first_default(True, 7 * 132, 132) and not GB.heads_first_default(True, 8 * 132, 132)
    # deterministic calls head by head, at any size: a wave's dQ tiles stay in L2 while the writers wait
    assert not any(GB.heads_first_default(True, n, 132, deterministic=True) for n in (1, 64 * 8, 7 * 132))


def test_head_chunks_hold_a_budget_of_each_heads_rows():
    """``head_chunk``: as many heads as the budget holds of their Q, dO (bf16), dQ (float32) rows and K, V, two at
    least; None where the grid has one head or the budget is 0; never more heads than the grid has."""
    per_head = 4096 * 128 * 8 + 2 * 4096 * 128 * 2  # one head of 4 × 4K at D = 128: 6 MB
    assert per_head == 6 << 20
    assert GB.head_chunk(64, 1, 4096, 4096, 128, budget_mb=32) == 5
    assert GB.head_chunk(64, 1, 4096, 4096, 128, budget_mb=6) == 2  # one head's budget: still two
    assert GB.head_chunk(64, 1, 4096, 4096, 128, budget_mb=18) == 3
    assert GB.head_chunk(16, 1, 16384, 16384, 128, budget_mb=32) == 2  # 24 MB a head
    assert GB.head_chunk(3, 1, 4096, 4096, 128, budget_mb=1 << 20) == 3
    assert GB.head_chunk(1, 1, 4096, 4096, 128, budget_mb=32) is None  # one head: nothing to chunk
    assert GB.head_chunk(64, 1, 4096, 4096, 128, budget_mb=0) is None
    assert GB.head_chunk(8, 4, 8192, 8192, 64, budget_mb=64) == 3  # GQA: four query heads' rows a program: 20 MB
    assert GB.head_chunk(64, 1, 4096, 4096, 128) == GB.head_chunk(64, 1, 4096, 4096, 128, GB.HEAD_CHUNK_MB)
    assert (GB.HEAD_CHUNK_MB, GB.HEAD_CHUNK_FROM_D) == (32, 128)  # (what bwd-block-m runs 13 and 14 chose)


def _list_balance(walks: list[int], sms: int) -> float:
    """A plain list schedule (each program to the SM that frees first) of walks in launch order, over the balance."""
    free = [0] * sms
    for w in walks:
        free[free.index(min(free))] += w
    return max(free) * sms / sum(walks)


@pytest.mark.parametrize("units,n_kb,chunk", [(8, 64, None), (8, 64, 2), (16, 32, 4), (5, 7, 2), (3, 9, 1), (8, 64, 8)])
def test_walks_balance_is_the_list_schedule_of_the_kernels_numbering(units, n_kb, chunk):
    """``walks_balance``: the list schedule of the programs in the kernel's launch order, heads first (grid (units, key
    blocks), the unit fastest) or in HCHUNK's chunks (the kernel's arithmetic, ``_chunked_order``)."""
    steps = lambda n: 3 * (2 * n_kb - 2 * n) + 1  # noqa: E731 (longest first, as causal walks)
    if chunk is None:
        order = [n for n in range(n_kb) for _ in range(units)]
    else:
        order = [n for n, _ in _chunked_order(n_kb, units, chunk)]
    want = _list_balance([steps(n) for n in order], 132)
    assert GB.walks_balance(units, n_kb, steps, chunk, 132) == pytest.approx(want)
    assert GB.walks_balance(units, n_kb, lambda n: 0, chunk, 132) == 1.0


@pytest.mark.parametrize("B,H,Hkv,N,D", [(1, 32, 8, 8192, 64), (1, 16, 4, 8192, 128), (4, 32, 8, 4096, 64),
                                         (4, 16, 4, 4096, 128), (2, 32, 8, 8192, 64), (2, 16, 4, 8192, 128),
                                         (1, 32, 8, 16384, 64), (1, 16, 4, 16384, 128), (3, 12, 4, 3000, 64),
                                         (16, 8, 2, 20000, 64)])
def test_l2_chunks_fit_the_budget_and_balance_best(B, H, Hkv, N, D):
    """``l2_chunk`` (``L2_CHUNKS``' numbering of a causal call that would go heads first): a power-of-two chunk of
    units whose two query heads' rows each fit in the budget together, the best-balanced such chunk (the smaller on a
    tie), within ``L2_CHUNK_SLACK`` of heads first's balance; None where no chunk fits, one unit, or the balance is
    off by more."""
    units, G, sms = B * Hkv, H // Hkv, 132
    n_kb, n_qb = -(-N // 128), -(-N // 64)
    steps = lambda n: G * (n_qb - 2 * n)  # noqa: E731
    chunk = GB.l2_chunk(units, G, N, N, D, sms)
    per_unit = 2 * N * D * 8
    fitting = [c for c in (1, 2, 4, 8, 16, 32) if c <= units and c * per_unit <= GB.L2_CHUNK_MB << 20]
    scores = {c: round(GB.walks_balance(units, n_kb, steps, c, sms), 3) for c in fitting}
    heads_first = GB.walks_balance(units, n_kb, steps, None, sms)
    best = min(scores.values())
    if best > heads_first * (1 + GB.L2_CHUNK_SLACK):  # (few programs a SM: heads first balances them best)
        assert chunk is None
    else:
        assert chunk == min(c for c, v in scores.items() if v == best)
    assert GB.l2_chunk(units, G, N, N, D, sms, budget_mb=per_unit // 2 >> 20) is None  # (no unit's rows fit)
    assert GB.l2_chunk(1, G, N, N, D, sms) is None


def test_l2_chunks_stay_heads_first_where_chunks_balance_worse(monkeypatch):
    """With no slack a chunked numbering that balances worse than heads first is not taken (two sequences of 8K, 16/4
    heads at D = 128: chunks of 2 of their 8 units, where heads first balances better in the list schedule)."""
    units, n_kb, n_qb = 8, 64, 128
    steps = lambda n: 4 * (n_qb - 2 * n)  # noqa: E731
    assert GB.walks_balance(units, n_kb, steps, 2, 132) > GB.walks_balance(units, n_kb, steps, None, 132) * 1.001
    monkeypatch.setattr(GB, "L2_CHUNK_SLACK", 0.0)
    assert GB.l2_chunk(units, 4, 8192, 8192, 128, 132) is None
    monkeypatch.setattr(GB, "L2_CHUNK_SLACK", 0.05)
    assert GB.l2_chunk(units, 4, 8192, 8192, 128, 132) == 2


@pytest.mark.parametrize("B,H,Hkv,N,D", [(2, 32, 8, 8192, 64), (2, 16, 4, 8192, 128), (4, 16, 4, 4096, 128),
                                         (1, 16, 4, 16384, 128), (3, 12, 4, 3000, 64), (2, 32, 32, 8192, 64),
                                         (2, 16, 16, 8192, 128), (1, 6, 3, 5000, 64)])
def test_l2_numbering_takes_gqa_causal_calls_only(B, H, Hkv, N, D, monkeypatch):
    """The library's numbering (``l2_numbering``): ``l2_chunk``'s chunk for a bottom-right causal call without a window
    of ``L2_CHUNKS_MIN_GROUP`` or more query heads per K/V head (GQA: on by default, as measured), None otherwise —
    multi-head calls, a window, a top-left diagonal on a rectangular call, a non-causal call, the switch off."""
    units, G, sms = B * Hkv, H // Hkv, 132
    chunk = GB.l2_chunk(units, G, N, N, D, sms)
    got = GB.l2_numbering(units, G, N, N, D, sms, 0, None)
    assert GB.L2_CHUNKS is True and GB.L2_CHUNKS_MIN_GROUP == 2
    assert got == (chunk if G >= 2 else None)
    assert GB.l2_numbering(units, G, N, N, D, sms, None, None) is None  # (not causal)
    assert GB.l2_numbering(units, G, N, N, D, sms, 0, 256) is None  # (a window)
    assert GB.l2_numbering(units, G, N // 2, N, D, sms, 0, None) is None  # (top-left diagonal of a rectangle)
    if G >= 2:
        bottom_right = GB.l2_numbering(units, G, N // 2, N, D, sms, N - N // 2, None)
        assert bottom_right == GB.l2_chunk(units, G, N // 2, N, D, sms)
    monkeypatch.setattr(GB, "L2_CHUNKS_MIN_GROUP", 1)
    assert GB.l2_numbering(units, G, N, N, D, sms, 0, None) == chunk  # (every causal call)
    monkeypatch.setattr(GB, "L2_CHUNKS_MIN_GROUP", G + 1)
    assert GB.l2_numbering(units, G, N, N, D, sms, 0, None) is None
    monkeypatch.setattr(GB, "L2_CHUNKS_MIN_GROUP", 1)
    monkeypatch.setattr(GB, "L2_CHUNKS", False)
    assert GB.l2_numbering(units, G, N, N, D, sms, 0, None) is None


def _chunked_order(n_kb: int, n_bh: int, chunk: int) -> list[tuple[int, int]]:
    """The kernel's HCHUNK arithmetic on every program in launch order (blockIdx.x fastest): its (key block, head)."""
    out = []
    for pid1 in range(n_bh):
        for pid0 in range(n_kb):
            lin = pid0 + pid1 * n_kb
            span = chunk * n_kb
            c, r = lin // span, lin % span
            gc = min(chunk, n_bh - c * chunk)
            out.append((r // gc, c * chunk + r % gc))
    return out


@pytest.mark.parametrize("n_kb,n_bh,chunk", [(32, 64, 5), (64, 32, 2), (7, 6, 4), (3, 5, 5), (1, 9, 2), (5, 1, 3)])
def test_head_chunks_number_every_program_once_longest_walks_first(n_kb, n_bh, chunk):
    """The chunked numbering is a permutation of the grid: chunk after chunk of ``chunk`` heads (a last short one
    with what is left), inside each key block after key block with every head of the chunk at each; with 132 SMs
    and the causal walks it brings the list schedule near a perfect balance where head after head does not
    (``det_order_sim.chunk_makespan``)."""
    order = _chunked_order(n_kb, n_bh, chunk)
    assert sorted(order) == [(n, h) for n in range(n_kb) for h in range(n_bh)]
    expect = [(n, h) for c in range(0, n_bh, chunk) for n in range(n_kb) for h in range(c, min(c + chunk, n_bh))]
    assert order == expect
    sim = load_script("benchmarks/det_order_sim.py")
    plain, chunked = sim.chunk_makespan(32, 8192, 1), sim.chunk_makespan(32, 8192, 2)
    assert plain > 1.05 and chunked < 1.01 and sim.chunk_makespan(64, 4096, 64) <= sim.chunk_makespan(64, 4096, 1)
    doc = " ".join(GB.head_chunk.__doc__.split())
    assert f"one head at a time ends {100 * (plain - 1):.1f} % past a perfect balance at 2 x 8K, D = 128, two heads " \
           f"{100 * (chunked - 1):.1f} %" in doc
    with pytest.raises(ValueError, match="chunk >= 1"):
        sim.chunk_makespan(32, 8192, 0)


@needs_gluon
def test_head_chunk_builds_add_the_numbering_and_nothing_else():
    """The build with HCHUNK an int: the same shared memory, registers, products, loads and reductions as the build
    without it (HCHUNK constexpr None: the default's code), at both head dims' table tiles; under triton 3.6 (the
    version the H200 numbers were measured with) the same spill too (newer versions allocate the D = 128 build's
    registers differently with it: a larger spill stack there)."""
    import triton

    cases = [dict(D=128, causal=True, dq_shared=True, dtype="bfloat16"),
             dict(D=64, causal=True, dq_lag=2, dtype="bfloat16")]
    reps = sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases] + [dict(c, chunked=True) for c in cases])
    keys = ["smem_kb", "setmaxnreg", "regs", "wgmma", "tma_loads", "tma_reduces", "exponentials"]
    for plain, chunked in zip(reps[:2], reps[2:]):
        for key in keys + (["stack"] if triton.__version__.startswith("3.6.") else []):
            assert plain[key] == chunked[key], key


def _c_div(a: int, b: int) -> int:
    """Integer division as the kernel's (C: toward zero)."""
    return -(-a // b) if a < 0 else a // b


def _kernel_walks_and_turns(Nq, Nk, causal_off, win_off):
    """The deterministic kernel's walks and turns, written as its code computes them (``_attn_bwd_gluon_ws``'s
    m_lo, m_end, n_m with ROTATE off; ``_turn``): {query block start: [(key block, step, turn)]}."""
    BM, BN = GB.BWD_BLOCK_M, 2 * GB.BWD_SUB_N
    win = -(1 << 30) if win_off is None else win_off
    tiles: dict = {}
    for n in range(-(-Nk // BN)):
        start_n = n * BN
        m_lo = (max(start_n - causal_off, 0) // BM) * BM if causal_off is not None else 0
        m_end = min(max(start_n + BN - win, 0), Nq)
        for step in range(max(-(-(m_end - m_lo) // BM), 0)):
            m0 = m_lo + step * BM
            if causal_off is not None:
                turn = min(_c_div(m0 + BM - 1 + causal_off, BN), -(-Nk // BN) - 1) - n
            else:
                turn = n - max(_c_div(m0 + win, BN), 0)
            tiles.setdefault(m0, []).append((n, step, turn))
    return tiles


@pytest.mark.parametrize("Nq,Nk,window", [
    (1000, 1000, (-1, 0)), (257, 1030, (-1, 0)), (700, 300, (-1, 0)), (4096, 4096, (-1, 0)), (129, 129, (-1, -1)),
    (3000, 4099, (-1, -1)), (1000, 1000, (255, 0)), (700, 1300, (100, 0)), (513, 513, (64, -1)), (900, 400, (300, 0)),
    (4096, 4096, (1023, 0)), (64, 5000, (-1, 0)), (5000, 64, (-1, 0)), (1, 1, (-1, -1))])
def test_deterministic_turns_are_each_tiles_arrival_order(Nq, Nk, window):
    """The ordered dQ additions of the deterministic kernel: at every tile its key blocks' turns are 0, 1, ...
    (a permutation: a missing turn would leave a wait to give up), in the order the walks get there, and
    (causal) descending, matching the grid that launches key blocks last first — so no turn waits for a
    program launched after the waiting one."""
    left, right = window
    causal_off = Nk - Nq + right if right >= 0 else None
    win_off = Nk - Nq - left if left >= 0 else None
    tiles = _kernel_walks_and_turns(Nq, Nk, causal_off, win_off)
    assert tiles
    for m0, visits in tiles.items():
        turns = sorted(t for _, _, t in visits)
        assert turns == list(range(len(visits))), (m0, visits)
        by_turn = [n for n, _, _ in sorted(visits, key=lambda v: v[2])]
        if causal_off is not None:
            assert by_turn == sorted(by_turn, reverse=True)  # launched (and arriving) first goes first
            steps = [st for _, st, _ in sorted(visits, key=lambda v: v[2])]
            assert steps == sorted(steps)  # each reaches the tile no sooner into its walk than the one before
        else:
            assert by_turn == sorted(by_turn)


def _rotated_turns(len_q, len_k, p_base, G, right=0):
    """The packed deterministic build with staggered walks (``PACKED_DET_ROTATE``), written as its code computes
    them in the writer's coordinates (a sequence's rows from p_base, a multiple of 64; its own key blocks):
    the kernel's m_lo, n_m and ``rot``, the writer's m0 and ``_turn_arrival``. {(head, m0): [(key block, step,
    turn)]} and each key block's tiles in walk order."""
    BM, BN = GB.BWD_BLOCK_M, 2 * GB.BWD_SUB_N
    cw = len_k - len_q + right - p_base  # key j sees padded row i iff j <= i + cw (bottom-right)
    q_end, blocks = p_base + len_q, -(-len_k // BN)

    def geometry(n):
        lo = p_base + (max(n * BN - cw - p_base, 0) // BM) * BM
        return lo, max(-(-(q_end - lo) // BM), 0)

    def turn_arrival(n, u, m0, hoff):  # _turn_arrival, line by line
        last = min(_c_div(m0 + BM - 1 + cw, BN), blocks - 1)
        turn = 0
        for n2 in range(0, last + 1):
            lo2 = p_base + (max(n2 * BN - cw - p_base, 0) // BM) * BM
            nm2 = max(-(-(q_end - lo2) // BM), 1)
            a2 = hoff * nm2 + ((m0 - lo2) // BM - n2 % nm2 + nm2) % nm2
            turn += n2 != n and m0 >= lo2 and (a2 < u or (a2 == u and n2 < n))
        return turn

    tiles, walks = {}, {}
    for n in range(blocks):
        m_lo, n_m = geometry(n)
        rot = n % max(n_m, 1)
        for u in range(G * n_m):
            m0 = m_lo + ((u % n_m + rot) % n_m) * BM
            tiles.setdefault((u // n_m, m0), []).append((n, u, turn_arrival(n, u, m0, u // n_m)))
            walks.setdefault(n, []).append((u // n_m, m0))
    return tiles, walks


@pytest.mark.parametrize("len_q,len_k,p_base,G", [
    (1000, 1000, 0, 1), (1792, 1792, 64 * 37, 1), (256, 256, 128, 1), (1000, 1000, 0, 2), (257, 1030, 64, 1),
    (700, 300, 0, 1), (63, 63, 64, 4), (1, 1, 0, 1), (1500, 1500, 640, 3), (4096, 4096, 0, 1)])
def test_rotated_deterministic_turns_are_the_arrival_order_and_never_deadlock(len_q, len_k, p_base, G):
    """``PACKED_DET_ROTATE``'s turns (``_turn_arrival``): at every tile 0, 1, ... (a permutation), in the order of
    the steps at which the staggered walks reach it (ties to the lower key block); and with every program of the
    sequence running and each addition waiting for the tile's previous turn, every program finishes (a program
    may wait on one launched after it: the order of a tile's turns is that of (step, key block), which rises along
    every walk, so no wait closes a cycle). For one head and p_base 0 it is the model's arrival order on the
    model's rotated walks (``benchmarks/det_order_sim.py``)."""
    tiles, walks = _rotated_turns(len_q, len_k, p_base, G)
    for tile, visits in tiles.items():
        assert sorted(t for *_, t in visits) == list(range(len(visits))), (tile, visits)
        assert [n for n, u, t in sorted(visits, key=lambda v: v[2])] == [n for n, u, t in sorted(visits,
                                                                                                  key=lambda v: v[1:])]
    turn = {(n, *tile): t for tile, visits in tiles.items() for n, _, t in visits}
    pred = {(tile, t): n for tile, visits in tiles.items() for n, _, t in visits}
    done, pos, clock = {}, dict.fromkeys(walks, 0), dict.fromkeys(walks, 0)
    left = sum(map(len, walks.values()))
    while left:
        moved = False
        for n, walk in walks.items():
            while pos[n] < len(walk):
                tile = walk[pos[n]]
                t = turn[(n, *tile)]
                before = done.get((pred[tile, t - 1], tile)) if t else 0
                if before is None:
                    break
                clock[n] = done[n, tile] = max(clock[n], before) + 1
                pos[n], left, moved = pos[n] + 1, left - 1, True
        assert moved, "deadlock"
    if G == 1 and p_base == 0 and len_q == len_k:
        sim = load_script("benchmarks/det_order_sim.py")
        model = sim.turns(sim.walks(len_q, True, rotate=True), "arrival")
        assert {(n, m0 // GB.BWD_BLOCK_M): t for (n, _, m0), t in turn.items()} == model


def _counts_finish(walks, turn):
    """The writers with ``DET_EARLY_TURN``: program n, at each step, first waits until the tile's previous turn has
    been counted, then adds, and counts that addition only once it has passed its next step's wait (or at its end).
    True when every program finishes, False on a deadlock. ``walks``: {n: [tile, ...]}, ``turn``: {(n, tile): t}."""
    pred = {(tile, t): n for (n, tile), t in turn.items()}
    pos, counted = dict.fromkeys(walks, 0), set()
    while True:
        moved = False
        for n, walk in walks.items():
            while pos[n] < len(walk):
                tile = walk[pos[n]]
                t = turn[n, tile]
                if t and (pred[tile, t - 1], tile) not in counted:
                    break
                if pos[n]:
                    counted.add((n, walk[pos[n] - 1]))
                pos[n] += 1
                moved = True
            if pos[n] == len(walk) and walk:
                counted.add((n, walk[-1]))
        if all(pos[n] == len(w) for n, w in walks.items()):
            return True
        if not moved:
            return False


@pytest.mark.parametrize("Nq,Nk,window", [
    (1000, 1000, (-1, 0)), (257, 1030, (-1, 0)), (700, 300, (-1, 0)), (4096, 4096, (-1, 0)), (129, 129, (-1, -1)),
    (3000, 4099, (-1, -1)), (1000, 1000, (255, 0)), (513, 513, (64, -1)), (64, 5000, (-1, 0))])
def test_early_turns_never_deadlock_on_the_kernels_orders(Nq, Nk, window):
    """``DET_EARLY_TURN`` counts a step's addition only after the next step's turn has come. On the kernel's own
    walks and turns (one order of the key blocks at every tile) every program finishes; on staggered walks with turns
    in arrival order (``PACKED_DET_ROTATE``, which the switch leaves alone) the model finds a deadlock."""
    left, right = window
    causal_off = Nk - Nq + right if right >= 0 else None
    win_off = Nk - Nq - left if left >= 0 else None
    tiles = _kernel_walks_and_turns(Nq, Nk, causal_off, win_off)
    walks, turn = {}, {}
    for m0, visits in tiles.items():
        for n, step, t in visits:
            walks.setdefault(n, []).append((step, m0))
            turn[n, m0] = t
    walks = {n: [m0 for _, m0 in sorted(w)] for n, w in walks.items()}
    assert _counts_finish(walks, turn)


def test_early_turns_would_deadlock_on_arrival_order():
    tiles, walks = _rotated_turns(1792, 1792, 0, 1)
    turn = {(n, tile): t for tile, visits in tiles.items() for n, _, t in visits}
    assert not _counts_finish(walks, turn)


@needs_gluon
def test_early_turn_builds_keep_the_ordered_builds_structure():
    """``DET_EARLY_TURN``'s sm_90 builds (packed causal at D = 128, dense at D = 64): the same registers, wgmmas, TMA
    reductions and shared memory as the ordered build it reorders, the same number of ordered waits' polls (one
    acquiring load in each wait, only moved), and different code."""
    cases = [dict(D=128, causal=True, dtype="bfloat16", dq_shared=True, deterministic=True, varlen=True),
             dict(D=64, causal=False, dtype="bfloat16", dq_lag=1, deterministic=True)]
    reps = sm90_reports("prefill_gluon_bwd", [dict(c, early_turn=True) for c in cases] + cases)
    for case, early, plain in zip(cases, reps[:len(cases)], reps[len(cases):]):
        for key in ("setmaxnreg", "wgmma", "tma_reduces", "tma_loads", "smem_kb", "atomics"):
            assert early[key] == plain[key], (case, key, early, plain)


@needs_gluon
def test_measurement_variants_leave_out_what_they_name():
    """``benchmarks/bwd_gluon_ablation.py``'s variants (``_ablate``) as sm_90 builds: the ones that add dQ
    keep their TMA reductions (5 waits at once, 7 adds an unwritten tile), the others have none; 2 and 3
    drop the dQ products' wgmmas too."""
    variants = (0, 1, 2, 3, 5, 6, 7)
    reps = dict(zip(variants, sm90_reports("prefill_gluon_bwd", [dict(D=128, causal=False, dtype="bfloat16", _ablate=a)
                                                                 for a in variants])))
    assert {a: r["tma_reduces"] > 0 for a, r in reps.items()} == {0: True, 1: False, 2: False, 3: False, 5: True,
                                                                    6: False, 7: True}
    full = reps[0]["wgmma"]
    assert all(reps[a]["wgmma"] == full for a in (1, 5, 6, 7)), reps
    assert reps[2]["wgmma"] < full and reps[3]["wgmma"] < full, reps


@needs_gluon
def test_alibi_builds_for_sm90_with_the_table_options():
    """ALiBi builds (the table's options: D = 64 with dQ one or two steps behind, D = 128 with dQ shared;
    causal or not) keep the plain build's structure: the same shared memory (within 0.25 KB), TMA loads, wgmmas and waits,
    TMA reductions (one per warp group, twice with a lagged dQ) and register split; the slopes are scalar
    loads, the bias arithmetic on the scores. At D = 64 the stack stays within 16 bytes (triton 3.6's causal
    builds keep one there; the plain ones none); at D = 128 the plain builds already spill
    (``benchmarks/NOTES-prefill.md``)."""
    table = [dict(D=64, dq_lag=1), dict(D=64, dq_lag=2), dict(D=128, dq_shared=True)]
    cases = [dict(t, causal=c, dtype="bfloat16") for t in table for c in (False, True)]
    cases[1]["dtype"] = "float16"
    reps = sm90_reports("prefill_gluon_bwd", [dict(c, alibi=True) for c in cases] + [dict(c) for c in cases])
    for case, rep, plain in zip(cases, reps[:len(cases)], reps[len(cases):]):
        assert 1 in rep["wait_groups"] and 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)
        for key in ("setmaxnreg", "wait_groups", "tma_loads", "wgmma", "atomics", "tma_reduces"):
            assert rep[key] == plain[key], (case, key, rep, plain)
        assert rep["smem_kb"] == pytest.approx(plain["smem_kb"], abs=0.25), (case, rep, plain)  # (a little scratch)
        assert rep["atomics"] == 0 and rep["tma_reduces"] == 2 * (2 if case.get("dq_lag") else 1), (case, rep)
        assert rep["smem_kb"] <= 227, (case, rep)
        if case["D"] == 64 and rep.get("stack") is not None:
            assert rep["stack"] <= 16, (case, rep)


@needs_gluon
@pytest.mark.parametrize("bad", [dict(stages=0), dict(stages=4), dict(dq_split=3), dict(dq_split=4, D=64),
                                 dict(stages=3, dq_split=1), dict(dq_shared=True, dq_split=2),
                                 dict(consumer_regs=248), dict(consumer_regs=236), dict(dq_lag=3),
                                 dict(dq_lag=1), dict(block_m=96, D=64), dict(block_m=32, D=64), dict(block_m=128),
                                 dict(block_m=128, D=64, dq_lag=1), dict(block_m=128, D=64, deterministic=True),
                                 dict(block_m=128, D=64, dq_atomic=True)])
def test_gluon_backward_refuses_bad_tiles_before_any_work(bad):
    bad = dict(bad)
    D = bad.pop("D", 128)
    q = torch.zeros(1, 1, 8, D, dtype=torch.float16)
    grads = [torch.full_like(q, 7.0) for _ in range(3)]
    stats = torch.zeros(1, 1, 8)
    with pytest.raises(ValueError, match="the Gluon backward takes"):
        GB.gluon_backward(q, q, q, q, stats, stats, *grads, causal_off=None, scale=0.1, **bad)
    assert all((g == 7).all() for g in grads)  # nothing written


@needs_gluon
def test_deterministic_gluon_backward_refuses_split_dq_tiles_before_any_work():
    q = torch.zeros(1, 1, 8, 128, dtype=torch.float16)
    grads = [torch.full_like(q, 7.0) for _ in range(3)]
    stats = torch.zeros(1, 1, 8)
    with pytest.raises(ValueError, match="deterministic with dQ by TMA reductions of whole register-order tiles"):
        GB.gluon_backward(q, q, q, q, stats, stats, *grads, causal_off=None, scale=0.1, dq_split=2,
                          deterministic=True)
    assert all((g == 7).all() for g in grads)  # nothing written


@needs_gluon
def test_deterministic_builds_add_dq_from_a_writer_warp():
    """The deterministic sm_90 builds (the table's options: D = 64 with dQ one or two steps behind, D = 128 with
    dQ shared, causal or not): the consumers hand their tiles over, so the only TMA reductions are the writer
    warp's — one per staged tile of a step (two column halves with dQ shared, one tile otherwise; the plain
    builds issue one per warp group, twice over with a lagged dQ) — and the writer shares the loader's warp group
    and its register budget, so the consumers keep the plain build's (setmaxnreg: at 48 registers the writer took
    the first consumer warp group from 248 to 224, and the packed backward ran 13 % slower, packed_probe.py --det
    run 2); same wgmmas, within the shared memory of a block, no spill at D = 64."""
    cases = [dict(D=64, causal=c, dtype="bfloat16", dq_lag=lag) for c in (True, False) for lag in (1, 2)]
    cases += [dict(D=128, causal=c, dtype="bfloat16", dq_shared=True) for c in (True, False)]
    reps = sm90_reports("prefill_gluon_bwd", [dict(c, deterministic=True) for c in cases] + cases)
    for case, det, plain in zip(cases, reps[:len(cases)], reps[len(cases):]):
        assert det["tma_reduces"] == (2 if case.get("dq_shared") else 1), (case, det)
        assert plain["tma_reduces"] == 2 * (2 if case.get("dq_lag") else 1), (case, plain)
        assert det["wgmma"] == plain["wgmma"] and det["atomics"] == 0, (case, det, plain)
        assert det["setmaxnreg"] == plain["setmaxnreg"], (case, det, plain)
        assert det["smem_kb"] <= 227, (case, det)
        if case["D"] == 64 and det.get("stack") is not None:
            assert det["stack"] <= 16, (case, det)


def _ref_grads(q, k, v, do, causal, scale, dtype, window=None, slopes=None):
    q, k, v = (t.detach().to(dtype).requires_grad_(True) for t in (q, k, v))
    out, _ = attention_ref(q, k, v, causal=causal, scale=scale, window=window, alibi_slopes=slopes)
    return torch.autograd.grad(out, (q, k, v), do.to(dtype))


def _check_grads(q, k, v, do, grads, causal, scale, window=None, slopes=None):
    g64 = _ref_grads(q, k, v, do, causal, scale, torch.float64, window, slopes)
    g_same = _ref_grads(q, k, v, do, causal, scale, q.dtype, window, slopes)
    for name, g, s, r in zip(("dq", "dk", "dv"), grads, g_same, g64):
        e, e_ref = _err(g, r), _err(s, r)
        assert not torch.isnan(g).any(), f"{name}: NaN (an element was not written)"
        assert within_criterion(e, e_ref, r, g.dtype), (name, e, e_ref)


def _forward(q, k, v, mask, scale, slopes=None):
    return prefill_forward(q, k, v, mask=mask, scale=scale, slopes=slopes)


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_gluon_config_falls_back_to_the_triton_kernels_where_gluon_cannot_run(deterministic):
    """On the CPU (the interpreter) and for softcap, a configuration that asks for the Gluon backward still
    gives the right gradients, through the Triton kernels; deterministic calls give bit-identical gradients
    on either path."""
    gen = torch.Generator(device=DEV).manual_seed(1)
    D, causal = 64, True
    q, k, v, do = (torch.randn(1, 2, 45, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(4))
    mask, scale = Mask(-1, 0), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(),
                             deterministic=deterministic)
    _check_grads(q, k, v, do, grads, causal, scale)
    if deterministic:  # the Triton kernels without atomics, or the Gluon kernel's ordered additions: bit-identical
        again = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(),
                                 deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(grads, again))
    out_c, lse_c = prefill_forward(q, k, v, mask=mask, scale=scale, softcap=20.0)
    capped = prefill_backward(do, q, k, v, out_c, lse_c, mask=mask, scale=scale, softcap=20.0, config=_gluon_cfg())
    plain = prefill_backward(do, q, k, v, out_c, lse_c, mask=mask, scale=scale, softcap=20.0)
    for a, b in zip(capped, plain):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def _stub_gluon_backward(monkeypatch) -> list:
    """Gluon pretended available, its backward a stub that zeroes the gradients and records its keyword
    arguments in the list returned."""
    calls = []

    def stub(q, k, v, do, lse2, delta, dq, dk, dv, **kw):
        calls.append(kw)
        for g in (dq, dk, dv):
            g.zero_()

    monkeypatch.setattr(GB, "gluon_backward", stub)
    monkeypatch.setattr(GB, "HAVE_TMA_REDUCE", True)
    monkeypatch.setattr(G, "gluon_supported", lambda *a: True)
    monkeypatch.setattr(PB, "tma_ok", lambda *a: True)
    return calls


@needs_gluon
@pytest.mark.parametrize("kv_split", [2, 4])
def test_kv_split_reads_each_kv_head_from_several_programs_and_sums_their_gradients(kv_split, monkeypatch):
    """``kv_split``: the kernel (here the float64 reference in its place, under the kernel's contract for
    ``_kv_div``) gets K and V as they are and dK, dV buffers of ``kv_split`` heads per K/V head, head h' made
    from K/V head h' // kv_split and query heads h'·G' to (h' + 1)·G' − 1; the buffers' heads summed come out
    as the GQA call's own dK, dV (and dQ is the kernel's as it wrote it), into strided outputs too."""
    gen = torch.Generator().manual_seed(5)
    B, H, Hkv, Nq, Nk, D = 2, 8, 2, 11, 13, 16
    q, do = (torch.randn(B, H, Nq, D, dtype=torch.float64, generator=gen) for _ in range(2))
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.float64, generator=gen) for _ in range(2))
    seen = []

    def reference(q, k, v, do, lse2, delta, dq, dk, dv, **kw):  # the kernel's contract, by autograd
        seen.append((tuple(k.shape), tuple(dk.shape), kw))
        s = kw["_kv_div"]
        qq = q.detach().clone().requires_grad_()
        kk, vv = (t.repeat_interleave(s, dim=1).requires_grad_() for t in (k, v))  # program head h' reads h' // s
        out = attention_ref(qq, kk, vv, causal=True)[0]
        for g, d in zip((dq, dk, dv), torch.autograd.grad(out, (qq, kk, vv), do)):
            g.copy_(d)

    monkeypatch.setattr(GB, "_split_kernel", reference)
    dq = torch.empty_like(q)
    dk, dv = (torch.empty(B, Nk, Hkv, D, dtype=torch.float64).transpose(1, 2) for _ in range(2))  # strided
    GB.gluon_backward(q, k, v, do, None, None, dq, dk, dv, causal_off=Nk - Nq, scale=D ** -0.5, deterministic=True,
                      kv_split=kv_split)
    assert [(s, t) for s, t, _ in seen] == [((B, Hkv, Nk, D), (B, Hkv * kv_split, Nk, D))]
    assert seen[0][2]["deterministic"] is True and seen[0][2]["_kv_div"] == kv_split and "kv_split" not in seen[0][2]
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(attention_ref(qq, kk, vv, causal=True)[0], (qq, kk, vv), do)
    for got, w in zip((dq, dk, dv), want):
        torch.testing.assert_close(got, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B,H,N,D,split", [(2, 3, 13, 16, 2), (1, 2, 70, 64, 4), (1, 1, 1, 128, 3), (2, 2, 5, 96, 1)])
def test_sum_head_copies_adds_each_heads_copies_in_order_and_rounds_once(B, H, N, D, split, dtype):
    """``layout.sum_head_copies`` (the kv split's dK, dV): each head's ``split`` consecutive heads added in
    float32 (float64 for float64) in head order and rounded once, the same bits as that sum in PyTorch,
    into a contiguous or a (B, N, H, D)-strided output; shapes or dtypes that do not match are refused."""
    gen = torch.Generator().manual_seed(B * 1000 + N)
    x = torch.randn(B, H * split, N, D, generator=gen).to(dtype).to(DEV)
    acc_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    parts = x.unflatten(1, (H, split)).to(acc_dtype)
    want = parts[:, :, 0].clone()
    for s in range(1, split):
        want += parts[:, :, s]
    for out in (torch.full((B, H, N, D), float("nan"), dtype=dtype, device=DEV),
                torch.full((B, N, H, D), float("nan"), dtype=dtype, device=DEV).transpose(1, 2)):
        sum_head_copies(x, out, split)
        assert torch.equal(out, want.to(dtype))
    with pytest.raises(ValueError, match="must be a contiguous"):
        sum_head_copies(x, torch.empty(B, H + 1, N, D, dtype=dtype, device=DEV), split)
    with pytest.raises(ValueError, match="must be a contiguous"):
        sum_head_copies(x.to(acc_dtype if dtype != acc_dtype else torch.float16), out, split)


@needs_gluon
@pytest.mark.parametrize("bad", [3, 0, -2, 2.0])
def test_kv_split_must_divide_the_group(bad):
    """A kv_split that does not divide the query heads per K/V head (4 here), or is not a positive int, is
    refused before any work, and so is any split of a packed batch."""
    q = torch.zeros(1, 8, 8, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="kv_split must be a positive int dividing the 4 query heads"):
        GB.gluon_backward(q, k, k, q, None, None, q, k, k, causal_off=0, scale=0.125, kv_split=bad)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="without packed batches"):
        GB.gluon_backward(q, k, k, q, None, None, q, k, k, causal_off=0, scale=0.125, kv_split=2, cu_seqlens=(cu, cu))


def test_deterministic_gqa_calls_take_the_kv_split_set(monkeypatch):
    """Deterministic plain causal calls pass ``det_kv_split``: the largest divisor of the group up to
    ``DET_KV_SPLIT`` (4 by default) whose programs' dK, dV fit ``DET_KV_SPLIT_BYTES``; non-causal, windowed, ALiBi and
    non-deterministic calls never split."""
    calls = _stub_gluon_backward(monkeypatch)
    gen = torch.Generator(device=DEV).manual_seed(3)
    B, H, Hkv, N, D = 1, 12, 2, 24, 64
    q, do, out = (torch.randn(B, H, N, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(3))
    k, v = (torch.randn(B, Hkv, N, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(2))
    lse = torch.randn(B, H, N, device=DEV, generator=gen)
    assert GB.DET_KV_SPLIT == 4 and GB.det_kv_split(6) == 3 and GB.det_kv_split(8) == 4 and GB.det_kv_split(1) == 1
    assert GB.det_kv_split(4, causal=False) == 1
    kv_bytes = k.numel() * k.element_size()
    for split, budget, want in ((1, 1 << 30, 1), (2, 1 << 30, 2), (4, 1 << 30, 3), (8, 1 << 30, 6),
                                (8, 2 * 3 * kv_bytes, 3), (8, 2 * 2 * kv_bytes, 2), (8, 0, 1)):
        monkeypatch.setattr(GB, "DET_KV_SPLIT", split)
        monkeypatch.setattr(GB, "DET_KV_SPLIT_BYTES", budget)
        for det in (True, False):
            for mask, slopes, plain in ((Mask(-1, 0), None, True), (Mask(-1, -1), None, False),
                                        (Mask(7, 0), None, False), (Mask(-1, 0), torch.rand(H, device=DEV), False)):
                calls.clear()
                prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.125, deterministic=det, slopes=slopes,
                                 config=_gluon_cfg())
                assert [c["kv_split"] for c in calls] == [want if det and plain else 1], (split, det, mask, calls)


def test_alibi_calls_take_the_gluon_backward_where_it_runs(monkeypatch):
    """With Gluon available (here pretended: the kernel is a stub that records its arguments), ALiBi calls
    take the Gluon backward, dense, causal or windowed, with the slopes as given ((B, H), or (H,) expanded:
    a zero batch stride), deterministic calls too (its ordered dQ additions, by default; the Triton kernels
    with ``DETERMINISTIC = False``); softcap and packed calls (ALiBi or not) keep the Triton kernels."""
    calls = _stub_gluon_backward(monkeypatch)
    gen = torch.Generator(device=DEV).manual_seed(3)
    B, H, Hkv, Nq, Nk, D = 2, 4, 2, 24, 40, 64
    q, do, out = (torch.randn(B, H, Nq, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(3))
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(2))
    lse = torch.randn(B, H, Nq, device=DEV, generator=gen)
    per_batch, per_head = torch.rand(B, H, device=DEV, generator=gen), torch.rand(H, device=DEV, generator=gen)
    for mask, causal_off, win_off in ((Mask(-1, -1), None, None), (Mask(-1, 0), Nk - Nq, None),
                                      (Mask(7, 0), Nk - Nq, Nk - Nq - 7)):
        for slopes in (per_batch, per_head.expand(B, H)):
            calls.clear()
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.125, slopes=slopes,
                             config=_gluon_cfg(dq_lag=1))
            assert len(calls) == 1, mask
            assert calls[0]["slopes"] is slopes and calls[0]["dq_lag"] == 1, calls[0]
            assert (calls[0]["causal_off"], calls[0]["win_off"]) == (causal_off, win_off), (mask, calls[0])
    calls.clear()  # ALiBi with a right edge past the diagonal (a band): the Triton kernels
    prefill_backward(do, q, k, v, out, lse, mask=Mask(7, 3), scale=0.125, slopes=per_batch, config=_gluon_cfg())
    assert calls == []
    calls.clear()
    prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=0.125, slopes=per_batch, softcap=5.0,
                     config=_gluon_cfg())
    assert calls == []
    for ordered in (True, False):  # deterministic calls: the Gluon kernel's ordered dQ additions, or the Triton kernels
        monkeypatch.setattr(GB, "DETERMINISTIC", ordered)
        prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=0.125, slopes=per_batch, deterministic=True,
                         config=_gluon_cfg(dq_atomic=True))
        assert [c["deterministic"] for c in calls] == ([True] if ordered else []), calls
        if ordered:
            assert calls[0]["dq_atomic"] is False  # atomics add in arrival order: never with deterministic
        calls.clear()
    packed = [t[:1].transpose(1, 2).squeeze(0) for t in (q, k, v, out, do)]  # (N, heads, D), one sequence
    cu = tuple(torch.tensor([0, n], dtype=torch.int32, device=DEV) for n in (Nq, Nk))
    pq, pk, pv, pout, pdo = packed
    prefill_backward(pdo, pq, pk, pv, pout, lse[0], mask=Mask(-1, 0), scale=0.125, slopes=per_batch[:1],
                     cu_seqlens=cu, max_seqlen=(Nq, Nk), config=_gluon_cfg())
    assert calls == []


@needs_gluon
def test_gluon_backward_refuses_alibi_with_a_band_past_the_diagonal():
    """The ALiBi build folds the bias's query term into L for keys at or before the diagonal only: a causal
    right edge past it (causal_off > Nk − Nq) is refused before any work (the dispatch sends it to Triton)."""
    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="right edge at the diagonal"):
        GB.gluon_backward(q, k, k, q, None, None, q, k, k, causal_off=3, scale=0.125, slopes=torch.ones(2))


def test_set_config_puts_a_gluon_backward_in_its_own_table():
    """A Gluon backward given to set_config goes to the Gluon table (and is what default_bwd_config then
    returns); a Triton one replaces the Triton entry and drops the Gluon one."""
    from attnlab.gpu import default_bwd_config, set_config
    from attnlab.gpu.config import SHORT_KEYS

    cuda = torch.device("cuda")
    before, before_triton = (default_bwd_config(128, True, cuda, SHORT_KEYS, gluon=g) for g in (True, False))
    try:
        set_config(128, True, bwd=_gluon_cfg(3), length="long")
        assert default_bwd_config(128, True, cuda, SHORT_KEYS) == _gluon_cfg(3)
        assert default_bwd_config(128, True, cuda, SHORT_KEYS, gluon=False) == before_triton
        set_config(128, True, bwd=before_triton, length="long")
        assert default_bwd_config(128, True, cuda, SHORT_KEYS) == before_triton
    finally:
        set_config(128, True, bwd=before_triton, length="long")
        if before.gluon:
            set_config(128, True, bwd=before, length="long")
    assert default_bwd_config(128, True, cuda, SHORT_KEYS) == before


# -- on a Hopper GPU ---------------------------------------------------------------------------------

TILES = [(2, 1, False, False, 0), (3, 1, False, False, 0), (2, 2, True, False, 0), (2, 1, True, False, 0),
         (2, 2, False, False, 0), (2, 1, False, True, 0), (2, 1, True, True, 0), (2, 1, False, False, 1),
         (3, 1, False, True, 2)]  # (stages, dq_split, dq_atomic, dq_shared, dq_lag)


def _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    do = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    return q, k, v, do


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("stages,dq_split,dq_atomic,dq_shared,dq_lag", TILES)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", GLUON_CASES)
def test_gpu_gluon_backward_matches_reference(B, H, Hkv, Nq, Nk, D, causal, dtype, stages, dq_split, dq_atomic,
                                              dq_shared, dq_lag):
    if GB.smem_bytes(D, stages, dq_split, dq_atomic, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (refused: test_gluon_backward_refuses_bad_tiles...)")
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 7 + Nk)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                     config=_gluon_cfg(stages, dq_split, dq_atomic, dq_shared, dq_lag), dq=grads[0], dk=grads[1],
                     dv=grads[2])
    _check_grads(q, k, v, do, grads, causal, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("dq_shared,dq_lag", [(False, 0), (False, 2), (True, 0)])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,window,dtype", [
    c[:6] + (c[6], None, c[7]) for c in GLUON_CASES] + [
    c[:6] + (True, c[6], torch.bfloat16) for c in GLUON_WINDOW_CASES])
def test_gpu_deterministic_gluon_backward_is_bit_identical(B, H, Hkv, Nq, Nk, D, causal, window, dtype, dq_shared,
                                                           dq_lag, early, monkeypatch):
    """``deterministic``: each dQ tile takes its additions in key block order, so three runs give the same
    bits (dQ, dK, dV), within the criterion, and no ordered wait gave up (the counters' slot 0). ``early``: with
    ``DET_EARLY_TURN`` (the writer waits for a step's turns first), which adds in the same order: the same bits as
    without it."""
    if GB.smem_bytes(D, 2, 1, False, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (the lagged dQ ring is D = 64's)")
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 3 + Nk)
    if window is not None:
        mask, causal = Mask(*window), window[1] == 0
    else:
        mask = Mask(-1, 0 if causal else -1)
    scale = D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    runs, sems = [], []
    monkeypatch.setattr(GB, "DETERMINISTIC", True)  # (the default; set so that this test keeps covering the kernel)
    monkeypatch.setattr(GB, "DET_EARLY_TURN", early)
    kernel = GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: kernel(*a, **kw, _sem_out=sems))  # the counters
    for _ in range(3):
        grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, deterministic=True,
                         config=_gluon_cfg(dq_shared=dq_shared, dq_lag=dq_lag), dq=grads[0], dk=grads[1], dv=grads[2])
        runs.append(grads)
    assert len(sems) == 3  # the Gluon kernel ran, deterministic
    stats = [GB.sem_stats(c) for c in sems]
    assert all(st["given_up"] == 0 for st in stats), stats  # no wait gave up
    walks = _kernel_walks_and_turns(Nq, Nk, Nk - Nq + mask.right if mask.right >= 0 else None,
                                    Nk - Nq - mask.left if mask.left >= 0 else None)
    additions = B * H * (1 + dq_shared) * sum(len(v) for v in walks.values())  # each visit adds its tile(s) once
    assert all(st["additions"] == additions for st in stats), (stats, additions)
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))
    if early:  # the same additions in the same order as the build without the switch
        monkeypatch.setattr(GB, "DET_EARLY_TURN", False)
        grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, deterministic=True,
                         config=_gluon_cfg(dq_shared=dq_shared, dq_lag=dq_lag), dq=grads[0], dk=grads[1], dv=grads[2])
        assert all(torch.equal(a, b) for a, b in zip(runs[0], grads))
    if window is None:
        _check_grads(q, k, v, do, runs[0], causal, scale)
    else:
        _check_grads(q, k, v, do, runs[0], causal, scale, window=window)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("kv_split", [2, 4])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", [
    (1, 8, 2, 257, 1030, 128, True, torch.bfloat16), (2, 8, 2, 1000, 1000, 64, True, torch.bfloat16),
    (1, 12, 3, 700, 700, 64, False, torch.float16), (1, 32, 8, 2048, 2048, 64, True, torch.bfloat16)])
def test_gpu_deterministic_kv_split_is_bit_identical(B, H, Hkv, Nq, Nk, D, causal, dtype, kv_split, monkeypatch):
    """The deterministic Gluon backward with each K/V head split ``kv_split`` ways (asked for explicitly: the
    library splits plain causal calls only): three runs give the same bits, within the criterion, no ordered
    wait gave up."""
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 5 + Nk)
    mask = Mask(-1, 0 if causal else -1)
    scale = D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    monkeypatch.setattr(GB, "DETERMINISTIC", True)
    sems, kernel = [], GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: kernel(*a, **{**kw, "kv_split": kv_split},
                                                                       _sem_out=sems))
    runs = []
    for _ in range(3):
        grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, deterministic=True, config=_gluon_cfg(),
                         dq=grads[0], dk=grads[1], dv=grads[2])
        runs.append(grads)
    assert len(sems) == 3 and all(GB.sem_stats(c)["given_up"] == 0 for c in sems)
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))
    _check_grads(q, k, v, do, runs[0], causal, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("switches", [(False, True), (True, False), (False, False)])
@pytest.mark.parametrize("dq_split,dq_shared,dq_lag", [(1, False, 2), (1, True, 0), (2, False, 0)])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", [GLUON_CASES[i] for i in (0, 2, 3, 4)])
def test_gpu_measurement_switches_still_hold_the_criterion(B, H, Hkv, Nq, Nk, D, causal, dtype, dq_split, dq_shared,
                                                          dq_lag, switches, monkeypatch):
    """The builds the measurements compare against — ``DQ_PERMUTED = False`` (the row-major dQ staging),
    ``LSE_BY_TMA = False`` (L₂ and Dᵢ loaded by the consumers) — still give gradients within the criterion."""
    if GB.smem_bytes(D, 2, dq_split, False, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (the lagged dQ ring is D = 64's)")
    monkeypatch.setattr(GB, "DQ_PERMUTED", switches[0])
    monkeypatch.setattr(GB, "LSE_BY_TMA", switches[1])
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 5 + Nk)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                     config=_gluon_cfg(2, dq_split, False, dq_shared, dq_lag), dq=grads[0], dk=grads[1], dv=grads[2])
    _check_grads(q, k, v, do, grads, causal, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dq_shared,dq_lag", [(False, 0), (True, 0), (False, 1), (False, 2)])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", GLUON_WINDOW_CASES)
def test_gpu_gluon_backward_sliding_window(B, H, Hkv, Nq, Nk, D, window, dq_shared, dq_lag):
    if GB.smem_bytes(D, 2, 1, False, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (the lagged dQ ring is D = 64's)")
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, torch.bfloat16, Nq + Nk + window[0])
    mask, scale = Mask(*window), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                             config=_gluon_cfg(dq_shared=dq_shared, dq_lag=dq_lag))
    _check_grads(q, k, v, do, grads, window[1] == 0, scale, window=window)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("chunk", [2, 4, 64])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,cfg", [
    (3, 5, 5, 2048, 2048, 128, (-1, 0), dict(dq_shared=True)),  # 15 heads: chunks of 2 and 4 end short
    (2, 4, 4, 1000, 1000, 64, (-1, 0), dict(dq_lag=2)),  # ragged, the D = 64 table's lag
    (1, 8, 2, 257, 1030, 128, (-1, 0), dict(dq_shared=True)),  # GQA, Nq < Nk
    (1, 3, 1, 900, 400, 64, (300, 0), dict()),  # a causal window, Nq > Nk: empty rows, MQA
    (1, 4, 2, 1000, 1000, 128, (255, -1), dict(dq_shared=True)),  # a left edge only
])
def test_gpu_head_chunks_give_the_plain_numberings_gradients(B, H, Hkv, Nq, Nk, D, window, cfg, chunk, monkeypatch):
    """Programs numbered in chunks of heads (HCHUNK; a grid numbered key blocks first, as large causal or windowed
    calls are): dK and dV bit for bit those of the plain numbering (each comes from one program, whatever its
    number), dQ equal up to the order of its float32 additions, all within the float64 criterion; the launch took
    the chunk asked for (past the grid's heads: all of them in one chunk)."""
    from attnlab.gpu import prefill_bwd

    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, torch.bfloat16, Nq + chunk)
    mask, scale = Mask(*window), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    monkeypatch.setattr(GB, "HEADS_FIRST_WAVES", 0)  # (small grids go head first otherwise: no chunks)
    monkeypatch.setattr(GB, "HEAD_CHUNK_FROM_D", 64)  # (the library chunks from D = 128: here both head dims)
    launched = []
    real = GB.launch_kept
    monkeypatch.setattr(GB, "launch_kept", lambda kern, grid, a, **kw: launched.append(a["HCHUNK"]) or
                        real(kern, grid, a, **kw))
    runs = []
    for c in (None, chunk):
        monkeypatch.setattr(GB, "head_chunk", lambda heads, *a, _c=c: None if _c is None else min(_c, heads))
        GB._PLANS.clear()
        prefill_bwd._CALL_PLANS.clear()
        runs.append(prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(**cfg)))
    GB._PLANS.clear()
    prefill_bwd._CALL_PLANS.clear()
    assert launched == [None, min(chunk, B * Hkv)]
    (dq0, dk0, dv0), (dq1, dk1, dv1) = runs
    assert torch.equal(dk0, dk1) and torch.equal(dv0, dv1)
    assert (dq1.float() - dq0.float()).abs().max().item() <= 2e-2 * dq0.float().abs().max().item()
    _check_grads(q, k, v, do, runs[1], window[1] == 0, scale, window=window)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("B,H,Hkv,N,D,cfg,fit", [
    (2, 16, 4, 4096, 128, dict(dq_shared=True), 4),  # 8 units of 32 key blocks, heads first by default: chunks of 4
    (1, 12, 4, 3000, 64, dict(dq_lag=2), 2),  # ragged, three query heads a unit: one unit after another
])
def test_gpu_l2_chunks_give_the_heads_first_gradients(B, H, Hkv, N, D, cfg, fit, monkeypatch):
    """``L2_CHUNKS`` on: a causal call the library numbers heads first is launched key blocks first in ``l2_chunk``'s
    chunks (the budget shrunk to ``fit`` units' rows, so that these small calls take chunks); dK and dV bit for bit the
    heads-first launch's, dQ equal up to the order of its float32 additions, within the criterion."""
    from attnlab.gpu import prefill_bwd

    q, k, v, do = _gpu_inputs(B, H, Hkv, N, N, D, torch.bfloat16, N + D)
    mask, scale = Mask(-1, 0), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    launched = []
    real = GB.launch_kept
    monkeypatch.setattr(GB, "launch_kept", lambda kern, grid, a, **kw: launched.append((grid, a["HEADS_FIRST"],
                                                                                      a["HCHUNK"])) or
                        real(kern, grid, a, **kw))
    per_unit = 2 * N * D * 8
    monkeypatch.setattr(GB, "L2_CHUNK_MB", -(-fit * per_unit // (1 << 20)))
    runs = []
    for on in (False, True):
        monkeypatch.setattr(GB, "L2_CHUNKS", on)
        GB._PLANS.clear()
        prefill_bwd._CALL_PLANS.clear()
        runs.append(prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(**cfg)))
    GB._PLANS.clear()
    prefill_bwd._CALL_PLANS.clear()
    n_kb, units = -(-N // 128), B * Hkv
    chunk = GB.l2_chunk(units, H // Hkv, N, N, D, torch.cuda.get_device_properties(0).multi_processor_count)
    assert chunk == (4 if fit == 4 else 1) and launched[0] == ((units, n_kb), True, None)
    assert launched[1] == ((n_kb, units), False, chunk if chunk > 1 else None)
    (dq0, dk0, dv0), (dq1, dk1, dv1) = runs
    assert torch.equal(dk0, dk1) and torch.equal(dv0, dv1)
    assert (dq1.float() - dq0.float()).abs().max().item() <= 2e-2 * dq0.float().abs().max().item()
    _check_grads(q, k, v, do, runs[1], True, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("H,Hkv", [(8, 8), (8, 2)])
def test_gpu_l2_chunks_by_default_for_gqa_calls_only(H, Hkv, monkeypatch):
    """The library's defaults: a causal call numbered heads first (few programs a SM) goes key blocks first in
    ``l2_chunk``'s chunks when it is GQA, and stays heads first when it is multi-head, unless ``L2_CHUNKS_MIN_GROUP``
    is 1; the gradients right either way."""
    from attnlab.gpu import prefill_bwd

    B, N, D = 1, 4096, 64
    q, k, v, do = _gpu_inputs(B, H, Hkv, N, N, D, torch.bfloat16, 77 + H + Hkv)
    mask, scale = Mask(-1, 0), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    launched = []
    real = GB.launch_kept
    monkeypatch.setattr(GB, "launch_kept", lambda kern, grid, a, **kw: launched.append((a["HEADS_FIRST"], a["HCHUNK"]))
                        or real(kern, grid, a, **kw))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    units, n_kb = B * Hkv, -(-N // 128)
    assert GB.heads_first_default(True, units * n_kb, sms)  # (the library would number it heads first)
    chunk = GB.l2_chunk(units, H // Hkv, N, N, D, sms)
    assert chunk is not None
    for min_group in (GB.L2_CHUNKS_MIN_GROUP, 1):
        monkeypatch.setattr(GB, "L2_CHUNKS_MIN_GROUP", min_group)
        GB._PLANS.clear()
        prefill_bwd._CALL_PLANS.clear()
        launched.clear()
        grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg())
        chunked = H // Hkv >= min_group
        assert launched and launched[-1] == ((False, chunk if chunk > 1 else None) if chunked else (True, None))
        _check_grads(q, k, v, do, grads, True, scale)
    GB._PLANS.clear()
    prefill_bwd._CALL_PLANS.clear()


@pytest.mark.gpu
@on_hopper
def test_gpu_gluon_backward_strided_inputs_and_lse_gradient():
    """(B, N, H, D) tensors seen as (B, H, N, D) go through the descriptors' strides, and an incoming
    gradient of the logsumexp (dlse) is folded into D_i as in the Triton kernels: both agree."""
    gen = torch.Generator(device=DEV).manual_seed(5)
    q, k, v, do = (torch.randn(2, 1500, 8, 128, dtype=torch.bfloat16, device=DEV, generator=gen).transpose(1, 2)
                   for _ in range(4))
    mask, scale = Mask(-1, 0), 0.1
    out, lse = _forward(q, k, v, mask, scale)
    dlse = torch.randn(lse.shape, device=DEV, generator=gen)
    got = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(), dlse=dlse)
    tri = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, dlse=dlse,
                           config=BwdConfig(64, 128, 8, 3, 128, 64, 8, 3))
    for a, b in zip(got, tri):
        scale_ = b.float().abs().max().item()
        assert (a.float() - b.float()).abs().max().item() <= 2e-2 * max(scale_, 1.0)


# ALiBi: (B, H, Hkv, Nq, Nk, D, window (left, right), slopes "BH" (B, H) or "H" (H,) as a (B, H) view)
ALIBI_CASES = [
    (2, 4, 4, 129, 129, 128, (-1, -1), "BH"),  # dense, ragged: blocks across the bias's diagonal and both sides
    (1, 8, 2, 257, 1030, 128, (-1, 0), "H"),  # causal GQA (4 heads, 4 slopes per program), Nq < Nk
    (1, 6, 1, 700, 300, 64, (-1, 0), "BH"),  # causal MQA (6 slopes per program), Nq > Nk: empty rows
    (2, 3, 1, 300, 1100, 64, (-1, -1), "H"),  # dense MQA, Nq < Nk: the diagonal off the corner
    (1, 2, 2, 1100, 400, 128, (-1, -1), "BH"),  # dense, Nq > Nk: a negative offset
    (1, 4, 2, 1000, 1000, 128, (255, 0), "BH"),  # causal sliding window, GQA
    (2, 4, 4, 700, 1300, 64, (100, 0), "H"),  # a window narrower than a block, Nq < Nk
    (1, 2, 1, 777, 777, 64, (40, 200), "BH"),  # a band past the diagonal: whole visible blocks above it
    (1, 4, 4, 2048, 2048, 64, (-1, 0), "BH"),  # causal, full blocks
]
# the table's options at each head dim (dq_lag 1 and 2 at D = 64; dq_shared at D = 128), and one more at 128
ALIBI_OPTS = {64: (dict(dq_lag=1), dict(dq_lag=2)), 128: (dict(dq_shared=True), dict())}


def _alibi_id(case) -> str:
    B, H, Hkv, Nq, Nk, D, (left, right), kind = case
    mask = {(-1, -1): "dense", (-1, 0): "causal"}.get((left, right), f"window{left}_{right}")
    return f"B{B}H{H}Hkv{Hkv}Nq{Nq}Nk{Nk}D{D}-{mask}-slopes{kind}"


def _alibi_slopes(B, H, kind, gen):
    """ALiBi-like slopes 2^(−8u), u uniform in [0, 1): a different one for every head (and batch)."""
    slopes = 2.0 ** (-8 * torch.rand(B if kind == "BH" else 1, H, device=DEV, generator=gen))
    return slopes if kind == "BH" else slopes[0]


def _counting(monkeypatch):
    """Count the calls of the Gluon backward (it still runs)."""
    calls = []
    real = GB.gluon_backward

    def counted(*args, **kw):
        calls.append(kw.get("slopes"))
        return real(*args, **kw)

    monkeypatch.setattr(GB, "gluon_backward", counted)
    return calls


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("opt", [0, 1], ids=["opts0", "opts1"])  # ALIBI_OPTS[D][opt]
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,kind", ALIBI_CASES, ids=[_alibi_id(c) for c in ALIBI_CASES])
def test_gpu_gluon_backward_alibi(B, H, Hkv, Nq, Nk, D, window, kind, opt, monkeypatch):
    """ALiBi through the Gluon backward (which must be the kernel that ran) against the reference: each
    query head of a program's group with its own slope, bottom-right aligned, on every kind of block."""
    gen = torch.Generator(device=DEV).manual_seed(Nq * 7 + Nk + opt)
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, torch.bfloat16, Nq * 7 + Nk + window[0])
    slopes = _alibi_slopes(B, H, kind, gen)
    bh = slopes.expand(B, H)  # the launchers' form ((H,) as a view with batch stride 0)
    mask, scale = Mask(*window), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale, bh)
    calls = _counting(monkeypatch)
    grads = [torch.full(t.shape, float("nan"), dtype=q.dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, slopes=bh,
                     config=_gluon_cfg(**ALIBI_OPTS[D][opt]), dq=grads[0], dk=grads[1], dv=grads[2])
    if window[1] > 0:  # a band past the diagonal: the Triton kernels (the Gluon ALiBi build folds the bias's
        assert calls == []  # query term into L, which takes every visible key at or before the diagonal)
    else:
        assert len(calls) == 1 and calls[0] is bh, "the Gluon backward did not run"
    _check_grads(q, k, v, do, grads, window[1] == 0, scale, window=window, slopes=slopes)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("B,H,Hkv,N,D,causal,kind", [(1, 4, 2, 2048, 128, True, "H"),
                                                     (2, 4, 1, 1000, 64, False, "BH")])
def test_gpu_alibi_autograd_takes_the_gluon_backward_by_default(B, H, Hkv, N, D, causal, kind, monkeypatch):
    """flash_attention_triton with ALiBi slopes, through autograd with the default configurations: where
    the table has the Gluon backward (D = 128 at 2048 keys, D = 64 dense at 1000) it runs, once, with the
    caller's slopes as a (B, H) view, and the gradients match the reference."""
    from attnlab.gpu import flash_attention_triton

    gen = torch.Generator(device=DEV).manual_seed(N + D)
    q, k, v, do = _gpu_inputs(B, H, Hkv, N, N, D, torch.bfloat16, N + D)
    slopes = _alibi_slopes(B, H, kind, gen)
    calls = _counting(monkeypatch)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = flash_attention_triton(*leaves, causal=causal, alibi_slopes=slopes)
    grads = torch.autograd.grad(out, leaves, do)
    assert len(calls) == 1 and calls[0].shape == (B, H), "the Gluon backward did not run"
    _check_grads(q, k, v, do, grads, causal, D ** -0.5, slopes=slopes)


PACKED_CASES = [  # lens_q, lens_k, H, Hkv, D, causal: empty sequences, one query, len_q != len_k, 64/128 edges
    ([0, 17, 333, 1, 200, 129], [5, 17, 200, 0, 400, 129], 4, 2, 128, True),
    ([64, 1000, 63, 65, 1], [64, 1000, 63, 65, 1], 4, 4, 128, True),
    ([300, 1, 0, 700, 128], [120, 200, 90, 700, 256], 2, 1, 64, False),
    ([257, 1792, 511], [257, 1792, 511], 4, 1, 64, True),
]


def _packed_inputs(lens_q, lens_k, H, Hkv, D, seed, dtype=torch.bfloat16):
    """Random packed q, k, v, dO ((total, heads, D) on the GPU) and int32 cumulative lengths [cu_q, cu_k]."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(sum(lens_q), H, D, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    do = torch.randn(q.shape, dtype=dtype, device=DEV, generator=gen)
    cu = [torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
          for n in (lens_q, lens_k)]
    return q, k, v, do, cu


def _check_packed_grads(q, k, v, do, cu, grads, causal, scale):
    """A packed batch's (dq, dk, dv): every element written, within the criterion against the per-sequence oracle
    in float64 (and the oracle's own error in q's dtype)."""
    from attnlab.reference import attention_ref_varlen

    refs = []
    for dt in (torch.float64, q.dtype):
        qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        o, _ = attention_ref_varlen(qq, kk, vv, *cu, causal=causal, scale=scale)
        refs.append(torch.autograd.grad(o, (qq, kk, vv), do.to(dt)))
    for name, g, r64, same in zip(("dq", "dk", "dv"), grads, *refs):
        assert not torch.isnan(g).any(), f"{name}: NaN (an element was not written)"
        e, e_ref = _err(g, r64), _err(same, r64)
        assert within_criterion(e, e_ref, r64, g.dtype), (name, e, e_ref)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dq_shared,dq_lag,stages", [(False, 0, 2), (True, 0, 2), (False, 1, 2), (False, 0, 3)])
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,D,causal", PACKED_CASES)
def test_gpu_gluon_backward_packed_batch(lens_q, lens_k, H, Hkv, D, causal, dq_shared, dq_lag, stages, monkeypatch):
    """A packed batch (cu_seqlens) on the Gluon backward (which must be the kernel that ran): each sequence's
    gradients as the oracle's on that sequence alone, every element written (the outputs start as NaN), none
    of a sequence's keys or rows touched by another's programs; int64 lengths give the same gradients (up to
    the rounding of dQ's additions, which land in any order)."""
    if GB.smem_bytes(D, stages, 1, False, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has")
    q, k, v, do, cu = _packed_inputs(lens_q, lens_k, H, Hkv, D, sum(lens_q) * 3 + D)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    max_seqlen = (max(lens_q), max(lens_k))
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen)
    monkeypatch.setattr(GB, "PACKED", True)  # (the default; set so that this test keeps covering the kernel)
    calls = []
    real = GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: calls.append(kw["cu_seqlens"]) or real(*a, **kw))
    runs = []
    for cu_run in (cu, [c.long() for c in cu]):
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu_run, max_seqlen=max_seqlen,
                         config=_gluon_cfg(stages, 1, False, dq_shared, dq_lag), dq=grads[0], dk=grads[1], dv=grads[2])
        runs.append(grads)
    assert len(calls) == 2 and all(c is not None for c in calls), "the Gluon backward did not take the packed batch"
    _check_packed_grads(q, k, v, do, cu, runs[0], causal, scale)
    for a, b in zip(*runs):  # (dQ's additions land in any order: equal up to rounding, not bit for bit)
        torch.testing.assert_close(a, b)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dq_shared", [False, True])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,causal,window,dtype", [
    c[:5] + (c[6], None, c[7]) for c in GLUON_CASES] + [
    c[:5] + (c[6][1] == 0, c[6], torch.bfloat16) for c in GLUON_WINDOW_CASES])
def test_gpu_128_row_query_blocks_match_reference(B, H, Hkv, Nq, Nk, causal, window, dtype, dq_shared):
    """The 128-row build (``block_m`` 128) at D = 64 on the awkward shapes of the 64-row tests (each case at D = 64;
    a last block of rows past Nq, and its second 64-row dQ tile past a head's last, hold the criterion and
    write nothing into the next head), windows included: every element written, within the float64 criterion."""
    D = 64
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 5 + Nk)
    mask = Mask(-1, 0 if causal else -1) if window is None else Mask(*window)
    scale = D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(dq_shared=dq_shared, block_m=128),
                     dq=grads[0], dk=grads[1], dv=grads[2])
    _check_grads(q, k, v, do, grads, causal, scale, window=window)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dq_shared", [False, True])
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,D,causal", PACKED_CASES)
def test_gpu_128_row_query_blocks_packed_batch(lens_q, lens_k, H, Hkv, D, causal, dq_shared, monkeypatch):
    """The 128-row build on packed batches (each case at D = 64): a sequence's last block of rows reaches into the
    next sequence's rows, which must add nothing to this one's gradients nor it to theirs; each sequence's gradients
    as the oracle's on that sequence alone, every element written."""
    D = 64
    q, k, v, do, cu = _packed_inputs(lens_q, lens_k, H, Hkv, D, sum(lens_q) * 5 + D)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    max_seqlen = (max(lens_q), max(lens_k))
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen)
    monkeypatch.setattr(GB, "PACKED", True)
    calls = []
    real = GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: calls.append(kw["block_m"]) or real(*a, **kw))
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen,
                     config=_gluon_cfg(dq_shared=dq_shared, block_m=128), dq=grads[0], dk=grads[1], dv=grads[2])
    assert calls == [128], "the 128-row build did not run"
    _check_packed_grads(q, k, v, do, cu, grads, causal, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("rotate,early", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,D,causal", PACKED_CASES)
def test_gpu_gluon_backward_deterministic_packed_batch(lens_q, lens_k, H, Hkv, D, causal, rotate, early, monkeypatch):
    """A deterministic packed batch on the Gluon backward's ordered build (the table's configuration for long
    sequences): the same bits in three runs, equal to the default packed build's gradients up to rounding (the
    ordered build also walks every key block's query blocks in one order), within the criterion against the
    oracle, every element written (the outputs start as NaN), and no ordered wait given up. The packed cases'
    empty sequences, one-row sequences and len_q != len_k put turns at tiles of every shape. ``rotate``: with
    ``PACKED_DET_ROTATE`` (causal calls: staggered walks, turns in arrival order); ``early``: with
    ``DET_EARLY_TURN``."""
    from attnlab.gpu.config import default_bwd_config

    monkeypatch.setattr(GB, "PACKED", True)
    monkeypatch.setattr(GB, "PACKED_DET_ROTATE", rotate)
    monkeypatch.setattr(GB, "DET_EARLY_TURN", early)
    monkeypatch.setattr(PB, "_CALL_PLANS", {})  # (no plan another test kept: every call below takes its route)
    monkeypatch.setattr(GB, "PACKED_DET", (64, 128))  # (on by default at D = 128: the build at both head dims)
    q, k, v, do, cu = _packed_inputs(lens_q, lens_k, H, Hkv, D, sum(lens_q) * 5 + D)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    max_seqlen = (max(lens_q), max(lens_k))
    cfg = default_bwd_config(D, causal, torch.device("cuda"))
    assert cfg.gluon
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen)
    calls = []
    real = GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: calls.append(kw["deterministic"]) or real(*a, **kw))
    runs = []
    for det in (True, True, True, False):
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen,
                         deterministic=det, config=cfg, dq=grads[0], dk=grads[1], dv=grads[2])
        runs.append(grads)
    assert calls[0] is True and calls[-1] is False, "the Gluon backward did not take the deterministic packed batch"
    for run in runs[1:3]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run)), "deterministic runs differ"
    for a, b in zip(runs[0], runs[3]):
        torch.testing.assert_close(a, b)
    _check_packed_grads(q, k, v, do, cu, runs[0], causal, scale)
    sem = []  # one more call with the counters read: no wait gave up, and it still gives the same bits
    monkeypatch.setattr(PB, "_CALL_PLANS", {})  # (not the kept plan: this call goes through gluon_backward)
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: real(*a, **(kw | dict(_sem_out=sem))))
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen,
                     deterministic=True, config=cfg, dq=grads[0], dk=grads[1], dv=grads[2])
    assert sem and GB.sem_stats(sem[0])["given_up"] == 0
    assert all(torch.equal(a, b) for a, b in zip(runs[0], grads))


PLAN_CASES = [  # B, H, Hkv, Nq, Nk, D, mask (left, right), deterministic
    (2, 4, 4, 1000, 1000, 64, (-1, 0), False),
    (1, 8, 2, 257, 1030, 128, (-1, -1), False),
    (1, 4, 2, 700, 900, 64, (300, 0), False),  # a window
    (2, 4, 4, 129, 129, 128, (-1, 0), True),  # ordered dQ additions (their counters zeroed by the plan)
    (1, 8, 2, 1000, 1000, 64, (-1, 0), True),  # split K/V heads (kv_split): the inner call keeps the plan
]


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,deterministic", PLAN_CASES)
def test_gpu_a_kept_plan_gives_the_first_calls_gradients(B, H, Hkv, Nq, Nk, D, window, deterministic, monkeypatch):
    """A backward call keeps a plan for its signature (``_BwdPlan``); the next call of the signature, on other
    tensors, runs it: dK, dV bit for bit what the first path gives the same tensors (dQ too where deterministic;
    otherwise its additions land in any order: equal up to rounding), and within the criterion."""
    mask, scale, dtype = Mask(*window), D ** -0.5, torch.bfloat16
    from attnlab.gpu import prefill_bwd

    runs = [[], []]
    monkeypatch.setattr(GB, "_PLANS", {})
    monkeypatch.setattr(prefill_bwd, "_CALL_PLANS", {})  # (the whole call's plans, which hold the Gluon backward's)
    ran = []
    real_run = GB._BwdPlan.run
    monkeypatch.setattr(GB._BwdPlan, "run", lambda self, *a: ran.append(1) or real_run(self, *a))
    inputs = [_gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, seed) for seed in (Nq + 1, Nq + 2)]
    for attempt in range(2):  # (attempt 0: a plan kept from the first inputs; attempt 1: none kept)
        GB._PLANS.clear()
        prefill_bwd._CALL_PLANS.clear()
        for q, k, v, do in inputs if attempt == 0 else inputs[1:]:
            out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
            grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, deterministic=deterministic,
                             config=_gluon_cfg(), dq=grads[0], dk=grads[1], dv=grads[2])
            runs[attempt].append(grads)
        if attempt == 0:
            assert len(GB._PLANS) == 1 and len(ran) == 1, "the second call did not run the kept plan"
    assert len(ran) == 1
    planned, first = runs[0][1], runs[1][0]
    for name, a, b in zip(("dq", "dk", "dv"), planned, first):
        if name == "dq" and not deterministic:
            torch.testing.assert_close(a, b)
        else:
            assert torch.equal(a, b), name
    q, k, v, do = inputs[1]
    _check_grads(q, k, v, do, planned, window[1] == 0, scale, window=window if window[0] >= 0 else None)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D,causal", [(128, True), (64, False)])
def test_gpu_a_kept_packed_plan_takes_each_calls_lengths(D, causal, monkeypatch):
    """A packed batch's plan takes each call's cumulative lengths (its key holds only their kind): kept from a
    call whose cu_seqlens_q is cu_seqlens_k, it runs a call of the same totals with other lengths, a different
    tensor for each, and gives what the first path gives that call."""
    from attnlab.gpu import prefill_bwd

    monkeypatch.setattr(GB, "PACKED", True)
    monkeypatch.setattr(GB, "_PLANS", {})
    monkeypatch.setattr(prefill_bwd, "_CALL_PLANS", {})
    dtype, H, Hkv = torch.bfloat16, 4, 2
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    calls = [([100, 700, 200], [100, 700, 200]), ([300, 650, 50], [500, 20, 480])]
    gen = torch.Generator(device=DEV).manual_seed(D)
    q, do = (torch.randn(1000, H, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    k, v = (torch.randn(1000, Hkv, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))

    def backward(lens_q, lens_k):
        cu_q, cu_k = (torch.tensor([0] + torch.tensor(n).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
                      for n in (lens_q, lens_k))
        if lens_q == lens_k:
            cu_k = cu_q
        cu, mx = (cu_q, cu_k), (700, 700)
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=mx)
        return prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=mx,
                                config=_gluon_cfg()), cu

    backward(*calls[0])
    assert len(GB._PLANS) == 1
    planned, cu = backward(*calls[1])
    GB._PLANS.clear()
    prefill_bwd._CALL_PLANS.clear()
    first, _ = backward(*calls[1])
    torch.testing.assert_close(planned[0], first[0])
    assert torch.equal(planned[1], first[1]) and torch.equal(planned[2], first[2])
    from attnlab.reference import attention_ref_varlen

    refs = []
    for dt in (torch.float64, dtype):
        qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        o, _ = attention_ref_varlen(qq, kk, vv, *cu, causal=causal, scale=scale)
        refs.append(torch.autograd.grad(o, (qq, kk, vv), do.to(dt)))
    for name, g, r64, same in zip(("dq", "dk", "dv"), planned, *refs):
        e, e_ref = _err(g, r64), _err(same, r64)
        assert within_criterion(e, e_ref, r64, g.dtype), (name, e, e_ref)


@needs_gluon
def test_packed_batches_build_for_sm90_and_route_to_the_gluon_backward(monkeypatch):
    """The packed-batch build (VARLEN) compiles for sm_90 with the dense build's TMA loads (L₂ and Dᵢ too: each
    sequence's rows start at a multiple of 64), wgmmas, dQ reductions and register split, and without spills
    at D = 64, its deterministic build likewise beside the dense one's; ``prefill_backward`` sends a packed causal
    or non-causal batch to it (with cu_seqlens and the longest sequence's keys) where ``PACKED`` is set, a
    deterministic one too at the head dims of ``PACKED_DET``, and windows, ALiBi and softcap to the Triton kernels;
    ``PACKED`` off (a measurement switch: the default is on) sends every packed batch there."""
    dense, packed, dense_det, packed_det = sm90_reports("prefill_gluon_bwd", [
        dict(D=64, dtype="bfloat16", causal=True), dict(D=64, dtype="bfloat16", causal=True, varlen=True),
        dict(D=64, dtype="bfloat16", causal=True, deterministic=True),
        dict(D=64, dtype="bfloat16", causal=True, varlen=True, deterministic=True)])
    for key in ("tma_loads", "wgmma", "tma_reduces", "setmaxnreg", "smem_kb"):
        assert packed[key] == dense[key], key
        assert packed_det[key] == dense_det[key], key
    assert packed.get("stack") in (0, None) and packed_det.get("stack") in (0, None)
    calls = _stub_gluon_backward(monkeypatch)
    monkeypatch.setattr(GB, "PACKED", True)
    gen = torch.Generator(device=DEV).manual_seed(5)
    lens = [3, 0, 20, 9]
    cu = torch.tensor([0, 3, 3, 23, 32], dtype=torch.int32, device=DEV)
    q, do, out = (torch.randn(sum(lens), 4, 64, dtype=torch.float16, device=DEV, generator=gen) for _ in range(3))
    k, v = (torch.randn(sum(lens), 2, 64, dtype=torch.float16, device=DEV, generator=gen) for _ in range(2))
    lse = torch.randn(4, sum(lens), device=DEV, generator=gen)
    common = dict(scale=0.125, cu_seqlens=(cu, cu), max_seqlen=(20, 20), config=_gluon_cfg(dq_shared=True))
    for mask, right in ((Mask(-1, 0), 0), (Mask(-1, -1), None), (Mask(-1, 3), 3)):
        calls.clear()
        prefill_backward(do, q, k, v, out, lse, mask=mask, **common)
        assert len(calls) == 1 and calls[0]["causal_off"] == right and calls[0]["max_seqlen_k"] == 20
        assert calls[0]["cu_seqlens"][0].tolist() == cu.tolist() and calls[0].get("win_off") is None
        assert calls[0]["max_seqlen_q"] == 20 and calls[0]["cu_rows"].tolist() == [0, 64, 64, 128, 192]
    calls.clear()
    monkeypatch.setattr(GB, "PACKED_DET", (64, 128))
    prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), deterministic=True, **common)
    assert len(calls) == 1 and calls[0]["deterministic"] and calls[0]["cu_seqlens"] is not None
    monkeypatch.setattr(GB, "PACKED_DET", (128,))  # (these calls are at D = 64)
    for extra in (dict(mask=Mask(5, 0)), dict(mask=Mask(-1, 0), softcap=3.0), dict(mask=Mask(-1, 0), deterministic=True),
                  dict(mask=Mask(-1, 0), slopes=torch.rand(4, 4, device=DEV))):
        calls.clear()
        prefill_backward(do, q, k, v, out, lse, **extra, **common)
        assert calls == [], extra
    monkeypatch.setattr(GB, "PACKED", False)
    prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), **common)
    assert calls == [] and GB.PACKED is False


@needs_gluon
def test_128_row_query_blocks_build_for_sm90_at_d64():
    """``block_m`` 128 (D = 64): the dense and packed builds compile for sm_90 with 128-row Q, dO and L₂/Dᵢ boxes, in
    the shared memory ``smem_bytes`` counts (at most a block's), with the 64-row build's register split, and add
    dQ as two 64-row register-order tiles per staged product (so four reductions in the code: two per warp group's
    copy, whole or with the product shared). Its 64 × 128 Sᵀ and dPᵀ and 128 columns of L₂ and Dᵢ a warp group
    hold more than its registers under triton 3.6: the build spills (the stack is reported, not held to 0 as the
    64-row builds' is; ``benchmarks/bwd_block_m.py`` times what that costs)."""
    cases = [dict(D=64, dtype="bfloat16", causal=True, block_m=128), dict(D=64, dtype="bfloat16", causal=False,
                                                                        block_m=128, dq_shared=True),
             dict(D=64, dtype="bfloat16", causal=True, varlen=True, block_m=128)]
    for case, rep in zip(cases, sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases])):
        assert rep["smem_kb"] <= 227, (case, rep)
        assert rep["smem_kb"] == pytest.approx(GB.smem_bytes(64, 2, block_m=128) / 1024, abs=1.0), (case, rep)
        assert rep["tma_reduces"] == 4 and rep["atomics"] == 0, (case, rep)
        assert 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)
        assert 1 in rep["wait_groups"] and rep["tma_loads"] > 0, (case, rep)
    assert GB.smem_bytes(64, 2, block_m=128) > GB.smem_bytes(64, 2)
    assert GB.smem_bytes(128, 2, block_m=128) > GB.SMEM_LIMIT  # (D = 128: refused)


def _stub_inputs(gen):
    """q, k, v, dO, O (bfloat16) and an LSE of a small GQA call (B 2, H 4 on 2 K/V heads, 40 rows, D 64) for the
    dispatch tests, whose backward is a stub."""
    B, H, Hkv, N, D = 2, 4, 2, 40, 64
    q, do, out = (torch.randn(B, H, N, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(3))
    k, v = (torch.randn(B, Hkv, N, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(2))
    return q, k, v, do, out, torch.randn(B, H, N, device=DEV, generator=gen)


def test_a_128_row_config_reaches_the_gluon_backward_where_its_build_exists(monkeypatch):
    """A Gluon configuration with ``block_m1`` 128 runs the 128-row build on dense and packed calls; deterministic
    and ALiBi calls, which have no such build, run the 64-row one."""
    calls = _stub_gluon_backward(monkeypatch)
    monkeypatch.setattr(GB, "PACKED", True)
    gen = torch.Generator(device=DEV).manual_seed(9)
    q, k, v, do, out, lse = _stub_inputs(gen)
    B, H = q.shape[:2]
    cfg = _gluon_cfg(block_m=128)
    for extra, rows in ((dict(), 128), (dict(mask=Mask(-1, -1)), 128), (dict(deterministic=True), 64),
                        (dict(slopes=torch.rand(B, H, device=DEV, generator=gen)), 64)):
        calls.clear()
        prefill_backward(do, q, k, v, out, lse, **(dict(mask=Mask(-1, 0)) | extra), scale=0.125, config=cfg)
        assert [c["block_m"] for c in calls] == [rows], extra
    calls.clear()
    cu = torch.tensor([0, 7, 40], dtype=torch.int32, device=DEV)
    pq, pk, pv, pout, pdo = (t[0].transpose(0, 1).contiguous() for t in (q, k, v, out, do))
    prefill_backward(pdo, pq, pk, pv, pout, lse[0], mask=Mask(-1, 0), scale=0.125, cu_seqlens=(cu, cu),
                     max_seqlen=(33, 33), config=cfg)
    assert len(calls) == 1 and calls[0]["block_m"] == 128 and calls[0]["cu_seqlens"] is not None


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_gluon_kernels_in_the_model_layout(D, causal, monkeypatch):
    """A model's (B, N, H, D) projections seen as (B, H, N, D), long enough for both Gluon kernels (which
    must be the ones that ran): the output and the gradients are written in that layout (TMA stores
    with the tensors' own strides), with the reference's values; GQA, an awkward length."""
    import attnlab

    B, N, H, Hkv = 1, 2113, 4, 2
    gen = torch.Generator(device=DEV).manual_seed(11)

    def model(heads):
        return torch.randn(B, N, heads, D, device=DEV, dtype=torch.bfloat16, generator=gen).transpose(1, 2)

    q, k, v = model(H).requires_grad_(), model(Hkv).requires_grad_(), model(Hkv).requires_grad_()
    do = model(H)
    ran = {"fwd": 0}
    real_fwd = G.gluon_forward

    def counted_fwd(*args, **kw):
        ran["fwd"] += 1
        return real_fwd(*args, **kw)

    monkeypatch.setattr(G, "gluon_forward", counted_fwd)
    calls = _counting(monkeypatch)
    out = attnlab.flash_attention(q, k, v, causal=causal)
    g = torch.autograd.grad(out, (q, k, v), do)
    assert ran["fwd"] == 1 and len(calls) == 1, "the Gluon kernels did not run"
    assert out.transpose(1, 2).is_contiguous() and all(t.transpose(1, 2).is_contiguous() for t in g)
    refs = []
    for dt in (torch.float64, torch.bfloat16):
        qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        o, _ = attention_ref(qq, kk, vv, causal=causal)
        refs.append((o.detach(), *torch.autograd.grad(o, (qq, kk, vv), do.to(dt))))
    for name, got, r64, same in zip(("out", "dq", "dk", "dv"), (out, *g), *refs):
        e, e_ref = _err(got, r64), _err(same, r64)
        assert within_criterion(e, e_ref, r64, got.dtype), (name, e, e_ref)


@needs_gluon
def test_dq_swizzle_hook(monkeypatch):
    """``DQ_SWIZZLE`` (benchmarks/bwd_dq_layout.py) sets the dQ staging tile's swizzle for the descriptor and
    the build alike; None is Triton's default for the tile (128 bytes for float32 64-row tiles), which the
    H200 measured fastest (data/bwd-dq-layout-h200-run1.json)."""
    from triton.experimental.gluon import language as gl

    assert GB.DQ_SWIZZLE is None
    default = GB._dq_layout([GB.BWD_BLOCK_M, 64])
    assert default == gl.NVMMASharedLayout.get_default_for([GB.BWD_BLOCK_M, 64], gl.float32)
    assert default.swizzle_byte_width == 128
    for sw in (64, 32, 0):
        monkeypatch.setattr(GB, "DQ_SWIZZLE", sw)
        got = GB._dq_layout([GB.BWD_BLOCK_M, 64])
        assert (got.swizzle_byte_width, got.element_bitwidth, got.rank) == (sw, 32, 2)


@needs_gluon
def test_packed_builds_with_zero_past_for_sm90():
    """``ZERO_PAST`` (off until it has run on a GPU): the packed builds that set a sequence's rows past its end to 0
    in shared memory (k and v once, q and dO on a crossing step; 64 rows each, 8 at a time, one 16-byte store per
    thread and slice, in each of the two consumer warp groups) build for sm_90 with the same shared memory and
    within the register cap; the switch is off and a build without it has none of those stores."""
    from attnlab.gpu import prefill_gluon_bwd as GB

    assert GB.ZERO_PAST is False
    cases = [dict(D=D, causal=c, dtype="bfloat16", varlen=True, deterministic=det) for D in (64, 128)
             for c in (True, False) for det in (False, True)]
    reps = sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases] + [dict(c, zero_past=True) for c in cases])
    for case, base, zero in zip(cases, reps[:len(cases)], reps[len(cases):]):
        stores = zero["shared_stores"].get("v4.b32", 0) - base["shared_stores"].get("v4.b32", 0)
        assert stores == 2 * 4 * (64 // 8), (case, base, zero)
        assert zero["smem_kb"] == base["smem_kb"] and zero["setmaxnreg"] == base["setmaxnreg"], (case, base, zero)
        if zero.get("regs") is not None:
            assert zero["regs"] <= 255, (case, zero)


# -- the persistent build (``persistent``: one program per SM walking key block after key block) ------------------

# (D, K/V buffer pairs, the table's options at D): both pairs at D = 64, one at D = 128 (two do not fit there)
PERSISTENT_OPTS = [(64, 2, dict(dq_lag=2)), (64, 1, dict()), (64, 2, dict(dq_lag=1)), (128, 1, dict(dq_shared=True))]


@needs_gluon
def test_mask_limits_builds_for_sm90_with_fewer_selects_and_no_more_spill():
    """The masked steps from each key row's query limits (``MASK_LIMITS`` 2, the module as shipped) against a copy of
    the module with the three comparisons per score (0, as ``benchmarks/bwd_block_m.py``'s ``nolimits`` arm builds it),
    on the table's causal builds at D = 64 and 128, dense and packed: the same products, loads, waits and shared
    memory; at D = 128 (``MASK_LIMITS_FROM_D``) half the selects or fewer and no more spill (under triton 3.6 the
    stacks shrink), at D = 64 the same build as before."""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import bwd_block_m as bm\n"
            "from attnlab.gpu import prefill_gluon_bwd as gb; from attnlab.gpu.prefill_gluon import kernel_report\n"
            "out = []\n"
            "for name, m in (('limits', gb), ('nolimits', bm.switched_module({'MASK_LIMITS': 0}))):\n"
            "    for D, kw in ((64, dict(dq_lag=2)), (64, dict(dq_lag=2, varlen=True)), (128, {}), "
            "(128, dict(varlen=True))):\n"
            "        k = m.compile_sm90(D, causal=True, **kw)\n"
            "        r = kernel_report(k)\n"
            "        r['selects'] = k.asm['ptx'].count('selp.f32')\n"
            "        r['build'], r['case'] = name, f'{D}-{sorted(kw.items())}'\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, timeout=1200)
    base = {r["case"]: r for r in reps if r["build"] == "nolimits"}
    assert GB.MASK_LIMITS == 2 and GB.MASK_LIMITS_FROM_D == 128 and len(base) == 4
    for r in reps:
        if r["build"] != "limits":
            continue
        s_ = base[r["case"]]
        for key in ("wgmma", "tma_loads", "smem_kb", "wait_groups", "exponentials", "atomics", "tma_reduces"):
            assert r[key] == s_[key], (key, r, s_)
        if r["case"].startswith(str(GB.MASK_LIMITS_FROM_D)):
            assert r["stack"] <= s_["stack"], (r, s_)
            assert r["selects"] <= s_["selects"] / 2, (r["selects"], s_["selects"])
        else:  # below MASK_LIMITS_FROM_D: the step before, unchanged
            assert (r["stack"], r["selects"]) == (s_["stack"], s_["selects"]), (r, s_)


@needs_gluon
def test_persistent_builds_for_sm90_fit_and_keep_the_one_pass():
    """The persistent builds (dense and packed, causal or not; one or two K/V buffer pairs at D = 64, one at
    D = 128) compile for sm_90 in the shared memory ``smem_bytes`` counts for their pairs (at most a block's), keep
    the loader's and consumers' register split, the TMA loads and dQ's TMA reductions, and store dK, dV without TMA;
    two pairs at D = 128 are refused (more shared memory than a block has), and so are deterministic builds."""
    cases = [dict(D=64, dtype="bfloat16", causal=True, dq_lag=2, persistent=2),
             dict(D=64, dtype="bfloat16", causal=False, dq_lag=1, persistent=2),
             dict(D=64, dtype="bfloat16", causal=True, varlen=True, persistent=2),
             dict(D=64, dtype="bfloat16", causal=True, persistent=1),
             dict(D=128, dtype="bfloat16", causal=True, dq_shared=True, persistent=1),
             dict(D=128, dtype="float16", causal=False, dq_shared=True, varlen=True, persistent=1)]
    for case, rep in zip(cases, sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases])):
        kv = case["persistent"]
        assert rep["smem_kb"] <= 227, (case, rep)
        want = GB.smem_bytes(case["D"], 2, dq_lag=case.get("dq_lag", 0), kv_bufs=kv) / 1024
        assert rep["smem_kb"] == pytest.approx(want, abs=1.0), (case, rep)
        assert rep["tma_reduces"] > 0 and rep["atomics"] == 0 and rep["tma_loads"] > 0, (case, rep)
        assert 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)
        assert 1 in rep["wait_groups"], (case, rep)
    assert GB.smem_bytes(64, 2, dq_lag=2, kv_bufs=2) <= GB.SMEM_LIMIT < GB.smem_bytes(128, 2, kv_bufs=2)
    with pytest.raises(ValueError, match="persistent=2 need"):
        GB._check_tiles(128, 2, 1, persistent=2)
    with pytest.raises(ValueError, match="persistent build"):
        GB._check_tiles(64, 2, 1, deterministic=True, persistent=1)
    with pytest.raises(ValueError, match="persistent build"):
        GB._check_tiles(64, 2, 1, persistent=3)


def test_a_persistent_config_reaches_the_gluon_backward(monkeypatch):
    """``BwdConfig.persistent`` goes to the Gluon backward on dense and packed calls (the kernel itself keeps
    deterministic calls on their ordered build)."""
    calls = _stub_gluon_backward(monkeypatch)
    monkeypatch.setattr(GB, "PACKED", True)
    gen = torch.Generator(device=DEV).manual_seed(11)
    q, k, v, do, out, lse = _stub_inputs(gen)
    B, H = q.shape[:2]
    for kv in (0, 1, 2):
        calls.clear()
        prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=0.125, config=_gluon_cfg(persistent=kv))
        assert [c["persistent"] for c in calls] == [kv]
    calls.clear()
    cu = torch.tensor([0, 7, 40], dtype=torch.int32, device=DEV)
    pq, pk, pv, pout, pdo = (t[0].transpose(0, 1).contiguous() for t in (q, k, v, out, do))
    prefill_backward(pdo, pq, pk, pv, pout, lse[0], mask=Mask(-1, 0), scale=0.125, cu_seqlens=(cu, cu),
                     max_seqlen=(33, 33), config=_gluon_cfg(persistent=2))
    assert len(calls) == 1 and calls[0]["persistent"] == 2 and calls[0]["cu_seqlens"] is not None


def _persistent_params():
    out = []
    for D, kv, opts in PERSISTENT_OPTS:
        for programs in (None, 3):  # one per SM; three (each walks many key blocks: rings and pairs run on)
            name = "-".join(f"{k}{v}" for k, v in opts.items()) or "plain"
            out.append(pytest.param(D, kv, opts, programs,
                                    id=f"D{D}-kv{kv}-{name}-{'sms' if programs is None else programs}"))
    return out


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D,kv,opts,programs", _persistent_params())
def test_gpu_persistent_backward_matches_reference(D, kv, opts, programs, monkeypatch):
    """The persistent build on the dense awkward shapes (ragged blocks, GQA/MQA, Nq != Nk with empty rows,
    windows, one row and key) at D, each program walking one key block after another (three programs: dozens each,
    key blocks with no step among them): every element written, within the float64 criterion; the second call (a
    kept plan) gives dK, dV bit for bit the same."""
    monkeypatch.setattr(GB, "PERSISTENT_PROGRAMS", programs)
    monkeypatch.setattr(GB, "_PLANS", {})
    cases = [(c[:5], c[6], None, c[7]) for c in GLUON_CASES if c[5] == D or c[3] < 2]
    cases += [(c[:5], c[6][1] == 0, c[6], torch.bfloat16) for c in GLUON_WINDOW_CASES]
    for (B, H, Hkv, Nq, Nk), causal, window, dtype in cases:
        q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 3 + Nk + kv)
        mask = Mask(-1, 0 if causal else -1) if window is None else Mask(*window)
        scale = D ** -0.5
        out, lse = _forward(q, k, v, mask, scale)
        runs = []
        for _ in range(2):
            grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
            prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                             config=_gluon_cfg(persistent=kv, **opts), dq=grads[0], dk=grads[1], dv=grads[2])
            runs.append(grads)
        _check_grads(q, k, v, do, runs[0], causal, scale, window=window)
        assert torch.equal(runs[0][1], runs[1][1]) and torch.equal(runs[0][2], runs[1][2]), (B, H, Nq, Nk, window)
        torch.testing.assert_close(runs[0][0], runs[1][0])


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D,kv,opts,programs", _persistent_params())
def test_gpu_persistent_backward_packed_batch(D, kv, opts, programs, monkeypatch):
    """The persistent build on packed batches (empty sequences, one query, len_q != len_k, 64/128 edges; the grid's
    key blocks past a sequence's own dealt out among the others): each sequence's gradients as the oracle's on that
    sequence alone, every element written."""
    monkeypatch.setattr(GB, "PERSISTENT_PROGRAMS", programs)
    monkeypatch.setattr(GB, "PACKED", True)
    calls = []
    real = GB.gluon_backward
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: calls.append(kw["persistent"]) or real(*a, **kw))
    for lens_q, lens_k, H, Hkv, _, causal in PACKED_CASES:
        q, k, v, do, cu = _packed_inputs(lens_q, lens_k, H, Hkv, D, sum(lens_q) * 7 + D + kv)
        mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
        max_seqlen = (max(lens_q), max(lens_k))
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen)
        grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=max_seqlen,
                         config=_gluon_cfg(persistent=kv, **opts), dq=grads[0], dk=grads[1], dv=grads[2])
        _check_packed_grads(q, k, v, do, cu, grads, causal, scale)
    assert calls == [kv] * len(PACKED_CASES), "the persistent build did not take the packed batches"


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D,kv,opts", [(64, 2, dict(dq_lag=2)), (128, 1, dict(dq_shared=True))])
def test_gpu_persistent_backward_alibi_and_gqa_heads_first(D, kv, opts, monkeypatch):
    """The persistent build with ALiBi (per-head slopes, causal) and on a GQA call numbered head first (few programs
    per SM: ``heads_first_default``), at three programs: within the criterion."""
    monkeypatch.setattr(GB, "PERSISTENT_PROGRAMS", 3)
    gen = torch.Generator(device=DEV).manual_seed(D + kv)
    B, H, Hkv, N = 2, 4, 2, 700
    q, k, v, do = _gpu_inputs(B, H, Hkv, N, N, D, torch.bfloat16, D * 13 + kv)
    slopes = torch.rand(H, device=DEV, generator=gen) * 0.2
    mask, scale = Mask(-1, 0), D ** -0.5
    bh = slopes.expand(B, H)
    out, lse = _forward(q, k, v, mask, scale, bh)
    grads = [torch.full(t.shape, float("nan"), dtype=q.dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, slopes=bh,
                     config=_gluon_cfg(persistent=kv, **opts), dq=grads[0], dk=grads[1], dv=grads[2])
    _check_grads(q, k, v, do, grads, True, scale, slopes=slopes)
    B, H, Hkv, N = 1, 8, 2, 1500
    q, k, v, do = _gpu_inputs(B, H, Hkv, N, N, D, torch.bfloat16, D * 17 + kv)
    out, lse = _forward(q, k, v, mask, scale)
    seen = []
    real = GB.heads_first_default
    monkeypatch.setattr(GB, "heads_first_default", lambda *a, **kw: seen.append(real(*a, **kw)) or seen[-1])
    grads = [torch.full(t.shape, float("nan"), dtype=q.dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(persistent=kv, **opts),
                     dq=grads[0], dk=grads[1], dv=grads[2])
    assert seen == [True], "the GQA call was not numbered head first"
    _check_grads(q, k, v, do, grads, True, scale)


def test_a_kept_call_plans_key_holds_the_numbering_switches(monkeypatch):
    """``prefill_backward``'s kept plan replays the Gluon backward's launches without asking it again, so every module
    switch that changes a call's numbering or launches is part of the plan's key: changing one makes a new plan."""
    from attnlab.gpu import prefill_bwd

    for name, other in (("L2_CHUNKS", False), ("L2_CHUNKS_MIN_GROUP", 1), ("L2_CHUNK_MB", 1), ("L2_CHUNK_SLACK", 0.5), ("HEAD_CHUNK_MB", 7),
                        ("HEAD_CHUNK_FROM_D", 64), ("TAIL_PIECES", False), ("TAIL_FROM_D", 64),
                        ("HEADS_FIRST_WAVES", 3)):
        before = prefill_bwd._gluon_switches()
        with monkeypatch.context() as m:
            m.setattr(GB, name, other)
            assert prefill_bwd._gluon_switches() != before, name
        assert prefill_bwd._gluon_switches() == before
