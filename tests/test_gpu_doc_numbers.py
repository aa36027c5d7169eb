"""docs/gpu.md's measured numbers that the results modules do not already check: each computed from the recorded run
(benchmarks/data/) or the code constant it comes from, and looked for in the doc as the doc writes it, so that a
changed file or a retyped number fails here."""

from __future__ import annotations

import inspect
import json
import re
from collections import defaultdict

from tests.helpers import ROOT, doc_text, load_script, within_criterion

DATA = ROOT / "benchmarks" / "data"


def _rows(name: str) -> list[dict]:
    """benchmarks/data/``name``'s rows (the file's "rows", or the file itself where it is a list)."""
    data = json.loads((DATA / name).read_text())
    return data["rows"] if isinstance(data, dict) else data


def _switches(run: int) -> dict:
    """fwd-switches run ``run``'s rows by (row, D, build)."""
    return {(r["row"], r["D"], r["build"]): r for r in _rows(f"fwd-switches-h200-run{run}.json")}


def _gain(x: float) -> float:
    """A build's speed over its arm's (``vs_first``, the arm's speed over the build's) as a fraction faster."""
    return 1 / x - 1


def _pct(values, digits: int = 0) -> str:
    """A span of fractions as per cent, the doc's way: 3–5, or 1.5–4.4."""
    return f"{100 * min(values):.{digits}f}–{100 * max(values):.{digits}f}"


def _shape(B: int, N: int) -> str:
    """A benchmark row's shape as the doc writes it: 4 × 4K, or 16K for one sequence."""
    return f"{N // 1024}K" if B == 1 else f"{B} × {N // 1024}K"


def test_deterministic_writer_registers_and_variants_run_24():
    """The writer warp at the loader's registers (packed-det probe run 2: the build at 48 registers against the
    shipped one, in the same rounds) and variants run 24's deterministic rows."""
    probe = {r["variant"]: r["ms"] for r in _rows("packed-det-probe-h200-run2.json")}
    det, at48 = probe["deterministic"], probe["deterministic, writer at 48 registers"]
    assert at48 > det
    det24 = _rows("variants-h200-det-run24.json")
    det_tf = {(r["variant"], r["D"]): r["tflops"] for r in det24 if r["provider"] == "attnlab-det"}
    dense = [det_tf[r["variant"], r["D"]] / r["tflops"] for r in det24 if r["provider"] == "attnlab"]
    assert len(dense) == 4 and {r["variant"] for r in det24} == {"window", "alibi"}
    varlen = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in _rows("variants-h200-varlen-run24.json")}
    packed = varlen[128, "fwd_bwd", "attnlab-det"] / varlen[128, "fwd_bwd", "attnlab"]
    doc = doc_text("docs/gpu.md")
    assert (f"(at 48 it cost the packed backward {100 * (at48 / det - 1):.0f} %; variants run 24: "
            f"{min(dense):.2f}–{max(dense):.2f}× on the window and ALiBi rows, {packed:.2f}× on packed batches)") in doc


def test_host_time_of_a_backward_call_and_the_kept_plans():
    """A backward call's host time before plans (packed-probe run 7, "variants runs 11 and 12" in RESULTS) and the
    Gluon backward's host path from kept plans (varlen-profile runs 3–6: each step's inclusive µs a call)."""
    rows = _rows("packed-probe-h200-run7.json")
    dense = [r for r in rows if r["layout"].startswith("dense")]
    packed = [r["host_ms"] for r in rows if r["layout"].endswith("packed Gluon")]
    assert {r["causal"] for r in dense} == {False, True} and len(packed) == 4
    B, N = map(int, re.search(r"(\d+) x (\d+)", next(r["layout"] for r in rows if " x " in r["layout"])).groups())
    host = [r["host_ms"] for r in dense]
    doc = doc_text("docs/gpu.md")
    assert (f"A backward call still cost {min(host):.2f}–{max(host):.2f} ms of host time on an H200's host (dense, "
            f"{B} × {N:,} tokens, causal and not), {min(packed):.2f}–{max(packed):.2f} ms for a packed batch") in doc
    steps = {n: next(r["steps"] for r in _rows(f"varlen-profile-h200-run{n}.json")
                     if r["D"] == 128 and r["packed"] == "gluon") for n in (3, 4, 5, 6)}
    path = [steps[n]["prefill_gluon_bwd.gluon_backward"][0] for n in (3, 4)]
    call = {n: steps[n]["prefill_bwd.prefill_backward"][0] / 1000 for n in (3, 5, 6)}
    assert (f"The Gluon backward's host path fell from {path[0]:.0f} to {path[1]:.0f} µs a call, a whole packed "
            f"batch's backward from {call[3]:.2f} to {min(call[5], call[6]):.2f}–{max(call[5], call[6]):.2f} ms "
            f"(`benchmarks/varlen_profile.py --steps`, RESULTS.md varlen-profile runs 3–6)") in doc


