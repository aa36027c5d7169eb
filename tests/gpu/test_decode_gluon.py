"""The Gluon split kernel of Flash-Decoding (attnlab.gpu.decode_gluon): each split's first tiles copied into
shared memory before the sequence's length arrives.

Triton's interpreter cannot run Gluon. On the CPU these tests build the kernels for sm_90 (Triton's own ptxas, no
GPU) and read what the compiler made: every copy of the ring's first tiles issued before the length's load, whole
16-byte copies, no register spill, the ring's shared memory; they check the reading of the PTX on made-up code, and
the dispatch: which calls the Gluon kernel takes, the fall back to the Triton kernel, the refusal of a forced
configuration. On a GPU the kernel runs, is held to the float64 criterion of the Triton kernel on awkward shapes
(empty and one-key sequences, a cache whose rows past the length hold NaN, odd group sizes, several queries,
every split count), and its CUDA graphs give its eager calls' bits.
"""

import math
from dataclasses import replace

import pytest
import torch
from tests.helpers import graph_after_eager, sm90_reports

import attnlab
from attnlab.variants import Mask

triton = pytest.importorskip("triton")
from tests.gpu.test_decode import _check_against_reference  # noqa: E402

from attnlab.gpu import decode, decode_config, decode_gluon, decode_plan  # noqa: E402
from attnlab.gpu.decode_config import DecodeConfig  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
needs_gluon = pytest.mark.skipif(not decode_gluon.HAVE_GLUON, reason="this triton has no Gluon")
on_gpu = pytest.mark.skipif(not (DEV == "cuda" and decode_gluon.HAVE_GLUON
                                 and torch.cuda.get_device_capability()[0] == 9),
                            reason="needs a Hopper GPU and Gluon")

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")


def _copies_per_tile(block_n: int, block_d: int, num_warps: int = 4) -> int:
    """16-byte copies per thread for one tile of K or V."""
    return block_n * block_d * 2 // 16 // (32 * num_warps)


# -- the sm_90 builds (any machine) ----------------------------------------------------------------------------

BUILDS = [  # keyword arguments of compile_sm90 besides D and dtype
    dict(),  # 32/8 heads: 4 rows, every split merged by the last program
    dict(merge=0, has_seqlens=False),  # one split, no lengths: the answer stored directly
    dict(merge=1, group_rows=7, queries=3, causal=False),  # 21 rows (BLOCK_M 32), partials for the merge kernel
    dict(group_rows=8, queries=4),  # 32 rows, the most the Gluon kernel takes
    dict(group_rows=1, evict="evict_first", trigger=True, wait=True),  # MHA, the loads' cache policy, a dependent launch
    dict(block_n=64, stages=5),  # another ring: smaller tiles, more of them
    dict(stages=2),  # the shortest ring: one tile in flight
]


@needs_gluon
def test_builds_for_sm90_with_the_first_tiles_on_their_way_before_the_length():
    """Every build, D = 64 and 128, bfloat16 and float16: all the copies of the ring's first STAGES − 1 tiles (K and
    V, whole 16-byte copies) come before the load of the length in the PTX, so none of them waits for it; mma.sync
    for both products; no spill; shared memory = the ring (``RING_STAGES`` K and V tiles), P̃'s tile and a little scratch,
    within the H100/H200's 227 KB."""
    cases = [dict(D=D, dtype=dt, **b) for D in (64, 128) for b in BUILDS
             for dt in (("bfloat16", "float16") if not b else ("bfloat16",))]
    for case, rep in zip(cases, sm90_reports("decode_gluon", [dict(c) for c in cases])):
        D, block_n = case["D"], case.get("block_n", 128)
        stages = case.get("stages", decode_gluon.RING_STAGES)
        assert rep["prologue_copies"] == (stages - 1) * 2 * _copies_per_tile(block_n, D), (case, rep)
        assert rep["copies_before_length"] == rep["prologue_copies"], (case, rep)
        if rep["stack"] is not None and case.get("has_seqlens", True):  # cuobjdump at hand: the SASS's order too
            assert rep["sass_copies_before_length"] == rep["prologue_copies"], (case, rep)
        if case == dict(D=128, dtype="bfloat16"):  # the default build: its shared memory, as the docs quote it
            from tests.helpers import ROOT, notes_section

            kib = f"{rep['smem_kb']:.0f} KiB of shared memory"
            assert kib in notes_section("NOTES-decode.md", "## v29"), kib
            assert kib in " ".join((ROOT / "docs" / "decode.md").read_text().split()), kib
        assert rep["copy_bytes"] == [16], (case, rep)
        assert rep["mma"] > 0 and rep["ldmatrix"] > 0, (case, rep)
        assert rep["gdc_triggers"] == (1 if case.get("trigger") else 0), (case, rep)
        assert rep["gdc_waits"] == (1 if case.get("wait") else 0), (case, rep)
        ring_kb = 2 * stages * block_n * D * 2 / 1024
        p_kb = max(16, 1 << (case.get("group_rows", 4) * case.get("queries", 1) - 1).bit_length()) * block_n * 2 / 1024
        assert ring_kb + p_kb <= rep["smem_kb"] <= min(ring_kb + p_kb + 8, 227), (case, rep)  # the ring, P̃'s tile
        if rep["stack"] is not None:
            assert rep["loop"]["ldl"] == 0, (case, rep)  # nothing reloaded in the K/V loop
            # the one exception: triton 3.9 keeps a word of the shortest ring's D = 128 build on the stack, reloaded
            # once, after the loop (since v33's merge layouts; triton 3.6, the GPU machines', spills nothing)
            spills = case == dict(D=128, dtype="bfloat16", stages=2) and triton.__version__.startswith("3.9.")
            assert rep["stack"] <= (8 if spills else 0), (case, rep)


