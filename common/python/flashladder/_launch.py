"""The launch layer: every call of a rung from PyTorch goes through here (``forward``,
``backward`` and the prepared fast path), from ``_ops``, ``_flash``, ``_kvcache`` and ``_ring``
alike.

It takes inputs already checked (the key of ``_core.check_qkv``, which carries causal, the scale
and the shape), plans them (``_core.plan_forward`` / ``plan_backward``, cached per key), allocates
the outputs and the rung's workspace with PyTorch on the tensors' device (its stream-ordered
caching allocator), and launches on ``torch.cuda.current_stream()`` through the extension, which
never sees a tensor: pointers, strides and the stream as integers.
"""

import atexit
import collections

import torch

from . import _core, _ext

# The current stream's handle of a device index. torch.cuda.current_stream() builds a Stream object
# on every call; the raw getter (what Triton and torch.compile's generated code launch with) does
# not. Either gives the same handle.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream(t):
    """The current CUDA stream of ``t``'s device, as the integer the extension takes."""
    index = t.device.index
    if _raw_stream is not None and index is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(t.device).cuda_stream


def stream_at(index, t):
    """stream(t) where the fast paths already hold ``t``'s device index (no attribute lookup)."""
    return _raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(t.device).cuda_stream


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


#: The order of forward's extras: each a tensor or None (a shorter tuple: the rest None), then for
#: a paged cache its pool's rows (an int) as an eighth element.
EXTRAS = ("cu_seqlens_q", "cu_seqlens_k", "sinks", "alibi_slopes", "seqused_k", "block_table", "seqstart_k")


# ---- metadata read on the device: checked and clamped without a synchronization -----------------

def raise_metadata_errors(device):
    """_core.MetadataError (a RuntimeError and a ValueError) naming the first metadata violation a
    check kernel recorded on device index
    ``device`` since the last report (metadata.h): an earlier call's cu_seqlens, cache_seqlens,
    cache_leftpad, cache_batch_idx or block_table past its bound. That call read and wrote only
    inside its tensors (its metadata clamped, its out-of-bounds appends skipped), but its output
    is not attention of what was passed. Reading the record costs no synchronization: the kernels
    write it to page-locked host memory, so a violation is reported by the first call (or
    flashladder.check_errors()) after the record reached the host."""
    text = _ext.metadata_errors(device, True)
    if text:
        VARLEN_CHECKED.clear()  # the caller's next call with the same metadata is checked again
        raise _core.MetadataError("flashladder: %s (found by the metadata checks of an earlier call on cuda:%d, which "
                           "read and wrote only inside its tensors; its output is not attention of what was "
                           "passed)" % (text, device))


#: The clamped copies of the cu_seqlens pairs checked last (sanitized_varlen): a model passes the
#: same cu_seqlens to every layer of a step, so they are checked once per step, not once per layer.
#: Keyed by the caller's tensors' identity and version counters (a change in place is a new
#: version: checked again), the problem's totals and maxima, and the stream; an entry holds the
#: caller's tensors, so no other tensor can take their identity while it is kept. Emptied when a
#: violation is raised (raise_metadata_errors), so a call with the same bad cu_seqlens is checked,
#: and reported, again. Not used while a CUDA graph captures: each replay checks its own values.
VARLEN_CHECKED = collections.OrderedDict()
VARLEN_CHECKED_MAX = 16


def _capturing():
    """Whether the current stream is capturing a CUDA graph. Only asked with a CUDA tensor in hand
    (sanitized_varlen), so CUDA is there: no is_available() per call."""
    return torch.cuda.is_current_stream_capturing()


