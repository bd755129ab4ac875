"""The PyTorch half of flashladder: launches on torch tensors, the custom ops
``flashladder::attention`` and ``flashladder::attention_backward`` (fake implementations for
torch.compile, autograd through rung 14's backward on sm_90, rung 11's elsewhere), and
``attention()``.

Imported on first use, so ``import flashladder`` works without PyTorch. Outputs and the rung's
workspace are allocated by PyTorch on the tensors' device (its stream-ordered caching
allocator), and every launch goes to ``torch.cuda.current_stream()``.
"""

import atexit

import torch

from . import _core, _ext


# The current stream's handle of a device index. torch.cuda.current_stream() builds a Stream object
# on every call; the raw getter (what Triton and torch.compile's generated code launch with) does
# not. Either gives the same handle.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
# torch.compiler.is_compiling without the two attribute lookups per call (torch.compile knows the
# function itself, under either name).
_is_compiling = torch.compiler.is_compiling


def _stream(t):
    index = t.device.index
    if _raw_stream is not None and index is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(t.device).cuda_stream


def _workspace(plan, like):
    """(pointer, bytes, tensor) of the plan's scratch; the tensor keeps it alive until the
    launch is queued, and the allocator's stream order keeps it from reuse until it has run."""
    if plan.workspace_bytes == 0:
        return 0, 0, None
    ws = like.new_empty((plan.workspace_bytes,), dtype=torch.uint8)
    return ws.data_ptr(), plan.workspace_bytes, ws


def _strides4(t):
    """A tensor's strides as the extension reads them: [batch, seqlen, heads, head_dim], or for a
    packed [tokens, heads, head_dim] tensor those of its [1, tokens, heads, head_dim] view."""
    st = t.stride()
    return st if t.dim() == 4 else (t.numel(),) + tuple(st)


#: The order of _forward's extras: each a tensor or None (a shorter tuple: the rest None), then for
#: a paged cache its pool's rows (an int) as an eighth element.
EXTRAS = ("cu_seqlens_q", "cu_seqlens_k", "sinks", "alibi_slopes", "seqused_k", "block_table", "seqstart_k")


def _extras(extras):
    """(pointers, ints) of the extension's extras from a tuple in EXTRAS' order (and the pool's
    rows): pointers in that order, ints (alibi batch stride, block_table's pages per sequence,
    the pool's rows)."""
    if extras is None:
        return (0,) * 7, (0, 0, 0)
    tensors = tuple(extras[:7]) + (None,) * (7 - min(len(extras), 7))
    pool_rows = extras[7] if len(extras) > 7 else 0
    ptrs = tuple(0 if t is None else t.data_ptr() for t in tensors)
    slopes, table = tensors[3], tensors[5]
    return ptrs, (slopes.shape[-1] if slopes is not None and slopes.dim() == 2 else 0,
                  table.shape[1] if table is not None else 0, int(pool_rows or 0))


