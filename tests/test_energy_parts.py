"""benchmarks/energy_parts.py: the probes' text changes, the energy arithmetic, the sustained timing and the script's
command line, on the CPU (the GPU measurements themselves need a GPU and NVML)."""

import json
import subprocess
import sys

import pytest
from tests.helpers import ROOT, load_script

ep = load_script("benchmarks/energy_parts.py")
GLUON_SRC = (ROOT / "src/attnlab/gpu/prefill_gluon.py").read_text()


@pytest.mark.parametrize("probe", sorted(ep.EDITS))
def test_each_probe_changes_the_library_source_where_it_says_and_nowhere_else(probe):
    out = ep.probe_source(GLUON_SRC, ep.EDITS[probe])
    assert out != GLUON_SRC
    for old, new in ep.EDITS[probe]:
        assert GLUON_SRC.count(old) == 1 and out.count(new) == 1
    # everything outside the changed text is the library's
    changed = sum(len(new) - len(old) for old, new in ep.EDITS[probe])
    assert len(out) == len(GLUON_SRC) + changed


def test_a_probe_whose_text_moved_is_refused():
    with pytest.raises(ValueError, match="found 0 times"):
        ep.probe_source("nothing of it here", ep.EDITS["noexp"])
    doubled = GLUON_SRC + ep.EDITS["noexp"][0][0]
    with pytest.raises(ValueError, match="found 2 times"):
        ep.probe_source(doubled, ep.EDITS["noexp"])


def test_the_nosoftmax_probe_keeps_the_exact_step_under_another_name():
    out = ep.probe_source(GLUON_SRC, ep.EDITS["nosoftmax"])
    assert out.count("    def _softmax(") == 1 and out.count("    def _softmax_exact(") == 1
    # the probe's _softmax returns P̃ = S, alpha 1 and the running maximum and sums unchanged
    body = out.split("    def _softmax(", 1)[1].split("@gluon.jit", 1)[0]
    assert "return s, gl.zeros_like(m_i) + 1.0, m_i, l_i" in body


def test_energy_a_flop_is_the_power_over_the_flop_rate():
    t = ep.with_energy(dict(ms=2.0, power_w=700.0), flop=1.4e12)
    assert t["tflops"] == pytest.approx(1.4e12 / 2e-3 / 1e12)  # 700 TFLOP/s
    assert t["pj_per_flop"] == pytest.approx(700.0 / t["tflops"])  # 1.0 pJ a FLOP
    assert ep.with_energy(dict(ms=2.0, power_w=None), flop=1e12)["pj_per_flop"] is None


def _row(arm, rnd, ms, watts, flop=1e12, mhz=1700.0):
    return dict(ep.with_energy(dict(ms=ms, power_w=watts, sm_mhz=mhz), flop), arm=arm, round=rnd)


def test_the_summary_takes_medians_and_reads_the_parts_from_them():
    rows = [_row("attnlab", r, ms, 700.0) for r, ms in enumerate((1.6, 1.5, 1.55))]  # median 1.55 ms
    rows += [_row("noexp", r, ms, 700.0) for r, ms in enumerate((1.4, 1.45, 1.5))]
    rows += [_row("nosoftmax", r, ms, 690.0) for r, ms in enumerate((1.2, 1.25, 1.3))]
    rows += [_row("gemm", r, 1.3, 700.0) for r in range(3)]
    s = ep.summary(rows)
    by = {a["arm"]: a for a in s["arms"]}
    assert [a["arm"] for a in s["arms"]] == ["attnlab", "noexp", "nosoftmax", "gemm"]
    assert by["attnlab"]["rounds"] == 3
    e = {arm: 700.0 / (1e12 / (ms * 1e-3) / 1e12) for arm, ms in (("attnlab", 1.55), ("noexp", 1.45), ("gemm", 1.3))}
    e["nosoftmax"] = 690.0 / (1e12 / 1.25e-3 / 1e12)
    for arm, want in e.items():
        assert by[arm]["pj_per_flop"] == pytest.approx(want)
        assert by[arm]["vs_attnlab"] == pytest.approx(want / e["attnlab"])
    assert s["exp_share"] == pytest.approx(1 - e["noexp"] / e["attnlab"])
    assert s["softmax_share"] == pytest.approx(1 - e["nosoftmax"] / e["attnlab"])
    assert s["gemm_share"] == pytest.approx(e["gemm"] / e["attnlab"])
    # without attnlab's arm no ratio and no part
    s2 = ep.summary([r for r in rows if r["arm"] != "attnlab"])
    assert all(a["vs_attnlab"] is None for a in s2["arms"]) and "exp_share" not in s2


def test_the_table_gives_every_arm_and_the_parts():
    rows = [_row("attnlab", 0, 1.55, 700.0), _row("noexp", 0, 1.45, 700.0), _row("qregs", 0, 1.5, 700.0)]
    rows[-1]["max_diff"] = 0.0
    saved = dict(environment=dict(gpu="NVIDIA H100 80GB HBM3", torch="2.11", triton="3.6"), power_limit_w=700.0,
                 power_source="instant", shape=dict(B=1, H=16, Hkv=16, N=16384, D=128, causal=False, gemm_size=8192),
                 seconds=3.0, warm=2.0, rounds=1, rows=rows)
    md = ep.markdown(saved)
    s = ep.summary(rows)
    for a in s["arms"]:
        assert f"| {a['arm']} |" in md and f"{a['pj_per_flop']:.3f}" in md
    assert "max diff from attnlab 0" in md
    assert f"the exponentials {s['exp_share'] * 100:.1f} %" in md
    assert "power limit 700 W" in md and "N = 16384" in md