@needs_gluon
def test_the_merge_kernel_builds_with_and_without_the_dependent_launch_wait():
    """The merge kernel (the in-kernel merge's arithmetic as a kernel of its own): with PDL its PTX waits
    (griddepcontrol.wait), without it not; no copies, no spill."""
    cases = [dict(D=D, dtype="bfloat16", kernel="merge", pdl=pdl, merge_rows=r) for D in (64, 128)
             for pdl, r in ((False, 1), (True, 4))]
    reps = sm90_reports("decode_gluon", [dict(c) for c in cases])
    for case, rep in zip(cases, reps):
        assert rep["prologue_copies"] == 0 and rep["mma"] == 0, (case, rep)
        assert rep["gdc_waits"] == (1 if case["pdl"] else 0), (case, rep)
        if rep["stack"] is not None:
            assert rep["stack"] == 0, (case, rep)


@needs_gluon
def test_the_merge_builds_without_spill_at_the_rows_a_plan_takes():
    """The Gluon merge at the rows per round trip a plan takes (``decode_plan.merge_rows``: the group's rows, no more
    than 128 floats of partials a thread), few splits and many: no spill (its layout spreads lanes and warps over the
    rows where the splits are few)."""
    from attnlab.gpu.decode_plan import merge_rows

    cases = [dict(D=D, dtype="bfloat16", kernel="merge", splits=S, merge_rows=merge_rows(G, 1 << (S - 1).bit_length(), D, 4))
             for D in (64, 128) for S, G in ((2, 32), (16, 4), (64, 32))]
    for case, rep in zip(cases, sm90_reports("decode_gluon", [dict(c) for c in cases])):
        if rep["stack"] is not None:
            assert rep["stack"] == 0, (case, rep)


@needs_gluon
def test_rows_beyond_the_gluon_kernels_limit_would_spill():
    """``MAX_ROWS``: 32 query rows per K/V head build without a spill at D = 128 (the test above), 64 spill."""
    (rep,) = sm90_reports("decode_gluon", [dict(D=128, dtype="bfloat16", group_rows=16, queries=4)])
    if rep["stack"] is None:
        pytest.skip("this triton ships no cuobjdump")
    assert 16 * 4 > decode_gluon.MAX_ROWS and rep["stack"] > 0, rep


PTX = """
\tld.param.b64 \t%rd10, [k_param_1];
\tld.param.b64 \t%rd11, [k_param_3];
\tmad.wide.u32 \t%rd20, %r2, 4, %rd11;
{copies_a}
\tld.global.b32 {{ %r30 }}, [ %rd20 + 0 ];
\tmin.s32 \t%r31, %r30, %r5;
{copies_b}
\tcp.async.commit_group;
$L__BB0_2:
\tcp.async.wait_group \t1;
\tcp.async.cg.shared.global [ %r9 + 0 ], [ %rd40 + 0 ], 0x10, %r31;
"""
COPY = "\tcp.async.cg.shared.global [ %r{n} + 0 ], [ %rd{n} + 0 ], 0x10, %r7;"


