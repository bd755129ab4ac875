#!/usr/bin/env python3
"""The package's autograd plumbing on the CPU: eager autograd without the custom ops.

    PYTHONPATH=build/ci/python python3 tests/python/test_autograd_cpu.py

Under autograd in eager mode, ``attention()`` and ``flash_attn_func`` run the forward and the
backward launch as one plain autograd.Function (_ops._EagerAttention, _EagerAttentionMods), not as
the two custom ops (which torch.compile traces). The package's control flow runs as it does on a
GPU; only the rungs' launches (_launch.forward, _launch.backward), the CUDA checks
(_core.check_qkv_cached) and the backward's plan (_core.plan_backward) are replaced, by a float64
reference on the CPU and a recorder. The checks:

1. attention(causal=True) under autograd: O and dQ, dK, dV equal the reference's through torch's own
   autograd (float64), GQA 4:1, seqlen_q != seqlen_k; the custom ops are not called; the backward
   launch gets the forward's fp32 O and the key the forward was checked into.
2. return_lse=True: the LSE is not differentiable, and the gradients are those of O's loss alone.
3. flash_attn_func with a window, softcap and a learnable sink requiring grad: dQ, dK, dV and the
   sink's gradient (through learnable_sink.float()) equal the reference's.
4. The backward's plan is made before the forward launches: a refused problem raises and nothing
   launches; ``deterministic`` reaches the backward launch (flash_attn_func(deterministic=True),
   torch.use_deterministic_algorithms(True)).
5. No gradient for the LSE is materialized: the backward launch gets dO alone, and a step whose loss
   reads O launches exactly one forward and one backward.
6. The custom ops themselves (what torch.compile traces), called under autograd on the same
   stand-ins: flashladder::attention and flashladder::attention_mods give the reference's
   gradients (the sink's included) through their registered autograd.
7. A layout the rungs cannot read (a strided head_dim, data off the 16-byte grid; the real layout
   rule, fl::tensor_layout_reason) is copied (_core.realigned) and run, as FlashAttention takes it:
   attention() and flash_attn_func give the contiguous copy's O, and the gradient reaches the
   original tensor; a readable tensor is not copied.
8. A head_dim that is not a multiple of 8 (12) is zero-padded to the next one (16), as FlashAttention
   does, with the scale of 12: attention() and flash_attn_func (a window) give the reference's O
   at head_dim 12 (O cut back to 12 columns) and its gradients; so is a v with its own head_dim
   (24/16 and 16/20: q, k and v padded to 24, O cut back to v's), with the scale of q's.
9. flash_attn_varlen_func under autograd checks its cu_seqlens on the device once per step: one
   clamping launch (_launch.sanitized_varlen) before the forward, whose clamped copies the forward
   and the backward launches both take (``checked``); a second call with the same signature does
   not run check_varlen's host checks again (check_varlen_cached). The clamped copies are kept per
   caller's pair (_launch.VARLEN_CHECKED), as a model's layers pass one pair: the same unchanged
   pair is clamped once; a change in place, another pair, other maxima, and a violation raised
   in between each clamp again.
   A window_size given as a tensor of two ints (FlashAttention's tests draw one) runs the window.
   With a block_table, the pools' pages are gathered into packed keys at cu_seqlens_k's places
   (one table check with each sequence's key count), and the gradient reaches the used slots.
10. Dropout's wiring (the launches stood in, their mask a function of the generator state):
    flash_attn_func(dropout_p) plans, launches with Mods.dropout and an int64 [2] state drawn from
    torch's generator, and the backward gets that very tensor; O and dQ, dK, dV equal the
    reference's under the mask; torch.manual_seed reproduces, another seed or call draws anew; the
    packed forms route it; return_attn_probs gives S_dmask (its sign the mask, its magnitude exp(s - m));
    dropout_p = 0 draws nothing; alibi_slopes with dropout reaches the launch (the slopes with it;
    O, the gradients and S_dmask's magnitudes carry ALiBi's bias); softcap and a p outside [0, 1)
    are refused in one line naming the argument before any launch; the custom op carries the state
    to its backward.

Exits 77 (ctest: skipped) without PyTorch.
"""

import concurrent.futures
import math
import sys
import types

SKIP = 77

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)

import flashladder  # noqa: E402
from flashladder import _core, _ext, _flash, _launch, _ops  # noqa: E402

from cpu_stubs import check, cpu_key, exit_status  # noqa: E402  tests/python/cpu_stubs.py


# ---- the rungs, replaced by a float64 reference ---------------------------------------------------

