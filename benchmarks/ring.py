"""Ring attention benchmark (context parallelism; the merge ⊕ of lecture §4.4–§4.5 across GPUs):
attnlab's ring (zigzag and contiguous layouts) against one GPU running attnlab on the whole sequence
and against PyTorch's own context parallelism (``torch.distributed.tensor.experimental.
context_parallel``, rotate methods "alltoall" — its ring — and "allgather"), forward + backward.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 benchmarks/ring.py      # 2 GPUs, N = 128K
    torchrun --standalone --nproc-per-node 2 benchmarks/ring.py --backend gloo --device cpu --seq 64 \\
        --check-seq 32 --heads 2 --head-dim 16 --dtype float32 --iters 1 --out /tmp/ring.json   # any CPU
    python benchmarks/ring.py --virtual-ranks 2      # one GPU: the ring's ranks as threads, one device
    python benchmarks/ring.py --report benchmarks/data/ring-virtual-h200-2ranks.json   # a saved result again

NVLink multicast (NVLS) stays off: the script sets ``NCCL_NVLS_ENABLE=0`` unless it is set already.

1. Correctness at ``--check-seq`` tokens: the ring's output and gradients in the benchmark dtype
   against the float64 oracle (``attnlab.reference.attention_ref``), held to flash-attention's
   criterion: error ≤ 2 × the same-dtype PyTorch reference's error + a few roundings.
2. Throughput at ``--seq`` tokens in all (default 131,072, D = 128, causal, bf16): seconds per
   forward + backward and TFLOP/s per GPU (``attnlab.cost.attention_flops``, causal half, ×3.5).
3. Per step: compute time vs time waiting on the ring's transfers (``StepTimeline``, CUDA events).

``--virtual-ranks P`` runs the P ranks as threads of one process on one device, handing tensors over
in memory (``ring_forward`` / ``ring_backward`` with an in-process ring): the ring's compute and its
correctness on one GPU, without any link. Results: a table on rank 0, JSON to ``--out`` (default
``benchmarks/data/ring-<device>-<P>ranks.json``; an existing file is kept unless ``--force``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # ring_virtual, also under python -I

from ring_virtual import LockedTimeline, thread_ring  # noqa: E402

from attnlab._console import make_console  # noqa: E402
from attnlab.api import flash_attention  # noqa: E402
from attnlab.bench import environment  # noqa: E402
from attnlab.cost import attention_flops  # noqa: E402
from attnlab.cost.ring import LINKS, kv_block_bytes, transfer_time  # noqa: E402
from attnlab.distributed import StepTimeline, ring_attention, ring_backward, ring_forward, shard  # noqa: E402
from attnlab.reference import attention_ref  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
METHODS = ("attnlab-ring-zigzag", "attnlab-ring-contiguous", "attnlab-1gpu", "torch-cp-alltoall", "torch-cp-allgather")


# -- set-up ----------------------------------------------------------------------------------------------


class Ranks:
    """This process's place: rank, world size (P), device; ``virtual``: P threads in one process."""

    def __init__(self, args):
        self.virtual = args.virtual_ranks is not None
        if self.virtual:
            self.rank, self.world = 0, args.virtual_ranks
            self.device = torch.device(args.device if args.device != "cuda" else "cuda:0")
            return
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if args.device == "cuda":
            torch.cuda.set_device(local)
        dist.init_process_group(args.backend)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device(f"cuda:{local}" if args.device == "cuda" else "cpu")

    def max(self, x: float) -> float:
        if self.virtual:
            return x
        t = torch.tensor([x], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def gather(self, obj) -> list:
        if self.virtual:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self):
        if not self.virtual:
            dist.barrier()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_it(fn, ranks: Ranks, *, warmup: int, iters: int) -> float:
    """Median seconds of ``fn()`` over ``iters`` runs after ``warmup``, all ranks started together;
    a run's time is the slowest rank's."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        _sync(ranks.device)
        ranks.barrier()
        t0 = time.perf_counter()
        fn()
        _sync(ranks.device)
        times.append(ranks.max(time.perf_counter() - t0))
    return sorted(times)[len(times) // 2]


def inputs(args, N: int, dtype, device, seed: int, requires_grad: bool = False):
    """q, k, v, dout of N tokens, the same on every rank (a seeded generator on the device)."""
    g = torch.Generator(device=device).manual_seed(seed)
    Hkv = args.kv_heads or args.heads
    shapes = ((args.batch, args.heads, N, args.head_dim), (args.batch, Hkv, N, args.head_dim),
              (args.batch, Hkv, N, args.head_dim), (args.batch, args.heads, N, args.head_dim))
    out = [torch.randn(s, generator=g, device=device, dtype=torch.float32).to(dtype) for s in shapes]
    return [t.requires_grad_(requires_grad) if i < 3 else t for i, t in enumerate(out)]


def run_ring(ranks: Ranks, args, q, k, v, dout, layout: str, timeline=None):
    """This rank's (out, dq, dk, dv) of the ring; in virtual mode q, k, v, dout and timeline are lists
    (one per rank) and the result is the list of every rank's."""
    if not ranks.virtual:
        q.grad = k.grad = v.grad = None
        out = ring_attention(q, k, v, causal=args.causal, layout=layout, timeline=timeline)
        out.backward(dout)
        return out, q.grad, k.grad, v.grad

    def rank_fn(comm):
        r = comm.rank
        kw = dict(comm=comm, causal=args.causal, layout=layout, scale=args.head_dim**-0.5,
                  timeline=None if timeline is None else timeline[r])
        out, lse = ring_forward(q[r], k[r], v[r], **kw)
        return (out, *ring_backward(dout[r], q[r], k[r], v[r], out, lse, **kw))

    return thread_ring(ranks.world, rank_fn)


