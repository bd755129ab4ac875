"""apply_rotary_emb as FlashAttention 2's tests call it for their reference, through the rotation
flashladder's KV cache applies (flashladder._kvcache._apply_rotary)."""

import torch

from flashladder import _kvcache


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x [batch, seqlen, heads, head_dim] rotated at positions seqlen_offsets + i (an int or a
    [batch] tensor) by the rows of cos, sin [seqlen_ro, rotary_dim / 2]."""
    if cu_seqlens is not None:
        raise NotImplementedError("fa_tests: apply_rotary_emb on packed tokens is not in this harness")
    b, s = x.shape[0], x.shape[1]
    offsets = torch.as_tensor(seqlen_offsets, device=x.device).reshape(-1, 1)
    positions = (offsets + torch.arange(s, device=x.device)[None, :]).expand(b, s)
    out = _kvcache._apply_rotary(x, cos, sin, positions, interleaved)
    if inplace:
        x.copy_(out)
        return x
    return out