def test_sustained_runs_the_calls_back_to_back_and_averages_the_reads():
    calls = []
    reads = iter([dict(power_w=600.0, sm_mhz=1500.0), dict(power_w=700.0, sm_mhz=1700.0)] * 10_000)
    t = ep.sustained(lambda: calls.append(1), seconds=0.05, warm=0.01, read=lambda: next(reads), device="cpu",
                     interval=0.001)
    assert t["calls"] >= 4 and t["ms"] > 0 and t["seconds"] > 0
    assert len(calls) > t["calls"]  # the warm-up's calls came first
    assert t["reads"] >= 1 and 600.0 <= t["power_w"] <= 700.0 and 1500.0 <= t["sm_mhz"] <= 1700.0
    assert t["power_min_w"] <= t["power_w"] <= t["power_max_w"]
    quiet = ep.sustained(lambda: None, seconds=0.01, warm=0.0, read=lambda: None, device="cpu")
    assert quiet["power_w"] is None and quiet["sm_mhz"] is None
    with pytest.raises(ValueError):
        ep.sustained(lambda: None, seconds=0.0, warm=0.0, device="cpu")


def _script(*args, timeout=300):
    return subprocess.run([sys.executable, "benchmarks/energy_parts.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_the_script_on_the_cpu_writes_its_run_and_reports_it(tmp_path):
    out, md = tmp_path / "run.json", tmp_path / "run.md"
    r = _script("--device", "cpu", "--arms", "gemm", "attnlab", "--gemm-size", "64", "--N", "64", "--D", "64",
                "--heads", "2", "--seconds", "0.05", "--warm", "0", "--rounds", "2", "--json", str(out), "--md", str(md))
    assert r.returncode == 0, r.stderr
    saved = json.loads(out.read_text())
    assert [(row["arm"], row["round"]) for row in saved["rows"]] == [("gemm", 0), ("attnlab", 0), ("attnlab", 1),
                                                                      ("gemm", 1)]
    gemm = saved["rows"][0]
    assert gemm["flop"] == 2 * 64 ** 3 and gemm["pj_per_flop"] is None  # no power read off a GPU
    assert md.read_text() == ep.markdown(saved)
    rep = _script("--report", str(out))
    assert rep.returncode == 0 and rep.stdout == md.read_text()
    again = _script("--device", "cpu", "--arms", "gemm", "--json", str(out))  # nothing a user made is overwritten
    assert again.returncode == 2 and "exists" in again.stderr
    assert json.loads(out.read_text()) == saved


@pytest.mark.parametrize("args,message", [
    (["--device", "cpu", "--arms", "noexp"], "only the arms gemm and attnlab"),
    (["--device", "cpu", "--arms", "gemm", "gemm"], "each arm once"),
    (["--device", "cpu", "--heads", "6", "--kv-heads", "4"], "a multiple of"),
    (["--device", "cpu", "--arms", "gemm", "--seconds", "0"], "--seconds positive"),
    (["--report", "no-such-run.json"], "no file"),
])
def test_the_script_refuses_bad_arguments_before_any_work(args, message):
    r = _script(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_the_arms_modules_load_and_stand_in_for_the_librarys_kernels_only_while_used():
    from tests.helpers import fresh_json

    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import energy_parts as ep\n"
            "from attnlab.gpu import prefill_gluon as pg\n"
            "out = {}\n"
            "for arm in ('qregs', 'noqregs', 'noexp', 'nosoftmax'):\n"
            "    m = ep.arm_module(arm)\n"
            "    before = pg._attn_fwd_gluon_wsp\n"
            "    with ep.use_module(m):\n"
            "        inside = pg._attn_fwd_gluon_wsp is m._attn_fwd_gluon_wsp\n"
            "    out[arm] = dict(inside=inside, restored=pg._attn_fwd_gluon_wsp is before, src=open(m.__file__).read(),\n"
            "                    again=ep.arm_module(arm) is m, distinct=m is not pg)\n"
            "print(json.dumps(out))")
    out = fresh_json(code, timeout=300)
    for arm, r in out.items():
        assert r["inside"] and r["restored"] and r["again"] and r["distinct"], (arm, r)
    assert "    _Q_REGS = gl.constexpr(128)" in out["qregs"]["src"]  # the switch its kernels read
    assert "    _Q_REGS = gl.constexpr(0)" in out["noqregs"]["src"]
    assert "    _Q_REGS = gl.constexpr(Q_REGS)" in out["noexp"]["src"]  # a probe keeps the library's switches
    assert "(probe: no exponential)" in out["noexp"]["src"] and "(probe: P̃ = S" in out["nosoftmax"]["src"]


@pytest.mark.parametrize("arm", sorted(ep.SPLITS))
def test_a_polynomial_arm_sets_the_split_only_while_it_runs(arm):
    from attnlab.gpu import prefill_gluon as pg

    before = dict(pg.EXP_POLY)
    with ep._split(arm, 128):
        assert pg.EXP_POLY[128] == ep.SPLITS[arm] and pg.EXP_POLY[64] == before[64]
    assert pg.EXP_POLY == before


def test_every_arm_is_described_and_the_defaults_are_arms():
    assert set(ep.NOTES) == set(ep.ARMS) and set(ep.DEFAULT_ARMS) <= set(ep.ARMS)
    assert not (set(ep.SWITCHES) | set(ep.EDITS)) & set(ep.SPLITS)
