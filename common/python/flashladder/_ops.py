"""The custom ops and their autograd: ``flashladder::attention`` and ``attention_backward``
(plain attention: autograd through rung 14's backward on sm_90, rung 11's elsewhere), and
``flashladder::attention_mods`` and ``attention_mods_backward`` (windows, softcap, ALiBi, sinks,
packed batches, dropout: rung 16, rung 15); fake implementations for torch.compile. And ``attention()``,
``attention_backward()``.

Each op's body checks its inputs once (_core) and launches through _launch; a call without
autograd skips the dispatcher (the op's own body), and a plain one with a signature seen before
takes the prepared launch (_launch's fast path). Under autograd in eager mode the two launches run
as a plain autograd.Function (_EagerAttention, _EagerAttentionMods); the ops are what
torch.compile traces. Imported on first use, so ``import flashladder``
works without PyTorch.
"""

import functools
from typing import Optional

import torch

from . import _core, _ext, _launch


# torch.compiler.is_compiling without the two attribute lookups per call (torch.compile knows the
# function itself, under either name).
_is_compiling = torch.compiler.is_compiling
# The fast path's names, bound here: what attention() reads per call stays one global lookup each.
_FAST, _fast_signature, _fast_forward = _launch.FAST, _launch.fast_signature, _launch.fast_forward
_TRAIN = _launch.TRAIN


# ---- plain attention -----------------------------------------------------------------------------
# rung 0 means "the default forward" (custom ops take no None for an int); softmax_scale 0 means
# 1/sqrt(head_dim), as everywhere in the ladder.

