"""attnlab inside Hugging Face transformers against transformers' own SDPA attention, same run, same weights:
a training step at 8K tokens and greedy generation after a 32K-token prompt (lecture §7.7, §8.4 in a
real model).

The model is a Llama-architecture transformer built from a config with random weights — by default Llama
3.2 1B's shape (hidden 2048, 16 layers, 32 query and 8 K/V heads of dim 64, MLP 8192, vocabulary
128,256, tied embeddings: 1.24B parameters) in bfloat16:

* train     one step — forward, backward, AdamW — on 1 × 8,192 tokens: the median time over ``--reps``;
* generate  batch 1, a 32,768-token prompt: the prefill time (prompt to first token), then ``--new``
            greedy tokens: decode tokens/s (transformers' generate, DynamicCache); medians of
            ``--gen-reps`` rounds.

The implementations alternate within every round of timing, so a drift of a shared machine hits both.

Correctness in the same run, against a float32 copy of the same weights running SDPA (the oracle):
the step's gradients, parameter by parameter (also on a left-padded batch of 3 rows, which attnlab
runs through ``flash_attention_varlen``), and every generation step's logits up to the first token
where attnlab and SDPA part (they may at a tie of the oracle's two best logits): attnlab's error must be
at most 2× SDPA's own error plus 4 roundings of the values (flash-attention's criterion). Any fallback
warning of attnlab is recorded, and the attnlab entry points each phase called are counted.

Beside the whole model, the attention functions alone, as transformers calls them in one layer: forward
+ backward at the training length, and one decode step over the prompt's cache — where the two
implementations differ, without the rest of the model's time (at batch 1, generation is mostly
transformers' own per-token work).

    python benchmarks/hf.py --json hf-h200.json                       # H200: about 80 s
    python benchmarks/hf.py --quick --json -                          # tiny, float32, CPU: seconds

The exit status is 1 when a correctness check fails.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import attnlab.api  # noqa: E402
from attnlab._cliargs import FORCE_HELP, output_file, positive_int, write_text  # noqa: E402
from attnlab.bench import environment, time_fn  # noqa: E402
from attnlab.integrations import hf  # noqa: E402

IMPLS = ("attnlab", "sdpa")
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500000.0,
                tie_word_embeddings=True)  # Llama 3.2 1B's shape
TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, initializer_range=0.2)
ULPS = 4


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def recording(routes: Counter, fallbacks: list):
    """Count the attnlab entry points called and keep attnlab's warnings (a fallback says so)."""
    saved = {n: getattr(attnlab.api, n) for n in ("flash_attention", "flash_attention_varlen", "flash_decode")}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            routes[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name, fn in saved.items():
        setattr(attnlab.api, name, counted(name, fn))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        fallbacks += sorted({str(w.message) for w in caught if "attnlab" in str(w.message)} - set(fallbacks))
    finally:
        for name, fn in saved.items():
            setattr(attnlab.api, name, fn)


ORACLE = "oracle-sdpa"


def oracle_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The oracle's attention: SDPA with the K/V heads repeated (no GQA flag, so float32 runs SDPA's
    memory-efficient kernel rather than the math one, which would hold the N×N scores of every layer),
    causal, on unpadded rows only (the oracle runs each row alone)."""
    if attention_mask is not None or query.shape[2] != key.shape[2]:
        raise ValueError("the oracle attends unpadded rows without a cache")
    G = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(G, dim=1), value.repeat_interleave(G, dim=1)  # (B, H, N, D)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling)
    return out.transpose(1, 2), None  # (B, N, H, D)


def register_oracle() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ORACLE, oracle_attention)
    AttentionMaskInterface.register(ORACLE, sdpa_mask)


def criterion(err: float, err_ref: float, want: torch.Tensor, dtype: torch.dtype) -> bool:
    """attnlab's error at most 2x the reference's, plus a few roundings of the values' magnitude."""
    return err <= 2 * err_ref + ULPS * torch.finfo(dtype).eps * want.abs().max().item()


# -- training ------------------------------------------------------------------------------------------


