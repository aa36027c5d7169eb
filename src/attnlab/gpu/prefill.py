"""The Triton FlashAttention-2 kernels as a PyTorch operator (lecture §7.7: plug it into training).

``attnlab::flash_attn_fwd`` and ``attnlab::flash_attn_bwd`` are registered with ``torch.library``
(custom op + fake implementation + autograd formula), so ``flash_attention_triton`` works inside
``torch.compile(fullgraph=True)``; in eager mode the same kernels run through a plain
``torch.autograd.Function``, which costs less host time per call. The forward saves only q, k, v, O and the
logsumexp L (§7.2); the backward recomputes P from L.

``unsupported`` says which inputs the kernels do not cover; ``attnlab.flash_attention`` (the
dispatch) asks it and sends those to the blockwise PyTorch path. Nothing here falls back.
"""

import torch

from .._checks import check_causal, check_qkv, resolve_scale
from .._runtime import interpret_mode, triton_available
from .config import BWD_HEAD_DIMS, FWD_HEAD_DIMS, KERNEL_DTYPES


@torch.library.custom_op("attnlab::flash_attn_fwd", mutates_args=(),
                         schema="(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)")
def _flash_attn_fwd(q, k, v, causal, scale):
    from .prefill_fwd import prefill_forward

    return prefill_forward(q, k, v, causal=causal, scale=scale)


@_flash_attn_fwd.register_fake
def _(q, k, v, causal, scale):
    B, H, Nq, _ = q.shape
    return q.new_empty((B, H, Nq, v.shape[-1])), q.new_empty((B, H, Nq), dtype=torch.float32)


@torch.library.custom_op(
    "attnlab::flash_attn_bwd", mutates_args=(),
    schema="(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor? dlse, bool causal, "
           "float scale) -> (Tensor, Tensor, Tensor)")
def _flash_attn_bwd(dout, q, k, v, out, lse, dlse, causal, scale):
    from .prefill_bwd import prefill_backward

    return prefill_backward(dout, q, k, v, out, lse, causal=causal, scale=scale, dlse=dlse)


@_flash_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, dlse, causal, scale):
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format),
            torch.empty_like(v, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal
    ctx.scale = scale


def _refuse_double_backward() -> None:
    if torch.is_grad_enabled():  # backward(create_graph=True): the kernels' gradients are not differentiable
        raise RuntimeError("attnlab.flash_attention: double backward (create_graph=True) is not supported")


def _backward(ctx, dout, dlse):
    _refuse_double_backward()
    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = _flash_attn_bwd(dout, q, k, v, out, lse, dlse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


_flash_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


class _FlashAttnFn(torch.autograd.Function):
    """The same forward and backward as the registered op, for eager mode: a custom op's dispatch
    costs tens of microseconds of host time per call, which at N = 1K is a visible share of a GPU
    step (benchmarks/NOTES-prefill.md, v3). ``torch.compile`` traces the registered op instead."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        from .prefill_fwd import prefill_forward

        out, lse = prefill_forward(q, k, v, causal=causal, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale = causal, scale
        ctx.set_materialize_grads(False)  # an unused lse gets no zero gradient (and no extra work)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        _refuse_double_backward()
        from .prefill_bwd import prefill_backward

        q, k, v, out, lse = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = prefill_backward(dout, q, k, v, out, lse, causal=ctx.causal, scale=ctx.scale, dlse=dlse)
        return dq, dk, dv, None, None


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def unsupported(q, dims, *, needs_grad: bool) -> tuple[str, str] | None:
    """Why the kernels cannot take this call — a reason key and a message — or None if they can.

    ``dims`` from ``check_qkv``; ``needs_grad``: the call will be differentiated (the backward
    kernels cover fewer head dims)."""
    if not (q.is_cuda or (q.device.type == "cpu" and interpret_mode())):
        return "device", f"tensors on {q.device} (the kernels need CUDA, or TRITON_INTERPRET=1 on the CPU)"
    if not triton_available():
        return "triton", "triton is not installed (pip install 'attnlab[gpu]')"
    if q.is_cuda and torch.cuda.get_device_properties(q.device).major < 8:  # (constant under torch.compile)
        return "gpu", f"GPU {torch.cuda.get_device_properties(q.device).name} is older than compute capability 8.0"
    if q.dtype not in KERNEL_DTYPES:
        return f"dtype-{q.dtype}", f"dtype {q.dtype} (the kernels take float16 and bfloat16)"
    if dims.Dv != dims.D:
        return "dv", f"value head dim {dims.Dv} differs from the query/key head dim {dims.D}"
    if dims.D not in FWD_HEAD_DIMS:
        return f"d-{dims.D}", f"head dim {dims.D} (the kernels take {', '.join(map(str, FWD_HEAD_DIMS))})"
    if needs_grad and dims.D not in BWD_HEAD_DIMS:
        return (f"bwd-d-{dims.D}", f"head dim {dims.D} with gradients (the backward kernels take "
                f"{', '.join(map(str, BWD_HEAD_DIMS))})")
    return None


def attention_fn(q, k, v, *, causal: bool, scale: float):
    """(out, lse) through the kernels, differentiable; inputs already checked and supported."""
    if _is_compiling():
        return _flash_attn_fwd(q, k, v, causal, scale)
    return _FlashAttnFn.apply(q, k, v, causal, scale)


def flash_attention_triton(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False):
    """Exact attention through the Triton FlashAttention-2 kernels, differentiable.

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, D), H % Hkv == 0 (GQA/MQA read K/V
            heads directly, nothing is repeated). float16 or bfloat16 on a CUDA GPU (or on the CPU
            under ``TRITON_INTERPRET=1``); D in 32, 64, 96, 128 (and 256 without gradients).
        causal: bottom-right aligned mask: query i sees keys j <= i + Nk - Nq (SDPA's ``is_causal``
            is top-left; the two agree when Nq == Nk). Rows that see no key give out = 0, lse = -inf.
        scale: softmax scale, default 1/sqrt(D).
        return_lse: also return the logsumexp (B, H, Nq), float32, natural log; it is differentiable.
    Returns:
        out (B, H, Nq, D) in q's dtype, or (out, lse).

    Inputs the kernels do not cover raise a ``ValueError`` saying why; ``attnlab.flash_attention``
    is the entry point that falls back to the blockwise PyTorch path instead.
    """
    dims = check_qkv(q, k, v)
    scale = resolve_scale(scale, dims.D)
    causal = check_causal(causal)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    why = unsupported(q, dims, needs_grad=needs_grad)
    if why is not None:
        raise ValueError(f"flash_attention_triton: the kernels do not take {why[1]}; "
                         "attnlab.flash_attention runs such inputs on the blockwise PyTorch path")
    out, lse = attention_fn(q, k, v, causal=causal, scale=scale)
    return (out, lse) if return_lse else out
