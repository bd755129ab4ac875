/// @file steps/12_ring_attention/rank_ring.h
/// @brief One rank of the ring: what it holds on its GPU (its Q shard, its own K/V shard, two
/// receive buffers, the running (O, LSE)), its two streams and its events, and what it does.
/// The schedule of a pass, the lesson, is in ring_schedule.cu; the set-up and the gathers to
/// rank 0 in rank_ring.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "communicator.h"
#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"
#include "flashladder/registry.h"
#include "flashladder/ring_plan.h"

namespace fl::ring {

/// Event times of one forward pass, per step (ms).
struct StepTimes {
  std::vector<float> compute, exposed, merge, transfer;
  float total = 0;
};

/// Owning CUDA stream / events (created and destroyed with checks).
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { FL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};
struct Events {
  std::vector<cudaEvent_t> e;
  explicit Events(size_t n) : e(n, nullptr) {
    for (auto& x : e) FL_CUDA_CHECK(cudaEventCreate(&x));
  }
  ~Events() {
    for (auto x : e)
      if (x) cudaEventDestroy(x);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t operator[](size_t i) const { return e[i]; }
};

/// 16-bit elements -> bytes.
inline size_t bytes16(int64_t elems) {
  return static_cast<size_t>(elems) * 2;
}

/// One rank's ring. With a communicator it runs a pass on its own GPU (forward); without one
/// (--replay) every rank of the ring lives in this process on one GPU, and a rank reads the
/// shards of the others where they keep them (replay).
class RankRing {
 public:
  /// Allocates the rank's buffers and uploads its rows of Q, K and V out of the whole inputs
  /// @p in. @p comm is null for --replay.
  RankRing(const Problem& p, Sharding sh, int world, int rank, const Rung& fwd,
           const DeviceInfo& dev, Communicator* comm, const HostInputs& in);

  /// The chunk problem of a launch (for supports() and workspace sizes).
  Problem chunk(const Launch& l) const;

  /// "" if the forward rung runs every launch of this rank's plan, else its reason.
  std::string why_not() const;

  /// Fills O with NaN (so a row never written shows in the check).
  void poison_output() { FL_CUDA_CHECK(cudaMemsetAsync(o_.get(), 0xff, o_.bytes(), compute_.s)); }

  /// All ranks meet (a one-float all-reduce on the compute stream) before a timed forward.
  void barrier();

  /// The backward of step @p s on the compute stream, on the K/V shard at @p kv: the backward
  /// rung on each launch of the step (the partial dQ, dK, dV in 16 bits), then @p launched (may be
  /// null) recorded.
  void backward_step(int s, const void* kv, cudaEvent_t launched);
  /// Adds step @p s's partials into this rank's fp32 dQ and into the fp32 sums @p dkv (dK then
  /// dV) of the K/V shard it held.
  void add_partials(int s, float* dkv);
  /// Rounds the fp32 dQ and @p dkv_home (this rank's own shard's dK, dV) to 16 bits.
  void round_grads(const float* dkv_home);

  /// The K/V transfer of step @p s on the comm stream (forward and backward): the shard at @p cur
  /// to rank + 1, the next one from rank - 1 into @p nxt, after step s - 1's compute.
  void pass_on_kv(int s, const void* cur, void* nxt);
  /// A replay's end: waits for its last step; the pass's total and each step's compute and merge.
  StepTimes replay_times();

  /// The compute of step @p s on the compute stream, on the K/V shard at @p kv (K then V rows,
  /// the step's kv_len of them): the forward rung on each launch of the step, each writing its
  /// partial O and LSE, then rung 08's combine of each into the running (O, LSE), one merge per
  /// piece of the plan (a row's first merge starts the fp32 accumulator, its last writes the
  /// 16-bit O). @p launched (may be null) is recorded between the two: the end of the step's
  /// compute.
  void compute_step(int s, const void* kv, cudaEvent_t launched);

  /// One whole forward pass, enqueued; waits for it (polling) and returns its event times.
  /// @p fail_rank (testing): that rank leaves the process at step 1 (step 0 for P = 1).
  StepTimes forward(int fail_rank);

  /// --replay: this rank's whole pass with no transfer, alone on the GPU; waits for it and
  /// returns its compute and merge times per step (a replay has no exposed communication and no
  /// transfer: those stay empty). At step s it reads the
  /// K/V shard where the rank that started with it keeps it (@p ranks[src_rank]'s own shard, on
  /// this same GPU): the bytes the ring would have brought.
  StepTimes replay(const std::vector<std::unique_ptr<RankRing>>& ranks);

  /// --replay: this rank's O rows and LSE into the whole O and LSE (see gather).
  void collect(std::vector<uint16_t>* o_all, std::vector<float>* lse_all) const;

  /// Rank 0 receives every rank's O rows and LSE; the others send theirs. Returns (rank 0)
  /// the whole O [batch, N, heads_q, head_dim] and LSE [batch, heads_q, N]; NaN where a row
  /// never arrived.
  void gather(std::vector<uint16_t>* o_all, std::vector<float>* lse_all);

  /// The whole O [batch, N, heads_q, head_dim] and LSE [batch, heads_q, N] before any rank's
  /// rows are put in: NaN everywhere, so a row that never arrives fails the check.
  static void start_whole(const Problem& p, std::vector<uint16_t>* o_all,
                          std::vector<float>* lse_all);

