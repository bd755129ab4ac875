"""Context-parallel ring attention on the ladder's rungs, inside a process group the caller already
has: ``ring_attention`` (differentiable in q, k, v), ``ring_shard`` and ``ring_unshard``.

    import torch, torch.distributed as dist, flashladder
    dist.init_process_group("nccl")                    # one process per GPU (torchrun)
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    q, k, v = (flashladder.ring_shard(t) for t in (q_full, k_full, v_full))  # this rank's rows
    out = flashladder.ring_attention(q, k, v, seqlen=q_full.shape[1], causal=True)
    loss_of(out).backward()                            # dQ, dK, dV of this rank's rows
    out_full = flashladder.ring_unshard(out, seqlen=q_full.shape[1])

One sequence of ``seqlen`` tokens is split over the P ranks of the group by rung 12's plan
(common/include/flashladder/ring_plan.h, the same C++ through ``_ext.ring_plan``): zigzag (the
default) cuts it into 2P chunks and gives rank r chunks r and 2P-1-r, so that every rank does the
same causal work; contiguous gives rank r chunk r of P (rank P-1 then does ~2P-1 times rank 0's
causal work: Brandon et al. 2023, Striped Attention, analyse this imbalance). Any seqlen works,
even seqlen < 2P (some chunks, even some shards, are empty). Every rank keeps its queries; the
keys and values travel around the ring, one hop per step (Liu, Zaharia, Abbeel 2023, Ring
Attention with Blockwise Transformers), and the work of each step is the plan's launches: skipped,
full, or bottom-right causal (the chunk's own diagonal).

The forward pass of rank r, P = 4 (KVj: the K/V shard rank j started with)::

    step s:  compute  the launches of Q_r against KV(r-s) -> (O_s, LSE_s), merged into fp32 (O, LSE)
             comm     send KV(r-s) -> r+1, receive KV(r-s-1) <- r-1     (under the compute)

             rank 0   rank 1   rank 2   rank 3
    step 0   KV0      KV1      KV2      KV3      its own shard (causal: one launch)
    step 1   KV3      KV0      KV1      KV2
    step 2   KV2      KV3      KV0      KV1
    step 3   KV1      KV2      KV3      KV0      nothing more to send

The backward pass sends the keys and values around again, and with them the partial gradient of
that shard, dKV = (dK, dV) in fp32, to which every rank that holds it adds its part::

    step s:  comm     send KV(r-s) -> r+1, receive KV(r-s-1) <- r-1      (under the compute)
             wait     dKV(r-s) <- r-1: the parts of ranks r-s ... r-1 (zero at step 0)
             compute  dQ_r += dQ of the launches; dKV(r-s) += their (dK, dV)
             comm     send dKV(r-s) -> r+1, receive dKV(r-s-1) <- r-1  (under the next compute)

             rank 0      rank 1      rank 2      rank 3
    step 0   KV0 dKV0    KV1 dKV1    KV2 dKV2    KV3 dKV3    dKV starts at zero with its owner
    step 1   KV3 dKV3    KV0 dKV0    KV1 dKV1    KV2 dKV2
    step 2   KV2 dKV2    KV3 dKV3    KV0 dKV0    KV1 dKV1
    step 3   KV1 dKV1    KV2 dKV2    KV3 dKV3    KV0 dKV0    every rank has added its part
    home     dKV0        dKV1        dKV2        dKV3        one more hop: rank r+1 is dKV(r+1)'s owner

zhuzilin/ring-flash-attention runs the same two rings on FlashAttention's kernels; this module
follows its bookkeeping in the ladder's own terms and keeps every sum in fp32.

Why fp32 accumulation: each step's (O_s, LSE_s) and each step's (dQ, dK, dV) is exact up to its
own rounding. Merging O or summing gradients in 16-bit would round once per step, P times, and
the error would grow with the ring (ring-flash-attention's README warns of exactly this for its
16-bit merge). In fp32 the only 16-bit rounding is the last one, as in a single GPU's kernel that
keeps O in registers. The forward takes each step's O before its rounding (the rung's fp32 O).

Why D from the global O: the softmax's backward needs D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij
over ALL the keys of row i, and P_ij = exp(S_ij - LSE_i) with the row's global LSE. A step holds
only some of the keys: its own partial O_s and LSE_s would give a D and a P normalised over those
keys alone, and a wrong dS = P (dP - D). Given the final O and the final LSE instead, every step's
P is the true probability, D the true row sum, and each step's dQ, dK, dV is the exact share of
the full gradient that its keys carry (FlashAttention-2's backward pass: it needs only O and the
LSE from the forward). The ring saves the fp32 O for D, as the package's own
autograd does (rung 11's README: D from the 16-bit O costs dQ its precision on long rows).

A rung's default backward takes D on rows of more than 16384 keys from an exact pass instead, the
sum of P * dP over the keys it is given: in a ring those are a part of the row. So the backward of
each step is rung 14's ``o32-delta`` entry on sm_90 (rung 11's elsewhere), which reads D from the O
it is given at every length: rung 12's choice (ring_schedule.cu, its README's backward section).

Every rank checks the problem against the rungs before any message leaves, so bad input raises on
every rank alike instead of leaving a peer waiting; a rank that fails later leaves its peers
waiting until the process group's timeout.
"""

