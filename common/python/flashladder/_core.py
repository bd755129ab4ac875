"""The torch-free half of flashladder: the registry, the device, and every check a call makes
before it launches.

The checks read only what any tensor has (``shape``, ``stride()``, ``dtype``, ``device``,
``data_ptr()``), so the CPU tests run them on small stand-in objects without PyTorch. The rung
contract itself (which head_dims, which GPU, which strides) is the C++ code's: a rung's
``supports`` and the layout rule every rung reads (``fl::tensor_layout_reason``) are asked through
the extension, never restated here.
"""

import dataclasses
import functools
import math

from . import _ext

#: The default forward rungs, best first: rung 15 (rung 10's schedule in a persistent grid,
#: sm_90 only, when built; 0.99-1.27x rung 10 on the bench's hopper-prefill family), else rung 16
#: (rung 15 with masks and score modifiers, and head_dims 80 and 96: what rung 15 refuses), else
#: rung 10 (FlashAttention-3's schedule, sm_90), else rung 06 (per-head_dim tiles on mma.sync,
#: sm_80 and newer).
DEFAULT_FORWARD = (15, 16, 10, 6)
#: The decode rung (Flash-Decoding): rung=None sends a decode step or a few queries to it when
#: route_forward finds it no slower than the prefill rung (its supports() holds the limits:
#: seqlen_q <= 16, head_dim 64 or 128).
DECODE_RUNG = 8
#: MLA's decode rung (multi-head latent attention on the compressed cache, head_dim 576 with V the
#: cache rows' first 512 columns: flash_mla_with_kvcache): the one rung that takes head_dim 576, so
#: route_forward sends every such problem to it, or refuses in one line (not built, not sm_90).
MLA_RUNG = 17
#: The backward rung the autograd formula falls back on (FlashAttention-2's backward pass, sm_80
#: and newer).
BACKWARD_RUNG = 11
#: The default backward entries (number, variant), best first: rung 14 (FlashAttention-3's
#: backward, sm_90 only, when built), else rung 16's backward (rung 14's kernel with the masks and
#: modifiers), else rung 11. Autograd and attention_backward(rung=None) run default_backward's pick.
DEFAULT_BACKWARD = ((14, ""), (16, "backward"), (BACKWARD_RUNG, ""))
#: 16-bit storage types, by the name str(dtype) gives in PyTorch, to the ladder's names.
DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}


@dataclasses.dataclass(frozen=True)
class Rung:
    """One registry entry (a rung or one of its variants), as the C++ registration declares it."""

    number: int
    name: str
    variant: str
    label: str
    summary: str
    head_dims: tuple  # empty: any head_dim up to MAX_HEAD_DIM that is a multiple of 8
    min_cc: int  # minimum compute capability x 10 (80 = sm_80), 0 = any
    decode: bool  # a decode kernel (a few query rows against a long KV cache)
    backward: bool  # has a backward pass (rung 11)
    forward_rung: int  # the rung whose forward pass its forward runs (0 = its own)
    paged_kv: bool
    in_tour: bool
    dtypes: tuple  # the 16-bit types this build compiled ("fp16", "bf16")
    baselines: tuple  # "vs 05_tensor_cores: <why>" lines
    not_implemented: str  # set in a lab starter tree only
    writes_o_fp32: bool  # its forward can also write O in fp32 (the backward's D reads it)
    workspace_kept: bool  # a zeroed workspace kept per stream serves its launches (Rung::workspace_kept)
    fp8_dq: bool  # its backward's dQ comes from e4m3 operands (rung 14's fp8-dq): the FP8 gradient floor
    head_dim_v: bool  # takes V and O with a head_dim of their own (Problem.head_dim_v)
    route: str  # when rung=None runs this entry ('' never): route_forward's rule, in words


def _route_text(entry):
    """When rung=None runs ``entry`` (a dict of _ext.rungs()): route_forward's rule in words."""
    n = entry["number"]
    if entry["variant"]:
        if (n, entry["variant"]) in DEFAULT_BACKWARD:
            return ("autograd (else of DEFAULT_BACKWARD %s): the backward of every call with a "
                    "mask, a modifier or sinks that it supports" % (DEFAULT_BACKWARD,))
        return ""
    if n == MLA_RUNG:
        return ("rung=None: MLA's latent cache (head_dim %d, V its first %d columns: flash_mla_with_kvcache), "
                "which no other rung takes (route_forward)" % (_ext.MLA_HEAD_DIM, _ext.MLA_HEAD_DIM_V))
    if n == DECODE_RUNG:
        return ("rung=None: decode steps and a few queries (what its supports() takes: seqlen_q <= "
                "16), without autograd, when its split grid streams K/V at least as fast as the "
                "prefill rung's (route_forward)")
    if n in DEFAULT_FORWARD:
        rank = "first" if n == DEFAULT_FORWARD[0] else "else"
        return ("rung=None (%s of DEFAULT_FORWARD %s): every forward that the decode rung does not "
                "take, and every forward under autograd" % (rank, DEFAULT_FORWARD))
    if (n, entry["variant"]) in DEFAULT_BACKWARD:
        rank = "first" if (n, entry["variant"]) == DEFAULT_BACKWARD[0] else "else"
        return ("autograd (%s of DEFAULT_BACKWARD %s): the backward of every call it supports "
                "(attention_backward with rung=None)" % (rank, DEFAULT_BACKWARD))
    return ""


@functools.lru_cache(maxsize=None)
def _registry():
    return tuple(
        Rung(route=_route_text(entry),
             **{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()})
        for entry in _ext.rungs()
    )


