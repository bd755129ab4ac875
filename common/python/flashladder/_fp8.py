"""FP8 attention from PyTorch: rung 13's forward (e4m3 wgmma, FlashAttention 3's FP8 recipe) on
``torch.float8_e4m3fn`` tensors, with FlashAttention 3's descale arguments.

    from flashladder import flash_attn_func, fp8_quantize
    q8, q_descale = fp8_quantize(q, num_heads_kv=k.shape[2], hadamard=True)
    k8, k_descale = fp8_quantize(k, hadamard=True)            # the same rotation as q's: Q K^T unchanged
    v8, v_descale = fp8_quantize(v)                           # never rotated
    out = flash_attn_func(q8, k8, v8, causal=True, q_descale=q_descale, k_descale=k_descale,
                          v_descale=v_descale)                # bf16 [batch, seqlen_q, heads_q, head_dim]

What a call computes: attention of Q = q8 x q_descale, K = k8 x k_descale, V = v8 x v_descale,
each descale fp32 [batch, heads_kv] (one value per batch and KV head; q's shared by the heads of
one KV head's group), as FlashAttention 3 defines them; a descale left out is 1. O is bf16 (as
FlashAttention 3 returns it), the LSE fp32 [batch, heads_q, seqlen_q].

The V transpose rung 13 needs (the FP8 wgmma reads both operands K-major, so V^T: [batch, heads_kv,
head_dim, seqlen_k rounded up to 16], its keys in the order P's registers hold them, fp8.h
vt_key_at) is done here, one kernel per call (_ext.fp8_transpose_v: V's bytes read and written
once, 16 bytes per access, against the attention's seqlen_q / 128 reads of V). Rung 13 runs dense batches with causal
(bottom-right) or no mask, GQA, head_dim 64, 128 or 256 on sm_90; anything else is refused in one
line naming the argument: windows, softcap, ALiBi, sinks, dropout, packed batches, and the
backward (FP8 has none here: nothing that requires grad is taken).
"""

import atexit

import torch

from . import _core, _ext, _launch

#: The FP8 format rung 13 reads: e4m3 (4 exponent bits, 3 mantissa bits, finite, max 448).
E4M3 = torch.float8_e4m3fn
#: The rung and variant an FP8 call runs.
FP8_RUNG = (13, "")
#: head_dims the FP8 path takes: rung 13's tiles (64-byte rows or whole 128-byte column blocks) and
#: the quantize kernels' warp per row.
FP8_HEAD_DIMS = (64, 128, 256)
#: O's dtype for e4m3 inputs (FlashAttention 3's).
OUT_DTYPE = torch.bfloat16
#: The Hadamard rotation's signs unless a seed is given: q and k must share them.
HADAMARD_SEED = 0x5eed