def test_gluon_forward_switches_as_the_runs_measured_them():
    """The forward's row sums in the lanes (fwd-switches run 16: at D = 128 ``before`` differs from the shipped
    build by that switch alone), the masked blocks' bit mask (runs 9 and 10, against ``nolimits``) and each
    consumer group's own key blocks (runs 11–13, against ``noown``)."""
    from attnlab.gpu import prefill_gluon as G

    r16 = _switches(16)
    lanes = [1 / r["vs_first"] for (row, D, build), r in r16.items() if D == 128 and build == "before"]
    assert len(lanes) == 4 and min(lanes) > 1 and G.ROW_SUM_LANES is True
    doc = doc_text("docs/gpu.md")
    assert (f"it came out {min(lanes):.3f}–{max(lanes):.3f}× at D = 128 with the order reversed every other round "
            f"(RESULTS.md, \"Fwd-switches run 16\")") in doc
    limits = [_switches(n) for n in (9, 10)]
    packed = [_gain(x["varlen", D, "nolimits"]["vs_first"]) for x in limits for D in (64, 128)]
    window = [_gain(x["window", 64, "nolimits"]["vs_first"]) for x in limits]
    assert min(packed + window) > 0 and G.MASK_LIMITS == 2
    assert (f"(`prefill_gluon.MASK_LIMITS`; {_pct(packed)} % on packed batches, {_pct(window)} % on the D = 64 window, "
            f"RESULTS.md \"Fwd-switches runs 9 and 10\")") in doc
    own = [_gain(_switches(n)["window", 64, "noown"]["vs_first"]) for n in (11, 12, 13)]
    assert min(own) > 0 and G.OWN_BLOCKS is True
    assert (f"the D = 64 window runs {_pct(own, 1)} % faster (RESULTS.md, \"Variants runs 28–30, fwd-switches runs "
            f"11–13\"; run 13 times the builds in both orders)") in doc


def test_triton_backward_products_against_the_counted_flops():
    """The two-kernel backward's matrix products against the FLOP count's: the count is ``PASS_FACTOR["bwd"]`` times
    the forward's two products (S = QKᵀ and PV); the kernels make four in the dK/dV kernel (Sᵀ, dV, dPᵀ, dK) and three
    in the dQ kernel (S, dP, dQ)."""
    from attnlab.cost.flops import PASS_FACTOR

    counted = 2 * PASS_FACTOR["bwd"]
    made = 4 + 3
    doc = doc_text("docs/gpu.md")
    assert (f"That is {made / counted:.1f}× the tensor-core work of the counted {PASS_FACTOR['bwd']}× ({made} matrix "
            f"products where {counted:.0f} are counted)") in doc


