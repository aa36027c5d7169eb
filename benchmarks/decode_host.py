"""Host time of one eager decode call, and eager against CUDA-graph speed (lecture §8.4, the host side).

A decode step reads a few MB; on an H200 that is a few µs to tens of µs of GPU time, so the Python
and launch work of one call (checks, Triton's argument binding, allocations) can decide the speed
of eager decoding. Three parts (a fourth with ``--eager-ab``), each printed as a table and written to ``--json``:

1. **Floors** (µs of host time per call): an empty Triton kernel launched through ``kernel[grid]``
   (Triton's own per-call work for one pointer), ``torch.empty`` (one allocation), and an empty
   Triton kernel with the decode kernel's full argument list through ``kernel[grid]``.
2. **Host time per call** on a shape whose GPU time is far below the host time (so a loop of calls
   measures the host: the GPU never holds the launch queue back): ``attnlab.flash_decode`` with a
   kept plan (the default: every call after the first), the same call made to check and plan again
   each time (``clear_plans`` before it: the path every call took before plans were kept),
   ``flash_decode_triton``, knob rows (one setting changed), SDPA's backends, and the floors' empty launch again
   (the host bar's yardstick, timed beside the kept call). Mean over ``--calls`` calls, best of 5 rounds, the rows
   taken in turns within each round (the host's speed drifts); every round's time is kept, and the table shows each
   row's slowest round over its best. The premise is measured too: the kept call's GPU time at that shape, its
   calls in one CUDA graph (``tiny_gpu_us``). Then the kept call and the empty launch timed one call at a time,
   alternating (``per_call_us``): median, p10, p90 and mean, beside a no-op timed the same way.
3. **Eager vs CUDA graph** on the decode shapes of the benchmarks (batch 1, GQA): per-call time of
   a loop of eager calls (one sync at the end) against the per-call time of the same calls captured
   in one CUDA graph, for attnlab and SDPA cuDNN; and TB/s over the K/V bytes read. ``attnlab`` passes
   the lengths (``cache_seqlens``, all full), as a server does; ``attnlab-full`` passes none, the work SDPA
   does (the kernel then reads no lengths before it knows its keys). Each call twice: L2-warm (every call
   on the same inputs: a cache smaller than the L2 stays in it) and L2-cold (the calls take copies of the
   K/V cache in turn, one pass over them at least 3× the L2: every call reads its K/V from HBM, as a layer's
   decode step does in a model; the query and the lengths, hot in a model, are one tensor each).

4. With ``--eager-ab``: eager calls of the batch-1 shapes with and without the in-kernel merge of small
   reads (``decode_plan.EAGER_FUSED_BELOW_US``), alternating in rounds in one process. ``--breakdown``
   instead times each step of a kept plan's call alone (the key, the outputs, the launches). The A/B arms of
   the split kernel (``--kernel-ab``: Triton's or Gluon's, with a sweep of the Gluon kernel's split counts), of
   the split order (``--order-ab``) and of the merge (``--merge-ab``, ``--graph-merge-ab``) time each arm
   L2-warm and L2-cold, as part 3 does.

    python benchmarks/decode_host.py [--calls 2000] [--json out.json] [--md out.md]
    python benchmarks/decode_host.py --report benchmarks/data/decode-host-h200-run6.json   # a recorded run

Beside every eager/graph row: the roofline of its shape on the preset matching the GPU
(``attnlab.cost.decode.decode_roofline``) and the share of it each call reaches.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import statistics
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # roofline_columns, also when loaded as a module
from ab_rounds import turns  # noqa: E402
from roofline_columns import add_fraction, decode_roofline_ms, percent, preset_for, preset_text  # noqa: E402

import attnlab  # noqa: E402

SHAPES = [  # (B, H, Hkv, L, D): the small-batch decode shapes
    (1, 32, 8, 32768, 128),
    (1, 64, 8, 8192, 128),
    (1, 28, 4, 20000, 128),
    (8, 32, 8, 32768, 128),
    (1, 32, 8, 32768, 64),  # Llama 3.2 1B's heads at 32K (benchmarks/hf.py's decode)
]
TINY = (1, 32, 8, 256, 128)  # GPU time far below any host time: a loop of calls measures the host


def host_us(fn, *, calls: int, rounds: int = 5, median: bool = False) -> float:
    """Host µs per call: a loop of ``calls`` calls, synchronised only before and after; best round (``median``: the
    rounds' median, to set beside ``eager_us``'s)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        times.append((t1 - t0) / calls * 1e6)
    return statistics.median(times) if median else min(times)


EAGER_WARMUP_S = 0.05


def eager_us(fn, *, calls: int, rounds: int = 5) -> float:
    """Per-call µs of eager calls with the GPU's work included: the loop is timed to its final sync. First
    ``EAGER_WARMUP_S`` of calls untimed (run 21's table had the D = 64 shape's eager calls at 33.0 µs after
    ten calls of warm-up, its A/B rounds 24.6 µs on the same call later in the same process). ``fn``: one
    callable, or a list of them (the same call on copies of its cache), called in turn."""
    order = _in_turn(fn, calls)
    t_end = time.perf_counter() + EAGER_WARMUP_S
    while time.perf_counter() < t_end:
        for f in order[:10]:
            f()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for f in order:
            f()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


PACE_BAND = 0.9  # a host time per call at least this share of the eager time: the host sets the pace


def eager_pace(row: dict) -> str:
    """Who sets a speed row's eager pace: "host" where the host's time per call (``loop_host_us``) is at least
    ``PACE_BAND`` of the eager time (the GPU waits for the launches), "GPU" where it is at most the CUDA graph's time
    (the host runs ahead: the eager calls' extra time is the GPU's), "both" between."""
    host, eager, graph = row["loop_host_us"], row["eager_us"], row["graph_us"]
    if host >= PACE_BAND * eager:
        return "host"
    return "GPU" if host <= graph else "both"


def _in_turn(fn, calls: int) -> list:
    """``calls`` callables: ``fn`` each time, or the callables of the list ``fn`` in turn."""
    fns = fn if isinstance(fn, list) else [fn]
    return [fns[i % len(fns)] for i in range(calls)]


@functools.cache
def _decode_bench():
    """benchmarks/decode.py, loaded by path (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("decode_bench", Path(__file__).with_name("decode.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def graph_us(fn, *, calls: int) -> float:
    """Per-call µs of ``calls`` calls captured in one CUDA graph (no host work): benchmarks/decode.py's
    ``graph_ms`` (median of 5 replays). ``fn``: one callable, or a list of them called in turn."""
    return _decode_bench().graph_ms(_in_turn(fn, calls), "cuda") * 1e3


def inputs(shape, dtype=torch.bfloat16):
    B, H, Hkv, L, D = shape
    q = torch.randn(B, H, 1, D, dtype=dtype, device="cuda")
    k = torch.randn(B, Hkv, L, D, dtype=dtype, device="cuda")
    v = torch.randn(B, Hkv, L, D, dtype=dtype, device="cuda")
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    return q, k, v, lens


def default_call(shape):
    """The library's default call with the lengths (``attnlab.flash_decode(q, k, v, cache_seqlens=lens)``) on
    ``inputs(shape)``, as a callable of no arguments."""
    q, k, v, lens = inputs(shape)
    return lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens)


def cache_bytes(shape) -> int:
    """Bytes of a shape's K and V cache in bf16."""
    B, _H, Hkv, L, D = shape
    return 2 * B * Hkv * L * D * 2


def cache_copies(shape) -> list[tuple]:
    """``inputs(shape)`` for each of the copies benchmarks/decode.py's ``_copies`` asks for at this cache size (one pass
    over them at least 3× the L2), each with a K/V cache of its own and all with copy 0's query and lengths: in a model
    the query was just written and every layer reads the same lengths, so both are in L2 when the cache is not."""
    sets = [inputs(shape) for _ in range(_decode_bench()._copies(cache_bytes(shape), "cuda"))]
    q, lens = sets[0][0], sets[0][3]
    return [(q, k, v, lens) for _q, k, v, _lens in sets]


