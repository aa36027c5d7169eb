"""The transformers numbers quoted in docs/hf.md and the README are those of the recorded H200 run they
name (benchmarks/data/hf-h200-run10.json): a changed file or a retyped number fails here."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import doc_text, span

ROOT = Path(__file__).resolve().parents[2]


def _run10():
    return json.loads((ROOT / "benchmarks" / "data" / "hf-h200-run10.json").read_text())


def _row(doc: str, label: str) -> list[str]:
    line = next(ln for ln in doc.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")[1:]]


def test_docs_table_is_run_10():
    r, doc = _run10(), (ROOT / "docs" / "hf.md").read_text()
    t, lay, gen = r["train"], r["layer"], r["generate"]
    a, s, ratio = _row(doc, "training step (forward, backward, AdamW), 1 × 8,192 tokens")
    assert (a, s) == (f"{t['attnlab']['step_ms']:.1f} ms", f"{t['sdpa']['step_ms']:.1f} ms")
    assert ratio == f"{t['attnlab']['step_ms'] / t['sdpa']['step_ms']:.3f}"
    a, s, _ = _row(doc, "one layer's attention, forward + backward at 8,192")
    assert (a, s) == (f"{lay['attnlab']['train_fwd_bwd_ms']:.2f} ms", f"{lay['sdpa']['train_fwd_bwd_ms']:.2f} ms")
    a, s, _ = _row(doc, "prefill, 1 × 32,768 tokens")
    assert (a, s) == (f"{gen['attnlab']['prefill_ms']:.1f} ms", f"{gen['sdpa']['prefill_ms']:.1f} ms")
    a, s, _ = _row(doc, "decode, batch 1 at 32,768, `generate` (tokens/s)")
    assert (a, s) == (f"{gen['attnlab']['decode_tokens_per_s']:.1f}", f"{gen['sdpa']['decode_tokens_per_s']:.1f}")
    a, s, _ = _row(doc, "one layer's decode step, GPU time")
    assert (a, s) == (f"{lay['attnlab']['decode_step_gpu_us']:.1f} µs", f"{lay['sdpa']['decode_step_gpu_us']:.1f} µs")
    assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]


def test_readme_quotes_run_10():
    r, readme = _run10(), (ROOT / "README.md").read_text()
    t, gen = r["train"], r["generate"]
    text = " ".join(readme.split())
    step = t["attnlab"]["step_ms"] / t["sdpa"]["step_ms"]
    prefill = gen["attnlab"]["prefill_ms"] / gen["sdpa"]["prefill_ms"]
    decode = gen["attnlab"]["decode_tokens_per_s"] / gen["sdpa"]["decode_tokens_per_s"]
    assert re.search(rf"training step at 8K tokens takes {step:.3f}× the time of transformers' SDPA \(hf run 10", text)
    assert f"32K-token prefill {prefill:.3f}×" in text
    assert f"gives {decode:.1f}× SDPA's tokens/s" in text
    # the earlier runs the sentence names beside run 10
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in range(2, 10)}
    steps = [runs[n]["train"]["attnlab"]["step_ms"] / runs[n]["train"]["sdpa"]["step_ms"] for n in range(6, 10)]
    assert f"layout; {min(steps):.3f}–{max(steps):.3f}× in runs 6–9)" in text
    tokens = [runs[n]["generate"]["attnlab"]["decode_tokens_per_s"] / runs[n]["generate"]["sdpa"]["decode_tokens_per_s"]
              for n in range(2, 7)]
    assert f"SDPA's tokens/s ({min(tokens):.2f}–{max(tokens):.2f}× in runs 2–6)" in text


def test_step_probe_refuses_what_it_cannot_do(tmp_path):
    """benchmarks/hf_step_probe.py: an existing output file stops it before any work (kept as it was);
    without a GPU it says it needs one."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("on a GPU the probe would run")
    script = ROOT / "benchmarks" / "hf_step_probe.py"

    def run(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    kept = tmp_path / "probe.json"
    kept.write_text("mine")
    r = run("--json", str(kept))
    assert r.returncode == 2 and "exists" in r.stderr and kept.read_text() == "mine"
    r = run("--phases", "pair")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_docs_later_calls_are_runs_11_to_13():
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in (11, 12, 13)}
    doc = " ".join((ROOT / "docs" / "hf.md").read_text().split())
    lay13, lay11 = runs[13]["layer"], runs[11]["layer"]
    a13, s13 = lay13["attnlab"]["decode_step_gpu_us"], lay13["sdpa"]["decode_step_gpu_us"]
    assert (f"one layer's decode step takes {a13:.1f} µs of GPU time against SDPA's {s13:.1f} ({a13 / s13:.2f}×; "
            f"run 11, the fused merge: {lay11['attnlab']['decode_step_gpu_us']:.1f} against "
            f"{lay11['sdpa']['decode_step_gpu_us']:.1f})") in doc
    gen = runs[13]["generate"]
    assert (f"{gen['attnlab']['decode_tokens_per_s']:.1f} against {gen['sdpa']['decode_tokens_per_s']:.1f} "
            "tokens/s in run 13") in doc
    steps = ", ".join(f"{r['train']['attnlab']['step_ms'] / r['train']['sdpa']['step_ms']:.3f}×" for r in runs.values())
    assert f"Training step {steps} SDPA" in doc
    for r in runs.values():
        assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]