def test_gluon_backward_numbering_masks_and_alibi():
    """The Gluon backward's section: the masked steps' bit mask at D = 128 (bwd-block-m runs 11 and 12), the dSᵀ
    tile's shape (the table's entries), heads first on a GQA layer (bwd-gluon-ablation runs 5 and 6), the shapes of
    the chunked numbering's rows, and ALiBi's backward (bwd-gluon-ablation runs 12 and 9)."""
    from attnlab.gpu import config as C
    from attnlab.gpu import prefill_gluon_bwd as GB

    doc = doc_text("docs/gpu.md")
    x = [{(r["row"], r["D"]): r["vs_first"] for r in _rows(f"bwd-block-m-h200-run{n}.json") if r["arm"] == "nolimits"}
         for n in (11, 12)]
    packed = [_gain(v) for xi in x for (row, D), v in xi.items() if D == 128 and row in ("pack128", "pack512", "varlen")]
    at64 = [_gain(v) for xi in x for (row, D), v in xi.items() if D == 64 and row in ("pack128", "pack512", "varlen")]
    assert len(packed) == 5 and min(packed) > 0 and max(abs(g) for g in at64) < 0.01  # "nothing at D = 64"
    assert (f"the forward's form, from D = {GB.MASK_LIMITS_FROM_D}: {_pct(packed)} % on packed batches there, nothing "
            f"at D = 64; RESULTS.md, \"Bwd-block-m runs 10–12\")") in doc
    entries = set(C._GLUON_BWD_TABLE.values())
    (keys,), (rows,) = {e.block_n1 for e in entries}, {e.block_m1 for e in entries}
    assert f"each writes its `dSᵀ` into half of a shared {keys} × {rows} tile" in doc
    assert "made either by the two in turns, whole (the table's choice at D = 64), or by both every step" in doc
    assert not C._GLUON_BWD_TABLE[64, False, "long"].dq_shared and C._GLUON_BWD_TABLE[128, False, "long"].dq_shared
    # heads first below HEADS_FIRST_WAVES programs per SM: the GQA layer numbered key blocks first, then the default
    (r5,) = [r for r in _rows("bwd-gluon-ablation-h200-run5.json")
             if (r["Hkv"], r["variant"]) == (8, "table's, key blocks first")]
    (r6,) = [r for r in _rows("bwd-gluon-ablation-h200-run6.json") if (r["Hkv"], r["variant"]) == (8, "gluon 0: shipped")]
    assert (r5["H"], r5["N"]) == (r6["H"], r6["N"]) and r6["ms"] < r5["ms"]
    assert (f"with fewer than {GB.HEADS_FIRST_WAVES} programs per SM: there every head's first key blocks, the longest "
            f"walks, start first (a GQA {r5['H']}/{r5['Hkv']} layer at {r5['N'] // 1024}K: {r5['ms']:.2f} → "
            f"{r6['ms']:.2f} ms, bwd-gluon-ablation runs 5 and 6)") in doc
    # the chunked numbering's rows (bwd-block-m runs 14 and 15; their ratios: tests/test_results_head_chunks.py)
    shapes = load_script("benchmarks/bwd_block_m.py").SHAPES
    rows3 = ", ".join(_shape(shapes[r][0], shapes[r][3]) for r in ("causal", "causal8k"))
    assert all(shapes[r][4] for r in ("causal", "causal8k", "long"))
    assert (f"faster at {rows3} and {_shape(shapes['long'][0], shapes['long'][3])} (`benchmarks/bwd_block_m.py`, runs 14 "
            "and 15;") in doc
    # ALiBi: the query term in L (run 12, with and without ALiBi), both terms in the loop before (run 9)

    def shipped(run, alibi):
        return next(r["ms"] for r in _rows(f"bwd-gluon-ablation-h200-run{run}.json")
                    if (r["D"], r["causal"], r["alibi"], r["variant"]) == (128, True, alibi, "gluon 0: shipped"))
    assert all(r["N"] == 16384 for n in (9, 12) for r in _rows(f"bwd-gluon-ablation-h200-run{n}.json"))
    assert shipped(12, True) <= shipped(12, False)
    assert (f"(D = 128: {shipped(12, True):.2f} against {shipped(12, False):.2f} ms at 16K, bwd-gluon-ablation run 12; "
            f"adding both terms inside the loop cost {100 * (shipped(9, True) / shipped(9, False) - 1):.0f} %, through "
            "spills, run 9)") in doc


def _sweep(run: int) -> dict:
    """prefill sweep ``run``'s backward TFLOP/s by (D, causal, N, candidate), the candidates that ran."""
    return {(r["D"], r["causal"], r["N"], r["config"]): r["tflops"] for r in _rows(f"prefill-sweep-h200-run{run}.json")
            if r["kind"] == "bwd" and "tflops" in r}


def _first(t: dict, D: int, causal: bool, Ns) -> float:
    """The best Gluon candidate over the best Triton one, their TFLOP/s summed over ``Ns``."""
    sums: dict = defaultdict(float)
    for (d, c, n, cand), v in t.items():
        if (d, c) == (D, causal) and n in Ns:
            sums[cand] += v
    return (max(v for k, v in sums.items() if k.startswith("gluon"))
            / max(v for k, v in sums.items() if not k.startswith("gluon")))


