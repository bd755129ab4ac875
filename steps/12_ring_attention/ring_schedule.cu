/// @file steps/12_ring_attention/ring_schedule.cu
/// @brief Rung 12's lesson: the schedule of one rank's ring pass.
///
/// @code
///   // clang-format off
///   rank r, ring step s (0 <= s < P), two streams, K/V double-buffered:
///
///   compute: [wait recv(s-1)] forward rung on KV[s%2] -> (O_s, LSE_s), merge into (O, LSE)
///   comm:    [wait compute(s-1)] ncclSend(KV[s%2] -> r+1) + ncclRecv(KV[(s+1)%2] <- r-1)
///            ^ runs under the compute of step s; the next step waits for it
///   // clang-format on
/// @endcode
///
/// The backward pass (--backward) runs the same plan again, after a forward pass:
///
/// @code
///   // clang-format off
///   rank r, ring step s, K/V and the fp32 sums of their dK, dV double-buffered:
///
///   compute: [wait K/V(s)] backward rung on each launch -> dQ_s, dK_s, dV_s (16-bit partials)
///            dQ += dQ_s (fp32, this rank's)   [wait dKV(s-1)]   dKV[s%2] += (dK_s, dV_s)
///   comm:    K/V(s) -> r+1, K/V(s+1) <- r-1   (as the forward: under the step's compute)
///            [wait the sums] dKV[s%2] -> r+1, dKV[(s+1)%2] <- r-1   (under the next step's compute)
///   after P steps each dKV has been one hop short of home: the last exchange brings every rank
///   its own shard's dK, dV, summed over the P ranks' queries.
///   // clang-format on
/// @endcode
///
/// Every launch's backward reads the rank's final O and LSE rows (the forward's): with the row's
/// global LSE, P_ij = exp(S_ij - LSE_i) is the whole softmax's, and D_i = rowsum(dO_i * O_i) the
/// whole row's, so each step's partial gradients are exactly its keys' share, and their sums are
/// the gradients. D must come from O, never from the chunk (rung 14's exact pass would sum P * dP
/// over the step's keys alone): the backward rung is rung 14's o32-delta entry (rung 11's
/// elsewhere), given O in fp32, which the forward's last merge keeps.
///
/// The forward rung of each step is the best the GPU has, called through the registry (rung 10
/// on sm_90, rung 06 elsewhere): it returns O and LSE for a (query chunk, key chunk) problem that
/// ring_plan.h derives, with the ladder's bottom-right causal mask. The merge is rung 08's LSE
/// combine (merge_kernel.cuh). The only waits between the streams are CUDA events, so the host
/// enqueues the whole pass at once; it then waits through the communicator (communicator.h),
/// which never hangs on a dead peer. The rank's buffers and the gathers are in rank_ring.cpp.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "flashladder/runner.h"
#include "flashladder/static_switch.h"
#include "flashladder/backward.h"
#include "grad_kernels.cuh"
#include "merge_kernel.cuh"
#include "nccl_check.h"
#include "rank_ring.h"
#include "ring_params.h"

namespace fl::ring {
namespace {

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  FL_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

// The communication of step s on the comm stream: once step s - 1's compute has read the buffer
// it receives into, pass the shard held (at cur) on to rank + 1 and receive the next one (into
// nxt) from rank - 1; the last step passes nothing. The forward and the backward pass both call it.
void RankRing::pass_on_kv(int s, const void* cur, void* nxt) {
  const StepPlan& sp = plan_.steps[s];
  cudaStream_t ms = comm_stream_.s;
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  if (s > 0) FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_compute_done_[s - 1], 0));
  FL_CUDA_CHECK(cudaEventRecord(ev_comm_start_[s], ms));
  if (sp.send_len > 0 || sp.recv_len > 0) {
    FL_NCCL_CHECK(ncclGroupStart());
    if (sp.send_len > 0)
      FL_NCCL_CHECK(ncclSend(cur, bytes16(2 * int64_t{p_.batch} * sp.send_len * kv_row), ncclUint8, sp.send_to,
                             comm_->get(), ms));
    if (sp.recv_len > 0)
      FL_NCCL_CHECK(ncclRecv(nxt, bytes16(2 * int64_t{p_.batch} * sp.recv_len * kv_row), ncclUint8,
                             sp.recv_from, comm_->get(), ms));
    FL_NCCL_CHECK(ncclGroupEnd());
    comm_->wait_ready("ncclSend/ncclRecv of a K/V shard");
  }
  FL_CUDA_CHECK(cudaEventRecord(ev_recv_done_[s], ms));
}