def _shape4(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError("flashladder: %s must be a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.dim() != 4:
        raise ValueError("flashladder: %s must be [batch, seqlen, heads, head_dim], got shape %s"
                         % (name, tuple(t.shape)))
    if t.device.type != "cuda":
        raise ValueError("flashladder: %s is on %s; the FP8 path runs on a CUDA device" % (name, t.device))


def fp8_quantize(x, num_heads_kv=None, hadamard=False, hadamard_seed=HADAMARD_SEED):
    """Quantizes x (fp16 or bf16 [batch, seqlen, heads, head_dim] on a CUDA device, head_dim 64, 128
    or 256) to e4m3 for the FP8 path, on the device: returns ``(x8, descale)``, x8 float8_e4m3fn of
    x's shape (contiguous) and descale fp32 [batch, num_heads_kv] with x ~ x8 x descale[b, h //
    (heads / num_heads_kv)]. Each descale is amax / 448 over its slice (1 where the slice is all
    zero), so no value saturates. ``num_heads_kv`` (default: x's heads) groups the heads as
    FlashAttention 3's q_descale does: pass k's heads for q under GQA.

    ``hadamard=True`` rotates each row by D H / sqrt(head_dim) first (D random signs from
    ``hadamard_seed``, H the Walsh-Hadamard matrix): an outlier's energy spreads over the row, so
    the row's small values keep more bits (rung 13's README measures it). Rotate q and k with the
    same seed (Q K^T is unchanged, the rotation being orthogonal), never v (O would come out
    rotated). Asynchronous on the current stream."""
    _shape4("x", x)
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("flashladder: fp8_quantize: x must be fp16 or bf16, got %s" % (x.dtype,))
    b, s, h, d = x.shape
    if d not in FP8_HEAD_DIMS:
        raise ValueError("flashladder: fp8_quantize: head_dim must be 64, 128 or 256, got %d" % d)
    hkv = h if num_heads_kv is None else num_heads_kv
    if not _core._is_int(hkv) or hkv < 1 or h % hkv != 0:
        raise ValueError("flashladder: fp8_quantize: num_heads_kv must divide x's %d heads, got %r" % (h, num_heads_kv))
    if x.stride(3) != 1:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=E4M3, device=x.device)
    if out.numel() == 0:  # nothing to scale: descale 1, as for an all-zero slice
        return out, torch.ones((b, hkv), dtype=torch.float32, device=x.device)
    scratch = torch.empty((2, b, hkv), dtype=torch.float32, device=x.device)
    _ext.fp8_quantize(x.data_ptr(), _core.DTYPES[str(x.dtype)], [b, s, h, d], [x.stride(0), x.stride(1), x.stride(2)],
                      int(hkv), bool(hadamard), int(hadamard_seed) & (2 ** 64 - 1), out.data_ptr(),
                      scratch[0].data_ptr(), scratch[1].data_ptr(), _launch.stream(x), x.device.index)
    return out, scratch[1]


def is_fp8(q):
    """True where q is an e4m3 tensor (flash_attn_func's FP8 path)."""
    return isinstance(q, torch.Tensor) and q.dtype == E4M3


def _descale(name, t, batch, heads_kv, device):
    if t is None:
        return torch.ones((batch, heads_kv), dtype=torch.float32, device=device)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise TypeError("flashladder: %s must be a float32 tensor [batch, heads_kv], got %s"
                        % (name, getattr(t, "dtype", type(t).__name__)))
    if tuple(t.shape) != (batch, heads_kv):
        raise ValueError("flashladder: %s must be [batch, heads_kv] = [%d, %d] (FlashAttention 3's layout), got %s"
                         % (name, batch, heads_kv, tuple(t.shape)))
    if t.device != device:
        raise ValueError("flashladder: %s is on %s but q is on %s" % (name, t.device, device))
    return t.contiguous()


def check_fp8_args(dropout_p, window_size, softcap, alibi_slopes, learnable_sink, deterministic):
    """The arguments an FP8 call does not take, each refused in one line naming it."""
    for name, given in (("dropout_p", dropout_p not in (0, 0.0)), ("window_size", tuple(window_size) != (-1, -1)),
                        ("softcap", softcap not in (0, 0.0)), ("alibi_slopes", alibi_slopes is not None),
                        ("learnable_sink", learnable_sink is not None)):
        if given:
            raise NotImplementedError("flashladder: %s with float8_e4m3fn inputs: rung 13 (the FP8 forward) runs "
                                      "causal or unmasked attention only" % name)
    del deterministic  # the forward is deterministic: nothing to refuse


#: The FP8 calls' signatures that passed the checked path (_fp8_checked): signature -> _Fp8Plan. A call
#: with a known signature runs only its allocations and its two launches (as _launch.FAST does for the
#: 16-bit call); bounded like _core's caches.
FP8_FAST = {}
FP8_FAST_MAX = 1024


class _Fp8Plan:
    """What a signature's calls share: the Problem (checked by rung 13's supports once), V^T's shape,
    and the descale of 1 that an argument left out stands for."""

    __slots__ = ("problem", "vt_shape", "ones")

    def __init__(self, problem, vt_shape, ones):
        self.problem, self.vt_shape, self.ones = problem, vt_shape, ones


def _signature(q, k, v, causal, softmax_scale, descales):
    """Everything the checked path reads of a call, or None when an argument is not a tensor. The
    data pointers enter only as their 16-byte alignment (a copy is made where they are not)."""
    try:
        return (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
                k.device, v.device, (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16 == 0,
                torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad), bool(causal),
                softmax_scale, tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in descales))
    except AttributeError:
        return None