def test_gluon_backward_sweeps_builds_and_ablation():
    """Sweeps 14–16 (the Gluon backward first, the dQ lag), bwd-block-m runs 1 and 2 (without the lag against the
    Triton kernels; 128 query rows a step), prefill run 16's backward alone against cuDNN (derived at 16K from the
    forward and forward+backward times, as RESULTS does) and the ablation runs NOTES-prefill v5 and v6 read."""
    from attnlab.cost.flops import PASS_FACTOR
    from attnlab.gpu import config as C

    doc = doc_text("docs/gpu.md")
    gain = {D: [_first(_sweep(n), D, c, (4096, 16384)) - 1 for n in (14, 15) for c in (False, True)] for D in (64, 128)}
    assert min(gain[64] + gain[128]) > 0
    assert (f"put it first at every long key (sweeps 14 and 15, summed over 4K and 16K: +{100 * min(gain[64]):.0f} to "
            f"+{100 * max(gain[64]):.0f} % over the Triton backward at D = 64 and +{100 * min(gain[128]):.0f} to "
            f"+{100 * max(gain[128]):.0f} % at D = 128), and at 1K keys too but for D = 64 causal calls (sweep 16)") in doc
    s16 = _sweep(16)
    firsts = {(D, c, N): _first(s16, D, c, (N,)) > 1 for D in (64, 128) for c in (False, True) for N in (1024, 4096, 16384)}
    assert [k for k, first in firsts.items() if not first] == [(64, True, 1024)]
    # the dQ lag at D = 64: one step behind non-causal, two causal (a tie at the long keys)
    lag1 = [s16[64, False, N, "gluon-s2-tma-lag1"] / s16[64, False, N, "gluon-s2-tma"] - 1 for N in (16384, 4096, 1024)]
    lag2 = [s16[64, True, N, "gluon-s2-tma-lag2"] / s16[64, True, N, "gluon-s2-tma"] - 1 for N in (16384, 4096)]
    assert max(abs(g) for g in lag2) < 0.005
    assert (C._GLUON_BWD_TABLE[64, False, "long"].dq_lag, C._GLUON_BWD_TABLE[64, True, "long"].dq_lag) == (1, 2)
    assert (f"(`BwdConfig(dq_lag=...)`): +{100 * min(lag1):.0f} to +{100 * max(lag1):.0f} % non-causal, a tie causal "
            "(sweep 16)") in doc
    # bwd-block-m runs 1 and 2
    runs = {n: {(r["row"], r["arm"]): r for r in _rows(f"bwd-block-m-h200-run{n}.json")} for n in (1, 2)}
    r2 = runs[2]
    short = r2["short", "table"]["ms"] / r2["short", "g64lag0"]["ms"]
    varlen = r2["varlen", "table"]["ms"] / r2["varlen", "g64lag0"]["ms"]
    shapes = load_script("benchmarks/bwd_block_m.py").SHAPES
    B, _, _, N, causal = shapes["short"]
    assert causal and short > 1 and varlen > 1
    assert (f"the Gluon backward alone ran {B} × {N // 1024}K causal at {short:.2f}× the Triton kernels and a packed "
            f"batch of short documents at {varlen:.2f}× (`benchmarks/bwd_block_m.py`, RESULTS \"Bwd-block-m runs 1–5\")"
            in doc)
    m128 = [r["vs_first"] for run in runs.values() for (row, arm), r in run.items() if arm.startswith("g128")]
    assert max(m128) < 1 and all(e.block_m1 == 64 for e in C._GLUON_BWD_TABLE.values())
    # prefill run 16: the backward alone, derived as PASS_FACTOR["bwd"] / (fwd_bwd's factor / fwd_bwd − 1 / fwd)
    tf = {(r["D"], r["causal"], r["pass_"], r["provider"]): r["tflops"] for r in _rows("prefill-h200-run16.json")
          if r["N"] == 16384 and "tflops" in r}

    def bwd(D, c, p):
        return PASS_FACTOR["bwd"] / (PASS_FACTOR["fwd_bwd"] / tf[D, c, "fwd_bwd", p] - 1 / tf[D, c, "fwd", p])
    vs = [bwd(D, c, "attnlab") / bwd(D, c, "sdpa-cudnn") for D in (64, 128) for c in (False, True)]
    assert (f"spills under triton 3.6 and ran at {min(m128):.2f}–{max(m128):.2f}× the 64-row one. Against cuDNN the "
            f"backward alone was {min(vs):.2f}–{max(vs):.2f}× at 16K (prefill run 16)") in doc
    # the ablation: without the additions (v5's runs and v6's run 3), and the reduction against staging (v6, run 3)
    free = [r["tflops"] for name in ("bwd-gluon-ablation-h200.json", "bwd-gluon-ablation-h200-run3.json")
            for r in _rows(name) if r["D"] == 128 and r["variant"].startswith("gluon 1:")]
    v6 = {r["variant"].split(":")[0]: r["ms"] for r in _rows("bwd-gluon-ablation-h200-run3.json")}
    reduction = [v6["gluon 0"] - v6["gluon 6"], v6["gluon 7"] - v6["gluon 1"]]  # (staged: added or not; not staged)
    staging = v6["gluon 0"] - v6["gluon 1"] - max(reduction)
    assert len(free) == 3 and staging > max(reduction)
    assert (f"without the additions the loop runs at {min(free):.0f}–{max(free):.0f} TFLOP/s at D = 128; the reduction "
            f"itself costs {min(reduction):.1f}–{max(reduction):.1f} ms of {v6['gluon 0']:.1f}, staging the tile from "
            "registers the rest") in doc


