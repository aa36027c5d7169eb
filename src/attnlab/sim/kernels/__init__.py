"""The lecture's CUDA-style attention kernels, run on the GPU simulator ``attnlab.sim`` (§5.2–5.3,
§6.2–6.3, §7.2–7.4). The simulator itself knows nothing of attention; this package is its user.

* ``matmul.py``  — ``matmul_tiled``: 16×16 shared-memory tiled matmul, padded to 17 columns (kernels ① and ③)
* ``softmax.py`` — ``row_softmax``: row softmax with two block tree reductions, sequential addressing (kernel ②)
* ``flash.py``   — ``flash_fwd`` (FA2 order, causal block skipping), ``flash_fwd_fa1`` (FA1 order),
  ``flash_fwd_shared_bytes``
* ``backward.py`` — ``flash_bwd``: K/V blocks outer, P from L, dQ by atomic adds
* ``api.py``     — ``run_standard_forward``, ``run_flash_forward``, ``run_flash_backward``: inputs in,
  outputs and counts out; ``reference_forward``: the float64 numpy oracle
* ``memory.py``  — ``forward_memory_bytes``, ``standard_memory_bytes``: what a simulation needs,
  estimated before allocating
* ``simulate.py`` — ``simulate_forward``: both designs, every count beside ``attnlab.cost``'s closed form
* ``tables.py``  — ``print_simulation``: its rich tables
* ``cli.py``     — ``attnlab simulate``

The kernels are plain functions ``kernel(ctx, *args)``: launch them yourself with ``sim.Device.launch``
(their docstrings give grid, block and arguments), e.g. to change one and see what its counts become.
"""

from .api import reference_forward, run_flash_backward, run_flash_forward, run_standard_forward
from .backward import flash_bwd
from .flash import flash_fwd, flash_fwd_fa1, flash_fwd_shared_bytes
from .matmul import matmul_tiled
from .memory import default_memory_limit, forward_memory_bytes, standard_memory_bytes
from .simulate import simulate_forward
from .softmax import row_softmax
from .tables import print_simulation

__all__ = [
    "default_memory_limit",
    "flash_bwd",
    "flash_fwd",
    "flash_fwd_fa1",
    "flash_fwd_shared_bytes",
    "forward_memory_bytes",
    "matmul_tiled",
    "print_simulation",
    "reference_forward",
    "row_softmax",
    "run_flash_backward",
    "run_flash_forward",
    "run_standard_forward",
    "simulate_forward",
    "standard_memory_bytes",
]
