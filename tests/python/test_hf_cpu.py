#!/usr/bin/env python3
"""The transformers path's Python on the CPU: padding masks, the static cache, torch.compile.

    PYTHONPATH=build/ci/python python3 tests/python/test_hf_cpu.py

The package's control flow runs as it does on a GPU. Only the rung's launch and its CUDA checks
(_core.check_qkv and check_qkv_cached, _launch.forward) are replaced by a fp32 reference on the CPU, which
computes what the rung is asked for: the cache's slots [cache_leftpad, cache_seqlens), a
packed batch's sequences, bottom-right causal. The checks:

1. _padding_span: (start, end) of each row's valid run for left padding, and for a static cache's
   mask padded with zeros past the tokens so far; None where a row's queries are not its last
   valid slots (right padding), for a hole, or for fewer valid slots than queries.
2. _trim_static cuts a static cache's unwritten slots off the mask, k and v (one read, kept);
   transformers_attention on a static cache's padded mask, for 1, 4 and 10 queries (the last
   through the packed path): each valid query against the keys it sees, a padded query 0.
3. ladder_mask: on a static cache the decode steps' 2D mask has the cache's length at every step,
   where transformers' FlashAttention mask grows by one column a step.
4. generate() with a static cache on a tiny Llama, left-padded prompts: the ladder's logits match
   SDPA's (fp32 on both) eagerly, and with the decode step compiled by torch.compile
   (fullgraph=True: a graph break fails; the attention is the opaque op
   flashladder::attention_kvcache), compiled once for all decode steps of one generation.
0. The model's attention_dropout in train mode reaches the launch as dropout_p with its generator
   state (no padding, and a padded batch); 0 draws none.
6. DeepSeek-V3 (MLA in prefill: v with its own head_dim, 64 against q's and k's 96) runs through
   attn_implementation="ladder" on a left-padded batch, its logits SDPA's.
5. flash_attn_with_kvcache with a block_table and more queries than rung 08 takes (the route's
   refusal stood in by a plan that refuses pages past 16 queries): the pages the batch uses are
   gathered into a contiguous copy, and the result, with new keys appended through the table and
   a left-padded cache, equals the contiguous cache's.

Exits 77 (ctest: skipped) without PyTorch or transformers.
"""

import sys

SKIP = 77

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)
try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.generation import CompileConfig
except ImportError:
    print("transformers is not installed: skipped (exit 77)")
    sys.exit(SKIP)

from flashladder import _core, _hf, _kvcache, _launch, register_transformers  # noqa: E402

from cpu_stubs import check, cpu_key, exit_status  # noqa: E402  tests/python/cpu_stubs.py


# ---- the rung, replaced by a reference on the CPU -------------------------------------------------

def _attend(q, k, v, causal, scale):
    """q [Sq, Hq, D], k and v [Sk, Hk, D] -> (out [Sq, Hq, D], lse [Hq, Sq]) in fp32, bottom-right causal."""
    sq, hq, d = q.shape
    sk, hk = k.shape[0], k.shape[1]
    if sk == 0:
        return q.new_zeros(q.shape), torch.full((hq, sq), float("-inf"))
    k = k.repeat_interleave(hq // hk, dim=1).float()
    v = v.repeat_interleave(hq // hk, dim=1).float()
    s = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)
    return out.to(q.dtype), lse


CALLS = [0]  # cpu_forward's calls: the ladder's runs must reach it
DROPOUT = []  # (Mods.dropout, the generator state) of each call with mods


def cpu_forward(q, k, v, key, rung=None, variant="", o_fp32=False, mods=None, extras=None, checked=False,
                dropout_state=None, step=None, xextras=None, backward=False):
    """_launch.forward on the CPU: a KV cache's runs (extras: used, start), a packed batch (cu_seqlens),
    or a dense batch; causal and the scale from the key (cpu_key's). Dropout is recorded, not applied."""
    CALLS[0] += 1
    if mods is not None:
        DROPOUT.append((mods.dropout, dropout_state))
    causal, scale = key[7], key[8] or q.shape[-1] ** -0.5
    extras = extras or ()
    out = torch.empty_like(q)
    if q.dim() == 3:  # packed: [total, heads, head_dim], LSE [heads, total]
        cu_q, cu_k = extras[0].tolist(), extras[1].tolist()
        lse = torch.empty(q.shape[1], q.shape[0])
        for i in range(len(cu_q) - 1):
            o, l_ = _attend(q[cu_q[i]:cu_q[i + 1]], k[cu_k[i]:cu_k[i + 1]], v[cu_k[i]:cu_k[i + 1]], causal, scale)
            out[cu_q[i]:cu_q[i + 1]], lse[:, cu_q[i]:cu_q[i + 1]] = o, l_
        return out, lse, None
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1])
    used = extras[4] if len(extras) > 4 else None
    start = extras[6] if len(extras) > 6 else None
    for b in range(q.shape[0]):
        s = int(start[b]) if start is not None else 0
        e = int(used[b]) if used is not None else k.shape[1]
        out[b], lse[b] = _attend(q[b], k[b, s:e], v[b, s:e], causal, scale)
    return out, lse, None