def test_schedules_tests_and_benchmark_settings_are_the_codes():
    """Settings the doc quotes from the code: the persistent schedules kept, the interpreter's blocks, the tests'
    criterion, the slow-round threshold of ``prefill.py`` and the scorecard's D = 128 forward goal."""
    from attnlab.gpu import config as C
    from attnlab.gpu import prefill_gluon as G

    doc = doc_text("docs/gpu.md")
    assert f"A schedule is made on a shape's first call, in Python on the host, and kept for the next " \
           f"{G._SCHEDULES_KEPT} shapes." in doc
    fwd, bwd = C._INTERP_FWD, C._INTERP_BWD
    assert (fwd.block_m, fwd.block_n) == (bwd.block_m1, bwd.block_n1) == (bwd.block_m2, bwd.block_n2)
    assert f"the kernels run in Triton's CPU interpreter on small shapes with {fwd.block_m}×{fwd.block_n} blocks" in doc
    factor = re.search(r"err <= (\d+) \* err_ref \+ rounding_floor", inspect.getsource(within_criterion)).group(1)
    ulps = inspect.signature(within_criterion).parameters["ulps"].default
    assert (f"err ≤ {factor} × err(same-dtype PyTorch reference) + {ulps} units in the last place of the output's "
            "magnitude") in doc
    threshold = inspect.signature(load_script("benchmarks/prefill.py").slow_rounds).parameters["threshold"].default
    pct = f"{100 * (threshold - 1):.0f}"
    assert f"lists every round more than {pct} % over its row's fastest" in doc
    assert f"the rounds more than {pct} % slow were those the SM clock dropped in" in doc
    goal = load_script("benchmarks/scorecard.py").GOAL_TFLOPS
    assert f"the D = 128 forward against {goal:.0f} TFLOP/s" in doc


def test_performance_runs_35_and_36_against_cudnn():
    """The performance paragraph's last sentence: every median of prefill runs 35 and 36 against cuDNN's, as
    ``prefill.py report`` renders them (the section's own numbers: tests/test_results_tail_pieces.py)."""
    from tests.test_results_tail_pieces import _prefill

    tables = [_prefill(n)[1] for n in (35, 36)]
    fwd = [v[1] for t in tables for k, v in t.items() if k[3] == "fwd"]
    both = [v[1] for t in tables for k, v in t.items() if k[3] == "fwd+bwd"]
    assert min(fwd) > 1.0 and min(both) > 1.0 and len(fwd) == len(both)
    doc = doc_text("docs/gpu.md")
    assert (f"every median of runs 35 and 36 is above cuDNN's, forward {min(fwd):.2f}–{max(fwd):.2f}× and "
            f"forward+backward {min(both):.2f}–{max(both):.2f}×") in doc
