/// @file cuda_check.h
/// @brief Checked CUDA calls: every failure names the call, the file and the line.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace fl {

/// Thrown by FL_CUDA_CHECK / FL_LAUNCH_CHECK.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

/// Builds the message "file:line: call failed: cudaErrorX (text)" and throws.
[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);

}  // namespace fl

/// Checks a CUDA runtime call; throws fl::CudaError with the call and file:line.
#define FL_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    cudaError_t fl_err_ = (call);                                             \
    if (fl_err_ != cudaSuccess) ::fl::throw_cuda_error(fl_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch that just happened (configuration errors); throws like
/// FL_CUDA_CHECK. Asynchronous faults surface at the next synchronizing call.
#define FL_LAUNCH_CHECK(kernel_name)                                                       \
  do {                                                                                     \
    cudaError_t fl_err_ = cudaGetLastError();                                              \
    if (fl_err_ != cudaSuccess)                                                            \
      ::fl::throw_cuda_error(fl_err_, "launch of " kernel_name, __FILE__, __LINE__);       \
  } while (0)
