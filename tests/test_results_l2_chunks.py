"""NOTES-prefill v52's L2 paragraph and prediction: every number it quotes, from bwd_l2_sim.py's model, the prefill
run it names and bwd-gluon-ablation run 5's data."""

from __future__ import annotations

import functools
import json

from tests.helpers import ROOT, load_script, notes_section

sim = load_script("benchmarks/bwd_l2_sim.py")
DATA = ROOT / "benchmarks" / "data"
GQA = ("gqa-4k", "gqa-8k", "gqa-16k")


@functools.cache
def _sim(rows: tuple, Ds: tuple, orders: tuple) -> tuple:
    return tuple(sim.run(rows, Ds, orders))


@functools.cache
def _fit5() -> dict:
    return sim.fit(json.loads((DATA / "bwd-gluon-ablation-h200-run5.json").read_text())["rows"])


def _beta() -> float:
    return _fit5()["beta_ms_per_gb"]


@functools.cache
def _pred(fit: str) -> list:
    """Prefill run 36's causal GQA rows predicted with run 5's β ("run5") or run 13's ("run13")."""
    run36 = json.loads((DATA / "prefill-h200-run36.json").read_text())["rows"]
    return sim.predict(run36, _beta() if fit == "run5" else _beta13())


@functools.cache
def _fit13() -> dict:
    return sim.fit_chunks(json.loads((DATA / "bwd-block-m-h200-run13.json").read_text())["rows"])


def _beta13() -> float:
    return _fit13()["beta_ms_per_gb"]


def _v52() -> str:
    return notes_section("NOTES-prefill.md", "## v52 ")


def test_the_l2_paragraph_is_the_models():
    text = _v52()
    rows = {(r["row"], r["D"], r["order"]): r for r in _sim(GQA + ("causal", "causal8k", "long"), (64, 128),
                                                                 ("nol2", "l2", "hfirst", "kf1"))}
    mha_hf = [rows[(row, D, "hfirst")]["over_once"] for row in ("causal", "causal8k", "long") for D in (64, 128)]
    mha_t = [rows[(row, D, "nol2")]["over_once"] for row in ("causal", "causal8k", "long") for D in (64, 128)]
    assert f"moving {min(mha_hf):.1f}–{max(mha_hf):.1f}× their tiles' bytes against {min(mha_t):.1f}–{max(mha_t):.2f}×" \
        in text
    ab = json.loads((DATA / "bwd-gluon-ablation-h200-run5.json").read_text())["rows"]
    by = {(r["B"], r["H"], r["Hkv"], r["D"], r["N"], r["variant"]): r["ms"] for r in ab}
    cost = [by[k[:5] + ("table's, heads first",)] / by[k[:5] + ("table's, key blocks first",)] - 1
            for k in by if k[1] == k[2] and k[5] == "table's, heads first"]
    assert len(cost) == 4 and f"heads first cost {100 * min(cost):.0f}–{100 * max(cost):.0f} % on the MHA rows" in text
    table = [rows[(row, D, "nol2")] for row in GQA for D in (64, 128)]
    cand = [rows[(row, D, "l2")] for row in GQA for D in (64, 128)]
    assert (f"moves {min(r['over_once'] for r in table):.1f}–{max(r['over_once'] for r in table):.1f}× the bytes of "
            f"each tile once ({rows[('gqa-8k', 128, 'nol2')]['hbm_gb']:.2f} GB at 2 × 8K, D = 128") in text
    run36 = json.loads((DATA / "prefill-h200-run36.json").read_text())["rows"]
    ms = {r["pass_"]: r["ms"] for r in run36 if r["provider"] == "attnlab" and r["D"] == 128 and r["causal"]
          and r["N"] == 8192}
    bwd = ms["fwd_bwd"] - ms["fwd"]
    assert f"backward takes about {bwd:.1f} ms in prefill run 36" in text
    assert f"{rows[('gqa-8k', 128, 'nol2')]['hbm_gb'] / bwd:.1f} TB/s on average" in text
    worse = [c["balance"] - t["balance"] for t, c in zip(table, cand)]
    assert (f"1.0–{max(r['over_once'] for r in cand):.1f}×, at a list-schedule balance 0–{100 * max(worse):.1f} % worse "
            f"(better at 4K)") in text
    assert min(worse) <= 0 and all(c["over_once"] >= 1.0 for c in cand)
    assert all(w < 0 for w, r in zip(worse, cand) if r["row"] == "gqa-4k")


