"""FlashAttention's Python interface on the ladder's rungs: ``flash_attn_func`` and its packed and
variable-length forms, with FlashAttention 2's signatures and conventions.

    from flashladder import flash_attn_func, flash_attn_varlen_func
    out = flash_attn_func(q, k, v, causal=True, window_size=(4096, 0), softcap=50.0)

Layouts are FlashAttention's: q [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k,
heads_kv, head_dim]; packed batches q [total_q, heads_q, head_dim] with int32 ``cu_seqlens``;
``return_attn_probs=True`` returns ``(out, softmax_lse, None)`` (the LSE [batch, heads_q,
seqlen_q], or [heads_q, total_q] packed), as FlashAttention does without dropout; with dropout
``(out, softmax_lse, S_dmask)`` (dropout_s_dmask).

What each argument runs on:
- no window, softcap, ALiBi or sink, dense batch: ``flashladder.attention``'s route (rung 15 on
  sm_90 for the forward, rung 14 for the backward);
- a window, ``softcap``, ``alibi_slopes`` ([heads_q] or [batch, heads_q], fp32) or
  ``learnable_sink`` (one logit per query head, as FlashAttention 3's interface names it), or a
  packed batch: rung 16 (masks and score modifiers; packed batches without them: rung 15), and
  rung 16's backward (rung 14 for a packed batch without them).

``dropout_p`` > 0 runs rung 16's forward and backward with attention dropout (FlashAttention 2's:
P ∘ M / (1 - p), the LSE the undropped one's). Its seed and offset are drawn on the device from
PyTorch's CUDA generator (_core.dropout_state: torch.manual_seed reproduces a call, a CUDA graph
replays a new draw), and the backward regenerates the mask from the same tensor. ``alibi_slopes``
is taken with dropout; ``softcap`` is not (NotImplementedError naming it, as FlashAttention 2
refuses it). A problem no rung takes raises ValueError with each rung's one-line reason. Nothing
is ignored.
"""

import torch

from . import _core, _fp8, _launch, _ops


#: Input signatures (_step_signature) of calls whose checks passed, to what their next call reuses:
#: a masked, modified or packed call's _ops.Step (the key, the Mods, the plans, the strides), or
#: PLAIN. A model calls attention with a few signatures, every layer of every step.
STEPS = {}
_STEPS_MAX = 4096
_SCALARS = (type(None), bool, int, float)
#: STEPS' value for a signature that takes the plain route (no window, softcap, ALiBi, sink,
#: packing or dropout): attention(), which keeps its own checks per signature and its fast path.
PLAIN = object()


def _keep(sig, step):
    if len(STEPS) >= _STEPS_MAX:
        STEPS.clear()
    STEPS[sig] = step


def _step_signature(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                    learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p):
    """What the checks of a call depend on: each input's type, shape, strides, dtype, device and
    data pointer modulo 16 (the alignment rule), the metadata's and the modifiers' tensors'
    layouts (the lengths inside cu_seqlens are checked on the device at every launch), and the
    arguments with their types. None when an argument is not a plain Python scalar (the window
    and the lengths ints; the scale, softcap, causal and deterministic None, bool, int or float):
    the checks then run every call, and say why where they refuse."""
    try:
        window = tuple(window_size)
        # Written out, not as all() over generators: this runs on every call of a masked step.
        if (len(window) != 2 or type(window[0]) is not int or type(window[1]) is not int
                or type(max_seqlen_q) is not int or type(max_seqlen_k) is not int
                or type(softmax_scale) not in _SCALARS or type(softcap) not in _SCALARS
                or type(causal) not in _SCALARS or type(deterministic) not in _SCALARS):
            return None  # a tensor or another object kept in the key would never match again
        sig = (type(q), q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15,
               type(k), k.shape, k.stride(), k.dtype, k.device, k.data_ptr() & 15,
               type(v), v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15,
               type(softmax_scale), softmax_scale, type(causal), causal, window, type(softcap), softcap,
               type(deterministic), deterministic, dropout_p, type(max_seqlen_q), max_seqlen_q,
               type(max_seqlen_k), max_seqlen_k,
               None if cu_seqlens_q is None else _layout(cu_seqlens_q),
               None if cu_seqlens_k is None else _layout(cu_seqlens_k),
               None if alibi_slopes is None else _layout(alibi_slopes),
               None if learnable_sink is None else _layout(learnable_sink))
        # Every field is hashable once the type checks above passed (no explicit hash: the lookup
        # hashes it once).
        return sig
    except Exception:  # noqa: BLE001  not tensors, or unhashable arguments: the checks say why
        return None


