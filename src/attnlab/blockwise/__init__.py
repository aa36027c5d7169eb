"""attnlab.blockwise — exact attention, block by block, in PyTorch (lecture §5–§8): runs anywhere.

The algorithms of the lecture as a GPU kernel would run them — one program per (batch, K/V head,
block), the online softmax state kept "on chip", every tensor read and written counted by an
optional ``IOStats`` — written with PyTorch tensor operations, so they run on any device and check
the Triton kernels.

    iostats    IOStats: elements read / written / atomically added per tensor, block pairs
    programs   block sizes (cpu_block_sizes), the loop over programs
    tiles      which block pairs a mask lets through (§6.2 causal skipping, sliding windows), the
               variants (softcap, ALiBi) and the mask applied to one score tile
    forward    flash_forward (FA2 order, §5.1), flash_forward_fa1 (FA1 order, §6.3)
    backward   flash_backward (§7.2–7.4) and flash_attention_blockwise (autograd, §7.7)
    varlen     packed variable-length batches: flash_forward_varlen (counted),
               flash_attention_varlen_blockwise (autograd)
    decode     flash_decode_blockwise: Flash-Decoding, contiguous or paged KV cache (§8.4)

Every function takes the variants of ``attnlab.variants`` (``causal``, ``window``, ``softcap``,
``alibi_slopes``) with flash-attn's meaning.

Most users call ``attnlab.flash_attention`` / ``attnlab.flash_decode``, which choose between these and
the Triton kernels.
"""

from __future__ import annotations

from .backward import flash_attention_blockwise, flash_backward
from .decode import flash_decode_blockwise
from .forward import flash_forward, flash_forward_fa1
from .iostats import IOStats
from .programs import cpu_block_sizes
from .varlen import flash_attention_varlen_blockwise, flash_forward_varlen

__all__ = ["IOStats", "cpu_block_sizes", "flash_attention_blockwise", "flash_attention_varlen_blockwise",
           "flash_backward", "flash_decode_blockwise", "flash_forward", "flash_forward_fa1", "flash_forward_varlen"]
