"""attnlab.distributed — context parallelism: ring attention on ``torch.distributed`` (the merge ⊕ of
lecture §4.4–§4.5, with the K/V blocks on other devices).

    layout     how a sequence is cut among P ranks: zigzag (chunks r and 2P-1-r) or contiguous;
               shard / unshard, zigzag_shard / zigzag_unshard, local_positions
    schedule   which blocks rank r computes at each ring step (ring_schedule, step_pairs, schedule_grid)
    comm       the ring's batched point-to-point transfers (RingComm)
    timing     per-step compute and communication-wait times (StepTimeline)
    ring       ring_attention (autograd), ring_forward / ring_backward

This layer sits above ``attnlab.api``: every step runs ``attnlab.api.attention_forward`` /
``attention_backward`` (the Triton kernels on CUDA, the blockwise path on a CPU).
"""

from __future__ import annotations

from .comm import RingComm
from .layout import LAYOUTS, chunk_ids, local_positions, shard, unshard, zigzag_shard, zigzag_unshard
from .ring import ring_attention, ring_backward, ring_forward
from .schedule import Block, Step, ring_schedule, schedule_grid, step_pairs
from .timing import StepTimeline

__all__ = ["LAYOUTS", "Block", "RingComm", "Step", "StepTimeline", "chunk_ids", "local_positions", "ring_attention",
           "ring_backward", "ring_forward", "ring_schedule", "schedule_grid", "shard", "step_pairs", "unshard", "zigzag_shard",
           "zigzag_unshard"]