def _layout(t):
    """A metadata or modifier tensor's part of _step_signature: its type and layout, not its values."""
    return type(t), t.shape, t.stride(), t.dtype, t.device


def _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
               return_attn_probs, learnable_sink, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
               max_seqlen_k=0, dropout_p=0.0):
    if _fp8.is_fp8(q):
        if cu_seqlens_q is not None:
            raise NotImplementedError("flashladder: float8_e4m3fn inputs on a packed batch (cu_seqlens): rung 13, "
                                      "the FP8 forward, runs dense batches only (flash_attn_func)")
        _fp8.check_fp8_args(dropout_p, window_size, softcap, alibi_slopes, learnable_sink, deterministic)
        res = _fp8.attention_fp8(q, k, v, None, None, None, softmax_scale, causal, return_lse=return_attn_probs)
        return (res[0], res[1], None) if return_attn_probs else res
    compiling = _ops._is_compiling()
    sig = None
    if not compiling:
        sig = _step_signature(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                              learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p)
        try:
            step = STEPS.get(sig) if sig is not None else None
        except TypeError:  # a field that is not hashable after all: the checks run every call
            sig, step = None, None
        if step is PLAIN:  # this signature took the plain route: attention()'s own checks and fast path
            out = _ops.attention(q, k, v, causal=bool(causal), softmax_scale=softmax_scale,
                                 return_lse=return_attn_probs)
            return (out[0], out[1], None) if return_attn_probs else out
        if step is not None:  # this signature passed every check below: its Step
            return _run_step(step, q, k, v, alibi_slopes, learnable_sink, deterministic, return_attn_probs, causal,
                             cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p)
    own_dv = _ops.own_head_dim_v(q, k, v)  # V's head_dim below q's: rung 16 takes it, nothing padded
    padded = None if own_dv else _ops.padded_head_dim(q, k, v, softmax_scale)
    if padded is not None:  # a head_dim that is not a multiple of 8: zero-padded, as FlashAttention does
        qp, kp, vp, scale, d = padded
        res = _attention(qp, kp, vp, scale, causal, window_size, softcap, alibi_slopes, deterministic,
                         return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         dropout_p)
        return (res[0][..., :d],) + tuple(res[1:]) if return_attn_probs else res[..., :d]
    left, right = _core.check_window(window_size, causal)
    _core.check_softcap(softcap)
    _core.check_dropout_with(dropout_p, softcap, alibi_slopes)
    batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
    slopes = None
    if _core.check_slopes(alibi_slopes, q, batch):
        slopes = alibi_slopes.detach().float().contiguous()
    sinks = None
    if learnable_sink is not None:
        _core.check_sinks(learnable_sink, q)
        sinks = learnable_sink.float().contiguous()  # differentiable: its gradient flows back
    plain = (cu_seqlens_q is None and left < 0 and right < 0 and not softcap and slopes is None and sinks is None
             and not dropout_p and not own_dv)
    if plain and not deterministic:
        out = _ops.attention(q, k, v, causal=bool(causal), softmax_scale=softmax_scale,
                             return_lse=return_attn_probs)
        if sig is not None:  # kept once it ran: the window, softcap and dropout arguments checked
            _keep(sig, PLAIN)
        return (out[0], out[1], None) if return_attn_probs else out
    scale = _core.check_scale(softmax_scale)  # 0.0 for None; 0 itself is refused, never read as None
    if not compiling:
        args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, slopes, causal, scale, left, right,
                softcap, dropout_p)
        try:
            key, mods = _ops.mods_key(q, k, v, *args)
        except _core.LayoutError:  # strides or data the rungs cannot read: a copy they can, as FlashAttention takes them
            q, k, v = (_core.realigned(t) for t in (q, k, v))
            key, mods = _ops.mods_key(q, k, v, *args)
            sig = None  # the copies' signature is not the caller's: this call's inputs are copied every time
        step = _ops.Step(key, mods, left, right, scale, q, k, v)
        res = _run_step(step, q, k, v, alibi_slopes, learnable_sink, deterministic, return_attn_probs, causal,
                        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, slopes, sinks)
        if sig is not None:  # kept once it ran: a problem no rung takes raised above, and is checked again
            _keep(sig, step)
        return res
    # Compiling: the op (torch.compile traces it); it checks again, and with grad refuses a problem
    # the backward cannot run.
    grad = torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v, learnable_sink))
    # Dropout's seed and offset, drawn on the device from PyTorch's generator (one per call).
    state = _core.dropout_state(q.device) if dropout_p else None
    out, lse, _ = _ops.attention_mods_op(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                                         sinks, slopes, bool(causal), scale, left, right, float(softcap), 0, "",
                                         grad, bool(deterministic), float(dropout_p), state)
    if not return_attn_probs:
        return out
    return out, lse, _probs(q, k, state, dropout_p, causal, scale, left, right, cu_seqlens_q, cu_seqlens_k,
                            max_seqlen_q, max_seqlen_k, slopes)