def attention_fp8(q, k, v, q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                  return_lse=False):
    """Rung 13 on e4m3 q [batch, seqlen_q, heads_q, d], k and v [batch, seqlen_k, heads_kv, d] with
    their descales (module docstring). Returns O (bf16), or (O, LSE) with ``return_lse``. A call whose
    signature passed the checks before runs without them (FP8_FAST)."""
    descales = (q_descale, k_descale, v_descale)
    sig = _signature(q, k, v, causal, softmax_scale, descales)
    plan = FP8_FAST.get(sig) if sig is not None else None
    if plan is None:
        return _fp8_checked(q, k, v, descales, softmax_scale, causal, return_lse, sig)
    b, sq, hq, d = q.shape
    dev = q.device
    out = torch.empty((b, sq, hq, d), dtype=OUT_DTYPE, device=dev)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=dev)
    vt = torch.empty(plan.vt_shape, dtype=E4M3, device=dev)
    _launch_fp8(plan, q, k, v, [plan.ones if t is None else t for t in descales], vt, out, lse, True)
    return (out, lse) if return_lse else out


def _launch_fp8(plan, q, k, v, descales, vt, out, lse, planned):
    """V's transpose into @p vt, then rung 13, on q's current stream."""
    st = _launch.stream(q)
    index = q.device.index
    b, sk, hkv, d = v.shape
    _ext.fp8_transpose_v(v.data_ptr(), [b, sk, hkv, d], [v.stride(0), v.stride(1), v.stride(2)], vt.data_ptr(), st,
                         index)
    _ext.fp8_forward(FP8_RUNG[0], FP8_RUNG[1], plan.problem,
                     [q.data_ptr(), k.data_ptr(), vt.data_ptr(), out.data_ptr(), lse.data_ptr()],
                     [t.data_ptr() for t in descales], [q.stride(0), q.stride(1), q.stride(2)],
                     [k.stride(0), k.stride(1), k.stride(2)], st, index, planned)


def _fp8_checked(q, k, v, descales, softmax_scale, causal, return_lse, sig):
    """attention_fp8 with every check; a signature that passes them, with nothing to copy, is kept
    in FP8_FAST."""
    q_descale, k_descale, v_descale = descales
    named = (("q", q), ("k", k), ("v", v))
    for name, t in named:
        _shape4(name, t)
        if t.dtype != E4M3:
            raise TypeError("flashladder: %s is %s; an FP8 call takes q, k and v all float8_e4m3fn" % (name, t.dtype))
        if t.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError("flashladder: %s requires grad: the FP8 path is a forward (there is no "
                                      "FP8 backward yet)" % name)
    _core._check_one_device(named)
    _core._check_kv_shape(q, k, v)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    if d not in FP8_HEAD_DIMS:
        raise ValueError("flashladder: head_dim must be 64, 128 or 256 for float8_e4m3fn inputs (rung 13), got %d" % d)
    if hq % hkv != 0:
        raise ValueError("flashladder: heads_q (%d) must be a multiple of heads_kv (%d)" % (hq, hkv))
    scale = _core.check_scale(softmax_scale)
    dev = q.device
    given = [_descale(n, t, b, hkv, dev) for n, t in
             (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))]
    problem = _ext.Problem(b, sq, sk, hq, hkv, d, _core.DTYPES[str(OUT_DTYPE)], bool(causal), scale)
    why = _ext.fp8_supports(FP8_RUNG[0], FP8_RUNG[1], problem, dev.index)
    if why:  # an empty batch or no keys included (the problem's own contract, as every rung's)
        raise ValueError("flashladder: no FP8 rung runs %s on this GPU: rung 13: %s" % (problem.describe(), why))
    # Rung 13's TMA (q, k) and V's transpose read rows as they are: a contiguous head_dim and 16-byte
    # aligned strides and start; anything else is copied to a layout that has them.
    readable = [t.stride(3) == 1 and all(x % 16 == 0 for x in t.stride()[:3]) and t.data_ptr() % 16 == 0
                for t in (q, k, v)]
    q, k, v = (t if ok else t.clone(memory_format=torch.contiguous_format) for t, ok in zip((q, k, v), readable))
    plan = _Fp8Plan(problem, (b, hkv, d, _ext.fp8_vt_seqlen(sk)),
                    torch.ones((b, hkv), dtype=torch.float32, device=dev))
    out = torch.empty((b, sq, hq, d), dtype=OUT_DTYPE, device=dev)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=dev)
    vt = torch.empty(plan.vt_shape, dtype=E4M3, device=dev)
    _launch_fp8(plan, q, k, v, given, vt, out, lse, False)
    contiguous = all(t is None or t.is_contiguous() for t in descales)
    if sig is not None and all(readable) and contiguous and not torch.compiler.is_compiling():
        if len(FP8_FAST) >= FP8_FAST_MAX:
            FP8_FAST.clear()
        FP8_FAST[sig] = plan
    return (out, lse) if return_lse else out


