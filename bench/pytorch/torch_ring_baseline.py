#!/usr/bin/env python3
"""PyTorch's context-parallel baseline for rung 12: all-gather K/V, then SDPA on the query shard.

Run with torchrun, one process per GPU (NVLink multicast off, as for rung 12's launcher):

  NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 2 bench/pytorch/torch_ring_baseline.py \\
      --seqlen 65536 --out torch_ring_p2_n64k.json

Each rank holds the zigzag shard rung 12 uses (chunks r and 2P-1-r of 2P; any N), all-gathers
K and V over NCCL with torch.distributed (all_gather_into_tensor), puts the chunks back in
sequence order and runs torch.nn.functional.scaled_dot_product_attention on its queries:
  - without a mask: one call, the cuDNN backend forced (sdpa_kernel(SDPBackend.CUDNN_ATTENTION));
  - causal: per query chunk [a, b), the keys [0, b) with the lower-right causal mask
    (torch.nn.attention.bias.causal_lower_right): PyTorch's is_causal is top-left aligned, and
    SDPA takes the lower-right bias only on its flash and memory-efficient kernels, so the
    causal shards run there (cuDNN stays allowed; the JSON names what was requested).
Rank 0 also times one GPU on the whole sequence (SDPA, cuDNN, is_causal: square, so top-left is
the right mask), checks the gathered output against it, and reports the scaling efficiency
T1 / (P x TP). Shapes: B = 1, 16 heads, d = 128, bf16 (the flags change them).

Timing: CUDA events, warm-up first, median over --iters; per iteration the slowest rank's
all-gather, attention (which includes putting the gathered chunks back in sequence order, a copy
of the whole K and V that this simple baseline pays) and total (an all_reduce MAX), after a
barrier.

--share-gpu puts every rank on GPU 0, each its own NCCL host (the environment of rung 12's
launch_ring.py --share-gpu: NCCL over sockets on loopback): the gather, the chunk order and the
masks run as on P GPUs, on a machine with one; the times are then no P-GPU run's (no scaling
efficiency). --check-max-abs X makes rank 0 exit 1 when the gathered output differs from the
one-GPU SDPA output by more than X x max(1, max |O_1gpu|), the harness's rule for its absolute
floor (common/src/check.cpp; bf16's floor is 3e-2): the GPU test of this script.

Writes one JSON object (schema "flashladder.torch_ring/1") to --out on rank 0 and prints a
summary. Exits 0 with a message when torch, CUDA or torch.distributed's NCCL is missing
(nothing to measure), as bench/pytorch/torch_sdpa.py does. Not launched under torchrun (no RANK in the
environment) it runs as one rank on one GPU.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py: the commit measured (git_info)
import timing  # noqa: E402  bench/pytorch/timing.py: the events (imports no PyTorch)


def zigzag_chunks(n, ranks):
    """[(begin, end)] of the 2P chunks, near-equal lengths (first n % 2P one longer): ring_plan.h."""
    c = 2 * ranks
    base, rem = divmod(n, c)
    out, begin = [], 0
    for i in range(c):
        ln = base + (1 if i < rem else 0)
        out.append((begin, begin + ln))
        begin += ln
    return out


def chunks_of_rank(r, ranks):
    return [r, 2 * ranks - 1 - r]


def git_sha():
    """The commit measured: runinfo.git_info's (FL_GIT_SHA where set, else the checkout's)."""
    return runinfo.git_info()["git_sha"]


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlen", type=int, default=65536, help="total tokens N (default 64k)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--single", type=int, choices=(0, 1), default=1,
                    help="rank 0 also times one GPU on the whole sequence (default 1)")
    ap.add_argument("--share-gpu", action="store_true",
                    help="every rank on GPU 0, each its own NCCL host (as launch_ring.py --share-gpu)")
    ap.add_argument("--check-max-abs", type=float,
                    help="exit 1 if max |O - O_1gpu| exceeds this x max(1, max |O_1gpu|) (needs --single 1)")
    ap.add_argument("--out", help="JSON file (rank 0)")
    return ap.parse_args(argv)


def main(argv):
    args = parse(argv)
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off (before NCCL starts)
    try:
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right
    except ImportError as e:
        print("torch_ring_baseline.py: PyTorch is not installed (%s): nothing to measure" % e)
        return 0
    if not torch.cuda.is_available():
        print("torch_ring_baseline.py: no CUDA GPU: nothing to measure")
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.share_gpu:
        # One source for the environment: rung 12's launcher. Set before NCCL starts.
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                        "steps", "12_ring_attention"))
        from launch_ring import shared_gpu_env
        os.environ.update(shared_gpu_env(os.environ, rank))
        local = 0
    elif world > torch.cuda.device_count():
        print("torch_ring_baseline.py: %d ranks but %d GPUs visible" % (world, torch.cuda.device_count()),
              file=sys.stderr)
        return 2
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    distributed = "RANK" in os.environ
    if distributed:
        if not dist.is_nccl_available():
            print("torch_ring_baseline.py: torch.distributed has no NCCL: nothing to measure")
            return 0
        dist.init_process_group("nccl", device_id=dev)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    B, N, H, D = args.batch, args.seqlen, args.heads, args.dim
    chunks = zigzag_chunks(N, world)
    mine = chunks_of_rank(rank, world)
    # The same inputs on every rank (one generator seed), in SDPA's [B, H, N, D] layout; this rank
    # keeps its zigzag rows of Q, K and V.
    g = torch.Generator(device=dev).manual_seed(2024)
    q_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.25
    k_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.25
    v_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.5

    def rows(t, cs):
        return torch.cat([t[:, :, chunks[c][0]:chunks[c][1]] for c in cs], dim=2).contiguous()

    q = rows(q_all, mine)
    k = rows(k_all, mine)
    v = rows(v_all, mine)
    max_len = max(chunks[a][1] - chunks[a][0] + chunks[b][1] - chunks[b][0]
                  for a, b in (chunks_of_rank(r, world) for r in range(world)))
    # Shards padded to the longest for all_gather_into_tensor (tails: N % 2P tokens differ).
    k_pad = torch.zeros(B, H, max_len, D, device=dev, dtype=dtype)
    v_pad = torch.zeros_like(k_pad)
    k_pad[:, :, :k.shape[2]] = k
    v_pad[:, :, :v.shape[2]] = v
    k_gath = torch.empty(world, B, H, max_len, D, device=dev, dtype=dtype)
    v_gath = torch.empty_like(k_gath)
    backends = [SDPBackend.CUDNN_ATTENTION]
    if args.causal:
        backends += [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]

    def unshard(gathered):
        """The gathered shards back in sequence order: [B, H, N, D]."""
        parts = [None] * (2 * world)
        for r in range(world):
            off = 0
            for c in chunks_of_rank(r, world):
                ln = chunks[c][1] - chunks[c][0]
                parts[c] = gathered[r, :, :, off:off + ln]
                off += ln
        return torch.cat(parts, dim=2)

    def attention(k_full, v_full):
        with sdpa_kernel(backends):
            if not args.causal:
                return F.scaled_dot_product_attention(q, k_full, v_full)
            outs, off = [], 0
            for c in mine:
                a, b = chunks[c]
                if b == a:
                    continue
                qc = q[:, :, off:off + (b - a)]
                off += b - a
                mask = causal_lower_right(b - a, b)  # query i sees key j iff j <= i + a
                outs.append(F.scaled_dot_product_attention(qc, k_full[:, :, :b], v_full[:, :, :b],
                                                           attn_mask=mask))
            return torch.cat(outs, dim=2) if outs else q.new_empty(B, H, 0, D)

    marks = timing.Marks(torch, 3)  # start, the K/V all-gathered, the attention done

    def one_iteration():
        if distributed:
            dist.barrier()
        marks.record(0)
        if distributed:
            dist.all_gather_into_tensor(k_gath, k_pad)
            dist.all_gather_into_tensor(v_gath, v_pad)
        else:
            k_gath[0].copy_(k_pad)
            v_gath[0].copy_(v_pad)
        marks.record(1)
        out = attention(unshard(k_gath), unshard(v_gath))
        marks.record(2)
        torch.cuda.synchronize()
        t = torch.tensor(marks.intervals(), device=dev)  # all-gather, attention, the whole
        if distributed:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
        return out, t.tolist()

    out = None
    for _ in range(args.warmup):
        out, _ = one_iteration()
    samples = []
    for _ in range(args.iters):
        out, t = one_iteration()
        samples.append(t)

    # The whole output on rank 0 (for the comparison with one GPU).
    out_full = None
    o_pad = torch.zeros(B, H, max_len, D, device=dev, dtype=dtype)
    o_pad[:, :, :out.shape[2]] = out
    o_gath = torch.empty(world, B, H, max_len, D, device=dev, dtype=dtype)
    if distributed:
        dist.all_gather_into_tensor(o_gath, o_pad)
    else:
        o_gath[0].copy_(o_pad)
    if rank == 0:
        out_full = unshard(o_gath)
    if distributed:
        del k_gath, v_gath, o_gath
        dist.barrier()

    result = None
    if rank == 0:
        med = timing.column_medians(samples)
        single_ms, max_abs, ref_max_abs = None, None, None
        if args.single:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                ref = F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=bool(args.causal))
                single_ms = timing.EventTimer(torch, flush_bytes=0, device=dev).time_ms(
                    lambda: F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=bool(args.causal)),
                    args.iters, args.warmup)
            max_abs = (out_full.float() - ref.float()).abs().max().item()
            ref_max_abs = ref.float().abs().max().item()
        props = torch.cuda.get_device_properties(dev)
        result = {
            "schema": "flashladder.torch_ring/1",
            "what": "all-gather K/V (torch.distributed, NCCL) + SDPA on the zigzag query shard",
            "gpus": 1 if args.share_gpu else world,
            "ranks": world,
            "shared_gpu": args.share_gpu,
            "problem": {"batch": B, "seqlen": N, "heads_q": H, "heads_kv": H, "head_dim": D,
                        "dtype": args.dtype, "causal": bool(args.causal)},
            "backends_requested": [b.name for b in backends],
            "causal_mask": "lower-right CausalBias per query chunk" if args.causal else "none",
            "device": {"name": props.name, "sm_count": props.multi_processor_count,
                       "cc": "%d.%d" % (props.major, props.minor)},
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if distributed else None,
            "iters": args.iters, "warmup": args.warmup,
            "allgather_ms": med[0], "attention_ms": med[1], "total_ms": med[2],
            "single_gpu_ms": single_ms,
            "scaling_efficiency": (single_ms / (world * med[2])) if single_ms and not args.share_gpu else None,
            "max_abs_vs_single_gpu": max_abs,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_sha": git_sha(),
            "command": "torchrun --nproc-per-node %d bench/pytorch/torch_ring_baseline.py %s" % (world, " ".join(argv)),
        }
        where = ("%d ranks sharing one GPU (times are no %d-GPU run's)" % (world, world) if args.share_gpu
                 else "%d GPU%s" % (world, "" if world == 1 else "s"))
        if not single_ms:
            tail = ""
        elif args.share_gpu:
            tail = "; one GPU %.3f ms, max |O - O_1gpu| %.3g" % (single_ms, max_abs)
        else:
            tail = "; one GPU %.3f ms, scaling efficiency %.3f, max |O - O_1gpu| %.3g" % (
                single_ms, result["scaling_efficiency"], max_abs)
        print("torch all-gather CP, %s, N=%d, B=%d, H=%d, d=%d, %s, causal=%d: all-gather %.3f ms, "
              "attention %.3f ms, total %.3f ms%s" % (where, N, B, H, D, args.dtype, args.causal, med[0], med[1],
                                                      med[2], tail))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    failed = False
    if rank == 0 and args.check_max_abs is not None:
        tol = None if ref_max_abs is None else args.check_max_abs * max(1.0, ref_max_abs)
        failed = max_abs is None or not max_abs <= tol
        print("check: max |O - O_1gpu| %s, tolerance %s (--check-max-abs %g x max(1, max |O_1gpu|)): %s" % (
            "n/a" if max_abs is None else "%.3g" % max_abs, "n/a" if tol is None else "%.3g" % tol,
            args.check_max_abs, "FAIL" if failed else "pass"))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
