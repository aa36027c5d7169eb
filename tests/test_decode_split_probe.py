"""benchmarks/decode_split_probe.py on the CPU: its table's medians and ratios, and its refusals (bad counts, an existing
JSON file) before any GPU work."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.helpers import ROOT, load_script

probe = load_script("benchmarks/decode_split_probe.py")


def test_the_table_takes_each_arms_median_against_the_triton_kernels():
    times = {"triton": (10.0, 12.0, 11.0), "gluon": (15.0, 13.0, 14.0), "triton+merge": (11.0, 11.0, 11.0),
             "gluon+merge": (20.0, 22.0, 21.0)}
    rows = [dict(B=1, H=64, Hkv=8, L=8192, D=128, arm=a, round=r, kernel=a.split("+")[0], splits=16, max_err=1e-4 * r,
                 graph_us=t[r]) for a, t in times.items() for r in range(3)]
    table = probe.markdown(rows[::-1]).splitlines()
    assert table[2] == "| 1 | 64/8 | 8192 | 128 | triton | triton, 16 | 10.00 / 12.00 / 11.00 | 11.00 | 1.000 | 2.0e-04 |"
    assert table[3].endswith(f"| 15.00 / 13.00 / 14.00 | 14.00 | {11 / 14:.3f} | 2.0e-04 |")
    assert table[5].endswith(f"| 21.00 | {11 / 21:.3f} | 2.0e-04 |")


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("mine")
    for args, said in ((["--calls", "0"], "at least 1"), (["--time", "--json", str(kept)], "exists")):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_split_probe.py"), *args],
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr)
    assert kept.read_text() == "mine"


def test_the_crossed_arms_put_the_other_kinds_merge_kernel_under_the_plans_names_and_back():
    """"+gmerge" gives a Triton plan the Gluon merge kernel, "+tmerge" a Gluon plan the Triton one (each through the
    name the plans take it by), and every arm after them, and ``_merges_back``, has each kernel under its own name."""
    pytest.importorskip("triton")
    from attnlab.gpu import decode_config, decode_gluon, decode_kernels, decode_plan

    if not decode_gluon.HAVE_GLUON:
        pytest.skip("a triton without Gluon")
    tri, glu = decode_kernels._decode_merge_kernel, decode_gluon._decode_merge_gluon
    saved = decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US
    try:
        probe._set_arm("triton+gmerge")
        assert decode_plan._decode_merge_kernel is glu and decode_gluon._decode_merge_gluon is glu
        assert decode_config.GLUON_SPLIT is False and decode_plan.GRAPH_FUSED_FROM_US == float("inf")
        probe._set_arm("gluon+tmerge")
        assert decode_plan._decode_merge_kernel is tri and decode_gluon._decode_merge_gluon is tri
        assert decode_config.GLUON_SPLIT is True
        probe._set_arm("gluon+merge")
        assert decode_plan._decode_merge_kernel is tri and decode_gluon._decode_merge_gluon is glu
        probe._set_arm("triton+gmerge")
        probe._merges_back()
        assert decode_plan._decode_merge_kernel is tri and decode_gluon._decode_merge_gluon is glu
    finally:
        probe._merges_back()
        decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
