"""Where the Gluon backward's time goes (``attnlab.gpu.prefill_gluon_bwd``), by leaving stages out.

No hardware counters needed: each variant removes one stage of the consumer loop and the difference in
time is that stage's cost on the critical path. Variants (the kernel's measurement-only ``_ablate``):

    0  the kernel as shipped (the table's Gluon entry for the shape)
    1  dQ made but not added
    2  no dQ product either (the dSᵀ tiles still exchanged between the warp groups)
    3  no dSᵀ exchange: the two warp groups independent, four products per step (Sᵀ, dPᵀ, dV, dK)
    4  as 3 without the exponentials
    5  the kernel as shipped but waiting for each dQ reduction's read at once (the version before the
       deferred wait)
    6  dQ staged in shared memory but not added (no TMA reduction)
    7  dQ added by TMA from a stale staging tile (no shared-memory store)

Variants 1–4, 6 and 7 compute wrong gradients by design; they are timed, never checked. Also timed: the ways
to add dQ (TMA bulk reductions or per-thread float32 atomics; key blocks starting their walk at the
same query block or each at its own; the dQ product in column slices, or shared by the two warp groups
every step; programs numbered head first; a larger register budget; dQ products a step or two behind
their dSᵀ), the library table's backward (what ``prefill_backward`` runs)
and, with ``--sdpa``, PyTorch's SDPA backward, same inputs. bfloat16; by default 16K tokens in one
sequence, H·D = 2048, MHA (``--batch``, ``--heads H HKV`` for other shapes, e.g. a GQA model's layer).

    python benchmarks/bwd_gluon_ablation.py --json ablation.json
    python benchmarks/bwd_gluon_ablation.py --D 64 --causal 1 --N 8192 --heads 32 8 --sdpa --variants 0 --no-modes
    python benchmarks/bwd_gluon_ablation.py --one --D 128   # one launch of the table's backward (for a profiler)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # variants.py's slopes, also when loaded as a module

from attnlab.bench import environment, time_fn  # noqa: E402
from attnlab.cost import attention_flops  # noqa: E402

VARIANTS = {0: "shipped", 1: "no dQ additions", 2: "no dQ product", 3: "no dS exchange", 4: "no exp2 either",
            5: "dQ read waited at once", 6: "dQ staged, not added", 7: "dQ added, not staged"}


MODES = {  # the ways to make and add dQ, and to order the programs (gluon_backward's keyword arguments)
    "dQ by TMA": dict(rotate=False), "dQ by TMA, rotated": dict(rotate=True),
    "dQ by atomics": dict(dq_atomic=True, rotate=False), "dQ by atomics, rotated": dict(dq_atomic=True, rotate=True),
    "dQ by TMA in 2 column slices": dict(dq_split=2),
    "dQ shared by the warp groups": dict(dq_shared=True),
    "dQ shared, atomics": dict(dq_shared=True, dq_atomic=True),
    "table's, heads first": dict(heads_first=True), "table's, key blocks first": dict(heads_first=False),
    "table's, 240 consumer registers": dict(consumer_regs=240),
    "table's, dQ not behind": dict(dq_lag=0), "table's, dQ 1 step behind": dict(dq_lag=1),
    "table's, dQ 2 steps behind": dict(dq_lag=2),
}


def inputs(B: int, H: int, Hkv: int, N: int, D: int, causal: bool, slopes: torch.Tensor | None = None,
           model_layout: bool = False):
    """q, k, v, dO (B, heads, N, D), contiguous or, with ``model_layout``, views of (B, N, heads, D) tensors
    (how a model's projections lay them out), and the forward's out, lse, L₂, D."""
    from attnlab.gpu import prefill_forward
    from attnlab.variants import Mask

    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(n):
        if model_layout:
            return torch.randn(B, N, n, D, device="cuda", dtype=torch.bfloat16, generator=gen).transpose(1, 2)
        return torch.randn(B, n, N, D, device="cuda", dtype=torch.bfloat16, generator=gen)

    q, do = randn(H), randn(H)
    k, v = randn(Hkv), randn(Hkv)
    out, lse = prefill_forward(q, k, v, mask=Mask(-1, 0 if causal else -1), scale=D ** -0.5, slopes=slopes)
    lse2 = (lse * 1.4426950408889634).contiguous()
    delta = (out.float() * do.float()).sum(-1).contiguous()
    return q, k, v, do, out, lse, lse2, delta


def time_after(fn, before, reps: int = 30) -> float:
    """Median GPU time (ms) of ``fn()`` when each call follows ``before()`` on the stream with no gap, as a
    kernel inside a model's step follows other kernels (CUDA events around ``fn`` only)."""
    starts, ends = ([torch.cuda.Event(enable_timing=True) for _ in range(reps + 3)] for _ in range(2))
    for a, b in zip(starts, ends):
        before()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in list(zip(starts, ends))[3:])


