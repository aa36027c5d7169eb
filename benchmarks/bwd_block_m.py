"""The Gluon backward at D = 64 with 128 query rows per step against its 64-row build, in one process: the backward
alone (``prefill_backward``: the preprocessing kernel, the Gluon kernel, dQ's store), replayed from CUDA graphs so that
host time does not enter, the arms taking turns in each of ``--rounds`` rounds, beside cuDNN's backward (SDPA) on the
dense rows.

Why 128 rows: at D = 64 a 64-row step gives each consumer warp group products of 64 keys × 64 rows × 64 (wgmma
N = 64) and one exchange of dSᵀ, one dQ product and one dQ addition per 64 rows. FlashAttention-3 and -4 take 128 rows
at D = 64 (the same Sᵀ = K Qᵀ orientation, two warp groups of 64 keys): N = 128 products and half the per-step
barriers, exchanges and additions, for 64 more registers a thread for Sᵀ and dPᵀ and twice the columns of L₂ and Dᵢ
each thread holds. Under triton 3.6 that build spills (``prefill_gluon_bwd.sm90_report(64, ..., block_m=128)``: a stack
of 256-320 bytes, against none at 64 rows); this benchmark says what that costs against what the wider step saves.

Arms (``--arms``, the first the baseline of the ratios):

    g64      the library table's Gluon entry at D = 64 (64 rows; its dq_lag: 2 causal, 1 not)
    g128     128 rows (dq_lag 0: the four-tile dSᵀ ring does not fit beside 128-row tiles)
    g128s    128 rows, both warp groups making every step's dQ product (dq_shared)
    g64lag0  64 rows without the lag (what separates g128 from g64 besides the rows)
    table    the library's own choice for the call
    g64lag1  64 rows, dQ's product one step behind
    p1       the library's choice as a persistent build with one K/V buffer pair (one program per SM walking key
             block after key block; dK, dV stored from registers, the next block's K and V loaded once the last dQ
             products have read K)
    p2       the same with two K/V buffer pairs (the next block's K and V load under the current block's steps;
             D = 64 only: at D = 128 two pairs need more shared memory than a block has)
    hc16, hc32, hc64, hcall
             the library's choice with causal and windowed calls' programs numbered in chunks of heads whose rows fit
             in 16, 32 or 64 MB (two heads at least), or all heads in one chunk, at both head dims
             (``prefill_gluon_bwd.HEAD_CHUNK_MB``, ``HEAD_CHUNK_FROM_D`` 0; both layers' kept
             plans dropped on the way in and out; the log names each launch's chunk); ``hc0``: one head after
             another (the numbering before chunks)
    whole, steps1, steps8
             the library's choice with non-causal calls' last, partial wave not cut into pieces
             (``prefill_gluon_bwd.TAIL_PIECES`` off), or cut as the schedule model says with 1 or 8 steps of overhead
             a piece (``TAIL_PIECE_STEPS``; the library's own: ``table``); both layers' kept plans dropped on the way
             in and out, the log naming each launch's cut (TAIL_F, TAIL_P), at both head dims
    uncutbuild  the build with the cut's code (TAIL_F an int) cutting nothing: every program whole, as ``whole``
             runs them (what the cut's code costs the whole programs); ``limitall``: every call (causal and windowed
             ones too) on the whole programs' build (``TAIL_LIMIT_ALL``)
    nolimits the library's choice, its Gluon kernel built with the masked steps' three comparisons per score
             (``prefill_gluon_bwd.MASK_LIMITS`` 0: a copy of the module with that switch, whose kernel stands in for
             the library's while the arm runs, both layers' kept plans dropped; below ``MASK_LIMITS_FROM_D`` the two
             builds are the same)
    kfirst, hfirst
             the library's choice with every causal or windowed call's programs numbered key blocks first (with the
             chunks of heads where the library takes them) or heads first (``heads_first_default``; the library
             numbers heads first below ``HEADS_FIRST_WAVES`` programs per SM); both layers' kept plans dropped on the
             way in and out, the log naming each launch's grid and chunk
    kf1, kf2, kf4
             key blocks first in chunks of 1, 2 or 4 (batch · K/V head) units at every head dim
    l2chunks, nol2
             the library's choice with ``prefill_gluon_bwd.L2_CHUNKS``' numbering for every causal call that would
             go heads first, multi-head calls too (``L2_CHUNKS_MIN_GROUP`` 1; the library takes GQA calls only: key
             blocks first in chunks whose rows fit in L2, ``l2_chunk``; ``benchmarks/bwd_l2_sim.py`` models each
             order's HBM traffic), or with ``L2_CHUNKS`` off (heads first, the numbering before it)
    kv2, kv4 the library's choice with each K/V head of a GQA call read by 2 or 4 programs of a share of its query heads
             each, their float32 dK, dV parts summed after (``gluon_backward(kv_split=)``, as deterministic GQA calls
             run; not in the library's non-deterministic calls); a split call keeps no plan

Rows: ``causal`` and ``full`` (4 × 4K, 32 heads), ``long`` (one 16K causal sequence), ``gqa`` (32 query heads on 8 K/V
heads, 8K causal), ``varlen`` (the variants benchmark's packed batch: 16K tokens of documents of 256-1,792, causal),
``short`` (16 × 1K causal: the table's short class, where the library took the Triton backward at D = 64),
``causal1`` (one 4K causal sequence: a multi-head call numbered heads first), and GQA
causal rows by group size and length: ``gqa2`` (32/16 at 8K), ``gqa8`` (32/4 at 8K), ``gqa-4k`` (4 × 4K, 32/8),
``gqa-8k`` (2 × 8K, 32/8: the prefill table's GQA causal 8K row), ``gqa-16k`` (16K, 32/8); packed batches of 16K tokens in documents of one length, causal: ``pack128``, ``pack512`` and
``pack2k`` (what a program's fixed costs weigh as its walk shortens: one key block and two query-block steps a
document at 128); the prefill table's other non-causal rows ``full8k`` (2 × 8K), ``full16k`` (1 × 16K) and
``gqa-full`` (4 × 4K, 32/8), and ``full-small`` (1 × 2K: a grid of under four waves); ``window`` and ``alibi``, the variants benchmark's causal calls with a window of 4,096 keys and with
ALiBi (1 × 16K; no peer). The ``table`` and ``p1`` arms run at D = 128 too (``--D 64 128 --arms table p1``), 16 heads
there.
bfloat16, H·D = 2048. TFLOP/s over the backward's 2.5× the forward's visible-pair FLOPs.

    python benchmarks/bwd_block_m.py --json bwd-block-m.json
    python benchmarks/bwd_block_m.py --rows varlen causal --arms g64 g128 --rounds 5
    python benchmarks/bwd_block_m.py --rows gqa gqa2 gqa8 gqa-4k gqa-16k causal --arms g64 g64lag0 g64lag1
    python benchmarks/bwd_block_m.py --rows pack128 pack512 pack2k varlen causal --D 64 128 --arms table p1 p2
    python benchmarks/bwd_block_m.py --rows full full8k full16k gqa-full --D 64 128 --arms table whole
    python benchmarks/bwd_block_m.py --rows gqa-4k gqa-8k gqa-16k causal8k --D 64 128 --arms table kfirst hfirst kv2
    python benchmarks/bwd_block_m.py --rows gqa gqa-4k gqa-8k gqa-16k --D 64 128 --arms table nol2 kf1 kf2 kf4
    python benchmarks/bwd_block_m.py --rows causal1 gqa-8k --D 64 128 --arms table l2chunks nol2
    python benchmarks/bwd_block_m.py --report bwd-block-m.json
"""