def _run_step(step, q, k, v, alibi_slopes, learnable_sink, deterministic, return_attn_probs, causal, cu_seqlens_q,
              cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, slopes=None, sinks=None):
    """A masked, modified or packed call whose checks passed (``step``, an _ops.Step): the fp32
    slopes and sinks the kernels read (given when the caller made them already), dropout's seed
    and offset, then the forward, or under autograd the forward and its backward as one
    autograd.Function (_ops.attention_mods_autograd)."""
    if slopes is None and alibi_slopes is not None:
        slopes = alibi_slopes.detach().float().contiguous()
    if sinks is None and learnable_sink is not None:
        sinks = learnable_sink.float().contiguous()  # differentiable: its gradient flows back
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
        learnable_sink is not None and learnable_sink.requires_grad))
    # Dropout's seed and offset, drawn on the device from PyTorch's generator (one per call).
    state = _core.dropout_state(q.device) if dropout_p else None
    extras = (cu_seqlens_q, cu_seqlens_k, sinks, slopes)
    if not grad:
        # No autograd: the op's own body, without the dispatcher's cost per call (as attention() does).
        out, lse, _ = _launch.forward(q, k, v, step.key, mods=step.mods, extras=extras, dropout_state=state,
                                      step=step)
    else:
        out, lse = _ops.attention_mods_autograd(q, k, v, step, extras, deterministic, state)
    if not return_attn_probs:
        return out
    return out, lse, _probs(q, k, state, dropout_p, causal, step.scale, step.left, step.right, cu_seqlens_q,
                            cu_seqlens_k, max_seqlen_q, max_seqlen_k, slopes)


#: S_dmask's largest size in elements (batch x heads x rows x keys, rounded to 128): its P is
#: recomputed in fp32 with torch, a debugging aid, not a path to run at scale.
S_DMASK_MAX = 1 << 28
#: The fp32 scores S_dmask recomputes at once (heads of one sequence at a time): its working set.
S_DMASK_CHUNK = 1 << 26


def _probs(q, k, state, dropout_p, causal, scale, left, right, cu_q, cu_k, max_q, max_k, slopes):
    """return_attn_probs' third value: None without dropout, else dropout_s_dmask's (ALiBi's bias
    in its scores; the sinks, not scores of a key, do not enter it)."""
    if not dropout_p:
        return None
    return dropout_s_dmask(q, k, state, dropout_p, causal, scale, left, right, cu_q, cu_k, max_q, max_k, slopes)