@torch.library.custom_op("flashladder::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                 softmax_scale: float, rung: int, variant: str,
                 with_o_fp32: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(O, LSE, O in fp32) of a forward rung: O like q (dense), LSE float32 [batch, heads_q,
    seqlen_q], and with ``with_o_fp32`` (autograd: a backward pass follows, and a problem the
    backward rung cannot run is refused now, not after the forward) O in fp32 for the backward's D,
    else an empty tensor. Unlike the eager path (_EagerAttention), the op writes the fp32 O
    whenever a backward follows, also on the short rows whose D the backward takes from the 16-bit
    O (delta_policy.h): its fake implementation gives the output's shape from the sizes alone,
    which may be symbolic under torch.compile, so it cannot ask the backward plan."""
    key = _core.check_qkv_cached(q, k, v, causal, softmax_scale or None, tensor_type=torch.Tensor)
    if with_o_fp32:  # the backward's own plan (the same arguments: planned once, cached)
        _core.plan_backward(None, "", key, False, q.device.index, None)
    out, lse, o32 = _launch.forward(q, k, v, key, rung or None, variant, o_fp32=with_o_fp32)
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
    key = _core.check_qkv_cached(q, k, v, causal, softmax_scale or None, tensor_type=torch.Tensor)
    return _launch.backward(dout, q, k, v, out, lse, key, deterministic, rung or None, variant, out_fp32)


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
    ctx.set_materialize_grads(False)  # no zero fills for the LSE's and the fp32 O's gradients
    # The LSE is returned for inspection; the backward computes no gradient through it, so autograd
    # must not pretend to (a loss that uses it would otherwise get a silently wrong gradient).
    ctx.mark_non_differentiable(lse, o32)


def _attention_grad(ctx, dout, _dlse, _do32):
    if dout is None:  # only the LSE was used (set_materialize_grads(False))
        return None, None, None, None, None, None, None, None
    q, k, v, out, lse, o32 = ctx.saved_tensors
    # torch.use_deterministic_algorithms(True) selects the backward's deterministic dQ (fixed
    # order). Rung 0: default_backward's pick (rung 14 on sm_90, else rung 11).
    dq, dk, dv = attention_backward_op(dout, q, k, v, out, lse, o32, ctx.causal, ctx.softmax_scale,
                                       torch.are_deterministic_algorithms_enabled(), 0, "")
    return dq, dk, dv, None, None, None, None, None


attention_op.register_autograd(_attention_grad, setup_context=_setup_context)


# ---- autograd without the dispatcher (eager mode) -----------------------------------------------
# The custom ops above are what torch.compile traces. Called eagerly under autograd, each step paid
# their dispatch twice (the op and its backward op, each through torch.library's Python layers and
# register_autograd's wrapper) and checked and planned again inside each; the classes below are
# the same two launches as a plain autograd.Function, with the key and the plans of the checks
# made once per input signature (_core.check_qkv_cached, the lru_cache of plan_backward).
# set_materialize_grads(False): the LSE is not differentiable, and autograd would otherwise fill a
# zero gradient for it (and for the custom op's fp32 O: a tensor the size of O in fp32) every step.

class _EagerAttention(torch.autograd.Function):
    """attention_op and its backward for one eager call: (O, LSE) of q, k, v checked into ``key``.
    With ``prepared`` (a _launch.Prepared: the step of a signature seen before, attention() having
    checked that q, k, v are 16-byte aligned) the forward and the backward are each one prepared
    launch; a dO the prepared backward refuses (not aligned) goes through the checked backward,
    which copies it or says why."""

    @staticmethod
    def forward(ctx, q, k, v, key, number, variant, prepared=None, reads_o32=False):
        if prepared is None:  # the fp32 O where the backward's D reads it (the backward plan's reads_o32)
            out, lse, o32 = _launch.forward(q, k, v, key, number, variant, o_fp32=reads_o32, backward=True)
        else:
            res = prepared.launch_forward(q, k, v)
            if res is None:
                raise RuntimeError("flashladder: the prepared forward refused its own buffers (a bug: please report it)")
            out, lse, o32 = res
        ctx.save_for_backward(q, k, v, out, lse, o32)
        ctx.key, ctx.prepared = key, prepared
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:  # only the LSE was used: no gradient reaches q, k, v
            return (None,) * 8
        q, k, v, out, lse, o32 = ctx.saved_tensors
        deterministic = torch.are_deterministic_algorithms_enabled()
        grads = None
        if ctx.prepared is not None:
            grads = ctx.prepared.launch_backward(dout, q, k, v, out, lse, o32, deterministic)
        if grads is None:
            # trusted: out, the LSE and the fp32 O are the forward's, dout autograd's (checked against O).
            grads = _launch.backward(dout, q, k, v, out, lse, ctx.key, deterministic, None, "", o32, trusted=True)
        return grads + (None,) * 5


class _EagerAttentionMods(torch.autograd.Function):
    """attention_mods_op and its backward for one eager call; ``sinks`` (or None) is an input for
    its gradient, the other extras ride along. ``step``: the call's Step (its key, Mods, plans and
    strides, made once per signature)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, step, cu_q, cu_k, slopes, deterministic, dropout_state):
        # A packed batch's cu_seqlens are checked and clamped once, here (one launch); the backward
        # reads the same clamped copies (a change of the caller's in place since is autograd's
        # saved-tensor error, as for any input it keeps).
        extras = _launch.checked_extras((cu_q, cu_k, sinks, slopes), step.mods, q)
        xextras = _launch._extras(extras)  # the pointers, for the backward too: the same tensors
        reads = step.backward_plan(q.device.index, deterministic).reads_o32  # the fp32 O where D reads it
        out, lse, o32 = _launch.forward(q, k, v, step.key, o_fp32=reads, mods=step.mods, extras=extras, checked=True,
                                        dropout_state=dropout_state, step=step, xextras=xextras, backward=True)
        # The dropout state is saved with the rest: the backward regenerates the forward's mask.
        ctx.save_for_backward(q, k, v, out, lse, o32, extras[0], extras[1], sinks, slopes, dropout_state)
        ctx.step, ctx.deterministic, ctx.xextras = step, deterministic, xextras
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        if dout is None:
            return (None,) * 10
        q, k, v, out, lse, o32, cu_q, cu_k, sinks, slopes, dropout_state = ctx.saved_tensors
        if cu_q is not None:  # the forward's check may have found a violation by now: the step fails
            _launch.raise_metadata_errors(q.device.index)
        step = ctx.step
        deterministic = ctx.deterministic or torch.are_deterministic_algorithms_enabled()
        dq, dk, dv, dsinks = _launch.backward(dout, q, k, v, out, lse, step.key, deterministic, None, "", o32,
                                              mods=step.mods, extras=(cu_q, cu_k, sinks, slopes), checked=True,
                                              dropout_state=dropout_state, step=step, xextras=ctx.xextras)
        return (dq, dk, dv, dsinks if sinks is not None else None) + (None,) * 6