def real_logits(model, impl: str, ids, mask, alone: bool):
    """Logits (real tokens, V) at the real tokens, row after row: of the padded batch, or of each row's real
    tokens run alone (no padding at all: how the oracle runs)."""
    model.set_attn_implementation(impl)
    if not alone:
        return model(ids, attention_mask=mask, use_cache=False).logits[mask.bool()]
    return torch.cat([model(ids[b:b + 1, mask[b].bool()], use_cache=False).logits[0] for b in range(ids.shape[0])])


def gradients(model, impl: str, ids, mask, alone: bool = False) -> tuple[float, list[torch.Tensor]]:
    """Loss and gradients of next-token prediction over real tokens (a real token predicting the next)."""
    model.zero_grad(set_to_none=True)
    out = real_logits(model, impl, ids, mask, alone)  # (real tokens, V)
    n = mask.sum(1)
    first = n.cumsum(0) - n  # each row's first real token in ``out``
    keep = torch.cat([torch.arange(a, a + m - 1) for a, m in zip(first.tolist(), n.tolist())]).to(ids.device)
    loss = torch.nn.functional.cross_entropy(out[keep].float(), ids[mask.bool()][keep + 1])
    del out
    loss.backward()
    return loss.item(), [p.grad.detach().clone() for p in model.parameters()]


def check_training(model, oracle, ids, mask, dtype) -> dict:
    """Loss and gradients of attnlab and SDPA at the same weights against the oracle's (each row alone)."""
    want_loss, want = gradients(oracle, ORACLE, ids, mask, alone=True)
    oracle.zero_grad(set_to_none=True)
    got_loss, got = gradients(model, "attnlab", ids, mask)
    base_loss, base = gradients(model, "sdpa", ids, mask)
    model.zero_grad(set_to_none=True)
    worst, failed = 0.0, []
    for (name, _), g, gb, gw in zip(model.named_parameters(), got, base, want):
        err, err_ref = (g.double() - gw.double()).abs().max().item(), (gb.double() - gw.double()).abs().max().item()
        worst = max(worst, err / max(err_ref, 1e-30))
        if not criterion(err, err_ref, gw, dtype):
            failed.append(f"{name}: {err:.3e} vs sdpa {err_ref:.3e}")
    return dict(rows=mask.sum(1).tolist(), loss_oracle=want_loss, loss_attnlab=got_loss, loss_sdpa=base_loss,
                parameters=len(got), worst_error_ratio=worst, failed=failed, ok=not failed)


def left_padded(vocab: int, longest: int, g, device):
    """Three rows of longest, 3/4 and 1/2 of ``longest`` real tokens, padded on the left."""
    ids = torch.randint(1, vocab, (3, longest), generator=g)
    mask = torch.ones(3, longest, dtype=torch.long)
    for b, n in enumerate([longest, longest * 3 // 4, longest // 2]):
        mask[b, : longest - n] = 0
    return ids.masked_fill(mask == 0, 0).to(device), mask.to(device)


def profile_training(model, ids, top: int = 12) -> dict:
    """One training step per implementation under ``torch.profiler``: the GPU's kernel time in the step
    (summed over kernels), the step's wall time, and the kernels that took the most, by name. Where the
    two implementations' steps differ, this says whether it is kernels (and which) or time the GPU sat
    idle waiting for the host."""
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.AdamW(model.parameters(), lr=0.0, foreach=True)
    result = {}
    for impl in IMPLS:
        model.set_attn_implementation(impl)
        for _ in range(2):  # the second step is the one kept: the first warms up (optimizer state, plans)
            sync(ids.device)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                t = time.perf_counter()
                model(ids, labels=ids, use_cache=False).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync(ids.device)
                wall = time.perf_counter() - t
        kernels: dict[str, list[float]] = {}  # name -> each call's GPU time, ms
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
                kernels.setdefault(e.name, []).append(e.device_time / 1e3)  # µs -> ms
        ranked = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))
        result[impl] = dict(wall_ms=wall * 1e3, gpu_kernel_ms=sum(sum(v) for v in kernels.values()),
                            top=[dict(name=n[:120], ms=sum(v), calls=len(v), min_ms=min(v),
                                      median_ms=statistics.median(v), max_ms=max(v)) for n, v in ranked[:top]])
    del opt
    return result