def test_docs_backward_calls_are_runs_14_to_16():
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in (14, 15, 16)}
    doc = " ".join((ROOT / "docs" / "hf.md").read_text().split())
    step = {n: r["train"]["attnlab"]["step_ms"] / r["train"]["sdpa"]["step_ms"] for n, r in runs.items()}
    assert f"(run 14) the training step took {step[14]:.3f}× SDPA's time" in doc
    assert f"{step[15]:.3f}× (run 15) and {step[16]:.3f}× (run 16)" in doc
    lay = {n: r["layer"] for n, r in runs.items()}
    a, s_ = lay[15]["attnlab"], lay[15]["sdpa"]
    b, t = lay[16]["attnlab"], lay[16]["sdpa"]
    assert (f"One layer's forward + backward {a['train_fwd_bwd_ms']:.2f} against {s_['train_fwd_bwd_ms']:.2f} ms "
            f"(run 15), {b['train_fwd_bwd_ms']:.2f} against {t['train_fwd_bwd_ms']:.2f} (run 16); the model's layout "
            f"{a['train_fwd_bwd_model_layout_ms']:.2f} against {s_['train_fwd_bwd_model_layout_ms']:.2f} and "
            f"{b['train_fwd_bwd_model_layout_ms']:.2f} against {t['train_fwd_bwd_model_layout_ms']:.2f}.") in doc
    pre = [r["generate"]["attnlab"]["prefill_ms"] / r["generate"]["sdpa"]["prefill_ms"] for r in (runs[15], runs[16])]
    assert f"Prefill {pre[0]:.3f}× and {pre[1]:.3f}×." in doc
    for r in runs.values():
        assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]


# -- every other measured number of docs/hf.md, computed from the recorded file it names ---------------------------

DATA = ROOT / "benchmarks" / "data"


def _hf(run) -> dict:
    """hf-h200-run{run}.json, or hf-h200.json (run None) and hf-h200-earlier.json (run "earlier")."""
    name = "hf-h200" + ("" if run is None else "-earlier" if run == "earlier" else f"-run{run}") + ".json"
    return json.loads((DATA / name).read_text())


def _step(r: dict) -> float:
    return r["train"]["attnlab"]["step_ms"] / r["train"]["sdpa"]["step_ms"]


def _prefill(r: dict) -> float:
    return r["generate"]["attnlab"]["prefill_ms"] / r["generate"]["sdpa"]["prefill_ms"]


def _tokens(r: dict) -> tuple[float, float]:
    return r["generate"]["attnlab"]["decode_tokens_per_s"], r["generate"]["sdpa"]["decode_tokens_per_s"]


def _probe() -> dict:
    return json.loads((DATA / "hf-step-probe-h200-run1.json").read_text())


