"""benchmarks/device_*.sh, the one-call GPU scripts: they parse, name their data files after the GPU they ran on
(``gpu_tag`` in device_env.sh), set that name before they use it, and run only scripts and tests that exist."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from tests.helpers import ROOT

BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.glob("device_*.sh") if p.name != "device_env.sh")
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _gpu_tag(name: str) -> str:
    body = re.search(r"^gpu_tag\(\) \{\n.*?^\}\n", (BENCH / "device_env.sh").read_text(), re.S | re.M)
    assert body, "device_env.sh defines no gpu_tag"
    out = subprocess.run(["bash", "-c", body.group(0) + 'gpu_tag "$1"', "gpu_tag", name], capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize("name,tag", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                      ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA B200", "b200"),
                                      ("NVIDIA GeForce RTX 4090", "gpu"), ("", "gpu")])
def test_the_gpu_tag_is_the_model(name, tag):
    assert _gpu_tag(name) == tag


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 10 and (BENCH / "device_scorecard.sh") in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_device_script_parses_and_names_its_files_after_the_gpu(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    lines = script.read_text().splitlines()
    code = [(i, line) for i, line in enumerate(lines) if not line.lstrip().startswith("#")]
    assert not [line for _, line in code if re.search(r"-h[12]00-", line)], "a data file named after one GPU"
    uses = [i for i, line in code if "GPU_TAG" in line]
    sourced = [i for i, line in code if re.search(r"^\s*source .*device_env\.sh", line)]
    if uses:
        assert sourced and sourced[0] < uses[0], "GPU_TAG used before device_env.sh is sourced"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_device_script_runs_what_exists(script):
    """Every benchmarks/*.py and tests/**.py path a script names (outside its comments) is in the repository."""
    code = "\n".join(line for line in script.read_text().splitlines() if not line.lstrip().startswith("#"))
    paths = set(re.findall(r"\b((?:benchmarks|tests)/[\w/]+\.(?:py|sh))\b", code))
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    assert not missing, f"{script.name} runs files that are not here: {missing}"
