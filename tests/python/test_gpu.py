#!/usr/bin/env python3
"""The Python package on a GPU, against PyTorch (ctest: gpu_python_<part>, label gpu).

    PYTHONPATH=build/ci/python python3 tests/python/test_gpu.py forward|backward|compile|errors|transformers|models|flash|kvcache|metadata|dropout|bert_dropout|mla|fp8|fp8_kvcache|heldout

Exits 77 (ctest: skipped) without PyTorch or a CUDA device, 0 when every check passes, 1 if one
fails. Each comparison prints its max error next to the tolerance.

forward       every forward entry (rungs and variants) that supports the shape against
              F.scaled_dot_product_attention in fp32 on the same 16-bit values: fp16/bf16, causal
              with seqlen_q < seqlen_k and seqlen_q > seqlen_k (the ladder's causal is bottom-right
              aligned: SDPA gets an explicit bool mask), GQA 4:1, MQA, odd tails (67, 131), decode
              shapes; the LSE against a logsumexp; strided inputs (a transposed [b, h, s, d]
              view, a slice of a packed QKV); the default rung.
backward      the default backward (rung 14 on sm_90, else rung 11) through autograd (the custom op)
              against SDPA's gradients: fp16/bf16, head_dim 64, 128 (and 256 on sm_90),
              causal both ways, GQA, MQA, strided inputs; each backward variant through
              attention_backward(rung=...); attention_backward() gives autograd's bits;
              torch.use_deterministic_algorithms(True) gives bitwise-identical gradients.
compile       torch.compile(fullgraph=True) of a function calling flashladder.attention, forward
              and backward, against eager; torch.library.opcheck of the custom op.
errors        a non-contiguous last dim and a misaligned view are copied and run (the op itself
              refuses them); bad input raises TypeError/ValueError with a one-line reason, before
              any launch: wrong device, dtype, head_dim 40 for
              rung 10 (06 off sm_90), GQA 3:2, an unknown rung, rung 11's head_dims under
              autograd, a mask or a dropout outside [0, 1) through the transformers function. Each
              message is printed.
models        transformers models built from configs: each runs and matches the fp32 eager model
              within twice bf16 SDPA's error, output and every parameter's gradient (Llama,
              Qwen2, Qwen3, Mistral's window, Gemma 2's window and softcap, gpt-oss's sinks and
              window, Phi-3's head_dim 96, BERT, ModernBERT's local window; left-padded batches;
              rows packed by position_ids), or is refused naming the argument (T5's position
              bias); generate() on a dynamic cache, and of a left-padded batch on a dynamic and a
              static cache.
flash         FlashAttention's interface (flash_attn_func, the packed and varlen forms) against an fp32
              reference of FlashAttention's definitions, forward, LSE and backward (dsinks too):
              causal, windows, softcap, ALiBi slopes per head and per sequence, sinks and their
              combination, head_dims 64 to 256 (80, 96), GQA, seqlen_q != seqlen_k; packed
              batches with empty and one-token sequences; the packed forms bit for bit; each case
              called twice (the second through its signature's Step: O and the LSE bit for bit);
              deterministic=True; dropout with softcap, a block table and bad arguments refused.
kvcache       flash_attn_with_kvcache against the fp32 reference per sequence: the new keys written
              in place at cache_seqlens (an empty, a half-full and a nearly full sequence),
              decode, speculative (4 queries) and prefill routes, a window; the paged cache
              (shuffled pages of 64) likewise, its pages written (a prefill or a window through
              a contiguous copy of its pages); rotary embedding (interleaved and GPT-NeoX halves,
              rotary_dim 64 of 128, causal, windowed and not, left-padded, contiguous and paged)
              with the cache holding the rotated keys; cache_batch_idx on a permuted subset of a
              larger cache (read as pages, or its rows copied), the other rows untouched; refusals.
dropout       attention dropout (rung 16): the dropped fraction read from S_dmask (return_attn_probs)
              within 5 binomial sigma of the 8-bit rule's (t + 1) / 256, seed by seed and over all,
              at p = 0.1, 0.17, 0.5; O, dQ, dK, dV against a float64 reference that applies S_dmask's
              mask with 1 / (1 - p): fp16 and bf16, head_dim 64 and 128, causal and not, GQA 4:1,
              tails, a window; the same torch.manual_seed gives bitwise-equal O and gradients,
              another seed another O; the packed forms equal flash_attn_func bit for bit under one
              seed; a packed batch (empty and one-token sequences) against the reference per
              sequence; CUDA-graph capture of the forward, and of forward + backward, replayed
              after torch.manual_seed equals eager after the same seed; with ALiBi (slopes per
              head, and per sequence and head) against the reference with the bias; softcap refused.
transformers  a small Llama-style model (GQA, RoPE; random init, nothing downloaded) with
              attn_implementation="ladder" against "sdpa": logits, gradients after one
              backward, and the logits of new tokens against a KV cache (seqlen_q < seqlen_k).
              Skipped without transformers.
bert_dropout  a BERT-style classifier fine-tuned with attention dropout 0.1 through
              attn_implementation="ladder": dropout 0.1 in each training step's calls, none in eval
              mode, seeded; the held-out loss after 10, 20, 40 and 120 steps within 3 x two SDPA
              runs' gap (+ 0.05) of SDPA's, and below its start. Skipped without transformers.

mla           flash_mla_with_kvcache (FlashMLA's interface, rung 17: MLA decode on the latent cache)
              against an fp32 reference that decompresses nothing (softmax(q k^T) k[..., :512] per
              sequence): heads 16, 64, 128; seqlen_q 1 and 2 (causal); paged (shuffled pages of 64)
              and contiguous; fp16 and bf16; cache_seqlens 1, 777 and full; the LSE; num_splits
              forced; a call captured in a CUDA graph and replayed with new q and lengths, bitwise
              equal to eager; metadata past its bound reported; the refusals. Skipped without rung
              17 or off sm_90.
fp8           FP8 from PyTorch (rung 13): fp8_quantize against its definition; flash_attn_func on
              float8_e4m3fn q, k, v with q_descale, k_descale, v_descale against the reference on
              the dequantized inputs (the FP8 floors, fl::tolerance_floor_fp8) and end to end on the
              16-bit inputs: head_dim 64, 128, 256, bf16 and fp16 originals, GQA and MQA, tails,
              causal with seqlen_q > seqlen_k, decode, the LSE; outlier channels with and without
              the Hadamard rotation of q and k; descales left out; strided views; the refusals.
              Skipped without rung 13 or off sm_90.
heldout       shapes no other part names, as a user calls them: one query against 100k keys (GQA
              32/8) through flash_attn_func and the cache, and against 256k keys in the cache;
              training shapes with lengths no tile divides (3000, 1037 x 2049, 777, 5000, 129,
              1500, 999, one query), head_dims 40 to 256 (96, 112, 200; MLA's 192/128), GQA 4:1,
              8:1, 5:1, a window; a packed batch of 1, 513, 2000, 7 and 64 tokens.

Tolerances are the ladder's per-dtype floors (fl::tolerance_floor, for gradients
fl::gradient_tolerance_floor): relative Frobenius and max abs, the latter scaled by
max(1, max |reference|).
"""

import math
import sys
import traceback

SKIP = 77

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)

import flashladder
from flashladder import _core, _ext
from refs import rope_reference  # noqa: E402  tests/python/refs.py

FAILURES = []
COMPARED = [0]  # judge(), expect() and part_models' own checks: a part that compared nothing fails (main)


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg)


# ---- reference ----------------------------------------------------------------------------------

def visible_mask(sq, sk, causal, device):
    """[sq, sk] bool: query i sees key j (bottom-right aligned causal), None when not causal."""
    if not causal:
        return None
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + (sk - sq)


def reference(q, k, v, causal, scale=None):
    """(O [b, sq, hq, d], LSE [b, hq, sq]) in fp32 from the 16-bit (or fp32, differentiable)
    inputs, through F.scaled_dot_product_attention's math backend; rows that see no key: O = 0,
    LSE = -inf (the ladder's contract)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    mask = visible_mask(sq, sk, causal, q.device)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        sees = mask.any(-1)[None, None, :, None]
        out = torch.where(sees, out, torch.zeros_like(out))
    lse = torch.logsumexp(s.detach(), dim=-1)
    return out.transpose(1, 2), lse


def errors(got, ref):
    """(max abs error, relative Frobenius error, max |ref|) of got against ref, in fp64."""
    diff = got.double() - ref.double()
    ref_max = ref.double().abs().max().item()
    norm = ref.double().norm().item()
    return diff.abs().max().item(), diff.norm().item() / (norm if norm > 0 else 1.0), ref_max


def judge(what, got, ref, dtype_name, gradients=False, floor=None):
    """Passes iff max abs <= floor max_abs x max(1, max |ref|) and rel_fro <= floor rel_fro;
    the floor is the ladder's for dtype_name unless given."""
    COMPARED[0] += 1
    floor = floor or _ext.tolerance_floor(dtype_name, gradients)
    if not torch.isfinite(got).all():
        fail("%s: %d non-finite values" % (what, (~torch.isfinite(got)).sum().item()))
        return
    max_abs, rel, ref_max = errors(got, ref)
    tol_abs = floor["max_abs"] * max(1.0, ref_max)
    ok = max_abs <= tol_abs and rel <= floor["rel_fro"]
    line = "%s max_abs %.2e / %.2e, rel_fro %.2e / %.2e" % (what, max_abs, tol_abs, rel,
                                                            floor["rel_fro"])
    if ok:
        print("ok   " + line)
    else:
        fail(line)


def judge_lse(what, lse, ref, dtype_name):
    floor = _ext.tolerance_floor(dtype_name)["lse_abs"]
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isneginf(lse), ~finite):
        fail("%s LSE: -inf exactly where a row sees no key expected" % what)
        return
    if finite.any():
        err = (lse[finite].double() - ref[finite].double()).abs().max().item()
        if err > floor:
            fail("%s LSE max_abs %.2e / %.2e" % (what, err, floor))


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def device_gate(r):
    """Why this GPU cannot run rung r at all, from its registration alone ('' when it can): its
    min_cc; min_cc 90 is an sm_90a rung, which runs on compute capability 9.0 only. Never from
    supports(), so a supports() that refuses everything fails on the GPU it is meant for."""
    major, minor = torch.cuda.get_device_capability()
    if r.min_cc >= 90 and (major, minor) != (9, 0):
        return "%s needs an sm_90 GPU" % r.label
    if r.min_cc > major * 10 + minor:
        return "%s needs compute capability >= %d.%d" % (r.label, r.min_cc // 10, r.min_cc % 10)
    return ""


def expect_runs(what, ran, expected):
    """A section's count: as many cases ran as supports() accepted up front, and at least one."""
    print("%s: %d of %d expected cases ran" % (what, ran, expected))
    if ran != expected:
        fail("%s: %d cases ran, %d expected (accepted by supports())" % (what, ran, expected))
    elif expected == 0:
        fail("%s: no case ran" % what)


def randn(*shape, dtype=torch.float16, offset=0.0):
    return (torch.randn(*shape, device="cuda") + offset).to(dtype)


# ---- forward --------------------------------------------------------------------------------------

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): equal lengths; GQA 4:1 with tails, seqlen_q <
# seqlen_k; MQA with seqlen_q > seqlen_k (causal: rows that see no key); decode shapes.
PREFILL = [(2, 128, 128, 4, 4), (1, 67, 131, 8, 2), (2, 131, 67, 4, 1)]
DECODE = [(2, 3, 777, 8, 2), (1, 1, 1000, 8, 1)]


def forward_case(r, shape, d, dtype_name, causal, counts):
    b, sq, sk, hq, hkv = shape
    why = flashladder.supports(r, b, sq, sk, hq, hkv, d, dtype=dtype_name, causal=causal)
    if why:
        counts["skipped"] += 1
        return
    dt = DTYPES[dtype_name]
    q, k, v = randn(b, sq, hq, d, dtype=dt, offset=0.5), randn(b, sk, hkv, d, dtype=dt), \
        randn(b, sk, hkv, d, dtype=dt, offset=0.5)
    out, lse = flashladder.attention(q, k, v, rung=r, causal=causal, return_lse=True)
    ref, ref_lse = reference(q, k, v, causal)
    what = "%s %s d=%d B=%d Sq=%d Sk=%d H=%d/%d causal=%d" % (r.label, dtype_name, d, b, sq, sk, hq,
                                                              hkv, causal)
    judge(what, out.float(), ref, dtype_name)
    judge_lse(what, lse, ref_lse, dtype_name)
    counts["ran"] += 1


def part_forward():
    counts = {"ran": 0, "skipped": 0}
    for r in flashladder.rungs(variants=True):
        if r.backward:
            continue  # its forward is rung 06's, tested as rung 06
        dims = [d for d in (32, 64, 128, 256) if not r.head_dims or d in r.head_dims]
        shapes = PREFILL + DECODE
        if r.variant:  # variants: the two common head_dims and two shapes, to bound the time
            dims = [d for d in dims if d in (64, 128)]
            shapes = [PREFILL[1], DECODE[0]] if r.decode else PREFILL[1:]
        elif not r.head_dims:
            dims = [64, 128, 256]
        for d in dims:
            for shape in shapes:
                for dtype_name in r.dtypes:
                    for causal in (False, True):
                        forward_case(r, shape, d, dtype_name, causal, counts)
    print("forward matrix: %d cases ran, %d refused by the rung's supports" % (counts["ran"],
                                                                               counts["skipped"]))
    if counts["ran"] == 0:
        fail("no forward case ran")
    part_forward_layouts()


def part_forward_layouts():
    """Strided inputs every rung reads through its strides, and the default rung."""
    b, s, hq, hkv, d = 2, 131, 8, 2, 64
    base_q = randn(b, hq, s, d)  # transformers' [batch, heads, seqlen, head_dim]
    base_k, base_v = randn(b, hkv, s, d), randn(b, hkv, s, d, offset=0.5)
    transposed = (base_q.transpose(1, 2), base_k.transpose(1, 2), base_v.transpose(1, 2))
    packed = randn(b, s, 3, hq, d)  # one [b, s, 3, h, d] projection, sliced
    sliced = (packed[:, :, 0], packed[:, :, 1], packed[:, :, 2])
    dense = (randn(b, s, hq, d), randn(b, s, hkv, d), randn(b, s, hkv, d, offset=0.5))
    key = _core.check_qkv(*transposed, True, None)
    default = _core.plan_forward(None, "", key, torch.cuda.current_device()).label
    print("default forward rung on %s: %s" % (flashladder.device_info().arch, default))
    ran = 0
    for r in [None] + flashladder.rungs():
        if r is not None and (r.backward or r.decode):
            continue
        for name, (q, k, v) in (("transposed", transposed), ("packed-slice", sliced), ("dense", dense)):
            for causal in (False, True):
                if r is not None and flashladder.supports(r, q.shape[0], q.shape[1], k.shape[1],
                                                          q.shape[2], k.shape[2], d, causal=causal):
                    continue
                ref, ref_lse = reference(q, k, v, causal)
                label = r.label if r else "default (%s)" % default
                # The second call with the same inputs' signature takes the fast path (a prepared
                # launch; O from empty_like(q) where q is dense like O; no LSE allocated or stored
                # where the rung allows a null one); the third asks the fast path for the LSE too.
                for call in ("checked path", "fast path", "fast path with the LSE"):
                    result = flashladder.attention(q, k, v, rung=r, causal=causal,
                                                   return_lse=call.endswith("LSE"))
                    out = result[0] if call.endswith("LSE") else result
                    judge("%s %s causal=%d, %s" % (label, name, causal, call), out.float(), ref, "fp16")
                    if call.endswith("LSE"):
                        judge_lse("%s %s causal=%d, %s" % (label, name, causal, call), result[1], ref_lse, "fp16")
                    if out.stride() != out.contiguous().stride():
                        fail("%s %s: O is not dense [b, s, h, d] (strides %s)" % (name, call, out.stride()))
                ran += r is not None
    if ran == 0:  # the default rung always runs; at least one named rung must take these layouts
        fail("strided layouts: no rung took them")
    else:
        print("strided layouts: %d rung cases ran" % ran)


# ---- backward -------------------------------------------------------------------------------------

def grads_case(shape, d, dtype_name, causal, layout="dense", rung=None):
    b, sq, sk, hq, hkv = shape
    dt = DTYPES[dtype_name]
    if layout == "dense":
        leaves = [randn(b, sq, hq, d, dtype=dt, offset=0.5), randn(b, sk, hkv, d, dtype=dt),
                  randn(b, sk, hkv, d, dtype=dt, offset=0.5)]
        for t in leaves:
            t.requires_grad_()
        q, k, v = leaves
    else:  # transformers' layout, transposed: dQ, dK, dV come back with the same strides
        leaves = [randn(b, hq, sq, d, dtype=dt, offset=0.5), randn(b, hkv, sk, d, dtype=dt),
                  randn(b, hkv, sk, d, dtype=dt, offset=0.5)]
        for t in leaves:
            t.requires_grad_()
        q, k, v = (t.transpose(1, 2) for t in leaves)
    out = flashladder.attention(q, k, v, rung=rung, causal=causal)
    dout = randn(*out.shape, dtype=dt)
    out.backward(dout)
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref, _ = reference(*ref_in, causal)
    ref.backward(dout.float())
    what = "the default backward after %s %s d=%d B=%d Sq=%d Sk=%d H=%d/%d causal=%d %s" % (
        "default" if rung is None else rung, dtype_name, d, b, sq, sk, hq, hkv, causal, layout)
    for name, leaf, r in zip(("dQ", "dK", "dV"), leaves, ref_in):
        g = leaf.grad if layout == "dense" else leaf.grad.transpose(1, 2)
        judge("%s %s" % (what, name), g.float(), torch.nan_to_num(r.grad), dtype_name, True)


def variant_grads_case(r, shape, d, dtype_name):
    b, sq, sk, hq, hkv = shape
    dt = DTYPES[dtype_name]
    q, k, v = randn(b, sq, hq, d, dtype=dt, offset=0.5), randn(b, sk, hkv, d, dtype=dt), \
        randn(b, sk, hkv, d, dtype=dt, offset=0.5)
    out, lse = flashladder.attention(q, k, v, causal=True, return_lse=True)
    dout = randn(*out.shape, dtype=dt)
    grads = flashladder.attention_backward(dout, q, k, v, out, lse, causal=True, rung=r)
    ref_in = [t.float().requires_grad_() for t in (q, k, v)]
    ref, _ = reference(*ref_in, True)
    ref.backward(dout.float())
    for name, g, t in zip(("dQ", "dK", "dV"), grads, ref_in):
        # An e4m3 dQ (Rung.fp8_dq: rung 14's fp8-dq) against the FP8 gradient floor.
        floor = _ext.tolerance_floor(dtype_name, True, True) if name == "dQ" and r.fp8_dq else None
        judge("%s %s d=%d B=%d Sq=%d Sk=%d H=%d/%d causal=1 %s" % (r.label, dtype_name, d, b, sq,
                                                                    sk, hq, hkv, name),
              g.float(), torch.nan_to_num(t.grad), dtype_name, True, floor)


def part_backward():
    if not any(r.backward for r in flashladder.rungs()):
        print("rung 11 not built: skipped")
        sys.exit(SKIP)
    dims = [64, 128]
    if (any(r.number == 14 and not r.variant for r in flashladder.rungs())
            and torch.cuda.get_device_capability()[0] == 9):
        dims.append(256)  # rung 14, the default backward on sm_90, also takes head_dim 256
    for dtype_name in ("fp16", "bf16"):
        for d in dims:
            for shape in PREFILL:
                for causal in (False, True):
                    grads_case(shape, d, dtype_name, causal)
    grads_case(PREFILL[1], 128, "bf16", True, layout="transposed")
    grads_case(PREFILL[0], 64, "fp16", True, rung=6)  # rung 06's forward, as rung 11 measures
    # Every backward variant through attention_backward(rung=...), on one causal GQA shape, at
    # each of 64 and 128 it declares: every one accepted up front (a refusal fails), and all run;
    # a variant this GPU cannot run at all (rung 14's off sm_90) is left out.
    planned = []
    b, sq, sk, hq, hkv = PREFILL[1]
    for r in flashladder.rungs(variants=True):
        if not (r.backward and r.variant):
            continue
        if device_gate(r):
            print("left out: %s" % device_gate(r))
            continue
        for d in (64, 128):
            if r.head_dims and d not in r.head_dims:
                continue
            why = flashladder.supports(r, b, sq, sk, hq, hkv, d, dtype="bf16", causal=True)
            if why:
                fail("%s refused d=%d: %s" % (r.label, d, why))
            else:
                planned.append((r, d))
    ran = 0
    for r, d in planned:
        variant_grads_case(r, PREFILL[1], d, "bf16")
        ran += 1
    if any(r.backward and r.variant and not device_gate(r) for r in flashladder.rungs(variants=True)):
        expect_runs("backward variants", ran, len(planned))
    # torch.use_deterministic_algorithms(True) selects the deterministic dQ: two autograd passes
    # give identical bits, and attention_backward(deterministic=True), the op autograd runs,
    # gives the same bits again. (Without it dQ is summed by atomics, in no fixed order.)
    b, sq, sk, hq, hkv, d = 2, 67, 131, 8, 2, 128
    q, k, v = randn(b, sq, hq, d), randn(b, sk, hkv, d), randn(b, sk, hkv, d)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    dout = randn(b, sq, hq, d)
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(2):
            q.grad = k.grad = v.grad = None
            out, lse = flashladder.attention(q, k, v, causal=True, return_lse=True)
            out.backward(dout)
            runs.append((q.grad.clone(), k.grad.clone(), v.grad.clone()))
        # Autograd's D reads the forward's fp32 O: the same copy, from the same forward.
        from flashladder import _launch
        qd, kd, vd = q.detach(), k.detach(), v.detach()
        o32 = _launch.forward(qd, kd, vd, _core.check_qkv(qd, kd, vd, True, None), o_fp32=True)[2]
        direct = flashladder.attention_backward(dout, q.detach(), k.detach(), v.detach(),
                                                out.detach(), lse, causal=True, deterministic=True,
                                                out_fp32=o32)
    finally:
        torch.use_deterministic_algorithms(False)
    if not all(torch.equal(a, bb) for a, bb in zip(*runs)):
        fail("torch.use_deterministic_algorithms(True): two backward passes differ")
    elif not all(torch.equal(a, bb) for a, bb in zip(runs[0], direct)):
        fail("attention_backward(deterministic=True) differs from autograd's gradients")
    else:
        print("ok   deterministic backward: autograd twice and attention_backward() bitwise identical")
    if lse.requires_grad:
        fail("the LSE must be non-differentiable (rung 11 has no gradient through it)")
    prepared_step_cases()
    prepared_mods_cases()
    autograd_step_kernels()