def test_docs_table_every_cell_and_ratio_is_run_10():
    r, raw = _hf(10), (ROOT / "docs" / "hf.md").read_text()
    doc = " ".join(raw.split())
    t, lay, gen = r["train"], r["layer"], r["generate"]
    a, s = t["attnlab"], t["sdpa"]
    rows = {
        f"training step (forward, backward, AdamW), 1 × {t['seq']:,} tokens":
            (f"{a['step_ms']:.1f} ms", f"{s['step_ms']:.1f} ms", f"{a['step_ms'] / s['step_ms']:.3f}"),
        "training peak memory":
            (f"{a['peak_gib']:.1f} GiB", f"{s['peak_gib']:.1f} GiB", f"{a['peak_gib'] / s['peak_gib']:.3f}"),
    }
    la, ls = lay["attnlab"], lay["sdpa"]
    for label, key in ((f"one layer's attention, forward + backward at {t['seq']:,}", "train_fwd_bwd_ms"),
                       ("the same, q/k/v laid out as the model's projections", "train_fwd_bwd_model_layout_ms")):
        rows[label] = (f"{la[key]:.2f} ms", f"{ls[key]:.2f} ms", f"{la[key] / ls[key]:.3f}")
    ga, gs = gen["attnlab"], gen["sdpa"]
    rows[f"prefill, 1 × {gen['prompt']:,} tokens"] = (f"{ga['prefill_ms']:.1f} ms", f"{gs['prefill_ms']:.1f} ms",
                                                      f"{ga['prefill_ms'] / gs['prefill_ms']:.3f}")
    rows[f"decode, batch 1 at {gen['prompt']:,}, `generate` (tokens/s)"] = (
        f"{ga['decode_tokens_per_s']:.1f}", f"{gs['decode_tokens_per_s']:.1f}",
        f"{ga['decode_tokens_per_s'] / gs['decode_tokens_per_s']:.3f}")
    for label, key in (("one layer's decode step, eager (host included)", "decode_step_us"),
                       ("one layer's decode step, GPU time", "decode_step_gpu_us")):
        rows[label] = (f"{la[key]:.1f} µs", f"{ls[key]:.1f} µs", f"{la[key] / ls[key]:.3f}")
    for label, cells in rows.items():
        assert tuple(_row(raw, label)) == cells, label
    # the heading and the model's shape, as the run records them
    m, env = r["model"], r["environment"]
    assert f"## Measured: a {m['parameters'] / 1e9:.2f}B Llama on an H200" in doc
    torch_v, triton_v = ".".join(env["torch"].split(".")[:2]), ".".join(env["triton"].split(".")[:2])
    assert (f"(`benchmarks/data/hf-h200-run10.json`: {env['date']}, torch {torch_v}, Triton {triton_v}, transformers "
            f"on the device image): Llama 3.2 1B's shape (hidden {m['hidden_size']}, {m['num_hidden_layers']} layers, "
            f"{m['num_attention_heads']} query and {m['num_key_value_heads']} K/V heads of dim {m['head_dim']}, "
            f"vocabulary {m['vocab_size']:,})") in doc


def test_docs_training_step_history_is_runs_6_to_16():
    doc = doc_text("docs/hf.md")
    step = {n: _step(_hf(n)) for n in (6, 7, 8, 9, 10, 15, 16)}
    assert f"prefill run 18 ({step[15]:.3f}× and {step[16]:.3f}× in runs 15 and 16, below)" in doc
    assert f"Before, it was level: {step[10]:.3f}× in run 10" in doc
    assert (f"Before, it was slower in each of four calls: {step[6]:.3f}× (run 6, `hf-h200-run6.json`), "
            f"{step[7]:.3f}× (run 7), {step[8]:.3f}× (run 8), {step[9]:.3f}× (run 9).") in doc
    assert all(step[n] > 1 for n in (6, 7, 8, 9)) and step[10] > 1 and step[15] < 1 and step[16] < 1
    spread = (max(step[n] for n in (6, 7, 8, 9)) - min(step[n] for n in (6, 7, 8, 9))) * 100
    assert (f"is missed in run 10 by {(step[10] - 1) * 100:.1f} %, less than the run-to-run spread of the earlier "
            f"runs ({spread:.1f} %)") in doc
    assert (step[10] - 1) * 100 < spread
    assert f"faster than SDPA in both calls, by about the {spread:.1f} % spread of the earlier runs or more" in doc
    assert min(1 - step[15], 1 - step[16]) * 100 >= spread


