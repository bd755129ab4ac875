#!/usr/bin/env python3
"""The Python package's CPU side: no GPU and no PyTorch needed (ctest: cpu_python).

    PYTHONPATH=build/ci/python python3 tests/python/test_cpu.py [--tour build/ci/bin/tour]

1. `import flashladder` works without PyTorch and imports none.
2. rungs() lists the rungs this build registered (the same labels as `tour --registry-json`), each
   with its summary, head_dims and flags.
3. The device query reports "no usable CUDA device" cleanly on a machine without one.
4. supports(): each rung's one-line reason on hand-built devices (an H100, an A100, a GPU with
   little shared memory): head_dim 40 for rung 10, GQA 3:2, rung 11's head_dims, the arch, and a
   V head_dim of its own (Problem.head_dim_v, --dim-v), which every entry but rung 16's (its
   backward up to Q's head_dim) and rung 17's refuses.
5. The layout rule (fl::tensor_layout_reason through the extension): head_dim contiguous, strides
   multiples of 8 elements, 16-byte aligned data; a dimension of size 1 may have any stride.
6. Every input check of flashladder.attention on small stand-in tensors (shape, stride(), dtype,
   device, data_ptr()): not a tensor, not CUDA, two devices, dtype, rank, shapes, GQA, head_dim,
   scale, layout, each with its message; and the default rung's choice on hand-built devices.
7. The route of rung=None (route_forward): the decode rung for decode steps and a few queries,
   the prefill rung otherwise and under autograd, on a hand-built H100 and A100.
8. The transformers function's allow-list on stand-in tensors: T5's position_bias, Gemma 2's
   softcap, gpt-oss's sinks, packed-sequence metadata, a sliding window that masks, a dropout
   outside [0, 1), a mask, attention weights and unknown arguments are refused naming the
   argument; a dropout in train mode (0.1) passes the checks to the launch.
9. flash_attn_with_kvcache's rotary embedding and cache_batch_idx, where PyTorch is installed
   (skipped otherwise): _apply_rotary against the rotation in fp64 (interleaved pairs as complex
   products, GPT-NeoX halves by rotate_half), fp16 and bf16 within one rounding, rotary_dim <
   head_dim, positions per sequence; each refusal before the cache is written; and with the launch
   stood in, the rotated keys appended in rows cache_batch_idx, q's positions (causal or not) and
   the route (the cache read as pages, or its rows copied).
10. The serving fast path's one binding call (PreparedCacheCall stood in): prepared once per
   signature, each step's pointers in order, the long way when a launch says False.
11. Every name a package module's functions read as a global is defined in that module or is a
   builtin (symtable, no import of the module): a path the CPU tests do not run (a GPU-only
   branch) cannot fail on a missing import.
12. flash_mla_with_kvcache (rung 17, MLA's latent cache): the Problem's v_in_k and head_dim_v, the
   route to rung 17 or its one-line refusal, every argument check on stand-in tensors, the
   extension's refusal of a v that is not k's first columns; where PyTorch is installed, the call
   with the extension stood in (v handed over as the cache's memory, O of 512 columns, the lengths
   and table through the metadata check, FlashMLA's scheduling arguments in both forms).
"""

import argparse
import builtins
import json
import math
import os
import symtable
import subprocess
import sys
import unittest

import flashladder
from flashladder import _core, _ext

# Whether `import flashladder` (above, before any test) brought PyTorch in: a later test may
# import it itself where it is installed.
TORCH_AT_IMPORT = "torch" in sys.modules

TOUR = None  # --tour: the built tour, whose registry the package must list


class Device:
    """A stand-in for torch.device."""

    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class DType:
    """A stand-in for torch.dtype: only its name (str) is read."""

    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return self.name == other.name

    def __hash__(self):
        return hash(self.name)

    def __str__(self):
        return self.name


FP16, BF16, FP32 = DType("torch.float16"), DType("torch.bfloat16"), DType("torch.float32")
CUDA0 = Device("cuda", 0)


class Tensor:
    """A stand-in tensor: shape, strides (dense unless given), dtype, device, data pointer."""

    def __init__(self, shape, dtype=FP16, device=CUDA0, strides=None, ptr=1 << 20):
        self.shape = tuple(shape)
        self.dtype, self.device, self.ptr = dtype, device, ptr
        if strides is None:
            strides, n = [], 1
            for s in reversed(self.shape):
                strides.insert(0, n)
                n *= s
        self.strides = tuple(strides)

    def stride(self):
        return self.strides

    def data_ptr(self):
        return self.ptr

    def dim(self):
        return len(self.shape)

    def unsqueeze(self, dim):
        assert dim == 0
        n = 1
        for x in self.shape:
            n *= x
        return Tensor((1,) + self.shape, self.dtype, self.device, (n,) + self.strides, self.ptr)


def qkv(b=2, sq=128, sk=128, hq=8, hkv=8, d=64, **kw):
    return Tensor((b, sq, hq, d), **kw), Tensor((b, sk, hkv, d), **kw), Tensor((b, sk, hkv, d), **kw)


def fake_device(cc, smem_optin, name="fake"):
    d = flashladder.DeviceInfo()
    d.name = name
    d.cc_major, d.cc_minor = divmod(cc, 10)
    d.sm_count = 132
    d.smem_per_block_optin = smem_optin
    d.smem_per_sm = smem_optin + 1024
    return d


H100 = fake_device(90, 232448, "fake H100")
A100 = fake_device(80, 166912, "fake A100")
SMALL = fake_device(86, 101376, "fake sm_86")


def built(number):
    return any(r.number == number for r in flashladder.rungs())