@torch.no_grad()
def dropout_s_dmask(q, k, state, dropout_p, causal=False, softmax_scale=0.0, window_left=-1, window_right=-1,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, alibi_slopes=None):
    """FlashAttention 2's S_dmask of a dropout call: [batch, heads_q, seqlen_q rounded up to 128,
    seqlen_k rounded up to 128] in q's dtype (packed: per sequence, from row and key 0, max_seqlen
    rounded), each seen element exp(s_ij - m_i), s_ij the scaled score with ALiBi's bias
    -slope |i + seqlen_k - seqlen_q - j| when ``alibi_slopes`` ([heads_q] or [batch, heads_q],
    float32) is given, m_i the largest such score row i sees: FlashAttention
    2's unnormalized probabilities with all of a row's keys as one block (its tests'
    normalize_flash_attn_S, given a block at least seqlen_k wide, multiplies by exp(m_i - LSE_i)
    and gets P), negated where dropout dropped it, 0 where the mask hides it and in the padding.
    ``S_dmask >= 0`` is the keep mask, as FlashAttention's tests read it (a dropped value that is
    exactly 0 reads as kept, as there). The mask comes from the kernels' own function on the device
    (_launch.dropout_mask), the scores from q and k in fp32 here, a few heads at a time (at most
    S_DMASK_CHUNK scores at once); larger than S_DMASK_MAX elements is refused."""
    packed = cu_seqlens_q is not None
    heads_q, d = q.shape[-2], q.shape[-1]
    batch = cu_seqlens_q.shape[0] - 1 if packed else q.shape[0]
    rows = max_seqlen_q if packed else q.shape[1]
    cols = max_seqlen_k if packed else k.shape[1]
    rows_r, cols_r = -(-rows // 128) * 128, -(-cols // 128) * 128
    if batch * heads_q * rows_r * cols_r > S_DMASK_MAX:
        raise ValueError("flashladder: return_attn_probs with dropout_p > 0 recomputes P in fp32 and is bounded to "
                         "%d elements (batch x heads x seqlens rounded to 128), got %d"
                         % (S_DMASK_MAX, batch * heads_q * rows_r * cols_r))
    keep = _launch.dropout_mask(state, dropout_p, batch, heads_q, rows, cols, cu_seqlens_q, cu_seqlens_k)
    scale = softmax_scale or d ** -0.5
    out = torch.zeros((batch, heads_q, rows_r, cols_r), dtype=q.dtype, device=q.device)
    for b in range(batch):
        if packed:
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
            qb, kb = q[q0:q1], k[k0:k1]
        else:
            qb, kb = q[b], k[b]
        sq, sk = qb.shape[0], kb.shape[0]
        if sq == 0 or sk == 0:
            continue
        group = heads_q // kb.shape[1]
        i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        seen = torch.ones((sq, sk), dtype=torch.bool, device=q.device)
        if causal:
            seen &= j <= i
        if window_left >= 0:
            seen &= j >= i - window_left
        if window_right >= 0:
            seen &= j <= i + window_right
        step = max(1, S_DMASK_CHUNK // (sq * sk))
        for h0 in range(0, heads_q, step):
            h1 = min(heads_q, h0 + step)
            heads = torch.arange(h0, h1, device=q.device)
            kk = kb.float().index_select(1, torch.div(heads, group, rounding_mode="floor"))
            s = torch.einsum("qhd,khd->hqk", qb[:, h0:h1].float(), kk) * scale
            if alibi_slopes is not None:  # the kernels' bias (the DESIGN's): -slope_h |i + sk - sq - j|
                slope = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]
                s = s - slope[h0:h1].float()[:, None, None] * (i - j).abs()
            s = s.masked_fill(~seen, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            p = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))  # unseen: exp(-inf) = 0
            p = torch.where(keep[b, h0:h1, :sq, :sk], p, -p)
            out[b, h0:h1, :sq, :sk] = p.to(q.dtype)
    return out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                    learnable_sink=None, q_descale=None, k_descale=None, v_descale=None):
    """FlashAttention 2's flash_attn_func: q [batch, seqlen_q, heads_q, head_dim], k and v [batch,
    seqlen_k, heads_kv, head_dim], fp16 or bf16. ``causal`` is bottom-right aligned; ``window_size``
    (left, right) keeps keys i + seqlen_k - seqlen_q - left ... + right (-1: open); ``softcap``
    applies cap * tanh(s / cap) to the scaled scores; ``alibi_slopes`` [heads_q] or [batch,
    heads_q] fp32 adds -slope * |i + seqlen_k - seqlen_q - j|; ``learnable_sink`` [heads_q] adds one
    logit per head to the softmax's denominator (FlashAttention 3's name; differentiable).
    ``dropout_p`` in [0, 1): attention dropout (rung 16; with alibi_slopes, not with softcap).
    Returns out, or (out, softmax_lse, S_dmask) with ``return_attn_probs`` (S_dmask None without
    dropout; dropout_s_dmask's with it).

    float8_e4m3fn q, k, v run rung 13's FP8 forward (flashladder._fp8): ``q_descale``,
    ``k_descale``, ``v_descale`` are FlashAttention 3's (fp32 [batch, heads_kv], 1 where left out),
    O is bf16; causal or no mask, head_dim 64, 128 or 256, no autograd."""
    if q_descale is not None or k_descale is not None or v_descale is not None or _fp8.is_fp8(q):
        return _fp8_call(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                         deterministic, return_attn_probs, learnable_sink, q_descale, k_descale, v_descale)
    if (dropout_p == 0.0 and softcap == 0.0 and window_size == _OPEN and alibi_slopes is None
            and learnable_sink is None and not deterministic):
        # The plain call, what _attention would route to attention() after parsing every
        # argument: straight there (its fast path included), without that parsing per call.
        out = _ops.attention(q, k, v, causal=bool(causal), softmax_scale=softmax_scale,
                             return_lse=return_attn_probs)
        return (out[0], out[1], None) if return_attn_probs else out
    p = _core.check_dropout(dropout_p)
    return _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, learnable_sink, dropout_p=p)