def test_docs_layout_bullet_is_step_probe_run_1():
    doc = doc_text("docs/hf.md")
    p = _probe()
    ka, ks = p["kernels"]["attnlab"], p["kernels"]["sdpa"]
    # dQ's float32 -> bfloat16 copy into the strided gradient: attnlab's step only, one call per layer
    copies = [row for n, row in ka.items() if "bfloat16_copy_kernel_cuda" in n and n not in ks]
    layers = _hf(10)["model"]["num_hidden_layers"]
    assert [row["calls"] for row in copies] == [layers]
    assert (f"general strided copy there: {copies[0]['ms']:.2f} ms per step for the {layers} layers, \"kernels\"; "
            "the kernel's own time was not recorded)") in doc
    v = p["variants"]
    t, c = v["table"]["median"], v["contiguous outputs"]["median"]
    assert (f"the step's GPU kernel time {t['attnlab_kernel_ms']:.1f} ms against SDPA's {t['sdpa_kernel_ms']:.1f} "
            f"with the layout followed, {c['attnlab_kernel_ms']:.1f} against {c['sdpa_kernel_ms']:.1f} with "
            "contiguous outputs and gradients.") in doc


def test_docs_power_cap_is_the_recorded_clocks():
    import csv
    from datetime import datetime

    doc = doc_text("docs/hf.md")
    with open(DATA / "hf-step-clocks-h200-run1.csv", newline="") as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    stamps = [datetime.strptime(r["timestamp"], "%Y/%m/%d %H:%M:%S.%f") for r in rows]
    every = statistics.median((b - a).total_seconds() * 1e3 for a, b in zip(stamps, stamps[1:]))
    mhz = [int(r["clocks.current.sm [MHz]"].split()[0]) for r in rows]
    capped = [int(r["clocks_event_reasons.active"], 16) & 0x4 != 0 for r in rows]  # 0x4: the software power cap
    reasons = {int(r["clocks_event_reasons.active"], 16) for r, cap in zip(rows, capped) if not cap}
    assert reasons == {0}
    cap_mhz = [x for x, cap in zip(mhz, capped) if cap]
    rest_mhz = [x for x, cap in zip(mhz, capped) if not cap]
    assert (f"sampled every {every:.0f} ms over the probe's first steps, `nvidia-smi` reported the software power "
            f"cap as the active clock reason in {sum(capped)} of {len(rows)} samples, at SM clocks of "
            f"{span(cap_mhz, 'd')} MHz (the rest: {span(rest_mhz, 'd')} MHz, no reason).") in doc


def test_docs_in_step_backward_times_are_step_probe_run_1():
    doc = doc_text("docs/hf.md")
    p = _probe()
    mine = [r["_attn_bwd_gluon_ws"] for r in p["order"]["attnlab"]]
    cudnn = [r["flash_bprop"] for r in p["order"]["sdpa"]]
    assert len(mine) == len(cudnn) == 2
    fast = (1, 4)  # cuDNN's first calls at its isolated speed, in its first and second profiled step
    assert (f"attnlab's backward took {span(mine[0][:7])} ms in the first 7 calls of its first step and "
            f"{span(mine[0][7:])} in the other {len(mine[0]) - 7} ({span(mine[1])} in every call of its second), "
            f"cuDNN's {span(cudnn[0][:fast[0]] + cudnn[1][:fast[1]])} in its first calls ({fast[0]} in its first "
            f"step, {fast[1]} in its second) and then {span(cudnn[0][fast[0]:] + cudnn[1][fast[1]:])}.") in doc
    # the later calls all slower than the first ones, in each step that had fast first calls
    assert min(mine[0][7:]) > max(mine[0][:7])
    assert all(min(c[n:]) > max(c[:n]) for c, n in zip(cudnn, fast))
    rep = p["replays"]
    med = {k: [c[k]["median"] for c in rep.values()] for k in ("replay", "cudnn", "fresh", "after_gemms",
                                                               "fresh_after_gemms")}
    assert (f"replayed alone, take {span(med['replay'])} ms (attnlab) and {span(med['cudnn'])} (cuDNN); random "
            f"inputs of the same shapes and strides {span(med['fresh'])}; replayed right after the layer's MLP and "
            f"projection products, attnlab's takes {span(med['after_gemms'] + med['fresh_after_gemms'])}.") in doc
    sleep = re.search(r"time\.sleep\(([\d.]+)\)", (ROOT / "benchmarks" / "hf_step_probe.py").read_text())
    idle = p["idle"]
    assert (f"With the host idle for {float(sleep.group(1)) * 1e3:.0f} ms before each backward call inside the "
            f"step, its last 7 calls take {span(idle[-7:])}.") in doc
    faster = (1 - statistics.median(med["cudnn"]) / statistics.median(med["replay"])) * 100
    assert f"cuDNN's backward as transformers calls it is {faster:.0f} % faster" in doc


