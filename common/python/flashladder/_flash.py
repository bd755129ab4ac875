"""FlashAttention's Python interface on the ladder's rungs: ``flash_attn_func`` and its packed and
variable-length forms, with FlashAttention 2's signatures and conventions.

    from flashladder import flash_attn_func, flash_attn_varlen_func
    out = flash_attn_func(q, k, v, causal=True, window_size=(4096, 0), softcap=50.0)

Layouts are FlashAttention's: q [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k,
heads_kv, head_dim]; packed batches q [total_q, heads_q, head_dim] with int32 ``cu_seqlens``;
``return_attn_probs=True`` returns ``(out, softmax_lse, None)`` (the LSE [batch, heads_q,
seqlen_q], or [heads_q, total_q] packed), as FlashAttention does without dropout.

What each argument runs on:
- no window, softcap, ALiBi or sink, dense batch: ``flashladder.attention``'s route (rung 15 on
  sm_90 for the forward, rung 14 for the backward);
- a window, ``softcap``, ``alibi_slopes`` ([heads_q] or [batch, heads_q], fp32) or
  ``learnable_sink`` (one logit per query head, as FlashAttention 3's interface names it), or a
  packed batch: rung 16 (masks and score modifiers; packed batches without them: rung 15), and
  rung 16's backward (rung 14 for a packed batch without them).

``dropout_p`` > 0 raises NotImplementedError: the rungs have no attention dropout. A problem no
rung takes raises ValueError with each rung's one-line reason. Nothing is ignored.
"""

import torch

from . import _core, _launch, _ops


def _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
               return_attn_probs, learnable_sink, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
               max_seqlen_k=0):
    padded = _ops.padded_head_dim(q, k, v, softmax_scale)
    if padded is not None:  # a head_dim that is not a multiple of 8: zero-padded, as FlashAttention does
        qp, kp, vp, scale, d = padded
        res = _attention(qp, kp, vp, scale, causal, window_size, softcap, alibi_slopes, deterministic,
                         return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        return (res[0][..., :d],) + tuple(res[1:]) if return_attn_probs else res[..., :d]
    left, right = _core.check_window(window_size, causal)
    _core.check_softcap(softcap)
    batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
    slopes = None
    if _core.check_slopes(alibi_slopes, q, batch):
        slopes = alibi_slopes.detach().float().contiguous()
    sinks = None
    if learnable_sink is not None:
        _core.check_sinks(learnable_sink, q)
        sinks = learnable_sink.float().contiguous()  # differentiable: its gradient flows back
    plain = cu_seqlens_q is None and left < 0 and right < 0 and not softcap and slopes is None and sinks is None
    if plain and not deterministic:
        out = _ops.attention(q, k, v, causal=bool(causal), softmax_scale=softmax_scale,
                             return_lse=return_attn_probs)
        return (out[0], out[1], None) if return_attn_probs else out
    scale = _core.check_scale(softmax_scale)  # 0.0 for None; 0 itself is refused, never read as None
    grad = torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v, learnable_sink))
    if not torch.compiler.is_compiling():
        args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, slopes, causal, scale, left, right,
                softcap)
        try:
            key, mods = _ops.mods_key(q, k, v, *args)
        except _core.LayoutError:  # strides or data the rungs cannot read: a copy they can, as FlashAttention takes them
            q, k, v = (_core.realigned(t) for t in (q, k, v))
            key, mods = _ops.mods_key(q, k, v, *args)
        extras = (cu_seqlens_q, cu_seqlens_k, sinks, slopes)
        if not grad:
            # No autograd: the op's own body, without the dispatcher's cost per call (as attention() does).
            out, lse, _ = _launch.forward(q, k, v, key, mods=mods, extras=extras)
        else:
            # Eager autograd: the two launches as one autograd.Function (_ops.attention_mods_autograd).
            out, lse = _ops.attention_mods_autograd(q, k, v, key, mods, extras, deterministic)
        return (out, lse, None) if return_attn_probs else out
    # Compiling: the op (torch.compile traces it); it checks again, and with grad refuses a problem
    # the backward cannot run.
    out, lse, _ = _ops.attention_mods_op(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                                         sinks, slopes, bool(causal), scale, left, right, float(softcap), 0, "",
                                         grad, bool(deterministic))
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    learnable_sink=None):
    """FlashAttention 2's flash_attn_func: q [batch, seqlen_q, heads_q, head_dim], k and v [batch,
    seqlen_k, heads_kv, head_dim], fp16 or bf16. ``causal`` is bottom-right aligned; ``window_size``
    (left, right) keeps keys i + seqlen_k - seqlen_q - left ... + right (-1: open); ``softcap``
    applies cap * tanh(s / cap) to the scaled scores; ``alibi_slopes`` [heads_q] or [batch,
    heads_q] fp32 adds -slope * |i + seqlen_k - seqlen_q - j|; ``learnable_sink`` [heads_q] adds one
    logit per head to the softmax's denominator (FlashAttention 3's name; differentiable).
    Returns out, or (out, softmax_lse, None) with ``return_attn_probs``."""
    if (dropout_p == 0.0 and softcap == 0.0 and window_size == _OPEN and alibi_slopes is None
            and learnable_sink is None and not deterministic):
        # The plain call, what _attention would route to attention() after parsing every
        # argument: straight there (its fast path included), without that parsing per call.
        out = _ops.attention(q, k, v, causal=bool(causal), softmax_scale=softmax_scale,
                             return_lse=return_attn_probs)
        return (out[0], out[1], None) if return_attn_probs else out
    _core.check_dropout(dropout_p)
    return _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, learnable_sink)


