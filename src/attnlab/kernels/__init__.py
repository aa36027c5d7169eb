"""The lecture's CUDA-style attention kernels, run on the GPU simulator ``attnlab.sim`` (§5.2–5.3,
§6.2–6.3).

* ``matmul.py``  — 16×16 shared-memory tiled matmul, padded to 17 columns (kernels ① and ③)
* ``softmax.py`` — row softmax with two block tree reductions, sequential addressing (kernel ②)
* ``flash.py``   — FlashAttention forward in one kernel: FA2 order, causal block skipping, FA1 order
* ``backward.py`` — FlashAttention backward in one kernel: K/V blocks outer, P from L, dQ by atomic adds
* ``api.py``     — ``run_standard_forward``, ``run_flash_forward``: inputs in, outputs and counts out;
  ``reference_forward``: the float64 numpy oracle
* ``simulate.py`` — ``simulate_forward``: both designs, every count beside ``attnlab.cost``'s closed form
* ``cli.py``     — ``attnlab simulate``
"""

from .api import reference_forward, run_flash_backward, run_flash_forward, run_standard_forward
from .simulate import print_simulation, simulate_forward

__all__ = [
    "print_simulation",
    "reference_forward",
    "run_flash_backward",
    "run_flash_forward",
    "run_standard_forward",
    "simulate_forward",
]
