"""The numbers docs/decode.md quotes that the other decode tests leave alone: each computed here from the recorded
run the doc names (benchmarks/data/decode-host-h200-run*.json, decode-h200-run*.json), from the cost model or from
the library's constants, so a changed file, a changed constant or a retyped number fails here."""

from __future__ import annotations

import json

from tests.helpers import ROOT, doc_text, span

DATA = ROOT / "benchmarks" / "data"


def _host_run(run: int) -> dict:
    return json.loads((DATA / f"decode-host-h200-run{run}.json").read_text())


def _decode_run(run: int) -> dict:
    return json.loads((DATA / f"decode-h200-run{run}.json").read_text())


def _calls(run: int) -> dict:
    return {x["call"]: x["host_us"] for x in _host_run(run)["host"]}


def _speed(run: int) -> dict:
    return {(x["B"], x["H"], x["Hkv"], x["L"], x["D"], x["provider"]): x for x in _host_run(run)["speed"]}


def test_window_example_is_the_decode_roofline():
    """docs/decode.md's 4K window over a 128K cache: the decode roofline on the H200 preset of the keys a step
    streams with the window (``decode_window_keys``) against the whole cache."""
    from attnlab.cost import decode_roofline, decode_window_keys

    doc = doc_text("docs/decode.md")
    B, H, Hkv, D, L, W = 8, 32, 8, 128, 128 * 1024, 4 * 1024
    keys = decode_window_keys(seq=L, queries=1, window=(W - 1, 0))
    assert keys == W  # "about 4K keys per step"
    win, full = (decode_roofline(batch=B, heads=H, kv_heads=Hkv, seq=n, head_dim=D, gpu="H200").time * 1e6
                 for n in (keys, L))
    assert (f"a 4K-window model decoding against a 128K cache reads about 4K keys per step (the decode roofline on "
            f"the H200 preset at batch {B}, H {H}, Hkv {Hkv}, D {D}: {win:.0f} µs instead of {full:.0f} µs)") in doc


def test_host_table_is_run_2():
    """docs/decode.md's host table: every row from decode-host run 2's launch floors and host rows."""
    raw = (ROOT / "docs" / "decode.md").read_text()
    assert "`benchmarks/data/decode-host-h200-run2.json`" in raw
    r = _host_run(2)
    floors, host = r["floors"], _calls(2)
    rows = {
        "an empty Triton kernel, 1 argument, `kernel[grid]`": floors["triton_empty_1_arg, kernel[grid]"],
        "an empty Triton kernel with the decode kernel's 54 arguments, `kernel[grid]`":
            floors["triton_empty_54_args, kernel[grid]"],
        "the same, its compiled launcher with int pointers": floors["triton_empty_54_args, compiled launcher, int pointers"],
        "`flash_decode_triton`, plan kept": host["flash_decode_triton (plan kept)"],
        "`attnlab.flash_decode`, plan kept (window)": host["attnlab.flash_decode, window (plan kept)"],
        "`attnlab.flash_decode`, checked and planned every call (the path before plans)":
            host["attnlab.flash_decode, checked and planned every call"],
        "SDPA, cuDNN backend": host["SDPA cudnn"],
    }
    for label, us in rows.items():
        assert f"\n| {label} | {us:.1f} |\n" in raw, label


def test_eager_and_graph_times_are_runs_2_and_6():
    """docs/decode.md's eager against CUDA-graph paragraph: run 2's call at 32K and cuDNN's, run 6's with its and
    run 2's empty launch, run 6's kept plan and growing cache, and the kept call's range over runs 14, 16 and 18
    with the merge kernel on every call and the empty launch of those runs."""
    doc = doc_text("docs/decode.md")
    shape = (1, 32, 8, 32768, 128)
    s2, s6 = _speed(2), _speed(6)
    a, c = s2[(*shape, "attnlab")], s2[(*shape, "sdpa-cudnn")]
    assert (f"at B = 1, GQA 32/8, L = 32,768: {a['eager_us']:.1f} against {a['graph_us']:.1f} µs "
            f"({a['eager_us'] / a['graph_us']:.2f}×); cuDNN {c['eager_us']:.1f} against {c['graph_us']:.1f} µs.") in doc
    empty2 = _host_run(2)["floors"]["triton_empty_1_arg, kernel[grid]"]
    empty6 = _host_run(6)["floors"]["triton_empty_1_arg, kernel[grid]"]
    a, c = s6[(*shape, "attnlab")], s6[(*shape, "sdpa-cudnn")]
    host6 = _calls(6)
    growing = [v for k, v in host6.items() if k.startswith("attnlab.flash_decode, a cache one key longer every call")]
    assert len(growing) == 2
    assert (f"(decode-host run 6, another host: an empty one-argument launch cost {empty6:.1f} µs there where this "
            f"table's cost {empty2:.1f}): {a['eager_us']:.1f} against {a['graph_us']:.1f} µs "
            f"({a['eager_us'] / a['graph_us']:.2f}×), cuDNN {c['eager_us']:.1f} against {c['graph_us']:.1f}; a kept "
            f"plan's call {host6['attnlab.flash_decode (plan kept)']:.1f} µs of host time, a cache one key longer "
            f"every call {min(growing):.0f}–{max(growing):.0f} µs.") in doc
    runs = (14, 16, 18)
    two = [_calls(r)["flash_decode_triton (plan kept), merge kernel every call"] for r in runs]
    empty = [_host_run(r)["floors"]["triton_empty_1_arg, kernel[grid]"] for r in runs]
    assert (f"against {span(two, '.1f')} with both launches, on hosts where an empty launch cost {span(empty, '.1f')} µs "
            "(decode-host runs 14, 16 and 18)") in doc


