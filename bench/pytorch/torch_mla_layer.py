#!/usr/bin/env python3
"""One MLA decode layer end to end, two ways, at DeepSeek-V3's sizes (random bf16 weights).

A decode step: one new token per sequence (hidden 7168), a cache of --seqlen-k keys per sequence
(the new token's included, written at the last slot), --batch sequences. The projections are
DeepSeek-V3's (config.json: 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64,
qk_nope_head_dim 128, v_head_dim 128): q = (x W_qa) W_qb -> [B, H, 192] = [q_nope 128 | q_rope 64];
x W_kva -> [c 512 | k_rope 64]; kv_b_proj W_kvb [512, H x (128 + 128)] = per head W_uk | W_uv;
out = o W_o, o [B, H x 128]. The norms and RoPE's rotation are left out (elementwise, the same
both ways). Both ways compute the same function, and their outputs are compared.

  (a) the ladder's (MLA on the latent cache): the cache is [pages, 64, 1, 576] (c | k_rope per key,
      pages of 64 in a shuffled pool, a block table); the new key's row written into its slot; the
      query absorbed, q_nope [B, H, 128] @ W_uk^T per head -> [B, H, 512], with q_rope -> 576; rung
      17 through flashladder.flash_mla_with_kvcache (V = the rows' first 512 columns) -> [B, H, 512];
      @ W_uv per head -> [B, H, 128]; o_proj.
  (b) SDPA's (transformers on DeepSeek-V3 without MLA kernels): the cache decompressed per head,
      K [B, H, N, 192] = [c W_uk | k_rope], V [B, H, N, 128] = c W_uv (a static cache: the new
      token's c through kv_b_proj, its K and V written at the last slot); SDPA with the fastest
      backend that runs it (each timed alone first); o_proj.

Timed (bench/pytorch/timing.py: CUDA events, the L2 flushed before each call, medians; the two
ways in turn over --repeats rounds): the whole layer each way, and its attention call alone. Cache
memory per layer: latent 576 x 2 bytes per key, decompressed 128 x (192 + 128) x 2.

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_mla_layer.py --out DIR
        [--batch 32] [--seqlen-k 8192] [--iters 30] [--repeats 3] [--package DIR]

Writes DIR/torch_mla_layer.json and DIR/torch_mla_layer.log, adds its command to DIR/meta.json.
Without flashladder.flash_mla_with_kvcache (or the package) way (a) is skipped with its reason and
(b) still runs; without PyTorch or a GPU it measures nothing and exits 0.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py

HIDDEN, HEADS, Q_LORA, KV_LORA, ROPE, NOPE, V_HEAD = 7168, 128, 1536, 512, 64, 128, 128
QK = NOPE + ROPE  # 192
LATENT = KV_LORA + ROPE  # 576
PAGE = 64
SCALE = QK ** -0.5  # DeepSeek-V3's softmax scale before its YaRN factor, the same both ways
LATENT_BYTES_PER_KEY = LATENT * 2
DECOMPRESSED_BYTES_PER_KEY = HEADS * (QK + V_HEAD) * 2


def weights(torch, gen):
    """Random bf16 weights, N(0, 1 / fan_in): activations stay O(1)."""
    def w(rows, cols):
        return (torch.randn(rows, cols, device="cuda", generator=gen) * rows ** -0.5).to(torch.bfloat16)
    W = dict(qa=w(HIDDEN, Q_LORA), qb=w(Q_LORA, HEADS * QK), kva=w(HIDDEN, LATENT), kvb=w(KV_LORA, HEADS * 2 * NOPE),
             o=w(HEADS * V_HEAD, HIDDEN))
    per_head = W["kvb"].view(KV_LORA, HEADS, NOPE + V_HEAD)
    W["uk_t"] = per_head[:, :, :NOPE].permute(1, 2, 0).contiguous()  # [H, 128, 512]: absorbs W_uk into q
    W["uv"] = per_head[:, :, NOPE:].permute(1, 0, 2).contiguous()    # [H, 512, 128]
    return W


def project(x, W):
    """The shared input projections: q [B, H, 192] and the new key's latent row [B, 576]."""
    q = ((x @ W["qa"]) @ W["qb"]).view(x.shape[0], HEADS, QK)
    return q, x @ W["kva"]