@pytest.mark.parametrize("first,second", [(3, 0), (0, 3), (2, 2)])
def test_the_copies_before_the_length_are_read_off_the_ptx_in_program_order(first, second):
    """``copies_before_length`` counts the copies before the first global load from the SEQLENS parameter's
    address (the third parameter, followed through the address arithmetic), and every copy before the first
    wait; a copy after the load counts only in the second."""
    ptx = PTX.format(copies_a="\n".join(COPY.format(n=50 + i) for i in range(first)),
                     copies_b="\n".join(COPY.format(n=60 + i) for i in range(second)))
    assert decode_gluon.copies_before_length(ptx) == (first, first + second)
    # without a length to load, every copy before the wait is before it
    assert decode_gluon.copies_before_length(ptx.replace("k_param_3", "k_param_4")) == (first + second,) * 2


# -- the dispatch (any machine) --------------------------------------------------------------------------------


def _why(monkeypatch, **over):
    """``gluon_unsupported`` for a supported 32/8-head call on a CUDA device of capability 9.0 outside the interpreter,
    with ``over`` changed."""
    from attnlab import _runtime
    from attnlab.gpu import config

    capability = over.pop("capability", (9, 0))
    monkeypatch.setattr(_runtime, "interpret_mode", lambda: False)
    monkeypatch.setattr(config, "device_capability", lambda device: capability)
    kw = dict(device=torch.device("cuda", 0), dtype=torch.bfloat16, head_dim=128, rows=4, paged=False,
              k_strides=(8 * 4096 * 128, 4096 * 128, 128, 1), v_strides=(8 * 4096 * 128, 4096 * 128, 128, 1),
              k_ptr=1 << 20, v_ptr=1 << 21, mask=Mask(-1, 0), softcap=None, slopes=None, strided=True)
    return decode_gluon.gluon_unsupported(**(kw | over))


@needs_gluon
@pytest.mark.parametrize("over,why", [
    ({}, None),
    (dict(head_dim=64, rows=32), None),
    (dict(device=torch.device("cpu")), "a device other than a CUDA GPU"),
    (dict(capability=(8, 0)), "a GPU other than a Hopper one"),
    (dict(capability=(10, 0)), "a GPU other than a Hopper one"),
    (dict(block_n=8), "tiles of 8 keys"),
    (dict(block_n=96), "tiles of 96 keys"),
    (dict(dtype=torch.float32), "float16 and bfloat16 only"),
    (dict(head_dim=96), "head dim 96"),
    (dict(rows=33), "33 query rows"),
    (dict(paged=True), "a paged cache"),
    (dict(strided=False), "strided order only"),
    (dict(k_strides=(8 * 4096 * 136, 4096 * 136, 136, 1)), "whole 16-byte units"),  # rows of 136: 8 | 136, 16 ∤ 136
    (dict(v_strides=(128, 8 * 4096 * 128, 8 * 128, 2)), "whole 16-byte units"),
    (dict(k_ptr=(1 << 20) + 8), "whole 16-byte units"),
    (dict(mask=Mask(1023, 0)), "a left window edge"),
    (dict(softcap=30.0), "softcap"),
    (dict(slopes=torch.ones(1, 32)), "ALiBi"),
    (dict(block_n=64, stages=6), None),  # 192 KiB
    (dict(stages=4), "a ring of 4 tiles of 128 keys (256 KiB"),
    (dict(head_dim=64, stages=7), "a ring of 7 tiles of 128 keys (224 KiB"),
    (dict(stages=1), "a ring of 1 tiles"),
])
def test_which_calls_the_gluon_kernel_takes(monkeypatch, over, why):
    got = _why(monkeypatch, **over)
    assert got is None if why is None else why in got, got


def test_gluon_split_sends_contiguous_caches_at_64_and_128_to_gluon(monkeypatch):
    """``GLUON_SPLIT`` (off by default) gives contiguous caches at D = 64 and 128 the Gluon configuration on a GPU
    (the interpreter keeps its own); paged caches and other head dims keep the Triton kernels."""
    monkeypatch.setattr(decode_config, "interpret_mode", lambda: False)
    assert decode_config.GLUON_SPLIT is False
    assert decode_config.kernel_config(128).kernel == "triton"
    monkeypatch.setattr(decode_config, "GLUON_SPLIT", True)
    for D in (64, 128):
        cfg = decode_config.kernel_config(D)
        assert cfg == replace(decode_config.decode_configs(D)["large"], kernel="gluon")
        assert cfg.key == decode_config.decode_configs(D)["large"].key  # the same split-model calibration
    assert decode_config.kernel_config(256).kernel == "triton"
    assert decode_config.kernel_config(128, page_size=256, batch_heads=132).kernel == "triton"


