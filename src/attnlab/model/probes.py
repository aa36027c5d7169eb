"""Looking inside the tiny transformer (lecture §2.2, code 01 demos 2–3).

* ``attention_maps``: P (B, H, N, N) of every layer, from the reference attention.
* ``head_roles``: the heads found *automatically* —
  the **owner** head: at each fact's item position (``jam`` in ``dan likes jam``), the weight on the
  token two back (the owner ``dan``), averaged over all facts; the head with the largest average;
  the **lookup** heads: at the questioned name (``dan`` in ``q dan``), the weight on the item of
  that person's fact; every layer-≥1 head whose average clears ``lookup_threshold``, strongest first.
  Nothing says in advance which head does what: another seed gives other head numbers.
* ``ablation``: zero one head's output (all others intact) and measure the accuracy again.

All scores are computed on a given ``Batch`` (use held-out test samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .likesworld import Batch
from .train import accuracy


@torch.no_grad()
def attention_maps(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Attention probabilities per layer: a list of n_layers tensors (B, H, N, N)."""
    was = model.training
    model.eval()
    _, maps = model(tokens, return_attn=True)
    model.train(was)
    return maps


@torch.no_grad()
def head_scores(model, batch: Batch) -> dict[str, torch.Tensor]:
    """Average owner and lookup weights of every head: ``{"owner": (L, H), "lookup": (L, H)}``."""
    maps = attention_maps(model, batch.tokens)
    b, item, name = batch.owner_pairs()
    qb, qpos, target = batch.lookup_triples()
    owner = torch.stack([P[b, :, item, name].mean(0) for P in maps])  # (L, H)
    lookup = torch.stack([P[qb, :, qpos, target].mean(0) for P in maps])  # (L, H)
    return {"owner": owner, "lookup": lookup}


@dataclass
class HeadRoles:
    """owner: (layer, head, mean weight on the owner); lookup: [(layer, head, mean weight on the
    correct item)], strongest first; scores: the full (L, H) tables they were picked from."""

    owner: tuple[int, int, float]
    lookup: list[tuple[int, int, float]]
    scores: dict[str, torch.Tensor] = field(repr=False)


def head_roles(model, batch: Batch, *, lookup_threshold: float = 0.3) -> HeadRoles:
    """Find the owner head and the lookup heads of ``model`` on ``batch`` (see the module doc).

    The lookup heads are searched in layers after the owner head's layer (a lookup can only use
    what an earlier layer wrote); if none clears the threshold the single best one is returned.
    """
    s = head_scores(model, batch)
    o = s["owner"]
    ol, oh = divmod(int(o.argmax()), o.shape[1])
    lk = s["lookup"].clone()
    lk[: ol + 1] = -1.0  # only later layers
    if ol + 1 >= lk.shape[0]:  # owner found in the last layer: fall back to any layer
        lk = s["lookup"].clone()
    order = torch.argsort(lk.flatten(), descending=True).tolist()
    found = []
    for idx in order:
        l, h = divmod(idx, lk.shape[1])
        w = float(lk[l, h])
        if w >= lookup_threshold or not found:
            found.append((l, h, w))
    return HeadRoles((ol, oh, float(o[ol, oh])), found, s)


def ablation(model, batch: Batch) -> dict:
    """Accuracy with every head intact and with each single head zeroed.

    Returns ``{"full": acc, "heads": {(layer, head): acc}}``.
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = {"full": accuracy(model, batch), "heads": {}}
    for l in range(L):
        for h in range(H):
            mask = torch.ones(L, H)
            mask[l, h] = 0.0
            out["heads"][(l, h)] = accuracy(model, batch, head_mask=mask)
    return out


def plot_attention(P: torch.Tensor, tokens: list[str], path, *, title: str = "", mark: list[tuple[int, int]] = ()):
    """Save one head's attention map P (N, N) as a PNG heatmap with the tokens on both axes.

    mark: (query, key) cells to outline (e.g. the owner or the correct item). Returns the path.
    """
    return plot_attention_panels([(P, title, mark)], tokens, path)


def plot_attention_panels(panels, tokens: list[str], path):
    """Save several heads' attention maps side by side in one PNG (one draw, one file).

    panels: a list of ``(P (N, N), title, mark)``; ``mark`` lists (query, key) cells to outline.
    Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no global state
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    N = len(tokens)
    side = 0.22 * N  # inches per panel: room for one token label per row
    gap = 1.3  # between panels: the next panel's token labels
    right = 1.0 + len(panels) * side + (len(panels) - 1) * gap  # where the last panel ends
    w, h = right + 1.4, side + 1.6
    fig = Figure(figsize=(w, h), dpi=90)
    FigureCanvasAgg(fig)
    im = None
    for i, (P, title, mark) in enumerate(panels):
        P = P.detach().float().cpu().numpy()
        if P.shape != (N, N):
            raise ValueError(f"attention map must be ({N}, {N}) to match the tokens, got {P.shape}")
        left = 1.0 + i * (side + gap)
        ax = fig.add_axes((left / w, 1.0 / h, side / w, side / h))  # fixed margins: no layout pass
        im = ax.imshow(P, cmap="magma", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(N), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(N), tokens, fontsize=7)
        ax.set_xlabel("key (attended to)")
        if i == 0:
            ax.set_ylabel("query")
        for q, k in mark:
            ax.add_patch(Rectangle((k - 0.5, q - 0.5), 1, 1, fill=False, edgecolor="cyan", linewidth=1.2))
        ax.set_title(title, fontsize=9)
    cax = fig.add_axes(((right + 0.25) / w, 1.0 / h, 0.15 / w, side / h))
    fig.colorbar(im, cax=cax, label="attention weight")
    fig.savefig(path)
    return path
