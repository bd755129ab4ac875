/// @file steps/12_ring_attention/nccl_check.h
/// @brief Checked NCCL calls, in the manner of FL_CUDA_CHECK: a failure names the call, the
/// file and the line, NCCL's error string and its last error message.
#pragma once

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace fl::ring {

/// Thrown by FL_NCCL_CHECK and by the waits on a communicator.
class NcclError : public std::runtime_error {
 public:
  NcclError(ncclResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ncclResult_t code() const { return code_; }

 private:
  ncclResult_t code_;
};

/// What a rank's message starts with when NCCL reports a remote error (ncclRemoteError: a peer's
/// process exited or its connection broke): the rank fails because another one did, and the
/// launcher (launch_ring.py) names the rank that failed on its own instead.
constexpr const char* kPeerLeft = "a peer left the ring: ";

/// "file:line: call failed: <ncclGetErrorString> (<ncclGetLastError>)", thrown; kPeerLeft first
/// for a remote error.
[[noreturn]] inline void throw_nccl_error(ncclResult_t r, const char* call, const char* file,
                                          int line) {
  std::string msg = std::string(r == ncclRemoteError ? kPeerLeft : "") + file + ":" + std::to_string(line) +
                    ": " + call + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) msg += std::string(" (") + last + ")";
  throw NcclError(r, msg);
}

}  // namespace fl::ring

/// Checks an NCCL call. ncclInProgress is not an error: the rung's communicators are
/// non-blocking (so that a dead peer can never hang a rank), and a call that returns it must
/// be followed by a wait on the communicator (Communicator::wait_ready in communicator.h).
#define FL_NCCL_CHECK(call)                                            \
  do {                                                                 \
    ncclResult_t fl_nr_ = (call);                                      \
    if (fl_nr_ != ncclSuccess && fl_nr_ != ncclInProgress)             \
      ::fl::ring::throw_nccl_error(fl_nr_, #call, __FILE__, __LINE__); \
  } while (0)