def sdpa_call(q, k, v, backend: str):
    """SDPA with one backend (``enable_gqa``), or None when that backend refuses the shape."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def fn():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    try:
        fn()
        torch.cuda.synchronize()
    except RuntimeError:
        return None
    return fn


KEPT_ROW = "attnlab.flash_decode (plan kept)"
NATIVE_ROW = "attnlab.flash_decode (plan kept), native call"
PYTHON_ROW = "attnlab.flash_decode (plan kept), Python path"
GPU_SHARE = 0.5  # a kept call's GPU time above this share of its host time: the host rows may read the GPU


EMPTY_ROW = "an empty Triton launch (one argument), in the same rounds"


def empty_launch():
    """A function that launches an empty one-argument Triton kernel the way ``kernel[grid]`` does (the floor
    ``triton_empty_1_arg, kernel[grid]``), compiled once."""
    import triton

    @triton.jit
    def empty1(X):
        pass

    x = torch.zeros(16, device="cuda")
    empty1[(1,)](x)
    return lambda: empty1[(1,)](x)


def floors(calls: int) -> dict:
    import tempfile

    from attnlab.gpu.decode_kernels import _decode_split_kernel

    empty1 = empty_launch()
    n = len(_decode_split_kernel.arg_names)
    names = ", ".join(f"a{i}" for i in range(n))
    # an empty kernel with the decode kernel's arity; triton.jit reads source, so it lives in a file
    path = Path(tempfile.mkdtemp()) / "emptyn.py"
    path.write_text(f"import triton\n\n\n@triton.jit\ndef emptyn({names}):\n    pass\n")
    spec = importlib.util.spec_from_file_location("emptyn", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    emptyn = mod.emptyn
    x = torch.zeros(16, device="cuda")
    ptrs = [x] * 11  # the decode kernel's 11 pointers, then ints/floats as it takes them
    scalars = [128] * (n - 11)
    args = [*ptrs, *scalars]
    compiled = emptyn[(1,)](*args)
    runner = compiled[(1, 1, 1)]
    run, fn, meta = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    int_args = [x.data_ptr()] * 11 + scalars
    from attnlab.gpu.launch import static_launch

    static = static_launch(compiled, (1, 1, 1))
    q = torch.empty(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    rows = {
        "triton_empty_1_arg, kernel[grid]": host_us(empty1, calls=calls),
        f"triton_empty_{n}_args, kernel[grid]": host_us(lambda: emptyn[(1,)](*args), calls=calls),
        f"triton_empty_{n}_args, compiled runner": host_us(lambda: runner(*args, stream=stream), calls=calls),
        f"triton_empty_{n}_args, compiled launcher": host_us(
            lambda: run(1, 1, 1, stream, fn, meta, None, None, None, *args), calls=calls),
        f"triton_empty_{n}_args, compiled launcher, int pointers": host_us(
            lambda: run(1, 1, 1, stream, fn, meta, None, None, None, *int_args), calls=calls),
        # PyTorch's C++ launcher, as a kept plan's Launcher takes it (None where this torch has none)
        f"triton_empty_{n}_args, torch's static launcher, int pointers": None if static is None else host_us(
            lambda: static(int_args, stream), calls=calls),
        "torch.empty": host_us(lambda: torch.empty(4096, device="cuda"), calls=calls),
        "tensor.data_ptr()": host_us(lambda: q.data_ptr(), calls=calls),
        "tensor shape+stride+dtype+device": host_us(lambda: (q.shape, q.stride(), q.dtype, q.device), calls=calls),
        "tensor shape+stride+dtype+get_device": host_us(lambda: (q.shape, q.stride(), q.dtype, q.get_device()),
                                                        calls=calls),
        "torch.cuda.current_stream().cuda_stream": host_us(lambda: torch.cuda.current_stream().cuda_stream,
                                                           calls=calls),
        "torch._C._cuda_getCurrentRawStream(0)": host_us(lambda: torch._C._cuda_getCurrentRawStream(0),
                                                          calls=calls),
        "torch.cuda.current_device()": host_us(torch.cuda.current_device, calls=calls),
    }
    return {k: v for k, v in rows.items() if v is not None}


def host_rows(calls: int, rounds: int = 5) -> list[dict]:
    """Host µs per call of the tiny shape's calls (``TINY``: GPU time far below the host's), kept and not, their steps,
    knob rows (the same call on plans made with one module setting changed) and SDPA's backends. The rows are timed in
    turns: each round runs every row's loop of ``calls`` calls once, in order, and a row keeps its best round — the
    host's speed drifts within a process (decode-host run 43 timed the same kept call at 22.0 µs first and 13.9 µs
    after the knob rows), and rows timed one after another would carry that drift into their differences."""
    from attnlab.gpu import decode, decode_plan, launch, native

    q, k, v, lens = inputs(TINY)
    entries = []  # (name, fn, knob: (module, name, value), several of them in a tuple, or None)

    def add(name, fn, knob=None):
        if fn is not None:
            entries.append((name, fn, knob))

    def kept():
        return decode.flash_decode_triton(q, k, v, cache_seqlens=lens)

    key = decode.plan_key(q, k, v, lens, None, None, True, None, None, None, None)

    def planned():
        out = decode.run_planned(key, q, k, v, lens, None, None)
        if out is None:  # (a knob row's plans were cleared after it: plan again, untimed after the first call)
            kept()
        return out

    add(KEPT_ROW, lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens))
    add("attnlab.flash_decode, window (plan kept)",
        lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens, window=(128, 0)))
    add("flash_decode_triton (plan kept)", kept)
    add("  of which: decode.plan_key",
        lambda: decode.plan_key(q, k, v, lens, None, None, True, None, None, None, None))
    add("  of which: the kept plan's allocations and launch", planned)
    # the Python path's own settings, each with the native call off (which would otherwise make these calls): no
    # output slabs: two torch.empty per call, as before them; the merge kernel on every call: two launches, as before
    # eager calls merged in the split kernel; every launch through Triton's launcher, as before PyTorch's took the
    # kept kernels
    py = (native, "ENABLED", False)
    add("flash_decode_triton (plan kept), outputs by torch.empty", kept, ((decode_plan, "SLAB_BYTES", 0), py))
    add("flash_decode_triton (plan kept), merge kernel every call", kept,
        ((decode_plan, "EAGER_FUSED_BELOW_US", 0.0), py))
    add("flash_decode_triton (plan kept), Triton's launcher", kept,
        ((launch, "STATIC_LAUNCH", False), (launch, "DIRECT_LAUNCH", False), py))
    # the kept call by the other path, where the native module builds here (built now, so that no round's loop
    # includes the build): with the native call on (the default), the Python path; with it off, the native call
    if native.module() is not None:
        public = lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens)  # noqa: E731
        add(*((PYTHON_ROW, public, py) if native.ENABLED else (NATIVE_ROW, public, (native, "ENABLED", True))))
    # the default rows again, after the others (rows from before the rounds were taken in turns compare with these)
    add("flash_decode_triton (plan kept), again", kept)
    add("attnlab.flash_decode (plan kept), again", lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens))

    def replanned():
        decode.clear_plans()
        return attnlab.flash_decode(q, k, v, cache_seqlens=lens)

    add("attnlab.flash_decode, checked and planned every call", replanned)
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        add(f"SDPA {backend.split('_')[0].lower()}", sdpa_call(q, k, v, backend))
    # the floor the host bar is read against, in the same rounds: on an unsteady host the floors timed before the rows
    # and the rows see different hosts (decode-host runs 57 and 58: 11.4 and 15.1 µs on one machine)
    add(EMPTY_ROW, empty_launch())
    times: dict = {}
    for _ in range(rounds):
        for name, fn, knob in entries:
            knobs = () if knob is None else (knob,) if isinstance(knob[0], types.ModuleType) else knob
            saved = [(module, attr, getattr(module, attr)) for module, attr, _ in knobs]
            for module, attr, value in knobs:
                setattr(module, attr, value)
            if knobs:
                decode.clear_plans()
            try:
                us = host_us(fn, calls=calls, rounds=1)
            finally:
                for module, attr, value in saved:
                    setattr(module, attr, value)
                if knobs:
                    decode.clear_plans()
            times.setdefault(name, []).append(us)
    return [{"call": name, "host_us": min(times[name]), "rounds_us": times[name]} for name, _, _ in entries]


NOOP_ROW = "a Python call that does nothing, timed the same way"


def per_call_us(fns: dict, calls: int, *, sync=None, clock=time.perf_counter_ns, warmup: int = 20) -> dict:
    """Each call of each function in ``fns`` (name -> callable) timed alone, the functions alternating call by call
    (in reverse order every other turn), ``calls`` calls each after ``warmup`` untimed ones; ``sync`` (e.g.
    ``torch.cuda.synchronize``) before and after. Name -> ``call_stats`` of its times. A loop's mean carries every
    stall of the host into every call's share (a descheduled thread, a collection); the median of single calls
    leaves the rare ones out, so the two side by side say whether a slow loop was a slow call or a slow host."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    if sync is not None:
        sync()
    times: dict = {name: [] for name in names}
    for i in range(calls):
        for name in (names if i % 2 == 0 else names[::-1]):
            fn = fns[name]
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    if sync is not None:
        sync()
    return {name: call_stats([t / 1e3 for t in times[name]]) for name in names}


def call_stats(us: list[float]) -> dict:
    """Median, 10th and 90th percentiles (nearest rank) and mean of single calls' µs."""
    s = sorted(us)
    n = len(s)

    def rank(p: float) -> float:
        return s[min(n - 1, max(0, math.ceil(p * n) - 1))]

    return {"median_us": statistics.median(s), "p10_us": rank(0.1), "p90_us": rank(0.9), "mean_us": sum(s) / n,
            "calls": n}


def per_call_rows(calls: int) -> dict:
    """The kept call and the empty launch of the host rows, and a no-op (the timing's own cost), each call timed alone
    and alternating (``per_call_us``) at ``TINY``."""
    from attnlab.gpu import decode

    q, k, v, lens = inputs(TINY)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
    fns = {KEPT_ROW: lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens), EMPTY_ROW: empty_launch(),
           NOOP_ROW: lambda: None}
    return per_call_us(fns, calls, sync=torch.cuda.synchronize)


def tiny_gpu_us(calls: int = 200) -> float:
    """GPU µs per call of the host rows' kept call (``TINY``) with no host work: ``calls`` calls in one CUDA graph.
    The host rows read the host's time only where this is well below them (a loop of calls that the GPU cannot keep
    up with fills the launch queue, and then the host waits for the GPU)."""
    from attnlab.gpu import decode

    q, k, v, lens = inputs(TINY)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
    return graph_us(lambda: decode.flash_decode_triton(q, k, v, cache_seqlens=lens), calls=calls)


NATIVE_STEP = "the native program's call alone (C++: checks, outputs, launch)"


def native_on() -> bool:
    """Whether this process's kept calls go through the native decode call: on, and its module built."""
    from attnlab.gpu import native

    return bool(native.ENABLED and native.module() is not None)


def native_fast(q, k, v, lens):
    """The native decode call's (call, program, plan) for ``attnlab.flash_decode(q, k, v, cache_seqlens=lens)``,
    made by that call with the native call on and a plan of its own (the kept plans cleared before and after), and
    left out of the fast path's slot: the caller times it alone. None where the module does not build here."""
    from attnlab._runtime import NATIVE_DECODE
    from attnlab.gpu import decode, native

    if native.module() is None:
        return None
    saved = native.ENABLED
    native.ENABLED = True
    decode.clear_plans()
    try:
        for _ in range(4):
            attnlab.flash_decode(q, k, v, cache_seqlens=lens)
        fast = NATIVE_DECODE[0]
    finally:
        native.ENABLED = saved
        NATIVE_DECODE[0] = None
    return fast


def breakdown(calls: int, rounds: int = 7, shape=TINY) -> dict:
    """Where a kept plan's call spends its host time, at ``shape`` (default ``TINY``): the whole call at each layer
    (``attnlab.flash_decode``, ``flash_decode_triton``, ``run_planned``, the plan itself) and each step
    of the plan alone (the key, the capture check, the outputs, the kernels' launches), timed in
    interleaved rounds (every step once per round, best round kept), so a drift of the host's speed
    moves all of them alike. Where the plan's eager calls launch the split kernel as a programmatic dependent launch
    (``decode_plan.SPLIT_PDL``, through Triton's launcher), that launch is a step too, beside the plain one (through
    PyTorch's launcher where it takes the kernel): at a shape whose GPU time exceeds the host's, the two say whether
    a launch costs the host more while the GPU is busy, or as a dependent launch."""
    from attnlab.gpu import decode, decode_plan
    from attnlab.gpu.launch import current_stream, direct_launch, hooks_set, tensor_key

    q, k, v, lens = inputs(shape)
    fast = native_fast(q, k, v, lens)  # (first: it clears the plans; its own plan lives in the tuple)
    decode.clear_plans()
    for _ in range(3):  # the first call plans and compiles, the second makes the plan's launches (a fused plan's
        decode.flash_decode_triton(q, k, v, cache_seqlens=lens)  # build), the third its eager dependent launch's
    key = decode.plan_key(q, k, v, lens, None, None, True, None, None, None, None)
    plan = decode_plan._PLANS[key]
    stream = key[-1]
    head = [q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), plan.spare_ptr, *plan._partials(False),
            *(t.data_ptr() for t in plan.outputs.take()), plan.counters_ptr, plan.spare_ptr]
    split, tail = (plan.fused_split, plan.fused_tail) if plan.fused else (plan.split, plan.tail)
    steps = {
        "attnlab.flash_decode": lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens),
        "flash_decode_triton": lambda: decode.flash_decode_triton(q, k, v, cache_seqlens=lens),
        "decode.plan_key": lambda: decode.plan_key(q, k, v, lens, None, None, True, None, None, None, None),
        # the key as it was built before (decode-breakdown run 1: 5.8 µs), beside the one above, same rounds
        "the key from tensor_key tuples (before)": lambda: (
            tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(lens), None, None, None, True, None, None, None,
            None, torch.cuda.current_device(), current_stream(q.device)),
        "run_planned": lambda: decode.run_planned(key, q, k, v, lens, None, None),
        "the plan's __call__": lambda: plan(q, k, v, lens, None, None, stream),
        "torch.cuda.is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
        "the capture check the plan makes": decode_plan._capturing,
        "outputs.take": lambda: plan.outputs.take(False),
        "hooks_set": hooks_set,
        "the head's data_ptr() calls": lambda: [q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr()],
        "the split kernel's launch": lambda: split.launch(head + tail, stream),
    }
    c = split.compiled
    if split.static is not None or split.direct is not None:  # the same launch through Triton's launcher
        steps["the split kernel's launch, Triton's launcher"] = lambda: c.run(
            *split.grid, stream, c.function, c.packed_metadata, None, None, None, *head, *tail)
    direct = direct_launch(c, split.grid)
    if direct is not None and split.direct is None:  # the plain launch through the C launcher alone (NOTES v37)
        steps["the split kernel's launch, Triton's C launcher alone"] = lambda: direct(head + tail, stream)
    if plan.merge == 1 and not plan.fused:
        steps["the merge kernel's launch"] = lambda: plan.merge_launch.launch([*head[5:9], *plan.merge_tail], stream)
    eager = getattr(plan, "eager_split", None)
    if plan.fused and eager is not None and eager.compiled is not None:  # the launch an eager call makes
        ce = eager.compiled
        how = "Triton's C launcher alone" if eager.direct is not None else "Triton's launcher"
        steps[f"the eager split kernel's launch (dependent launch, {how})"] = \
            lambda: eager.launch(head + plan.eager_tail, stream)
        if eager.direct is not None:  # the same launch through Triton's whole path, as before ``direct_launch``
            steps["the eager split kernel's launch (dependent launch, Triton's launcher)"] = lambda: ce.run(
                *eager.grid, stream, ce.function, ce.packed_metadata, None, None, None, *head, *plan.eager_tail)
    if fast is not None:  # the native program of the same call (``attnlab.gpu.native``), alone and through the API
        call, prog = fast[0], fast[1]
        steps[NATIVE_STEP] = lambda: call(prog, q, k, v, lens, None)  # (no page table)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for name, fn in steps.items():
            best[name] = min(best[name], host_us(fn, calls=calls, rounds=1))
    torch.cuda.synchronize()
    return {"shape": list(shape), "merge": plan.merge, "splits": plan.num_splits, "eager_fused": plan.fused,
            "steps": [{"step": n, "host_us": us} for n, us in best.items()]}


