/// @file steps/10_warp_specialized/traits.h
/// @brief Rung 10: rung 09's tiles plus a producer warpgroup. Plain C++ (no CUDA).
///
/// One block = 1 producer warpgroup (TMA only, 24 registers per thread after setmaxnreg) + 2
/// consumer warpgroups (64 query rows each, 240 registers per thread):
/// @code
///   // clang-format off
///   registers per SM   128 x 24 (producer) + 2 x 128 x 240 (consumers) = 64512 <= 65536
///   shared memory      rung 09's tiles + one "empty" mbarrier per stage
///   // clang-format on
/// @endcode
/// The K/V tiles are rung 09's per head_dim, so rung 09 on the same shape is this rung with
/// warp specialization turned off (the `no-ws` variant).
#pragma once

#include "../09_wgmma_tma/traits.h"

namespace fl::hopper10 {

/// Registers per thread after setmaxnreg (FlashAttention-3's split for 2 consumer warpgroups).
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 2 * 128 * kConsumerRegs <= 65536,
              "the register file of one SM holds the three warpgroups");

/// Rung 09's tiles with a producer warpgroup in front of its two consumer warpgroups.
template <int HEAD_DIM, int BLOCK_N, int STAGES>
struct WsTiles : hopper09::WgmmaTiles<HEAD_DIM, 2, BLOCK_N, STAGES> {
  using Base = hopper09::WgmmaTiles<HEAD_DIM, 2, BLOCK_N, STAGES>;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  /// mbarriers: Q, then per stage "K landed", "V landed", "stage empty".
  static constexpr int kBarrierBytes = 8 * (1 + 3 * STAGES);
  static constexpr int kSmemBytes =
      Base::kQBytes + 2 * STAGES * Base::kKVBytes + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= hopper09::kSmemOptinSm90, "must fit the 227 KB of an sm_90 block");
  static_assert(Base::kAccRegs <= kConsumerRegs - 40,
                "S of block n+1, P of block n (still read by its wgmma) and O fit the consumers");
};

/// The rung's tiles: rung 09's (traits.h there gives the reasons).
template <int HEAD_DIM>
struct HopperWsTiles;
template <>
struct HopperWsTiles<64> : WsTiles<64, 128, 3> {};
template <>
struct HopperWsTiles<128> : WsTiles<128, 128, 2> {};
template <>
struct HopperWsTiles<256> : WsTiles<256, 64, 2> {};

/// The three FlashAttention-3 ideas this rung adds to rung 09; each `--variant` turns one off.
struct Features {
  bool pingpong;  ///< consumer warpgroups take turns issuing their GEMMs (named barriers)
  bool overlap;   ///< softmax of block n under the S = Q K^T of block n + 1, same warpgroup
};

}  // namespace fl::hopper10
