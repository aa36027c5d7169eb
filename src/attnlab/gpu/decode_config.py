"""Flash-Decoding's launch configurations and split count on the GPU (lecture §8.2–§8.4).

* ``DecodeConfig`` — one launch configuration of the split kernel (tile, warps, stages, merge);
  ``decode_configs(head_dim)`` the two measured ones ("small", "large"), ``decode_config_for`` the one
  a call uses (chosen from B·Hkv, D and the page size).
* ``choose_num_splits`` — the split count S for that configuration, from ``attnlab.cost``: its
  calibrated model where a calibration for this GPU and configuration exists (measured on the H200,
  predicted from it for the H100), else the
  lecture's wave model (``best_num_splits``) on the preset matching the device.
* ``streamed_keys`` — how many keys a call streams per (sequence, K/V head): with a window's left
  edge about the window, whatever the cache holds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch
import triton

from .. import cost
from .._checks import check_decode_inputs, check_positive_int
from .._runtime import interpret_mode

# -- configuration ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeConfig:
    """One launch of the split kernel: ``block_n`` keys per tile, the head dim padded to ``block_d``,
    ``num_warps``, ``num_stages`` (the pipeliner keeps num_stages − 1 K/V tiles in flight), the K/V
    loads' cache policy ``evict`` ("" or "evict_first"), and ``fused_merge``: the group's last program
    merges the splits (True) or a second kernel does (False, the default: under CUDA graphs the second
    kernel was faster at every batch-1 shape and split count measured, its merge running one program
    per query row in parallel where the fused one waits for the last split and merges alone). ``order``: how
    the call's tiles of keys are dealt to its splits, "strided" (split s takes tiles s, s + S, s + 2S, ...)
    or "chunks" (one run of consecutive tiles each); ``kernel_config`` gives contiguous caches "strided" and
    paged ones "chunks". ``kernel``: the split and merge kernels, "triton" (``decode_kernels``) or "gluon"
    (``decode_gluon``: the first tiles' copies issued before the length arrives; contiguous caches, strided splits,
    no left window edge, softcap or ALiBi — a plan of a call it does not take runs the Triton kernels, or refuses a
    configuration the caller forced)."""

    block_n: int
    block_d: int
    num_warps: int = 4
    num_stages: int = 3
    evict: str = ""
    fused_merge: bool = False
    order: str = "strided"
    kernel: str = "triton"

    @property
    def key(self) -> tuple[int, int, int, int]:
        """(block_n, block_d, num_warps, num_stages): what a split-model calibration is tied to."""
        return (self.block_n, self.block_d, self.num_warps, self.num_stages)


def decode_configs(head_dim: int) -> dict[str, DecodeConfig]:
    """The split kernel's configurations on a GPU for ``head_dim``, by name (block_n halves for
    head_dim > 128: the same shared memory). ``small``: 64-key tiles, 4 warps, 3 stages (2 K/V buffers
    in flight, 70 KiB compiled at D = 128: 3 programs per SM); ``large``: 128-key tiles (136 KiB, 1
    program per SM, twice the bytes in flight per program)."""
    return dict(_decode_configs(check_positive_int(head_dim, "head_dim")))


# whether the GPU configurations merge the splits inside the split kernel (one launch per call) or in the
# merge kernel (``DecodeConfig.fused_merge``); ``_decode_configs.cache_clear()`` after changing it
FUSED_MERGE = False

# Whether contiguous caches at D = 64 and 128 take the Gluon split kernel (``DecodeConfig.kernel`` "gluon") on a GPU:
# each split's first tiles copied into shared memory before the sequence's length arrives (benchmarks/NOTES-decode.md
# v26). Off: on an H100 it ran slower than the Triton kernel on every batch-1 shape (benchmarks/RESULTS.md, "Decode-host
# run 37"); calls the Gluon kernel does not take run the Triton kernel either way. The plans made after a change take
# it (``clear_plans``).
GLUON_SPLIT = False


@functools.cache
def _decode_configs(head_dim: int) -> dict[str, DecodeConfig]:
    block_d = triton.next_power_of_2(head_dim)
    halve = 1 if block_d <= 128 else 2
    return {"small": DecodeConfig(block_n=64 // halve, block_d=block_d, fused_merge=FUSED_MERGE),
            "large": DecodeConfig(block_n=128 // halve, block_d=block_d, fused_merge=FUSED_MERGE)}


def kernel_config(head_dim: int, *, batch_heads: int = 1, sms: int = 132, page_size: int | None = None) -> DecodeConfig:
    """The configuration for ``head_dim``, B·Hkv = ``batch_heads`` and a contiguous (``page_size`` None)
    or paged cache, as measured on an H200 (benchmarks/NOTES-decode.md).

    A contiguous cache (D <= 128) takes ``large`` at every batch: a program that keeps twice the bytes
    in flight streams faster. At B = 16 (run 3): 3.84–4.56 against 3.60–4.51 TB/s for the small config;
    at B = 1, each at its best split count (decode-host run 2, CUDA graphs): 40.0 against 40.8 µs (32/8
    heads, 32K keys), 14.3 against 16.6 (64/8, 8K), 20.6 against 22.8 (28/4, 20,000), and in run 4's
    config sweep 2.72–4.44 against 2.59–4.41 TB/s at 32/32 heads. A paged cache, and D = 256 (not
    measured at small batches), take ``large`` once B·Hkv >= sms / 2 if the pages hold whole large
    tiles, else ``small``: with 64-key pages every key of a large tile needs its own page id, and the
    large config ran at 3.40–4.07 TB/s against the small one's 3.63–4.45 at B = 16, and at 1.79–3.99
    against 2.55–4.43 at B = 1 (32/32 heads). The interpreter uses 16-key tiles (many tiles on small
    test shapes) and one stage.

    A contiguous cache's splits take their tiles in turn (``order`` "strided"), a paged cache's in runs
    ("chunks"): on an H200 under CUDA graphs the strided order ran contiguous caches at batch 1 at 0.995–1.049×
    the TB/s of runs (decode runs 6 and 7; faster on 11 rows of 12) and at batch 16 at 0.993–1.014×, but paged
    caches at batch 1 with GQA over 32K and 128K keys at 0.921–0.994× (benchmarks/NOTES-decode.md v14 and v17).

    With ``GLUON_SPLIT`` on, a contiguous cache at D = 64 or 128 takes the Gluon kernels (``kernel`` "gluon")."""
    order = "strided" if page_size is None else "chunks"
    if interpret_mode():
        return DecodeConfig(block_n=16, block_d=triton.next_power_of_2(head_dim), num_stages=1, order=order)
    cfgs = decode_configs(head_dim)
    if page_size is None and head_dim <= 128:
        return replace(cfgs["large"], kernel="gluon") if GLUON_SPLIT and head_dim in (64, 128) else cfgs["large"]
    whole_tiles = page_size is None or page_size % cfgs["large"].block_n == 0
    return replace(cfgs["large" if batch_heads * 2 >= sms and whole_tiles else "small"], order=order)


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
    last bit; but a paged cache takes the small config below B·Hkv = SMs/2, or in pages smaller than
    the large tile, where a contiguous one takes the large config (``kernel_config``)."""
    return kernel_config(dims.D, batch_heads=dims.B * dims.Hkv, sms=_device_sms(device), page_size=dims.page_size)