def rungs(variants=False):
    """Every rung this build has, in ladder order; with ``variants=True`` also each rung's
    ablation and sweep variants."""
    return [r for r in _registry() if variants or not r.variant]


def find_rung(number, variant=""):
    """The entry ``number`` / ``variant``; ValueError naming what the build has otherwise."""
    for r in _registry():
        if r.number == number and r.variant == variant:
            return r
    built = ", ".join(r.label for r in _registry())
    what = "rung %s" % (number,) + (" variant '%s'" % variant if variant else "")
    raise ValueError("flashladder: no %s in this build (built: %s)" % (what, built))


def device_count():
    """CUDA devices this process sees; 0 (not an error) on a machine without one."""
    return _ext.device_count()


def no_device_reason():
    """'' when a CUDA device exists, else why not (for example 'no usable CUDA device (...)')."""
    return _ext.no_device_reason()


def device_info(index=0):
    """The device as the runner reports it (name, arch, SMs, peak rates); RuntimeError without
    one. Queried once per device and cached."""
    return _ext.device_info(index)


def make_problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype="fp16", causal=False,
                 softmax_scale=None, mods=None):
    """The C++ Problem (0 as the scale means 1/sqrt(head_dim), the ladder's default), with
    ``mods`` (a Mods: masks, modifiers, packing) applied."""
    p = _ext.Problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, bool(causal),
                     0.0 if softmax_scale is None else float(softmax_scale))
    if mods is not None:
        mods.apply(p)
    return p


@dataclasses.dataclass(frozen=True)
class Mods:
    """What a call adds to plain attention, hashable (a part of the plan's key): FlashAttention's
    ``window_size`` (each side -1: open), ``softcap`` (0: off), ALiBi (``alibi``: 0 off, 1 the
    paper's slopes, 2 one given slope per head, 3 per sequence and head), attention ``sinks``,
    a packed batch (``varlen``: (batch, total_q, total_k, max_seqlen_q, max_seqlen_k), the
    lengths themselves on the device), a KV cache's lengths per sequence (``seqused_k``) and
    pages (``page_size``), attention ``dropout``'s probability, V's and O's own head_dim
    (``head_dim_v``, 0: head_dim) and V as K's first head_dim_v columns (``v_in_k``: MLA's latent
    cache; the launch's v must then be that view of k). Rung 16 runs the masks, modifiers and
    dropout, rung 15 the packing, rungs 08, 15 and 16 the cache's lengths, rung 08 its pages, rung
    17 MLA's latent cache (its lengths and pages too)."""

    window_left: int = -1
    window_right: int = -1
    softcap: float = 0.0
    alibi: int = 0
    sinks: bool = False
    varlen: tuple = None
    seqused_k: bool = False  # a KV cache's lengths per sequence (on the device)
    page_size: int = 0  # a paged KV cache's page (rung 08)
    num_splits: int = 0  # the decode rung's split count (0: its heuristic)
    seqstart_k: bool = False  # a left-padded KV cache's first slots per sequence (on the device)
    dropout: float = 0.0  # attention dropout's probability (rung 16; its seed and offset on the device)
    head_dim_v: int = 0  # V's and O's head_dim when it is not head_dim (0: head_dim)
    v_in_k: bool = False  # V is K's first head_dim_v columns (MLA's latent cache, rung 17)

    def apply(self, p):
        p.window_left, p.window_right = self.window_left, self.window_right
        p.softcap = float(self.softcap)
        p.alibi = self.alibi != 0
        p.sinks = self.sinks
        p.page_size = self.page_size
        p.num_splits = self.num_splits
        if self.varlen is not None:
            p.set_varlen(*self.varlen)
        p.seqused_k = self.seqused_k
        p.seqstart_k = self.seqstart_k
        if self.dropout:
            p.dropout_p = float(self.dropout)
        p.head_dim_v = self.head_dim_v
        p.v_in_k = self.v_in_k


#: No mask, modifier or packing: the plain key's plans.
NO_MODS = None


def supports(rung, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype="fp16",
             causal=False, variant="", device=0):
    """'' if ``rung`` can run this problem on ``device`` (an index, or a ``DeviceInfo`` built by
    hand to ask about another GPU), else the rung's one-line reason."""
    number, variant = _rung_id(rung, variant)
    find_rung(number, variant)
    problem = make_problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, causal)
    return _ext.supports(number, variant, problem, device)


def _rung_id(rung, variant=""):
    """(number, variant) of a rung given as a number or as a Rung from rungs()."""
    if isinstance(rung, Rung):
        return rung.number, rung.variant
    if isinstance(rung, bool) or not isinstance(rung, int):
        raise TypeError("flashladder: rung must be a rung number (int) or an entry of rungs(), "
                        "got %r" % (rung,))
    return rung, variant


# ---- input checks ---------------------------------------------------------------------------

def _type_name(t):
    return type(t).__module__ + "." + type(t).__qualname__


def check_structure(q, k, v, where=""):
    """What check_qkv and ring_attention's check share, on 4-D tensors of any device and dtype: q,
    k and v on one device with one dtype, v shaped as k, k with q's batch and head_dim. ``where``
    prefixes each message ('ring_attention: ')."""
    named = (("q", q), ("k", k), ("v", v))
    _check_one_device(named, where)
    _check_one_dtype(named, where)
    _check_kv_shape(q, k, v, where)


def _check_one_device(named, where=""):
    """Every tensor of ``named`` ((name, tensor) pairs, q first) on q's device."""
    q = named[0][1]
    for name, t in named[1:]:
        if t.device != q.device:
            raise ValueError("flashladder: %s%s is on %s but q is on %s; q, k and v must be on one "
                             "device" % (where, name, t.device, q.device))