def sanitized_varlen(cu_q, cu_k, varlen, q):
    """(cu_seqlens_q, cu_seqlens_k) clamped on the device (one launch, no synchronization): non-
    decreasing from 0, each length at most max_seqlen, ending at most at the packed tensors'
    tokens; a violation is recorded for raise_metadata_errors. ``varlen``: Mods.varlen. The same
    pair of tensors, unchanged, on the same stream, reuses its clamped copies (VARLEN_CHECKED)."""
    st = stream(q)
    key = None
    if not _capturing():
        key = (id(cu_q), cu_q._version, id(cu_k), cu_k._version, tuple(varlen), st)
        hit = VARLEN_CHECKED.get(key)
        if hit is not None and hit[0] is cu_q and hit[1] is cu_k:
            VARLEN_CHECKED.move_to_end(key)
            return hit[2], hit[3]
    batch, total_q, total_k, max_q, max_k = varlen
    out = torch.empty((2, batch + 1), dtype=torch.int32, device=q.device)
    _ext.sanitize_varlen(cu_q.data_ptr(), cu_k.data_ptr(), batch, total_q, total_k, max_q, max_k,
                         out[0].data_ptr(), out[1].data_ptr(), st, q.device.index)
    clamped_q, clamped_k = out[0], out[1]
    if key is not None:
        VARLEN_CHECKED[key] = (cu_q, cu_k, clamped_q, clamped_k)
        if len(VARLEN_CHECKED) > VARLEN_CHECKED_MAX:
            VARLEN_CHECKED.popitem(last=False)
    return clamped_q, clamped_k


def sanitized_table(lengths, block_table, page, pool_pages, q):
    """A paged flash_attn_varlen_func's block table clamped on the device (one launch, no
    synchronization; _ext.sanitize_cache with cu_lengths): each sequence's key count ``lengths``
    (int32 [batch], from cu_seqlens_k) within the table's capacity, each used entry inside the
    pool's ``pool_pages`` (an entry outside it becomes page 0); a violation is recorded for
    raise_metadata_errors, naming cu_seqlens_k or block_table and the bound."""
    batch, columns = block_table.shape
    buf = torch.empty((2 * batch + batch * columns,), dtype=torch.int32, device=q.device)
    table = buf[2 * batch:].view(batch, columns)
    src = block_table if block_table.stride(1) == 1 else block_table.contiguous()
    _ext.sanitize_cache(lengths.data_ptr(), 0, batch, columns * page, 0, src.data_ptr(), columns, src.stride(0), page,
                        pool_pages, 0, 0, buf[:batch].data_ptr(), buf[batch:2 * batch].data_ptr(), 0, table.data_ptr(),
                        stream(q), q.device.index, cu_lengths=True)
    return table


def checked_extras(extras, mods, q):
    """``extras`` with a packed batch's cu_seqlens replaced by their clamped copies (after any
    violation an earlier call recorded is raised). forward and backward call it unless told the
    extras are already checked (``checked``: the eager autograd path checks once per step)."""
    if extras is None or mods is None or mods.varlen is None or extras[0] is None:
        return extras
    raise_metadata_errors(q.device.index)
    cu_q, cu_k = sanitized_varlen(extras[0], extras[1], mods.varlen, q)
    return (cu_q, cu_k) + tuple(extras[2:])


_NO_EXTRAS = ((0,) * 7, (0, 0, 0))


def _extras(extras):
    """(pointers, ints) of the extension's extras from a tuple in EXTRAS' order (and the pool's
    rows): pointers in that order, ints (alibi batch stride, block_table's pages per sequence,
    the pool's rows)."""
    if extras is None or (len(extras) <= 4 and extras[0] is None and extras[1] is None and extras[2] is None
                          and extras[3] is None):
        return _NO_EXTRAS  # a window or softcap alone: no tensor, every call
    tensors = tuple(extras[:7]) + (None,) * (7 - min(len(extras), 7))
    pool_rows = extras[7] if len(extras) > 7 else 0
    ptrs = tuple(0 if t is None else t.data_ptr() for t in tensors)
    slopes, table = tensors[3], tensors[5]
    return ptrs, (slopes.shape[-1] if slopes is not None and slopes.dim() == 2 else 0,
                  table.shape[1] if table is not None else 0, int(pool_rows or 0))