def test_docs_ablation_and_ncu_numbers_are_their_files():
    doc = doc_text("docs/hf.md")
    run13 = {r["variant"]: r["ms"] for r in json.loads((DATA / "bwd-gluon-ablation-h200-run13.json").read_text())["rows"]}
    # variant 8 of runs 13-16 adds each dQ tile at once: the backward that ships (RESULTS.md)
    assert (f"`bwd_gluon_ablation.py --sdpa`: {run13['sdpa backward']:.2f} against "
            f"{run13['gluon 8: dQ added at once']:.2f} ms, `bwd-gluon-ablation-h200-run13.json`)") in doc
    ncu = (DATA / "ncu-bwd-gluon-h200-hf-shape.txt").read_text()

    def metric(name):
        return float(re.search(rf"^\s*{re.escape(name)}\s+\S+\s+([\d.,]+)\s*$", ncu, re.M).group(1).replace(",", ""))

    assert (f"the kernel ran at {metric('SM Frequency'):.2f} GHz even alone, with {metric('Issue Slots Busy'):.0f} % "
            f"of issue slots busy and the tensor pipe {metric('SM Busy'):.0f} % (`ncu-bwd-gluon-h200-hf-shape.txt`)") in doc
    assert "dominated by its Tensor (FP) sub-pipeline" in ncu  # the busiest pipe is the tensor cores'
    grid = re.search(r"^\s*Grid Size\s+([\d,]+)\s*$", ncu, re.M).group(1)
    assert f"at this shape (GQA 32/8, {grid} programs) leaves the longest causal walks for last" in doc
    rows = [r for r in json.loads((DATA / "bwd-gluon-ablation-h200-run5.json").read_text())["rows"]
            if (r["H"], r["Hkv"], r["D"], r["causal"], r["N"]) == (32, 8, 64, True, 8192)]
    ms = {r["variant"]: r["ms"] for r in rows}
    keys_first, heads_first, sdpa = ms["table's, key blocks first"], ms["table's, heads first"], ms["sdpa backward"]
    assert (f"numbering head first here took the backward alone from {keys_first:.2f} to {heads_first:.2f} ms "
            f"against SDPA's {sdpa:.2f}") in doc
    waves = re.search(r"^HEADS_FIRST_WAVES = (\d+)", (ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py")
                      .read_text(), re.M)
    assert f"the library now does so below {waves.group(1)} programs per SM" in doc


def test_docs_run_8_profile_and_layer_rows():
    doc = doc_text("docs/hf.md")
    r8, r10, r6 = _hf(8), _hf(10), _hf(6)
    pa, ps = r8["train"]["profile"]["attnlab"], r8["train"]["profile"]["sdpa"]
    assert (f"GPU kernel time {pa['gpu_kernel_ms']:.1f} ms in attnlab's step and {ps['gpu_kernel_ms']:.1f} ms in "
            f"SDPA's, walls {pa['wall_ms']:.1f} and {ps['wall_ms']:.1f}: the difference was kernels") in doc

    def pair(r, key):
        return f"{r['layer']['attnlab'][key]:.2f} against {r['layer']['sdpa'][key]:.2f}"

    c, m = "train_fwd_bwd_ms", "train_fwd_bwd_model_layout_ms"
    assert (f"The layer rows: forward + backward {pair(r10, c)} ms with contiguous inputs, {pair(r10, m)} with the "
            f"model's layout (run 10; run 8: {pair(r8, c)} and {pair(r8, m)}).") in doc
    a, s = _tokens(r10)
    assert (f"Prefill at 32K is {(1 - _prefill(r10)) * 100:.1f} % faster than SDPA's, decoding {a / s:.1f}×. The "
            f"decode step's GPU time went from {r6['layer']['attnlab']['decode_step_gpu_us']:.1f} µs (run 6) to "
            f"{r10['layer']['attnlab']['decode_step_gpu_us']:.1f} (run 10)") in doc


def test_docs_later_calls_host_and_prefill_are_runs_11_to_13():
    doc = doc_text("docs/hf.md")
    runs = [_hf(n) for n in (11, 12, 13)]
    sdpa = [_tokens(r)[1] for r in runs]
    assert (f"(SDPA's decode {span(sdpa, '.1f')} tokens/s against {_tokens(_hf(10))[1]:.1f}), so the tokens/s are "
            "not comparable") in doc
    assert max(sdpa) < _tokens(_hf(10))[1]
    assert f"SDPA; prefill {span([_prefill(r) for r in runs], '.3f')}×." in doc


def test_docs_earlier_calls_are_runs_2_to_6():
    doc = doc_text("docs/hf.md")
    first, r2 = _hf(None), _hf(2)
    assert (f"**{first['layer']['attnlab']['decode_step_gpu_us']:.1f} µs** of GPU time through `flash_decode`, against "
            f"**{first['layer']['flash_attention_one_query_gpu_us']:.1f} µs** through `flash_attention` "
            f"(`benchmarks/data/hf-h200.json`, `layer`; {r2['layer']['flash_attention_one_query_gpu_us']:.1f} µs in "
            "`hf-h200-run2.json`)") in doc
    heads = first["model"]["num_attention_heads"]
    sms = re.search(r"# SMs\s+SM\s+(\d+)", (DATA / "ncu-bwd-gluon-h200-hf-shape.txt").read_text()).group(1)
    assert f"{heads} programs for a 1B Llama at batch 1, on a GPU of {sms} SMs" in doc

    def head(r):  # training step, layer and prefill, as runs 2-5 are quoted
        t, lay = r["train"], r["layer"]
        return (f"training step {t['attnlab']['step_ms']:.1f} against {t['sdpa']['step_ms']:.1f} ms ({_step(r):.3f}×), "
                f"{{layer}} {lay['attnlab']['train_fwd_bwd_ms']:.2f} against {lay['sdpa']['train_fwd_bwd_ms']:.2f} ms, "
                f"prefill {{at}}{_prefill(r):.3f}×, decode {_tokens(r)[0]:.1f} against {_tokens(r)[1]:.1f} tokens/s")

    assert (head(r2).format(layer="layer forward + backward", at="") + "; the GPU time of one decode step "
            f"{r2['layer']['attnlab']['decode_step_gpu_us']:.1f} µs through `flash_decode` against "
            f"{r2['layer']['flash_attention_one_query_gpu_us']:.1f} through `flash_attention` (below).") in doc
    one = "one layer's attention forward + backward"
    r3, r4, r5 = _hf(3), _hf(4), _hf(5)
    for r, at in ((r3, ""), (r4, "at 32K "), (r5, "at 32K ")):
        a, s = _tokens(r)
        assert head(r).format(layer=one, at=at) + f" ({a / s:.2f}×)" in doc
    for r in (r3, r4):
        a, s = r["layer"]["attnlab"]["decode_step_us"], r["layer"]["sdpa"]["decode_step_us"]
        assert f"the eager layer decode step {a:.1f} against {s:.1f} µs" in doc
    assert f"the training step's move from {_step(r2):.3f}× is about at the noise" in doc
    assert f"took the step from {_step(r5):.3f}× to {_step(_hf(6)):.3f}×." in doc
    # the Gluon forward at head dim 64 in the forward sweep: the 2-stage 128x128 build against the best Triton one
    sweep = json.loads((DATA / "prefill-sweep-h200-run5.json").read_text())["rows"]
    cells: dict = {}
    for row in sweep:
        if row["kind"] == "fwd" and row["D"] == 64:
            cells.setdefault((row["causal"], row["N"]), {})[row["config"]] = row["tflops"]
    gains = [(c["128x128w4s2tma+ws+gl"] / max(t for k, t in c.items() if "+gl" not in k) - 1) * 100
             for c in cells.values()]
    assert sorted({n for _, n in cells}) == [4096, 16384] and len(gains) == 4
    assert (f"(the 2-stage 128×128 Gluon build +{span(gains, '.1f')} % over the best Triton one at 4K and 16K, "
            "`prefill-sweep-h200-run5.json`)") in doc


def test_docs_decoding_at_batch_1_is_the_recorded_runs():
    doc = doc_text("docs/hf.md")
    gpu = [_hf(n)["layer"][impl]["decode_step_gpu_us"] for n in range(2, 18) for impl in ("attnlab", "sdpa")]
    assert (f"adds its own host time to the GPU's {math.floor(min(gpu))}–{math.ceil(max(gpu))} µs (hf runs 2–17, "
            "either implementation)") in doc
    first, earlier, r2, r6 = _hf(None), _hf("earlier"), _hf(2), _hf(6)

    def eager(r):
        return r["layer"]["attnlab"]["decode_step_us"] / r["layer"]["sdpa"]["decode_step_us"]

    assert eager(first) > 1
    assert f"went from slower than SDPA (`hf-h200.json`) to {eager(r2):.2f}× its time (run 2)." in doc
    assert (f"SDPA's measured {_tokens(first)[1]:.1f} and {_tokens(earlier)[1]:.1f} in two earlier runs (attnlab "
            f"before plans: {_tokens(first)[0]:.1f} and {_tokens(earlier)[0]:.1f}; `benchmarks/data/hf-h200.json`, "
            f"`hf-h200-earlier.json`), {_tokens(r2)[1]:.1f} in run 2 and {_tokens(r6)[1]:.1f} in run 6.") in doc
    m = r6["model"]
    mib = r6["generate"]["prompt"] * m["num_key_value_heads"] * m["head_dim"] * 2 * 2 / 2**20  # K and V, bfloat16
    assert (f"cuDNN's decode kernel is faster ({r6['layer']['sdpa']['decode_step_gpu_us']:.1f} against "
            f"{r6['layer']['attnlab']['decode_step_gpu_us']:.1f} µs for the {mib:.0f} MiB of a layer's K/V, run 6).") in doc


def test_docs_correctness_is_run_6():
    doc = doc_text("docs/hf.md")
    c = _hf(6)["checks"]
    tr, pad, gen = c["train"], c["padded"], c["generate"]
    assert tr["parameters"] == pad["parameters"] and tr["ok"] and pad["ok"] and gen["ok"]
    assert tr["rows"] == [_hf(6)["train"]["seq"]]
    rows = ", ".join(f"{n:,}" for n in pad["rows"][:-1]) + f" and {pad['rows'][-1]:,}"
    assert (f"every one of the {tr['parameters']} gradients of the 8K step and of a left-padded batch (rows of {rows} "
            f"tokens, through `flash_attention_varlen`) within the criterion (worst attnlab/SDPA error ratio "
            f"{tr['worst_error_ratio']:.2f} and {pad['worst_error_ratio']:.2f})") in doc
    mant, exp = f"{gen['top2_gap_at_parting']:.1e}".split("e")
    assert (f"greedy generation agreed with SDPA for {gen['same_tokens']} tokens and parted where the oracle's two "
            f"best logits were {mant}e{int(exp)} apart, below either implementation's bfloat16 error "
            f"({gen['logits_error_attnlab']:.3f} and {gen['logits_error_sdpa']:.3f})") in doc
    assert gen["top2_gap_at_parting"] < min(gen["logits_error_attnlab"], gen["logits_error_sdpa"])


def test_docs_settings_quoted_from_the_code():
    doc = doc_text("docs/hf.md")
    helpers = (ROOT / "tests" / "helpers.py").read_text()
    factor = re.search(r"return err <= (\d+) \* err_ref", helpers).group(1)
    assert f"each within {factor}× the float32 SDPA/eager error (flash-attention's criterion)" in doc
    src = (ROOT / "src" / "attnlab" / "integrations" / "hf.py").read_text()
    most = re.search(r"^DECODE_MAX_QUERIES = (\d+)", src, re.M).group(1)
    assert f"| decode | no gradient, a cache (Nk > Nq), Nq ≤ {most}, no padding |" in doc
