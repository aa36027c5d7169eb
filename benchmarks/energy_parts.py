"""Where a long D = 128 forward's energy goes: the forward, builds of it with parts of its step taken out, a cuBLAS
GEMM and cuDNN's attention, each run back to back for seconds at a time, its power read while it runs.

At the GPU's power limit a kernel's speed is the limit over the energy it spends a FLOP (TFLOP/s = W / pJ a FLOP), so
the FLOP/s an attention kernel can reach there is set by what its step costs in energy beside the tensor cores'
products. This script measures that directly. Each arm runs for ``--warm`` seconds to reach the limit, then for
``--seconds`` more between two CUDA events while a thread reads the GPU's power (NVML's instantaneous read where it
answers, as ``prefill.py --clocks``) and SM clock every 10 ms: the arm's time a call, TFLOP/s, mean power, clock, and
energy a FLOP (mean power / TFLOP/s). Calls follow one another with no gap and no cache flush (the load of a
training step, not ``do_bench``'s bursts, whose short times read above the limit: prefill run 48). Rounds take the
arms in an order rotating by one; the table gives each arm's medians.

Arms (``--arms``; every attention arm counts the forward's 4·B·H·N²·D FLOPs, the probes too, which do the same
products):

* ``gemm``: ``torch.matmul`` of two bfloat16 ``--gemm-size``² matrices (2·n³ FLOPs): the tensor cores' work with
  nothing beside it, cuBLAS's floor on this GPU at this power limit;
* ``attnlab``: ``attnlab.flash_attention`` as shipped;
* ``qregs`` and ``noqregs``: the library's Gluon forward with ``prefill_gluon.Q_REGS`` at 128 (Q·Kᵀ's A operand from
  registers, read from shared memory once a tile) or 0 (from shared memory): the same bits as ``attnlab``, checked
  before they are timed;
* ``poly1`` and ``poly2``: the library's forward with 1 or 2 of every 8 exponentials of an unmasked block computed by
  a polynomial on the FMA pipe (``prefill_gluon.EXP_POLY``): a different exponential, within 8.6e-5 relative;
* ``noexp`` (a probe, not attention): the forward with each score's exponential taken out (P̃ is the scaled, shifted
  score itself; the FFMA, row maximum, sums and everything else kept): its output is not attention and not checked;
* ``nosoftmax`` (a probe, not attention): the forward with the whole softmax step taken out (P̃ = S, no row maximum,
  no exponential, no sums; alpha 1): the two products, P̃'s conversion to 16 bits, and the step's loads and waits;
* ``sdpa-cudnn``: ``scaled_dot_product_attention`` on PyTorch's cuDNN backend.

The probes are copies of ``prefill_gluon`` made at run time (``probe_source``: each of their text changes must match
exactly once, or the probe is refused), run through the library's own dispatch as ``fwd_switches.py`` runs its
builds. Energy a FLOP depends on the clock and voltage the GPU picks under the limit, so a probe's saving is the
part's energy at that arm's operating point, not a fixed cost of the part.

    python benchmarks/energy_parts.py --json energy-parts.json --md energy-parts.md   # the default arms
    python benchmarks/energy_parts.py --arms gemm attnlab sdpa-cudnn --seconds 3 --rounds 3
    python benchmarks/energy_parts.py --report energy-parts.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARMS = ("gemm", "attnlab", "qregs", "noqregs", "poly1", "poly2", "noexp", "nosoftmax", "sdpa-cudnn")
DEFAULT_ARMS = ("gemm", "attnlab", "noqregs", "poly1", "noexp", "nosoftmax", "sdpa-cudnn")
PROBES = ("noexp", "nosoftmax")  # arms that are not attention: their outputs are not checked
# arms that are a switch of the library's (fwd_switches.switched_source): the same bits as the library's build
SWITCHES = {"qregs": {"Q_REGS": 128}, "noqregs": {"Q_REGS": 0}}
SPLITS = {"poly1": 1, "poly2": 2}  # arms computing n of every 8 exponentials by a polynomial (prefill_gluon.EXP_POLY)
_SOFTMAX_SIG = ("(s, m_i, l_i, start_n, offs_m, offs_n, Nk, causal_off, win_off, qk_scale, masked,\n"
                "                 CAUSAL: gl.constexpr, EXP_POLY: gl.constexpr = 0, TAU: gl.constexpr = 0.0):\n")
EDITS = {  # probe: [(text of prefill_gluon, what replaces it)], each text found exactly once
    "noexp": [("            p = _exp2_mixed(s * qk_scale - m_use[:, None], EXP_POLY)\n",
               "            p = s * qk_scale - m_use[:, None]  # (probe: no exponential)\n")],
    "nosoftmax": [("    def _softmax" + _SOFTMAX_SIG,
                   "    def _softmax" + _SOFTMAX_SIG
                   + "        return s, gl.zeros_like(m_i) + 1.0, m_i, l_i  # (probe: P̃ = S, alpha 1)\n\n"
                   "    @gluon.jit\n"
                   "    def _softmax_exact" + _SOFTMAX_SIG)],
}
NOTES = {
    "gemm": "bfloat16 GEMM (cuBLAS): the tensor cores alone",
    "attnlab": "the library's forward",
    "qregs": "Q·Kᵀ's A from registers (same bits)",
    "noqregs": "Q·Kᵀ's A from shared memory (same bits)",
    "poly1": "1 of 8 exponentials by a polynomial",
    "poly2": "2 of 8 exponentials by a polynomial",
    "noexp": "probe: no exponentials",
    "nosoftmax": "probe: no softmax step (P̃ = S)",
    "sdpa-cudnn": "cuDNN attention (PyTorch SDPA)",
}
_MODULES: dict = {}


def probe_source(src: str, edits) -> str:
    """``src`` with each (old, new) of ``edits`` applied; ValueError where ``old`` is not found exactly once (the
    library's source moved on and the probe would measure something else)."""
    for old, new in edits:
        n = src.count(old)
        if n != 1:
            raise ValueError(f"the probe's text is found {n} times in prefill_gluon, not once: {old.strip()[:60]!r}")
        src = src.replace(old, new)
    return src


def arm_module(arm: str):
    """The module whose Gluon forward kernels run for ``arm`` (``qregs`` and the probes): a copy of ``prefill_gluon``
    with the arm's switches and text changes, loaded under ``attnlab.gpu`` (its relative imports the library's)."""
    import fwd_switches

    from attnlab.gpu import prefill_gluon as pg

    if arm in _MODULES:
        return _MODULES[arm]
    src = fwd_switches.switched_source(Path(pg.__file__).read_text(), SWITCHES.get(arm, {}))
    mod = fwd_switches.source_module(f"_prefill_gluon_{arm}", probe_source(src, EDITS.get(arm, [])))
    _MODULES[arm] = mod
    return mod


def use_module(mod):
    """``with use_module(mod):`` the library's Gluon forward runs ``mod``'s kernels (``fwd_switches.use_build``'s
    swap: the kept launch plans dropped on the way in and out, the library's kernels put back)."""
    import fwd_switches

    return fwd_switches.use_build.of_module(mod)


def sustained(fn, *, seconds: float, warm: float, read=None, device: str = "cuda", interval: float = 0.01) -> dict:
    """Run ``fn`` back to back: for ``warm`` seconds, then ``calls`` more between two events (on a GPU: CUDA events;
    on the CPU: the wall clock), ``calls`` chosen from the warm-up's rate to fill ``seconds``. While they run a thread
    reads ``read()`` (a dict with ``power_w`` and ``sm_mhz``, or None) every ``interval`` seconds. Returns ``ms`` a
    call, ``calls``, ``seconds`` measured, and the reads' mean ``power_w`` (with ``power_min_w``/``power_max_w``),
    mean ``sm_mhz`` and number (``reads``); no reads: those keys None."""
    import torch

    if not (seconds > 0 and warm >= 0):
        raise ValueError(f"seconds must be positive and warm not negative, got {seconds!r} and {warm!r}")
    cuda = torch.device(device).type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    fn()
    sync()
    t0, n = time.perf_counter(), 0
    while True:  # the warm-up, synchronised every few calls so that the host does not run far ahead
        for _ in range(4):
            fn()
        n += 4
        sync()
        if time.perf_counter() - t0 >= warm:
            break
    rate = n / max(time.perf_counter() - t0, 1e-9)
    calls = max(4, int(rate * seconds))
    samples: list[dict] = []
    stop = threading.Event()

    def loop():
        while True:
            state = read() if read is not None else None
            if state:
                samples.append(state)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name="energy-sampler", daemon=True)
    thread.start()
    try:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end) / 1000
        else:
            w0 = time.perf_counter()
            for _ in range(calls):
                fn()
            elapsed = time.perf_counter() - w0
    finally:
        stop.set()
        thread.join()
    watts = [s["power_w"] for s in samples if s.get("power_w") is not None]
    mhz = [s["sm_mhz"] for s in samples if s.get("sm_mhz") is not None]
    return dict(ms=elapsed * 1000 / calls, calls=calls, seconds=elapsed, reads=len(samples),
                power_w=statistics.fmean(watts) if watts else None, power_min_w=min(watts) if watts else None,
                power_max_w=max(watts) if watts else None, sm_mhz=statistics.fmean(mhz) if mhz else None)