from __future__ import annotations

import dataclasses
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab_rounds  # noqa: E402

from attnlab.bench import time_fn  # noqa: E402

ROWS = ("causal", "causal8k", "causal1", "full", "long", "window", "alibi", "gqa", "varlen", "short", "gqa2", "gqa8", "gqa-4k",
        "gqa-8k", "gqa-16k", "pack128", "pack512", "pack2k", "full8k", "full16k", "gqa-full", "full-small")
PACKS = {"pack128": 128, "pack512": 512, "pack2k": 2048}  # packed batches of 16K tokens in documents of one length
CHUNK_ARMS = {"hc0": 0, "hc16": 16, "hc32": 32, "hc64": 64, "hcall": 1 << 20}  # arm: HEAD_CHUNK_MB
TAIL_ARMS = {"whole": {"TAIL_PIECES": False}, "steps1": {"TAIL_PIECE_STEPS": 1},  # arm: the module's cut switches
             "steps8": {"TAIL_PIECE_STEPS": 8},
             "uncutbuild": {"tail_pieces": lambda programs, *_: (programs, 0, 2)},
             "limitall": {"TAIL_LIMIT_ALL": True}}
ORDER_ARMS = {  # arm: the Gluon backward module's numbering functions and switches while it runs
    "kfirst": {"heads_first_default": lambda uneven, *_, **__: False},  # key blocks first (the library's chunks)
    "hfirst": {"heads_first_default": lambda uneven, *_, **__: uneven,  # every causal call heads first
               "L2_CHUNKS": False},
    **{f"kf{c}": {"heads_first_default": lambda uneven, *_, **__: False, "HEAD_CHUNK_FROM_D": 0,  # chunks of c units
                  "head_chunk": lambda heads, *_, c=c, **__: min(c, heads) if c > 1 else None} for c in (1, 2, 4)},
    "l2chunks": {"L2_CHUNKS": True, "L2_CHUNKS_MIN_GROUP": 1},  # prefill_gluon_bwd.l2_chunk's numbering, MHA too
    "nol2": {"L2_CHUNKS": False},  # heads first below HEADS_FIRST_WAVES, GQA too (the numbering before L2_CHUNKS)
}
KV_ARMS = {"kv2": 2, "kv4": 4}  # arm: a GQA call's K/V heads each read by that many programs (``kv_split``)
ARMS = ("g64", "g128", "g128s", "g64lag0", "table", "g64lag1", "p1", "p2", "nolimits", *CHUNK_ARMS, *TAIL_ARMS,
        *ORDER_ARMS, *KV_ARMS)