def reference(q, k, v, causal, scale, window=(-1, -1), softcap=0.0, sinks=None, keep=None, dropout_p=0.0,
              slopes=None):
    """(O, LSE [b, hq, sq]) of q [b, sq, hq, d], k and v [b, sk, hk, d], differentiable in every
    input: bottom-right causal, FlashAttention's window, softcap, one sink logit per query head,
    dropout (``keep`` [b, hq, sq, sk] bool, kept elements scaled by 1 / (1 - dropout_p)), ALiBi
    (``slopes`` [hq] or [b, hq]: -slope |i + sk - sq - j| added to the scaled, capped score)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(hq // hk, dim=2)
    vv = v.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * (scale or d ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    if slopes is not None:
        s = s - slopes.double().reshape(-1, hq, 1, 1) * (i - j).abs()
    seen = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        seen &= j <= i
    if window[0] >= 0:
        seen &= j >= i - window[0]
    if window[1] >= 0:
        seen &= j <= i + window[1]
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.reshape(1, hq, 1, 1).expand(b, hq, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])[..., :sk]
    if keep is not None:
        p = p * keep / (1.0 - dropout_p)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv), lse


def stand_in_mask(state, p, b, hq, sq, sk):
    """The dropout mask the stand-in launches use: a function of the generator state tensor's two
    values (as the kernels' is), drawn from a CPU generator seeded by them."""
    g = torch.Generator().manual_seed((int(state[0]) * 1000003 + int(state[1])) % (1 << 63))
    return torch.rand(b, hq, sq, sk, generator=g) >= p


def mods_args(key, mods, extras, dropout_state=None):
    causal, scale = key[7], key[8]
    if mods is None:
        return dict(causal=causal, scale=scale)
    sinks = extras[2] if extras else None
    keep = None
    if mods.dropout:
        assert dropout_state is not None, "a dropout launch without its generator state"
        keep = stand_in_mask(dropout_state, mods.dropout, key[0], key[3], key[1], key[2])
    slopes = extras[3] if extras and mods.alibi else None
    return dict(causal=causal, scale=scale, window=(mods.window_left, mods.window_right), softcap=mods.softcap,
                sinks=sinks, keep=keep, dropout_p=mods.dropout, slopes=slopes)


LOG = []  # ("forward" | "backward" | "plan", details)


def cpu_forward(q, k, v, key, rung=None, variant="", o_fp32=False, mods=None, extras=None, checked=False,
                dropout_state=None, step=None, xextras=None, backward=False):
    LOG.append(("forward", dict(o_fp32=o_fp32, backward=backward, mods=mods, head_dim=q.shape[-1], state=dropout_state,
                                slopes=extras[3] if extras else None)))
    a = mods_args(key, mods, extras, dropout_state)
    with torch.no_grad():
        out, lse = reference(q, k, v, a["causal"], a["scale"], a.get("window", (-1, -1)), a.get("softcap", 0.0),
                             a.get("sinks"), a.get("keep"), a.get("dropout_p", 0.0), a.get("slopes"))
    o32 = out.clone() if o_fp32 else None  # the rung's fp32 O (here: the same values)
    return out.to(q.dtype), lse, o32


def cpu_backward(dout, q, k, v, out, lse, key, deterministic, rung=None, variant="", out_fp32=None, mods=None,
                 extras=None, checked=False, dropout_state=None, step=None, xextras=None, trusted=False):
    LOG.append(("backward", dict(deterministic=deterministic, o32=out_fp32 is not None, key=key, dout=dout,
                                 state=dropout_state, slopes=extras[3] if extras else None, trusted=trusted)))
    a = mods_args(key, mods, extras, dropout_state)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sinks = a.get("sinks")
    if sinks is not None:
        sinks = sinks.detach().clone().requires_grad_()
        leaves.append(sinks)

    def grads_of():
        with torch.enable_grad():
            o, _ = reference(*leaves[:3], a["causal"], a["scale"], a.get("window", (-1, -1)),
                             a.get("softcap", 0.0), sinks, a.get("keep"), a.get("dropout_p", 0.0), a.get("slopes"))
            return torch.autograd.grad(o, leaves, dout)

    # In a thread of its own: inside a custom op's body the dispatcher has turned autograd off for
    # this thread (a thread-local setting), and the reference's gradients need it.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        grads = pool.submit(grads_of).result()
    if mods is None:
        return grads[0], grads[1], grads[2]
    return grads[0], grads[1], grads[2], (grads[3] if sinks is not None else None)


REFUSE = [None]  # a ValueError message plan_backward raises, or None
READS_O32 = [True]  # the plan's reads_o32: its D reads the forward's fp32 O (rows past kO16DeltaKeys)


def cpu_plan_backward(rung, variant, key, deterministic, device, mods=None):
    LOG.append(("plan", dict(deterministic=deterministic)))
    if REFUSE[0]:
        raise ValueError(REFUSE[0])
    return types.SimpleNamespace(reads_o32=READS_O32[0])


def custom_op_called(*args, **kwargs):
    raise AssertionError("a custom op was called in eager mode")


def cpu_dropout_mask(state, p, batch, heads_q, rows, cols, cu_seqlens_q=None, cu_seqlens_k=None):
    LOG.append(("mask", dict(state=state)))
    return stand_in_mask(state, p, batch, heads_q, rows, cols)


_launch.forward, _launch.backward, _launch.dropout_mask = cpu_forward, cpu_backward, cpu_dropout_mask
_core.check_qkv = _core.check_qkv_cached = cpu_key
_core.plan_backward = cpu_plan_backward
OPS = (_ops.attention_op, _ops.attention_mods_op)  # the real ops, for test 6
_ops.attention_op = _ops.attention_mods_op = custom_op_called


def leaves(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


def close(a, b):
    return a is not None and b is not None and torch.allclose(a, b, rtol=1e-10, atol=1e-12)


# ---- 1, 2 -------------------------------------------------------------------------------------------

def test_attention():
    b, sq, sk, hq, hk, d = 2, 5, 9, 8, 2, 16
    q, k, v = leaves((b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d))
    dout = torch.randn(b, sq, hq, d, dtype=torch.float64)
    LOG.clear()
    out = flashladder.attention(q, k, v, causal=True)
    out.backward(dout)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out, _ = reference(*ref_leaves, True, 0.0)
    ref_out.backward(dout)
    kinds = [e[0] for e in LOG]
    check(kinds == ["plan", "forward", "backward"],
          "attention() under autograd: the plan, one forward, one backward (got %s)" % kinds)
    check(close(out.detach(), ref_out.detach()), "attention(): O equals the reference's")
    check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
          "attention(): dQ, dK, dV equal the reference's through torch's autograd (GQA 4:1, sq != sk)")
    bwd = LOG[-1][1]
    check(LOG[1][1]["o_fp32"] and LOG[1][1]["backward"] and bwd["o32"],
          "where the plan's D reads it, the forward writes the fp32 O (routed for a backward) and the backward gets it")
    for t in (q, k, v):
        t.grad = None
    LOG.clear()
    READS_O32[0] = False
    out = flashladder.attention(q, k, v, causal=True)
    out.backward(dout)
    READS_O32[0] = True
    check([e[0] for e in LOG] == ["plan", "forward", "backward"] and not LOG[1][1]["o_fp32"] and LOG[1][1]["backward"]
          and not LOG[-1][1]["o32"] and all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
          "short rows (the plan's D from the 16-bit O): the forward, routed for a backward, writes no fp32 O, the "
          "backward gets none, the gradients are the same")
    check(bwd["key"] == cpu_key(q, k, v, True), "the backward launches on the key the forward was checked into")
    check(bwd["trusted"], "autograd's backward call is trusted: the forward's own O, LSE and fp32 O and autograd's dO "
                          "are not checked again")

    for t in (q, k, v):
        t.grad = None
    out, lse = flashladder.attention(q, k, v, causal=True, return_lse=True)
    check(not lse.requires_grad and out.requires_grad, "return_lse=True: O differentiable, the LSE not")
    (out * dout).sum().backward()
    check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
          "return_lse=True: the gradients are O's loss's alone")
    check(torch.equal(LOG[-1][1]["dout"], dout), "the backward launch gets dO itself")

    with torch.no_grad():
        LOG.clear()
        try:
            flashladder.attention(q, k, v, causal=True)
        except Exception as e:  # noqa: BLE001  the no-grad path's own launch: not what this test stubs
            print("     (no grad: %s)" % type(e).__name__)
        check("backward" not in [e[0] for e in LOG] and "plan" not in [e[0] for e in LOG],
              "without grad: no backward plan, no backward")


