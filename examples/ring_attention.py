"""Ring attention in action: one causal attention over a sequence cut among the ranks of a process
group, forward and backward, checked against one process computing it whole (the merge ⊕ of lecture
§4.4–§4.5, with the K/V blocks arriving from other devices).

    torchrun --nproc-per-node 2 examples/ring_attention.py                  # GPUs (NCCL)
    torchrun --nproc-per-node 2 examples/ring_attention.py --backend gloo   # any CPU

1. Every rank builds the same full q, k, v (a seeded generator) and keeps its zigzag piece
   (``zigzag_shard``: chunks r and 2P-1-r of 2P).
2. ``ring_attention`` on the pieces — causal, GQA (``--heads`` query heads share ``--kv-heads``) —
   and its backward.
3. The pieces of the output and of the gradients are gathered and put back in order
   (``zigzag_unshard``), then compared with ``attnlab.flash_attention`` on the whole sequence.
4. Rank 0 prints what each rank computed at each ring step (``ring_schedule``) and the time each
   step computed and waited for its transfers (``StepTimeline``).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from attnlab import flash_attention
from attnlab.distributed import StepTimeline, ring_attention, ring_schedule, zigzag_shard, zigzag_unshard


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl" if torch.cuda.is_available() else "gloo")
    p.add_argument("--seq", type=int, default=256, help="tokens in all, a multiple of 2·ranks (default: %(default)s)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    args = p.parse_args()
    for name in ("seq", "heads", "kv_heads", "head_dim"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.heads % args.kv_heads:
        p.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    return args


def gather(t: torch.Tensor, P: int) -> torch.Tensor:
    """Every rank's zigzag piece of ``t``, put back in sequence order."""
    pieces = [torch.empty_like(t) for _ in range(P)]
    dist.all_gather(pieces, t.contiguous())
    return zigzag_unshard(pieces)


def main() -> None:
    args = parse()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(args.backend)
    rank, P = dist.get_rank(), dist.get_world_size()
    if args.seq % (2 * P):
        if rank == 0:
            print(f"ring_attention.py: --seq {args.seq} is not a multiple of 2·ranks = {2 * P}")
        dist.destroy_process_group()
        raise SystemExit(2)
    device = torch.device("cuda", torch.cuda.current_device()) if args.backend == "nccl" else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float64

    # 1. the same full tensors on every rank; each keeps its zigzag piece
    g = torch.Generator(device=device).manual_seed(0)
    B, H, Hkv, N, D = 1, args.heads, args.kv_heads, args.seq, args.head_dim
    q, k, v, dout = (torch.randn(B, h, N, D, generator=g, device=device, dtype=dtype) for h in (H, Hkv, Hkv, H))
    mine = [zigzag_shard(t, world_size=P, rank=rank).requires_grad_() for t in (q, k, v)]

    # 2. ring attention on the pieces, forward and backward (a first call warms up, the second is timed)
    ring_attention(*mine, causal=True).sum().backward()
    for x in mine:
        x.grad = None
    timeline = StepTimeline()
    out = ring_attention(*mine, causal=True, timeline=timeline)
    out.backward(zigzag_shard(dout, world_size=P, rank=rank))

    # 3. gathered and compared with one process doing it whole
    got = [gather(t, P) for t in (out.detach(), *(x.grad for x in mine))]
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = flash_attention(*whole, causal=True)
    ref.backward(dout)
    want = [ref.detach(), *(x.grad for x in whole)]
    errors = {name: (a.double() - b.double()).abs().max().item() for name, a, b in zip(("out", "dq", "dk", "dv"), got, want)}
    steps = [None] * P
    dist.all_gather_object(steps, timeline.rows())

    if rank == 0:
        c = N // (2 * P)
        print(f"{P} ranks ({args.backend}, {device.type}, {dtype}): causal attention of N = {N:,} tokens, "
              f"{H} query heads sharing {Hkv} K/V heads, D = {D}")
        print(f"zigzag layout: 2·{P} chunks of {c} tokens; rank r holds chunks r and {2 * P - 1}-r")
        print("\nwhat each rank computes at each step (local query rows × rows of the K/V block it holds):")
        for r in range(P):
            plan = ring_schedule(rank=r, world_size=P, local_seq=2 * c, causal=True)
            cells = []
            for s in plan:
                blocks = " + ".join(f"q[{b.q0}:{b.q1}]×kv[{b.k0}:{b.k1}]{' causal' if b.causal else ''}"
                                    for b in s.blocks) or "nothing"
                cells.append(f"step {s.step}: K/V of rank {s.source}, {blocks}")
            print(f"  rank {r}: " + "; ".join(cells))
        print("\nring vs one process on the whole sequence (max abs difference):")
        for name, e in errors.items():
            print(f"  {name}: {e:.3e}")
        print("\nper step, rank 0 (compute, then waiting for the next block's transfer):")
        for row in steps[0]:
            print(f"  {row['pass']:8s} step {row['step']}: compute {row['compute_s'] * 1e3:8.3f} ms, "
                  f"wait {row['wait_s'] * 1e3:8.3f} ms")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
