"""Static-kept runs 2-6, prefill runs 40 and 41 and decode-host runs 44-47, all on an H100, with v33 (the Gluon merge in
triton 3.6's layouts) and v34 (graphs of reads under 13 µs on the merge kernel): benchmarks/RESULTS.md's section,
NOTES-decode's sections, the comment on ``decode_plan.GRAPH_FUSED_FROM_US`` and docs/decode.md, their tables rendered
from the recorded files and every number they quote computed from those files (the README's H100 table, made from
these runs then, now comes from later ones: tests/test_results_direct_launch.py)."""

from __future__ import annotations

import json

from tests.helpers import (
    ROOT,
    arm_medians,
    flat,
    load_script,
    notes_section,
    pytest_summary,
    results_section,
    span,
)

DATA = ROOT / "benchmarks" / "data"
card = load_script("benchmarks/scorecard.py")
dsp = load_script("benchmarks/decode_split_probe.py")
dh = load_script("benchmarks/decode_host.py")
spills = load_script("benchmarks/sm90_spills.py")
SECTION = "### Static-kept runs 2–6, prefill runs 40 and 41 and decode-host runs 44–47, on an H100"
SMALL, G28 = (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128)
D128, D64, B8 = (1, 32, 8, 32768, 128), (1, 32, 8, 32768, 64), (8, 32, 8, 32768, 128)
SHORT = D128 + (1024,)


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def tl(run: int, L: int, cache: str, arm: str, kernel: str) -> float:
    """A kernel's median µs in the replays of static-kept run ``run``'s timeline."""
    rows = _run(f"decode-split-timeline-h100-run{run}.json")["rows"]
    return next(r["us"] for r in rows if (r["L"], r["cache"], r["arm"]) == (L, cache, arm) and kernel in r["kernel"])


def ka(run: int = 46) -> dict:
    """(B, H, Hkv, L, D, length) -> {arm: median graph µs} of a run's kernel A/B."""
    return arm_medians(_run(f"decode-host-h100-run{run}.json")["kernel_ab"],
                       lambda r: (r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["length"]))


def full(shape) -> tuple:
    return shape + (shape[3],)


def graph(run: int, shape, provider: str = "attnlab") -> float:
    return next(r["graph_us"] for r in _run(f"decode-host-h100-run{run}.json")["speed"]
                if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["provider"] == provider)


def bars(prefill: int, host: int) -> list[dict]:
    return card.scorecard({f"prefill-h100-run{prefill}.json": _run(f"prefill-h100-run{prefill}.json")["rows"]},
                          _run(f"decode-host-h100-run{host}.json"))


def bar(prefill: int, host: int, start: str) -> str:
    return next(b["measured"] for b in bars(prefill, host) if b["bar"] == start)


def host_row(run: int) -> tuple[float, float]:
    """A run's host bar as the scorecard reads it: the public call's better row, and the empty launch's µs."""
    h = _run(f"decode-host-h100-run{run}.json")
    return min(card.kept_host_us({r["call"]: r["host_us"] for r in h["host"]})), h["floors"][card.EMPTY_LAUNCH]


def suite(path: str) -> str:
    return pytest_summary(DATA / path)


def test_the_section_renders_its_tables():
    section = results_section(SECTION)
    for run in (44, 45, 46, 47):
        h = _run(f"decode-host-h100-run{run}.json")
        assert h["gpu"] == "NVIDIA H100 80GB HBM3" and (h["torch"], h["triton"]) == ("2.11.0+cu130", "3.6.0")
    assert dsp.timeline_markdown(_run("decode-split-timeline-h100-run4.json")["rows"]).rstrip() in section
    h46 = _run("decode-host-h100-run46.json")
    assert "\n".join(dh.kernel_ab_markdown(h46["kernel_ab"], dh.preset_for(h46["gpu"]))) in section
    for pre, host in ((40, 44), (41, 45), (41, 47)):
        assert card.markdown(bars(pre, host)).rstrip("\n") in section
    rep = _run("sm90-spills-triton36.json")
    assert rep["triton_version"] == "3.6.0" and spills.markdown(rep) in section


