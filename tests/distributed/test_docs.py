"""docs/ring.md: every block marked ``<!-- what made it -->`` is what that call prints today — the
schedule grids, the ``attnlab estimate --ranks`` table, the benchmark's saved results re-printed."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from attnlab.cost.ring import ring_estimate
from attnlab.distributed import schedule_grid

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ring.md"
BLOCK = re.compile(r"<!-- (.+?) -->\n```text\n(.*?)```", re.S)


def _run(args: list[str]) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "LANG": "C.UTF-8"}
    r = subprocess.run([sys.executable, "-I", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def generate(what: str) -> str:
    """The text the call named in a marker prints (lines stripped on the right)."""
    m = re.fullmatch(r"schedule_grid\((.*)\)", what)
    if m:
        kwargs = dict(re.findall(r"(\w+)=(\w+|\"\w+\")", m[1]))
        text = schedule_grid(world_size=int(kwargs["world_size"]), layout=kwargs.get("layout", '"zigzag"').strip('"'))
    elif what.startswith("attnlab estimate "):
        out = _run(["-m", "attnlab", *what.split()[1:]])
        text = out[out.rindex("\n", 0, out.index("ring attention over P GPUs")) + 1:]  # the ring part
    elif what.startswith("python benchmarks/ring.py --report "):
        text = _run(what.split()[1:])
    else:
        raise AssertionError(f"docs/ring.md names a generator the test does not know: {what!r}")
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


def test_every_generated_block_is_current():
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 7, [w for w, _ in blocks]
    for what, text in blocks:
        assert text == generate(what), f"docs/ring.md is out of date for {what}"


def test_doc_points_inside_the_repository():
    text = DOC.read_text(encoding="utf-8")
    # no absolute file paths and no folders above the repository
    assert not re.search(r"(^|[\s`(])/[A-Za-z]", text) and "../" not in text


def test_prose_numbers_follow_the_data():
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    res = json.loads((ROOT / "benchmarks" / "data" / "ring-virtual-h200-2ranks.json").read_text())
    single = res["results"]["attnlab-1gpu"]["seconds"]
    overhead = round(100 * (res["results"]["attnlab-ring-zigzag"]["seconds"] / single - 1))
    assert f"costs about {overhead}% over attnlab on one GPU" in text
    c, P = res["config"], res["config"]["world"]
    kv = c["batch"] * c["kv_heads"] * (c["seq"] // P) * 2 * c["head_dim"] * 2  # bf16 K and V of a rank
    ratios = [s["compute_s"] / (kv / 450e9 + 10e-6) for s in res["steps"]["attnlab-ring-zigzag"]
              if s["pass"] == "forward" and s["step"] < P - 1]  # forward steps that send K/V
    assert f"a step's compute is about {int(min(ratios))} times its NVLink transfer" in text
    kw = dict(ranks=8, seq=131072, gpu="H200", heads=16, dtype_bytes=2, causal=True)
    assert ring_estimate(link="nvlink4", **kw).hidden
    assert not ring_estimate(link="pcie5", **kw).hidden and not ring_estimate(link="ib-ndr", **kw).hidden
    assert "With `--link pcie5` or `--link ib-ndr` the 8-rank ring no longer hides its transfers at this N" in text


def test_two_gpu_prose_follows_the_data():
    """The 2-GPU section's ratios are the saved run's: scaling over one GPU and against PyTorch's
    context parallelism."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    r = json.loads((ROOT / "benchmarks" / "data" / "ring-h200-2gpu.json").read_text())["results"]
    sec = {k: v["seconds"] for k, v in r.items()}
    zig = sec["attnlab-1gpu"] / sec["attnlab-ring-zigzag"]
    contig = sec["attnlab-1gpu"] / sec["attnlab-ring-contiguous"]
    vs_torch = sec["torch-cp-alltoall"] / sec["attnlab-ring-zigzag"]
    assert f"forward + backward at {zig:.2f}× attnlab on one GPU" in text
    assert f"Contiguous reaches {contig:.2f}×" in text
    assert f"**Against PyTorch's context parallelism**: {vs_torch:.2f}×" in text
    assert f"({sec['attnlab-ring-zigzag'] * 1e3:.0f} ms against {sec['torch-cp-alltoall'] * 1e3:.0f} for `alltoall`" in text
