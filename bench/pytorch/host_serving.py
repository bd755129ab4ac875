"""The host's cost of one serving call per entry point, beside SDPA's decode.

A serving loop calls attention once per layer per token: on a problem this small the GPU's work
takes microseconds and a call's wall time is the host's (Python, the checks, the metadata checks
of metadata.h, the allocations, the append, the launches). torch_overhead.py runs this after its
per-call series and writes the result under "host_serving" in torch_overhead.json:

    {"shape": {...}, "calls": N, "rounds": R, "call_us": {name: µs per call in a loop},
     "call_alone_us": {name: median µs of one call timed alone}, "not_run": {name: why},
     "cpu_profile": {name: host_steps.cpu_profile's record of PROFILE_CALLS calls}}

cpu_profile says where a call's host time goes (the PyTorch profiler's host events, the CUDA
runtime calls among them, and cProfile's view of the package's own functions), as host_steps.py
does for a training step.

The entry points (SERVING_SHAPE: batch 2, 8 query heads on 2 KV heads, head_dim 128, fp16, a
cache of 1024 slots holding 500 keys): SDPA's decode step on the cache's keys, flash_attn_func's,
flash_attn_with_kvcache on a contiguous cache with cache_seqlens, on a paged one (pages of 64),
on the paged one appending one new token per sequence, the same on an e4m3 pool (the new fp16 token
quantized by the append, rung 08's fp8-kv), and flash_attn_varlen_func's forward on the same tokens
packed. They take turns: R rounds, each entry point N / R calls in a loop and N / R
timed alone, the order rotated per round; each figure is the median over the rounds. PyTorch and
the package come in as arguments (timing.py's rule).
"""

import host_steps
import timing

PROFILE_CALLS = 100

SERVING_SHAPE = dict(batch=2, heads_q=8, heads_kv=2, head_dim=128, slots=1024, used=500, page=64)


def entry_points(torch, F, fl, device):
    """(name, call) of every serving entry point on one set of tensors (SERVING_SHAPE)."""
    s = SERVING_SHAPE
    b, hq, hkv, d, slots, used, page = (s[k] for k in ("batch", "heads_q", "heads_kv", "head_dim", "slots", "used",
                                                       "page"))
    dt = torch.float16
    q = torch.randn(b, 1, hq, d, device=device, dtype=dt)
    kc = torch.randn(b, slots, hkv, d, device=device, dtype=dt)
    vc = torch.randn(b, slots, hkv, d, device=device, dtype=dt)
    lens = torch.full((b,), used, dtype=torch.int32, device=device)
    pages = b * slots // page
    table = torch.arange(pages, dtype=torch.int32, device=device).view(b, slots // page)
    kp = kc.reshape(pages, page, hkv, d)
    vp = vc.reshape(pages, page, hkv, d)
    k1 = torch.randn(b, 1, hkv, d, device=device, dtype=dt)
    v1 = torch.randn(b, 1, hkv, d, device=device, dtype=dt)
    # The e4m3 pool of the same pages, a descale per (batch, KV head) (an FP8 KV cache's layout).
    kd = kc.float().abs().amax(dim=(1, 3)) / 448.0
    vd = vc.float().abs().amax(dim=(1, 3)) / 448.0
    kp8 = (kc.float() / kd[:, None, :, None]).to(torch.float8_e4m3fn).reshape(pages, page, hkv, d)
    vp8 = (vc.float() / vd[:, None, :, None]).to(torch.float8_e4m3fn).reshape(pages, page, hkv, d)
    # SDPA and flash_attn_func on the cache's first `used` keys (what a dynamic cache hands them).
    ks, vs = kc[:, :used], vc[:, :used]
    st = [t.transpose(1, 2) for t in (q, ks, vs)]
    group = hq // hkv
    sq, sk, sv = st[0], st[1].repeat_interleave(group, 1), st[2].repeat_interleave(group, 1)
    # flash_attn_varlen_func: the batch's tokens packed, `used` each.
    qv = torch.randn(b * used, hq, d, device=device, dtype=dt)
    kv = torch.randn(b * used, hkv, d, device=device, dtype=dt)
    cu = torch.arange(0, (b + 1) * used, used, dtype=torch.int32, device=device)
    return [("F.scaled_dot_product_attention, decode", lambda: F.scaled_dot_product_attention(sq, sk, sv)),
            ("flash_attn_func, decode", lambda: fl.flash_attn_func(q, ks, vs)),
            ("with_kvcache, contiguous, cache_seqlens", lambda: fl.flash_attn_with_kvcache(q, kc, vc,
                                                                                          cache_seqlens=lens)),
            ("with_kvcache, paged (pages of %d)" % page,
             lambda: fl.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table)),
            ("with_kvcache, paged, appending one token",
             lambda: fl.flash_attn_with_kvcache(q, kp, vp, k1, v1, cache_seqlens=lens, block_table=table)),
            ("with_kvcache, e4m3 paged, appending one token",
             lambda: fl.flash_attn_with_kvcache(q, kp8, vp8, k1, v1, cache_seqlens=lens, block_table=table,
                                                k_descale=kd, v_descale=vd)),
            ("flash_attn_varlen_func, forward", lambda: fl.flash_attn_varlen_func(qv, kv, kv, cu, cu, used, used,
                                                                                 causal=True))]


def measure(torch, F, fl, device, calls, rounds=10):
    """The "host_serving" record (module docstring)."""
    out = {"shape": dict(SERVING_SHAPE, dtype="fp16"), "calls": calls, "rounds": rounds, "call_us": {},
           "call_alone_us": {}}
    with torch.no_grad():
        calls_ok = timing.runnable(entry_points(torch, F, fl, device), out)
        times = timing.host_rounds(torch, calls_ok, calls, rounds)
        for name, call in calls_ok:
            try:
                prof = out.setdefault("cpu_profile", {})[name] = host_steps.cpu_profile(torch, call, PROFILE_CALLS)
                print("  %-48s profiled: %.1f us of own host time per call; largest: %s" % (
                    name, prof["self_us_total"], "; ".join("%s %.1f" % (k, us) for k, us, _ in prof["ops"][:5])))
            except Exception as e:  # noqa: BLE001  a profiler that cannot run here: say so, keep the timings
                out.setdefault("cpu_profile", {})[name] = {"error": "%s: %s" % (type(e).__name__, e)}
    for name, _ in calls_ok:
        out["call_us"][name], out["call_alone_us"][name] = times[name]
        print("  %-48s %7.1f us per call in a loop, %7.1f us each call timed alone (medians of %d rounds)" % (
            name, out["call_us"][name], out["call_alone_us"][name], rounds))
    return out