def test_the_section_quotes_the_runs():
    text = flat(results_section(SECTION))
    w2 = lambda *a: tl(2, 8192, "warm", *a)  # noqa: E731
    assert (f"the Gluon merge kernel still ran {w2('gluon+merge', 'merge'):.2f} µs against the Triton one's "
            f"{w2('triton+merge', 'merge'):.2f} at 64/8 heads over 8K, and the Gluon kernel with its in-kernel merge "
            f"{w2('gluon', 'split'):.2f} against {w2('triton', 'split'):.2f} L2-warm") in text
    w, c = (lambda *a: tl(4, 8192, "warm", *a)), (lambda *a: tl(4, 8192, "cold", *a))
    assert w("gluon+merge", "merge") == w("triton+gmerge", "merge")
    assert (f"the Gluon merge kernel now runs {w('gluon+merge', 'merge'):.2f} µs after either split kernel, against "
            f"the Triton one's {w('triton+merge', 'merge'):.2f} and {w('gluon+tmerge', 'merge'):.2f}, and the Gluon "
            f"kernel with its in-kernel merge {w('gluon', 'split'):.2f} µs against the Triton one's "
            f"{w('triton', 'split'):.2f} L2-warm and {c('gluon', 'split'):.2f} against {c('triton', 'split'):.2f} "
            f"L2-cold; at 32/8 over 32K the Gluon merge kernel is the faster "
            f"({tl(4, 32768, 'warm', 'gluon+merge', 'merge'):.2f} against "
            f"{tl(4, 32768, 'warm', 'triton+merge', 'merge'):.2f} µs warm)") in text
    m = ka()
    g = lambda s, a="gluon": m[s][a]  # noqa: E731
    assert (f"faster at 32/8 heads over 32K ({g(full(D128)):.2f} against {g(full(D128), 'triton'):.2f} µs at D = 128, "
            f"{g(full(D64)):.2f} against {g(full(D64), 'triton'):.2f} at D = 64), at 64/8 over 8K "
            f"({g(full(SMALL)):.2f} against {g(full(SMALL), 'triton'):.2f}) and at batch 8, and the slower at 28/4 over "
            f"20,000 keys ({g(full(G28)):.2f} against {g(full(G28), 'triton'):.2f}) and on a short sequence in a long "
            f"cache ({g(SHORT):.2f} against {g(SHORT, 'triton'):.2f})") in text
    assert g(full(B8)) < g(full(B8), "triton") and g(full(D128)) < g(full(D128), "triton")
    assert g(full(G28)) > g(full(G28), "triton") and g(SHORT) > g(SHORT, "triton")  # the rule fails: it stays off
    assert (f"slower than the same kernel with the merge kernel ({g(full(SMALL), 'triton'):.2f} against "
            f"{g(full(SMALL), 'triton+merge'):.2f} µs, {g(full(G28), 'triton'):.2f} against "
            f"{g(full(G28), 'triton+merge'):.2f})") in text
    for name, path in (("the Gluon decode tests", "static-kept-run2/gluon-tests.log"),
                       ("six prefill test files under `ATTNLAB_STATIC_KEPT=1`", "static-kept-run2/tests.log"),
                       ("`test_prefill_gluon_bwd.py`", "static-kept-run3/tests.log"),
                       ("the Gluon decode tests", "static-kept-run4/gluon-tests.log"),
                       ("`test_prefill_gluon_dynamic.py`", "static-kept-run4/tests.log"),
                       ("the other decode test files", "static-kept-run5/tests.log"),
                       ("the launch and decode tests", "static-kept-run6/tests.log")):
        assert f"{name} ({suite(path)}" in text, (name, path)
    dyn = (DATA / "scorecard-run40" / "dyn-test.log").read_text()
    assert dyn.count("1 failed") == 2 and "== with ATTNLAB_STATIC_KEPT=1" in dyn and "== without" in dyn
    tf = [bar(p, h, "forward at D = 128 (goal beyond the bar)").split()[0] for p, h in ((40, 44), (41, 45))]
    assert f"the fastest D = 128 forward ran at {tf[0]} and {tf[1]} TFLOP/s" in text
    b1 = lambda p, h: bar(p, h, "decode: batch 1 at or above cuDNN under CUDA graphs").split()[0]  # noqa: E731
    assert (f"met in run 44 (lowest {b1(40, 44)}), missed in run 45 ({b1(41, 45)} at 64/8 heads over 8K: "
            f"{graph(45, SMALL):.2f} against {graph(45, SMALL, 'sdpa-cudnn'):.2f} µs) and met after v34 in run 47 "
            f"(lowest {b1(41, 47)}; {graph(47, SMALL):.2f} against {graph(47, SMALL, 'sdpa-cudnn'):.2f} µs at 64/8 "
            f"over 8K, {graph(47, G28):.2f} against {graph(47, G28, 'sdpa-cudnn'):.2f} at 28/4") in text
    (k44, e44), (k47, e47) = host_row(44), host_row(47)
    assert (f"{k44:.1f} µs against an empty launch's {e44:.1f} in run 44 ({k44 / e44:.2f}×), and {k47:.1f} against "
            f"{e47:.1f} in run 47 ({k47 / e47:.2f}×)") in text and k47 > 20 > k44
    sdpa = {run: {r["call"]: r["host_us"] for r in _run(f"decode-host-h100-run{run}.json")["host"]}["SDPA cudnn"]
            for run in (44, 45, 46, 47)}
    share = [host_row(run)[0] / sdpa[run] for run in sdpa]
    assert (f"the kept call took {span(share)}× of it in each of runs 44–47 ({k44:.1f} against {sdpa[44]:.1f} µs in "
            f"run 44, {k47:.1f} against {sdpa[47]:.1f} in run 47)") in text


