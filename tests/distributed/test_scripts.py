"""The ring's scripts as a user runs them, small, on the CPU: the example and the benchmark under
``torchrun`` (``python -m torch.distributed.run --standalone``, which picks a free port itself) with
gloo and 2 processes, and the benchmark's one-process mode (ranks as threads)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.distributed import ring_schedule

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return env


def _run(args, tmp_path, *, torchrun: bool, timeout=180):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"] if torchrun \
        else [sys.executable]
    return subprocess.run(launcher + [str(a) for a in args], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_example_on_two_gloo_ranks(tmp_path):
    r = _run([ROOT / "examples" / "ring_attention.py", "--backend", "gloo", "--seq", "48", "--heads", "4",
              "--kv-heads", "2", "--head-dim", "16"], tmp_path, torchrun=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = r.stdout
    assert "2 ranks (gloo, cpu, torch.float64): causal attention of N = 48 tokens" in out, out
    errors = dict(re.findall(r"^  (out|dq|dk|dv): (\S+)$", out, re.M))
    assert set(errors) == {"out", "dq", "dk", "dv"}, out
    assert all(float(e) <= 1e-12 for e in errors.values()), errors
    for rank in range(2):  # the printed plan is ring_schedule's
        plan = ring_schedule(rank=rank, world_size=2, local_seq=24, causal=True)
        line = next(x for x in out.splitlines() if x.startswith(f"  rank {rank}: "))
        for s in plan:
            b = s.blocks[0]
            assert f"step {s.step}: K/V of rank {s.source}, q[{b.q0}:{b.q1}]×kv[{b.k0}:{b.k1}]" in line, line
    assert len(re.findall(r"^  (forward|backward) +step \d+: compute", out, re.M)) == 2 + 3


def _check_payload(got, *, world, methods):
    assert got["config"]["world"] == world and got["config"]["seq"] == 48
    assert len(got["check"]) == 8 and all(c["ok"] for c in got["check"]), got["check"]
    assert set(got["results"]) == set(methods)
    for name, res in got["results"].items():
        if name.startswith("attnlab"):
            assert res["seconds"] > 0 and res["tflops_per_gpu"] > 0, (name, res)
        else:  # PyTorch's context parallelism: timed, or skipped with the reason
            assert res.get("seconds", 0) > 0 or res["skipped"], (name, res)
    for name in ("attnlab-ring-zigzag", "attnlab-ring-contiguous"):
        steps = got["steps"][name]
        assert {(s["rank"], s["pass"], s["step"]) for s in steps} == {
            (r, p, s) for r in range(world) for p, n in (("forward", world), ("backward", world + 1)) for s in range(n)}


def test_benchmark_on_two_gloo_ranks(tmp_path):
    out = tmp_path / "data" / "ring.json"
    args = [ROOT / "benchmarks" / "ring.py", "--backend", "gloo", "--device", "cpu", "--seq", "48", "--check-seq", "24",
            "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--dtype", "float32", "--warmup", "0", "--iters", "1",
            "--out", out]
    r = _run(args, tmp_path, torchrun=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())
    _check_payload(got, world=2, methods=("attnlab-ring-zigzag", "attnlab-ring-contiguous", "attnlab-1gpu",
                                          "torch-cp-alltoall", "torch-cp-allgather"))
    assert "forward + backward at N = 48" in r.stdout and f"wrote {out}" in r.stdout


@pytest.mark.parametrize("extra, words", [
    (["--seq", "50"], ("--seq 50", "2·P = 6")),
    (["--methods", "attnlab-ring-zigzag,flash"], ("--methods", "flash")),
    (["--out", "{mine}"], ("mine.json exists", "--force")),
])
def test_benchmark_refuses_bad_arguments(tmp_path, extra, words):
    mine = tmp_path / "mine.json"
    mine.write_text("my results\n")
    args = [ROOT / "benchmarks" / "ring.py", "--virtual-ranks", "3", "--device", "cpu", "--seq", "48",
            "--check-seq", "12", "--out", tmp_path / "x.json", *(str(a).format(mine=mine) for a in extra)]
    r = _run(args, tmp_path, torchrun=False, timeout=60)
    assert r.returncode != 0 and all(w in r.stderr for w in words), r.stderr[-2000:]
    assert not (tmp_path / "x.json").exists() and mine.read_text() == "my results\n"


def test_benchmark_virtual_ranks(tmp_path):
    out = tmp_path / "v.json"
    r = _run([ROOT / "benchmarks" / "ring.py", "--virtual-ranks", "3", "--device", "cpu", "--seq", "48",
              "--check-seq", "24", "--heads", "2", "--head-dim", "8", "--dtype", "float32", "--warmup", "0",
              "--iters", "1", "--methods", "attnlab-ring-zigzag,attnlab-ring-contiguous", "--out", out],
             tmp_path, torchrun=False, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    _check_payload(json.loads(out.read_text()), world=3, methods=("attnlab-ring-zigzag", "attnlab-ring-contiguous"))
