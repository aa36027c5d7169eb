"""NOTES-prefill v52's L2 paragraph and prediction: every number it quotes, from bwd_l2_sim.py's model, the prefill
run it names and bwd-gluon-ablation run 5's data."""

from __future__ import annotations

import json

from tests.helpers import ROOT, load_script

sim = load_script("benchmarks/bwd_l2_sim.py")
DATA = ROOT / "benchmarks" / "data"
GQA = ("gqa-4k", "gqa-8k", "gqa-16k")


def _v52() -> str:
    text = (ROOT / "benchmarks" / "NOTES-prefill.md").read_text()
    start = text.index("## v52 ")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start:end if end > 0 else None].split())


def test_the_l2_paragraph_is_the_models():
    text = _v52()
    rows = {(r["row"], r["D"], r["order"]): r for r in sim.run(GQA + ("causal", "causal8k", "long"), (64, 128),
                                                                ("table", "l2", "hfirst", "kf1"))}
    mha_hf = [rows[(row, D, "hfirst")]["over_once"] for row in ("causal", "causal8k", "long") for D in (64, 128)]
    mha_t = [rows[(row, D, "table")]["over_once"] for row in ("causal", "causal8k", "long") for D in (64, 128)]
    assert f"moving {min(mha_hf):.1f}–{max(mha_hf):.1f}× their tiles' bytes against {min(mha_t):.1f}–{max(mha_t):.2f}×" \
        in text
    ab = json.loads((DATA / "bwd-gluon-ablation-h200-run5.json").read_text())["rows"]
    by = {(r["B"], r["H"], r["Hkv"], r["D"], r["N"], r["variant"]): r["ms"] for r in ab}
    cost = [by[k[:5] + ("table's, heads first",)] / by[k[:5] + ("table's, key blocks first",)] - 1
            for k in by if k[1] == k[2] and k[5] == "table's, heads first"]
    assert len(cost) == 4 and f"heads first cost {100 * min(cost):.0f}–{100 * max(cost):.0f} % on the MHA rows" in text
    table = [rows[(row, D, "table")] for row in GQA for D in (64, 128)]
    cand = [rows[(row, D, "l2")] for row in GQA for D in (64, 128)]
    assert (f"moves {min(r['over_once'] for r in table):.1f}–{max(r['over_once'] for r in table):.1f}× the bytes of "
            f"each tile once ({rows[('gqa-8k', 128, 'table')]['hbm_gb']:.2f} GB at 2 × 8K, D = 128") in text
    run36 = json.loads((DATA / "prefill-h200-run36.json").read_text())["rows"]
    ms = {r["pass_"]: r["ms"] for r in run36 if r["provider"] == "attnlab" and r["D"] == 128 and r["causal"]
          and r["N"] == 8192}
    bwd = ms["fwd_bwd"] - ms["fwd"]
    assert f"backward takes about {bwd:.1f} ms in prefill run 36" in text
    assert f"{rows[('gqa-8k', 128, 'table')]['hbm_gb'] / bwd:.1f} TB/s on average" in text
    worse = [c["balance"] - t["balance"] for t, c in zip(table, cand)]
    assert (f"1.0–{max(r['over_once'] for r in cand):.1f}×, at a list-schedule balance 0–{100 * max(worse):.1f} % worse "
            f"(better at 4K)") in text
    assert min(worse) <= 0 and all(c["over_once"] >= 1.0 for c in cand)
    assert all(w < 0 for w, r in zip(worse, cand) if r["row"] == "gqa-4k")


def test_the_predictions_rows_are_the_models():
    text = _v52()
    rows = {(r["row"], r["D"], r["order"]): r for r in sim.run(GQA, (64, 128), ("table", "kf1"))}
    t = lambda row, D: rows[(row, D, "table")]["over_once"]  # noqa: E731
    assert f"(the rows the model has moving {t('gqa-8k', 128):.1f}× and {t('gqa-16k', 128):.1f}× their bytes)" in text
    four = [t("gqa-4k", D) for D in (64, 128)]
    d64 = [t(row, 64) for row in ("gqa-8k", "gqa-16k")]
    assert (f"on gqa-4k and at D = 64 ({min(four):.1f}–{max(four):.1f}×, {min(d64):.1f}–{max(d64):.1f}×)") in text
    kf1 = [rows[(row, D, "kf1")]["balance"] for row in ("gqa-4k", "gqa-8k") for D in (64, 128)]
    assert f"(gqa-4k, gqa-8k: {min(kf1):.2f}–{max(kf1):.2f} in the model)" in text