def _check_one_dtype(named, where=""):
    q = named[0][1]
    for name, t in named[1:]:
        if t.dtype != q.dtype:
            raise TypeError("flashladder: %s%s is %s but q is %s; q, k and v must have one dtype"
                            % (where, name, t.dtype, q.dtype))


def _check_kv_shape(q, k, v, where="", own_dv=False):
    """v shaped as k (with ``own_dv``: but for its head_dim, a multiple of 8 up to MAX_HEAD_DIM),
    and k with q's batch and head_dim (4-D tensors)."""
    if own_dv and tuple(v.shape[:3]) == tuple(k.shape[:3]):
        dv = v.shape[3]
        if dv % 8 != 0 or not 0 < dv <= _ext.MAX_HEAD_DIM:
            raise ValueError("flashladder: %sv's head_dim must be a multiple of 8 (16-byte rows) up to %d, got %d"
                             % (where, _ext.MAX_HEAD_DIM, dv))
    elif tuple(v.shape) != tuple(k.shape):
        raise ValueError("flashladder: %sv must have k's shape %s, got %s"
                         % (where, tuple(k.shape), tuple(v.shape)))
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError("flashladder: %sk's batch and head_dim must be q's (%d, %d), got shape %s"
                         % (where, q.shape[0], q.shape[3], tuple(k.shape)))


def check_scale(softmax_scale):
    """softmax_scale as a float, 0.0 for None (1/sqrt(head_dim), the ladder's default)."""
    if softmax_scale is None:
        return 0.0
    scale = float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError("flashladder: softmax_scale must be a finite number > 0 (None means "
                         "1/sqrt(head_dim)), got %r" % (softmax_scale,))
    return scale


