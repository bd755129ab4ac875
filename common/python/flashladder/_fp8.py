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