_launch.forward = cpu_forward
_core.check_qkv = _core.check_qkv_cached = cpu_key


# ---- 1, 2: the mask's runs --------------------------------------------------------------------------

def mask(rows, length):
    """int64 [batch, length]: row r valid on [start_r, end_r)."""
    m = torch.zeros(len(rows), length, dtype=torch.int64)
    for r, (s, e) in enumerate(rows):
        m[r, s:e] = 1
    return m


def test_dropout_reaches_launch():
    """The model's attention_dropout in train mode (transformers passes it as dropout) reaches the
    launch as flash_attn_func's dropout_p with a generator state; 0 (eval) draws none."""

    class Module:
        is_causal = True

    q = torch.randn(2, 4, 8, 16)  # [batch, heads, seqlen, head_dim], as transformers passes it
    k = torch.randn(2, 2, 8, 16)
    for what, m in (("no padding", None), ("a padded batch", mask([(0, 8), (2, 8)], 8))):
        DROPOUT.clear()
        _hf.transformers_attention(Module(), q, k, k, m, dropout=0.1)
        check(len(DROPOUT) == 1 and DROPOUT[0][0] == 0.1 and DROPOUT[0][1] is not None
              and tuple(DROPOUT[0][1].shape) == (2,), "%s, dropout=0.1: dropout_p 0.1 and a state reach the launch"
              % what)
    DROPOUT.clear()
    _hf.transformers_attention(Module(), q, k, k, mask([(0, 8), (2, 8)], 8), dropout=0.0)
    check(len(DROPOUT) == 1 and DROPOUT[0] == (0.0, None), "a padded batch, dropout=0.0 (eval): no dropout, no state")


def test_spans():
    span = _hf._padding_span(mask([(0, 8), (3, 8)], 8), 1)
    check(span is not None and span[0].tolist() == [0, 3] and span[1].tolist() == [8, 8],
          "left padding: runs [0, 8) and [3, 8)")
    span = _hf._padding_span(mask([(0, 5), (2, 5)], 12), 2)
    check(span is not None and span[0].tolist() == [0, 2] and span[1].tolist() == [5, 5],
          "a static cache's padded mask: runs end at the tokens so far, 5, not at its 12 columns")
    check(span[0].dtype == torch.int32 and span[1].dtype == torch.int32, "int32 starts and ends")
    check(_hf._padding_span(mask([(0, 8), (0, 6)], 8), 1) is None, "right padding: None (the row's query is not its last valid slot)")
    hole = mask([(0, 8)], 8)
    hole[0, 3] = 0
    check(_hf._padding_span(hole, 1) is None, "a hole in a row: None")
    check(_hf._padding_span(mask([(6, 8), (0, 8)], 8), 4) is None, "fewer valid slots than queries: None")
    m = mask([(2, 7), (0, 7)], 10)
    k = torch.zeros(2, 10, 1, 4)
    tm, tk, tv = _hf._trim_static(m, k, k)
    check(tuple(tm.shape) == (2, 7) and tuple(tk.shape) == (2, 7, 1, 4), "trim: the 3 unwritten slots go")
    m2 = mask([(2, 10), (0, 10)], 10)
    check(_hf._trim_static(m2, k, k)[0] is m2, "trim: nothing to cut, the same mask")