def prepared_step_cases():
    """A signature's second autograd step takes the prepared launches (_launch.TRAIN, made by the
    first, checked call): with torch.use_deterministic_algorithms(True), O and dQ, dK, dV of steps 2
    and 3 equal step 1's bit for bit, and the reference's within the bound; dense leaves and
    transposed ones (transformers' layout, O then not like q), GQA 4:1, causal with seqlen_q !=
    seqlen_k. A dO off the 16-byte grid is refused by the prepared backward and goes through the
    checked one, which says why in one line."""
    from flashladder import _launch
    calls = {"forward": 0, "backward": 0}
    originals = (_launch.Prepared.launch_forward, _launch.Prepared.launch_backward)

    def counted(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)
        return wrapper

    _launch.Prepared.launch_forward = counted("forward", originals[0])
    _launch.Prepared.launch_backward = counted("backward", originals[1])
    torch.use_deterministic_algorithms(True)
    try:
        for layout in ("dense", "transposed"):
            b, sq, sk, hq, hkv, d = 2, 131, 257, 8, 2, 128
            dt = torch.bfloat16
            if layout == "dense":
                leaves = [randn(b, sq, hq, d, dtype=dt, offset=0.5), randn(b, sk, hkv, d, dtype=dt),
                          randn(b, sk, hkv, d, dtype=dt, offset=0.5)]
                view = lambda t: t  # noqa: E731
            else:
                leaves = [randn(b, hq, sq, d, dtype=dt, offset=0.5), randn(b, hkv, sk, d, dtype=dt),
                          randn(b, hkv, sk, d, dtype=dt, offset=0.5)]
                view = lambda t: t.transpose(1, 2)  # noqa: E731
            for t in leaves:
                t.requires_grad_()
            dout = randn(b, sq, hq, d, dtype=dt)
            before = dict(calls)
            runs = []
            for _ in range(3):
                for t in leaves:
                    t.grad = None
                out = flashladder.attention(*(view(t) for t in leaves), causal=True)
                out.backward(dout)
                runs.append((out.detach().clone(),) + tuple(t.grad.clone() for t in leaves))
            what = "the prepared autograd step (%s leaves, bf16 d=128 GQA 8/2 Sq=%d Sk=%d causal)" % (layout, sq, sk)
            COMPARED[0] += 1
            if calls["forward"] - before["forward"] != 2 or calls["backward"] - before["backward"] != 2:
                fail("%s: steps 2 and 3 took %d prepared forwards and %d prepared backwards, expected 2 each"
                     % (what, calls["forward"] - before["forward"], calls["backward"] - before["backward"]))
            elif not all(torch.equal(a, c) for run in runs[1:] for a, c in zip(runs[0], run)):
                fail("%s: O or a gradient differs from the first (checked) step's" % what)
            else:
                print("ok   %s: steps 2 and 3 prepared, bitwise equal to step 1" % what)
            ref_in = [view(t).detach().float().requires_grad_() for t in leaves]
            ref, _ = reference(*ref_in, True)
            ref.backward(dout.float())
            for name, g, r in zip(("dQ", "dK", "dV"), runs[2][1:], ref_in):
                judge("%s %s" % (what, name), view(g).float(), torch.nan_to_num(r.grad), "bf16", True)
        # dO off the 16-byte grid (a view one element into a buffer), in the checked step and in
        # the prepared one: copied to an aligned buffer, the gradients those of the aligned dO.
        q, k, v = (randn(1, 64, 4, 64).requires_grad_() for _ in range(3))
        odd = randn(1 * 64 * 4 * 64 + 1)[1:].view(1, 64, 4, 64)
        got = []
        for dout in (odd, odd, odd.clone()):
            q.grad = k.grad = v.grad = None
            flashladder.attention(q, k, v).backward(dout)
            got.append((q.grad.clone(), k.grad.clone(), v.grad.clone()))
        COMPARED[0] += 1
        if not all(torch.equal(a, c) for run in got[:2] for a, c in zip(run, got[2])):
            fail("a dO off the 16-byte grid: the gradients differ from the aligned dO's")
        else:
            print("ok   a dO off the 16-byte grid (checked and prepared step): the aligned dO's gradients")
    finally:
        torch.use_deterministic_algorithms(False)
        _launch.Prepared.launch_forward, _launch.Prepared.launch_backward = originals


def prepared_mods_cases():
    """A masked, modified or packed call takes its Step's prepared launches (_ops.Step.prepared_forward
    / prepared_backward: PreparedForward / PreparedBackward with the extras per launch) from its
    first call on: the Step is made once the call's checks pass, before it runs. With
    torch.use_deterministic_algorithms(True), a first step with the prepared launches refused (the
    checked binding runs, as it does where a launch does not fit), then three steps that launch both
    prepared, and their O, dQ, dK, dV (and dsinks) equal the checked step's bit for bit: softcap, a
    window, ALiBi slopes, learnable sinks, a packed batch; bf16 GQA 8/2."""
    from flashladder import _ops
    calls = {"forward": 0, "backward": 0}
    originals = (_ops.Step.prepared_forward, _ops.Step.prepared_backward)

    class Counted:
        def __init__(self, name, launch):
            self.name, self.launch = name, launch

        def launch_mods(self, *args):
            done = self.launch.launch_mods(*args)
            calls[self.name] += bool(done)
            return done

    refused = [False]

    def counted(name, fn):
        def wrapper(*args):
            launch = fn(*args)
            return None if launch is None or refused[0] else Counted(name, launch)
        return wrapper

    _ops.Step.prepared_forward = counted("forward", originals[0])
    _ops.Step.prepared_backward = counted("backward", originals[1])
    torch.use_deterministic_algorithms(True)
    try:
        b, sq, sk, hq, hkv, d = 2, 131, 257, 8, 2, 64
        dt = torch.bfloat16
        lens_q, lens_k = [131, 77], [257, 190]
        cu_q = torch.tensor([0, 131, 208], dtype=torch.int32, device="cuda")
        cu_k = torch.tensor([0, 257, 447], dtype=torch.int32, device="cuda")
        slopes = torch.rand(hq, device="cuda") * 0.3
        sinks = torch.randn(hq, device="cuda").requires_grad_()
        cases = [
            ("softcap 30, causal", False, lambda q, k, v: flashladder.flash_attn_func(q, k, v, causal=True,
                                                                                      softcap=30.0)),
            ("window (63, 0)", False, lambda q, k, v: flashladder.flash_attn_func(q, k, v, window_size=(63, 0))),
            ("ALiBi slopes, causal", False, lambda q, k, v: flashladder.flash_attn_func(q, k, v, causal=True,
                                                                                        alibi_slopes=slopes)),
            ("learnable sinks, window (31, 31)", False, lambda q, k, v: flashladder.flash_attn_func(
                q, k, v, window_size=(31, 31), learnable_sink=sinks)),
            ("packed batch (varlen), causal", True, lambda q, k, v: flashladder.flash_attn_varlen_func(
                q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)),
        ]
        for name, packed, call in cases:
            if packed:
                shapes = [(sum(lens_q), hq, d), (sum(lens_k), hkv, d), (sum(lens_k), hkv, d)]
            else:
                shapes = [(b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)]
            leaves = [randn(*shape, dtype=dt, offset=0.25).requires_grad_() for shape in shapes]
            dout = randn(*shapes[0], dtype=dt)
            before = dict(calls)
            runs = []
            for i in range(4):
                refused[0] = i == 0  # the first step: the checked binding
                for t in leaves + [sinks]:
                    t.grad = None
                out = call(*leaves)
                out.backward(dout)
                got = (out.detach().clone(),) + tuple(t.grad.clone() for t in leaves)
                if sinks.grad is not None:
                    got += (sinks.grad.clone(),)
                runs.append(got)
            refused[0] = False
            what = "the prepared masked step (%s, bf16 d=%d GQA %d/%d)" % (name, d, hq, hkv)
            COMPARED[0] += 1
            took = (calls["forward"] - before["forward"], calls["backward"] - before["backward"])
            names = ("O", "dQ", "dK", "dV", "dsinks")
            differ = sorted({names[j] for run in runs[1:] for j, (a, c) in enumerate(zip(runs[0], run))
                             if not torch.equal(a, c)})
            if took != (3, 3):
                fail("%s: steps 2 to 4 took %d prepared forwards and %d prepared backwards, expected 3 each"
                     % ((what,) + took))
            elif len(set(len(run) for run in runs)) != 1 or differ:
                fail("%s: %s differ from the checked step's" % (what, ", ".join(differ) or "the gradients"))
            else:
                print("ok   %s: steps 2 to 4 prepared, bitwise equal to the checked step" % what)
    finally:
        torch.use_deterministic_algorithms(False)
        _ops.Step.prepared_forward, _ops.Step.prepared_backward = originals


def gpu_events(fn):
    """Names of the GPU kernels and memsets one call of @p fn launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if str(e.device_type).endswith("CUDA")]


def step_kernels(step):
    """gpu_events of @p step after a first call (plans, the allocator's blocks)."""
    step()
    torch.cuda.synchronize()
    return gpu_events(step)


def autograd_step_kernels():
    """A forward + backward step under autograd launches no PyTorch fill: nothing fills a zero
    gradient for the LSE (or the fp32 O). With rung 14 as the default backward (sm_90), its backward
    pass launches no memset either (the pre-pass zeroes dQ's accumulator; rung 15's forward zeroes
    its own tile counter with one). And each profile saw the rungs' kernels (a profile that saw
    nothing proves nothing)."""
    b, s_, h, d = 2, 256, 4, 64
    q, k, v = (randn(b, s_, h, d).requires_grad_() for _ in range(3))
    dout = randn(b, s_, h, d)
    rung14 = (torch.cuda.get_device_capability()[0] == 9
              and any(r.number == 14 and not r.variant for r in flashladder.rungs()))
    steps = [("flashladder.attention, causal", lambda: flashladder.attention(q, k, v, causal=True))]
    if built(16):
        steps.append(("flash_attn_func, window (63, 0)",
                      lambda: flashladder.flash_attn_func(q, k, v, causal=True, window_size=(63, 0))))
    for what, fwd in steps:
        def step(fwd=fwd):
            q.grad = k.grad = v.grad = None
            fwd().backward(dout)

        held = {}

        def forward_only(fwd=fwd):
            held["out"] = fwd()

        def backward_only():
            q.grad = k.grad = v.grad = None
            held.pop("out").backward(dout)

        names = step_kernels(step)
        forward_only()  # the backward pass alone: its graph made outside the profile
        torch.cuda.synchronize()
        bwd_names = gpu_events(backward_only)
        fills = [n for n in names if "Fill" in n or "fill" in n]
        memsets = [n for n in bwd_names if "emset" in n]
        COMPARED[0] += 1
        if not names or not bwd_names:
            fail("%s: the profiler saw no GPU work in a step (%d launches) or a backward pass (%d)"
                 % (what, len(names), len(bwd_names)))
        elif fills:
            fail("%s: a forward + backward step launches PyTorch fills: %s" % (what, fills))
        elif rung14 and what.startswith("flashladder.attention") and memsets:
            fail("%s: rung 14's backward pass launches a memset: %s" % (what, memsets))
        else:
            print("ok   %s: one forward + backward step, %d GPU launches (backward %d), no fill%s" % (
                what, len(names), len(bwd_names), ", no memset in the backward" if rung14 else ""))


# ---- torch.compile --------------------------------------------------------------------------------

def part_compile():
    flashladder.load_ops()
    b, sq, sk, hq, hkv, d = 2, 128, 192, 8, 2, 64
    q, k, v = randn(b, sq, hq, d), randn(b, sk, hkv, d), randn(b, sk, hkv, d)
    for with_o_fp32 in (False, True):
        torch.library.opcheck(torch.ops.flashladder.attention.default,
                              (q, k, v, True, 0.0, 0, "", with_o_fp32))
    print("ok   torch.library.opcheck(flashladder::attention), with and without the fp32 O")

    def loss_fn(q, k, v):
        return (flashladder.attention(q, k, v, causal=True).float() ** 2).sum()

    def fwd(q, k, v):
        return flashladder.attention(q, k, v, causal=True) * 2

    compiled_fwd = torch.compile(fwd, fullgraph=True)
    judge("torch.compile forward vs eager", compiled_fwd(q, k, v).float(), fwd(q, k, v).float(),
          "fp16")
    grads = []
    for fn in (loss_fn, torch.compile(loss_fn, fullgraph=True)):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        fn(*leaves).backward()
        grads.append([t.grad.float() for t in leaves])
    for name, eager, comp in zip(("dQ", "dK", "dV"), *grads):
        judge("torch.compile backward vs eager %s" % name, comp, eager, "fp16", True)


# ---- bad input ------------------------------------------------------------------------------------

def expect(exc, text, fn):
    COMPARED[0] += 1
    try:
        fn()
    except exc as e:
        msg = str(e)
        if text not in msg or "\n" in msg.strip():
            fail("%s raised %r, expected one line with %r" % (exc.__name__, msg, text))
        else:
            print("ok   %s: %s" % (type(e).__name__, msg))
        return
    except Exception as e:  # noqa: BLE001
        fail("expected %s(%r), got %s: %s" % (exc.__name__, text, type(e).__name__, e))
        return
    fail("expected %s(%r), nothing raised" % (exc.__name__, text))


def part_errors():
    b, s, h, d = 2, 64, 4, 128
    q, k, v = randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d)
    att = flashladder.attention
    expect(ValueError, "q is on cpu", lambda: att(q.cpu(), k, v))
    expect(ValueError, "k is on cpu", lambda: att(q, k.cpu(), v))
    expect(TypeError, "torch.float16 or torch.bfloat16", lambda: att(q.float(), k.float(), v.float()))
    expect(TypeError, "v is torch.bfloat16 but q is torch.float16", lambda: att(q, k, v.bfloat16()))
    expect(TypeError, "must be a torch.Tensor", lambda: att(q, k.tolist(), v))
    # A layout the rungs cannot read (a strided head_dim, data off the 16-byte grid) is copied and
    # run, as FlashAttention takes it: the contiguous copy's result, and under autograd the
    # gradient reaches the original; the op itself (what torch.compile runs) refuses it.
    flat = torch.empty(b * s * h * d + 8, device="cuda", dtype=torch.float16)
    misaligned = flat[1:1 + b * s * h * d].view(b, s, h, d)
    misaligned.copy_(q)
    wide = randn(b, s, h, 2 * d)
    rung16 = any(r.number == 16 for r in flashladder.rungs()) and flashladder.device_info().arch == "sm_90"
    for what, x in (("a strided head_dim", wide[..., ::2]), ("data off the 16-byte grid", misaligned)):
        COMPARED[0] += 1
        want = att(x.contiguous().clone(), k, v, causal=True)
        got = att(x, k, v, causal=True)
        fa = flashladder.flash_attn_func(x, k, v, causal=True, window_size=(15, 0)) if rung16 else None
        fa_want = flashladder.flash_attn_func(x.contiguous().clone(), k, v, causal=True, window_size=(15, 0)) \
            if fa is not None else None
        base = wide.clone().requires_grad_() if x is not misaligned else None
        if base is not None:
            att(base[..., ::2], k, v, causal=True).backward(randn(b, s, h, d))
        if not torch.equal(got, want) or (fa is not None and not torch.equal(fa, fa_want)):
            fail("%s: the copied input's result differs from the contiguous input's" % what)
        elif base is not None and not (torch.isfinite(base.grad).all() and base.grad[..., ::2].abs().sum() > 0
                                       and base.grad[..., 1::2].abs().sum() == 0):
            fail("%s under autograd: the gradient does not reach the original's columns" % what)
        else:
            print("ok   %s: copied and run (attention%s), as its contiguous copy" % (
                what, ", flash_attn_func with a window" if fa is not None else ""))
    expect(ValueError, "heads_q (3) must be a multiple of heads_kv (2)",
           lambda: att(randn(b, s, 3, 64), randn(b, s, 2, 64), randn(b, s, 2, 64)))
    expect(ValueError, "4 dimensions", lambda: att(q[0], k, v))
    d40 = [randn(b, s, h, 40) for _ in range(3)]
    built = {r.number for r in flashladder.rungs()}
    if 10 in built and flashladder.device_info().arch == "sm_90":
        expect(ValueError, "head_dim 40 not supported", lambda: att(*d40, rung=10))
    elif 10 in built:
        expect(ValueError, "needs", lambda: att(*d40, rung=10))
    expect(ValueError, "head_dim 40 not supported (supported: 32, 64, 128, 256)",
           lambda: att(*d40, rung=6))
    if rung16:
        # Rung 16 takes every multiple of 8 (the next tile up): the route runs head_dim 40, and
        # its backward (rung 16's) too.
        what = "head_dim 40 through the route (rung 16 on the d = 64 tiles)"
        leaves = [x.clone().requires_grad_() for x in d40]
        refs = [x.float().requires_grad_() for x in d40]
        dout = randn(b, s, h, 40)
        out = att(*leaves, causal=True)
        ref_out = reference(*refs, True)[0]
        judge(what, out.float(), ref_out.detach(), "fp16")
        out.backward(dout)
        ref_out.backward(dout.float())
        for name, x, r in zip("qkv", leaves, refs):
            judge("%s: d%s" % (what, name), x.grad.float(), r.grad, "fp16", gradients=True)
    else:
        expect(ValueError, "no default rung runs", lambda: att(*d40))
    expect(ValueError, "no rung 99 in this build", lambda: att(q, k, v, rung=99))
    expect(ValueError, "variant 'nope'", lambda: att(q, k, v, rung=6, variant="nope"))
    expect(TypeError, "rung must be a rung number", lambda: att(q, k, v, rung="06"))
    expect(ValueError, "softmax_scale must be a finite number > 0",
           lambda: att(q, k, v, softmax_scale=0.0))
    if 11 in built and not (16 in built and flashladder.device_info().arch == "sm_90"):
        d32 = [randn(b, s, h, 32).requires_grad_() for _ in range(3)]
        expect(ValueError, "head_dim 32 not supported (supported: 64, 128)", lambda: att(*d32))
        with torch.no_grad():
            att(*d32)  # without autograd, head_dim 32 is fine (rung 06 or 10)
    # (With rung 16 on sm_90, head_dim 32 has a backward: rung 16's on the d = 64 tiles; part
    # flash checks its gradients.)
    # Through the registered op directly: the same reasons reach the caller.
    flashladder.load_ops()
    expect(Exception, "q is on cpu",
           lambda: torch.ops.flashladder.attention(q.cpu(), k, v, False, 0.0, 0, "", False))
    expect(Exception, "16-byte aligned",
           lambda: torch.ops.flashladder.attention(misaligned, k, v, False, 0.0, 0, "", False))
    # The transformers function refuses what it cannot honour.
    from flashladder import transformers_attention as hf

    class Module:
        is_causal = True

    t = (randn(b, h, s, 64), randn(b, h, s, 64), randn(b, h, s, 64))
    mask = torch.ones(b, 1, s, s, dtype=torch.bool, device="cuda")
    expect(ValueError, "2D padding mask", lambda: hf(Module(), *t, mask))
    expect(ValueError, "dropout must be a probability", lambda: hf(Module(), *t, None, dropout=1.5))
    expect(ValueError, "position_bias", lambda: hf(Module(), *t, None, position_bias=t[0]))
    expect(ValueError, "head_mask", lambda: hf(Module(), *t, None, head_mask=None))
    # A window as wide as the sequence masks nothing: it runs (transformers' own rule). A narrower
    # one keeps sliding_window - 1 keys back (rung 16, where built).
    hf(Module(), *t, None, sliding_window=s)
    if 16 in built and flashladder.device_info().arch == "sm_90":
        out, _ = hf(Module(), *t, None, sliding_window=32)
        ref, _ = reference_mods(*(x.transpose(1, 2) for x in t), True, window=(31, 0))
        judge("transformers_attention sliding_window=32", out.float(), ref, "fp16")
    out, weights = hf(Module(), *t, None, scaling=0.125)
    ref, _ = reference(*(x.transpose(1, 2) for x in t), True, 0.125)
    judge("transformers_attention (layout, scaling, module.is_causal)", out.float(), ref, "fp16")
    if weights is not None or tuple(out.shape) != (b, s, h, 64):
        fail("transformers_attention must return ([b, s, h, d], None)")
    torch.cuda.synchronize()  # nothing asynchronous went wrong either


