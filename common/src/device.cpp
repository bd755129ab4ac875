#include "flashladder/device.h"

#include <algorithm>
#include <cstring>

namespace fl {

namespace {

/// "13.0" from CUDA's 13000.
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

/// Why cudaGetDeviceCount found no device, in a user's words. The runtime answers
/// cudaErrorInsufficientDriver both when no NVIDIA driver is installed (a machine without a GPU)
/// and when the installed one is older than this build's runtime; cudaDriverGetVersion tells
/// them apart (it gives 0 when there is no driver).
std::string no_device_why(cudaError_t e) {
  if (e == cudaSuccess || e == cudaErrorNoDevice) return "the NVIDIA driver sees no CUDA GPU";
  if (e == cudaErrorInsufficientDriver) {
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    if (driver == 0) return "no NVIDIA driver on this machine, so no CUDA GPU";
    return "the NVIDIA driver supports CUDA " + cuda_version(driver) +
           ", older than this build's CUDA " + cuda_version(runtime) +
           " runtime: update the driver";
  }
  return std::string(cudaGetErrorString(e));
}

}  // namespace

bool has_device(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = no_device_why(e);
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return true;
}

int device_sm_count() {
  static int counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();  // no device: not an error here
    return 0;
  }
  if (dev < 0 || dev >= 64) dev = 0;
  if (counts[dev] == 0 && cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    counts[dev] = 0;
  }
  return counts[dev];
}

DeviceInfo query_device() {
  std::string why;
  if (!has_device(&why)) throw NoDevice("no usable CUDA device (" + why + ")");
  int dev = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  FL_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize;
  d.mem_total = prop.totalGlobalMem;
  d.smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
  d.regs_per_sm = prop.regsPerMultiprocessor;
  int v = 0, mem_clock = 0, bus = 0;
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  d.smem_per_block_optin = v;
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, dev));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, dev));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev));
  size_t free_b = 0, total_b = 0;
  FL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  d.mem_free = free_b;
  FL_CUDA_CHECK(cudaRuntimeGetVersion(&d.cuda_runtime_version));
  FL_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  fill_peaks(&d, mem_clock, bus);
  return d;
}

// ---- DeviceBuffer -----------------------------------------------------------
DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) FL_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes) {
  FL_CUDA_CHECK(cudaMemcpy(ptr_, host, std::min(bytes, bytes_), cudaMemcpyHostToDevice));
}
void DeviceBuffer::download(void* host, size_t bytes) const {
  FL_CUDA_CHECK(cudaMemcpy(host, ptr_, std::min(bytes, bytes_), cudaMemcpyDeviceToHost));
}
void DeviceBuffer::poison() {
  if (ptr_) FL_CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes_));
}

// ---- EventTimer ---------------------------------------------------------------
EventTimer::EventTimer() {
  FL_CUDA_CHECK(cudaEventCreate(&a_));
  FL_CUDA_CHECK(cudaEventCreate(&b_));
}
EventTimer::~EventTimer() {
  cudaEventDestroy(a_);
  cudaEventDestroy(b_);
}
void EventTimer::start(cudaStream_t s) { FL_CUDA_CHECK(cudaEventRecord(a_, s)); }
float EventTimer::stop(cudaStream_t s) {
  FL_CUDA_CHECK(cudaEventRecord(b_, s));
  FL_CUDA_CHECK(cudaEventSynchronize(b_));
  float ms = 0;
  FL_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
  return ms;
}

// ---- L2Flusher ----------------------------------------------------------------
L2Flusher::L2Flusher(int l2_bytes) : buf_(static_cast<size_t>(std::max(l2_bytes, 1 << 20)) * 2) {}
void L2Flusher::flush(cudaStream_t s) { flush_buffer(buf_.get(), buf_.bytes(), s); }
void L2Flusher::flush_buffer(void* buf, size_t bytes, cudaStream_t s) {
  FL_CUDA_CHECK(cudaMemsetAsync(buf, 0, bytes, s));
}

// ---- resources ----------------------------------------------------------------
KernelResources kernel_resources(const std::string& name, const void* func, int block_threads,
                                 size_t dynamic_smem) {
  KernelResources k;
  k.name = name;
  k.block_threads = block_threads;
  k.dynamic_smem = dynamic_smem;
  cudaFuncAttributes a;
  FL_CUDA_CHECK(cudaFuncGetAttributes(&a, func));
  k.registers = a.numRegs;
  k.local_bytes = static_cast<int>(a.localSizeBytes);
  k.static_smem = static_cast<int>(a.sharedSizeBytes);
  FL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k.max_blocks_per_sm, func, block_threads, dynamic_smem));
  int dev = 0, max_threads_sm = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&max_threads_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  const int warps = (block_threads + 31) / 32;
  k.occupancy = max_threads_sm > 0 ? static_cast<double>(k.max_blocks_per_sm * warps * 32) / max_threads_sm : 0;
  return k;
}

}  // namespace fl