def test_the_notes_hold_v32_v33_and_v34_against_the_runs():
    n1 = flat(notes_section("NOTES-decode.md", "## Measured: static-kept runs 2 and 3"))
    w2, c2 = (lambda *a: tl(2, 8192, "warm", *a)), (lambda *a: tl(2, 8192, "cold", *a))
    assert (f"It ran {w2('gluon+merge', 'merge'):.2f} µs against {w2('triton+merge', 'merge'):.2f} "
            f"({tl(1, 8192, 'warm', 'gluon+merge', 'merge'):.2f} before v32)") in n1
    assert (f"missed, {w2('gluon', 'split'):.2f} against {w2('triton', 'split'):.2f}; at or under it cold: missed, "
            f"{c2('gluon', 'split'):.2f} against {c2('triton', 'split'):.2f}") in n1
    s36, v32 = _run("merge-sass-v33-triton36.json")["triton"], _run("merge-sass-v32-triton36.json")
    assert v32["triton"] == s36 and v32["triton_version"] == "3.6.0"
    gv = v32["gluon"]
    assert (f"the Triton merge's 3.6 build has {s36['instructions']} instructions, {s36['LDS']} shared loads, "
            f"{s36['STS']} shared stores and {s36['SHFL']} shuffles, and v32's Gluon build under 3.6 had "
            f"{gv['instructions']:,}, {gv['LDS']}, {gv['STS']} and {gv['SHFL']}") in n1
    failed, passed, skipped = suite("static-kept-run2/tests.log").split(", ")
    assert f"run 2, the launch tests and six of the prefill files, {passed}, {skipped}, {failed}" in n1
    assert f"`test_prefill_gluon_bwd.py`, {suite('static-kept-run3/tests.log')}" in n1
    rows = {(r["D"], r["block_m"], r["causal"], r["packed"], r["dynamic"]): r
            for r in _run("sm90-spills-triton36.json")["rows"]}
    dyn, static = rows[64, 192, False, False, True], rows[64, 192, False, False, False]
    assert static["stack"] == 0 and f"spills {dyn['stack']} bytes, where the static build spills none" in n1
    assert sorted(dyn["loop_ldl"])[-2:] == [7, 7] and "(7 local loads in each of two of them)" in n1
    packed = [r for k, r in rows.items() if k[1] == 192 and k[3]]
    assert (f"({span([r['stack'] for r in packed], 'd')} bytes, {span([max(r['loop_ldl']) for r in packed], 'd')} reloads in one "
            "product loop)") in n1
    assert all(r["stack"] == 0 for k, r in rows.items() if (k[1] == 128) or (not k[3] and not k[4]))
    config = " ".join((ROOT / "src" / "attnlab" / "gpu" / "config.py").read_text().replace("#", " ").split())
    assert "Gluon build (235) stayed behind the Triton kernel (251)" in config and "(235 against 251 TFLOP/s" in n1
    k44, e44 = host_row(44)
    assert f"The host bar: {k44:.1f} µs, the public call's better row, against an empty launch's {e44:.1f}, " \
           f"{k44 / e44:.2f}×" in n1 and round(k44 / e44, 2) <= 1.35
    b44 = bar(40, 44, "decode: batch 1 at or above cuDNN under CUDA graphs").split()[0]
    assert (f"the lowest {b44} (32/8 heads over 32K at D = 64); at 64/8 over 8K "
            f"{graph(44, SMALL, 'sdpa-cudnn') / graph(44, SMALL):.3f}× ({graph(44, SMALL):.1f} against "
            f"{graph(44, SMALL, 'sdpa-cudnn'):.1f} µs)") in n1
    assert f"goal ({bar(40, 44, 'forward at D = 128 (goal beyond the bar)').split()[0]} TFLOP/s)" in n1

    v33 = flat(notes_section("NOTES-decode.md", "## v33"))
    g36 = _run("merge-sass-v33-triton36.json")["gluon"]
    for k in ("LDG", "MUFU", "FFMA", "FMUL", "FADD", "SHFL"):
        assert g36[k] == s36[k], k
    assert (f"{g36['LDG']} LDG, {g36['MUFU']} MUFU, {g36['FFMA']} FFMA, {g36['FMUL']} FMUL, {g36['FADD']} FADD, "
            f"{g36['SHFL']} SHFL, and {g36['instructions']} instructions against {s36['instructions']}, with "
            f"{g36['LDS']} shared loads and {g36['STS']} stores against {s36['LDS']} and {s36['STS']}") in v33
    n39 = _run("merge-sass-v33.json")
    assert n39["triton_version"].startswith("3.9.")
    assert f"({n39['gluon']['instructions']} against {n39['triton']['instructions']:,};" in v33

    n2 = flat(notes_section("NOTES-decode.md", "## Measured: static-kept runs 4 and 5"))
    w, c = (lambda *a: tl(4, 8192, "warm", *a)), (lambda *a: tl(4, 8192, "cold", *a))
    assert (f"met, {w('gluon+merge', 'merge'):.2f} µs after the Gluon split kernel and "
            f"{w('triton+gmerge', 'merge'):.2f} after the Triton one, against the Triton merge kernel's "
            f"{w('triton+merge', 'merge'):.2f} and {w('gluon+tmerge', 'merge'):.2f}") in n2
    t32 = [tl(4, 32768, "warm", a, "merge") for a in ("triton+merge", "gluon+tmerge")]
    assert f"it is the faster: {tl(4, 32768, 'warm', 'gluon+merge', 'merge'):.2f} against {span(t32, '.2f')})" in n2
    assert (f"met, and better: {w('gluon', 'split'):.2f} µs against {w('triton', 'split'):.2f} warm, "
            f"{c('gluon', 'split'):.2f} against {c('triton', 'split'):.2f} cold") in n2
    m = ka()
    assert (f"at 64/8 over 8K ({m[full(SMALL)]['gluon']:.2f} against {m[full(SMALL)]['triton']:.2f}) and at batch 8 "
            f"({m[full(B8)]['gluon']:.2f} against {m[full(B8)]['triton']:.2f})") in n2
    m41 = ka(41)
    assert (f"{m[full(SMALL)]['triton']:.2f} against {m[full(SMALL)]['triton+merge']:.2f} µs, cuDNN "
            f"{m[full(SMALL)]['sdpa-cudnn']:.2f}; {m[full(G28)]['triton']:.2f} against "
            f"{m[full(G28)]['triton+merge']:.2f}. Decode-host run 41 had the same ({m41[full(SMALL)]['triton']:.2f} "
            f"against {m41[full(SMALL)]['triton+merge']:.2f}, cuDNN {m41[full(SMALL)]['sdpa-cudnn']:.2f}; "
            f"{m41[full(G28)]['triton']:.2f} against {m41[full(G28)]['triton+merge']:.2f})") in n2
    b = {run: graph(run, SMALL, "sdpa-cudnn") / graph(run, SMALL) for run in (43, 44, 45)}
    assert f"0.966× cuDNN in run 43, {b[44]:.3f}× in run 44, {b[45]:.3f}× in run 45" in n2 and f"{b[43]:.3f}" == "0.966"

    v34 = flat(notes_section("NOTES-decode.md", "## v34"))
    from attnlab.cost import get_gpu

    def read(shape, gpu: str) -> float:
        B, H, Hkv, L, D = shape
        return 2 * B * Hkv * L * D * 2 / get_gpu(gpu).hbm_bw * 1e6

    assert (f"won at 32/8 heads over 32K ({read(D64, 'H100'):.1f} µs of reading at D = 64 on the H100 preset, "
            f"{read(D64, 'H200'):.1f} on the H200's) and lost at 64/8 over 8K and 28/4 over 20,000 "
            f"({read(SMALL, 'H100'):.1f} and {read(G28, 'H100'):.1f} µs on the H100's preset, "
            f"{read(SMALL, 'H200'):.1f} and {read(G28, 'H200'):.1f} on the H200's)") in v34
    from attnlab.gpu import decode_plan

    bound = decode_plan.GRAPH_FUSED_FROM_US
    assert max(read(s, g) for s in (SMALL, G28) for g in ("H100", "H200")) < bound < min(read(D64, g) for g in ("H100", "H200"))

    n3 = flat(notes_section("NOTES-decode.md", "## Measured: decode-host run 47"))
    assert f"met ({suite('static-kept-run6/tests.log')})" in n3
    assert (f"met, {graph(47, SMALL):.2f} µs against cuDNN's {graph(47, SMALL, 'sdpa-cudnn'):.2f}") in n3
    assert graph(47, SMALL) - m[full(SMALL)]["triton+merge"] <= 0.15
    assert f"on the fast side: {graph(47, G28):.2f} µs (cuDNN {graph(47, G28, 'sdpa-cudnn'):.2f})" in n3
    assert m[full(G28)]["triton+merge"] - graph(47, G28) > 0.15
    for shape, label in ((D128, "at D = 128"), (D64, "at D = 64"), (B8, "at batch 8")):
        assert f"{graph(47, shape):.2f} against {m[full(shape)]['triton']:.2f}" in n3, label
        assert abs(graph(47, shape) / m[full(shape)]["triton"] - 1) < 0.01
    b47 = bar(41, 47, "decode: batch 1 at or above cuDNN under CUDA graphs").split()[0]
    assert f"the lowest {b47} (32/8 heads over 32K at D = 64)" in n3 and float(b47.rstrip("×")) >= 1
    k47, e47 = host_row(47)
    assert (f"took {k47:.1f} µs (its better row) against an empty launch's {e47:.1f}, {k47 / e47:.2f}×; on the first "
            f"machine (run 44) {k44:.1f} against {e44:.1f}. The ratio holds from host to host "
            f"({k44 / e44:.2f}–{k47 / e47:.2f}×)") in n3


