#!/usr/bin/env python3
"""The prepared launches' wiring on the CPU: what the package hands the extension's prepared
launches, and when it falls back to the checked binding.

    PYTHONPATH=build/ci/python python3 tests/python/test_prepared_cpu.py

The extension's classes (_ext.PreparedForward, _ext.PreparedBackward, _ext.forward, _ext.backward)
and the plans (_core.plan_forward, plan_backward) are replaced by recorders; the stream getters by
constants. The checks:

1. The plain autograd step (_launch.Prepared, what attention() keeps per signature after its first,
   checked call): the forward launch gets q, k, v, O, the LSE and the fp32 O with q's signature's
   strides, O dense; the backward is prepared once per deterministic flag with the strides q, k, v,
   O, dO = O, dQ = q, dK = k, dV = v; dO is made contiguous when it is not, and copied when it is off
   the 16-byte grid; a launch that refuses its pointers returns None (the caller's checked path).
2. attention() under autograd: the first call is checked (no Prepared used) and keeps one; the
   second takes it (_PreparedAttention), and its backward launches the prepared backward once.
3. A masked, modified or packed step (_ops.Step): _launch.forward and _launch.backward with the
   Step launch its prepared launches (made once per device, flag and extras' ints, with mods), with
   the extras' pointers, the ints, the dropout state, the sinks' gradient; a launch that does not
   fit (False) falls back to the checked binding with the same pointers; a constructor that refuses
   is not asked again, and every call then takes the checked binding.

Exits 77 (ctest: skipped) without PyTorch.
"""

import sys
import types

SKIP = 77

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)

import flashladder  # noqa: E402
from flashladder import _core, _ext, _launch, _ops  # noqa: E402

from cpu_stubs import check, exit_status  # noqa: E402  tests/python/cpu_stubs.py

LOG = []  # (what, args)


class FakePrepared:
    """A stand-in for _ext.PreparedForward / PreparedBackward: its construction (NAME) and each
    launch are logged; a class with refuse set raises as a refusing constructor does, and an
    instance with fit False launches nothing."""
    refuse = False
    kept = False  # the entry's Rung.workspace_kept
    NAME = PREFIX = ""

    def __init__(self, *args):
        if type(self).refuse:
            raise ValueError("refused")
        LOG.append((self.NAME, args))
        self.args, self.fit = args, True
        self.writes_o_fp32 = True
        self.workspace_bytes = args[5]
        self.workspace_kept = type(self).kept

    def _launch(self, what, ptrs):
        LOG.append((what, ptrs))
        return self.fit

    def launch_mods(self, *ptrs):
        return self._launch(self.PREFIX + "launch_mods", ptrs)


class FakeForward(FakePrepared):
    NAME, PREFIX = "PreparedForward", "fwd."

    def launch_o32(self, *ptrs):
        return self._launch("launch_o32", ptrs)

    def launch(self, *ptrs):
        return self._launch("fwd.launch", ptrs)


class FakeBackward(FakePrepared):
    NAME, PREFIX = "PreparedBackward", "bwd."

    def launch(self, *ptrs):
        return self._launch("bwd.launch", ptrs)


READS_O32 = [True]  # the backward plan's reads_o32 (its D reads the fp32 O: rows past kO16DeltaKeys)


def plan(kind):
    def make(rung, variant, key, device, flag, mods):
        LOG.append(("plan_" + kind, (flag, mods is not None)))
        return types.SimpleNamespace(number=15 if kind == "forward" else 14, variant="", problem="P" + kind,
                                     workspace_bytes=64, writes_o_fp32=True, reads_o32=READS_O32[0],
                                     workspace_kept=FakePrepared.kept)
    return make


def last(what):
    found = [a for w, a in LOG if w == what]
    return found[-1] if found else None


def count(what):
    return sum(1 for w, _ in LOG if w == what)