def _small(dtype=torch.bfloat16):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 1, 64, dtype=dtype, device=DEV)
    k, v = (torch.randn(2, 2, 100, 64, dtype=dtype, device=DEV) for _ in range(2))
    return q, k, v, torch.tensor([100, 37], dtype=torch.int32, device=DEV)


@pytest.mark.skipif(DEV == "cuda", reason="the fall back of a device the Gluon kernel cannot run on")
def test_a_default_gluon_configuration_falls_back_and_a_forced_one_is_refused(monkeypatch):
    """A plan whose default configuration asks for Gluon on a call it does not take (here the interpreter) runs the
    Triton kernels, with their numbers to the bit; a configuration the caller forces is refused with the reason,
    before any work; an unknown kernel name is refused."""
    from attnlab.gpu import flash_decode_triton

    q, k, v, lens = _small()
    decode.clear_plans()
    want = flash_decode_triton(q, k, v, cache_seqlens=lens)
    base = decode_config.kernel_config(64)
    monkeypatch.setattr(decode_plan, "_config_for", lambda dims, dev: replace(base, kernel="gluon"))
    decode.clear_plans()
    got = flash_decode_triton(q, k, v, cache_seqlens=lens)
    (plan,) = decode_plan._PLANS.values()
    assert plan.cfg.kernel == "triton" and plan.split_fn is not getattr(decode_gluon, "_decode_split_gluon", None)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for kernel, msg in (("gluon", "the Gluon split kernel does not take a device other than a CUDA GPU"),
                        ("cuda", "must be 'triton' or 'gluon'")):
        with pytest.raises(ValueError, match=msg):
            flash_decode_triton(q, k, v, cache_seqlens=lens, config=replace(base, kernel=kernel))
    decode.clear_plans()


def test_a_gluon_plan_builds_its_launches_and_arguments(monkeypatch):
    """A plan of a call the Gluon kernel takes (pretended here: the interpreter is no GPU; nothing is launched): the
    split and merge kernels are the Gluon ones, launched without Triton's ``num_stages`` (the ring is the kernel's
    RING, the configuration's ``num_stages``, last in its arguments); the fused build (the eager calls' and the large
    graphs') and with ``split_pdl`` the dependent launch's (WAIT, TRIGGER, ``launch_pdl``) are made too, as are those of
    a plan resized from it."""
    from attnlab._checks import check_decode_inputs

    monkeypatch.setattr(decode_gluon, "gluon_unsupported", lambda **kw: None)
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: True)
    monkeypatch.setattr(decode_plan, "split_pdl", lambda device, plan_bytes=None: "trigger")
    q = torch.randn(1, 8, 1, 128, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 4096, 128, dtype=torch.bfloat16) for _ in range(2))
    lens = torch.tensor([4000], dtype=torch.int32)
    cfg = DecodeConfig(block_n=128, block_d=128, num_stages=3, kernel="gluon")
    dims = check_decode_inputs(q, k, v, lens, None, check_values=False)
    plan = decode_plan.DecodePlan(q, k, v, dims, cache_seqlens=lens, block_table=None, num_splits=8, mask=Mask(-1, 0),
                                  scale=128 ** -0.5, softcap=None, slopes=None, config=cfg)
    assert plan.split_fn is decode_gluon._decode_split_gluon and plan.merge_fn is decode_gluon._decode_merge_gluon
    assert plan.num_splits == 8 and plan.fused and plan.merge == 1
    for launcher in (plan.split, plan.fused_split, plan.eager_split, plan.merge_launch):
        assert "num_stages" not in launcher.options and launcher.options["num_warps"] == 4
    assert plan.split.kernel is plan.fused_split.kernel is plan.eager_split.kernel is decode_gluon._decode_split_gluon
    assert plan.merge_launch.kernel is decode_gluon._decode_merge_gluon
    assert plan.eager_split.options["launch_pdl"] is True and "launch_pdl" not in plan.fused_split.options
    names = decode_gluon._decode_split_gluon.arg_names
    for tail in (plan.tail, plan.fused_tail, plan.eager_tail):
        assert len(tail) + 11 == len(names) and tail[-1] == cfg.num_stages  # RING
    wait = names.index("WAIT") - 11
    assert (plan.tail[wait], plan.fused_tail[wait], plan.eager_tail[wait]) == (False, False, True)
    k2, v2 = (torch.randn(1, 2, 4100, 128, dtype=torch.bfloat16) for _ in range(2))
    grown = plan.resized(k2, v2)
    assert grown.capacity == 4100 and grown.eager_tail[-1] == cfg.num_stages and grown.eager_tail[wait] is True
    assert grown.eager_split.options["launch_pdl"] is True


