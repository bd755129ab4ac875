"""Hugging Face transformers' attention interface on the ladder's rungs.

``register_transformers()`` makes ``attn_implementation="ladder"`` run a model's attention through
the ladder. transformers builds no dense mask for it: the mask function registered beside it is
transformers' own FlashAttention one (nothing when every token is valid, the 2D padding mask
otherwise), so a causal model gets ``is_causal`` and, with padding, a [batch, seqlen_k] mask.

What it runs, as transformers' FlashAttention path does:
- no padding: ``flashladder.attention`` (or rung 16 with a window, softcap or sinks) on the batch;
- a padded batch (the 2D mask): the valid tokens unpadded into a packed batch, attention over it
  (``flash_attn_varlen_func``: rung 15, or rung 16 with a window, softcap or sinks), padded back
  (zeros on the padding rows); a static cache's K/V slots past the mask are left out; a decode
  step or a few queries on a left-padded cache (generate()) read the cache in place from each
  row's first valid slot (``flash_attn_with_kvcache``'s ``cache_leftpad``: rung 08 or 15);
- rows packed with several sequences (``position_ids`` that restart within a row, or the
  ``cu_seq_lens_q/k`` of transformers' flattening collator): a packed batch of those sequences;
- ``sliding_window`` (Mistral, Gemma 2, gpt-oss, ModernBERT): FlashAttention's window_size
  (sliding_window - 1 keys back; forward too for a bidirectional model), ``softcap`` (Gemma 2),
  ``s_aux`` (gpt-oss's sinks): rung 16.

The function takes only the keyword arguments it implements (ACCEPTED) and those that cannot
change the result (IGNORED). Everything else raises a ``flashladder:`` ValueError naming the
argument, and so does an accepted one with a value the rungs cannot honour: a mask of another
shape than transformers' 2D padding mask, a position bias (T5's relative attention), attention
weights, sparse indices, ``seq_idx``. ``dropout`` (the model's attention_dropout in train mode) is
flash_attn_func's ``dropout_p``: rung 16 (with softcap: refused, as flash_attn_func refuses it).
Nothing is ever silently dropped.

The default name is "ladder", not "flashladder": transformers (5.x) takes every implementation
whose name contains "flash" for a FlashAttention package (``is_flash_attention_requested``) and
tries to load that package when the model is built, which fails. ``register_transformers(name=...)``
takes another name.
"""

#: Keyword arguments the function reads; each is checked (see transformers_attention).
ACCEPTED = ("scaling", "dropout", "is_causal", "sliding_window", "softcap", "s_aux",
            "position_bias", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
            "max_length_k", "seq_idx",
            "output_attentions", "indices", "block_indices", "encoder_attention_mask", "rung",
            "variant")
#: Keyword arguments transformers passes down to attention functions that cannot change the
#: result: cache and output bookkeeping of the model around it, where K/V came from
#: (encoder_hidden_states: cross-attention's K/V are already the key and value given), the varlen
#: and `deterministic` (the forward pass is deterministic; autograd's backward follows
#: torch.use_deterministic_algorithms).
IGNORED = ("use_cache", "cache_position", "past_key_values", "past_key_value", "layer_idx",
           "output_hidden_states", "output_router_logits", "return_dict", "num_items_in_batch",
           "position_embeddings", "encoder_hidden_states", "deterministic")
