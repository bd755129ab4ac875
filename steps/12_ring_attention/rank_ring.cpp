/// @file steps/12_ring_attention/rank_ring.cpp
/// @brief A rank's set-up and its traffic outside the schedule: the buffers and this rank's
/// rows of the inputs, the barrier before a timed pass, and the gathers of O, LSE and the
/// timings to rank 0. The pass itself is in ring_schedule.cu.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashladder/backward.h"
#include "nccl_check.h"
#include "rank_ring.h"
#include "ring_params.h"

namespace fl::ring {
namespace {

/// At least one byte, so that an empty shard still gets a valid (unused) allocation.
DeviceBuffer alloc(size_t bytes) {
  return DeviceBuffer(std::max<size_t>(bytes, 256));
}

}  // namespace

RankRing::RankRing(const Problem& p, Sharding sh, int world, int rank, const Rung& fwd,
                   const DeviceInfo& dev, Communicator* comm, const HostInputs& in)
    : p_(p),
      world_(world),
      rank_(rank),
      fwd_(fwd),
      dev_(dev),
      comm_(comm),
      plan_(plan_rank(sh, p.causal, p.seqlen_q, world, rank)),
      fplan_(plan_),
      max_len_(max_shard_len(sh, p.seqlen_q, world)),
      ev_step_start_(world),
      ev_compute_done_(world),
      ev_merge_done_(world),
      ev_comm_start_(world),
      ev_recv_done_(world),
      ev_it_(2),
      ev_acc_start_(world),
      ev_dkv_recv_(world) {
  const int s_local = plan_.q_shard.len;
  const int64_t q_row = row_elems(p.heads_q, p.head_dim);
  const int64_t kv_row = row_elems(p.heads_kv, p.head_dim);
  q_elems_ = static_cast<int64_t>(p.batch) * s_local * q_row;
  lse_elems_ = static_cast<int64_t>(p.batch) * p.heads_q * s_local;
  q_ = alloc(bytes16(q_elems_));
  o_ = alloc(bytes16(q_elems_));
  o_part_ = alloc(bytes16(q_elems_));
  o_acc_ = alloc(static_cast<size_t>(q_elems_) * 4);
  lse_ = alloc(static_cast<size_t>(lse_elems_) * 4);
  lse_part_ = alloc(static_cast<size_t>(lse_elems_) * 4);
  for (auto& b : kv_) b = alloc(bytes16(2 * static_cast<int64_t>(p.batch) * max_len_ * kv_row));
  kv_own_ = alloc(bytes16(2 * static_cast<int64_t>(p.batch) * s_local * kv_row));
  size_t ws = 0;
  if (fwd.workspace_bytes)
    for (const StepPlan& sp : plan_.steps)
      for (const Launch& l : sp.launches) ws = std::max(ws, fwd.workspace_bytes(chunk(l)));
  if (ws > 0) ws_ = DeviceBuffer(ws);
  ws_bytes_ = ws;
  sync_ = alloc(sizeof(float));
  FL_CUDA_CHECK(cudaMemset(sync_.get(), 0, sizeof(float)));
  // This rank's rows of Q, K and V (every rank made the same whole inputs from the seed).
  const Shard& own = plan_.q_shard;
  const auto q = take_shard(in.q, p.batch, p.seqlen_q, p.heads_q, p.head_dim, own);
  const auto k = take_shard(in.k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, own);
  const auto v = take_shard(in.v, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, own);
  if (!q.empty()) q_.upload(q.data(), bytes16(q.size()));
  if (!k.empty()) {  // K then V, as the ring passes them on
    FL_CUDA_CHECK(cudaMemcpy(kv_own_.get(), k.data(), bytes16(k.size()), cudaMemcpyHostToDevice));
    FL_CUDA_CHECK(cudaMemcpy(kv_own_.as<uint16_t>() + k.size(), v.data(), bytes16(v.size()),
                             cudaMemcpyHostToDevice));
  }
  // The set-up above ran on the legacy stream; the ring's streams do not wait for it.
  FL_CUDA_CHECK(cudaDeviceSynchronize());
}

Problem RankRing::chunk(const Launch& l) const {
  Problem lp = p_;
  lp.seqlen_q = l.q.len;
  lp.seqlen_k = l.k.len;
  lp.causal = l.causal;
  lp.softmax_scale = p_.scale();
  return lp;
}

std::string RankRing::why_not() const {
  for (const StepPlan& sp : plan_.steps)
    for (const Launch& l : sp.launches) {
      const Problem lp = chunk(l);
      const std::string why = supports(fwd_, lp, dev_);
      if (!why.empty())
        return fwd_.label() + " cannot run the step problem " + lp.describe() + ": " + why;
    }
  return "";
}

void RankRing::barrier() {
  FL_NCCL_CHECK(
      ncclAllReduce(sync_.get(), sync_.get(), 1, ncclFloat, ncclSum, comm_->get(), compute_.s));
  comm_->wait_ready("ncclAllReduce (barrier)");
}

void RankRing::collect(std::vector<uint16_t>* o_all, std::vector<float>* lse_all) const {
  put_rows(p_, plan_.q_shard, o_, lse_, o_all, lse_all);
}

void RankRing::gather(std::vector<uint16_t>* o_all, std::vector<float>* lse_all) {
  const int N = p_.seqlen_q;
  const int64_t q_row = row_elems(p_.heads_q, p_.head_dim);
  cudaStream_t cs = compute_.s;
  std::vector<DeviceBuffer> o_in(world_), lse_in(world_);
  std::vector<Shard> shards;
  for (int r = 0; r < world_; ++r) shards.push_back(shard_of_rank(plan_.sharding, N, world_, r));
  FL_NCCL_CHECK(ncclGroupStart());
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) {
      if (shards[r].len == 0) continue;
      o_in[r] = alloc(bytes16(int64_t{p_.batch} * shards[r].len * q_row));
      lse_in[r] = alloc(sizeof(float) * p_.batch * p_.heads_q * shards[r].len);
      FL_NCCL_CHECK(ncclRecv(o_in[r].get(), bytes16(int64_t{p_.batch} * shards[r].len * q_row),
                             ncclUint8, r, comm_->get(), cs));
      FL_NCCL_CHECK(ncclRecv(lse_in[r].get(), size_t{1} * p_.batch * p_.heads_q * shards[r].len,
                             ncclFloat, r, comm_->get(), cs));
    }
  } else if (plan_.q_shard.len > 0) {
    FL_NCCL_CHECK(ncclSend(o_.get(), bytes16(q_elems_), ncclUint8, 0, comm_->get(), cs));
    FL_NCCL_CHECK(ncclSend(lse_.get(), lse_elems_, ncclFloat, 0, comm_->get(), cs));
  }
  FL_NCCL_CHECK(ncclGroupEnd());
  comm_->wait_ready("gathering O and LSE to rank 0");
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  comm_->wait_event(ev_it_[1], "gathering O and LSE to rank 0");
  if (rank_ != 0) return;
  start_whole(p_, o_all, lse_all);
  for (int r = 0; r < world_; ++r)
    if (shards[r].len > 0)
      put_rows(p_, shards[r], r == 0 ? o_ : o_in[r], r == 0 ? lse_ : lse_in[r], o_all, lse_all);
}