TABLE_ARMS = ("table", "p1", "p2", "nolimits", *CHUNK_ARMS, *TAIL_ARMS, *ORDER_ARMS, *KV_ARMS)  # (the arms that run at
# D = 128 too; p2 skips
# it)
SWITCH_ARMS = {"nolimits": {"MASK_LIMITS": 0}}  # arm: the Gluon backward's module switches it is built with
PERSISTENT_ARMS = {"p1": 1, "p2": 2}  # arm: K/V buffer pairs of the persistent build
SHAPES = {  # row: (B, H, Hkv, N, causal)
    "causal": (4, 32, 32, 4096, True),
    "causal8k": (2, 32, 32, 8192, True),
    "full": (4, 32, 32, 4096, False),
    "long": (1, 32, 32, 16384, True),
    "gqa": (1, 32, 8, 8192, True),
    "short": (16, 32, 32, 1024, True),
    # one multi-head causal sequence of 4K: 1,024 (D = 64) or 512 programs, numbered heads first
    "causal1": (1, 32, 32, 4096, True),
    # GQA by group size and length (the lag's choice there): 2 and 8 query heads per K/V head at 8K, 4 at 4K and 16K
    "gqa2": (1, 32, 16, 8192, True),
    "gqa8": (1, 32, 4, 8192, True),
    "gqa-4k": (4, 32, 8, 4096, True),
    "gqa-16k": (1, 32, 8, 16384, True),
    # the prefill table's GQA causal row at 8K (its 4K and 16K rows are gqa-4k and gqa-16k)
    "gqa-8k": (2, 32, 8, 8192, True),
    # the prefill table's other non-causal rows (4 x 4K is ``full``), its GQA row, and a grid of under four waves
    "full8k": (2, 32, 32, 8192, False),
    "full16k": (1, 32, 32, 16384, False),
    "gqa-full": (4, 32, 8, 4096, False),
    "full-small": (1, 32, 32, 2048, False),
    # the variants benchmark's causal window of 4,096 keys and its ALiBi call (1 × 16K, causal; no cuDNN peer)
    "window": (1, 32, 32, 16384, True),
    "alibi": (1, 32, 32, 16384, True),
}
VARIANT_ROWS = ("window", "alibi")
_CURRENT: list = [None]  # the config the row's call runs with (None: the library's choice)


