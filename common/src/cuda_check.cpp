#include "flashladder/cuda_check.h"

#include <sstream>

namespace fl {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  std::ostringstream s;
  s << file << ":" << line << ": " << call << " failed: " << cudaGetErrorName(e) << " ("
    << cudaGetErrorString(e) << ")";
  throw CudaError(e, s.str());
}

}  // namespace fl