def with_energy(t: dict, flop: float) -> dict:
    """One timing (``sustained``'s dict) with ``tflops`` and, where its power was read, ``pj_per_flop`` (mean power
    over TFLOP/s: W / 10¹² FLOP/s = pJ a FLOP)."""
    t = dict(t, flop=flop, tflops=flop / (t["ms"] * 1e-3) / 1e12)
    t["pj_per_flop"] = t["power_w"] / t["tflops"] if t.get("power_w") else None
    return t


def summary(rows: list[dict]) -> dict:
    """Per arm (in the order they first appear): the medians over its rounds of ``tflops``, ``power_w``, ``sm_mhz``
    and ``pj_per_flop``, and ``vs_attnlab`` (its energy a FLOP over attnlab's, where both were read); and the parts,
    from the medians: ``exp_share`` = 1 − noexp/attnlab and ``softmax_share`` = 1 − nosoftmax/attnlab (of attnlab's
    energy a FLOP, what the exponentials and the whole softmax step cost), ``gemm_share`` = gemm/attnlab (what the
    tensor cores' work costs in a GEMM), where those arms ran."""
    arms: dict[str, dict] = {}
    for r in rows:
        a = arms.setdefault(r["arm"], {"arm": r["arm"], "rounds": 0})
        a["rounds"] += 1
    for name, a in arms.items():
        mine = [r for r in rows if r["arm"] == name]
        for key in ("tflops", "power_w", "sm_mhz", "pj_per_flop"):
            vals = [r[key] for r in mine if r.get(key) is not None]
            a[key] = statistics.median(vals) if vals else None
        diffs = [r["max_diff"] for r in mine if r.get("max_diff") is not None]
        if diffs:
            a["max_diff"] = max(diffs)
    base = arms.get("attnlab", {}).get("pj_per_flop")
    out = {"arms": list(arms.values())}
    for a in out["arms"]:
        a["vs_attnlab"] = a["pj_per_flop"] / base if base and a.get("pj_per_flop") else None
    parts = {"exp_share": ("noexp", True), "softmax_share": ("nosoftmax", True), "gemm_share": ("gemm", False)}
    for key, (arm, complement) in parts.items():
        v = arms.get(arm, {}).get("vs_attnlab")
        if v is not None:
            out[key] = 1 - v if complement else v
    return out