def forward(q, k, v, key, rung=None, variant="", o_fp32=False, mods=None, extras=None, checked=False,
            dropout_state=None, step=None, xextras=None, backward=False):
    """O and LSE of entry ``rung`` (None: the route, _core.route_forward; ``backward`` or
    ``o_fp32``: a backward pass follows) on q, k, v, checked into ``key`` (_core.check_qkv's), and
    with ``o_fp32`` also O in fp32, dense like O: the rung's own fp32 copy when it writes one
    (Rung.writes_o_fp32), else the 16-bit O widened. The backward's D = rowsum(dO * O) reads it
    where the backward plan's reads_o32 says (rung 11's README: D from the 16-bit O costs dQ its
    precision on long rows; on short rows the rung takes it, delta_policy.h). ``mods`` (a
    _core.Mods) and ``extras`` (its tensors in EXTRAS' order) for masks, modifiers, packed batches and caches; a packed q is
    [total_q, heads, head_dim] and its LSE [heads, total_q]; ``checked``: the extras came through
    checked_extras already. ``dropout_state``: with mods.dropout, the int64 {seed, offset} on the
    device (_core.dropout_state). ``step``: the Step of this signature (mods only: _ops.Step), its
    plan and strides; ``xextras``: _extras(extras), computed already. Returns (out, lse, o_fp32 or
    None)."""
    routed = bool(o_fp32 or backward)  # the route of a forward a backward pass follows
    plan = _core.plan_forward(rung, variant, key, q.device.index, routed, mods) if step is None else \
        step.forward_plan(q.device.index, routed)
    o32 = None
    keep = False  # the workspace is a kept one (KeptWorkspace): the launch may skip zeroing it
    fresh = None  # (KeptWorkspace, stream) of a fresh buffer of a Step's, kept once launched
    if step is not None:
        # The Step's shapes and typed empty tensors (Step.alloc, made with the Step): O as
        # empty_like(q) where q is contiguous, the LSE, the fp32 O and the workspace by new_empty
        # without a dtype to parse (the fast path's way: torch_overhead.py's breakdown).
        o_like_q, shape, lse_shape, f32, u8 = step.alloc
        out = torch.empty_like(q) if o_like_q else q.new_empty(shape)
        lse = f32.new_empty(lse_shape)
        if o_fp32 and plan.writes_o_fp32:
            o32 = f32.new_empty(shape)
        ws_bytes = plan.workspace_bytes
        if ws_bytes and plan.workspace_kept and KEEP_WORKSPACE:  # the Step's buffer for this stream (KeptWorkspace)
            kept = step.kept_workspace(q.device.index, routed, ws_bytes)
            ws, keep = kept.take(q, stream(q))
            if not keep:
                fresh = (kept, stream(q))  # settled below, once a launch on it is queued
        else:
            ws = u8.new_empty((ws_bytes,)) if ws_bytes else None
        ws_ptr = 0 if ws is None else ws.data_ptr()
    else:
        # new_empty: q's device and dtype without parsing them again (bench/pytorch/torch_overhead.py's
        # breakdown measures it against torch.empty(shape, dtype=, device=)).
        shape = q.shape
        if q.dim() == 4:
            lse = q.new_empty((shape[0], shape[2], shape[1]), dtype=torch.float32)
        else:
            lse = q.new_empty((shape[1], shape[0]), dtype=torch.float32)
        if mods is not None and mods.head_dim_v:  # O has V's head_dim (MLA's latent cache: 512 of 576)
            shape = shape[:-1] + (mods.head_dim_v,)
        out = q.new_empty(shape)
        if o_fp32 and plan.writes_o_fp32:
            o32 = q.new_empty(shape, dtype=torch.float32)
        ws_ptr, ws_bytes, ws = _workspace(plan, q)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
    o32_ptr = 0 if o32 is None else o32.data_ptr()
    # planned: the plan checked the problem against the rung (supports) and sized the workspace;
    # the binding skips both and keeps its layout and pointer checks (and, with mods, the extras'
    # pointers against them: set_extras).
    if mods is None:
        _ext.forward(plan.number, plan.variant, plan.problem, ptrs, (q.stride(), k.stride(), v.stride(), out.stride()),
                     ws_ptr, ws_bytes, stream(q), q.device.index, o_fp32=o32_ptr, planned=True)
    else:
        if not checked:
            extras = checked_extras(extras, mods, q)
        xptrs, ints = _extras(extras) if xextras is None else xextras
        state_ptr = 0 if dropout_state is None else dropout_state.data_ptr()
        # A Step's prepared launch (the strides, supports() and the parameters made once per
        # signature); a pointer or an int it does not fit launches nothing, and the checked
        # binding below says why.
        launch = None if step is None else step.prepared_forward(q.device.index, routed, ints)
        if launch is None or not launch.launch_mods(*ptrs, o32_ptr, xptrs, ints, state_ptr, ws_ptr, stream(q), keep):
            strides = (_strides4(q), _strides4(k), _strides4(v), _strides4(out)) if step is None else step.strides[:4]
            _ext.forward(plan.number, plan.variant, plan.problem, ptrs, strides, ws_ptr, ws_bytes, stream(q),
                         q.device.index, o_fp32=o32_ptr, extras=xptrs, extra_ints=ints, dropout_state=state_ptr,
                         planned=True)
    if fresh is not None:
        fresh[0].settle(fresh[1], ws)
    del ws
    if o_fp32 and o32 is None:
        o32 = out.float()
    return out, lse, o32


