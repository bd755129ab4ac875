"""DeepSeek's FlashMLA interface on rung 17 (MLA decode on the compressed cache; inference, no
autograd): ``flash_mla_with_kvcache`` and ``get_mla_metadata`` with FlashMLA's signatures, so a
call site written for FlashMLA runs after one import changes.

    from flashladder import get_mla_metadata, flash_mla_with_kvcache
    tile_scheduler_metadata, num_splits = get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)
    out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512,
                                      tile_scheduler_metadata, num_splits, causal=True)

The latent cache holds one 576-dim row per token (512 latent dims + 64 RoPE dims), shared by every
query head (heads_k = 1); the values are each row's first 512 columns, the same memory. The call
hands rung 17 the cache as K and its view ``k_cache[..., :512]`` as V (``Problem::v_in_k``: the
extension checks that V is that view), so the cache is read once, as the rung reads it.

The argument checks are _core's (check_mla), the metadata's on the device _kvcache's
(_sanitized_cache: cache_seqlens past the slots and block_table entries outside the pool are
clamped and reported, never read out of bounds), the launch _launch's; the route to rung 17 is
_core.route_forward's (route_mla: a one-line refusal where rung 17 is not built or the GPU is not
sm_90).
"""

import dataclasses
from typing import Optional

import torch

from . import _core, _kvcache, _launch


@dataclasses.dataclass(frozen=True)
class MlaMetadata:
    """What get_mla_metadata returns in place of FlashMLA's tile-scheduler metadata: the arguments it
    was given (None where not given), which flash_mla_with_kvcache checks against its own call.
    Rung 17 plans its split on the host from the call's shape (mla_plan.h: make_mla_plan, rung 08's
    split heuristic over the SMs), so there is no per-SM schedule to compute ahead; FlashMLA's
    metadata (its scheduler's partition of each sequence's blocks over the SMs) has no counterpart."""

    batch: Optional[int] = None
    num_heads_per_head_k: Optional[int] = None
    num_heads_k: Optional[int] = None


def get_mla_metadata(cache_seqlens=None, num_heads_per_head_k=None, num_heads_k=None):
    """FlashMLA's get_mla_metadata: returns (tile_scheduler_metadata, num_splits) to pass to
    flash_mla_with_kvcache, here (MlaMetadata, None): a record of the arguments, which each call
    checks (num_heads_per_head_k = seqlen_q x heads_q / heads_k, num_heads_k = 1, cache_seqlens'
    batch), and None for num_splits (rung 17's heuristic). Both FlashMLA's forms run: the original
    (cache_seqlens int32 [batch], num_heads_per_head_k, num_heads_k) and the later one without
    arguments. Nothing is launched and nothing is read from the device."""
    batch = None
    if cache_seqlens is not None:
        shape = tuple(getattr(cache_seqlens, "shape", ()))
        if str(getattr(cache_seqlens, "dtype", None)) != "torch.int32" or len(shape) != 1:
            raise ValueError("flashladder: get_mla_metadata: cache_seqlens must be int32 [batch], got %s %s"
                             % (getattr(cache_seqlens, "dtype", type(cache_seqlens).__name__), shape))
        batch = shape[0]
    for name, n in (("num_heads_per_head_k", num_heads_per_head_k), ("num_heads_k", num_heads_k)):
        if n is not None and (not _core._is_int(n) or n < 1):
            raise ValueError("flashladder: get_mla_metadata: %s must be an int >= 1, got %r" % (name, n))
    return MlaMetadata(batch, num_heads_per_head_k, num_heads_k), None