def _forward(q, k, v, causal, softmax_scale, rung, variant, key=None, o_fp32=False, mods=None,
             extras=None):
    """O and LSE of entry ``rung`` (None: the route, _core.route_forward) on q, k, v, checked
    first, and with ``o_fp32`` (a backward pass follows) also O in fp32, dense like O: the rung's
    own fp32 copy when it writes one (Rung.writes_o_fp32), else the 16-bit O widened. The backward's
    D = rowsum(dO * O) reads it (rung 11's README: D from the 16-bit O costs dQ its precision on
    long rows). ``mods`` (a _core.Mods) and ``extras`` (its tensors: cu_seqlens_q, cu_seqlens_k,
    sinks, alibi_slopes) for masks, modifiers and packed batches, whose q is [total_q, heads,
    head_dim] and LSE [heads, total_q]. Returns (out, lse, o_fp32 or None)."""
    if key is None:
        key = _core.check_qkv_cached(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
    plan = _core.plan_forward(rung, variant, key, q.device.index, bool(o_fp32), mods)
    # new_empty: q's device and dtype without parsing them again (bench/torch_overhead.py's
    # breakdown measures it against torch.empty(shape, dtype=, device=)).
    shape = q.shape
    out = q.new_empty(shape)
    if q.dim() == 4:
        lse = q.new_empty((shape[0], shape[2], shape[1]), dtype=torch.float32)
    else:
        lse = q.new_empty((shape[1], shape[0]), dtype=torch.float32)
    o32 = None
    if o_fp32 and plan.writes_o_fp32:
        o32 = q.new_empty(shape, dtype=torch.float32)
    ws_ptr, ws_bytes, ws = _workspace(plan, q)
    if mods is None:
        # planned: the plan checked the problem against the rung (supports) and sized the
        # workspace; the binding skips both and keeps its layout and pointer checks.
        _ext.forward(plan.number, plan.variant, plan.problem,
                     (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()),
                     (q.stride(), k.stride(), v.stride(), out.stride()),
                     ws_ptr, ws_bytes, _stream(q), q.device.index,
                     o_fp32=0 if o32 is None else o32.data_ptr(), planned=True)
    else:
        # planned too: plan_forward asked supports and sized the workspace for this problem with
        # its mods; the binding still checks the extras' pointers against them (set_extras).
        ptrs, ints = _extras(extras)
        _ext.forward(plan.number, plan.variant, plan.problem,
                     (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()),
                     (_strides4(q), _strides4(k), _strides4(v), _strides4(out)),
                     ws_ptr, ws_bytes, _stream(q), q.device.index,
                     o_fp32=0 if o32 is None else o32.data_ptr(), extras=ptrs, extra_ints=ints, planned=True)
    del ws
    if o_fp32 and o32 is None:
        o32 = out.float()
    return out, lse, o32


def _grad_like(t):
    """(t, its gradient buffer) with equal strides: ``empty_like`` keeps a dense tensor's strides
    (a transposed [b, h, s, d] view stays as it is); a sparse view (a slice of a packed QKV) is
    copied to a contiguous one, as the gradient buffer then is."""
    g = torch.empty_like(t)
    if g.stride() != t.stride():
        t = t.contiguous()
    return t, g


def _backward(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, rung, variant,
              out_fp32=None, key=None, mods=None, extras=None):
    """dQ, dK, dV of backward entry ``rung`` (None: default_backward's) from the forward's O and
    LSE, and its fp32 O when given (None or an empty tensor: D from the 16-bit O). With ``mods``
    and ``extras`` (as _forward's; ``key`` then the one the forward checked) also the sinks'
    gradient: (dq, dk, dv, dsinks or None)."""
    if key is None:
        key = _core.check_qkv_cached(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
    for name, t in (("dout", dout), ("out", out), ("lse", lse)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("flashladder: %s must be a torch.Tensor, got %s" % (name, type(t)))
    _core.check_like("out", out, "q", q)
    _core.check_like("dout", dout, "q", q)
    lse_shape = (key[0], key[3], key[1]) if q.dim() == 4 else (q.shape[1], q.shape[0])
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError("flashladder: lse must be float32 %s on %s (the forward's), got %s %s on %s"
                         % (lse_shape, q.device, lse.dtype, tuple(lse.shape), lse.device))
    o32_ptr = 0
    if out_fp32 is not None and out_fp32.numel() > 0:
        _core.check_like("out_fp32", out_fp32, "q", q, dtype=torch.float32)
        out_fp32 = out_fp32.contiguous()  # dense [batch, seqlen_q, heads_q, head_dim]
        o32_ptr = out_fp32.data_ptr()
    plan = _core.plan_backward(rung, variant, key, bool(deterministic), q.device.index, mods)
    q, dq = _grad_like(q)
    k, dk = _grad_like(k)
    v, dv = _grad_like(v)
    # dO is indexed with O's strides (backward.h): both dense, [batch, seqlen, heads, head_dim].
    out = out.contiguous()
    dout = dout.contiguous()
    lse = lse.contiguous()
    ws_ptr, ws_bytes, ws = _workspace(plan, q)
    if mods is None:
        _ext.backward(plan.number, plan.variant, plan.problem,
                      (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                       dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()),
                      (q.stride(), k.stride(), v.stride(), out.stride(), dout.stride(), dq.stride(),
                       dk.stride(), dv.stride()),
                      ws_ptr, ws_bytes, bool(deterministic), _stream(q), q.device.index, o_fp32=o32_ptr)
        del ws
        return dq, dk, dv
    ptrs, ints = _extras(extras)
    dsinks = None
    if mods.sinks:
        dsinks = torch.empty((q.shape[-2],), dtype=torch.float32, device=q.device)
    _ext.backward(plan.number, plan.variant, plan.problem,
                  (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                   dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()),
                  tuple(_strides4(t) for t in (q, k, v, out, dout, dq, dk, dv)),
                  ws_ptr, ws_bytes, bool(deterministic), _stream(q), q.device.index, o_fp32=o32_ptr,
                  extras=ptrs, extra_ints=ints, dsinks=0 if dsinks is None else dsinks.data_ptr())
    del ws
    return dq, dk, dv, dsinks


# ---- the custom ops ---------------------------------------------------------------------------
# rung 0 means "the default forward" (custom ops take no None for an int); softmax_scale 0 means
# 1/sqrt(head_dim), as everywhere in the ladder.

@torch.library.custom_op("flashladder::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 softmax_scale: float, rung: int, variant: str,
                 with_o_fp32: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O, LSE, O in fp32) of a forward rung: O like q (dense), LSE float32 [batch, heads_q,
    seqlen_q], and with ``with_o_fp32`` (autograd) O in fp32 for the backward's D, else an empty
    tensor."""
    out, lse, o32 = _forward(q, k, v, causal, softmax_scale or None, rung or None, variant,
                             o_fp32=with_o_fp32)
    return out, lse, o32 if o32 is not None else q.new_empty((0,), dtype=torch.float32)


@attention_op.register_fake
def _attention_fake(q, k, v, causal, softmax_scale, rung, variant, with_o_fp32):
    _core.check_qkv(q, k, v, causal, softmax_scale or None, tensor_type=torch.Tensor,
                    check_layout=False)
    batch, seqlen_q, heads_q, head_dim = q.shape
    o_shape = (batch, seqlen_q, heads_q, head_dim)
    return (q.new_empty(o_shape), q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32),
            q.new_empty(o_shape if with_o_fp32 else (0,), dtype=torch.float32))


@torch.library.custom_op("flashladder::attention_backward", mutates_args=())
def attention_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          out: torch.Tensor, lse: torch.Tensor, out_fp32: torch.Tensor,
                          causal: bool, softmax_scale: float, deterministic: bool, rung: int,
                          variant: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) of a backward rung (0: default_backward's) from the forward's O and LSE, and
    its fp32 O (an empty tensor: D from the 16-bit O)."""
    return _backward(dout, q, k, v, out, lse, causal, softmax_scale or None, deterministic,
                     rung or None, variant, out_fp32)


@attention_backward_op.register_fake
def _attention_backward_fake(dout, q, k, v, out, lse, out_fp32, causal, softmax_scale,
                             deterministic, rung, variant):
    # The real op's gradient buffers: empty_like keeps a dense input's strides, else contiguous.
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, softmax_scale, _rung, _variant, _with_o_fp32 = inputs
    out, lse, o32 = output
    # The fp32 O costs 4 bytes per element of O while the graph lives; the backward's D reads it.
    ctx.save_for_backward(q, k, v, out, lse, o32)
    ctx.causal = causal
    ctx.softmax_scale = softmax_scale
    # The LSE is returned for inspection; the backward computes no gradient through it, so autograd
    # must not pretend to (a loss that uses it would otherwise get a silently wrong gradient).
    ctx.mark_non_differentiable(lse, o32)


def _attention_grad(ctx, dout, _dlse, _do32):
    q, k, v, out, lse, o32 = ctx.saved_tensors
    # torch.use_deterministic_algorithms(True) selects the backward's deterministic dQ (fixed
    # order). Rung 0: default_backward's pick (rung 14 on sm_90, else rung 11).
    dq, dk, dv = attention_backward_op(dout, q, k, v, out, lse, o32, ctx.causal, ctx.softmax_scale,
                                       torch.are_deterministic_algorithms_enabled(), 0, "")
    return dq, dk, dv, None, None, None, None, None


attention_op.register_autograd(_attention_grad, setup_context=_setup_context)


# ---- the public functions -----------------------------------------------------------------------

# ---- the fast path: a call without autograd, a mask, a modifier or packing ---------------------

#: Input signatures (_fast_signature) of calls that passed every check and planned, to what their
#: next call needs: the prepared launch (_ext.PreparedForward: supports, the parameters and the
#: strides checked once), O's and the LSE's shapes, the workspace's bytes and the device index.
#: A model calls attention with a few signatures, every step.
_FAST = {}
_FAST_MAX = 4096
# Emptied at exit, before nanobind's own teardown: prepared launches still held by the module's
# dict at that point are reported by nanobind as leaked instances (seen at the end of
# bench/torch_overhead.py's run).
atexit.register(_FAST.clear)


def _fast_signature(q, k, v, causal, softmax_scale, rung, variant):
    """What a prepared launch depends on: each input's type, shape, strides, dtype and device, and
    the arguments (the data pointers' alignment, the rest of the layout rule, is checked by the
    launch itself). None when an input is not a tensor."""
    try:
        return (type(q), q.shape, q.stride(), q.dtype, q.device,
                type(k), k.shape, k.stride(), k.dtype, k.device,
                type(v), v.shape, v.stride(), v.dtype, v.device, bool(causal), softmax_scale, rung, variant)
    except Exception:  # noqa: BLE001  not a strided tensor (no shape, stride(), ...): no fast path
        return None


def _fast_forward(fast, q, k, v, return_lse):
    """(O, LSE) through a prepared launch: the allocations, the pointers, one launch. The LSE is
    None, neither allocated nor stored, when the caller does not ask for it and the rung stores
    none on a null pointer (Rung::lse_optional). None when a pointer fails the alignment rule
    (nothing launched: the checked path says why)."""
    launch, o_shape, o_like_q, lse_shape, lse_like, ws_bytes, index, lse_optional = fast
    # empty_like(q) skips new_empty's shape argument; it gives O q's strides, which the entry
    # allows only where they are O's prepared ones (o_like_q). The LSE comes from an fp32 tensor
    # of the device, so that no dtype argument is parsed per call.
    out = torch.empty_like(q) if o_like_q else q.new_empty(o_shape)
    lse = lse_like.new_empty(lse_shape) if return_lse or not lse_optional else None
    ws = q.new_empty((ws_bytes,), dtype=torch.uint8) if ws_bytes else None
    stream = _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(q.device).cuda_stream
    if launch.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), 0 if lse is None else lse.data_ptr(),
                     0 if ws is None else ws.data_ptr(), stream):
        return out, lse
    return None


def _prepare_fast(sig, q, k, v, out, key, number, variant):
    """Keeps the prepared launch of a call that just passed the checked path (no autograd, no
    mods): the plan it ran, with q, k, v's and O's strides."""
    if sig is None:
        return
    plan = _core.plan_forward(number, variant, key, q.device.index, False, None)
    launch = _ext.PreparedForward(plan.number, plan.variant, plan.problem,
                                  (q.stride(), k.stride(), v.stride(), out.stride()), q.device.index,
                                  plan.workspace_bytes)
    if len(_FAST) >= _FAST_MAX:
        _FAST.clear()
    lse_shape = (key[0], key[3], key[1])
    # q's strides are in the signature, so every call of this entry gets from empty_like(q) what
    # this q gives: the prepared O's strides when q is dense like O (torch.empty_like keeps a
    # dense tensor's strides).
    o_like_q = out.shape == q.shape and out.stride() == q.stride() and q.is_contiguous()
    lse_like = q.new_empty((0,), dtype=torch.float32)
    _FAST[sig] = (launch, tuple(out.shape), o_like_q, lse_shape, lse_like, plan.workspace_bytes, q.device.index,
                  launch.lse_optional)


def attention(q, k, v, rung=None, variant="", causal=False, softmax_scale=None, return_lse=False):
    """Attention of q [batch, seqlen_q, heads_q, head_dim] over k, v [batch, seqlen_k, heads_kv,
    head_dim] (fp16 or bf16 CUDA tensors, heads_kv dividing heads_q) with one rung of the ladder.

    ``rung``: a number or an entry of ``rungs()``; None picks the best forward this GPU supports
    (rung 15 on sm_90 when built, else rung 10, else rung 06). ``causal`` is bottom-right aligned
    (query i sees key j iff j <= i + seqlen_k - seqlen_q). ``softmax_scale`` None means 1/sqrt(head_dim).
    Returns O like q, and with ``return_lse`` also the LSE, float32 [batch, heads_q, seqlen_q].
    Differentiable in q, k, v through rung 14's backward on sm_90 (head_dim 64, 128 or 256), rung
    11's elsewhere (64 or 128). Bad input raises
    TypeError or ValueError with the rung's one-line reason before anything is launched."""
    number, variant = (None, variant) if rung is None else _core._rung_id(rung, variant)
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    try:  # attributes first, the grad mode only when one input asks (a call without grad pays two reads)
        grad = (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled()
    except AttributeError:  # not tensors: the checks below say so
        grad = False
    if _is_compiling():
        # The fake implementation checks shapes while tracing; the op checks the rest at run time.
        out, lse, _ = attention_op(q, k, v, bool(causal), scale, number or 0, variant, grad)
        return (out, lse) if return_lse else out
    sig = None
    if not grad:
        sig = _fast_signature(q, k, v, causal, softmax_scale, number, variant)
        try:
            fast = _FAST.get(sig) if sig is not None else None
        except TypeError:  # an unhashable argument (softmax_scale given as a list): no fast path
            sig, fast = None, None
        if fast is not None:
            result = _fast_forward(fast, q, k, v, return_lse)
            if result is not None:
                return result if return_lse else result[0]
    key = _core.check_qkv_cached(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
    if grad:
        # Refuse now, not after the forward pass, a problem the backward rung cannot run.
        _core.plan_backward(None, "", key, False, q.device.index)
        out, lse, _ = attention_op(q, k, v, bool(causal), scale, number or 0, variant, True)
    else:
        # No autograd: the op's own implementation, without the dispatcher's cost per call; the
        # next call with these inputs' signature takes the fast path above.
        out, lse, _ = _forward(q, k, v, causal, softmax_scale, number, variant, key)
        _prepare_fast(sig, q, k, v, out, key, number, variant)
    return (out, lse) if return_lse else out


def attention_backward(dout, q, k, v, out, lse, causal=False, softmax_scale=None, rung=None,
                       variant="", deterministic=False, out_fp32=None):
    """dQ, dK, dV of the backward rung (rung 14 on sm_90, else rung 11, unless told) from a
    forward pass's ``out`` and ``lse`` (attention(..., return_lse=True) of any forward rung:
    natural-log LSE). dQ, dK, dV are laid out like q, k, v where those are dense. ``deterministic``: dQ summed in a fixed
    order (bitwise identical run to run, slower). ``out_fp32``: O before its 16-bit rounding
    (float32, q's shape), which D = rowsum(dO * O) then reads, as autograd's does; without it D
    comes from ``out``, as in FlashAttention-2, and dQ's error grows with the keys a row sees."""
    number, variant = (None, variant) if rung is None else _core._rung_id(rung, variant)
    return _backward(dout, q, k, v, out, lse, causal, softmax_scale, deterministic, number, variant,
                     out_fp32)