// A replay's end: waits for its last step and reads each step's compute and merge times.
StepTimes RankRing::replay_times() {
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], compute_.s));
  FL_CUDA_CHECK(cudaEventSynchronize(ev_it_[1]));
  StepTimes t;
  t.total = elapsed_ms(ev_it_[0], ev_it_[1]);
  for (int s = 0; s < world_; ++s) {
    t.compute.push_back(elapsed_ms(ev_step_start_[s], ev_compute_done_[s]));
    t.merge.push_back(elapsed_ms(ev_compute_done_[s], ev_merge_done_[s]));
  }
  return t;
}

// One pass over P GPUs: at every step the transfer of the next shard on the comm stream, under
// the compute of this one on the compute stream; the host enqueues all of it, then waits.
StepTimes RankRing::forward(int fail_rank) {
  const int P = world_;
  cudaStream_t cs = compute_.s, ms = comm_stream_.s;
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[0], cs));
  FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_it_[0], 0));  // no transfer before the barrier
  for (int s = 0; s < P; ++s) {
    if (rank_ == fail_rank && s == std::min(1, P - 1)) {
      std::fprintf(stderr, "rank %d: leaving the ring at step %d (--fail-rank)\n", rank_, s);
      std::fflush(stderr);
      std::_Exit(kExitCheckFailed);
    }
    // Step 0 computes on the rank's own shard (never overwritten); later steps on the two
    // receive buffers in turn: step s reads KV[s % 2] while KV[(s + 1) % 2] fills.
    DeviceBuffer& cur = s == 0 ? kv_own_ : kv_[s % 2];
    DeviceBuffer& nxt = kv_[(s + 1) % 2];
    // Communication of step s: pass the shard we hold on, receive the next one. The buffer
    // it receives into was read by step s - 1's compute: wait for that first.
    pass_on_kv(s, cur.get(), nxt.get());

    // Compute of step s on the shard received at step s - 1 (step 0: its own).
    if (s > 0) FL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev_recv_done_[s - 1], 0));
    FL_CUDA_CHECK(cudaEventRecord(ev_step_start_[s], cs));
    compute_step(s, cur.get(), ev_compute_done_[s]);
    FL_CUDA_CHECK(cudaEventRecord(ev_merge_done_[s], cs));
  }
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  comm_->wait_event(ev_it_[1], "the ring's forward pass");
  // The comm stream's last event (its last transfer) is done too: it precedes a compute step.
  comm_->wait_event(ev_recv_done_[P - 1], "the ring's last transfer");

  StepTimes t;
  t.total = elapsed_ms(ev_it_[0], ev_it_[1]);
  for (int s = 0; s < P; ++s) {
    t.compute.push_back(elapsed_ms(ev_step_start_[s], ev_compute_done_[s]));
    t.merge.push_back(elapsed_ms(ev_compute_done_[s], ev_merge_done_[s]));
    // Exposed communication: the compute stream idles between the end of step s - 1 and the
    // start of step s only while it waits for the shard that step needs.
    t.exposed.push_back(elapsed_ms(s == 0 ? ev_it_[0] : ev_merge_done_[s - 1], ev_step_start_[s]));
    t.transfer.push_back(elapsed_ms(ev_comm_start_[s], ev_recv_done_[s]));
  }
  return t;
}