class Import(unittest.TestCase):
    def test_no_torch(self):
        self.assertFalse(TORCH_AT_IMPORT, "import flashladder must not import torch")
        self.assertTrue(callable(flashladder.attention))
        self.assertIn("head_dim", flashladder.__doc__)

    def test_attention_without_torch(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            with self.assertRaises(ImportError):
                flashladder.attention(*qkv())
        else:
            self.skipTest("PyTorch is installed here")


class Linkage(unittest.TestCase):
    def test_exports_only_its_init(self):
        """The module's only strong export is PyInit__ext: the static libraries linked into it
        (the registry, and libstdc++ where the toolchain links it statically) stay private, so
        that PyTorch's libstdc++ in the same process can neither interpose on them nor be
        interposed (on a GPU host whose GCC links libstdc++ statically, the two copies' iostream
        state mixed and Problem::describe crashed). Weak template instantiations (std::vector's
        destructor, say) may remain: the module binds its own references (-Bsymbolic)."""
        import shutil
        import subprocess

        readelf = shutil.which("readelf")
        if not readelf:
            self.skipTest("no readelf")
        out = subprocess.run([readelf, "--dyn-syms", "-W", flashladder._ext.__file__],
                             capture_output=True, text=True, check=True).stdout
        strong = set()
        for line in out.splitlines():
            f = line.split()
            # Num: Value Size Type Bind Vis Ndx Name
            if len(f) >= 8 and f[4] in ("GLOBAL", "UNIQUE") and f[6] != "UND":
                strong.add(f[7].split("@")[0])
        self.assertEqual(strong, {"PyInit__ext"})
        dynamic = subprocess.run([readelf, "-d", "-W", flashladder._ext.__file__],
                                 capture_output=True, text=True, check=True).stdout
        self.assertIn("SYMBOLIC", dynamic)


class Registry(unittest.TestCase):
    def test_rungs(self):
        mains = flashladder.rungs()
        self.assertGreater(len(mains), 0)
        self.assertEqual([r.number for r in mains], sorted(r.number for r in mains))
        for r in mains:
            self.assertEqual(r.variant, "")
            self.assertTrue(r.summary, r.label)
            self.assertTrue(r.label.startswith("%02d_%s" % (r.number, r.name)))
            self.assertIsInstance(r.head_dims, tuple)
            self.assertTrue(set(r.dtypes) <= {"fp16", "bf16"} and r.dtypes, r.label)
        self.assertEqual(mains[0].label, "01_naive")  # the baseline is always built
        every = flashladder.rungs(variants=True)
        self.assertGreaterEqual(len(every), len(mains))
        self.assertTrue(all(r in every for r in mains))

    def test_flags(self):
        if built(11):
            r = flashladder.find_rung(11)
            self.assertTrue(r.backward)
            self.assertEqual(r.forward_rung, 6)
            self.assertEqual(r.head_dims, (64, 128))
        if built(8):
            self.assertTrue(flashladder.find_rung(8).decode)
        self.assertFalse(flashladder.find_rung(1).backward)

    def test_unknown_rung(self):
        with self.assertRaisesRegex(ValueError, "no rung 99 in this build"):
            flashladder.find_rung(99)
        with self.assertRaisesRegex(ValueError, "no rung 99"):
            _ext.supports(99, "", _core.make_problem(1, 8, 8, 1, 1, 64), H100)

    def test_same_as_tour(self):
        if not TOUR:
            self.skipTest("no --tour given")
        out = subprocess.run([TOUR, "--registry-json"], capture_output=True, text=True, check=True)
        labels = [e["label"] for e in json.loads(out.stdout)["rungs"]]
        self.assertEqual([r.label for r in flashladder.rungs(variants=True)], labels)


class NoDevice(unittest.TestCase):
    def test_clean(self):
        n = flashladder.device_count()
        if n > 0:
            self.assertEqual(flashladder.no_device_reason(), "")
            self.assertTrue(flashladder.device_info(0).name)
            self.skipTest("this machine has %d CUDA device(s)" % n)
        self.assertIn("no usable CUDA device", flashladder.no_device_reason())
        with self.assertRaisesRegex(RuntimeError, "no usable CUDA device"):
            flashladder.device_info(0)
        # Asking a rung about "this machine's GPU" says the same, not a crash.
        with self.assertRaisesRegex(RuntimeError, "no usable CUDA device"):
            flashladder.supports(1, 1, 16, 16, 1, 1, 64)


class Supports(unittest.TestCase):
    def ask(self, rung, device, d=128, hq=8, hkv=8, dtype="fp16", variant=""):
        return flashladder.supports(rung, 2, 256, 256, hq, hkv, d, dtype=dtype, variant=variant,
                                    device=device)

    def test_head_dim_for_rung_10(self):
        if not built(10):
            self.skipTest("rung 10 not built")
        why = self.ask(10, H100, d=40)
        self.assertIn("head_dim 40 not supported", why)
        # On an A100 the arch comes first or the head_dim: either way a reason, one line.
        self.assertTrue(self.ask(10, A100) and "\n" not in self.ask(10, A100))

    def test_gqa_must_divide(self):
        for r in flashladder.rungs():
            why = self.ask(r.number, H100, d=64, hq=3, hkv=2)
            self.assertIn("must divide", why, r.label)

    def test_fine(self):
        self.assertEqual(self.ask(1, A100, d=64), "")
        if built(6):
            self.assertEqual(self.ask(6, A100, d=128), "")
            self.assertEqual(self.ask(6, SMALL, d=256), "")  # the 100 KB tile class
            tiny = fake_device(80, 48 * 1024)
            self.assertIn("bytes of shared memory", self.ask(6, tiny, d=256))

    def test_backward_head_dims(self):
        if not built(11):
            self.skipTest("rung 11 not built")
        self.assertEqual(self.ask(11, A100, d=64), "")
        self.assertIn("head_dim 32 not supported (supported: 64, 128)", self.ask(11, A100, d=32))

    def test_arch(self):
        if not built(6):
            self.skipTest("rung 06 not built")
        old = fake_device(75, 65536)
        self.assertIn("needs compute capability >= 8.0", self.ask(6, old, d=64))

    def test_dim_v(self):
        """A V head_dim of its own (Problem.head_dim_v, the runner's --dim-v): every entry that does
        not declare it (Rung.head_dim_v: rung 16's forward entries do) refuses it in one line naming
        --dim-v, on a head_dim it takes otherwise."""
        for r in flashladder.rungs(variants=True):
            if r.not_implemented or r.head_dim_v:
                continue
            d = 64 if not r.head_dims or 64 in r.head_dims else r.head_dims[0]
            p = _core.make_problem(1, 16, 16, 2, 2, d)
            self.assertEqual((p.head_dim_v, p.dv), (0, d))
            p.head_dim_v = 32 if d != 32 else 64
            self.assertEqual(p.dv, p.head_dim_v)
            self.assertIn(" dv=%d " % p.dv, p.describe())
            why = _ext.supports(r.number, r.variant, p, H100)
            self.assertIn("--dim-v", why, r.label)
            self.assertNotIn("\n", why, r.label)
            p.head_dim_v = 12  # not a multiple of 8: validate()'s rule, one line
            self.assertIn("--dim-v (V's head_dim) must be a multiple of 8",
                          _ext.supports(r.number, r.variant, p, H100), r.label)
        # Rung 16's entries take it, forward and backward (V's and dO's tensor maps, O's and dV's
        # stores at dv, on the tile of the wider; rung 14's kernel under the backward entry), the
        # backward only up to Q's head_dim.
        for r in flashladder.rungs(variants=True):
            if r.number != 16 or r.not_implemented:
                continue
            self.assertTrue(r.head_dim_v, r.label)
            p = _core.make_problem(1, 128, 128, 4, 4, 192)
            p.head_dim_v = 128
            if r.variant == "softcap-exp-fma":  # a study built for softcap at head_dim <= 64: it says so
                why = _ext.supports(r.number, r.variant, p, H100)
                self.assertIn("head_dim 192 not supported", why, r.label)  # its head_dims stop at 64
                self.assertNotIn("\n", why, r.label)
                q = _core.make_problem(1, 128, 128, 4, 4, 64)  # at 64 without softcap: the study's own reason
                self.assertIn("softcap-exp-fma", _ext.supports(r.number, r.variant, q, H100), r.label)
                p = _core.make_problem(1, 128, 128, 4, 4, 64)
                p.head_dim_v = 32
                p.softcap = 30.0
            self.assertEqual(_ext.supports(r.number, r.variant, p, H100), "", r.label)
            if r.variant == "mla-on-d256":  # the ablation of MlaTiles: their head_dims only, said in one line
                q = _core.make_problem(1, 128, 128, 4, 4, 128)
                self.assertIn("head_dim 128 not supported", _ext.supports(r.number, r.variant, q, H100), r.label)
                q = _core.make_problem(1, 128, 128, 4, 4, 192)
                q.head_dim_v = 192
                why = _ext.supports(r.number, r.variant, q, H100)
                self.assertIn("mla-on-d256", why, r.label)
                self.assertNotIn("\n", why, r.label)
            if r.variant == "backward":
                wide = _core.make_problem(1, 128, 128, 4, 4, 64)
                wide.head_dim_v = 96  # dv > d: the forward takes it, the backward not
                why = _ext.supports(r.number, r.variant, wide, H100)
                self.assertIn("--dim-v", why, r.label)
                self.assertNotIn("\n", why, r.label)

    def test_device_info_fields(self):
        self.assertEqual(H100.arch, "sm_90")
        self.assertIn("fake H100", repr(H100))


class Layout(unittest.TestCase):
    def reason(self, shape, strides, ptr=1 << 20):
        return _ext.layout_reason("q", ptr, shape, strides)

    def test_rules(self):
        shape = (2, 64, 4, 64)
        self.assertEqual(self.reason(shape, (64 * 4 * 64, 4 * 64, 64, 1)), "")
        self.assertIn("must be contiguous (stride 1)", self.reason(shape, (32768, 256, 1, 4)))
        self.assertIn("16-byte aligned", self.reason(shape, (16384, 256, 64, 1), ptr=(1 << 20) + 2))
        self.assertIn("seqlen stride must be a positive multiple of 8 elements",
                      self.reason(shape, (16384, 260, 64, 1)))
        self.assertIn("heads stride", self.reason(shape, (16384, 256, 0, 1)))
        # [batch, heads, seqlen, head_dim] storage seen as [batch, seqlen, heads, head_dim]
        # (transformers' layout, transposed): strides of a permuted view are fine.
        self.assertEqual(self.reason(shape, (4 * 64 * 64, 64, 64 * 64, 1)), "")
        # A dimension of size 1 may carry any stride (PyTorch gives such dims arbitrary ones).
        self.assertEqual(self.reason((1, 1, 4, 64), (3, 5, 64, 1)), "")


class Checks(unittest.TestCase):
    def check(self, q, k, v, **kw):
        return _core.check_qkv(q, k, v, tensor_type=Tensor, **kw)

    def raises(self, exc, text, q, k, v, **kw):
        with self.assertRaises(exc) as cm:
            self.check(q, k, v, **kw)
        self.assertIn(text, str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_good(self):
        key = self.check(*qkv(b=2, sq=67, sk=131, hq=8, hkv=2, d=128), causal=True)
        self.assertEqual(key, (2, 67, 131, 8, 2, 128, "fp16", True, 0.0))
        key = self.check(*qkv(dtype=BF16), softmax_scale=0.5)
        self.assertEqual(key[6:], ("bf16", False, 0.5))

    def test_not_a_tensor(self):
        q, k, v = qkv()
        self.raises(TypeError, "k must be a", q, [[1.0]], v)

    def test_device(self):
        q, k, v = qkv()
        self.raises(ValueError, "q is on cpu", Tensor(q.shape, device=Device("cpu")), k, v)
        self.raises(ValueError, "v is on cuda:1 but q is on cuda:0", q, k,
                    Tensor(v.shape, device=Device("cuda", 1)))

    def test_dtype(self):
        q, k, v = qkv()
        self.raises(TypeError, "torch.float16 or torch.bfloat16", *qkv(dtype=FP32))
        self.raises(TypeError, "k is torch.bfloat16 but q is torch.float16", q,
                    Tensor(k.shape, dtype=BF16), v)

    def test_shapes(self):
        q, k, v = qkv()
        self.raises(ValueError, "4 dimensions", Tensor((2, 128, 512)), k, v)
        self.raises(ValueError, "v must have k's shape", q, k, Tensor((2, 127, 8, 64)))
        self.raises(ValueError, "k's batch and head_dim must be q's", q, *qkv(b=3)[1:])
        self.raises(ValueError, "k's batch and head_dim must be q's", q, *qkv(d=128)[1:])
        self.raises(ValueError, "is empty", *qkv(sq=0))

    def test_gqa(self):
        self.raises(ValueError, "heads_q (3) must be a multiple of heads_kv (2)", *qkv(hq=3, hkv=2))
        self.check(*qkv(hq=8, hkv=1))  # MQA
        self.check(*qkv(hq=8, hkv=2))  # GQA 4:1

    def test_head_dim_and_scale(self):
        self.raises(ValueError, "head_dim must be a multiple of 8", *qkv(d=12))
        self.raises(ValueError, "up to 256", *qkv(d=264))
        self.raises(ValueError, "softmax_scale must be a finite number > 0", *qkv(),
                    softmax_scale=-1.0)
        self.raises(ValueError, "softmax_scale", *qkv(), softmax_scale=float("nan"))

    def test_layout(self):
        q, k, v = qkv()
        # q[..., ::2] of a [2, 128, 8, 128] tensor: the last dimension is strided.
        sliced = Tensor((2, 128, 8, 64), strides=(131072, 1024, 128, 2))
        self.raises(ValueError, "q: the last dimension (head_dim) must be contiguous", sliced, k, v)
        self.raises(ValueError, "16-byte aligned", q, Tensor(k.shape, ptr=(1 << 20) + 8), v)
        # Fake tensors while tracing have no data: the layout check is skipped.
        self.check(sliced, k, v, check_layout=False)

    def test_cached(self):
        # check_qkv_cached (what every call runs): check_qkv's key; a signature that passed is
        # not checked again, and anything that differs in what the checks read is.
        q, k, v = qkv(hq=8, hkv=2, d=128)
        first = _core.check_qkv_cached(q, k, v, True, None, tensor_type=Tensor)
        self.assertEqual(first, self.check(q, k, v, causal=True))
        n = len(_core._PASSED)
        again = _core.check_qkv_cached(*qkv(hq=8, hkv=2, d=128), True, None, tensor_type=Tensor)
        self.assertEqual(again, first)
        self.assertEqual(len(_core._PASSED), n)  # the same signature: no new entry
        self.assertEqual(_core.check_qkv_cached(q, k, v, False, 0.5, tensor_type=Tensor)[7:],
                         (False, 0.5))
        for bad, exc, text in (
                ((q, Tensor(k.shape, ptr=(1 << 20) + 8), v), ValueError, "16-byte aligned"),
                ((q, k, Tensor(v.shape, strides=(16384, 256, 128, 2))), ValueError, "contiguous"),
                ((q, k, Tensor(v.shape, dtype=BF16)), TypeError, "v is torch.bfloat16"),
                ((Tensor(q.shape, device=Device("cpu")), k, v), ValueError, "q is on cpu"),
                ((q, [[1.0]], v), TypeError, "k must be a")):
            for _ in range(2):  # a failing signature is never cached: it fails every time
                with self.assertRaises(exc) as cm:
                    _core.check_qkv_cached(*bad, True, None, tensor_type=Tensor)
                self.assertIn(text, str(cm.exception))
        with self.assertRaisesRegex(ValueError, "softmax_scale"):
            _core.check_qkv_cached(q, k, v, True, float("nan"), tensor_type=Tensor)

    def test_like(self):
        q = Tensor((2, 16, 4, 64))
        _core.check_like("out", Tensor(q.shape), "q", q)
        with self.assertRaisesRegex(ValueError, "out must have q's shape"):
            _core.check_like("out", Tensor((2, 16, 4, 32)), "q", q)
        with self.assertRaisesRegex(TypeError, "dout must be torch.bfloat16"):
            _core.check_like("dout", Tensor(q.shape), "q", Tensor(q.shape, dtype=BF16))


class DefaultRung(unittest.TestCase):
    def test_choice(self):
        problem = _core.make_problem(2, 512, 512, 8, 8, 128)
        hopper = [n for n in (15, 10) if built(n) and _ext.supports(n, "", problem, H100) == ""]
        if hopper:  # the first Hopper rung of DEFAULT_FORWARD that is built
            self.assertEqual(_core.default_forward(problem, H100).number, hopper[0])
        if built(6):
            self.assertEqual(_core.default_forward(problem, A100).number, 6)
        with self.assertRaisesRegex(ValueError, "no default rung runs .* pass rung="):
            _core.default_forward(_core.make_problem(2, 512, 512, 8, 8, 36), H100)
        if built(16):  # rung 16 takes every multiple of 8 on the next tile up
            self.assertEqual(_core.default_forward(_core.make_problem(2, 512, 512, 8, 8, 40), H100).number, 16)

    def test_route(self):
        # rung=None: the decode rung for decode steps and a few queries it supports, unless a
        # backward pass follows; the prefill rung otherwise (route_forward, the one place).
        if not built(8) or not (built(15) or built(10) or built(6)):
            self.skipTest("needs rung 08 and a prefill rung")
        prefill = 15 if built(15) else 10 if built(10) else 6

        def route(b, sq, sk, hq, hkv, d, causal=False, backward=False, device=H100):
            problem = _core.make_problem(b, sq, sk, hq, hkv, d, "fp16", causal)
            return _core.route_forward(problem, device, backward)

        for b in (1, 8):  # the decode grid of the issue: B = 1 and 8, 32/8 heads, 8k-128k keys
            for sk in (8192, 16384, 65536, 131072):
                entry, why = route(b, 1, sk, 32, 8, 128)
                self.assertEqual(entry.number, 8, why)
                decode_t, prefill_t = _core.kv_stream_estimate(
                    _core.make_problem(b, 1, sk, 32, 8, 128), H100)
                self.assertLess(decode_t, prefill_t)  # GQA 4:1: the prefill grid streams K/V 4x
        self.assertEqual(route(1, 4, 16384, 32, 8, 128, causal=True)[0].number, 8)  # speculative
        self.assertEqual(route(8, 16, 4096, 32, 32, 64)[0].number, 8)  # MHA: equal bytes, a full grid
        entry, why = route(1, 17, 16384, 32, 8, 128)  # past rung 08's seqlen_q limit
        self.assertEqual(entry.number, prefill)
        self.assertIn("seqlen_q must be <= 16", why)
        entry, why = route(1, 1, 16384, 16, 16, 256)  # a head_dim rung 08 does not take
        self.assertEqual(entry.number, prefill)
        self.assertIn("head_dim", why)
        entry, why = route(1, 1, 65536, 32, 8, 128, backward=True)  # autograd: the fp32 O for D
        self.assertEqual(entry.number, prefill)
        self.assertIn("backward", why)
        self.assertEqual(route(1, 1, 65536, 32, 8, 128, device=A100)[0].number, 8)
        # rungs() says it in words.
        self.assertIn("seqlen_q <= 16", flashladder.find_rung(8).route)
        self.assertIn("DEFAULT_FORWARD", flashladder.find_rung(prefill).route)
        self.assertEqual(flashladder.find_rung(1).route, "")

    def test_tolerance_floors(self):
        f16, b16 = _ext.tolerance_floor("fp16"), _ext.tolerance_floor("bf16")
        self.assertLess(f16["max_abs"], b16["max_abs"])
        self.assertEqual(_ext.tolerance_floor("fp16", True)["rel_fro"], 2 * f16["rel_fro"])
        # A gradient from e4m3 operands (rung 14's fp8-dq dQ): the same rule on the FP8 floor.
        self.assertEqual(_ext.tolerance_floor("bf16", True, True)["rel_fro"],
                         2 * _ext.tolerance_floor("bf16", fp8=True)["rel_fro"])
        fp8_dq = [r.label for r in flashladder.rungs(variants=True) if r.fp8_dq]
        self.assertEqual(fp8_dq, ["14_hopper_backward[fp8-dq]", "14_hopper_backward[fp8-dq-tile]"] if any(
            r.number == 14 for r in flashladder.rungs()) else [])


class Mods(unittest.TestCase):
    """Masks, modifiers and packed batches (flashladder._flash's): which entries the routes pick,
    and the checks of a packed batch, on a hand-made H100."""

    def problem(self, d=128, sk=4096, mods=None, causal=True, hq=8, hkv=2):
        return _core.make_problem(2, sk, sk, hq, hkv, d, "bf16", causal, mods=mods)

    def test_routes(self):
        if not (built(15) and built(16) and built(14)):
            self.skipTest("needs rungs 14, 15 and 16")
        window = _core.Mods(window_left=128, window_right=0)
        self.assertEqual(_core.default_forward(self.problem(mods=window), H100).number, 16)
        r = _core.default_backward(self.problem(mods=window), H100)
        self.assertEqual((r.number, r.variant), (16, "backward"))
        for mods in (_core.Mods(softcap=30.0), _core.Mods(alibi=2), _core.Mods(sinks=True)):
            self.assertEqual(_core.default_forward(self.problem(mods=mods), H100).number, 16)
        # A packed batch alone: rung 15 forward, rung 14 backward.
        packed = _core.Mods(varlen=(3, 5000, 5000, 4096, 4096))
        self.assertEqual(_core.default_forward(self.problem(mods=packed), H100).number, 15)
        self.assertEqual(_core.default_backward(self.problem(mods=packed), H100).number, 14)
        # head_dim 96: rung 16 both ways.
        self.assertEqual(_core.default_forward(self.problem(d=96), H100).number, 16)
        self.assertEqual(_core.default_backward(self.problem(d=96), H100).variant, "backward")
        # Rows of more than 16384 keys with softcap: no backward takes them, each says why.
        with self.assertRaisesRegex(ValueError, "16384"):
            _core.default_backward(self.problem(sk=32768, mods=_core.Mods(softcap=30.0)), H100)
        # A window under the deterministic backward: rung 16's backward takes it (the dQ order by
        # each block's nearest visiting neighbour).
        self.assertEqual(_core.default_backward(self.problem(mods=window), H100, deterministic=True).variant,
                         "backward")
        self.assertIn("DEFAULT_BACKWARD", flashladder.find_rung(16, "backward").route)

    def test_mods_on_the_problem(self):
        p = self.problem(mods=_core.Mods(3, 4, 20.0, 2, True, (2, 300, 500, 200, 400)))
        self.assertEqual((p.window_left, p.window_right, p.softcap, p.alibi, p.sinks, p.varlen),
                         (3, 4, 20.0, True, True, True))
        self.assertEqual((p.batch, p.seqlen_q, p.seqlen_k), (2, 200, 400))
        with self.assertRaisesRegex(ValueError, "max_seqlen"):
            self.problem(mods=_core.Mods(varlen=(2, 500, 500, 200, 200)))  # 500 > 2 x 200

    def test_check_varlen(self):
        q, k = Tensor((300, 8, 64)), Tensor((500, 2, 64))
        cu = Tensor((3,), dtype=DType("torch.int32"))
        key, varlen = _core.check_varlen(q, k, k, cu, cu, 200, 400, True)
        self.assertEqual(key[:6], (2, 200, 400, 8, 2, 64))
        self.assertEqual(varlen, (2, 300, 500, 200, 400))
        with self.assertRaisesRegex(ValueError, "3 dimensions"):
            _core.check_varlen(Tensor((1, 300, 8, 64)), k, k, cu, cu, 200, 400)
        with self.assertRaisesRegex(ValueError, "int32"):
            _core.check_varlen(q, k, k, Tensor((3,), dtype=DType("torch.int64")), cu, 200, 400)
        with self.assertRaisesRegex(ValueError, "same count"):
            _core.check_varlen(q, k, k, cu, Tensor((4,), dtype=DType("torch.int32")), 200, 400)
        with self.assertRaisesRegex(ValueError, "max_seqlen_q"):
            _core.check_varlen(q, k, k, cu, cu, 0, 400)


class TransformersArguments(unittest.TestCase):
    """The transformers attention function's allow-list, on stand-in tensors (no PyTorch): every
    argument that would change the result and that the rungs cannot honour is refused before
    anything runs, naming it."""

    def call(self, q_len=64, k_len=64, mask=None, **kwargs):
        from flashladder import _hf

        class Module:
            is_causal = True

        q, k = Tensor((1, 8, q_len, 64)), Tensor((1, 2, k_len, 64))
        return _hf.transformers_attention(Module(), q, k, k, mask, **kwargs)

    def refused(self, text, **kwargs):
        with self.assertRaises(ValueError) as cm:
            self.call(**kwargs)
        self.assertTrue(str(cm.exception).startswith("flashladder: "), str(cm.exception))
        self.assertIn(text, str(cm.exception))

    def test_refused(self):
        self.refused("position_bias", position_bias=Tensor((1, 8, 64, 64)))  # T5, mT5, UMT5, LongT5
        self.refused("seq_idx", seq_idx=Tensor((1, 64)))
        self.refused("dropout must be a probability", dropout=1.5)
        self.refused("2D padding mask", mask=Tensor((1, 1, 64, 64)))       # a custom 4D mask
        self.refused("sliding_window must be an int", sliding_window=1.5)
        self.refused("output_attentions", output_attentions=True)
        self.refused("head_mask", head_mask=Tensor((8,)))                  # not on the allow-list
        self.refused("some_new_argument", some_new_argument=1)

    def reaches_launch(self, **kwargs):
        """The call passes every check and reaches the import of the launching modules (the
        first line past the checks): those imports are halted here, so that and nothing else
        ends the call. A refusal, or any other error in the checks, fails."""
        names = ("_flash", "_kvcache", "_ops")
        saved = {n: (sys.modules.get("flashladder." + n), flashladder.__dict__.get(n)) for n in names}
        try:
            for n in names:
                sys.modules["flashladder." + n] = None  # `from . import` raises "import ... halted"
                flashladder.__dict__.pop(n, None)
            with self.assertRaisesRegex(ImportError, "halted", msg=repr(kwargs)):
                self.call(**kwargs)
        finally:
            for n, (mod, attr) in saved.items():
                if mod is None:
                    sys.modules.pop("flashladder." + n, None)
                else:
                    sys.modules["flashladder." + n] = mod
                if attr is not None:
                    setattr(flashladder, n, attr)

    def test_no_effect_accepted(self):
        # These cannot change the result: each call passes the checks and reaches the launch.
        for kwargs in ({"sliding_window": 4096}, {"use_cache": True, "cache_position": None},
                       {"softcap": None, "s_aux": None, "position_bias": None},
                       {"sliding_window": 32, "softcap": 50.0, "s_aux": Tensor((8,))},  # rung 16
                       {"mask": Tensor((1, 64), dtype=DType("torch.int64"))},  # padding: varlen
                       {"max_length_q": 64, "max_length_k": 64, "deterministic": True},
                       {"output_attentions": False, "is_causal": False}):
            self.reaches_launch(**kwargs)

    def test_dropout_accepted(self):
        # The model's attention_dropout in train mode: flash_attn_func's dropout_p (rung 16).
        for kwargs in ({"dropout": 0.1}, {"dropout": 0.1, "mask": Tensor((1, 64), dtype=DType("torch.int64"))},
                       {"dropout": 0.0}):
            self.reaches_launch(**kwargs)


class ScaleUnderAutograd(unittest.TestCase):
    """attention() with inputs that require grad refuses softmax_scale 0 (or < 0) before anything
    else, as without autograd: the op it calls takes 0.0 for None, so an unchecked 0 would run with
    1/sqrt(head_dim). PyTorch needed (skipped without); CPU tensors, so nothing reaches a launch."""

    def test_refused(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        q, k, v = (torch.zeros(1, 8, 2, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
        for scale in (0, 0.0, -1.0):
            with self.assertRaisesRegex(ValueError, "softmax_scale must be a finite number > 0"):
                flashladder.attention(q, k, v, causal=True, softmax_scale=scale)

    def test_refused_with_mods(self):
        # flash_attn_func's route with a window or softcap passes the scale to the mods op, which
        # also reads 0.0 as None: 0 is refused there too, with or without autograd.
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        for grad in (False, True):
            q, k, v = (torch.zeros(1, 8, 2, 64, dtype=torch.float16, requires_grad=grad) for _ in range(3))
            for kwargs in ({"window_size": (3, 0)}, {"softcap": 30.0}):
                with self.assertRaisesRegex(ValueError, "softmax_scale must be a finite number > 0"):
                    flashladder.flash_attn_func(q, k, v, causal=True, softmax_scale=0.0, **kwargs)


class KVCacheRotary(unittest.TestCase):
    """flash_attn_with_kvcache's rotary embedding and cache_batch_idx on CPU tensors (PyTorch
    needed; skipped without): _kvcache._apply_rotary against the rotation written out in fp64, the
    refusals before anything is written, and the append and the route with the launch stood in."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        from flashladder import _kvcache
        self.torch, self.flash = torch, _kvcache

    def rope(self, x, cos, sin, positions, interleaved):
        """fp64: tests/python/refs.py's rope_reference."""
        from refs import rope_reference

        return rope_reference(x, cos, sin, positions, interleaved)

    def within_rounding(self, got, ref, dtype):
        """Every value within one rounding of the fp64 rotation (unit roundoff x |ref|, plus the
        fp32 products' error): computed in fp32 and rounded once to the 16-bit dtype."""
        torch = self.torch
        u = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
        return bool(((got.double() - ref).abs() <= u * ref.abs() + 1e-6).all())

    def test_against_the_rotation(self):
        torch = self.torch
        torch.manual_seed(3)
        for dtype in (torch.float16, torch.bfloat16):
            for interleaved in (True, False):
                for rotary_dim, head_dim in ((64, 128), (32, 32), (16, 80)):
                    b, s, h, seqlen_ro = 3, 5, 4, 40
                    angle = torch.rand(seqlen_ro, rotary_dim // 2, dtype=torch.float64) * 2 * math.pi
                    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
                    x = torch.randn(b, s, h, head_dim).to(dtype)
                    positions = torch.randint(0, seqlen_ro, (b, s), dtype=torch.int32)  # per sequence and token
                    got = self.flash._apply_rotary(x, cos, sin, positions, interleaved)
                    ref = self.rope(x, cos, sin, positions, interleaved)
                    what = (dtype, interleaved, rotary_dim, head_dim)
                    self.assertEqual((got.dtype, got.shape), (dtype, x.shape), what)
                    self.assertTrue(torch.equal(got[..., rotary_dim:], x[..., rotary_dim:]), what)  # passed through
                    self.assertTrue(self.within_rounding(got, ref, dtype), what)
                    # The bound is tight: rounding each product to 16 bits, as a 16-bit
                    # computation does, leaves it.
                    c = cos[positions.long()][:, :, None, :]
                    sn = sin[positions.long()][:, :, None, :]
                    head = x[..., :rotary_dim]
                    x0, x1 = ((head[..., 0::2], head[..., 1::2]) if interleaved else
                              (head[..., :rotary_dim // 2], head[..., rotary_dim // 2:]))
                    naive = torch.cat((x0 * c - x1 * sn, x0 * sn + x1 * c), dim=-1)
                    order = torch.cat((torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)))
                    ref_head = ref[..., :rotary_dim][..., order] if interleaved else ref[..., :rotary_dim]
                    self.assertFalse(self.within_rounding(naive, ref_head, dtype), what)

    def test_positions_and_empty(self):
        torch = self.torch
        x = torch.randn(2, 3, 2, 32).to(torch.float16)
        cos, sin = torch.ones(8, 0, dtype=torch.float16), torch.zeros(8, 0, dtype=torch.float16)
        self.assertIs(self.flash._apply_rotary(x, cos, sin, torch.zeros(2, 3, dtype=torch.int32), True), x)
        # Row 0 of cos/sin (angle 0) leaves x as it is; row p rotates by angle p.
        angle = torch.arange(8, dtype=torch.float64)[:, None] * torch.tensor([[0.5, 0.25]], dtype=torch.float64)
        cos, sin = angle.cos().to(torch.float16), angle.sin().to(torch.float16)
        got = self.flash._apply_rotary(x, cos, sin, torch.zeros(2, 3, dtype=torch.int32), False)
        self.assertTrue(torch.equal(got, x))
        positions = torch.tensor([[1, 2, 3], [7, 0, 5]], dtype=torch.int32)
        got = self.flash._apply_rotary(x, cos, sin, positions, False)
        self.assertTrue(self.within_rounding(got, self.rope(x, cos, sin, positions, False), torch.float16))
        self.assertTrue(torch.equal(got[1, 1], x[1, 1]))

    def cache(self, rows=4, slots=256, heads_kv=2, head_dim=64):
        torch = self.torch
        return (torch.randn(rows, slots, heads_kv, head_dim).to(torch.float16),
                torch.randn(rows, slots, heads_kv, head_dim).to(torch.float16))

    def test_refused_before_the_append(self):
        torch = self.torch
        f16 = torch.float16
        kc, vc = self.cache(rows=2)
        before = kc.clone()
        q = torch.randn(2, 1, 4, 64).to(f16)
        kn, vn = torch.randn(2, 1, 2, 64).to(f16), torch.randn(2, 1, 2, 64).to(f16)
        cos, sin = torch.ones(256, 16, dtype=f16), torch.zeros(256, 16, dtype=f16)
        used = torch.tensor([3, 9], dtype=torch.int32)
        idx = torch.tensor([1, 0], dtype=torch.int32)
        call = self.flash.flash_attn_with_kvcache
        for kwargs, text in (
                ({"rotary_cos": cos, "rotary_sin": sin, "k": None, "v": None}, "pass k and v"),
                ({"rotary_cos": cos}, "come together"),
                ({"rotary_sin": sin}, "come together"),
                ({"rotary_cos": cos[:, :12], "rotary_sin": sin[:, :12]}, "multiple of 16"),
                ({"rotary_cos": torch.ones(256, 40, dtype=f16), "rotary_sin": torch.ones(256, 40, dtype=f16)},
                 "<= head_dim"),
                ({"rotary_cos": cos[:200], "rotary_sin": sin[:200]}, "seqlen_ro must cover"),
                ({"rotary_cos": cos.float(), "rotary_sin": sin.float()}, "q's dtype"),
                ({"rotary_cos": cos, "rotary_sin": sin[:, :8]}, "one shape"),
                ({"cache_batch_idx": idx, "block_table": torch.zeros(2, 1, dtype=torch.int32)}, "block_table"),
                ({"cache_batch_idx": idx.long()}, "int32"),
                ({"cache_batch_idx": idx[:1]}, "int32 [batch] = (2,)"),
                ({"cache_seqlens": None}, "pass it")):
            args = {"k": kn, "v": vn, "cache_seqlens": used}
            args.update(kwargs)
            with self.assertRaises(ValueError, msg=text) as cm:
                call(q, kc, vc, **args)
            self.assertTrue(str(cm.exception).startswith("flashladder: "), str(cm.exception))
            self.assertIn(text, str(cm.exception))
            self.assertTrue(torch.equal(kc, before), text)  # nothing written

    def test_append_and_route(self):
        """The rung stood in (it records what it is given): the new keys rotated at cache_seqlens + i
        land in rows cache_batch_idx, other rows untouched; q rotated per query when causal, at
        cache_seqlens otherwise; a contiguous cache read as pages of its largest power of two
        (>= 16) dividing seqlen_cache, else its rows copied."""
        torch = self.torch
        flash = self.flash
        seen = []

        def forward(q, k, v, key, rung=None, variant="", o_fp32=False, mods=None, extras=None):
            seen.append((q, k, mods.page_size, extras[5]))
            return torch.zeros_like(q), None, None

        saved = (flash._launch.forward, flash._core.check_qkv, flash._core.check_qkv_cached,
                 flash._core.check_layout_of, flash._core.plan_forward)
        flash._launch.forward = forward
        flash._core.check_qkv = flash._core.check_qkv_cached = lambda q, k, *a, **kw: (q.shape[1],)
        flash._core.check_layout_of = lambda *a, **kw: None
        flash._core.plan_forward = lambda *a, **kw: None  # every problem taken through pages
        try:
            torch.manual_seed(4)
            f16 = torch.float16
            for slots, contiguous, page in ((256, True, 256), (192, True, 64), (1000, True, 0), (256, False, 0)):
                for causal, interleaved in ((True, True), (False, False)):
                    rows, b, sq, new = 5, 3, 4, 4
                    kc, vc = self.cache(rows, slots + (0 if contiguous else 8))
                    if not contiguous:
                        kc, vc = kc[:, :slots], vc[:, :slots]
                    k0, v0 = kc.clone(), vc.clone()
                    idx = torch.tensor([3, 0, 4], dtype=torch.int32)
                    used = torch.tensor([0, 50, slots - new], dtype=torch.int32)
                    q = torch.randn(b, sq, 4, 64).to(f16)
                    kn, vn = torch.randn(b, new, 2, 64).to(f16), torch.randn(b, new, 2, 64).to(f16)
                    angle = torch.rand(slots, 16, dtype=torch.float64) * 2 * math.pi
                    cos, sin = angle.cos().to(f16), angle.sin().to(f16)
                    seen.clear()
                    flash.flash_attn_with_kvcache(q, kc, vc, kn, vn, rotary_cos=cos, rotary_sin=sin,
                                                  cache_seqlens=used, cache_batch_idx=idx, causal=causal,
                                                  rotary_interleaved=interleaved)
                    what = (slots, contiguous, causal, interleaved)
                    pos = used[:, None] + torch.arange(new, dtype=torch.int32)[None, :]
                    k_ref = self.rope(kn, cos, sin, pos, interleaved)
                    for n in range(b):
                        r, u = int(idx[n]), int(used[n])
                        self.assertTrue(self.within_rounding(kc[r, u:u + new], k_ref[n], f16), what)
                        self.assertTrue(torch.equal(vc[r, u:u + new], vn[n]), what)
                    for r in (1, 2):  # no sequence's row
                        self.assertTrue(torch.equal(kc[r], k0[r]) and torch.equal(vc[r], v0[r]), what)
                    q_pos = used[:, None] + (torch.arange(sq, dtype=torch.int32)[None, :] if causal else
                                             torch.zeros(1, sq, dtype=torch.int32))
                    q_seen, k_seen, page_seen, table = seen[0]
                    self.assertTrue(self.within_rounding(q_seen, self.rope(q, cos, sin, q_pos, interleaved), f16),
                                    what)
                    self.assertEqual(page_seen, page, what)
                    if page:  # the cache itself, as pages; sequence b's pages are row idx[b]'s
                        self.assertEqual(k_seen.data_ptr(), kc.data_ptr(), what)
                        per_row = slots // page
                        self.assertEqual(table.tolist(), [[int(i) * per_row + j for j in range(per_row)]
                                                          for i in idx], what)
                    else:  # the batch's rows, copied after the append
                        self.assertTrue(torch.equal(k_seen, kc[idx.long()]), what)
        finally:
            (flash._launch.forward, flash._core.check_qkv, flash._core.check_qkv_cached, flash._core.check_layout_of,
             flash._core.plan_forward) = saved


class KVCachePrepared(unittest.TestCase):
    """The serving fast path's one binding call (_kvcache._prepare_cache_call, _kv_prepared) with the
    extension's PreparedCacheCall stood in (it records what it is given; PyTorch needed, skipped
    without): prepared once per signature with the launch's strides, extras and cache geometry; each
    step's pointers in the binding's order and an int32 scratch of its size; a launch that says
    False (a misaligned pointer) falls back to the launch-by-launch path; lengths that are not int32
    take that path from the start; the prepared calls the caches hold are released at exit."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        from flashladder import _kvcache
        self.torch, self.kv = torch, _kvcache

    def test_one_call_per_step(self):
        torch, kv = self.torch, self.kv
        made, launched, long_way = [], [], []

        class Prepared:
            scratch_ints = 3 * 2 + 2 * 4  # batch 2, a table of 4 columns
            workspace_bytes = 0
            ok = True

            def __init__(self, *args):
                made.append(args)

            def launch(self, *ptrs):
                launched.append(ptrs)
                return Prepared.ok

        class Plan:
            number, variant, problem, workspace_bytes = 8, "", "problem", 0

        def sanitized(*a):
            long_way.append("sanitize")
            z = torch.zeros(2, dtype=torch.int32)
            return z, z, z, None, None

        saved = (kv._ext.PreparedCacheCall, kv._core.plan_forward, kv._launch.raise_metadata_errors,
                 kv._launch.stream, kv._sanitized_cache, kv._append, kv._launch.forward)
        kv._ext.PreparedCacheCall = Prepared
        kv._core.plan_forward = lambda *a, **kw: Plan
        kv._launch.raise_metadata_errors = lambda device: None
        kv._launch.stream = lambda t: 7
        kv._sanitized_cache = sanitized
        kv._append = lambda *a: long_way.append("append")
        kv._launch.forward = lambda q, *a, **kw: (long_way.append("forward"), (torch.zeros_like(q), None, None))[1]
        try:
            f16 = torch.float16
            q = torch.randn(2, 1, 8, 64).to(f16)
            pool_k, pool_v = torch.randn(10, 64, 2, 64).to(f16), torch.randn(10, 64, 2, 64).to(f16)
            table = torch.arange(8, dtype=torch.int32).view(2, 4)
            lens = torch.tensor([5, 70], dtype=torch.int32)
            k1, v1 = torch.randn(2, 1, 2, 64).to(f16), torch.randn(2, 1, 2, 64).to(f16)
            mods = kv._core.Mods(seqused_k=True, page_size=64)
            f = kv._KvFast("key", mods, 256, 64, 10, 640, 1)
            for step in range(2):
                kv._kv_fast(f, q, pool_k, pool_v, k1, v1, lens, None, table, None, None, False)
            self.assertEqual(len(made), 1)  # prepared once for the signature
            args = made[0]
            self.assertEqual(args[:3], (8, "", "problem"))
            self.assertEqual(args[3][0], q.stride())
            self.assertEqual(args[3][1], pool_k.view(1, -1, 2, 64).stride())  # the pool as the rung reads it
            self.assertEqual(tuple(args[3][3]), (8 * 64, 8 * 64, 64, 1))  # out: dense like q
            self.assertEqual(args[4], (0, 4, 640))  # alibi batch stride, the table's columns, the pool's rows
            self.assertEqual(args[5], (2, 1, 256, 64, 10, 4, 2, 64))  # batch, new, slots, page, pages, ...
            self.assertEqual(args[6], (k1.stride(), pool_k.stride(), v1.stride(), pool_v.stride()))
            self.assertEqual(len(launched), 2)
            p = launched[0]
            self.assertEqual(p[1:3], (pool_k.data_ptr(), pool_v.data_ptr()))
            self.assertEqual(p[6:12], (lens.data_ptr(), 0, table.data_ptr(), 4, k1.data_ptr(), v1.data_ptr()))
            self.assertEqual((p[12], p[13], p[15]), (0, 0, 7))  # no sinks, no slopes; the stream
            self.assertEqual(long_way, [])
            Prepared.ok = False  # a misaligned pointer: the long way, the same step
            kv._kv_fast(f, q, pool_k, pool_v, k1, v1, lens, None, table, None, None, False)
            self.assertEqual(long_way, ["sanitize", "append", "forward"])
            long_way.clear()
            g = kv._KvFast("key", mods, 256, 64, 10, 640, 1)  # int64 lengths: never prepared
            kv._kv_fast(g, q, pool_k, pool_v, k1, v1, lens.long(), None, table, None, None, False)
            self.assertIs(g.prepared, False)
            self.assertEqual(long_way, ["sanitize", "append", "forward"])
        finally:
            (kv._ext.PreparedCacheCall, kv._core.plan_forward, kv._launch.raise_metadata_errors, kv._launch.stream,
             kv._sanitized_cache, kv._append, kv._launch.forward) = saved

    def test_prepared_calls_released_at_exit(self):
        """The prepared calls held by the fast paths' caches (_kvcache.KV_FAST, _launch.FAST) are
        released at exit, before nanobind's teardown, which otherwise reports them as leaked
        instances (as at the end of torch_overhead.py's run). An _ext.Problem stands in for them:
        a PreparedCacheCall needs a device to be made."""
        code = ("from flashladder import _ext, _kvcache, _launch\n"
                "_kvcache.KV_FAST['signature'] = _ext.Problem()\n"
                "_launch.FAST['signature'] = _ext.Problem()\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("leaked", out.stderr)


INT32, INT64 = DType("torch.int32"), DType("torch.int64")


def mla_args(b=2, sq=1, hq=16, pages=8, page=64, columns=4, paged=True, dtype=FP16):
    """Stand-ins of flash_mla_with_kvcache's tensors: q [b, sq, hq, 576], the latent cache (a pool
    of pages of 576-dim rows, or [b, columns x page, 1, 576]), int32 lengths and block table."""
    q = Tensor((b, sq, hq, 576), dtype=dtype)
    k = Tensor((pages, page, 1, 576) if paged else (b, columns * page, 1, 576), dtype=dtype, ptr=1 << 24)
    table = Tensor((b, columns), dtype=INT32) if paged else None
    return q, k, table, Tensor((b,), dtype=INT32)


class OneLine:
    """assertRaises for the package's refusals: @p exc, one line starting "flashladder: " and naming
    @p text; returns the message."""

    def one_line(self, exc, text, fn, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            fn(*args, **kwargs)
        msg = str(cm.exception)
        self.assertTrue(msg.startswith("flashladder: "), msg)
        self.assertNotIn("\n", msg)
        self.assertIn(text, msg)
        return msg


class KVCacheFp8(OneLine, unittest.TestCase):
    """flash_attn_with_kvcache on a float8_e4m3fn cache (rung 08's fp8-kv): the arguments it does
    not take, refused in one line naming them before anything runs; descales without an e4m3 cache;
    and the 16-bit calls' entries never reading an e4m3 cache, nor its entry 16-bit tensors
    (PyTorch needed for the calls, skipped without)."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        if not hasattr(torch, "float8_e4m3fn"):
            self.skipTest("this PyTorch has no float8_e4m3fn")
        from flashladder import _kvcache
        self.torch, self.kv = torch, _kvcache

    def test_refusals(self):
        torch = self.torch
        q = torch.zeros(2, 1, 8, 128, dtype=torch.bfloat16)
        c8 = torch.zeros(2, 64, 2, 128, dtype=torch.float8_e4m3fn)
        lens = torch.tensor([3, 4], dtype=torch.int32)
        call = self.kv.flash_attn_with_kvcache
        cos = torch.ones(64, 32, dtype=torch.bfloat16)
        for kwargs, exc, text in (
                ({"rotary_cos": cos, "rotary_sin": cos}, NotImplementedError, "rotary_cos with a float8_e4m3fn cache"),
                ({"cache_batch_idx": lens}, NotImplementedError, "cache_batch_idx with a float8_e4m3fn cache"),
                ({"window_size": (4, 0)}, NotImplementedError, "window_size with a float8_e4m3fn cache"),
                ({"softcap": 30.0}, NotImplementedError, "softcap with a float8_e4m3fn cache"),
                ({"alibi_slopes": torch.ones(8)}, NotImplementedError, "alibi_slopes with a float8_e4m3fn cache"),
                ({"learnable_sink": torch.ones(8)}, NotImplementedError, "learnable_sink with a float8_e4m3fn cache"),
                ({}, ValueError, "the FP8 path runs on a CUDA device")):
            self.one_line(exc, text, call, q, c8, c8, cache_seqlens=lens, **kwargs)
        c16 = torch.zeros(2, 64, 2, 128, dtype=torch.bfloat16)
        for name in ("q_descale", "k_descale", "v_descale"):
            self.one_line(ValueError, "go with a float8_e4m3fn cache", call, q, c16, c16, cache_seqlens=lens,
                          **{name: torch.ones(2, 2)})

    def test_prepared_step(self):
        """The fast path's plumbing with the extension's PreparedCacheCall stood in: prepared once for
        an e4m3 cache (fp8_kv, the append's element kind), each step's descales passed as the
        cache's k and v descales and the scores' one (q_descale x k_descale for an e4m3 q, read as
        bf16), a descale left out read as ones."""
        torch = self.torch
        from flashladder import _fp8, _launch
        made, launched = [], []

        class Prepared:
            scratch_ints, workspace_bytes = 8, 0

            def __init__(self, *args, **kwargs):
                made.append((args, kwargs))

            def launch(self, *args):
                launched.append(args)
                return True

        saved = (_ext.PreparedCacheCall, _launch.raise_metadata_errors, _launch.stream)
        try:
            _ext.PreparedCacheCall, _launch.raise_metadata_errors, _launch.stream = (
                Prepared, lambda device: None, lambda t: 0)
            e4m3 = torch.float8_e4m3fn
            problem = _core.make_problem(2, 1, 256, 8, 2, 128, "bf16", False, mods=_core.Mods(seqused_k=True))
            q = torch.zeros(2, 1, 8, 128, dtype=torch.bfloat16)
            kc = torch.zeros(2, 256, 2, 128, dtype=e4m3)
            kn = torch.zeros(2, 1, 2, 128, dtype=torch.bfloat16)
            lens = torch.tensor([3, 4], dtype=torch.int32)
            kd, vd = torch.full((2, 2), 0.5), torch.full((2, 2), 0.25)
            f = _fp8._prepare_fp8_kv(problem, 0, q, kc, kc, kn, kn, "bf16_to_e4m3", 0, 0, 0, False)
            args, kwargs = made[-1]
            self.assertEqual((args[0], args[1], kwargs), (8, "fp8-kv", {"elems": "bf16_to_e4m3", "fp8_kv": True}))
            self.assertEqual(args[5], (2, 1, 256, 0, 2, 0, 2, 128))  # batch, new, slots, page, rows, columns, ...
            out = _fp8._fp8_kv_fast(f, q, kc, kc, kn, kn, lens, None, None, False, (None, kd, vd))
            self.assertEqual(launched[-1][-3:], (kd.data_ptr(), vd.data_ptr(), kd.data_ptr()))
            self.assertEqual((out.dtype, tuple(out.shape)), (torch.bfloat16, (2, 1, 8, 128)))
            out = _fp8._fp8_kv_fast(f, q, kc, kc, kn, kn, lens, None, None, False, (None, None, None))
            self.assertEqual(launched[-1][-3:], (f.ones.data_ptr(),) * 3)
            f8 = _fp8._prepare_fp8_kv(problem, 0, q, kc, kc, None, None, "copy8", 0, 0, 0, True)
            qd = torch.full((2, 2), 2.0)
            out, lse = _fp8._fp8_kv_fast(f8, q.to(e4m3), kc, kc, None, None, lens, None, None, True, (qd, kd, vd))
            self.assertEqual(launched[-1][-3:-1], (kd.data_ptr(), vd.data_ptr()))
            self.assertNotIn(launched[-1][-1], (kd.data_ptr(), qd.data_ptr()))  # the product's own tensor
            self.assertEqual((out.dtype, tuple(lse.shape)), (torch.bfloat16, (2, 8, 1)))
        finally:
            _ext.PreparedCacheCall, _launch.raise_metadata_errors, _launch.stream = saved

    def test_entries_read_their_own_tensors(self):
        r = [e for e in _core.rungs(variants=True) if e.number == 8 and e.variant == "fp8-kv"]
        if not r:
            self.skipTest("rung 08 is not built")
        p = _core.make_problem(2, 1, 4096, 32, 8, 128, "bf16", False,
                               mods=_core.Mods(seqused_k=True))
        d = fake_device(90, 227 * 1024)
        self.assertIn("e4m3 KV cache", _ext.supports(8, "fp8-kv", p, d))  # a 16-bit call
        self.assertEqual(_ext.supports(8, "", p, d), "")


class FlashMLA(OneLine, unittest.TestCase):
    """12. flash_mla_with_kvcache's contract on rung 17 (MLA's latent cache: head_dim 576, V its first
    512 columns): the Problem's v_in_k and head_dim_v and the route (rung 17 or one line), every
    argument check on stand-in tensors (each a one-line refusal naming the argument), the
    extension's rule that v is a view of k's first columns; and, where PyTorch is installed, the
    call with the extension stood in: v handed over as the cache's own memory with its strides, O
    of 512 columns, the lengths and the table through the metadata check, FlashMLA's scheduling
    arguments in both of its forms."""

    def problem(self, v_in_k=True, page=64, splits=0, batch=2, seqlen_q=1, slots=256, heads=16):
        mods = _core.Mods(seqused_k=True, page_size=page, num_splits=splits, head_dim_v=512, v_in_k=v_in_k)
        return _core.make_problem(batch, seqlen_q, slots, heads, 1, 576, "bf16", True, mods=mods)

    def test_problem_and_route(self):
        p = self.problem()
        self.assertEqual((p.v_in_k, p.head_dim_v, p.dv, p.page_size, p.seqused_k), (True, 512, 512, 64, True))
        self.assertIn("v=k[:dv]", p.describe())
        self.assertEqual((_ext.MLA_HEAD_DIM, _ext.MLA_HEAD_DIM_V), (576, 512))
        if not built(17):  # the route says so in one line
            self.one_line(ValueError, "which this build does not have", _core.route_forward, p, H100)
            self.skipTest("rung 17 not built")
        sm90a = _ext.supports(17, "", p, H100) == ""
        if sm90a:
            entry, why = _core.route_forward(p, H100)
            self.assertEqual(entry.number, 17, why)
            self.assertEqual(_core.route_forward(self.problem(page=0, seqlen_q=2, heads=128), H100)[0].number, 17)
        else:  # built without sm_90a: rung 17 refuses everywhere, in one line
            self.one_line(ValueError, "17_mla", _core.route_forward, p, H100)
        # Off sm_90 nothing else takes head_dim 576: one line naming rung 17 and why.
        msg = self.one_line(ValueError, "the one rung for MLA's latent cache", _core.route_forward, p, A100)
        self.assertIn("17_mla", msg)
        # Rung 17 needs V inside K: without v_in_k its own reason, one line.
        why = _ext.supports(17, "", self.problem(v_in_k=False), H100)
        self.assertTrue(why and "\n" not in why, why)
        if sm90a:
            self.assertIn("--v-in-k", why)
        self.assertIn("flash_mla_with_kvcache", flashladder.find_rung(17).route)
        # attention() and the other FlashAttention calls refuse 576 and name the function that takes it.
        q, k, v = qkv(d=576)
        self.one_line(ValueError, "flash_mla_with_kvcache", _core.check_qkv, q, k, v)

    def test_checks(self):
        check = _core.check_mla
        q, k, table, lens = mla_args()
        key, mods, page, pool = check(q, k, table, lens, 512, True, None, 0, tensor_type=Tensor)
        self.assertEqual(key, (2, 1, 256, 16, 1, 576, "fp16", True, 0.0))
        self.assertEqual((mods.seqused_k, mods.page_size, mods.head_dim_v, mods.v_in_k), (True, 64, 512, True))
        self.assertEqual((page, pool), (64, 8))
        qc, kc, _, _ = mla_args(paged=False, columns=3)
        key, mods, page, pool = check(qc, kc, None, lens, 512, False, 0.1, 3, tensor_type=Tensor)
        self.assertEqual((key[2], key[8], mods.page_size, mods.num_splits, page, pool), (192, 0.1, 0, 3, 0, 0))
        cpu = Device("cpu")
        for args, exc, text in (
                ((q, k, table, [1, 2], 512), TypeError, "cache_seqlens must be a"),
                ((Tensor(q.shape, device=cpu), k, table, lens, 512), ValueError, "q is on cpu"),
                ((q, Tensor(k.shape, device=Device("cuda", 1)), table, lens, 512), ValueError, "k_cache is on cuda:1"),
                ((Tensor(q.shape, dtype=FP32), k, table, lens, 512), TypeError, "torch.float16 or torch.bfloat16"),
                ((q, Tensor(k.shape, dtype=BF16), table, lens, 512), TypeError, "k_cache is torch.bfloat16"),
                ((Tensor((2, 1, 16, 512)), k, table, lens, 512), ValueError,
                 "q must be [batch, seqlen_q, heads_q, 576]"),
                ((q, Tensor((8, 64, 1, 512)), table, lens, 512), ValueError,
                 "k_cache must be [pages, page_size, 1, 576]"),
                ((q, Tensor((8, 64, 2, 576)), table, lens, 512), ValueError, "k_cache must have one head"),
                ((Tensor((2, 0, 16, 576)), k, table, lens, 512), ValueError, "q is empty"),
                ((q, k, table, lens, 576), ValueError, "head_dim_v must be 512"),
                ((q, k, table, lens, 512.0), ValueError, "head_dim_v must be 512"),
                ((q, k, table, Tensor((2,), dtype=INT64), 512), ValueError, "cache_seqlens must be int32 [batch]"),
                ((q, k, table, Tensor((3,), dtype=INT32), 512), ValueError,
                 "cache_seqlens must be int32 [batch] = (2,)"),
                ((q, k, table, Tensor((2,), dtype=INT32, device=cpu), 512), ValueError, "cache_seqlens is on cpu"),
                ((q, k, Tensor((2, 4), dtype=INT64), lens, 512), ValueError, "block_table must be int32"),
                ((q, k, Tensor((3, 4), dtype=INT32), lens, 512), ValueError, "block_table must be int32 [batch"),
                ((q, Tensor((8, 32, 1, 576)), table, lens, 512), ValueError,
                 "page_size (dim 1) must be a power of two"),
                ((q, Tensor((8, 192, 1, 576)), table, lens, 512), ValueError, "multiple of 64"),
                ((q, Tensor((8, 64, 1, 576), strides=(64 * 584, 576, 576, 1)), table, lens, 512), ValueError,
                 "pages must follow one another"),
                ((q, Tensor((8, 64, 1, 576), ptr=(1 << 24) + 8), table, lens, 512), ValueError, "k_cache"),
                ((q, Tensor((3, 128, 1, 576)), None, lens, 512), ValueError, "its batch (3) must be q's (2)"),
                ((q, Tensor((2, 128, 1, 576), strides=(128 * 580, 580, 580, 1)), None, lens, 512), ValueError,
                 "k_cache")):
            self.one_line(exc, text, check, *args, tensor_type=Tensor)
        # The cache's layout is refused, never copied: a plain ValueError, not the LayoutError a copy fixes.
        with self.assertRaises(ValueError) as cm:
            check(q, Tensor((8, 64, 1, 576), ptr=(1 << 24) + 8), table, lens, 512, tensor_type=Tensor)
        self.assertNotIsInstance(cm.exception, _core.LayoutError)
        # q's alignment: a LayoutError (the call copies q).
        with self.assertRaises(_core.LayoutError):
            check(Tensor(q.shape, ptr=(1 << 20) + 8), k, table, lens, 512, tensor_type=Tensor)
        for splits in (-1, 1.5, True):
            self.one_line(ValueError, "num_splits must be an int >= 0", check, q, k, table, lens, 512, False, None,
                          splits, tensor_type=Tensor)
        self.one_line(ValueError, "softmax_scale", check, q, k, table, lens, 512, False, 0.0, tensor_type=Tensor)

    def test_extension_rule(self):
        """The extension refuses a v_in_k launch whose v is not k's first columns (the same pointer
        and strides), before anything is launched; the backward and the prepared launches refuse
        v_in_k."""
        if not built(17):
            self.skipTest("rung 17 not built")
        p = self.problem(page=0, slots=128)
        q_st, k_st = (576 * 16, 576 * 16, 576, 1), (128 * 576, 576, 576, 1)
        o_st = (512 * 16, 512 * 16, 512, 1)
        k_ptr = 1 << 24
        ws = 0

        def launch(v_ptr, v_st):
            _ext.forward(17, "", p, (1 << 20, k_ptr, v_ptr, 1 << 22, 1 << 23), (q_st, k_st, v_st, o_st), ws, 0, 0, 0,
                         extras=(0, 0, 0, 0, 1 << 21, 0, 0), planned=True)

        for v_ptr, v_st in ((k_ptr + 1024, k_st), (k_ptr, (128 * 512, 512, 512, 1))):
            with self.assertRaisesRegex(ValueError, "v is not a view of k's first columns") as cm:
                launch(v_ptr, v_st)
            self.assertNotIn("\n", str(cm.exception))
        if built(11):
            with self.assertRaisesRegex(ValueError, "v_in_k: the backward pass takes V of its own"):
                _ext.backward(11, "", p, (1 << 20,) * 9, (q_st,) * 8, 0, 0, False, 0, 0, planned=True)
        with self.assertRaisesRegex(ValueError, "V inside K"):
            _ext.PreparedForward(17, "", _core.make_problem(1, 1, 128, 16, 1, 576, mods=_core.Mods(
                head_dim_v=512, v_in_k=True)), (q_st, k_st, k_st, o_st), 0, 0)

    def test_call_reaches_the_extension(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        from flashladder import _launch, _mla

        launched, sanitized = [], []

        def forward(*args, **kwargs):
            launched.append((args, kwargs))

        def sanitize(*args, **kwargs):
            sanitized.append(args)

        def plan(rung, variant, key, device, backward=False, mods=None):
            problem = _core.make_problem(*key, mods=mods)
            number = 17
            if built(17) and _ext.supports(17, "", problem, H100) == "":
                number = _core.route_forward(problem, H100)[0].number  # the route on an H100
            return _core.Plan(number, "", "17_mla", problem, 0, False)

        def as_cuda(t):
            return None if t is None else Tensor(tuple(t.shape), DType(str(t.dtype)), CUDA0, tuple(t.stride()),
                                                 t.data_ptr())

        real_check = _core.check_mla

        def check_on_cuda(q, k, table, lens, *args, tensor_type=None):  # the real checks, on CUDA stand-ins
            return real_check(as_cuda(q), as_cuda(k), as_cuda(table), as_cuda(lens), *args, tensor_type=Tensor)

        saved = (_ext.forward, _ext.sanitize_cache, _core.plan_forward, _core.check_mla, _launch.raise_metadata_errors,
                 _launch.stream)
        _ext.forward, _ext.sanitize_cache, _core.plan_forward, _core.check_mla = forward, sanitize, plan, check_on_cuda
        _launch.raise_metadata_errors = lambda device: None
        _launch.stream = lambda t: 7
        try:
            torch.manual_seed(5)
            b, sq, hq, pages, page = 2, 2, 16, 6, 64
            for paged in (True, False):
                for dtype in (torch.float16, torch.bfloat16):
                    launched.clear()
                    sanitized.clear()
                    q = torch.randn(b, sq, hq, 576).to(dtype)
                    lens = torch.tensor([1, 100], dtype=torch.int32)
                    if paged:
                        k = torch.randn(pages, page, 1, 576).to(dtype)
                        wide = torch.tensor([[5, 0, 2, -1], [1, 3, 4, -1]], dtype=torch.int32)
                        table = wide[:, :3]  # a view of a wider table: copied, never misread
                    else:
                        k, table = torch.randn(b, 3 * page, 1, 576).to(dtype), None
                    meta, splits = _mla.get_mla_metadata(lens, sq * hq // 1, 1)
                    self.assertIsNone(splits)
                    out, lse = _mla.flash_mla_with_kvcache(q, k, table, lens, 512, meta, splits, causal=True)
                    what = (paged, dtype)
                    self.assertEqual((tuple(out.shape), out.dtype), ((b, sq, hq, 512), dtype), what)
                    self.assertEqual((tuple(lse.shape), lse.dtype), ((b, hq, sq), torch.float32), what)
                    self.assertEqual(len(launched), 1, what)
                    args, kwargs = launched[0]
                    number, variant, problem, ptrs, strides = args[:5]
                    self.assertEqual((number, variant), (17, ""), what)
                    self.assertEqual((problem.v_in_k, problem.head_dim, problem.dv, problem.causal, problem.seqused_k,
                                      problem.page_size, problem.seqlen_k), (True, 576, 512, True, True,
                                                                           page if paged else 0, 3 * page), what)
                    # v is the cache itself: k's pointer and strides (the pool as rows when paged).
                    self.assertEqual(ptrs[:3], (q.data_ptr(), k.data_ptr(), k.data_ptr()), what)
                    rows = k.view(1, -1, 1, 576) if paged else k
                    self.assertEqual(tuple(strides[1]), tuple(rows.stride()), what)
                    self.assertEqual(tuple(strides[2]), tuple(strides[1]), what)
                    self.assertEqual((ptrs[3], ptrs[4]), (out.data_ptr(), lse.data_ptr()), what)
                    self.assertEqual(tuple(strides[3]), tuple(out.stride()), what)
                    # The lengths and the table the rung reads are the metadata check's clamped copies.
                    self.assertEqual(len(sanitized), 1, what)
                    sa = sanitized[0]
                    self.assertEqual((sa[0], sa[1], sa[2], sa[3]), (lens.data_ptr(), 0, b, 3 * page), what)
                    self.assertEqual((sa[6], sa[8], sa[9]), ((3, page, pages) if paged else (0, 0, 0)), what)
                    extras, ints = kwargs["extras"], kwargs["extra_ints"]
                    self.assertEqual(extras[4], sa[13], what)  # seqused_k: the clamped lengths
                    self.assertEqual(extras[5], sa[15], what)  # block_table: the clamped table (0: contiguous)
                    self.assertEqual(ints, (0, 3, pages * page) if paged else (0, 0, 0), what)
                    if paged:
                        self.assertNotEqual(sa[5], wide.data_ptr())  # the view's contiguous copy was checked
            # FlashMLA's later form: get_mla_metadata() with no arguments, num_splits None; an int split count.
            meta, _ = _mla.get_mla_metadata()
            launched.clear()
            _mla.flash_mla_with_kvcache(q, k, None, lens, 512, meta, 3)
            self.assertEqual(launched[0][0][2].num_splits, 3)
            # q whose rows the rungs cannot read (a stride of 577): copied, the cache never.
            wide_q = torch.randn(b, sq, hq, 577).to(torch.float16)
            launched.clear()
            _mla.flash_mla_with_kvcache(wide_q[..., :576], k.half(), None, lens, 512)
            ptrs, strides = launched[0][0][3], launched[0][0][4]
            self.assertNotEqual(ptrs[0], wide_q.data_ptr())
            self.assertEqual(tuple(strides[0]), (sq * hq * 576, hq * 576, 576, 1))
            # Refusals before anything runs, one line each, naming the argument.
            launched.clear()
            sanitized.clear()
            kh = k.half()
            for kwargs, exc, text in (
                    ({"tile_scheduler_metadata": _mla.get_mla_metadata(lens, 7, 1)[0]}, ValueError,
                     "num_heads_per_head_k 7"),
                    ({"tile_scheduler_metadata": _mla.get_mla_metadata(lens[:1], sq * hq, 1)[0]}, ValueError,
                     "cache_seqlens' batch 1"),
                    ({"tile_scheduler_metadata": torch.zeros(132, 8, dtype=torch.int32)}, TypeError,
                     "tile_scheduler_metadata must be None or flashladder.get_mla_metadata()'s"),
                    ({"num_splits": torch.zeros(3, dtype=torch.int32)}, ValueError, "num_splits"),
                    ({"indices": torch.zeros(1)}, NotImplementedError, "indices"),
                    ({"is_fp8_kvcache": True}, NotImplementedError, "is_fp8_kvcache"),
                    ({"attn_sink": torch.zeros(hq)}, NotImplementedError, "attn_sink"),
                    ({"head_dim_v": 576}, ValueError, "head_dim_v")):
                args = {"head_dim_v": 512}
                args.update(kwargs)
                self.one_line(exc, text, _mla.flash_mla_with_kvcache, q.half(), kh, None, lens, **args)
            self.one_line(ValueError, "get_mla_metadata: num_heads_k", _mla.get_mla_metadata, lens, 16, 0)
            self.one_line(ValueError, "get_mla_metadata: cache_seqlens must be int32", _mla.get_mla_metadata,
                          lens.long(), 16, 1)
            self.assertEqual((launched, sanitized), ([], []))
        finally:
            (_ext.forward, _ext.sanitize_cache, _core.plan_forward, _core.check_mla, _launch.raise_metadata_errors,
             _launch.stream) = saved


class MaskedSteps(unittest.TestCase):
    """13. A masked, modified or packed call's checks run once per input signature (_flash.STEPS,
    _ops.Step), with the extension and the device checks stood in (CPU tensors): the second call
    checks nothing again and launches with the first's plans and strides; another window, an
    input of other strides or a packed batch is a signature of its own; a bad argument is refused
    on every call and never kept; the backward gets the strides it would compute; a plain call's
    signature is kept as PLAIN and goes straight to attention(). And the Step's dense strides are
    PyTorch's (size-0 dimensions too)."""

    def setUp(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        from flashladder import _flash, _launch, _ops
        self.torch, self.flash, self.launch, self.ops = torch, _flash, _launch, _ops

    def test_dense_strides(self):
        torch = self.torch
        for shape in ((2, 3, 4, 8), (0, 3, 4, 8), (2, 1, 4, 8), (2, 3, 0, 8), (5, 4, 8), (0, 4, 8)):
            t = torch.empty(shape)
            self.assertEqual(self.ops._dense_strides4(shape), tuple(self.launch._strides4(t)), shape)

    def test_checked_once_per_signature(self):
        torch, fl, launch = self.torch, self.flash, self.launch
        calls = {"check": 0, "mods_key": 0, "fwd": [], "bwd": [], "sanitize": 0}

        class Plan:
            number, variant, problem, workspace_bytes, writes_o_fp32, reads_o32 = 16, "", None, 0, True, True
            workspace_kept = False

        def check_qkv(q, k, v, causal=False, softmax_scale=None, tensor_type=None, own_dv=False):
            calls["check"] += 1
            return (tuple(q.shape), tuple(k.shape), bool(causal), softmax_scale)

        def check_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False, softmax_scale=None, tensor_type=None,
                         own_dv=False):
            calls["check"] += 1
            return check_qkv(q, k, v, causal), (cu_q.shape[0] - 1, q.shape[0], k.shape[0], max_q, max_k)

        mods_key = self.ops.mods_key

        def counted_mods_key(*a, **kw):
            calls["mods_key"] += 1
            return mods_key(*a, **kw)

        def sanitize(*a):
            calls["sanitize"] += 1

        names = ((_ext, "forward"), (_ext, "backward"), (_ext, "sanitize_varlen"), (_ext, "metadata_errors"),
                 (_core, "check_qkv"), (_core, "check_varlen"), (_core, "plan_forward"), (_core, "plan_backward"),
                 (launch, "stream"), (self.ops, "mods_key"))
        saved = [getattr(m, n) for m, n in names]
        stand_ins = (lambda *a, **kw: calls["fwd"].append(a[4]), lambda *a, **kw: calls["bwd"].append(a[4]),
                     sanitize, lambda device, clear=True: "", check_qkv, check_varlen,
                     lambda *a, **kw: Plan(), lambda *a, **kw: Plan(), lambda t: 0, counted_mods_key)
        fl.STEPS.clear()
        try:
            for (m, n), f in zip(names, stand_ins):
                setattr(m, n, f)
            q, k, v = (torch.zeros(1, 64, 4, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
            for _ in range(3):
                fl.flash_attn_func(q, k, v, causal=True, window_size=(7, 0)).float().sum().backward()
            self.assertEqual((len(fl.STEPS), calls["check"], calls["mods_key"]), (1, 1, 1))
            self.assertEqual(len(calls["fwd"]), 3)
            dense = (64 * 4 * 64, 4 * 64, 64, 1)
            self.assertEqual(calls["fwd"][-1], (dense,) * 4)
            self.assertEqual(calls["bwd"][-1], (dense,) * 8)
            fl.flash_attn_func(q, k, v, causal=True, window_size=(8, 0))  # another window: another Step
            self.assertEqual((len(fl.STEPS), calls["mods_key"]), (2, 2))
            # the plain route (the packed-KV form reaches _attention with it): kept as PLAIN, its next
            # call straight to attention() (its own checks)
            windows = calls["check"]
            kv = torch.zeros(1, 64, 2, 4, 64, dtype=torch.float16, requires_grad=True)
            for _ in range(2):
                fl.flash_attn_kvpacked_func(q, kv, causal=True).float().sum().backward()
            self.assertEqual(sum(1 for x in fl.STEPS.values() if x is fl.PLAIN), 1)
            self.assertEqual(calls["mods_key"], 2)
            self.assertEqual(calls["check"], windows + 1)  # check_qkv once, through attention()'s cache
            del fl.STEPS[next(k_ for k_, x in fl.STEPS.items() if x is fl.PLAIN)]
            for _ in range(2):  # refused on every call, never kept
                with self.assertRaises(ValueError):
                    fl.flash_attn_func(q, k, v, causal=True, softcap=-1.0)
            self.assertEqual(len(fl.STEPS), 2)
            # [b, h, s, d] storage seen as [b, s, h, d]: its own signature, its own strides, and the
            # gradients' (empty_like keeps them) reused by the backward
            qt, kt, vt = (torch.zeros(1, 4, 64, 64, dtype=torch.float16).transpose(1, 2).requires_grad_()
                          for _ in range(3))
            for _ in range(2):
                fl.flash_attn_func(qt, kt, vt, softcap=30.0).float().sum().backward()
            self.assertEqual((len(fl.STEPS), calls["mods_key"]), (3, 3))
            st = tuple(qt.stride())
            self.assertEqual(calls["fwd"][-1], (st, st, st, dense))
            self.assertEqual(calls["bwd"][-1], (st, st, st, dense, dense, st, st, st))
            # a packed batch: the cu_seqlens checked on the device once (the same tensors), the call's
            # checks once
            cu = torch.tensor([0, 20, 64], dtype=torch.int32)
            qp, kp, vp = (torch.zeros(64, 4, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
            for _ in range(3):
                fl.flash_attn_varlen_func(qp, kp, vp, cu, cu, 44, 44, causal=True).float().sum().backward()
            self.assertEqual((len(fl.STEPS), calls["mods_key"], calls["sanitize"]), (4, 4, 1))
            packed = (64 * 4 * 64, 4 * 64, 64, 1)
            self.assertEqual(calls["bwd"][-1], (packed,) * 8)
        finally:
            for (m, n), f in zip(names, saved):
                setattr(m, n, f)
            fl.STEPS.clear()
            launch.VARLEN_CHECKED.clear()


class GlobalNames(unittest.TestCase):
    """11. The globals each function of the package reads are bound at module level or builtins."""

    def test_globals_are_defined(self):
        folder = os.path.dirname(flashladder.__file__)
        names = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
        self.assertIn("_kvcache.py", names)
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                top = symtable.symtable(f.read(), name, "exec")
            bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()
                     or s.is_namespace()} | set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__"}
            missing = set()
            todo = list(top.get_children())
            while todo:
                t = todo.pop()
                todo.extend(t.get_children())
                for s in t.get_symbols():
                    if s.is_referenced() and s.is_global() and s.get_name() not in bound:
                        missing.add("%s (in %s)" % (s.get_name(), t.get_name()))
            self.assertEqual(sorted(missing), [], name)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tour", help="the built tour (its --registry-json is compared with rungs())")
    args, rest = ap.parse_known_args()
    TOUR = args.tour
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
