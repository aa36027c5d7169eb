"""``simulate_forward`` and ``attnlab simulate`` (§5.3–5.4, §6.2): every count beside its closed form,
the memory a run needs estimated (and refused) before anything is allocated, and bad input as one
line on stderr with exit status 2. The command runs as a subprocess, as a user runs it.
"""

import json
import math
import re
import subprocess
import sys
import tracemalloc

import pytest

from attnlab import cost
from attnlab.sim.device import H100_SHARED_BYTES_PER_BLOCK
from attnlab.sim.kernels import (
    default_memory_limit,
    flash_fwd_shared_bytes,
    forward_memory_bytes,
    run_standard_forward,
    simulate_forward,
    standard_memory_bytes,
)

F32 = 4  # bytes


def _attnlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-I", "-m", "attnlab", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_simulate_forward_dict():
    res = simulate_forward(seq=64, head_dim=32, block=32, causal=True, reference="numpy")
    for design in ("standard", "flash"):
        t = res[design]["totals"]
        for key in ("read_no_cache", "read_ideal", "write_no_cache", "write_ideal"):
            assert t[key] == t[key + "_formula"], (design, key)
    assert res["flash"]["error"]["out"] < 1e-6 and res["standard"]["error"]["out"] < 1e-6
    assert math.isclose(res["ideal_ratio"], res["standard"]["totals"]["total_ideal"] / res["flash"]["totals"]["total_ideal"])
    assert res["memory_estimate_bytes"] == forward_memory_bytes(seq=64, head_dim=32, block=32)


def test_cli_writes_json_and_keeps_an_existing_file(tmp_path):
    path = tmp_path / "out" / "sim.json"  # the missing folder is created
    r = _attnlab("simulate", "--seq", "64", "--head-dim", "32", "--block", "32", "--json", str(path))
    assert r.returncode == 0, r.stderr
    data = json.loads(path.read_text())
    assert data["config"] == {"seq": 64, "head_dim": 32, "block_q": 32, "block_k": 32, "tile": 16, "causal": False,
                              "dtype": "float32", "seed": 0, "reference": "torch"}
    fl = data["flash"]["kernels"][0]["arrays"]["K"]["read"]
    k_read = cost.io_flash_forward_breakdown(seq=64, head_dim=32, block_q=32)[("K", "read")]
    assert fl["no_cache"] == fl["no_cache_formula"] == F32 * k_read
    assert f"{data['ideal_ratio']:.1f}×" in r.stdout and "attention_ref" in r.stdout and str(path) in r.stdout
    sh = data["standard"]["report"]["totals"]["shared"]
    assert data["standard"]["totals"]["shared_wavefronts"] == sum(c["wavefronts"] for a in sh.values() for c in a.values())
    # a second run does not replace the file without --force
    before = path.read_bytes()
    again = _attnlab("simulate", "--seq", "64", "--head-dim", "32", "--block", "32", "--json", str(path))
    assert again.returncode == 2 and "--force" in again.stderr and path.read_bytes() == before