def test_static_direct():
    """transformers_attention on a static cache's padded mask, row b valid on [start_b, 10) of 24
    slots (garbage past them), for a decode step, a few queries and a prefill of the 10 columns
    (rows with fewer valid slots than queries: the packed path, after the unwritten slots are cut):
    each valid query against the keys it sees, a padded query 0."""
    class Module:
        is_causal = True

    torch.manual_seed(2)
    b, hq, hk, d, slots, end, starts = 3, 4, 2, 16, 24, 10, (0, 3, 7)
    m = mask([(s, end) for s in starts], slots)
    k, v = torch.randn(b, hk, slots, d), torch.randn(b, hk, slots, d)
    for sq in (1, 4, 10):
        q = torch.randn(b, hq, sq, d)
        out, _ = _hf.transformers_attention(Module(), q, k, v, m)
        want = torch.zeros(b, sq, hq, d)
        for r in range(b):
            for i in range(sq):
                pos = end - sq + i  # the query's slot
                if pos >= starts[r]:
                    o, _ = _attend(q[r, :, i:i + 1].transpose(0, 1), k[r, :, starts[r]:pos + 1].transpose(0, 1),
                                   v[r, :, starts[r]:pos + 1].transpose(0, 1), False, d ** -0.5)
                    want[r, i] = o[0]
        err = (out - want).abs().max().item()
        check(err < 1e-5, "static cache's padded mask, %d quer%s: each against its keys, padded queries 0 "
              "(max error %.1e)" % (sq, "y" if sq == 1 else "ies", err))


# ---- 3, 4: a static cache through generate() -----------------------------------------------------

def tiny_models():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    name = register_transformers("ladder")
    sdpa = LlamaForCausalLM(cfg).eval()
    cfg_l = LlamaConfig(**cfg.to_dict())
    cfg_l._attn_implementation = name
    ladder = LlamaForCausalLM(cfg_l).eval()
    ladder.load_state_dict(sdpa.state_dict())
    ladder.config._attn_implementation = name
    return sdpa, ladder


def prompts():
    torch.manual_seed(1)
    lengths = (12, 7, 3)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.int64)
    am = torch.zeros_like(ids)
    for r, n in enumerate(lengths):  # left padding
        ids[r, -n:] = torch.randint(3, 128, (n,))
        am[r, -n:] = 1
    return ids, am


def generate(model, compile_config=None, new=12):
    ids, am = prompts()
    kwargs = dict(max_new_tokens=new, do_sample=False, cache_implementation="static", return_dict_in_generate=True,
                  output_logits=True, pad_token_id=0)
    if compile_config is None:
        kwargs["disable_compile"] = True
    else:
        kwargs["compile_config"] = compile_config
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=am, **kwargs)
    return out.sequences, torch.stack(out.logits)


def test_mask_shapes(ladder):
    shapes = []
    real = _hf.ladder_mask

    def spy(*args, **kwargs):
        m = real(*args, **kwargs)
        shapes.append(None if m is None else tuple(m.shape))
        return m

    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    ALL_MASK_ATTENTION_FUNCTIONS.register(ladder.config._attn_implementation, spy)
    try:
        generate(ladder, new=6)
    finally:
        ALL_MASK_ATTENTION_FUNCTIONS.register(ladder.config._attn_implementation, real)
    check(len(shapes) >= 6 and len(set(shapes)) == 1 and shapes[0] is not None,
          "ladder_mask on a static cache: one 2D shape for every step, %s (%d steps)" % (shapes[:1], len(shapes)))


def test_generate(sdpa, ladder):
    check(sdpa.config._attn_implementation == "sdpa" and ladder.config._attn_implementation == "ladder",
          "the two models: sdpa and ladder (%s, %s)" % (sdpa.config._attn_implementation,
                                                         ladder.config._attn_implementation))
    seq_s, logits_s = generate(sdpa)
    CALLS[0] = 0
    seq_l, logits_l = generate(ladder)
    check(CALLS[0] > 0, "the ladder's generate() ran the rung's stand-in (%d calls)" % CALLS[0])
    err = (logits_l - logits_s).abs().max().item()
    check(torch.equal(seq_l, seq_s) and err < 1e-4,
          "generate(), static cache, eager: the ladder's tokens are SDPA's, logits within %.1e" % err)
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    cc = CompileConfig(fullgraph=True, dynamic=False, backend="aot_eager", mode=None)
    cc._compile_all_devices = True
    try:
        seq_c, logits_c = generate(ladder, compile_config=cc)
    except Exception as e:  # noqa: BLE001  (fullgraph=True: a graph break raises)
        check(False, "generate(), static cache, compiled with fullgraph=True: %s: %s" % (type(e).__name__,
                                                                                           str(e)[:3000]))
        return
    frames = counters["stats"]["unique_graphs"]
    err = (logits_c - logits_s).abs().max().item()
    check(torch.equal(seq_c, seq_s) and err < 1e-4,
          "generate(), static cache, decode step compiled (fullgraph): tokens are SDPA's, logits within %.1e" % err)
    check(frames == 1, "the decode step compiled once for 11 steps (graphs: %d)" % frames)