def _fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def markdown(saved: dict) -> str:
    """The run's table: one line an arm, its medians, and the parts below it."""
    env, shape = saved.get("environment", {}), saved["shape"]
    s = summary(saved["rows"])
    head = (f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, power limit "
            f"{_fmt(saved.get('power_limit_w'), '.0f')} W (power read: {saved.get('power_source', '?')}); attention "
            f"B = {shape['B']}, {shape['H']}/{shape['Hkv']} heads, N = {shape['N']}, D = {shape['D']}, "
            f"{'causal' if shape['causal'] else 'not causal'}, bfloat16; GEMM {shape['gemm_size']}³; "
            f"{saved['seconds']} s a time after {saved['warm']} s of warm-up, {saved['rounds']} rounds, medians")
    lines = [head, "", "| arm | what it is | TFLOP/s | W | MHz | pJ a FLOP | × attnlab's energy | rounds |",
             "|---|---|---|---|---|---|---|---|"]
    for a in s["arms"]:
        note = NOTES.get(a["arm"], "")
        if a.get("max_diff") is not None:
            note += f"; max diff from attnlab {a['max_diff']:.3g}"
        lines.append(f"| {a['arm']} | {note} | {_fmt(a['tflops'], '.0f')} | {_fmt(a['power_w'], '.0f')} | "
                     f"{_fmt(a['sm_mhz'], '.0f')} | {_fmt(a['pj_per_flop'], '.3f')} | {_fmt(a['vs_attnlab'], '.3f')} | "
                     f"{a['rounds']} |")
    parts = [f"{label} {s[key] * 100:.1f} %" for key, label in
             (("exp_share", "the exponentials"), ("softmax_share", "the whole softmax step"),
              ("gemm_share", "a GEMM's energy for the same FLOPs")) if key in s]
    if parts:
        lines += ["", "Of attnlab's energy a FLOP: " + "; ".join(parts) + "."]
    return "\n".join(lines) + "\n"