def test_the_fit_and_the_predictions_are_the_models():
    text = _v52()
    fitted = _fit5()
    mha = [r for r in fitted["rows"] if r["H"] == r["Hkv"]]
    gqa = [r for r in fitted["rows"] if r["H"] != r["Hkv"]]
    betas = [1000 * r["beta_ms_per_gb"] for r in mha]
    beta = fitted["beta_ms_per_gb"]
    assert len(mha) == 4 and len(gqa) == 1
    assert (f"the four multi-head shapes give β = {min(betas):.1f}–{max(betas):.1f} µs per GB of the model's traffic, "
            f"mean {1000 * beta:.1f}: about {round(100 * beta / (1 / 4.8), -1):.0f} % of what moving a GB") in text
    g = gqa[0]
    assert (f"balance, {g['heads_first_balance']:.3f} against {g['key_blocks_first_balance']:.3f}, and gives "
            f"{1000 * g['beta_ms_per_gb']:.0f}") in text
    run36 = json.loads((DATA / "prefill-h200-run36.json").read_text())["rows"]
    pred = _pred("run5")
    assert len(pred) == 6

    def span(key, D):
        xs = [r[key] for r in pred if r["D"] == D]
        return f"{min(xs):.2f}–{max(xs):.2f}×"

    assert (f"at {span('speedup', 64)} their backward's speed at D = 64 and {span('speedup', 128)} at D = 128, "
            f"forward+backward {span('fwd_bwd_speedup', 64)} and {span('fwd_bwd_speedup', 128)}") in text
    row = next(r for r in pred if (r["D"], r["N"]) == (128, 8192))
    cudnn = next(r["ms"] for r in run36 if r["provider"] == "sdpa-cudnn" and r["causal"] and r["pass_"] == "fwd_bwd"
                 and (r["D"], r["N"]) == (128, 8192))
    assert (f"the D = 128 8K row from {cudnn / row['fwd_bwd_ms']:.2f}× cuDNN to about "
            f"{cudnn / row['predicted_fwd_bwd_ms']:.2f}×") in text
    tflops = {}
    for run in (35, 36):
        rows = json.loads((DATA / f"prefill-h200-run{run}.json").read_text())["rows"]
        tflops[run] = next(r["tflops"] for r in rows if r["provider"] == "attnlab" and r["causal"] and r["D"] == 128
                           and r["N"] == 4096 and r["pass_"] == "fwd_bwd")
    assert f"{tflops[36]:.0f} and {tflops[35]:.0f} TFLOP/s in runs 36 and 35" in text
    four = _sim(("gqa-4k", "causal"), (128,), ("nol2",))
    assert f"though it charges them {four[0]['hbm_gb'] - four[1]['hbm_gb']:.1f} GB more" in text
    # the prediction's rows
    rows = {(r["row"], r["D"], r["order"]): r for r in _sim(GQA, (64, 128), ("nol2", "l2", "hfirst", "kf1"))}
    t = {D: [rows[(row, D, "nol2")]["over_once"] for row in GQA] for D in (64, 128)}
    both = pred + _pred("run13")

    def span2(key, D):
        xs = [r[key] for r in both if r["D"] == D]
        return f"{min(xs):.2f}–{max(xs):.2f}×"

    assert (f"by the two fits {span2('speedup', 128)} at D = 128 (the rows the model has moving "
            f"{min(t[128]):.1f}–{max(t[128]):.1f}× their bytes now) and {span2('speedup', 64)} at D = 64 "
            f"({min(t[64]):.1f}–{max(t[64]):.1f}×)") in text
    assert (f"the candidate numbering {span2('speedup', 64)} the backward's speed at D = 64 and {span2('speedup', 128)} "
            f"at D = 128 on prefill run 36's causal GQA rows, forward+backward {span2('fwd_bwd_speedup', 64)} and "
            f"{span2('fwd_bwd_speedup', 128)}") in text
    kf1 = [rows[(row, D, "kf1")]["balance"] for row in ("gqa-4k", "gqa-8k") for D in (64, 128)]
    assert f"(gqa-4k, gqa-8k: {min(kf1):.2f}–{max(kf1):.2f} in the model)" in text


def test_docs_gpu_quotes_the_model():
    text = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    rows = _sim(GQA, (64, 128), ("nol2", "l2"))
    table = [r["over_once"] for r in rows if r["order"] == "nol2"]
    cand = [r["over_once"] for r in rows if r["order"] == "l2"]
    assert (f"move {min(table):.0f}–{max(table):.0f}× the bytes of reading every tile once, where chunks of key blocks "
            f"first whose rows fit in L2 move {min(cand):.1f}–{max(cand):.1f}×") in text
    pred = [r["speedup"] for fit in ("run5", "run13") for r in _pred(fit)]
    assert f"predicts such chunks {min(pred):.2f}–{max(pred):.2f}× faster on those calls' backward" in text