def row_keys(row: str) -> int:
    """The keys of a row's longest sequence (what the library's table looks up)."""
    if row in PACKS:
        return PACKS[row]
    if row == "varlen":
        from variants import doc_lengths

        return max(doc_lengths(16384))
    return SHAPES[row][3]


def arm_config(arm: str, causal: bool, D: int = 64, n_keys: int | None = None):
    """The backward configuration of an arm (None: the library's own): the D = 64 builds', or (``p1``, ``p2``) the
    library's choice for a call at D with ``n_keys`` keys as a persistent build."""
    from attnlab.gpu.config import _GLUON_BWD_64, _GLUON_BWD_64_CAUSAL, default_bwd_config

    if arm in PERSISTENT_ARMS:
        import torch

        cfg = default_bwd_config(D, causal, torch.device("cuda"), n_keys)
        return dataclasses.replace(cfg, persistent=PERSISTENT_ARMS[arm]) if cfg.gluon else cfg
    if arm in TABLE_ARMS:
        return None
    g64 = _GLUON_BWD_64_CAUSAL if causal else _GLUON_BWD_64
    return {"g64": g64, "g128": dataclasses.replace(g64, block_m1=128, dq_lag=0),
            "g128s": dataclasses.replace(g64, block_m1=128, dq_lag=0, dq_shared=True),
            "g64lag0": dataclasses.replace(g64, dq_lag=0), "g64lag1": dataclasses.replace(g64, dq_lag=1)}[arm]


_SWITCHED: dict = {}  # switches: the module copy (and its folder, alive while its kernel may compile)


