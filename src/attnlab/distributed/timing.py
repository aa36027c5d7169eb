"""Per-step timings of ring attention (the merge ⊕ of §4.4–§4.5 across devices): how long each step
computed and how long it then waited for the ring's transfers — the overlap of communication with
compute, measured.

Pass ``timeline=StepTimeline()`` to ``ring_attention``; every forward and backward step records two
spans: ``compute`` (the step's attention blocks and ⊕ merges) and ``wait`` (waiting for the K/V — and
in the backward the dK/dV — that arrive for the next step; 0 when the transfer finished under the
compute). On CUDA the spans are CUDA events on the current stream, so ``wait`` is the time the
compute stream stalled on the transfer; elsewhere host wall-clock time. ``rows()`` synchronises once
and returns one dict per (pass, step); ``totals()`` sums them per pass.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

__all__ = ["StepTimeline"]

KINDS = ("compute", "wait")


class StepTimeline:
    """Spans recorded by ring attention, per call, pass ("forward" | "backward"), step and kind."""

    def __init__(self):
        self._spans = []  # (call, pass, step, kind, start, end): floats or CUDA events
        self.calls = 0

    def new_call(self) -> int:
        self.calls += 1
        return self.calls - 1

    @contextmanager
    def span(self, call: int, pass_: str, step: int, kind: str, device: torch.device):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
        else:
            start = time.perf_counter()
            yield
            end = time.perf_counter()
        self._spans.append((call, pass_, step, kind, start, end))

    def rows(self) -> list[dict]:
        """One dict per (call, pass, step): ``compute_s`` and ``wait_s`` in seconds."""
        if any(not isinstance(s[4], float) for s in self._spans):
            torch.cuda.synchronize()
        table: dict[tuple, dict] = {}
        for call, pass_, step, kind, start, end in self._spans:
            seconds = end - start if isinstance(start, float) else start.elapsed_time(end) / 1e3
            row = table.setdefault((call, pass_, step), {"call": call, "pass": pass_, "step": step,
                                                          "compute_s": 0.0, "wait_s": 0.0})
            row[f"{kind}_s"] += seconds
        return [table[k] for k in sorted(table, key=lambda k: (k[0], k[1] != "forward", k[2]))]

    def totals(self) -> dict[str, dict[str, float]]:
        """{pass: {"compute_s", "wait_s", "calls"}} summed over steps, per call on average."""
        out: dict[str, dict[str, float]] = {}
        calls: dict[str, set] = {}
        for row in self.rows():
            t = out.setdefault(row["pass"], {"compute_s": 0.0, "wait_s": 0.0})
            t["compute_s"] += row["compute_s"]
            t["wait_s"] += row["wait_s"]
            calls.setdefault(row["pass"], set()).add(row["call"])
        for p, t in out.items():
            n = len(calls[p])
            t["compute_s"] /= n
            t["wait_s"] /= n
            t["calls"] = n
        return out

    def clear(self) -> None:
        self._spans.clear()
        self.calls = 0
