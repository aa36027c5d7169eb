"""Standard vs FlashAttention forward on the simulator, each count beside its closed form (§5.3–5.4, §6.2).

``simulate_forward`` runs both designs on random inputs and returns one dict with stable keys
(documented in ``docs/simulator.md``): per design, per kernel and per (array, direction) the four HBM
traffic counts in bytes — ``no_cache`` (32 × sectors) and ``ideal`` (first touch), for reads and
writes — next to ``attnlab.cost``'s closed forms, plus sectors, shared-memory wavefronts, barriers,
atomics and the error against a float64 reference. It checks its arguments, the flash kernel's shared
memory and the memory the whole run needs (``memory.py``) before it allocates anything.
``tables.print_simulation`` renders the dict; ``attnlab simulate`` is the two together.
"""

from __future__ import annotations

import numpy as np

from ..device import H100_SHARED_BYTES_PER_BLOCK
from .api import pos_int, reference_forward, run_flash_forward, run_standard_forward
from .flash import flash_fwd_shared_bytes
from .memory import check_forward_memory

FLOAT_BYTES = 4  # the kernels compute in float32
_DIRS = ("read", "write")


def _formulas(design: str, N: int, D: int, block: int, tile: int, causal: bool):
    """Per-kernel closed forms (elements) from attnlab.cost: [(no-cache io, ideal io)] in kernel order."""
    from attnlab import cost

    if design == "standard":
        # the standard forward computes (and writes) all N² scores even when causal: same traffic
        raw = cost.standard_forward_kernels(seq=N, head_dim=D, ideal_cache=False, tile=tile)
        ideal = cost.standard_forward_kernels(seq=N, head_dim=D, ideal_cache=True)
    else:
        shape = dict(seq=N, head_dim=D, block_q=block, block_k=block, causal=causal)
        raw = cost.flash_forward_kernels(**shape)
        ideal = cost.flash_forward_kernels(**shape, kv_in_l2=True)
    return [(r.io, i.io) for r, i in zip(raw, ideal)]


def _design_dict(design, report, formulas, errors) -> dict:
    kernels, totals = [], {f"{d}_{k}": 0 for d in _DIRS for k in ("no_cache", "ideal")}
    ftot = dict(totals)
    arrays: dict = {}
    for ks, (f_raw, f_ideal) in zip(report.kernels, formulas):
        rows = {}
        names = dict.fromkeys([a for a, _ in ks.global_] + [a for a, _ in f_raw])
        for a in names:
            rows[a] = {}
            for d in _DIRS:
                c = ks.global_.get((a, d))
                sim_raw = 32 * c["sectors"] if c else 0
                sim_ideal = c["first_touch_bytes"] if c else 0
                f_r = FLOAT_BYTES * f_raw.get((a, d), 0)
                f_i = FLOAT_BYTES * f_ideal.get((a, d), 0)
                if not (sim_raw or f_r or sim_ideal or f_i):
                    continue
                rows[a][d] = {
                    "no_cache": sim_raw, "no_cache_formula": f_r,
                    "ideal": sim_ideal, "ideal_formula": f_i,
                    "requested": c["requested_bytes"] if c else 0,
                    "sectors": c["sectors"] if c else 0,
                    "instructions": c["instructions"] if c else 0,
                }
                for k, v in (("no_cache", sim_raw), ("ideal", sim_ideal)):
                    totals[f"{d}_{k}"] += v
                ftot[f"{d}_no_cache"] += f_r
                ftot[f"{d}_ideal"] += f_i
                acc = arrays.setdefault(a, {}).setdefault(d, dict.fromkeys(rows[a][d], 0))
                for k, v in rows[a][d].items():
                    acc[k] += v
        kernels.append({
            "name": ks.name,
            "grid": list(ks.grid),
            "block": list(ks.block),
            "shared_bytes_per_block": ks.shared_bytes_per_block,
            "shared_wavefronts": sum(c["wavefronts"] for c in ks.shared.values()),
            "bank_conflicts": sum(c["wavefronts"] - c["ideal_wavefronts"] for c in ks.shared.values()),
            "barriers": ks.barriers,
            "atomics": sum(c["requests"] for (_, d), c in ks.global_.items() if d == "atomic"),
            "warp_instructions": ks.warp_instructions,
            "hazards": ks.hazards,
            "arrays": {a: r for a, r in rows.items() if r},
        })
    totals.update({f"{k}_formula": v for k, v in ftot.items()})
    totals["total_no_cache"] = totals["read_no_cache"] + totals["write_no_cache"]
    totals["total_ideal"] = totals["read_ideal"] + totals["write_ideal"]
    totals["total_no_cache_formula"] = ftot["read_no_cache"] + ftot["write_no_cache"]
    totals["total_ideal_formula"] = ftot["read_ideal"] + ftot["write_ideal"]
    totals["shared_wavefronts"] = report.wavefronts()
    totals["barriers"] = report.barriers
    totals["atomics"] = report.atomics
    totals["launches"] = report.launches
    totals["hazards"] = report.hazards
    return {"kernels": kernels, "arrays": arrays, "totals": totals, "error": errors, "report": report.to_dict()}