def time_training(model, ids, reps: int) -> dict:
    """Median step time of each implementation, their steps interleaved (a drift of the machine hits both)."""
    # lr = 0: every step does the whole update's arithmetic but leaves the weights as they were, so the
    # generation after it runs on the weights the oracle holds
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, foreach=True)
    times = {impl: [] for impl in IMPLS}
    peak = {}
    for i in range(reps + 1):  # round 0 warms up: kernels compiled, optimizer state allocated
        for impl in IMPLS:
            model.set_attn_implementation(impl)
            if ids.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(ids.device)
            sync(ids.device)
            t = time.perf_counter()
            model(ids, labels=ids, use_cache=False).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync(ids.device)
            if i:
                times[impl].append(time.perf_counter() - t)
            if ids.device.type == "cuda":
                peak[impl] = torch.cuda.max_memory_allocated(ids.device) / 2**30
    del opt
    result = {}
    for impl in IMPLS:
        ms = statistics.median(times[impl]) * 1e3
        result[impl] = dict(step_ms=ms, tokens_per_s=ids.numel() / (ms * 1e-3), peak_gib=peak.get(impl))
    return result


def gpu_time_us(fn, calls: int = 50) -> float:
    """Mean GPU time of ``fn``'s kernels per call (torch.profiler, CUDA activity only): what the GPU spends,
    without the launch overhead that dominates a small call's wall time."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages()) / calls


def time_attention(model, *, train_seq: int, cache_seq: int) -> dict:
    """The attention functions alone, as transformers calls them, in one layer of the model: forward +
    backward at ``train_seq`` tokens (causal) and one decode step (one query) over ``cache_seq`` cached
    keys — ``attnlab.bench.time_fn`` (do_bench's median on CUDA)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = model.model.layers[0].self_attn
    c, p = model.config, next(model.parameters())
    H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    g = torch.Generator(device=p.device).manual_seed(2)

    def randn(*shape, grad=False):
        return torch.randn(*shape, generator=g, device=p.device, dtype=p.dtype).requires_grad_(grad)

    q = randn(1, H, train_seq, D, grad=True)  # (B, H, N, D)
    k, v = randn(1, Hkv, train_seq, D, grad=True), randn(1, Hkv, train_seq, D, grad=True)  # (B, Hkv, N, D)
    # as the model lays them out: projections (B, N, heads, D) seen as (B, heads, N, D)
    qm, km, vm = (randn(1, train_seq, n, D, grad=True) for n in (H, Hkv, Hkv))
    dout = randn(1, train_seq, H, D)
    q1 = randn(1, H, 1, D)  # (B, H, 1, D): one new token
    k_cache, v_cache = randn(1, Hkv, cache_seq, D), randn(1, Hkv, cache_seq, D)  # (B, Hkv, L, D)
    result = {}
    for impl, fn in (("attnlab", hf.attention_forward), ("sdpa", sdpa_attention_forward)):
        def train(fn=fn):
            fn(module, q, k, v, None, scaling=module.scaling)[0].backward(dout)

        def train_model_layout(fn=fn):
            fn(module, qm.transpose(1, 2), km.transpose(1, 2), vm.transpose(1, 2), None,
               scaling=module.scaling)[0].backward(dout)

        def decode(fn=fn):
            with torch.no_grad():
                fn(module, q1, k_cache, v_cache, None, scaling=module.scaling)

        result[impl] = dict(train_fwd_bwd_ms=time_fn(train, device=p.device),
                            train_fwd_bwd_model_layout_ms=time_fn(train_model_layout, device=p.device),
                            decode_step_us=time_fn(decode, device=p.device) * 1e3,
                            decode_step_gpu_us=gpu_time_us(decode) if p.device.type == "cuda" else None)
    if p.device.type == "cuda":  # the road not taken: the prefill kernel with one query row per program
        result["flash_attention_one_query_gpu_us"] = gpu_time_us(
            lambda: attnlab.api.flash_attention(q1, k_cache, v_cache, causal=True, scale=module.scaling))
    return result


# -- generation ----------------------------------------------------------------------------------------


class StepClock:
    """A logits processor that only notes the time: transformers calls it once per new token, right after
    that token's forward (synchronised first, so the time is the GPU's too)."""

    def __init__(self, device):
        self.device, self.times = device, []

    def __call__(self, input_ids, scores):
        sync(self.device)
        self.times.append(time.perf_counter())
        return scores


def timed_generate(model, prompt, new: int):
    """Greedy generation of ``new + 1`` tokens: (output, prefill seconds, decode tokens/s over the last new)."""
    from transformers import LogitsProcessorList

    clock = StepClock(prompt.device)
    sync(prompt.device)
    start = time.perf_counter()
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new + 1,
                         min_new_tokens=new + 1, do_sample=False, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True, logits_processor=LogitsProcessorList([clock]))
    return out, clock.times[0] - start, new / (clock.times[-1] - clock.times[0])