def check_qkv(q, k, v, causal=False, softmax_scale=None, tensor_type=None, check_layout=True, own_dv=False):
    """Checks q, k, v ([batch, seqlen, heads, head_dim], 16-bit, one CUDA device) and returns the
    problem's key: (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype name, causal,
    scale or 0). Raises TypeError (not a tensor, wrong dtype) or ValueError (device, shape, GQA,
    layout) with a one-line reason. ``tensor_type``: the class every input must be (torch.Tensor);
    ``check_layout``: also check strides and pointers (off while tracing with fake tensors);
    ``own_dv``: v may have a head_dim of its own (Mods.head_dim_v; the key keeps q's)."""
    named = (("q", q), ("k", k), ("v", v))
    for name, t in named:
        if tensor_type is not None and not isinstance(t, tensor_type):
            raise TypeError("flashladder: %s must be a %s, got %s" % (
                name, tensor_type.__module__ + "." + tensor_type.__qualname__, _type_name(t)))
    for name, t in named:
        if getattr(t.device, "type", None) != "cuda":
            raise ValueError("flashladder: %s is on %s; the rungs run on CUDA tensors (move it "
                             "with .cuda())" % (name, t.device))
    _check_one_device(named)
    dtype = DTYPES.get(str(q.dtype))
    if dtype is None:
        raise TypeError("flashladder: q is %s; the rungs take torch.float16 or torch.bfloat16"
                        % (q.dtype,))
    _check_one_dtype(named)
    for name, t in named:
        if len(t.shape) != 4:
            raise ValueError("flashladder: %s must have 4 dimensions [batch, seqlen, heads, "
                             "head_dim], got shape %s" % (name, tuple(t.shape)))
    _check_kv_shape(q, k, v, own_dv=own_dv)
    batch, seqlen_q, heads_q, head_dim = q.shape
    _, seqlen_k, heads_kv, _ = k.shape
    for name, t in named:
        if any(n == 0 for n in t.shape):
            raise ValueError("flashladder: %s is empty (shape %s); every dimension must be >= 1"
                             % (name, tuple(t.shape)))
    if heads_q % heads_kv != 0:
        raise ValueError("flashladder: heads_q (%d) must be a multiple of heads_kv (%d) (GQA/MQA: "
                         "each K/V head serves heads_q / heads_kv query heads)" % (heads_q, heads_kv))
    if head_dim % 8 != 0 or head_dim > _ext.MAX_HEAD_DIM:
        mla = " (MLA's latent cache: flashladder.flash_mla_with_kvcache)" if head_dim == _ext.MLA_HEAD_DIM else ""
        raise ValueError("flashladder: head_dim must be a multiple of 8 (16-byte rows) up to %d, "
                         "got %d%s" % (_ext.MAX_HEAD_DIM, head_dim, mla))
    scale = check_scale(softmax_scale)
    if check_layout:
        for name, t in named:
            check_layout_of(name, t)
    return (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, bool(causal), scale)


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                 softmax_scale=None, tensor_type=None, own_dv=False):
    """Checks a packed batch (flash_attn_varlen_func's: q [total_q, heads_q, head_dim], k and v
    [total_k, heads_kv, head_dim], cu_seqlens_q/k int32 [batch + 1] on q's device, the longest
    sequences max_seqlen_q/k) and returns (key, varlen): check_qkv's key with (batch,
    max_seqlen_q, max_seqlen_k) for its batch and lengths, and Mods.varlen's tuple. The lengths
    stay on the device (not read here): the launch checks them there against the tokens and
    max_seqlen and clamps them (_launch.sanitized_varlen, metadata.h)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(getattr(t, "shape", ())) != 3:
            raise ValueError("flashladder: a packed batch's %s must have 3 dimensions [total_tokens, "
                             "heads, head_dim], got shape %s" % (name, tuple(getattr(t, "shape", ()))))
    # The [1, tokens, heads, head_dim] views, checked once per signature (check_qkv_cached).
    key = check_qkv_cached(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), causal, softmax_scale,
                           tensor_type=tensor_type, own_dv=own_dv)
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if tensor_type is not None and not isinstance(t, tensor_type):
            raise TypeError("flashladder: %s must be a tensor, got %s" % (name, _type_name(t)))
        if str(t.dtype) != "torch.int32" or len(t.shape) != 1 or t.shape[0] < 2:
            raise ValueError("flashladder: %s must be int32 [batch + 1] (prefix sums from 0), got %s %s"
                             % (name, t.dtype, tuple(t.shape)))
        if t.device != q.device or t.stride()[0] != 1:
            raise ValueError("flashladder: %s must be contiguous on q's device %s" % (name, q.device))
    if cu_seqlens_k.shape[0] != cu_seqlens_q.shape[0]:
        raise ValueError("flashladder: cu_seqlens_q and cu_seqlens_k must have one entry per "
                         "sequence, the same count (%d and %d)" % (cu_seqlens_q.shape[0], cu_seqlens_k.shape[0]))
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("flashladder: %s must be an int >= 1, got %r" % (name, n))
    batch = cu_seqlens_q.shape[0] - 1
    varlen = (batch, q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k)
    return (batch, max_seqlen_q, max_seqlen_k) + key[3:], varlen


#: Signatures of packed batches that passed check_varlen, to its (key, varlen).
_PASSED_VARLEN = {}


def check_varlen_cached(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                        softmax_scale=None, tensor_type=None, own_dv=False):
    """check_varlen's (key, varlen), without repeating its checks (and its three views) for a
    packed batch whose signature already passed them: q, k and v as check_qkv_cached signs them,
    the cu_seqlens' type, dtype, shape, stride and device, max_seqlen_q/k and the arguments. The
    lengths inside cu_seqlens are not part of it: they are checked on the device at every launch
    (_launch.sanitized_varlen). A new signature, and every failure, goes through check_varlen."""
    try:
        sig = (tensor_type, causal, softmax_scale, own_dv, type(max_seqlen_q), max_seqlen_q, type(max_seqlen_k),
               max_seqlen_k) + tuple((type(t), t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)
                                     for t in (q, k, v)) + tuple(
            (type(t), t.shape, t.stride(), t.dtype, t.device) for t in (cu_seqlens_q, cu_seqlens_k))
        hit = _PASSED_VARLEN.get(sig)
    except Exception:  # noqa: BLE001  not a tensor, or unhashable: the full check says why
        sig, hit = None, None
    if hit is not None:
        return hit
    hit = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
                       tensor_type=tensor_type, own_dv=own_dv)
    if sig is not None:
        if len(_PASSED_VARLEN) >= _PASSED_MAX:
            _PASSED_VARLEN.clear()
        _PASSED_VARLEN[sig] = hit
    return hit


#: Input signatures that passed check_qkv, to the key it returned: what a call costs in Python
#: is mostly these checks, and a model calls attention with the same few signatures every step.
_PASSED = {}
_PASSED_MAX = 4096


def check_qkv_cached(q, k, v, causal=False, softmax_scale=None, tensor_type=None, own_dv=False):
    """check_qkv's key, without repeating its checks for inputs whose signature already passed
    them: each input's type, shape, strides, dtype, device and data pointer modulo 16 (the
    alignment rule), and the arguments. Inputs never seen, and every input that fails, go through
    check_qkv, so bad input raises exactly what check_qkv raises."""
    try:
        sig = (tensor_type, causal, softmax_scale, own_dv,
               type(q), q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15,
               type(k), k.shape, k.stride(), k.dtype, k.device, k.data_ptr() & 15,
               type(v), v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15)
        key = _PASSED.get(sig)
    except Exception:  # noqa: BLE001  not a tensor, or an unhashable attribute: the full check says why
        sig, key = None, None
    if key is not None:
        return key
    key = check_qkv(q, k, v, causal, softmax_scale, tensor_type=tensor_type, own_dv=own_dv)
    if sig is not None:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()
        _PASSED[sig] = key
    return key


class LayoutError(ValueError):
    """check_layout_of's refusal: a layout the rungs cannot read, which a copy can (realigned)."""


class MetadataError(ValueError, RuntimeError):
    """Metadata past its bound (cu_seqlens, cache_seqlens, cache_leftpad, block_table,
    cache_batch_idx): a ValueError as every bad input here, and a RuntimeError as FlashAttention
    raises it (its tests expect that class), whether found on the host before anything runs or
    reported from the device by a later call (metadata.h)."""


def check_layout_of(name, t):
    """LayoutError (a ValueError) unless every rung can read ``t``: head_dim contiguous, the other
    strides positive multiples of 8 elements, the data 16-byte aligned (fl::tensor_layout_reason)."""
    why = _ext.layout_reason(name, t.data_ptr(), tuple(t.shape), tuple(t.stride()))
    if why:
        raise LayoutError("flashladder: " + why)


def realigned(t):
    """``t`` when every rung can read it, else a copy that they can: contiguous, in a new
    allocation (16-byte aligned). Differentiable, as contiguous() and clone() are."""
    if not _ext.layout_reason("t", t.data_ptr(), tuple(t.shape), tuple(t.stride())):
        return t
    c = t.contiguous()
    return c.clone() if c is t else c  # contiguous but misaligned: contiguous() returns it as it is


