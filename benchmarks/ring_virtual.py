"""The ring's ranks as threads of one process on one device, for ``benchmarks/ring.py --virtual-ranks P``
(ring attention, the merge ⊕ of lecture §4.4–§4.5 across ranks, without a second device).

``thread_ring(P, fn)`` runs ``fn(comm)`` on P threads; ``ThreadComm`` gives ``ring_forward`` /
``ring_backward`` the interface of ``attnlab.distributed.RingComm`` with in-memory hand-overs (the
threads share the device's stream, so a tensor handed over was computed before it is read);
``LockedTimeline`` times each compute span alone on that shared stream.
"""

from __future__ import annotations

import queue
import threading
import traceback
from contextlib import contextmanager

from attnlab.distributed import StepTimeline


class _Handover:
    def __init__(self, boxes, rank, tag, n):
        self.boxes, self.rank, self.tag, self.n = boxes, rank, tag, n

    def wait(self):
        return tuple(self.boxes[(self.rank, self.tag + i)].get(timeout=600) for i in range(self.n))


class ThreadComm:
    """``RingComm``'s interface for rank ``rank`` of a ring of threads: a send puts the tensors in the
    next rank's boxes (one FIFO per receiver and tag), a wait takes them out of this rank's."""

    def __init__(self, boxes: dict, rank: int, world_size: int):
        self.boxes, self.rank, self.world_size = boxes, rank, world_size

    def send_recv(self, tensors, *, tag: int = 0):
        for i, t in enumerate(tensors):
            self.boxes[((self.rank + 1) % self.world_size, tag + i)].put(t)
        return _Handover(self.boxes, self.rank, tag, len(tensors))


class LockedTimeline(StepTimeline):
    """A virtual rank's timeline: its compute spans hold one lock shared by all the ranks, so each span's
    kernels sit together on the shared stream and its CUDA events time them alone."""

    def __init__(self, lock: threading.Lock):
        super().__init__()
        self.lock = lock

    @contextmanager
    def span(self, call, pass_, step, kind, device):
        if kind != "compute":  # never hold the lock while waiting for another rank
            with super().span(call, pass_, step, kind, device):
                yield
            return
        with self.lock, super().span(call, pass_, step, kind, device):
            yield


def thread_ring(P: int, fn):
    """``fn(comm)`` on P threads, one per rank; their results in rank order (an exception re-raised)."""
    boxes = {(r, t): queue.Queue() for r in range(P) for t in range(4)}
    results, errors = [None] * P, []

    def work(r):
        try:
            results[r] = fn(ThreadComm(boxes, r, P))
        except BaseException:  # noqa: BLE001 - re-raised in the caller
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=work, args=(r,)) for r in range(P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("a virtual rank failed:\n" + errors[0])
    return results