def test_the_out_of_sample_check_is_run_13s():
    text = _v52()
    pts = _fit13()["points"]
    shapes = sorted({(p["row"], p["D"]) for p in pts})
    assert len(pts) == 24 and len(shapes) == 6
    measured, modelled = [], []
    for shape in shapes:
        rows = [p for p in pts if (p["row"], p["D"]) == shape]
        t0 = sum(p["balance"] * (p["ms"] - _beta() * p["hbm_gb"]) for p in rows) / sum(p["balance"] ** 2 for p in rows)
        model = {p["arm"]: t0 * p["balance"] + _beta() * p["hbm_gb"] for p in rows}
        ms = {p["arm"]: p["ms"] for p in rows}
        measured.append(ms["hcall"] / min(v for k, v in ms.items() if k != "hcall") - 1)
        modelled.append(model["hcall"] / min(v for k, v in model.items() if k != "hcall") - 1)
    over = [b / a for a, b in zip(measured, modelled)]
    assert (f"`hcall` measured {100 * min(measured):.1f}–{100 * max(measured):.1f} % slower than each row's fastest "
            f"other arm; with run 5's β = {1000 * _beta():.1f} (a T0 per row) the model has it "
            f"{100 * min(modelled):.1f}–{100 * max(modelled):.1f} % slower, overstating the penalty on "
            f"{['no', 'one', 'two', 'three', 'four', 'five', 'six'][sum(o > 1 for o in over)]} rows of six (up to "
            f"{max(over):.2f}×)") in text
    # least squares: the residuals orthogonal to the traffic column and to each row's balance column
    assert abs(sum((p["ms"] - p["fitted_ms"]) * p["hbm_gb"] for p in pts)) < 1e-9
    for shape in shapes:
        assert abs(sum((p["ms"] - p["fitted_ms"]) * p["balance"] for p in pts if (p["row"], p["D"]) == shape)) < 1e-9
    err = [abs(p["fitted_ms"] / p["ms"] - 1) for p in pts]
    assert (f"β = {1000 * _beta13():.1f} µs a GB, the fitted times within {100 * max(err):.1f} % of the measured ones "
            f"({sum(e < 0.01 for e in err)} of 24 within 1 %)") in text
    g = next(r for r in _fit5()["rows"] if r["H"] != r["Hkv"])
    kf = []
    for beta in (_beta(), _beta13()):
        t0 = (g["heads_first_ms"] - beta * g["heads_first_gb"]) / g["heads_first_balance"]
        kf.append((t0 * g["key_blocks_first_balance"] + beta * g["key_blocks_first_gb"]) / g["key_blocks_first_ms"])
    assert (f"either β puts its key-blocks-first time at {min(kf):.3f}–{max(kf):.3f}× the measured "
            f"{g['key_blocks_first_ms']:.3f} ms") in text
    docs = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    betas = sorted((1000 * _beta(), 1000 * _beta13()))
    assert f"(`--fit`, `--fit-chunks`: {betas[0]:.0f}–{betas[1]:.0f} µs a GB of the model's traffic)" in docs


def test_the_schedule_paragraph_is_the_models():
    text = _v52()
    runs = {int(r): json.loads((DATA / f"prefill-h200-run{r}.json").read_text())["rows"] for r in (35, 36)}

    def tf(run, provider):
        return next(r["tflops"] for r in runs[run] if r["provider"] == provider and r["causal"] and r["D"] == 128
                    and r["N"] == 8192 and r["pass_"] == "fwd_bwd")

    assert (f"forward+backward: {tf(36, 'attnlab'):.0f} TFLOP/s against {tf(35, 'attnlab'):.0f} for the MHA row") in text
    assert f"({tf(36, 'sdpa-cudnn'):.0f} against {tf(35, 'sdpa-cudnn'):.0f})" in text
    rows = {(r["row"], r["D"], r["order"]): r for r in _sim(GQA, (64, 128), ("nol2", "kfirst", "kv2", "kv4"))}
    progs = [rows[(row, D, "nol2")]["programs"] for row in GQA for D in (64, 128)]
    assert f"The GQA causal rows run {min(progs)}–{max(progs):,} programs" in text

    def bal(order, rows_=GQA):
        xs = [rows[(row, D, order)]["balance"] for row in rows_ for D in (64, 128)]
        return min(xs), max(xs)

    lo, hi = bal("nol2")
    assert f"within {100 * (lo - 1):.1f}–{100 * (hi - 1):.1f} % of a perfect balance" in text
    for order in ("kv2", "kv4"):
        lo, hi = bal(order)
        assert f"`{order}` {lo:.3f}–{hi:.3f}" in text
    k16, k8, k4 = bal("kfirst", ("gqa-16k",)), bal("kfirst", ("gqa-8k",)), bal("kfirst", ("gqa-4k",))
    assert (f"`kfirst` {k16[0]:.3f}–{k16[1]:.3f} at 16K but {k8[0]:.3f}–{k8[1]:.3f} at 8K and {k4[0]:.3f}–{k4[1]:.3f} "
            f"at 4K") in text
    parts = 2 * 4 * 2 * 8192 * 128 * 4  # (B · Hkv · kv_split) heads of 8K × 128 float32 parts, dK's or dV's
    assert f"`kv2` writes and reads {2 * parts / 1e6:.0f} MB of float32 parts each, ~{2 * 2 * parts / 4.8e12 * 1e6:.0f} µs" \
        in text
    bwd = {r["pass_"]: r["ms"] for r in runs[36] if r["provider"] == "attnlab" and r["causal"] and r["D"] == 128
           and r["N"] == 8192}
    assert f"{100 * 2 * 2 * parts / 4.8e12 * 1e3 / (bwd['fwd_bwd'] - bwd['fwd']):.0f} % of the backward's " \
        f"{bwd['fwd_bwd'] - bwd['fwd']:.1f} ms" in text