def test_paged_prefill():
    real_plan, real_gather = _core.plan_forward, _kvcache._gather_pages
    gathers = [0]

    def plan(rung, variant, key, device, backward=False, mods=None):
        if mods is not None and mods.page_size and key[1] > 16:
            raise ValueError("flashladder: the stand-in of rung 08's refusal: more than 16 queries")
        raise AssertionError("a paged problem of at most 16 queries is not part of this test")

    def gather(*args):
        gathers[0] += 1
        return real_gather(*args)

    _core.plan_forward, _kvcache._gather_pages = plan, gather
    try:
        torch.manual_seed(5)
        b, slots, page, hq, hkv, d = 3, 256, 16, 4, 2, 32
        kc, vc = torch.randn(b, slots, hkv, d), torch.randn(b, slots, hkv, d)
        table = torch.randperm(b * slots // page).to(torch.int32).view(b, slots // page)
        kp, vp = torch.empty(b * slots // page, page, hkv, d), torch.empty(b * slots // page, page, hkv, d)
        kp[table.long()] = kc.view(b, slots // page, page, hkv, d)
        vp[table.long()] = vc.view(b, slots // page, page, hkv, d)
        for sq, new, leftpad in ((20, 20, None), (30, 0, None), (17, 17, [0, 5, 100])):
            used = torch.tensor([0, 100, 200] if new else [40, 100, 256], dtype=torch.int32)
            q = torch.randn(b, sq, hq, d)
            kn, vn = (torch.randn(b, new, hkv, d), torch.randn(b, new, hkv, d)) if new else (None, None)
            pad = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32)
            kc2, vc2, kp2, vp2 = kc.clone(), vc.clone(), kp.clone(), vp.clone()
            before = gathers[0]
            out_c = _kvcache.flash_attn_with_kvcache(q, kc2, vc2, kn, vn, cache_seqlens=used, cache_leftpad=pad,
                                                   causal=True)
            out_p = _kvcache.flash_attn_with_kvcache(q, kp2, vp2, kn, vn, cache_seqlens=used, cache_leftpad=pad,
                                                   causal=True, block_table=table)
            what = "paged prefill, %d queries, %d new keys%s" % (sq, new, ", left-padded" if pad is not None else "")
            check(gathers[0] == before + 1, "%s: the pages were gathered" % what)
            check(torch.equal(out_p, out_c), "%s: O equals the contiguous cache's" % what)
            check(torch.equal(kp2[table.long()].reshape(b, slots, hkv, d), kc2),
                  "%s: the new keys were written through the table" % what)
    finally:
        _core.plan_forward, _kvcache._gather_pages = real_plan, real_gather


def test_mla_model():
    """DeepSeek-V3's attention (MLA in prefill: q and k of 64 + 32 dims, v of 64) through
    attn_implementation="ladder": v reaches the package with its own head_dim (transformers pads it
    only for flash_attention_2), and on a left-padded batch (its packed path, which runs here on the
    stand-in) the logits of the valid tokens equal SDPA's."""
    config = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64,
                  qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, n_routed_experts=4, num_experts_per_tok=2,
                  n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1)
    register_transformers()
    models = {}
    for impl in ("sdpa", "ladder"):
        torch.manual_seed(0)
        models[impl] = transformers.DeepseekV3ForCausalLM(
            transformers.DeepseekV3Config(**config, attn_implementation=impl)).eval()
    models["ladder"].load_state_dict(models["sdpa"].state_dict())
    ids = torch.randint(3, 1000, (2, 40))
    pad = torch.ones(2, 40, dtype=torch.long)
    pad[0, :5] = 0
    CALLS[0] = 0
    with torch.no_grad():
        ref = models["sdpa"](ids, attention_mask=pad).logits
        got = models["ladder"](ids, attention_mask=pad).logits
    err = (got[pad.bool()] - ref[pad.bool()]).abs().max().item()
    check(CALLS[0] == 2 and err < 1e-4, "DeepSeek-V3 (MLA, head_dims 96/64), a left-padded batch: the ladder's "
          "logits equal SDPA's (max |diff| %.2e, %d launches)" % (err, CALLS[0]))


def main():
    print("PyTorch %s, transformers %s, on the CPU" % (torch.__version__, transformers.__version__))
    test_mla_model()
    test_dropout_reaches_launch()
    test_spans()
    test_static_direct()
    test_paged_prefill()
    sdpa, ladder = tiny_models()
    test_mask_shapes(ladder)
    test_generate(sdpa, ladder)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
