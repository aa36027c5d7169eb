"""Why attnlab's backward kernel runs slower inside a transformers training step than alone (GPU only).

``hf.py``'s profiled step (1.24B Llama, 8K tokens, bf16) shows the Gluon backward kernel at 1.93–1.97 ms
in 15 of its 16 calls and at 1.75 ms in one, while the same shapes and layouts take 1.78 ms alone;
cuDNN's backward takes 1.70–1.73 ms in the step. This script separates the candidate causes, each a
phase timed with ``torch.profiler`` (the GPU time of the named kernel, per call):

    order     one profiled step per implementation: every attention kernel's time in launch order,
              so the fast call's place shows (and cuDNN's per call beside it)
    replay    the exact inputs of three of the step's backward calls (cloned with their strides),
              each replayed alone: the data and the layout, without the step around them
    fresh     the same shapes and strides with random data
    gemm      each replay right after the layer's MLP and projection products (as in the step)
    idle      a step with the GPU idle for 2 ms before each backward kernel (the host waits)
    cudnn     cuDNN's backward on the same replayed inputs (fwd + bwd through SDPA)
    kernels   every kernel of one step per implementation, by name: calls and GPU time (where the
              two steps differ outside attention: copies, conversions)
    variants  the step under other launch choices for its attention (D = 64, causal): the output and
              gradients laid out contiguously (as before they followed the inputs' layout), the dQ
              product 0 or 1 steps behind, the forward on two consumer warp groups; per choice, the
              attention kernels' in-step times, the step's kernel time, and its wall time against
              SDPA's in the same rounds
    pair      attnlab's and cuDNN's attention alone on the step's shapes, for a kernel profiler (ncu)

Clocks: run ``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,
clocks_event_reasons.active --format=csv -lms 20`` beside it; the script prints a wall-clock stamp at
each phase's start so the samples line up.

    python benchmarks/hf_step_probe.py --json probe.json     # H200: about a minute
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import hf as hfbench  # noqa: E402  (benchmarks/hf.py: the model and its config)

from attnlab._cliargs import FORCE_HELP, output_file, write_text  # noqa: E402
from attnlab.gpu import prefill_gluon_bwd  # noqa: E402
from attnlab.integrations import hf  # noqa: E402

BWD, FWD, CUDNN_BWD, CUDNN_FWD = "_attn_bwd_gluon_ws", "_attn_fwd_gluon_ws", "flash_bprop", "flash_fprop"
PHASES = ("order", "kernels", "variants", "replay", "pair")


def stamp(phase: str) -> None:
    print(f"== {phase} at {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}", flush=True)


def kernel_ms(fn, names: tuple[str, ...]) -> dict[str, list[float]]:
    """Run ``fn`` under torch.profiler; each kernel whose name contains one of ``names``: its GPU times
    (ms) in launch order."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    found = {n: [] for n in names}
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0]
    events.sort(key=lambda e: e.time_range.start)
    for e in events:
        for n in names:
            if n in e.name:
                found[n].append(e.device_time / 1e3)
    return found


