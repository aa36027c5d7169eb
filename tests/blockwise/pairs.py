"""Block pairs read off a visibility grid by brute force, for the I/O-count tests of the blockwise path:
which (Q block, K/V block) pairs hold at least one visible (query, key) pair ('mask' if also a hidden
one, 'full' if not), and which hold none ('skip')."""

import torch


def blocks(n: int, b: int) -> list[tuple[int, int]]:
    return [(a, min(a + b, n)) for a in range(0, n, b)]


def pair_table(grid: torch.Tensor, Br: int, Bc: int) -> dict:
    """{(Q block index, K/V block index): 'skip' | 'mask' | 'full'} of a boolean (Nq, Nk) grid."""
    Nq, Nk = grid.shape
    out = {}
    for i, (i0, i1) in enumerate(blocks(Nq, Br)):
        for j, (j0, j1) in enumerate(blocks(Nk, Bc)):
            sub = grid[i0:i1, j0:j1]
            out[i, j] = "skip" if not sub.any() else ("full" if sub.all() else "mask")
    return out


def mask_grid(left: int, right: int, Nq: int, Nk: int) -> torch.Tensor:
    """Visibility of the window (left, right) written out from its definition (flash-attn's, bottom-right):
    key j is visible to query i iff i + off - left <= j <= i + off + right, off = Nk - Nq, -1 unbounded."""
    d = torch.arange(Nk).unsqueeze(0) - torch.arange(Nq).unsqueeze(1) - (Nk - Nq)  # j - (i + off), (Nq, Nk)
    return ((d <= right) | (right < 0)) & ((d >= -left) | (left < 0))


def expected_forward(grid, Br: int, Bc: int, D: int, Dv: int, programs: int, G: int) -> dict:
    """What the FA2 forward must count for one visibility grid, ``programs`` = B·Hkv (each G query heads)."""
    Nq, Nk = grid.shape
    table = pair_table(grid, Br, Bc)
    kb = blocks(Nk, Bc)
    keys = sum(kb[j][1] - kb[j][0] for (i, j), kind in table.items() if kind != "skip")
    reads = {"Q": programs * G * Nq * D}
    if keys:
        reads.update(K=programs * keys * D, V=programs * keys * Dv)
    computed = sum(kind != "skip" for kind in table.values())
    return dict(reads=reads, writes={"O": programs * G * Nq * Dv, "L": programs * G * Nq},
                computed=programs * computed, skipped=programs * (len(table) - computed),
                masked=programs * sum(kind == "mask" for kind in table.values()))


__all__ = ["blocks", "expected_forward", "mask_grid", "pair_table"]
