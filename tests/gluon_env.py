"""What the Gluon kernels' tests need to know about the machine they run on: the device (``DEV``), whether it is a
Hopper GPU (``HOPPER``), and the skip marks of tests that build sm_90 code on any machine (``needs_gluon``: a triton
with Gluon) or run it (``on_hopper``: a Hopper GPU as well). Import it after ``pytest.importorskip("triton")``."""

import pytest
import torch

from attnlab.gpu import prefill_gluon as G

DEV = "cuda" if torch.cuda.is_available() else "cpu"
HOPPER = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0)
needs_gluon = pytest.mark.skipif(not G.HAVE_GLUON, reason="this triton has no Gluon")
on_hopper = pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
