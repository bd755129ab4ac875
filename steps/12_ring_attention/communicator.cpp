/// @file steps/12_ring_attention/communicator.cpp
/// @brief The NCCL id through a file and the non-blocking communicator (communicator.h).
#include "communicator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "flashladder/cuda_check.h"
#include "nccl_check.h"

namespace fl::ring {
namespace {

using Clock = std::chrono::steady_clock;

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

}  // namespace

// ---- the NCCL unique id through a file ------------------------------------------------------

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

Communicator::Communicator(int world, int rank, const ncclUniqueId& id, double timeout_s)
    : rank_(rank), timeout_s_(timeout_s) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // calls return ncclInProgress instead of blocking: we poll
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, world, id, rank, &cfg);
  if (comm_) g_comm = comm_;
  if (r != ncclSuccess && r != ncclInProgress)
    throw_nccl_error(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  wait_ready("ncclCommInitRankConfig (every rank must join)");
}

void Communicator::wait_ready(const char* what) const {
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

void Communicator::wait_event(cudaEvent_t ev, const char* what) const {
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

void Communicator::close() {
  if (!comm_) return;
  FL_NCCL_CHECK(ncclCommFinalize(comm_));
  wait_ready("ncclCommFinalize");
  FL_NCCL_CHECK(ncclCommDestroy(comm_));
  comm_ = nullptr;
  g_comm = nullptr;
}

void abort_communicator() {
  if (g_comm) ncclCommAbort(g_comm);
}

}  // namespace fl::ring