def attention_autograd(q, k, v, key, number, variant):
    """(O, LSE) under autograd in eager mode: the backward's plan first (a problem it cannot run is
    refused before the forward, as attention_op does), then _EagerAttention, with the fp32 O where
    that plan's D reads it."""
    plan = _core.plan_backward(None, "", key, False, q.device.index, None)
    return _EagerAttention.apply(q, k, v, key, number, variant, None, plan.reads_o32)


class Step:
    """What a masked, modified or packed call repeats otherwise, made once per input signature
    (_flash._attention's STEPS) after the call's checks passed: check_qkv's (or check_varlen's)
    ``key``, the ``Mods``, the window's sides and the scale as the checks gave them, the plans
    (per device, and the backward's per deterministic flag: _core.plan_forward / plan_backward),
    and the strides the launches take (q, k, v, O, dO, dQ, dK, dV; 4 each, _launch._strides4:
    O, dO dense, each gradient with its input's strides), what the launches allocate (``alloc``),
    and the prepared launches of these plans (prepared_forward, prepared_backward)."""

    __slots__ = ("key", "mods", "left", "right", "scale", "strides", "alloc", "_plans")

    def __init__(self, key, mods, left, right, scale, q, k, v):
        self.key, self.mods, self.left, self.right, self.scale = key, mods, left, right, scale
        o_shape = tuple(q.shape[:-1]) + (mods.head_dim_v or q.shape[-1],)
        o_strides = _dense_strides4(o_shape)
        sq, sk, sv = (_launch._strides4(t) for t in (q, k, v))
        self.strides = (sq, sk, sv, o_strides, o_strides, sq, sk, sv)
        # What _launch.forward and backward allocate per call, as _launch.Prepared keeps it: O as
        # empty_like(q) where that is O's dense layout (q contiguous, O at q's head_dim), O's and
        # the LSE's shapes, and empty fp32 and uint8 tensors on q's device whose new_empty has no
        # dtype to parse.
        lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (q.shape[1], q.shape[0])
        self.alloc = (q.is_contiguous() and not mods.head_dim_v, o_shape, lse_shape,
                      q.new_empty((0,), dtype=torch.float32), q.new_empty((0,), dtype=torch.uint8))
        self._plans = {}

    def forward_plan(self, device, o_fp32):
        plan = self._plans.get((device, "fwd", o_fp32))
        if plan is None:
            plan = self._plans[(device, "fwd", o_fp32)] = _core.plan_forward(None, "", self.key, device, o_fp32,
                                                                            self.mods)
        return plan

    def kept_workspace(self, device, o_fp32, nbytes):
        """The forward plan's workspace kept per stream (_launch.KeptWorkspace; the plan's
        workspace_kept), made on first use."""
        key = (device, "kept", o_fp32)
        kept = self._plans.get(key)
        if kept is None:
            kept = self._plans[key] = _launch.KeptWorkspace(nbytes)
        return kept

    def backward_plan(self, device, deterministic):
        plan = self._plans.get((device, "bwd", deterministic))
        if plan is None:
            plan = self._plans[(device, "bwd", deterministic)] = _core.plan_backward(None, "", self.key,
                                                                                    deterministic, device, self.mods)
        return plan

    def prepared_forward(self, device, o_fp32, ints):
        """The forward plan's _ext.PreparedForward (mods: the extras and the dropout state per
        launch) with the extras' ``ints``, made on first use; None where it refuses (the checked
        binding then runs, and says why)."""
        key = (device, "pfwd", o_fp32, ints)
        launch = self._plans.get(key)
        if launch is None:
            plan = self.forward_plan(device, o_fp32)
            try:
                launch = _ext.PreparedForward(plan.number, plan.variant, plan.problem, self.strides[:4], device,
                                              plan.workspace_bytes, True, ints)
            except (ValueError, TypeError, RuntimeError):
                launch = False
            self._plans[key] = launch
        return launch or None

    def prepared_backward(self, device, deterministic, ints):
        """The backward plan's _ext.PreparedBackward per deterministic flag (mods: the extras, the
        sinks' gradient and the dropout state per launch), as prepared_forward."""
        key = (device, "pbwd", deterministic, ints)
        launch = self._plans.get(key)
        if launch is None:
            plan = self.backward_plan(device, deterministic)
            try:
                launch = _ext.PreparedBackward(plan.number, plan.variant, plan.problem, self.strides, device,
                                               plan.workspace_bytes, deterministic, True, ints)
            except (ValueError, TypeError, RuntimeError):
                launch = False
            self._plans[key] = launch
        return launch or None


