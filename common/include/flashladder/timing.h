/// @file timing.h
/// @brief Launching a rung once and timing its launches: the launch and time steps of every
/// kind of case (cases.h), and the one timer of the runner, the tour and the bench.
#pragma once

#include <functional>

#include "flashladder/device_problem.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"

namespace fl {

/// Runs @p r once on @p dp and synchronizes (throws CudaError on failure).
void launch_once(const Rung& r, DeviceProblem& dp);

/// Runs the backward pass of @p r (Rung::launch_bwd) once on @p g and synchronizes.
void launch_bwd_once(const Rung& r, DeviceGrads& g);

/// Times @p iters calls of @p launch (after @p warmup), L2 flushed before each, CUDA events
/// around each; median, min, max.
Timing time_launches(const std::function<void()>& launch, const DeviceInfo& dev, int iters, int warmup);

/// Times @p iters launches (after @p warmup), L2 flushed before each; median.
Timing time_rung(const Rung& r, DeviceProblem& dp, const DeviceInfo& dev, int iters, int warmup);

/// Times @p iters backward launches of @p r on @p g (the forward pass is not in the time).
Timing time_rung_bwd(const Rung& r, DeviceGrads& g, const DeviceInfo& dev, int iters, int warmup);

}  // namespace fl
