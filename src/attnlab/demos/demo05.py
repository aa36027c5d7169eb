"""Code 05: inference — KV cache, prefill vs decode, Flash-Decoding (lecture §8.1–§8.4).

1. KV cache (§8.2): 60 LikesWorld prompts, 8 greedy tokens each, with and without the cache —
   identical tokens, the largest logit difference, and the compute saved (token-forwards). The same
   comparison with the lecture's start-position bug injected.
2. Prefill vs decode (§8.3): one 7B layer on the H100 roofline, from ``attnlab.cost``; the 7B KV cache.
3. Flash-Decoding in the model (§8.4): the cached decode path through ``attnlab.api.flash_decode`` with
   2, 4 and 7 splits, against generation without a cache.
4. The split-count table of the Flash-Decoding wave model (§8.4), from ``attnlab.cost``.

Every number printed is computed here and returned.
"""

from __future__ import annotations

from attnlab.model import compare, detokenize, generate, get_model
from attnlab.model.train import cpu_threads

PROMPTS = 60
NEW_TOKENS = 8
SPLITS = (2, 4, 7)
PREFILL = dict(prefill_seq=2048, context=2048, gpu="H100")  # §8.3: one 7B layer
KV_7B = dict(layers=32, d_model=4096, dtype_bytes=2)  # §8.2: the 7B model's KV cache, FP16
KV_BIG = dict(batch=128, seq=2048)
SPLIT_TABLE = dict(batch=1, heads=32, head_dim=128, gpu="H100", dtype_bytes=2)  # §8.4


def kv_cache(console, tm, prompts) -> dict:
    plain = generate(tm.model, prompts, NEW_TOKENS, use_cache=False)
    cached = generate(tm.model, prompts, NEW_TOKENS, use_cache=True)
    c = compare(cached, plain)
    bug = compare(generate(tm.model, prompts, NEW_TOKENS, use_cache=True, buggy_start_pos=True), plain)
    avg = sum(map(len, prompts)) / len(prompts)
    saved = plain.token_forwards / cached.token_forwards
    console.print(f"[b]1 · KV cache[/b] (§8.2): {len(prompts)} prompts of {avg:.1f} tokens on average, "
                  f"{NEW_TOKENS} new tokens each")
    console.print(f"   e.g. {detokenize(prompts[0])} → [b]{detokenize(cached.tokens[0])}[/b]")
    console.print(f"   with vs without the cache: {c['identical']}/{c['total']} generations identical, "
                  f"max logit difference {c['max_logit_diff']:.1e} (float32 rounding)")
    console.print(f"   token-forwards: {plain.token_forwards:,} without the cache, {cached.token_forwards:,} with it "
                  f"— {saved:.1f}× less compute (O(n²) → O(n))")
    console.print(f"   with the start-position bug (each layer reads layer 0's cache length): "
                  f"{bug['identical']}/{bug['total']} identical, max logit difference {bug['max_logit_diff']:.2f}")
    return {"prompts": len(prompts), "avg_prompt_tokens": avg, "new_tokens": NEW_TOKENS,
            "identical": c["identical"], "max_logit_diff": c["max_logit_diff"],
            "token_forwards_uncached": plain.token_forwards, "token_forwards_cached": cached.token_forwards,
            "compute_ratio": saved, "bug_identical": bug["identical"], "bug_max_logit_diff": bug["max_logit_diff"]}, plain


def prefill_decode(console) -> dict:
    from attnlab.cost import kv_cache_bytes, prefill_decode_table, render_table

    rows = prefill_decode_table(**PREFILL)
    console.print(render_table(rows, title=f"2 · one 7B layer on {PREFILL['gpu']}: prefill {PREFILL['prefill_seq']:,} "
                                           f"tokens vs one decode step (§8.3)"))
    pre = rows[0]
    d1 = next(r for r in rows if r.phase == "decode" and r.batch == 1)
    dmax = rows[-1]
    console.print(f"   a decode token at batch 1 costs {d1.time_per_token / pre.time_per_token:.0f}× a prefill token; "
                  f"attention is {100 * d1.attention_share:.0f}% of a decode step at batch 1 and "
                  f"{100 * dmax.attention_share:.0f}% at batch {dmax.batch} (its intensity stays "
                  f"{dmax.attention_intensity:.1f} FLOP/B)")
    per_token = kv_cache_bytes(seq=1, **KV_7B)
    big = kv_cache_bytes(**KV_BIG, **KV_7B)
    console.print(f"   7B KV cache ({KV_7B['layers']} layers, d_model {KV_7B['d_model']}, {8 * KV_7B['dtype_bytes']}-bit): "
                  f"{per_token / 2**20:.2f} MiB per token; batch {KV_BIG['batch']} × {KV_BIG['seq']:,} tokens: "
                  f"{big / 2**30:.0f} GiB")
    return {"rows": [r.to_dict() for r in rows], "kv_bytes_per_token": per_token, "kv_bytes_b128_2k": big,
            "decode_vs_prefill_per_token": d1.time_per_token / pre.time_per_token}


def flash_decoding(console, tm, prompts, plain) -> dict:
    from rich.table import Table

    table = Table(title="3 · the model decoding through attnlab.api.flash_decode (§8.4)")
    for col in ("splits", "identical to no-cache", "max logit difference"):
        table.add_column(col, justify="right")
    out = {}
    for S in SPLITS:
        g = generate(tm.model, prompts, NEW_TOKENS, use_cache=True, attention="flash", num_splits=S)
        c = compare(g, plain)
        out[S] = {"identical": c["identical"], "max_logit_diff": c["max_logit_diff"]}
        table.add_row(str(S), f"{c['identical']}/{c['total']}", f"{c['max_logit_diff']:.1e}")
    console.print(table)
    return out


def split_table(console) -> dict:
    from attnlab.cost import decode_split_table, get_gpu, render_table

    t = SPLIT_TABLE
    rows = decode_split_table(**t)
    gpu = get_gpu(t["gpu"])
    console.print(render_table(rows, title=f"4 · Flash-Decoding on {gpu.name}, batch {t['batch']}, {t['heads']} heads, "
                                           f"D {t['head_dim']}, {8 * t['dtype_bytes']}-bit: splits vs waves (§8.4)"))
    at = {r.splits: r for r in rows if r.seq == 32768}
    if 4 in at and 5 in at:
        console.print(f"   at 32K: {at[4].splits} splits = {at[4].blocks} blocks in {at[4].waves} wave, "
                      f"{at[4].time * 1e6:.0f} µs; {at[5].splits} splits = {at[5].blocks} blocks need "
                      f"{at[5].waves} waves on {gpu.sms} SMs: {at[5].time * 1e6:.0f} µs")
    return {"rows": [r.to_dict() for r in rows]}


def run(out_dir=None, console=None) -> dict:
    """Run the four demonstrations of code 05; return every number printed."""
    from attnlab._console import make_console

    console = console or make_console()
    with cpu_threads():
        tm = get_model(console=console)
        prompts = tm.train_config.world().prompts(PROMPTS)
        cache, plain = kv_cache(console, tm, prompts)
        out = {"kv_cache": cache, "prefill_decode": prefill_decode(console),
               "flash_decode": flash_decoding(console, tm, prompts, plain), "splits": split_table(console)}
    return out