# ---- 3 ----------------------------------------------------------------------------------------------

def test_flash_mods():
    b, sq, sk, hq, hk, d = 1, 7, 7, 4, 4, 8
    q, k, v = leaves((b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d), seed=1)
    sink = torch.randn(hq, dtype=torch.float32, requires_grad=True)
    dout = torch.randn(b, sq, hq, d, dtype=torch.float64)
    LOG.clear()
    out = flashladder.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), softcap=5.0, learnable_sink=sink)
    out.backward(dout)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_sink = sink.detach().double().clone().requires_grad_()
    ref_out, _ = reference(*ref_leaves, True, 0.0, (3, -1), 5.0, ref_sink)
    ref_out.backward(dout)
    kinds = [e[0] for e in LOG]
    check(kinds == ["plan", "forward", "backward"], "flash_attn_func, window, softcap, sink: plan, forward, "
          "backward (got %s)" % kinds)
    check(close(out.detach(), ref_out.detach()), "flash_attn_func with masks and modifiers: O equals the reference's")
    check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
          "flash_attn_func with masks and modifiers: dQ, dK, dV equal the reference's")
    check(sink.grad is not None and torch.allclose(sink.grad.double(), ref_sink.grad, rtol=1e-5, atol=1e-6),
          "the learnable sink's gradient flows back through learnable_sink.float()")


# ---- 4, 5 -------------------------------------------------------------------------------------------

def test_refusal_and_determinism():
    b, s, h, d = 1, 4, 2, 8
    q, k, v = leaves((b, s, h, d), (b, s, h, d), (b, s, h, d), seed=2)
    LOG.clear()
    REFUSE[0] = "flashladder: refused for the test"
    try:
        flashladder.attention(q, k, v, causal=True)
        check(False, "a problem the backward refuses raises before the forward")
    except ValueError as e:
        check("refused for the test" in str(e) and "forward" not in [x[0] for x in LOG],
              "a problem the backward refuses raises before the forward launches")
    finally:
        REFUSE[0] = None

    LOG.clear()
    flashladder.flash_attn_func(q, k, v, causal=True, deterministic=True).sum().backward()
    check(LOG[0][1]["deterministic"] and LOG[-1][1]["deterministic"],
          "flash_attn_func(deterministic=True): planned and launched deterministic")
    torch.use_deterministic_algorithms(True)
    try:
        LOG.clear()
        flashladder.attention(q, k, v, causal=True).sum().backward()
        check(LOG[-1][0] == "backward" and LOG[-1][1]["deterministic"],
              "torch.use_deterministic_algorithms(True): the backward launches deterministic")
    finally:
        torch.use_deterministic_algorithms(False)

    LOG.clear()
    out = flashladder.attention(q, k, v, causal=True)
    (out[:, :1] * 2).sum().backward()  # a loss on part of O: dO has zeros, and still one backward
    kinds = [e[0] for e in LOG]
    check(kinds.count("forward") == 1 and kinds.count("backward") == 1,
          "a loss on part of O: one forward, one backward launch (got %s)" % kinds)
    dout = LOG[-1][1]["dout"]
    check(dout is not None and dout.shape == out.shape and math.isclose(float(dout.abs().sum()), 2.0 * h * d),
          "the backward's dO is O's gradient (no materialized gradient for the LSE beside it)")