# -- 1. correctness ----------------------------------------------------------------------------------------


def check(ranks: Ranks, args, dtype) -> list[dict]:
    """Ring (both layouts) vs the float64 oracle, with the same-dtype reference's error as the yardstick."""
    N, P = args.check_seq, ranks.world
    q64, k64, v64, do64 = inputs(args, N, torch.float64, ranks.device, seed=1)

    def grads(dt):
        qkv = [t.detach().to(dt).requires_grad_() for t in (q64, k64, v64)]  # leaves, also for dt = float64
        out, _ = attention_ref(*qkv, causal=args.causal)
        out.backward(do64.to(dt))
        return [out.detach()] + [t.grad for t in qkv]

    want, ref = grads(torch.float64), grads(dtype)
    rows = []
    for layout in ("zigzag", "contiguous"):
        def cut(t, r, layout=layout):
            return shard(t, world_size=P, rank=r, layout=layout)

        mine = range(P) if ranks.virtual else [ranks.rank]
        if ranks.virtual:
            got = run_ring(ranks, args, *([cut(t.to(dtype), r) for r in mine] for t in (q64, k64, v64, do64)),
                           layout)
        else:
            got = [run_ring(ranks, args, *[cut(t.to(dtype), ranks.rank).requires_grad_(i < 3)
                                           for i, t in enumerate((q64, k64, v64, do64))], layout)]
        for i, name in enumerate(("out", "dq", "dk", "dv")):
            err = max((g[i].double() - cut(want[i], r)).abs().max().item() for g, r in zip(got, mine))
            err_ref = max((cut(ref[i], r).double() - cut(want[i], r)).abs().max().item() for r in mine)
            err, err_ref = ranks.max(err), ranks.max(err_ref)
            floor = 4 * torch.finfo(dtype).eps * max(1.0, want[i].abs().max().item())
            rows.append({"layout": layout, "tensor": name, "error": err, "ref_error": err_ref, "floor": floor,
                         "ok": err <= 2 * err_ref + floor})
    return rows


# -- 2. throughput -----------------------------------------------------------------------------------------