def _attention_arm(arm: str, shape: dict, device: str):
    """(a function of no arguments making one forward, its FLOPs) for an attention arm on inputs made once."""
    import prefill
    import torch

    cfg = dict(shape, pass_="fwd")
    if arm == "sdpa-cudnn":
        fn = prefill.provider_sdpa(device, "CUDNN_ATTENTION", "sdpa-cudnn")(cfg)
        if fn is None:
            raise RuntimeError("sdpa-cudnn runs on a CUDA device only")
    else:
        q, k, v, _ = prefill.make_inputs(cfg, device)
        import attnlab

        def fn():
            with torch.no_grad():
                return attnlab.flash_attention(q, k, v, causal=shape["causal"])
    return fn, prefill.flops(cfg)


def _split(arm: str, D: int):
    """The context in which the library's forward computes ``SPLITS[arm]`` of every 8 exponentials by the polynomial
    (``exp_poly.use_split``)."""
    import exp_poly

    return exp_poly.use_split(SPLITS[arm], D)


def measure(args, read=None) -> list[dict]:
    """Every arm ``args.rounds`` times, the order rotating by one each round; a row per (arm, round)."""
    import torch

    shape = dict(B=args.batch, H=args.heads, Hkv=args.kv_heads, N=args.N, D=args.D, causal=args.causal)
    device = args.device
    fns: dict = {}
    mods = {arm: arm_module(arm) for arm in args.arms if arm in SWITCHES or arm in EDITS}
    for arm in args.arms:
        if arm == "gemm":
            g = torch.Generator(device=device).manual_seed(0)
            n = args.gemm_size
            a, b = (torch.randn(n, n, generator=g, device=device, dtype=torch.bfloat16) for _ in range(2))
            fns[arm] = ((lambda a=a, b=b: torch.matmul(a, b)), 2.0 * n ** 3)
        else:
            fns[arm] = _attention_arm(arm, shape, device)
    diffs = {}
    for arm in args.arms:  # a switch's build gives the library's bits: checked before anything is timed
        if arm in SWITCHES and device == "cuda":
            fn = fns[arm][0]
            ref = fn()
            with use_module(mods[arm]):
                got = fn()
            diffs[arm] = (got.float() - ref.float()).abs().max().item()
            print(f"energy_parts: {arm} against the library's build, max diff {diffs[arm]}", flush=True)
    rows = []
    arms = list(args.arms)
    for rnd in range(args.rounds):
        k = rnd % len(arms)
        for place, arm in enumerate(arms[k:] + arms[:k]):
            fn, flop = fns[arm]
            ctx = use_module(mods[arm]) if arm in mods else (_split(arm, args.D) if arm in SPLITS else None)
            if ctx is not None:
                ctx.__enter__()
            try:
                t = sustained(fn, seconds=args.seconds, warm=args.warm, read=read, device=device)
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
            row = with_energy(t, flop)
            row.update(arm=arm, round=rnd, place=place)
            if arm in diffs:
                row["max_diff"] = diffs[arm]
            rows.append(row)
            print(f"energy_parts: round {rnd} {arm:>10}: {row['tflops']:7.1f} TFLOP/s, "
                  f"{_fmt(row['power_w'], '.0f')} W, {_fmt(row['sm_mhz'], '.0f')} MHz, "
                  f"{_fmt(row['pj_per_flop'], '.3f')} pJ a FLOP", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="+", default=list(DEFAULT_ARMS), choices=ARMS)
    ap.add_argument("--N", type=int, default=16384, help="sequence length (queries and keys)")
    ap.add_argument("--D", type=int, default=128, choices=(64, 128))
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=None, help="K/V heads (default: --heads)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--gemm-size", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds each arm is measured a round")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds each arm runs before it is measured")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", type=Path, help="write the run here (refuses an existing file)")
    ap.add_argument("--md", type=Path, help="write the table here (refuses an existing file)")
    ap.add_argument("--report", type=Path, help="print the table of a recorded run and stop")
    args = ap.parse_args(argv)
    if args.report is not None:
        if not args.report.is_file():
            ap.error(f"--report: no file {args.report}")
        print(markdown(json.loads(args.report.read_text())), end="")
        return 0
    for p in (args.json, args.md):
        if p is not None and p.exists():
            ap.error(f"{p} exists; choose another name")
    if len(set(args.arms)) != len(args.arms):
        ap.error("--arms: each arm once")
    if args.kv_heads is None:
        args.kv_heads = args.heads
    if min(args.N, args.heads, args.kv_heads, args.batch, args.gemm_size) < 1 or args.heads % args.kv_heads:
        ap.error("--N, --heads, --kv-heads, --batch and --gemm-size must be positive, and --heads a multiple of "
                 "--kv-heads")
    if args.rounds < 1 or not args.seconds > 0 or args.warm < 0:
        ap.error("--rounds must be at least 1, --seconds positive and --warm not negative")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device: this script measures a GPU's power (--device cpu runs it without power reads)")
    if args.device != "cuda" and set(args.arms) - {"gemm", "attnlab"}:
        ap.error(f"--device {args.device}: only the arms gemm and attnlab run off a GPU (the others are GPU kernels)")
    import prefill

    from attnlab.bench import environment

    read = prefill.state_reader() if args.device == "cuda" else None
    rows = measure(args, read)
    saved = dict(environment=environment(), power_limit_w=prefill.power_limit_w() if read else None,
                 power_source=getattr(read, "power_source", None),
                 shape=dict(B=args.batch, H=args.heads, Hkv=args.kv_heads, N=args.N, D=args.D, causal=args.causal,
                            gemm_size=args.gemm_size),
                 seconds=args.seconds, warm=args.warm, rounds=args.rounds, arms=list(args.arms), rows=rows,
                 summary=summary(rows))
    md = markdown(saved)
    print(md, end="")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(saved, indent=2))
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