def breakdown_markdown(runs: dict) -> list[str]:
    """The steps of several breakdowns side by side ({label: a ``breakdown`` result}): one row per step, in the order
    the runs first name them, one column per run (its shape under its label); "—" where a run has no such step."""
    steps: dict = {}
    for b in runs.values():
        for r in b["steps"]:
            steps.setdefault(r["step"], None)
    heads = [f"{label} ({' '.join(map(str, b['shape']))})" for label, b in runs.items()]
    lines = ["| step | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for step in steps:
        cells = []
        for b in runs.values():
            us = next((r["host_us"] for r in b["steps"] if r["step"] == step), None)
            cells.append("—" if us is None else f"{us:.1f}")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def profile_planned(calls: int, top: int = 20) -> str:
    """cProfile of ``calls`` calls of ``attnlab.flash_decode`` with a kept plan, at ``TINY``."""
    import cProfile
    import io
    import pstats

    q, k, v, lens = inputs(TINY)
    for _ in range(20):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def profile_miss(calls: int, top: int = 25, shape=None) -> str:
    """cProfile of calls that find no plan (the cache grows by one key per call, as transformers'
    DynamicCache does) at ``shape`` (default ``TINY``): where the host time of a first call goes."""
    import cProfile
    import io
    import pstats

    B, H, Hkv, L, D = shape or TINY
    q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device="cuda")
    caches = [torch.randn(B, Hkv, L + i, D, dtype=torch.bfloat16, device="cuda") for i in range(calls)]
    for kv in caches[:5]:
        attnlab.flash_decode(q, kv, kv)
    prof = cProfile.Profile()
    prof.enable()
    for kv in caches[5:]:
        attnlab.flash_decode(q, kv, kv)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def growing_row(shape, n: int) -> dict:
    """Host µs per call of ``attnlab.flash_decode`` on a cache one key longer every call, as transformers'
    DynamicCache hands it over (each call finds no plan of its own: the last one is resized), over the
    last ``n - 20`` of ``n`` calls; no synchronisation inside the loop, so the host is timed as long as
    the GPU's queue does not fill, and ``plan_stats`` says which path the calls took. A first pass over
    the same lengths compiles what they need (a split count met for the first time compiles its merge
    kernel once per process), so the timed pass is the steady state."""
    from attnlab.gpu import decode

    B, H, Hkv, L, D = shape
    q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device="cuda")
    caches = [torch.randn(B, Hkv, L + i, D, dtype=torch.bfloat16, device="cuda") for i in range(n)]
    for kv in caches:
        attnlab.flash_decode(q, kv, kv)
    decode.clear_plans()
    for kv in caches[:20]:
        attnlab.flash_decode(q, kv, kv)
    torch.cuda.synchronize()
    before = decode.plan_stats()
    t0 = time.perf_counter()
    for kv in caches[20:]:
        attnlab.flash_decode(q, kv, kv)
    host = (time.perf_counter() - t0) / (n - 20) * 1e6
    torch.cuda.synchronize()
    after = decode.plan_stats()
    return {"call": f"attnlab.flash_decode, a cache one key longer every call (B={B}, {H}/{Hkv}, from L={L + 20})",
            "host_us": host, "resized": after["resized"] - before["resized"], "planned": after["plans"] - before["plans"]}