#: Accepted arguments that change the result whenever they are set (not None): what each one is.
_REFUSED_WHEN_SET = {
    "position_bias": "an additive position bias (T5's relative attention bias)",
    "seq_idx": "packed sequences given as seq_idx (pass position_ids or cu_seq_lens_q/k)",
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
    if kwargs.get("output_attentions"):
        _refuse("no attention weights (output_attentions=True); use attn_implementation='eager' "
                "for them")


def _brief(value):
    shape = getattr(value, "shape", None)
    return "tensor of shape %s" % (tuple(shape),) if shape is not None else repr(value)


def _window(kwargs, seqlen_k, causal):
    """FlashAttention's window_size for transformers' ``sliding_window``, as its FlashAttention
    path sets it: keys within sliding_window - 1 of the query (on both sides for a bidirectional
    model), once there are more than sliding_window keys; (-1, -1) otherwise."""
    window = kwargs.get("sliding_window")
    if window is None or seqlen_k <= window:
        return (-1, -1)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        _refuse("sliding_window must be an int >= 1, got %r" % (window,))
    return (window - 1, 0 if causal else window - 1)


def _cu_seqlens(lengths):
    """int32 prefix sums [batch + 1] of a 1-D tensor of lengths."""
    import torch

    cu = torch.zeros(lengths.shape[0] + 1, dtype=torch.int32, device=lengths.device)
    torch.cumsum(lengths, 0, out=cu[1:])
    return cu


#: The last position_ids split into sequences (see _restarts), kept like _LAST_UNPAD's plan.
_LAST_RESTARTS = [None, -1, -1, None]


def _restarts(position_ids, total):
    """cu_seqlens and the longest length of the sequences of rows packed through position_ids
    (a sequence starts at each row's first token and wherever the position does not increase).
    Every layer of a forward call gets the same position_ids tensor: the split (one device-to-host
    read, for the longest length) is made once per call, as _unpad_plan's, and never under
    torch.compile."""
    import torch

    caching = not torch.compiler.is_compiling()
    version = getattr(position_ids, "_version", 0)
    last = _LAST_RESTARTS
    if caching and last[0] is position_ids and last[1] == version and last[2] == total:
        return last[3]
    pos = position_ids if position_ids.dim() == 2 else position_ids[0]  # mrope: the first plane
    start = torch.ones_like(pos, dtype=torch.bool)
    start[:, 1:] = pos[:, 1:] <= pos[:, :-1]
    starts = torch.nonzero(start.flatten()).flatten().to(torch.int32)
    cu = torch.cat([starts, torch.tensor([total], dtype=torch.int32, device=starts.device)])
    plan = (cu, int((cu[1:] - cu[:-1]).max().item()))
    if caching:
        _LAST_RESTARTS[:] = [position_ids, version, total, plan]
    return plan


#: The last padding mask unpadded and its plan: every layer of a forward call gets the same mask
#: tensor, so the indices, cu_seqlens and maxima (two device-to-host reads) are made once per call.
_LAST_UNPAD = [None, -1, -1, None]


def _unpad_plan(attention_mask, seqlen_q):
    """(query indices, key indices, cu_seqlens_q, cu_seqlens_k, max_q, max_k) of a padded batch's
    valid tokens under the 2D mask [batch, seqlen_k] (1: valid), its queries the last seqlen_q
    columns (all of them, a decode step's one, or a few at the end: transformers' rule)."""
    import torch

    # Under torch.compile (transformers compiles a static cache's decode step, with CUDA graphs)
    # nothing is kept across calls: a graph's outputs are overwritten by its next replay.
    caching = not torch.compiler.is_compiling()
    version = getattr(attention_mask, "_version", 0)
    last = _LAST_UNPAD
    if caching and last[0] is attention_mask and last[1] == version and last[2] == seqlen_q:
        return last[3]
    batch, seqlen_k = attention_mask.shape
    valid = attention_mask.bool()
    lens_k = valid.sum(dim=1, dtype=torch.int32)
    idx_k = torch.nonzero(valid.flatten()).flatten()
    if seqlen_q == seqlen_k:
        lens_q, idx_q = lens_k, idx_k
    elif seqlen_q == 1:  # a decode step: one query per sequence
        lens_q = torch.ones(batch, dtype=torch.int32, device=valid.device)
        idx_q = torch.arange(batch, device=valid.device)
    else:  # a few queries at the end of each row (speculative decoding, chunked prefill)
        valid_q = valid[:, -seqlen_q:]
        lens_q = valid_q.sum(dim=1, dtype=torch.int32)
        idx_q = torch.nonzero(valid_q.flatten()).flatten()
    both = torch.stack([lens_q.max(), lens_k.max()]).tolist()  # one read for both maxima
    plan = (idx_q, idx_k, _cu_seqlens(lens_q), _cu_seqlens(lens_k), max(both[0], 1), max(both[1], 1))
    if caching:
        _LAST_UNPAD[:] = [attention_mask, version, seqlen_q, plan]
    return plan


#: The last padding mask looked at and its valid runs (see _padding_span), and the last one
#: trimmed and its written length (see _trim_static).
_LAST_SPAN = [None, -1, -1, None]
_LAST_TRIM = [None, -1, -1]


def _grad_wanted(*tensors):
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _padding_span(attention_mask, seqlen_q):
    """(start, end), int32 [batch] each, when every row's valid slots under the 2D mask are one run
    [start, end) that ends where every other row's does and holds at least the seqlen_q queries
    (its last slots): left padding, and with a static cache also the slots past the tokens written
    so far (ladder_mask pads the mask to the cache's length with zeros); else None (a right-padded
    row, say, whose queries are not its last valid slots). Checked once per forward call (one
    device-to-host read, kept for the other layers); under torch.compile the check cannot read
    back: it is an asynchronous device assert, which stops the program instead of computing
    something else."""
    import torch

    compiling = torch.compiler.is_compiling()
    version = getattr(attention_mask, "_version", 0)
    last = _LAST_SPAN
    if not compiling and last[0] is attention_mask and last[1] == version and last[2] == seqlen_q:
        return last[3]
    valid = attention_mask.bool()
    length = valid.shape[1]
    slots = torch.arange(length, device=valid.device)
    count = valid.sum(dim=1)
    # The run's end: one past the last valid slot (0 for a row with none).
    end = torch.where(valid, slots[None, :] + 1, 0).amax(dim=1)
    start = end - count
    span = (slots[None, :] >= start[:, None]) & (slots[None, :] < end[:, None])
    ok = (valid == span).all() & (count >= seqlen_q).all() & (end == end.max()).all()
    start, end = start.to(torch.int32), end.to(torch.int32)
    if compiling:
        torch._assert_async(ok, "flashladder: the padding mask is not one run of valid slots per row")
        return start, end
    result = (start, end) if bool(ok) else None
    _LAST_SPAN[:] = [attention_mask, version, seqlen_q, result]
    return result


def _trim_static(attention_mask, k, v):
    """The mask, k and v without the columns past every row's last valid slot: a static cache's
    slots not written yet (ladder_mask pads the mask over them with zeros), so that the queries
    are the last columns again; every other mask comes back as it is. One device-to-host read per
    forward call, kept for the other layers as _padding_span's is; none under torch.compile,
    where the mask is left as it is."""
    import torch

    length = attention_mask.shape[1]
    if torch.compiler.is_compiling():
        return attention_mask, k, v
    version = getattr(attention_mask, "_version", 0)
    if _LAST_TRIM[0] is attention_mask and _LAST_TRIM[1] == version:
        used = _LAST_TRIM[2]
    else:
        used = int(torch.where(attention_mask.bool(), torch.arange(length, device=attention_mask.device) + 1,
                               0).max())
        _LAST_TRIM[:] = [attention_mask, version, used]
    if used == length:
        return attention_mask, k, v
    return attention_mask[:, :used], k[:, :used], v[:, :used]


def transformers_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           **kwargs):
    """An AttentionInterface function: query [batch, heads_q, seqlen_q, head_dim], key/value
    [batch, heads_kv, seqlen_k, head_dim] (as transformers passes them), causal from
    ``is_causal`` or ``module.is_causal``, ``attention_mask`` None or transformers' 2D padding
    mask [batch, seqlen_k]. Returns (attn_output [batch, seqlen_q, heads_q, head_dim], None): no
    attention weights. Raises a ``flashladder:`` ValueError for any argument it cannot honour
    (the module's docstring lists them)."""
    dropout = float(dropout or 0.0)  # the model's attention_dropout in train mode, else 0
    if not 0.0 <= dropout < 1.0:
        _refuse("dropout must be a probability in [0, 1), got %r" % (dropout,))
    _check_kwargs(query, key, kwargs)
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(is_causal)
    if attention_mask is not None and attention_mask.dim() != 2:
        _refuse("the rungs take transformers' 2D padding mask [batch, seqlen_k] (its FlashAttention "
                "mask function), got a mask of shape %s (a custom mask)" % (tuple(attention_mask.shape),))
    batch, _, seqlen_q, head_dim = query.shape
    seqlen_k, head_dim_v = key.shape[2], value.shape[-1]  # MLA's prefill: v with its own head_dim
    window = _window(kwargs, seqlen_k, is_causal)
    softcap = kwargs.get("softcap") or 0.0
    sinks = kwargs.get("s_aux")
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    packed = cu_q is not None or cu_k is not None
    restart = not packed and attention_mask is None and packed_rows(kwargs.get("position_ids"))
    plain = window == (-1, -1) and not softcap and sinks is None and not dropout
    rung, variant = kwargs.get("rung"), kwargs.get("variant", "")
    from . import _flash, _kvcache, _ops  # PyTorch, once the arguments passed (the checks above need none)

    # [batch, heads, seqlen, head_dim] -> the ladder's [batch, seqlen, heads, head_dim]: a view
    # with head_dim still contiguous, which every rung reads through its strides.
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if plain and attention_mask is None and not packed and not restart:
        return _ops.attention(q, k, v, rung=rung, variant=variant, causal=is_causal,
                              softmax_scale=scaling), None
    if rung is not None:
        _refuse("rung=%r runs plain batches only; a padded or packed batch, a window, softcap, sinks or "
                "dropout take the route (rung 15, rung 16)" % (rung,))
    # dropout: flash_attn_func's dropout_p (rung 16; its seed and offset from PyTorch's generator).
    args = dict(softmax_scale=scaling, causal=is_causal, window_size=window, softcap=float(softcap),
                learnable_sink=sinks, dropout_p=dropout)
    if attention_mask is None and not packed and not restart:
        return _flash.flash_attn_func(q, k, v, **args), None
    heads_q, heads_kv = q.shape[2], k.shape[2]
    if attention_mask is None:  # packed rows: one row's tokens are several sequences
        if packed:
            if cu_q is None or cu_k is None:
                _refuse("cu_seq_lens_q and cu_seq_lens_k come together")
            max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
            if max_q is None or max_k is None:
                max_q = int((cu_q[1:] - cu_q[:-1]).max().item())
                max_k = int((cu_k[1:] - cu_k[:-1]).max().item())
            import torch

            cu_q, cu_k = cu_q.to(torch.int32), cu_k.to(torch.int32)
        else:
            if seqlen_q != seqlen_k:
                _refuse("position_ids restart within a row, but seqlen_q (%d) != seqlen_k (%d)" % (seqlen_q, seqlen_k))
            cu_q, max_q = _restarts(kwargs["position_ids"], batch * seqlen_q)
            cu_k, max_k = cu_q, max_q
        out = _flash.flash_attn_varlen_func(
            q.reshape(batch * seqlen_q, heads_q, head_dim), k.reshape(batch * seqlen_k, heads_kv, head_dim),
            v.reshape(batch * seqlen_k, heads_kv, head_dim_v), cu_q, cu_k, max_q, max_k, **args)
        return out.view(batch, seqlen_q, heads_q, head_dim_v), None
    # A padded batch. A static cache's K/V hold more slots than the tokens so far: column j of
    # the mask is slot j, and the slots past the mask (or, with ladder_mask, under its trailing
    # zeros) are not written yet.
    if (seqlen_q <= 16 and seqlen_q < seqlen_k and not _grad_wanted(q, k, v) and not dropout
            and head_dim_v == head_dim):
        # A decode step or a few queries (generate()'s batches): the cache is read in place,
        # each row's keys its valid run [start, end) (flash_attn_with_kvcache's cache_leftpad
        # and cache_seqlens), nothing gathered. Under torch.compile this is one opaque op and the
        # mask's shape is the cache's, so a static cache's decode step is one graph, replayed.
        # V with its own head_dim (MLA's 192/128) takes the packed path below instead: the
        # decode rung reads one head_dim, and the cache call would pad V to q's.
        span = _padding_span(attention_mask, seqlen_q)
        if span is not None:
            return _kvcache.flash_attn_with_kvcache(q, k, v, cache_seqlens=span[1], cache_leftpad=span[0],
                                                    softmax_scale=scaling, causal=is_causal, window_size=window,
                                                    softcap=float(softcap), learnable_sink=sinks), None
    # Else unpad, a packed batch, pad back (transformers' FlashAttention path).
    if seqlen_k > attention_mask.shape[1]:
        seqlen_k = attention_mask.shape[1]
        k, v = k[:, :seqlen_k], v[:, :seqlen_k]
    attention_mask, k, v = _trim_static(attention_mask, k, v)
    seqlen_k = attention_mask.shape[1]
    idx_q, idx_k, cu_q, cu_k, max_q, max_k = _unpad_plan(attention_mask, seqlen_q)
    out_unpad = _flash.flash_attn_varlen_func(
        q.reshape(batch * seqlen_q, heads_q, head_dim).index_select(0, idx_q),
        k.reshape(batch * seqlen_k, heads_kv, head_dim).index_select(0, idx_k),
        v.reshape(batch * seqlen_k, heads_kv, head_dim_v).index_select(0, idx_k),
        cu_q, cu_k, max_q, max_k, **args)
    out = out_unpad.new_zeros((batch * seqlen_q, heads_q, head_dim_v)).index_copy(0, idx_q, out_unpad)
    return out.view(batch, seqlen_q, heads_q, head_dim_v), None


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
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    except ImportError:
        pass
    else:
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, ladder_mask)
    return name


def ladder_mask(batch_size, q_length, kv_length, *args, attention_mask=None, **kwargs):
    """transformers' FlashAttention mask function (its flash_attention_mask: the 2D padding mask,
    its last kv_length columns, or None without padding), with two changes for a static cache:
    - its mask covers the tokens so far, fewer columns than the cache's kv_length slots, and grows
      by one every decode step, so a compiled step would see a new shape each time (a recompile or
      a CUDA-graph recording per token): it is padded with zeros to kv_length (slots not written
      yet), one shape for the whole generation;
    - under torch.compile the mask is returned as it is, never None: "no padding" is a read of the
      mask's values, a data-dependent branch that would break the graph."""
    if attention_mask is None:
        return None
    import torch

    mask = attention_mask[:, -kv_length:]
    if mask.shape[1] < kv_length:
        return torch.nn.functional.pad(mask, (0, kv_length - mask.shape[1]))
    if torch.compiler.is_compiling():
        return mask
    return None if bool(mask.all()) else mask
