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

// One pass over P GPUs: at every step the transfer of the next shard on the comm stream, under
// the compute of this one on the compute stream; the host enqueues all of it, then waits.
StepTimes RankRing::forward(int fail_rank) {
  const int P = world_;
  cudaStream_t cs = compute_.s, ms = comm_stream_.s;
  const int64_t kv_row = row_elems(p_.heads_kv, p_.head_dim);
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[0], cs));
  FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_it_[0], 0));  // no transfer before the barrier
  for (int s = 0; s < P; ++s) {
    const StepPlan& sp = plan_.steps[s];
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
    if (s > 0) FL_CUDA_CHECK(cudaStreamWaitEvent(ms, ev_compute_done_[s - 1], 0));
    FL_CUDA_CHECK(cudaEventRecord(ev_comm_start_[s], ms));
    if (sp.send_len > 0 || sp.recv_len > 0) {
      FL_NCCL_CHECK(ncclGroupStart());
      if (sp.send_len > 0)
        FL_NCCL_CHECK(ncclSend(cur.get(), bytes16(2 * int64_t{p_.batch} * sp.send_len * kv_row),
                               ncclUint8, sp.send_to, comm_->get(), ms));
      if (sp.recv_len > 0)
        FL_NCCL_CHECK(ncclRecv(nxt.get(), bytes16(2 * int64_t{p_.batch} * sp.recv_len * kv_row),
                               ncclUint8, sp.recv_from, comm_->get(), ms));
      FL_NCCL_CHECK(ncclGroupEnd());
      comm_->wait_ready("ncclSend/ncclRecv of a K/V shard");
    }
    FL_CUDA_CHECK(cudaEventRecord(ev_recv_done_[s], ms));

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

// One step's compute: the plan's launches of the forward rung, then their merges.
void RankRing::compute_step(int s, const void* kv, cudaEvent_t launched) {
  const StepPlan& sp = plan_.steps[s];
  cudaStream_t cs = compute_.s;
  int64_t lse_off = 0;
  std::vector<MergeArgs> merges;
  for (const Launch& l : sp.launches) {
    float* lse_part = lse_part_.as<float>() + lse_off;
    const AttnParams a = launch_params(p_, l, plan_.q_shard.len, sp.kv_len, q_.get(), kv,
                                       o_part_.get(), lse_part, ws_.get(), ws_bytes_);
    fwd_.launch(a, cs);
    FL_LAUNCH_CHECK("the forward rung of a ring step");
    for (const MergePiece& m : l.merges)
      merges.push_back(MergeArgs{o_part_.get(), lse_part, o_acc_.as<float>(), lse_.as<float>(),
                                 m.last ? o_.get() : nullptr, m.first, p_.batch, p_.heads_q,
                                 p_.head_dim, plan_.q_shard.len, l.q.begin, l.q.len, m.rows.begin,
                                 m.rows.len});
    lse_off += static_cast<int64_t>(p_.batch) * p_.heads_q * l.q.len;
  }
  if (launched) FL_CUDA_CHECK(cudaEventRecord(launched, cs));
  for (const MergeArgs& m : merges) {
    FL_DTYPE_SWITCH(p_.dtype, T, [&] { launch_merge<T>(m, cs); });
    FL_LAUNCH_CHECK("merge_partial");
  }
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
  FL_CUDA_CHECK(cudaEventRecord(ev_it_[1], cs));
  FL_CUDA_CHECK(cudaEventSynchronize(ev_it_[1]));
  StepTimes t;
  t.total = elapsed_ms(ev_it_[0], ev_it_[1]);
  for (int s = 0; s < world_; ++s) {
    t.compute.push_back(elapsed_ms(ev_step_start_[s], ev_compute_done_[s]));
    t.merge.push_back(elapsed_ms(ev_compute_done_[s], ev_merge_done_[s]));
  }
  return t;
}

}  // namespace fl::ring