def _dense_strides4(shape):
    """_launch._strides4 of a contiguous tensor of ``shape`` (4 dims, or a packed 3), as PyTorch
    makes them (a dimension of size 0 counted as 1)."""
    strides, acc, numel = [], 1, 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
        numel *= n
    strides = tuple(reversed(strides))
    return strides if len(shape) == 4 else (numel,) + strides


def attention_mods_autograd(q, k, v, step, extras, deterministic, dropout_state=None):
    """attention_autograd for masks, modifiers, packed batches and dropout: ``step`` (a Step),
    ``extras`` (cu_seqlens_q, cu_seqlens_k, sinks, alibi_slopes) as _launch.forward takes them,
    ``dropout_state`` the device {seed, offset} with mods.dropout. The backward's plan first, as
    attention_autograd's."""
    cu_q, cu_k, sinks, slopes = extras
    step.backward_plan(q.device.index, bool(deterministic))
    return _EagerAttentionMods.apply(q, k, v, sinks, step, cu_q, cu_k, slopes, bool(deterministic), dropout_state)


# ---- masks, modifiers, packed batches ------------------------------------------------------------

def mods_key(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, alibi_slopes, causal,
             scale, window_left, window_right, softcap, dropout_p=0.0):
    """(key, Mods) of attention_mods' arguments, checked: check_qkv's key (check_varlen's for a
    packed batch) and what the call adds to plain attention; v may have a head_dim of its own
    (Mods.head_dim_v: rung 16 takes it, own_head_dim_v)."""
    try:
        dv = v.shape[-1] if v.shape[-1] != q.shape[-1] else 0
    except (AttributeError, IndexError):  # not tensors: the checks below say so
        dv = 0
    if cu_seqlens_q is None:
        key, varlen = _core.check_qkv_cached(q, k, v, causal, scale or None, tensor_type=torch.Tensor,
                                             own_dv=bool(dv)), None
    else:
        key, varlen = _core.check_varlen_cached(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                causal, scale or None, tensor_type=torch.Tensor, own_dv=bool(dv))
    alibi = 0 if alibi_slopes is None else (3 if alibi_slopes.dim() == 2 else 2)
    return key, _core.Mods(window_left, window_right, float(softcap), alibi, sinks is not None, varlen,
                           dropout=float(dropout_p), head_dim_v=dv)


@torch.library.custom_op("flashladder::attention_mods", mutates_args=())
def attention_mods_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                      max_seqlen_q: int, max_seqlen_k: int, sinks: Optional[torch.Tensor],
                      alibi_slopes: Optional[torch.Tensor], causal: bool, softmax_scale: float,
                      window_left: int, window_right: int, softcap: float, rung: int, variant: str,
                      with_o_fp32: bool, deterministic: bool, dropout_p: float = 0.0,
                      dropout_state: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                            torch.Tensor]:
    """(O, LSE, O in fp32 or an empty tensor) of attention with a window, softcap, ALiBi slopes,
    sinks, a packed batch (cu_seqlens: q [total_q, heads, head_dim], LSE [heads, total_q]) or
    dropout (``dropout_p`` > 0 with ``dropout_state``, the device {seed, offset} drawn by the
    caller: _core.dropout_state). ``with_o_fp32``: a backward pass follows (refused now when it
    cannot run); ``deterministic``: what it will be asked for (the forward is deterministic)."""
    extras = (cu_seqlens_q, cu_seqlens_k, sinks, alibi_slopes)
    key, mods = mods_key(q, k, v, *extras[:2], max_seqlen_q, max_seqlen_k, *extras[2:], causal, softmax_scale,
                         window_left, window_right, softcap, dropout_p)
    if with_o_fp32:
        _core.plan_backward(None, "", key, bool(deterministic), q.device.index, mods)
    out, lse, o32 = _launch.forward(q, k, v, key, rung or None, variant, o_fp32=with_o_fp32, mods=mods,
                                    extras=extras, dropout_state=dropout_state)
    return out, lse, o32 if o32 is not None else q.new_empty((0,), dtype=torch.float32)