def dropout_mask(state, p, batch, heads_q, rows, cols, cu_seqlens_q=None, cu_seqlens_k=None):
    """The keep mask (bool [batch, heads_q, rows, cols]) of dropout probability ``p`` under
    ``state`` (the forward's device {seed, offset}), by the kernels' own function on the device;
    a packed batch's rows and keys count within each sequence (its padding: True)."""
    out = torch.empty((batch, heads_q, rows, cols), dtype=torch.uint8, device=state.device)
    _ext.dropout_mask(out.data_ptr(), batch, heads_q, rows, cols,
                      0 if cu_seqlens_q is None else cu_seqlens_q.data_ptr(),
                      0 if cu_seqlens_k is None else cu_seqlens_k.data_ptr(), float(p), state.data_ptr(), stream(state),
                      state.device.index)
    return out.bool()


def _grad_like(t):
    """(t, its gradient buffer) with equal strides: ``empty_like`` keeps a dense tensor's strides
    (a transposed [b, h, s, d] view stays as it is); a sparse view (a slice of a packed QKV) is
    copied to a contiguous one, as the gradient buffer then is."""
    g = torch.empty_like(t)
    if g.stride() != t.stride():
        t = t.contiguous()
    return t, g


def backward(dout, q, k, v, out, lse, key, deterministic, rung=None, variant="", out_fp32=None, mods=None,
             extras=None, checked=False, dropout_state=None, step=None, xextras=None, trusted=False):
    """dQ, dK, dV of backward entry ``rung`` (None: default_backward's) from the forward's O and
    LSE, and its fp32 O when given (None or an empty tensor: D from the 16-bit O); q, k, v checked
    into ``key``, the rest checked here (_core.check_grads). With ``mods`` and ``extras`` (as
    forward's, ``checked`` too) also the sinks' gradient: (dq, dk, dv, dsinks or None);
    ``dropout_state``: the forward's (the mask is regenerated from it). ``step``: the Step of the
    forward's signature (autograd's own call: dout is checked by autograd against O, out, the LSE
    and the fp32 O are the forward's), its plan and strides reused; ``xextras``: the forward's
    _extras(extras) (the same saved tensors). ``trusted``: autograd's own call of the plain path
    (_ops._EagerAttention): out, the LSE and the fp32 O are the forward's, dense, and dout is
    checked by autograd against O, so check_grads is not run again and no copy is asked for them."""
    o32_ptr = 0
    if step is not None or trusted:
        if out_fp32 is not None and out_fp32.numel():
            o32_ptr = out_fp32.data_ptr()  # the forward's, dense
    elif _core.check_grads(dout, q, out, lse, out_fp32, torch.Tensor, v.shape[-1]):
        out_fp32 = out_fp32.contiguous()  # dense [batch, seqlen_q, heads_q, head_dim_v]
        o32_ptr = out_fp32.data_ptr()
    plan = _core.plan_backward(rung, variant, key, bool(deterministic), q.device.index, mods) if step is None else \
        step.backward_plan(q.device.index, bool(deterministic))
    q0, k0, v0 = q, k, v
    q, dq = _grad_like(q)
    k, dk = _grad_like(k)
    v, dv = _grad_like(v)
    # dO is indexed with O's strides (backward.h): both dense, [batch, seqlen, heads, head_dim].
    # planned=True below: the plan asked supports, bwd_supports and the workspace's size once per
    # signature; the binding keeps its layout, pointer and stride checks.
    if not trusted:  # the forward's own are dense
        out = out.contiguous()
        lse = lse.contiguous()
    dout = dout.contiguous()
    if dout.data_ptr() & 15:
        dout = dout.clone()  # off the 16-byte grid (a view into a buffer): an aligned copy
    if step is not None:  # the Step's typed empty: no dtype to parse
        u8 = step.alloc[4]
        ws_bytes = plan.workspace_bytes
        ws = u8.new_empty((ws_bytes,)) if ws_bytes else None
        ws_ptr = 0 if ws is None else ws.data_ptr()
    else:
        ws_ptr, ws_bytes, ws = _workspace(plan, q)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    if mods is None:
        _ext.backward(plan.number, plan.variant, plan.problem, ptrs,
                      tuple(t.stride() for t in (q, k, v, out, dout, dq, dk, dv)),
                      ws_ptr, ws_bytes, bool(deterministic), stream(q), q.device.index, o_fp32=o32_ptr,
                      planned=True)
        del ws
        return dq, dk, dv
    if not checked:
        extras = checked_extras(extras, mods, q)
    xptrs, ints = _extras(extras) if xextras is None else xextras
    dsinks = None
    if mods.sinks:
        dsinks = torch.empty((q.shape[-2],), dtype=torch.float32, device=q.device)
    dsinks_ptr = 0 if dsinks is None else dsinks.data_ptr()
    state_ptr = 0 if dropout_state is None else dropout_state.data_ptr()
    launch = None
    if step is not None and q is q0 and k is k0 and v is v0:
        # no copy: dQ, dK and dV have q's, k's and v's strides, dO is dense as O; the Step's
        # prepared launch, or (a pointer or an int it does not fit) the checked binding
        launch = step.prepared_backward(q.device.index, bool(deterministic), ints)
    if launch is None or not launch.launch_mods(*ptrs, o32_ptr, xptrs, ints, dsinks_ptr, state_ptr, ws_ptr, stream(q)):
        if step is not None and q is q0 and k is k0 and v is v0:
            strides = step.strides
        else:
            strides = tuple(_strides4(t) for t in (q, k, v, out, dout, dq, dk, dv))
        _ext.backward(plan.number, plan.variant, plan.problem, ptrs, strides,
                      ws_ptr, ws_bytes, bool(deterministic), stream(q), q.device.index, o_fp32=o32_ptr,
                      extras=xptrs, extra_ints=ints, dsinks=dsinks_ptr, dropout_state=state_ptr, planned=True)
    del ws
    return dq, dk, dv, dsinks


