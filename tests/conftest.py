"""Test set-up.

* Triton kernels run on the CPU through Triton's interpreter when no GPU is present; the variable
  must be set before triton compiles anything, hence here.
* Every run draws fresh random inputs: the session seed is random unless ``ATTNLAB_SEED`` is set,
  and pytest prints it in its header so a failure can be replayed.
"""

import os
import zlib

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Tests run many small tensor operations; on a small shared CPU a second intra-op thread makes them
# several times slower (each op waits for a descheduled thread), and results do not depend on it.
torch.set_num_threads(1)

SEED = int(os.environ.get("ATTNLAB_SEED") or int.from_bytes(os.urandom(3), "little"))


def pytest_report_header(config):
    return f"attnlab: ATTNLAB_SEED={SEED} (set it to replay this run's random inputs)"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # printed even under -q, so a failure seen in CI can be replayed
    terminalreporter.write_line(f"attnlab: random inputs drawn with ATTNLAB_SEED={SEED}")


@pytest.fixture(autouse=True)
def _seeded(request):
    torch.manual_seed(SEED + zlib.crc32(request.node.nodeid.encode()))
    yield


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private attnlab cache dir, so tests never touch the user's trained checkpoint."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def gpu_only(fn):
    """Mark a test that needs a CUDA GPU; it is skipped (per test, at run time) without one."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))