// One step's compute: the plan's launches of the forward rung, then their merges. With a backward
// to follow, the forward's plan (fplan_) may cut a launch into pieces over the same rows
// (split_keys): each piece's merges then run right after it, since the next piece writes its
// partial result to the same buffer (the step's compute time then includes all merges but the last
// piece's).
void RankRing::compute_step(int s, const void* kv, cudaEvent_t launched) {
  const StepPlan& sp = fplan_.steps[s];
  cudaStream_t cs = compute_.s;
  const bool merge_each = launches_share_rows(sp);
  int64_t lse_off = 0;
  std::vector<MergeArgs> merges;
  auto run_merges = [&] {
    for (const MergeArgs& m : merges) {
      FL_DTYPE_SWITCH(p_.dtype, T, [&] { launch_merge<T>(m, cs); });
      FL_LAUNCH_CHECK("merge_partial");
    }
    merges.clear();
  };
  for (const Launch& l : sp.launches) {
    float* lse_part = lse_part_.as<float>() + lse_off;
    // With a backward to follow, each launch also writes its O in fp32 (dense, after the previous
    // launches' rows, or from the start for the pieces of a cut launch) and the merges read that:
    // the D of the backward then carries no 16-bit rounding of O, which dQ would amplify on long rows.
    float* o32 = bwd_ ? o_part32_.as<float>() + lse_off * p_.head_dim : nullptr;
    AttnParams a = launch_params(p_, l, plan_.q_shard.len, sp.kv_len, q_.get(), kv, o_part_.get(), lse_part,
                                 ws_.get(), ws_bytes_);
    a.o_fp32 = o32;
    fwd_.launch(a, cs);
    FL_LAUNCH_CHECK("the forward rung of a ring step");
    for (const MergePiece& m : l.merges) {
      MergeArgs ma{o_part_.get(), lse_part, o_acc_.as<float>(), lse_.as<float>(),
                   m.last ? o_.get() : nullptr, m.first, p_.batch, p_.heads_q,
                   p_.head_dim, plan_.q_shard.len, l.q.begin, l.q.len, m.rows.begin,
                   m.rows.len, bwd_ != nullptr};
      ma.o_part32 = o32;
      merges.push_back(ma);
    }
    if (merge_each)
      run_merges();  // the next piece reuses the buffers from their start
    else
      lse_off += static_cast<int64_t>(p_.batch) * p_.heads_q * l.q.len;
  }
  if (launched) FL_CUDA_CHECK(cudaEventRecord(launched, cs));
  run_merges();
}

// The same steps without the ring (--replay): each reads its shard where its first owner keeps it.
StepTimes RankRing::replay(const std::vector<std::unique_ptr<RankRing>>& ranks) {
  cudaStream_t cs = compute_.s;
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[0], cs));
  for (int s = 0; s < world_; ++s) {
    FL_CUDA_CHECK(cudaEventRecord(ev_step_start_[s], cs));
    compute_step(s, ranks[plan_.steps[s].src_rank]->kv_own_.get(), ev_compute_done_[s]);
    FL_CUDA_CHECK(cudaEventRecord(ev_merge_done_[s], cs));
  }
  return replay_times();
}

}  // namespace fl::ring

// ---- the backward pass ------------------------------------------------------------------------