  /// The O rows and LSE of shard @p sh (device buffers @p o, @p lse) into the whole O and LSE.
  static void put_rows(const Problem& p, const Shard& sh, const DeviceBuffer& o,
                       const DeviceBuffer& lse, std::vector<uint16_t>* o_all,
                       std::vector<float>* lse_all);

  /// Every rank's floats to rank 0 (equal counts); rank 0 gets them by rank.
  std::vector<std::vector<float>> gather_floats(const std::vector<float>& mine);

  /// Bytes this rank sends at step @p s.
  double send_bytes(int s) const;

  // ---- the backward pass (--backward; ring_schedule.cu) ---------------------------------------

  /// Makes this rank ready for backward passes with rung @p bwd: its rows of @p dout_whole (dO of
  /// the whole sequence), the gradients' buffers, and from now on forward passes that keep O in
  /// fp32 (the D of every step's backward reads the final O, before its rounding), their launches
  /// cut to @p key_cap keys (-1: forward_key_cap of the sequence; 0: uncut).
  void enable_backward(const Rung& bwd, const std::vector<uint16_t>& dout_whole, int key_cap = -1);
  /// The keys per launch of the forward (0: uncut).
  int forward_key_cap() const { return fcap_; }

  /// "" if the backward rung runs every launch of this rank's plan, else its reason.
  std::string why_not_backward() const;

  /// One whole backward pass after a forward pass, enqueued; waits for it and returns its event
  /// times (merge: the fp32 sums of the step's partial gradients; exposed: the compute stream's
  /// waits for K/V and for the travelling dK, dV). @p fail_rank as forward's.
  StepTimes backward(int fail_rank);

  /// --replay: zeroes this rank's dQ and the dK, dV of its own K/V shard, before any rank's
  /// replay_backward (each adds into the owner's sums).
  void start_replay_backward();
  /// --replay: this rank's backward steps alone on the GPU, each reading the K/V shard where its
  /// first owner keeps it and adding its partial dK, dV into that owner's sums; waits for it.
  StepTimes replay_backward(const std::vector<std::unique_ptr<RankRing>>& ranks);
  /// --replay: after every rank's replay_backward, rounds this rank's gradients to 16 bits.
  void finish_replay_backward();

  /// --replay: this rank's dQ rows and its shard's dK, dV rows into the whole gradients.
  void collect_grads(std::vector<uint16_t>* dq_all, std::vector<uint16_t>* dk_all,
                     std::vector<uint16_t>* dv_all) const;
  /// Rank 0 receives every rank's dQ rows and its shard's dK, dV rows; the others send theirs.
  /// Returns (rank 0) the whole dQ, dK, dV; NaN where rows never arrived.
  void gather_grads(std::vector<uint16_t>* dq_all, std::vector<uint16_t>* dk_all,
                    std::vector<uint16_t>* dv_all);

  /// The whole dQ, dK, dV before any rank's rows are put in: NaN everywhere.
  static void start_whole_grads(const Problem& p, std::vector<uint16_t>* dq_all,
                                std::vector<uint16_t>* dk_all, std::vector<uint16_t>* dv_all);

  /// Bytes this rank sends at backward step @p s: K/V, and the dK, dV sums of the shard it held.
  double backward_send_bytes(int s) const;

  /// Bytes of device memory the backward adds to a rank (enable_backward).
  static size_t backward_device_bytes(const Problem& p, Sharding sh, int world, int rank);

  /// Bytes of device memory a rank of this ring needs (rank 0 also receives every shard).
  static size_t device_bytes(const Problem& p, Sharding sh, int world, int rank);

 private:
  Problem p_;
  int world_, rank_;
  const Rung& fwd_;
  DeviceInfo dev_;
  Communicator* comm_;
  RankPlan plan_;
  /// The forward's plan: plan_, or with a backward to follow (enable_backward) plan_ with every
  /// launch cut to forward_key_cap keys, so the fp32 O that D comes from stays exact enough.
  RankPlan fplan_;
  int fcap_ = 0;
  int max_len_;
  int64_t q_elems_ = 0, lse_elems_ = 0;
  DeviceBuffer q_, o_, o_part_, o_acc_, lse_, lse_part_, ws_, sync_;
  DeviceBuffer kv_own_;  ///< this rank's K then V rows: what step 0 computes on and sends
  DeviceBuffer kv_[2];   ///< the shards received, in turn
  size_t ws_bytes_ = 0;
  // The backward pass (enable_backward): its rung, dO's rows, the fp32 sums (dQ; dK then V of
  // the shard held, travelling, in turn), the step's 16-bit partials, the rounded results, the
  // dense copies of a launch's LSE and fp32 O rows that the rung reads, and its workspace.
  const Rung* bwd_ = nullptr;
  DeviceBuffer dout_, dq_acc_, dq_part_, dkv_part_, dq_out_, dkv_out_, lse_rows_, o32_rows_, bws_;
  /// The forward's launches' O before their 16-bit rounding (AttnParams::o_fp32, dense per launch):
  /// what the merges read when a backward follows, so the kept fp32 O, and D, carry no rounding.
  DeviceBuffer o_part32_;
  DeviceBuffer dkv_[2];
  size_t bws_bytes_ = 0;
  Stream compute_, comm_stream_;
  Events ev_step_start_, ev_compute_done_, ev_merge_done_, ev_comm_start_, ev_recv_done_, ev_it_;
  Events ev_acc_start_, ev_dkv_recv_;  ///< backward: the sums' start (after the wait), dK/dV in
};

}  // namespace fl::ring
