"""``attnlab estimate --sm-clock MHZ`` as a user runs it: the preset's peaks at that clock (its JSON equal to the Python
call on ``GPU.at_clock``), and bad clocks refused on one stderr line with exit 2."""

import json

import pytest

from attnlab.cost import get_gpu
from attnlab.cost.estimate import estimate


def test_the_estimate_at_a_clock(run_cli):
    args = ("estimate", "--gpu", "h200", "--sm-clock", "1690", "--seq", "16384", "--heads", "16", "--batch", "4",
            "--json", "-")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    slow = get_gpu("H200").at_clock(1690)
    want = estimate(gpu=slow, seq=16384, heads=16, batch=4)
    assert got == json.loads(json.dumps(want.to_dict()))
    full = estimate(gpu="H200", seq=16384, heads=16, batch=4)
    # the compute-bound forward takes the clocks' ratio longer; the table names the clock
    fwd = [k.time for a, k in want.kernels() if "K/V in L2" in a]
    fwd_full = [k.time for a, k in full.kernels() if "K/V in L2" in a]
    assert fwd and fwd[0] - 4e-6 == pytest.approx((fwd_full[0] - 4e-6) * 1830 / 1690)
    table = run_cli(*args[:-2])
    assert table.returncode == 0 and table.stdout.startswith(f"H200 at 1690 MHz: {slow.tensor_flops / 1e12:,.0f} TFLOP/s")


@pytest.mark.parametrize("args, words", [
    (("--sm-clock", "0"), ("--sm-clock", "'0'")),
    (("--sm-clock", "fast"), ("--sm-clock", "'fast'")),
    (("--sm-clock", "inf"), ("--sm-clock", "'inf'")),
    (("--gpu", "b200", "--sm-clock", "1500"), ("B200", "not known")),
])
def test_bad_clocks_one_line_exit_2(run_cli, one_error_line, args, words):
    line = one_error_line(run_cli("estimate", *args), "attnlab estimate")
    assert all(w in line for w in words), line