def bench_ring(ranks: Ranks, args, dtype, layout: str) -> tuple[float, list[dict]]:
    """Seconds per fwd+bwd and, from one more timed run, the per-step rows of every rank."""
    P, n = ranks.world, args.seq // ranks.world
    if ranks.virtual:
        local = [inputs(args, n, dtype, ranks.device, seed=10 + r) for r in range(P)]
        q, k, v, do = ([x[i] for x in local] for i in range(4))
    else:
        q, k, v, do = inputs(args, n, dtype, ranks.device, seed=10 + ranks.rank, requires_grad=True)
    secs = time_it(lambda: run_ring(ranks, args, q, k, v, do, layout), ranks, warmup=args.warmup, iters=args.iters)
    if ranks.virtual:  # the ranks' compute spans one after another on the shared stream
        lock = threading.Lock()
        timelines = [LockedTimeline(lock) for _ in range(P)]
        run_ring(ranks, args, q, k, v, do, layout, timeline=timelines)
        per_rank = [t.rows() for t in timelines]
    else:
        timeline = StepTimeline()
        run_ring(ranks, args, q, k, v, do, layout, timeline=timeline)
        per_rank = ranks.gather(timeline.rows())
    return secs, [dict(r, rank=rank) for rank, rows in enumerate(per_rank) for r in rows]


def bench_single(ranks: Ranks, args, dtype) -> float:
    """attnlab on one GPU, the whole sequence (every rank runs it on its own device at once)."""
    q, k, v, do = inputs(args, args.seq, dtype, ranks.device, seed=20, requires_grad=True)

    def step():
        q.grad = k.grad = v.grad = None
        flash_attention(q, k, v, causal=args.causal).backward(do)

    return time_it(step, ranks, warmup=args.warmup, iters=args.iters)


def bench_torch_cp(ranks: Ranks, args, dtype, rotate: str) -> float:
    """PyTorch's context parallelism around SDPA; raises with the reason when this torch cannot."""
    if ranks.virtual:
        raise RuntimeError("needs one process per rank (torchrun), not --virtual-ranks")
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.tensor.experimental import context_parallel
    except ImportError as e:
        raise RuntimeError(f"torch {torch.__version__} has no context_parallel ({e})") from None
    set_rotate = None
    for mod in ("torch.distributed.tensor.experimental._attention",
                "torch.distributed.tensor.experimental._context_parallel._attention"):
        try:
            set_rotate = __import__(mod, fromlist=["set_rotate_method"]).set_rotate_method
            break
        except (ImportError, AttributeError):
            continue
    if set_rotate is None:
        raise RuntimeError(f"torch {torch.__version__} has no set_rotate_method")
    set_rotate(rotate)
    mesh = init_device_mesh(ranks.device.type, (ranks.world,))
    q, k, v, do = inputs(args, args.seq, dtype, ranks.device, seed=30)  # sharded in place: no grad on them
    gqa = {"enable_gqa": True} if (args.kv_heads or args.heads) != args.heads else {}
    with context_parallel(mesh, buffers=[q, k, v, do], buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers={q, k, v, do}):
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))  # this rank's shards, as leaves

        def step():
            qg.grad = kg.grad = vg.grad = None
            F.scaled_dot_product_attention(qg, kg, vg, is_causal=args.causal, **gqa).backward(do)

        return time_it(step, ranks, warmup=args.warmup, iters=args.iters)


# -- report ------------------------------------------------------------------------------------------------


def modeled_transfer(c: dict, pass_: str, step: int, link: str = "nvlink4") -> float:
    """Seconds ``attnlab.cost.ring`` gives the transfers in flight during a step: K/V for the next step
    (not after the last), in the backward also the previous step's dK/dV (float32); step P of the
    backward is the last dK/dV hop home."""
    P, nb = c["world"], torch.finfo(DTYPES[c["dtype"]]).bits // 8
    kv = kv_block_bytes(local_seq=c["seq"] // P, batch=c["batch"], kv_heads=c["kv_heads"], head_dim=c["head_dim"],
                        dtype_bytes=nb)
    dkv = kv // nb * (8 if nb == 8 else 4)
    sending = [kv] if step < P - 1 else []
    if pass_ == "backward" and step >= 1:
        sending.append(dkv)
    return transfer_time(sum(sending), link, transfers=len(sending)) if sending else 0.0



