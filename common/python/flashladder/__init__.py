"""FlashLadder's attention kernels inside PyTorch.

    import torch, flashladder
    q, k, v = (torch.randn(2, 1024, 16, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    out = flashladder.attention(q, k, v, causal=True)           # the best forward rung this GPU has
    out = flashladder.attention(q, k, v, rung=5)                # or any rung: flashladder.rungs()

Tensors are laid out as flash_attn_func's: [batch, seqlen, heads, head_dim], fp16 or bf16, on one
CUDA device; k and v may have fewer heads than q (GQA/MQA). ``attention`` is a
``torch.library.custom_op`` (``torch.ops.flashladder.attention``) with a fake implementation for
torch.compile and autograd through rung 14's backward on sm_90 (rung 11's elsewhere).
``register_transformers()`` adds
``attn_implementation="ladder"`` to Hugging Face transformers (not "flashladder": transformers
5 takes every name containing "flash" for a FlashAttention package).

FlashAttention's interface (``flash_attn_func``, ``flash_attn_qkvpacked_func``,
``flash_attn_kvpacked_func``, ``flash_attn_varlen_func`` and its packed forms: FlashAttention 2's
signatures, with windows, softcapping, ALiBi slopes, sinks and packed batches on rung 16 and
rung 15) is in ``flashladder._flash``, ``flash_attn_with_kvcache`` in ``flashladder._kvcache``,
both imported on first use. ``flash_attn_func`` on ``torch.float8_e4m3fn`` tensors, with
FlashAttention 3's ``q_descale``, ``k_descale``, ``v_descale``, runs rung 13's FP8 forward;
``fp8_quantize`` makes those tensors and descales on the device (``flashladder._fp8``). DeepSeek
FlashMLA's interface (``flash_mla_with_kvcache``,
``get_mla_metadata``: MLA decode on the latent cache, rung 17) is in ``flashladder._mla``, also
imported on first use.

The layers, one way down: the public functions (here, ``_flash``, ``_kvcache``, ``_ring``,
``_hf``) -> the custom ops and their autograd (``_ops``) -> one launch layer (``_launch``) ->
the extension (``_ext``); every check a call makes is ``_core``'s (torch-free), made once.

Context-parallel ring attention inside a process group (``ring_attention``, differentiable, with
``ring_shard`` and ``ring_unshard``: rung 12's plan, one process per GPU) is in
``flashladder._ring``, imported on first use too.

``import flashladder`` needs no PyTorch and no GPU: ``rungs()``, ``supports()`` and the device
query work anywhere; PyTorch is imported on the first call that takes tensors.
"""

from ._core import (  # noqa: F401
    BACKWARD_RUNG,
    DEFAULT_BACKWARD,
    DEFAULT_FORWARD,
    Rung,
    device_count,
    device_info,
    find_rung,
    no_device_reason,
    rungs,
    supports,
)
from ._ext import DeviceInfo  # noqa: F401

_ops_module = None  # flashladder._ops once imported (it imports PyTorch); a global, so that
# torch.compile reads it instead of tracing an import


def _torch_ops():
    global _ops_module
    if _ops_module is None:
        from . import _ops as module

        _ops_module = module
    return _ops_module


def attention(q, k, v, rung=None, variant="", causal=False, softmax_scale=None, return_lse=False):
    """Attention with one rung of the ladder; see flashladder._ops.attention."""
    return _torch_ops().attention(q, k, v, rung=rung, variant=variant, causal=causal,
                                  softmax_scale=softmax_scale, return_lse=return_lse)


def attention_backward(dout, q, k, v, out, lse, causal=False, softmax_scale=None, rung=None,
                       variant="", deterministic=False, out_fp32=None):
    """dQ, dK, dV with the backward rung; see flashladder._ops.attention_backward."""
    return _torch_ops().attention_backward(dout, q, k, v, out, lse, causal=causal,
                                           softmax_scale=softmax_scale, rung=rung,
                                           variant=variant, deterministic=deterministic,
                                           out_fp32=out_fp32)


def load_ops():
    """Imports PyTorch and registers the custom ops (torch.ops.flashladder.attention and
    attention_backward) without making a call; returns the module that defines them."""
    return _torch_ops()


def transformers_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           **kwargs):
    """A Hugging Face AttentionInterface function; see flashladder._hf."""
    from . import _hf

    return _hf.transformers_attention(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)


def register_transformers(name="ladder", rung=None, variant=""):
    """attn_implementation=name runs on the ladder (transformers' AttentionInterface)."""
    from . import _hf

    return _hf.register_transformers(name=name, rung=rung, variant=variant)


#: FlashAttention's functions (flashladder._flash, _kvcache), imported with PyTorch on first use.
FLASH_API = ("flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
             "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache")


def check_errors(device=None):
    """Synchronizes CUDA device ``device`` (an index or torch.device; None: the current one) and
    raises RuntimeError naming the first metadata violation its calls recorded since the last
    report: cu_seqlens, cache_seqlens, cache_leftpad, cache_batch_idx or block_table past its bound.
    Those are checked on the GPU without a synchronization (each call reads and writes only inside
    its tensors, its metadata clamped); the next call that takes metadata raises the same error, and
    this reports it at once (a CUDA graph's replays too)."""
    import torch

    from . import _launch

    if device is None:
        index = torch.cuda.current_device()
    elif isinstance(device, int):
        index = device
    else:
        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
    torch.cuda.synchronize(index)
    _launch.raise_metadata_errors(index)


#: The FP8 path's quantizer (flashladder._fp8: rung 13's inputs), imported with PyTorch on first use.
FP8_API = ("fp8_quantize",)

#: FlashMLA's functions (flashladder._mla: rung 17), imported with PyTorch on first use.
MLA_API = ("flash_mla_with_kvcache", "get_mla_metadata")

#: Ring attention over a process group (flashladder._ring), imported with PyTorch on first use.
RING_API = ("ring_attention", "ring_shard", "ring_unshard")


def __getattr__(name):
    """FlashAttention's, FlashMLA's, the FP8 and the ring functions, imported with PyTorch on first
    use and then bound in the module (a call through ``flashladder.flash_attn_func`` pays this
    lookup once, not per call)."""
    if name == "flash_attn_with_kvcache":
        from . import _kvcache as module
    elif name in FLASH_API:
        from . import _flash as module
    elif name in FP8_API:
        from . import _fp8 as module
    elif name in MLA_API:
        from . import _mla as module
    elif name in RING_API:
        from . import _ring as module
    else:
        raise AttributeError("module 'flashladder' has no attribute %r" % (name,))
    value = globals()[name] = getattr(module, name)
    return value


__all__ = list(FLASH_API) + list(FP8_API) + list(MLA_API) + list(RING_API) + [
    "BACKWARD_RUNG", "DEFAULT_BACKWARD", "DEFAULT_FORWARD", "DeviceInfo", "Rung", "attention", "attention_backward",
    "check_errors", "device_count", "device_info", "find_rung", "load_ops", "no_device_reason",
    "register_transformers", "rungs", "supports", "transformers_attention",
]