# ---- 6 ----------------------------------------------------------------------------------------------

def test_custom_ops():
    attention_op, attention_mods_op = OPS
    b, sq, sk, hq, hk, d = 1, 6, 10, 4, 2, 8
    q, k, v = leaves((b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d), seed=3)
    dout = torch.randn(b, sq, hq, d, dtype=torch.float64)
    out, lse, o32 = attention_op(q, k, v, True, 0.0, 0, "", True)
    out.backward(dout)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    reference(*ref_leaves, True, 0.0)[0].backward(dout)
    check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)) and not lse.requires_grad,
          "flashladder::attention under autograd: the reference's gradients, the LSE not differentiable")

    for t in (q, k, v):
        t.grad = None
    sink = torch.randn(hq, dtype=torch.float64, requires_grad=True)
    out, lse, o32 = attention_mods_op(q, k, v, None, None, 0, 0, sink, None, True, 0.0, 4, -1, 3.0, 0, "", True,
                                      False)
    out.backward(dout)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_sink = sink.detach().clone().requires_grad_()
    reference(*ref_leaves, True, 0.0, (4, -1), 3.0, ref_sink)[0].backward(dout)
    check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)) and close(sink.grad, ref_sink.grad),
          "flashladder::attention_mods under autograd (window, softcap, sink): the reference's gradients")


# ---- 7 ----------------------------------------------------------------------------------------------

def test_realigned():
    b, s_, h, d = 1, 6, 2, 8
    wide = torch.randn(b, s_, h, 2 * d, dtype=torch.float64, requires_grad=True)
    flat = torch.randn(b * s_ * h * d + 1, dtype=torch.float16)
    misaligned = flat[1:].view(b, s_, h, d)  # 2 bytes past a 16-byte boundary
    plain = torch.randn(b, s_, h, d, dtype=torch.float64)
    check(_core.realigned(plain) is plain, "a tensor the rungs can read is not copied")
    for what, x in (("a strided head_dim", wide[..., ::2]), ("data off the 16-byte grid", misaligned)):
        c = _core.realigned(x)
        check(c is not x and c.is_contiguous() and c.data_ptr() % 16 == 0 and torch.equal(c, x),
              "%s: realigned gives a contiguous, aligned copy of the same values" % what)

    def layout_checked_key(q, k, v, causal=False, softmax_scale=None, *args, **kwargs):
        for name, t in (("q", q), ("k", k), ("v", v)):
            _core.check_layout_of(name, t)  # the real rule: LayoutError for what it cannot read
        return cpu_key(q, k, v, causal, softmax_scale)

    real = _core.check_qkv_cached
    _core.check_qkv_cached = layout_checked_key
    try:
        k, v = (torch.randn(b, s_, h, d, dtype=torch.float64) for _ in range(2))
        dout = torch.randn(b, s_, h, d, dtype=torch.float64)
        out = flashladder.attention(wide[..., ::2], k, v, causal=True)
        want, _ = reference(wide[..., ::2].detach().contiguous(), k, v, True, 0.0)
        check(torch.equal(out.detach(), want), "attention() on a strided head_dim: the copy's O")
        out.backward(dout)
        g = wide.grad
        check(g is not None and g[..., ::2].abs().sum() > 0 and g[..., 1::2].abs().sum() == 0,
              "attention() on a strided head_dim under autograd: the gradient reaches the original's columns")
        fa = flashladder.flash_attn_func(wide[..., ::2].detach(), k, v, causal=True, window_size=(2, 0))
        fa_want = flashladder.flash_attn_func(wide[..., ::2].detach().contiguous(), k, v, causal=True,
                                              window_size=(2, 0))
        check(torch.equal(fa, fa_want), "flash_attn_func with a window on a strided head_dim: the copy's O")
    finally:
        _core.check_qkv_cached = real


# ---- 8 ----------------------------------------------------------------------------------------------

