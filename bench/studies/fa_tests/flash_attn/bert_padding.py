"""unpad_input and pad_input as FlashAttention 2's tests call them (the padded batch to packed
tokens and back), in plain torch; written for this harness."""

import torch


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(tokens [nnz, ...], indices [nnz] into the flattened [batch * seqlen], cu_seqlens int32
    [batch + 1], the longest sequence, used tokens per sequence int32 [batch]) of the rows of
    hidden_states [batch, seqlen, ...] where attention_mask (or unused_mask) is True."""
    keep = attention_mask if unused_mask is None else attention_mask | unused_mask
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    lengths = keep.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(keep.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    tokens = hidden_states.reshape(-1, *hidden_states.shape[2:])[indices]
    return tokens, indices, cu, int(lengths.max().item()), used


def pad_input(hidden_states, indices, batch, seqlen):
    """hidden_states [nnz, ...] scattered back to [batch, seqlen, ...], zeros elsewhere."""
    out = torch.zeros((batch * seqlen, *hidden_states.shape[1:]), dtype=hidden_states.dtype,
                      device=hidden_states.device)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
