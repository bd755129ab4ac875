"""FlashAttention 2's ``flash_attn_with_kvcache`` on the ladder's rungs (inference: no autograd):
a decode step or a few queries on rung 08 (Flash-Decoding, pages included), a prefill into the
cache on the prefill rung; new keys appended in place, rotary embedding, cache_batch_idx and
left padding as FlashAttention 2 takes them.

The cache's own rules (its layout, pages, lengths, rotary tables) are checked here, before
anything is written; q's and the attention problem's checks are _core's, as every call's; the
launch is _launch's.
"""

import atexit
import dataclasses
from typing import Optional

import torch

from . import _core, _ext, _fp8, _launch, _ops


@torch.library.custom_op("flashladder::attention_kvcache", mutates_args=())
def attention_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                         block_table: Optional[torch.Tensor], cache_leftpad: Optional[torch.Tensor],
                         learnable_sink: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                         softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
                         num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of flash_attn_with_kvcache on a cache already written (its new k, v appended by
    the caller): what a graph compiled by torch.compile calls."""
    return flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, cache_leftpad=cache_leftpad,
                                   block_table=block_table, softmax_scale=softmax_scale or None, causal=causal,
                                   window_size=(window_left, window_right), softcap=softcap,
                                   alibi_slopes=alibi_slopes, num_splits=num_splits, return_softmax_lse=True,
                                   learnable_sink=learnable_sink)


@attention_kvcache_op.register_fake
def _attention_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, cache_leftpad, learnable_sink,
                            alibi_slopes, softmax_scale, causal, window_left, window_right, softcap, num_splits):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


def _cache_lengths(cache_seqlens, batch, slots, device):
    """int32 [batch] of a cache's used slots (None: every slot, an int: the same for all)."""
    if cache_seqlens is None:
        return torch.full((batch,), slots, dtype=torch.int32, device=device)
    if isinstance(cache_seqlens, int):
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    if tuple(cache_seqlens.shape) != (batch,) or cache_seqlens.device != device:
        raise ValueError("flashladder: cache_seqlens must be an int or an int32 [batch] = (%d,) tensor on %s, "
                         "got %s on %s" % (batch, device, tuple(cache_seqlens.shape), cache_seqlens.device))
    return cache_seqlens.to(torch.int32)


def _pages_routable(key, mods, q):
    """Whether a rung takes the paged problem as it is (the route's plan: rung 08, which reads pages,
    takes a decode step and a few queries)."""
    try:
        _core.plan_forward(None, "", key, q.device.index, False, mods)
    except ValueError:
        return False
    return True