_OPEN = (-1, -1)  # window_size's default: both sides open


def _fp8_call(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
              return_attn_probs, learnable_sink, q_descale, k_descale, v_descale):
    """flash_attn_func on e4m3 inputs (or given descales): rung 13 (_fp8.attention_fp8)."""
    if not _fp8.is_fp8(q):
        raise TypeError("flashladder: q_descale, k_descale and v_descale scale float8_e4m3fn inputs; q is %s"
                        % (getattr(q, "dtype", type(q).__name__),))
    _fp8.check_fp8_args(dropout_p, window_size, softcap, alibi_slopes, learnable_sink, deterministic)
    res = _fp8.attention_fp8(q, k, v, q_descale, k_descale, v_descale, softmax_scale, causal,
                             return_lse=return_attn_probs)
    return (res[0], res[1], None) if return_attn_probs else res


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                              *, learnable_sink=None):
    """flash_attn_func on qkv [batch, seqlen, 3, heads, head_dim] (views, no copy)."""
    p = _core.check_dropout(dropout_p)
    _core.check_packed("qkv", qkv, "[batch, seqlen, 3, heads, head_dim]", 2, 3)
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], softmax_scale, causal, window_size, softcap,
                      alibi_slopes, deterministic, return_attn_probs, learnable_sink, dropout_p=p)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             learnable_sink=None):
    """flash_attn_func on q and kv [batch, seqlen_k, 2, heads_kv, head_dim] (views, no copy)."""
    p = _core.check_dropout(dropout_p)
    _core.check_packed("kv", kv, "[batch, seqlen_k, 2, heads_kv, head_dim]", 2, 2)
    return _attention(q, kv[:, :, 0], kv[:, :, 1], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink, dropout_p=p)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           *, learnable_sink=None):
    """FlashAttention 2's flash_attn_varlen_func: sequences packed along the first dimension, q
    [total_q, heads_q, head_dim], k and v [total_k, heads_kv, head_dim], int32 cu_seqlens_q/k
    [batch + 1], the longest sequences max_seqlen_q/k. The masks and modifiers are per sequence, as
    flash_attn_func's. Returns out [total_q, heads_q, head_dim], or (out, softmax_lse [heads_q,
    total_q], None).

    ``block_table`` (int32 [batch, pages per sequence]): k and v are page pools [pages, page_size,
    heads_kv, head_dim], and sequence b's keys are its cu_seqlens_k length's first slots of its
    pages in table order (FlashAttention 2's paged varlen). The prefill rungs read dense keys, so
    the keys are gathered into a packed copy first (_paged_keys: batch x max_seqlen_k rows, no
    synchronization), its cost that of copying them."""
    p = _core.check_dropout(dropout_p)
    if block_table is not None:
        k, v = _paged_keys(q, k, v, cu_seqlens_k, max_seqlen_k, block_table)
    return _attention(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                      return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, p)


