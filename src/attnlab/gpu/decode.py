"""Flash-Decoding on the GPU (lecture §8.2–§8.4): launch configurations, the split count, the launcher.

Decoding has 1 to a few query tokens per sequence, so FlashAttention's grid of (batch, head, query
block) has only B·H programs — too few to keep 132 SMs reading (§8.4). Flash-Decoding splits the keys
of each sequence into S parts, computes a partial result and its logsumexp per part, and merges the
parts with the ⊕ of §4.4 (the kernels: ``attnlab.gpu.decode_kernels``).

* ``DecodeConfig`` — one launch configuration of the split kernel (tile, warps, stages, merge);
  ``decode_configs(head_dim)`` the two measured ones ("small", "large"), ``decode_config_for`` the one
  a call uses (chosen from B·Hkv, D and the page size).
* The split count S for that configuration comes from ``attnlab.cost``: its calibrated model where a
  calibration for this GPU and configuration exists (the H200), else the lecture's wave model
  (``best_num_splits``) on the preset matching the device.
* ``flash_decode_triton`` — the public launcher; ``unsupported`` says which inputs the kernels do not
  cover (``attnlab.flash_decode``, the dispatch, sends those to the blockwise PyTorch path).
* The variants (``attnlab.variants``): a sliding window, softcapping, ALiBi. With a window's left edge
  a call streams only the keys some query can see, ``cost.decode_window_keys`` of them per sequence
  (about the window, whatever the cache holds), and the split count is chosen for that many keys.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton

from .. import cost
from .._checks import (
    check_alibi,
    check_decode_inputs,
    check_positive_int,
    check_softcap,
    check_window,
    resolve_scale,
    seqlens_tensor,
)
from .._runtime import LOG2E, interpret_mode
from .decode_kernels import _decode_merge_kernel, _decode_split_kernel
from .launch import Launcher, current_stream, tensor_key

SUPPORTED_HEAD_DIMS = (32, 64, 96, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_ROWS = 128  # G·Nq query rows per program (the M dimension of tl.dot)


# -- configuration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeConfig:
    """One launch of the split kernel: ``block_n`` keys per tile, the head dim padded to ``block_d``,
    ``num_warps``, ``num_stages`` (the pipeliner keeps num_stages − 1 K/V tiles in flight), the K/V
    loads' cache policy ``evict`` ("" or "evict_first"), and ``fused_merge``: the group's last program
    merges the splits (True) or a second kernel does (False)."""

    block_n: int
    block_d: int
    num_warps: int = 4
    num_stages: int = 3
    evict: str = ""
    fused_merge: bool = True

    @property
    def key(self) -> tuple[int, int, int, int]:
        """(block_n, block_d, num_warps, num_stages): what a split-model calibration is tied to."""
        return (self.block_n, self.block_d, self.num_warps, self.num_stages)


@functools.cache
def decode_configs(head_dim: int) -> dict[str, DecodeConfig]:
    """The split kernel's configurations on a GPU for ``head_dim``, by name (block_n halves for
    head_dim > 128: the same shared memory). ``small``: 64-key tiles, 4 warps, 3 stages (2 K/V buffers
    in flight, 70 KiB compiled at D = 128: 3 programs per SM); ``large``: 128-key tiles (136 KiB, 1
    program per SM, twice the bytes in flight per program)."""
    return dict(_decode_configs(check_positive_int(head_dim, "head_dim")))


@functools.cache
def _decode_configs(head_dim: int) -> dict[str, DecodeConfig]:
    block_d = triton.next_power_of_2(head_dim)
    halve = 1 if block_d <= 128 else 2
    return {"small": DecodeConfig(block_n=64 // halve, block_d=block_d),
            "large": DecodeConfig(block_n=128 // halve, block_d=block_d)}


def kernel_config(head_dim: int, *, batch_heads: int = 1, sms: int = 132, page_size: int | None = None) -> DecodeConfig:
    """The configuration for ``head_dim``, B·Hkv = ``batch_heads`` and a contiguous (``page_size`` None)
    or paged cache, as measured on an H200 (benchmarks/NOTES-decode.md).

    ``large`` once B·Hkv >= sms / 2 — enough (sequence, K/V head) pairs to fill the SMs with few
    splits, and a program that keeps twice the bytes in flight streams faster (H200 run 3, B = 16,
    contiguous: 3.84–4.56 vs 3.60–4.51 TB/s for the small config) — unless the cache is paged in pages
    that do not hold whole large tiles: then every key of a tile needs its own page id, and the large
    config ran at 3.40–4.07 TB/s against the small one's 3.63–4.45 (64-key pages). ``small`` below
    SMs/2, where many splits of small programs (3 per SM) fill the GPU. The interpreter uses 16-key
    tiles (many tiles on small test shapes) and one stage."""
    if interpret_mode():
        return DecodeConfig(block_n=16, block_d=triton.next_power_of_2(head_dim), num_stages=1)
    cfgs = decode_configs(head_dim)
    whole_tiles = page_size is None or page_size % cfgs["large"].block_n == 0
    return cfgs["large" if batch_heads * 2 >= sms and whole_tiles else "small"]


@functools.cache
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _device_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132  # the interpreter: an H100/H200-sized grid
    return _sms(device.index if device.index is not None else torch.cuda.current_device())


def decode_config_for(q, k_cache, block_table=None) -> DecodeConfig:
    """The configuration a ``flash_decode_triton(q, k_cache, ...)`` call uses (checks the shapes)."""
    dims = check_decode_inputs(q, k_cache, k_cache, None, block_table, check_values=False)
    return _config_for(dims, q.device)


def _config_for(dims, device) -> DecodeConfig:
    """With the same config (and split count) a paged cache gives the contiguous cache's output to the
    last bit; at B·Hkv >= SMs/2 a cache paged in pages smaller than the large tile takes the small one."""
    return kernel_config(dims.D, batch_heads=dims.B * dims.Hkv, sms=_device_sms(device), page_size=dims.page_size)


# -- the split count -------------------------------------------------------------------------------------


@functools.cache
def gpu_for_device(index: int):
    """attnlab.cost's GPU preset matching this CUDA device's name (H100 if none does), with ``sms``
    read from the device."""
    props = torch.cuda.get_device_properties(index)
    name = props.name.upper()
    preset = next((cost.get_gpu(c) for c in ("B200", "H200", "H100", "A100", "V100") if c in name), None)
    return replace(preset or cost.get_gpu("H100"), sms=props.multi_processor_count)


@functools.lru_cache(maxsize=4096)
def _splits_on_device(batch: int, kv_heads: int, seq: int, head_dim: int, index: int, key: tuple) -> int:
    return cost.decode_num_splits(batch=batch, kv_heads=kv_heads, seq=seq, head_dim=head_dim,
                                  gpu=gpu_for_device(index), config=key)


def choose_num_splits(*, batch: int, kv_heads: int, seq: int, head_dim: int, device=None,
                      config: DecodeConfig | None = None) -> int:
    """The split count for a decode call with launch configuration ``config`` (default: the one this
    call would use).

    ``attnlab.cost.decode_num_splits`` on the preset matching the device, with its SM count: the
    calibrated model where cost holds a calibration for that GPU and configuration (the H200), else the
    lecture's wave model. One program reads one K/V head (the GQA group shares
    it), so the models' "heads" are the ``kv_heads``; ``seq`` is the cache's capacity (the lengths are
    not read on the host). Without a GPU (the interpreter) the H100 preset.
    """
    dev = torch.device(device) if device is not None else None
    if dev is None and torch.cuda.is_available():
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev is None or dev.type != "cuda":
        cfg = config or kernel_config(head_dim, batch_heads=batch * kv_heads)
        return cost.decode_num_splits(batch=batch, kv_heads=kv_heads, seq=seq, head_dim=head_dim, gpu="H100",
                                      config=cfg.key)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    cfg = config or kernel_config(head_dim, batch_heads=batch * kv_heads, sms=_sms(index))
    return _splits_on_device(batch, kv_heads, seq, head_dim, index, cfg.key)


# -- launcher --------------------------------------------------------------------------------------------


def unsupported(q, dims) -> tuple[str, str] | None:
    """Why the kernels cannot take this call — a reason key and a message — or None if they can."""
    if q.device.type != "cuda" and not (q.device.type == "cpu" and interpret_mode()):
        return "device", f"tensors on {q.device} (the kernels need CUDA, or TRITON_INTERPRET=1 on the CPU)"
    if q.dtype not in SUPPORTED_DTYPES:
        return f"dtype-{q.dtype}", f"dtype {q.dtype} (the kernels take float16 and bfloat16)"
    if dims.Dv != dims.D:
        return "dv", f"value head dim {dims.Dv} differs from the key head dim {dims.D}"
    if dims.D not in SUPPORTED_HEAD_DIMS:
        return f"d-{dims.D}", f"head dim {dims.D} (the kernels take {', '.join(map(str, SUPPORTED_HEAD_DIMS))})"
    if dims.group * dims.Nq > MAX_ROWS:
        return "rows", f"{dims.group} query heads per K/V head × {dims.Nq} queries (more than {MAX_ROWS} rows)"
    return None


def flash_decode_triton(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                        causal: bool = True, window=None, softcap: float | None = None, alibi_slopes=None,
                        scale: float | None = None, config: DecodeConfig | None = None):
    """Flash-Decoding over a KV cache with the Triton kernels (§8.4).

    Arguments:
        q: (B, H, Nq, D) float16/bfloat16, Nq small (1 to a few new tokens per sequence).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D), or paged (num_pages, page_size, Hkv, D)
            when ``block_table`` (B, max_pages) int32 is given; H % Hkv == 0 (GQA/MQA).
        cache_seqlens: (B,) int32 keys held by each sequence (None: the full capacity).
        num_splits: K/V splits per (sequence, K/V head); None asks ``choose_num_splits`` (for the keys
            the call streams: with a window, about the window). Counts beyond one split per key tile
            change nothing and are capped.
        causal: query i of sequence b sits at position pos = cache_seqlens[b] - Nq + i and sees keys
            j <= pos (the window's right side at 0).
        window: (left, right): key j visible iff pos - left <= j <= pos + right, -1 = unbounded side
            (None: (-1, -1)); flash-attn's ``window_size``. Only the keys in the window are read.
        softcap: scores become softcap·tanh(s/softcap) (None: off).
        alibi_slopes: (H,) or (B, H) float32: -slope·|pos - j| is added after the softcap.
        scale: softmax scale, default 1/sqrt(D).
        config: a ``DecodeConfig`` to force (benchmarks, tests); default ``decode_config_for``.
    Returns:
        out (B, H, Nq, D) in q's dtype and lse (B, H, Nq) float32 (natural log). Rows with no
        visible key give out = 0, lse = -inf.

    A call whose inputs have the signature of an earlier call (shapes, strides, dtypes, device,
    variant, stream: ``plan_key``) reuses that call's plan and compiled kernels without checking again.
    On CUDA the lengths and page ids are not read on the host (that would synchronise every call);
    the kernel clamps them into the cache, so bad values give wrong numbers, never a bad access.
    Inputs the kernels do not cover raise a ``ValueError`` (``attnlab.flash_decode`` falls back instead).
    """
    key = plan_key(q, k_cache, v_cache, cache_seqlens, block_table, num_splits, causal, window, softcap,
                   alibi_slopes, scale, config)
    if key is not None and (result := run_planned(key, q, k_cache, v_cache, cache_seqlens, block_table,
                                                  alibi_slopes)) is not None:
        return result
    cache_seqlens = seqlens_tensor(cache_seqlens, q)
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table,
                               check_values=q.device.type != "cuda")
    mask = check_window(window, causal)
    softcap = check_softcap(softcap)
    slopes = check_alibi(alibi_slopes, dims.B, dims.H, q.device)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    if config is not None and not isinstance(config, DecodeConfig):
        raise TypeError(f"config must be a DecodeConfig or None, got {type(config).__name__}")
    why = unsupported(q, dims)
    if why is not None:
        raise ValueError(f"flash_decode_triton: the kernels do not take {why[1]}; "
                         "attnlab.flash_decode runs such inputs on the blockwise PyTorch path")
    return decode_fn(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                     num_splits=num_splits, mask=mask, scale=resolve_scale(scale, dims.D), softcap=softcap,
                     slopes=slopes, config=config, key=key)


def streamed_keys(*, capacity: int, queries: int, mask) -> int:
    """The most keys one (sequence, K/V head) of a call streams from a cache of ``capacity`` keys: all
    of them, or with the ``mask``'s left edge ``left + queries`` (the keys some query of the step can
    see), whichever is fewer (``cost.decode_window_keys``)."""
    return cost.decode_window_keys(seq=capacity, queries=queries, window=(mask.left, mask.right))


_COUNTERS: dict = {}
_SPARE: dict = {}


def _counters(device, n: int) -> torch.Tensor:
    """Arrival counters of the fused merge, one per (sequence, K/V head); kept per (device, stream)
    and left at zero by the kernel itself, so calls need no memset."""
    stream = current_stream(device) if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[key] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return buf


def _spare(device) -> torch.Tensor:
    """A small float32 tensor passed for the pointer arguments a launch does not read."""
    key = str(device)
    if key not in _SPARE:
        _SPARE[key] = torch.zeros(16, dtype=torch.float32, device=device)
    return _SPARE[key]


class DecodePlan:
    """Everything a decode call derives from its signature — the inputs' shapes, strides, dtypes and
    device, the variant, the split count, the configuration — computed once: the grid, the scalar
    arguments, the output and partial shapes, and the kernels' ``Launcher``s (which, after their first
    launch, skip Triton's per-call argument binding). Calling it with tensors of that signature
    allocates the outputs and launches."""

    def __init__(self, q, k_cache, v_cache, dims, *, cache_seqlens, block_table, num_splits: int | None, mask,
                 scale: float, softcap: float | None, slopes, config: DecodeConfig | None):
        B, H, Nq, D, Hkv = dims.B, dims.H, dims.Nq, dims.D, dims.Hkv
        dev = q.device
        cfg = config or _config_for(dims, dev)
        keys = streamed_keys(capacity=dims.capacity, queries=Nq, mask=mask)
        if num_splits is None:
            num_splits = choose_num_splits(batch=B, kv_heads=Hkv, seq=keys, head_dim=D, device=dev, config=cfg)
        # the streamed keys start in the tile holding the first of them: at most one tile more than they fill
        tiles = triton.cdiv(dims.capacity, cfg.block_n)
        if mask.left >= 0:
            tiles = min(tiles, triton.cdiv(keys, cfg.block_n) + 1)
        self.num_splits = S = max(1, min(num_splits, tiles))
        self.merge = 0 if S == 1 else (2 if cfg.fused_merge else 1)
        self.shape, self.dtype, self.device = (B, H, Nq, D), q.dtype, dev
        self.has_seqlens = cache_seqlens is not None
        self.cast_seqlens = self.has_seqlens and (cache_seqlens.dtype != torch.int32
                                                  or not cache_seqlens.is_contiguous())
        self.paged = block_table is not None
        self.cast_table = self.paged and (block_table.dtype != torch.int32 or block_table.stride(-1) != 1)
        if self.cast_table:
            block_table = block_table.to(torch.int32).contiguous()
        self.has_slopes = slopes is not None
        self.spare = _spare(dev)
        self.counters = _counters(dev, B * Hkv) if self.merge == 2 else self.spare
        self.spare_ptr, self.counters_ptr = self.spare.data_ptr(), self.counters.data_ptr()
        self.scratch = None
        self.on_cuda = dev.type == "cuda"
        out_strides = (H * Nq * D, Nq * D, D, 1)  # out is allocated contiguous
        stride_sb, stride_sh = (slopes.stride(0), slopes.stride(1)) if slopes is not None else (0, 0)
        # with softcap the kernel computes softcap·log2(e)·tanh(scale·qk/softcap): base 2 after the cap
        qk_scale, cap_scale = (scale * LOG2E, 0.0) if softcap is None else (scale / softcap, softcap * LOG2E)
        interp = dev.type == "cpu"
        self.tail = [  # the split kernel's arguments after its 11 pointers, in order
            *q.stride(), *k_cache.stride(), *v_cache.stride(), block_table.stride(0) if self.paged else 0,
            *out_strides, stride_sb, stride_sh, qk_scale, cap_scale, max(mask.left, 0), max(mask.right, 0),
            H, dims.capacity, dims.num_pages or 1, S,
            # constexprs
            D, Nq, H // Hkv, dims.page_size or 1,
            max(16, triton.next_power_of_2((H // Hkv) * Nq)),  # BLOCK_M: the group's G·Nq query rows, padded
            cfg.block_n, cfg.block_d, self.paged, mask.left >= 0, mask.right >= 0, softcap is not None,
            slopes is not None, self.merge, interp, cfg.evict, self.has_seqlens,
        ]
        assert len(self.tail) + 11 == len(_decode_split_kernel.arg_names)
        self.split = Launcher(_decode_split_kernel, (S, Hkv, B), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        if self.merge == 1:
            self.merge_tail = [*out_strides, H, D, S, Nq, triton.next_power_of_2(S), cfg.block_d]
            self.merge_launch = Launcher(_decode_merge_kernel, (B * H * Nq, 1, 1), num_warps=4 if D >= 128 else 2,
                                         num_stages=3)

    def __call__(self, q, k_cache, v_cache, cache_seqlens, block_table, slopes, stream: int | None = None):
        """Launch on tensors of the plan's signature (``slopes`` the (H,) or (B, H) tensor or its (B, H)
        view) on ``stream`` (a raw handle; None: the current stream); returns (out, lse)."""
        B, H, Nq, D = self.shape
        dev = self.device
        out = torch.empty(self.shape, dtype=self.dtype, device=dev)  # (B, H, Nq, D)
        lse = torch.empty((B, H, Nq), dtype=torch.float32, device=dev)  # (B, H, Nq), natural log
        if self.cast_seqlens:
            cache_seqlens = cache_seqlens.to(torch.int32).contiguous()
        if self.cast_table:
            block_table = block_table.to(torch.int32).contiguous()
        if stream is not None and self.split.direct() and (self.merge != 1 or self.merge_launch.direct()):
            o_part, lse_part = self._partials()
            self.split.launch([q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                               cache_seqlens.data_ptr() if self.has_seqlens else self.spare_ptr,
                               block_table.data_ptr() if self.paged else self.spare_ptr,
                               o_part, lse_part, out.data_ptr(), lse.data_ptr(), self.counters_ptr,
                               slopes.data_ptr() if self.has_slopes else self.spare_ptr, *self.tail], stream)
            if self.merge == 1:
                self.merge_launch.launch([o_part, lse_part, out.data_ptr(), lse.data_ptr(), *self.merge_tail], stream)
            return out, lse
        spare = self.spare
        o_part, lse_part = self._partials(as_tensors=True)
        self.split([q, k_cache, v_cache, cache_seqlens if self.has_seqlens else spare,
                    block_table if self.paged else spare, o_part, lse_part, out, lse, self.counters,
                    slopes if self.has_slopes else spare, *self.tail], stream)
        if self.merge == 1:
            self.merge_launch([o_part, lse_part, out, lse, *self.merge_tail], stream)
        return out, lse

    def _partials(self, as_tensors: bool = False):
        """The partial outputs and lse of the splits (float32 (B, H, Nq, S, D) and (B, H, Nq, S)):
        the plan's own scratch — calls queued on one stream run in order, and a plan belongs to one
        stream — except while a CUDA graph is being captured: a graph gets buffers of its own, which
        live as long as it does. As data pointers unless ``as_tensors``; the spare tensor without splits."""
        if not self.merge:
            return (self.spare, self.spare) if as_tensors else (self.spare_ptr, self.spare_ptr)
        parts = self.scratch
        if parts is None or (self.on_cuda and torch.cuda.is_current_stream_capturing()):
            B, H, Nq, D = self.shape
            parts = (torch.empty((B, H, Nq, self.num_splits, D), dtype=torch.float32, device=self.device),
                     torch.empty((B, H, Nq, self.num_splits), dtype=torch.float32, device=self.device))
            if self.scratch is None and not (self.on_cuda and torch.cuda.is_current_stream_capturing()):
                self.scratch = parts
        return parts if as_tensors else (parts[0].data_ptr(), parts[1].data_ptr())


_PLANS: dict = {}
_MAX_PLANS = 256


def plan_key(q, k_cache, v_cache, cache_seqlens, block_table, num_splits, causal, window, softcap, alibi_slopes,
             scale, config=None) -> tuple | None:
    """A key that determines a decode call's plan — every tensor's ``tensor_key``, the variant, the
    split count, the configuration, the current CUDA device and stream — or None where it cannot say
    (a list for a tensor, a window given as a list, anything of an unexpected type): such calls take
    the checked path every time. Equal keys mean equal checks, so a plan made by a checked call
    serves every later call with its key."""
    if not (type(q) is torch.Tensor and type(causal) is bool
            and (num_splits is None or type(num_splits) is int)
            and (softcap is None or type(softcap) in (int, float))
            and (scale is None or type(scale) in (int, float))
            and (window is None or (type(window) is tuple and len(window) == 2
                                    and type(window[0]) is int and type(window[1]) is int))):
        return None
    if q.is_cuda:
        where = (torch.cuda.current_device(), current_stream(q.device))
    elif interpret_mode():
        where = (None, None)
    else:
        return None
    try:
        return (tensor_key(q), tensor_key(k_cache), tensor_key(v_cache),
                None if cache_seqlens is None else tensor_key(cache_seqlens),
                None if block_table is None else tensor_key(block_table),
                None if alibi_slopes is None else tensor_key(alibi_slopes),
                num_splits, causal, window, softcap, scale, config, *where)
    except AttributeError:  # not a tensor
        return None


_STATS = {"hits": 0, "plans": 0}


def run_planned(key, q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes):
    """(out, lse) from the plan stored under ``key``, or None if there is none."""
    plan = _PLANS.get(key)
    if plan is None:
        return None
    _STATS["hits"] += 1
    return plan(q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes, key[-1])


def plan_stats() -> dict[str, int]:
    """How many calls reused a plan (``hits``) and how many plans were made and kept (``plans``), since
    the process started or ``clear_plans``."""
    return dict(_STATS, cached=len(_PLANS))


def clear_plans() -> None:
    """Forget every kept plan (and the counts)."""
    _PLANS.clear()
    _STATS.update(hits=0, plans=0)


def decode_fn(q, k_cache, v_cache, dims, *, cache_seqlens, block_table, num_splits: int | None, mask,
              scale: float, softcap: float | None = None, slopes=None, config: DecodeConfig | None = None,
              key: tuple | None = None):
    """Run the kernels on inputs already checked and supported (``dims`` from ``check_decode_inputs``,
    ``mask`` a ``variants.Mask``, ``slopes`` (B, H) float32 or None). With ``key`` (``plan_key`` of the
    call as made) the plan is kept for later calls with that key."""
    plan = DecodePlan(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                      num_splits=num_splits, mask=mask, scale=scale, softcap=softcap, slopes=slopes, config=config)
    result = plan(q, k_cache, v_cache, cache_seqlens, block_table, slopes)
    if key is not None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
        _STATS["plans"] += 1
    return result


__all__ = ["DecodeConfig", "DecodePlan", "choose_num_splits", "clear_plans", "plan_key", "plan_stats", "run_planned", "decode_config_for", "decode_configs", "flash_decode_triton",
           "gpu_for_device", "kernel_config", "streamed_keys", "unsupported", "SUPPORTED_HEAD_DIMS", "SUPPORTED_DTYPES"]
