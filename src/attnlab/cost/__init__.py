"""attnlab.cost — what attention costs on a GPU, in closed form (lecture §3, §5.4–5.5, §6.1–6.3,
§7.5–7.6, §8.2–8.4, §12).

GPU presets (``gpus``), FLOPs (``flops``), HBM traffic per head (``io``), roofline estimates
(``roofline``), inference models (``decode``), the lecture's tables (``tables``), the roofline plot
(``plot``) and ``attnlab estimate`` (``estimate``, ``cli``). Importing this package loads only the
standard library; rich and matplotlib are imported inside the functions that draw.
"""

from __future__ import annotations

from .decode import (
    DecodeSplit,
    LayerCosts,
    best_num_splits,
    decode_attention_intensity,
    decode_blocks,
    decode_split_cost,
    decode_split_time,
    kv_cache_bytes,
    layer_costs,
)
from .estimate import DecodeEstimate, Estimate, estimate
from .flops import (
    attention_flops,
    causal_visible_pairs,
    linear_flops,
    linear_params,
    lse_bytes,
    scores_bytes,
)
from .gpus import GPU, GPUS, get_gpu
from .io import (
    BlockPairs,
    KernelIO,
    block_pairs,
    causal_block_pairs,
    causal_fraction,
    causal_kv_bytes_saved,
    dq_atomic_elements,
    fa1_forward_kernels,
    flash_backward_kernels,
    flash_forward_kernels,
    io_fa1_forward,
    io_fa1_forward_breakdown,
    io_flash_backward,
    io_flash_backward_breakdown,
    io_flash_forward,
    io_flash_forward_breakdown,
    io_standard_backward,
    io_standard_backward_breakdown,
    io_standard_forward,
    io_standard_forward_breakdown,
    sram_bytes,
    standard_backward_kernels,
    standard_forward_kernels,
)
from .roofline import (
    BackwardEstimate,
    ForwardEstimate,
    KernelCost,
    backward_estimate,
    cost_kernels,
    estimate_backward,
    estimate_forward,
    kernel_time,
    recompute_crossover_d,
    recompute_ratio,
)
from .plot import roofline_plot
from .tables import (
    block_size_table,
    decode_split_table,
    forward_io_table,
    layer_flops_table,
    p_vs_l_table,
    prefill_decode_table,
    recompute_table,
    render_table,
)

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