def gemm_before(n_tokens: int):
    """A training step's kind of predecessor: an MLP-sized bf16 GEMM, (n_tokens, 2048) · (2048, 8192)."""
    x = torch.randn(n_tokens, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 8192, device="cuda", dtype=torch.bfloat16)
    return lambda: x @ w


def time_shape(D: int, N: int, causal: bool, stages: int | None = None, variants=tuple(VARIANTS),
               modes: bool | list[str] = True, B: int = 1, H: int | None = None, Hkv: int | None = None,
               sdpa: bool = False, alibi: bool = False, model_layout: bool = False,
               after: str = "nothing") -> list[dict]:
    """Time the variants and modes on one shape (H·D = 2048 and MHA unless H, Hkv are given; with ALiBi's
    slopes if ``alibi``). Each runs the library table's Gluon entry for the shape with the one change it
    names."""
    from attnlab.gpu import prefill_backward
    from attnlab.gpu.config import default_bwd_config
    from attnlab.gpu.prefill_gluon_bwd import gluon_backward
    from attnlab.variants import Mask

    H = H or 2048 // D
    Hkv = Hkv or H
    if alibi:  # ALiBi's geometric slopes 2^(-8h/H), h = 1..H, as (B, H) (the batch axis a broadcast)
        from variants import alibi_slopes

        slopes = alibi_slopes(H).to("cuda").expand(B, H)
    else:
        slopes = None
    q, k, v, do, out, lse, lse2, delta = inputs(B, H, Hkv, N, D, causal, slopes, model_layout)
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))
    fl = attention_flops(batch=B, heads=H, seq_q=N, head_dim=D, causal=causal, pass_="bwd")
    table = default_bwd_config(D, causal, q.device, N)
    base = dict(stages=stages or (table.stages1 if table.gluon else 2), dq_shared=table.dq_shared and table.gluon,
                dq_lag=table.dq_lag if table.gluon else 0)

    def gl_fn(a, **kw):
        return lambda: gluon_backward(q, k, v, do, lse2, delta, dq, dk, dv, causal_off=0 if causal else None,
                                      scale=D ** -0.5, slopes=slopes, _ablate=a, **(base | kw))

    fns = {f"gluon {a}: {name}": gl_fn(a) for a, name in VARIANTS.items() if a in variants}
    for name, kw in MODES.items() if modes else ():
        if modes is not True and not any(m in name for m in modes):
            continue
        fns[name] = gl_fn(0, **({"dq_shared": False, "dq_lag": 0} | kw if name.startswith("dQ") else kw))
    fns["library table"] = lambda: prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0 if causal else -1),
                                                    scale=D ** -0.5, slopes=slopes)
    if model_layout:  # the same backward on (B, heads, N, D) copies, the copies' time included
        def copied():
            qc, kc, vc, doc = (t.contiguous() for t in (q, k, v, do))
            return prefill_backward(doc, qc, kc, vc, out, lse, mask=Mask(-1, 0 if causal else -1),
                                    scale=D ** -0.5, slopes=slopes)
        fns["library table, inputs copied to (B, H, N, D) first"] = copied
    if sdpa and not alibi:  # PyTorch's backward, its own choice of backend (GQA through enable_gqa)
        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=Hkv != H)
        fns["sdpa backward"] = lambda: torch.autograd.grad(o, (qs, ks, vs), do, retain_graph=True)
    rows = []
    shape = (f"B={B} H={H}/{Hkv} N={N} D={D} causal={causal!s:5}" + (" alibi" if alibi else "")
             + (" model layout" if model_layout else ""))
    before = gemm_before(B * N) if after == "gemm" else None
    shape += " after a GEMM" if before else ""
    for name, fn in fns.items():
        try:
            ms = time_fn(fn, device="cuda") if before is None else time_after(fn, before)
        except ValueError as e:  # a mode this shape cannot take (e.g. a dSᵀ ring past the shared memory)
            print(f"{shape} {name:30s} refused: {e}", flush=True)
            continue
        row = dict(B=B, H=H, Hkv=Hkv, D=D, causal=causal, N=N, alibi=alibi, model_layout=model_layout, after=after,
                   variant=name, ms=ms, tflops=fl / (ms * 1e-3) / 1e12)
        rows.append(row)
        print(f"{shape} {name:30s} {ms:8.3f} ms {row['tflops']:6.0f} TFLOP/s", flush=True)
    return rows