def time_generation(model, prompt, new: int, reps: int) -> dict:
    """Prefill time (prompt to first token) and decode tokens/s (the next ``new`` tokens), medians of
    ``reps`` rounds with the implementations interleaved; the tokens and logits of the first round."""
    for impl in IMPLS:  # warm-up: prefill and decode kernels compiled
        model.set_attn_implementation(impl)
        timed_generate(model, prompt, 1)
    prefill, decode, first = {i: [] for i in IMPLS}, {i: [] for i in IMPLS}, {}
    for _ in range(reps):
        for impl in IMPLS:
            model.set_attn_implementation(impl)
            out, t_prefill, rate = timed_generate(model, prompt, new)
            prefill[impl].append(t_prefill)
            decode[impl].append(rate)
            first.setdefault(impl, out)
    return {impl: dict(prefill_ms=statistics.median(prefill[impl]) * 1e3,
                       decode_tokens_per_s=statistics.median(decode[impl]),
                       tokens=first[impl].sequences[0, prompt.shape[1]:].tolist(),
                       logits=torch.stack(first[impl].logits)[:, 0].float()) for impl in IMPLS}


def check_generation(oracle, prompt, runs: dict, dtype) -> dict:
    """Steps up to the first token where attnlab and SDPA part, against the oracle fed attnlab's tokens."""
    ta, ts = runs["attnlab"]["tokens"], runs["sdpa"]["tokens"]
    part = next((i for i, (a, b) in enumerate(zip(ta, ts)) if a != b), len(ta))
    last = min(part, len(ta) - 1)  # steps 0..last had the same inputs in both runs
    fed = torch.cat([prompt, torch.tensor([ta[:last]], device=prompt.device)], dim=1)
    oracle.set_attn_implementation(ORACLE)
    with torch.no_grad():
        want = oracle(fed, logits_to_keep=last + 1, use_cache=False).logits[0].float()  # (last + 1, V)
    la, ls = runs["attnlab"]["logits"][: last + 1], runs["sdpa"]["logits"][: last + 1]
    err, err_ref = (la - want).abs().max().item(), (ls - want).abs().max().item()
    top = want[last].topk(2).values
    gap = (top[0] - top[1]).item()
    tie = part == len(ta) or gap <= 2 * (err + err_ref)  # a parting is only fair at a near-tie
    return dict(new_tokens=len(ta), same_tokens=part, steps_checked=last + 1, logits_error_attnlab=err,
                logits_error_sdpa=err_ref, top2_gap_at_parting=gap if part < len(ta) else None,
                ok=criterion(err, err_ref, want, dtype) and tie)


# -- the run -------------------------------------------------------------------------------------------


def build(config_kwargs: dict, *, max_positions: int, dtype, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**config_kwargs, max_position_embeddings=max_positions)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model