def _gather_pages(k_pool, v_pool, block_table, used, page):
    """K and V as [batch, n * page, heads, head_dim]: each sequence's first n pages, in order, read
    through its row of the block table, n the pages the longest sequence uses (``used``: int32
    [batch] keys, read once on the host). A sequence's slots past its own pages come from pool
    page 0 and are never attended: ``used`` bounds its keys."""
    n = max(1, -(-int(used.max()) // page))
    if n > block_table.shape[1]:
        raise ValueError("flashladder: cache_seqlens (+ the new keys) need %d pages, the block_table has %d"
                         % (n, block_table.shape[1]))
    rows = block_table[:, :n].long()
    need = (used.long() + page - 1) // page
    rows = torch.where(torch.arange(n, device=rows.device)[None, :] < need[:, None], rows, torch.zeros_like(rows))
    shape = (block_table.shape[0], n * page, k_pool.shape[2], k_pool.shape[3])
    return k_pool[rows].reshape(shape), v_pool[rows].reshape(shape)


def _apply_rotary(x, cos, sin, positions, interleaved):
    """x [batch, seqlen, heads, head_dim] with its first rotary_dim = 2 cos.shape[1] channels
    rotated (RoFormer, Su et al. 2021) by the angles of rows ``positions`` (int [batch, seqlen]) of
    cos and sin [seqlen_ro, rotary_dim / 2]; the other channels pass through. The pairs are (2i,
    2i + 1) with ``interleaved`` (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX). In fp32 from
    the 16-bit x, cos and sin, rounded once to x's dtype, as FlashAttention 2's kernel does
    (csrc/flash_attn/src/rotary.h). Plain torch ops: torch.compile traces them."""
    half = cos.shape[-1]
    if half == 0:
        return x
    rows = positions.long()
    c = cos[rows].float().unsqueeze(2)  # [batch, seqlen, 1, half]: one angle for every head
    s = sin[rows].float().unsqueeze(2)
    xr = x[..., :2 * half].float()
    x0, x1 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else (xr[..., :half], xr[..., half:])
    r0, r1 = x0 * c - x1 * s, x0 * s + x1 * c
    rotated = torch.stack((r0, r1), dim=-1).flatten(-2) if interleaved else torch.cat((r0, r1), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)


def _check_rotary(rotary_cos, rotary_sin, q, k, slots):
    """FlashAttention 2's checks of rotary_cos and rotary_sin (flash_api.cpp, mha_fwd_kvcache):
    both or neither, only with new keys, [seqlen_ro >= the cache's slots, rotary_dim / 2] in q's
    dtype on q's device, rotary_dim <= head_dim and a multiple of 16."""
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("flashladder: rotary_cos and rotary_sin come together")
    if rotary_cos is None:
        return
    if k is None:
        raise ValueError("flashladder: rotary_cos/rotary_sin rotate the new keys as they are appended: pass k and v "
                         "too (FlashAttention 2 refuses rotary without them)")
    head_dim = q.shape[-1]
    if rotary_cos.dim() != 2 or tuple(rotary_sin.shape) != tuple(rotary_cos.shape):
        raise ValueError("flashladder: rotary_cos and rotary_sin must be one shape [seqlen_ro, rotary_dim / 2], got "
                         "%s and %s" % (tuple(rotary_cos.shape), tuple(rotary_sin.shape)))
    for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError("flashladder: %s must have q's dtype and device (%s on %s), got %s on %s"
                             % (name, q.dtype, q.device, t.dtype, t.device))
    seqlen_ro, rotary_dim = rotary_cos.shape[0], 2 * rotary_cos.shape[1]
    if rotary_dim > head_dim or rotary_dim % 16 != 0:
        raise ValueError("flashladder: rotary_dim (2 x rotary_cos.shape[1] = %d) must be <= head_dim (%d) and a "
                         "multiple of 16 (FlashAttention 2's rule)" % (rotary_dim, head_dim))
    if seqlen_ro < slots:
        raise ValueError("flashladder: rotary_cos/rotary_sin have %d positions, the cache has %d slots: "
                         "seqlen_ro must cover them" % (seqlen_ro, slots))


#: The smallest page through which flash_attn_with_kvcache reads cache_batch_idx's rows in place:
#: rung 08's README measures 16-token pages at 0.95-0.98x the contiguous loader (its paged table,
#: 16k to 128k keys); smaller pages are not measured, and their rows are copied instead.
_ROW_PAGE_MIN = 16


def _rows_as_pages(k_cache, v_cache, cache_batch_idx):
    """(k pool, v pool, block table) that read a contiguous cache [batch_cache, seqlen_cache,
    heads_kv, head_dim] as rung 08's page pool: pages of the largest power of two that divides
    seqlen_cache (rung 08's pages are powers of two; seqlen_cache itself when it is one), and a
    table that maps sequence b to row cache_batch_idx[b]'s pages in order. Views, no copy. None
    where the cache is not contiguous or the page would be smaller than _ROW_PAGE_MIN."""
    rows, slots, heads_kv, head_dim = (int(n) for n in k_cache.shape)
    page = slots & -slots  # the lowest set bit
    if page < _ROW_PAGE_MIN or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return None
    per_row = slots // page
    if per_row == 1:
        table = cache_batch_idx.view(-1, 1).contiguous()  # nothing launched: a decode step's host time
    else:
        table = cache_batch_idx.view(-1, 1) * per_row + torch.arange(per_row, dtype=torch.int32,
                                                                     device=cache_batch_idx.device)
    shape = (rows * per_row, page, heads_kv, head_dim)
    return k_cache.view(shape), v_cache.view(shape), table


def _sanitized_cache(cache_seqlens, new, batch, slots, cache_leftpad, block_table, page, pool_pages, rows, row_count,
                     q):
    """(the caller's lengths before the append, the checked ones, those after the append, left
    padding or None, block table or None), each checked on the device against its bound and
    clamped (_ext.sanitize_cache, metadata.h): cache_seqlens plus the new keys within the slots,
    cache_leftpad within a sequence's keys, the used columns of the table inside the pool (an
    entry outside it read as page 0), cache_batch_idx's ``rows`` (int32 or None) inside the
    cache's ``row_count`` rows."""
    seqlens = _cache_lengths(cache_seqlens, batch, slots, q.device).contiguous()
    leftpad = None if cache_leftpad is None else cache_leftpad.to(torch.int32).contiguous()
    columns = 0 if block_table is None else block_table.shape[1]
    buf = torch.empty((3 * batch + batch * columns,), dtype=torch.int32, device=q.device)
    out_seqlens, out_used, out_leftpad = buf[:batch], buf[batch:2 * batch], buf[2 * batch:3 * batch]
    out_table = buf[3 * batch:].view(batch, columns) if block_table is not None else None
    _ext.sanitize_cache(seqlens.data_ptr(), new, batch, slots, 0 if leftpad is None else leftpad.data_ptr(),
                        0 if block_table is None else block_table.data_ptr(), columns,
                        0 if block_table is None else block_table.stride(0), page, pool_pages,
                        0 if rows is None else rows.data_ptr(), row_count, out_seqlens.data_ptr(),
                        out_used.data_ptr(), out_leftpad.data_ptr(), 0 if out_table is None else out_table.data_ptr(),
                        _launch.stream(q), q.device.index)
    return seqlens, out_seqlens, out_used, None if leftpad is None else out_leftpad, out_table


def _append(k, v, k_cache, v_cache, seqlens, slots, raw_table, page, rows, q):
    """The new keys ``k`` and values ``v`` [batch, new, heads_kv, head_dim] into their caches in place
    at each sequence's length ``seqlens`` (the caller's: a sequence whose keys would not fit is
    skipped whole, sanitize_cache recorded it), one launch (_ext.append_cache): through the caller's
    block table (an entry outside the pool skipped, sanitize_cache recorded it), or into row b
    (``rows[b]`` with cache_batch_idx; a row outside the cache skipped and recorded) of a
    contiguous cache."""
    batch, new, heads, head_dim = k.shape
    _ext.append_cache(k.data_ptr(), k.stride(), k_cache.data_ptr(), k_cache.stride(), v.data_ptr(), v.stride(),
                      v_cache.data_ptr(), v_cache.stride(), batch, new, heads, head_dim, seqlens.data_ptr(), slots,
                      0 if raw_table is None else raw_table.data_ptr(),
                      0 if raw_table is None else raw_table.stride(0), page, k_cache.shape[0],
                      0 if rows is None else rows.data_ptr(), _launch.stream(q), q.device.index)


#: Signatures of serving calls (kv_signature) that passed the checked path, to what their next call
#: needs (_KvFast): a serving loop calls with the same few signatures every step, once per layer,
#: so that the next call runs the metadata checks, the append and the launch only.
KV_FAST = {}
_KV_FAST_MAX = 4096
# Emptied at exit, as _launch.FAST, before nanobind's own teardown: the prepared calls
# (_ext.PreparedCacheCall) still held here would be reported by nanobind as leaked instances (seen at
# the end of bench/pytorch/torch_overhead.py's run at 5a02820).
atexit.register(KV_FAST.clear)


def kv_signature(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, num_splits, learnable_sink, return_softmax_lse):
    """What the checks of a call depend on: each tensor's shape, strides, dtype and device (the
    metadata's values are checked on the device every call), an int cache_seqlens' value, and the
    arguments. None when an argument is not what a tensor or a number should be."""

    # Each tensor's part written out, not through a helper per tensor: a serving loop makes this
    # key once per layer per token.
    try:
        return ((q.shape, q.stride(), q.dtype, q.device),
                (k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device),
                (v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device),
                None if k is None else (k.shape, k.stride(), k.dtype, k.device),
                None if v is None else (v.shape, v.stride(), v.dtype, v.device),
                cache_seqlens if cache_seqlens is None or isinstance(cache_seqlens, int) else (
                    cache_seqlens.shape, cache_seqlens.stride(), cache_seqlens.dtype, cache_seqlens.device),
                None if cache_leftpad is None else _layout(cache_leftpad),
                None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype,
                                                  block_table.device),
                softmax_scale, bool(causal), tuple(window_size), float(softcap),
                None if alibi_slopes is None else _layout(alibi_slopes),
                num_splits if isinstance(num_splits, int) else None,
                None if learnable_sink is None else _layout(learnable_sink), bool(return_softmax_lse))
    except Exception:  # noqa: BLE001  not tensors or numbers: the checked path says why
        return None


def _layout(x):
    """kv_signature's part of a tensor it rarely gets (left padding, slopes, sinks)."""
    return x.shape, x.stride(), x.dtype, x.device


class _KvFast:
    """A checked call's plan for the next ones: the problem's key and Mods, the cache's slots, page
    (0: contiguous), pages and rows in the pool, and the new keys' count."""

    __slots__ = ("key", "mods", "slots", "page", "pool_pages", "pool_rows", "new", "prepared", "layout", "likes")

    def __init__(self, key, mods, slots, page, pool_pages, pool_rows, new):
        self.key, self.mods, self.slots, self.page = key, mods, slots, page
        self.pool_pages, self.pool_rows, self.new = pool_pages, pool_rows, new
        self.prepared = None  # _ext.PreparedCacheCall, False where it does not apply, None: not tried
        self.layout = None  # _kv_layout's offsets of the prepared call's one buffer
        self.likes = None  # empty fp32 and uint8 tensors on the device: new_empty with no dtype to parse


def _prepare_cache_call(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, alibi_slopes,
                        learnable_sink):
    """The signature's step as one binding call (_ext.PreparedCacheCall: the metadata check, the
    append and the rung's forward queued together), or False where its inputs are not already
    what the launches read: int32 contiguous lengths and left padding, a table with contiguous
    rows, fp32 contiguous slopes and sinks (the signature fixes each, so the answer holds for every
    call of it)."""
    def int32_rows(t):
        return t is None or (t.dtype == torch.int32 and t.stride(-1) == 1 and (t.dim() == 1 or t.is_contiguous()))

    if (not isinstance(cache_seqlens, torch.Tensor) or not int32_rows(cache_seqlens) or not int32_rows(cache_leftpad)
            or (block_table is not None and (block_table.dtype != torch.int32 or block_table.stride(1) != 1))):
        return False
    for t in (alibi_slopes, learnable_sink):
        if t is not None and (t.dtype != torch.float32 or not t.is_contiguous()):
            return False
    batch, _, _, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    plan = _core.plan_forward(None, "", f.key, q.device.index, False, f.mods)
    if f.page:
        kr, vr = k_cache.view(1, -1, heads_kv, head_dim), v_cache.view(1, -1, heads_kv, head_dim)
    else:
        kr, vr = k_cache, v_cache
    zero = (0, 0, 0, 0)
    append = (k.stride(), k_cache.stride(), v.stride(), v_cache.stride()) if k is not None else (zero,) * 4
    columns = block_table.shape[1] if block_table is not None else 0
    ints = (alibi_slopes.shape[-1] if alibi_slopes is not None and alibi_slopes.dim() == 2 else 0,
            columns if f.mods.page_size else 0, int(f.pool_rows or 0))
    cache = (batch, f.new, f.slots, f.page, k_cache.shape[0], columns, heads_kv, head_dim)
    dense = q.shape[1] * q.shape[2] * head_dim, q.shape[2] * head_dim, head_dim, 1
    try:
        return _ext.PreparedCacheCall(plan.number, plan.variant, plan.problem,
                                      (q.stride(), _launch._strides4(kr), _launch._strides4(vr), dense), ints, cache,
                                      append, q.device.index, plan.workspace_bytes)
    except ValueError:  # the checked path launches it the long way, and says why if it must
        return False


def _kv_prepared(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, alibi_slopes,
                 learnable_sink, return_softmax_lse, descales=(0, 0, 0)):
    """The step through f.prepared: out and the LSE allocated, one binding call; None when a pointer
    is misaligned (nothing launched: the caller takes the long way). ``descales``: an e4m3 cache's
    k_descale, v_descale and the scores' k descale, as pointers (_fp8's fast path)."""
    prep = f.prepared
    _launch.raise_metadata_errors(q.device.index)
    shape = q.shape
    out = q.new_empty(shape)
    # One allocation for what the call reads back only on the device (the int32 scratch, the
    # workspace and, unless returned, the LSE), each at a 256-byte offset: each allocation through
    # PyTorch's caching allocator costs microseconds of host time per call (_kv_layout).
    lse_bytes, scratch_at, ws_at, total = f.layout
    f32, u8 = f.likes
    if return_softmax_lse:
        lse = f32.new_empty((shape[0], shape[2], shape[1]))
        buf = u8.new_empty((total - lse_bytes,))
        base = buf.data_ptr() - lse_bytes
        lse_ptr = lse.data_ptr()
    else:
        buf = u8.new_empty((total,))
        base = lse_ptr = buf.data_ptr()
    ok = prep.launch(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), lse_ptr,
                     base + ws_at if prep.workspace_bytes else 0, cache_seqlens.data_ptr(),
                     0 if cache_leftpad is None else cache_leftpad.data_ptr(),
                     0 if block_table is None else block_table.data_ptr(),
                     0 if block_table is None else block_table.stride(0),
                     0 if k is None else k.data_ptr(), 0 if v is None else v.data_ptr(),
                     0 if learnable_sink is None else learnable_sink.data_ptr(),
                     0 if alibi_slopes is None else alibi_slopes.data_ptr(), base + scratch_at, _launch.stream(q),
                     *descales)
    del buf  # the allocator's stream order keeps it from reuse until the launches have run
    if not ok:
        return None
    return (out, lse) if return_softmax_lse else out