def lockstep_time(c: dict, steps: list[dict]) -> float:
    """The ring's fwd+bwd time if every step took the longer of its slowest rank's measured compute and
    the transfers ``attnlab.cost.ring`` models for it over NVLink 4 (the backward's last hop included)."""
    total = 0.0
    for p, s in {(x["pass"], x["step"]) for x in steps}:
        compute = max(x["compute_s"] for x in steps if (x["pass"], x["step"]) == (p, s))
        total += max(compute, modeled_transfer(c, p, s))
    return total


def report(res: dict, console) -> None:
    from rich.table import Table

    c = res["config"]
    console.print(f"ring attention: {c['world']} {'virtual ' if c['virtual'] else ''}rank{'s' * (c['world'] > 1)} on "
                  f"{c['device_name']}, "
                  f"N = {c['seq']:,} in all, B = {c['batch']}, H = {c['heads']}, Hkv = {c['kv_heads']}, "
                  f"D = {c['head_dim']}, {c['dtype']}, {'causal' if c['causal'] else 'no mask'}")
    t = Table(title=f"correctness at N = {c['check_seq']:,}: error vs the float64 oracle "
                    "(≤ 2 × the same-dtype reference's + floor)")
    for col in ("layout", "tensor", "error", "same-dtype ref", "ok"):
        t.add_column(col, justify="right" if "error" in col or "ref" in col else "left")
    for r in res["check"]:
        t.add_row(r["layout"], r["tensor"], f"{r['error']:.3e}", f"{r['ref_error']:.3e}", "yes" if r["ok"] else "NO")
    console.print(t)
    title = f"forward + backward at N = {c['seq']:,} (median of {c['iters']})"
    if c["virtual"]:
        title += f": all {c['world']} virtual ranks on one GPU, one after another"
    t = Table(title=title)
    for col in ("method", "time", "TFLOP/s per GPU", "vs attnlab 1 GPU"):
        t.add_column(col, justify="left" if col == "method" else "right")
    single = res["results"].get("attnlab-1gpu", {}).get("seconds")
    for name, r in res["results"].items():
        if "seconds" not in r:
            t.add_row(name, "skipped", "", "")
            continue
        speed = f"{single / r['seconds']:.2f}×" if single else ""
        t.add_row(name, f"{r['seconds'] * 1e3:,.1f} ms", f"{r['tflops_per_gpu']:,.4g}", speed)
    console.print(t)
    for name, r in res["results"].items():
        if "skipped" in r:
            console.print(f"{name} skipped: {r['skipped']}")
    for name, steps in res["steps"].items():
        if steps and c["world"] > 1:
            t_model = lockstep_time(c, steps)
            vs = f" = {single / t_model:.2f}× attnlab on 1 GPU" if single else ""
            console.print(f"{name}: {c['world']} GPUs in lock-step, each step the longer of its measured compute and "
                          f"its modeled NVLink 4 transfer: {t_model * 1e3:,.1f} ms{vs}")
    for name, steps in res["steps"].items():
        if not steps:
            continue
        how = "CUDA events on the compute stream" if c["device"] == "cuda" else "host clock"
        if c["virtual"]:
            how += "; virtual ranks: each compute span alone, no waits (the hand-overs are in memory)"
        t = Table(title=f"{name}: per step, slowest rank ({how}); transfers modeled by attnlab.cost.ring at "
                        f"{LINKS['nvlink4'].bandwidth / 1e9:.0f} GB/s")
        for col in ("pass", "step", "compute", "waiting on transfers", "modeled NVLink 4 transfer"):
            t.add_column(col, justify="left" if col == "pass" else "right")
        keys = sorted({(s["pass"], s["step"]) for s in steps}, key=lambda k: (k[0] != "forward", k[1]))
        for p, s in keys:
            mine = [x for x in steps if (x["pass"], x["step"]) == (p, s)]
            wait = "-" if c["virtual"] else f"{max(x['wait_s'] for x in mine) * 1e3:,.3f} ms"
            t.add_row(p, str(s), f"{max(x['compute_s'] for x in mine) * 1e3:,.2f} ms", wait,
                      f"{modeled_transfer(c, p, s) * 1e3:,.3f} ms")
        console.print(t)


