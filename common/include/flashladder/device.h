/// @file device.h
/// @brief Device discovery, device buffers, the event timer and kernel resource reports.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/problem.h"
#include "flashladder/report.h"

namespace fl {

/// Thrown when no usable CUDA device exists (the runner turns it into exit 77).
class NoDevice : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Probes device 0; fills peak rates. Throws NoDevice if there is none.
DeviceInfo query_device();

/// True if a usable CUDA device exists (never throws).
bool has_device(std::string* why = nullptr);

/// Multiprocessors of the current device, asked once per device and then read from a table (a
/// launch's split or grid plan calls it on every call); 0 without a device (never throws). Rungs
/// 08, 15 and 17 plan their grids with it.
int device_sm_count();

/// Owning device allocation (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  /// Fills with NaN bit patterns (0xFF bytes are NaN in fp16, bf16 and fp32).
  void poison();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// CUDA-event timer over a stream.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s = nullptr);
  /// Records the stop event, waits for it, returns milliseconds.
  float stop(cudaStream_t s = nullptr);

 private:
  cudaEvent_t a_{}, b_{};
};

/// Evicts L2 between timed launches by writing a buffer twice its size.
class L2Flusher {
 public:
  explicit L2Flusher(int l2_bytes);
  void flush(cudaStream_t s = nullptr);
  /// What flush() does to its buffer, on any buffer (the package's timing scripts flush the
  /// runner's way through it): @p bytes zeros written at @p buf on @p s by cudaMemsetAsync.
  static void flush_buffer(void* buf, size_t bytes, cudaStream_t s);

 private:
  DeviceBuffer buf_;
};

/// Registers, local memory, shared memory and occupancy of one kernel.
KernelResources kernel_resources(const std::string& name, const void* func, int block_threads,
                                 size_t dynamic_smem);

}  // namespace fl