void RankRing::start_whole(const Problem& p, std::vector<uint16_t>* o_all,
                           std::vector<float>* lse_all) {
  o_all->assign(static_cast<size_t>(p.batch) * p.seqlen_q * row_elems(p.heads_q, p.head_dim),
                0xffff);  // NaN in fp16 and bf16
  lse_all->assign(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q, NAN);
}

void RankRing::put_rows(const Problem& p, const Shard& sh, const DeviceBuffer& o,
                        const DeviceBuffer& lse, std::vector<uint16_t>* o_all,
                        std::vector<float>* lse_all) {
  if (sh.len == 0) return;
  std::vector<uint16_t> o_rows(static_cast<size_t>(p.batch) * sh.len *
                               row_elems(p.heads_q, p.head_dim));
  std::vector<float> lse_rows(static_cast<size_t>(p.batch) * p.heads_q * sh.len);
  o.download(o_rows.data(), bytes16(o_rows.size()));
  lse.download(lse_rows.data(), lse_rows.size() * sizeof(float));
  put_shard(o_rows, p.batch, p.seqlen_q, p.heads_q, p.head_dim, sh, o_all);
  put_shard_lse(lse_rows, p.batch, p.seqlen_q, p.heads_q, sh, lse_all);
}

std::vector<std::vector<float>> RankRing::gather_floats(const std::vector<float>& mine) {
  const size_t n = mine.size();
  DeviceBuffer send = alloc(n * sizeof(float)), recv = alloc(n * sizeof(float) * world_);
  send.upload(mine.data(), n * sizeof(float));
  cudaStream_t cs = compute_.s;
  FL_NCCL_CHECK(ncclGroupStart());
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r)
      FL_NCCL_CHECK(ncclRecv(recv.as<float>() + r * n, n, ncclFloat, r, comm_->get(), cs));
  } else {
    FL_NCCL_CHECK(ncclSend(send.get(), n, ncclFloat, 0, comm_->get(), cs));
  }
  FL_NCCL_CHECK(ncclGroupEnd());
  comm_->wait_ready("gathering the timings to rank 0");
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  comm_->wait_event(ev_it_[1], "gathering the timings to rank 0");
  std::vector<std::vector<float>> out;
  if (rank_ != 0) return out;
  std::vector<float> all(n * world_);
  recv.download(all.data(), all.size() * sizeof(float));
  out.push_back(mine);
  for (int r = 1; r < world_; ++r) out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
  return out;
}