_ext.PreparedForward, _ext.PreparedBackward = FakeForward, FakeBackward
_ext.forward = lambda *a, **kw: LOG.append(("ext.forward", (a, kw)))
_ext.backward = lambda *a, **kw: LOG.append(("ext.backward", (a, kw)))
_core.plan_forward, _core.plan_backward = plan("forward"), plan("backward")
_launch._raw_stream = lambda index: 99
_launch.stream = lambda t: 99

b, sq, sk, hq, hkv, d = 2, 5, 7, 4, 2, 8
KEY = (b, sq, sk, hq, hkv, d, "fp16", True, 0.0)


def leaves(transposed=False):
    if transposed:  # transformers' layout: [b, h, s, d] viewed as [b, s, h, d]
        return [torch.randn(b, h, s, d, dtype=torch.float16).transpose(1, 2)
                for s, h in ((sq, hq), (sk, hkv), (sk, hkv))]
    return [torch.randn(b, s, h, d, dtype=torch.float16) for s, h in ((sq, hq), (sk, hkv), (sk, hkv))]


# ---- 1. _launch.Prepared --------------------------------------------------------------------------
for transposed in (False, True):
    LOG.clear()
    q, k, v = leaves(transposed)
    p = _launch.Prepared(q, k, v, KEY, None, "")
    made = last("PreparedForward")
    check(made is not None and made[3] == (q.stride(), k.stride(), v.stride(), p.o_stride) and made[5] == 64,
          "Prepared (%s): the forward prepared with q's, k's, v's and a dense O's strides, the plan's workspace"
          % ("transposed" if transposed else "dense"))
    check(p.o_stride == torch.empty(b, sq, hq, d).stride(), "Prepared: O dense in q's shape")
    out, lse, o32 = p.launch_forward(q, k, v)
    ptrs = last("launch_o32")
    check(ptrs[:6] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), o32.data_ptr())
          and ptrs[7] == 99 and out.shape == q.shape and out.is_contiguous() and lse.shape == (b, hq, sq)
          and o32.dtype == torch.float32 and o32.shape == out.shape,
          "Prepared.launch_forward: q, k, v, O, the LSE, the fp32 O, the workspace and the stream")
    dout = torch.randn(b, hq, sq, d, dtype=torch.float16).transpose(1, 2)  # not contiguous
    grads = p.launch_backward(dout, q, k, v, out, lse, o32, False)
    made = last("PreparedBackward")
    s = (q.stride(), k.stride(), v.stride(), p.o_stride)
    check(made is not None and made[3] == s + (p.o_stride,) + s[:3] and made[6] is False,
          "Prepared.launch_backward: prepared with q, k, v, O, dO = O, dQ = q, dK = k, dV = v's strides")
    bp = last("bwd.launch")
    check(bp[5] != dout.data_ptr() and grads[0].stride() == q.stride() and grads[1].shape == k.shape
          and bp[6:9] == tuple(g.data_ptr() for g in grads) and bp[9] == o32.data_ptr(),
          "Prepared.launch_backward: a dO that is not contiguous copied; dQ, dK, dV with q's, k's, v's strides")
    p.launch_backward(dout.contiguous(), q, k, v, out, lse, o32, False)
    p.launch_backward(dout.contiguous(), q, k, v, out, lse, o32, True)
    check(count("PreparedBackward") == 2, "Prepared: one prepared backward per deterministic flag (got %d)"
          % count("PreparedBackward"))
    odd = torch.randn(b * sq * hq * d + 1, dtype=torch.float16)[1:].view(b, sq, hq, d)
    p.launch_backward(odd, q, k, v, out, lse, o32, False)
    check(last("bwd.launch")[5] != odd.data_ptr() and last("bwd.launch")[5] % 16 == 0,
          "Prepared.launch_backward: a dO off the 16-byte grid copied to an aligned one")
    p.bwd[False].fit = False
    check(p.launch_backward(dout, q, k, v, out, lse, o32, False) is None,
          "Prepared.launch_backward: a launch that refuses its pointers gives None (the checked path runs)")

