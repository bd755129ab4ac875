/// @file steps/12_ring_attention/communicator.h
/// @brief Rung 12's process model: the NCCL unique id passed through a file, and a
/// non-blocking communicator whose every wait polls against --timeout, so a rank whose peer
/// died aborts (ncclCommAbort) instead of hanging.
///
/// Rank 0 calls ncclGetUniqueId and writes the id to --id-file (a temporary file renamed over
/// the path); the other ranks poll for the file. The communicator is made with
/// ncclConfig_t.blocking = 0: every NCCL call may return ncclInProgress, and the waits below
/// poll the GPU (an event) and ncclCommGetAsyncError instead of blocking in the driver.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace fl::ring {

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

/// Rank 0: the id, written whole or not at all (a temporary file renamed over the path), so a
/// reader never sees half of it. An existing file is refused: it may be an earlier run's id.
void write_id_file(const std::string& path, const ncclUniqueId& id);

/// Ranks 1..P-1: poll for the id file until --timeout.
ncclUniqueId read_id_file(const std::string& path, double timeout_s, int rank);

/// A non-blocking NCCL communicator and the waits that never hang: each polls the GPU (an
/// event) and the communicator's asynchronous error until --timeout.
class Communicator {
 public:
  Communicator(int world, int rank, const ncclUniqueId& id, double timeout_s);
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t get() const { return comm_; }

  /// After a call that may return ncclInProgress: poll until the communicator is ready.
  void wait_ready(const char* what) const;

  /// Waits for @p ev (recorded after NCCL work) without blocking in the driver: a peer that
  /// died leaves the NCCL kernel spinning, and a cudaEventSynchronize would never return.
  void wait_event(cudaEvent_t ev, const char* what) const;

  /// The orderly end: flush, then free. Every rank calls it at the same point.
  void close();

 private:
  ncclComm_t comm_ = nullptr;
  int rank_;
  double timeout_s_;
};

/// The fatal path: aborts this process's communicator, if one is open (its kernels and proxy
/// threads stop), so the process can leave without waiting on a GPU a dead peer holds.
void abort_communicator();

}  // namespace fl::ring
