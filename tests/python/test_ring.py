#!/usr/bin/env python3
"""Ring attention (flashladder.ring_attention) over P processes against one process's attention
over the whole sequence (ctest: python_ring_cpu and gpu_python_ring).

    PYTHONPATH=build/ci/python python3 tests/python/test_ring.py cpu|gpu

cpu  P = 1, 2, 3, 4 processes (torch.multiprocessing spawn, the gloo backend on 127.0.0.1) run
     the ring on flashladder._ring.ReferenceBackend (plain torch math), and rank 0 compares the
     ring's O, LSE, dQ, dK and dV, gathered by ring_unshard, with autograd through
     F.scaled_dot_product_attention over the whole sequence in one process: in float64 (tolerance
     1e-10: the bookkeeping must be exact), over causal and not, zigzag and contiguous, GQA 4/2,
     MQA 4/1 and MHA, head_dim 16 and 32, batch 1 and 2, seqlen divisible by 2P, not divisible
     by it, and shorter than 2P (empty chunks, an empty shard); and two cases in bf16 and fp16 (the
     16-bit rounding and the fp32 accumulators) under the ladder's tolerance floors. Also:
     ring_shard's rows against the zigzag and contiguous layouts, ring_unshard(ring_shard(x)) == x,
     and each refusal's one-line message (no process group, a wrong shard length, inputs on two
     devices, the rungs' own reason for CPU tensors, an unknown sharding).
gpu  with at least 2 CUDA devices: P = 1, 2, ... up to 4 processes, one GPU each, the NCCL backend
     and the package's rungs (the forward route's rung; rung 14's o32-delta backward on sm_90,
     rung 11's elsewhere), against the same reference in fp32 on the same 16-bit values: fp16 and
     bf16, head_dim 64 and 128, seqlen 4096 (batch 1, GQA 8/2) and 4099 (batch 2, MQA 4/1),
     causal and not, zigzag and contiguous; with P <= 2 also launches of 17000 keys (D from the O
     given, past the 16384 keys where a rung's default backward sums D over its own keys).
     Tolerances as tests/python/test_gpu.py's (fl::tolerance_floor, for gradients
     fl::gradient_tolerance_floor: relative Frobenius and max abs, the latter scaled by
     max(1, max |reference|); the LSE by max abs).

Prints one line per case (what ran, its max errors) and a summary. Exits 77 (ctest: skipped)
without PyTorch or torch.distributed, and for gpu with fewer than 2 CUDA devices; 0 when every
check passes, 1 if one fails.
"""

import datetime
import math
import os
import socket
import sys
import traceback

SKIP = 77

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)

import flashladder
from flashladder import _ext, _ring

FAILURES = []
DTYPES = {"fp64": torch.float64, "fp16": torch.float16, "bf16": torch.bfloat16}
# float64 through float64 math: only the bookkeeping can be wrong, and then by far more than this.
EXACT = {"rel_fro": 1e-10, "max_abs": 1e-10, "lse_abs": 1e-10}


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg, flush=True)


# ---- reference ----------------------------------------------------------------------------------

def reference(q, k, v, causal, scale):
    """(O [b, s, hq, d], LSE [b, hq, s]) of the whole sequence in q's dtype (fp32 or fp64,
    differentiable), through F.scaled_dot_product_attention's math backend; causal over equal
    lengths is the lower triangle, which every row of the sequence sees part of."""
    _, s, hq, _ = q.shape
    hkv = k.shape[2]
    qt = q.transpose(1, 2)
    kt = k.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vt = v.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
    scores = (qt.detach() @ kt.detach().transpose(-1, -2)) * scale
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return out.transpose(1, 2), torch.logsumexp(scores, dim=-1)


def errors(got, ref):
    """(max abs error, relative Frobenius error, max |ref|) of got against ref, in fp64."""
    diff = got.double() - ref.double()
    ref_max = ref.double().abs().max().item() if ref.numel() else 0.0
    norm = ref.double().norm().item()
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    return max_abs, diff.norm().item() / (norm if norm > 0 else 1.0), ref_max


def floors(dtype_name, gradients=False):
    return EXACT if dtype_name == "fp64" else _ext.tolerance_floor(dtype_name, gradients)


def judge(name, got, ref, dtype_name, gradients, bad):
    """'name max_abs/tol' for the case's line; appends to ``bad`` when over the tolerance."""
    floor = floors(dtype_name, gradients)
    if not torch.isfinite(got).all():
        bad.append("%s: %d non-finite values" % (name, (~torch.isfinite(got)).sum().item()))
        return "%s non-finite" % name
    max_abs, rel, ref_max = errors(got, ref)
    tol_abs = floor["max_abs"] * max(1.0, ref_max)
    if max_abs > tol_abs or rel > floor["rel_fro"]:
        bad.append("%s max_abs %.2e / %.2e, rel_fro %.2e / %.2e" % (name, max_abs, tol_abs, rel,
                                                                   floor["rel_fro"]))
    return "%s %.1e" % (name, max_abs)


