"""Cases of every kind bench/studies/fa_tests/run.py tells apart (test_fa_harness.py runs them): passed,
refused (a CPU tensor: flashladder's one-line refusal), failed, skipped, internal (FlashAttention's C++
extension), and the helpers of its flash_attn stand-in (bert_padding, layers.rotary)."""

import pytest
import torch
from flash_attn import flash_attn_func
from flash_attn.bert_padding import pad_input, unpad_input
from flash_attn.flash_attn_interface import _get_block_size_n
from flash_attn.layers.rotary import apply_rotary_emb


@pytest.mark.parametrize("x", [1, 2])
def test_pass(x):
    assert _get_block_size_n("cuda", 64, True, False) >= 1 << 20


def test_refused():
    q = torch.randn(1, 4, 2, 64, dtype=torch.float16)
    flash_attn_func(q, q, q)


def test_failed():
    assert 1 == 2


def test_skip():
    pytest.skip("not here")


def test_internal():
    from flash_attn.flash_attn_interface import flash_attn_gpu  # noqa: F401


def test_padding():
    h = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    m = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    t, idx, cu, mx, used = unpad_input(h, m)
    assert cu.tolist() == [0, 2, 6] and mx == 4 and used.tolist() == [2, 4]
    back = pad_input(t, idx, 2, 5)
    assert torch.equal(back, h * m[..., None])


def test_rotary():
    x = torch.randn(2, 3, 4, 32)
    ang = torch.rand(16, 8)
    y = apply_rotary_emb(x, ang.cos(), ang.sin(), seqlen_offsets=torch.tensor([0, 5]))
    assert y.shape == x.shape and torch.equal(y[..., 16:], x[..., 16:])