def _check_schedule(tile_scheduler_metadata, q, heads_k):
    """FlashMLA's tile_scheduler_metadata: None, or get_mla_metadata's record, which must describe
    this call (q [batch, seqlen_q, heads_q, ...] against a cache of ``heads_k`` heads)."""
    if tile_scheduler_metadata is None:
        return
    if not isinstance(tile_scheduler_metadata, MlaMetadata):
        raise TypeError("flashladder: tile_scheduler_metadata must be None or flashladder.get_mla_metadata()'s "
                        "(rung %d plans its own split), got %s"
                        % (_core.MLA_RUNG, type(tile_scheduler_metadata).__name__))
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    m = tile_scheduler_metadata
    for name, given, want in (("cache_seqlens' batch", m.batch, batch),
                              ("num_heads_per_head_k", m.num_heads_per_head_k, seqlen_q * heads_q // heads_k),
                              ("num_heads_k", m.num_heads_k, heads_k)):
        if given is not None and given != want:
            raise ValueError("flashladder: tile_scheduler_metadata was made for %s %d, this call has %d "
                             "(get_mla_metadata(cache_seqlens, seqlen_q x heads_q // heads_k, heads_k))"
                             % (name, given, want))


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata=None,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None):
    """FlashMLA's flash_mla_with_kvcache on rung 17: MLA decode on the latent cache.

    q [batch, seqlen_q, heads_q, 576], fp16 or bf16; ``k_cache`` the latent cache, [pages,
    page_size, 1, 576] read through ``block_table`` (int32 [batch, pages per sequence]; page_size a
    power of two, a multiple of 64, FlashMLA's 64 included), or with ``block_table`` None a
    contiguous [batch, seqlen_k, 1, 576]; ``cache_seqlens`` int32 [batch] on q's device, each
    sequence's keys; ``head_dim_v`` 512: the values are the cache rows' first 512 columns.
    ``softmax_scale`` None: 1/sqrt(576); ``causal`` bottom-right aligned (query i of a sequence of
    L keys sees keys 0 .. L - seqlen_q + i), which matters for seqlen_q > 1 (speculative decoding).

    ``tile_scheduler_metadata`` and ``num_splits``, FlashMLA's scheduling arguments, are taken so
    that its call sites run unchanged: None, or what get_mla_metadata returns (checked against the
    call, then not needed: rung 17 plans its split from the shape on the host). ``num_splits`` may
    also be an int, rung 17's split count (0: its heuristic). Later FlashMLA arguments
    (``is_fp8_kvcache``, ``indices``, ``attn_sink``, ``extra_k_cache``, ``extra_indices_in_kvcache``,
    ``topk_length``, ``extra_topk_length``: FP8 and sparse attention) raise NotImplementedError
    naming them when given.

    Returns (out [batch, seqlen_q, heads_q, 512] in q's dtype, softmax_lse [batch, heads_q, seqlen_q]
    float32, natural log; a row that sees no key: O = 0, LSE = -inf). The metadata is checked on the
    device without a synchronization (_kvcache._sanitized_cache): a length past the slots or a table
    entry outside the pool is clamped for the launch and raised by the next call that takes
    metadata, or by flashladder.check_errors(). Runs on sm_90 only (rung 17); a one-line
    ValueError elsewhere, or where the build has no rung 17."""
    for name, given in (("is_fp8_kvcache", bool(is_fp8_kvcache)), ("indices", indices is not None),
                        ("attn_sink", attn_sink is not None), ("extra_k_cache", extra_k_cache is not None),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache is not None),
                        ("topk_length", topk_length is not None),
                        ("extra_topk_length", extra_topk_length is not None)):
        _core.check_not_implemented("flash_mla_with_kvcache's %s (FlashMLA's FP8 or sparse attention)" % name, given)
    # num_splits None: FlashMLA's (get_mla_metadata's second value, or later FlashMLA's placeholder).
    args = (block_table, cache_seqlens, head_dim_v, causal, softmax_scale, 0 if num_splits is None else num_splits)
    try:
        key, mods, page, pool_pages = _core.check_mla(q, k_cache, *args, tensor_type=torch.Tensor)
    except _core.LayoutError:  # q's strides or alignment: a copy of q reads (the cache is never copied)
        q = _core.realigned(q)
        key, mods, page, pool_pages = _core.check_mla(q, k_cache, *args, tensor_type=torch.Tensor)
    _check_schedule(tile_scheduler_metadata, q, key[4])
    if block_table is not None and not block_table.is_contiguous():
        # Rung 17 reads row b of the table at b x its width (AttnParams::block_table_stride): a view
        # with other strides (a slice of a wider table's columns) is copied, never misread.
        block_table = block_table.contiguous()
    batch, slots = key[0], key[2]
    # cache_seqlens and the table checked on the device and clamped (one launch, no synchronization;
    # metadata.h); a violation an earlier call recorded is raised first.
    _launch.raise_metadata_errors(q.device.index)
    _, _, used, _, table = _kvcache._sanitized_cache(cache_seqlens, 0, batch, slots, None, block_table, page,
                                                     pool_pages, None, 0, q)
    d = key[5]
    if page:
        kc, pool_rows = k_cache.view(1, pool_pages * page, 1, d), pool_pages * page  # the pool as rows
    else:
        kc, pool_rows = k_cache, 0
    vc = kc[..., :head_dim_v]  # V: a view of the cache's first 512 columns (Problem::v_in_k)
    with torch.no_grad():
        out, lse, _ = _launch.forward(q, kc, vc, key, mods=mods,
                                      extras=(None, None, None, None, used, table, None, pool_rows))
    return out, lse