def judge_lse(got, ref, dtype_name, bad):
    floor = floors(dtype_name)["lse_abs"]
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isneginf(got), ~finite):
        bad.append("LSE: -inf exactly where a row sees no key expected")
        return "LSE -inf misplaced"
    err = (got[finite].double() - ref[finite].double()).abs().max().item() if finite.any() else 0.0
    if err > floor:
        bad.append("LSE max_abs %.2e / %.2e" % (err, floor))
    return "LSE %.1e" % err


# ---- one case: every rank runs the ring, rank 0 checks ----------------------------------------------

def make_inputs(case, device):
    """The whole sequence's q, k, v and dO, the same on every rank (one seed per case)."""
    batch, seqlen, hq, hkv, d = case["shape"]
    g = torch.Generator().manual_seed(case["seed"])
    dt = DTYPES[case["dtype"]]

    def randn(*shape, offset=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) + offset).to(device=device, dtype=dt)

    return (randn(batch, seqlen, hq, d, offset=0.5), randn(batch, seqlen, hkv, d),
            randn(batch, seqlen, hkv, d, offset=0.5), randn(batch, seqlen, hq, d))


def run_case(case, rank, ranks, device, backend):
    batch, seqlen, hq, hkv, d = case["shape"]
    causal, sharding, scale = case["causal"], case["sharding"], case["scale"]
    q, k, v, dout = make_inputs(case, device)
    leaves = [flashladder.ring_shard(t, seqlen, sharding=sharding).requires_grad_() for t in (q, k, v)]
    out, lse = flashladder.ring_attention(*leaves, seqlen, causal=causal, softmax_scale=scale,
                                          sharding=sharding, return_lse=True, _backend=backend,
                                          _key_cap=case.get("key_cap"))
    out.backward(flashladder.ring_shard(dout, seqlen, sharding=sharding))

    def full(x, dim=1):
        return flashladder.ring_unshard(x, seqlen, sharding=sharding, dim=dim)

    got = {"O": full(out.detach()), "LSE": full(lse, dim=2), "dQ": full(leaves[0].grad),
           "dK": full(leaves[1].grad), "dV": full(leaves[2].grad)}
    if rank != 0:
        return
    what = "P=%d %s %s causal=%d B=%d N=%d H=%d/%d d=%d%s%s" % (
        ranks, case["dtype"], sharding, causal, batch, seqlen, hq, hkv, d,
        "" if scale is None else " scale=%g" % scale,
        "" if case.get("key_cap") is None else " forward launches cut to %d keys" % case["key_cap"])
    bad = []
    if lse.requires_grad:
        bad.append("the LSE must be non-differentiable")
    if out.dtype != q.dtype or leaves[1].grad.dtype != k.dtype:
        bad.append("O is %s and dK %s; both must be the inputs' %s" % (out.dtype, leaves[1].grad.dtype, q.dtype))
    # fp64 on the CPU; on a GPU fp32, as tests/python/test_gpu.py (the same 16-bit values).
    math_dtype = torch.float64 if device.type == "cpu" else torch.float32
    ref_in = [t.detach().to(math_dtype).requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = reference(*ref_in, causal, 1.0 / math.sqrt(d) if scale is None else scale)
    ref_out.backward(dout.to(math_dtype))
    parts = [judge("O", got["O"], ref_out.detach(), case["dtype"], False, bad),
             judge_lse(got["LSE"], ref_lse, case["dtype"], bad)]
    for name, r in zip(("dQ", "dK", "dV"), ref_in):
        parts.append(judge(name, got[name], r.grad, case["dtype"], True, bad))
    if bad:
        fail("%s: %s" % (what, "; ".join(bad)))
    else:
        print("ok   %s: max abs %s" % (what, ", ".join(parts)), flush=True)


# ---- the CPU side's other checks -------------------------------------------------------------------

def expect(exc, text, fn, report):
    """fn() must raise exc with one line containing text; only the reporting rank (rank 0) says
    so (every rank raises alike, before anything is sent)."""
    problem = None
    try:
        fn()
        problem = "expected %s(%r), nothing raised" % (exc.__name__, text)
    except exc as e:
        msg = str(e)
        if text not in msg or "\n" in msg.strip():
            problem = "%s raised %r, expected one line with %r" % (exc.__name__, msg, text)
        elif report:
            print("ok   %s: %s" % (type(e).__name__, msg), flush=True)
    except Exception as e:  # noqa: BLE001
        problem = "expected %s(%r), got %s: %s" % (exc.__name__, text, type(e).__name__, e)
    if problem and report:
        fail(problem)


def expected_rows(n, ranks, rank, sharding):
    """The token positions rank ``rank`` holds, in its local order, from the layout's definition:
    chunks of near-equal length (the first n mod C one longer); zigzag: C = 2P, chunks rank and
    2P-1-rank; contiguous: C = P, chunk rank."""
    chunks = 2 * ranks if sharding == "zigzag" else ranks
    mine = [rank, 2 * ranks - 1 - rank] if sharding == "zigzag" else [rank]
    rows = []
    for c in mine:
        begin = c * (n // chunks) + min(c, n % chunks)
        rows += range(begin, begin + n // chunks + (1 if c < n % chunks else 0))
    return rows


def cpu_checks(rank, ranks, report):
    for sharding in ("zigzag", "contiguous"):
        for n in (1, 2 * ranks - 1, 4 * ranks + 3, 50):
            x = torch.arange(n, dtype=torch.float64)[None, :, None].expand(2, n, 3).contiguous()
            local = flashladder.ring_shard(x, sharding=sharding)
            want = torch.tensor(expected_rows(n, ranks, rank, sharding), dtype=torch.float64)
            if not torch.equal(local[0, :, 0], want):
                fail("P=%d rank %d ring_shard %s N=%d: rows %s, expected %s"
                     % (ranks, rank, sharding, n, local[0, :, 0].tolist(), want.tolist()))
            back = flashladder.ring_unshard(local.transpose(0, 1), n, sharding=sharding, dim=0)
            if not torch.equal(back.transpose(0, 1), x):
                fail("P=%d ring_unshard(ring_shard(x)) != x (%s, N=%d, dim=0)" % (ranks, sharding, n))
    if report:
        print("ok   P=%d ring_shard rows (zigzag, contiguous) and ring_unshard(ring_shard(x)) == x" % ranks,
              flush=True)
    n = 4 * ranks + 3
    q, k, v = (flashladder.ring_shard(torch.randn(1, n, 4, 16), sharding="zigzag") for _ in range(3))
    ref = _ring.ReferenceBackend()
    longer = torch.randn(1, q.shape[1] + 1, 4, 16)
    expect(ValueError, "rows but rank %d of %d holds %d" % (rank, ranks, q.shape[1]),
           lambda: flashladder.ring_attention(longer, k, v, n, _backend=ref), report)
    expect(ValueError, "k is on meta but q is on cpu",
           lambda: flashladder.ring_attention(q, k.to("meta"), v, n, _backend=ref), report)
    expect(ValueError, "q is on cpu; the rungs run on CUDA tensors",
           lambda: flashladder.ring_attention(q.half(), k.half(), v.half(), n), report)
    expect(ValueError, "sharding must be 'zigzag' or 'contiguous'",
           lambda: flashladder.ring_attention(q, k, v, n, sharding="striped", _backend=ref), report)
    expect(ValueError, "x_local has %d rows" % (q.shape[1] + 1),
           lambda: flashladder.ring_unshard(longer, n), report)


# ---- the processes ----------------------------------------------------------------------------------

def worker(rank, ranks, port, mode, cases, results):
    if mode == "gpu":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // ranks))
        device = torch.device("cpu")
    dist.init_process_group("nccl" if mode == "gpu" else "gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=ranks, timeout=datetime.timedelta(seconds=300 if mode == "gpu" else 120))
    try:
        backend = _ring.ReferenceBackend() if mode == "cpu" else None
        for case in cases:
            run_case(case, rank, ranks, device, backend)
        if mode == "cpu":
            cpu_checks(rank, ranks, rank == 0)
        if mode == "gpu":
            torch.cuda.synchronize()
        dist.barrier()
    except Exception:  # noqa: BLE001  reported, then the parent sees the rank fail
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()
    results.put((rank, list(FAILURES)))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_cases(ranks):
    """float64 over every combination; two 16-bit cases."""
    shapes = [  # (batch, seqlen, heads_q, heads_kv, head_dim, softmax_scale)
        (2, 48, 4, 2, 16, None),                                      # 2P divides 48 for P <= 4
        (1, 10 * ranks + 3, 4, 1, 32, 0.3),                           # 2P does not divide it
        (2, 2 * ranks - 1 if ranks <= 2 else ranks - 1, 4, 4, 16, None),  # < 2P: empty chunks, shards
    ]
    cases = []
    for b, n, hq, hkv, d, scale in shapes:
        for sharding in ("zigzag", "contiguous"):
            for causal in (False, True):
                cases.append({"shape": (b, n, hq, hkv, d), "causal": causal, "sharding": sharding,
                              "scale": scale, "dtype": "fp64", "seed": len(cases)})
    cases.append({"shape": (2, 48, 4, 2, 16), "causal": True, "sharding": "zigzag", "scale": None,
                  "dtype": "bf16", "seed": 100})
    cases.append({"shape": (1, 10 * ranks + 3, 4, 1, 32), "causal": True, "sharding": "contiguous",
                  "scale": None, "dtype": "fp16", "seed": 101})
    # The forward's launches cut to 5 keys (split_keys: several launches of a step over the same
    # rows, each merged as it ends), as rows past 16384 keys are with a backward to follow.
    for causal in (False, True):
        cases.append({"shape": (2, 48, 4, 2, 16), "causal": causal, "sharding": "zigzag", "scale": None,
                      "dtype": "fp64", "seed": 102 + causal, "key_cap": 5})
    return cases


def gpu_cases(ranks):
    cases = []
    for dtype in ("fp16", "bf16"):
        for d in (64, 128):
            for b, n, hq, hkv in ((1, 4096, 8, 2), (2, 4099, 4, 1)):
                for sharding in ("zigzag", "contiguous"):
                    for causal in (False, True):
                        cases.append({"shape": (b, n, hq, hkv, d), "causal": causal, "sharding": sharding,
                                      "scale": None, "dtype": dtype, "seed": len(cases)})
    if ranks <= 2:
        # Launches of 17000 keys, past the 16384 beyond which a rung's default backward takes D
        # from its own exact pass over the keys it holds: the ring's o32-delta entry must not. Rows of
        # 17000 P keys: the forward's launches are cut to forward_key_cap (11264 keys at P = 2).
        cases.append({"shape": (1, 17000 * ranks, 2 // ranks, 1, 64), "causal": True, "sharding": "zigzag",
                      "scale": None, "dtype": "bf16", "seed": len(cases)})
    return cases


def gpu_skip_reason():
    if not dist.is_nccl_available():
        return "torch.distributed has no NCCL backend"
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return "%d CUDA device(s); the ring needs at least 2" % (torch.cuda.device_count()
                                                                if torch.cuda.is_available() else 0)
    if flashladder.device_count() < 2:
        return "the package sees %d usable CUDA device(s) (%s)" % (flashladder.device_count(),
                                                                   flashladder.no_device_reason() or "")
    if not any(r.backward for r in flashladder.rungs()):
        return "no backward rung in this build"
    return None


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("cpu", "gpu"):
        print("usage: test_ring.py cpu|gpu")
        return 2
    mode = sys.argv[1]
    if not dist.is_available():
        print("torch.distributed is not available in this PyTorch build: skipped (exit 77)")
        return SKIP
    if mode == "gpu":
        why = gpu_skip_reason()
        if why:
            print("%s: skipped (exit 77)" % why)
            return SKIP
        counts = [p for p in (1, 2, 3, 4) if p <= torch.cuda.device_count()]
        print("gpu: %d x %s, NCCL, PyTorch %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0),
                                                  torch.__version__), flush=True)
    else:
        counts = [1, 2, 3, 4]
        print("cpu: gloo, ReferenceBackend, PyTorch %s" % torch.__version__, flush=True)
        # Before any process group: a one-line refusal, not torch.distributed's own error.
        x = torch.randn(1, 8, 2, 16)
        expect(RuntimeError, "needs an initialised process group",
               lambda: flashladder.ring_attention(x, x, x, 8, _backend=_ring.ReferenceBackend()),
               True)
        expect(RuntimeError, "ring_shard needs an initialised process group",
               lambda: flashladder.ring_shard(x), True)
    ran = 0
    ctx = mp.get_context("spawn")
    for ranks in counts:
        cases = cpu_cases(ranks) if mode == "cpu" else gpu_cases(ranks)
        results = ctx.SimpleQueue()
        try:
            mp.spawn(worker, args=(ranks, free_port(), mode, cases, results), nprocs=ranks, join=True)
        except Exception as e:  # noqa: BLE001  a rank raised or died: its traceback is above
            fail("P=%d: a rank failed: %s" % (ranks, str(e).strip().splitlines()[-1] if str(e).strip() else e))
            continue
        reported = set()
        while not results.empty():
            rank, failures = results.get()
            reported.add(rank)
            FAILURES.extend("rank %d: %s" % (rank, f) for f in failures)
        if reported != set(range(ranks)):  # a rank that reported nothing ran nothing we saw
            fail("P=%d: ranks %s reported no result" % (ranks, sorted(set(range(ranks)) - reported)))
            continue
        ran += len(cases)
    print("%d ring case(s) ran over P = %s; %d failure(s)" % (ran, ", ".join(map(str, counts)), len(FAILURES)))
    if ran == 0:
        fail("no ring case ran")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