def out_path(args) -> Path:
    """--out, or the default name; refused before any work when the file exists (unless --force)."""
    if args.out:
        path = Path(args.out)
    else:
        world = args.virtual_ranks or int(os.environ.get("WORLD_SIZE", "1"))
        kind = "virtual" if args.virtual_ranks else args.device
        path = Path(__file__).resolve().parent / "data" / f"ring-{kind}-{world}ranks.json"
    if path.exists() and not args.force:
        raise SystemExit(f"ring.py: {path} exists; pass --force to overwrite it or --out to write elsewhere")
    return path


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--virtual-ranks", type=int, default=None, metavar="P",
                   help="run P ranks as threads of this one process on one device (no torchrun)")
    p.add_argument("--seq", type=int, default=131072, help="tokens in all (default: %(default)s)")
    p.add_argument("--check-seq", type=int, default=4096, help="tokens of the correctness check")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ", ".join(METHODS))
    p.add_argument("--out", default=None, help="JSON file (default: benchmarks/data/ring-<device>-<P>ranks.json)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out")
    args = p.parse_args(argv)
    for name in ("seq", "check_seq", "batch", "heads", "head_dim", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.warmup < 0 or (args.virtual_ranks is not None and args.virtual_ranks < 1):
        p.error("--warmup must be >= 0 and --virtual-ranks >= 1")
    if args.kv_heads is not None and (args.kv_heads < 1 or args.heads % args.kv_heads):
        p.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    unknown = set(args.methods.split(",")) - set(METHODS)
    if unknown:
        p.error(f"--methods: unknown {', '.join(sorted(unknown))}; choose from {', '.join(METHODS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here (use --backend gloo --device cpu)")
    world = args.virtual_ranks or int(os.environ.get("WORLD_SIZE", "1"))
    for name in ("seq", "check_seq"):
        if getattr(args, name) % (2 * world):
            p.error(f"--{name.replace('_', '-')} {getattr(args, name)} is not a multiple of 2·P = {2 * world} "
                    "(the zigzag layout)")
    args.path = out_path(args)  # every rank checks it, before any work
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--report"]:  # print a saved result again: python benchmarks/ring.py --report FILE
        if len(argv) != 2:
            raise SystemExit("ring.py: --report takes one JSON file written by this script")
        report(json.loads(Path(argv[1]).read_text()), make_console())
        return 0
    args = parse(argv)
    ranks = Ranks(args)
    P, path = ranks.world, args.path
    dtype = DTYPES[args.dtype]
    methods = args.methods.split(",")
    res = {"config": {**{k: v for k, v in vars(args).items() if k not in ("out", "force", "path")}, "world": P,
                      "virtual": ranks.virtual, "kv_heads": args.kv_heads or args.heads,
                      "device_name": torch.cuda.get_device_name(ranks.device) if ranks.device.type == "cuda" else "CPU",
                      "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")},
           "environment": environment(), "check": check(ranks, args, dtype), "results": {}, "steps": {}}
    flops = attention_flops(batch=args.batch, heads=args.heads, seq_q=args.seq, head_dim=args.head_dim,
                            causal=args.causal, pass_="fwd_bwd")
    for name in methods:
        gpus = 1 if name == "attnlab-1gpu" or ranks.virtual else P
        try:
            if name.startswith("attnlab-ring"):
                secs, steps = bench_ring(ranks, args, dtype, name.rsplit("-", 1)[1])
                res["steps"][name] = steps
            elif name == "attnlab-1gpu":
                secs = bench_single(ranks, args, dtype)
            else:
                secs = bench_torch_cp(ranks, args, dtype, name.rsplit("-", 1)[1])
            res["results"][name] = {"seconds": secs, "tflops_per_gpu": flops / secs / gpus / 1e12}
        except Exception as e:  # noqa: BLE001 - a peer this torch cannot run is skipped, with the reason
            if name.startswith("attnlab"):
                raise
            res["results"][name] = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        if ranks.device.type == "cuda":
            torch.cuda.empty_cache()
    if ranks.rank == 0:
        report(res, make_console())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {path}")
    if not ranks.virtual:
        dist.destroy_process_group()
    return 0 if all(r["ok"] for r in res["check"]) else 1


if __name__ == "__main__":
    sys.exit(main())