# -- the split count -------------------------------------------------------------------------------------


@functools.cache
def gpu_for_device(index: int):
    """attnlab.cost's GPU preset matching this CUDA device's name, with ``sms`` read from the device; where none
    matches, the H100's numbers under the device's own name (so that no calibration of another GPU applies: the wave
    model)."""
    props = torch.cuda.get_device_properties(index)
    name = props.name.upper()
    preset = next((cost.get_gpu(c) for c in ("B200", "H200", "H100", "A100", "V100") if c in name), None)
    if preset is None:
        preset = replace(cost.get_gpu("H100"), name=props.name)
    return replace(preset, sms=props.multi_processor_count)


@functools.lru_cache(maxsize=4096)
def _splits_on_device(batch: int, kv_heads: int, seq: int, head_dim: int, index: int, key: tuple) -> int:
    return cost.decode_num_splits(batch=batch, kv_heads=kv_heads, seq=seq, head_dim=head_dim,
                                  gpu=gpu_for_device(index), config=key)


def choose_num_splits(*, batch: int, kv_heads: int, seq: int, head_dim: int, device=None,
                      config: DecodeConfig | None = None) -> int:
    """The split count for a decode call with launch configuration ``config`` (default: the one this
    call would use).

    ``attnlab.cost.decode_num_splits`` on the preset matching the device, with its SM count: the
    calibrated model where cost holds a calibration for that GPU and configuration (the H200's, or the H100's
    predicted from it), else the
    lecture's wave model. One program reads one K/V head (the GQA group shares
    it), so the models' "heads" are the ``kv_heads``; ``seq`` is the cache's capacity (the lengths are
    not read on the host), rounded on a GPU by ``model_seq``. Without a GPU (the interpreter) the
    H100 preset, at ``seq`` itself.
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
    return _splits_on_device(batch, kv_heads, model_seq(seq), head_dim, index, cfg.key)


def model_seq(seq: int) -> int:
    """``seq`` rounded up to 6 significant bits (at most 1/32 more, e.g. 32,769 -> 33,792): on a GPU
    the split model is evaluated (and cached) at this length, so a cache that grows a key per step
    runs the model once per ~3% of growth, not every step (~50 µs of host time each)."""
    if seq <= 64:
        return seq
    step = 1 << (seq.bit_length() - 6)
    return -(-seq // step) * step


def streamed_keys(*, capacity: int, queries: int, mask) -> int:
    """The most keys one (sequence, K/V head) of a call streams from a cache of ``capacity`` keys: all
    of them, or with the ``mask``'s left edge ``left + queries`` (the keys some query of the step can
    see), whichever is fewer (``cost.decode_window_keys``)."""
    return cost.decode_window_keys(seq=capacity, queries=queries, window=(mask.left, mask.right))


__all__ = ["DecodeConfig", "choose_num_splits", "decode_config_for", "decode_configs", "gpu_for_device",
           "kernel_config", "model_seq", "streamed_keys"]
