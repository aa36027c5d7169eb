"""attnlab against FlashAttention-4's Hopper kernels and PyTorch's fastest route, taking turns in one process.

FlashAttention-4 (the ``flash-attn-4`` package, ``flash_attn.cute``: kernels written in NVIDIA's CuTe DSL and compiled
at the first call) ships a forward and a backward for sm_90. Its Hopper forward is FlashAttention-3's design: a TMA
producer warp, consumer warp groups in ping-pong, P̃ kept in registers for the P̃·V wgmma, the next block's Q·Kᵀ
overlapped with this block's softmax; at D = 64 on 192 × 128 tiles, at D = 128 on 128 × 128. It is the state of the
art that attnlab's Gluon kernels are measured against here, beside the issue's own peers.

Rows (bfloat16, H·D = 2048, as ``exp_poly.py``'s): ``window`` (W = 4096, causal, N = 16K: the variants benchmark's),
``varlen`` (its packed batch of 16K tokens in documents of 256–1,792, causal inside each), ``causal`` and ``full``
(dense 4 × 4K, causal and not); at D = 64 and 128; the forward and, with ``--passes fwd fwd_bwd``, the forward and
backward. Providers: ``attnlab`` (the library's call), ``fa4`` (``flash_attn.cute.flash_attn_func`` or
``flash_attn_varlen_func`` on the same values in its (B, N, H, D) and (total, H, D) layouts, copied once before the
timing) and the row's peer: FlexAttention (compiled, block mask) for the window and the packed batch, SDPA's cuDNN
backend for the dense rows. Every round times each provider in turn (``do_bench`` medians); the table gives each one's
median over the rounds, its TFLOP/s over the visible pairs (×2.5 more for the backward: forward+backward counts 3.5×
the forward's FLOPs), and its largest difference from attnlab's output.

A provider that cannot run (no ``flash-attn-4`` installed, a GPU other than Hopper, an error of its own) is skipped
with its reason in the row; the others are still timed.

    python benchmarks/fa4_peer.py --json fa4-peer.json                   # every row, both head dims, forward
    python benchmarks/fa4_peer.py --rows window causal --D 64 --passes fwd fwd_bwd --rounds 5
    python benchmarks/fa4_peer.py --report fa4-peer.json
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab_rounds  # noqa: E402
import variants as V  # noqa: E402

import attnlab  # noqa: E402
from attnlab.bench import time_fn  # noqa: E402

ROWS = ("window", "varlen", "causal", "full")
PASSES = ("fwd", "fwd_bwd")
PROVIDERS = ("attnlab", "fa4", "peer")
DENSE_B, DENSE_N = 4, 4096
BWD_FLOPS = 3.5  # forward+backward FLOPs per forward FLOP (two products forward, five backward)


def row_inputs(name: str, D: int, device: str, grad: bool, seed: int = 0):
    """The row's (q, k, v, dout) in attnlab's layout: (B, H, N, D) dense, (total, H, D) packed; its visible pairs."""
    H = V.WIDTH // D
    if name in ("window", "varlen"):
        cfg = dict(variant=name, D=D, H=H, N=V.TOKENS)
        lengths = V.doc_lengths(V.TOKENS) if name == "varlen" else None
        pairs = V.visible_pairs(name, V.TOKENS, lengths) * H
        return (*V.make_inputs(cfg, device, torch.bfloat16, seed=seed, grad=grad), lengths, pairs)
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v, do = (torch.randn(DENSE_B, H, DENSE_N, D, generator=g, device=device, dtype=torch.bfloat16)
                   for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(grad)
    pairs = (DENSE_N * (DENSE_N + 1) // 2 if name == "causal" else DENSE_N * DENSE_N) * H * DENSE_B
    return q, k, v, do, None, pairs


def _timed(f, leaves, do, pass_):
    """A zero-argument callable: the forward alone, or forward and backward (gradients of ``leaves``)."""
    if pass_ == "fwd":
        return f
    return lambda: torch.autograd.grad(f(), leaves, do)


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def _same(out):
    return out


def _heads_second(out):  # (B, N, H, D) -> (B, H, N, D)
    return out.transpose(1, 2)


def _no_diff(out):
    return None


def provider(which: str, name: str, D: int, pass_: str, device: str):
    """(a zero-argument callable to time, a function of its result giving the output in attnlab's layout, peer
    name); raises with the reason when the provider cannot run the row."""
    grad = pass_ == "fwd_bwd"
    q, k, v, do, lengths, _ = row_inputs(name, D, device, grad)
    causal = name != "full"
    window = (V.WINDOW - 1, 0) if name == "window" else (-1, -1)
    if which == "attnlab":
        if name == "varlen":
            cu, mx = V.cu_seqlens(lengths, device), max(lengths)

            def f():
                return attnlab.flash_attention_varlen(q, k, v, cu, cu, max_seqlen_q=mx, max_seqlen_k=mx, causal=True)
        else:
            def f():
                return attnlab.flash_attention(q, k, v, causal=causal, window=window)
        return _timed(f, (q, k, v), do, pass_), _same, "attnlab"
    if which == "fa4":
        if device != "cuda" or torch.cuda.get_device_capability()[0] != 9:
            raise RuntimeError("flash-attn-4's Hopper kernels need an sm_90 GPU")
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

        fa_window = (V.WINDOW - 1, 0) if name == "window" else (None, None)
        if name == "varlen":  # already (total, H, D)
            qf, kf, vf = (t.detach().clone().requires_grad_(grad) for t in (q, k, v))
            dof = do
            cu, mx = V.cu_seqlens(lengths, device), max(lengths)

            def f():
                return _first(flash_attn_varlen_func(qf, kf, vf, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx,
                                                     max_seqlen_k=mx, causal=True))
            layout = _same
        else:  # (B, H, N, D) -> (B, N, H, D)
            qf, kf, vf = (t.detach().transpose(1, 2).contiguous().requires_grad_(grad) for t in (q, k, v))
            dof = do.transpose(1, 2).contiguous()

            def f():
                return _first(flash_attn_func(qf, kf, vf, causal=causal, window_size=fa_window))
            layout = _heads_second
        return _timed(f, (qf, kf, vf), dof, pass_), layout, "fa4"
    # the row's peer: PyTorch's fastest route
    if name in ("window", "varlen"):
        cfg = dict(variant=name, D=D, H=V.WIDTH // D, N=V.TOKENS, pass_=pass_, dtype=torch.bfloat16)
        if lengths is not None:  # flex takes the packed batch as one (1, H, N, D) sequence of other values: no diff
            cfg["lengths"] = lengths
            return V.provider_flex(cfg, device), _no_diff, "flex"
        return V.provider_flex(cfg, device), _same, "flex"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def f():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(q, k, v, is_causal=causal)
    return _timed(f, (q, k, v), do, pass_), _same, "sdpa-cudnn"


def measure(rows, Ds, passes, rounds: int, device: str = "cuda") -> list[dict]:
    """Result rows ``{row, D, pass, provider, name, ms, rounds, tflops, x_attnlab, max_diff}`` (or ``skipped``, the
    reason), one per row, head dim, pass and provider, printed as they come."""
    results = []
    for D in Ds:
        for name in rows:
            pairs = row_inputs(name, D, "cpu" if device == "cpu" else device, False)[-1]
            for pass_ in passes:
                flops = 4.0 * pairs * D * (BWD_FLOPS if pass_ == "fwd_bwd" else 1.0)
                calls, skipped = {}, {}
                for which in PROVIDERS:
                    try:
                        fn, back, label = provider(which, name, D, pass_, device)
                        out = fn()  # compile (Triton, Gluon, CuTe DSL, Inductor) outside the timing
                        o = back(_first(out)) if pass_ == "fwd" else None
                        calls[which] = (fn, back, label, None if o is None else o.detach())
                    except Exception as e:  # noqa: BLE001 - a provider's failure is recorded, not fatal
                        skipped[which] = f"{type(e).__name__}: {e}"[:200]
                times = {w: [] for w in calls}
                for i in range(rounds):
                    for w in ab_rounds.turns(calls, i):  # (reversed every other round)
                        times[w].append(time_fn(calls[w][0], device=device))
                ref = calls.get("attnlab", (None,) * 4)[3]
                base = statistics.median(times["attnlab"]) if "attnlab" in times else None
                for w in PROVIDERS:
                    r = dict(row=name, D=D, **{"pass": pass_}, provider=w)
                    if w in skipped:
                        r.update(skipped=skipped[w])
                    else:
                        ms = statistics.median(times[w])
                        out = calls[w][3]
                        diff = (out.float() - ref.float()).abs().max().item() if out is not None and ref is not None \
                            else None
                        r.update(name=calls[w][2], ms=ms, rounds=[round(t, 4) for t in times[w]],
                                 tflops=flops / ms / 1e9, x_attnlab=(base / ms) if base else None, max_diff=diff)
                    results.append(r)
                    print(line(r), flush=True)
                del calls
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    return results


def line(r: dict) -> str:
    """One result row as a markdown table line."""
    head = f"| {r['row']} | {r['D']} | {r['pass']} | {r.get('name', r['provider'])} |"
    if "skipped" in r:
        return f"{head} – | – | – | skipped: {r['skipped']} |"
    diff = "–" if r["max_diff"] is None else f"{r['max_diff']:.1e}"
    x = "–" if r["x_attnlab"] is None else f"{r['x_attnlab']:.3f}"
    return f"{head} {r['ms']:.3f} | {r['tflops']:.0f} | {x} | {diff} |"


def report(rows: list[dict]) -> str:
    return ("| row | D | pass | provider | ms (median) | TFLOP/s | × attnlab (speed) | max diff from attnlab |\n"
            + "|---" * 8 + "|\n" + "\n".join(line(r) for r in rows))


def versions() -> dict:
    """flash-attn-4's and the CuTe DSL's versions, for the JSON's environment."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {"flash_attn_4": version("flash-attn-4"), "nvidia_cutlass_dsl": version("nvidia-cutlass-dsl")}
    except PackageNotFoundError:
        return {"flash_attn_4": "not installed"}


def main(argv=None) -> int:
    def add(ap):
        ap.add_argument("--passes", nargs="+", default=["fwd"], choices=PASSES)

    return ab_rounds.main(argv, description=__doc__.splitlines()[0], name="fa4_peer", rows=ROWS, report=report,
                          measure_fn=lambda a: measure(a.rows, a.D, a.passes, a.rounds), add_args=add,
                          env_extra=versions)


if __name__ == "__main__":
    sys.exit(main())
