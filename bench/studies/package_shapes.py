"""Shapes no test names, through the package as users call it: one query against 100k keys (GQA 32/8,
flash_attn_func and the KV cache), training shapes with odd lengths, head_dims 96, 112 and 256, a
window, a packed batch with a one-token sequence; forward and backward against the fp64 references
of tests/python/test_gpu.py (flash_case: each case twice, O and the LSE bit for bit the second time,
the gradients within tolerance again). Exits 1 if any comparison fails.

    PYTHONPATH=build/release/python python3 bench/studies/package_shapes.py
"""
import sys

import torch

sys.path.insert(0, "tests/python")
import test_gpu as T
from flashladder import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

torch.manual_seed(0)
bf, fp = torch.bfloat16, torch.float16

def case(what, dt, fn, ref_fn, leaves):
    T.flash_case(what, "bf16" if dt == bf else "fp16", fn, ref_fn, leaves)

# 1. one query against 100k keys, GQA 32/8, bf16 (decode through flash_attn_func and the cache)
q = T.randn(1, 1, 32, 128, dtype=bf); k = T.randn(1, 100000, 8, 128, dtype=bf); v = T.randn(1, 100000, 8, 128, dtype=bf)
o = flash_attn_func(q, k, v, causal=True)
ref, _ = T.reference_mods(q, k, v, True)
T.judge("1x100k GQA 32/8 flash_attn_func", o.float(), ref, "bf16")
kc = torch.zeros(1, 100352, 8, 128, dtype=bf, device="cuda"); vc = torch.zeros_like(kc)
kc[:, :100000] = k; vc[:, :100000] = v
o2 = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor([100000], dtype=torch.int32, device="cuda"), causal=True)
T.judge("1x100k GQA 32/8 with_kvcache", o2.float(), ref, "bf16")
# 2. training shapes with odd lengths
for dt, (b, sq, sk, hq, hkv, d, causal, win) in [
        (bf, (2, 3000, 3000, 32, 8, 128, True, (-1, -1))),
        (fp, (1, 1037, 2049, 12, 4, 96, True, (-1, -1))),
        (bf, (3, 777, 777, 16, 2, 64, False, (255, 0))),
        (fp, (1, 5000, 5000, 8, 8, 256, True, (-1, -1))),
        (bf, (4, 129, 129, 20, 4, 112, False, (-1, -1))),
        (bf, (1, 1, 4097, 16, 16, 128, False, (-1, -1)))]:
    leaves = [T.randn(b, sq, hq, d, dtype=dt), T.randn(b, sk, hkv, d, dtype=dt), T.randn(b, sk, hkv, d, dtype=dt)]
    case("%s b%d %dx%d %d/%d d%d causal=%s win=%s" % (dt, b, sq, sk, hq, hkv, d, causal, win), dt,
         lambda q, k, v, s: flash_attn_func(q, k, v, causal=causal, window_size=win, return_attn_probs=True),
         lambda q, k, v, s: T.reference_mods(q, k, v, causal, window=win), leaves)
# 3. varlen with odd lengths, GQA 16/2, d 64, bf16, causal
lens = [1, 513, 2000, 7, 64]
cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
tot = int(cu[-1])
leaves = [T.randn(tot, 16, 64, dtype=bf), T.randn(tot, 2, 64, dtype=bf), T.randn(tot, 2, 64, dtype=bf)]
case("varlen %s GQA 16/2 d64" % lens, bf,
     lambda q, k, v, s: flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, return_attn_probs=True),
     lambda q, k, v, s: T.reference_varlen(q, k, v, cu, cu, True), leaves)
print("held-out: %d compared, %d failed" % (T.COMPARED[0], len(T.FAILURES)))
for f in T.FAILURES: print("FAIL", f)
sys.exit(1 if T.FAILURES else 0)