# ---- the fast path: a call without autograd, a mask, a modifier or packing ---------------------

#: Input signatures (fast_signature) of calls that passed every check and planned, to what their
#: next call needs: the prepared launch (_ext.PreparedForward: supports, the parameters and the
#: strides checked once), O's and the LSE's shapes, the workspace's bytes and the device index.
#: A model calls attention with a few signatures, every step.
FAST = {}
_FAST_MAX = 4096
# Emptied at exit, before nanobind's own teardown: prepared launches still held by the module's
# dict at that point are reported by nanobind as leaked instances (seen at the end of
# bench/pytorch/torch_overhead.py's run).
atexit.register(FAST.clear)


def fast_signature(q, k, v, causal, softmax_scale, rung, variant):
    """What a prepared launch depends on: each input's type, shape, strides, dtype and device, and
    the arguments (the data pointers' alignment, the rest of the layout rule, is checked by the
    launch itself). None when an input is not a tensor."""
    try:
        return (type(q), q.shape, q.stride(), q.dtype, q.device,
                type(k), k.shape, k.stride(), k.dtype, k.device,
                type(v), v.shape, v.stride(), v.dtype, v.device, bool(causal), softmax_scale, rung, variant)
    except Exception:  # noqa: BLE001  not a strided tensor (no shape, stride(), ...): no fast path
        return None


