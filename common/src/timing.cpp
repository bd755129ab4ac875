#include "flashladder/timing.h"

#include <algorithm>
#include <vector>

namespace fl {

void launch_once(const Rung& r, DeviceProblem& dp) {
  r.launch(dp.params(), nullptr);
  FL_CUDA_CHECK(cudaDeviceSynchronize());
}

void launch_bwd_once(const Rung& r, DeviceGrads& g) {
  r.launch_bwd(g.params(), nullptr);
  FL_CUDA_CHECK(cudaDeviceSynchronize());
}

Timing time_rung(const Rung& r, DeviceProblem& dp, const DeviceInfo& dev, int iters, int warmup) {
  return time_launches([&] { r.launch(dp.params(), nullptr); }, dev, iters, warmup);
}

Timing time_rung_bwd(const Rung& r, DeviceGrads& g, const DeviceInfo& dev, int iters, int warmup) {
  return time_launches([&] { r.launch_bwd(g.params(), nullptr); }, dev, iters, warmup);
}

Timing time_launches(const std::function<void()>& launch, const DeviceInfo& dev, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) launch();
  FL_CUDA_CHECK(cudaDeviceSynchronize());
  L2Flusher flusher(dev.l2_bytes);
  EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    flusher.flush();
    timer.start();
    launch();
    ms.push_back(timer.stop());
  }
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.timed = true;
  t.iters = iters;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  return t;
}

}  // namespace fl