# ---- transformers ---------------------------------------------------------------------------------

# A whole model in fp16 carries each layer's rounding into the next (two layers, RMSNorm, MLP):
# the per-kernel floors do not apply; 1% of the logits' norm does.
MODEL_FLOOR = {"rel_fro": 1e-2, "max_abs": 2e-2}


def import_transformers():
    """transformers, its version printed; exits 77 (skipped) where it is not installed."""
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: skipped (exit 77)")
        sys.exit(SKIP)
    print("transformers %s" % transformers.__version__)
    return transformers


def part_transformers():
    transformers = import_transformers()
    LlamaConfig, LlamaForCausalLM = transformers.LlamaConfig, transformers.LlamaForCausalLM
    import flashladder._hf as hf

    flashladder.register_transformers()
    calls = [0]
    registered = hf.transformers_attention

    def counting(*args, **kwargs):  # proves the model's attention ran on the ladder
        calls[0] += 1
        return registered(*args, **kwargs)

    hf.transformers_attention = counting
    dtype = torch.float16
    models = {}
    for impl in ("sdpa", "ladder"):
        torch.manual_seed(0)
        # head_dim 64, GQA 4:1 (8 query heads, 2 KV heads), RoPE: a Llama in miniature.
        config = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024,
                             num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                             max_position_embeddings=1024, attention_dropout=0.0,
                             attn_implementation=impl)
        models[impl] = LlamaForCausalLM(config).to("cuda", dtype)
        if models[impl].config._attn_implementation != impl:
            fail("the model runs %s, not %s" % (models[impl].config._attn_implementation, impl))
    models["ladder"].load_state_dict(models["sdpa"].state_dict())
    ids = torch.randint(0, config.vocab_size, (2, 200), device="cuda")
    logits = {}
    for impl, m in models.items():
        m.train()
        out = m(ids, labels=ids)
        out.loss.backward()
        logits[impl] = out.logits.float()
    judge("Llama logits ladder vs sdpa", logits["ladder"], logits["sdpa"], "fp16",
          floor=MODEL_FLOOR)
    for (name, p_ref), (_, p) in zip(models["sdpa"].named_parameters(),
                                     models["ladder"].named_parameters()):
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")) and ".0." in name:
            max_abs, rel, _ = errors(p.grad.float(), p_ref.grad.float())
            line = "gradient of %s: rel_fro %.2e (vs sdpa)" % (name, rel)
            if rel < 5e-2:
                print("ok   " + line)
            else:
                fail(line)
    # New tokens against a KV cache: 4 queries after 196 cached keys (bottom-right causal).
    m = models["ladder"].eval()
    with torch.no_grad():
        full = models["sdpa"].eval()(ids).logits.float()
        first = m(ids[:, :196], use_cache=True)
        last = m(ids[:, 196:], past_key_values=first.past_key_values, use_cache=True)
    judge("Llama logits of 4 new tokens on a KV cache vs sdpa", last.logits.float(), full[:, 196:],
          "fp16", floor=MODEL_FLOOR)
    hf.transformers_attention = registered
    # 2 layers x (training forward, prefill, new tokens).
    if calls[0] != 6:
        fail("flashladder's attention ran %d times, expected 6" % calls[0])
    else:
        print("ok   attn_implementation='ladder' ran the ladder in every layer")


def part_models():
    """Models built from configs (random init, nothing downloaded) with attn_implementation="ladder":
    each either runs and is right, or is refused with a flashladder: ValueError naming what the
    rungs cannot do; never wrong. Right means the logits' (or hidden states') error against the
    same model in fp32 on the eager path is at most twice that of the same model in bf16 on
    transformers' own SDPA path (plus 1e-3)."""
    transformers = import_transformers()
    flashladder.register_transformers()
    torch.manual_seed(0)
    ids = torch.randint(3, 1000, (2, 96), device="cuda")
    restart = torch.cat([torch.arange(40), torch.arange(56)]).to("cuda")[None]
    pad = torch.ones(2, 96, dtype=torch.long, device="cuda")
    pad[0, :7] = 0  # left padding in the first row
    llama = dict(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                 num_attention_heads=8, num_key_value_heads=2)
    t5 = dict(vocab_size=1000, d_model=256, d_kv=64, d_ff=512, num_layers=2, num_heads=4)
    tokens = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    mla = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64, qk_rope_head_dim=32,
               qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
               n_group=1, topk_group=1, first_k_dense_replace=1)
    # (name, model class, config class, config, inputs, what a refusal must name or None: runs)
    cases = [
        ("Llama", "LlamaForCausalLM", "LlamaConfig", llama, dict(input_ids=ids), None),
        ("Llama, left-padded batch", "LlamaForCausalLM", "LlamaConfig", llama,
         dict(input_ids=ids, attention_mask=pad), None),
        ("Llama, two documents packed by position_ids", "LlamaForCausalLM", "LlamaConfig", llama,
         dict(input_ids=ids[:1], position_ids=restart), None),
        ("Qwen2", "Qwen2ForCausalLM", "Qwen2Config", llama, dict(input_ids=ids), None),
        # MLA in prefill and training: q and k of 64 + 32 = 96 dims, v of 64 (v with its own head_dim,
        # not padded by transformers as for flash_attention_2), and a left-padded batch.
        ("DeepSeek-V3 (MLA: head_dims 96/64)", "DeepseekV3ForCausalLM", "DeepseekV3Config", mla,
         dict(input_ids=ids), None),
        ("DeepSeek-V3, left-padded batch", "DeepseekV3ForCausalLM", "DeepseekV3Config", mla,
         dict(input_ids=ids, attention_mask=pad), None),
        ("Qwen3", "Qwen3ForCausalLM", "Qwen3Config", dict(llama, head_dim=64), dict(input_ids=ids),
         None),
        ("Mistral, window 32 < 96 tokens", "MistralForCausalLM", "MistralConfig",
         dict(llama, sliding_window=32), dict(input_ids=ids), None),
        ("Mistral, window 32, left-padded batch", "MistralForCausalLM", "MistralConfig",
         dict(llama, sliding_window=32), dict(input_ids=ids, attention_mask=pad), None),
        ("Mistral, window 4096 > 96 tokens", "MistralForCausalLM", "MistralConfig",
         dict(llama, sliding_window=4096), dict(input_ids=ids), None),
        ("Gemma 2 (softcap, window)", "Gemma2ForCausalLM", "Gemma2Config",
         dict(llama, head_dim=64, sliding_window=32, query_pre_attn_scalar=64), dict(input_ids=ids),
         None),
        ("gpt-oss (sinks, window)", "GptOssForCausalLM", "GptOssConfig",
         dict(llama, head_dim=64, num_local_experts=4, num_experts_per_tok=2, sliding_window=32),
         dict(input_ids=ids), None),
        ("Phi-3 (head_dim 96)", "Phi3ForCausalLM", "Phi3Config",
         dict(llama, hidden_size=768, num_key_value_heads=8, **tokens), dict(input_ids=ids),
         None),
        ("T5 encoder (relative position bias)", "T5EncoderModel", "T5Config", t5,
         dict(input_ids=ids), "position_bias"),
        ("mT5 encoder", "MT5EncoderModel", "MT5Config", t5, dict(input_ids=ids), "position_bias"),
        ("UMT5 encoder", "UMT5EncoderModel", "UMT5Config", t5, dict(input_ids=ids),
         "position_bias"),
        ("BERT", "BertModel", "BertConfig", dict(vocab_size=1000, hidden_size=256,
                                                 intermediate_size=512, num_hidden_layers=2,
                                                 num_attention_heads=4), dict(input_ids=ids), None),
        ("BERT, padded batch", "BertModel", "BertConfig",
         dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4), dict(input_ids=ids, attention_mask=pad), None),
        ("ModernBERT, local window 16 < 96 tokens", "ModernBertModel", "ModernBertConfig",
         dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
              num_attention_heads=4, local_attention=16, cls_token_id=1, sep_token_id=2, **tokens),
         dict(input_ids=ids), None),
        ("ModernBERT, local window 16, padded batch", "ModernBertModel", "ModernBertConfig",
         dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
              num_attention_heads=4, local_attention=16, cls_token_id=1, sep_token_id=2, **tokens),
         dict(input_ids=ids, attention_mask=pad), None),
        ("ModernBERT, local window 256 > 96 tokens", "ModernBertModel", "ModernBertConfig",
         dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
              num_attention_heads=4, local_attention=256, cls_token_id=1, sep_token_id=2,
              **tokens), dict(input_ids=ids), None),
    ]

    def build(model_cls, config_cls, config, impl, dtype):
        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(**config)
        cfg._attn_implementation = impl
        return getattr(transformers, model_cls)(cfg).to("cuda", dtype).eval()

    def output(model, inputs, grad=False, separate=False):
        """The logits (or hidden states) of the valid tokens (a padded batch's padding rows are
        left out: the models leave them undefined); with grad, also every parameter's gradient of
        a fixed loss of them, concatenated. ``separate``: a row packed by position_ids runs as its
        documents, one call each (what the packed row means on FlashAttention's path; the eager
        and SDPA paths would attend across them)."""
        model.zero_grad()
        with torch.set_grad_enabled(grad):
            if separate and "position_ids" in inputs:
                pos = inputs["position_ids"][0]
                starts = [0] + [i for i in range(1, pos.shape[0]) if pos[i] <= pos[i - 1]] + [pos.shape[0]]
                outs = []
                for a, b in zip(starts[:-1], starts[1:]):
                    r = model(input_ids=inputs["input_ids"][:, a:b], position_ids=pos[None, a:b] - pos[a])
                    outs.append(r.logits if hasattr(r, "logits") else r.last_hidden_state)
                out = torch.cat(outs, 1).float()
            else:
                r = model(**inputs)
                out = (r.logits if hasattr(r, "logits") else r.last_hidden_state).float()
        if "attention_mask" in inputs:
            out = out[inputs["attention_mask"].bool()]
        if not grad:
            return out
        torch.manual_seed(5)
        (out * torch.randn_like(out)).sum().backward()
        g = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        return out.detach(), g

    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()

    from flashladder import _ops

    # DeepSeek-V3 (v of 64 against q and k of 96) runs with V's own head_dim where rung 16 takes it
    # (sm_90): no call of the package pads it (padded_head_dim returning a padded copy is counted).
    native_dv = torch.cuda.get_device_capability() >= (9, 0) and built(16)
    pads = [0]
    real_padded = _ops.padded_head_dim

    def counting_padded(*args, **kwargs):
        res = real_padded(*args, **kwargs)
        pads[0] += res is not None
        return res

    def check_unpadded(what, before):
        if native_dv and "DeepSeek" in what:
            COMPARED[0] += 1
            if pads[0] != before:
                fail("%s: V padded %d time(s); rung 16 takes V's own head_dim on sm_90" % (what, pads[0] - before))
            else:
                print("ok   %s: V never padded (its own head_dim on rung 16)" % what)

    _ops.padded_head_dim = counting_padded
    try:
        part_models_cases(transformers, cases, build, output, rel, ids, llama, mla, check_unpadded, pads)
    finally:
        _ops.padded_head_dim = real_padded


def part_models_cases(transformers, cases, build, output, rel, ids, llama, mla, check_unpadded, pads):
    """part_models' cases and generate() runs (check_unpadded: DeepSeek-V3 never padded)."""
    ran = refused = 0
    for name, model_cls, config_cls, config, inputs, refusal in cases:
        if not hasattr(transformers, model_cls):
            print("skip %s: transformers %s has no %s" % (name, transformers.__version__, model_cls))
            continue
        ref = build(model_cls, config_cls, config, "eager", torch.float32)
        want = output(ref, inputs, separate=True)
        model = build(model_cls, config_cls, config, "ladder", torch.bfloat16)
        model.load_state_dict(ref.state_dict())
        before = pads[0]
        try:
            got, got_g = output(model, inputs, grad=True)
            check_unpadded(name, before)
        except ValueError as e:
            message = str(e)
            if not message.startswith("flashladder: "):
                fail("%s: refused, but not by flashladder: %s" % (name, message))
            elif refusal is None:
                fail("%s: refused (%s), expected to run" % (name, message))
            elif refusal not in message:
                fail("%s: refused (%s), expected a refusal naming %r" % (name, message, refusal))
            else:
                print("ok   %s: refused: %s" % (name, message))
                refused += 1
                COMPARED[0] += 1
            continue
        if refusal is not None:
            fail("%s: ran, but the rungs cannot do it (%s): never compute something else"
                 % (name, refusal))
            continue
        baseline = "SDPA"
        try:
            sdpa = build(model_cls, config_cls, config, "sdpa", torch.bfloat16)
        except ValueError:  # no SDPA path for this model (gpt-oss): transformers' eager in bf16
            baseline = "eager"
            sdpa = build(model_cls, config_cls, config, "eager", torch.bfloat16)
        sdpa.load_state_dict(ref.state_dict())
        _, want_g = output(ref, inputs, grad=True, separate=True)
        sdpa_out, sdpa_g = output(sdpa, inputs, grad=True, separate=True)
        ok = True
        for what, e, base in (("output", rel(got, want), rel(sdpa_out, want)),
                              ("gradients", rel(got_g, want_g), rel(sdpa_g, want_g))):
            COMPARED[0] += 1
            line = "%s: %s' error against fp32 eager %.2e, bf16 %s's %.2e (pass at <= 2x + 1e-3)" % (
                name, what, e, baseline, base)
            if e <= 2 * base + 1e-3:
                print("ok   " + line)
            else:
                fail(line)
                ok = False
        ran += ok
    # generate(): greedy decoding on a dynamic cache, each step's scores against the fp32 eager
    # model's logits on the same tokens (Llama's decode steps run the route: rung 08; DeepSeek-V3's,
    # v with its own head_dim, the packed path on rung 16).
    for gname, gcls, gcfg, gconfig in (("Llama", "LlamaForCausalLM", "LlamaConfig", llama),
                                       ("DeepSeek-V3", "DeepseekV3ForCausalLM", "DeepseekV3Config", mla)):
        ref = build(gcls, gcfg, gconfig, "eager", torch.float32)
        model = build(gcls, gcfg, gconfig, "ladder", torch.bfloat16)
        model.load_state_dict(ref.state_dict())
        sdpa = build(gcls, gcfg, gconfig, "sdpa", torch.bfloat16)
        sdpa.load_state_dict(ref.state_dict())
        prompt = ids[:, :40]
        before = pads[0]
        with torch.no_grad():
            gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8,
                                 do_sample=False, output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=0)
            check_unpadded("%s generate()" % gname, before)
            scores = torch.stack(gen.scores, 1).float()  # [batch, new tokens, vocab]
            n = scores.shape[1]
            want = ref(gen.sequences).logits.float()[:, 39:39 + n]
            base = sdpa(gen.sequences).logits.float()[:, 39:39 + n]
        err, sdpa_err = rel(scores, want), rel(base, want)
        COMPARED[0] += 1
        line = ("%s generate() with the dynamic cache, %d greedy steps: scores' error against fp32 eager "
                "%.2e, bf16 SDPA's %.2e" % (gname, n, err, sdpa_err))
        if err <= 2 * sdpa_err + 1e-3:
            print("ok   " + line)
        else:
            fail(line)
    model = build("LlamaForCausalLM", "LlamaConfig", llama, "ladder", torch.bfloat16)
    ref = build("LlamaForCausalLM", "LlamaConfig", llama, "eager", torch.float32)
    model.load_state_dict(ref.state_dict())
    sdpa = build("LlamaForCausalLM", "LlamaConfig", llama, "sdpa", torch.bfloat16)
    sdpa.load_state_dict(ref.state_dict())
    # A left-padded batch of prompts of 33 and 40 tokens, on a dynamic and on a static cache.
    mask = torch.ones_like(prompt)
    mask[0, :7] = 0
    for cache in ("dynamic", "static"):
        with torch.no_grad():
            kw = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, output_scores=True,
                      return_dict_in_generate=True, pad_token_id=0)
            if cache == "static":
                kw["cache_implementation"] = "static"
            gen = model.generate(prompt, **kw)
            scores = torch.stack(gen.scores, 1).float()
            n = scores.shape[1]
            full = torch.cat([mask, torch.ones_like(gen.sequences[:, 40:])], 1)
            want = ref(gen.sequences, attention_mask=full).logits.float()[:, 39:39 + n]
            base = sdpa(gen.sequences, attention_mask=full).logits.float()[:, 39:39 + n]
        err, sdpa_err = rel(scores, want), rel(base, want)
        COMPARED[0] += 1
        line = ("generate() of a left-padded batch with the %s cache, %d greedy steps: scores' error "
                "against fp32 eager %.2e, bf16 SDPA's %.2e" % (cache, n, err, sdpa_err))
        if err <= 2 * sdpa_err + 1e-3:
            print("ok   " + line)
        else:
            fail(line)
    print("models: %d ran and matched, %d refused naming the argument" % (ran, refused))
    if ran == 0:
        fail("models: no model ran")


# ---- flash: FlashAttention's interface (flashladder._flash) --------------------------------------

