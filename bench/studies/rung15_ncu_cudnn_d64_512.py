import sys
import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(32, 32, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=sys.argv[1] == "1")
torch.cuda.synchronize()
