#!/usr/bin/env python3
"""PyTorch's own context parallelism, forward and backward: the baseline of rung 12's backward.

Run with torchrun, one process per GPU (NVLink multicast off, as for rung 12's launcher):

  NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 4 bench/pytorch/torch_cp_baseline.py \\
      --seqlen 131072 --causal 1 --out torch_cp_p4_n128k_causal1.json

``torch.distributed.tensor.experimental.context_parallel`` (PyTorch's CP, the one torchtitan
trains with) shards Q, K, V and dO along the sequence over a device mesh of every rank (its
head-tail load balancing with the causal mask: the zigzag layout of rung 12 and Megatron-LM;
contiguous shards without it, which context_parallel requires) and patches
``F.scaled_dot_product_attention`` with its ring: each rank's queries against every K/V shard in
turn, merged by LSE, and the backward likewise. K/V move by all-gather (its default) or by
all-to-all rotation (--rotate alltoall). The SDPA backend inside the ring is cuDNN (--backend;
PyTorch's fastest on Hopper) or flash.

Timed per iteration, after a barrier, with CUDA events: the forward alone (``out = F.sdpa(...)``)
and the forward with its backward (``out.backward(dO)``); median over --iters of the slowest
rank's (an all_reduce MAX). Rank 0 then times one GPU on the whole sequence, the same backend,
and reports the scaling efficiency T1 / (P x TP) of both. Shapes: B = 1, 16 heads, d = 128,
bf16 (the flags change them). Nothing is checked here: this is PyTorch's own code, timed.

Writes one JSON object (schema "flashladder.torch_cp/1") to --out on rank 0 and prints a
summary. Exits 0 with a message when torch, CUDA, torch.distributed's NCCL or the context-parallel
API is missing (nothing to measure), as bench/pytorch/torch_sdpa.py does. Without torchrun it runs as one
rank on one GPU.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py: the commit, as every bench script records it
import timing  # noqa: E402  bench/pytorch/timing.py: the events at the phases, their medians


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlen", type=int, default=131072, help="total tokens N (default 128k)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=1)
    ap.add_argument("--backend", choices=("cudnn", "flash"), default="cudnn")
    ap.add_argument("--rotate", choices=("allgather", "alltoall"), default="allgather",
                    help="how the K/V shards move (context_parallel's set_rotate_method; default its own)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--single", type=int, choices=(0, 1), default=1,
                    help="rank 0 also times one GPU on the whole sequence (default 1)")
    ap.add_argument("--out", help="JSON file (rank 0)")
    return ap.parse_args(argv)


def main(argv):
    args = parse(argv)
    if args.seqlen % 2 != 0:
        print("torch_cp_baseline.py: --seqlen must be even (context_parallel's head-tail halves)", file=sys.stderr)
        return 2
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off (before NCCL starts)
    try:
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print("torch_cp_baseline.py: PyTorch is not installed (%s): nothing to measure" % e)
        return 0
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        from torch.distributed.tensor.experimental import _attention as cp_attention
        from torch.distributed.tensor.experimental._attention import set_rotate_method
    except ImportError as e:
        print("torch_cp_baseline.py: this PyTorch has no context_parallel (%s): nothing to measure" % e)
        return 0
    if not torch.cuda.is_available():
        print("torch_cp_baseline.py: no CUDA GPU: nothing to measure")
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world > torch.cuda.device_count():
        print("torch_cp_baseline.py: %d ranks but %d GPUs visible" % (world, torch.cuda.device_count()),
              file=sys.stderr)
        return 2
    if args.seqlen % (2 * world) != 0:
        print("torch_cp_baseline.py: --seqlen must be a multiple of 2 x ranks = %d (context_parallel's "
              "shards are equal)" % (2 * world), file=sys.stderr)
        return 2
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    distributed = "RANK" in os.environ
    if distributed and not dist.is_nccl_available():
        print("torch_cp_baseline.py: torch.distributed has no NCCL: nothing to measure")
        return 0
    if not distributed:  # one rank: a process group of one, so the mesh exists
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        os.environ.update(RANK="0", WORLD_SIZE="1")
    dist.init_process_group("nccl", device_id=dev)
    mesh = init_device_mesh("cuda", (world,))
    set_rotate_method(args.rotate)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    B, N, H, D = args.batch, args.seqlen, args.heads, args.dim
    backend = SDPBackend.CUDNN_ATTENTION if args.backend == "cudnn" else SDPBackend.FLASH_ATTENTION
    causal = bool(args.causal)
    # Its head-tail load balancing is for the causal mask only: without it, context_parallel
    # refuses ("Load balancing requires `is_causal=True`"). Without a mask the plain contiguous
    # cut already gives every rank the same work, so it is turned off there.
    cp_attention._cp_options.enable_load_balance = causal
    # The same inputs on every rank (one generator seed), SDPA's [B, H, N, D] layout.
    g = torch.Generator(device=dev).manual_seed(2024)
    q_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.25
    k_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.25
    v_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g) + 0.5
    do_all = torch.randn(B, H, N, D, device=dev, dtype=dtype, generator=g)
    q, k, v, do = (t.clone() for t in (q_all, k_all, v_all, do_all))
    marks = timing.Marks(torch, 3)  # start, the forward done, the backward done

    def slowest(ms):
        t = torch.tensor(ms, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    samples = []
    # context_parallel shards the buffers in place (and restores them after; not needed here).
    with context_parallel(mesh, buffers=[q, k, v, do], buffer_seq_dims=[2, 2, 2, 2],
                          no_restore_buffers={q, k, v, do}), sdpa_kernel([backend]):
        qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
        for i in range(args.warmup + args.iters):
            dist.barrier()
            marks.record(0)
            out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
            marks.record(1)
            out.backward(do)
            marks.record(2)
            torch.cuda.synchronize()
            qs.grad = ks.grad = vs.grad = None
            if i >= args.warmup:
                samples.append(slowest(marks.intervals()))  # forward, backward, the whole
        shard_len = qs.shape[2]
    dist.barrier()

    result = None
    if rank == 0:
        med = timing.column_medians(samples)
        single = None
        if args.single:
            with sdpa_kernel([backend]):
                qa, ka, va = (t.detach().requires_grad_() for t in (q_all, k_all, v_all))
                times = []
                for i in range(args.warmup + args.iters):
                    marks.record(0)
                    out = F.scaled_dot_product_attention(qa, ka, va, is_causal=causal)
                    marks.record(1)
                    out.backward(do_all)
                    marks.record(2)
                    torch.cuda.synchronize()
                    qa.grad = ka.grad = va.grad = None
                    if i >= args.warmup:
                        times.append(marks.intervals())
            single = timing.column_medians(times)

        def eff(one, ring):
            return one / (world * ring) if one and ring else None

        props = torch.cuda.get_device_properties(dev)
        result = {
            "schema": "flashladder.torch_cp/1",
            "what": "torch.distributed.tensor.experimental.context_parallel: SDPA's ring, forward and backward",
            "gpus": world,
            "problem": {"batch": B, "seqlen": N, "heads_q": H, "heads_kv": H, "head_dim": D,
                        "dtype": args.dtype, "causal": causal},
            "backend": backend.name, "rotate_method": args.rotate, "shard_len": shard_len,
            "load_balance": causal,
            "device": {"name": props.name, "sm_count": props.multi_processor_count,
                       "cc": "%d.%d" % (props.major, props.minor)},
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "iters": args.iters, "warmup": args.warmup,
            "forward_ms": med[0], "backward_ms": med[1], "fwd_bwd_ms": med[2],
            "single_forward_ms": single[0] if single else None,
            "single_backward_ms": single[1] if single else None,
            "single_fwd_bwd_ms": single[2] if single else None,
            "scaling_efficiency_forward": eff(single and single[0], med[0]),
            "scaling_efficiency_fwd_bwd": eff(single and single[2], med[2]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **runinfo.git_info(),
            "command": "torchrun --nproc-per-node %d bench/pytorch/torch_cp_baseline.py %s" % (world, " ".join(argv)),
        }
        tail = ""
        if single:
            tail = "; one GPU %.3f / %.3f ms, scaling efficiency %.3f forward, %.3f forward + backward" % (
                single[0], single[2], result["scaling_efficiency_forward"], result["scaling_efficiency_fwd_bwd"])
        print("torch context_parallel (%s, %s), %d GPU%s, N=%d, B=%d, H=%d, d=%d, %s, causal=%d: forward %.3f ms, "
              "forward + backward %.3f ms%s" % (backend.name, args.rotate, world, "" if world == 1 else "s", N, B, H,
                                                D, args.dtype, args.causal, med[0], med[2], tail))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
