import torch, flashladder
for causal in (False, True):
    for s in (1, 77, 300):
        q = torch.randn(2, s, 8, 128, device="cuda", dtype=torch.float16)
        k = torch.randn(2, s + 5, 2, 128, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        a = flashladder.attention(q, k, v, causal=causal)              # checked path, LSE stored
        b = flashladder.attention(q, k, v, causal=causal)              # fast path, no LSE
        c, lse = flashladder.attention(q, k, v, causal=causal, return_lse=True)  # fast path with LSE
        torch.cuda.synchronize()
        print(causal, s, torch.equal(a, b), torch.equal(a, c), bool(torch.isfinite(lse).all()))