def all_kernels(fn) -> dict[str, dict]:
    """Every kernel ``fn`` launches, by name: calls and total GPU ms."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    table: dict[str, dict] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
            row = table.setdefault(e.name[:160], dict(calls=0, ms=0.0))
            row["calls"] += 1
            row["ms"] += e.device_time / 1e3
    return table


def _contiguous_alloc(x, shape=None, dtype=None):
    return torch.empty(tuple(x.shape) if shape is None else tuple(shape), device=x.device, dtype=dtype or x.dtype)


def variant_settings():
    """The launch choices the variants phase compares, as (name, settings): each setting is applied
    with ``apply`` and undone with the function it returns."""
    import dataclasses

    from attnlab.gpu import config as C
    from attnlab.gpu import prefill_bwd, prefill_fwd

    def table_choice(fwd=None, bwd=None):
        def apply():
            old_f = C._GLUON_FWD_TABLE[(64, True, "long")]
            old_b = C._GLUON_BWD_TABLE[(64, True, "long")]
            C.set_config(64, True, fwd=fwd, bwd=bwd, length="long")
            return lambda: C.set_config(64, True, fwd=old_f, bwd=old_b, length="long")
        return apply

    def contiguous_outputs():
        saved = prefill_fwd.empty_like_layout, prefill_bwd.empty_like_layout
        prefill_fwd.empty_like_layout = prefill_bwd.empty_like_layout = _contiguous_alloc

        def undo():
            prefill_fwd.empty_like_layout, prefill_bwd.empty_like_layout = saved
        return undo

    bwd = C._GLUON_BWD_TABLE[(64, True, "long")]
    return [("table", lambda: (lambda: None)),
            ("contiguous outputs", contiguous_outputs),
            ("bwd dq_lag 0", table_choice(bwd=dataclasses.replace(bwd, dq_lag=0))),
            ("bwd dq_lag 1", table_choice(bwd=dataclasses.replace(bwd, dq_lag=1))),
            ("fwd 128 rows", table_choice(fwd=C._GLUON_LONG))]


def summary(ms: list[float]) -> dict:
    return dict(calls=len(ms), min=min(ms), median=statistics.median(ms), max=max(ms)) if ms else dict(calls=0)


class Stash:
    """Wraps ``prefill_gluon_bwd.gluon_backward``: keeps clones of the inputs of the calls numbered in
    ``keep`` (call 0 is the step's first backward call, the last layer's), and optionally runs
    ``before`` ahead of every call."""

    def __init__(self, keep=()):
        self.orig = prefill_gluon_bwd.gluon_backward
        self.keep, self.count, self.kept, self.before = set(keep), 0, {}, None

    def __call__(self, q, k, v, do, lse2, delta, dq, dk, dv, **kw):
        if self.count in self.keep:
            self.kept[self.count] = dict(tensors=[t.clone() for t in (q, k, v, do, lse2, delta)], kw=dict(kw))
        self.count += 1
        if self.before is not None:
            self.before()
        return self.orig(q, k, v, do, lse2, delta, dq, dk, dv, **kw)

    def __enter__(self):
        prefill_gluon_bwd.gluon_backward = self
        return self

    def __exit__(self, *exc):
        prefill_gluon_bwd.gluon_backward = self.orig


def replay(kept: dict, *, fresh: bool = False, before=None, reps: int = 20) -> list[float]:
    """The backward kernel on kept inputs (or random ones of the same shapes and strides), ``reps``
    calls, each after ``before``: the kernel's GPU times."""
    q, k, v, do, lse2, delta = kept["tensors"]
    if fresh:
        q, k, v, do = (torch.randn_like(t) * t.float().std().to(t.dtype) for t in (q, k, v, do))
    dq, dk, dv = (torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))

    def calls():
        for _ in range(reps):
            if before is not None:
                before()
            prefill_gluon_bwd.gluon_backward(q, k, v, do, lse2, delta, dq, dk, dv, **kept["kw"])

    calls()  # warm
    return kernel_ms(calls, (BWD,))[BWD]


def layer_gemms(model, seq: int):
    """The products around one layer's attention backward in the step: the MLP's three (gate, up,
    down) weight and input gradients, then o_proj's input gradient, on random activations."""
    c, p = model.config, next(model.parameters())
    g = torch.Generator(device=p.device).manual_seed(3)
    x = torch.randn(seq, c.hidden_size, generator=g, device=p.device, dtype=p.dtype)
    h = torch.randn(seq, c.intermediate_size, generator=g, device=p.device, dtype=p.dtype)
    w_up = torch.randn(c.intermediate_size, c.hidden_size, generator=g, device=p.device, dtype=p.dtype)
    w_o = torch.randn(c.hidden_size, c.hidden_size, generator=g, device=p.device, dtype=p.dtype)

    def run():
        for _ in range(2):  # gate and up: input gradient and weight gradient
            h.mm(w_up)
            h.t().mm(x)
        x.mm(w_up.t())  # down: its input gradient
        h.t().mm(x)  # and its weight gradient
        x.mm(w_o)  # o_proj's input gradient: the dO of the attention
    return run


