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
    from attnlab import cost
    from attnlab.gpu import decode_config, native
    from attnlab.gpu.prefill_gluon import HAVE_GLUON

    monkeypatch.setattr(native, "ENABLED", False)  # (ATTNLAB_NATIVE_DECODE=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(decode_config, "gpu_for_device", lambda index: cost.get_gpu("H100"))
    monkeypatch.setattr(C, "device_capability", lambda device: cap)
    rows = kernels()
    row = rows["kernels_cuda"]
    if want == "gluon":
        assert ("Gluon (Hopper)" in row) == HAVE_GLUON and row.startswith("Triton")
    else:
        assert row.startswith(want) and "Gluon" not in row
    assert ("decode_splits" in rows) is (cap[0] >= 8)  # (the kernels' split count: where the kernels run)
    if cap[0] >= 8:
        assert rows["decode_splits"].startswith("the calibrated split model, predicted for the H100")
        assert rows["decode_kept_call"] == "the Python path (ATTNLAB_NATIVE_DECODE=0)"


def test_the_kept_call_row_says_whether_the_native_call_is_on(monkeypatch, tmp_path):
    from attnlab.gpu import native
    from attnlab.info import decode_kept_call

    monkeypatch.setattr(native, "ENABLED", True)
    monkeypatch.setattr(native, "build_dir", lambda: tmp_path)
    assert decode_kept_call() == ("the native C++ call (built in the background at its first use; "
                                  "ATTNLAB_NATIVE_DECODE=0: the Python path)")
    (tmp_path / f"{native.NAME}.so").write_bytes(b"")
    assert decode_kept_call() == "the native C++ call (built; ATTNLAB_NATIVE_DECODE=0: the Python path)"


@pytest.mark.parametrize("name,want", [
    ("H200", "the calibrated split model, measured on the H200"),
    ("H100", "the calibrated split model, predicted for the H100 from the H200's (bandwidth x {ratio:.3f})"),
    ("A100", "the lecture's wave model (no calibration for the A100)"),
    ("NVIDIA GeForce RTX 4090", "the lecture's wave model (no calibration for the NVIDIA GeForce RTX 4090)")])
def test_the_decode_split_row_names_the_model(name, want):
    from attnlab import cost
    from attnlab.info import decode_split_model

    ratio = cost.get_gpu("H100").hbm_bw / cost.get_gpu("H200").hbm_bw  # (the presets' HBM bandwidths)
    assert decode_split_model(name) == want.format(ratio=ratio)


def test_no_cuda_row_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "kernels_cuda" not in kernels() and "kernels_cuda" not in info()
    assert info()["kernels_cpu"] == kernels()["kernels_cpu"]