def switched_module(values: dict):
    """A copy of ``prefill_gluon_bwd`` with the module switches ``values`` ({name: value}, each a
    ``    _NAME = gl.constexpr(NAME)`` line of the module), loaded under ``attnlab.gpu`` (its relative imports the
    library's); made once per set of values."""
    import importlib.util
    import tempfile

    from fwd_switches import switched_source

    from attnlab.gpu import prefill_gluon_bwd as gb

    key = tuple(sorted(values.items()))
    if key not in _SWITCHED:
        folder = tempfile.TemporaryDirectory(prefix="bwd-switches-")
        name = f"_prefill_gluon_bwd_build{len(_SWITCHED)}"
        path = Path(folder.name) / f"{name}.py"
        path.write_text(switched_source(Path(gb.__file__).read_text(), values))
        spec = importlib.util.spec_from_file_location(f"attnlab.gpu.{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _SWITCHED[key] = (mod, folder)
    return _SWITCHED[key][0]


def row_call(name: str, D: int, device: str):
    """(the backward call, its FLOPs, the peer's name, the peer's call or why there is none) for a row; the call
    runs with the config of the arm in use (``_CURRENT``)."""
    import torch

    from attnlab.cost import attention_flops
    from attnlab.gpu import prefill_backward, prefill_forward
    from attnlab.variants import Mask

    gen = torch.Generator(device=device).manual_seed(0)
    scale, mask = D ** -0.5, None
    if name == "varlen" or name in PACKS:
        from variants import doc_lengths

        H = 2048 // D
        lens = doc_lengths(16384) if name == "varlen" else [PACKS[name]] * (16384 // PACKS[name])
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
        q, k, v, do = (torch.randn(sum(lens), H, D, device=device, dtype=torch.bfloat16, generator=gen)
                       for _ in range(4))
        mask, ms_ = Mask(-1, 0), (max(lens), max(lens))
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=(cu, cu), max_seqlen=ms_)
        flops = 2.5 * 4 * sum(n * (n + 1) // 2 for n in lens) * D * H

        def lib():
            return prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=(cu, cu),
                                    max_seqlen=ms_, config=_CURRENT[0])

        return lib, flops, "none", ValueError("no peer timed for packed batches here")
    B, H, Hkv, N, causal = SHAPES[name]
    H, Hkv = H * 64 // D, Hkv * 64 // D  # (H·D = 2048: the heads given are D = 64's)
    q, do = (torch.randn(B, H, N, D, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(2))
    k, v = (torch.randn(B, Hkv, N, D, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(2))
    mask, slopes = Mask(-1, 0 if causal else -1), None
    flops = attention_flops(batch=B, heads=H, seq_q=N, head_dim=D, causal=causal, pass_="bwd")
    if name == "window":
        from variants import WINDOW

        from attnlab.cost import window as cw

        mask = Mask(WINDOW - 1, 0)
        flops = 2.5 * 4 * cw.visible_pairs(seq_q=N, seq_k=N, window=(WINDOW - 1, 0), causal=True) * D * H * B
    elif name == "alibi":
        from variants import alibi_slopes

        slopes = alibi_slopes(H).to(device)
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, slopes=slopes)

    def lib():
        return prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, slopes=slopes, config=_CURRENT[0])

    if name in VARIANT_ROWS:
        return lib, flops, "none", ValueError("no cuDNN route for this variant")

    try:  # cuDNN's backward (the forward made once, its graph kept)
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qs, ks, vs = (t.detach().clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=Hkv != H)

        def peer():
            return torch.autograd.grad(o, (qs, ks, vs), do, retain_graph=True)

        peer()
    except Exception as e:  # (no cuDNN route for the shape on this install)
        return lib, flops, "sdpa-cudnn", e
    return lib, flops, "sdpa-cudnn", peer


def graph_time(fn, device: str = "cuda") -> float:
    """The call's GPU time (ms): replayed from a CUDA graph (``do_bench_cudagraph``), or timed as called where it
    cannot be captured."""
    import torch
    import triton

    try:
        return triton.testing.do_bench_cudagraph(fn, rep=60)
    except Exception:
        torch.cuda.synchronize()
        return time_fn(fn, device=device)


def module_patch(arm: str):
    """(the Gluon backward module's attributes the arm runs with, what each launch's log records from its grid and
    arguments, the record's name), or None for an arm that sets none of them (``TAIL_ARMS``, ``CHUNK_ARMS``,
    ``ORDER_ARMS``)."""
    if arm in TAIL_ARMS:
        return TAIL_ARMS[arm], lambda grid, a: (a.get("TAIL_LIMIT"), a.get("TAIL_F"), a.get("TAIL_P")), \
            "(TAIL_LIMIT, TAIL_F, TAIL_P)"
    if arm in CHUNK_ARMS:  # (chunks at every head dim)
        return {"HEAD_CHUNK_MB": CHUNK_ARMS[arm], "HEAD_CHUNK_FROM_D": 0}, lambda grid, a: a.get("HCHUNK"), "HCHUNK"
    if arm in ORDER_ARMS:
        return ORDER_ARMS[arm], lambda grid, a: (grid, a.get("HCHUNK")), "(grid, HCHUNK)"
    return None


def measure(args) -> list[dict]:
    rows_causal = {r: (True if r == "varlen" or r in PACKS else SHAPES[r][4]) for r in args.rows}

    @contextmanager
    def use(arm, D):
        from attnlab.gpu import prefill_bwd
        from attnlab.gpu import prefill_gluon_bwd as gb

        _CURRENT[0] = arm_config(arm, rows_causal[_ROW[0]], D, row_keys(_ROW[0]))
        kernel, launch = gb._attn_bwd_gluon_ws, gb.launch_kept
        launched = []
        if arm in SWITCH_ARMS:  # (both layers' kept plans dropped on the way in and out: they hold the kernel they
            gb._attn_bwd_gluon_ws = switched_module(SWITCH_ARMS[arm])._attn_bwd_gluon_ws  # launched)
            prefill_bwd._CALL_PLANS.clear()
            gb._PLANS.clear()
            gb.launch_kept = lambda k, *a, **kw: launched.append(k) or launch(k, *a, **kw)
        patch = module_patch(arm)
        if patch is not None:  # (the plans hold their cut, chunk or numbering: dropped on the way in and out)
            values, record, label = patch
            saved = {name: getattr(gb, name) for name in values}
            for name, value in values.items():
                setattr(gb, name, value)
            prefill_bwd._CALL_PLANS.clear()
            gb._PLANS.clear()
            gb.launch_kept = lambda k, grid, a, *r, **kw: (launched.append(record(grid, a))
                                                           or launch(k, grid, a, *r, **kw))
        if arm in KV_ARMS:  # (a split call keeps no plan: each call runs the split anew)
            backward = gb.gluon_backward

            def split_backward(q, k, *a, kv_split=1, **kw):
                if kv_split == 1 and (q.shape[1] // k.shape[1]) % KV_ARMS[arm] == 0:
                    kv_split = KV_ARMS[arm]
                launched.append(kv_split)
                return backward(q, k, *a, kv_split=kv_split, **kw)

            gb.gluon_backward = split_backward
            prefill_bwd._CALL_PLANS.clear()
            gb._PLANS.clear()
        try:
            yield
        finally:
            _CURRENT[0] = None
            if patch is not None:
                for name, value in saved.items():
                    setattr(gb, name, value)
                gb.launch_kept = launch
                prefill_bwd._CALL_PLANS.clear()
                gb._PLANS.clear()
                print(f"arm {arm}, row {_ROW[0]}, D = {D}: {label} {sorted(set(map(str, launched)))}", flush=True)
            if arm in KV_ARMS:
                gb.gluon_backward = backward
                prefill_bwd._CALL_PLANS.clear()
                gb._PLANS.clear()
                print(f"arm {arm}, row {_ROW[0]}, D = {D}: kv_split {sorted(set(launched))}", flush=True)
            if arm in SWITCH_ARMS:
                copy = gb._attn_bwd_gluon_ws
                gb._attn_bwd_gluon_ws, gb.launch_kept = kernel, launch
                prefill_bwd._CALL_PLANS.clear()
                gb._PLANS.clear()
                if copy not in launched or kernel in launched:  # (the arm timed the build it names, or says so)
                    raise RuntimeError(f"arm {arm}: the switched build's kernel was not the one launched")

    results = []
    for row in args.rows:  # (one row at a time: the arm's config depends on the row's mask)
        _ROW[0] = row
        for D in args.D:  # (p2 has no build at D = 128: two K/V pairs do not fit beside its tiles)
            arms = [a for a in args.arms if not (a == "p2" and D == 128)]
            results += ab_rounds.measure([row], [D], arms, use, args.rounds, row_call, time_fn=graph_time,
                                         arm_key="arm")
    return results


_ROW: list = [None]  # the row being measured


def report(rows: list[dict]) -> str:
    text = ab_rounds.table(rows, "row | D | arm | backward ms | TFLOP/s | × first arm | × peer | dQ's max diff from "
                                 "the first arm", arm_key="arm")
    model = steps_model(rows)
    return text + ("\n\n" + model_table(model) if model else "")


def programs_steps(row: str, D: int) -> tuple[int, int]:
    """(programs, steps) of the Gluon backward on a causal row of documents of one length (``PACKS``, or ``causal``:
    4 × 4K) at head dim D (H·D = 2048): a program per key block of 128, head and document, walking the query blocks
    of 64 rows from its diagonal to the document's end."""
    n = PACKS.get(row) or SHAPES[row][3]
    if row not in PACKS and not (SHAPES[row][0] * n == 16384 and SHAPES[row][1] == SHAPES[row][2] and SHAPES[row][4]):
        raise ValueError(f"{row}: not 16K causal tokens in documents of one length")
    docs = 16384 // n * (2048 // D)
    return docs * (n // 128), docs * sum((n - 128 * j) // 64 for j in range(n // 128))


def persistent_balance(row: str, D: int, programs: int = 132, snake: bool = True) -> float:
    """How evenly the persistent build deals a causal row's steps (documents of one length, ``PACKS`` or ``causal``)
    among ``programs`` programs: the most steps any program walks over the mean, with the tiles numbered as the grid
    numbers its programs (key block fastest, then document · head) and dealt p, p + P, ... (every other round reversed
    with ``snake``, as ``prefill_gluon_bwd._bwd_tile_index`` deals them). 1.0: even; documents of 512 dealt in order
    (bwd-block-m run 7) come out at 1.65, each program taking one key block's walks every round."""
    n = PACKS.get(row) or SHAPES[row][3]
    programs_steps(row, D)  # (the same rows: refuses the others)
    blocks = n // 128
    walk = [(n - 128 * j) // 64 for j in range(blocks)]  # steps of key block j: from its diagonal to the end
    tiles = 16384 // n * (2048 // D) * blocks
    load = [0] * programs
    for r in range(-(-tiles // programs)):
        for p in range(programs):
            t = r * programs + (programs - 1 - p if snake and r % 2 else p)
            if t < tiles:
                load[p] += walk[t % blocks]
    return max(load) / (sum(load) / programs)


def steps_model(rows: list[dict], arm: str = "table") -> dict:
    """Per head dim where ``arm`` ran the rows ``pack2k``, ``causal`` and ``pack128``: the line through the first two
    (ms = intercept + per-step · steps; every such row launches the same programs at a head dim) and what it says of
    pack128 against its measured time: {D: dict(intercept_ms, ns_per_step, us_per_step_per_sm, programs,
    pack128_model_ms, pack128_ms)}. (132 SMs: an H200's.)"""
    ms = {(r["row"], r["D"]): r["ms"] for r in rows if r["arm"] == arm}
    out = {}
    for D in sorted({d for _, d in ms}):
        if not all((row, D) in ms for row in ("pack2k", "causal", "pack128")):
            continue
        (p2, s2), (_, s4), (_, s1) = (programs_steps(row, D) for row in ("pack2k", "causal", "pack128"))
        slope = (ms["causal", D] - ms["pack2k", D]) / (s4 - s2)
        a = ms["pack2k", D] - slope * s2
        out[D] = dict(intercept_ms=a, ns_per_step=slope * 1e6, us_per_step_per_sm=slope * 1e3 * 132, programs=p2,
                      pack128_model_ms=a + slope * s1, pack128_ms=ms["pack128", D])
    return out


def model_table(model: dict) -> str:
    lines = ["| D | programs | ms outside the steps | ns a step | µs a step on one of 132 SMs | pack128: the line's "
             "ms | pack128 measured |", "|---|---|---|---|---|---|---|"]
    for D, m in model.items():
        lines.append(f"| {D} | {m['programs']:,} | {m['intercept_ms']:.3f} | {m['ns_per_step']:.1f} | "
                     f"{m['us_per_step_per_sm']:.2f} | {m['pack128_model_ms']:.3f} | {m['pack128_ms']:.3f} |")
    return "\n".join(lines)


def add_args(ap) -> None:
    ap.add_argument("--arms", nargs="+", default=list(ARMS[:4]), choices=ARMS)


def check_args(ap, args) -> None:
    if args.D == [64, 128] and not set(args.arms) <= set(TABLE_ARMS):  # (the shared command line's default: the
        args.D = [64]  # D = 64 builds' arms run at D = 64 only)
    if 128 in args.D and not set(args.arms) <= set(TABLE_ARMS):
        ap.error(f"--D 128: only the arms {', '.join(TABLE_ARMS)} (the others are D = 64's builds)")
    if len(set(args.arms)) != len(args.arms):
        ap.error("--arms: each arm once")


def main(argv=None) -> int:
    return ab_rounds.main(argv, description=__doc__.splitlines()[0], name="bwd_block_m", rows=ROWS,
                          measure_fn=measure, report=report, add_args=add_args, check_args=check_args)


if __name__ == "__main__":
    sys.exit(main())