@attention_mods_op.register_fake
def _attention_mods_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks,
                         alibi_slopes, causal, softmax_scale, window_left, window_right, softcap, rung,
                         variant, with_o_fp32, deterministic, dropout_p=0.0, dropout_state=None):
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if q.dim() == 4 else (q.shape[1], q.shape[0])
    o_shape = tuple(q.shape[:-1]) + (v.shape[-1],)  # O has V's head_dim (Mods.head_dim_v)
    return (q.new_empty(o_shape), q.new_empty(lse_shape, dtype=torch.float32),
            q.new_empty(o_shape if with_o_fp32 else (0,), dtype=torch.float32))


@torch.library.custom_op("flashladder::attention_mods_backward", mutates_args=())
def attention_mods_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               out: torch.Tensor, lse: torch.Tensor, out_fp32: torch.Tensor,
                               cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                               max_seqlen_q: int, max_seqlen_k: int, sinks: Optional[torch.Tensor],
                               alibi_slopes: Optional[torch.Tensor], causal: bool, softmax_scale: float,
                               window_left: int, window_right: int, softcap: float,
                               deterministic: bool, dropout_p: float = 0.0,
                               dropout_state: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                                     torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV, d sinks or an empty tensor) of attention_mods_op's problem, by the default
    backward entry (rung 16's backward, or rung 14 for a packed batch without modifiers); with
    dropout, the forward's ``dropout_state`` regenerates its mask."""
    extras = (cu_seqlens_q, cu_seqlens_k, sinks, alibi_slopes)
    key, mods = mods_key(q, k, v, *extras[:2], max_seqlen_q, max_seqlen_k, *extras[2:], causal, softmax_scale,
                         window_left, window_right, softcap, dropout_p)
    dq, dk, dv, dsinks = _launch.backward(dout, q, k, v, out, lse, key, deterministic, None, "", out_fp32,
                                          mods=mods, extras=extras, dropout_state=dropout_state)
    return dq, dk, dv, dsinks if dsinks is not None else q.new_empty((0,), dtype=torch.float32)


@attention_mods_backward_op.register_fake
def _attention_mods_backward_fake(dout, q, k, v, out, lse, out_fp32, cu_seqlens_q, cu_seqlens_k,
                                  max_seqlen_q, max_seqlen_k, sinks, alibi_slopes, causal, softmax_scale,
                                  window_left, window_right, softcap, deterministic, dropout_p=0.0,
                                  dropout_state=None):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            q.new_empty((q.shape[-2],) if sinks is not None else (0,), dtype=torch.float32))


_MODS_ARGS = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "sinks", "alibi_slopes", "causal",
              "softmax_scale", "window_left", "window_right", "softcap", "rung", "variant", "with_o_fp32",
              "deterministic", "dropout_p", "dropout_state")


def _mods_setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    named = dict(zip(_MODS_ARGS, inputs[3:]))
    named.setdefault("dropout_p", 0.0)
    named.setdefault("dropout_state", None)
    out, lse, o32 = output
    # The dropout state is saved: the backward regenerates the forward's mask from it.
    ctx.save_for_backward(q, k, v, out, lse, o32, named["cu_seqlens_q"], named["cu_seqlens_k"], named["sinks"],
                          named["alibi_slopes"], named["dropout_state"])
    ctx.args = {n: named[n] for n in ("max_seqlen_q", "max_seqlen_k", "causal", "softmax_scale", "window_left",
                                      "window_right", "softcap", "deterministic", "dropout_p")}
    ctx.set_materialize_grads(False)  # no zero fills for the LSE's and the fp32 O's gradients
    ctx.mark_non_differentiable(lse, o32)