def test_the_switchs_comment_the_decode_doc_and_the_readme():
    m, m41 = ka(), ka(41)
    comment = " ".join((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text()
                       .split("GRAPH_FUSED_FROM_US = 13.0")[0].rsplit("\n\n", 1)[1].replace("#", " ").split())
    f = lambda run, s, a: run[full(s)][a]  # noqa: E731
    assert (f"(decode-host runs 41 and 46: {f(m41, SMALL, 'triton'):.2f} and {f(m, SMALL, 'triton'):.2f} µs against "
            f"{f(m41, SMALL, 'triton+merge'):.2f} and {f(m, SMALL, 'triton+merge'):.2f}, {f(m41, G28, 'triton'):.2f} "
            f"and {f(m, G28, 'triton'):.2f} against {f(m41, G28, 'triton+merge'):.2f} and "
            f"{f(m, G28, 'triton+merge'):.2f})") in comment
    assert (f"kept its gain ({f(m41, D64, 'triton'):.2f} and {f(m, D64, 'triton'):.2f} against "
            f"{f(m41, D64, 'triton+merge'):.2f} and {f(m, D64, 'triton+merge'):.2f})") in comment
    doc = flat((ROOT / "docs" / "decode.md").read_text())
    gains = [f(r, s, "triton") - f(r, s, "triton+merge") for r in (m, m41) for s in (SMALL, G28)]
    assert f"merged {span(gains, '.2f')} µs faster by the merge kernel in decode-host runs 41 and 46" in doc
    w2 = lambda *a: tl(2, 8192, "warm", *a)  # noqa: E731
    w, c = (lambda *a: tl(4, 8192, "warm", *a)), (lambda *a: tl(4, 8192, "cold", *a))
    assert (f"it still ran {w2('gluon+merge', 'merge'):.2f} µs against {w2('triton+merge', 'merge'):.2f} "
            "(static-kept run 2)") in doc
    assert (f"the Gluon merge kernel ran {w('gluon+merge', 'merge'):.2f} µs against {w('triton+merge', 'merge'):.2f}, "
            f"and the Gluon kernel with its in-kernel merge {w('gluon', 'split'):.2f} µs against the Triton one's "
            f"{w('triton', 'split'):.2f} L2-warm, {c('gluon', 'split'):.2f} against {c('triton', 'split'):.2f} "
            "L2-cold") in doc
    assert (f"the slower at 28/4 over 20,000 keys ({f(m, G28, 'gluon'):.2f} against {f(m, G28, 'triton'):.2f} µs) and on "
            f"a short sequence in a long cache ({m[SHORT]['gluon']:.2f} against {m[SHORT]['triton']:.2f}), so it stays "
            "off") in doc