def test_padded_head_dim():
    # (q's and k's head_dim, v's, the head_dim the launch runs at): one not a multiple of 8, and v
    # with its own head_dim below and above q's (MLA's prefill has 192 against 128).
    for d, dv, runs in ((12, 12, 16), (24, 16, 24), (16, 20, 24)):
        b, s_, hq, hk = 1, 7, 4, 2
        q, k, v = leaves((b, s_, hq, d), (b, s_, hk, d), (b, s_, hk, dv), seed=4)
        dout = torch.randn(b, s_, hq, dv, dtype=torch.float64)
        dims = "head_dims %d/%d" % (d, dv)
        for what, call, window in (("attention()", lambda *x: flashladder.attention(*x, causal=True), (-1, -1)),
                                   ("flash_attn_func, window (3, 0)",
                                    lambda *x: flashladder.flash_attn_func(*x, causal=True, window_size=(3, 0)),
                                    (3, -1))):
            for t in (q, k, v):
                t.grad = None
            LOG.clear()
            out = call(q, k, v)
            out.backward(dout)
            ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            ref_out, _ = reference(*ref_leaves, True, 0.0, window)  # scale 1/sqrt(d)
            ref_out.backward(dout)
            seen = [e[1]["head_dim"] for e in LOG if e[0] == "forward"]
            check(seen == [runs] and out.shape[-1] == dv,
                  "%s, %s: run at %d, O cut back to %d (got %s, %d)" % (what, dims, runs, dv, seen, out.shape[-1]))
            check(close(out.detach(), ref_out.detach()), "%s, %s: the reference's O (the scale of %d)"
                  % (what, dims, d))
            check(all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
                  "%s, %s: the reference's dQ, dK, dV" % (what, dims))


def test_varlen_checked_once():
    seen = []

    def forward(q, k, v, key, rung=None, variant="", o_fp32=False, mods=None, extras=None, checked=False,
                dropout_state=None, step=None, xextras=None, backward=False):
        seen.append(("forward", extras[0].data_ptr(), extras[1].data_ptr(), checked))
        out = torch.zeros_like(q)
        return out, torch.zeros(q.shape[1], q.shape[0], dtype=torch.float32), (out.clone() if o_fp32 else None)

    def backward(dout, q, k, v, out, lse, key, deterministic, rung=None, variant="", out_fp32=None, mods=None,
                 extras=None, checked=False, dropout_state=None, step=None, xextras=None):
        seen.append(("backward", extras[0].data_ptr(), extras[1].data_ptr(), checked))
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None

    def sanitized(cu_q, cu_k, varlen, q):
        seen.append(("sanitize",))
        return cu_q.clone(), cu_k.clone()

    host_checks = []
    real_check = _core.check_varlen

    def counted_check(*args, **kwargs):
        host_checks.append(1)
        return real_check(*args, **kwargs)

    saved = (_launch.forward, _launch.backward, _launch.sanitized_varlen, _launch.raise_metadata_errors,
             _core.check_varlen)
    _launch.forward, _launch.backward, _launch.sanitized_varlen = forward, backward, sanitized
    _launch.raise_metadata_errors = lambda device: None
    _core.check_varlen = counted_check
    try:
        cu = torch.tensor([0, 5, 12], dtype=torch.int32)
        q, k, v = leaves((12, 4, 16), (12, 2, 16), (12, 2, 16), seed=5)
        for step in range(2):
            seen.clear()
            out = flashladder.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)
            out.sum().backward()
            kinds = [e[0] for e in seen]
            check(kinds == ["sanitize", "forward", "backward"],
                  "varlen under autograd, step %d: one clamping launch, then the forward and the backward (%s)"
                  % (step, kinds))
            if kinds == ["sanitize", "forward", "backward"]:
                check(seen[1][1:3] == seen[2][1:3] and seen[1][1] != cu.data_ptr() and seen[1][3] and seen[2][3],
                      "varlen, step %d: both launches read the clamped cu_seqlens, marked checked" % step)
        check(len(host_checks) == 1, "varlen: check_varlen's host checks ran once for two calls of one signature "
              "(%d)" % len(host_checks))
    finally:
        (_launch.forward, _launch.backward, _launch.sanitized_varlen, _launch.raise_metadata_errors,
         _core.check_varlen) = saved


def test_varlen_checked_kept():
    launches = []

    def fake_sanitize(cu_q, cu_k, batch, total_q, total_k, max_q, max_k, out_q, out_k, stream, device):
        launches.append((cu_q, cu_k, max_q, max_k))

    record = [""]
    saved = (_ext.sanitize_varlen, _launch.stream, _ext.metadata_errors)
    _ext.sanitize_varlen, _launch.stream = fake_sanitize, (lambda t: 0)
    _ext.metadata_errors = lambda device, clear: record[0]
    _launch.VARLEN_CHECKED.clear()
    try:
        cu = torch.tensor([0, 5, 12], dtype=torch.int32)
        q = torch.zeros(12, 4, 16)
        varlen = (2, 12, 12, 7, 7)
        first = _launch.sanitized_varlen(cu, cu, varlen, q)
        again = _launch.sanitized_varlen(cu, cu, varlen, q)
        check(len(launches) == 1 and first[0] is again[0] and first[1] is again[1],
              "varlen: the same unchanged cu_seqlens pair is clamped once, its copies reused (%d launches)"
              % len(launches))
        cu.add_(0)  # a change in place: a new version
        _launch.sanitized_varlen(cu, cu, varlen, q)
        check(len(launches) == 2, "varlen: cu_seqlens changed in place are clamped again")
        other = cu.clone()
        _launch.sanitized_varlen(other, other, varlen, q)
        check(len(launches) == 3, "varlen: another pair of tensors is clamped")
        _launch.sanitized_varlen(other, other, (2, 12, 12, 8, 7), q)
        check(len(launches) == 4, "varlen: other maxima clamp again")
        record[0] = "cu_seqlens_q decreases"
        try:
            _launch.raise_metadata_errors(0)
            check(False, "varlen: a recorded violation is raised")
        except _core.MetadataError:
            pass
        record[0] = ""
        _launch.sanitized_varlen(other, other, varlen, q)
        check(len(launches) == 5, "varlen: after a violation is raised, the same pair is clamped (and checked) again")
    finally:
        _ext.sanitize_varlen, _launch.stream, _ext.metadata_errors = saved
        _launch.VARLEN_CHECKED.clear()