def _mods_grad(ctx, dout, _dlse, _do32):
    if dout is None:  # only the LSE was used (set_materialize_grads(False))
        return (None,) * 20
    q, k, v, out, lse, o32, cu_q, cu_k, sinks, slopes, dropout_state = ctx.saved_tensors
    a = ctx.args
    # flash_attn_func(deterministic=True), or torch.use_deterministic_algorithms(True): dQ summed
    # in a fixed order.
    deterministic = a["deterministic"] or torch.are_deterministic_algorithms_enabled()
    dq, dk, dv, dsinks = attention_mods_backward_op(
        dout, q, k, v, out, lse, o32, cu_q, cu_k, a["max_seqlen_q"], a["max_seqlen_k"], sinks, slopes,
        a["causal"], a["softmax_scale"], a["window_left"], a["window_right"], a["softcap"], deterministic,
        a["dropout_p"], dropout_state)
    # One gradient per input: q, k, v, the two cu_seqlens and maxima, the sinks, then 12 more.
    return (dq, dk, dv, None, None, None, None, dsinks if sinks is not None else None) + (None,) * 12


attention_mods_op.register_autograd(_mods_grad, setup_context=_mods_setup_context)


# ---- the public functions -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _own_head_dim_v_runs(device):
    """Whether the route runs V with a head_dim of its own below q's on device index ``device``,
    forward and backward (rung 16's forward and its backward, sm_90a: 192/128 asked of both)."""
    mods = _core.Mods(head_dim_v=128)
    key = (1, 128, 128, 1, 1, 192, "bf16", True, 0.0)
    try:
        _core.plan_forward(None, "", key, device, True, mods)
        _core.plan_backward(None, "", key, False, device, mods)
    except (ValueError, RuntimeError):
        return False
    return True


def own_head_dim_v(q, k, v):
    """Whether q, k, v run with V's own head_dim as it is, nothing padded (Mods.head_dim_v): v's
    head_dim below q's, both multiples of 8, on a device whose route takes it (rung 16's forward
    and backward: _own_head_dim_v_runs). Else padded_head_dim pads, as before."""
    try:
        d, dv = q.shape[-1], v.shape[-1]
        if not (dv < d and d % 8 == 0 and dv % 8 == 0 and k.shape[-1] == d and d <= _ext.MAX_HEAD_DIM):
            return False
        index = q.device.index if q.device.type == "cuda" else None
    except (AttributeError, IndexError, TypeError):
        return False
    return index is not None and _own_head_dim_v_runs(index)


