/// @file steps/12_ring_attention/ring.cu
/// @brief Rung 12: ring attention over P GPUs, one process per GPU.
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
/// combine (merge_kernel.cuh). The process model: rank 0 writes the NCCL unique id to a file,
/// the other ranks poll for it; the communicator is non-blocking, so every wait polls the GPU
/// and the communicator against --timeout and aborts (ncclCommAbort) instead of hanging.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "flashladder/runner.h"
#include "flashladder/static_switch.h"
#include "merge_kernel.cuh"
#include "nccl_check.h"
#include "ring_options.h"
#include "ring_params.h"
#include "ring_plan.h"

#ifndef FL_GIT_SHA
#define FL_GIT_SHA "unknown"
#endif

namespace fl::ring {
namespace {

using Clock = std::chrono::steady_clock;

/// A wait that ran past --timeout (a peer that died or never came).
class Timeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Input the rung cannot run, found after parsing (exit 2).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The communicator of this process, for the fatal path (abort before exit).
ncclComm_t g_comm = nullptr;

struct Deadline {
  Clock::time_point at;
  explicit Deadline(double seconds)
      : at(Clock::now() +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool passed() const { return Clock::now() > at; }
};

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// ---- the NCCL unique id through a file ------------------------------------------------------

/// Rank 0: the id, written whole or not at all (a temporary file renamed over the path), so a
/// reader never sees half of it. An existing file is refused: it may be an earlier run's id.
void write_id_file(const std::string& path, const ncclUniqueId& id) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0)
    throw Unsupported("--id-file " + path +
                      " already exists (an earlier run's id?): remove it or give a fresh path");
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  const bool ok =
      std::fwrite(&id, sizeof id, 1, f) == 1 && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    throw std::runtime_error("cannot write the NCCL id to " + path + ": " + why);
  }
}