import functools
import math

import torch
import torch.distributed as dist

from . import _core, _ext, _launch

#: Rung 12's two ways to split the sequence (ring_plan.h's Sharding).
SHARDINGS = ("zigzag", "contiguous")

# Messages between ring neighbours: the K/V shards, and in the backward pass their dK/dV. gloo
# matches a receive to a send by tag; NCCL by order, which both ends keep (kv, then dkv, per step).
_TAG_KV, _TAG_DKV = 0, 1

# The backward entry of a ring step: D from the O it is given, at every length (module docstring).
_BACKWARD_VARIANT = "o32-delta"


# ---- the plan ---------------------------------------------------------------------------------

def _check_sharding(sharding):
    if sharding not in SHARDINGS:
        raise ValueError("flashladder: sharding must be 'zigzag' or 'contiguous' (rung 12's plans), got %r"
                         % (sharding,))


def _check_seqlen(seqlen):
    if isinstance(seqlen, bool) or not isinstance(seqlen, int) or seqlen < 1:
        raise ValueError("flashladder: seqlen must be the whole sequence's length, an int >= 1, got %r"
                         % (seqlen,))


def _first_pieces(steps):
    """Per step, per launch: the launch's query rows cut into (begin, end, first) pieces, first
    where no earlier launch covered the rows (the merge then takes the step's result as it is;
    ring_plan.h's plan_merges does the same for the rung's merge kernel)."""
    covered = []  # disjoint, sorted [begin, end) row ranges some earlier launch merged
    out = []
    for step in steps:
        per_launch = []
        for q_begin, q_len, _, _, _ in step["launches"]:
            end, pos, pieces = q_begin + q_len, q_begin, []
            for c_begin, c_end in covered:
                if c_end <= pos or c_begin >= end:
                    continue
                if c_begin > pos:
                    pieces.append((pos, c_begin, True))
                pieces.append((max(c_begin, pos), min(c_end, end), False))
                pos = min(c_end, end)
            if pos < end:
                pieces.append((pos, end, True))
            per_launch.append(pieces)
            covered = _union(covered, q_begin, end)
        out.append(per_launch)
    return out


def _union(ranges, begin, end):
    merged = []
    for b, e in sorted(ranges + [(begin, end)]):
        if merged and b <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((b, e))
    return merged


@functools.lru_cache(maxsize=256)
def _schedule(sharding, causal, n, ranks, rank, key_cap=0):
    """(rung 12's plan of one rank as _ext.ring_plan gives it, its merge pieces). Shared between
    calls: read only. key_cap > 0: its launches cut to at most that many keys (split_keys)."""
    plan = _ext.ring_plan(sharding, bool(causal), n, ranks, rank, key_cap)
    return plan, _first_pieces(plan["steps"])


def _describe_shard(plan):
    """'chunks 1 [256:512] and 6 [1536:1792]': a rank's chunks and their global rows."""
    parts = ["%d [%d:%d]" % (c, b, b + n) for c, b, n, _ in plan["chunks"]]
    return ("chunk " if len(parts) == 1 else "chunks ") + " and ".join(parts)


# ---- the process group ------------------------------------------------------------------------

