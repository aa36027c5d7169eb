"""``roofline_plot``: the lecture's kernels placed on a GPU's roofline (§3.2, §5.5, §7.5), saved as PNG.

matplotlib (Agg backend) is imported inside the function, never at ``import attnlab``.
"""

from __future__ import annotations

from pathlib import Path

from .gpus import get_gpu


def roofline_plot(gpu, kernels, path, *, title: str | None = None) -> Path:
    """Draw ``gpu``'s FP16 tensor and FP32 roofs and one point per kernel; save a PNG at ``path``.

    ``kernels``: ``KernelCost``s, or (label, ``KernelCost``) pairs (as ``Estimate.kernels()`` gives).
    A kernel sits at x = all its FLOPs (matmul + FP32) per HBM byte, y = those FLOPs over its
    estimated time (launch included), so it lands on the roof when one resource bounds it fully.
    """
    g = get_gpu(gpu)
    items = []
    for k in kernels:
        label, kc = k if isinstance(k, tuple) else ("", k)
        if kc.bytes <= 0 or kc.time <= 0:
            raise ValueError(f"kernel {kc.name!r} has no bytes or no time to place on a roofline")
        items.append((f"{label}: {kc.name}" if label else kc.name, kc))
    if not items:
        raise ValueError("roofline_plot needs at least one kernel")

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no global state
    from matplotlib.figure import Figure

    xs = [(kc.flops + kc.fp32_flops) / kc.bytes for _, kc in items]
    lo = min(0.1, min(x for x in xs if x > 0) / 3) if any(x > 0 for x in xs) else 0.1
    hi = max(10 * g.ridge, max(xs) * 3)
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    fig = Figure(figsize=(9, 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.loglog(x, np.minimum(g.tensor_flops, g.hbm_bw * x), "k-", lw=2, label=f"FP16 tensor roof ({g.tensor_flops / 1e12:,.0f} TFLOP/s)")
    ax.loglog(x, np.minimum(g.fp32_flops, g.hbm_bw * x), "k--", lw=1, label=f"FP32 roof ({g.fp32_flops / 1e12:,.1f} TFLOP/s)")
    ax.axvline(g.ridge, color="grey", lw=0.8, ls=":")
    ax.text(g.ridge, g.tensor_flops * 1.15, f"ridge {g.ridge:.0f} FLOP/B", ha="center", fontsize=8)
    markers = "osD^vP*Xh<>"
    for i, ((name, kc), xi) in enumerate(zip(items, xs)):
        y = (kc.flops + kc.fp32_flops) / kc.time
        ax.scatter([max(xi, lo)], [max(y, 1.0)], marker=markers[i % len(markers)], s=60, zorder=3,
                   label=f"{name} ({kc.time * 1e6:,.0f} µs, {kc.bound})")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"Roofline of {g.name}: {g.hbm_bw / 1e12:.2f} TB/s HBM")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path