def run(args):
    torch = runinfo.cuda_torch("torch_mla_layer.py")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, N = args.batch, args.seqlen_k
    if N % PAGE:
        sys.exit("torch_mla_layer.py: --seqlen-k must be a multiple of %d (pages)" % PAGE)
    gen = torch.Generator(device="cuda").manual_seed(2024)
    W = weights(torch, gen)
    x = torch.randn(B, HIDDEN, device="cuda", generator=gen).to(torch.bfloat16)
    result = {"schema": "flashladder.torch_mla_layer/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": torch.cuda.get_device_name()},
              "model": dict(hidden=HIDDEN, heads=HEADS, q_lora_rank=Q_LORA, kv_lora_rank=KV_LORA,
                            qk_rope_head_dim=ROPE, qk_nope_head_dim=NOPE, v_head_dim=V_HEAD, softmax_scale=SCALE),
              "batch": B, "seqlen_k": N, "page_size": PAGE, "iters": args.iters, "repeats": args.repeats,
              "cache": {"latent_bytes_per_key": LATENT_BYTES_PER_KEY,
                        "decompressed_bytes_per_key": DECOMPRESSED_BYTES_PER_KEY,
                        "latent_bytes": LATENT_BYTES_PER_KEY * B * N,
                        "decompressed_bytes": DECOMPRESSED_BYTES_PER_KEY * B * N},
              "skipped": {}}

    # The latent cache: B x N rows of [c | k_rope], in pages of 64 shuffled in a pool.
    pages = B * N // PAGE
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).view(B, N // PAGE)
    rows = torch.randn(B, N, LATENT, device="cuda", generator=gen).to(torch.bfloat16)
    pool = torch.empty(pages, PAGE, 1, LATENT, device="cuda", dtype=torch.bfloat16)
    pool[table.long()] = rows.view(B, N // PAGE, PAGE, 1, LATENT)
    seqlens = torch.full((B,), N, dtype=torch.int32, device="cuda")
    last_slot = table[:, -1].long() * PAGE + (N - 1) % PAGE  # the new key's row in the flattened pool
    # The same cache decompressed, per head (sequence by sequence: kv_b_proj's output is 512 MB each).
    K = torch.empty(B, HEADS, N, QK, device="cuda", dtype=torch.bfloat16)
    V = torch.empty(B, HEADS, N, V_HEAD, device="cuda", dtype=torch.bfloat16)
    for b in range(B):
        kv = (rows[b, :, :KV_LORA] @ W["kvb"]).view(N, HEADS, NOPE + V_HEAD)
        K[b, :, :, :NOPE] = kv[:, :, :NOPE].transpose(0, 1)
        K[b, :, :, NOPE:] = rows[b, :, KV_LORA:].unsqueeze(0)
        V[b] = kv[:, :, NOPE:].transpose(0, 1)
    del rows, kv
    torch.cuda.empty_cache()

    # (b) SDPA's way: the backends in turn on the attention alone, the fastest kept.
    q0, _ = project(x, W)
    qs = q0.view(B, HEADS, 1, QK)
    timer = timing.EventTimer(torch)
    sdpa_ms = {}
    for name in ("cudnn", "flash", "efficient", "math"):
        backend = getattr(SDPBackend, {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION",
                                       "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[name], None)
        if backend is None or (name == "math" and result["cache"]["decompressed_bytes"] > 4 << 30):
            result["skipped"]["sdpa_" + name] = "not in this torch" if backend is None else "math: the cache's size"
            continue
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qs, K, V, scale=SCALE)
                torch.cuda.synchronize()
                sdpa_ms[name] = timer.time_ms(lambda: F.scaled_dot_product_attention(qs, K, V, scale=SCALE),
                                              10, 3)
        except RuntimeError as e:
            result["skipped"]["sdpa_" + name] = (str(e).strip().splitlines() or ["refused"])[0][:200]
            torch.cuda.empty_cache()
    result["sdpa_backends_ms"] = sdpa_ms
    if not sdpa_ms:
        print("torch_mla_layer.py: no SDPA backend ran the decompressed cache: %s" % result["skipped"])
        runinfo.write_json(os.path.join(args.out, "torch_mla_layer.json"), result)
        return 1
    best = min(sdpa_ms, key=sdpa_ms.get)
    result["sdpa_backend"] = best
    best_backend = getattr(SDPBackend, {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION",
                                        "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}[best])

    def sdpa_attention(q):
        with sdpa_kernel([best_backend]):
            return F.scaled_dot_product_attention(q.view(B, HEADS, 1, QK), K, V, scale=SCALE)

    def layer_sdpa():
        q, kv = project(x, W)
        new = (kv[:, :KV_LORA] @ W["kvb"]).view(B, HEADS, NOPE + V_HEAD)  # the new key, decompressed
        K[:, :, N - 1, :NOPE] = new[:, :, :NOPE]
        K[:, :, N - 1, NOPE:] = kv[:, KV_LORA:].unsqueeze(1)
        V[:, :, N - 1] = new[:, :, NOPE:]
        return sdpa_attention(q).reshape(B, HEADS * V_HEAD) @ W["o"]

    calls = {"sdpa_layer": layer_sdpa, "sdpa_attention": lambda: sdpa_attention(q0)}

    # (a) the ladder's way, where the package has the call.
    fl = runinfo.import_flashladder(args.package)
    mla, why = None, "flashladder is not importable"
    if fl is not None:
        try:
            mla = getattr(fl, "flash_mla_with_kvcache", None)
            why = "flashladder has no flash_mla_with_kvcache yet"
        except ImportError as e:  # the package's FlashMLA module does not load
            why = "flashladder.flash_mla_with_kvcache does not import: %s" % e
    if mla is None:
        result["skipped"]["ladder"] = why
        print("torch_mla_layer.py: skip the ladder's way: %s (the SDPA way still runs)" % why)
    else:
        result["package"] = runinfo.package_path(fl)
        flat = pool.view(pages * PAGE, LATENT)

        def absorb(q):
            q_lat = torch.bmm(q[:, :, :NOPE].transpose(0, 1), W["uk_t"])  # [H, B, 512]
            return torch.cat([q_lat.transpose(0, 1), q[:, :, NOPE:]], dim=-1).view(B, 1, HEADS, LATENT)

        def mla_attention(q576):
            return mla(q576, pool, table, seqlens, KV_LORA, softmax_scale=SCALE, causal=False)[0]

        def layer_ladder():
            q, kv = project(x, W)
            flat.index_copy_(0, last_slot, kv)  # the new key's latent row into its page
            out = mla_attention(absorb(q)).view(B, HEADS, KV_LORA)
            o = torch.bmm(out.transpose(0, 1), W["uv"]).transpose(0, 1)  # [B, H, 128]
            return o.reshape(B, HEADS * V_HEAD) @ W["o"]

        q576 = absorb(q0)
        try:
            y_a, y_b = layer_ladder(), layer_sdpa()
            torch.cuda.synchronize()
            diff = (y_a.float() - y_b.float()).norm() / y_b.float().norm()
            result["ladder_vs_sdpa_rel_fro"] = float(diff)
            print("the two layers' outputs: relative Frobenius difference %.2e" % float(diff))
            calls.update(ladder_layer=layer_ladder, ladder_attention=lambda: mla_attention(q576))
        except (RuntimeError, ValueError, TypeError) as e:
            result["skipped"]["ladder"] = (str(e).strip().splitlines() or ["failed"])[0][:200]
            print("torch_mla_layer.py: the ladder's way failed: %s" % result["skipped"]["ladder"])

    per_round = timing.paired_rounds(
        {n: (lambda fn=fn: timer.time_ms(fn, args.iters, args.warmup)) for n, fn in calls.items()}, args.repeats)
    result["ms"] = {n: statistics.median(v) for n, v in per_round.items()}
    result["rounds"] = per_round
    ms = result["ms"]
    if "ladder_layer" in ms:
        result["layer_speedup"] = ms["sdpa_layer"] / ms["ladder_layer"]
        result["attention_speedup"] = ms["sdpa_attention"] / ms["ladder_attention"]
    c = result["cache"]
    print("batch %d, %d keys, %d heads: cache per layer latent %.2f GB, decompressed %.2f GB (%.0fx)" % (
        B, N, HEADS, c["latent_bytes"] / 1e9, c["decompressed_bytes"] / 1e9,
        c["decompressed_bytes"] / c["latent_bytes"]))
    for n in sorted(ms):
        print("  %-18s %8.3f ms" % (n, ms[n]))
    print("SDPA backend: %s (attention alone: %s)" % (best, ", ".join("%s %.3f ms" % kv for kv in sdpa_ms.items())))
    runinfo.write_json(os.path.join(args.out, "torch_mla_layer.json"), result)
    runinfo.update_meta(args.out, result["device"]["name"], result, result["command"])
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder (bench/results/<gpu>/...)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seqlen-k", type=int, default=8192, help="keys per sequence, a multiple of 64")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--package", help="the folder holding flashladder (default: PYTHONPATH, build/*/python)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_mla_layer.log")):
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