# Short rows (the backward plan's D from the 16-bit O): the forward's plain launch, no fp32 O, and the
# backward's pointer to it 0.
LOG.clear()
READS_O32[0] = False
q, k, v = leaves()
p = _launch.Prepared(q, k, v, KEY, None, "")
out, lse, o32 = p.launch_forward(q, k, v)
ptrs = last("fwd.launch")
check(o32 is None and count("launch_o32") == 0 and ptrs is not None
      and ptrs[:5] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()),
      "Prepared.launch_forward without reads_o32: launch() with q, k, v, O and the LSE, no fp32 O")
p.launch_backward(torch.randn(b, sq, hq, d, dtype=torch.float16), q, k, v, out, lse, o32, False)
check(last("bwd.launch")[9] == 0, "Prepared.launch_backward without the fp32 O: its pointer 0 (D from the 16-bit O)")
READS_O32[0] = True

# A workspace the entry keeps (Rung.workspace_kept: rung 15's counters, rung 16's lists): one
# buffer per stream. Its first call takes it fresh and passes workspace_kept False, so the launch
# zeroes it as a per-call launch does (no PyTorch fill); every later call on that stream passes the
# same buffer with workspace_kept True. During a CUDA graph's capture a buffer of the call's own,
# not kept; a refused launch (an unaligned pointer) keeps nothing.
LOG.clear()
FakeForward.kept = True
q, k, v = leaves()
p = _launch.Prepared(q, k, v, KEY, None, "")
p.launch_forward(q, k, v)
first = last("launch_o32")
p.launch_forward(q, k, v)
second = last("launch_o32")
p.launch_forward(q, k, v)
third = last("launch_o32")
check(first[6] == second[6] == third[6] and first[6] != 0 and first[8] is False and second[8] is True
      and third[8] is True and len(p.kept.by_stream) == 1 and p.kept.by_stream[99].data_ptr() == first[6],
      "Prepared with a kept workspace: one buffer on every call of one stream, workspace_kept False on "
      "the first (its launch zeroes it), True after")
capturing = _launch.capturing_now
_launch.capturing_now = lambda: True
p.launch_forward(q, k, v)
captured = last("launch_o32")
_launch.capturing_now = capturing
check(captured[6] != first[6] and captured[8] is False and len(p.kept.by_stream) == 1,
      "Prepared with a kept workspace, under a graph's capture: a buffer of the call's own, workspace_kept False, "
      "not kept")
p = _launch.Prepared(q, k, v, KEY, None, "")
p.fwd.fit = False
check(p.launch_forward(q, k, v) is None and not p.kept.by_stream,
      "Prepared with a kept workspace: a refused launch keeps no buffer (nothing zeroed it)")
p.fwd.fit = True
p.launch_forward(q, k, v)
check(last("launch_o32")[8] is False and len(p.kept.by_stream) == 1,
      "Prepared with a kept workspace: the launch after a refused one takes a fresh buffer, workspace_kept False")
FakeForward.kept = False
p = _launch.Prepared(q, k, v, KEY, None, "")
p.launch_forward(q, k, v)
check(p.kept is None and last("launch_o32")[8] is False,
      "Prepared without a kept workspace: a buffer per call, workspace_kept False")

# ---- 2. attention() under autograd: checked first, prepared after ----------------------------------
LOG.clear()
_launch.TRAIN.clear()
calls = []
real_autograd = _ops.attention_autograd


def checked_autograd(q, k, v, key, number, variant):  # the first call's checked launches, stood in
    calls.append("checked")
    out = torch.zeros_like(q)
    return out + 0 * (q.sum() + k.sum() + v.sum()), torch.zeros(b, hq, sq)


_ops.attention_autograd = checked_autograd
_core.check_qkv_realigned = lambda q, k, v, *a, **kw: (KEY, (q, k, v))
q, k, v = (t.requires_grad_() for t in leaves())
flashladder.attention(q, k, v, causal=True)
check(calls == ["checked"] and len(_launch.TRAIN) == 1, "attention(): the first call checked, a Prepared kept")
out = flashladder.attention(q, k, v, causal=True)
check(calls == ["checked"] and count("launch_o32") == 1, "attention(): the second call takes the prepared forward")
out.backward(torch.ones_like(out))
check(count("bwd.launch") == 1 and q.grad is not None and q.grad.shape == q.shape and v.grad.shape == v.shape,
      "attention(): the second call's backward is the prepared backward, gradients of the leaves' shapes")