double RankRing::send_bytes(int s) const {
  return 2.0 * 2.0 * p_.batch * plan_.steps[s].send_len * row_elems(p_.heads_kv, p_.head_dim);
}

void RankRing::enable_backward(const Rung& bwd, const std::vector<uint16_t>& dout_whole, int key_cap) {
  for (const StepPlan& sp : plan_.steps)
    if (launches_share_keys(sp))
      throw std::logic_error("ring plan: two launches of step " + std::to_string(sp.step) +
                             " read the same keys; the backward sums one partial dK, dV per step");
  bwd_ = &bwd;
  // The forward's launches cut to at most forward_key_cap keys (ring_plan.h says why), and the
  // forward rung's workspace sized for the pieces too.
  fcap_ = key_cap >= 0 ? key_cap : ring::forward_key_cap(p_.seqlen_k);
  fplan_ = plan_rank(plan_.sharding, p_.causal, p_.seqlen_q, world_, rank_, fcap_);
  if (fwd_.workspace_bytes) {
    size_t fws = ws_bytes_;
    for (const StepPlan& sp : fplan_.steps)
      for (const Launch& l : sp.launches) fws = std::max(fws, fwd_.workspace_bytes(chunk(l)));
    if (fws > ws_bytes_) {
      ws_ = DeviceBuffer(fws);
      ws_bytes_ = fws;
    }
  }
  const int s_local = plan_.q_shard.len;
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  const int64_t kv_elems = 2 * static_cast<int64_t>(p_.batch) * max_len_ * kv_row;  // K then V
  dout_ = alloc(bytes16(q_elems_));
  dq_acc_ = alloc(static_cast<size_t>(q_elems_) * 4);
  dq_part_ = alloc(bytes16(q_elems_));
  dq_out_ = alloc(bytes16(q_elems_));
  dkv_part_ = alloc(bytes16(kv_elems));
  dkv_out_ = alloc(bytes16(2 * static_cast<int64_t>(p_.batch) * s_local * kv_row));
  for (auto& b : dkv_) b = alloc(static_cast<size_t>(kv_elems) * 4);
  lse_rows_ = alloc(static_cast<size_t>(lse_elems_) * 4);
  o32_rows_ = alloc(static_cast<size_t>(q_elems_) * 4);
  o_part32_ = alloc(static_cast<size_t>(q_elems_) * 4);
  size_t ws = 0;
  if (bwd.bwd_workspace_bytes)
    for (const StepPlan& sp : plan_.steps)
      for (const Launch& l : sp.launches) ws = std::max(ws, bwd.bwd_workspace_bytes(chunk(l), false));
  if (ws > 0) bws_ = DeviceBuffer(ws);
  bws_bytes_ = ws;
  const auto d = take_shard(dout_whole, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim, plan_.q_shard);
  if (!d.empty()) dout_.upload(d.data(), bytes16(d.size()));
  FL_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads ran on the legacy stream
}