def run(args) -> dict:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    oracle_dtype = torch.float64 if dtype == torch.float32 else torch.float32
    hf.register()
    register_oracle()
    model = build(TINY if args.quick else LLAMA_1B, max_positions=args.gen_seq + args.new + 1, dtype=dtype,
                  device=device)
    oracle = copy.deepcopy(model).to(oracle_dtype)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    train_ids = torch.randint(0, vocab, (1, args.train_seq), generator=g).to(device)
    prompt = torch.randint(0, vocab, (1, args.gen_seq), generator=g).to(device)
    padded_ids, padded_mask = left_padded(vocab, args.padded_seq, g, device)
    routes = {"train": Counter(), "layer": Counter(), "generate": Counter()}  # attnlab's calls while timing
    check_routes = {"train": Counter(), "padded": Counter()}
    fallbacks: list[str] = []
    with recording(check_routes["train"], fallbacks):
        train_check = check_training(model, oracle, train_ids, torch.ones_like(train_ids), dtype)
    with recording(check_routes["padded"], fallbacks):
        padded_check = check_training(model, oracle, padded_ids, padded_mask, dtype)
    result = dict(model=dict(parameters=n_params, dtype=args.dtype, device=str(device), **model.config.to_diff_dict()),
                  train=dict(seq=args.train_seq), generate=dict(prompt=args.gen_seq, new=args.new))
    with recording(routes["train"], fallbacks):
        result["train"].update(time_training(model, train_ids, args.reps))
    if device.type == "cuda" and not args.no_profile:
        result["train"]["profile"] = profile_training(model, train_ids)
    with recording(routes["layer"], fallbacks):
        result["layer"] = time_attention(model, train_seq=args.train_seq, cache_seq=args.gen_seq)
    with torch.no_grad(), recording(routes["generate"], fallbacks):
        runs = time_generation(model, prompt, args.new, args.gen_reps)
    gen_check = check_generation(oracle, prompt, runs, dtype)
    for impl in IMPLS:
        result["generate"][impl] = {k: v for k, v in runs[impl].items() if k not in ("tokens", "logits")}
    result["checks"] = dict(train=train_check, padded=padded_check, generate=gen_check)
    result["attnlab_calls"] = dict(timed={phase: dict(c) for phase, c in routes.items()},
                                   checks={phase: dict(c) for phase, c in check_routes.items()})
    result["attnlab_fallback_warnings"] = fallbacks
    return result


def training_line(what: str, c: dict) -> str:
    line = (f"{what} ({'ok' if c['ok'] else 'FAILED'}), rows of {c['rows']} tokens: loss oracle {c['loss_oracle']:.6f}, "
            f"attnlab {c['loss_attnlab']:.6f}, sdpa {c['loss_sdpa']:.6f}; {c['parameters']} gradients, worst "
            f"attnlab/sdpa error ratio {c['worst_error_ratio']:.2f}")
    return line + ("; " + "; ".join(c["failed"][:3]) if c["failed"] else "")


def _row(label: str, a: float, s: float, fmt: str) -> str:
    return f"| {label} | {a:{fmt}} | {s:{fmt}} | {a / s:.3f} |"