def test_timeline_gpu_work_is_runs_28_and_29():
    """The GPU work of a call at 32/8 heads over 32K keys, D = 64: the CUDA graph's period in both timeline runs."""
    graph = [x["gpu_period_us"] for run in (28, 29) for x in _host_run(run)["timeline"]
             if x["D"] == 64 and x["mode"] == "graph"]
    assert len(graph) == 2
    assert (f"decode-host runs 28 and 29): at 32/8 heads over 32K keys and D = 64 the call is {span(graph, '.1f')} µs of "
            "GPU work") in doc_text("docs/decode.md")


def test_launch_cost_of_runs_17_and_18():
    """The host time of a launch as a kept plan launches (an empty kernel with the split kernel's 55 arguments,
    compiled launcher, int pointers) in the two runs the merge paragraph quotes."""
    us = [_host_run(r)["floors"]["triton_empty_55_args, compiled launcher, int pointers"] for r in (17, 18)]
    assert (f"(decode-host runs 17 and 18, where an empty 55-argument kernel launched through its compiled launcher "
            f"with int pointers cost {span(us, '.1f')} µs of host time:") in doc_text("docs/decode.md")


def test_split_chooser_quotes_are_decode_runs_1_and_4():
    """The one-program rates of decode run 4's probes, the worst of run 4's picks over each sweep's best (each split
    count's least time in the run, ``decode_sweep_times``) and the wave model's worst at batch 16 in run 1."""
    from attnlab.cost import decode_sweep_times

    doc = doc_text("docs/decode.md")
    probes = _decode_run(4)["probes"]
    small, large = (probes[k]["per_program_bytes_per_s"] / 1e9 for k in ("program_bw", "program_bw large"))
    assert tuple(probes["program_bw"]["config"][:1] + probes["program_bw large"]["config"][:1]) == (64, 128)
    assert (f"(about {small:.0f} GB/s for the small config, {large:.0f} GB/s for the large one: one program alone, "
            "decode run 4's probes)") in doc

    def worst(run: int, batch=None) -> tuple[float, int]:
        r = _decode_run(run)
        ratios = []
        for s in r["sweeps"]:
            if batch is None or s["B"] == batch:
                times = decode_sweep_times(r, s)
                ratios.append(times[s["wave_pick"]] / min(times.values()))
        return max(ratios), len(ratios)

    w4, shapes = worst(4)
    w1, _ = worst(1, batch=16)
    assert (f"in run 4 its picks landed within {w4:.3f}× of the measured best split's time on all {shapes} benchmark "
            f"shapes (the pure wave model missed by up to {w1:.2f}× at batch 16 in run 1)") in doc


def test_constants_quoted_are_the_code():
    """Settings docs/decode.md names: the head dims and rows of the Triton path, the output slabs, the split
    buffers' budget, the length the split model is evaluated at, the merge's floats a thread, the graph counter
    sets and the two kernel configurations."""
    import torch

    from attnlab.gpu import decode, decode_config, decode_plan

    doc = doc_text("docs/decode.md")
    dims = ", ".join(str(d) for d in decode.SUPPORTED_HEAD_DIMS)
    assert f"head dims outside {{{dims}}}, Dv ≠ D or more than {decode.MAX_ROWS} rows per K/V head" in doc
    first = decode_plan.OutputSlab((1, 32, 1, 128), torch.bfloat16, torch.device("cpu")).size
    assert (f"slabs of {first} pairs doubling to {decode_plan.SLAB_MAX} or {decode_plan.SLAB_BYTES // 1024} KB, "
            "outputs too large") in doc
    assert f"`SCRATCH_BUDGET` ({decode_plan.SCRATCH_BUDGET // 2**20} MiB)" in doc
    # model_seq: values per octave (2**(bits - 1)) and the most a cache grows between two evaluations
    per_octave = len({decode_config.model_seq(s) for s in range(4097, 8193)})
    bits = per_octave.bit_length()
    assert per_octave == 2 ** (bits - 1)
    values = sorted({decode_config.model_seq(s) for s in range(65, 1 << 16)})
    growth = max((b - a) / a for a, b in zip(values, values[1:]))
    assert (f"the split model is evaluated at the length rounded to {bits} significant bits (`model_seq`), so it "
            f"runs once per ~{round(growth * 100)}% of growth") in doc
    assert f"keep the partials within {decode_plan.MERGE_FLOATS_PER_THREAD} floats a thread" in doc
    assert f"a plan keeps {decode_plan.GRAPH_COUNTER_SLOTS} sets" in doc
    assert f"`decode_plan.GRAPH_FUSED_FROM_US` ({decode_plan.GRAPH_FUSED_FROM_US:g} µs)" in doc
    large, small = decode_config.decode_configs(128)["large"], decode_config.decode_configs(128)["small"]
    from attnlab.cost.calibration import calibration_for

    per_sm = {name: calibration_for("NVIDIA H200", (c.block_n, c.block_d, c.num_warps, c.num_stages)).programs_per_sm
              for name, c in (("large", large), ("small", small))}
    words = {1: "one", 2: "two", 3: "three"}
    assert (f"\"large\" (BLOCK_N = {large.block_n}, {large.num_warps} warps, {large.num_stages} stages; "
            f"{words[per_sm['large']]} program per SM") in doc
    assert f"\"small\" (BLOCK_N = {small.block_n}, {words[per_sm['small']]} programs per SM)" in doc