def speed_rows(calls: int) -> list[dict]:
    """Eager and CUDA-graph µs per call of attnlab (with the lengths, and without: ``attnlab-full``) and SDPA's cuDNN
    backend on ``SHAPES``, two ways, and the host's own time per call at each shape (``loop_host_us``: ``host_us``, the
    loop of eager calls timed before its sync, the rounds' median as ``eager_us`` takes; near ``eager_us`` where the
    host sets the eager pace, below it where the GPU does). L2-warm (``eager_us``, ``graph_us``): every call on the same inputs, so a cache
    smaller than the L2 is read from it again and again. L2-cold (``eager_cold_us``, ``graph_cold_us``): the calls take
    ``copies`` copies of the K/V cache in turn, enough that one pass over them is at least 3× the L2
    (benchmarks/decode.py's ``_copies``), so each call reads its K/V from HBM, as one layer's decode step does after the
    other layers' steps have been through the L2; the query and the lengths stay one tensor each (in a model the query
    was just written and the lengths are read by every layer: both in L2)."""
    rows = []
    for shape in SHAPES:
        B, H, Hkv, L, D = shape
        nbytes = cache_bytes(shape)
        sets = cache_copies(shape)
        copies = len(sets)
        per_copy = []
        for q, k, v, lens in sets:

            def mine(q=q, k=k, v=v, lens=lens):
                return attnlab.flash_decode(q, k, v, cache_seqlens=lens)

            def full(q=q, k=k, v=v):  # no lengths: every sequence holds the whole cache, SDPA's own work
                return attnlab.flash_decode(q, k, v)

            per_copy.append({"attnlab": mine, "attnlab-full": full,
                             "sdpa-cudnn": sdpa_call(q, k, v, "CUDNN_ATTENTION")})
        for name, fn in per_copy[0].items():
            if fn is None:
                continue
            eager, graph = eager_us(fn, calls=calls // 10), graph_us(fn, calls=50)
            loop = host_us(fn, calls=calls // 10, median=True)
            row = {"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "provider": name, "eager_us": eager,
                   "graph_us": graph, "eager_over_graph": eager / graph, "loop_host_us": loop,
                   "eager_tb_per_s": nbytes / eager / 1e6, "graph_tb_per_s": nbytes / graph / 1e6}
            fns = [p[name] for p in per_copy]
            if None not in fns:  # (a backend that refused a copy it took the first time: no L2-cold times)
                eager_cold, graph_cold = eager_us(fns, calls=calls // 10), graph_us(fns, calls=50)
                row |= {"copies": copies, "eager_cold_us": eager_cold, "graph_cold_us": graph_cold,
                        "eager_cold_over_graph": eager_cold / graph_cold, "graph_cold_tb_per_s": nbytes / graph_cold / 1e6}
            rows.append(row)
        per_copy = None
        torch.cuda.empty_cache()
    return rows


PDL_NAMES = {False: "no", "eager": "eager only", True: "yes"}


def pdl_rows(calls: int) -> list[dict]:
    """The merge kernel launched plainly and as a programmatic dependent launch (``decode_plan.MERGE_PDL``:
    False, "eager" — eager calls only, the default since run 22 — and True), on the batch-1 shapes: CUDA-graph
    and eager µs of the library's default call, each way, in turn."""
    from attnlab.gpu import decode, decode_plan

    rows = []
    saved = decode_plan.MERGE_PDL
    for shape in SHAPES:
        B, H, Hkv, L, D = shape
        if B > 1:
            continue
        q, k, v, lens = inputs(shape)
        for rnd in range(2):  # two rounds, the two ways alternating: drift shows up as a round-to-round change
            for pdl in (False, "eager", True):
                decode_plan.MERGE_PDL = pdl
                decode.clear_plans()
                try:
                    def fn(q=q, k=k, v=v, lens=lens):
                        return attnlab.flash_decode(q, k, v, cache_seqlens=lens)
                    rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "pdl": pdl, "round": rnd,
                                 "graph_us": graph_us(fn, calls=50), "eager_us": eager_us(fn, calls=calls // 10)})
                finally:
                    decode_plan.MERGE_PDL = saved
                    decode.clear_plans()
    return rows


def eager_ab_rows(calls: int, rounds: int = 3) -> list[dict]:
    """Eager µs of the library's default call on the batch-1 shapes and host µs at ``TINY``, with eager
    calls of small reads merging in the split kernel (``decode_plan.EAGER_FUSED_BELOW_US`` as set) and with
    the merge kernel on every call (0), alternating in ``rounds`` rounds in one process: the host's drift
    between processes is larger than the difference."""
    from attnlab.gpu import decode, decode_plan

    below = decode_plan.EAGER_FUSED_BELOW_US
    rows = []
    shapes = [s for s in SHAPES if s[0] == 1] + [TINY]
    try:
        for shape in shapes:
            B, H, Hkv, L, D = shape
            fn = default_call(shape)

            for rnd in range(rounds):
                for on in (True, False):
                    decode_plan.EAGER_FUSED_BELOW_US = below if on else 0.0
                    decode.clear_plans()
                    fn()
                    fused = next(iter(decode_plan._PLANS.values())).fused
                    us = host_us(fn, calls=calls) if shape == TINY else eager_us(fn, calls=calls // 10)
                    rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "eager_fused": on, "fused": fused,
                                 "round": rnd, "measure": "host_us" if shape == TINY else "eager_us", "us": us})
    finally:
        decode_plan.EAGER_FUSED_BELOW_US = below
        decode.clear_plans()
    return rows


def trigger_ab_rows(calls: int, rounds: int = 3) -> list[dict]:
    """Eager and CUDA-graph µs of the library's default call on the batch-1 shapes with the split kernel's early
    ``launch_dependents`` (``decode_plan.MERGE_TRIGGER``) and without it, in turns (``ab_rounds.turns``: reversed
    every other round) in ``rounds`` rounds in one process."""
    from attnlab.gpu import decode, decode_plan

    saved = decode_plan.MERGE_TRIGGER
    rows = []
    try:
        for shape in [s for s in SHAPES if s[0] == 1]:
            B, H, Hkv, L, D = shape
            fn = default_call(shape)

            for rnd in range(rounds):
                for on in turns((True, False), rnd):
                    decode_plan.MERGE_TRIGGER = on
                    decode.clear_plans()
                    fn()
                    plan = next(iter(decode_plan._PLANS.values()))
                    rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "trigger": on, "round": rnd,
                                 "in_kernel": bool(plan.tail[decode_plan.tail_index("TRIGGER")]), "fused": plan.fused,
                                 "eager_us": eager_us(fn, calls=calls // 10), "graph_us": graph_us(fn, calls=50)})
    finally:
        decode_plan.MERGE_TRIGGER = saved
        decode.clear_plans()
    return rows


SPLIT_PDL_ARMS = (False, True, "trigger")  # decode_plan.SPLIT_PDL


def split_pdl_ab_rows(calls: int, rounds: int = 3, arms=SPLIT_PDL_ARMS) -> list[dict]:
    """Eager µs of the library's default call with the lengths on every shape with the split kernel's eager launch
    plain and as a programmatic dependent launch (``decode_plan.SPLIT_PDL``: waiting first, and also letting the next
    launch start early), in turns (reversed every other round) in ``rounds`` rounds in one process, each beside the
    host's own time per call in the same loop (``loop_host_us``) and, once per shape, the CUDA graph's time (graphs
    never take it): does the eager call's time over its graph's come from the gap between kernels?"""
    from attnlab.gpu import decode, decode_plan

    saved = decode_plan.SPLIT_PDL, decode_plan.SPLIT_PDL_FROM_US
    decode_plan.SPLIT_PDL_FROM_US = 0  # the switch itself on every shape, whatever the read
    rows = []
    try:
        for shape in SHAPES:
            B, H, Hkv, L, D = shape
            fn = default_call(shape)

            decode_plan.SPLIT_PDL = False
            decode.clear_plans()
            graph = graph_us(fn, calls=50)
            for rnd in range(rounds):
                for arm in turns(arms, rnd):
                    decode_plan.SPLIT_PDL = arm
                    decode.clear_plans()
                    row = {"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "arm": str(arm), "round": rnd, "graph_us": graph}
                    try:
                        fn()
                        plan = next(iter(decode_plan._PLANS.values()))
                        rows.append(row | {"pdl": plan.fused and getattr(plan, "eager_split", None) is not None,
                                           "eager_us": eager_us(fn, calls=max(10, calls // 10)),
                                           "loop_host_us": host_us(fn, calls=max(10, calls // 10), median=True)})
                    except Exception as e:  # noqa: BLE001 — a launch that fails here is data
                        rows.append(row | {"pdl": False, "error": _error(e)})
    finally:
        decode_plan.SPLIT_PDL, decode_plan.SPLIT_PDL_FROM_US = saved
        decode.clear_plans()
    return rows


def split_pdl_ab_markdown(rows: list[dict], gpu=None) -> list[str]:
    """Each arm's eager µs by round, its median over the CUDA graph's time, and the host's median time per call; with a
    GPU preset ``gpu`` the shape's roofline and the share of it the median eager call reaches."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), {}).setdefault(r["arm"], []).append(r)
    roof = gpu is not None
    lines = ["| B | H/Hkv | L | D | SPLIT_PDL | eager µs (by round) | graph µs | eager/graph | host µs/call |"
             + (" roofline µs | eager % |" if roof else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if roof else "")]
    for (B, H, Hkv, L, D), arms in groups.items():
        us = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=gpu) * 1e3 if roof else None
        for arm, rs in arms.items():
            graph = rs[0]["graph_us"]
            errors = sorted({r["error"] for r in rs if "error" in r})
            rs = [r for r in rs if "error" not in r]
            note = f" (failed: {errors[0]})" if errors else "" if arm == "False" or all(r["pdl"] for r in rs) \
                else " (not taken)"
            if not rs:
                lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {arm}{note} | — | {graph:.1f} | — | — |"
                             + (f" {us:.1f} | — |" if roof else ""))
                continue
            eager = statistics.median(r["eager_us"] for r in rs)
            lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {arm}{note} | {_rounds(rs, 'eager_us')} | {graph:.1f} | "
                         f"{eager / graph:.3f} | {statistics.median(r['loop_host_us'] for r in rs):.1f} |"
                         + (f" {us:.1f} | {percent(us / eager)} |" if roof else ""))
    return lines


def _trace(fn, calls: int) -> dict:
    """torch.profiler's CUDA trace (kernels and the runtime/driver calls that launched them) of ``calls`` calls of
    ``fn``, as its chrome-trace JSON."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def timeline_stats(trace: dict, skip: int = 10, match: str = "_decode_", first: str = "split") -> dict:
    """From a chrome trace of decode calls (split kernel, then merge kernel where there is one): the median µs of each
    kernel, of the gaps between them on the GPU (split end -> merge start, merge end -> the next split's start), of a
    call's period on the GPU (one split start to the next) and, where the trace has the launches, on the host (one
    split's launch to the next), and of the time from a split kernel's launch to its start (small: the GPU waited for
    the host; large: the host ran ahead). The first ``skip`` calls are left out. ``match``: what a kernel's name holds
    to count; ``first``: what the first kernel of a call's name holds."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and match in e.get("name", "")),
                     key=lambda e: e["ts"])
    launches = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                       and "aunch" in e.get("name", "")), key=lambda e: e["ts"])
    by_corr = {e.get("args", {}).get("correlation"): e for e in launches}
    splits = [k for k in kernels if first in k["name"]][skip:]
    merges = [k for k in kernels if "merge_kernel" in k["name"]]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    out = {"calls": len(splits), "split_us": med([k["dur"] for k in splits]),
           "merge_us": med([k["dur"] for k in merges[skip:]]) if merges else None,
           "gpu_period_us": med([b["ts"] - a["ts"] for a, b in zip(splits, splits[1:])])}
    if merges:
        starts = [m["ts"] for m in merges]
        after_split, after_merge = [], []
        for a, b in zip(splits, splits[1:]):
            m = next((t for t in starts if a["ts"] < t < b["ts"]), None)
            if m is None:
                continue
            mk = next(x for x in merges if x["ts"] == m)
            after_split.append(m - (a["ts"] + a["dur"]))
            after_merge.append(b["ts"] - (mk["ts"] + mk["dur"]))
        out["gap_split_merge_us"], out["gap_merge_split_us"] = med(after_split), med(after_merge)
    else:
        out["gap_split_split_us"] = med([b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(splits, splits[1:])])
    launched = [(by_corr.get(k.get("args", {}).get("correlation")), k) for k in splits]
    launched = [(lc, k) for lc, k in launched if lc is not None]
    if launched:
        out["host_period_us"] = med([b[0]["ts"] - a[0]["ts"] for a, b in zip(launched, launched[1:])])
        out["launch_to_start_us"] = med([k["ts"] - lc["ts"] for lc, k in launched])
    return out


def timeline_rows(calls: int = 200, pdl_modes=(None,)) -> list[dict]:
    """``timeline_stats`` of the library's default call, eager and replayed from a CUDA graph (50 calls a graph), on
    the batch-1 32K shapes; the eager call once per ``pdl_modes`` (``decode_plan.MERGE_PDL`` for it; None: as set),
    its rows' "mode" naming it."""
    from attnlab.gpu import decode, decode_plan

    rows = []
    saved = decode_plan.MERGE_PDL
    for shape in [s for s in SHAPES if s[0] == 1 and s[3] == 32768]:
        B, H, Hkv, L, D = shape
        fn = default_call(shape)

        for pdl in pdl_modes:
            try:
                if pdl is not None:
                    decode_plan.MERGE_PDL = pdl
                    decode.clear_plans()
                eager_us(fn, calls=50, rounds=1)  # warm: compiled, plans kept, the PDL merge built
                mode = "eager" if pdl is None else f"eager, MERGE_PDL={pdl}"
                rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "mode": mode,
                             **timeline_stats(_trace(fn, calls))})
            finally:
                decode_plan.MERGE_PDL = saved
                decode.clear_plans()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # three calls, as torch's docs warm up: the pair, then the in-kernel merge built
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(50):
                fn()
        g.replay()
        torch.cuda.synchronize()
        rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "mode": "graph",
                     **timeline_stats(_trace(g.replay, max(1, calls // 50)), skip=0)})
    # a reference: one torch kernel a call (an in-place multiply of 128 MB, ~50 µs), whose host work is a few µs, so
    # the host should run ahead of the GPU and its launch-to-start time grow call by call
    x = torch.ones(64 * 2**20, dtype=torch.bfloat16, device="cuda")
    for _ in range(20):
        x.mul_(1.0)
    rows.append({"B": 0, "H": 0, "Hkv": 0, "L": 0, "D": 0, "mode": "reference: x.mul_(1.0), 128 MB",
                 **timeline_stats(_trace(lambda: x.mul_(1.0), calls), match="elementwise", first="elementwise")})
    return rows


TIMELINE_COLS = (("split_us", "split kernel"), ("merge_us", "merge kernel"), ("gap_split_merge_us", "gap split→merge"),
                 ("gap_merge_split_us", "gap merge→next split"), ("gpu_period_us", "GPU period"),
                 ("host_period_us", "host period"), ("launch_to_start_us", "split launch→start"))


def timeline_markdown(rows: list[dict]) -> list[str]:
    head = "| B | H/Hkv | L | D | mode | calls | " + " | ".join(name for _, name in TIMELINE_COLS) + " |"
    lines = [head, "|" + "---|" * (6 + len(TIMELINE_COLS))]
    for r in rows:
        # a graph's kernels all come from one graph launch: no host period, no launch of their own
        host_cols = ("host_period_us", "launch_to_start_us") if r["mode"] == "graph" else ()
        cells = [f"{r[key]:.1f}" if r.get(key) is not None and key not in host_cols else "—" for key, _ in TIMELINE_COLS]
        shape = [str(r["B"]), f"{r['H']}/{r['Hkv']}", str(r["L"]), str(r["D"])] if r["B"] else ["—"] * 4
        lines.append("| " + " | ".join([*shape, r["mode"], str(r["calls"]), *cells]) + " |")
    return lines


ORDER_ARMS = (("chunks", 0), ("strided", 0), ("strided", 1), ("strided", 2))  # (decode_plan.SPLIT_ORDER, PREFETCH_TILES)


def order_arm(order: str, prefetch: int) -> str:
    return order if not prefetch else f"{order}+prefetch{prefetch}"


def order_ab_rows(rounds: int = 3, arms=ORDER_ARMS) -> list[dict]:
    """CUDA-graph µs of the library's default call with each way of dealing tiles to splits (``arms``:
    ``decode_plan.SPLIT_ORDER`` and ``PREFETCH_TILES``), with the lengths (all full, and at 1/32 of the cache on
    the first shape: a short sequence in a long cache, where prefetched tiles past the length are wasted) and
    without them, and cuDNN's call, in ``rounds`` rounds in one process, the arms' order rotating by one each
    round; each warm (one call's inputs every time) and L2-cold (``graph_cold_us``, ``full_graph_cold_us``: the
    calls on ``cache_copies`` in turn). Each arm's first call is checked against SDPA's math (``max_err``)."""
    from attnlab.gpu import decode, decode_plan

    saved = decode_plan.SPLIT_ORDER, decode_plan.PREFETCH_TILES
    rows = []
    cases = [(shape, shape[3]) for shape in SHAPES] + [(SHAPES[0], SHAPES[0][3] // 32)]

    def timed(name, fns) -> dict:
        return {name: graph_us(fns[0], calls=50), name.replace("graph", "graph_cold"): graph_us(fns, calls=50)}

    try:
        for shape, length in cases:
            B, H, Hkv, L, D = shape
            sets = cache_copies(shape)
            q, k, v, lens = sets[0]
            lens = torch.full_like(lens, length)
            ref = F.scaled_dot_product_attention(q.float(), k[:, :, :length].float(), v[:, :, :length].float(),
                                                 enable_gqa=True)
            mine = [lambda q=q, k=k, v=v, lens=lens: attnlab.flash_decode(q, k, v, cache_seqlens=lens) for q, k, v, _ in sets]
            full = [lambda q=q, k=k, v=v: attnlab.flash_decode(q, k, v) for q, k, v, _ in sets]
            peer = [sdpa_call(q, k, v, "CUDNN_ATTENTION") for q, k, v, _ in sets] if length == L else [None]
            for rnd in range(rounds):
                turn = list(arms[rnd % len(arms):]) + list(arms[:rnd % len(arms)])
                for order, prefetch in turn:
                    decode_plan.SPLIT_ORDER, decode_plan.PREFETCH_TILES = order, prefetch
                    decode.clear_plans()
                    err = (mine[0]()[0].float() - ref).abs().max().item()
                    row = {"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "length": length, "round": rnd,
                           "arm": order_arm(order, prefetch), "max_err": err, "copies": len(sets)}
                    row |= timed("graph_us", mine)
                    if length == L:
                        row |= timed("full_graph_us", full)
                    rows.append(row)
                if peer[0] is not None:
                    row = {"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "length": length, "round": rnd,
                           "arm": "sdpa-cudnn", "graph_us": graph_us(peer[0], calls=50)}
                    if None not in peer:
                        row |= {"copies": len(sets), "graph_cold_us": graph_us(peer, calls=50)}
                    rows.append(row)
            sets = mine = full = peer = None
            torch.cuda.empty_cache()
    finally:
        decode_plan.SPLIT_ORDER, decode_plan.PREFETCH_TILES = saved
        decode.clear_plans()
    return rows


def _error(e: BaseException) -> str:
    """An exception as a row records it: its type and the first line of its message, at most 200 characters."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:200]


KERNEL_ARMS = ("triton", "gluon")  # decode_config.GLUON_SPLIT off / on
# ... and each with the merge kernel on every call, eager and in graphs ("+merge": ``EAGER_FUSED_BELOW_US`` 0,
# ``GRAPH_FUSED_FROM_US`` inf: each split kernel with the merge kernel of its own kind, Triton's or Gluon's;
# ``--kernel-ab-merge``)
KERNEL_MERGE_ARMS = ("triton", "gluon", "triton+merge", "gluon+merge")
KERNEL_SWEEP = (16, 32, 64)  # the Gluon kernel's split counts swept on the batch-1 shapes (and the model's pick)
# the Gluon kernel's rings swept, by head dim: (keys a tile, tiles in the ring); the first is the library's (the large
# configuration's), the second as many bytes in flight per SM in another grain (smaller tiles, or one program per SM)
KERNEL_RINGS = {128: ((128, 3), (64, 5)), 64: ((128, 3), (128, 5))}


def kernel_ab_rows(calls: int, rounds: int = 3, sweep_counts=KERNEL_SWEEP, arms=KERNEL_ARMS) -> list[dict]:
    """Eager, CUDA-graph and L2-cold CUDA-graph µs of the library's default call with the lengths on every shape (all
    full, and on the first shape also at 1/32 of the cache: a short sequence in a long cache, where the Gluon kernel's
    copies issued before the length read tiles past it), with the Triton split kernel and with the Gluon one
    (``decode_config.GLUON_SPLIT``), in turns (reversed every other round) in ``rounds`` rounds in one process, and
    cuDNN's graphs every round (full caches). Each arm's first call is checked against SDPA's math (``max_err``), and
    its plan's kernel (``kernel``: a call the Gluon kernel does not take runs the Triton one) and split count are
    recorded. Then on each batch-1 shape, full, the Gluon kernel's CUDA-graph µs at ``sweep_counts`` splits and at the
    model's pick, for each ring of ``KERNEL_RINGS`` (rows with ``arm`` "gluon-sweep"): does the split model, calibrated
    on the Triton kernel, suit it, and does another grain of the same bytes in flight? ``arms`` may add each kernel
    with the merge kernel on every call ("triton+merge", "gluon+merge": ``KERNEL_MERGE_ARMS``), which separates the
    split kernels from the in-kernel merge; ``sweep_counts`` empty leaves the sweep out."""
    from attnlab.gpu import decode, decode_config, decode_plan

    saved = decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US
    rows = []
    try:
        for shape, length in [(s, s[3]) for s in SHAPES] + [(SHAPES[0], SHAPES[0][3] // 32)]:
            B, H, Hkv, L, D = shape
            base = {"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "length": length}
            sets = cache_copies(shape)
            q, k, v, lens = sets[0]
            lens = torch.full_like(lens, length)
            ref = F.scaled_dot_product_attention(q.float(), k[:, :, :length].float(), v[:, :, :length].float(),
                                                 enable_gqa=True)
            mine = [lambda q=q, k=k, v=v, lens=lens: attnlab.flash_decode(q, k, v, cache_seqlens=lens)
                    for q, k, v, _ in sets]
            peer = [sdpa_call(q, k, v, "CUDNN_ATTENTION") for q, k, v, _ in sets] if length == L else [None]
            for rnd in range(rounds):
                for arm in turns(arms, rnd):
                    decode_config.GLUON_SPLIT = arm.startswith("gluon")
                    merge_kernel = arm.endswith("+merge")
                    decode_plan.EAGER_FUSED_BELOW_US = 0 if merge_kernel else saved[1]
                    decode_plan.GRAPH_FUSED_FROM_US = math.inf if merge_kernel else saved[2]
                    decode.clear_plans()
                    try:
                        err = (mine[0]()[0].float() - ref).abs().max().item()
                        plan = next(iter(decode_plan._PLANS.values()))
                        rows.append(base | {"arm": arm, "round": rnd, "kernel": plan.cfg.kernel,
                                            "splits": plan.num_splits, "max_err": err, "copies": len(sets),
                                            "eager_us": eager_us(mine[0], calls=max(10, calls // 10)),
                                            "graph_us": graph_us(mine[0], calls=50),
                                            "graph_cold_us": graph_us(mine, calls=50)})
                    except Exception as e:  # noqa: BLE001 — a kernel that fails to build or run here is data
                        rows.append(base | {"arm": arm, "round": rnd, "error": _error(e)})
                if None not in peer:
                    rows.append(base | {"arm": "sdpa-cudnn", "round": rnd, "copies": len(sets),
                                        "graph_us": graph_us(peer[0], calls=50), "graph_cold_us": graph_us(peer, calls=50)})
            decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
            for block_n, ring in KERNEL_RINGS.get(D, ()) if B == 1 and length == L and sweep_counts else ():
                cfg = replace(decode.decode_configs(D)["large"], kernel="gluon", block_n=block_n, num_stages=ring)
                picked = decode.choose_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=D, device=q.device, config=cfg)
                sweep = base | {"arm": "gluon-sweep", "block_n": block_n, "ring": ring, "copies": len(sets)}
                for S in sorted({*sweep_counts, picked}):
                    fns = [lambda q=q, k=k, v=v, lens=lens, S=S, cfg=cfg: decode.flash_decode_triton(
                        q, k, v, cache_seqlens=lens, num_splits=S, config=cfg) for q, k, v, _ in sets]
                    try:
                        fns[0]()
                        rows.append(sweep | {"splits": S, "picked": S == picked, "graph_us": graph_us(fns[0], calls=50),
                                             "graph_cold_us": graph_us(fns, calls=50)})
                    except Exception as e:  # noqa: BLE001 — a ring or a device the Gluon kernel does not take: data
                        rows.append(sweep | {"error": _error(e)})
                        break
            sets = mine = peer = None
            torch.cuda.empty_cache()
    finally:
        decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US = saved
        decode.clear_plans()
    return rows


def kernel_ab_markdown(rows: list[dict], gpu=None) -> list[str]:
    """The two split kernels' µs by round, their medians against cuDNN's (cuDNN µs / arm µs: above 1 is faster than
    cuDNN), warm and L2-cold, and with a GPU preset ``gpu`` the shape's roofline and the share of it each arm's median
    L2-cold graph reaches; then the Gluon kernel's split sweep (* the model's pick)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"], r.get("length", r["L"])), {}).setdefault(
            r["arm"], []).append(r)
    roof = gpu is not None
    lines = ["| B | H/Hkv | L | D | keys | arm | kernel, splits | eager µs (by round) | graph µs (by round) | × cuDNN | "
             "L2-cold graph µs | × cuDNN | max err |" + (" roofline µs | L2-cold % |" if roof else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if roof else "")]

    def med(rs, key):
        xs = [r[key] for r in rs if key in r]
        return statistics.median(xs) if xs else None

    def times(c, m) -> str:
        return f"{c / m:.3f}" if c and m else "—"

    sweeps = []
    for (B, H, Hkv, L, D, length), arms in groups.items():
        c, c_cold = med(arms.get("sdpa-cudnn", []), "graph_us"), med(arms.get("sdpa-cudnn", []), "graph_cold_us")
        for arm, rs in arms.items():
            if arm == "gluon-sweep":
                rings: dict = {}
                for r in rs:
                    rings.setdefault((r["block_n"], r["ring"]), []).append(r)
                for (block_n, ring), rr in rings.items():
                    cells = ", ".join(f"{r['splits']}{'*' if r['picked'] else ''}: {r['graph_us']:.1f} / "
                                      f"{r['graph_cold_us']:.1f}" if "error" not in r else f"refused: {r['error']}"
                                      for r in rr)
                    sweeps.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {block_n} × {ring} | {cells} |")
                continue
            ran = sorted({f"{r['kernel']}, {r['splits']}" for r in rs if "kernel" in r})
            ran = ran + sorted({f"failed ({r['error']})" for r in rs if "error" in r}) or ["—"]
            err = max((r["max_err"] for r in rs if "max_err" in r), default=None)
            mine = arm != "sdpa-cudnn"
            line = (f"| {B} | {H}/{Hkv} | {L} | {D} | {length} | {arm} | {'; '.join(ran)} | {_rounds(rs, 'eager_us')} | "
                    f"{_rounds(rs, 'graph_us')} | {times(c, med(rs, 'graph_us')) if mine else '—'} | "
                    f"{_rounds(rs, 'graph_cold_us')} | {times(c_cold, med(rs, 'graph_cold_us')) if mine else '—'} | "
                    f"{f'{err:.1e}' if err is not None else '—'} |")
            if roof:
                us = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=length, head_dim=D, gpu=gpu) * 1e3
                cold = med(rs, "graph_cold_us")
                line += f" {us:.1f} | {percent(us / cold if cold else None)} |"
            lines.append(line)
    if sweeps:
        lines += ["", "The Gluon kernel's CUDA-graph µs by split count, L2-warm / L2-cold (* the split model's pick), for each "
                      "ring (keys a tile × tiles):", "",
                  "| B | H/Hkv | L | D | ring | µs by split count |", "|---|---|---|---|---|---|", *sweeps]
    return lines


def order_ab_markdown(rows: list[dict]) -> list[str]:
    """The arms' CUDA-graph µs by round and their medians' ratio to cuDNN's (cuDNN µs / arm µs: above 1 is
    faster than cuDNN), with the lengths and without."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["length"]), {}).setdefault(r["arm"], []).append(r)
    cold = any("graph_cold_us" in r for r in rows)
    lines = ["| B | H/Hkv | L | D | keys | arm | graph µs, lengths (by round) | × cuDNN | graph µs, no lengths | × cuDNN "
             "| max err |" + (" L2-cold, lengths | × cuDNN | L2-cold, no lengths | × cuDNN |" if cold else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 4 if cold else "")]

    def by_round(rs, key) -> tuple[str, float | None]:
        xs = [r[key] for r in rs if key in r]
        return _rounds(rs, key), statistics.median(xs) if xs else None

    def ratio(c, m, arm) -> str:
        return f"{c / m:.3f}" if c and m and arm != "sdpa-cudnn" else "—"

    for (B, H, Hkv, L, D, length), arms in groups.items():
        cudnn = arms.get("sdpa-cudnn", [])
        _, c = by_round(cudnn, "graph_us")
        _, c_cold = by_round(cudnn, "graph_cold_us")
        for arm, rs in arms.items():
            mine, m = by_round(rs, "graph_us")
            full, f = by_round(rs, "full_graph_us")
            err = max((r["max_err"] for r in rs if "max_err" in r), default=None)
            line = (f"| {B} | {H}/{Hkv} | {L} | {D} | {length} | {arm} | {mine} | {f'{c / m:.3f}' if c else '—'} | "
                    f"{full} | {ratio(c, f, arm)} | {f'{err:.1e}' if err is not None else '—'} |")
            if cold:
                (mine, m), (full, f) = by_round(rs, "graph_cold_us"), by_round(rs, "full_graph_cold_us")
                line += (f" {mine} | {f'{c_cold / m:.3f}' if c_cold and m else '—'} | {full} | "
                         f"{ratio(c_cold, f, arm)} |")
            lines.append(line)
    return lines


MERGE_ARMS = (("merge kernel", False, 1), ("merge kernel", False, None), ("in-kernel", True, 1),
              ("in-kernel", True, None))  # (merge, decode_config.FUSED_MERGE, decode_plan.MERGE_ROWS)


def merge_arm(merge: str, rows) -> str:
    return f"{merge}, {'1 row' if rows == 1 else 'rows' if rows is None else f'{rows} rows'}"


def _arm_rows(calls: int, rounds: int, arms, use) -> list[dict]:
    """CUDA-graph and eager µs of the library's default call (with the lengths) on every shape with each of ``arms``
    ((name, setting) pairs; ``use(setting)`` puts one in force), and cuDNN's call, in ``rounds`` rounds in one process,
    the arms' order reversed every other round (``turns``); each warm (one call's inputs every time) and L2-cold
    (``graph_cold_us``, ``eager_cold_us``: the calls on ``cache_copies`` in turn, as ``speed_rows``). Each arm's first
    call is checked against SDPA's math (``max_err``) and against the round's first arm bit for bit (``same_bits``);
    ``graph_fused``: whether its graphs merged in the split kernel (a graph is captured on a stream of its own from the
    warm-up stream's plan, so any kept plan's handed-out counter sets say so)."""
    from attnlab.gpu import decode, decode_plan

    rows = []
    for shape in SHAPES:
        B, H, Hkv, L, D = shape
        sets = cache_copies(shape)
        q, k, v, lens = sets[0]
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        peer = [sdpa_call(q, k, v, "CUDNN_ATTENTION") for q, k, v, _lens in sets]
        mine = [lambda q=q, k=k, v=v, lens=lens: attnlab.flash_decode(q, k, v, cache_seqlens=lens)
                for q, k, v, lens in sets]

        def times(fns) -> dict:  # (a backend that refuses a copy it took the first time: warm times only)
            t = {"graph_us": graph_us(fns[0], calls=50), "eager_us": eager_us(fns[0], calls=calls // 10)}
            if None not in fns:
                t |= {"copies": len(fns), "graph_cold_us": graph_us(fns, calls=50),
                      "eager_cold_us": eager_us(fns, calls=calls // 10)}
            return t

        for rnd in range(rounds):
            first = None
            for name, setting in turns(arms, rnd):
                use(setting)
                decode.clear_plans()
                out = mine[0]()[0]
                plan = next(iter(decode_plan._PLANS.values()))
                same = None if first is None else bool(torch.equal(out, first))
                first = out if first is None else first
                timed = times(mine)
                fused = any(p.graph_slots is not None and p.graph_slots.next > 0 for p in decode_plan._PLANS.values())
                rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "round": rnd, "arm": name,
                             "merge": plan.merge, "rows": plan.rows, "splits": plan.num_splits, "graph_fused": fused,
                             "max_err": (out.float() - ref).abs().max().item(), "same_bits": same} | timed)
            if peer[0] is not None:
                rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "round": rnd, "arm": "sdpa-cudnn"}
                            | times(peer))
        sets = mine = peer = first = out = None
        torch.cuda.empty_cache()
    return rows


def merge_ab_rows(calls: int, rounds: int = 3, arms=MERGE_ARMS) -> list[dict]:
    """``_arm_rows`` with each way of merging the splits (``arms``: the merge kernel, or the group's last program in the
    split kernel, on every call — ``decode_config.FUSED_MERGE``, with ``EAGER_FUSED_BELOW_US`` at 0 — each with one
    query row per round trip or ``merge_rows``' count)."""
    from attnlab.gpu import decode, decode_config, decode_plan

    def use(setting):
        decode_config.FUSED_MERGE, decode_plan.MERGE_ROWS = setting
        decode_config._decode_configs.cache_clear()

    saved = decode_config.FUSED_MERGE, decode_plan.MERGE_ROWS, decode_plan.EAGER_FUSED_BELOW_US
    try:
        decode_plan.EAGER_FUSED_BELOW_US = 0.0
        return _arm_rows(calls, rounds, [(merge_arm(m, r), (f, r)) for m, f, r in arms], use)
    finally:
        decode_config.FUSED_MERGE, decode_plan.MERGE_ROWS, decode_plan.EAGER_FUSED_BELOW_US = saved
        decode_config._decode_configs.cache_clear()
        decode.clear_plans()


GRAPH_MERGE_ARMS = (("graphs: in-kernel merge", None), ("graphs: merge kernel", float("inf")))


def graph_merge_ab_rows(calls: int, rounds: int = 3, arms=GRAPH_MERGE_ARMS) -> list[dict]:
    """``_arm_rows`` with CUDA graphs of large calls merging in the split kernel (``decode_plan.GRAPH_FUSED_FROM_US`` as
    shipped: None) and by the merge kernel (inf)."""
    from attnlab.gpu import decode, decode_plan

    saved = decode_plan.GRAPH_FUSED_FROM_US

    def use(bound):
        decode_plan.GRAPH_FUSED_FROM_US = saved if bound is None else bound

    try:
        return _arm_rows(calls, rounds, arms, use)
    finally:
        decode_plan.GRAPH_FUSED_FROM_US = saved
        decode.clear_plans()


def merge_ab_markdown(rows: list[dict]) -> list[str]:
    """Each arm's CUDA-graph and eager µs by round, their medians' ratio to cuDNN's (cuDNN µs / arm µs: above 1 is
    faster than cuDNN), eager over graph, the rows per round trip, and the output checks."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), {}).setdefault(r["arm"], []).append(r)
    cold = any("graph_cold_us" in r for r in rows)
    lines = ["| B | H/Hkv | L | D | arm | rows | graph µs (by round) | × cuDNN | eager µs (by round) | × cuDNN | "
             "eager / graph | max err | bits as arm 1 |"
             + (" L2-cold graph µs | × cuDNN | L2-cold eager µs | × cuDNN | eager / graph |" if cold else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 5 if cold else "")]

    def median(rs, key) -> float | None:
        xs = [r[key] for r in rs if key in r]
        return statistics.median(xs) if xs else None

    for (B, H, Hkv, L, D), arms in groups.items():
        cudnn = arms.get("sdpa-cudnn", [])
        cg, ce = median(cudnn, "graph_us"), median(cudnn, "eager_us")
        cgc, cec = median(cudnn, "graph_cold_us"), median(cudnn, "eager_cold_us")
        for arm, rs in arms.items():
            g, e = median(rs, "graph_us"), median(rs, "eager_us")
            peer = arm == "sdpa-cudnn"
            same = [r["same_bits"] for r in rs if r.get("same_bits") is not None]
            graphs = " / ".join(f"{r['graph_us']:.2f}" for r in rs)
            eagers = " / ".join(f"{r['eager_us']:.2f}" for r in rs)
            err = "—" if peer else f"{max(r['max_err'] for r in rs):.1e}"
            bits = "—" if peer or not same else ("yes" if all(same) else "no")
            line = (f"| {B} | {H}/{Hkv} | {L} | {D} | {arm} | {'—' if peer else rs[0]['rows']} | {graphs} | "
                    f"{f'{cg / g:.3f}' if cg and not peer else '—'} | {eagers} | "
                    f"{f'{ce / e:.3f}' if ce and not peer else '—'} | {e / g:.2f} | {err} | {bits} |")
            if cold:
                gc, ec = median(rs, "graph_cold_us"), median(rs, "eager_cold_us")
                line += (f" {_rounds(rs, 'graph_cold_us')} | {f'{cgc / gc:.3f}' if cgc and gc and not peer else '—'} | "
                         f"{_rounds(rs, 'eager_cold_us')} | {f'{cec / ec:.3f}' if cec and ec and not peer else '—'} | "
                         f"{f'{ec / gc:.2f}' if ec and gc else '—'} |")
            lines.append(line)
    return lines


def _rounds(rows, key) -> str:
    """``key``'s values of ``rows`` that have it, by round ("a / b / c"), or "—"."""
    return " / ".join(f"{r[key]:.2f}" for r in rows if key in r) or "—"


def sweep_rows() -> list[dict]:
    """CUDA-graph µs of the small-batch shapes for each configuration and split count, beside the
    split count the model picks: is a gap to cuDNN the kernel or the choice? Each call L2-warm
    (``graph_us``: the same inputs every call) and L2-cold (``graph_cold_us``: over ``copies`` copies of
    them in turn, as ``speed_rows``)."""
    from attnlab.gpu import decode

    rows = []
    for shape in SHAPES:
        B, H, Hkv, L, D = shape
        if B > 1:
            continue
        nbytes = cache_bytes(shape)
        ins = cache_copies(shape)
        copies, q = len(ins), ins[0][0]
        for name, cfg in decode.decode_configs(D).items():
            picked = decode.choose_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=D, device=q.device, config=cfg)
            ocfg = replace(cfg, fused_merge=not cfg.fused_merge)
            # the same calls with the other merge (the fused one, or the merge kernel) in the same run, fewer counts
            for c, label, counts in ((cfg, name, {4, 8, 12, 16, 24, 32, 48, 64, picked}),
                                     (ocfg, f"{name}, {'fused merge' if ocfg.fused_merge else 'merge kernel'}",
                                      {16, 32, picked})):
                for S in sorted(counts):
                    fns = [lambda q=q, k=k, v=v, S=S, c=c: decode.flash_decode_triton(q, k, v, num_splits=S, config=c)
                           for q, k, v, _ in ins]
                    us, cold = graph_us(fns[0], calls=50), graph_us(fns, calls=50)
                    rows.append({"B": B, "H": H, "Hkv": Hkv, "L": L, "D": D, "config": label,
                                 "config_key": list(c.key), "fused_merge": c.fused_merge, "splits": S,
                                 "picked": S == picked, "graph_us": us, "graph_tb_per_s": nbytes / us / 1e6,
                                 "copies": copies, "graph_cold_us": cold, "graph_cold_tb_per_s": nbytes / cold / 1e6})
        ins = None
        torch.cuda.empty_cache()
    return rows


def with_roofline(result: dict, gpu) -> dict:
    """Every speed row of ``result`` with ``roofline_ms`` (``attnlab.cost.decode.decode_roofline`` of its
    shape on ``gpu``, the preset matching the run's GPU), ``of_roofline`` (eager) and ``graph_of_roofline``
    (CUDA graph), and where the row has L2-cold times ``cold_of_roofline`` and ``graph_cold_of_roofline``: the
    share of the physical limit each call reaches. ``gpu`` None (no preset): unchanged."""
    if gpu is not None:
        for r in result["speed"]:
            r.setdefault("ms", r["eager_us"] * 1e-3)
            r.setdefault("graph_ms", r["graph_us"] * 1e-3)
            if "graph_cold_us" in r:
                r.setdefault("cold_ms", r["eager_cold_us"] * 1e-3)
                r.setdefault("graph_cold_ms", r["graph_cold_us"] * 1e-3)
            add_fraction(r, decode_roofline_ms(batch=r["B"], heads=r["H"], kv_heads=r["Hkv"], seq=r["L"],
                                               head_dim=r["D"], gpu=gpu),
                         measured=(("ms", "of_roofline"), ("graph_ms", "graph_of_roofline"),
                                   ("cold_ms", "cold_of_roofline"), ("graph_cold_ms", "graph_cold_of_roofline")))
        result["roofline_gpu"] = gpu.name
    return result


def markdown(result: dict) -> str:
    gpu = preset_for(result.get("gpu"))
    result = with_roofline(result, gpu)
    merged = ", splits merged inside the split kernel" if result.get("fused_merge") else ""
    if "eager_fused_below_us" in result:
        below = result["eager_fused_below_us"]  # None: no bound (every eager call)
        merged += (", eager calls merge inside the split kernel" if below is None else
                   f", eager calls reading K/V in under {below:g} µs merge inside the split kernel" if below > 0
                   else ", eager calls launch the merge kernel")
    if result.get("gluon_split"):
        merged += ", the Gluon split kernel for contiguous caches"
    if result.get("native"):
        merged += ", every kept call through the native decode call"
    if result.get("split_pdl"):
        mode = " (trigger)" if result["split_pdl"] == "trigger" else ""
        if result.get("split_pdl_every_read"):  # (runs from v40 on: the native call's plans, every read)
            merged += f", every eager split kernel launched as a dependent launch{mode}"
        else:
            merged += (f", eager split kernels reading K/V for {result['split_pdl_from_us']:g} µs or more launched "
                       f"as dependent launches{mode}")
    lines = [f"{result['gpu']}, torch {result['torch']}, triton {result['triton']}, bf16{merged}", "",
             "| floor | host µs/call |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in result["floors"].items()]
    B, H, Hkv, L, D = TINY
    gpu_us = result.get("tiny_gpu_us")
    premise = ("GPU time far below it" if gpu_us is None else
               f"its GPU time {gpu_us:.1f} µs a call, the kept call's calls in one CUDA graph")
    spread = any("rounds_us" in r for r in result["host"])
    lines += ["", f"Host time per call at B={B}, H={H}/{Hkv}, L={L}, D={D} ({premise}):", "",
              "| call | host µs/call |" + (" slowest round / best |" if spread else ""),
              "|---|---|" + ("---|" if spread else "")]
    lines += [f"| {r['call']} | {r['host_us']:.1f} |"
              + (f" {max(r['rounds_us']) / r['host_us']:.2f} |" if "rounds_us" in r else " – |" if spread else "")
              for r in result["host"]]
    if gpu_us is not None and (kept := [r["host_us"] for r in result["host"] if r["call"] == KEPT_ROW]) \
            and gpu_us > GPU_SHARE * kept[0]:
        lines += ["", f"The kept call's GPU time is more than {GPU_SHARE:.0%} of its host time here: the loop may "
                      "have waited for the GPU, and its host rows then read the GPU's pace, not the host's."]
    if result.get("per_call"):
        lines += ["", "The same calls timed one at a time, alternating call by call (the loop's mean above carries the "
                      "host's stalls into every call; the median of single calls leaves the rare ones out):", "",
                  "| call | median µs | p10 µs | p90 µs | mean µs |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {r['median_us']:.1f} | {r['p10_us']:.1f} | {r['p90_us']:.1f} | {r['mean_us']:.1f} |"
                  for name, r in result["per_call"].items()]
    roof = gpu is not None
    if roof:
        lines += ["", f"Beside each call: the roofline of its shape on {preset_text(gpu)} (the K/V cache read once "
                      "at HBM bandwidth) and the share of it the eager and the CUDA-graph call reach."]
    lines += ["", "| B | H/Hkv | L | D | provider | eager µs | graph µs | eager/graph | eager TB/s | graph TB/s |"
              + (" roofline µs | eager % | graph % |" if roof else ""),
              "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if roof else "")]
    lines += [f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {r['provider']} | {r['eager_us']:.1f} | "
              f"{r['graph_us']:.1f} | {r['eager_over_graph']:.2f} | {r['eager_tb_per_s']:.2f} | "
              f"{r['graph_tb_per_s']:.2f} |"
              + (f" {r['roofline_ms'] * 1e3:.1f} | {percent(r.get('of_roofline'))} | "
                 f"{percent(r.get('graph_of_roofline'))} |" if roof else "") for r in result["speed"]]
    loops = [r for r in result["speed"] if "loop_host_us" in r]
    if loops:
        lines += ["", "Who sets the eager pace: the host's time per call in the same loop of eager calls, timed before "
                      "its sync (near the eager time where the GPU waits for the host, below it where the host runs "
                      "ahead), against the CUDA graph's time:", "",
                  "| B | H/Hkv | L | D | provider | host µs | eager µs | graph µs | host/graph | pace |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {r['provider']} | "
                  f"{r['loop_host_us']:.1f} | {r['eager_us']:.1f} | {r['graph_us']:.1f} | "
                  f"{r['loop_host_us'] / r['graph_us']:.2f} | {eager_pace(r)} |" for r in loops]
    cold = [r for r in result["speed"] if "graph_cold_us" in r]
    if cold:
        lines += ["", "The same calls L2-cold: each call on the next of several copies of the K/V cache (one pass over "
                      "them at least 3× the L2), so that its K/V come from HBM" + (", against the same roofline" if roof else "")
                  + ":", "",
                  "| B | H/Hkv | L | D | provider | copies | eager µs | graph µs | eager/graph | graph TB/s |"
                  + (" eager % | graph % |" if roof else ""),
                  "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if roof else "")]
        lines += [f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {r['provider']} | {r['copies']} | "
                  f"{r['eager_cold_us']:.1f} | {r['graph_cold_us']:.1f} | {r['eager_cold_over_graph']:.2f} | "
                  f"{r['graph_cold_tb_per_s']:.2f} |"
                  + (f" {percent(r.get('cold_of_roofline'))} | {percent(r.get('graph_cold_of_roofline'))} |"
                     if roof else "") for r in cold]
    if result.get("pdl"):
        lines += ["", "The merge kernel launched plainly and as a programmatic dependent launch (PDL), two rounds:", "",
                  "| B | H/Hkv | L | D | PDL | round | graph µs | eager µs |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {PDL_NAMES[r['pdl']]} | "
                  f"{r['round'] + 1} | {r['graph_us']:.1f} | {r['eager_us']:.1f} |" for r in result["pdl"]]
    if result.get("eager_ab"):
        lines += ["", "Eager calls merging in the split kernel where `EAGER_FUSED_BELOW_US` says so (on) and with the "
                      "merge kernel on every call (off), alternating; µs per call by round (host µs at the tiny shape):",
                  "",
                  "| B | H/Hkv | L | D | fused when on | on | off |", "|---|---|---|---|---|---|---|"]
        groups: dict = {}
        for r in result["eager_ab"]:
            groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), []).append(r)
        for (B, H, Hkv, L, D), rs in groups.items():
            on = " / ".join(f"{r['us']:.1f}" for r in rs if r["eager_fused"])
            off = " / ".join(f"{r['us']:.1f}" for r in rs if not r["eager_fused"])
            fused = any(r["fused"] for r in rs if r["eager_fused"])
            lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {'yes' if fused else 'no'} | {on} | {off} |")
    if result.get("timeline"):
        lines += ["", "Where an eager call's time goes on the GPU and the host (torch.profiler's CUDA trace, medians in µs; "
                      "the graph rows replay 50 calls a graph):", ""]
        lines += timeline_markdown(result["timeline"])
    if result.get("trigger_ab"):
        lines += ["", "The split kernel letting the merge kernel's dependent launch start as every split program has "
                      "started (trigger on) or not (off), alternating; µs per call by round:", "",
                  "| B | H/Hkv | L | D | eager, on | eager, off | graph, on | graph, off |", "|---|---|---|---|---|---|---|---|"]
        groups = {}
        for r in result["trigger_ab"]:
            groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), []).append(r)
        for (B, H, Hkv, L, D), rs in groups.items():
            cell = lambda on, key, rs=rs: " / ".join(f"{r[key]:.1f}" for r in rs if r["trigger"] == on)  # noqa: E731
            note = "" if any(r["in_kernel"] for r in rs) else " (no trigger built)"
            lines.append(f"| {B} | {H}/{Hkv} | {L} | {D}{note} | {cell(True, 'eager_us')} | {cell(False, 'eager_us')} | "
                         f"{cell(True, 'graph_us')} | {cell(False, 'graph_us')} |")
    if result.get("split_pdl_ab"):
        lines += ["", "Eager calls with the split kernel launched plainly or as a programmatic dependent launch (waiting "
                      "first; \"trigger\": also letting the next launch start early), arms in turns:", ""]
        lines += split_pdl_ab_markdown(result["split_pdl_ab"], gpu)
    if result.get("kernel_ab"):
        lines += ["", "The Triton split kernel and the Gluon one (each split's first tiles copied before the length "
                      "arrives), the lengths passed; arms in turns, cuDNN in every round:", ""]
        lines += kernel_ab_markdown(result["kernel_ab"], gpu)
    if result.get("order_ab"):
        lines += ["", "Tiles dealt to splits in one run each (chunks) or in turn (strided), and strided with each split's "
                      "first tiles prefetched into L2 before the length arrives; CUDA graphs, arms in turns:", ""]
        lines += order_ab_markdown(result["order_ab"])
    if result.get("merge_ab"):
        lines += ["", "The splits merged by the merge kernel or by the group's last program in the split kernel, one "
                      "query row per round trip or several; arms in turns, cuDNN in every round:", ""]
        lines += merge_ab_markdown(result["merge_ab"])
    if result.get("graph_merge_ab"):
        lines += ["", "CUDA graphs of large calls merging in the split kernel (each captured call with counters of its "
                      "own) or by the merge kernel; arms in turns, cuDNN in every round:", ""]
        lines += merge_ab_markdown(result["graph_merge_ab"])
    if result.get("sweep"):
        cold = any("graph_cold_us" in r for r in result["sweep"])
        lines += ["", "CUDA-graph µs per split count and configuration (* the model's pick"
                  + ("; L2-warm / L2-cold" if cold else "") + "):", ""]
        groups: dict = {}
        for r in result["sweep"]:
            groups.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["config"]), []).append(r)
        lines += ["| B | H/Hkv | L | D | config | µs by split count |", "|---|---|---|---|---|---|"]
        for (B, H, Hkv, L, D, cfg), rs in groups.items():
            cells = ", ".join(f"{r['splits']}{'*' if r['picked'] else ''}: {r['graph_us']:.1f}"
                              + (f" / {r['graph_cold_us']:.1f}" if "graph_cold_us" in r else "") for r in rs)
            lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {cfg} | {cells} |")
    return "\n".join(lines) + "\n"


def _split_pdl() -> dict:
    """``decode_plan.SPLIT_PDL`` and ``SPLIT_PDL_FROM_US`` as the JSON records them, and whether the threshold
    holds (it does not where the native call is on: its plans take the dependent launch for every read)."""
    from attnlab.gpu import decode_plan, native

    return {"split_pdl": decode_plan.SPLIT_PDL, "split_pdl_from_us": decode_plan.SPLIT_PDL_FROM_US,
            "split_pdl_every_read": bool(native.ENABLED or decode_plan.SPLIT_PDL_FROM_US <= 0)}


def _eager_fused_below() -> float | None:
    """``decode_plan.EAGER_FUSED_BELOW_US`` as the JSON records it: None where it has no bound (inf)."""
    from attnlab.gpu import decode_plan

    below = decode_plan.EAGER_FUSED_BELOW_US
    return None if below == float("inf") else below


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument("--md", type=Path, help="write the tables as markdown here")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every configuration and split count on the batch-1 shapes (CUDA graphs)")
    ap.add_argument("--pdl-ab", action="store_true",
                    help="also time the batch-1 shapes with the merge kernel launched plainly and as a PDL launch")
    ap.add_argument("--eager-ab", action="store_true",
                    help="also time eager calls with and without the in-kernel merge for small reads, alternating")
    ap.add_argument("--timeline", action="store_true",
                    help="also trace eager and graph-replayed calls at 32K (torch.profiler): kernel times, the gaps "
                         "between them, and the host's period")
    ap.add_argument("--timeline-pdl", action="store_true",
                    help="with --timeline: trace the eager calls with the merge kernel's eager launch a PDL and plain")
    ap.add_argument("--trigger-ab", action="store_true",
                    help="also time eager and CUDA-graph calls with the split kernel's early launch_dependents and "
                         "without it, alternating")
    ap.add_argument("--order-ab", action="store_true",
                    help="also time the ways of dealing tiles to splits (chunks, strided, strided with prefetch) under "
                         "CUDA graphs, in turns, with cuDNN in every round")
    ap.add_argument("--kernel-ab-merge", action="store_true",
                    help="also time the two split kernels in turns each with its in-kernel merge and with the merge "
                         "kernel on every call (which leaves the split kernels alone to differ), without the sweep")
    ap.add_argument("--kernel-ab", action="store_true",
                    help="also time the Triton split kernel against the Gluon one (decode_config.GLUON_SPLIT) eagerly "
                         "and under CUDA graphs, in turns, with cuDNN in every round, and sweep the Gluon kernel's split "
                         "counts on the batch-1 shapes")
    ap.add_argument("--split-pdl-ab", action="store_true",
                    help="also time eager calls with the split kernel launched plainly and as a programmatic dependent "
                         "launch (decode_plan.SPLIT_PDL), in turns")
    path = ap.add_mutually_exclusive_group()
    path.add_argument("--native", action="store_true",
                      help="every kept call through the native decode call (attnlab.gpu.native; the library's default "
                           "where its module builds): fail where it does not build")
    path.add_argument("--python-path", action="store_true",
                      help="every call on the Python path, the native decode call off (ATTNLAB_NATIVE_DECODE=0)")
    ap.add_argument("--split-pdl", choices=("off", "on", "trigger"), default=None,
                    help="the split kernel's eager launch (decode_plan.SPLIT_PDL; default: the library's, on)")
    ap.add_argument("--gluon-split", action="store_true",
                    help="run with the Gluon split kernel by default (decode_config.GLUON_SPLIT) for contiguous caches")
    ap.add_argument("--merge-ab", action="store_true",
                    help="also time the merge kernel and the in-kernel merge, one query row per round trip or several, "
                         "under CUDA graphs and eagerly, in turns, with cuDNN in every round")
    ap.add_argument("--graph-merge-ab", action="store_true",
                    help="also time CUDA graphs of large calls merging in the split kernel and by the merge kernel, in "
                         "turns, with cuDNN in every round")
    ap.add_argument("--report", type=Path, metavar="JSON",
                    help="print the tables of a recorded run (with the roofline columns; no GPU needed) and exit")
    ap.add_argument("--fused-merge", action="store_true",
                    help="run with the splits merged inside the split kernel by default (one launch per call; "
                         "decode_config.FUSED_MERGE) instead of by the merge kernel")
    ap.add_argument("--eager-fused-below", type=float, metavar="US",
                    help="decode_plan.EAGER_FUSED_BELOW_US for this run: eager calls whose K/V read takes less "
                         "than US µs at the GPU's bandwidth merge in the split kernel (0: never; inf: every call, the default)")
    ap.add_argument("--breakdown", action="store_true",
                    help="only the steps of a kept plan's call, each timed alone in interleaved rounds, and a "
                         "cProfile of planned calls (no floors, no speed rows)")
    ap.add_argument("--breakdown-shape", type=int, nargs=5, metavar=("B", "H", "HKV", "L", "D"),
                    help=f"with --breakdown: the shape (default {' '.join(map(str, TINY))}); where its GPU time exceeds "
                         "the host's, lower --calls (e.g. 200) so that a loop never fills the GPU's queue")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of calls that find no plan (a cache that grows every call)")
    args = ap.parse_args(argv)
    if args.report is not None:
        if not args.report.is_file():
            ap.error(f"--report: no such file: {args.report}")
        try:
            recorded = json.loads(args.report.read_text())
        except ValueError as e:
            ap.error(f"--report: {args.report} is not JSON ({e})")
        if not isinstance(recorded, dict) or not {"gpu", "floors", "host", "speed"} <= recorded.keys():
            ap.error(f"--report: {args.report} is not a decode_host.py run (no gpu/floors/host/speed)")
        print(markdown(recorded), end="")
        return 0
    if args.calls < 10:
        ap.error(f"--calls must be at least 10, got {args.calls}")
    for path in (args.json, args.md):
        if path is not None and path.exists():
            ap.error(f"{path} exists; not overwriting it")
    if args.eager_fused_below is not None:
        if not args.eager_fused_below >= 0:
            ap.error(f"--eager-fused-below must be >= 0, got {args.eager_fused_below}")
        from attnlab.gpu import decode_plan

        decode_plan.EAGER_FUSED_BELOW_US = args.eager_fused_below
    if args.fused_merge:
        from attnlab.gpu import decode_config

        decode_config.FUSED_MERGE = True
        decode_config._decode_configs.cache_clear()
    if args.gluon_split:
        from attnlab.gpu import decode_config

        decode_config.GLUON_SPLIT = True
    from attnlab.gpu import native

    if args.native:
        if native.module() is None:
            print("decode_host: --native: the native module cannot be built here", file=sys.stderr)
            return 2
        native.ENABLED = True
    elif args.python_path:
        native.ENABLED = False
    elif native.ENABLED:
        native.module()  # (built now, not during a timed loop; None where it cannot be: the Python path)
    if args.split_pdl is not None:
        from attnlab.gpu import decode_plan

        decode_plan.SPLIT_PDL = {"off": False, "on": True, "trigger": "trigger"}[args.split_pdl]
    if not torch.cuda.is_available():
        print("decode_host: needs a CUDA GPU (host time per launch means nothing in the interpreter)", file=sys.stderr)
        return 2
    import triton

    if args.breakdown:
        result = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
                  "torch": torch.__version__, "triton": triton.__version__, "fused_merge": args.fused_merge,
                  "eager_fused_below_us": _eager_fused_below(), **_split_pdl(), "native": native_on(),
                  "breakdown": breakdown(args.calls, shape=tuple(args.breakdown_shape or TINY))}
        b = result["breakdown"]
        print(f"{result['gpu']}, torch {result['torch']}, triton {result['triton']}; shape {b['shape']}, "
              f"splits {b['splits']}, merge {b['merge']}, eager calls merge in the split kernel: {b['eager_fused']}")
        print("\n| step | host µs/call |\n|---|---|")
        for r in b["steps"]:
            print(f"| {r['step']} | {r['host_us']:.1f} |")
        print(profile_planned(args.calls))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    result = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
              "triton": triton.__version__, "fused_merge": args.fused_merge, "gluon_split": args.gluon_split,
              "eager_fused_below_us": _eager_fused_below(), **_split_pdl(), "native": native_on(),
              "floors": floors(args.calls), "host": host_rows(args.calls), "tiny_gpu_us": tiny_gpu_us(),
              "per_call": per_call_rows(args.calls),
              "speed": speed_rows(args.calls)}
    if args.sweep:
        result["sweep"] = sweep_rows()
    if args.pdl_ab:
        result["pdl"] = pdl_rows(args.calls)
    if args.eager_ab:
        result["eager_ab"] = eager_ab_rows(args.calls)
    if args.kernel_ab or args.kernel_ab_merge:  # both: the four arms and the sweep
        result["kernel_ab"] = kernel_ab_rows(args.calls, sweep_counts=KERNEL_SWEEP if args.kernel_ab else (),
                                             arms=KERNEL_MERGE_ARMS if args.kernel_ab_merge else KERNEL_ARMS)
    if args.split_pdl_ab:
        result["split_pdl_ab"] = split_pdl_ab_rows(args.calls)
    if args.order_ab:
        result["order_ab"] = order_ab_rows()
    if args.merge_ab:
        result["merge_ab"] = merge_ab_rows(args.calls)
    if args.graph_merge_ab:
        result["graph_merge_ab"] = graph_merge_ab_rows(args.calls)
    if args.trigger_ab:
        result["trigger_ab"] = trigger_ab_rows(args.calls)
    if args.timeline:
        result["timeline"] = timeline_rows(pdl_modes=("eager", False) if args.timeline_pdl else (None,))
    if args.profile:
        from attnlab.gpu import decode

        rows = []
        for shape, n in ((TINY, 300), (SHAPES[0], 120)):
            rows.append(growing_row(shape, n))
            decode.clear_plans()
        result["host"] += rows
        decode.clear_plans()
        print(profile_miss(300))
        print(f"the same at {SHAPES[0]}:")
        print(profile_miss(120, shape=SHAPES[0]))
    md = markdown(result)
    print(md)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.md:
        args.md.write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