namespace fl::ring {

// One step's backward launches: the 16-bit partials, summed by add_partials.
void RankRing::backward_step(int s, const void* kv, cudaEvent_t launched) {
  const StepPlan& sp = plan_.steps[s];
  cudaStream_t cs = compute_.s;
  const int s_local = plan_.q_shard.len;
  const int64_t q_row = row_elems(p_.heads_q, p_.head_dim);
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  for (const Launch& l : sp.launches) {
    // The rung reads a launch's LSE and fp32 O densely ([batch, heads, q.len] and [batch, q.len,
    // heads, head_dim]): copies of the rank's rows, a small share of the step's bytes.
    FL_CUDA_CHECK(cudaMemcpy2DAsync(lse_rows_.get(), sizeof(float) * l.q.len, lse_.as<float>() + l.q.begin,
                                    sizeof(float) * s_local, sizeof(float) * l.q.len,
                                    static_cast<size_t>(p_.batch) * p_.heads_q, cudaMemcpyDeviceToDevice, cs));
    FL_CUDA_CHECK(cudaMemcpy2DAsync(o32_rows_.get(), sizeof(float) * l.q.len * q_row,
                                    o_acc_.as<float>() + l.q.begin * q_row, sizeof(float) * s_local * q_row,
                                    sizeof(float) * l.q.len * q_row, static_cast<size_t>(p_.batch),
                                    cudaMemcpyDeviceToDevice, cs));
    AttnBwdParams b{};
    b.fwd = launch_params(p_, l, s_local, sp.kv_len, q_.get(), kv, o_.get(), lse_rows_.as<float>(), nullptr, 0);
    b.fwd.o_fp32 = o32_rows_.as<float>();
    b.dout = dout_.as<uint16_t>() + l.q.begin * q_row;  // O's strides
    b.dq = dq_part_.as<uint16_t>() + l.q.begin * q_row;  // Q's strides
    // dK, dV like the K/V shard held: K rows then V rows, kv_len per batch entry.
    b.dk = dkv_part_.as<uint16_t>() + l.k.begin * kv_row;
    b.dv = dkv_part_.as<uint16_t>() + static_cast<int64_t>(p_.batch) * sp.kv_len * kv_row + l.k.begin * kv_row;
    b.workspace = bws_.get();
    b.workspace_bytes = bws_bytes_;
    b.deterministic = 0;
    bwd_->launch_bwd(b, cs);
    FL_LAUNCH_CHECK("the backward rung of a ring step");
  }
  if (launched) FL_CUDA_CHECK(cudaEventRecord(launched, cs));
}

void RankRing::add_partials(int s, float* dkv) {
  const StepPlan& sp = plan_.steps[s];
  const int s_local = plan_.q_shard.len;
  const int64_t q_row = row_elems(p_.heads_q, p_.head_dim);
  for (const Launch& l : sp.launches) {
    const AddRowsArgs a{dq_acc_.as<float>(), dq_part_.get(), p_.batch, l.q.len, static_cast<int>(q_row),
                        s_local, s_local, l.q.begin, l.q.begin};
    FL_DTYPE_SWITCH(p_.dtype, T, [&] { launch_add_rows<T>(a, compute_.s); });
    FL_LAUNCH_CHECK("add_rows (dQ)");
  }
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  const int64_t v_off = static_cast<int64_t>(p_.batch) * sp.kv_len * kv_row;  // V after K
  for (const Launch& l : sp.launches)
    for (int64_t off : {int64_t{0}, v_off}) {
      const AddRowsArgs a{dkv + off, dkv_part_.as<uint16_t>() + off, p_.batch, l.k.len, static_cast<int>(kv_row),
                          sp.kv_len, sp.kv_len, l.k.begin, l.k.begin};
      FL_DTYPE_SWITCH(p_.dtype, T, [&] { launch_add_rows<T>(a, compute_.s); });
      FL_LAUNCH_CHECK("add_rows (dK, dV)");
    }
}

void RankRing::round_grads(const float* dkv_home) {
  const int64_t kv_elems = 2 * static_cast<int64_t>(p_.batch) * plan_.q_shard.len * row_elems(p_.heads_kv, p_.head_dim);
  FL_DTYPE_SWITCH(p_.dtype, T, [&] {
    launch_round<T>(dq_out_.get(), dq_acc_.as<float>(), q_elems_, compute_.s);
    launch_round<T>(dkv_out_.get(), dkv_home, kv_elems, compute_.s);
  });
  FL_LAUNCH_CHECK("round_kernel (dQ, dK, dV)");
}

// One backward pass over P GPUs: K/V travel as in the forward, the sums of their dK, dV one
// exchange behind them; the host enqueues all of it, then waits.
StepTimes RankRing::backward(int fail_rank) {
  const int P = world_;
  cudaStream_t cs = compute_.s, ms = comm_stream_.s;
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[0], cs));
  FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_it_[0], 0));  // no transfer before the barrier
  FL_CUDA_CHECK(cudaMemsetAsync(dq_acc_.get(), 0, dq_acc_.bytes(), cs));
  FL_CUDA_CHECK(cudaMemsetAsync(dkv_[0].get(), 0, dkv_[0].bytes(), cs));  // step 0: this rank's own shard
  for (int s = 0; s < P; ++s) {
    const StepPlan& sp = plan_.steps[s];
    if (rank_ == fail_rank && s == std::min(1, P - 1)) {
      std::fprintf(stderr, "rank %d: leaving the ring at backward step %d (--fail-rank)\n", rank_, s);
      std::fflush(stderr);
      std::_Exit(kExitCheckFailed);
    }
    DeviceBuffer& cur = s == 0 ? kv_own_ : kv_[s % 2];
    DeviceBuffer& nxt = kv_[(s + 1) % 2];
    float* dcur = dkv_[s % 2].as<float>();
    float* dnxt = dkv_[(s + 1) % 2].as<float>();
    // K/V of the next step, as in the forward pass.
    pass_on_kv(s, cur.get(), nxt.get());

    // The step's backward, then the sums, once the travelling sums of the shard held are here
    // (step 0: this rank's own, zeroed above).
    if (s > 0) FL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev_recv_done_[s - 1], 0));
    FL_CUDA_CHECK(cudaEventRecord(ev_step_start_[s], cs));
    backward_step(s, cur.get(), ev_compute_done_[s]);
    if (s > 0) FL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev_dkv_recv_[s - 1], 0));
    FL_CUDA_CHECK(cudaEventRecord(ev_acc_start_[s], cs));
    add_partials(s, dcur);
    FL_CUDA_CHECK(cudaEventRecord(ev_merge_done_[s], cs));

    // The sums go on with their shard (the last step: home to its owner, rank + 1), and the next
    // shard's arrive (the last step: this rank's own). P = 1: they are home already.
    if (P > 1) {
      const int send_rows = sp.kv_len;
      const int recv_rows = s + 1 < P ? sp.recv_len : plan_.q_shard.len;
      FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_merge_done_[s], 0));
      FL_NCCL_CHECK(ncclGroupStart());
      if (send_rows > 0)
        FL_NCCL_CHECK(ncclSend(dcur, 2 * size_t(p_.batch) * send_rows * kv_row, ncclFloat, sp.send_to,
                               comm_->get(), ms));
      if (recv_rows > 0)
        FL_NCCL_CHECK(ncclRecv(dnxt, 2 * size_t(p_.batch) * recv_rows * kv_row, ncclFloat, sp.recv_from,
                               comm_->get(), ms));
      FL_NCCL_CHECK(ncclGroupEnd());
      comm_->wait_ready("ncclSend/ncclRecv of a shard's dK, dV sums");
    }
    FL_CUDA_CHECK(cudaEventRecord(ev_dkv_recv_[s], ms));
  }
  if (P > 1) FL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev_dkv_recv_[P - 1], 0));
  round_grads(dkv_[P > 1 ? P % 2 : 0].as<float>());
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  comm_->wait_event(ev_it_[1], "the ring's backward pass");
  comm_->wait_event(ev_dkv_recv_[P - 1], "the ring's last exchange of dK, dV");

  StepTimes t;
  t.total = elapsed_ms(ev_it_[0], ev_it_[1]);
  for (int s = 0; s < P; ++s) {
    t.compute.push_back(elapsed_ms(ev_step_start_[s], ev_compute_done_[s]));
    t.merge.push_back(elapsed_ms(ev_acc_start_[s], ev_merge_done_[s]));  // the fp32 sums
    // Exposed: the compute stream's waits, for the step's K/V and for the travelling sums.
    t.exposed.push_back(elapsed_ms(s == 0 ? ev_it_[0] : ev_merge_done_[s - 1], ev_step_start_[s]) +
                        elapsed_ms(ev_compute_done_[s], ev_acc_start_[s]));
    t.transfer.push_back(elapsed_ms(ev_comm_start_[s], ev_dkv_recv_[s]));
  }
  return t;
}