_OPEN = (-1, -1)  # window_size's default: both sides open


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                              *, learnable_sink=None):
    """flash_attn_func on qkv [batch, seqlen, 3, heads, head_dim] (views, no copy)."""
    _core.check_dropout(dropout_p)
    _core.check_packed("qkv", qkv, "[batch, seqlen, 3, heads, head_dim]", 2, 3)
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, learnable_sink)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             learnable_sink=None):
    """flash_attn_func on q and kv [batch, seqlen_k, 2, heads_kv, head_dim] (views, no copy)."""
    _core.check_dropout(dropout_p)
    _core.check_packed("kv", kv, "[batch, seqlen_k, 2, heads_kv, head_dim]", 2, 2)
    return _attention(q, kv[:, :, 0], kv[:, :, 1], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           *, learnable_sink=None):
    """FlashAttention 2's flash_attn_varlen_func: sequences packed along the first dimension, q
    [total_q, heads_q, head_dim], k and v [total_k, heads_kv, head_dim], int32 cu_seqlens_q/k
    [batch + 1], the longest sequences max_seqlen_q/k. The masks and modifiers are per sequence, as
    flash_attn_func's. Returns out [total_q, heads_q, head_dim], or (out, softmax_lse [heads_q,
    total_q], None). ``block_table`` (a paged K/V) is flash_attn_with_kvcache's, not taken here."""
    _core.check_dropout(dropout_p)
    _core.check_not_implemented("flash_attn_varlen_func with a block_table (paged K/V)", block_table is not None)
    return _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                     deterministic=False, return_attn_probs=False, *, learnable_sink=None):
    """flash_attn_varlen_func on qkv [total, 3, heads, head_dim] with one cu_seqlens."""
    _core.check_dropout(dropout_p)
    _core.check_packed("qkv", qkv, "[total, 3, heads, head_dim]", 1, 3)
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink, cu_seqlens, cu_seqlens, max_seqlen,
                      max_seqlen)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                    *, learnable_sink=None):
    """flash_attn_varlen_func on q and kv [total_k, 2, heads_kv, head_dim]."""
    _core.check_dropout(dropout_p)
    _core.check_packed("kv", kv, "[total_k, 2, heads_kv, head_dim]", 1, 2)
    return _attention(q, kv[:, 0], kv[:, 1], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k)