def _paged_keys(q, k_pool, v_pool, cu_seqlens_k, max_seqlen_k, block_table):
    """(k, v) packed [batch x max_seqlen_k, heads_kv, head_dim] from page pools and a block table,
    token t of the packed keys at its cu_seqlens_k place: sequence b = the last with cu_seqlens_k[b]
    <= t, key j = t - cu_seqlens_k[b], in page block_table[b, j // page_size], slot j % page_size.
    The rows past the last sequence's end are never read (cu_seqlens_k bounds every sequence).
    cu_seqlens_k and the table are checked and clamped on the device first (no synchronization):
    each length within max_seqlen_k and the table's capacity, each used entry inside the pool; a
    violation is raised by the next call that takes metadata (_launch.raise_metadata_errors).
    Differentiable in the pools (an index)."""
    if (not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2
            or block_table.device != q.device):
        raise ValueError("flashladder: block_table must be an int32 [batch, pages per sequence] tensor on %s, got %s"
                         % (q.device, block_table if not isinstance(block_table, torch.Tensor) else
                            "%s %s on %s" % (block_table.dtype, tuple(block_table.shape), block_table.device)))
    if (k_pool.dim() != 4 or tuple(v_pool.shape) != tuple(k_pool.shape) or k_pool.device != q.device
            or k_pool.shape[-1] != q.shape[-1]):
        raise ValueError("flashladder: with a block_table, k and v are page pools [pages, page_size, heads_kv, "
                         "head_dim] of one shape on q's device, got %s and %s" % (tuple(k_pool.shape),
                                                                                  tuple(v_pool.shape)))
    if (not isinstance(cu_seqlens_k, torch.Tensor) or cu_seqlens_k.dtype != torch.int32 or cu_seqlens_k.dim() != 1
            or cu_seqlens_k.device != q.device):
        raise ValueError("flashladder: cu_seqlens_k must be an int32 [batch + 1] tensor on %s" % (q.device,))
    batch, columns = block_table.shape
    pool_pages, page = k_pool.shape[0], k_pool.shape[1]
    max_k = int(max_seqlen_k)
    if cu_seqlens_k.shape[0] != batch + 1:
        raise ValueError("flashladder: cu_seqlens_k has %d entries, block_table %d rows: it must have batch + 1 = %d"
                         % (cu_seqlens_k.shape[0], batch, batch + 1))
    if page <= 0 or max_k < 0 or batch == 0 or columns == 0:
        raise ValueError("flashladder: a paged call needs pages of at least one slot, a block_table with a column "
                         "and max_seqlen_k >= 0")
    total = batch * max_k
    _launch.raise_metadata_errors(q.device.index)
    # The lengths (negative ones as 0: the varlen check of the call names cu_seqlens_k's order)
    # against the table's capacity, its used entries against the pool (an entry outside it read
    # as page 0). Every index below stays inside its tensor whatever cu_seqlens_k holds; the
    # call's own check (sanitized_varlen) then clamps cu_seqlens_k against these rows.
    cu_k = cu_seqlens_k.contiguous()
    lengths = (cu_k[1:] - cu_k[:-1]).clamp_(min=0).contiguous()
    table = _launch.sanitized_table(lengths, block_table, page, pool_pages, q)
    t = torch.arange(total, device=q.device, dtype=torch.int32)
    b = torch.searchsorted(cu_k[1:].contiguous(), t, right=True).clamp_(max=batch - 1)
    j = (t - cu_k[b]).clamp_(min=0)
    col = torch.div(j, page, rounding_mode="floor").clamp_(max=columns - 1).long()
    pages = table[b.long(), col].long()
    slots = (j % page).long()
    return k_pool[pages, slots], v_pool[pages, slots]


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None,
                                     causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                     deterministic=False, return_attn_probs=False, *, learnable_sink=None):
    """flash_attn_varlen_func on qkv [total, 3, heads, head_dim] with one cu_seqlens."""
    p = _core.check_dropout(dropout_p)
    _core.check_packed("qkv", qkv, "[total, 3, heads, head_dim]", 1, 3)
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink, cu_seqlens, cu_seqlens, max_seqlen,
                      max_seqlen, p)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                                    *, learnable_sink=None):
    """flash_attn_varlen_func on q and kv [total_k, 2, heads_kv, head_dim]."""
    p = _core.check_dropout(dropout_p)
    _core.check_packed("kv", kv, "[total_k, 2, heads_kv, head_dim]", 1, 2)
    return _attention(q, kv[:, 0], kv[:, 1], softmax_scale, causal, window_size, softcap, alibi_slopes,
                      deterministic, return_attn_probs, learnable_sink, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                      max_seqlen_k, p)