def check_qkv_realigned(q, k, v, causal=False, softmax_scale=None, tensor_type=None):
    """(check_qkv_cached's key, (q, k, v)), where a tensor whose strides or data break the 16-byte
    rule is copied (realigned) and checked again rather than refused: FlashAttention takes such
    inputs. Every other refusal stands; the copies are new tensors (an O "like q" is then like the
    copy: contiguous)."""
    try:
        return check_qkv_cached(q, k, v, causal, softmax_scale, tensor_type=tensor_type), (q, k, v)
    except LayoutError:
        qkv = tuple(realigned(t) for t in (q, k, v))
        return check_qkv_cached(*qkv, causal, softmax_scale, tensor_type=tensor_type), qkv


def check_like(name, t, like_name, like, dtype=None, shape=None):
    """ValueError/TypeError unless ``t`` has ``like``'s shape (or ``shape``), dtype (or the dtype
    named ``dtype``, as str() of a torch dtype gives it) and device."""
    shape = tuple(like.shape) if shape is None else tuple(shape)
    if tuple(t.shape) != shape:
        raise ValueError("flashladder: %s must have %s's shape %s, got %s"
                         % (name, like_name, shape, tuple(t.shape)))
    if (t.dtype != like.dtype) if dtype is None else (str(t.dtype) != dtype):
        raise TypeError("flashladder: %s must be %s, got %s" % (name, like.dtype if dtype is None else dtype,
                                                                t.dtype))
    if t.device != like.device:
        raise ValueError("flashladder: %s is on %s but %s is on %s"
                         % (name, t.device, like_name, like.device))


def check_grads(dout, q, out, lse, out_fp32, tensor_type, head_dim_v=None):
    """The backward's inputs beside q, k, v (checked already): dout and out like q (with
    ``head_dim_v`` columns: V's own head_dim), the LSE float32 [batch, heads_q, seqlen_q] (packed:
    [heads_q, total_q]) on q's device, and out_fp32 (None or empty: D from out) like out in
    float32. Returns whether out_fp32 is given."""
    for name, t in (("dout", dout), ("out", out), ("lse", lse)):
        if not isinstance(t, tensor_type):
            raise TypeError("flashladder: %s must be a torch.Tensor, got %s" % (name, type(t)))
    o_shape = None if head_dim_v is None or head_dim_v == q.shape[-1] else tuple(q.shape[:-1]) + (head_dim_v,)
    check_like("out", out, "q", q, shape=o_shape)
    check_like("dout", dout, "q", q, shape=o_shape)
    lse_shape = (q.shape[0], q.shape[2], q.shape[1]) if len(q.shape) == 4 else (q.shape[1], q.shape[0])
    if tuple(lse.shape) != lse_shape or str(lse.dtype) != "torch.float32" or lse.device != q.device:
        raise ValueError("flashladder: lse must be float32 %s on %s (the forward's), got %s %s on %s"
                         % (lse_shape, q.device, lse.dtype, tuple(lse.shape), lse.device))
    if out_fp32 is None or out_fp32.numel() == 0:
        return False
    check_like("out_fp32", out_fp32, "q", q, dtype="torch.float32", shape=o_shape)
    return True


# ---- FlashAttention's arguments (flashladder._flash, _kvcache) -----------------------------------

def check_dropout(dropout_p):
    """dropout_p as a float in [0, 1) (0: off); ValueError naming it otherwise."""
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        p = float("nan")
    if not (0.0 <= p < 1.0):
        raise ValueError("flashladder: dropout_p must be a probability in [0, 1) (0: off), got %r" % (dropout_p,))
    return p


def check_dropout_with(dropout_p, softcap, alibi_slopes, learnable_sink=None):
    """NotImplementedError naming softcap, the one argument rung 16's dropout kernels are not
    compiled with (steps/16_masks/launch.cu: dropout with ALiBi or no score modifier, as
    FlashAttention 2 takes it); alibi_slopes and learnable_sink are taken with dropout."""
    if dropout_p and softcap:
        raise NotImplementedError("flashladder: dropout_p > 0 with softcap is not implemented (rung 16 compiles "
                                  "dropout with ALiBi or no score modifier, as FlashAttention 2 does)")


def dropout_state(device, generator=None):
    """The generator state of one dropout call: an int64 [2] tensor {seed, offset} on ``device``,
    drawn there from PyTorch's generator of that device (``generator`` None: its default one), so
    torch.manual_seed reproduces it and a CUDA graph replays a new draw each time (the generator
    is registered with the graph). The kernels read it on the device (DropoutParams::state); the
    backward gets the same tensor and regenerates the same mask."""
    import torch  # the torch-free checks above stay importable without it

    return torch.empty((2,), dtype=torch.int64, device=device).random_(generator=generator)


def check_window(window_size, causal=False):
    """(left, right) of FlashAttention's window_size, -1 for an open side; causal closes the
    right side already (FlashAttention: (left, 0)), so it is -1 then."""
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise ValueError("flashladder: window_size must be a pair (left, right) of ints, -1 for an "
                         "open side, got %r" % (window_size,)) from None
    if left < -1 or right < -1:
        raise ValueError("flashladder: window_size: each side >= 0, or -1 (open), got %r" % (window_size,))
    return left, (-1 if causal else right)


def check_softcap(softcap):
    if softcap is None or softcap < 0:
        raise ValueError("flashladder: softcap must be >= 0 (0: off), got %r" % (softcap,))


def check_slopes(alibi_slopes, q, batch):
    """Mods.alibi of ``alibi_slopes``: 0 none, 2 per head ([heads_q]), 3 per sequence and head."""
    if alibi_slopes is None:
        return 0
    heads_q = q.shape[-2]
    if alibi_slopes.device != q.device:
        raise ValueError("flashladder: alibi_slopes is on %s but q is on %s" % (alibi_slopes.device, q.device))
    if tuple(alibi_slopes.shape) == (heads_q,):
        return 2
    if tuple(alibi_slopes.shape) == (batch, heads_q):
        return 3
    raise ValueError("flashladder: alibi_slopes must be [heads_q] = (%d,) or [batch, heads_q] = (%d, %d), "
                     "got %s" % (heads_q, batch, heads_q, tuple(alibi_slopes.shape)))