# ---- an e4m3 KV cache (flash_attn_with_kvcache on float8_e4m3fn caches): rung 08's fp8-kv ---------

#: The entry a step on an e4m3 cache runs: rung 08's fp8-kv, a 16-bit q against e4m3 K and V with a
#: descale per (batch, KV head), decode steps of up to 16 query rows per KV head's tile.
FP8_KV_RUNG = (8, "fp8-kv")
#: head_dims rung 08 is built for.
FP8_KV_HEAD_DIMS = (64, 128)


def is_fp8_cache(k_cache):
    """True where flash_attn_with_kvcache's cache is e4m3 (the FP8 cache path)."""
    return isinstance(k_cache, torch.Tensor) and k_cache.dtype == E4M3


def check_fp8_cache_args(rotary_cos, rotary_sin, cache_batch_idx, window_size, softcap, alibi_slopes, learnable_sink):
    """The arguments a step on an e4m3 cache does not take, each refused in one line naming it."""
    for name, given in (("rotary_cos", rotary_cos is not None), ("rotary_sin", rotary_sin is not None),
                        ("cache_batch_idx", cache_batch_idx is not None),
                        ("window_size", tuple(window_size) != (-1, -1)), ("softcap", softcap not in (0, 0.0)),
                        ("alibi_slopes", alibi_slopes is not None), ("learnable_sink", learnable_sink is not None)):
        if given:
            raise NotImplementedError("flashladder: %s with a float8_e4m3fn cache: rung 08's fp8-kv reads the cache "
                                      "with causal or no mask, its lengths, left padding and pages only" % name)


def _readable_cache(name, t):
    """An e4m3 cache the rung reads and the append writes in place: a contiguous head_dim and
    16-byte strides (a copy would leave the caller's cache without the new keys)."""
    if t.stride(3) != 1 or any(s % 16 for s in t.stride()[:3]) or t.data_ptr() % 16:
        raise ValueError("flashladder: %s: an e4m3 cache must have a contiguous head_dim and 16-byte aligned "
                         "strides and start (it is read and appended in place), got strides %s"
                         % (name, tuple(t.stride())))


#: Signatures of steps on an e4m3 cache that passed the checked path, to their prepared call
#: (_Fp8KvFast): a serving loop's next step with the same signature runs the metadata check, the append
#: and the launch from one binding call, as the 16-bit cache's (_kvcache.KV_FAST); bounded, and emptied
#: at exit before nanobind's teardown (as KV_FAST).
FP8_KV_FAST = {}
FP8_KV_FAST_MAX = 4096
atexit.register(FP8_KV_FAST.clear)


class _Fp8KvFast:
    """A signature's prepared step: the binding's call, its buffer's layout (_kvcache._kv_layout),
    whether q is e4m3 (read as bf16, q_descale joining k_descale), a descale of 1 for one left out,
    and the typed empty tensors _kvcache._kv_prepared allocates from."""

    __slots__ = ("prepared", "layout", "q_e4m3", "ones", "likes")

    def __init__(self, prepared, layout, q_e4m3, ones):
        self.prepared, self.layout, self.q_e4m3, self.ones = prepared, layout, q_e4m3, ones
        # _kvcache._kv_prepared's empty fp32 and uint8 tensors (its _KvFast.likes)
        self.likes = (ones.new_empty((0,)), ones.new_empty((0,), dtype=torch.uint8))


def _fp8_kv_signature(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale, causal,
                      num_splits, return_lse, descales):
    from . import _kvcache

    sig = _kvcache.kv_signature(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale,
                                causal, (-1, -1), 0.0, None, num_splits, None, return_lse)
    if sig is None or torch.compiler.is_compiling():
        return None
    try:
        return sig + tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in descales)
    except AttributeError:
        return None


def attention_kvcache_fp8(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale,
                          causal, num_splits, return_lse, q_descale, k_descale, v_descale):
    """flash_attn_with_kvcache on an e4m3 cache (_attention_kvcache_fp8, which says what it takes): a
    signature that passed the checks before runs its prepared step (FP8_KV_FAST), else the checks."""
    descales = (q_descale, k_descale, v_descale)
    sig = _fp8_kv_signature(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale,
                            causal, num_splits, return_lse, descales)
    fast = FP8_KV_FAST.get(sig) if sig is not None else None
    if fast is not None:
        res = _fp8_kv_fast(fast, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, return_lse,
                           descales)
        if res is not None:
            return res
    return _attention_kvcache_fp8(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table,
                                  softmax_scale, causal, num_splits, return_lse, q_descale, k_descale, v_descale, sig)