std::string RankRing::why_not_backward() const {
  if (!bwd_) return "no backward rung (enable_backward)";
  if (!fwd_.writes_o_fp32)
    return fwd_.label() + " does not write O in fp32 (Rung::writes_o_fp32): the backward's D would carry every "
           "step's 16-bit rounding of O";
  for (const StepPlan& sp : fplan_.steps)  // the forward's pieces (cut where rows are long)
    for (const Launch& l : sp.launches) {
      const Problem lp = chunk(l);
      const std::string why = supports(fwd_, lp, dev_);
      if (!why.empty())
        return fwd_.label() + " cannot run the forward's piece " + lp.describe() + ": " + why;
    }
  for (const StepPlan& sp : plan_.steps)
    for (const Launch& l : sp.launches) {
      const Problem lp = chunk(l);
      std::string why = supports(*bwd_, lp, dev_);
      if (why.empty() && bwd_->bwd_supports) why = bwd_->bwd_supports(lp, false);
      if (!why.empty())
        return bwd_->label() + "'s backward cannot run the step problem " + lp.describe() + ": " + why;
    }
  return "";
}

void RankRing::collect_grads(std::vector<uint16_t>* dq_all, std::vector<uint16_t>* dk_all,
                             std::vector<uint16_t>* dv_all) const {
  const Shard& sh = plan_.q_shard;
  if (sh.len == 0) return;
  const int64_t q_row = row_elems(p_.heads_q, p_.head_dim), kv_row = row_elems(p_.heads_kv, p_.head_dim);
  std::vector<uint16_t> dq(static_cast<size_t>(p_.batch) * sh.len * q_row);
  std::vector<uint16_t> dkv(2 * static_cast<size_t>(p_.batch) * sh.len * kv_row);
  dq_out_.download(dq.data(), bytes16(dq.size()));
  dkv_out_.download(dkv.data(), bytes16(dkv.size()));
  const std::vector<uint16_t> dk(dkv.begin(), dkv.begin() + dkv.size() / 2), dv(dkv.begin() + dkv.size() / 2, dkv.end());
  put_shard(dq, p_.batch, p_.seqlen_q, p_.heads_q, p_.head_dim, sh, dq_all);
  put_shard(dk, p_.batch, p_.seqlen_k, p_.heads_kv, p_.head_dim, sh, dk_all);
  put_shard(dv, p_.batch, p_.seqlen_k, p_.heads_kv, p_.head_dim, sh, dv_all);
}

void RankRing::gather_grads(std::vector<uint16_t>* dq_all, std::vector<uint16_t>* dk_all,
                            std::vector<uint16_t>* dv_all) {
  const int N = p_.seqlen_q;
  const int64_t q_row = row_elems(p_.heads_q, p_.head_dim), kv_row = row_elems(p_.heads_kv, p_.head_dim);
  cudaStream_t cs = compute_.s;
  std::vector<DeviceBuffer> dq_in(world_), dkv_in(world_);
  std::vector<Shard> shards;
  for (int r = 0; r < world_; ++r) shards.push_back(shard_of_rank(plan_.sharding, N, world_, r));
  FL_NCCL_CHECK(ncclGroupStart());
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) {
      if (shards[r].len == 0) continue;
      const size_t dq_bytes = bytes16(int64_t{p_.batch} * shards[r].len * q_row);
      const size_t dkv_bytes = bytes16(2 * int64_t{p_.batch} * shards[r].len * kv_row);
      dq_in[r] = alloc(dq_bytes);
      dkv_in[r] = alloc(dkv_bytes);
      FL_NCCL_CHECK(ncclRecv(dq_in[r].get(), dq_bytes, ncclUint8, r, comm_->get(), cs));
      FL_NCCL_CHECK(ncclRecv(dkv_in[r].get(), dkv_bytes, ncclUint8, r, comm_->get(), cs));
    }
  } else if (plan_.q_shard.len > 0) {
    FL_NCCL_CHECK(ncclSend(dq_out_.get(), bytes16(q_elems_), ncclUint8, 0, comm_->get(), cs));
    FL_NCCL_CHECK(ncclSend(dkv_out_.get(), bytes16(2 * int64_t{p_.batch} * plan_.q_shard.len * kv_row),
                           ncclUint8, 0, comm_->get(), cs));
  }
  FL_NCCL_CHECK(ncclGroupEnd());
  comm_->wait_ready("gathering dQ, dK and dV to rank 0");
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  comm_->wait_event(ev_it_[1], "gathering dQ, dK and dV to rank 0");
  if (rank_ != 0) return;
  start_whole_grads(p_, dq_all, dk_all, dv_all);
  for (int r = 0; r < world_; ++r) {
    const Shard& sh = shards[r];
    if (sh.len == 0) continue;
    std::vector<uint16_t> dq(static_cast<size_t>(p_.batch) * sh.len * q_row);
    std::vector<uint16_t> dkv(2 * static_cast<size_t>(p_.batch) * sh.len * kv_row);
    (r == 0 ? dq_out_ : dq_in[r]).download(dq.data(), bytes16(dq.size()));
    (r == 0 ? dkv_out_ : dkv_in[r]).download(dkv.data(), bytes16(dkv.size()));
    const std::vector<uint16_t> dk(dkv.begin(), dkv.begin() + dkv.size() / 2),
        dv(dkv.begin() + dkv.size() / 2, dkv.end());
    put_shard(dq, p_.batch, N, p_.heads_q, p_.head_dim, sh, dq_all);
    put_shard(dk, p_.batch, N, p_.heads_kv, p_.head_dim, sh, dk_all);
    put_shard(dv, p_.batch, N, p_.heads_kv, p_.head_dim, sh, dv_all);
  }
}