def _group_of(group, what):
    """(group, its size P, this process's rank in it); a one-line error without one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("flashladder: %s needs an initialised process group "
                           "(torch.distributed.init_process_group, one process per rank)" % what)
    if group is None:
        group = dist.group.WORLD
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("flashladder: %s: this process (global rank %d) is not in the group it was given"
                         % (what, dist.get_rank()))
    return group, dist.get_world_size(group), rank


def _global_rank(group, rank):
    """A rank of ``group`` as P2POp takes it (the default group's ranks are the global ones)."""
    if group is dist.group.WORLD:
        return rank
    return dist.get_global_rank(group, rank)


def _exchange(group, send, dst, recv_shape, src, like, tag):
    """Posts the send of ``send`` (None: nothing) to global rank ``dst`` and the receive of a
    tensor of ``recv_shape`` (None: nothing) from ``src`` like ``like``: (requests, the receive
    buffer). Nothing waits: the caller computes, then waits on the requests."""
    recv = like.new_empty(recv_shape) if recv_shape is not None else None
    ops = []
    if send is not None and send.numel() > 0:
        ops.append(dist.P2POp(dist.isend, send, dst, group, tag))
    if recv is not None and recv.numel() > 0:
        ops.append(dist.P2POp(dist.irecv, recv, src, group, tag))
    return (dist.batch_isend_irecv(ops) if ops else []), recv


def _wait(requests):
    for r in requests:
        r.wait()


# ---- backends: the attention of one launch -----------------------------------------------------

@functools.lru_cache(maxsize=256)
def _backward_rung(key, device, deterministic):
    """The rung number whose o32-delta entry runs a step's backward on ``key`` (check_qkv's):
    rung 12's pick_backward_rung, 14 on sm_90 where it runs the problem, else 11. ValueError with
    each one's reason when neither can."""
    built = {r.number for r in _core.rungs(variants=True) if r.variant == _BACKWARD_VARIANT}
    numbers = (14, 11) if _core.device_info(device).arch == "sm_90" else (11,)
    reasons = []
    for n in numbers:
        if n not in built:
            reasons.append("%d[%s] is not built" % (n, _BACKWARD_VARIANT))
            continue
        try:
            _core.plan_backward(n, _BACKWARD_VARIANT, key, deterministic, device)
            return n
        except ValueError as e:
            reasons.append(str(e).replace("flashladder: ", ""))
    raise ValueError("flashladder: ring_attention: no backward rung runs a ring step here (%s)" % "; ".join(reasons))


class RungBackend:
    """The package's own rungs, on CUDA tensors (the default): the forward route's rung for each
    launch, writing its fp32 O beside the 16-bit one (_launch.forward with o_fp32), and rung 14's
    o32-delta backward on sm_90 (rung 11's elsewhere) with D from the global fp32 O. A backend is
    any object with these three methods."""

    def check(self, q, k, v, causal, scale, grad):
        """Raises the rungs' one-line reason (TypeError, ValueError) for a problem they cannot run,
        before anything is sent."""
        if q.shape[1] == 0:
            # An empty shard (seqlen < 2P) still checks dtype, device and head_dim on a one-row
            # stand-in, so every rank refuses the same inputs and none waits on a refused peer.
            q = q.new_empty((q.shape[0], 1) + tuple(q.shape[2:]))
            k = k.new_empty((k.shape[0], 1) + tuple(k.shape[2:]))
            v = v.new_empty(k.shape)
        device = q.device.index
        # A causal ring also has unmasked launches (the keys wholly in a query chunk's past).
        for c in ((False, True) if causal else (False,)):
            key = _core.check_qkv(q, k, v, c, scale, tensor_type=torch.Tensor)
            _core.plan_forward(None, "", key, device, True)
            if grad:
                _backward_rung(key, device, torch.are_deterministic_algorithms_enabled())

    def forward(self, q, k, v, causal, scale):
        """(O before its rounding, in fp32; LSE, fp32 [batch, heads_q, seqlen_q]) of one launch.
        The rungs read strided rows (a slice of the shard) as they are."""
        key = _core.check_qkv_cached(q, k, v, causal, scale, tensor_type=torch.Tensor)
        _, lse, o32 = _launch.forward(q, k, v, key, o_fp32=True)
        return o32, lse

    def backward(self, dout, q, k, v, out, lse, causal, scale, out_fp32):
        """(dQ, dK, dV) of one launch from the GLOBAL O, fp32 O and LSE rows of its queries; the
        rung makes dense copies of the strided rows it needs dense (dO, O, the LSE)."""
        key = _core.check_qkv_cached(q, k, v, causal, scale, tensor_type=torch.Tensor)
        deterministic = torch.are_deterministic_algorithms_enabled()
        rung = _backward_rung(key, q.device.index, deterministic)
        return _launch.backward(dout, q, k, v, out, lse, key, deterministic, rung, _BACKWARD_VARIANT, out_fp32)


class ReferenceBackend:
    """Attention in plain torch math, on any device and float dtype (computed in fp32, or in the
    input's dtype where that is wider): the ring's bookkeeping without a GPU (the tests run it on
    CPU with gloo). Bottom-right causal: query i sees key j iff j <= i + k_len - q_len; a row that
    sees no key gets O = 0 and LSE = -inf. Natural-log LSE. GQA: query head h reads K/V head
    h // (heads_q / heads_kv), and dK, dV sum over each group."""

    def check(self, q, k, v, causal, scale, grad):
        if not q.dtype.is_floating_point:
            raise TypeError("flashladder: the reference backend takes floating-point tensors, got %s" % (q.dtype,))

    @staticmethod
    def _math(t):
        return t.to(torch.promote_types(t.dtype, torch.float32))

    @staticmethod
    def _expand(t, groups):
        return t.repeat_interleave(groups, dim=2) if groups > 1 else t

    def _probs(self, q, k, causal, scale, lse=None):
        """(P [b, h, q, k] normalised by ``lse`` or its own row sums, the LSE [b, h, q])."""
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
        if causal:
            q_len, k_len = q.shape[1], k.shape[1]
            i = torch.arange(q_len, device=q.device)[:, None]
            j = torch.arange(k_len, device=q.device)[None, :]
            s = s.masked_fill(j > i + (k_len - q_len), -math.inf)
        if lse is None:
            lse = torch.logsumexp(s, dim=-1)
        # A row that sees no key: LSE = -inf; its P is exp(-inf - 0) = 0, never NaN.
        base = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
        return torch.exp(s - base[..., None]), lse

    def forward(self, q, k, v, causal, scale):
        groups = q.shape[2] // k.shape[2]
        q, k, v = self._math(q), self._expand(self._math(k), groups), self._expand(self._math(v), groups)
        p, lse = self._probs(q, k, causal, scale)
        return torch.einsum("bhqk,bkhd->bqhd", p, v), lse

    def backward(self, dout, q, k, v, out, lse, causal, scale, out_fp32):
        """dP = dO V^T, D = rowsum(dO * O), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q,
        dV = P^T dO, with P from the given (global) LSE and D from the given (global) O."""
        batch, k_len, heads_kv, head_dim = k.shape
        groups = q.shape[2] // heads_kv
        dout, q = self._math(dout), self._math(q)
        k, v = self._expand(self._math(k), groups), self._expand(self._math(v), groups)
        o = self._math(out_fp32 if out_fp32 is not None else out)
        p, _ = self._probs(q, k, causal, scale, self._math(lse))
        dp = torch.einsum("bqhd,bkhd->bhqk", dout, v)
        delta = (dout * o).sum(-1).transpose(1, 2)  # [b, h, q]
        ds = p * (dp - delta[..., None])
        dq = torch.einsum("bhqk,bkhd->bqhd", ds, k) * scale
        dk = torch.einsum("bhqk,bqhd->bkhd", ds, q) * scale
        dv = torch.einsum("bhqk,bqhd->bkhd", p, dout)
        if groups > 1:
            dk = dk.view(batch, k_len, heads_kv, groups, head_dim).sum(3)
            dv = dv.view(batch, k_len, heads_kv, groups, head_dim).sum(3)
        return dq, dk, dv


# ---- the two rings -----------------------------------------------------------------------------

class _Ring:
    """What one call's forward and backward passes share: the group, the plan, the backend."""

    def __init__(self, group, ranks, rank, plan, pieces, causal, scale, backend, fwd=None):
        self.group, self.ranks, self.rank = group, ranks, rank
        self.plan, self.pieces = plan, pieces
        # The forward's plan: the same, or with a backward to follow its launches cut to the
        # plan's forward_key_cap keys (ring_plan.h says why: D comes from the forward's fp32 O).
        self.fwd_plan, self.fwd_pieces = fwd if fwd is not None else (plan, pieces)
        self.causal, self.scale, self.backend = causal, scale, backend
        # Ring neighbours as P2POp names them (the plan's send_to and recv_from are group ranks).
        step0 = plan["steps"][0]
        self.send_to = _global_rank(group, step0["send_to"])
        self.recv_from = _global_rank(group, step0["recv_from"])


def _acc_dtype(dtype):
    """fp32 for 16-bit inputs (a wider input keeps its own width)."""
    return torch.promote_types(dtype, torch.float32)


def _merge(out, lse, o_s, lse_s, begin, end, first):
    """Merges one launch's (O_s, LSE_s) for rows [begin, end) into the running fp32 (O, LSE):
    LSE = logaddexp(LSE, LSE_s), O = exp(LSE_old - LSE) O + exp(LSE_s - LSE) O_s, rung 08's combine
    rule. The first result for a row is taken as it is."""
    o_acc, l_acc = out[:, begin:end], lse[:, :, begin:end]
    if first:
        o_acc.copy_(o_s)
        l_acc.copy_(lse_s)
        return
    l_new = torch.logaddexp(l_acc, lse_s)
    # A row no key reached on either side stays at O = 0, LSE = -inf: weights 0, not NaN.
    base = torch.where(torch.isneginf(l_new), torch.zeros_like(l_new), l_new)
    w_acc = torch.exp(l_acc - base).transpose(1, 2).unsqueeze(-1)  # [b, rows, h, 1]
    w_s = torch.exp(lse_s - base).transpose(1, 2).unsqueeze(-1)
    o_acc.mul_(w_acc).add_(w_s * o_s)
    l_acc.copy_(l_new)


def _pass_kv(ring, s, kv):
    """Posts step s's K/V transfer: the shard held on to send_to, the next one from recv_from
    (none after the last step). A shard may be empty (seqlen < 2P): its buffer has no rows and
    nothing goes over the wire."""
    step = ring.plan["steps"][s]
    if s + 1 == len(ring.plan["steps"]):
        return [], None
    shape = (2, kv.shape[1], step["recv_len"]) + tuple(kv.shape[3:])
    return _exchange(ring.group, kv, ring.send_to, shape, ring.recv_from, kv, _TAG_KV)


def _ring_forward(ring, q, k, v):
    """(O in fp32, LSE) of this rank's queries against every rank's keys: P steps, the next K/V
    shard's transfer under each step's launches."""
    batch, rows, heads_q, head_dim = q.shape
    acc = _acc_dtype(q.dtype)
    out = q.new_zeros((batch, rows, heads_q, head_dim), dtype=acc)
    lse = q.new_full((batch, heads_q, rows), -math.inf, dtype=acc)
    kv = torch.stack((k, v))  # [2, batch, rows, heads_kv, head_dim]: one message per step
    for s, step in enumerate(ring.fwd_plan["steps"]):
        requests, kv_next = _pass_kv(ring, s, kv)
        for (q_begin, q_len, k_begin, k_len, causal), pieces in zip(step["launches"], ring.fwd_pieces[s]):
            q_end, k_end = q_begin + q_len, k_begin + k_len
            o_s, lse_s = ring.backend.forward(q[:, q_begin:q_end], kv[0][:, k_begin:k_end],
                                              kv[1][:, k_begin:k_end], causal, ring.scale)
            for begin, end, first in pieces:
                _merge(out, lse, o_s[:, begin - q_begin:end - q_begin],
                       lse_s[:, :, begin - q_begin:end - q_begin].to(acc), begin, end, first)
        _wait(requests)
        if kv_next is not None:
            kv = kv_next
    return out, lse


def _ring_backward(ring, dout, q, k, v, out, out32, lse):
    """(dQ, dK, dV) of this rank's rows: K/V go around the ring again with their fp32 dK/dV, each
    rank adding its share; one last hop takes every dK/dV home."""
    batch, rows, _, head_dim = q.shape
    heads_kv = k.shape[2]
    acc = _acc_dtype(q.dtype)
    steps = ring.plan["steps"]
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    kv = torch.stack((k, v))
    dkv = torch.zeros(kv.shape, dtype=acc, device=q.device)  # the own shard's, first stop
    dkv_requests, dkv_next = [], None
    for s, step in enumerate(steps):
        kv_requests, kv_next = _pass_kv(ring, s, kv)
        if s > 0:  # the partial dK/dV of the shard now held, from the ranks that held it before
            _wait(dkv_requests)
            dkv = dkv_next
        for q_begin, q_len, k_begin, k_len, causal in step["launches"]:
            qr, kr = slice(q_begin, q_begin + q_len), slice(k_begin, k_begin + k_len)
            dq_s, dk_s, dv_s = ring.backend.backward(dout[:, qr], q[:, qr], kv[0][:, kr], kv[1][:, kr],
                                                     out[:, qr], lse[:, :, qr], causal, ring.scale,
                                                     out32[:, qr])
            dq[:, qr].add_(dq_s)
            dkv[0][:, kr].add_(dk_s)
            dkv[1][:, kr].add_(dv_s)
        if ring.ranks > 1:
            # Pass the held shard's dK/dV on with it: to the rank that holds that shard next, and
            # after the last step (it then holds rank + 1's shard) home to its owner, rank + 1.
            next_rows = steps[s + 1]["kv_len"] if s + 1 < len(steps) else rows
            dkv_requests, dkv_next = _exchange(ring.group, dkv, ring.send_to,
                                               (2, batch, next_rows, heads_kv, head_dim),
                                               ring.recv_from, dkv, _TAG_DKV)
        _wait(kv_requests)
        if kv_next is not None:
            kv = kv_next
    if ring.ranks > 1:
        _wait(dkv_requests)
        dkv = dkv_next
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    """ring_attention's autograd: saves q, k, v, the 16-bit O, the fp32 O (for D) and the LSE."""

    @staticmethod
    def forward(ctx, q, k, v, ring):
        out32, lse = _ring_forward(ring, q, k, v)
        out = out32.to(q.dtype)  # the one 16-bit rounding
        ctx.save_for_backward(q, k, v, out, out32, lse)
        ctx.ring = ring
        # The LSE is returned for inspection; no gradient flows through it.
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, out32, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(ctx.ring, dout.contiguous(), q, k, v, out, out32, lse)
        return dq, dk, dv, None


# ---- the public functions ----------------------------------------------------------------------

def _check_inputs(q, k, v, plan, sharding, seqlen, ranks, rank):
    """check_qkv's structure (_core.check_structure) on any device and dtype (the backend says
    which it takes), and this rank's shard length."""
    w = "ring_attention: "
    named = (("q", q), ("k", k), ("v", v))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError("flashladder: %s%s must be a torch.Tensor, got %s" % (w, name, type(t).__name__))
        if t.dim() != 4:
            raise ValueError("flashladder: %s%s must have 4 dimensions [batch, shard_len, heads, head_dim], "
                             "got shape %s" % (w, name, tuple(t.shape)))
    _core.check_structure(q, k, v, w)
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise ValueError("flashladder: %sheads_q (%d) must be a multiple of heads_kv (%d)" % (w, q.shape[2], k.shape[2]))
    want = plan["shard_len"]
    for name, t in named:
        if t.shape[1] != want:
            raise ValueError("flashladder: %s%s has %d rows but rank %d of %d holds %d of the %d tokens (%s: %s); "
                             "pass ring_shard(x, seqlen)'s rows"
                             % (w, name, t.shape[1], rank, ranks, want, seqlen, sharding, _describe_shard(plan)))


def ring_attention(q, k, v, seqlen, group=None, causal=False, softmax_scale=None, sharding="zigzag",
                   return_lse=False, _backend=None, _key_cap=None):
    """Attention over one sequence of ``seqlen`` tokens split over the ranks of ``group`` (None:
    the default process group), each rank holding its rows.

    q [batch, shard_len, heads_q, head_dim], k and v [batch, shard_len, heads_kv, head_dim] are this
    rank's rows in the plan's local order (what ``ring_shard`` gives: zigzag, rank r holds chunks r
    and 2P-1-r of 2P, in that order; contiguous, chunk r of P). ``causal`` is over the whole
    sequence (bottom-right aligned, which for equal lengths is the usual lower triangle);
    ``softmax_scale`` None means 1/sqrt(head_dim). Returns this rank's O rows, like q, and with
    ``return_lse`` also their LSE, [batch, heads_q, shard_len] float32 (natural log, over the whole
    sequence; not differentiable). Differentiable in q, k, v: the backward pass runs the ring again
    and returns each rank the gradient of its own rows.

    Every rank of the group must call it with the same seqlen, causal, scale, sharding and shapes
    (but its own rows). Runs on the package's rungs (CUDA fp16/bf16, the NCCL backend), or on
    ``_backend`` (ReferenceBackend: plain torch math, any device, e.g. CPU with gloo); ``_key_cap``
    (tests): the keys per forward launch when a backward follows, instead of the plan's
    forward_key_cap of seqlen (0 on rows of at most 16384 keys). Raises with
    one line, on every rank before anything is sent: no process group, inputs on two devices or of
    the wrong shard length, a problem the rungs cannot run (their own reason)."""
    group, ranks, rank = _group_of(group, "ring_attention")
    _check_sharding(sharding)
    _check_seqlen(seqlen)
    plan, pieces = _schedule(sharding, bool(causal), seqlen, ranks, rank)
    _check_inputs(q, k, v, plan, sharding, seqlen, ranks, rank)
    scale = _core.check_scale(softmax_scale) or 1.0 / math.sqrt(q.shape[-1])
    backend = _backend if _backend is not None else RungBackend()
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    backend.check(q, k, v, bool(causal), scale, grad)
    # With a backward to follow, the forward's launches are cut to forward_key_cap keys (the same on
    # every rank: it depends on seqlen alone).
    cap = (plan["forward_key_cap"] if _key_cap is None else int(_key_cap)) if grad else 0
    fwd = _schedule(sharding, bool(causal), seqlen, ranks, rank, cap) if cap else None
    ring = _Ring(group, ranks, rank, plan, pieces, bool(causal), scale, backend, fwd)
    out, lse = _RingAttention.apply(q, k, v, ring)
    return (out, lse) if return_lse else out


def _dim_of(x, dim):
    if not -x.dim() <= dim < x.dim():
        raise ValueError("flashladder: dim %d is out of range for a tensor of %d dimensions" % (dim, x.dim()))
    return dim % x.dim()


def ring_shard(x, seqlen=None, group=None, sharding="zigzag", dim=1):
    """This rank's rows of the full tensor ``x`` along ``dim`` (the sequence), in the plan's local
    order: the q, k or v that ring_attention takes (dim=1 for [batch, seqlen, heads, head_dim]). A
    dense copy, so the full tensor can go; differentiable (the gradient lands in x's rows).
    ``seqlen``, if given, must be x's length along dim."""
    group, ranks, rank = _group_of(group, "ring_shard")
    _check_sharding(sharding)
    dim = _dim_of(x, dim)
    n = x.shape[dim]
    if seqlen is not None and seqlen != n:
        raise ValueError("flashladder: ring_shard: x has %d rows along dim %d but seqlen is %r" % (n, dim, seqlen))
    _check_seqlen(n)
    plan, _ = _schedule(sharding, False, n, ranks, rank)
    return torch.cat([x.narrow(dim, begin, length) for _, begin, length, _ in plan["chunks"]], dim)


def ring_unshard(x_local, seqlen, group=None, sharding="zigzag", dim=1):
    """The full sequence back from every rank's rows along ``dim`` (ring_shard's inverse), on every
    rank: an all_gather (the shards padded to the longest, as all_gather wants equal sizes), then
    each rank's chunks put back in place. For outputs and checks: not differentiable."""
    group, ranks, rank = _group_of(group, "ring_unshard")
    _check_sharding(sharding)
    _check_seqlen(seqlen)
    dim = _dim_of(x_local, dim)
    plans = [_schedule(sharding, False, seqlen, ranks, r)[0] for r in range(ranks)]
    if x_local.shape[dim] != plans[rank]["shard_len"]:
        raise ValueError("flashladder: ring_unshard: x_local has %d rows along dim %d but rank %d of %d holds %d "
                         "of the %d tokens (%s: %s)" % (x_local.shape[dim], dim, rank, ranks,
                                                       plans[rank]["shard_len"], seqlen, sharding,
                                                       _describe_shard(plans[rank])))
    longest = max(p["shard_len"] for p in plans)
    shape = list(x_local.shape)
    shape[dim] = longest
    padded = x_local.new_zeros(shape)
    padded.narrow(dim, 0, x_local.shape[dim]).copy_(x_local.detach())
    gathered = [torch.empty_like(padded) for _ in range(ranks)]
    dist.all_gather(gathered, padded, group=group)
    shape[dim] = seqlen
    full = x_local.new_empty(shape)
    for r, p in enumerate(plans):
        for _, begin, length, local in p["chunks"]:
            full.narrow(dim, begin, length).copy_(gathered[r].narrow(dim, local, length))
    return full