#: Keep a forward's workspace per stream where its rung allows it (KeptWorkspace); False: a fresh
#: workspace per call, zeroed by the launch (the A/B of bench/pytorch/host_serving_ab.py runs a
#: copy of the package with False).
KEEP_WORKSPACE = True

#: Whether the current stream is capturing a CUDA graph (KeptWorkspace.take asks on every call; a
#: name of its own so that the CPU tests can stand in for it).
capturing_now = torch.cuda.is_current_stream_capturing


class KeptWorkspace:
    """A prepared forward's workspace kept across its calls (Rung.workspace_kept: rung 15's
    counters, which its kernel leaves at zero; rung 16's lists, which its classifier rewrites): one
    buffer per stream, zeroed by the first call on that stream, so a call allocates nothing and
    rung 15 queues no memset. Launches on one stream run in order, so each finds the buffer as the
    previous one left it; another stream has a buffer of its own. While a CUDA graph is captured a
    call takes a buffer of its own, zeroed by its launch as before: a graph's replay may run beside
    eager calls on another stream."""

    __slots__ = ("nbytes", "by_stream")

    def __init__(self, nbytes):
        self.nbytes, self.by_stream = nbytes, {}

    def take(self, like, s):
        """(the workspace tensor, True when it is the kept one) for a launch on stream handle @p s,
        the current stream of @p like's device. The first call on a stream (and a call under
        capture) gets a fresh buffer, not kept: its launch zeroes it as a per-call launch does (no
        PyTorch fill), and settle() keeps it once that launch is queued."""
        ws = self.by_stream.get(s)
        if ws is not None and not capturing_now():
            return ws, True
        return like.new_empty((self.nbytes,), dtype=torch.uint8), False

    def settle(self, s, ws):
        """Keeps @p ws, a fresh buffer from take(), for stream @p s once a launch on it is queued:
        the kernel leaves it as the next launch on that stream expects it. Not under capture (the
        graph keeps its own), and not where a launch was refused (nothing zeroed it)."""
        if s not in self.by_stream and not capturing_now():
            self.by_stream[s] = ws


def take_workspace(nbytes, kept, like, s):
    """(workspace tensor or None, kept flag) of a forward launch: @p kept's buffer for stream @p s
    where the plan keeps one (KeptWorkspace), else a fresh buffer of @p nbytes (none for 0). A
    launch made on a fresh buffer of @p kept (flag False) calls kept.settle(s, ws)."""
    if kept is not None:
        return kept.take(like, s)
    return (like.new_empty((nbytes,), dtype=torch.uint8) if nbytes else None), False