def reference_mods(q, k, v, causal, window=(-1, -1), softcap=0.0, slopes=None, sinks=None, scale=None):
    """(O [b, sq, hq, d], LSE [b, hq, sq]) in fp32 of FlashAttention's definitions, differentiable
    in q, k, v and sinks: scores scaled, softcapped (cap tanh(s / cap)), ALiBi's -slope |i + sk - sq
    - j| added, the window [i + sk - sq - left, i + sk - sq + right] (causal closes the right side),
    sinks as one more logit per head in the denominator. Rows that see no key and have no sink:
    O = 0, LSE = -inf."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diag = i + (sk - sq)
    if slopes is not None:
        s = s - slopes.float().reshape(-1, hq, 1, 1) * (diag - j).abs().float()
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        keep &= j >= diag - left
    if right >= 0:
        keep &= j <= diag + right
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float().reshape(1, hq, 1, 1).expand(b, hq, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = p[..., :sk] @ vf
    return out.transpose(1, 2), lse


def reference_varlen(q, k, v, cu_q, cu_k, causal, **mods):
    """reference_mods per sequence of a packed batch: (O [total_q, hq, d], LSE [hq, total_q]);
    sequences without queries are skipped."""
    outs, lses = [], []
    slopes = mods.pop("slopes", None)
    for n in range(cu_q.shape[0] - 1):
        q0, q1, k0, k1 = int(cu_q[n]), int(cu_q[n + 1]), int(cu_k[n]), int(cu_k[n + 1])
        sl = slopes[n] if slopes is not None and slopes.dim() == 2 else slopes
        if q1 == q0:
            continue
        assert k1 > k0, "a sequence with queries and no key: not a case here"
        o, l = reference_mods(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, slopes=sl, **mods)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def flash_case(what, dtype_name, fn, ref_fn, leaves, sinks=None, check_lse=True):
    """Runs fn (the ladder, returning (out, lse, None)) and ref_fn (fp32) on the same leaves,
    forward and backward; judges O, the LSE, dQ, dK, dV and the sinks' gradient; then fn again
    (the signature's Step), O and the LSE bit for bit and the gradients judged again."""
    for t in leaves + ([sinks] if sinks is not None else []):
        t.grad = None
        t.requires_grad_()
    out, lse, none = fn(*leaves, sinks)
    if none is not None:
        fail("%s: return_attn_probs gives (out, lse, None)" % what)
    ref_in = [t.detach().float().requires_grad_() for t in leaves]
    ref_sinks = sinks.detach().float().requires_grad_() if sinks is not None else None
    ref, ref_lse = ref_fn(*ref_in, ref_sinks)
    judge("%s O" % what, out.float(), ref.detach(), dtype_name)
    if check_lse:
        judge_lse(what, lse, ref_lse.detach(), dtype_name)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref.backward(dout.float())
    for name, leaf, r in zip(("dQ", "dK", "dV"), leaves, ref_in):
        judge("%s %s" % (what, name), leaf.grad.float(), torch.nan_to_num(r.grad), dtype_name, True)
    if sinks is not None:
        judge("%s dsinks" % what, sinks.grad.float(), ref_sinks.grad, dtype_name, True)
    # The same call again: a masked, modified or packed signature now runs the Step the call above
    # made (_flash.STEPS: no checks, its plans and strides): O and the LSE bit for bit, the
    # gradients against the reference again (dQ's atomics order may differ).
    for t in leaves + ([sinks] if sinks is not None else []):
        t.grad = None
    again, again_lse, _ = fn(*leaves, sinks)
    COMPARED[0] += 1
    if torch.equal(again, out) and torch.equal(again_lse, lse):
        print("ok   %s again: O and the LSE bit for bit" % what)
    else:
        fail("%s again: O or the LSE differs from the first call's" % what)
    again.backward(dout)
    for name, leaf, r in zip(("dQ", "dK", "dV"), leaves, ref_in):
        judge("%s again %s" % (what, name), leaf.grad.float(), torch.nan_to_num(r.grad), dtype_name, True)
    if sinks is not None:
        judge("%s again dsinks" % what, sinks.grad.float(), ref_sinks.grad, dtype_name, True)


def built(number):
    return any(r.number == number for r in flashladder.rungs())


def part_flash():
    from flashladder import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                             flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                             flash_attn_varlen_qkvpacked_func)

    hopper = flashladder.device_info().arch == "sm_90"
    if not hopper or not built(16):
        print("the masks and modifiers need rung 16 (sm_90): only the plain cases run")
    # The same body on every mask and modifier: (name, causal, window, softcap, slopes?, sinks?)
    mods = [("causal", True, (-1, -1), 0.0, None, False),
            ("window 40 causal", True, (40, 0), 0.0, None, False),
            ("window (33, 17)", False, (33, 17), 0.0, None, False),
            ("softcap 5", True, (-1, -1), 5.0, None, False),
            ("alibi [hq]", True, (-1, -1), 0.0, "head", False),
            ("alibi [b, hq] non-causal", False, (-1, -1), 0.0, "batch", False),
            ("sinks", True, (-1, -1), 0.0, None, True),
            ("window 64 + softcap 20 + sinks", True, (64, 0), 20.0, None, True)]
    shapes = [(2, 200, 200, 8, 2), (1, 77, 301, 4, 4)]
    dims = [64, 80, 96, 128, 256] if hopper else [64, 128]
    for dtype_name in ("fp16", "bf16"):
        dt = DTYPES[dtype_name]
        for n, (name, causal, window, cap, alibi, with_sinks) in enumerate(mods):
            if not hopper and (window != (-1, -1) or cap or alibi or with_sinks):
                continue
            d = dims[n % len(dims)]
            for (b, sq, sk, hq, hkv) in shapes:
                slopes = None
                if alibi == "head":
                    slopes = torch.rand(hq, device="cuda") * 0.3
                elif alibi == "batch":
                    slopes = torch.rand(b, hq, device="cuda") * 0.3
                sinks = torch.randn(hq, device="cuda", dtype=dt) if with_sinks else None
                leaves = [randn(b, sq, hq, d, dtype=dt, offset=0.5), randn(b, sk, hkv, d, dtype=dt),
                          randn(b, sk, hkv, d, dtype=dt, offset=0.5)]

                def fn(q, k, v, s):
                    return flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=cap,
                                           alibi_slopes=slopes, return_attn_probs=True, learnable_sink=s)

                def ref_fn(q, k, v, s):
                    return reference_mods(q, k, v, causal, window, cap, slopes, s)

                flash_case("flash_attn_func %s %s d=%d B=%d Sq=%d Sk=%d H=%d/%d" % (
                    name, dtype_name, d, b, sq, sk, hq, hkv), dtype_name, fn, ref_fn, leaves, sinks)

    # Packed batches: lengths with a 1, an empty sequence, a tail; queries != keys; plain (rung
    # 15, rung 14) and with a window and softcap (rung 16).
    for dtype_name in ("fp16", "bf16"):
        dt = DTYPES[dtype_name]
        for lens_q, lens_k in (([1, 130, 0, 257], None), ([1, 1, 3], [500, 77, 130])):
            lens_k = lens_k or lens_q
            cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
            cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
            hq, hkv, d = 8, 2, 128
            for name, causal, window, cap in (("causal", True, (-1, -1), 0.0),
                                              ("window 50 softcap 10", True, (50, 0), 10.0),
                                              ("non-causal", False, (-1, -1), 0.0)):
                if not hopper and (window != (-1, -1) or cap):
                    continue
                leaves = [randn(sum(lens_q), hq, d, dtype=dt, offset=0.5), randn(sum(lens_k), hkv, d, dtype=dt),
                          randn(sum(lens_k), hkv, d, dtype=dt, offset=0.5)]

                def fn(q, k, v, s):
                    return flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                                  window_size=window, softcap=cap, return_attn_probs=True)

                def ref_fn(q, k, v, s):
                    return reference_varlen(q, k, v, cu_q, cu_k, causal, window=window, softcap=cap)

                flash_case("flash_attn_varlen_func %s %s lens_q=%s lens_k=%s" % (
                    name, dtype_name, lens_q, lens_k), dtype_name, fn, ref_fn, leaves)

    # v with its own head_dim (MLA's prefill: 192 for q and k, 128 for v; and 64 against 96): dense
    # causal GQA and a packed batch, forward and backward (q, k, v zero-padded to one head_dim).
    for d, dv in ((192, 128), (64, 96)):
        for dtype_name in ("bf16", "fp16"):
            dt = DTYPES[dtype_name]
            leaves = [randn(2, 300, 8, d, dtype=dt, offset=0.5), randn(2, 300, 2, d, dtype=dt),
                      randn(2, 300, 2, dv, dtype=dt, offset=0.5)]

            def fn(q, k, v, s):
                return flash_attn_func(q, k, v, causal=True, return_attn_probs=True)

            def ref_fn(q, k, v, s):
                return reference_mods(q, k, v, True)

            flash_case("flash_attn_func head_dims %d/%d %s causal GQA 4:1" % (d, dv, dtype_name), dtype_name, fn,
                       ref_fn, leaves)
        lens = [1, 130, 257]
        cu = torch.tensor([0] + lens, device="cuda").cumsum(0).to(torch.int32)
        leaves = [randn(sum(lens), 8, d, dtype=torch.bfloat16, offset=0.5), randn(sum(lens), 2, d, dtype=torch.bfloat16),
                  randn(sum(lens), 2, dv, dtype=torch.bfloat16, offset=0.5)]

        def fn_v(q, k, v, s):
            return flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, return_attn_probs=True)

        def ref_v(q, k, v, s):
            return reference_varlen(q, k, v, cu, cu, True)

        flash_case("flash_attn_varlen_func head_dims %d/%d bf16 causal" % (d, dv), "bf16", fn_v, ref_v, leaves)

    # V's own head_dim below q's runs as it is on sm_90 (rung 16 forward and backward with
    # Mods.head_dim_v): nothing padded (F.pad made to fail for the call), O a tensor of V's
    # head_dim of its own, not a view of a wider one; attention() and the packed form too.
    if torch.cuda.get_device_capability() >= (9, 0) and built(16):
        from flashladder import _ops

        q, k, v = (randn(2, 300, 8, 192, dtype=torch.bfloat16), randn(2, 300, 2, 192, dtype=torch.bfloat16),
                   randn(2, 300, 2, 128, dtype=torch.bfloat16))
        if not _ops.own_head_dim_v(q, k, v):
            fail("192/128 on sm_90: own_head_dim_v says it would be padded")
        real_pad = torch.nn.functional.pad

        def no_pad(*args, **kwargs):
            raise AssertionError("F.pad called: V padded")

        ref = reference_mods(q.float(), k.float(), v.float(), True)[0]
        cu2 = torch.tensor([0, 300, 600], device="cuda", dtype=torch.int32)
        for what, call in (("flash_attn_func", lambda a, b, c: flash_attn_func(a, b, c, causal=True)),
                           ("flashladder.attention", lambda a, b, c: flashladder.attention(a, b, c, causal=True)),
                           ("flash_attn_varlen_func", lambda a, b, c: flash_attn_varlen_func(
                               a.reshape(-1, 8, 192), b.reshape(-1, 2, 192), c.reshape(-1, 2, 128), cu2, cu2, 300,
                               300, causal=True).view(2, 300, 8, 128))):
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            torch.nn.functional.pad = no_pad
            try:
                out = call(*leaves)
                out.backward(torch.ones_like(out))
            except AssertionError as e:
                fail("192/128 %s: %s" % (what, e))
                continue
            finally:
                torch.nn.functional.pad = real_pad
            COMPARED[0] += 1
            if tuple(out.shape) != (2, 300, 8, 128) or not out.is_contiguous():
                fail("192/128 %s: O %s contiguous=%s, expected its own [2, 300, 8, 128]"
                     % (what, tuple(out.shape), out.is_contiguous()))
            judge("192/128 %s without padding O" % what, out.float(), ref, "bf16")
            if leaves[2].grad is None or tuple(leaves[2].grad.shape) != (2, 300, 2, 128):
                fail("192/128 %s: dV not of V's shape" % what)

    # A paged K/V (block_table, FlashAttention 2's paged varlen): the same packed batch's keys in a
    # shuffled pool of pages of 16, the last page of each sequence part-used; O equals the packed
    # keys' bit for bit (the pages are gathered into that very layout first).
    lens_q, lens_k, page = [1, 40, 7], [33, 0, 70], 16
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    columns = 6
    pool_pages = 3 * columns
    perm = torch.randperm(pool_pages, device="cuda").to(torch.int32).view(3, columns)
    qp_, kk, vv = randn(sum(lens_q), 8, 128), randn(sum(lens_k), 2, 128), randn(sum(lens_k), 2, 128, offset=0.5)
    k_pool = randn(pool_pages, page, 2, 128)
    v_pool = randn(pool_pages, page, 2, 128)
    for n in range(3):
        for j in range(lens_k[n]):
            k_pool[perm[n, j // page], j % page] = kk[int(cu_k[n]) + j]
            v_pool[perm[n, j // page], j % page] = vv[int(cu_k[n]) + j]
    dense = flash_attn_varlen_func(qp_, kk, vv, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    paged = flash_attn_varlen_func(qp_, k_pool, v_pool, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                   block_table=perm)
    if torch.equal(dense, paged):
        print("ok   flash_attn_varlen_func with a block_table: the packed keys' O, bit for bit")
    else:
        fail("flash_attn_varlen_func with a block_table: O differs from the packed keys' (max %.3g)"
             % (dense.float() - paged.float()).abs().max())

    # The packed forms give flash_attn_func's and flash_attn_varlen_func's results, bit for bit.
    dt = torch.bfloat16
    qkv = randn(2, 150, 3, 4, 64, dtype=dt)
    q, kv = randn(2, 150, 8, 64, dtype=dt), randn(2, 150, 2, 4, 64, dtype=dt)
    same = True
    for _ in range(2):  # the second call of each through its signature's entry (_flash.STEPS: PLAIN)
        same &= torch.equal(flash_attn_qkvpacked_func(qkv, causal=True),
                            flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True))
        same &= torch.equal(flash_attn_kvpacked_func(q, kv, causal=True),
                            flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True))
    cu = torch.tensor([0, 100, 300], device="cuda", dtype=torch.int32)
    qkv = randn(300, 3, 4, 64, dtype=dt)
    same &= torch.equal(flash_attn_varlen_qkvpacked_func(qkv, cu, 200, causal=True),
                        flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, 200, 200, causal=True))
    q, kv = randn(300, 8, 64, dtype=dt), randn(300, 2, 4, 64, dtype=dt)
    same &= torch.equal(flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 200, 200),
                        flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu, cu, 200, 200))
    if same:
        print("ok   the packed forms match flash_attn_func and flash_attn_varlen_func bit for bit")
    else:
        fail("a packed form differs from its unpacked call")

    # deterministic=True: bitwise-identical gradients, with no mask, causal, and (rung 16) a causal
    # window and a two-sided one; each within the rounding of the default mode's gradients.
    # Dropout with softcap and a block table raise NotImplementedError.
    q, k, v = (randn(1, 1000, 8, 128, dtype=dt).requires_grad_() for _ in range(3))
    masks = [("causal", dict(causal=True))]
    if hopper and built(16):
        masks += [("window (64, 0)", dict(causal=True, window_size=(64, 0))),
                  ("window (100, 37)", dict(window_size=(100, 37)))]
    for what, kw in masks:
        grads = []
        for det in (True, True, False):
            for t in (q, k, v):
                t.grad = None
            flash_attn_func(q, k, v, deterministic=det, **kw).backward(torch.ones_like(q))
            grads.append([t.grad.clone() for t in (q, k, v)])
        if not all(torch.equal(a, b) for a, b in zip(grads[0], grads[1])):
            fail("deterministic=True, %s: different gradients run to run" % what)
        elif not all(torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2) for a, b in zip(grads[0], grads[2])):
            fail("deterministic=True, %s: gradients far from the default mode's" % what)
        else:
            print("ok   deterministic=True, %s: identical gradients, within rounding of the default's" % what)
    expect(NotImplementedError, "softcap", lambda: flash_attn_func(q, k, v, dropout_p=0.1, softcap=5.0))
    expect(ValueError, "block_table", lambda: flash_attn_varlen_func(
        q[0], k[0], v[0], cu, cu, 200, 200, block_table=cu))
    expect(ValueError, "alibi_slopes", lambda: flash_attn_func(q, k, v, alibi_slopes=torch.ones(3, device="cuda")))
    expect(ValueError, "window_size", lambda: flash_attn_func(q, k, v, window_size=(-2, 0)))


def within_rounding(got, ref64, dtype):
    """got (16-bit) is ref64 rounded once: |got - ref| <= the unit roundoff x |ref| (+ fp32's error)."""
    u = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
    return bool(((got.double() - ref64).abs() <= u * ref64.abs() + 1e-6).all())


