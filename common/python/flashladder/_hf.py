"""Hugging Face transformers' attention interface on the ladder's rungs.

``register_transformers()`` makes ``attn_implementation="ladder"`` run a model's attention
(a Llama-style decoder: GQA, RoPE applied before the call; or an encoder without padding) through
``flashladder.attention``. transformers builds no dense mask for it (the mask function registered
beside it is transformers' own FlashAttention one: nothing when every token is valid, the 2D
padding mask otherwise), so a causal model gets ``is_causal`` and no mask.

The function takes only the keyword arguments it implements (ACCEPTED) and those that cannot
change the result (IGNORED). Everything else raises a ``flashladder:`` ValueError naming the
argument, and so does an accepted one with a value the rungs cannot honour: a mask (padding), a
dropout above 0, a sliding window narrower than the sequence, a softcap, attention sinks, a
position bias (T5's relative attention), the varlen metadata of packed sequences, attention
weights, and rows packed through ``position_ids`` alone (positions that restart within a row).
Nothing is ever silently dropped.

The default name is "ladder", not "flashladder": transformers (5.x) takes every implementation
whose name contains "flash" for a FlashAttention package (``is_flash_attention_requested``) and
tries to load that package when the model is built, which fails. ``register_transformers(name=...)``
takes another name.
"""

#: Keyword arguments the function reads; each is checked (see transformers_attention).
ACCEPTED = ("scaling", "dropout", "is_causal", "sliding_window", "softcap", "s_aux",
            "position_bias", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "seq_idx",
            "output_attentions", "indices", "block_indices", "encoder_attention_mask", "rung",
            "variant")
#: Keyword arguments transformers passes down to attention functions that cannot change the
#: result: cache and output bookkeeping of the model around it, where K/V came from
#: (encoder_hidden_states: cross-attention's K/V are already the key and value given), the varlen
#: maxima (meaningless without cu_seq_lens, which is refused), and `deterministic` (the forward pass
#: is deterministic; autograd's backward follows torch.use_deterministic_algorithms).
IGNORED = ("use_cache", "cache_position", "past_key_values", "past_key_value", "layer_idx",
           "output_hidden_states", "output_router_logits", "return_dict", "num_items_in_batch",
           "position_embeddings", "encoder_hidden_states", "max_length_q", "max_length_k",
           "deterministic")
#: Accepted arguments that change the result whenever they are set (not None): what each one is.
_REFUSED_WHEN_SET = {
    "softcap": "a logit softcap (cap * tanh(s / cap), Gemma 2)",
    "s_aux": "attention sinks (a per-head logit in the softmax's denominator, gpt-oss)",
    "position_bias": "an additive position bias (T5's relative attention bias)",
    "cu_seq_lens_q": "packed sequences (varlen cu_seq_lens_q)",
    "cu_seq_lens_k": "packed sequences (varlen cu_seq_lens_k)",
    "seq_idx": "packed sequences (seq_idx)",
    "encoder_attention_mask": "a padding mask on the encoder's tokens (encoder_attention_mask)",
    "indices": "sparse attention indices",
    "block_indices": "sparse attention block indices",
}


def _refuse(what):
    raise ValueError("flashladder: " + what)


#: The last position_ids looked at and the answer: a model passes one tensor to every layer, so
#: one device-to-host read per forward call (the tensor is held, so identity means the same one).
_LAST_POSITIONS = [None, -1, False]


def packed_rows(position_ids):
    """True if ``position_ids`` ([batch, seqlen], or [planes, batch, seqlen] for multimodal RoPE)
    restart within a row: several documents packed into one row, each attending only to itself.
    A 2D row restarts where a position is not above the one before it; each plane of a 3D one
    where a position falls. A decode step's single position cannot restart and reads nothing."""
    if position_ids is None or position_ids.shape[-1] < 2:
        return False
    version = getattr(position_ids, "_version", 0)
    if _LAST_POSITIONS[0] is position_ids and _LAST_POSITIONS[1] == version:
        return _LAST_POSITIONS[2]
    steps = position_ids[..., 1:] - position_ids[..., :-1]
    restart = bool((steps <= 0 if position_ids.dim() == 2 else steps < 0).any().item())
    _LAST_POSITIONS[:] = [position_ids, version, restart]
    return restart


def _check_kwargs(query, key, kwargs):
    """Raises the one-line ValueError of the first argument the rungs cannot honour."""
    for name in kwargs:
        if name not in ACCEPTED and name not in IGNORED:
            _refuse("transformers passed %s=%s, which the ladder's attention does not implement; "
                    "use another attn_implementation for this model" % (name, _brief(kwargs[name])))
    for name, what in _REFUSED_WHEN_SET.items():
        if kwargs.get(name) is not None:
            _refuse("the rungs do not implement %s (%s=%s)" % (what, name, _brief(kwargs[name])))
    window = kwargs.get("sliding_window")
    seqlen = max(query.shape[2], key.shape[2])
    if window is not None and seqlen > window:
        # transformers' FlashAttention path applies a window only past its width (keys within
        # sliding_window - 1 of the query): below it, every key is in the window already.
        _refuse("the rungs have no sliding window (sliding_window=%s, but %d tokens: the window "
                "would mask some)" % (window, seqlen))
    if kwargs.get("output_attentions"):
        _refuse("no attention weights (output_attentions=True); use attn_implementation='eager' "
                "for them")
    if packed_rows(kwargs.get("position_ids")):
        _refuse("position_ids restart within a row (several sequences packed into one row, each "
                "attending to itself): the rungs have no variable-length batches yet; pad the "
                "batch or use another attn_implementation")


def _brief(value):
    shape = getattr(value, "shape", None)
    return "tensor of shape %s" % (tuple(shape),) if shape is not None else repr(value)


def transformers_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           **kwargs):
    """An AttentionInterface function: query [batch, heads_q, seqlen_q, head_dim], key/value
    [batch, heads_kv, seqlen_k, head_dim] (as transformers passes them), causal from
    ``is_causal`` or ``module.is_causal``. Returns (attn_output [batch, seqlen_q, heads_q,
    head_dim], None): no attention weights. Raises a ``flashladder:`` ValueError for any argument
    it cannot honour (the module's docstring lists them)."""
    if attention_mask is not None:
        _refuse("the rungs take no attention mask, only causal or none; got a mask of shape %s "
                "(padding in the batch, or a custom mask). Pad-free batches, or another "
                "attn_implementation" % (tuple(attention_mask.shape),))
    if dropout:
        _refuse("the rungs have no attention dropout, got dropout=%s (set the model's "
                "attention_dropout to 0, or call model.eval())" % (dropout,))
    _check_kwargs(query, key, kwargs)
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    from . import _ops  # PyTorch, once the arguments passed (the checks above need none)

    # [batch, heads, seqlen, head_dim] -> the ladder's [batch, seqlen, heads, head_dim]: a view
    # with head_dim still contiguous, which every rung reads through its strides.
    out = _ops.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                         rung=kwargs.get("rung"), variant=kwargs.get("variant", ""),
                         causal=bool(is_causal), softmax_scale=scaling)
    return out, None


def register_transformers(name="ladder", rung=None, variant=""):
    """Registers ``transformers_attention`` (with ``rung``: None = the route) as
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