def _check_flash_fits(head_dim: int, block: int) -> None:
    """Refuse a (head_dim, block) whose flash tiles no block's shared memory could hold."""
    limit = H100_SHARED_BYTES_PER_BLOCK
    need = flash_fwd_shared_bytes(head_dim=head_dim, block_q=block, block_k=block)
    if need <= limit:
        return
    fits = 0
    while flash_fwd_shared_bytes(head_dim=fits + 1, block_q=block, block_k=block) <= limit:
        fits += 1
    hint = f"use head_dim <= {fits} or a smaller block" if fits else "use a smaller block"
    raise ValueError(f"head_dim={head_dim} with block={block} needs {need:,} bytes of shared memory per flash block "
                     f"(Q, K and V tiles), more than the {limit:,} an H100 block may use; {hint}")


def simulate_forward(*, seq: int = 256, head_dim: int = 64, block: int = 64, causal: bool = False, tile: int = 16,
                     seed: int = 0, reference: str = "torch", max_memory: int | None = None) -> dict:
    """Run the standard (3 kernels) and flash (1 kernel, Br = Bc = ``block``) forwards on one random
    head of ``seq`` × ``head_dim`` and return every count beside its closed form (bytes, float32).

    ``reference``: "torch" compares with ``attnlab.attention_ref`` in float64; "numpy" with
    ``reference_forward`` (the same definition in numpy float64, no torch import).
    ``max_memory``: bytes the run may take (None: ``memory.default_memory_limit()``); a run whose
    estimate (``memory.forward_memory_bytes``) is larger is refused before anything is allocated.
    """
    N, D, B = pos_int(seq, "seq"), pos_int(head_dim, "head_dim"), pos_int(block, "block")
    tile = pos_int(tile, "tile")
    if tile * tile > 1024:
        raise ValueError(f"tile must satisfy tile² <= 1024 threads per block, got {tile}")
    if B > 1024:
        raise ValueError(f"block is the number of threads per flash block and must be <= 1024, got {B}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if reference not in ("torch", "numpy"):
        raise ValueError(f"reference must be 'torch' or 'numpy', got {reference!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    if max_memory is not None:
        max_memory = pos_int(max_memory, "max_memory")
    _check_flash_fits(D, B)
    need = check_forward_memory(seq=N, head_dim=D, block=B, tile=tile, max_memory=max_memory)
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
    out_s, rep_s = run_standard_forward(q, k, v, tile=tile, causal=causal)
    out_f, lse_f, rep_f = run_flash_forward(q, k, v, block_q=B, block_k=B, causal=causal)
    if reference == "torch":
        import torch

        from attnlab.reference import attention_ref

        t = [torch.from_numpy(x.astype(np.float64))[None, None] for x in (q, k, v)]
        o, lse = attention_ref(*t, causal=causal)
        ref_out, ref_lse = o[0, 0].numpy(), lse[0, 0].numpy()
    else:
        ref_out, ref_lse = reference_forward(q, k, v, causal=causal)
    err = lambda a, b: float(np.max(np.abs(a.astype(np.float64) - b)))  # noqa: E731
    fin = np.isfinite(ref_lse)
    std = _design_dict("standard", rep_s, _formulas("standard", N, D, B, tile, causal), {"out": err(out_s, ref_out)})
    fl = _design_dict("flash", rep_f, _formulas("flash", N, D, B, tile, causal),
                      {"out": err(out_f, ref_out), "lse": err(lse_f[fin], ref_lse[fin])})
    return {
        "config": {"seq": N, "head_dim": D, "block_q": B, "block_k": B, "tile": tile, "causal": causal,
                   "dtype": "float32", "seed": seed, "reference": reference},
        "standard": std,
        "flash": fl,
        "ideal_ratio": std["totals"]["total_ideal"] / fl["totals"]["total_ideal"],
        "no_cache_ratio": std["totals"]["total_no_cache"] / fl["totals"]["total_no_cache"],
        "wavefront_ratio": std["totals"]["shared_wavefronts"] / fl["totals"]["shared_wavefronts"],
        "memory_estimate_bytes": need,
    }
