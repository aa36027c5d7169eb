"""Helpers shared by the attention tests: inputs, references and error measures (import as
``from tests.helpers import ...``; pytest puts the repository root on the path)."""

import importlib.util
import math
import re
from pathlib import Path

import torch

from attnlab.reference import attention_ref

F64 = torch.float64

# (B, H, Hkv, Nq, Nk, D): N = 1, 97, 300, 1025; D = 16, 59, 64; Nq != Nk both ways; GQA and MQA
SHAPES = [
    (1, 1, 1, 1, 1, 16),
    (2, 2, 2, 97, 97, 59),
    (1, 4, 2, 300, 300, 64),
    (2, 3, 1, 97, 300, 16),
    (1, 2, 2, 300, 97, 59),  # Nq > Nk: the first 203 causal rows see no key
    (1, 1, 1, 1025, 1025, 64),
    (1, 2, 1, 1, 1025, 59),
]
BLOCKS = [(64, 64), (48, 40)]
ROOT = Path(__file__).resolve().parents[1]


def fwd_persistent_best(run: int) -> dict:
    """benchmarks/data/fwd-persistent-h200-run{run}.json's best time (ms) of each (D, causal, N, build) over its
    rounds."""
    import json

    best = {}
    for r in json.loads((ROOT / "benchmarks" / "data" / f"fwd-persistent-h200-run{run}.json").read_text())["rows"]:
        key = (r["D"], r["causal"], r["N"], r["build"])
        best[key] = min(best.get(key, float("inf")), r["ms"])
    return best


def load_script(relative: str):
    """A script of the repository (``benchmarks/variants.py``, say) loaded as a module by its path."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces: a quote in a doc may wrap anywhere."""
    return " ".join(text.split())


def doc_text(relative: str) -> str:
    """A file of the repository (e.g. "docs/gpu.md"), read and flattened (``flat``)."""
    return flat((ROOT / relative).read_text(encoding="utf-8"))


def span(values, fmt: str = ".2f") -> str:
    """``lo–hi`` of ``values``, each formatted by ``fmt`` (a format spec such as ".2f"), as the docs write a range;
    one number where both ends print alike."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}–{hi}"


def notes_section(name: str, heading: str) -> str:
    """The section of ``benchmarks/<name>`` (a NOTES file) from the line starting with ``heading`` to the next
    "## " heading, its whitespace collapsed (quotes checked against it may wrap anywhere)."""
    text = (ROOT / "benchmarks" / name).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return " ".join(text[start:end if end > 0 else None].split())


def results_section(title: str) -> str:
    """The section of benchmarks/RESULTS.md whose heading starts with ``title``, up to the next "### " heading."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    start = text.index(title)
    end = text.find("\n### ", start + 1)
    return text[start:end if end > 0 else None]


def arm_medians(rows, shape_of=lambda r: (r["B"], r["H"], r["Hkv"], r["L"], r["D"])) -> dict:
    """shape -> {arm: median CUDA-graph µs} of an A/B's recorded rows (those with ``graph_us``); ``shape_of`` keys a
    row by its shape."""
    import statistics

    out: dict = {}
    for r in rows:
        if "graph_us" in r:
            out.setdefault(shape_of(r), {}).setdefault(r["arm"], []).append(r["graph_us"])
    return {k: {a: statistics.median(v) for a, v in arms.items()} for k, arms in out.items()}


def pytest_summary(path) -> str:
    """The outcome counts of a recorded pytest log's summary line ("105 passed, 1 skipped"), its warnings and its
    duration left out."""
    last = Path(path).read_text().strip().splitlines()[-1].strip("= ")
    return re.match(r"(.*?)(?:, \d+ warnings?)? in [\d.]+s", last).group(1)


def eager_graph_table(speed, before: int, run: int, twin: int, shapes) -> list[str]:
    """The lines of a decode-host section's eager-against-graph table: for each shape (B, H, Hkv, L, D) run ``run``'s
    graph µs, ``before``'s, ``run``'s and its ``--python-path`` twin's eager/graph, ``run``'s host µs a call in the
    eager loop and its graph against cuDNN's; ``speed(n, shape, provider="attnlab")`` gives a run's speed row."""
    lines = [f"| B | H/Hkv | L | D | graph µs | run {before} eager/graph (before v40) | run {run} eager/graph (v40) | "
             f"run {run} host µs/call in the eager loop | run {twin} eager/graph (`--python-path`) | run {run} graph "
             "against cuDNN's |", "|---|---|---|---|---|---|---|---|---|---|"]
    for shape in shapes:
        B, H, Hkv, L, D = shape
        a = speed(run, shape)
        lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {a['graph_us']:.1f} | "
                     f"{speed(before, shape)['eager_over_graph']:.3f} | {a['eager_over_graph']:.3f} | "
                     f"{a['loop_host_us']:.1f} | {speed(twin, shape)['eager_over_graph']:.3f} | "
                     f"{speed(run, shape, 'sdpa-cudnn')['graph_us'] / a['graph_us']:.3f}× |")
    return lines