def _kv_layout(q, prep):
    """(LSE bytes, scratch offset, workspace offset, total bytes) of _kv_prepared's one buffer: the
    LSE (fp32 [batch, heads_q, seqlen_q]) first, then the int32 scratch, then the workspace, each
    at a multiple of 256 bytes (the LSE's bytes rounded too, so that a returned LSE, allocated on
    its own, leaves the others' offsets as they are)."""
    def up(n):
        return -(-n // 256) * 256

    lse_bytes = up(4 * q.shape[0] * q.shape[1] * q.shape[2])
    scratch_at = lse_bytes
    ws_at = scratch_at + up(4 * prep.scratch_ints)
    return lse_bytes, scratch_at, ws_at, ws_at + up(prep.workspace_bytes)


def _kv_fast(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, alibi_slopes, learnable_sink,
             return_softmax_lse):
    """A call whose signature passed the checked path: the metadata checked on the device (and the
    append), then the launch, as the checked path does them: through the signature's prepared
    call (_prepare_cache_call) where it applies, else launch by launch."""
    if f.prepared is None:
        f.prepared = _prepare_cache_call(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table,
                                         alibi_slopes, learnable_sink)
        if f.prepared:
            f.layout = _kv_layout(q, f.prepared)
            f.likes = (q.new_empty((0,), dtype=torch.float32), q.new_empty((0,), dtype=torch.uint8))
    if f.prepared:
        res = _kv_prepared(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, alibi_slopes,
                           learnable_sink, return_softmax_lse)
        if res is not None:
            return res
    batch, _, _, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    if block_table is not None and not block_table.is_contiguous():
        block_table = block_table.contiguous()
    _launch.raise_metadata_errors(q.device.index)
    raw_used, _, used_after, start, table = _sanitized_cache(cache_seqlens, f.new, batch, f.slots, cache_leftpad,
                                                             block_table, f.page, f.pool_pages, None, 0, q)
    if k is not None:
        _append(k, v, k_cache, v_cache, raw_used, f.slots, block_table, f.page, None, q)
    slopes = None if alibi_slopes is None else alibi_slopes.detach().float().contiguous()
    sinks = None if learnable_sink is None else learnable_sink.detach().float().contiguous()
    if f.page:
        kc, vc = k_cache.view(1, -1, heads_kv, head_dim), v_cache.view(1, -1, heads_kv, head_dim)
    else:
        kc, vc = k_cache, v_cache
    with torch.no_grad():
        out, lse, _ = _launch.forward(q, kc, vc, f.key, mods=f.mods,
                                      extras=(None, None, sinks, slopes, used_after, table, start, f.pool_rows))
    return (out, lse) if return_softmax_lse else out


def _padded_cache_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                       cache_leftpad, block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                       alibi_slopes, num_splits, return_softmax_lse, learnable_sink):
    """flash_attn_with_kvcache for a head_dim that is not a multiple of 8, as FlashAttention 2's
    mha_fwd_kvcache does it, or a v_cache with its own head_dim (_ops.padded_head_dim's rule): q,
    the caches and the new keys zero-padded to one multiple of 8 (copies: the whole cache each
    call), the call made on them with q's head_dim's own scale, O cut back to v's head_dim, and
    with new keys the padded caches' first columns copied back into the caller's (the append in
    place, as without padding). The rotary tables act on the first rotary_dim channels, never on
    the padding. None when there is nothing to pad."""
    shaped = all(hasattr(t, "shape") and len(t.shape) == 4 for t in (q, k_cache, v_cache))
    padded = _ops.padded_head_dim(q, k_cache, v_cache, softmax_scale) if shaped else None
    if padded is None or (k is not None and (not hasattr(k, "shape") or not hasattr(v, "shape")
                                             or k.shape[-1] != k_cache.shape[-1] or v.shape[-1] != v_cache.shape[-1])):
        return None  # nothing to pad, or the checks below say what is wrong
    qp, kc, vc, scale, dv = padded
    d, size = q.shape[-1], qp.shape[-1]
    F = torch.nn.functional
    kp, vp = (F.pad(k, (0, size - d)), F.pad(v, (0, size - dv))) if k is not None else (None, None)
    res = flash_attn_with_kvcache(qp, kc, vc, kp, vp, rotary_cos, rotary_sin, cache_seqlens,
                                  cache_batch_idx, cache_leftpad, block_table, scale, causal, window_size, softcap,
                                  rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse,
                                  learnable_sink=learnable_sink)
    if k is not None:  # the new keys were written into the padded copies: into the caller's caches too
        k_cache.copy_(kc[..., :d])
        v_cache.copy_(vc[..., :dv])
    return (res[0][..., :dv], res[1]) if return_softmax_lse else res[..., :dv]


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            learnable_sink=None, q_descale=None, k_descale=None, v_descale=None):
    """FlashAttention 2's flash_attn_with_kvcache (inference: no autograd).

    q [batch, seqlen_q, heads_q, head_dim]; k_cache and v_cache [batch, seqlen_cache, heads_kv,
    head_dim], or with ``block_table`` (int32 [batch, pages per sequence]) a page pool [pages,
    page_size, heads_kv, head_dim] (rung 08's paged cache; page_size a power of two). ``k`` and
    ``v`` [batch, seqlen_new, heads_kv, head_dim], when given, are written into the cache in place
    at each sequence's ``cache_seqlens`` (an int or int32 [batch], needed with k; None: the
    cache is full), and the queries then attend to cache_seqlens + seqlen_new keys, ``causal``
    bottom-right aligned to that end. ``num_splits``: the decode rung's split count (0: its heuristic; the result is the
    same up to the order of the sums). The route: a decode step or a few queries (seqlen_q <= 16) on rung 08 where it takes
    them and is no slower, else the prefill rung (rung 15; rung 16 for a window, softcap or ALiBi).
    With a ``block_table``, rung 08 reads the pages; a problem it does not take (a prefill into
    pages) runs on the prefill rung over a contiguous copy of the pages the batch uses.
    Returns out, or (out, softmax_lse [batch, heads_q, seqlen_q]) with ``return_softmax_lse``.

    ``cache_leftpad`` (int32 [batch]): each sequence's first slot, a left-padded cache (its keys
    are slots cache_leftpad .. cache_seqlens + seqlen_new - 1; the causal diagonal at the end).
    ``learnable_sink`` [heads_q]: sinks, as flash_attn_func's (no gradient here).

    ``rotary_cos`` and ``rotary_sin`` [seqlen_ro >= the cache's slots, rotary_dim / 2] in q's
    dtype, with ``k`` and ``v`` only: the new keys are rotated at slots cache_seqlens + i before
    they are written (the cache holds the rotated keys; v is not rotated), and q at cache_seqlens
    + i for query i when ``causal`` or a window, else every query at cache_seqlens. The positions
    are slot numbers: a ``cache_leftpad`` does not shift them (FlashAttention 2's kernel and its
    test). ``rotary_interleaved``: pairs (0, 1), (2, 3), ... (GPT-J), else (i, i + rotary_dim /
    2) (GPT-NeoX); the channels past rotary_dim pass through; rotary_dim a multiple of 16. In plain
    torch ops (_apply_rotary), fp32, rounded once to q's dtype.

    ``cache_batch_idx`` (int32 [batch]): sequence b reads and appends to row cache_batch_idx[b] of
    a contiguous cache [batch_cache, seqlen_cache, ...] (not with a ``block_table``). A contiguous
    cache is read in place as a page pool (_rows_as_pages); one that is not, or whose seqlen_cache
    has no power of two >= 16 as a divisor, has the batch's rows copied after the append.

    The metadata on the GPU (``cache_seqlens``, ``cache_leftpad``, ``block_table``,
    ``cache_batch_idx``) is checked there without a synchronization (metadata.h, one launch): the
    append and the rung read clamped copies, so no call reads or writes outside its tensors, a
    sequence whose new keys would not fit is not appended, and the violation is raised, naming the
    argument and its bound, by the next call that takes metadata or by flashladder.check_errors().
    An int ``cache_seqlens`` and the new keys' count are checked on the host, before anything runs.

    A float8_e4m3fn ``k_cache`` and ``v_cache`` with ``k_descale`` and ``v_descale`` (fp32 [batch,
    heads_kv], FlashAttention 3's), and a 16-bit q or an e4m3 one with ``q_descale``: rung 08's fp8-kv
    (_fp8.attention_kvcache_fp8; new 16-bit keys are quantized into the cache with its descales).
    Rotary, cache_batch_idx, windows, softcap, ALiBi and sinks are refused there in one line."""
    if q_descale is not None or k_descale is not None or v_descale is not None or _fp8.is_fp8_cache(k_cache):
        if not _fp8.is_fp8_cache(k_cache):
            raise ValueError("flashladder: q_descale, k_descale and v_descale go with a float8_e4m3fn cache; k_cache "
                             "is %s" % getattr(k_cache, "dtype", type(k_cache).__name__))
        _fp8.check_fp8_cache_args(rotary_cos, rotary_sin, cache_batch_idx, window_size, softcap, alibi_slopes,
                                  learnable_sink)
        return _fp8.attention_kvcache_fp8(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table,
                                          softmax_scale, causal, num_splits, return_softmax_lse, q_descale, k_descale,
                                          v_descale)
    sig = None
    if rotary_cos is None and rotary_sin is None and cache_batch_idx is None and not torch.compiler.is_compiling():
        # A signature that passed the checked path before (never a padded one: the padded call
        # signs its padded copies) takes the fast path first.
        sig = kv_signature(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale,
                           causal, window_size, softcap, alibi_slopes, num_splits, learnable_sink, return_softmax_lse)
        fast = KV_FAST.get(sig) if sig is not None else None
        if fast is not None:
            return _kv_fast(fast, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table,
                            alibi_slopes, learnable_sink, return_softmax_lse)
    if (k is None) != (v is None):
        raise ValueError("flashladder: k and v come together (the new keys and values)")
    padded = _padded_cache_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table, softmax_scale, causal, window_size, softcap,
                                rotary_interleaved, alibi_slopes, num_splits, return_softmax_lse, learnable_sink)
    if padded is not None:
        return padded
    if k is not None and cache_seqlens is None:
        raise ValueError("flashladder: k and v are appended at cache_seqlens: pass it (FlashAttention 2 refuses new "
                         "keys without it)")
    if q.dim() != 4 or k_cache.dim() != 4 or tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError("flashladder: q [batch, seqlen_q, heads, head_dim], k_cache and v_cache of one 4-D shape")
    left, right = _core.check_window(window_size, causal)
    batch, seqlen_q, heads_q, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    copy_rows = None  # cache_batch_idx's rows when they are copied for the attention
    batch_rows, cache_rows = None, k_cache.shape[0]  # cache_batch_idx (int32) and the cache's rows, checked
    if cache_batch_idx is not None:
        if block_table is not None:
            raise ValueError("flashladder: cache_batch_idx picks rows of a contiguous cache; with a block_table the "
                             "table maps each sequence to its pages (FlashAttention 2 refuses the pair too)")
        if (str(cache_batch_idx.dtype) != "torch.int32" or tuple(cache_batch_idx.shape) != (batch,)
                or cache_batch_idx.device != q.device):
            raise ValueError("flashladder: cache_batch_idx must be int32 [batch] = (%d,) on %s, got %s %s on %s"
                             % (batch, q.device, cache_batch_idx.dtype, tuple(cache_batch_idx.shape),
                                cache_batch_idx.device))
        batch_rows = cache_batch_idx.contiguous()
        pool = _rows_as_pages(k_cache, v_cache, cache_batch_idx)
        if pool is not None:
            # The rows as pages: the paged route below reads them in place (rung 08), or copies
            # the pages the batch uses for the prefill rung, and the append goes through the table.
            k_cache, v_cache, block_table = pool
        else:
            copy_rows = cache_batch_idx.long()
    paged = block_table is not None
    raw_table = None
    if paged:
        page = k_cache.shape[1]
        if (str(block_table.dtype) != "torch.int32" or block_table.dim() != 2 or block_table.shape[0] != batch
                or block_table.device != q.device):
            raise ValueError("flashladder: block_table must be int32 [batch, pages per sequence] on q's device")
        if not block_table.is_contiguous():
            # Rung 08 reads row b of the table at b x its width (AttnParams::block_table_stride):
            # a view with other strides (a slice of a wider table's columns) is copied, never misread.
            block_table = block_table.contiguous()
        raw_table = block_table
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            raise ValueError("flashladder: a paged cache's pools must be contiguous [pages, page_size, heads, head_dim]")
        slots = block_table.shape[1] * page
    else:
        if copy_rows is None and k_cache.shape[0] != batch:
            raise ValueError("flashladder: k_cache's batch (%d) must be q's (%d)" % (k_cache.shape[0], batch))
        slots = k_cache.shape[1]
    _check_rotary(rotary_cos, rotary_sin, q, k, slots)
    # torch_ops: under torch.compile (traced) and off CUDA (the package's CPU tests, whose launch
    # is a reference), the lengths are read and the append written by torch ops, unchecked.
    torch_ops = torch.compiler.is_compiling() or q.device.type != "cuda"
    new = 0
    if k is not None:
        new = k.shape[1]
        if tuple(k.shape) != (batch, new, heads_kv, head_dim) or tuple(v.shape) != tuple(k.shape):
            raise ValueError("flashladder: k and v must be [batch, seqlen_new, heads_kv, head_dim] = (%d, n, %d, %d), "
                             "got %s and %s" % (batch, heads_kv, head_dim, tuple(k.shape), tuple(v.shape)))
        if k.dtype != k_cache.dtype or v.dtype != v_cache.dtype or k.device != q.device or v.device != q.device:
            raise ValueError("flashladder: k and v must have the cache's dtype and q's device")
        if not torch_ops and k_cache.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError("flashladder: the cache must be fp16 or bf16, got %s" % k_cache.dtype)
    def room():
        if paged:
            return "the block_table's capacity of %d slots (%d columns x %d per page)" % (
                slots, block_table.shape[1], page)
        return "the cache's %d slots" % slots

    if new > slots:
        raise _core.MetadataError("flashladder: %d new keys do not fit %s" % (new, room()))
    if isinstance(cache_seqlens, int) and not 0 <= cache_seqlens <= slots - new:
        raise _core.MetadataError("flashladder: cache_seqlens (%d) plus the new keys (%d) must fit %s"
                                  % (cache_seqlens, new, room()))
    if cache_leftpad is not None and (tuple(cache_leftpad.shape) != (batch,) or cache_leftpad.device != q.device):
        raise ValueError("flashladder: cache_leftpad must be int32 [batch] = (%d,) on %s" % (batch, q.device))
    if copy_rows is not None and k_cache.shape[0] < 1:
        raise ValueError("flashladder: cache_batch_idx picks rows of an empty cache")
    if torch_ops:
        used = _cache_lengths(cache_seqlens, batch, slots, q.device)
        start = None if cache_leftpad is None else cache_leftpad.to(torch.int32)
    else:
        # The lengths, the left padding and the table checked on the device and clamped (one
        # launch, no synchronization; metadata.h): the append and the rung read the clamped copies,
        # a violation is raised by the next call (raise_metadata_errors).
        _launch.raise_metadata_errors(q.device.index)
        raw_used, used, used_after, start, block_table = _sanitized_cache(
            cache_seqlens, new, batch, slots, cache_leftpad, block_table, page if paged else 0,
            k_cache.shape[0] if paged else 0, batch_rows, cache_rows, q)
    if k is not None:
        # In place, at each sequence's end (FlashAttention's append).
        if rotary_cos is not None or torch_ops:
            pos = used.long()[:, None] + torch.arange(new, device=q.device)[None, :]
        if rotary_cos is not None:
            # Before the append (the cache holds rotated keys) and before the torch.compile
            # branch below, so that both paths attend with the rotated q. Positions are slots:
            # FlashAttention 2's kernel subtracts cache_leftpad from the length and adds it back
            # to the cos/sin row, and its test rotates at seqlen_offsets=cache_seqlens.
            k = _apply_rotary(k, rotary_cos, rotary_sin, pos, rotary_interleaved)
            # q: one position per query where a mask makes the order matter (causal, or a window
            # side shorter than the cache: FlashAttention 2's Is_causal || Is_local), else all at
            # cache_seqlens.
            per_query = causal or 0 <= left < slots or 0 <= right < slots
            steps = torch.arange(seqlen_q, device=q.device) if per_query else q.new_zeros(seqlen_q, dtype=torch.long)
            q = _apply_rotary(q, rotary_cos, rotary_sin, used.long()[:, None] + steps[None, :], rotary_interleaved)
        if torch_ops:
            # Traced as torch ops (the lengths and the table are not checked under torch.compile:
            # docs/pytorch.md, "What is left").
            if paged:
                pages = torch.gather(block_table.long(), 1, torch.div(pos, page, rounding_mode="floor"))
                k_cache[pages, pos % page] = k
                v_cache[pages, pos % page] = v
            else:
                rows = (torch.arange(batch, device=q.device) if copy_rows is None else copy_rows)[:, None]
                k_cache[rows, pos] = k
                v_cache[rows, pos] = v
            used = used + new
        else:
            rows32 = None if copy_rows is None else batch_rows  # int32, as the kernel reads it
            _append(k, v, k_cache, v_cache, raw_used, slots, raw_table, page if paged else 0, rows32, q)
    if not torch_ops:
        used = used_after
    if copy_rows is not None:
        # A cache that is not one contiguous pool, or rows without a page of 16 or more: the
        # batch's rows, copied after the append, are the contiguous cache the rungs read (a row
        # outside the cache, recorded by the append, clamped so that the copy stays inside it).
        rows = copy_rows if torch_ops else copy_rows.clamp(0, k_cache.shape[0] - 1)
        k_cache, v_cache = k_cache[rows], v_cache[rows]
    if torch.compiler.is_compiling():
        # torch.compile: the append above is traced; the attention is one opaque op whose body
        # (this function again, eager) runs the checks and the launch, so a compiled decode step
        # stays one graph (its CUDA graph replayed) instead of breaking at every layer.
        out, lse = attention_kvcache_op(q, k_cache, v_cache, used, block_table, cache_leftpad, learnable_sink,
                                        alibi_slopes, _core.check_scale(softmax_scale),
                                        bool(causal), int(window_size[0]), int(window_size[1]), float(softcap),
                                        num_splits)
        return (out, lse) if return_softmax_lse else out
    alibi = _core.check_slopes(alibi_slopes, q, batch)
    slopes = None if alibi_slopes is None else alibi_slopes.detach().float().contiguous()
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError("flashladder: num_splits must be an int >= 0 (0: the decode rung's heuristic)")
    sinks = None
    if learnable_sink is not None:
        _core.check_sinks(learnable_sink, q)
        sinks = learnable_sink.detach().float().contiguous()
    mods = _core.Mods(left, right, float(softcap), alibi, sinks is not None, None, True, page if paged else 0,
                      num_splits, start is not None)
    scale = None if softmax_scale is None else float(softmax_scale)
    if paged:
        # The checks of q against a [batch, slots] cache; the pools are read through the table.
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            if t.dtype != q.dtype or t.device != q.device or t.shape[3] != head_dim:
                raise ValueError("flashladder: %s must have q's dtype, device and head_dim" % name)
        _core.check_layout_of("q", q)
        # check_qkv's shape checks against a stand-in of the cache's [batch, slots, heads_kv,
        # head_dim] shape (a broadcast view of q: nothing is allocated or read).
        shape = q[:, :1, :1].expand(batch, slots, heads_kv, head_dim)
        key = _core.check_qkv(q, shape, shape, causal, scale, tensor_type=torch.Tensor, check_layout=False)
        kc, vc = k_cache.view(1, -1, heads_kv, head_dim), v_cache.view(1, -1, heads_kv, head_dim)
        pool_rows = k_cache.shape[0] * k_cache.shape[1]
        if not _pages_routable(key, mods, q):
            # No rung reads this problem through pages (rung 08 takes a decode step and a few
            # queries): the prefill rungs run on a contiguous copy of the pages the batch uses.
            kc, vc = _gather_pages(k_cache, v_cache, block_table, used, page)
            mods = dataclasses.replace(mods, page_size=0)
            key = _core.check_qkv_cached(q, kc, vc, causal, scale, tensor_type=torch.Tensor)
            block_table, pool_rows = None, 0
    else:
        key = _core.check_qkv_cached(q, k_cache, v_cache, causal, scale, tensor_type=torch.Tensor)
        kc, vc, pool_rows = k_cache, v_cache, 0
    with torch.no_grad():
        out, lse, _ = _launch.forward(q, kc, vc, key, mods=mods,
                                      extras=(None, None, sinks, slopes, used, block_table, start, pool_rows))
    if sig is not None and not torch_ops and (not paged or mods.page_size):
        # Checked and launched: the signature's next call takes the fast path (not a paged
        # prefill, whose pages are gathered with a read of the lengths on the host).
        if len(KV_FAST) >= _KV_FAST_MAX:
            KV_FAST.clear()
        KV_FAST[sig] = _KvFast(key, mods, slots, page if paged else 0, k_cache.shape[0] if paged else 0, pool_rows,
                               new)
    return (out, lse) if return_softmax_lse else out