def _one_line_exit_2(args) -> str:
    r = _attnlab("simulate", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1 and r.stdout == ""
    assert r.stderr.startswith("attnlab simulate: error: ")
    return r.stderr


@pytest.mark.parametrize("args, names", [
    (["--seq", "0"], "--seq"),
    (["--seq", "-5"], "--seq"),
    (["--head-dim", "-3"], "--head-dim"),
    (["--tile", "0"], "--tile"),
    (["--block", "2000"], "block"),
    (["--tile", "40"], "tile"),
    (["--seed", "-1"], "seed"),
    (["--max-memory", "0"], "--max-memory"),
    (["--max-memory", "lots"], "--max-memory"),
])
def test_cli_bad_values_are_one_line_exit_2(args, names):
    err = _one_line_exit_2(args)
    assert names in err and args[1] in err  # the option and the value it got


def test_cli_head_dim_too_large_for_shared_memory():
    err = _one_line_exit_2(["--head-dim", "512"])
    need = flash_fwd_shared_bytes(head_dim=512, block_q=64, block_k=64)
    assert f"{need:,} bytes" in err and f"{H100_SHARED_BYTES_PER_BLOCK:,}" in err
    fits = int(re.search(r"head_dim <= (\d+)", err).group(1))
    size = lambda d: flash_fwd_shared_bytes(head_dim=d, block_q=64, block_k=64)  # noqa: E731
    assert size(fits) <= H100_SHARED_BYTES_PER_BLOCK < size(fits + 1)


def test_cli_seq_too_large_for_memory_is_refused_with_estimate_and_limit():
    err = _one_line_exit_2(["--seq", "100000"])
    need, limit = forward_memory_bytes(seq=100_000, head_dim=64, block=64), default_memory_limit()
    assert f"~{need / 2**30:.1f} GiB" in err and f"{limit / 2**30:.1f} GiB limit" in err
    fits = int(re.search(r"seq <= (\d+)", err).group(1))
    assert forward_memory_bytes(seq=fits, head_dim=64, block=64) <= limit < forward_memory_bytes(seq=fits + 1, head_dim=64,
                                                                                                  block=64)
    # --max-memory moves the limit (and the advice) with it
    err = _one_line_exit_2(["--seq", "100000", "--max-memory", "0.5"])
    fits_half = int(re.search(r"seq <= (\d+)", err).group(1))
    assert "0.5 GiB limit" in err and fits_half < fits
    assert forward_memory_bytes(seq=fits_half, head_dim=64, block=64) <= 2**29


def test_refusal_comes_before_any_allocation():
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"seq=100000 needs ~[\d.]+ GiB .* limit; use seq <= \d+"):
            simulate_forward(seq=100_000, head_dim=64, block=64)
        with pytest.raises(ValueError, match="head_dim=4096 with block=64 needs"):
            simulate_forward(seq=100_000, head_dim=4096, block=64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # S alone would be 37 GiB
    need = forward_memory_bytes(seq=128, head_dim=32, block=32)
    with pytest.raises(ValueError, match=rf"~{need / 2**20:.1f} MiB .* more than the {(need - 1) / 2**20:.1f} MiB limit"):
        simulate_forward(seq=128, head_dim=32, block=32, max_memory=need - 1)
    with pytest.raises(ValueError, match="max_memory must be a positive integer"):
        simulate_forward(seq=128, head_dim=32, block=32, max_memory=0)


@pytest.mark.parametrize("seq, head_dim, block, causal", [(256, 64, 64, False), (384, 32, 32, True),
                                                          (320, 16, 128, False)])
def test_memory_estimate_bounds_the_measured_peak(seq, head_dim, block, causal):
    """The estimate is above what the run allocates (numpy reference: tracemalloc sees all of it), and
    not far above; the phases' N×N terms dominate from N of a few thousand on."""
    simulate_forward(seq=16, head_dim=head_dim, block=block)  # imports and one-time set-up, not counted
    tracemalloc.start()
    try:
        simulate_forward(seq=seq, head_dim=head_dim, block=block, causal=causal, reference="numpy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    est = forward_memory_bytes(seq=seq, head_dim=head_dim, block=block)
    print(f"N={seq} d={head_dim} B={block}: measured {peak / 2**20:.1f} MiB, estimate {est / 2**20:.1f} MiB")
    assert peak <= est <= 3 * peak


def test_standard_forward_checks_its_memory_before_allocating():
    import numpy as np

    Nq, Nk, D = 200, 300, 24
    q, k, v = (np.ones((n, D), np.float32) for n in (Nq, Nk, Nk))
    need = standard_memory_bytes(seq_q=Nq, seq_k=Nk, head_dim=D)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"{Nq} queries and {Nk} keys needs ~.* \(S and P are {Nq}×{Nk}"):
            run_standard_forward(q, k, v, max_memory=need - 1)
        refused_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        out, _ = run_standard_forward(q, k, v, max_memory=need)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused_peak < Nq * Nk * 4  # less than S alone
    assert np.allclose(out, 1.0) and peak <= need <= 3 * peak


def test_default_memory_limit():
    import os

    from attnlab.sim.kernels.memory import DEFAULT_CAP_BYTES

    limit = default_memory_limit()
    assert 0 < limit <= DEFAULT_CAP_BYTES
    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert limit == min(DEFAULT_CAP_BYTES, phys // 2)