def paged_twin(k_cache, v_cache, page):
    """(k pool, v pool, block table): the cache's pages shuffled in a pool, before any append. The
    table is a view of a wider one's first columns (not contiguous), as a server's slice of its
    table would be: the call must read it by its own strides."""
    b, slots, hkv, d = k_cache.shape
    table = torch.randperm(b * slots // page, device="cuda").to(torch.int32).view(b, slots // page)
    wide = torch.full((b, slots // page + 3), -1, dtype=torch.int32, device="cuda")
    wide[:, :slots // page] = table
    k_pool = torch.empty(b * slots // page, page, hkv, d, dtype=k_cache.dtype, device="cuda")
    v_pool = torch.empty_like(k_pool)
    k_pool[table.long()] = k_cache.view(b, slots // page, page, hkv, d)
    v_pool[table.long()] = v_cache.view(b, slots // page, page, hkv, d)
    return k_pool, v_pool, wide[:, :slots // page]


def kvcache_rotary():
    """rotary_cos/rotary_sin: the new keys rotated at cache_seqlens + i and appended (the cache
    holds them rotated), q at cache_seqlens + i when causal or windowed, else at cache_seqlens;
    rotary_dim 64 of head_dim 128, GQA 4:1, contiguous and paged (pages of 64), left-padded."""
    from flashladder import flash_attn_with_kvcache

    hopper = flashladder.device_info().arch == "sm_90"
    b, slots, hq, hkv, d, rotary_dim, page = 3, 1024, 8, 2, 128, 64, 64
    for dtype_name in ("fp16", "bf16"):
        dt = DTYPES[dtype_name]
        for interleaved in (True, False):
            for sq, new, causal, window, leftpad in ((1, 1, True, (-1, -1), None),
                                                     (4, 4, False, (-1, -1), [0, 100, 30]),
                                                     (100, 100, True, (-1, -1), None),
                                                     (3, 2, True, (-1, -1), [0, 7, 900]),
                                                     (5, 5, False, (64, -1), None)):  # a window, not causal
                if window != (-1, -1) and not hopper:
                    continue
                per_query = causal or window != (-1, -1)
                used = torch.tensor([0, 500, slots - max(sq, new) - 7], dtype=torch.int32, device="cuda")
                pad = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32, device="cuda")
                k_cache, v_cache = randn(b, slots, hkv, d, dtype=dt), randn(b, slots, hkv, d, dtype=dt, offset=0.5)
                k_pool, v_pool, table = paged_twin(k_cache, v_cache, page)
                before_k, before_v = k_cache.clone(), v_cache.clone()
                q = randn(b, sq, hq, d, dtype=dt, offset=0.5)
                k_new, v_new = randn(b, new, hkv, d, dtype=dt), randn(b, new, hkv, d, dtype=dt)
                angle = torch.rand(slots, rotary_dim // 2, device="cuda", dtype=torch.float64) * 2 * math.pi
                cos, sin = angle.cos().to(dt), angle.sin().to(dt)
                args = dict(rotary_cos=cos, rotary_sin=sin, cache_seqlens=used, cache_leftpad=pad, causal=causal,
                            window_size=window, rotary_interleaved=interleaved)
                out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, return_softmax_lse=True, **args)
                out_p = flash_attn_with_kvcache(q, k_pool, v_pool, k_new, v_new, block_table=table, **args)
                what = "flash_attn_with_kvcache rotary %s %s sq=%d new=%d causal=%d window=%s%s" % (
                    dtype_name, "interleaved" if interleaved else "halves", sq, new, causal, window,
                    " left-padded" if pad is not None else "")
                k_pos = used.long()[:, None] + torch.arange(new, device="cuda")[None, :]
                k_rot = rope_reference(k_new, cos, sin, k_pos, interleaved)
                q_pos = used.long()[:, None] + (torch.arange(sq, device="cuda") if per_query else
                                                torch.zeros(sq, dtype=torch.long, device="cuda"))[None, :]
                q_rot = rope_reference(q, cos, sin, q_pos, interleaved).to(dt)
                expected_v = before_v.clone()
                for n in range(b):
                    u, a = int(used[n]), 0 if pad is None else int(pad[n])
                    expected_v[n, u:u + new] = v_new[n]
                    if not within_rounding(k_cache[n, u:u + new], k_rot[n], dt):
                        fail("%s: the cache does not hold the keys rotated at cache_seqlens + i (sequence %d)"
                             % (what, n))
                    keys = torch.cat((before_k[n:n + 1, a:u], k_rot[n:n + 1].to(dt)), dim=1)
                    ref, ref_lse = reference_mods(q_rot[n:n + 1], keys, expected_v[n:n + 1, a:u + new], causal, window)
                    judge("%s sequence %d (slots %d..%d) O" % (what, n, a, u + new - 1), out[n:n + 1].float(), ref,
                          dtype_name)
                    judge_lse("%s sequence %d" % (what, n), lse[n:n + 1], ref_lse, dtype_name)
                    judge("%s, paged, sequence %d O" % (what, n), out_p[n:n + 1].float(), ref, dtype_name)
                untouched = torch.ones(b, slots, dtype=torch.bool, device="cuda")
                for n in range(b):
                    untouched[n, int(used[n]):int(used[n]) + new] = False
                if not (torch.equal(k_cache[untouched], before_k[untouched]) and torch.equal(v_cache, expected_v)):
                    fail("%s: the append wrote outside the new slots, or v was changed" % what)
                if not (torch.equal(k_pool[table.long()].reshape(k_cache.shape), k_cache) and
                        torch.equal(v_pool[table.long()].reshape(v_cache.shape), v_cache)):
                    fail("%s: the pages do not hold what the contiguous cache does" % what)


def kvcache_batch_idx():
    """cache_batch_idx: sequence b on row cache_batch_idx[b] of a larger cache (a permuted subset),
    read in place as pages (1024 slots: one page a row; 768: three pages of 256) or with its rows
    copied (1000 slots: no power of two >= 16 divides it; a cache that is a slice); decode, 4
    queries and a prefill, with and without new keys; rows and slots no sequence appends to stay
    as they were. One case adds rotary embedding and a left-padded cache."""
    from flashladder import flash_attn_with_kvcache

    b, rows, hq, hkv, d = 3, 7, 8, 2, 128
    for slots, layout in ((1024, "dense"), (768, "dense"), (1000, "dense"), (1024, "slice")):
        for sq, new, causal, rotary in ((1, 1, True, False), (1, 0, False, False), (4, 4, True, False),
                                        (4, 0, True, False), (100, 100, True, False), (100, 0, True, False),
                                        (4, 4, True, True)):
            stored = slots + (64 if layout == "slice" else 0)  # a slice of a longer cache: not contiguous
            k_store, v_store = randn(rows, stored, hkv, d), randn(rows, stored, hkv, d, offset=0.5)
            k_cache, v_cache = k_store[:, :slots], v_store[:, :slots]
            before_k, before_v = k_store.clone(), v_store.clone()
            idx = torch.randperm(rows, device="cuda")[:b].to(torch.int32)
            used = torch.tensor([0 if new else 1, 300, slots - max(sq, new) - 5], dtype=torch.int32, device="cuda")
            pad = torch.tensor([0, 40, 200], dtype=torch.int32, device="cuda") if rotary else None
            q = randn(b, sq, hq, d, offset=0.5)
            k_new = randn(b, new, hkv, d) if new else None
            v_new = randn(b, new, hkv, d) if new else None
            args = {}
            if rotary:
                angle = torch.rand(slots, 32, device="cuda", dtype=torch.float64) * 2 * math.pi
                args = dict(rotary_cos=angle.cos().half(), rotary_sin=angle.sin().half(), rotary_interleaved=False)
            what = "flash_attn_with_kvcache cache_batch_idx %s, %d slots, sq=%d new=%d causal=%d%s" % (
                layout, slots, sq, new, causal, " rotary, left-padded" if rotary else "")
            out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=used, cache_batch_idx=idx,
                                          cache_leftpad=pad, causal=causal, **args)
            expected_k, expected_v = before_k.clone(), before_v.clone()
            q_ref = q
            if rotary:
                k_pos = used.long()[:, None] + torch.arange(new, device="cuda")[None, :]
                k_rot = rope_reference(k_new, args["rotary_cos"], args["rotary_sin"], k_pos, False)
                q_pos = used.long()[:, None] + torch.arange(sq, device="cuda")[None, :]
                q_ref = rope_reference(q, args["rotary_cos"], args["rotary_sin"], q_pos, False).half()
            for n in range(b):
                r, u = int(idx[n]), int(used[n])
                if new and rotary:
                    if not within_rounding(k_store[r, u:u + new], k_rot[n], torch.float16):
                        fail("%s: row %d does not hold the rotated keys" % (what, r))
                    expected_k[r, u:u + new] = k_store[r, u:u + new]  # checked just above
                elif new:
                    expected_k[r, u:u + new] = k_new[n]
                if new:
                    expected_v[r, u:u + new] = v_new[n]
            if not (torch.equal(k_store, expected_k) and torch.equal(v_store, expected_v)):
                fail("%s: the append wrote outside rows cache_batch_idx at cache_seqlens" % what)
            for n in range(b):
                r, e = int(idx[n]), int(used[n]) + new
                a = 0 if pad is None else int(pad[n])
                ref, _ = reference_mods(q_ref[n:n + 1], expected_k[r:r + 1, a:e], expected_v[r:r + 1, a:e], causal)
                judge("%s sequence %d (row %d, slots %d..%d) O" % (what, n, r, a, e - 1), out[n:n + 1].float(), ref,
                      "fp16")


def part_kvcache():
    """flash_attn_with_kvcache: appends in place, per-sequence lengths, decode (rung 08) and
    prefill routes, a paged cache against the contiguous one, the refusals; rotary embedding and
    cache_batch_idx (kvcache_rotary, kvcache_batch_idx)."""
    from flashladder import flash_attn_with_kvcache

    hopper = flashladder.device_info().arch == "sm_90"
    for dtype_name in ("fp16", "bf16"):
        dt = DTYPES[dtype_name]
        for sq, new, causal, window in ((1, 1, True, (-1, -1)), (4, 4, True, (-1, -1)), (1, 0, False, (-1, -1)),
                                        (100, 100, True, (-1, -1)), (3, 3, True, (64, 0))):
            if window != (-1, -1) and not hopper:
                continue
            b, slots, hq, hkv, d = 3, 1024, 8, 2, 128
            used = torch.tensor([0, 500, 1024 - new - 7], dtype=torch.int32, device="cuda")
            if new == 0:
                used = torch.tensor([1, 500, 1024], dtype=torch.int32, device="cuda")
            k_cache, v_cache = randn(b, slots, hkv, d, dtype=dt), randn(b, slots, hkv, d, dtype=dt, offset=0.5)
            q = randn(b, sq, hq, d, dtype=dt, offset=0.5)
            k_new = randn(b, new, hkv, d, dtype=dt) if new else None
            v_new = randn(b, new, hkv, d, dtype=dt) if new else None
            # The paged twin: pages of 64 slots in a shuffled pool, before the append.
            page = 64
            k_pool, v_pool, table = paged_twin(k_cache, v_cache, page)
            what = "flash_attn_with_kvcache %s sq=%d new=%d causal=%d window=%s" % (dtype_name, sq, new, causal, window)
            out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=used, causal=causal,
                                               window_size=window, return_softmax_lse=True)
            end = used.long() + new
            # The pools hold the old cache: rung 08 reads the pages of a decode step and a few
            # queries; a prefill (100 queries) or a window runs on a contiguous copy of the pages.
            out_p = flash_attn_with_kvcache(q, k_pool, v_pool, k_new, v_new, cache_seqlens=used, causal=causal,
                                            window_size=window, block_table=table)
            for n in range(b):
                if new and not (torch.equal(k_cache[n, used[n]:end[n]], k_new[n]) and
                                torch.equal(v_cache[n, used[n]:end[n]], v_new[n])):
                    fail("%s: the new keys were not written at cache_seqlens" % what)
                ref, ref_lse = reference_mods(q[n:n + 1], k_cache[n:n + 1, :end[n]], v_cache[n:n + 1, :end[n]], causal,
                                              window)
                judge("%s sequence %d (%d keys) O" % (what, n, int(end[n])), out[n:n + 1].float(), ref, dtype_name)
                judge_lse("%s sequence %d" % (what, n), lse[n:n + 1], ref_lse, dtype_name)
                if out_p is not None:
                    judge("%s, paged (pages of %d), sequence %d O" % (what, page, n), out_p[n:n + 1].float(), ref,
                          dtype_name)
                    last = int(end[n]) - 1
                    if new and not torch.equal(k_pool[table[n, last // page].long(), last % page], k_cache[n, last]):
                        fail("%s: the new keys were not written into the pages" % what)
    # A head_dim that is not a multiple of 8 (FlashAttention's test file draws 59): the caches padded
    # for the call, the append written into the caller's caches, O of the head_dim itself.
    for sq in (1, 4):
        b, slots, hq, hkv, d, new = 2, 512, 6, 2, 59, sq
        k_cache, v_cache = randn(b, slots, hkv, d), randn(b, slots, hkv, d, offset=0.5)
        kp, vp, table = paged_twin(k_cache, v_cache, 64)
        q, k_new, v_new = randn(b, sq, hq, d, offset=0.5), randn(b, new, hkv, d), randn(b, new, hkv, d)
        used = torch.tensor([3, 400], dtype=torch.int32, device="cuda")
        out = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=used, causal=True)
        out_p = flash_attn_with_kvcache(q, kp, vp, k_new, v_new, cache_seqlens=used, causal=True, block_table=table)
        what = "flash_attn_with_kvcache, head_dim 59, sq=%d" % sq
        if out.shape[-1] != d or out_p.shape[-1] != d:
            fail("%s: O has head_dim %d, not %d" % (what, out.shape[-1], d))
        for n in range(b):
            e = int(used[n]) + new
            if not (torch.equal(k_cache[n, int(used[n]):e], k_new[n]) and torch.equal(v_cache[n, int(used[n]):e],
                                                                                     v_new[n])):
                fail("%s: the new keys were not written into the caller's cache" % what)
            last = e - 1
            if not torch.equal(kp[table[n, last // 64].long(), last % 64], k_new[n, -1]):
                fail("%s: the new keys were not written into the caller's pages" % what)
            ref, _ = reference_mods(q[n:n + 1], k_cache[n:n + 1, :e], v_cache[n:n + 1, :e], True)
            judge("%s sequence %d O" % (what, n), out[n:n + 1].float(), ref, "fp16")
            judge("%s, paged, sequence %d O" % (what, n), out_p[n:n + 1].float(), ref, "fp16")
    q, kc = randn(2, 1, 8, 128), randn(2, 256, 2, 128)
    full = flash_attn_with_kvcache(q, kc, kc)  # cache_seqlens None: every slot
    ref, _ = reference_mods(q, kc, kc, False)
    judge("flash_attn_with_kvcache, a full cache", full.float(), ref, "fp16")
    # A left-padded cache (cache_leftpad): each sequence's keys from its first slot, contiguous and
    # paged, decode (rung 08) and a few queries; and 100 queries (rung 15; paged: its pages copied).
    for sq, causal in ((1, True), (4, True), (100, True), (1, False)):
        b, slots, hq, hkv, d = 3, 1024, 8, 2, 128
        kc2, vc2 = randn(b, slots, hkv, d), randn(b, slots, hkv, d, offset=0.5)
        qq = randn(b, sq, hq, d, offset=0.5)
        pad = torch.tensor([0, 300, 1000 - sq], dtype=torch.int32, device="cuda")
        used = torch.tensor([1024, 900, 1024], dtype=torch.int32, device="cuda")
        out = flash_attn_with_kvcache(qq, kc2, vc2, cache_seqlens=used, cache_leftpad=pad, causal=causal)
        outs = [("contiguous", out)]
        kp, vp, table = paged_twin(kc2, vc2, 64)
        outs.append(("paged", flash_attn_with_kvcache(qq, kp, vp, cache_seqlens=used, cache_leftpad=pad,
                                                      causal=causal, block_table=table)))
        for n in range(b):
            a, e = int(pad[n]), int(used[n])
            ref, _ = reference_mods(qq[n:n + 1], kc2[n:n + 1, a:e], vc2[n:n + 1, a:e], causal)
            for layout, o in outs:
                judge("flash_attn_with_kvcache, cache_leftpad %s sq=%d causal=%d sequence %d (slots %d..%d)" % (
                    layout, sq, causal, n, a, e - 1), o[n:n + 1].float(), ref, "fp16")
    # FlashAttention 2's refusals: rotary without new keys, cache_batch_idx with a block table.
    cs = torch.ones(256, 32, dtype=torch.float16, device="cuda")
    expect(ValueError, "pass k and v", lambda: flash_attn_with_kvcache(q, kc, kc, rotary_cos=cs, rotary_sin=cs))
    one = torch.zeros(2, dtype=torch.int32, device="cuda")
    expect(ValueError, "block_table", lambda: flash_attn_with_kvcache(q, kc, kc, cache_batch_idx=one,
                                                                      block_table=one.view(2, 1)))
    # A prefill into pages (100 queries, every slot used): the pages in table order are the cache.
    table = torch.tensor([[5, 2, 7, 0], [1, 6, 3, 4]], device="cuda", dtype=torch.int32)
    pool = randn(8, 64, 2, 128)
    qp = randn(2, 100, 8, 128)
    dense = pool[table.long()].reshape(2, 256, 2, 128)
    ref, _ = reference_mods(qp, dense, dense, True)
    judge("flash_attn_with_kvcache, a prefill into pages", flash_attn_with_kvcache(
        qp, pool, pool, block_table=table, causal=True).float(), ref, "fp16")
    kvcache_rotary()
    kvcache_batch_idx()


def expect_recorded(what, text, call):
    """``call`` runs without a device-side fault, and the violation is reported in one line naming
    ``text``: by flashladder.check_errors() after it, or by a later step of the call itself (a
    backward pass reads the same metadata); after the report the device is clean."""
    COMPARED[0] += 1
    try:
        call()
        torch.cuda.synchronize()
    except RuntimeError as e:
        if text in str(e) and "\n" not in str(e).strip():
            print("ok   reported by the call's next step: %s" % e)
        else:
            fail("%s: the call raised RuntimeError: %s" % (what, e))
    except Exception as e:  # noqa: BLE001  a fault, or another error: both fail the case
        fail("%s: the call raised %s: %s" % (what, type(e).__name__, e))
        return
    else:
        expect(RuntimeError, text, flashladder.check_errors)
    try:
        flashladder.check_errors()
    except RuntimeError as e:
        fail("%s: the record was not cleared: %s" % (what, e))


def part_metadata():
    """Metadata read on the device (metadata.h): cu_seqlens that decrease or pass the tokens,
    lengths past max_seqlen, cache_seqlens past the slots (with and without new keys),
    cache_leftpad past the keys, block_table entries outside the pool, cache_batch_idx past the
    rows. Each call reads and writes only inside its tensors (no device-side fault; the CUDA
    context survives to the next case), nothing outside the cache is written, and the violation
    is reported by check_errors() and by the next call that takes metadata; good metadata after
    it gives the reference's answer. Also what one call of each checked form costs on the host
    (printed, not asserted)."""
    from flashladder import flash_attn_varlen_func, flash_attn_with_kvcache

    hq, hkv, d = 8, 2, 128
    lens = [37, 200, 5]
    total = sum(lens)
    q, k, v = (randn(total, h, d) for h in (hq, hkv, hkv))
    cu = torch.tensor([0, 37, 237, 242], dtype=torch.int32, device="cuda")
    good = flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True)
    start = 0
    for n in lens:
        ref, _ = reference_mods(q[None, start:start + n], k[None, start:start + n], v[None, start:start + n], True)
        judge("varlen, good metadata, a sequence of %d" % n, good[None, start:start + n].float(), ref, "fp16")
        start += n
    for what, bad, text in (("decreasing", [0, 37, 20, 242], "cu_seqlens_q decreases"),
                            ("past the tokens", [0, 37, 237, 300], "past q's 242 tokens"),
                            ("a negative start", [-5, 37, 237, 242], "cu_seqlens_q[0] is -5")):
        t = torch.tensor(bad, dtype=torch.int32, device="cuda")
        expect_recorded("varlen, cu_seqlens_q %s" % what, text,
                        lambda t=t: flash_attn_varlen_func(q, k, v, t, cu, 200, 200, causal=True))
    expect_recorded("varlen, a sequence longer than max_seqlen_k", "more than max_seqlen_k = 100",
                    lambda: flash_attn_varlen_func(q, k, v, cu, cu, 200, 100, causal=True))
    # The backward reads the same checks: a training step with bad metadata is reported too.
    ql, kl, vl = (t.detach().clone().requires_grad_() for t in (q, k, v))
    bad = torch.tensor([0, 37, 237, 400], dtype=torch.int32, device="cuda")
    expect_recorded("varlen forward + backward, cu_seqlens_k past the tokens", "past k's 242 tokens",
                    lambda: flash_attn_varlen_func(ql, kl, vl, cu, bad, 200, 200, causal=True).sum().backward())
    # The next call raises what an earlier one recorded.
    t = torch.tensor([0, 37, 20, 242], dtype=torch.int32, device="cuda")
    flash_attn_varlen_func(q, k, v, t, cu, 200, 200, causal=True)
    torch.cuda.synchronize()
    expect(RuntimeError, "cu_seqlens_q decreases", lambda: flash_attn_varlen_func(q, k, v, cu, cu, 200, 200))
    again = flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True)
    judge("varlen after a report, good metadata", again.float(), good.float(), "fp16")

    # A paged varlen call (block_table): a used entry outside the pool, a sequence past the table's
    # capacity, each named; the gather reads only inside the pools.
    pool = randn(39, 16, hkv, d)
    table = torch.randperm(39, device="cuda").to(torch.int32).view(3, 13)  # 208 slots per sequence
    bad_table = table.clone()
    bad_table[1, 2] = 99
    expect_recorded("varlen with a block_table, an entry outside the pool", "block_table[1, 2] is 99",
                    lambda: flash_attn_varlen_func(q, pool, pool, cu, cu, 200, 200, causal=True, block_table=bad_table))
    expect_recorded("varlen with a block_table, a sequence past its capacity",
                    "sequence 1 has 200 keys (cu_seqlens_k), past the block_table's capacity of 48",
                    lambda: flash_attn_varlen_func(q, pool, pool, cu, cu, 200, 200, causal=True,
                                                   block_table=table[:, :3]))

    # A cache: contiguous and paged, with and without new keys.
    b, slots, page = 2, 256, 64
    kc, vc = randn(b, slots, hkv, d), randn(b, slots, hkv, d, offset=0.5)
    qd = randn(b, 1, hq, d)
    k1, v1 = randn(b, 1, hkv, d), randn(b, 1, hkv, d)
    pool_k, pool_v, table = paged_twin(kc, vc, page)
    pool_before = pool_k.clone()
    for what, seqlens, extra, text in (
            ("cache_seqlens past the slots", [10, 300], {}, "cache_seqlens[1] plus the new keys is 300"),
            ("cache_seqlens negative", [-3, 10], {}, "cache_seqlens[0] is -3"),
            ("cache_seqlens + a new key past the slots", [10, 256], {"k": k1, "v": v1},
             "cache_seqlens[1] plus the new keys is 257"),
            ("cache_leftpad past the keys", [10, 20], {"cache_leftpad": torch.tensor([0, 50], dtype=torch.int32,
                                                                                     device="cuda")},
             "cache_leftpad[1] is 50")):
        used = torch.tensor(seqlens, dtype=torch.int32, device="cuda")
        before = kc.clone()
        expect_recorded("kvcache, contiguous, %s" % what, text,
                        lambda used=used, extra=extra: flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=used,
                                                                               causal=True, **extra))
        if "k" in extra and not (torch.equal(kc[0, :10], before[0, :10]) and torch.equal(kc[1], before[1])):
            fail("kvcache, %s: the append wrote outside sequence 0's end (sequence 1's append is skipped)" % what)
        kc.copy_(before)
    for what, bad_table, extra, text in (
            ("a block_table entry past the pool", 99, {}, "outside the pool's 8 pages"),
            ("a negative block_table entry, with a new key", -1, {"k": k1, "v": v1}, "is -1, outside the pool")):
        t = table.clone()
        t[1, 0] = bad_table
        used = torch.tensor([10, 20], dtype=torch.int32, device="cuda")
        expect_recorded("kvcache, paged, %s" % what, text,
                        lambda t=t, used=used, extra=extra: flash_attn_with_kvcache(
                            qd, pool_k, pool_v, cache_seqlens=used, block_table=t, causal=True, **extra))
    if not torch.equal(pool_k[table[1:, :].flatten().long()], pool_before[table[1:, :].flatten().long()]):
        fail("kvcache, paged: an append through a bad table entry wrote into the pool")
    # cache_seqlens past the table's capacity (columns x page): FlashAttention's test expects an error naming it.
    short = table[:, :2].contiguous()
    expect_recorded("kvcache, paged, cache_seqlens past the table's columns x page",
                    "past the block_table's capacity of 128 slots",
                    lambda: flash_attn_with_kvcache(qd, pool_k, pool_v, cache_seqlens=torch.tensor(
                        [10, 200], dtype=torch.int32, device="cuda"), block_table=short, causal=True))
    # Host values past the capacity raise before anything runs, naming the table, as FlashAttention's
    # RuntimeError does (flashladder's MetadataError is a RuntimeError and a ValueError).
    expect(RuntimeError, "the block_table's capacity of 128 slots",
           lambda: flash_attn_with_kvcache(qd, pool_k, pool_v, k1, v1, cache_seqlens=128, block_table=short))
    expect(ValueError, "the block_table's capacity of 128 slots",
           lambda: flash_attn_with_kvcache(qd, pool_k, pool_v, k1, v1, cache_seqlens=128, block_table=short))
    # cache_batch_idx past the rows: the append skips it and records it.
    rows = torch.tensor([0, 7], dtype=torch.int32, device="cuda")
    expect_recorded("kvcache, cache_batch_idx past the rows", "cache_batch_idx[1] is 7",
                    lambda: flash_attn_with_kvcache(qd, kc, vc, k1, v1, cache_seqlens=torch.tensor(
                        [10, 20], dtype=torch.int32, device="cuda"), cache_batch_idx=rows, causal=True))
    # Good metadata after the reports: the reference's answer.
    used = torch.tensor([10, 200], dtype=torch.int32, device="cuda")
    out = flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=used, causal=True)
    for n in range(b):
        ref, _ = reference_mods(qd[n:n + 1], kc[n:n + 1, :int(used[n])], vc[n:n + 1, :int(used[n])], True)
        judge("kvcache after the reports, sequence %d" % n, out[n:n + 1].float(), ref, "fp16")
    # The fast path (a signature that passed the checked path: _kvcache.KV_FAST) against the checked
    # path on twins of the cache, paged and contiguous, with an append: the same output and cache.
    from flashladder import _kvcache
    for layout in ("paged", "contiguous"):
        twins = [(pool_k.clone(), pool_v.clone()) if layout == "paged" else (kc.clone(), vc.clone()) for _ in range(2)]
        extra = {"block_table": table} if layout == "paged" else {}
        outs = []
        for n, (kx, vx) in enumerate(twins):
            got = []
            for step in range(3):
                if n == 1:
                    _kvcache.KV_FAST.clear()  # the second twin: the checked path every step
                lens2 = torch.tensor([30 + step, 40 + step], dtype=torch.int32, device="cuda")
                got.append(flash_attn_with_kvcache(qd, kx, vx, k1, v1, cache_seqlens=lens2, causal=True, **extra))
            outs.append(got)
            if n == 0:  # the fast twin's steps went through one prepared call each (check, append, forward)
                prepared = [f.prepared for f in _kvcache.KV_FAST.values()]
                if any(isinstance(x, _ext.PreparedCacheCall) for x in prepared):
                    print("ok   kvcache %s: the fast path runs the step as one prepared call" % layout)
                else:
                    fail("kvcache %s: no prepared call made for the fast path (%s)" % (layout, prepared))
        COMPARED[0] += 1
        if not (all(torch.equal(a, c) for a, c in zip(*outs)) and torch.equal(twins[0][0], twins[1][0])
                and torch.equal(twins[0][1], twins[1][1])):
            fail("kvcache %s: the fast path's steps differ from the checked path's" % layout)
        else:
            print("ok   kvcache %s: 3 steps on the fast path equal to the checked path (output and cache)" % layout)
    # A cache long enough for rung 08 to split its keys: the prepared call merges the splits in the
    # split kernel (Rung::split_counters, zeroed by the check's launch), so a step is two launches,
    # the check with the append and the split kernel, no combine_splits; O and the LSE equal the
    # checked path's (kernel 2's) bit for bit, step after step.
    long_k, long_v = randn(b, 4096, hkv, d), randn(b, 4096, hkv, d)
    lens_long = torch.tensor([3000, 4001], dtype=torch.int32, device="cuda")
    _kvcache.KV_FAST.clear()
    checked = flash_attn_with_kvcache(qd, long_k, long_v, cache_seqlens=lens_long, causal=True,
                                      return_softmax_lse=True)
    names = gpu_events(lambda: flash_attn_with_kvcache(qd, long_k, long_v, cache_seqlens=lens_long, causal=True,
                                                       return_softmax_lse=True))
    fast = [flash_attn_with_kvcache(qd, long_k, long_v, cache_seqlens=lens_long, causal=True,
                                    return_softmax_lse=True) for _ in range(2)]
    preps = [f.prepared for f in _kvcache.KV_FAST.values() if isinstance(f.prepared, _ext.PreparedCacheCall)]
    COMPARED[0] += 1
    if not preps:
        fail("kvcache, 4096 slots: no prepared call made for the fast path")
    elif not all(torch.equal(x, y) for run in fast for x, y in zip(checked, run)):
        fail("kvcache, 4096 slots: the prepared call's O or LSE differs from the checked path's")
    elif preps[0].label.startswith("08_flash_decoding") and (
            any("combine_splits" in n for n in names) or sum("split_kv_attention" in n for n in names) != 1):
        fail("kvcache, 4096 slots (%s): the prepared step launched %s, expected the check and the split kernel "
             "without combine_splits" % (preps[0].label, names))
    else:
        print("ok   kvcache, 4096 slots (%s): the prepared step launches %d kernels (%s), O and LSE equal to the "
              "checked path's" % (preps[0].label, len(names), ", ".join(n.split("<")[0].split("(")[0] for n in names)))
    # A decode step with its append captured in a CUDA graph (how serving engines call it): replayed
    # with new cache_seqlens and new keys written in place, it matches the same step run eagerly on
    # a twin of the pool, output and pool, step after step.
    lens = torch.tensor([10, 20], dtype=torch.int32, device="cuda")
    kg, vg = pool_k.clone(), pool_v.clone()
    kt, vt = pool_k.clone(), pool_v.clone()
    qg, kn, vn = randn(b, 1, hq, d), randn(b, 1, hkv, d), randn(b, 1, hkv, d)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture (plans, the error record, allocations)
        for _ in range(2):
            flash_attn_with_kvcache(qg, kg, vg, kn, vn, cache_seqlens=lens, block_table=table, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    kg.copy_(kt)
    vg.copy_(vt)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out_g = flash_attn_with_kvcache(qg, kg, vg, kn, vn, cache_seqlens=lens, block_table=table, causal=True)
    except Exception as e:  # noqa: BLE001
        fail("a decode step with its append could not be captured in a CUDA graph: %s: %s" % (type(e).__name__, e))
    else:
        for step in range(3):
            lens.copy_(torch.tensor([10 + step, 20 + 2 * step], dtype=torch.int32, device="cuda"))
            qg.copy_(randn(b, 1, hq, d))
            kn.copy_(randn(b, 1, hkv, d))
            vn.copy_(randn(b, 1, hkv, d))
            graph.replay()
            ref = flash_attn_with_kvcache(qg, kt, vt, kn, vn, cache_seqlens=lens, block_table=table, causal=True)
            torch.cuda.synchronize()
            COMPARED[0] += 1
            if not (torch.equal(out_g, ref) and torch.equal(kg, kt) and torch.equal(vg, vt)):
                fail("CUDA graph replay %d: output or pool differs from the eager step (max |diff| %.3g)" % (
                    step, (out_g.float() - ref.float()).abs().max().item()))
            else:
                print("ok   CUDA graph replay %d (cache_seqlens %s): output and pool equal to the eager step" % (
                    step, lens.tolist()))
    # The host's cost of one checked call (printed): the check kernel's launch is in it.
    import time
    for what, call in (("varlen forward", lambda: flash_attn_varlen_func(q, k, v, cu, cu, 200, 200, causal=True)),
                       ("with_kvcache decode, contiguous", lambda: flash_attn_with_kvcache(qd, kc, vc,
                                                                                          cache_seqlens=used)),
                       ("with_kvcache decode, paged, appending", lambda: flash_attn_with_kvcache(
                           qd, pool_k, pool_v, k1, v1, cache_seqlens=torch.tensor([10, 20], dtype=torch.int32,
                                                                                  device="cuda"),
                           block_table=table))):
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            call()
        torch.cuda.synchronize()
        print("host   %s: %.1f us per call (200 calls, one synchronization)" % (
            what, (time.perf_counter() - t0) / 200 * 1e6))


# ---- dropout ----------------------------------------------------------------------------------------

def keep_probability(p):
    """The 8-bit rule's keep probability (dropout.h): (floor((1 - p) 255) + 1) / 256, 1 - p in fp32."""
    keep = float(torch.tensor(1.0, dtype=torch.float32) - torch.tensor(p, dtype=torch.float32))
    return (math.floor(keep * 255.0) + 1) / 256.0


def seen_mask(sq, sk, causal, window, device):
    """[sq, sk] bool: FlashAttention's causal (bottom-right) and window."""
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    left, right = window
    if causal:
        right = 0
    seen = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen


def reference_dropout(q, k, v, causal, window, keep, p, slopes=None):
    """O [b, sq, hq, d] in float64 of dropout attention, differentiable: P = softmax of the seen
    scores (the LSE undropped; ALiBi's -slope |i + sk - sq - j| added when ``slopes``, [hq] or
    [b, hq], are given), P ∘ keep / (1 - p), times V. Rows that see no key: O = 0."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf = q.transpose(1, 2)
    kf = k.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vf = v.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    seen = seen_mask(sq, sk, causal, window, q.device)
    s = (qf @ kf.transpose(-1, -2)) / math.sqrt(d)
    if slopes is not None:
        i = torch.arange(sq, device=q.device)[:, None] + sk - sq
        j = torch.arange(sk, device=q.device)[None, :]
        s = s - slopes.double().reshape(-1, hq, 1, 1) * (i - j).abs()
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    probs = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    return ((probs * keep / (1.0 - p)) @ vf).transpose(1, 2)


def dropout_case(what, dtype_name, shape, d, causal, window, p, slopes=None):
    """flash_attn_func with dropout (and ALiBi's ``slopes``, if given) against reference_dropout
    under the S_dmask it returns."""
    from flashladder import flash_attn_func

    b, sq, sk, hq, hkv = shape
    dt = DTYPES[dtype_name]
    q, k, v = randn(b, sq, hq, d, dtype=dt), randn(b, sk, hkv, d, dtype=dt), randn(b, sk, hkv, d, dtype=dt, offset=0.5)
    for t in (q, k, v):
        t.requires_grad_()
    out, lse, s_dmask = flash_attn_func(q, k, v, dropout_p=p, causal=causal, window_size=window,
                                        alibi_slopes=slopes, return_attn_probs=True)
    rows_r, cols_r = -(-sq // 128) * 128, -(-sk // 128) * 128
    if tuple(s_dmask.shape) != (b, hq, rows_r, cols_r) or s_dmask.dtype != dt:
        fail("%s: S_dmask %s %s, expected %s %s" % (what, tuple(s_dmask.shape), s_dmask.dtype,
                                                    (b, hq, rows_r, cols_r), dt))
        return
    keep = s_dmask[..., :sq, :sk] >= 0
    seen = seen_mask(sq, sk, causal, window, q.device)
    dropped = (~keep & seen).sum().item()
    if dropped == 0:
        fail("%s: nothing dropped" % what)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = reference_dropout(*ref_in, causal, window, keep, p, slopes)
    judge("%s O" % what, out.float(), ref.detach(), dtype_name)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref.backward(dout.double())
    for name, leaf, r in zip(("dQ", "dK", "dV"), (q, k, v), ref_in):
        judge("%s %s" % (what, name), leaf.grad.float(), r.grad, dtype_name, True)


def run_seeded(seed, fn, leaves, dout):
    """(O, dQ, dK, dV) of fn() after torch.manual_seed(seed)."""
    for t in leaves:
        t.grad = None
    torch.manual_seed(seed)
    out = fn()
    grads = torch.autograd.grad(out, leaves, dout)
    return [out.detach()] + list(grads)


def part_dropout():
    from flashladder import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                             flash_attn_varlen_func)

    if not built(16) or torch.cuda.get_device_capability() != (9, 0):
        # The dropout kernels are rung 16's (sm_90a): anywhere else dropout is refused, in one line.
        q = randn(1, 64, 2, 64)
        expect(ValueError, "dropout", lambda: flash_attn_func(q, q, q, dropout_p=0.1))
        return

    # 1. The dropped fraction, from S_dmask: 5 sigma of a binomial, per seed and over all seeds.
    b, s_, h, d = 2, 256, 4, 64
    q, k, v = randn(b, s_, h, d), randn(b, s_, h, d), randn(b, s_, h, d)
    for p in (0.1, 0.17, 0.5):
        keep_p = keep_probability(p)
        kept_all = n_all = 0
        ok = True
        for seed in range(20):
            torch.manual_seed(100 + seed)
            _, _, s_dmask = flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
            kept = (s_dmask[..., :s_, :s_] >= 0).sum().item()
            n = b * h * s_ * s_
            sigma = math.sqrt(keep_p * (1 - keep_p) / n)
            ok &= abs(kept / n - keep_p) <= 5 * sigma
            kept_all += kept
            n_all += n
        sigma = math.sqrt(keep_p * (1 - keep_p) / n_all)
        COMPARED[0] += 1
        line = "p = %.2f: kept %.5f of %d elements, expected %.5f (the 8-bit rule; 1 - p = %.2f), 5 sigma %.5f" % (
            p, kept_all / n_all, n_all, keep_p, 1 - p, 5 * sigma)
        if ok and abs(kept_all / n_all - keep_p) <= 5 * sigma:
            print("ok   " + line)
        else:
            fail(line + " (or a seed outside its own 5 sigma)")

    # 2. O and the gradients against float64 under the returned mask.
    for dtype_name in ("fp16", "bf16"):
        for d in (64, 128):
            for causal in (False, True):
                dropout_case("dropout p=0.17 %s d=%d causal=%d GQA 4:1" % (dtype_name, d, causal), dtype_name,
                             (2, 200, 333, 8, 2), d, causal, (-1, -1), 0.17)
            dropout_case("dropout p=0.3 %s d=%d window (64, 0)" % (dtype_name, d), dtype_name,
                         (1, 300, 300, 4, 4), d, True, (64, 0), 0.3)
    dropout_case("dropout p=0.5 bf16 d=128 seqlen_q > seqlen_k (rows with no key)", "bf16", (1, 257, 130, 4, 1),
                 128, True, (-1, -1), 0.5)
    # With ALiBi (FlashAttention's tests draw slopes as rand(batch, heads) x 0.3): per sequence and
    # head, causal and not, GQA 4:1; per head with a window.
    for dtype_name in ("fp16", "bf16"):
        for d in (64, 128):
            for causal in (False, True):
                dropout_case("dropout p=0.17 + ALiBi [b, hq] %s d=%d causal=%d GQA 4:1" % (dtype_name, d, causal),
                             dtype_name, (2, 200, 333, 8, 2), d, causal, (-1, -1), 0.17,
                             torch.rand(2, 8, device="cuda") * 0.3)
    dropout_case("dropout p=0.3 + ALiBi [hq] bf16 d=128 window (64, 0)", "bf16", (1, 300, 300, 4, 4), 128, True,
                 (64, 0), 0.3, torch.rand(4, device="cuda") * 0.3)

    # 3. Reproducible by torch.manual_seed; another seed, another mask; the packed forms agree.
    b, sq, h, d = 2, 190, 4, 128
    q, k, v = (randn(b, sq, h, d, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    dout = torch.randn_like(q)
    call = lambda: flash_attn_func(q, k, v, dropout_p=0.2, causal=True)  # noqa: E731
    a, a2, c = run_seeded(7, call, (q, k, v), dout), run_seeded(7, call, (q, k, v), dout), run_seeded(8, call, (q, k, v), dout)
    COMPARED[0] += 1
    if all(torch.equal(x, y) for x, y in zip(a, a2)) and not torch.equal(a[0], c[0]):
        print("ok   one seed: bitwise-equal O, dQ, dK, dV; another seed: another O")
    else:
        fail("torch.manual_seed does not reproduce dropout (or another seed gives the same O)")
    qkv = torch.stack([q.detach(), k.detach(), v.detach()], dim=2).requires_grad_()
    kv = torch.stack([k.detach(), v.detach()], dim=2)
    for name, fn in (("flash_attn_qkvpacked_func", lambda: flash_attn_qkvpacked_func(qkv, 0.2, causal=True)),
                     ("flash_attn_kvpacked_func", lambda: flash_attn_kvpacked_func(q, kv, 0.2, causal=True))):
        torch.manual_seed(7)
        COMPARED[0] += 1
        if torch.equal(fn().detach(), a[0]):
            print("ok   %s: flash_attn_func's O bit for bit under one seed" % name)
        else:
            fail("%s differs from flash_attn_func under one seed" % name)

    # 4. A packed batch: per sequence against the reference under S_dmask's mask.
    lens_q, lens_k = [1, 0, 130, 77, 300], [5, 9, 130, 60, 256]
    cu_q = torch.tensor([0] + list(itertools_accumulate(lens_q)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(itertools_accumulate(lens_k)), dtype=torch.int32, device="cuda")
    hq, hkv, d, p = 8, 2, 64, 0.25
    qp = randn(sum(lens_q), hq, d, dtype=torch.bfloat16).requires_grad_()
    kp = randn(sum(lens_k), hkv, d, dtype=torch.bfloat16).requires_grad_()
    vp = randn(sum(lens_k), hkv, d, dtype=torch.bfloat16).requires_grad_()
    out, lse, s_dmask = flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, max(lens_q), max(lens_k), dropout_p=p,
                                               causal=True, return_attn_probs=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref_in = [t.detach().double().requires_grad_() for t in (qp, kp, vp)]
    refs = []
    for n in range(len(lens_q)):
        q0, q1, k0, k1 = int(cu_q[n]), int(cu_q[n + 1]), int(cu_k[n]), int(cu_k[n + 1])
        if q1 == q0:
            continue
        keep = s_dmask[n, :, :q1 - q0, :k1 - k0] >= 0
        refs.append(reference_dropout(ref_in[0][None, q0:q1], ref_in[1][None, k0:k1], ref_in[2][None, k0:k1], True,
                                      (-1, -1), keep, p)[0])
    ref = torch.cat(refs)
    judge("dropout packed batch O", out.float(), ref.detach(), "bf16")
    ref.backward(dout.double())
    for name, leaf, r in zip(("dQ", "dK", "dV"), (qp, kp, vp), ref_in):
        judge("dropout packed batch %s" % name, leaf.grad.float(), r.grad, "bf16", True)

    # 5. CUDA graphs: the state is drawn inside the graph from the registered generator, so a
    # replay after torch.manual_seed(s) draws what an eager call after the same seed draws.
    b, sq, h, d = 1, 256, 4, 64
    q, k, v = (randn(b, sq, h, d) for _ in range(3))
    fwd = lambda: flash_attn_func(q, k, v, dropout_p=0.1, causal=True)  # noqa: E731
    torch.manual_seed(11)
    eager = fwd()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fwd()  # warm-up outside the graph (plans, kernel attributes)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fwd()
    for seed in (11, 12):
        torch.manual_seed(seed)
        graph.replay()
        torch.cuda.synchronize()
        torch.manual_seed(seed)
        want = fwd()
        COMPARED[0] += 1
        if torch.equal(static_out, want) and (seed != 11 or torch.equal(static_out, eager)):
            print("ok   CUDA graph, forward: the replay after manual_seed(%d) equals eager after it" % seed)
        else:
            fail("CUDA graph, forward: the replay after manual_seed(%d) differs from eager" % seed)

    ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
    g_out = torch.randn_like(q)

    def step():
        o = flash_attn_func(ql, kl, vl, dropout_p=0.1, causal=True)
        return (o,) + torch.autograd.grad(o, (ql, kl, vl), g_out)

    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph2):
        static = step()
    torch.manual_seed(13)
    graph2.replay()
    torch.cuda.synchronize()
    torch.manual_seed(13)
    want = step()
    COMPARED[0] += 1
    if all(torch.equal(x, y) for x, y in zip(static, want)):
        print("ok   CUDA graph, forward + backward: O, dQ, dK, dV of the replay equal eager's under one seed")
    else:
        fail("CUDA graph, forward + backward: the replay differs from eager under one seed")

    # 6. What is not compiled with dropout (softcap, as FlashAttention 2): refused in one line,
    # naming the argument.
    expect(NotImplementedError, "softcap", lambda: flash_attn_func(q, k, v, dropout_p=0.1, softcap=30.0))
    expect(ValueError, "dropout_p", lambda: flash_attn_func(q, k, v, dropout_p=1.0))


def part_bert_dropout():
    """A BERT-style classifier fine-tuned in train mode with attention dropout
    (attention_probs_dropout_prob = 0.1) through attn_implementation="ladder": every layer's
    attention runs on the ladder with dropout_p = 0.1 at each training step and 0 in eval mode; the
    same seed gives the same logits in train mode, another seed others; and the model learns a task
    that needs attention (is token 7 anywhere in the sequence?) as it does on SDPA: the held-out loss
    after 10, 20, 40 and 120 steps within 3 x the gap of two SDPA runs (different dropout draws) of
    SDPA's (+ 0.05), and below the starting loss at the end. (By 120 steps every run reaches about
    0.0015 on an H200, so the end alone tells nothing; the curve's early points do.)"""
    transformers = import_transformers()
    import flashladder._hf as hf

    if not built(16) or torch.cuda.get_device_capability() != (9, 0):
        print("attention dropout runs on rung 16 (sm_90a): skipped (exit 77)")
        sys.exit(SKIP)
    flashladder.register_transformers()
    registered = hf.transformers_attention
    drops = []

    def counting(*args, **kwargs):  # the dropout the model passes to the ladder's attention
        drops.append(float(kwargs.get("dropout", 0.0) or 0.0))
        return registered(*args, **kwargs)

    config = dict(vocab_size=64, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.0,
                  max_position_embeddings=256, num_labels=2)
    g = torch.Generator(device="cuda").manual_seed(3)

    def batch(n):
        ids = torch.randint(8, 64, (n, 128), device="cuda", generator=g)
        labels = torch.randint(0, 2, (n,), device="cuda", generator=g)
        where = torch.randint(1, 128, (n,), device="cuda", generator=g)
        ids[labels == 1, where[labels == 1]] = 7  # the label: token 7 somewhere after [CLS]
        return ids, labels

    train = [batch(32) for _ in range(8)]
    held_ids, held_labels = batch(256)
    torch.manual_seed(0)
    init = transformers.BertForSequenceClassification(transformers.BertConfig(**config)).state_dict()
    points = (10, 20, 40, 120)  # steps after which the held-out loss is taken

    def held_out(model):
        """(loss, accuracy) on the held-out batch in eval mode without gradients, the loss in fp32
        from the logits (bf16's loss has steps of 0.004 near 0.7); the mode restored. Eval mode
        draws no dropout, so the training's random stream is the same with or without it."""
        was_training = model.training
        model.eval()
        with torch.no_grad():
            logits = model(held_ids).logits.float()
        model.train(was_training)
        return F.cross_entropy(logits, held_labels).item(), (logits.argmax(-1) == held_labels).float().mean().item()

    def run(impl, seed):
        """(model, starting loss, [loss at each point], final accuracy, the dropouts of the
        training steps' calls to the ladder's attention: none of the evaluations')."""
        model = transformers.BertForSequenceClassification(
            transformers.BertConfig(**config, attn_implementation=impl)).to("cuda")
        model.load_state_dict(init)
        model = model.to(torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        torch.manual_seed(seed)
        start, _ = held_out(model)
        model.train()
        curve, acc, step_drops = [], None, []
        for step in range(1, points[-1] + 1):
            ids, labels = train[(step - 1) % len(train)]
            before = len(drops)
            loss = model(ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_drops += drops[before:]
            if step in points:
                loss_at, acc = held_out(model)
                curve.append(loss_at)
        return model, start, curve, acc, step_drops

    hf.transformers_attention = counting
    try:
        model, start, ladder, ladder_acc, train_drops = run("ladder", 1)
        drops.clear()
        model.train()
        ids = held_ids[:8]
        torch.manual_seed(5)
        a = model(ids).logits.float()
        torch.manual_seed(5)
        b = model(ids).logits.float()
        torch.manual_seed(6)
        c = model(ids).logits.float()
        model.eval()
        with torch.no_grad():
            model(ids)
    finally:
        hf.transformers_attention = registered
    layers = config["num_hidden_layers"]
    COMPARED[0] += 1
    if len(train_drops) == points[-1] * layers and all(x == 0.1 for x in train_drops):
        print("ok   every layer's attention ran on the ladder with dropout 0.1 at each training step (%d calls)"
              % len(train_drops))
    else:
        fail("train mode: %d calls to the ladder's attention in %d steps (expected %d), dropouts %s"
             % (len(train_drops), points[-1], points[-1] * layers, sorted(set(train_drops))))
    COMPARED[0] += 1
    if drops[-layers:] == [0.0] * layers:
        print("ok   eval mode: the ladder's attention ran without dropout")
    else:
        fail("eval mode: dropouts %s" % drops[-layers:])
    COMPARED[0] += 1
    if torch.equal(a, b) and not torch.equal(a, c):
        print("ok   train mode: the same seed gives the same logits, another seed others")
    else:
        fail("train mode: same seed equal %s, other seed different %s" % (torch.equal(a, b), not torch.equal(a, c)))
    _, _, sdpa, sdpa_acc, _ = run("sdpa", 1)
    _, _, sdpa2, sdpa2_acc, _ = run("sdpa", 2)
    print("BERT fine-tune with attention dropout 0.1, held-out loss from %.4f (steps %s): ladder %s "
          "(accuracy %.3f), SDPA %s (%.3f), SDPA again %s (%.3f)"
          % (start, "/".join(str(n) for n in points), "/".join("%.4f" % x for x in ladder), ladder_acc,
             "/".join("%.4f" % x for x in sdpa), sdpa_acc, "/".join("%.4f" % x for x in sdpa2), sdpa2_acc))
    for n, got, want, again in zip(points, ladder, sdpa, sdpa2):
        COMPARED[0] += 1
        bound = 3 * abs(want - again) + 0.05
        line = "held-out loss after %d steps: ladder %.4f, SDPA %.4f (bound %.4f: 3 x the SDPA runs' gap + 0.05)" % (
            n, got, want, bound)
        if abs(got - want) <= bound:
            print("ok   " + line)
        else:
            fail(line)
    COMPARED[0] += 1
    if ladder[-1] < start:
        print("ok   the ladder's held-out loss fell from %.4f to %.4f" % (start, ladder[-1]))
    else:
        fail("the ladder's held-out loss did not fall: %.4f -> %.4f" % (start, ladder[-1]))


# ---- MLA (flash_mla_with_kvcache, rung 17) ----------------------------------------------------------

def mla_reference(q, k_dense, lens, causal, scale=None):
    """(O [b, sq, hq, 512], LSE [b, hq, sq]) in fp32 of MLA's decode on the latent cache, nothing
    decompressed: per sequence b, softmax(q k^T x scale) @ k[..., :512] over its first lens[b] keys
    of k_dense [b, slots, 1, 576], causal bottom-right aligned (query i sees key j iff j <= i +
    lens[b] - sq); a row that sees no key: O = 0, LSE = -inf."""
    b, sq, hq, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(b, sq, hq, 512, device=q.device)
    lse = torch.full((b, hq, sq), float("-inf"), device=q.device)
    for n in range(b):
        L = int(lens[n])
        kf = k_dense[n, :L, 0].float()  # [L, 576]; V is its first 512 columns
        s = torch.einsum("shd,ld->hsl", q[n].float(), kf) * scale  # [hq, sq, L]
        if causal:
            i = torch.arange(sq, device=q.device)[:, None]
            j = torch.arange(L, device=q.device)[None, :]
            s = s.masked_fill(~(j <= i + L - sq), float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1)  # [hq, sq]
        sees = torch.isfinite(row_lse)
        p = torch.where(sees[..., None], torch.exp(s - torch.where(sees, row_lse, 0)[..., None]), 0)
        out[n] = torch.einsum("hsl,lv->shv", p, kf[:, :512])
        lse[n] = row_lse
    return out, lse


def part_mla():
    """flash_mla_with_kvcache (FlashMLA's interface, rung 17) against the fp32 reference of the
    latent cache (mla_reference): heads 16, 64, 128; seqlen_q 1 and 2 (causal); a paged cache
    (shuffled pages of 64, the table a view of a wider one) and a contiguous one; bf16 and fp16;
    cache_seqlens 1, a non-multiple of 64 and a full cache; the LSE; FlashMLA's two call forms
    (get_mla_metadata with and without arguments); num_splits forced to 1 and 3 against the
    heuristic; a call captured in a CUDA graph, replayed with new q and cache_seqlens, bitwise equal
    to the eager call; a length past the slots and a table entry outside the pool reported in one
    line, nothing read outside the cache; the one-line refusals. Skipped (exit 77) where rung 17 is
    not built or the GPU is not sm_90."""
    from flashladder import flash_mla_with_kvcache, get_mla_metadata

    if not built(17) or torch.cuda.get_device_capability() != (9, 0):
        print("MLA decode runs on rung 17 (sm_90a): skipped (exit 77)")
        sys.exit(SKIP)
    b, slots, page = 3, 1024, 64
    lens = torch.tensor([1, 777, slots], dtype=torch.int32, device="cuda")
    ran = 0
    for dtype_name in ("bf16", "fp16"):
        dt = DTYPES[dtype_name]
        k_dense = randn(b, slots, 1, 576, dtype=dt)
        pool, _, table = paged_twin(k_dense, k_dense, page)
        for heads in (16, 64, 128):
            for sq, causal in ((1, False), (2, True)):
                q = randn(b, sq, heads, 576, dtype=dt, offset=0.5)
                ref, ref_lse = mla_reference(q, k_dense, lens, causal)
                for layout in ("paged", "contiguous"):
                    if layout == "paged":
                        meta, splits = get_mla_metadata(lens, sq * heads, 1)  # FlashMLA's original form
                        out, lse = flash_mla_with_kvcache(q, pool, table, lens, 512, meta, splits, causal=causal)
                    else:
                        meta, _ = get_mla_metadata()  # FlashMLA's later form
                        out, lse = flash_mla_with_kvcache(q, k_dense, None, lens, 512, meta, None, causal=causal)
                    what = "mla %s %s H=%d Sq=%d causal=%d lens=%s" % (layout, dtype_name, heads, sq, causal,
                                                                       lens.tolist())
                    if tuple(out.shape) != (b, sq, heads, 512) or tuple(lse.shape) != (b, heads, sq):
                        fail("%s: out %s, lse %s" % (what, tuple(out.shape), tuple(lse.shape)))
                        continue
                    judge(what, out.float(), ref, dtype_name)
                    judge_lse(what, lse, ref_lse, dtype_name)
                    ran += 1
    expect_runs("mla cases", ran, 2 * 3 * 2 * 2)

    # The split count: forced to 1 and 3 against the reference (the heuristic's above).
    q = randn(b, 2, 64, 576, offset=0.5)
    k_dense = randn(b, slots, 1, 576)
    ref, ref_lse = mla_reference(q, k_dense, lens, True)
    for splits in (1, 3):
        out, lse = flash_mla_with_kvcache(q, k_dense, None, lens, 512, None, splits, causal=True)
        judge("mla num_splits=%d" % splits, out.float(), ref, "fp16")
        judge_lse("mla num_splits=%d" % splits, lse, ref_lse, "fp16")

    # A decode step captured in a CUDA graph (how serving engines call FlashMLA), replayed with new
    # q and cache_seqlens: bitwise equal to the eager call each time.
    pool, _, table = paged_twin(k_dense, k_dense, page)
    table = table.contiguous()
    qg = randn(b, 1, 128, 576)
    lg = lens.clone()
    meta, splits = get_mla_metadata(lg, 128, 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture (the plan, the error record, allocations)
        for _ in range(2):
            flash_mla_with_kvcache(qg, pool, table, lg, 512, meta, splits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out_g, lse_g = flash_mla_with_kvcache(qg, pool, table, lg, 512, meta, splits)
    except Exception as e:  # noqa: BLE001
        fail("flash_mla_with_kvcache could not be captured in a CUDA graph: %s: %s" % (type(e).__name__, e))
    else:
        for step in range(3):
            lg.copy_(torch.tensor([5 + step, 700 + 64 * step, slots - step], dtype=torch.int32, device="cuda"))
            qg.copy_(randn(b, 1, 128, 576))
            graph.replay()
            ref_o, ref_l = flash_mla_with_kvcache(qg, pool, table, lg, 512, meta, splits)
            torch.cuda.synchronize()
            COMPARED[0] += 1
            if not (torch.equal(out_g, ref_o) and torch.equal(lse_g, ref_l)):
                fail("mla CUDA graph replay %d: output or LSE differs from the eager call (max |diff| %.3g)" % (
                    step, (out_g.float() - ref_o.float()).abs().max().item()))
            else:
                print("ok   mla CUDA graph replay %d (cache_seqlens %s): output and LSE equal to the eager call" % (
                    step, lg.tolist()))
        ref, ref_lse = mla_reference(qg, k_dense, lg, False)
        judge("mla CUDA graph replay against the reference", out_g.float(), ref, "fp16")
        judge_lse("mla CUDA graph replay", lse_g, ref_lse, "fp16")

    # Metadata past its bound: reported in one line naming it, nothing read outside the cache.
    qd = randn(b, 1, 16, 576)
    expect_recorded("mla, cache_seqlens past the slots", "cache_seqlens[1] plus the new keys is 2000",
                    lambda: flash_mla_with_kvcache(qd, k_dense, None, torch.tensor(
                        [10, 2000, 5], dtype=torch.int32, device="cuda"), 512))
    bad = table.clone()
    bad[2, 0] = 10 ** 6
    expect_recorded("mla, a block_table entry outside the pool", "outside the pool's %d pages" % pool.shape[0],
                    lambda: flash_mla_with_kvcache(qd, pool, bad, lens, 512))
    out, _ = flash_mla_with_kvcache(qd, pool, table, lens, 512)  # good metadata after the reports
    ref, _ = mla_reference(qd, k_dense, lens, False)
    judge("mla after the reports, good metadata", out.float(), ref, "fp16")

    # The one-line refusals, before anything runs.
    pool32 = pool.view(-1, 32, 1, 576)
    for exc, text, call in (
            (ValueError, "head_dim_v must be 512", lambda: flash_mla_with_kvcache(qd, pool, table, lens, 576)),
            (ValueError, "q must be [batch, seqlen_q, heads_q, 576]",
             lambda: flash_mla_with_kvcache(qd[..., :512], pool, table, lens, 512)),
            (TypeError, "k_cache is torch.bfloat16", lambda: flash_mla_with_kvcache(qd, pool.bfloat16(), table, lens,
                                                                                    512)),
            (ValueError, "k_cache must have one head",
             lambda: flash_mla_with_kvcache(qd, pool.view(-1, 32, 2, 576), table, lens, 512)),
            (ValueError, "multiple of 64", lambda: flash_mla_with_kvcache(qd, pool32, table, lens, 512)),
            (ValueError, "cache_seqlens must be int32", lambda: flash_mla_with_kvcache(qd, pool, table, lens.long(),
                                                                                       512)),
            (ValueError, "cache_seqlens is on cpu", lambda: flash_mla_with_kvcache(qd, pool, table, lens.cpu(), 512)),
            (ValueError, "block_table must be int32", lambda: flash_mla_with_kvcache(qd, pool, table.long(), lens,
                                                                                     512)),
            (ValueError, "num_heads_per_head_k 64", lambda: flash_mla_with_kvcache(
                qd, pool, table, lens, 512, get_mla_metadata(lens, 64, 1)[0], None)),
            (NotImplementedError, "is_fp8_kvcache", lambda: flash_mla_with_kvcache(qd, pool, table, lens, 512,
                                                                                   is_fp8_kvcache=True)),
            (ValueError, "flash_mla_with_kvcache", lambda: flashladder.attention(qd, k_dense, k_dense))):
        expect(exc, text, call)


def part_fp8():
    """FP8 from PyTorch (rung 13): fp8_quantize against its definition (descale = amax / 448 per
    batch and KV head, each value within e4m3's rounding of x); flash_attn_func on float8_e4m3fn
    q, k, v with FlashAttention 3's descales against the fp32 reference on the dequantized inputs,
    within the FP8 floors (check.h, tolerance_floor_fp8), and end to end against the 16-bit inputs:
    head_dim 64, 128, 256, bf16 and fp16 originals, GQA 4:1 and MQA, tails, seqlen_q > seqlen_k
    causal, decode, the LSE; the Hadamard rotation on q and k; descales left out (1); strided views
    run as they are; the one-line refusals (masks and modifiers, packed batches, head_dim, dtypes,
    the descales' layout). Skipped (exit 77) where rung 13 is not built or the GPU is not sm_90."""
    from flashladder import flash_attn_func, flash_attn_varlen_func, fp8_quantize

    if not built(13) or torch.cuda.get_device_capability() != (9, 0):
        print("the FP8 path runs on rung 13 (sm_90a): skipped (exit 77)")
        sys.exit(SKIP)
    e4m3 = torch.float8_e4m3fn

    def dequant(x8, descale):
        g = x8.shape[2] // descale.shape[1]
        return x8.float() * descale.repeat_interleave(g, dim=1)[:, None, :, None]

    def check_quantizer(what, x, x8, descale, hkv):
        COMPARED[0] += 1
        b, _, h, d = x.shape
        xf = x.float()
        amax = xf.view(b, x.shape[1], hkv, h // hkv, d).abs().amax(dim=(1, 3, 4))
        want = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        bad_scale = ((descale - want).abs() > 1e-6 * want).sum().item()
        deq = dequant(x8, descale)
        ds = descale.repeat_interleave(h // hkv, dim=1)[:, None, :, None]
        bound = 1.001 * (xf.abs() * 2.0 ** -4 + ds * 2.0 ** -10)
        over = ((deq - xf).abs() > bound).sum().item()
        if x8.dtype != e4m3 or tuple(x8.shape) != tuple(x.shape) or tuple(descale.shape) != (b, hkv):
            fail("%s: x8 %s %s, descale %s" % (what, x8.dtype, tuple(x8.shape), tuple(descale.shape)))
        elif bad_scale or over:
            fail("%s: %d descales differ from amax / 448, %d values outside e4m3's rounding" % (what, bad_scale, over))
        else:
            print("ok   %s: descale = amax / 448 per (batch, KV head), every value within e4m3's rounding" % what)

    def judge_fp8(what, out, lse, q8, qd, k8, kd, v8, vd, causal, dt_name, originals=None):
        floor = _ext.tolerance_floor(dt_name, fp8=True)
        if out.dtype != torch.bfloat16 or tuple(out.shape) != tuple(q8.shape):
            fail("%s: out %s %s, expected bf16 %s" % (what, out.dtype, tuple(out.shape), tuple(q8.shape)))
            return
        ref, ref_lse = reference(dequant(q8, qd), dequant(k8, kd), dequant(v8, vd), causal)
        judge(what + " (kernel: on the dequantized inputs)", out.float(), ref, dt_name, floor=floor)
        if lse is not None:
            COMPARED[0] += 1
            tol = max(floor["lse_abs"], floor["lse_rel"] * ref_lse.abs().max().item())
            err = (lse.double() - ref_lse.double()).abs().max().item()
            if err > tol:
                fail("%s LSE max_abs %.2e / %.2e" % (what, err, tol))
        if originals is not None:  # end to end: against the 16-bit inputs the tensors were made from
            ref16, _ = reference(*originals, causal)
            judge(what + " (end to end: on the 16-bit inputs)", out.float(), ref16, dt_name, floor=floor)

    cases = ((2, 200, 333, 8, 2, False), (2, 200, 333, 8, 2, True), (1, 300, 129, 4, 4, True),
             (3, 1, 517, 16, 2, False), (1, 1024, 1024, 2, 1, True))
    ran = 0
    for d in (64, 128, 256):
        for dt_name in ("bf16", "fp16"):
            for b, sq, sk, hq, hkv, causal in cases:
                q, k, v = (randn(b, sq, hq, d, dtype=DTYPES[dt_name], offset=0.25),
                           randn(b, sk, hkv, d, dtype=DTYPES[dt_name], offset=0.25),
                           randn(b, sk, hkv, d, dtype=DTYPES[dt_name], offset=0.5))
                q8, qd = fp8_quantize(q, num_heads_kv=hkv)
                k8, kd = fp8_quantize(k)
                v8, vd = fp8_quantize(v)
                what = "fp8 %s d=%d B=%d Sq=%d Sk=%d H=%d/%d causal=%d" % (dt_name, d, b, sq, sk, hq, hkv, causal)
                if ran < 3:
                    check_quantizer(what + " quantize q", q, q8, qd, hkv)
                out, lse, none = flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                                 v_descale=vd, return_attn_probs=True)
                if none is not None:
                    fail("%s: return_attn_probs' third value is not None" % what)
                judge_fp8(what, out, lse, q8, qd, k8, kd, v8, vd, causal, dt_name, originals=(q, k, v))
                ran += 1
    expect_runs("fp8 cases", ran, 3 * 2 * len(cases))

    # A signature that passed the checks runs without them next time (_fp8.FP8_FAST): the same bits.
    from flashladder import _fp8

    _fp8.FP8_FAST.clear()
    q8, qd = fp8_quantize(randn(2, 300, 8, 128), num_heads_kv=2)
    k8, kd = fp8_quantize(randn(2, 300, 2, 128))
    v8, vd = fp8_quantize(randn(2, 300, 2, 128))
    outs = [flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd) for _ in range(3)]
    COMPARED[0] += 1
    if len(_fp8.FP8_FAST) != 1 or not all(torch.equal(outs[0], o) for o in outs[1:]):
        fail("fp8 fast path: %d signatures kept (1 expected), outputs equal: %s" % (
            len(_fp8.FP8_FAST), [torch.equal(outs[0], o) for o in outs[1:]]))
    else:
        print("ok   fp8 fast path: the signature kept once, its calls equal to the checked call bit for bit")

    # Outliers in a few channels, with and without the rotation of q and k (one seed for both).
    b, s, h, d = 2, 512, 8, 128
    q, k, v = randn(b, s, h, d, dtype=torch.bfloat16), randn(b, s, h, d, dtype=torch.bfloat16), \
        randn(b, s, h, d, dtype=torch.bfloat16)
    q[..., :4] *= 20
    k[..., :4] *= 20
    for rot in (False, True):
        q8, qd = fp8_quantize(q, hadamard=rot)
        k8, kd = fp8_quantize(k, hadamard=rot)
        v8, vd = fp8_quantize(v)
        out = flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
        what = "fp8 outlier channels, hadamard=%d" % rot
        ref16, _ = reference(q, k, v, False)
        _, rel, _ = errors(out.float(), ref16)
        print("     %s: end-to-end rel_fro %.3e" % (what, rel))
        if rot:
            rel_rot = rel
        else:
            rel_plain = rel
        judge_fp8(what, out, None, q8, qd, k8, kd, v8, vd, False, "bf16")
    COMPARED[0] += 1
    if not rel_rot < rel_plain:
        fail("fp8 outliers: the rotation did not lower the end-to-end error (%.3e against %.3e)" % (rel_rot, rel_plain))
    else:
        print("ok   fp8 outliers: the rotation lowers the end-to-end error %.3e -> %.3e" % (rel_plain, rel_rot))

    # Descales left out (1): e4m3 values made directly; strided views (a [b, h, s, d] tensor's
    # transpose, V a slice of a wider tensor) run as they are.
    b, s, hq, hkv, d = 2, 190, 4, 2, 64
    q8 = randn(b, hq, s, d).to(e4m3).transpose(1, 2)
    kv8 = randn(b, s, hkv, 2 * d).to(e4m3)
    k8, v8 = kv8[..., :d], kv8[..., d:]
    ones = torch.ones(b, hkv, device="cuda")
    out, lse, _ = flash_attn_func(q8, k8, v8, causal=True, return_attn_probs=True)
    judge_fp8("fp8 without descales, strided q, k and v", out, lse, q8, ones, k8, ones, v8, ones, True, "fp16")
    raw = randn(b * s * hkv * d + 8).to(e4m3)
    k8m = raw[8:].view(b, s, hkv, d)  # 8 bytes into its storage: copied to an aligned layout, then run
    out = flash_attn_func(q8, k8m, v8, causal=True)
    judge_fp8("fp8, k 8 bytes off 16-byte alignment", out, None, q8, ones, k8m, ones, v8, ones, True, "fp16")

    # The refusals, one line each.
    q8, qd = fp8_quantize(randn(1, 16, 4, 64), num_heads_kv=2)
    k8, kd = fp8_quantize(randn(1, 16, 2, 64))
    q16 = randn(1, 16, 4, 64)
    cu = torch.tensor([0, 16], dtype=torch.int32, device="cuda")
    for exc, text, call in (
            (NotImplementedError, "window_size with float8_e4m3fn",
             lambda: flash_attn_func(q8, k8, k8, window_size=(8, 0))),
            (NotImplementedError, "softcap with float8_e4m3fn", lambda: flash_attn_func(q8, k8, k8, softcap=30.0)),
            (NotImplementedError, "dropout_p with float8_e4m3fn", lambda: flash_attn_func(q8, k8, k8, dropout_p=0.1)),
            (NotImplementedError, "packed batch", lambda: flash_attn_varlen_func(q8[0], k8[0], k8[0], cu, cu, 16, 16)),
            (TypeError, "k is torch.bfloat16", lambda: flash_attn_func(q8, k8.bfloat16(), k8)),
            (TypeError, "q is torch.float16", lambda: flash_attn_func(q16, k8, k8, q_descale=qd)),
            (ValueError, "q_descale must be [batch, heads_kv] = [1, 2]",
             lambda: flash_attn_func(q8, k8, k8, q_descale=qd.view(2, 1))),
            (TypeError, "k_descale must be a float32", lambda: flash_attn_func(q8, k8, k8, k_descale=kd.half())),
            (ValueError, "head_dim must be 64, 128 or 256",
             lambda: flash_attn_func(q8[..., :32], k8[..., :32], k8[..., :32])),
            (ValueError, "fp8_quantize: head_dim must be 64, 128 or 256", lambda: fp8_quantize(randn(1, 4, 2, 96))),
            (ValueError, "num_heads_kv must divide", lambda: fp8_quantize(q16, num_heads_kv=3)),
            (TypeError, "fp8_quantize: x must be fp16 or bf16", lambda: fp8_quantize(q16.float()))):
        expect(exc, text, call)


def part_fp8_kvcache():
    """flash_attn_with_kvcache on float8_e4m3fn caches (rung 08's fp8-kv): contiguous and paged
    (pages of 16 and 64, the table's columns a slice of a wider table), GQA and MHA, head_dim 64 and
    128, a bf16 or fp16 q (O in q's dtype) and an e4m3 q with q_descale (O bf16), decode steps and
    4 causal queries, left padding, the LSE. New keys appended in place: 16-bit ones quantized with
    the cache's descales (byte for byte the fp32 product with 1 / descale rounded to e4m3), e4m3
    ones copied. O against the fp32 reference on the dequantized cache after the append, within the
    16-bit floors (the widening is exact: the kernel's error is the 16-bit rung's). The prepared step
    of a signature seen before (_fp8.FP8_KV_FAST) bit for bit against the checked one. A cache_seqlens
    past the slots is reported by the next call, nothing written out of bounds. The refusals, one line
    each. Skipped (exit 77) where rung 08 is not built or the GPU is older than sm_89."""
    from flashladder import flash_attn_with_kvcache

    major, minor = torch.cuda.get_device_capability()
    if not built(8) or major * 10 + minor < 89:
        print("an e4m3 cache runs on rung 08's fp8-kv (sm_89 or newer): skipped (exit 77)")
        sys.exit(SKIP)
    e4m3 = torch.float8_e4m3fn

    def deq(c8, descale):  # [b, s, hkv, d] e4m3 x [b, hkv]
        return c8.float() * descale[:, None, :, None]

    def quantized(x, descale):  # what the append writes: x * (1 / descale) to e4m3 (in range here)
        return (x.float() * (1.0 / descale)[:, None, :, None]).clamp(-448, 448).to(e4m3)

    def make_cache(b, slots, hkv, d):
        x = randn(b, slots, hkv, d, dtype=torch.float32) * 2
        descale = x.abs().amax(dim=(1, 3)) / 448.0
        return quantized(x, descale), descale

    def as_pool(c8, page, table):  # the contiguous cache's pages placed at the table's entries
        b, slots, hkv, d = c8.shape
        pool = torch.zeros(b * slots // page, page, hkv, d, dtype=torch.uint8, device="cuda")
        pool[table.long()] = c8.view(torch.uint8).view(b, slots // page, page, hkv, d)
        return pool.view(e4m3)

    def from_pool(pool, table, slots):
        b = table.shape[0]
        page = pool.shape[1]
        return pool.view(torch.uint8)[table.long()].view(b, slots, *pool.shape[2:]).view(e4m3)

    def judge_step(what, out, lse, q, kc, vc, kd, vd, lens, starts, causal, dt_name, q_scale=None):
        b = q.shape[0]
        qf = q.float() if q_scale is None else q.float() * q_scale.repeat_interleave(
            q.shape[2] // kc.shape[2], dim=1)[:, None, :, None]
        refs, ref_lses = [], []
        for i in range(b):
            lo, hi = int(starts[i]), int(lens[i])
            o, l = reference(qf[i:i + 1], deq(kc[i:i + 1, lo:hi], kd[i:i + 1]), deq(vc[i:i + 1, lo:hi], vd[i:i + 1]),
                             causal)
            refs.append(o)
            ref_lses.append(l)
        judge(what, out.float(), torch.cat(refs), dt_name)
        judge_lse(what, lse, torch.cat(ref_lses), dt_name)

    ran = 0
    cases = (  # (batch, seqlen_q, heads_q, heads_kv, d, slots, page, causal, leftpad, q kind, new k kind)
        (3, 1, 8, 2, 128, 1024, 0, False, False, "bf16", "bf16"),
        (3, 1, 8, 2, 128, 1024, 64, True, False, "fp16", "e4m3"),
        (2, 4, 16, 2, 64, 768, 16, True, False, "bf16", "bf16"),
        (2, 4, 4, 4, 128, 512, 0, True, True, "fp16", "fp16"),
        (2, 1, 8, 1, 128, 256, 16, False, False, "e4m3", "e4m3"),
        (1, 16, 4, 4, 64, 2048, 0, True, False, "e4m3", "bf16"))
    for b, sq, hq, hkv, d, slots, page, causal, leftpad, qk, nk in cases:
        what = "fp8 cache q=%s new=%s B=%d Sq=%d H=%d/%d d=%d slots=%d page=%d causal=%d leftpad=%d" % (
            qk, nk, b, sq, hq, hkv, d, slots, page, causal, leftpad)
        k8, kd = make_cache(b, slots, hkv, d)
        v8, vd = make_cache(b, slots, hkv, d)
        new = 2
        lens = torch.randint(40, slots - new, (b,), device="cuda", dtype=torch.int32)
        lens[0] = slots - new  # one sequence fills its cache
        starts = torch.randint(0, 40, (b,), device="cuda", dtype=torch.int32) if leftpad else None
        q_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.bfloat16}[qk]
        q = randn(b, sq, hq, d, dtype=q_dtype)
        qd = None
        if qk == "e4m3":
            qd = torch.rand(b, hkv, device="cuda") + 0.5
            q = (q.float() / qd.repeat_interleave(hq // hkv, dim=1)[:, None, :, None]).clamp(-448, 448).to(e4m3)
        kn16, vn16 = randn(b, new, hkv, d, dtype=torch.float32), randn(b, new, hkv, d, dtype=torch.float32)
        if nk == "e4m3":
            kn, vn = quantized(kn16, kd), quantized(vn16, vd)
        else:
            kn, vn = kn16.to(DTYPES[nk]), vn16.to(DTYPES[nk])
        want_k, want_v = quantized(kn, kd) if nk != "e4m3" else kn, quantized(vn, vd) if nk != "e4m3" else vn
        if page:
            table = torch.randperm(b * slots // page, device="cuda").to(torch.int32).view(b, slots // page)
            wide = torch.full((b, slots // page + 3), -1, dtype=torch.int32, device="cuda")
            wide[:, :slots // page] = table
            kc, vc, bt = as_pool(k8, page, table), as_pool(v8, page, table), wide[:, :slots // page]
        else:
            kc, vc, bt = k8.clone(), v8.clone(), None
        out, lse = flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, cache_leftpad=starts,
                                           block_table=bt, causal=causal, return_softmax_lse=True, q_descale=qd,
                                           k_descale=kd, v_descale=vd)
        after_k = from_pool(kc, table, slots) if page else kc
        after_v = from_pool(vc, table, slots) if page else vc
        COMPARED[0] += 1
        rows = lens.long()[:, None] + torch.arange(new, device="cuda")[None, :]
        seq = torch.arange(b, device="cuda")[:, None]
        got_k = after_k.view(torch.uint8)[seq, rows]  # bytes: indexing is for integer types
        got_v = after_v.view(torch.uint8)[seq, rows]
        untouched = torch.ones(b, slots, dtype=torch.bool, device="cuda")
        untouched[seq, rows] = False
        same_k = torch.equal(got_k, want_k.view(torch.uint8))
        same_v = torch.equal(got_v, want_v.view(torch.uint8))
        kept = torch.equal(after_k.view(torch.uint8)[untouched], k8.view(torch.uint8)[untouched])
        if not (same_k and same_v and kept):
            fail("%s: append k %s, v %s, the rest of the cache kept %s" % (what, same_k, same_v, kept))
        else:
            print("ok   %s: the new keys and values appended byte for byte, nothing else written" % what)
        want_dtype = torch.bfloat16 if qk == "e4m3" else q_dtype
        if out.dtype != want_dtype or tuple(out.shape) != (b, sq, hq, d):
            fail("%s: out %s %s" % (what, out.dtype, tuple(out.shape)))
            continue
        st = torch.zeros(b, dtype=torch.int32, device="cuda") if starts is None else starts
        judge_step(what, out, lse, q, after_k, after_v, kd, vd, lens + new, st, causal,
                   "bf16" if want_dtype == torch.bfloat16 else "fp16", q_scale=qd)
        ran += 1
    expect_runs("fp8 cache cases", ran, len(cases))

    # A signature that passed the checks runs its prepared step next time (_fp8.FP8_KV_FAST: the check,
    # the append and the launch from one binding call): the same output and cache bytes as the checked
    # step on the same state, for a 16-bit q on pages with quantized new keys, and an e4m3 q.
    from flashladder import _fp8

    for what, q_kind, page in (("bf16 q, pages of 16, bf16 new keys", "bf16", 16), ("e4m3 q, contiguous", "e4m3", 0)):
        _fp8.FP8_KV_FAST.clear()
        b, hq, hkv, d, slots = 2, 8, 2, 128, 512
        k8, kd = make_cache(b, slots, hkv, d)
        v8, vd = make_cache(b, slots, hkv, d)
        q = randn(b, 1, hq, d, dtype=torch.bfloat16)
        qd = None
        if q_kind == "e4m3":
            qd = torch.rand(b, hkv, device="cuda") + 0.5
            q = q.to(e4m3)
        kn, vn = randn(b, 1, hkv, d, dtype=torch.bfloat16), randn(b, 1, hkv, d, dtype=torch.bfloat16)
        lens = torch.tensor([100, 400], dtype=torch.int32, device="cuda")
        table = torch.randperm(b * slots // page, device="cuda").to(torch.int32).view(b, -1) if page else None
        results = []
        for _ in range(2):
            kc = as_pool(k8, page, table) if page else k8.clone()
            vc = as_pool(v8, page, table) if page else v8.clone()
            o, l = flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, block_table=table,
                                           return_softmax_lse=True, q_descale=qd, k_descale=kd, v_descale=vd)
            results.append((o, l, kc.view(torch.uint8), vc.view(torch.uint8)))
        COMPARED[0] += 1
        same = [torch.equal(x, y) for x, y in zip(*results)]
        if len(_fp8.FP8_KV_FAST) != 1 or not all(same):
            fail("fp8 cache fast path, %s: %d signatures kept (1 expected), out, lse, k, v equal: %s"
                 % (what, len(_fp8.FP8_KV_FAST), same))
        else:
            print("ok   fp8 cache fast path, %s: the prepared step equals the checked one bit for bit" % what)

    # A cache_seqlens past the slots: reported by the next call, the cache untouched.
    k8, kd = make_cache(2, 256, 2, 128)
    v8, vd = make_cache(2, 256, 2, 128)
    before = k8.clone()
    q = randn(2, 1, 8, 128, dtype=torch.bfloat16)
    kn = randn(2, 1, 2, 128, dtype=torch.bfloat16)
    bad = torch.tensor([100, 256], dtype=torch.int32, device="cuda")
    expect_recorded("fp8 cache: cache_seqlens past the slots", "cache_seqlens[1] plus the new keys is 257",
                    lambda: flash_attn_with_kvcache(q, k8, v8, kn, kn, cache_seqlens=bad, k_descale=kd, v_descale=vd))
    COMPARED[0] += 1
    if not torch.equal(k8.view(torch.uint8)[1], before.view(torch.uint8)[1]):
        fail("fp8 cache: the sequence that did not fit was written")

    # The refusals, one line each.
    ok_lens = torch.tensor([10, 20], dtype=torch.int32, device="cuda")
    cos = torch.ones(256, 32, device="cuda", dtype=torch.bfloat16)
    for exc, text, call in (
            (NotImplementedError, "rotary_cos with a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(q, k8, v8, kn, kn, rotary_cos=cos, rotary_sin=cos, cache_seqlens=ok_lens)),
            (NotImplementedError, "window_size with a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(q, k8, v8, cache_seqlens=ok_lens, window_size=(8, 0))),
            (NotImplementedError, "softcap with a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(q, k8, v8, cache_seqlens=ok_lens, softcap=30.0)),
            (NotImplementedError, "cache_batch_idx with a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(q, k8, v8, cache_seqlens=ok_lens, cache_batch_idx=ok_lens)),
            (ValueError, "head_dim must be 64 or 128 for a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(randn(2, 1, 8, 256, dtype=torch.bfloat16),
                                             torch.zeros(2, 64, 2, 256, dtype=e4m3, device="cuda"),
                                             torch.zeros(2, 64, 2, 256, dtype=e4m3, device="cuda"))),
            (ValueError, "no rung reads a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(randn(2, 64, 8, 128, dtype=torch.bfloat16), k8, v8, cache_seqlens=ok_lens)),
            (ValueError, "q_descale with a torch.bfloat16 q",
             lambda: flash_attn_with_kvcache(q, k8, v8, cache_seqlens=ok_lens, q_descale=kd)),
            (ValueError, "go with a float8_e4m3fn cache",
             lambda: flash_attn_with_kvcache(q, k8.bfloat16(), v8.bfloat16(), cache_seqlens=ok_lens, k_descale=kd)),
            (ValueError, "k_descale must be [batch, heads_kv] = [2, 2]",
             lambda: flash_attn_with_kvcache(q, k8, v8, cache_seqlens=ok_lens, k_descale=kd.view(4, 1))),
            (TypeError, "k and v must be float8_e4m3fn (copied) or fp16/bf16",
             lambda: flash_attn_with_kvcache(q, k8, v8, kn.float(), kn.float(), cache_seqlens=ok_lens))):
        expect(exc, text, call)


# ---- held-out shapes ------------------------------------------------------------------------------

def part_heldout():
    """Shapes no other part names, through the package as a user calls it: one query against 100k
    keys (GQA 32/8, bf16) through flash_attn_func and a cache of 100352 slots, and against 256k
    keys (fp16) in a cache; training shapes with lengths that are no multiple of a tile (3000,
    1037 x 2049, 777, 5000, 129, 1500, 300 x 700, 999, one query), head_dims 40, 64, 96, 112, 128,
    200 and 256 and MLA's 192 with V at 128, GQA 4:1, 8:1 and 5:1, a window; a packed batch of 1,
    513, 2000, 7 and 64 tokens with GQA 8:1. Forward, LSE and backward against the fp32 reference
    (flash_case: each called twice)."""
    from flashladder import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

    bf, fp = torch.bfloat16, torch.float16
    q = randn(1, 1, 32, 128, dtype=bf)
    k, v = randn(1, 100000, 8, 128, dtype=bf), randn(1, 100000, 8, 128, dtype=bf)
    ref, _ = reference_mods(q, k, v, True)
    judge("1 query x 100k keys, GQA 32/8, flash_attn_func", flash_attn_func(q, k, v, causal=True).float(), ref,
          "bf16")
    kc = torch.zeros(1, 100352, 8, 128, dtype=bf, device="cuda")
    vc = torch.zeros_like(kc)
    kc[:, :100000], vc[:, :100000] = k, v
    lens = torch.tensor([100000], dtype=torch.int32, device="cuda")
    judge("1 query x 100k keys, GQA 32/8, flash_attn_with_kvcache",
          flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True).float(), ref, "bf16")
    del k, v, kc, vc
    # The longest length claimed, 256k keys, in the cache (one query, GQA 32/8, fp16).
    n = 262144
    q = randn(1, 1, 32, 128)
    kc, vc = randn(1, n, 8, 128), randn(1, n, 8, 128)
    ref, _ = reference_mods(q, kc, vc, True)
    lens = torch.tensor([n], dtype=torch.int32, device="cuda")
    judge("1 query x 256k keys, GQA 32/8, flash_attn_with_kvcache",
          flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True).float(), ref, "fp16")
    del kc, vc, ref
    for dt, (b, sq, sk, hq, hkv, d, dv, causal, win) in [
            (bf, (2, 3000, 3000, 32, 8, 128, 128, True, (-1, -1))),
            (fp, (1, 1037, 2049, 12, 4, 96, 96, True, (-1, -1))),
            (bf, (3, 777, 777, 16, 2, 64, 64, False, (255, 0))),
            (fp, (1, 5000, 5000, 8, 8, 256, 256, True, (-1, -1))),
            (bf, (4, 129, 129, 20, 4, 112, 112, False, (-1, -1))),
            (bf, (1, 1, 4097, 16, 16, 128, 128, False, (-1, -1))),
            # MLA's prefill shape (192/128) at a length no tile divides, GQA 4:1; head_dims 40 and 200
            (bf, (2, 1500, 1500, 16, 4, 192, 128, True, (-1, -1))),
            (fp, (1, 300, 700, 8, 2, 40, 40, False, (-1, -1))),
            (bf, (1, 999, 999, 4, 4, 200, 200, True, (-1, -1)))]:
        leaves = [randn(b, sq, hq, d, dtype=dt), randn(b, sk, hkv, d, dtype=dt), randn(b, sk, hkv, dv, dtype=dt)]
        flash_case("%s b%d %dx%d %d/%d d%s causal=%s window=%s" % (
                       "bf16" if dt == bf else "fp16", b, sq, sk, hq, hkv, d if dv == d else "%d/%d" % (d, dv),
                       causal, win),
                   "bf16" if dt == bf else "fp16",
                   lambda q, k, v, s, c=causal, w=win: flash_attn_func(q, k, v, causal=c, window_size=w,
                                                                       return_attn_probs=True),
                   lambda q, k, v, s, c=causal, w=win: reference_mods(q, k, v, c, window=w), leaves)
    seqs = [1, 513, 2000, 7, 64]
    cu = torch.tensor([0] + list(itertools_accumulate(seqs)), dtype=torch.int32, device="cuda")
    total = int(cu[-1])
    leaves = [randn(total, 16, 64, dtype=bf), randn(total, 2, 64, dtype=bf), randn(total, 2, 64, dtype=bf)]
    flash_case("varlen %s GQA 16/2 d64 causal" % seqs, "bf16",
               lambda q, k, v, s: flash_attn_varlen_func(q, k, v, cu, cu, max(seqs), max(seqs), causal=True,
                                                         return_attn_probs=True),
               lambda q, k, v, s: reference_varlen(q, k, v, cu, cu, True), leaves)


def itertools_accumulate(xs):
    total = 0
    for x in xs:
        total += x
        yield total


PARTS = {"forward": part_forward, "backward": part_backward, "compile": part_compile,
         "errors": part_errors, "transformers": part_transformers, "models": part_models,
         "flash": part_flash, "kvcache": part_kvcache, "metadata": part_metadata, "dropout": part_dropout,
         "bert_dropout": part_bert_dropout, "mla": part_mla, "fp8": part_fp8,
         "fp8_kvcache": part_fp8_kvcache, "heldout": part_heldout}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in PARTS:
        print("usage: test_gpu.py " + "|".join(PARTS))
        return 2
    if not torch.cuda.is_available() or flashladder.device_count() == 0:
        print("no CUDA device (%s): skipped (exit 77)" % (flashladder.no_device_reason() or
                                                         "torch.cuda.is_available() is False"))
        return SKIP
    torch.manual_seed(1)
    print("%s on %s (%s), PyTorch %s" % (sys.argv[1], flashladder.device_info().name,
                                         flashladder.device_info().arch, torch.__version__))
    try:
        PARTS[sys.argv[1]]()
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001  a failure, reported with its traceback (never swallowed)
        traceback.print_exc()
        fail("unexpected exception")
    if COMPARED[0] == 0:
        fail("%s: nothing was compared" % sys.argv[1])
    print("%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
