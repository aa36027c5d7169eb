"""Run a function on P local processes joined in a gloo process group, for the ring attention tests.

``launch(fn, world_size=P, args=..., workdir=tmp_path)`` spawns P processes (torch.multiprocessing,
start method "spawn"), which rendezvous through a file in ``workdir`` (no TCP port to pick), run
``fn(rank, world_size, *args)`` with one intra-op thread, and save its result; the parent returns the
P results in rank order. The whole run is bounded by ``timeout`` seconds: past it every process
still running is killed and ``TimeoutError`` raised. Workers live here, not in a test file, so that
the spawned interpreters import them by a plain module name.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank, fn, world_size, workdir, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(workdir) / f"rank{rank}.pt")


def launch(fn, *, world_size: int, args: tuple = (), workdir: Path, timeout: float = 90.0) -> list:
    """``fn(rank, world_size, *args)`` on ``world_size`` processes; their results in rank order."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = mp.start_processes(_entry, args=(fn, world_size, str(workdir), args), nprocs=world_size, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=0.5):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fn.__name__} on {world_size} processes did not finish in {timeout:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
    return [torch.load(workdir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


# -- workers ---------------------------------------------------------------------------------------------


def _full_inputs(case: dict, seed: int):
    g = torch.Generator().manual_seed(seed)
    B, H, Hkv, N, D = case["B"], case["H"], case["Hkv"], case["N"], case["D"]
    f64 = torch.float64
    q = torch.randn(B, H, N, D, dtype=f64, generator=g)
    k = torch.randn(B, Hkv, N, D, dtype=f64, generator=g)
    v = torch.randn(B, Hkv, N, D, dtype=f64, generator=g)
    dout = torch.randn(B, H, N, D, dtype=f64, generator=g)
    return q, k, v, dout


def ring_vs_reference(rank: int, world_size: int, cases: list[dict], seed: int, group=None) -> list[dict]:
    """Every case: ring attention of this rank's chunk, forward and backward, against the shard of the
    single-process float64 reference; the largest absolute errors. ``group``: the ring's group, of
    which ``rank`` and ``world_size`` are this process's rank and the size."""
    from attnlab.distributed import StepTimeline, ring_attention, shard
    from attnlab.reference import attention_ref

    results = []
    for i, case in enumerate(cases):
        q, k, v, dout = _full_inputs(case, seed + i)
        causal, layout = case["causal"], case["layout"]
        # the oracle: one process, the whole sequence
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        out_ref, _ = attention_ref(*ref, causal=causal)
        (out_ref * dout).sum().backward()
        want = [out_ref.detach()] + [t.grad for t in ref]

        def cut(t, layout=layout):
            return shard(t, world_size=world_size, rank=rank, layout=layout)

        mine = [cut(t).requires_grad_() for t in (q, k, v)]
        args = mine
        if case.get("strided"):  # k and v as non-contiguous views (sequence dim not outermost in memory)
            args = [mine[0]] + [t.transpose(2, 3).contiguous().transpose(2, 3) for t in mine[1:]]
            assert not args[1].is_contiguous()
        timeline = StepTimeline()
        out = ring_attention(*args, group=group, causal=causal, layout=layout, timeline=timeline)
        (out * cut(dout)).sum().backward()
        got = [out.detach()] + [t.grad for t in mine]
        errs = {name: (g - cut(w)).abs().max().item() for name, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
        rows = timeline.rows()
        results.append(case | {"errors": errs, "dtype": str(out.dtype), "shape": tuple(out.shape),
                               "timeline_steps": sorted({(r["pass"], r["step"]) for r in rows}),
                               "timeline_finite": all(math.isfinite(r["compute_s"]) and r["compute_s"] >= 0
                                                      and r["wait_s"] >= 0 for r in rows)})
    return results


def cases_for(world_size: int) -> list[dict]:
    """Causal and not, both layouts, GQA and MQA; N = 2P·c with odd half-chunks c (3 or 5)."""
    N = 2 * world_size * (5 if world_size == 2 else 3)
    out = [dict(B=1, H=2, Hkv=2, N=N, D=8, causal=causal, layout=layout)
           for causal in (True, False) for layout in ("zigzag", "contiguous")]
    out.append(dict(B=2, H=4, Hkv=2, N=N, D=8, causal=True, layout="zigzag"))  # GQA
    out.append(dict(B=1, H=3, Hkv=1, N=N, D=16, causal=True, layout="contiguous"))  # MQA
    out.append(dict(B=1, H=2, Hkv=1, N=N, D=8, causal=True, layout="zigzag", strided=True))
    return out


# rings run by ``all_rings`` on 4 processes: (name, global ranks of the group); the 2-rank ring is made of
# global ranks 1 and 3, so that group ranks and global ranks differ
RINGS = (("P4", (0, 1, 2, 3)), ("P3", (0, 1, 2)), ("P2", (1, 3)))


def all_rings(rank: int, world_size: int, seed: int) -> dict:
    """On 4 processes: ``ring_vs_reference`` on the whole group (P = 4) and on sub-groups of 3 and 2
    ranks, then ``ring_rejects`` on the whole group. {ring name: results (None off the ring), "rejects": ...}"""
    out = {}
    for name, members in RINGS:
        group = None if len(members) == world_size else dist.new_group(list(members))  # every rank calls new_group
        if rank in members:
            P = len(members)
            out[name] = ring_vs_reference(members.index(rank), P, cases_for(P), seed, group)
        else:
            out[name] = None
    out["rejects"] = ring_rejects(rank, world_size, seed)
    return out


def ring_rejects(rank: int, world_size: int, seed: int) -> dict:
    """The messages ring_attention raises on this rank for inputs it must refuse."""
    from attnlab.distributed import ring_attention

    g = torch.Generator().manual_seed(seed)

    def x(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=g)

    def msg(fn):
        try:
            fn()
        except (ValueError, TypeError) as e:
            return f"{type(e).__name__}: {e}"
        return None

    n = 6 if rank == 0 else 8  # the ranks disagree on the local length
    return {
        "odd_zigzag": msg(lambda: ring_attention(x(1, 2, 5, 4), x(1, 2, 5, 4), x(1, 2, 5, 4), layout="zigzag")),
        "ranks_differ": msg(lambda: ring_attention(x(1, 2, n, 4), x(1, 2, n, 4), x(1, 2, n, 4))),
        "q_k_lengths": msg(lambda: ring_attention(x(1, 2, 6, 4), x(1, 2, 4, 4), x(1, 2, 4, 4))),
        "heads": msg(lambda: ring_attention(x(1, 3, 6, 4), x(1, 2, 6, 4), x(1, 2, 6, 4))),
        "layout": msg(lambda: ring_attention(x(1, 2, 6, 4), x(1, 2, 6, 4), x(1, 2, 6, 4), layout="striped")),
        "causal": msg(lambda: ring_attention(x(1, 2, 6, 4), x(1, 2, 6, 4), x(1, 2, 6, 4), causal=1)),
        # after every refusal the ring still works: the refusals left no transfer half done
        "after": ring_attention(x(1, 2, 6, 4), x(1, 2, 6, 4), x(1, 2, 6, 4), causal=True).shape,
    }
