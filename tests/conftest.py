"""Test set-up.

* Triton kernels run on the CPU through Triton's interpreter when no GPU is present; the variable
  must be set before triton compiles anything, hence here.
* Deterministic by default: every test's random inputs come from a seed derived from the test's id
  (its parameters included) and the session seed, which is 0 unless ``ATTNLAB_SEED`` sets another
  (to replay a run, or to try new inputs). Hypothesis tests draw a seed from the example itself.
* ``@pytest.mark.gpu`` tests need a CUDA GPU; without one they are skipped, test by test, at run time.
* With ``-n`` (pytest-xdist) each worker process drops the ``COLUMNS`` and ``LINES`` that xdist gives it (80 × 24),
  so the command-line tools the tests start print as they do under a plain ``pytest`` off a terminal.
"""

import os
import zlib

import pytest
import torch
from hypothesis import core as hypothesis_core
from hypothesis import settings

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

# Tests run many small tensor operations; on a small shared CPU a second intra-op thread makes them
# several times slower (each op waits for a descheduled thread), and results do not depend on it.
torch.set_num_threads(1)

SEED = int(os.environ.get("ATTNLAB_SEED") or 0)

# Hypothesis: the same examples every run (derandomized) unless ATTNLAB_SEED asks for others; no
# example database (a replayed failure from an earlier run would make runs differ) and no deadline
# (interpreted Triton kernels are slow, and a timing must never fail a test).
settings.register_profile("attnlab", derandomize=not os.environ.get("ATTNLAB_SEED"), database=None,
                          deadline=None)
settings.load_profile("attnlab")
if os.environ.get("ATTNLAB_SEED"):
    hypothesis_core.global_force_seed = SEED


def _interpreter_note() -> str | None:
    """Why Triton kernels cannot run on this CPU, where they cannot: every test that runs one then fails."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    from attnlab._runtime import interpreter_problem

    problem = interpreter_problem()
    return f"attnlab: Triton kernels cannot run here: {problem}" if problem else None


def pytest_report_header(config):
    lines = [f"attnlab: ATTNLAB_SEED={SEED} (set it to draw other random inputs, or to replay a run)"]
    note = _interpreter_note()
    return lines + [note] if note else lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # printed even under -q, so a failure seen in CI can be replayed (or explained)
    terminalreporter.write_line(f"attnlab: random inputs drawn with ATTNLAB_SEED={SEED}")
    note = _interpreter_note()
    if note:
        terminalreporter.write_line(note)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def seed_for(nodeid: str) -> int:
    """The seed of one test: the session seed and the test's id (file, name and parameters)."""
    return (SEED * 1_000_003 + zlib.crc32(nodeid.encode())) % 2**63


@pytest.fixture(autouse=True)
def _seeded(request):
    torch.manual_seed(seed_for(request.node.nodeid))
    yield


@pytest.fixture
def seed(request) -> int:
    """This test's seed, for generators of its own (``torch.Generator().manual_seed(seed)``)."""
    return seed_for(request.node.nodeid)


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private attnlab cache dir, so tests never touch the user's trained checkpoint."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# -- the trained LikesWorld model, shared by tests/model and tests/demos ------------------------------


@pytest.fixture(scope="session")
def trained_cache(tmp_path_factory) -> tuple[str, float]:
    """Train the default LikesWorld model from scratch, once per session, into a fresh private cache
    folder (never the user's); (folder, seconds it took). About a minute on 2 free cores."""
    import time

    from attnlab.model import get_model

    folder = str(tmp_path_factory.mktemp("attnlab-trained-cache"))
    old = os.environ.get("ATTNLAB_CACHE")
    os.environ["ATTNLAB_CACHE"] = folder
    try:
        t0 = time.perf_counter()
        tm = get_model(progress=False)
        seconds = time.perf_counter() - t0
    finally:
        if old is None:
            del os.environ["ATTNLAB_CACHE"]
        else:
            os.environ["ATTNLAB_CACHE"] = old
    assert tm.source == "trained"
    return folder, seconds
