"""Hugging Face transformers' attention interface on the ladder's rungs.

``register_transformers()`` makes ``attn_implementation="ladder"`` run a model's attention
(a Llama-style decoder: GQA, RoPE applied before the call) through ``flashladder.attention``.
transformers builds no dense mask for it (the mask function registered beside it is
transformers' own FlashAttention one: nothing when every token is valid, the 2D padding mask
otherwise), so a causal model gets ``is_causal`` and no mask; a padding mask, any other mask,
dropout, a sliding window, a softcap, attention sinks or packed sequences given as cu_seq_lens are
refused with a ValueError, never silently dropped. Sequences packed into one row through
``position_ids`` alone are not detected (that needs a device-to-host copy in every layer): pack
with an attention implementation that reads them.

The default name is "ladder", not "flashladder": transformers (5.x) takes every implementation
whose name contains "flash" for a FlashAttention package (``is_flash_attention_requested``) and
tries to load that package when the model is built, which fails. ``register_transformers(name=...)``
takes another name.
"""

from . import _ops

#: Keyword arguments transformers may pass that change the result and that the rungs cannot do:
#: a sliding window, a logit softcap, attention sinks, and the varlen metadata of packed sequences
#: (DataCollatorWithFlattening's cu_seq_lens_*).
_UNSUPPORTED = ("sliding_window", "softcap", "s_aux", "cu_seq_lens_q", "cu_seq_lens_k")


def transformers_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           rung=None, variant="", **kwargs):
    """An AttentionInterface function: query [batch, heads_q, seqlen_q, head_dim], key/value
    [batch, heads_kv, seqlen_k, head_dim] (as transformers passes them), causal from
    ``is_causal`` or ``module.is_causal``. Returns (attn_output [batch, seqlen_q, heads_q,
    head_dim], None): no attention weights."""
    if attention_mask is not None:
        raise ValueError(
            "flashladder: the rungs take no attention mask, only causal or none; got a mask of "
            "shape %s (padding in the batch, or a custom mask). Pad-free batches, or another "
            "attn_implementation" % (tuple(attention_mask.shape),))
    if dropout:
        raise ValueError("flashladder: the rungs have no attention dropout, got dropout=%s (set "
                         "the model's attention_dropout to 0, or call model.eval())" % (dropout,))
    for name in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise ValueError("flashladder: the rungs do not implement %s (got %r)"
                             % (name, kwargs[name]))
    if kwargs.get("output_attentions"):
        raise ValueError("flashladder: no attention weights (output_attentions=True); use "
                         "attn_implementation='eager' for them")
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    # [batch, heads, seqlen, head_dim] -> the ladder's [batch, seqlen, heads, head_dim]: a view
    # with head_dim still contiguous, which every rung reads through its strides.
    out = _ops.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                         rung=rung, variant=variant, causal=bool(is_causal), softmax_scale=scaling)
    return out, None


def register_transformers(name="ladder", rung=None, variant=""):
    """Registers ``transformers_attention`` (with ``rung``: None = the default forward) as
    ``attn_implementation=name``, with transformers' FlashAttention mask function beside it.
    Returns the name."""
    from transformers import AttentionInterface

    def attention_forward(module, query, key, value, attention_mask, **kwargs):
        kwargs.setdefault("rung", rung)
        kwargs.setdefault("variant", variant)
        return transformers_attention(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(name, attention_forward)
    try:  # transformers >= 4.53: each attention implementation names its mask builder
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
    except ImportError:
        pass
    else:
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
    return name
