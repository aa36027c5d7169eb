"""Fitting a ``DecodeCalibration`` (the calibrated Flash-Decoding split model of §8.4) to measured
split sweeps: ``fit_decode_calibration``.

Input: the result dicts the decode benchmark (benchmarks/decode.py) writes as JSON. What is read:

* ``environment``: ``sms`` (default 132), ``gpu`` and ``date`` (for the calibration's ``source``);
* ``sweeps``: one per shape, ``B``, ``Hkv``, ``L``, ``D``, ``config`` (block_n, block_d, num_warps,
  num_stages) and ``times_ms`` {split count: CUDA-graph ms};
* ``rows`` (provider ``attnlab``) and ``configs`` (layout ``contiguous``) with ``graph_ms`` and
  ``splits``: other timings of the same calls — each split count's time is the least of them all
  (``decode_sweep_times``), since GPU-time noise only ever adds time;
* ``probes`` named ``program_bw…``: one program alone, ``per_program_bytes_per_s``;
* ``kernel_config``: the run's config where rows predate recording their own;
* ``sweep`` (``benchmarks/decode_host.py --sweep``): CUDA-graph µs per configuration and split count of
  the batch-1 shapes, read as split sweeps too (``host_sweeps``).

Pure Python (no numpy): the non-negative least squares has 3 columns, solved by QR per column subset.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

from ._args import dtype_bytes as _dtype_bytes
from .calibration import SMEM_PER_SM, DecodeCalibration, aggregate_rate, config_key, programs_per_sm

_FIRST_RUN_CONFIG = (64, 128, 4, 3)  # runs that recorded no kernel_config used this one


def decode_run_config(result: Mapping, row: Mapping | None = None) -> tuple:
    """The kernel configuration of a sweep/probe/row of a benchmark run: its own ``config``, else the
    run's ``kernel_config`` (keys ``block_n``… or ``BLOCK_N``…), else that of the first runs."""
    if row and row.get("config"):
        return config_key(row["config"])
    cfg = result.get("kernel_config")
    if not cfg:
        return _FIRST_RUN_CONFIG
    names = ("block_n", "block_d", "num_warps", "num_stages")
    return config_key(cfg.get(n, cfg.get(n.upper())) for n in names)


def decode_sweep_times(result: Mapping, sweep: Mapping) -> dict[int, float]:
    """Seconds per split count of one split sweep: for each S the least CUDA-graph time of that same
    call anywhere in the run — the sweep point, the ``attnlab`` provider row (at the chooser's S) and
    the config sweep's contiguous row (same config and S). In run 3 the sweep timed B=16 32/32 32K at
    S = 1 at 2174 µs, the provider table and the config sweep the same call at 1894 and 1892 µs."""
    key = decode_run_config(result, sweep)
    shape = (sweep["B"], sweep["H"], sweep["Hkv"], sweep["L"])
    times = {int(S): ms * 1e-3 for S, ms in sweep["times_ms"].items()}
    same = [r for r in result.get("rows", []) if r.get("provider") == "attnlab"]
    same += [c for c in result.get("configs", []) if c.get("layout") == "contiguous"]
    for r in same:
        if (r["B"], r["H"], r["Hkv"], r["L"]) == shape and "graph_ms" in r and r.get("splits") in times \
                and decode_run_config(result, r) == key:
            times[r["splits"]] = min(times[r["splits"]], r["graph_ms"] * 1e-3)
    return times


_HOST_BLOCK_N = {"small": 64, "large": 128}  # decode_host.py's configuration names at D <= 128 (4 warps, 3 stages)


