"""``attnlab estimate --ranks P --link L`` as a user runs it (``python -I -m attnlab``): the ring table,
its JSON equal to the Python call, and bad values refused on one stderr line with exit 2."""

import json

import pytest

from attnlab.cost.estimate import estimate
from attnlab.cost.ring import LINKS, ring_estimate


def test_ring_table_and_json(run_cli, cut_numbers):
    args = ("estimate", "--seq", "131072", "--ranks", "8", "--link", "pcie5", "--causal", "--gpu", "h200",
            "--heads", "16", "--kv-heads", "4", "--dtype", "bf16")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert cut_numbers(r.stdout) == []
    assert "ring attention over P GPUs" in r.stdout and LINKS["pcie5"].name in r.stdout
    zig = ring_estimate(ranks=8, seq=131072, link="pcie5", gpu="H200", heads=16, kv_heads=4, causal=True)
    con = ring_estimate(ranks=8, seq=131072, link="pcie5", gpu="H200", heads=16, kv_heads=4, causal=True,
                        layout="contiguous")
    last = [line for line in r.stdout.splitlines() if line.startswith("P = 8:")]
    assert len(last) == 1, r.stdout[-2000:]
    assert f"{100 * zig.efficiency:.1f}% / {100 * con.efficiency:.1f}%" in last[0]
    assert ("hides under its compute" in last[0]) == zig.hidden
    for p in (1, 2, 4, 8):  # the powers of two up to P, one row each
        assert any(line.startswith(f"│ {p} │") or line.startswith(f"│     {p} │") for line in r.stdout.splitlines())

    j = run_cli(*args, "--json", "-")
    assert j.returncode == 0, j.stderr[-3000:]
    got = json.loads(j.stdout)
    want = estimate(gpu="H200", seq=131072, heads=16, kv_heads=4, dtype="bf16", causal=True, ranks=8, link="pcie5")
    assert got == json.loads(json.dumps(want.to_dict()))
    assert [(e["ranks"], e["layout"]) for e in got["ring"]] == [(p, lay) for p in (1, 2, 4, 8)
                                                               for lay in ("zigzag", "contiguous")]
    assert got["ring"][-2]["efficiency"] == pytest.approx(zig.efficiency, rel=1e-12)


def test_tiny_efficiency_keeps_its_digits(run_cli):
    r = run_cli("estimate", "--seq", "4096", "--ranks", "1024", "--link", "ib-ndr")
    assert r.returncode == 0, r.stderr[-3000:]
    eff = ring_estimate(ranks=1024, seq=4096, link="ib-ndr", causal=False).efficiency  # the CLI: no mask
    assert 100 * eff < 0.1 and f"{100 * eff:.2g}%" in r.stdout.splitlines()[-1]


def test_ring_default_link_is_nvlink4(run_cli):
    r = run_cli("estimate", "--seq", "6144", "--ranks", "3", "--json", "-")
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert {e["link"]["name"] for e in got["ring"]} == {LINKS["nvlink4"].name}
    assert [e["ranks"] for e in got["ring"][::2]] == [1, 2, 3]  # the powers of two below 3, then 3
    assert "ring" not in json.loads(run_cli("estimate", "--seq", "4096", "--json", "-").stdout)


@pytest.mark.parametrize("args, words", [
    (("--ranks", "0"), ("--ranks", "'0'")),
    (("--ranks", "1025"), ("--ranks", "1024", "'1025'")),
    (("--ranks", "two"), ("--ranks", "'two'")),
    (("--ranks", "2", "--link", "ethernet"), ("--link", "'ethernet'", "nvlink4")),
    (("--link", "pcie5"), ("--link", "--ranks")),
    (("--seq", "1000", "--ranks", "8"), ("--seq 1000", "16")),
])
def test_bad_ring_values_one_line_exit_2(run_cli, one_error_line, args, words):
    line = one_error_line(run_cli("estimate", *args), "attnlab estimate")
    assert all(w in line for w in words), line