def fast_forward(fast, q, k, v, return_lse):
    """(O, LSE) through a prepared launch: the allocations, the pointers, one launch. The LSE is
    None, neither allocated nor stored, when the caller does not ask for it and the rung stores
    none on a null pointer (Rung::lse_optional). None when a pointer fails the alignment rule
    (nothing launched: the checked path says why)."""
    launch, o_shape, o_like_q, lse_shape, lse_like, ws_bytes, index, lse_optional, kept = fast
    # empty_like(q) skips new_empty's shape argument; it gives O q's strides, which the entry
    # allows only where they are O's prepared ones (o_like_q). The LSE comes from an fp32 tensor
    # of the device, so that no dtype argument is parsed per call.
    out = torch.empty_like(q) if o_like_q else q.new_empty(o_shape)
    lse = lse_like.new_empty(lse_shape) if return_lse or not lse_optional else None
    s = stream_at(index, q)
    ws, keep = take_workspace(ws_bytes, kept, q, s)
    if launch.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), 0 if lse is None else lse.data_ptr(),
                     0 if ws is None else ws.data_ptr(), s, keep):
        if not keep and kept is not None:
            kept.settle(s, ws)
        return out, lse
    return None


def prepare_fast(sig, q, k, v, out, key, number, variant):
    """Keeps the prepared launch of a call that just passed the checked path (no autograd, no
    mods): the plan it ran, with q, k, v's and O's strides."""
    if sig is None:
        return
    plan = _core.plan_forward(number, variant, key, q.device.index, False, None)
    launch = _ext.PreparedForward(plan.number, plan.variant, plan.problem,
                                  (q.stride(), k.stride(), v.stride(), out.stride()), q.device.index,
                                  plan.workspace_bytes)
    if len(FAST) >= _FAST_MAX:
        FAST.clear()
    lse_shape = (key[0], key[3], key[1])
    # q's strides are in the signature, so every call of this entry gets from empty_like(q) what
    # this q gives: the prepared O's strides when q is dense like O (torch.empty_like keeps a
    # dense tensor's strides).
    o_like_q = out.shape == q.shape and out.stride() == q.stride() and q.is_contiguous()
    lse_like = q.new_empty((0,), dtype=torch.float32)
    kept = KeptWorkspace(plan.workspace_bytes) if KEEP_WORKSPACE and plan.workspace_bytes and launch.workspace_kept \
        else None
    FAST[sig] = (launch, tuple(out.shape), o_like_q, lse_shape, lse_like, plan.workspace_bytes, q.device.index,
                 launch.lse_optional, kept)


# ---- the autograd step's prepared launches: plain attention under autograd -----------------------

#: Input signatures (fast_signature) of autograd calls that passed every check and planned, to
#: their Prepared: the forward's prepared launch with the fp32 O, and the backward's per
#: deterministic flag. A training step calls attention with a few signatures, every step.
TRAIN = {}
atexit.register(TRAIN.clear)