# ---- 10 ---------------------------------------------------------------------------------------------

def test_dropout():
    b, sq, sk, hq, hk, d = 1, 6, 9, 4, 2, 8
    p = 0.3
    q, k, v = leaves((b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d), seed=9)
    dout = torch.randn(b, sq, hq, d, dtype=torch.float64)

    def run(fn, seed):
        for t in (q, k, v):
            t.grad = None
        torch.manual_seed(seed)
        LOG.clear()
        out = fn()
        out.backward(dout)
        return out.detach(), [t.grad.clone() for t in (q, k, v)], list(LOG)

    out, grads, log = run(lambda: flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True), 5)
    kinds = [e[0] for e in log]
    check(kinds == ["plan", "forward", "backward"], "flash_attn_func(dropout_p=0.3): plan, forward, backward "
          "(got %s)" % kinds)
    fwd, bwd = log[1][1], log[2][1]
    state = fwd["state"]
    check(fwd["mods"] is not None and fwd["mods"].dropout == p,
          "dropout_p reaches the launch as Mods.dropout (rung 16's route)")
    check(state is not None and state.dtype == torch.int64 and tuple(state.shape) == (2,)
          and state.device == q.device, "the generator state is an int64 [2] tensor on q's device")
    check(bwd["state"] is state, "autograd saves the forward's state tensor and the backward gets that very tensor")
    keep = stand_in_mask(state, p, b, hq, sq, sk)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out, _ = reference(*ref_leaves, True, 0.0, keep=keep, dropout_p=p)
    ref_out.backward(dout)
    check(close(out, ref_out.detach()) and all(close(g, r.grad) for g, r in zip(grads, ref_leaves)),
          "with dropout: O and dQ, dK, dV equal the reference's under the launch's mask and 1 / (1 - p)")
    check(not close(out, reference(q.detach(), k.detach(), v.detach(), True, 0.0)[0]),
          "the mask changes O (the stand-in mask drops something)")

    out2, grads2, log2 = run(lambda: flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True), 5)
    check(torch.equal(log2[1][1]["state"], state) and torch.equal(out2, out)
          and all(torch.equal(a, c) for a, c in zip(grads, grads2)),
          "torch.manual_seed reproduces the state, O and the gradients")
    out3, _, log3 = run(lambda: flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True), 6)
    check(not torch.equal(log3[1][1]["state"], state), "another seed draws another state")
    torch.manual_seed(5)
    LOG.clear()
    flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True)
    flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True)
    states = [e[1]["state"] for e in LOG if e[0] == "forward"]
    check(len(states) == 2 and not torch.equal(states[0], states[1]), "each call draws its own state")

    qkv = torch.stack([q.detach(), torch.cat([k.detach()] * 2, dim=2)[:, :sq], torch.cat([v.detach()] * 2, dim=2)[:, :sq]],
                      dim=2)
    kv = torch.stack([k.detach(), v.detach()], dim=2)
    for name, fn in (("flash_attn_qkvpacked_func", lambda: flashladder.flash_attn_qkvpacked_func(qkv, 0.2)),
                     ("flash_attn_kvpacked_func", lambda: flashladder.flash_attn_kvpacked_func(q.detach(), kv, 0.2))):
        LOG.clear()
        fn()
        fw = [e[1] for e in LOG if e[0] == "forward"]
        check(len(fw) == 1 and fw[0]["mods"] is not None and fw[0]["mods"].dropout == 0.2
              and fw[0]["state"] is not None, name + ": dropout_p reaches the launch with a state")

    LOG.clear()
    _, lse, s_dmask = flashladder.flash_attn_func(q.detach(), k.detach(), v.detach(), dropout_p=p, causal=True,
                                                  return_attn_probs=True)
    state = [e[1]["state"] for e in LOG if e[0] == "forward"][0]
    masks = [e[1]["state"] for e in LOG if e[0] == "mask"]
    keep = stand_in_mask(state, p, b, hq, sq, sk)
    seen = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
    check(len(masks) == 1 and masks[0] is state and tuple(s_dmask.shape) == (b, hq, 128, 128),
          "return_attn_probs: S_dmask [batch, heads, seqlens rounded to 128] from the forward's state")
    _, ref_lse = reference(q.detach(), k.detach(), v.detach(), True, 0.0)
    check(bool(((s_dmask[..., :sq, :sk] >= 0) == (keep | ~seen)).all()) and
          bool((s_dmask[..., sq:, :] == 0).all()) and bool((s_dmask[..., :, sk:] == 0).all()),
          "S_dmask >= 0 is the keep mask where a key is seen; the padding is 0")
    scores = (torch.einsum("bqhd,bkhd->bhqk", q.detach(), k.detach().repeat_interleave(hq // hk, 2))
              * d ** -0.5).masked_fill(~seen, float("-inf"))
    unnorm = torch.exp(scores - scores.amax(-1, keepdim=True))
    check(torch.allclose(s_dmask[..., :sq, :sk].abs(), unnorm),
          "|S_dmask| is exp(s - m), m the row's largest seen score (FlashAttention's unnormalized P, one block), "
          "0 where unseen")
    check(torch.allclose(s_dmask[..., :sq, :sk].abs() * torch.exp(scores.amax(-1, keepdim=True) - ref_lse[..., None]),
                         torch.exp(scores - ref_lse[..., None])),
          "normalized by exp(m - LSE) (FlashAttention's normalize_flash_attn_S with one block), |S_dmask| is P")

    counted = [0]
    real_state = _core.dropout_state

    def counting_state(*args, **kwargs):
        counted[0] += 1
        return real_state(*args, **kwargs)

    _core.dropout_state = counting_state
    try:
        flashladder.flash_attn_func(q, k, v, causal=True, window_size=(2, 0))
        flashladder.flash_attn_func(q, k, v, dropout_p=0.0, causal=True)
        check(counted[0] == 0, "dropout_p = 0: no generator state drawn (the calls without dropout are unchanged)")
    finally:
        _core.dropout_state = real_state

    # ALiBi with dropout (rung 16 compiles the two together): the call reaches the launches with the
    # slopes and one state, O and the gradients are the reference's under ALiBi's bias and the
    # mask, and S_dmask's magnitudes are exp(s - m) of the biased scores.
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float32)  # [heads_q]
    out, grads, log = run(lambda: flashladder.flash_attn_func(q, k, v, dropout_p=p, causal=True,
                                                              alibi_slopes=slopes), 5)
    kinds = [e[0] for e in log]
    fwd = [e[1] for e in log if e[0] == "forward"]
    bwd = [e[1] for e in log if e[0] == "backward"]
    check(kinds == ["plan", "forward", "backward"] and fwd[0]["mods"].alibi == 2 and fwd[0]["mods"].dropout == p
          and torch.equal(fwd[0]["slopes"], slopes) and torch.equal(bwd[0]["slopes"], slopes)
          and fwd[0]["state"] is not None and bwd[0]["state"] is fwd[0]["state"],
          "dropout_p with alibi_slopes: plan, forward, backward, the slopes and one state in both launches "
          "(got %s)" % kinds)
    keep = stand_in_mask(fwd[0]["state"], p, b, hq, sq, sk)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out, _ = reference(*ref_leaves, True, 0.0, keep=keep, dropout_p=p, slopes=slopes)
    ref_out.backward(dout)
    check(close(out, ref_out.detach()) and all(close(g, r.grad) for g, r in zip(grads, ref_leaves))
          and not close(out, reference(*(t.detach() for t in (q, k, v)), True, 0.0, keep=keep, dropout_p=p)[0]),
          "with dropout and ALiBi: O and dQ, dK, dV equal the reference's under the bias and the mask (and the "
          "bias changes O)")
    LOG.clear()
    _, lse, s_dmask = flashladder.flash_attn_func(q.detach(), k.detach(), v.detach(), dropout_p=p, causal=True,
                                                  alibi_slopes=slopes, return_attn_probs=True)
    state = [e[1]["state"] for e in LOG if e[0] == "forward"][0]
    keep = stand_in_mask(state, p, b, hq, sq, sk)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    biased = (torch.einsum("bqhd,bkhd->bhqk", q.detach(), k.detach().repeat_interleave(hq // hk, 2)) * d ** -0.5
              - slopes.double().reshape(1, hq, 1, 1) * (i - j).abs()).masked_fill(~seen, float("-inf"))
    m = biased.amax(-1, keepdim=True)
    check(bool(((s_dmask[..., :sq, :sk] >= 0) == (keep | ~seen)).all())
          and torch.allclose(s_dmask[..., :sq, :sk].abs(), torch.exp(biased - m))
          and torch.allclose(s_dmask[..., :sq, :sk].abs() * torch.exp(m - lse[..., None]),
                             torch.exp(biased - lse[..., None])),
          "return_attn_probs with ALiBi: S_dmask's sign the mask, its magnitude exp(s - m) of the biased scores, "
          "normalized by exp(m - LSE) the biased P")

    for what, kwargs, error in (("softcap", dict(softcap=5.0), NotImplementedError),
                                ("dropout_p", dict(dropout_p=1.0), ValueError),
                                ("dropout_p", dict(dropout_p=-0.1), ValueError)):
        LOG.clear()
        kwargs.setdefault("dropout_p", 0.1)
        try:
            flashladder.flash_attn_func(q, k, v, **kwargs)
            check(False, "dropout with %s refused" % what)
        except error as e:
            check(what in str(e) and "\n" not in str(e) and not LOG,
                  "dropout refusal names %s in one line before any launch: %s" % (what, e))

    # The custom op (torch.compile's path) with dropout: the state rides along to the backward.
    attention_op, attention_mods_op = OPS
    for t in (q, k, v):
        t.grad = None
    state = _core.dropout_state(q.device)
    LOG.clear()
    out, _, _ = attention_mods_op(q, k, v, None, None, 0, 0, None, None, True, 0.0, -1, -1, 0.0, 0, "", True, False,
                                  p, state)
    out.backward(dout)
    keep = stand_in_mask(state, p, b, hq, sq, sk)
    ref_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    reference(*ref_leaves, True, 0.0, keep=keep, dropout_p=p)[0].backward(dout)
    bw = [e[1] for e in LOG if e[0] == "backward"]
    check(len(bw) == 1 and bw[0]["state"] is state and all(close(t.grad, r.grad) for t, r in zip((q, k, v), ref_leaves)),
          "flashladder::attention_mods with dropout: the state reaches the backward, the reference's gradients")


def test_window_as_tensor():
    """FlashAttention's own tests draw window_size with torch.randint: a tensor of two ints."""
    b, s_, h, d = 1, 9, 2, 16
    q, k, v = leaves((b, s_, h, d), (b, s_, h, d), (b, s_, h, d), seed=6)
    LOG.clear()
    out = flashladder.flash_attn_func(q, k, v, causal=True, window_size=torch.tensor([3, 0]))
    ref, _ = reference(*(t.detach() for t in (q, k, v)), True, 0.0, (3, -1))
    check(close(out.detach(), ref), "window_size as a tensor of two ints: the window's O (%s)"
          % [e[0] for e in LOG])


def test_paged_varlen():
    """flash_attn_varlen_func with a block_table: the pools' pages gathered into packed keys at
    cu_seqlens_k's places (the table checked by one clamping launch, stood in here), then the
    packed call: O and the pools' gradients equal those of the packed keys themselves."""
    b, hq, hk, d, page = 3, 4, 2, 16, 4
    lens_k = [5, 0, 11]
    cu_k = torch.tensor([0, 5, 5, 16], dtype=torch.int32)
    cu_q = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    max_k, columns, pool_pages = 11, 3, 12
    g = torch.Generator().manual_seed(8)
    table = torch.randperm(pool_pages, generator=g)[:b * columns].view(b, columns).to(torch.int32)
    k_pool = torch.randn(pool_pages, page, hk, d, dtype=torch.float64, generator=g).requires_grad_()
    v_pool = torch.randn(pool_pages, page, hk, d, dtype=torch.float64, generator=g).requires_grad_()
    q = torch.randn(9, hq, d, dtype=torch.float64, generator=g).requires_grad_()
    calls = []

    def sanitized_table(lengths, block_table, page_, pool_pages_, q_):
        calls.append((lengths.tolist(), page_, pool_pages_))
        return block_table.clone()

    saved = (_launch.sanitized_table, _launch.raise_metadata_errors)
    _launch.sanitized_table, _launch.raise_metadata_errors = sanitized_table, (lambda device: None)
    try:
        kp, vp = _flash._paged_keys(q, k_pool, v_pool, cu_k, max_k, table)
    finally:
        _launch.sanitized_table, _launch.raise_metadata_errors = saved
    check(calls == [(lens_k, page, pool_pages)], "paged varlen: one table check with each sequence's key count (%s)"
          % calls)
    check(tuple(kp.shape) == (b * max_k, hk, d), "paged varlen: batch x max_seqlen_k packed rows (%s)"
          % (tuple(kp.shape),))
    ok = True
    for n in range(b):
        for j in range(lens_k[n]):
            src = k_pool[int(table[n, j // page]), j % page]
            ok &= torch.equal(kp[int(cu_k[n]) + j], src) and torch.equal(vp[int(cu_k[n]) + j],
                                                                            v_pool[int(table[n, j // page]), j % page])
    check(ok, "paged varlen: key j of sequence b is slot j % page of page block_table[b, j // page], at "
          "cu_seqlens_k[b] + j")
    (kp[:16].sum() + 2 * vp[:16].sum()).backward()
    used = torch.zeros(pool_pages, page, dtype=torch.bool)
    for n in range(b):
        for j in range(lens_k[n]):
            used[int(table[n, j // page]), j % page] = True
    check(bool((k_pool.grad[used] == 1).all()) and bool((v_pool.grad[used] == 2).all()),
          "paged varlen: the gradient reaches each used slot of the pools")
    bad = torch.tensor([0, 5, 5, 16], dtype=torch.int64)
    try:
        _flash._paged_keys(q, k_pool, v_pool, bad, max_k, table)
        check(False, "paged varlen: an int64 cu_seqlens_k refused")
    except ValueError as e:
        check("cu_seqlens_k" in str(e), "paged varlen: an int64 cu_seqlens_k refused naming it (%s)" % e)
    try:
        _flash._paged_keys(q, k_pool, v_pool, cu_k, max_k, table[0])
        check(False, "paged varlen: a 1-D block_table refused")
    except ValueError as e:
        check("block_table" in str(e), "paged varlen: a 1-D block_table refused naming it (%s)" % e)


def main():
    test_paged_varlen()
    test_window_as_tensor()
    test_varlen_checked_once()
    test_varlen_checked_kept()
    test_dropout()
    test_realigned()
    test_padded_head_dim()
    test_attention()
    test_flash_mods()
    test_refusal_and_determinism()
    test_custom_ops()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