def cudnn_replay(kept: dict, module, reps: int = 20) -> list[float]:
    """cuDNN's backward (SDPA, cuDNN backend, GQA) on the kept q, k, v, dO."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = (t.detach().clone().requires_grad_(True) for t in kept["tensors"][:3])
    do = kept["tensors"][3].transpose(1, 2)  # the gradient of transformers' (B, N, H, D) output

    def calls():
        for _ in range(reps):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = sdpa_attention_forward(module, q, k, v, None, scaling=module.scaling)[0]
            o.backward(do)
    calls()
    return kernel_ms(calls, (CUDNN_BWD,))[CUDNN_BWD]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=8192, help="training tokens (default 8192)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.add_argument("--phases", nargs="+", choices=PHASES, default=[x for x in PHASES if x != "pair"],
                   help="what to run (default: all but pair)")
    args = p.parse_args(argv)
    try:
        json_path = output_file(args.json, option="--json", force=args.force) if args.json else None
    except ValueError as e:
        p.error(str(e))
    if not torch.cuda.is_available():
        print("hf_step_probe.py times GPU kernels: it needs a CUDA GPU", file=sys.stderr)
        return 2
    written = []

    def save(out: dict) -> None:  # after the step phases, then again at the end: the file is ours by then
        if json_path is not None:
            write_text(json_path, json.dumps(out, indent=1), option="--json", force=args.force or bool(written))
            written.append(True)

    if args.phases == ["pair"]:
        pair(args.seq)
        return 0
    hf.register()
    model = hfbench.build(hfbench.LLAMA_1B, max_positions=args.seq, dtype=torch.bfloat16, device="cuda")
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq), generator=torch.Generator().manual_seed(1)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, foreach=True)
    layers = model.config.num_hidden_layers

    def step():
        model(ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out: dict = dict(environment=dict(torch=torch.__version__, gpu=torch.cuda.get_device_name()), seq=args.seq)
    for impl in ("attnlab", "sdpa"):
        model.set_attn_implementation(impl)
        for _ in range(2):
            step()
    if "order" in args.phases:
        stamp("order")
        order_phase(model, step, out)
    if "kernels" in args.phases:
        stamp("kernels")
        kernels_phase(model, step, out)
    if "variants" in args.phases:
        stamp("variants")
        variants_phase(model, step, out)
    save(out)
    if "replay" in args.phases:
        replay_phase(model, step, layers, args.seq, out)
    if "pair" in args.phases:
        pair(args.seq)
    stamp("done")
    save(out)
    return 0


def order_phase(model, step, out):
    order = {}
    for _ in range(2):
        for impl in ("attnlab", "sdpa"):
            model.set_attn_implementation(impl)
            names = (FWD, BWD) if impl == "attnlab" else (CUDNN_FWD, CUDNN_BWD)
            order.setdefault(impl, []).append(kernel_ms(step, names))
    out["order"] = order
    for impl, rounds in order.items():
        for r in rounds:
            for n, ms in r.items():
                print(f"{impl:8s} {n:20s} " + " ".join(f"{x:.3f}" for x in ms))


def kernels_phase(model, step, out):
    kernels = {}
    for impl in ("attnlab", "sdpa"):
        model.set_attn_implementation(impl)
        kernels[impl] = all_kernels(step)
    out["kernels"] = kernels
    names = sorted(set(kernels["attnlab"]) | set(kernels["sdpa"]),
                   key=lambda n: -max(kernels["attnlab"].get(n, {}).get("ms", 0), kernels["sdpa"].get(n, {}).get("ms", 0)))
    for n in names:
        a, b = kernels["attnlab"].get(n, dict(calls=0, ms=0.0)), kernels["sdpa"].get(n, dict(calls=0, ms=0.0))
        if abs(a["ms"] - b["ms"]) > 0.02 or a["calls"] != b["calls"]:
            print(f"  {n[:90]:90s} attnlab {a['calls']:4d} {a['ms']:8.3f}  sdpa {b['calls']:4d} {b['ms']:8.3f}")
    print("total kernel ms: " + "  ".join(f"{i} {sum(r['ms'] for r in kernels[i].values()):.2f}" for i in kernels))


def variants_phase(model, step, out):
    variants = {}
    for name, apply in variant_settings():
        undo = apply()
        try:
            model.set_attn_implementation("attnlab")
            step()  # compiles what the choice needs
            rows = dict(fwd=[], bwd=[], attnlab_kernel_ms=[], sdpa_kernel_ms=[], attnlab_step_ms=[], sdpa_step_ms=[])
            for _ in range(3):
                for impl in ("attnlab", "sdpa"):
                    model.set_attn_implementation(impl)
                    table = all_kernels(step)
                    rows[f"{impl}_kernel_ms"].append(sum(r["ms"] for r in table.values()))
                    if impl == "attnlab":
                        rows["fwd"] += [r["ms"] / r["calls"] for n, r in table.items() if FWD in n]
                        rows["bwd"] += [r["ms"] / r["calls"] for n, r in table.items() if BWD in n]
            for _ in range(6):
                for impl in ("attnlab", "sdpa"):
                    model.set_attn_implementation(impl)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    step()
                    torch.cuda.synchronize()
                    rows[f"{impl}_step_ms"].append((time.perf_counter() - t) * 1e3)
            med = {k: statistics.median(v) if v else None for k, v in rows.items()}
            variants[name] = dict(rows=rows, median=med)
            print(f"{name:20s} fwd {med['fwd'] or 0:.3f} bwd {med['bwd'] or 0:.3f}  kernels {med['attnlab_kernel_ms']:.2f} "
                  f"vs sdpa {med['sdpa_kernel_ms']:.2f}  step {med['attnlab_step_ms']:.2f} vs sdpa {med['sdpa_step_ms']:.2f} "
                  f"({med['attnlab_step_ms'] / med['sdpa_step_ms']:.4f})", flush=True)
        except Exception as e:  # a choice that fails to build leaves the others measured
            variants[name] = dict(error=repr(e)[:300])
            print(f"{name}: {e!r}"[:400])
        finally:
            undo()
    out["variants"] = variants


def replay_phase(model, step, layers, seq, out):
    stamp("stash")
    model.set_attn_implementation("attnlab")
    keep = (0, layers // 2, layers - 1)
    with Stash(keep) as st:
        step()
    kept = st.kept

    stamp("idle")
    with Stash() as st:
        st.before = lambda: (torch.cuda.synchronize(), time.sleep(0.002))
        idle = kernel_ms(step, (BWD,))[BWD]
    out["idle"] = idle
    print("idle     " + " ".join(f"{x:.3f}" for x in idle))

    stamp("replay")
    gemms = layer_gemms(model, seq)
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    res = {}
    for i in keep:
        r, ki = {}, kept[i]
        for name, fn in (("replay", lambda ki=ki: replay(ki)),
                         ("replay_flushed", lambda ki=ki: replay(ki, before=flush.zero_)),
                         ("fresh", lambda ki=ki: replay(ki, fresh=True)),
                         ("after_gemms", lambda ki=ki: replay(ki, before=gemms)),
                         ("fresh_after_gemms", lambda ki=ki: replay(ki, fresh=True, before=gemms)),
                         ("cudnn", lambda ki=ki: cudnn_replay(ki, model.model.layers[0].self_attn))):
            try:
                r[name] = summary(fn())
            except Exception as e:  # a phase that fails leaves the others measured
                r[name] = dict(calls=0, error=repr(e)[:300])
                print(f"call {i} {name}: {e!r}"[:400])
        q, k, v, do = kept[i]["tensors"][:4]
        r["strides"] = [list(t.stride()) for t in (q, k, v, do)]
        r["std"] = [float(t.float().std()) for t in (q, k, v, do)]
        res[f"call{i}"] = r
        print(f"call {i}: " + "  ".join(f"{n} {s['median']:.3f}" for n, s in r.items() if isinstance(s, dict) and s.get("calls")))
        print(f"   strides {r['strides']}  std " + " ".join(f"{s:.3g}" for s in r["std"]))
    out["replays"] = res


def pair(seq: int, calls: int = 5):
    """attnlab's and cuDNN's attention, forward and backward, alone on the step's shapes (the model's layout,
    GQA), ``calls`` times each: something for a kernel profiler to catch, one kernel name per run (the
    launch count covers every kernel the name matches), e.g. ``ncu --clock-control none --kernel-name
    regex:_attn_bwd_gluon_ws --launch-skip 3 --launch-count 1 python benchmarks/hf_step_probe.py --phases
    pair``, then the same with ``regex:flash_bprop`` for cuDNN's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import attnlab

    c = hfbench.LLAMA_1B
    H, Hkv, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    g = torch.Generator(device="cuda").manual_seed(4)

    def model_layout(heads):
        return torch.randn(1, seq, heads, D, generator=g, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    q, k, v = (model_layout(n).requires_grad_() for n in (H, Hkv, Hkv))
    do = model_layout(H)
    stamp("pair")
    for _ in range(calls):
        attnlab.flash_attention(q, k, v, causal=True).backward(do)
    for _ in range(calls):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(do)
    torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main())
