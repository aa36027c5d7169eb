"""``attnlab info``'s kernel rows: which code serves an attention call, by device and installation."""

from __future__ import annotations

import pytest
import torch

import attnlab.gpu.config as C
from attnlab import _runtime
from attnlab.info import info, kernels

pytestmark = pytest.mark.skipif(not _runtime.triton_available(), reason="needs triton")


def test_cpu_row_follows_the_interpreter_switch(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert kernels()["kernels_cpu"].startswith("blockwise PyTorch (with TRITON_INTERPRET=1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_runtime, "interpreter_problem", lambda: None)
    assert kernels()["kernels_cpu"].startswith("the Triton kernels in triton's interpreter")
    monkeypatch.setattr(_runtime, "interpreter_problem", lambda: "numpy too new")
    assert kernels()["kernels_cpu"].endswith("cannot run the kernels here: numpy too new)")


@pytest.mark.parametrize("cap, want", [((9, 0), "gluon"), ((8, 0), "Triton"), ((10, 0), "Triton"),
                                       ((7, 5), "blockwise PyTorch (compute capability 7.5")])
def test_cuda_row_by_compute_capability(monkeypatch, cap, want):
    from attnlab.gpu.prefill_gluon import HAVE_GLUON

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(C, "device_capability", lambda device: cap)
    row = kernels()["kernels_cuda"]
    if want == "gluon":
        assert ("Gluon (Hopper)" in row) == HAVE_GLUON and row.startswith("Triton")
    else:
        assert row.startswith(want) and "Gluon" not in row


def test_no_cuda_row_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "kernels_cuda" not in kernels() and "kernels_cuda" not in info()
    assert info()["kernels_cpu"] == kernels()["kernels_cpu"]