def md_table(text: str, head: str) -> str:
    """The markdown table of ``text`` whose first line starts with ``head``: that line and the table lines after it."""
    lines = text.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(head))
    j = i
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return "\n".join(lines[i:j])


def shape_id(s) -> str:
    return "B{}H{}Hkv{}Nq{}Nk{}D{}".format(*s)


def qkv(B, H, Hkv, Nq, Nk, D, Dv=None, dtype=F64, scale=1.0, generator=None):
    """Random q (B, H, Nq, D), k (B, Hkv, Nk, D), v (B, Hkv, Nk, Dv) from the test's seeded generator."""
    Dv = D if Dv is None else Dv
    q = torch.randn(B, H, Nq, D, dtype=dtype, generator=generator) * scale
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, generator=generator)
    v = torch.randn(B, Hkv, Nk, Dv, dtype=dtype, generator=generator)
    return q, k, v


def abs_err(a, b) -> float:
    """Largest absolute difference, in float64 (0 for empty tensors)."""
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def rounding_floor(want, dtype, ulps: int = 4) -> float:
    """A few units in the last place of the output's magnitude in ``dtype``: the smallest error a
    kernel that rounds differently from the same-dtype reference can be held to."""
    return ulps * torch.finfo(dtype).eps * max(1.0, want.abs().max().item() if want.numel() else 1.0)


def within_criterion(err: float, err_ref: float, want, dtype, ulps: int = 4) -> bool:
    """flash-attention's criterion — at most twice the same-dtype reference's error — with a floor
    of a few roundings of the output's magnitude (when the reference happens to be nearly exact)."""
    return err <= 2 * err_ref + rounding_floor(want, dtype, ulps)


def assert_lse(got, want, atol):
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "fully masked rows must be -inf, and only they"
    fin = torch.isfinite(want)
    assert (got[~fin] == -math.inf).all()
    torch.testing.assert_close(got[fin], want[fin], rtol=0, atol=atol)


def check_forward(q, k, v, out, lse, *, causal, scale, window=None, alibi_slopes=None):
    """A forward's ``out`` (B, H, Nq, D) and ``lse`` (B, H, Nq) against ``attention_ref`` in float64: out within
    flash-attention's criterion (and no NaN: outputs are poisoned before a kernel runs), lse to 1e-3 relative
    on the rows that see a key, and the rows that see none out 0, lse −inf."""
    kw = dict(causal=causal, scale=scale, window=window, alibi_slopes=alibi_slopes)
    o64, l64 = attention_ref(*(t.double() for t in (q, k, v)), **kw)
    o_same, _ = attention_ref(q, k, v, **kw)
    e, e_ref = abs_err(out, o64), abs_err(o_same, o64)
    assert not torch.isnan(out).any(), "an element of out was not written"
    assert within_criterion(e, e_ref, o64, out.dtype), (e, e_ref)
    _check_lse_and_empty_rows(out, lse, l64)


def check_packed_forward(q, k, v, out, lse, cu_seqlens, *, causal, scale, window=None):
    """A packed batch's ``out`` (total_q, H, D) and ``lse`` (H, total_q) against the per-sequence oracle
    ``attention_ref_varlen`` in float64, as ``check_forward`` holds a dense one."""
    from attnlab.reference import attention_ref_varlen

    kw = dict(causal=causal, scale=scale, window=window)
    o64, l64 = attention_ref_varlen(*(t.double() for t in (q, k, v)), *cu_seqlens, **kw)
    o_same, _ = attention_ref_varlen(q, k, v, *cu_seqlens, **kw)
    e, e_ref = abs_err(out, o64), abs_err(o_same, o64)
    assert not torch.isnan(out).any(), "an element of out was not written"
    assert within_criterion(e, e_ref, o64, out.dtype), (e, e_ref)
    _check_lse_and_empty_rows(out.transpose(0, 1), lse, l64)


def _check_lse_and_empty_rows(out, lse, l64):
    """``out`` with the head axis before the row axis, as ``lse`` has it."""
    seen = torch.isfinite(l64)
    if seen.any():
        assert abs_err(lse[seen], l64[seen]) <= 1e-3 * max(1.0, l64[seen].abs().max().item())
    assert torch.equal(torch.isinf(lse), ~seen) and (lse[~seen] < 0).all(), "empty rows: lse = -inf"
    assert (out[~seen] == 0).all(), "empty rows: out = 0"