# -- on a GPU --------------------------------------------------------------------------------------------------


@pytest.fixture
def gluon_split(monkeypatch):
    """``GLUON_SPLIT`` on for the test, the plans made anew before and after."""
    monkeypatch.setattr(decode_config, "GLUON_SPLIT", True)
    decode.clear_plans()
    yield
    decode.clear_plans()


def _plans_kernels() -> set:
    return {p.split_fn for p in decode_plan._PLANS.values()}


GPU_CASES = [
    # B, H, Hkv, Nq, D, L, lens, splits, dtype, causal
    (1, 32, 8, 1, 128, 32768, [32768], None, torch.bfloat16, True),  # the shape, the model's split count
    (1, 32, 8, 1, 64, 32768, [30001], None, torch.bfloat16, True),  # D = 64, a ragged last tile
    (1, 28, 4, 1, 128, 20000, [20000], None, torch.float16, True),  # G = 7, a length no tile divides
    (1, 64, 8, 1, 128, 8192, [8192], None, torch.bfloat16, True),  # G = 8
    (3, 8, 8, 1, 64, 1000, [0, 1, 999], 3, torch.bfloat16, True),  # MHA: an empty sequence, one key
    (2, 6, 1, 3, 128, 777, [777, 2], 7, torch.float16, True),  # MQA, 3 queries (18 rows), a length below Nq
    (2, 8, 2, 4, 64, 3000, [3000, 1500], 64, torch.bfloat16, False),  # non-causal, more splits than some need
    (1, 16, 4, 1, 128, 300, [300], 1000, torch.bfloat16, True),  # splits capped at one per tile
    (2, 32, 8, 1, 128, 4096, [4096, 100], 1, torch.bfloat16, True),  # one split: no merge
]


@pytest.mark.gpu
@on_gpu
@pytest.mark.parametrize("B,H,Hkv,Nq,D,L,lens,splits,dtype,causal", GPU_CASES)
def test_gpu_gluon_decode_matches_reference(gluon_split, B, H, Hkv, Nq, D, L, lens, splits, dtype, causal):
    """The Gluon kernels against the float64 oracle (the Triton kernel's criterion), the cache's rows past each
    length full of NaN (read by the first tiles' copies, never reaching the output); the call took the Gluon
    kernel."""
    torch.manual_seed(B * 1000 + L)
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV)
    k, v = (torch.randn(B, Hkv, L, D, dtype=dtype, device=DEV) for _ in range(2))
    for b, n in enumerate(lens):
        k[b, :, n:] = math.nan
        v[b, :, n:] = math.nan
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out, lse = attnlab.flash_decode(q, k, v, cache_seqlens=seqlens, num_splits=splits, causal=causal)
    assert _plans_kernels() == {decode_gluon._decode_split_gluon}
    _check_against_reference(q, k, v, lens, out, lse, causal=causal)
    again = attnlab.flash_decode(q, k, v, cache_seqlens=seqlens, num_splits=splits, causal=causal)  # the kept plan
    assert torch.equal(again[0], out) and torch.equal(again[1], lse)