def host_sweeps(result: Mapping, fused_merge: bool = False) -> list[dict]:
    """The split sweep of a ``benchmarks/decode_host.py --sweep`` run (rows with a configuration, a split
    count and ``graph_us``) as split sweeps in the benchmark's format, one per shape and configuration.
    A row names its configuration by ``config_key`` or, in runs before that was recorded, by name
    ("small", "large": block_n 64 or 128, halved above D = 128, block_d D's next power of two). Only
    rows of the merge ``fused_merge`` says (a row's own ``fused_merge``; rows without one, from runs
    that timed nothing else, are of the fused merge) — the two merges are two kernels."""
    groups: dict = {}
    for r in result.get("sweep", []):
        if r.get("fused_merge", True) != fused_merge:  # runs before the field timed the fused merge only
            continue
        if r.get("config_key"):
            key = config_key(r["config_key"])
        else:
            block_d = 1 << (int(r["D"]) - 1).bit_length()
            key = (_HOST_BLOCK_N[r["config"]] // (1 if block_d <= 128 else 2), block_d, 4, 3)
        shape = (r["B"], r["H"], r["Hkv"], r["L"], r["D"], key)
        groups.setdefault(shape, {})[str(r["splits"])] = r["graph_us"] * 1e-3
    return [dict(B=B, H=H, Hkv=Hkv, L=L, D=D, config=list(key), times_ms=times)
            for (B, H, Hkv, L, D, key), times in groups.items()]


def _dot(a, b) -> float:
    return math.fsum(x * y for x, y in zip(a, b))


class _SubsetSolver:
    """Least squares min ‖A_use·c − y‖ for every subset ``use`` of A's columns, A fixed and y varying:
    each subset's thin QR (modified Gram–Schmidt) is computed once."""

    def __init__(self, cols: list[list[float]]):
        self.cols, self.n = cols, len(cols)
        self.qr = {}
        for r in range(1, self.n + 1):
            for use in itertools.combinations(range(self.n), r):
                qs, R = [], [[0.0] * r for _ in range(r)]
                for j, c in enumerate(use):
                    v = list(cols[c])
                    for i, q in enumerate(qs):
                        R[i][j] = _dot(q, v)
                        v = [x - R[i][j] * y for x, y in zip(v, q)]
                    R[j][j] = math.sqrt(_dot(v, v))
                    qs.append([x / R[j][j] for x in v] if R[j][j] > 0 else v)
                self.qr[use] = (qs, R)

    def solve(self, use: tuple, y: list[float]) -> tuple[list[float], float]:
        qs, R = self.qr[use]
        b = [_dot(q, y) for q in qs]
        c = [0.0] * len(use)
        for i in reversed(range(len(use))):  # back substitution R·c = Qᵀy
            s = b[i] - sum(R[i][j] * c[j] for j in range(i + 1, len(use)))
            c[i] = s / R[i][i] if R[i][i] > 0 else 0.0
        fit = [0.0] * len(y)
        for ci, col in zip(c, use):
            fit = [f + ci * a for f, a in zip(fit, self.cols[col])]
        return c, math.sqrt(math.fsum((f - t) ** 2 for f, t in zip(fit, y)))

    def nnls(self, y: list[float]) -> tuple[list[float], float]:
        """Non-negative least squares: the unconstrained optimum if it is feasible, else the best of
        every subset's unconstrained fit whose coefficients are all >= 0 (exact for a few columns).
        Returns (coefficients, residual norm)."""
        full = tuple(range(self.n))
        c, res = self.solve(full, y)
        if all(x >= 0 for x in c):
            return c, res
        best = ([0.0] * self.n, math.sqrt(math.fsum(t * t for t in y)))
        for use in self.qr:
            c, res = self.solve(use, y)
            if any(x < 0 for x in c) or not res < best[1]:
                continue
            coef = [0.0] * self.n
            for ci, col in zip(c, use):
                coef[col] = ci
            best = (coef, res)
        return best


def nnls(columns, y) -> tuple[list[float], float]:
    """Non-negative least squares min ‖Σ_j c_j·columns[j] − y‖ over c >= 0 for a few columns (each a
    sequence as long as ``y``), by trying every column subset. Returns (c, residual norm)."""
    cols = [[float(x) for x in col] for col in columns]
    y = [float(t) for t in y]
    if not cols or any(len(col) != len(y) for col in cols):
        raise ValueError(f"nnls: every column must have len(y) = {len(y)} entries, got {[len(c) for c in cols]}")
    return _SubsetSolver(cols).nnls(y)


def _geomspace(a: float, b: float, n: int) -> list[float]:
    step = math.log10(b / a) / (n - 1)
    out = [a * 10 ** (i * step) for i in range(n)]
    out[0], out[-1] = a, b
    return out


def fit_decode_calibration(results, config=None, *, dtype_bytes=2, smem_per_sm: int = SMEM_PER_SM,
                           fused_merge: bool = False) -> DecodeCalibration:
    """The ``DecodeCalibration`` of one kernel configuration (``(block_n, block_d, num_warps,
    num_stages)``; default: the last run's) fitted to every split-sweep point of that configuration in
    ``results`` (one benchmark run's dict or a list of them), each point the least time of its call in
    its run (``decode_sweep_times``); decode_host.py's batch-1 sweeps of the merge ``fused_merge`` says
    (``host_sweeps``):

    * program_bw: the one-program probe of that configuration (the last run that has one), else the
      point with the fewest programs (the fastest of those);
    * programs_per_sm: the shared memory of the configuration's K/V buffers into ``smem_per_sm``;
    * bw, k, fixed, per_split, per_wave: one least-squares fit of the relative error over all points —
      for each (bw, k) on a grid (bw from the fastest measured rate to 1.4× it in 1% steps, k from 1
      to 32 in 61 geometric steps) the overheads are the non-negative least squares of what streaming
      leaves over, t − t_stream = fixed + per_split·S·[S > 1] + per_wave·waves; the grid point with
      the least residual wins.
    """
    if isinstance(results, Mapping):
        results = [results]
    results = list(results)
    if not results or not all(isinstance(r, Mapping) for r in results):
        raise TypeError("results must be a benchmark run's dict or a non-empty list of them")
    nb = _dtype_bytes(dtype_bytes)
    key = config_key(config) if config is not None else decode_run_config(results[-1])
    bn = key[0]
    pps = programs_per_sm(key, smem_per_sm)
    rows = []  # (programs, bytes per program, slots, S, seconds, bytes of the call)
    program_bw = None
    for result in results:
        sms = result.get("environment", {}).get("sms", 132)
        for s in [*result.get("sweeps", []), *host_sweeps(result, fused_merge)]:
            if decode_run_config(result, s) != key:
                continue
            for S, t in decode_sweep_times(result, s).items():
                chunk = min(s["L"], math.ceil(math.ceil(s["L"] / S) / bn) * bn)
                rows.append((s["B"] * s["Hkv"] * S, 2 * chunk * s["D"] * nb, sms * pps, S, t,
                             2 * s["B"] * s["Hkv"] * s["L"] * s["D"] * nb))
        probes = [p for n, p in result.get("probes", {}).items()
                  if n.startswith("program_bw") and decode_run_config(result, p) == key]
        if probes:
            program_bw = probes[0]["per_program_bytes_per_s"]
    if not rows:
        raise ValueError(f"config {key}: no split sweep of it in these runs")
    if program_bw is None:
        P0, per0, _, _, t0, _ = min(rows, key=lambda r: (r[0], r[4]))
        program_bw = per0 / t0
    # the overheads' columns, relative to t: fixed, per_split·S·[S > 1], per_wave·waves
    solver = _SubsetSolver([[1.0 / r[4] for r in rows], [(r[3] if r[3] > 1 else 0.0) / r[4] for r in rows],
                            [math.ceil(r[0] / r[2]) / r[4] for r in rows]])
    rmax = max(r[5] / r[4] for r in rows)
    best = None
    for bw in (rmax * (1 + 0.01 * i) for i in range(41)):
        for k in _geomspace(1.0, 32.0, 61):
            rate: dict[int, float] = {}

            def rate_of(n, bw=bw, k=k, rate=rate):
                if n not in rate:
                    rate[n] = aggregate_rate(n, program_bw, bw, k)
                return rate[n]

            y = []
            for P, per, slots, _, t, _ in rows:
                full, rest = divmod(P, slots)
                stream = full * slots * per / rate_of(slots) + (rest * per / rate_of(rest) if rest else 0.0)
                y.append((t - stream) / t)
            coef, res = solver.nnls(y)
            if best is None or res < best[0]:
                best = (res, bw, k, coef)
    _, bw, k, coef = best
    last = results[-1]
    env = last.get("environment", {})  # benchmarks/decode.py's runs; decode_host.py's name the GPU at the top
    where = [str(env.get("gpu", last.get("gpu", ""))).replace("NVIDIA ", ""), str(env.get("date", last.get("date", "")))]
    return DecodeCalibration(bw=bw, program_bw=program_bw, programs_per_sm=pps, k=k, fixed=coef[0],
                             per_split=coef[1], per_wave=coef[2], config=key,
                             source=", ".join(w for w in where if w))
