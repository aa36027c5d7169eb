"""The ring's communication (ring attention: the K/V blocks whose summaries §4.4–§4.5's ⊕ merges come
from other devices): each rank sends to rank r+1 and receives from rank r-1 of its process
group with batched point-to-point operations (``dist.batch_isend_irecv``), started before a step's
compute and waited for after it, so the transfer hides under the compute when it is shorter.

``RingComm(group)`` — rank, world size and the two neighbours' global ranks; ``send_recv(tensors)``
starts one batch and returns a ``Transfer`` whose ``wait()`` returns the received tensors;
``agree_on(descriptor)`` gathers a small integer description of every rank's inputs, so that a
mismatch between ranks is refused on every rank alike instead of hanging a transfer.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["RingComm", "Transfer"]


class Transfer:
    """A batch of sends and receives in flight; ``wait()`` returns the received tensors."""

    def __init__(self, works, received: tuple[torch.Tensor, ...]):
        self._works = works
        self._received = received

    def wait(self) -> tuple[torch.Tensor, ...]:
        # on CUDA (NCCL) this makes the current stream wait for the transfer, without blocking the host
        for w in self._works:
            w.wait()
        self._works = []
        return self._received


class RingComm:
    """Ring neighbours in ``group`` (None: the default group). Needs ``torch.distributed`` initialised."""

    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("attnlab.distributed.ring_attention needs torch.distributed initialised: call "
                               "torch.distributed.init_process_group (e.g. under torchrun) first")
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of the group it was given")
        self.send_to = self._global((self.rank + 1) % self.world_size)
        self.recv_from = self._global((self.rank - 1) % self.world_size)

    def _global(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def send_recv(self, tensors, *, tag: int = 0) -> Transfer:
        """Send ``tensors`` to rank r+1 and receive tensors of the same shapes from rank r-1; the
        i-th tensor travels with tag ``tag + i`` (NCCL ignores tags and matches in order)."""
        received = tuple(torch.empty_like(t) for t in tensors)
        ops = []
        for i, (t, buf) in enumerate(zip(tensors, received)):
            ops.append(dist.P2POp(dist.isend, t, self.send_to, self.group, tag + i))
            ops.append(dist.P2POp(dist.irecv, buf, self.recv_from, self.group, tag + i))
        return Transfer(dist.batch_isend_irecv(ops), received)

    def agree_on(self, descriptor: list[int], device) -> list[list[int]]:
        """Every rank's ``descriptor`` (a list of ints of one length), gathered on every rank."""
        mine = torch.tensor(descriptor, dtype=torch.int64, device=device)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine, group=self.group)
        return [g.tolist() for g in gathered]