/// Ranks 1..P-1: poll for the id file until --timeout.
ncclUniqueId read_id_file(const std::string& path, double timeout_s, int rank) {
  const Deadline deadline(timeout_s);
  for (;;) {
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      ncclUniqueId id;
      const size_t got = std::fread(&id, sizeof id, 1, f);
      std::fclose(f);
      if (got == 1) return id;
    }
    if (deadline.passed())
      throw Timeout("rank " + std::to_string(rank) + ": no NCCL id in " + path + " after " +
                    seconds_text(timeout_s) + " s (did rank 0 start?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// ---- the communicator -----------------------------------------------------------------------

/// A non-blocking NCCL communicator and the waits that never hang: each polls the GPU (an
/// event) and the communicator's asynchronous error until --timeout.
class Communicator {
 public:
  Communicator(int world, int rank, const ncclUniqueId& id, double timeout_s)
      : rank_(rank), timeout_s_(timeout_s) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // calls return ncclInProgress instead of blocking: we poll
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, world, id, rank, &cfg);
    if (comm_) g_comm = comm_;
    if (r != ncclSuccess && r != ncclInProgress)
      throw_nccl_error(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    wait_ready("ncclCommInitRankConfig (every rank must join)");
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t get() const { return comm_; }

  /// After a call that may return ncclInProgress: poll until the communicator is ready.
  void wait_ready(const char* what) const {
    const Deadline deadline(timeout_s_);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      FL_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) throw_nccl_error(state, what, __FILE__, __LINE__);
      if (deadline.passed())
        throw Timeout("rank " + std::to_string(rank_) + ": " + what + " not done after " +
                      seconds_text(timeout_s_) + " s");
      std::this_thread::yield();
    }
  }

  /// Waits for @p ev (recorded after NCCL work) without blocking in the driver: a peer that
  /// died leaves the NCCL kernel spinning, and a cudaEventSynchronize would never return.
  void wait_event(cudaEvent_t ev, const char* what) const {
    const Deadline deadline(timeout_s_);
    for (;;) {
      const cudaError_t e = cudaEventQuery(ev);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) FL_CUDA_CHECK(e);
      ncclResult_t state = ncclSuccess;
      FL_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress)
        throw_nccl_error(state, what, __FILE__, __LINE__);
      if (deadline.passed())
        throw Timeout("rank " + std::to_string(rank_) + ": " + what + " not done after " +
                      seconds_text(timeout_s_) + " s (a peer died or hangs?)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  /// The orderly end: flush, then free. Every rank calls it at the same point.
  void close() {
    if (!comm_) return;
    FL_NCCL_CHECK(ncclCommFinalize(comm_));
    wait_ready("ncclCommFinalize");
    FL_NCCL_CHECK(ncclCommDestroy(comm_));
    comm_ = nullptr;
    g_comm = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
  int rank_;
  double timeout_s_;
};

// ---- one rank's ring ------------------------------------------------------------------------

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

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  FL_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

/// 16-bit elements -> bytes.
size_t bytes16(int64_t elems) {
  return static_cast<size_t>(elems) * 2;
}

/// At least one byte, so that an empty shard still gets a valid (unused) allocation.
DeviceBuffer alloc(size_t bytes) {
  return DeviceBuffer(std::max<size_t>(bytes, 256));
}

class RankRing {
 public:
  RankRing(const Problem& p, Sharding sh, int world, int rank, const Rung& fwd,
           const DeviceInfo& dev, Communicator* comm, const HostInputs& in)
      : p_(p),
        world_(world),
        rank_(rank),
        fwd_(fwd),
        dev_(dev),
        comm_(comm),
        plan_(plan_rank(sh, p.causal, p.seqlen_q, world, rank)),
        max_len_(max_shard_len(sh, p.seqlen_q, world)),
        ev_step_start_(world),
        ev_compute_done_(world),
        ev_merge_done_(world),
        ev_comm_start_(world),
        ev_recv_done_(world),
        ev_it_(2) {
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

  /// The chunk problem of a launch (for supports() and workspace sizes).
  Problem chunk(const Launch& l) const {
    Problem lp = p_;
    lp.seqlen_q = l.q.len;
    lp.seqlen_k = l.k.len;
    lp.causal = l.causal;
    lp.softmax_scale = p_.scale();
    return lp;
  }

  /// "" if the forward rung runs every launch of this rank's plan, else its reason.
  std::string why_not() const {
    for (const StepPlan& sp : plan_.steps)
      for (const Launch& l : sp.launches) {
        const Problem lp = chunk(l);
        const std::string why = supports(fwd_, lp, dev_);
        if (!why.empty())
          return fwd_.label() + " cannot run the step problem " + lp.describe() + ": " + why;
      }
    return "";
  }

  /// Fills O with NaN (so a row never written shows in the check).
  void poison_output() { FL_CUDA_CHECK(cudaMemsetAsync(o_.get(), 0xff, o_.bytes(), compute_.s)); }

  /// All ranks meet (a one-float all-reduce on the compute stream) before a timed forward.
  void barrier() {
    FL_NCCL_CHECK(
        ncclAllReduce(sync_.get(), sync_.get(), 1, ncclFloat, ncclSum, comm_->get(), compute_.s));
    comm_->wait_ready("ncclAllReduce (barrier)");
  }

  /// The compute of step @p s on the compute stream, on the K/V shard at @p kv (K then V rows,
  /// the step's kv_len of them): the forward rung on each launch of the step, each writing its
  /// partial O and LSE, then rung 08's combine of each into the running (O, LSE), one merge per
  /// piece of the plan (a row's first merge starts the fp32 accumulator, its last writes the
  /// 16-bit O). @p launched (may be null) is recorded between the two: the end of the step's
  /// compute.
  void compute_step(int s, const void* kv, cudaEvent_t launched) {
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

  /// --replay: this rank's whole pass with no transfer, alone on the GPU; waits for it and
  /// returns its compute and merge times per step (a replay has no exposed communication and no
  /// transfer: those stay empty). At step s it reads the
  /// K/V shard where the rank that started with it keeps it (@p ranks[src_rank]'s own shard, on
  /// this same GPU): the bytes the ring would have brought.
  StepTimes replay(const std::vector<std::unique_ptr<RankRing>>& ranks) {
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

  /// --replay: this rank's O rows and LSE into the whole O and LSE (see gather).
  void collect(std::vector<uint16_t>* o_all, std::vector<float>* lse_all) const {
    put_rows(p_, plan_.q_shard, o_, lse_, o_all, lse_all);
  }

  /// One whole forward pass, enqueued; waits for it (polling) and returns its event times.
  /// @p fail_rank (testing): that rank leaves the process at step 1 (step 0 for P = 1).
  StepTimes forward(int fail_rank) {
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
      t.exposed.push_back(
          elapsed_ms(s == 0 ? ev_it_[0] : ev_merge_done_[s - 1], ev_step_start_[s]));
      t.transfer.push_back(elapsed_ms(ev_comm_start_[s], ev_recv_done_[s]));
    }
    return t;
  }

  /// Rank 0 receives every rank's O rows and LSE; the others send theirs. Returns (rank 0)
  /// the whole O [batch, N, heads_q, head_dim] and LSE [batch, heads_q, N]; NaN where a row
  /// never arrived.
  void gather(std::vector<uint16_t>* o_all, std::vector<float>* lse_all) {
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

  /// The whole O [batch, N, heads_q, head_dim] and LSE [batch, heads_q, N] before any rank's
  /// rows are put in: NaN everywhere, so a row that never arrives fails the check.
  static void start_whole(const Problem& p, std::vector<uint16_t>* o_all,
                          std::vector<float>* lse_all) {
    o_all->assign(static_cast<size_t>(p.batch) * p.seqlen_q * row_elems(p.heads_q, p.head_dim),
                  0xffff);  // NaN in fp16 and bf16
    lse_all->assign(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q, NAN);
  }

  /// The O rows and LSE of shard @p sh (device buffers @p o, @p lse) into the whole O and LSE.
  static void put_rows(const Problem& p, const Shard& sh, const DeviceBuffer& o,
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

  /// Every rank's floats to rank 0 (equal counts); rank 0 gets them by rank.
  std::vector<std::vector<float>> gather_floats(const std::vector<float>& mine) {
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
    for (int r = 1; r < world_; ++r)
      out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
    return out;
  }

  /// Bytes this rank sends at step @p s.
  double send_bytes(int s) const {
    return 2.0 * 2.0 * p_.batch * plan_.steps[s].send_len * row_elems(p_.heads_kv, p_.head_dim);
  }

  /// Bytes of device memory a rank of this ring needs (rank 0 also receives every shard).
  static size_t device_bytes(const Problem& p, Sharding sh, int world, int rank) {
    const int s_local = shard_of_rank(sh, p.seqlen_q, world, rank).len;
    const int max_len = max_shard_len(sh, p.seqlen_q, world);
    const double q = static_cast<double>(p.batch) * s_local * row_elems(p.heads_q, p.head_dim);
    const double kv = 2.0 * p.batch * max_len * row_elems(p.heads_kv, p.head_dim);
    const double own = 2.0 * p.batch * s_local * row_elems(p.heads_kv, p.head_dim);
    double need =
        q * (2 + 2 + 2 + 4) + (2 * kv + own) * 2 + 2.0 * p.batch * p.heads_q * s_local * 4;
    if (rank == 0)
      need += (world - 1) * (2.0 * p.batch * max_len * row_elems(p.heads_q, p.head_dim) +
                             4.0 * p.batch * p.heads_q * max_len);
    return static_cast<size_t>(need);
  }

 private:
  Problem p_;
  int world_, rank_;
  const Rung& fwd_;
  DeviceInfo dev_;
  Communicator* comm_;
  RankPlan plan_;
  int max_len_;
  int64_t q_elems_ = 0, lse_elems_ = 0;
  DeviceBuffer q_, o_, o_part_, o_acc_, lse_, lse_part_, ws_, sync_;
  DeviceBuffer kv_own_;  ///< this rank's K then V rows: what step 0 computes on and sends
  DeviceBuffer kv_[2];   ///< the shards received, in turn
  size_t ws_bytes_ = 0;
  Stream compute_, comm_stream_;
  Events ev_step_start_, ev_compute_done_, ev_merge_done_, ev_comm_start_, ev_recv_done_, ev_it_;
};

// ---- the program ---------------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The forward rung of each step: --forward-rung, else rung 10 on sm_90 where it runs the
/// problem, else rung 06. Throws Unsupported with both reasons when neither runs it.
const Rung& pick_forward_rung(int forced, const Problem& p, const DeviceInfo& dev) {
  const Registry& reg = registry();
  auto usable = [&](int n, std::string* why) -> const Rung* {
    const Rung* r = reg.find(n);
    if (!r) {
      *why = "rung " + std::to_string(n) + " is not built (see -DFL_RUNGS)";
      return nullptr;
    }
    if (!r->not_implemented.empty()) {
      *why = r->label() + " is not implemented in this tree (lab starter)";
      return nullptr;
    }
    // Probe both masks: a ring has causal (diagonal) and unmasked steps.
    for (bool causal : {false, true}) {
      Problem q = p;
      q.causal = causal;
      *why = supports(*r, q, dev);
      if (!why->empty()) {
        *why = r->label() + ": " + *why;
        return nullptr;
      }
    }
    return r;
  };
  std::string why10, why06;
  if (forced != 0) {
    std::string why;
    if (const Rung* r = usable(forced, &why)) return *r;
    throw Unsupported("--forward-rung " + std::to_string(forced) + ": " + why);
  }
  if (dev.cc_major == 9 && dev.cc_minor == 0)
    if (const Rung* r = usable(10, &why10)) return *r;
  if (const Rung* r = usable(6, &why06)) return *r;
  throw Unsupported(
      "no forward rung runs this problem here: " + (why10.empty() ? "" : why10 + "; ") + why06);
}

/// Errors of the ring's O against the single-GPU rung's O, over every element.
struct Agreement {
  double max_abs = 0, rel_fro = 0;
};
Agreement agreement(DType t, const std::vector<uint16_t>& ring,
                    const std::vector<uint16_t>& single) {
  double d2 = 0, r2 = 0;
  Agreement a;
  for (size_t i = 0; i < ring.size(); ++i) {
    const double x = from_bits(ring[i], t), y = from_bits(single[i], t);
    a.max_abs = std::max(a.max_abs, std::abs(x - y));
    if (!std::isfinite(x) || !std::isfinite(y)) a.max_abs = INFINITY;
    d2 += (x - y) * (x - y);
    r2 += y * y;
  }
  a.rel_fro = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  return a;
}

/// Everything rank 0 reports.
struct Report {
  Problem p;
  Sharding sharding = Sharding::zigzag;
  int world = 1;
  bool replay = false;      ///< --replay: the world's ranks in turn on one GPU (each timed alone)
  bool shared_gpu = false;  ///< --shared-gpu: the world's ranks at once on one GPU (time-shared)
  std::string forward_label, nccl_version;
  DeviceInfo dev;
  Options opt;
  CheckResult check;
  bool single_ran = false;
  std::string single_skipped;
  CheckResult single_check;
  Agreement vs_single;
  bool vs_single_pass = true;
  Timing single_timing;
  int iters = 0;
  std::vector<double> ring_ms;  ///< per timed iteration: the slowest rank's
  /// [rank][step] medians over the timed iterations (exposed and transfer empty in a replay)
  std::vector<std::vector<double>> compute, exposed, merge, transfer;
  std::vector<int64_t> pairs;      ///< per rank (per batch and head)
  std::vector<double> send_bytes;  ///< per step, rank 0's
};

std::string check_line(const CheckResult& c) {
  char buf[320];
  if (!c.checked) return c.pass ? "not checked (--check none)" : "FAIL: " + c.reason;
  std::snprintf(
      buf, sizeof buf,
      "%s (%s, %zu rows): rel_fro %.3g (tol %.3g), max_abs %.3g (tol %.3g), LSE %.3g (tol %.3g)",
      c.pass ? "PASS" : "FAIL", c.mode.c_str(), c.rows, c.err.rel_fro, c.tol.rel_fro, c.err.max_abs,
      c.tol.max_abs, c.err.lse_max_abs, c.tol.lse_abs);
  std::string s = buf;
  if (!c.pass) s += ": " + c.reason;
  return s;
}

void json_check(Json& j, const char* key, const CheckResult& c) {
  j.begin_object(key);
  check_fields(j, c);
  j.end_object();
}

void json_matrix(Json& j, const char* key, const std::vector<std::vector<double>>& m) {
  j.begin_array(key);
  for (const auto& row : m) {
    j.begin_array();
    for (double v : row) j.kv(nullptr, v);
    j.end_array();
  }
  j.end_array();
}

std::string to_json(const Report& r) {
  const double ring = median(r.ring_ms);
  const double one = r.single_timing.timed ? r.single_timing.median_ms : 0;
  Json j;
  j.begin_object()
      .kv("schema", "flashladder.ring/1")
      .kv("rung", "12_ring_attention")
      .kv("variant", sharding_name(r.sharding))
      .kv("gpus", r.replay || r.shared_gpu ? 1 : r.world)
      .kv("ranks", r.world)
      .kv("replay", r.replay)
      .kv("shared_gpu", r.shared_gpu)
      .kv("forward_rung", r.forward_label)
      .kv("nccl", r.nccl_version)
      .kv("date", utc_now())
      .kv("git_sha", FL_GIT_SHA)
      .kv("input", input_kind_name(r.opt.input))
      .kv("seed", static_cast<long long>(r.opt.seed));
  j.begin_object("problem")
      .kv("batch", r.p.batch)
      .kv("seqlen", r.p.seqlen_q)
      .kv("heads_q", r.p.heads_q)
      .kv("heads_kv", r.p.heads_kv)
      .kv("head_dim", r.p.head_dim)
      .kv("dtype", dtype_name(r.p.dtype))
      .kv("causal", r.p.causal)
      .kv("softmax_scale", static_cast<double>(r.p.scale()))
      .end_object();
  j.raw("device", device_json(r.dev));
  json_check(j, "check", r.check);
  j.begin_object("single")
      .kv("ran", r.single_ran)
      .kv("skipped", r.single_skipped)
      .kv("ring_vs_single_max_abs", r.vs_single.max_abs)
      .kv("ring_vs_single_rel_fro", r.vs_single.rel_fro)
      .kv("ring_vs_single_pass", r.vs_single_pass);
  json_check(j, "check", r.single_check);
  j.kv("median_ms", one).end_object();
  const double eff = (ring > 0 && one > 0) ? one / (r.world * ring) : 0.0;
  const double tflops = ring > 0 ? attention_flops(r.p) / (ring * 1e-3) / 1e12 : 0.0;
  const double lo = r.ring_ms.empty() ? 0.0 : *std::min_element(r.ring_ms.begin(), r.ring_ms.end());
  const double hi = r.ring_ms.empty() ? 0.0 : *std::max_element(r.ring_ms.begin(), r.ring_ms.end());
  // A replay times each rank alone on one GPU: a bound, not the ring's time, so other key names.
  // Ranks sharing one GPU time-share it: their ring time is no P-GPU time, so no efficiency.
  struct Keys {
    const char *median, *min, *max, *eff, *tflops;
  };
  const Keys k = r.replay
                     ? Keys{"slowest_rank_median_ms", "slowest_rank_min_ms", "slowest_rank_max_ms",
                            "compute_bound_efficiency", "compute_bound_tflops"}
                     : Keys{"ring_median_ms", "ring_min_ms", "ring_max_ms", "scaling_efficiency",
                            "ring_tflops"};
  j.begin_object("timing")
      .kv("iters", r.iters)
      .kv("warmup", r.opt.warmup)
      .kv(k.median, ring)
      .kv(k.min, lo)
      .kv(k.max, hi)
      .kv("single_median_ms", one);
  if (!r.shared_gpu) j.kv(k.eff, eff).kv(k.tflops, tflops);
  j.end_object();
  j.begin_array("pairs_per_rank");
  for (int64_t x : r.pairs) j.kv(nullptr, static_cast<long long>(x));
  j.end_array();
  j.kv("imbalance", imbalance(r.pairs));
  j.begin_array("send_bytes_per_step");
  for (double b : r.send_bytes) j.kv(nullptr, b);
  j.end_array();
  j.begin_object("steps_ms");  // [rank][step], medians over the timed iterations
  json_matrix(j, "compute", r.compute);
  json_matrix(j, "merge", r.merge);
  if (!r.replay) {  // a replay transfers nothing
    json_matrix(j, "exposed_comm", r.exposed);
    json_matrix(j, "transfer", r.transfer);
  }
  j.end_object();
  j.end_object();
  return j.str();
}

std::string format_report(const Report& r) {
  std::string s;
  char buf[512];
  const int C = num_chunks(r.sharding, r.world);
  if (r.replay)
    std::snprintf(buf, sizeof buf,
                  "12_ring_attention[%s]: the %d ranks of a ring replayed on one GPU, in turn (no "
                  "NCCL transfer), forward rung %s\n",
                  sharding_name(r.sharding), r.world, r.forward_label.c_str());
  else if (r.shared_gpu)
    std::snprintf(buf, sizeof buf,
                  "12_ring_attention[%s]: ring attention over %d ranks sharing one GPU (NCCL %s, "
                  "each rank its own NCCL host), forward rung %s\n"
                  "         the ranks time-share the GPU: the times below are no %d-GPU ring's\n",
                  sharding_name(r.sharding), r.world, r.nccl_version.c_str(),
                  r.forward_label.c_str(), r.world);
  else
    std::snprintf(
        buf, sizeof buf,
        "12_ring_attention[%s]: ring attention over %d GPU%s (NCCL %s), forward rung %s\n",
        sharding_name(r.sharding), r.world, r.world == 1 ? "" : "s", r.nccl_version.c_str(),
        r.forward_label.c_str());
  s += buf;
  std::snprintf(
      buf, sizeof buf,
      "problem: %s\ndevice:  %s (%s, %d SMs)%s\n"
      "shards:  %d chunks of ~%d tokens; %s\n",
      r.p.describe().c_str(), r.dev.name.c_str(), r.dev.arch().c_str(), r.dev.sm_count,
      r.replay || r.shared_gpu ? "" : " per rank", C, r.p.seqlen_q / C,
      r.sharding == Sharding::zigzag ? "rank r holds chunks r and 2P-1-r" : "rank r holds chunk r");
  s += buf;
  s += "work:    (query, key) pairs per rank:";
  for (int64_t x : r.pairs) s += " " + std::to_string(x);
  std::snprintf(buf, sizeof buf, " (max/mean %.3f)\n", imbalance(r.pairs));
  s += buf;
  s += "check:   " + check_line(r.check) + "\n";
  if (r.single_ran) {
    s += "single:  " + r.forward_label + " on all " + std::to_string(r.p.seqlen_q) +
         " tokens: " + check_line(r.single_check) + "\n";
    if (r.check.checked) {
      std::snprintf(
          buf, sizeof buf, "         ring vs single GPU: max_abs %.3g, rel_fro %.3g: %s\n",
          r.vs_single.max_abs, r.vs_single.rel_fro,
          r.vs_single_pass ? "within the ring's tolerance" : "FAIL: outside the ring's tolerance");
      s += buf;
    }
  } else if (!r.single_skipped.empty()) {
    s += "single:  skipped: " + r.single_skipped + "\n";
  }
  const double ring = median(r.ring_ms);
  if (ring > 0) {
    if (r.replay)
      std::snprintf(buf, sizeof buf,
                    "time:    the slowest rank's pass %.4f ms (median of %d; each rank alone on "
                    "this GPU, no transfer)",
                    ring, r.iters);
    else if (r.shared_gpu)
      std::snprintf(buf, sizeof buf,
                    "time:    ring %.4f ms (median of %d, the slowest rank each time; the ranks "
                    "time-share one GPU)",
                    ring, r.iters);
    else
      std::snprintf(
          buf, sizeof buf,
          "time:    ring %.4f ms (median of %d, the slowest rank each time), %.1f TFLOP/s", ring,
          r.iters, attention_flops(r.p) / (ring * 1e-3) / 1e12);
    s += buf;
    if (r.single_timing.timed && r.shared_gpu) {
      std::snprintf(buf, sizeof buf, "; one GPU %.4f ms (no scaling efficiency: one GPU shared)",
                    r.single_timing.median_ms);
      s += buf;
    } else if (r.single_timing.timed) {
      std::snprintf(buf, sizeof buf,
                    r.replay ? "; one GPU %.4f ms\n         if every transfer hid: T1 / (P x "
                               "slowest) = %.3f, the scaling efficiency's compute bound"
                             : "; one GPU %.4f ms; scaling efficiency T1 / (P x TP) = %.3f",
                    r.single_timing.median_ms, r.single_timing.median_ms / (r.world * ring));
      s += buf;
    }
    s += "\n";
    s += "per step (ms, medians; the slowest rank's value):\n";
    std::snprintf(buf, sizeof buf, "  %4s %10s %14s %10s %10s %12s\n", "step", "compute",
                  "exposed comm", "merge", "transfer", "bytes sent");
    s += buf;
    for (int st = 0; st < r.world; ++st) {
      double c = 0, e = 0, m = 0, t = 0;
      for (size_t rk = 0; rk < r.compute.size(); ++rk) {
        c = std::max(c, r.compute[rk][st]);
        m = std::max(m, r.merge[rk][st]);
        if (r.replay) continue;  // a replay has no exposed communication and no transfer
        e = std::max(e, r.exposed[rk][st]);
        t = std::max(t, r.transfer[rk][st]);
      }
      if (r.replay)  // nothing is sent: the bytes are those the ring would send
        std::snprintf(buf, sizeof buf, "  %4d %10.4f %14s %10.4f %10s %12s\n", st, c, "-", m, "-",
                      format_bytes(r.send_bytes[st]).c_str());
      else
        std::snprintf(buf, sizeof buf, "  %4d %10.4f %14.4f %10.4f %10.4f %12s\n", st, c, e, m, t,
                      format_bytes(r.send_bytes[st]).c_str());
      s += buf;
    }
  }
  return s;
}

/// Rank 0, --single 1: the same forward rung on the whole sequence on one GPU, checked, compared
/// with the ring's output @p o_ring and timed: the one-GPU time of the scaling efficiency.
/// Skipped, with the reason, where the rung cannot run it or it does not fit.
void run_single(const Options& opt, const Rung& fwd, const DeviceInfo& dev, const HostInputs& in,
                const std::vector<uint16_t>& o_ring, Report* rep) {
  const Problem& p = opt.problem;
  std::string why = supports(fwd, p, dev);
  const size_t ws = fwd.workspace_bytes ? fwd.workspace_bytes(p) : 0;
  if (why.empty()) {
    size_t free_b = 0, total_b = 0;
    FL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need1 = DeviceProblem::device_bytes(p, ws);
    if (static_cast<double>(need1) > 0.9 * static_cast<double>(free_b))
      why = "needs " + format_bytes(static_cast<double>(need1)) + " of GPU memory, " +
            format_bytes(static_cast<double>(free_b)) + " free";
  }
  if (!why.empty()) {
    rep->single_skipped = why;
    return;
  }
  DeviceProblem dp(p, in, ws, opt.seed);
  dp.poison_outputs();
  launch_once(fwd, dp);
  rep->single_ran = true;
  if (opt.check != CheckMode::none) {
    const std::vector<uint16_t> o_single = dp.download_o();
    rep->single_check = check_output(p, in, o_single, dp.download_lse(), opt.check, opt.seed);
    rep->vs_single = agreement(p.dtype, o_ring, o_single);
    rep->vs_single_pass = rep->vs_single.max_abs <= rep->check.tol.max_abs &&
                          rep->vs_single.rel_fro <= rep->check.tol.rel_fro;
  } else {
    rep->single_check.pass = true;
  }
  rep->single_timing = time_rung(fwd, dp, dev, opt.iters, opt.warmup);
}

/// Rank 0's end: the report (and --json); the exit code of the checks.
int finish(const Report& rep, const Options& opt, const std::string& prog) {
  std::printf("%s", format_report(rep).c_str());
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << to_json(rep) << "\n";
    if (!f) {
      std::fprintf(stderr, "%s: error: --json: cannot write '%s'\n", prog.c_str(),
                   opt.json_path.c_str());
      return kExitBadInput;
    }
  }
  const bool pass =
      rep.check.pass && (!rep.single_ran || (rep.single_check.pass && rep.vs_single_pass));
  return pass ? kExitOk : kExitCheckFailed;
}

/// --replay P: every rank of a P-rank ring in this one process on this one GPU, rank after
/// rank, each step reading the K/V shard where its first owner keeps it (no NCCL, no transfer).
/// The plan, the chunk launches, the running merge and the gather run as on P GPUs, so the
/// check covers them where P GPUs are not at hand; the transfers, the streams' overlap and the
/// process model are what only --gpus P runs. Each rank's pass is timed alone on the GPU, as it
/// would run on its own GPU: the slowest one is the ring's time if every transfer hid.
void replay_ring(const Options& opt, Sharding sh, int P, const Rung& fwd, const DeviceInfo& dev,
                 const HostInputs& in, Report* rep, std::vector<uint16_t>* o_ring) {
  const Problem& p = opt.problem;
  std::vector<std::unique_ptr<RankRing>> ranks;
  for (int r = 0; r < P; ++r) {
    ranks.push_back(std::make_unique<RankRing>(p, sh, P, r, fwd, dev, nullptr, in));
    const std::string why = ranks.back()->why_not();
    if (!why.empty()) throw Unsupported(why);
  }
  for (int s = 0; s < P; ++s) rep->send_bytes.push_back(ranks[0]->send_bytes(s));
  // 1. One checked pass of every rank on a NaN-poisoned O.
  std::vector<float> lse_ring;
  RankRing::start_whole(p, o_ring, &lse_ring);
  for (auto& r : ranks) {
    r->poison_output();
    r->replay(ranks);
    r->collect(o_ring, &lse_ring);
  }
  if (opt.check != CheckMode::none)
    rep->check = check_output(p, in, *o_ring, lse_ring, opt.check, opt.seed);
  else
    rep->check.pass = true;
  // 2. Timed passes, rank after rank: per iteration the slowest rank's pass; per (rank, step)
  // the medians of compute and merge.
  for (int i = 0; i < opt.warmup; ++i)
    for (auto& r : ranks) r->replay(ranks);
  std::vector<std::vector<std::vector<double>>> compute(P, std::vector<std::vector<double>>(P)),
      merge = compute;
  rep->iters = opt.iters;
  for (int i = 0; i < opt.iters; ++i) {
    double slowest = 0;
    for (int r = 0; r < P; ++r) {
      const StepTimes t = ranks[r]->replay(ranks);
      slowest = std::max(slowest, static_cast<double>(t.total));
      for (int s = 0; s < P; ++s) {
        compute[r][s].push_back(t.compute[s]);
        merge[r][s].push_back(t.merge[s]);
      }
    }
    rep->ring_ms.push_back(slowest);
  }
  for (int r = 0; r < P; ++r) {
    rep->compute.emplace_back();
    rep->merge.emplace_back();
    for (int s = 0; s < P; ++s) {
      rep->compute[r].push_back(median(compute[r][s]));
      rep->merge[r].push_back(median(merge[r][s]));
    }
  }
}

/// The rank's whole job (or, with --replay, the whole ring's). Returns its exit code; throws on
/// failure.
int run_rank(const RingOptions& ro, const Options& opt, Sharding sh, int rank, int device,
             const std::string& prog) {
  const Problem& p = opt.problem;
  const bool replay = ro.replay > 0;
  const int P = replay ? ro.replay : ro.gpus;
  FL_CUDA_CHECK(cudaSetDevice(device));
  const DeviceInfo dev = query_device();
  const Rung& fwd = pick_forward_rung(ro.forward_rung, p, dev);
  size_t need = 0;
  for (int r = replay ? 0 : rank; r < (replay ? P : rank + 1); ++r)
    need += RankRing::device_bytes(p, sh, P, r);
  if (static_cast<double>(need) > 0.9 * static_cast<double>(dev.mem_free))
    throw Unsupported((replay ? std::string("the replayed ring") : "rank " + std::to_string(rank)) +
                      " needs " + format_bytes(static_cast<double>(need)) + " of GPU memory, " +
                      format_bytes(static_cast<double>(dev.mem_free)) + " is free");
  int nccl_code = 0;
  FL_NCCL_CHECK(ncclGetVersion(&nccl_code));
  const std::string nccl_version = std::to_string(nccl_code / 10000) + "." +
                                   std::to_string(nccl_code / 100 % 100) + "." +
                                   std::to_string(nccl_code % 100);

  // The communicator (not for --replay): rank 0 makes the id and (P > 1) publishes it through
  // the file. The communicator and the ring live on the heap and are released only on success:
  // on a failure the exception reaches ring_main, which aborts the communicator and exits at
  // once. Destructors on that path would free device memory, and cudaFree waits for the GPU,
  // where an NCCL kernel may spin forever on a peer that died.
  Communicator* comm = nullptr;
  if (!replay) {
    ncclUniqueId id;
    if (rank == 0) {
      FL_NCCL_CHECK(ncclGetUniqueId(&id));
      if (P > 1) write_id_file(ro.id_file, id);
    } else {
      id = read_id_file(ro.id_file, ro.timeout_s, rank);
    }
    comm = new Communicator(P, rank, id, ro.timeout_s);
    if (rank == 0 && P > 1) unlink(ro.id_file.c_str());  // everyone has joined: it has served
  }

  // Every rank makes the same whole inputs from the seed and keeps its rows.
  const HostInputs in = make_inputs(p, opt.input, opt.seed);
  Report rep;
  rep.p = p;
  rep.sharding = sh;
  rep.world = P;
  rep.replay = replay;
  rep.shared_gpu = ro.shared_gpu;
  rep.forward_label = fwd.label();
  rep.nccl_version = nccl_version;
  rep.dev = dev;
  rep.opt = opt;
  rep.pairs = pairs_per_rank(sh, p.causal, p.seqlen_q, P);
  std::vector<uint16_t> o_ring;
  if (replay) {
    replay_ring(opt, sh, P, fwd, dev, in, &rep, &o_ring);
  } else {
    auto* ring_owned = new RankRing(p, sh, P, rank, fwd, dev, comm, in);
    RankRing& ring = *ring_owned;
    const std::string why = ring.why_not();
    if (!why.empty()) throw Unsupported(why);  // every rank runs the same problems: all say so
    for (int s = 0; s < P; ++s) rep.send_bytes.push_back(ring.send_bytes(s));

    // 1. One checked pass on a NaN-poisoned O.
    ring.poison_output();
    ring.barrier();
    ring.forward(ro.fail_rank);
    std::vector<float> lse_ring;
    if (opt.check != CheckMode::none) ring.gather(&o_ring, &lse_ring);
    if (rank == 0 && opt.check != CheckMode::none)
      rep.check = check_output(p, in, o_ring, lse_ring, opt.check, opt.seed);
    else
      rep.check.pass = true;  // --check none (and ranks != 0: rank 0 decides)

    // 2. Timed passes: all ranks meet before each; per step: compute, exposed comm, merge.
    for (int i = 0; i < opt.warmup; ++i) {
      ring.barrier();
      ring.forward(-1);
    }
    std::vector<float> mine;  // [iters totals][P compute][P exposed][P merge][P transfer]
    std::vector<std::vector<std::vector<double>>> samples(4, std::vector<std::vector<double>>(P));
    std::vector<float> totals;
    for (int i = 0; i < opt.iters; ++i) {
      ring.barrier();
      const StepTimes t = ring.forward(-1);
      totals.push_back(t.total);
      for (int s = 0; s < P; ++s) {
        samples[0][s].push_back(t.compute[s]);
        samples[1][s].push_back(t.exposed[s]);
        samples[2][s].push_back(t.merge[s]);
        samples[3][s].push_back(t.transfer[s]);
      }
    }
    mine = totals;
    for (int k = 0; k < 4; ++k)
      for (int s = 0; s < P; ++s) mine.push_back(static_cast<float>(median(samples[k][s])));
    const auto all = ring.gather_floats(mine);
    if (rank == 0) {
      rep.iters = opt.iters;
      for (int i = 0; i < opt.iters; ++i) {
        double slowest = 0;
        for (const auto& v : all) slowest = std::max(slowest, static_cast<double>(v[i]));
        rep.ring_ms.push_back(slowest);
      }
      std::vector<std::vector<double>>* dst[4] = {&rep.compute, &rep.exposed, &rep.merge,
                                                  &rep.transfer};
      for (int k = 0; k < 4; ++k)
        for (const auto& v : all)
          dst[k]->emplace_back(v.begin() + opt.iters + k * P, v.begin() + opt.iters + (k + 1) * P);
    }
    delete ring_owned;  // the ring's buffers go: rank 0's single-GPU run has the memory
    comm->close();
    delete comm;
  }
  if (rank != 0) return kExitOk;

  // 3. Rank 0: the same forward rung on the whole sequence on one GPU.
  if (ro.single) run_single(opt, fwd, dev, in, o_ring, &rep);
  return finish(rep, opt, prog);
}

/// Leaves at once with @p code after a failure: the communicator is aborted first (its kernels
/// and proxy threads stop), and no destructor runs that could wait on a GPU a dead peer holds.
[[noreturn]] void die(int code) {
  if (g_comm) ncclCommAbort(g_comm);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

int ring_main(int argc, char** argv) {
  const std::string prog = program_name(argv[0]);
  RingOptions ro;
  const RingParse rp = take_ring_flags(argc, argv, &ro);
  if (!rp.ok) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), rp.error.c_str());
    return kExitBadInput;
  }
  std::vector<const char*> rest;
  for (const std::string& a : rp.rest) rest.push_back(a.c_str());
  Options opt;
  opt.iters = 20;
  opt.warmup = 3;
  const ParseResult pr = parse_cli(static_cast<int>(rest.size()), rest.data(), &opt);
  if (!pr.ok) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), pr.error.c_str());
    return kExitBadInput;
  }
  if (opt.help) {
    std::printf("%s\n%s", usage(prog).c_str(), ring_usage());
    return kExitOk;
  }
  std::string bad = validate(opt.problem);
  Sharding sh = Sharding::zigzag;
  if (bad.empty() && opt.problem.seqlen_q != opt.problem.seqlen_k)
    bad =
        "rung 12 shards one sequence over the ring: --seqlen-q must equal --seqlen-k (use "
        "--seqlen)";
  if (bad.empty() && opt.problem.page_size != 0)
    bad = "rung 12 takes a contiguous K/V (no --page-size)";
  if (bad.empty() && (opt.sweep || opt.deterministic || opt.list || opt.registry_json))
    bad =
        "rung 12 has no --sweep, --deterministic, --list or --registry-json (it is not in the "
        "single-process registry: bin/tour --list lists the rungs it calls)";
  if (bad.empty() && !parse_sharding(opt.variant, &sh))
    bad = "--variant: rung 12 has variants zigzag (default) and contiguous, got '" + opt.variant +
          "'";
  if (!bad.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), bad.c_str());
    return kExitBadInput;
  }
  const int rank = ro.rank < 0 ? 0 : ro.rank;
  const int device = ro.local_rank < 0 ? rank : ro.local_rank;

  // GPUs: none at all is a skip (77); fewer than the ring needs here is bad input (2), or a
  // skip for the tests (--skip-missing-gpus).
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    std::fprintf(stderr, "%s: no usable CUDA device (%s); nothing to run (exit 77 = skipped)\n",
                 prog.c_str(), ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device found");
    return kExitNoDevice;
  }
  const int needed = ro.preflight ? (ro.local_rank >= 0 ? ro.local_rank + 1 : ro.gpus) : device + 1;
  if (count < needed) {
    std::fprintf(stderr, "%s: the ring asks for %d GPU%s on this machine but %d %s visible%s\n",
                 prog.c_str(), needed, needed == 1 ? "" : "s", count, count == 1 ? "is" : "are",
                 ro.skip_missing_gpus ? " (exit 77 = skipped)" : "");
    return ro.skip_missing_gpus ? kExitNoDevice : kExitBadInput;
  }
  if (ro.preflight) return kExitOk;

  try {
    return run_rank(ro, opt, sh, rank, device, prog);
  } catch (const Unsupported& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", prog.c_str(), rank, e.what());
    die(kExitBadInput);
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "%s: rank %d: %s; nothing to run (exit 77 = skipped)\n", prog.c_str(),
                 rank, e.what());
    die(kExitNoDevice);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", prog.c_str(), rank, e.what());
    die(kExitCheckFailed);
  }
}

}  // namespace fl::ring
