"""The numbers docs/cost.md quotes that the other tests leave alone: the ``attnlab estimate`` block as the command
prints it, each of the lecture's figures in the table computed by the function the table names, the assumptions'
constants and the split counts of the decode models, from the library or from the recorded runs the doc names
(benchmarks/data/decode-*.json), so a changed function, constant or file, or a retyped number, fails here. Every
test names docs/cost.md itself, as the doc audit requires."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys

import pytest
from tests.helpers import ROOT, doc_text

from attnlab.cost import (
    CALIBRATIONS,
    GPUS,
    SPLIT_CANDIDATES,
    aggregate_rate,
    best_num_splits,
    block_size_table,
    calibrated_num_splits,
    causal_block_pairs,
    causal_fraction,
    cli,
    decode_attention_intensity,
    decode_num_splits,
    decode_split_cost,
    decode_split_time,
    dq_atomic_elements,
    estimate,
    estimate_backward,
    estimate_forward,
    fit_decode_calibration,
    forward_io_table,
    get_gpu,
    grid_estimate,
    host_sweeps,
    io_flash_backward,
    io_flash_forward,
    io_flash_forward_breakdown,
    io_standard_backward,
    io_standard_forward,
    kv_cache_bytes,
    layer_flops_table,
    p_vs_l_table,
    prefill_decode_table,
    recompute_crossover_d,
    recompute_table,
    scores_bytes,
)
from attnlab.cost import calibration_fit as CF

DATA = ROOT / "benchmarks" / "data"
GiB, MiB = 2**30, 2**20
SMALL, LARGE = (64, 128, 4, 3), (128, 128, 4, 3)


def _data(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def test_estimate_block_is_what_the_command_prints():
    """docs/cost.md's console block, line for line, as ``attnlab estimate`` prints it today (on a console wide
    enough for the grid lines, as a terminal would be: off a terminal rich wraps at 200 columns)."""
    text = (ROOT / "docs" / "cost.md").read_text(encoding="utf-8")
    block = re.search(r"```console\n\$ (attnlab estimate [^\n]*)\n(.*?)```", text, re.S)
    assert block and block[1] == "attnlab estimate --gpu H100 --seq 4096 --head-dim 128 --heads 32"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "LANG": "C.UTF-8", "COLUMNS": "400"}
    r = subprocess.run([sys.executable, "-I", "-m", "attnlab", *block[1].split()[1:]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    tidy = lambda s: "\n".join(line.rstrip() for line in s.strip("\n").splitlines())  # noqa: E731
    assert tidy(block[2]) == tidy(r.stdout)


def test_python_lines_and_presets_as_quoted():
    """docs/cost.md's Python example (the values in its comments), the GPU presets ``--gpu`` lists, and the
    non-causal grids of the prefill benchmark's shapes on an H200 with ``cli.PIECE_OVERHEAD``."""
    doc = doc_text("docs/cost.md")
    est = estimate(gpu="H100", seq=4096, head_dim=128, heads=32)
    assert f"est.forward.speedup_l2, est.backward.traffic_ratio # {est.forward.speedup_l2:.2f}, " \
           f"{est.backward.traffic_ratio:.1f}" in doc
    io = io_flash_forward(seq=4096, head_dim=128, block_q=128)
    assert f"io_flash_forward(seq=4096, head_dim=128, block_q=128) # {io:,} elements (exercise 4)" in doc
    ex8 = best_num_splits(batch=2, heads=32, seq=65536, head_dim=128, gpu=get_gpu("h100"))
    assert f"best_num_splits(batch=2, heads=32, seq=65536, head_dim=128, gpu=get_gpu(\"h100\")) # {ex8} (exercise 8)" in doc
    assert f"`--gpu` ({', '.join(GPUS)}; case does not matter)" in doc
    h200 = get_gpu("H200")
    grids = {D: [grid_estimate(pass_=p, batch=16384 // N, heads=2048 // D, seq=N, block=128, causal=False, sms=h200.sms)
                 for N in (4096, 8192, 16384) for p in ("forward", "backward")] for D in (128, 64)}
    programs = {D: {g.programs for g in gs} for D, gs in grids.items()}
    waves = {D: {f"{g.waves:.1f}" for g in gs} for D, gs in grids.items()}
    share = {f"{100 * g.efficiency:.1f}" for gs in grids.values() for g in gs}
    assert all(len(v) == 1 for v in (*programs.values(), *waves.values())) and len(share) == 1
    (p128,), (p64,), (w128,), (w64,), (eff,) = programs[128], programs[64], waves[128], waves[64], share
    assert (f"(16K tokens, H·D = 2048, 128-row blocks) have {p128:,} or {p64:,} programs, {w128} or {w64} waves on an "
            f"H200's {h200.sms} SMs, and reach at most {eff} % of the roofline's speed") in doc
    assert f"each costing {100 * cli.PIECE_OVERHEAD:.0f} % of a program's time more (`cli.PIECE_OVERHEAD`, a guess)" in doc


def test_gluon_backward_cut_as_quoted():
    """docs/cost.md's sentence on the Gluon backward's cut: from which head dim, and its piece overhead in steps."""
    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon_bwd as GB

    doc = doc_text("docs/cost.md")
    words = dict(enumerate(("no", "one", "two", "three", "four", "five", "six")))
    assert GB.TAIL_PIECES
    assert (f"makes this cut on non-causal calls from D = {GB.TAIL_FROM_D} on (`attnlab.gpu.prefill_gluon_bwd.tail_pieces`, "
            f"the same model with {words[GB.TAIL_PIECE_STEPS]} steps of a program's walk as a piece's overhead)") in doc


def test_lecture_figures_table():
    """docs/cost.md's table of the lecture's figures: each computed by the function its row names, rounded as the
    lecture prints it (the functions round to the lecture's figures on every row)."""
    doc = doc_text("docs/cost.md")
    h100 = get_gpu("H100")
    rows = {r.seq: r for r in layer_flops_table(seqs=(32768, 131072))}
    assert f"| §3.1 | attention is {100 * rows[131072].attention_share:.0f}% of a 7B layer's FLOPs at 128K |" in doc
    r = rows[32768]
    assert (f"| §3.2 | S for all heads at 32K: {r.scores_bytes / GiB:.0f} GiB, {100 * r.scores_share_of_memory:.0f}% of "
            f"an {h100.memory / 1e9:.0f} GB H100; ~{r.traffic_time * 1e3:.0f} ms of traffic vs ~{r.math_time * 1e3:.0f} "
            f"ms of math |") in doc
    gap = io_standard_forward(seq=256, head_dim=64) / io_flash_forward(seq=256, head_dim=64, block_q=64, kv_in_l2=True)
    assert f"| §5.3 | a {gap:.1f}× gap with an ideal cache (N = 256, d = 64) |" in doc
    f = estimate_forward(seq=4096, head_dim=128, heads=32, gpu="H100")
    assert (f"| §5.5 | standard ≈ {f.standard_time * 1e6:,.0f} µs ({len(f.standard)} launches), flash ≈ "
            f"{f.flash_l2_time * 1e6:.0f} µs: {f.speedup_l2:.1f}×, and {f.speedup_hbm:.1f}× with K/V from HBM |") in doc
    fits = {(b.block_q, b.block_k) for b in block_size_table(head_dim=128, gpu="H100") if b.fits}
    assert (128, 128) in fits and (256, 256) not in fits
    assert f"| §6.1 | which (Br, Bc) fit in {h100.smem_per_sm // 1024} KB with double-buffered K/V |" in doc
    shape = dict(seq=256, head_dim=64, block_q=64)
    kv = [("K", "read"), ("V", "read")]
    full, causal = (sum(io_flash_forward_breakdown(**shape, causal=c)[k] for k in kv) * 4 for c in (False, True))
    T = 256 // 64
    assert (f"| §6.2 | {causal_block_pairs(T)} of {T * T} pairs, {full:,} → {causal:,} bytes; "
            f"{100 * causal_fraction(32):.1f}% at T = 32 |") in doc
    io = {row.algorithm: row.elements / 1e6 for row in forward_io_table(seq=4096, head_dim=128)}
    assert (f"| §6.3 | FA1 {io['FlashAttention-1 order']:.1f} M, FA2 {io['FlashAttention-2 order']:.1f} M, "
            f"{io['FA2, K/V in L2']:.1f} M with K/V in L2 |") in doc
    (pl,) = p_vs_l_table(seqs=(65536,), heads=32)
    assert f"| §7.1–7.2 | {pl.p_bytes / GiB:.0f} GiB of P vs {pl.l_bytes / MiB:.0f} MiB of L at 64K |" in doc
    assert f"| §7.4 | {dq_atomic_elements(seq=300, head_dim=32, block_k=48):,} dQ atomics |" in doc
    b = estimate_backward(seq=4096, head_dim=128, heads=32, gpu="H100")
    assert (f"| §7.5 | +{100 * (b.flops_ratio - 1):.0f}% FLOPs, 1/{b.traffic_ratio:.0f} of the traffic, "
            f"{b.speedup:.1f}× |") in doc
    rec = recompute_table(head_dim=128)
    d_v100 = recompute_crossover_d("V100")
    assert all(x.ratio < 1 for x in rec)
    assert (f"| §7.6 | d / ridge < 1 on {', '.join(x.gpu for x in rec)}; V100: d > {d_v100:.0f} |") in doc
    per_token = kv_cache_bytes(layers=32, d_model=4096, seq=1) / MiB
    batch = kv_cache_bytes(layers=32, d_model=4096, seq=2048, batch=128) / GiB
    assert f"| §8.2 | {per_token:.1f} MiB per token; {batch:.0f} GiB at batch 128 × 2048 |" in doc
    pre, d1, d128 = prefill_decode_table(prefill_seq=2048, context=2048, batches=(1, 128))
    assert (f"| §8.3 | attention goes from {100 * d1.attention_share:.0f}% to {100 * d128.attention_share:.0f}% of a "
            f"decode step (batch 1 → 128); a batch-1 decode token costs ~{round(d1.time_per_token / pre.time_per_token, -2):.0f}× "
            f"a prefill token |") in doc
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    assert (f"| §8.4 | {100 * decode_split_cost(splits=1, **kw).sm_use:.0f}% of SMs busy; "
            f"{decode_split_time(splits=4, **kw) * 1e6:.0f} µs at 4 splits vs {decode_split_time(splits=5, **kw) * 1e6:.0f} "
            f"µs at 5 |") in doc
    gqa = dict(context=4096, head_dim=128)
    ex7 = decode_attention_intensity(heads=64, kv_heads=8, **gqa) / decode_attention_intensity(heads=64, **gqa)
    ex8 = best_num_splits(batch=2, heads=32, seq=65536, head_dim=128, gpu="H100")
    assert (f"| §12 | {scores_bytes(heads=40, seq_q=8192) / GiB:.0f} GiB; {io['FlashAttention-2 order']:.1f} M; "
            f"{causal_block_pairs(8)}/64; d > {d_v100:.0f}; {ex7:.0f}×; {ex8} splits |") in doc


def test_assumptions_as_quoted():
    """docs/cost.md's assumptions: the launch overhead of every preset, the A100 presets' bandwidths, decimal GB, the
    closed forms of the traffic, the §8.3 context and the §8.4 split rule with its exact argmin."""
    doc = doc_text("docs/cost.md")
    launch = {g.launch_overhead for g in GPUS.values()}
    assert len(launch) == 1
    (launch,) = launch
    f = estimate_forward(seq=4096, head_dim=128, heads=32, gpu="H100")
    assert (f"**Launch overhead:** {launch * 1e6:.0f} µs per kernel. It is not a datasheet number. It is the value that "
            f"makes §5.5's {f.standard_time * 1e6:,.0f} µs ({len(f.standard)} launches) and {f.flash_l2_time * 1e6:.0f} µs "
            f"come out") in doc
    a100, a40 = get_gpu("A100"), get_gpu("A100-40GB")
    assert (f"A100 is the {a100.memory / 1e9:.0f} GB SXM4 part ({a100.hbm_bw / 1e12:.3f} TB/s) that the "
            f"FlashAttention-2 paper measures; `A100-40GB` has {a40.hbm_bw / 1e12:.3f} TB/s") in doc
    h100 = get_gpu("H100")
    (row,) = layer_flops_table(seqs=(32768,))
    assert h100.memory == 80e9
    assert f"HBM capacity uses decimal GB (80e9), as the lecture's \"{100 * row.scores_share_of_memory:.0f}%\" does" in doc
    N, d = 4096, 128
    assert io_standard_forward(seq=N, head_dim=d) == 4 * N * d + 4 * N * N
    assert io_standard_backward(seq=N, head_dim=d) == 7 * N * N + 7 * N * d
    assert io_flash_backward(seq=N, head_dim=d, block_q=128, block_k=128, ideal_cache=True) == 8 * N * d + N
    assert ("the standard forward moves 4Nd + 4N² elements and the standard backward (the 5 kernels that autograd runs) "
            "moves 7N² + 7Nd") in doc and "With an ideal cache that is 8Nd + N elements" in doc
    b = estimate_backward(seq=N, head_dim=d, heads=32, gpu="H100")
    assert f"then the result would no longer be the lecture's {b.speedup:.1f}×" in doc
    context = inspect.signature(prefill_decode_table).parameters["context"].default
    _, d1, d128 = prefill_decode_table(batches=(1, 128))
    assert (f"the decode rows assume {context} tokens in each sequence's cache, the length of the lecture's prefill. "
            f"With that context, attention's share of a decode step is {100 * d1.attention_share:.0f}% at batch 1 and "
            f"{100 * d128.attention_share:.0f}% at batch 128") in doc
    tol = inspect.signature(best_num_splits).parameters["tolerance"].default
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    argmin = best_num_splits(**kw, tolerance=0)
    cost = decode_split_cost(splits=argmin, **kw)
    assert cost.blocks == cost.waves * h100.sms  # full waves
    faster = decode_split_time(splits=best_num_splits(**kw), **kw) / cost.time - 1
    ex8 = best_num_splits(batch=2, heads=32, seq=65536, head_dim=128, gpu="H100")
    assert (f"(default {100 * tol:.0f}%) of the model's best. The exact argmin prefers block counts that are multiples "
            f"of the SM count: at batch 1 and 32K it picks {argmin} splits ({cost.waves} full waves), which is "
            f"{100 * faster:.0f}% faster in the model") in doc
    assert (f"With the default, the lecture's answers come out: {best_num_splits(**kw)} splits at batch 1 and 32K, "
            f"{ex8} splits for exercise 8") in doc


def test_split_models_as_quoted():
    """docs/cost.md's two split models: the wave model's and the calibrated model's picks at batch 1, 8 K/V heads,
    128K keys on 132 SMs, the chooser's tolerance and the fit's grid (from the code), and the shipped calibrations'
    source run."""
    doc = doc_text("docs/cost.md")
    h200 = dataclasses.replace(get_gpu("H200"), sms=132)
    shape = dict(batch=1, kv_heads=8, seq=131072, head_dim=128, gpu=h200)
    wave, calibrated = decode_num_splits(**shape), decode_num_splits(**shape, config=SMALL)
    assert f"decode_num_splits(**shape) # {wave}: no configuration, the wave model" in doc
    assert f"decode_num_splits(**shape, config=(64, 128, 4, 3)) # {calibrated}: the H200 calibration of that configuration" \
        in doc
    blocks = decode_split_cost(batch=1, heads=8, seq=131072, head_dim=128, splits=wave, gpu=h200).blocks
    cal = CALIBRATIONS["H200", SMALL]
    rate = aggregate_rate(blocks, cal.program_bw, cal.bw, cal.k)
    assert (f"the wave model is content with {wave} splits ({blocks} blocks fill {blocks} of {h200.sms} SMs at bw / SMs "
            f"each); in the calibrated model {blocks} programs stream at {rate / 1e12:.2f} TB/s, "
            f"{100 * rate / h200.hbm_bw:.0f}% of the H200's {h200.hbm_bw / 1e12:.1f} TB/s, and it picks {calibrated}") in doc
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    ex8 = best_num_splits(batch=2, heads=32, seq=65536, head_dim=128, gpu="H100")
    assert (f"It gives the lecture's numbers ({decode_split_time(splits=4, **kw) * 1e6:.0f} µs at 4 splits, "
            f"{decode_split_time(splits=5, **kw) * 1e6:.0f} µs at 5; exercise 8 → {ex8}) and works for any GPU preset") in doc
    tol = inspect.signature(calibrated_num_splits).parameters["tolerance"].default
    assert f"`calibrated_num_splits` (the fewest of `PICK_CANDIDATES` within {100 * tol:.0f}% of the model's fastest" in doc
    src = inspect.getsource(CF.fit_decode_calibration)
    step, n_bw = re.search(r"rmax \* \(1 \+ ([\d.]+) \* i\) for i in range\((\d+)\)", src).groups()
    k0, k1, n_k = re.search(r"_geomspace\(([\d.]+), ([\d.]+), (\d+)\)", src).groups()
    assert (f"bw from the fastest measured rate to {1 + float(step) * (int(n_bw) - 1):.1f}× it in "
            f"{100 * float(step):.0f}% steps; k from {float(k0):.0f} to {float(k1):.0f} in {n_k} geometric steps") in doc
    runs = {re.fullmatch(r"H200, (\S+), benchmarks/data/decode-host-h200-run(\d+)\.json", c.source).groups()
            for c in CALIBRATIONS.values()}
    assert len(runs) == 1
    ((date, run),) = runs
    assert (f"both configurations, `(64, 128, 4, 3)` and `(128, 128, 4, 3)`, to the batch-1 split sweeps of "
            f"`benchmarks/decode_host.py --sweep` timed with the separate merge kernel (decode-host run {run}, "
            f"{date}, read by `host_sweeps`)") in doc
    assert sorted(k for _, k in CALIBRATIONS) == [SMALL, LARGE]


def test_the_earlier_fit_as_quoted():
    """docs/cost.md: the large configuration fitted to decode run 3 alone (its B = 16 sweeps) and its picks on
    decode-host run 2's batch-1 sweeps of the same configuration, against each sweep's best."""
    doc = doc_text("docs/cost.md")
    cal = fit_decode_calibration([_data("decode-h200-run3")], LARGE)
    picks, bests, slower = [], [], []
    for s in host_sweeps(_data("decode-host-h200-run2"), fused_merge=True):
        if tuple(s["config"]) != LARGE:
            continue
        times = {int(S): t for S, t in s["times_ms"].items()}
        pick = calibrated_num_splits(batch=s["B"], kv_heads=s["Hkv"], seq=s["L"], head_dim=s["D"],
                                     sms=get_gpu("H200").sms, cal=cal, min_split_len=LARGE[0],
                                     candidates=SPLIT_CANDIDATES)  # (the chooser's candidates then: every swept count)
        best = min(times, key=times.get)
        assert s["B"] == 1 and pick in times and pick < best
        picks.append(pick)
        bests.append(best)
        slower.append(times[pick] / times[best] - 1)
    assert len(picks) == 3
    assert (f"the large configuration fitted to decode run 3 alone (batch 16) picked {min(picks)}–{max(picks)} splits at "
            f"batch 1, where {min(bests)}–{max(bests)} were {100 * min(slower):.0f}–{100 * max(slower):.0f} % faster in "
            f"decode-host run 2's sweeps") in doc


def test_calibration_fit_tests_as_described():
    """docs/cost.md's account of tests/cost/test_calibration_fit.py: the margin its chooser checks allow."""
    doc = doc_text("docs/cost.md")
    src = (ROOT / "tests" / "cost" / "test_calibration_fit.py").read_text()
    margins = set(re.findall(r"times\[pick\] <= ([\d.]+) \* min\(times\.values\(\)\)", src))
    assert len(margins) == 1
    (margin,) = margins
    assert f"(each pick within {100 * (float(margin) - 1):.0f}% of the measured best)" in doc