def packed_sequences(cu_seqlens):
    """(index, q0, q1, k0, k1) of each sequence of a packed batch that has queries and keys."""
    cq, ck = (c.tolist() for c in cu_seqlens)
    for s, (q0, q1, k0, k1) in enumerate(zip(cq[:-1], cq[1:], ck[:-1], ck[1:])):
        if q1 > q0 and k1 > k0:
            yield s, q0, q1, k0, k1


def check_packed_gluon_tiles(lens_q, lens_k, H, Hkv, window, dtype, tiles: dict, *, device, nan_tail=False,
                             **build):
    """A packed batch at D = 64 on the Gluon forward with ``tiles`` (``gluon_forward``'s tile arguments) and ``build``
    (its schedule: persistent, dynamic): within the criterion against the per-sequence oracle, rows no sequence owns
    left as they were, and each sequence equal to the bit to the dense kernel of the same tiles on that sequence
    alone. ``nan_tail``: the values past the last sequence are NaN, which must never reach an output."""
    from attnlab.gpu import prefill_gluon as G

    gen = torch.Generator(device=device).manual_seed(sum(lens_q) + H)
    q = torch.randn(sum(lens_q) + 70, H, 64, dtype=dtype, device=device, generator=gen)
    k, v = (torch.randn(sum(lens_k) + 30, Hkv, 64, dtype=dtype, device=device, generator=gen) for _ in range(2))
    if nan_tail:
        v[sum(lens_k):] = float("nan")
    cu = [torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
          for lens in (lens_q, lens_k)]
    left, right = window
    scale = 64 ** -0.5
    out, lse = torch.full_like(q, float("nan")), torch.full((H, q.shape[0]), float("nan"), device=device)
    G.gluon_forward(q, k, v, out, lse, causal_off=right if right >= 0 else None, win_off=-left if left >= 0 else None,
                    scale=scale, cu_seqlens=cu, max_seqlen_q=max(lens_q), **build, **tiles)
    n = sum(lens_q)
    assert out[n:].isnan().all() and lse[:, n:].isnan().all(), "rows no sequence owns were written"
    out, lse = out[:n], lse[:, :n]
    check_packed_forward(q[:n], k[:sum(lens_k)], v[:sum(lens_k)], out, lse, cu, causal=right == 0, scale=scale,
                         window=window if left >= 0 else None)
    for s, q0, q1, k0, k1 in packed_sequences(cu):
        qd, kd, vd = (t.transpose(0, 1).unsqueeze(0).contiguous() for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        od, ld = torch.empty_like(qd), torch.empty(1, H, q1 - q0, device=device)
        off = (k1 - k0) - (q1 - q0)
        G.gluon_forward(qd, kd, vd, od, ld, causal_off=off + right if right >= 0 else None,
                        win_off=off - left if left >= 0 else None, scale=scale, **tiles)
        assert torch.equal(od[0].transpose(0, 1), out[q0:q1]) and torch.equal(ld[0], lse[:, q0:q1]), s


def autograd_ref(q, k, v, dout, causal, dlse=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, l = attention_ref(q, k, v, causal=causal)
    loss = (o * dout).sum()
    if dlse is not None:
        loss = loss + (torch.where(torch.isfinite(l), l, 0) * dlse).sum()
    loss.backward()
    return q.grad, k.grad, v.grad


def decode_ref(q, k_full, v_full, seqlens, causal):
    """Sequence by sequence through attention_ref on the first seqlens[b] keys (bottom-right causal)."""
    outs, lses = [], []
    for b, n in enumerate(seqlens):
        if n == 0:  # an empty cache: every row sees no key
            outs.append(torch.zeros(1, q.shape[1], q.shape[2], v_full.shape[-1], dtype=q.dtype))
            lses.append(torch.full((1, q.shape[1], q.shape[2]), -math.inf, dtype=q.dtype))
            continue
        o, l = attention_ref(q[b:b + 1], k_full[b:b + 1, :, :n], v_full[b:b + 1, :, :n], causal=causal)
        outs.append(o)
        lses.append(l)
    return torch.cat(outs), torch.cat(lses)


def block_table(B, max_pages, extra_blocks):
    """Each sequence gets max_pages distinct pages, drawn at random from B·max_pages + extra blocks."""
    num_blocks = B * max_pages + extra_blocks
    return torch.randperm(num_blocks)[: B * max_pages].view(B, max_pages).to(torch.int32)


def scatter(k_full, v_full, bt, page):
    """Write contiguous caches (B, Hkv, L, D) into pages (num_blocks, page, Hkv, D) along block_table;
    positions past L in the last page hold zeros, unused blocks hold random garbage."""
    B, Hkv, L, _ = k_full.shape
    num_blocks = int(bt.max()) + 4
    out = []
    for x in (k_full, v_full):
        pages = torch.randn(num_blocks, page, Hkv, x.shape[-1], dtype=x.dtype)
        padded = torch.zeros(B, Hkv, bt.shape[1] * page, x.shape[-1], dtype=x.dtype)
        padded[:, :, :L] = x
        pages[bt.long()] = padded.view(B, Hkv, bt.shape[1], page, -1).permute(0, 2, 3, 1, 4)
        out.append(pages)
    return out


def fresh_json(code: str, *args: str, timeout: int = 900):
    """The JSON that ``code`` prints last, run by a fresh interpreter in the repository's root without
    TRITON_INTERPRET (the interpreter a CPU test process runs under replaces the jit functions Gluon calls), with
    ``args`` as its ``sys.argv[1:]``; fails the test with the end of its stderr when it fails."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def sm90_reports(module: str, cases: list[dict]) -> list[dict]:
    """``attnlab.gpu.<module>.sm90_report`` of each case (dicts of its keyword arguments, with ``D`` and a
    ``dtype`` name), built in a fresh interpreter (``fresh_json``)."""
    import json

    code = (f"import json, sys, torch; from attnlab.gpu.{module} import sm90_report; "
            "cases = json.loads(sys.argv[1]); "
            "print(json.dumps([sm90_report(c.pop('D'), dtype=getattr(torch, c.pop('dtype')), **c) for c in cases]))")
    return fresh_json(code, json.dumps(cases), timeout=600)


# awkward shapes for the Gluon kernels' GPU tests (forward and backward)
GLUON_CASES = [
    # B, H, Hkv, Nq, Nk, D, causal, dtype
    (1, 2, 2, 1, 1, 64, False, torch.bfloat16),  # one row, one key
    (2, 4, 4, 129, 129, 128, False, torch.float16),  # ragged last blocks
    (2, 4, 4, 1000, 1000, 64, True, torch.bfloat16),  # causal, ragged
    (1, 8, 2, 257, 1030, 128, True, torch.bfloat16),  # GQA, Nq < Nk (bottom-right diagonal)
    (1, 6, 1, 700, 300, 64, True, torch.float16),  # MQA, Nq > Nk: empty rows
    (3, 5, 5, 2048, 2048, 128, True, torch.bfloat16),  # odd head count, full blocks
    (1, 4, 2, 3000, 4099, 128, False, torch.bfloat16),
]

GLUON_WINDOW_CASES = [
    # B, H, Hkv, Nq, Nk, D, (left, right)
    (1, 4, 2, 1000, 1000, 128, (255, 0)),  # causal sliding window, GQA, ragged
    (2, 4, 4, 700, 1300, 64, (100, 0)),  # Nq < Nk (bottom-right), a window narrower than a block
    (1, 2, 2, 513, 513, 128, (64, -1)),  # a left edge only (no causal right edge)
    (1, 3, 1, 900, 400, 64, (300, 0)),  # Nq > Nk: empty rows, MQA
    (1, 2, 2, 4096, 4096, 128, (1023, 0)),  # full blocks inside the window, skipped blocks left of it
]


def graph_after_eager(call, q, check_plan=None):
    """``call()`` (a decode call reading the query ``q``) warmed up three times on a side stream, as torch's docs
    capture, ``check_plan`` (if given) run on the one kept decode plan, one call captured in a CUDA graph on that stream,
    ``q`` given new values in place and the graph replayed: returns the replay's (out, lse) and an eager call's on the
    new query (a GPU only)."""
    from attnlab.gpu import decode_plan

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(s)
    if check_plan is not None:
        (plan,) = decode_plan._PLANS.values()
        check_plan(plan)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        got = call()
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        want = call()
    torch.cuda.synchronize()
    return got, want


def prefill_against_cudnn(card, name: str, rows: list[dict]):
    """A recorded prefill run's attnlab rows against cuDNN, by ``scorecard.prefill_pairs`` (``card``, the loaded
    script): (the forward rows' ratios, the forward+backward rows', the fastest forward row's pair)."""
    pairs = card.prefill_pairs({name: rows})
    fwd = [x["ratio"] for x in pairs if x["pass_"] == "fwd"]
    both = [x["ratio"] for x in pairs if x["pass_"] == "fwd_bwd"]
    best = max((x for x in pairs if x["pass_"] == "fwd"), key=lambda x: x["tflops"])
    return fwd, both, best
