/// @file device_problem.h
/// @brief One problem's tensors on the device: the forward's (DeviceProblem) and the backward's
/// (DeviceGrads), with the params that point at them. Every kind of case (cases.h) prepares
/// its run in these; the bench and the tests use them directly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "flashladder/backward.h"
#include "flashladder/device.h"
#include "flashladder/fp8_device.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"

namespace fl {

/// Q, K, V, O, LSE and workspace on the device for one problem, plus the
/// AttnParams that point at them. K/V are laid out in pages when
/// problem.page_size > 0 (pages shuffled through a block table).
class DeviceProblem {
 public:
  /// Allocates and uploads. Throws std::runtime_error with the numbers when the
  /// problem does not fit in free device memory.
  DeviceProblem(const Problem& p, const HostInputs& in, size_t workspace_bytes,
                unsigned long long seed = 1);
  const AttnParams& params() const { return params_; }
  /// Allocates the fp32 copy of O (AttnParams::o_fp32, dense like O) and points params() at it,
  /// for a forward that writes one (Rung::writes_o_fp32) ahead of a backward pass.
  void want_o_fp32();
  /// Fills O, LSE and the fp32 O (when wanted) with NaN (so unwritten elements are caught).
  void poison_outputs();
  /// Dense O [batch, seqlen_q, heads_q, dv] (packed [total_q, ...]) as 16-bit bits.
  std::vector<uint16_t> download_o() const;
  /// The fp32 copy of O (empty unless want_o_fp32 was called).
  std::vector<float> download_o_fp32() const;
  /// LSE [batch, heads_q, seqlen_q] ([heads_q, total_q] for a packed batch).
  std::vector<float> download_lse() const;
  /// Bytes the problem needs on the device (inputs, outputs, workspace).
  static size_t device_bytes(const Problem& p, size_t workspace_bytes);

  /// For an FP8 rung (Rung::fp8_inputs): makes e4m3 copies of Q, K, V (DeviceFp8, quantized
  /// once here; with @p kv_cache, Rung::fp8_kv_cache, of K and V alone) and points params() at
  /// them; params16() keeps the 16-bit inputs.
  void to_fp8(const Fp8Options& o, unsigned long long seed, bool kv_cache = false);
  /// The FP8 copies (null before to_fp8).
  DeviceFp8* fp8() const { return fp8_.get(); }
  /// The 16-bit inputs' params, whatever to_fp8 did.
  const AttnParams& params16() const { return params16_; }

 private:
  Problem p_;
  AttnParams params_{}, params16_{};
  DeviceBuffer q_, k_, v_, o_, lse_, ws_, table_, o32_, cu_q_, cu_k_, docs_, sinks_, used_k_, start_k_;
  std::unique_ptr<DeviceFp8> fp8_;
};

/// The backward pass's own tensors on the device, beside a DeviceProblem's: dO (uploaded), dQ,
/// dK, dV (dense, laid out like Q, K, V) and the backward workspace, plus the AttnBwdParams
/// that point at them and at the forward's Q, K, V, O, LSE. The DeviceProblem must outlive it
/// and have a contiguous K/V (no pages).
class DeviceGrads {
 public:
  /// Allocates and uploads @p dout. Throws std::invalid_argument for a paged problem.
  DeviceGrads(const Problem& p, const DeviceProblem& fwd, const std::vector<uint16_t>& dout,
              size_t workspace_bytes, bool deterministic);
  const AttnBwdParams& params() const { return params_; }
  /// Fills dQ, dK, dV and the workspace with NaN: an element never written, or scratch read
  /// before the backward initialized it, shows up in the check.
  void poison();
  /// Dense dQ, dK, dV as 16-bit bits.
  std::vector<uint16_t> download_dq() const;
  std::vector<uint16_t> download_dk() const;
  std::vector<uint16_t> download_dv() const;
  /// d loss / d sink per query head (empty for a problem without sinks).
  std::vector<float> download_dsinks() const;
  /// Bytes the backward's own tensors need on the device (dO, dQ, dK, dV, workspace).
  static size_t device_bytes(const Problem& p, size_t workspace_bytes);

 private:
  AttnBwdParams params_{};
  DeviceBuffer dout_, dq_, dk_, dv_, ws_, dsinks_;
};

}  // namespace fl
