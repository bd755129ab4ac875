import torch, flashladder
from flashladder import flash_attn_with_kvcache
torch.manual_seed(0)
fails = 0
for page in (16, 64, 256):
    for sq, causal in ((1, False), (4, True), (16, True)):
        b, slots, hq, hkv, d = 3, 4096, 32, 8, 128
        kc = torch.randn(b, slots, hkv, d, device="cuda", dtype=torch.float16)
        vc = torch.randn_like(kc)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.float16)
        used = torch.tensor([4096, 1000, 2777], dtype=torch.int32, device="cuda")
        n = slots // page
        table = torch.randperm(b * n, device="cuda").to(torch.int32).view(b, n)
        wide = torch.full((b, n + 3), -1, dtype=torch.int32, device="cuda"); wide[:, :n] = table
        kp = torch.empty(b * n, page, hkv, d, dtype=kc.dtype, device="cuda"); vp = torch.empty_like(kp)
        kp[table.long()] = kc.view(b, n, page, hkv, d); vp[table.long()] = vc.view(b, n, page, hkv, d)
        ref = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=used, causal=causal)
        got = flash_attn_with_kvcache(q, kp, vp, cache_seqlens=used, causal=causal, block_table=wide[:, :n])
        ok = torch.equal(ref, got)
        fails += not ok
        print("%s page %d sq %d causal %d: sliced table, paged == contiguous bitwise: %s (max diff %.2e)" % (
            "ok  " if ok else "FAIL", page, sq, causal, ok, (ref.float() - got.float()).abs().max().item()))
print("%d failure(s)" % fails)