def run(args) -> list[dict]:
    H, Hkv = args.heads or (None, None)
    alibis = [False, True] if args.alibi == "both" else [args.alibi == "yes"]
    layouts = [False, True] if args.layout == "both" else [args.layout == "model"]
    afters = ["nothing", "gemm"] if args.after == "both" else [args.after]
    return [r for D in args.D for causal in args.causal for alibi in alibis for model_layout in layouts
            for after in afters
            for r in time_shape(D, args.N, causal, args.stages, args.variants,
                                False if args.no_modes else args.modes or True, args.batch, H, Hkv,
                                args.sdpa, alibi, model_layout, after)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--D", type=int, nargs="+", default=[64, 128])
    p.add_argument("--causal", type=lambda s: s == "1", nargs="+", default=[False], help="1 causal, 0 not")
    p.add_argument("--N", type=int, default=16384)
    p.add_argument("--stages", type=int, default=None, help="Q/dO ring depth (default: the table's)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, nargs=2, metavar=("H", "HKV"), default=None,
                   help="query and K/V heads (default 2048 / D, MHA)")
    p.add_argument("--sdpa", action="store_true", help="also time SDPA's backward (its own backend choice)")
    p.add_argument("--alibi", choices=["no", "yes", "both"], default="no", help="with ALiBi's slopes")
    p.add_argument("--after", choices=["nothing", "gemm", "both"], default="nothing",
                   help="time each call alone (do_bench) or right after an MLP-sized GEMM (CUDA events)")
    p.add_argument("--layout", choices=["contiguous", "model", "both"], default="contiguous",
                   help="q, k, v, dO as (B, heads, N, D) tensors, or as views of a model's (B, N, heads, D)")
    p.add_argument("--variants", type=int, nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--no-modes", action="store_true", help="time the variants only (not the dQ modes)")
    p.add_argument("--modes", nargs="+", default=None, help="only the modes whose names contain one of these")
    p.add_argument("--one", action="store_true", help="one launch of the shipped kernel and exit")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (Hopper)")
        return 0
    if args.one:  # one launch of the table's backward (for a profiler)
        from attnlab.gpu import prefill_backward
        from attnlab.variants import Mask

        D, causal = args.D[0], args.causal[0]
        H, Hkv = args.heads or (2048 // D, 2048 // D)
        q, k, v, do, out, lse, _, _ = inputs(args.batch, H, Hkv, args.N, D, causal)
        prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0 if causal else -1), scale=D ** -0.5)
        torch.cuda.synchronize()
        return 0
    rows = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