class Prepared:
    """What one autograd step of plain attention repeats otherwise, made once per input signature
    after the checked path ran it (_ops.attention): the forward's _ext.PreparedForward (O, the LSE,
    and the fp32 O where the backward's D reads it: ``reads_o32``), the backward's _ext.PreparedBackward per deterministic
    flag (made on its first backward), the shapes and strides of what both allocate. Only for q, k, v
    whose gradient buffers get their strides from empty_like (dense), and an O dense in q's
    shape: dO is made contiguous like it. launch_forward/launch_backward return None, launching
    nothing, where a pointer breaks the alignment rule: the caller's checked path says why."""

    __slots__ = ("key", "index", "fwd", "o_like_q", "o_shape", "o_stride", "lse_shape", "lse_like", "fws",
                 "kept", "bwd", "strides", "reads_o32")

    def __init__(self, q, k, v, key, number, variant):
        self.key, self.index = key, q.device.index
        plan = _core.plan_forward(number, variant, key, self.index, True, None)
        self.o_like_q = q.is_contiguous()
        self.o_shape = tuple(q.shape)
        self.o_stride = q.new_empty(self.o_shape).stride() if not self.o_like_q else q.stride()
        self.strides = (q.stride(), k.stride(), v.stride(), self.o_stride)
        self.fwd = _ext.PreparedForward(plan.number, plan.variant, plan.problem, self.strides, self.index,
                                        plan.workspace_bytes)
        self.reads_o32 = _core.plan_backward(None, "", key, False, self.index, None).reads_o32
        if self.reads_o32 and not self.fwd.writes_o_fp32:
            raise ValueError("no fp32 O")  # prepare_train keeps no entry: the checked path widens O
        self.fws = plan.workspace_bytes
        self.kept = KeptWorkspace(self.fws) if KEEP_WORKSPACE and self.fws and self.fwd.workspace_kept else None
        self.lse_shape = (key[0], key[3], key[1])
        self.lse_like = q.new_empty((0,), dtype=torch.float32)
        self.bwd = {}

    def launch_forward(self, q, k, v):
        """(O, LSE, fp32 O or None) launched, or None (nothing launched: a pointer breaks the rule)."""
        out = torch.empty_like(q) if self.o_like_q else q.new_empty(self.o_shape)
        lse = self.lse_like.new_empty(self.lse_shape)
        s = stream_at(self.index, q)
        ws, keep = take_workspace(self.fws, self.kept, q, s)
        if not self.reads_o32:  # D from the 16-bit O (short rows: delta_policy.h): no fp32 O
            o32 = None
            ran = self.fwd.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                                  0 if ws is None else ws.data_ptr(), s, keep)
        else:
            o32 = self.lse_like.new_empty(self.o_shape)
            ran = self.fwd.launch_o32(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                                      o32.data_ptr(), 0 if ws is None else ws.data_ptr(), s, keep)
        if not ran:
            return None
        if not keep and self.kept is not None:
            self.kept.settle(s, ws)
        return out, lse, o32

    def launch_backward(self, dout, q, k, v, out, lse, o32, deterministic):
        """(dQ, dK, dV) launched, or None (nothing launched: a pointer breaks the rule)."""
        launch = self.bwd.get(deterministic)
        if launch is None:
            plan = _core.plan_backward(None, "", self.key, deterministic, self.index, None)
            launch = self.bwd[deterministic] = _ext.PreparedBackward(
                plan.number, plan.variant, plan.problem, self.strides + (self.o_stride,) + self.strides[:3],
                self.index, plan.workspace_bytes, deterministic)
        if dout.stride() != self.o_stride:
            dout = dout.contiguous()  # O is contiguous (o_like_q: q is)
        elif dout.data_ptr() & 15:
            dout = dout.clone()  # off the 16-byte grid (a view into a buffer): an aligned copy
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        wsb = launch.workspace_bytes
        ws = q.new_empty((wsb,), dtype=torch.uint8) if wsb else None
        s = stream_at(self.index, q)
        if launch.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), dout.data_ptr(),
                         dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), 0 if o32 is None else o32.data_ptr(),
                         0 if ws is None else ws.data_ptr(),
                         s):
            return dq, dk, dv
        return None


def prepare_train(sig, q, k, v, key, number, variant):
    """Keeps the Prepared of an autograd call that just passed the checked path with these very
    q, k, v: where each one's empty_like has its strides (dense: the gradient buffers need no copy)
    and, where the backward's D reads the fp32 O (Prepared.reads_o32), the forward rung writes it."""
    if sig is None or sig in TRAIN:
        return
    for t in (q, k, v):
        if torch.empty_like(t).stride() != t.stride():
            return
    try:
        prepared = Prepared(q, k, v, key, number, variant)
    except (ValueError, TypeError, RuntimeError):  # a refusal of the prepared launch: the checked path stays
        return
    if len(TRAIN) >= _FAST_MAX:
        TRAIN.clear()
    TRAIN[sig] = prepared