void RankRing::start_replay_backward() {
  FL_CUDA_CHECK(cudaMemsetAsync(dq_acc_.get(), 0, dq_acc_.bytes(), compute_.s));
  FL_CUDA_CHECK(cudaMemsetAsync(dkv_[0].get(), 0, dkv_[0].bytes(), compute_.s));
  FL_CUDA_CHECK(cudaStreamSynchronize(compute_.s));
}

// The same backward steps without the ring (--replay): each reads its K/V shard where its first
// owner keeps it and adds its partial dK, dV into that owner's sums (dkv_[0], this rank's home).
StepTimes RankRing::replay_backward(const std::vector<std::unique_ptr<RankRing>>& ranks) {
  cudaStream_t cs = compute_.s;
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[0], cs));
  for (int s = 0; s < world_; ++s) {
    RankRing& owner = *ranks[plan_.steps[s].src_rank];
    FL_CUDA_CHECK(cudaEventRecord(ev_step_start_[s], cs));
    backward_step(s, owner.kv_own_.get(), ev_compute_done_[s]);
    add_partials(s, owner.dkv_[0].as<float>());
    FL_CUDA_CHECK(cudaEventRecord(ev_merge_done_[s], cs));
  }
  return replay_times();
}

void RankRing::finish_replay_backward() {
  round_grads(dkv_[0].as<float>());
  FL_CUDA_CHECK(cudaStreamSynchronize(compute_.s));
}

}  // namespace fl::ring