_ops.attention_autograd = real_autograd

# ---- 3. _ops.Step's prepared launches ----------------------------------------------------------------
for refuse in (False, True):
    LOG.clear()
    FakeForward.refuse = FakeBackward.refuse = refuse
    q, k, v = leaves()
    mods = types.SimpleNamespace(head_dim_v=0, sinks=True, varlen=None, dropout=0.0)
    step = _ops.Step(KEY, mods, -1, -1, 0.0, q, k, v)
    cu_q = torch.tensor([0, 3, 5], dtype=torch.int32)
    sinks = torch.zeros(hq)
    slopes = torch.ones(b, hq)
    state = torch.zeros(2, dtype=torch.int64)
    extras = (cu_q, cu_q, sinks, slopes)
    xextras = _launch._extras(extras)
    what = "Step (constructors %s)" % ("refusing" if refuse else "preparing")
    for _ in range(2):
        out, lse, o32 = _launch.forward(q, k, v, KEY, o_fp32=True, mods=mods, extras=extras, checked=True,
                                        dropout_state=state, step=step, xextras=xextras)
    check(count("PreparedForward") == (0 if refuse else 1),
          "%s: the forward prepared once (or, refused, never asked again)" % what)
    if not refuse:
        made = last("PreparedForward")
        check(made[3] == step.strides[:4] and made[6] is True and made[7] == xextras[1],
              "%s: the forward prepared with the Step's strides, mods and the extras' ints" % what)
        ptrs = last("fwd.launch_mods")
        check(ptrs[:6] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), o32.data_ptr())
              and ptrs[6] == xextras[0] and ptrs[7] == xextras[1] and ptrs[8] == state.data_ptr()
              and ptrs[10] == 99 and count("ext.forward") == 0,
              "%s: launch_mods gets the pointers, the extras, their ints and the dropout state" % what)
        step.prepared_forward(None, True, xextras[1]).fit = False
        _launch.forward(q, k, v, KEY, o_fp32=True, mods=mods, extras=extras, checked=True, dropout_state=state,
                        step=step, xextras=xextras)
    (args, kw) = last("ext.forward")
    check(count("ext.forward") == (2 if refuse else 1) and args[4] == step.strides[:4] and kw["extras"] == xextras[0]
          and kw["dropout_state"] == state.data_ptr() and kw["planned"] is True,
          "%s: a launch that does not fit, or no prepared launch, takes the checked binding" % what)
    dout = torch.randn_like(out)
    for _ in range(2):
        dq, dk, dv, dsinks = _launch.backward(dout, q, k, v, out, lse, KEY, False, None, "", o32, mods=mods,
                                              extras=extras, checked=True, dropout_state=state, step=step,
                                              xextras=xextras)
    check(count("PreparedBackward") == (0 if refuse else 1), "%s: the backward prepared once (or, refused, never asked again)" % what)
    if not refuse:
        made = last("PreparedBackward")
        check(made[3] == step.strides and made[6] is False and made[7] is True and made[8] == xextras[1],
              "%s: the backward prepared with the Step's strides, the flag, mods and the ints" % what)
        ptrs = last("bwd.launch_mods")
        check(ptrs[:9] == tuple(t.data_ptr() for t in (q, k, v, out, lse, dout, dq, dk, dv))
              and ptrs[9] == o32.data_ptr() and ptrs[10] == xextras[0] and ptrs[11] == xextras[1]
              and ptrs[12] == dsinks.data_ptr() and ptrs[13] == state.data_ptr() and count("ext.backward") == 0,
              "%s: launch_mods gets the pointers, the extras, the sinks' gradient and the dropout state" % what)
    else:
        check(count("ext.backward") == 2, "%s: every backward takes the checked binding" % what)
FakeForward.refuse = FakeBackward.refuse = False

sys.exit(exit_status())