def _fp8_kv_fast(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, return_lse, descales):
    """The prepared step (_kvcache._kv_prepared with the descales); None when a pointer is misaligned
    (nothing launched: the checked path runs)."""
    from . import _kvcache

    q_descale, k_descale, v_descale = descales
    kd = f.ones if k_descale is None else k_descale
    vd = f.ones if v_descale is None else v_descale
    scores_kd = kd
    if f.q_e4m3:
        scores_kd = kd * (f.ones if q_descale is None else q_descale)
        q = q.to(OUT_DTYPE)
    return _kvcache._kv_prepared(f, q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, None, None,
                                 return_lse, (kd.data_ptr(), vd.data_ptr(), scores_kd.data_ptr()))


def _prepare_fp8_kv(problem, ws_bytes, q, k_cache, v_cache, k, v, elems, page, pool_rows, columns, q_e4m3):
    """The signature's prepared step, or None where the binding refuses it (the checked path runs
    every call then)."""
    from . import _kvcache

    batch, _, _, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    if page:
        kr, vr = k_cache.view(1, -1, heads_kv, head_dim), v_cache.view(1, -1, heads_kv, head_dim)
    else:
        kr, vr = k_cache, v_cache
    zero = (0, 0, 0, 0)
    append = (k.stride(), k_cache.stride(), v.stride(), v_cache.stride()) if k is not None else (zero,) * 4
    slots = problem.seqlen_k
    cache = (batch, 0 if k is None else k.shape[1], slots, page, k_cache.shape[0], columns, heads_kv, head_dim)
    dense = q.shape[1] * q.shape[2] * head_dim, q.shape[2] * head_dim, head_dim, 1
    try:
        prep = _ext.PreparedCacheCall(FP8_KV_RUNG[0], FP8_KV_RUNG[1], problem,
                                      (q.stride(), _launch._strides4(kr), _launch._strides4(vr), dense),
                                      (0, columns if page else 0, pool_rows), cache, append, q.device.index, ws_bytes,
                                      elems=elems, fp8_kv=True)
    except ValueError:
        return None
    ones = torch.ones((batch, heads_kv), dtype=torch.float32, device=q.device)
    return _Fp8KvFast(prep, _kvcache._kv_layout(q, prep), q_e4m3, ones)