void RankRing::start_whole_grads(const Problem& p, std::vector<uint16_t>* dq_all, std::vector<uint16_t>* dk_all,
                                 std::vector<uint16_t>* dv_all) {
  dq_all->assign(static_cast<size_t>(p.batch) * p.seqlen_q * row_elems(p.heads_q, p.head_dim), 0xffff);
  dk_all->assign(static_cast<size_t>(p.batch) * p.seqlen_k * row_elems(p.heads_kv, p.head_dim), 0xffff);
  dv_all->assign(dk_all->size(), 0xffff);
}

double RankRing::backward_send_bytes(int s) const {
  if (world_ == 1) return 0;
  // K/V (16-bit) as in the forward, then the dK, dV sums of the shard held (fp32).
  return send_bytes(s) + 2.0 * 4.0 * p_.batch * plan_.steps[s].kv_len * row_elems(p_.heads_kv, p_.head_dim);
}

size_t RankRing::backward_device_bytes(const Problem& p, Sharding sh, int world, int rank) {
  const int s_local = shard_of_rank(sh, p.seqlen_q, world, rank).len;
  const int max_len = max_shard_len(sh, p.seqlen_q, world);
  const double q = static_cast<double>(p.batch) * s_local * row_elems(p.heads_q, p.head_dim);
  const double kv = 2.0 * p.batch * max_len * row_elems(p.heads_kv, p.head_dim);
  const double own = 2.0 * p.batch * s_local * row_elems(p.heads_kv, p.head_dim);
  // dO, dQ's partial and result (16-bit); dQ's sum, the O rows' copy and the forward's partial O
  // (fp32); the dK, dV partial (16-bit), their two travelling sums (fp32), the result (16-bit);
  // the LSE rows' copy; and for the rung's workspace (its fp32 dQ accumulator and partial sums)
  // twice dQ's sum.
  return static_cast<size_t>(q * (2 + 2 + 2 + 4 + 4 + 4) + kv * (2 + 2 * 4) + own * 2 +
                             4.0 * p.batch * p.heads_q * s_local + q * 4 * 2);
}

size_t RankRing::device_bytes(const Problem& p, Sharding sh, int world, int rank) {
  const int s_local = shard_of_rank(sh, p.seqlen_q, world, rank).len;
  const int max_len = max_shard_len(sh, p.seqlen_q, world);
  const double q = static_cast<double>(p.batch) * s_local * row_elems(p.heads_q, p.head_dim);
  const double kv = 2.0 * p.batch * max_len * row_elems(p.heads_kv, p.head_dim);
  const double own = 2.0 * p.batch * s_local * row_elems(p.heads_kv, p.head_dim);
  double need = q * (2 + 2 + 2 + 4) + (2 * kv + own) * 2 + 2.0 * p.batch * p.heads_q * s_local * 4;
  if (rank == 0)
    need += (world - 1) * (2.0 * p.batch * max_len * row_elems(p.heads_q, p.head_dim) +
                           4.0 * p.batch * p.heads_q * max_len);
  return static_cast<size_t>(need);
}

}  // namespace fl::ring
