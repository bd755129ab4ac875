"""The internals FlashAttention 2's test file imports beside the API (run.py says what each is).

_get_block_size_n: the width of the key blocks its S_dmask decoding assumes. flashladder's S_dmask
holds exp(s - m) with m the row's largest seen score, FlashAttention's unnormalized probabilities
with all of a row's keys as one block (flashladder._flash.dropout_s_dmask): one block at least as
wide as any row. The kernels' own entry points (flash_attn_gpu, _flash_attn_varlen_forward) are
FlashAttention's C++ extension, which flashladder does not imitate: a test that calls them fails
on their absence and is counted as not run (run.py)."""

USE_TRITON_ROCM = False

#: Wider than any row the test file builds.
ONE_BLOCK = 1 << 30


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    return ONE_BLOCK