@pytest.mark.gpu
@on_gpu
def test_gpu_gluon_full_caches_without_lengths_and_the_fall_back(gluon_split):
    """Without lengths (every key) the Gluon kernel reads the whole cache; a paged cache, a window's left edge
    and 64 rows per K/V head take the Triton kernel, under the same switch, and every answer meets the criterion."""
    from attnlab.kvcache import PagedKVCache

    q = torch.randn(2, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(2, 8, 5000, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    out, lse = attnlab.flash_decode(q, k, v)
    assert _plans_kernels() == {decode_gluon._decode_split_gluon}
    _check_against_reference(q, k, v, [5000, 5000], out, lse)
    decode.clear_plans()
    o_w, _ = attnlab.flash_decode(q, k, v, window=(1000, 0))
    q64 = torch.randn(2, 64, 1, 128, dtype=torch.bfloat16, device=DEV)
    k1, v1 = k[:, :1].contiguous(), v[:, :1].contiguous()
    out64, lse64 = attnlab.flash_decode(q64, k1, v1)
    _check_against_reference(q64, k1, v1, [5000, 5000], out64, lse64)
    cache = PagedKVCache.from_dense(k, v, page_size=256, shuffle=True)
    o_p, _ = attnlab.flash_decode(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                  block_table=cache.block_table)
    assert decode_gluon._decode_split_gluon not in _plans_kernels()
    torch.testing.assert_close(o_p, out, atol=2e-2, rtol=0)
    ref = attnlab.flash_decode(q, k, v, window=(1000, 0), num_splits=1)  # (Triton either way)
    torch.testing.assert_close(o_w, ref[0], atol=2e-2, rtol=0)


@pytest.mark.gpu
@on_gpu
@pytest.mark.parametrize("L", [512, 32768])
def test_gpu_gluon_graphs_give_the_eager_bits(gluon_split, L):
    """A Gluon plan's eager calls merge in the split kernel; a CUDA graph captured after them holds the Gluon merge
    kernel (a small read) or the split kernel alone (a large one): the replay equals the eager call to the bit."""
    q = torch.randn(2, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(2, 8, L, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([L, L * 3 // 5], dtype=torch.int32, device=DEV)

    def gluon_pair_ran(plan):
        assert plan.fused and plan.pair_ran and plan.split_fn is decode_gluon._decode_split_gluon
        assert plan.merge_launch.kernel is decode_gluon._decode_merge_gluon

    (out, lse), want = graph_after_eager(lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens, num_splits=4), q,
                                         gluon_pair_ran)
    assert torch.equal(out, want[0]) and torch.equal(lse, want[1])


@pytest.mark.gpu
@on_gpu
def test_gpu_a_forced_gluon_configuration_runs_and_matches_the_triton_kernel():
    """``flash_decode_triton(config=DecodeConfig(..., kernel="gluon"))`` runs the Gluon kernel whatever the switch, with
    the configuration's ring (``block_n`` keys a tile, ``num_stages`` tiles); its answer is the Triton kernel's within
    the rounding of the two kernels' orders; a ring larger than ``RING_MAX_BYTES`` is refused."""
    from attnlab.gpu import flash_decode_triton

    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(1, 8, 9000, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([8999], dtype=torch.int32, device=DEV)
    cfg = decode_config.kernel_config(128)
    decode.clear_plans()
    want = flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=16, config=cfg)
    for gcfg in (replace(cfg, kernel="gluon"), replace(cfg, kernel="gluon", block_n=64, num_stages=5)):
        got = flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=16, config=gcfg)
        torch.testing.assert_close(got[0].float(), want[0].float(), atol=1e-2, rtol=0)
        torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=0)
    assert decode_gluon._decode_split_gluon in _plans_kernels()
    assert isinstance(cfg, DecodeConfig)
    with pytest.raises(ValueError, match="a ring of 4 tiles of 128 keys"):  # 256 KiB: more than a ring may take
        flash_decode_triton(q, k, v, cache_seqlens=lens, config=replace(cfg, kernel="gluon", num_stages=4))
    decode.clear_plans()


def test_the_triton_split_kernel_builds_with_the_dependent_launch_wait_and_its_shared_memory():
    """The Triton split kernel's sm_90 builds (the large configuration): with WAIT one ``griddepcontrol.wait``, with
    TRIGGER one ``launch_dependents``, none otherwise; its shared memory, which NOTES-decode v26 sets beside the Gluon
    ring's (136 KiB at D = 128: one program per SM; at D = 64 three fit the 227 KiB)."""
    from tests.helpers import notes_section

    cases = [dict(D=D, dtype="bfloat16") for D in (64, 128)] + [dict(D=128, dtype="bfloat16", wait=True),
                                                                   dict(D=64, dtype="bfloat16", wait=True, trigger=True)]
    reps = sm90_reports("decode_kernels", [dict(c) for c in cases])
    for case, rep in zip(cases, reps):
        assert rep["gdc_waits"] == int(case.get("wait", False)) and rep["gdc_triggers"] == int(case.get("trigger", False))
    kb64, kb128 = reps[0]["smem_kb"], reps[1]["smem_kb"]
    assert 227 // kb64 == 3 and 227 // kb128 == 1
    text = notes_section("NOTES-decode.md", "## v26")
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    assert f"as the Triton kernel's {kb128:.0f} KiB" in text and f"where the Triton kernel fits {words[227 // kb64]}" in text


def test_the_notes_quote_the_builds_copy_counts_and_ring_sizes():
    """NOTES-decode v26 quotes, per thread, the copies issued before the length and the ring's shared memory at
    D = 128 and 64: what ``RING_STAGES`` and the tiles make (the builds' test above holds the compiler to them)."""
    from tests.helpers import notes_section

    text = notes_section("NOTES-decode.md", "## v26")
    c128, c64 = ((decode_gluon.RING_STAGES - 1) * 2 * _copies_per_tile(128, D) for D in (128, 64))
    kib128, kib64 = (2 * decode_gluon.RING_STAGES * 128 * D * 2 // 1024 for D in (128, 64))
    assert f"{c128} 16-byte copies a thread at D = 128, {c64} at D = 64" in text
    assert f"the ring, {kib128} KiB at D = 128" in text and f"and {kib64} KiB at D = 64" in text
    assert f"up to {decode_gluon.MAX_ROWS} query rows per K/V head" in text


def test_the_notes_quote_the_lengths_cost_from_the_recorded_runs():
    """NOTES-decode v26's account of what the lengths cost the Triton kernel under CUDA graphs — the same call with
    and without them in decode-host runs 31–36, by shape — and the standing spans against cuDNN it quotes."""
    import json

    from tests.helpers import ROOT, load_script, notes_section

    text = notes_section("NOTES-decode.md", "## v26")
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"decode-host-h200-run{n}.json").read_text())
            for n in range(31, 37)}
    cost: dict = {}
    for run in runs.values():
        rows: dict = {}
        for r in run["speed"]:
            rows.setdefault((r["B"], r["H"], r["L"], r["D"]), {})[r["provider"]] = r["graph_us"]
        for (B, _H, L, _D), by in rows.items():
            kind = "batch 8" if B > 1 else "32K" if L == 32768 else "small"
            cost.setdefault(kind, []).append(by["attnlab"] - by["attnlab-full"])
    span = {k: f"{min(v):.2f}–{max(v):.2f}" for k, v in cost.items()}
    assert (f"{span['small']} µs at 64/8 heads over 8K keys and 28/4 over 20,000, {span['32K']} µs at 32/8 over 32K "
            f"(D = 128 and 64) and {span['batch 8']} µs at batch 8") in text
    card = load_script("benchmarks/scorecard.py")
    _, lines = card.standing({}, {f"decode-host-h200-run{n}.json": r for n, r in runs.items()})
    spans = {ln["what"]: ln["measured"].split("×")[0] for ln in lines}
    with_lengths = next(v for k, v in spans.items() if "with the lengths" in k)
    without = next(v for k, v in spans.items() if "without the lengths" in k)
    assert f"with the lengths ({with_lengths}× cuDNN's speed on the batch-1 shapes) and without them ({without}×)" in text


def test_the_notes_quote_the_eager_bar_as_the_recorded_runs_give_it():
    """NOTES-decode v27's account of the eager D = 64 bar: the span of eager over graph time in decode-host runs 31–36
    (as ``scorecard.py --standing`` computes it) and of the graph's own time there."""
    import json

    from tests.helpers import ROOT, load_script, notes_section

    runs = {f"decode-host-h200-run{n}.json": json.loads(
        (ROOT / "benchmarks" / "data" / f"decode-host-h200-run{n}.json").read_text()) for n in range(31, 37)}
    _, lines = load_script("benchmarks/scorecard.py").standing({}, runs)
    eager = next(ln["measured"] for ln in lines if ln["what"] == "decode called eagerly, batch 1 over 32K keys at D = 64")
    graph = [r["graph_us"] for run in runs.values() for r in run["speed"]
             if r["provider"] == "attnlab" and r["D"] == 64 and r["L"] == 32768]
    text = notes_section("NOTES-decode.md", "## v27")
    assert (f"the eager call took {eager.split('×')[0]}× the graph's time in decode-host runs 31–36 while the graph's "
            f"time held at {min(graph):.1f}–{max(graph):.1f} µs") in text


def test_the_notes_quote_the_two_kv_loops_and_the_merged_bytes():
    """NOTES-decode's examination of decode-host run 37: the Triton and Gluon split kernels' K/V loops (sm_90 builds,
    32/8 heads) hold the same products and copies; the Gluon loop's extra length is mostly shared loads and stores; and
    the Gluon kernel's loss under graphs grows with the partial results a group's last program merges."""
    import json
    import statistics

    from tests.helpers import ROOT, flat, notes_section

    cases = [dict(D=D, dtype="bfloat16") for D in (128, 64)]
    tri, glu = (sm90_reports(m, [dict(c) for c in cases]) for m in ("decode_kernels", "decode_gluon"))
    if tri[0]["loop"] is None or glu[0]["loop"] is None:
        pytest.skip("this triton ships no cuobjdump")
    text = flat(notes_section("NOTES-decode.md", "## v26, examined after run 37"))
    # the build before v29 as triton 3.6 made it, read on the GPU in decode-host run 41 (its test failed, quoting it)
    log = (ROOT / "benchmarks" / "data" / "decode-host-run41" / "tests.log").read_text()
    import re

    old = re.search(r"'\((\d+) against (\d+) instructions at D = 128, (\d+) against (\d+) at D = 64\)' in ", log)
    assert old and (f"in triton 3.6's, read on the GPU in decode-host run 41, {old[1]} against {old[2]} at D = 128, "
                    f"{old[3]} against {old[4]} at D = 64)") in text
    (t128, t64), (g128, g64) = ([r["loop"] for r in reps] for reps in (tri, glu))
    for t, g in ((t128, g128), (t64, g64)):
        assert (t["hmma"], t["ldgsts"]) == (g["hmma"], g["ldgsts"]) and g["instructions"] > t["instructions"]
    assert (f"{g128['hmma']} HMMA and {g128['ldgsts']} LDGSTS at D = 128, {g64['hmma']} and {g64['ldgsts']} at "
            f"D = 64") in text
    shared = lambda r: r["lds"] + r["sts"]  # noqa: E731
    assert shared(g128) > shared(t128) and shared(g64) > shared(t64)
    # the instruction counts are the build's, so the notes quote them by triton version: the one running here must be
    # quoted as it builds (triton 3.9 on the CPU machines, 3.6 on the GPU ones)
    import triton

    version = ".".join(triton.__version__.split(".")[:2])
    if version not in ("3.9", "3.6"):
        pytest.skip(f"the notes quote the builds of triton 3.9 and 3.6, not {version}")
    # P̃ through shared memory by stmatrix (v29), as the Triton loop's
    assert g128["stsm"] == t128["stsm"] > 0 and g64["stsm"] == t64["stsm"] > 0
    if version == "3.9":  # (v33 quotes the build as the merge's newest layouts left it)
        now = flat(notes_section("NOTES-decode.md", "## v33"))
        assert (f"now {g128['instructions']} instructions at D = 128 against the Triton loop's {t128['instructions']}, "
                f"{g64['instructions']} against {t64['instructions']} at D = 64") in now
    run = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h100-run37.json").read_text())
    groups: dict = {}
    for r in run["kernel_ab"]:
        if "round" in r and r["length"] == r["L"]:
            groups.setdefault(((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), r["arm"]), []).append(r)
    points = []
    for (shape, arm), rs in groups.items():
        if arm == "gluon":
            loss = (statistics.median(r["graph_us"] for r in rs)
                    - statistics.median(r["graph_us"] for r in groups[shape, "triton"]))
            points.append((rs[0]["splits"] * shape[1] // shape[2] * shape[4] * 4 / 1024, shape[4], loss))
    points.sort()
    assert all(a[2] < b[2] for a, b in zip(points, points[1:]) if a[0] < b[0])  # the loss grows with the bytes
    assert (", ".join(f"{b:.0f}" for b, _, _ in points[:-1]) + f" and {points[-1][0]:.0f} KiB") in text
    assert (", ".join(f"{x:.2f}" for _, _, x in points[:-1]) + f" and {points[-1][2]:.2f} µs") in text