def check_sinks(learnable_sink, q):
    heads_q = q.shape[-2]
    if tuple(learnable_sink.shape) != (heads_q,) or learnable_sink.device != q.device:
        raise ValueError("flashladder: learnable_sink must be one logit per query head, [heads_q] = (%d,) "
                         "on %s, got %s on %s" % (heads_q, q.device, tuple(learnable_sink.shape),
                                                  learnable_sink.device))


def check_not_implemented(what, given):
    if given:
        raise NotImplementedError("flashladder: %s is not implemented" % (what,))


def check_packed(name, x, layout, axis, count):
    """``x`` packs ``count`` tensors along ``axis``: len(layout) dimensions (the names in
    ``layout``, '[batch, seqlen, 3, heads, head_dim]'), ``count`` at ``axis``."""
    if x.dim() != layout.count(",") + 1 or x.shape[axis] != count:
        raise ValueError("flashladder: %s must be %s, got %s" % (name, layout, tuple(x.shape)))


# ---- plans: which rung, how much workspace (cached per shape) --------------------------------

@dataclasses.dataclass(frozen=True)
class Plan:
    """What a launch needs beyond the tensors: the entry, the C++ Problem, the workspace."""

    number: int
    variant: str
    label: str
    problem: object  # _ext.Problem
    workspace_bytes: int
    writes_o_fp32: bool  # its forward can also write O in fp32 (Rung.writes_o_fp32)
    # A backward plan: its D reads the forward's fp32 O on this problem (_ext.bwd_reads_o_fp32;
    # the 16-bit O on short rows, delta_policy.h): the autograd forward writes it only then.
    reads_o32: bool = False
    # A forward plan whose workspace, zeroed once and kept per stream, serves every launch
    # (Rung.workspace_kept; _launch.KeptWorkspace): no allocation and no memset per call.
    workspace_kept: bool = False


def _cannot(label, problem, why):
    return ValueError("flashladder: %s cannot run %s: %s" % (label, problem.describe(), why))


def _first_supported(numbers, problem, device, backward=False, deterministic=False):
    """The first entry of ``numbers`` (a number: the main rung; or (number, variant)) that is built
    and can run ``problem`` on ``device`` (``backward``: its backward pass, ``deterministic`` or
    not), and each one's reason before it ("NN: not built", "label: why")."""
    reasons = []
    for entry in numbers:
        n, variant = entry if isinstance(entry, tuple) else (entry, "")
        if not any(r.number == n and r.variant == variant for r in _registry()):
            reasons.append("%02d%s: not built" % (n, "[%s]" % variant if variant else ""))
            continue
        why = _ext.supports(n, variant, problem, device)
        if not why and backward:
            why = _ext.bwd_supports(n, variant, problem, bool(deterministic))
        if not why:
            return find_rung(n, variant), reasons
        reasons.append("%s: %s" % (find_rung(n, variant).label, why))
    return None, reasons


def default_forward(problem, device):
    """DEFAULT_FORWARD's first rung that can run ``problem`` on ``device`` (an index or a
    DeviceInfo); ValueError with each one's reason when none can."""
    r, reasons = _first_supported(DEFAULT_FORWARD, problem, device)
    if r is None:
        raise ValueError("flashladder: no default rung runs %s (%s); pass rung= (rungs() lists them)"
                         % (problem.describe(), "; ".join(reasons)))
    return r


def default_backward(problem, device, deterministic=False):
    """DEFAULT_BACKWARD's first entry that can run ``problem``'s backward pass on ``device`` (an
    index or a DeviceInfo); ValueError with each one's reason when none can."""
    r, reasons = _first_supported(DEFAULT_BACKWARD, problem, device, True, deterministic)
    if r is None:
        raise ValueError("flashladder: no backward rung runs %s (%s)" % (problem.describe(), "; ".join(reasons)))
    return r


def _device_info(device):
    return device if isinstance(device, _ext.DeviceInfo) else device_info(device)


