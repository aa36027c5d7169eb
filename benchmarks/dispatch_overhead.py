"""Host time of the two ways attnlab's Triton kernels are wrapped for autograd (v3 in NOTES-prefill.md).

A ``torch.library`` custom op with a registered autograd formula (what ``torch.compile`` traces)
against a plain ``torch.autograd.Function`` (what eager calls use), both with empty bodies, so the
numbers are dispatch cost only: forward + backward through ``torch.autograd.grad``, and a
forward under ``torch.no_grad``. Runs anywhere (CPU tensors); prints a table, ``--json`` saves it.

    python benchmarks/dispatch_overhead.py [--calls 500] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

SCHEMA_F = "(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)"
SCHEMA_B = ("(Tensor do, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse, bool causal, "
            "float scale) -> (Tensor, Tensor, Tensor)")


@torch.library.custom_op("attnlab_bench::fwd", mutates_args=(), schema=SCHEMA_F)
def _op_fwd(q, k, v, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3])


@_op_fwd.register_fake
def _(q, k, v, causal, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3])


@torch.library.custom_op("attnlab_bench::bwd", mutates_args=(), schema=SCHEMA_B)
def _op_bwd(do, q, k, v, out, lse, dlse, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@_op_bwd.register_fake
def _(do, q, k, v, out, lse, dlse, causal, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, do, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    return (*_op_bwd(do, q, k, v, out, lse, dlse, ctx.causal, ctx.scale), None, None)


_op_fwd.register_autograd(_backward, setup_context=_setup)


class _Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        out, lse = torch.empty_like(q), q.new_empty(q.shape[:3])
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None, None


def measure(calls: int) -> list[dict]:
    q, k, v = (torch.randn(1, 2, 16, 16, requires_grad=True) for _ in range(3))
    do = torch.randn(1, 2, 16, 16)
    rows = []
    for name, fn in (("torch.library custom op", lambda: _op_fwd(q, k, v, True, 0.25)[0]),
                     ("torch.autograd.Function", lambda: _Fn.apply(q, k, v, True, 0.25)[0])):
        for _ in range(max(10, calls // 10)):  # warm-up
            torch.autograd.grad(fn(), (q, k, v), do)
        t = time.perf_counter()
        for _ in range(calls):
            torch.autograd.grad(fn(), (q, k, v), do)
        fwd_bwd = (time.perf_counter() - t) / calls
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(calls):
                fn()
        fwd = (time.perf_counter() - t) / calls
        rows.append(dict(wrapper=name, fwd_bwd_us=round(fwd_bwd * 1e6, 1), fwd_us=round(fwd * 1e6, 1)))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.calls < 1:
        p.error(f"--calls must be >= 1, got {args.calls}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnlab.bench import environment

    rows = measure(args.calls)
    print(f"{'wrapper':<26} {'fwd+bwd µs':>11} {'fwd µs':>8}")
    for r in rows:
        print(f"{r['wrapper']:<26} {r['fwd_bwd_us']:>11.1f} {r['fwd_us']:>8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": environment(), "calls": args.calls, "rows": rows},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