def _attention_kvcache_fp8(q, k_cache, v_cache, k, v, cache_seqlens, cache_leftpad, block_table, softmax_scale,
                           causal, num_splits, return_lse, q_descale, k_descale, v_descale, sig=None):
    """flash_attn_with_kvcache on float8_e4m3fn ``k_cache`` and ``v_cache`` (contiguous [batch, slots,
    heads_kv, head_dim], or a page pool with ``block_table``), rung 08's fp8-kv. The caches hold
    K = k_cache x k_descale and V = v_cache x v_descale, each descale fp32 [batch, heads_kv] (1 when
    left out), as FlashAttention 3 defines them.

    ``q`` is fp16 or bf16, and O has its dtype; or q is float8_e4m3fn with ``q_descale`` (FlashAttention
    3's form), read as bf16 (exact: every e4m3 value is a bf16) with q_descale joining k_descale (the
    scores are their product), and O is bf16. New ``k`` and ``v`` are appended at cache_seqlens: e4m3
    ones as they are, 16-bit ones quantized with the cache's descales (x / descale rounded to e4m3,
    saturated at 448; a value beyond 448 x descale is clipped, as any FP8 cache's writer does). The
    metadata is checked on the device as the 16-bit cache's is (metadata.h). A problem rung 08 does
    not take (more than 16 query rows per KV head's tile, other head_dims) is refused in one line."""
    _shape4("q", q)
    _shape4("k_cache", k_cache)
    _shape4("v_cache", v_cache)
    if tuple(v_cache.shape) != tuple(k_cache.shape) or v_cache.dtype != E4M3:
        raise ValueError("flashladder: k_cache and v_cache: one shape, both float8_e4m3fn")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError("flashladder: %s requires grad: a cache step is inference" % name)
    _core._check_one_device((("q", q), ("k_cache", k_cache), ("v_cache", v_cache)))
    batch, seqlen_q, heads_q, head_dim = q.shape
    heads_kv = k_cache.shape[2]
    dev = q.device
    if k_cache.shape[3] != head_dim:
        raise ValueError("flashladder: the cache's head_dim (%d) must be q's (%d)" % (k_cache.shape[3], head_dim))
    if head_dim not in FP8_KV_HEAD_DIMS:
        raise ValueError("flashladder: head_dim must be 64 or 128 for a float8_e4m3fn cache (rung 08's fp8-kv), "
                         "got %d" % head_dim)
    if heads_q % heads_kv != 0:
        raise ValueError("flashladder: heads_q (%d) must be a multiple of the cache's heads (%d)" % (heads_q, heads_kv))
    q_e4m3 = q.dtype == E4M3
    if q_e4m3:
        qd = _descale("q_descale", q_descale, batch, heads_kv, dev)
        q = q.to(OUT_DTYPE)  # exact
    elif q.dtype in (torch.float16, torch.bfloat16):
        if q_descale is not None:
            raise ValueError("flashladder: q_descale with a %s q: q is not scaled (pass an e4m3 q with it)" % q.dtype)
        qd = None
    else:
        raise TypeError("flashladder: q must be fp16, bf16 or float8_e4m3fn with a float8_e4m3fn cache, got %s"
                        % q.dtype)
    q_readable = q.stride(3) == 1 and not any(s % 8 for s in q.stride()[:3]) and q.data_ptr() % 16 == 0
    if not q_readable:
        q = q.contiguous()
    kd = _descale("k_descale", k_descale, batch, heads_kv, dev)  # the cache's: the append quantizes with it
    vd = _descale("v_descale", v_descale, batch, heads_kv, dev)
    # The scores' one factor: q_descale x k_descale (the kernel's k_descale), the cache's own otherwise.
    scores_kd = kd if qd is None else (kd * qd).contiguous()
    _readable_cache("k_cache", k_cache)
    _readable_cache("v_cache", v_cache)
    if (k is None) != (v is None):
        raise ValueError("flashladder: k and v come together (the new keys and values)")
    new, elems = 0, "copy8"
    if k is not None:
        if cache_seqlens is None:
            raise ValueError("flashladder: k and v are appended at cache_seqlens: pass it")
        new = k.shape[1] if k.dim() == 4 else -1
        if tuple(k.shape) != (batch, new, heads_kv, head_dim) or tuple(v.shape) != tuple(k.shape):
            raise ValueError("flashladder: k and v must be [batch, seqlen_new, heads_kv, head_dim] = (%d, n, %d, %d), "
                             "got %s and %s" % (batch, heads_kv, head_dim, tuple(k.shape), tuple(v.shape)))
        if k.dtype != v.dtype or k.device != dev or v.device != dev:
            raise ValueError("flashladder: k and v: one dtype, on q's device")
        if k.dtype == E4M3:
            elems = "copy8"
        elif k.dtype in (torch.float16, torch.bfloat16):
            elems = "fp16_to_e4m3" if k.dtype == torch.float16 else "bf16_to_e4m3"
        else:
            raise TypeError("flashladder: k and v must be float8_e4m3fn (copied) or fp16/bf16 (quantized with the "
                            "cache's descales) for a float8_e4m3fn cache, got %s" % k.dtype)
    paged = block_table is not None
    caller_table = block_table  # as the prepared step would read it (its rows' stride)
    page = k_cache.shape[1] if paged else 0
    if paged:
        if (str(block_table.dtype) != "torch.int32" or block_table.dim() != 2 or block_table.shape[0] != batch
                or block_table.device != dev):
            raise ValueError("flashladder: block_table must be int32 [batch, pages per sequence] on q's device")
        block_table = block_table.contiguous()
        slots = block_table.shape[1] * page
    else:
        if k_cache.shape[0] != batch:
            raise ValueError("flashladder: k_cache's batch (%d) must be q's (%d)" % (k_cache.shape[0], batch))
        slots = k_cache.shape[1]
    if new > slots:
        raise _core.MetadataError("flashladder: %d new keys do not fit the cache's %d slots" % (new, slots))
    if isinstance(cache_seqlens, int) and not 0 <= cache_seqlens <= slots - new:
        raise _core.MetadataError("flashladder: cache_seqlens (%d) plus the new keys (%d) must fit the cache's %d "
                                  "slots" % (cache_seqlens, new, slots))
    if cache_leftpad is not None and (tuple(cache_leftpad.shape) != (batch,) or cache_leftpad.device != dev):
        raise ValueError("flashladder: cache_leftpad must be int32 [batch] = (%d,) on %s" % (batch, dev))
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError("flashladder: num_splits must be an int >= 0 (0: the decode rung's heuristic)")
    scale = _core.check_scale(softmax_scale)
    # The problem, then the entry's verdict, before anything is written.
    mods = _core.Mods(seqused_k=True, page_size=page, num_splits=num_splits, seqstart_k=cache_leftpad is not None)
    problem = _core.make_problem(batch, seqlen_q, slots, heads_q, heads_kv, head_dim, _core.DTYPES[str(q.dtype)],
                                 causal, scale, mods=mods)
    try:
        ws_bytes = _ext.fp8_kv_workspace_bytes(FP8_KV_RUNG[0], FP8_KV_RUNG[1], problem, dev.index)
    except ValueError as e:
        raise ValueError("flashladder: no rung reads a float8_e4m3fn cache for %s: rung 08[fp8-kv]: %s"
                         % (problem.describe(), e)) from None
    from . import _kvcache  # (the 16-bit cache's metadata path, shared)
    _launch.raise_metadata_errors(dev.index)
    raw_used, _, used_after, start, table = _kvcache._sanitized_cache(
        cache_seqlens, new, batch, slots, cache_leftpad, block_table, page, k_cache.shape[0] if paged else 0, None,
        k_cache.shape[0], q)
    st = _launch.stream(q)
    if new:
        _ext.append_cache(k.data_ptr(), k.stride(), k_cache.data_ptr(), k_cache.stride(), v.data_ptr(), v.stride(),
                          v_cache.data_ptr(), v_cache.stride(), batch, new, heads_kv, head_dim, raw_used.data_ptr(),
                          slots, 0 if block_table is None else block_table.data_ptr(),
                          0 if block_table is None else block_table.stride(0), page, k_cache.shape[0], 0, st,
                          dev.index, elems=elems, k_descale=kd.data_ptr(), v_descale=vd.data_ptr())
    out = torch.empty((batch, seqlen_q, heads_q, head_dim), dtype=q.dtype, device=dev)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=dev)
    ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=dev) if ws_bytes else None
    if paged:
        kc, vc = k_cache.view(1, -1, heads_kv, head_dim), v_cache.view(1, -1, heads_kv, head_dim)
        pool_rows = k_cache.shape[0] * page
    else:
        kc, vc, pool_rows = k_cache, v_cache, 0
    strides = tuple(_launch._strides4(t) for t in (q, kc, vc, out))
    extras = (0, 0, 0, 0, used_after.data_ptr(), 0 if table is None else table.data_ptr(),
              0 if start is None else start.data_ptr())
    _ext.fp8_kv_forward(FP8_KV_RUNG[0], FP8_KV_RUNG[1], problem,
                        (q.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), lse.data_ptr()), strides,
                        (scores_kd.data_ptr(), vd.data_ptr()), 0 if ws is None else ws.data_ptr(), ws_bytes, st,
                        dev.index,
                        extras, (0, 0 if table is None else table.shape[1], pool_rows))
    del ws
    # Checked and launched: the signature's next step runs prepared (not where q was copied, or the
    # metadata and descales are not what the prepared call reads as they are: int32 rows, dense fp32).
    int32_rows = all(t is None or (t.dtype == torch.int32 and t.stride(-1) == 1) for t in
                     (cache_seqlens if isinstance(cache_seqlens, torch.Tensor) else None, cache_leftpad))
    dense_descales = all(t is None or t.is_contiguous() for t in (q_descale, k_descale, v_descale))
    if (sig is not None and isinstance(cache_seqlens, torch.Tensor) and int32_rows and dense_descales
            and (q_readable or q_e4m3) and (caller_table is None or caller_table.stride(1) == 1)):
        fast = _prepare_fp8_kv(problem, ws_bytes, q, k_cache, v_cache, k, v, elems, page,
                               pool_rows, 0 if table is None else table.shape[1], q_e4m3)
        if fast is not None:
            if len(FP8_KV_FAST) >= FP8_KV_FAST_MAX:
                FP8_KV_FAST.clear()
            FP8_KV_FAST[sig] = fast
    return (out, lse) if return_lse else out