def report(r: dict) -> str:
    t, g, m = r["train"], r["generate"], r["model"]
    (a, s), (la, ls), (ga, gs) = ((x["attnlab"], x["sdpa"]) for x in (t, r["layer"], g))
    cg = r["checks"]["generate"]
    lines = [
        f"Llama-architecture model, {m['parameters'] / 1e9:.3g}B parameters, {m['dtype']}, {m['device']}", "",
        "| measure | attnlab | sdpa | attnlab / sdpa |", "|---|---:|---:|---:|",
        _row(f"training step, 1 × {t['seq']:,} tokens (ms)", a["step_ms"], s["step_ms"], ".1f"),
        _row("training tokens/s", a["tokens_per_s"], s["tokens_per_s"], ",.0f"),
        *([_row("training peak memory (GiB)", a["peak_gib"], s["peak_gib"], ".1f")] if a["peak_gib"] else []),
        _row(f"one layer's attention, forward + backward at {t['seq']:,} (ms)", la["train_fwd_bwd_ms"],
             ls["train_fwd_bwd_ms"], ".3f"),
        *([_row("the same, q/k/v laid out as the model's projections (ms)", la["train_fwd_bwd_model_layout_ms"],
                ls["train_fwd_bwd_model_layout_ms"], ".3f")] if "train_fwd_bwd_model_layout_ms" in la else []),
        _row(f"one layer's attention, a decode step over {g['prompt']:,} keys (µs)", la["decode_step_us"],
             ls["decode_step_us"], ".1f"),
        *([_row("the same decode step, GPU time only (µs)", la["decode_step_gpu_us"], ls["decode_step_gpu_us"], ".1f")]
          if la["decode_step_gpu_us"] is not None else []),
        _row(f"prefill, 1 × {g['prompt']:,} tokens (ms)", ga["prefill_ms"], gs["prefill_ms"], ".1f"),
        _row(f"decode tokens/s, batch 1 at {g['prompt']:,} ({g['new']} tokens)", ga["decode_tokens_per_s"],
             gs["decode_tokens_per_s"], ".1f"),
        "",
        training_line("training check", r["checks"]["train"]),
        training_line("left-padded batch check", r["checks"]["padded"]),
        f"generation check ({'ok' if cg['ok'] else 'FAILED'}): {cg['same_tokens']} of {cg['new_tokens']} tokens the "
        f"same; logits error vs the oracle over {cg['steps_checked']} steps: attnlab {cg['logits_error_attnlab']:.3e}, "
        f"sdpa {cg['logits_error_sdpa']:.3e}" + (f"; oracle's top-2 gap where they part {cg['top2_gap_at_parting']:.3e}"
                                                 if cg["top2_gap_at_parting"] is not None else ""),
    ]
    if "flash_attention_one_query_gpu_us" in r["layer"]:
        lines.append(f"the decode step through flash_attention (Nq = 1) instead of flash_decode would take "
                     f"{r['layer']['flash_attention_one_query_gpu_us']:.1f} µs of GPU time")
    for impl, prof in t.get("profile", {}).items():  # one profiled step each: kernels or idle GPU?
        lines.append(f"profiled step, {impl}: {prof['wall_ms']:.1f} ms wall, {prof['gpu_kernel_ms']:.1f} ms of kernels; "
                     "most time: " + "; ".join(f"{k['name'][:60]} {k['ms']:.2f} ms ×{k['calls']}" for k in prof["top"][:6]))
    lines += [f"attnlab calls: {json.dumps(r['attnlab_calls'])}",
              f"fallback warnings: {r['attnlab_fallback_warnings'] or 'none'}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny model in float32 on the CPU, short sequences")
    p.add_argument("--train-seq", type=positive_int, default=None, help="training tokens (default 8192; quick 48)")
    p.add_argument("--gen-seq", type=positive_int, default=None, help="prompt tokens (default 32768; quick 40)")
    p.add_argument("--padded-seq", type=positive_int, default=None,
                   help="longest row of the left-padded check batch (default 1024; quick 24)")
    p.add_argument("--new", type=positive_int, default=None, help="generated tokens timed (default 128; quick 6)")
    p.add_argument("--reps", type=positive_int, default=None, help="timed repeats (default 5; quick 2)")
    p.add_argument("--gen-reps", type=positive_int, default=None, help="timed generations (default 2; quick 1)")
    p.add_argument("--device", default=None, help="default cuda (quick: cpu)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=None,
                   help="default bfloat16 (quick: float32)")
    p.add_argument("--json", default=None, help="write the results as JSON here ('-': standard output)")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.add_argument("--no-profile", action="store_true", help="skip the profiled training step (GPU only)")
    args = p.parse_args(argv)
    quick = args.quick
    for name, full, small in (("train_seq", 8192, 48), ("gen_seq", 32768, 40), ("padded_seq", 1024, 24),
                              ("new", 128, 6), ("reps", 5, 2), ("gen_reps", 2, 1),
                              ("device", "cuda", "cpu"), ("dtype", "bfloat16", "float32")):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    try:
        json_path = output_file(args.json, option="--json", force=args.force, allow_stdout=True) if args.json else None
    except ValueError as e:
        print(f"benchmarks/hf.py: {e}", file=sys.stderr)
        return 2
    try:
        device = torch.device(args.device)
    except RuntimeError:
        print(f"benchmarks/hf.py: --device must be a torch device such as cpu or cuda, got {args.device!r}",
              file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("benchmarks/hf.py: --device cuda but no CUDA GPU is visible (try --quick)", file=sys.stderr)
        return 2
    result = run(args)
    table = report(result)
    print(table, file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        where = write_text(json_path, json.dumps({"benchmark": "hf", "environment": environment(), **result},
                                                 indent=2, default=str) + "\n", option="--json", force=args.force)
        print(f"wrote {where}", file=sys.stderr)
    checks = result["checks"]
    return 0 if all(c["ok"] for c in checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