def padded_head_dim(q, k, v, softmax_scale):
    """Head dims the rungs do not read as they are, zero-padded: (q, k, v padded to one head_dim D,
    the scale of q's head_dim itself, v's head_dim) for the caller to run and keep O's first
    head_dim_v columns. D is the larger of q's and v's head_dims rounded up to a multiple of 8:
    FlashAttention's rule for a head_dim that is not a multiple of 8, and a v with its own head_dim
    (MLA's prefill, 192 for q and k against 128 for v; any pair up to MAX_HEAD_DIM): the zero
    columns of q and k add nothing to Q K^T, and V's give O zero columns, so the result is exact;
    the cost is the padded columns' work and one copy of each padded input. None when there is
    nothing to pad, D is above the rungs' largest, or the inputs are ones the checks refuse anyway
    (they say why). Differentiable, as F.pad is."""
    try:
        d, dv = q.shape[-1], v.shape[-1]
        if k.shape[-1] != d or (d % 8 == 0 and dv == d):
            return None
        size = -(-max(d, dv) // 8) * 8
        if size > _ext.MAX_HEAD_DIM or dv < 1:
            return None
    except (AttributeError, IndexError, TypeError):
        return None
    F = torch.nn.functional
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    qk = (0, size - d)
    return F.pad(q, qk), F.pad(k, qk), F.pad(v, (0, size - dv)), scale, dv


def _attention_padded(q, k, v, rung, variant, causal, softmax_scale, return_lse):
    """attention() on padded_head_dim's inputs, O cut back to v's head_dim (a view, as FlashAttention
    returns it); None when nothing is padded. With the route (rung None) and V's own head_dim
    below q's (own_head_dim_v), nothing is padded: flash_attn_func's path (_flash._attention),
    rung 16 with Mods.head_dim_v, O at v's head_dim."""
    if rung is None and own_head_dim_v(q, k, v):
        from . import _flash

        res = _flash._attention(q, k, v, softmax_scale, bool(causal), (-1, -1), 0.0, None, False, return_lse, None)
        return res[:2] if return_lse else res
    padded = padded_head_dim(q, k, v, softmax_scale)
    if padded is None:
        return None
    qp, kp, vp, scale, d = padded
    res = attention(qp, kp, vp, rung, variant, causal, scale, return_lse)
    return (res[0][..., :d], res[1]) if return_lse else res[..., :d]


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
    try:  # attributes first, the grad mode only when one input asks (a call without grad pays two reads)
        grad = (q.requires_grad or k.requires_grad or v.requires_grad) and torch.is_grad_enabled()
    except AttributeError:  # not tensors: the checks below say so
        grad = False
    eager_grad = grad and not _is_compiling()
    if eager_grad:
        # Eager autograd: the two launches as one autograd.Function. A signature seen before takes
        # its prepared launches (_launch.Prepared, kept by the first call below: its inputs were
        # neither padded nor copied), when q, k, v are 16-byte aligned.
        sig = _fast_signature(q, k, v, causal, softmax_scale, number, variant)
        try:
            prepared = _TRAIN.get(sig) if sig is not None else None
        except TypeError:  # an unhashable argument: no prepared step
            sig, prepared = None, None
        if prepared is not None and not (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:
            out, lse = _EagerAttention.apply(q, k, v, prepared.key, number, variant, prepared)
            return (out, lse) if return_lse else out
    if grad or _is_compiling():
        padded = _attention_padded(q, k, v, rung, variant, causal, softmax_scale, return_lse)
        if padded is not None:  # a head_dim that is not a multiple of 8: padded, as FlashAttention does
            return padded
    if eager_grad:
        # The first call of a signature: checked and planned (attention_autograd), softmax_scale
        # first, as the call without grad does.
        _core.check_scale(softmax_scale)
        key, qkv = _core.check_qkv_realigned(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
        out, lse = attention_autograd(*qkv, key, number, variant)
        if qkv[0] is q and qkv[1] is k and qkv[2] is v:
            _launch.prepare_train(sig, q, k, v, key, number, variant)
        return (out, lse) if return_lse else out
    if grad or _is_compiling():
        # The op checks (the fake implementation shapes while tracing), and with grad refuses a
        # problem the backward rung cannot run before the forward pass.
        if grad and not (isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
            _core.check_qkv(q, k, v, tensor_type=torch.Tensor)  # its TypeError, not the dispatcher's
        # Checked here: the op's 0.0 means None, so softmax_scale=0 would pass as the default.
        scale = _core.check_scale(softmax_scale)
        out, lse, _ = attention_op(q, k, v, bool(causal), scale, number or 0, variant, grad)
        return (out, lse) if return_lse else out
    sig = _fast_signature(q, k, v, causal, softmax_scale, number, variant)
    try:
        fast = _FAST.get(sig) if sig is not None else None
    except TypeError:  # an unhashable argument (softmax_scale given as a list): no fast path
        sig, fast = None, None
    if fast is not None:
        result = _fast_forward(fast, q, k, v, return_lse)
        if result is not None:
            return result if return_lse else result[0]
    padded = _attention_padded(q, k, v, rung, variant, causal, softmax_scale, return_lse)
    if padded is not None:  # a head_dim that is not a multiple of 8: padded, as FlashAttention does
        return padded
    # No autograd: the op's own implementation, without the dispatcher's cost per call; the next
    # call with these inputs' signature takes the fast path above (not when they had to be copied:
    # the fast path launches on the inputs themselves).
    key, qkv = _core.check_qkv_realigned(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
    out, lse, _ = _launch.forward(*qkv, key, number, variant)
    if qkv[0] is q and qkv[1] is k and qkv[2] is v:
        _launch.prepare_fast(sig, q, k, v, out, key, number, variant)
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
    key = _core.check_qkv_cached(q, k, v, causal, softmax_scale, tensor_type=torch.Tensor)
    return _launch.backward(dout, q, k, v, out, lse, key, deterministic, number, variant, out_fp32)