def kv_stream_estimate(problem, device):
    """(decode rung, prefill rung): K/V bytes each streams from memory per busy multiprocessor,
    the time route_forward compares. With seqlen_q <= 16 both are memory-bound (a K/V element is
    read for at most 16 x group query rows), so the one that moves fewer bytes per busy SM wins:
    - the decode rung reads each KV head once and splits the keys until its grid fills the GPU
      (its own split heuristic, asked through grid_ctas for this device);
    - the prefill rung starts one CTA per (batch, query head) (seqlen_q is within one Q tile),
      and each streams its KV head: group x the K/V bytes (an upper bound: the L2 may serve a
      group's CTAs that run together).
    The partial outputs the decode rung's combine reads back are left out (under 1 % of the K/V
    bytes at seqlen_k >= 4k)."""
    info = _device_info(device)
    sms = max(1, info.sm_count)
    kv = 2.0 * problem.batch * problem.heads_kv * problem.seqlen_k * problem.head_dim
    decode_ctas = _ext.grid_ctas(DECODE_RUNG, "", problem, info)
    # One CTA per (batch, query head, Q tile); every prefill rung's Q tile has >= 64 rows.
    prefill_ctas = problem.batch * problem.heads_q * -(-problem.seqlen_q // 64)
    group = problem.heads_q // problem.heads_kv
    return (kv / min(sms, max(1, decode_ctas)), kv * group / min(sms, prefill_ctas))


def route_mla(problem, device):
    """MLA_RUNG for ``problem`` (head_dim 576: MLA's latent cache) on ``device``, or a ValueError in
    one line: the build has no rung 17, or its supports() refuses (not sm_90, the cache's shape).
    No other rung takes head_dim 576, so there is nothing to fall back on."""
    if not any(r.number == MLA_RUNG and not r.variant for r in _registry()):
        raise ValueError("flashladder: MLA's latent cache (head_dim %d) runs on rung %d only, which this build does "
                         "not have (built: %s)" % (problem.head_dim, MLA_RUNG,
                                                   ", ".join(r.label for r in rungs())))
    r = find_rung(MLA_RUNG)
    why = _ext.supports(r.number, "", problem, device)
    if why:
        raise _cannot(r.label + " (the one rung for MLA's latent cache)", problem, why)
    return r


def route_forward(problem, device, backward=False):
    """(entry, why): the forward rung=None runs for ``problem`` on ``device`` (an index or a
    DeviceInfo). MLA's latent cache (head_dim 576) on MLA_RUNG or a one-line refusal (route_mla).
    Else the decode rung when it supports the problem (a decode step or a few queries),
    no backward pass follows (it writes no fp32 O for the backward's D), and kv_stream_estimate
    finds it no slower; else DEFAULT_FORWARD's first rung that supports the problem
    (default_forward). The one place the route is decided; rungs() shows it in words."""
    if problem.head_dim == _ext.MLA_HEAD_DIM:
        return route_mla(problem, device), "MLA's latent cache: the one rung that takes head_dim %d" % problem.head_dim
    decode_built = any(r.number == DECODE_RUNG and not r.variant for r in _registry())
    why = "not built" if not decode_built else _ext.supports(DECODE_RUNG, "", problem, device)
    if not why and backward:
        why = "a backward pass follows (its D reads the prefill rung's fp32 O on longer rows)"
    if not why:
        decode_t, prefill_t = kv_stream_estimate(problem, device)
        if decode_t > prefill_t:
            why = "its grid streams K/V slower than the prefill rung's (kv_stream_estimate)"
    if not why:
        return find_rung(DECODE_RUNG), "decode rung: a few queries against the K/V, no slower"
    return default_forward(problem, device), "prefill rung (decode rung: %s)" % why


@functools.lru_cache(maxsize=4096)
def plan_forward(rung, variant, key, device, backward=False, mods=NO_MODS):
    """The forward plan for ``key`` (check_qkv's) with ``mods`` on device index ``device``.
    ``rung`` None picks the route (route_forward; ``backward``: an autograd backward pass
    follows). ValueError with the rung's reason when it cannot run the problem."""
    problem = make_problem(*key, mods=mods)
    if rung is None:
        return _plan(route_forward(problem, device, backward)[0], problem, device)
    r = find_rung(rung, variant)
    why = _ext.supports(r.number, r.variant, problem, device)
    if why:
        raise _cannot(r.label, problem, why)
    return _plan(r, problem, device)


def _plan(r, problem, device):
    return Plan(r.number, r.variant, r.label, problem,
                _ext.workspace_bytes(r.number, r.variant, problem, device), r.writes_o_fp32,
                workspace_kept=r.workspace_kept)


@functools.lru_cache(maxsize=4096)
def plan_backward(rung, variant, key, deterministic, device, mods=NO_MODS):
    """The backward plan of entry ``rung`` (None: default_backward's pick, rung 14 on sm_90, rung
    16's backward for masks and modifiers, else rung 11) for ``key`` with ``mods``: ValueError
    with its reason when it cannot run the problem (rung 11: head_dim 64 or 128; rung 14: 64, 128
    or 256)."""
    problem = make_problem(*key, mods=mods)
    r = default_backward(problem, device, deterministic) if rung is None else find_rung(rung, variant)
    if not r.backward:
        raise ValueError("flashladder: %s has no backward pass (rung %d has)"
                         % (r.label, BACKWARD_RUNG))
    why = _ext.supports(r.number, r.variant, problem, device) or \
        _ext.bwd_supports(r.number, r.variant, problem, bool(deterministic))
    if why:
        raise _cannot(r.label + "'s backward", problem, why)
    return Plan(r.number, r.variant, r.label, problem,
                _ext.bwd_workspace_bytes(r.number, r.variant, problem, bool(deterministic), device),
                r.writes_o_fp32, _ext.bwd_reads_o_fp32(r.number, r.variant, problem))


# ---- FlashMLA's arguments (flashladder._mla) -----------------------------------------------------

def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def check_mla(q, k_cache, block_table, cache_seqlens, head_dim_v, causal=False, softmax_scale=None, num_splits=0,
              tensor_type=None):
    """Checks flash_mla_with_kvcache's arguments (FlashMLA's: q [batch, seqlen_q, heads_q, 576]; the
    latent cache k_cache [pages, page_size, 1, 576] read through ``block_table`` (int32 [batch,
    pages per sequence]), or with ``block_table`` None [batch, seqlen_k, 1, 576]; ``cache_seqlens``
    int32 [batch]; ``head_dim_v`` 512, V being the cache rows' first 512 columns) and returns (key,
    mods, page, pool_pages): check_qkv's key of the problem (seqlen_k: the cache's slots per
    sequence, the table's columns x page_size when paged), its Mods (the lengths on the device, the
    page, ``num_splits``, head_dim_v, v_in_k), the page size (0: contiguous) and the pool's pages.
    Each refusal is one line naming the argument: TypeError for a type or dtype, ValueError
    otherwise; LayoutError (a ValueError) for q's strides or alignment alone, which a copy of q
    fixes (the caller's choice). The lengths and the table's entries stay on the device: the launch
    checks them there (metadata.h)."""
    mla_d, mla_dv = _ext.MLA_HEAD_DIM, _ext.MLA_HEAD_DIM_V
    named = (("q", q), ("k_cache", k_cache), ("cache_seqlens", cache_seqlens)) + (
        (("block_table", block_table),) if block_table is not None else ())
    for name, t in named:
        if tensor_type is not None and not isinstance(t, tensor_type):
            raise TypeError("flashladder: %s must be a %s, got %s" % (
                name, tensor_type.__module__ + "." + tensor_type.__qualname__, _type_name(t)))
    if getattr(q.device, "type", None) != "cuda":
        raise ValueError("flashladder: q is on %s; the rungs run on CUDA tensors (move it with .cuda())" % (q.device,))
    for name, t in named[1:]:
        if t.device != q.device:
            raise ValueError("flashladder: %s is on %s but q is on %s; every tensor must be on q's device"
                             % (name, t.device, q.device))
    dtype = DTYPES.get(str(q.dtype))
    if dtype is None:
        raise TypeError("flashladder: q is %s; rung %d takes torch.float16 or torch.bfloat16" % (q.dtype, MLA_RUNG))
    if k_cache.dtype != q.dtype:
        raise TypeError("flashladder: k_cache is %s but q is %s; they must have one dtype" % (k_cache.dtype, q.dtype))
    if len(q.shape) != 4 or q.shape[3] != mla_d:
        raise ValueError("flashladder: q must be [batch, seqlen_q, heads_q, %d] (MLA's latent dims: %d + %d RoPE), "
                         "got shape %s" % (mla_d, mla_dv, mla_d - mla_dv, tuple(q.shape)))
    if len(k_cache.shape) != 4 or k_cache.shape[3] != mla_d:
        raise ValueError("flashladder: k_cache must be [pages, page_size, 1, %d] (or [batch, seqlen_k, 1, %d] "
                         "without a block_table), got shape %s" % (mla_d, mla_d, tuple(k_cache.shape)))
    if k_cache.shape[2] != 1:
        raise ValueError("flashladder: k_cache must have one head (heads_k = 1: every query head reads the one "
                         "latent cache), got %d" % k_cache.shape[2])
    for name, t in (("q", q), ("k_cache", k_cache)):
        if any(n == 0 for n in t.shape):
            raise ValueError("flashladder: %s is empty (shape %s); every dimension must be >= 1"
                             % (name, tuple(t.shape)))
    if not _is_int(head_dim_v) or head_dim_v != mla_dv:
        raise ValueError("flashladder: head_dim_v must be %d (V is the cache rows' first %d columns), got %r"
                         % (mla_dv, mla_dv, head_dim_v))
    batch, seqlen_q, heads_q, _ = q.shape
    if str(cache_seqlens.dtype) != "torch.int32" or tuple(cache_seqlens.shape) != (batch,):
        raise ValueError("flashladder: cache_seqlens must be int32 [batch] = (%d,), got %s %s"
                         % (batch, cache_seqlens.dtype, tuple(cache_seqlens.shape)))
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError("flashladder: k_cache without a block_table is [batch, seqlen_k, 1, %d]: its batch (%d) "
                             "must be q's (%d)" % (mla_d, k_cache.shape[0], batch))
        page, pool_pages, slots = 0, 0, k_cache.shape[1]
        why = _ext.layout_reason("k_cache", k_cache.data_ptr(), tuple(k_cache.shape), tuple(k_cache.stride()))
    else:
        if str(block_table.dtype) != "torch.int32" or len(block_table.shape) != 2 or block_table.shape[0] != batch:
            raise ValueError("flashladder: block_table must be int32 [batch, pages per sequence] with batch %d, got "
                             "%s %s" % (batch, block_table.dtype, tuple(block_table.shape)))
        page, pool_pages = k_cache.shape[1], k_cache.shape[0]
        if page % 64 != 0 or page & (page - 1):
            raise ValueError("flashladder: k_cache's page_size (dim 1) must be a power of two and a multiple of 64 "
                             "(rung %d loads 64 keys of a page per TMA box), got %d" % (MLA_RUNG, page))
        slots = block_table.shape[1] * page
        st = k_cache.stride()
        if pool_pages > 1 and st[0] != page * st[1]:
            raise ValueError("flashladder: k_cache's pages must follow one another (stride(0) = page_size x "
                             "stride(1) = %d), got strides %s" % (page * st[1], tuple(st)))
        # The pool as the rung reads it: [1, pages x page_size, 1, 576].
        why = _ext.layout_reason("k_cache", k_cache.data_ptr(), (1, pool_pages * page, 1, mla_d),
                                 (pool_pages * page * st[1], st[1], st[2], st[3]))
    if why:
        raise ValueError("flashladder: " + why)
    if not _is_int(num_splits) or num_splits < 0:
        raise ValueError("flashladder: num_splits must be an int >= 0 (rung %d's split count; 0 or None: its "
                         "heuristic), got %r" % (MLA_RUNG, num_splits))
    scale = check_scale(softmax_scale)
    check_layout_of("q", q)  # LayoutError: a copy of q reads (the caller's choice)
    key = (batch, seqlen_q, slots, heads_q, 1, mla_d, dtype, bool(causal), scale)
    mods = Mods(seqused_k=True, page_size=page, num_splits=num_splits, head_dim_v=mla_dv, v_in_k=True)
    return key, mods, page, pool_pages
