/// @file tests/cpu/hopper_probe.cu
/// @brief Two kernels that use the Hopper wrappers of common/include/flashladder/hopper.cuh the way
/// rungs 09 and 10 do, compiled for sm_90a in the test build and never launched: the CPU test
/// tests/cpu/test_hopper_sass.cpp reads their SASS with cuobjdump and checks that each wrapper
/// became the Hopper instruction it stands for (HGMMA, UTMALDG, SYNCS, USETMAXREG, BAR.ARV), that
/// nothing spills, and (by building at all) that ptxas did not serialize the wgmmas or ignore
/// setmaxnreg (fl_hopper_target turns those reports into build errors). They probe instruction
/// selection; they are not attention kernels, and nothing checks their numbers. The register-A
/// (RS) wgmma of O += P V is not probed here: rung 09 uses it, and the same test checks it in
/// rung 09's own compiled kernels (steps/09_wgmma_tma).
///
/// probe_ring_kernel: one CTA = 3 warpgroups in FA3's roles (Shah et al., 2024, section 3.1),
/// K/V through a 2-stage mbarrier ring:
/// @code
///   // clang-format off
///   warpgroup 0    producer   setmaxnreg.dec 24; one thread: Q once, then per K/V block j:
///                             wait empty[j%2] (parity ((j/2)&1)^1), expect_tx, TMA K_j, V_j
///   warpgroups 1-2 consumers  setmaxnreg.inc 240; per block j: wait full[j%2] (parity (j/2)&1),
///                             S = Q_w K_j^T  (SS wgmma m64n64k16 x 4 k-steps, head_dim 64)
///                             arrive on empty[j%2]; after the loop, named barriers, store the
///                             last S (the softmax and O += P V are left out)
///   // clang-format on
/// @endcode
/// probe_p_smem_kernel: one warpgroup; P written to shared memory by the threads (FA3's path when
/// P does not stay in registers), which needs fence.proxy.async before wgmma reads it; 2D and
/// 3D TMA loads; two wgmma groups in flight, the first awaited with wait_group 1.
/// probe_dq_writer_kernel: FlashAttention-3's backward hands dQ to the TMA unit: the threads leave
/// an fp32 tile in shared memory (proxy fence, barrier), one thread adds it into global memory
/// with cp.reduce.async.bulk (UBLKRED), commits the bulk group and waits until the tile is read.
#include <cuda.h>

#include "flashladder/dtype.cuh"
#include "flashladder/hopper.cuh"

namespace fl::hopper_probe {

using namespace fl::hopper;
namespace wg = fl::wgmma;

constexpr int kConsumers = 2;                                   // consumer warpgroups
constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // 384
constexpr int kBlockM = 64 * kConsumers;  // Q rows: 64 per consumer warpgroup (wgmma's M)
constexpr int kBlockN = 64;               // keys per K/V tile
constexpr int kHeadDim = 64;              // one 128-byte column block
constexpr int kStages = 2;                // K/V ring depth
constexpr int kKSteps = kHeadDim / 16;    // k-steps of S = Q K^T
constexpr int kPVSteps = kBlockN / 16;    // k-steps of O = P V
constexpr uint32_t kTileBytes = kBlockN * kHeadDim * 2;

/// The tiles, each 1024-byte aligned (the 128B swizzle pattern repeats every 1024 bytes, and a
/// descriptor's base offset is 0 only for tiles that start on that boundary).
struct alignas(1024) RingSmem {
  __half Q[kBlockM * kHeadDim];           // 128 rows x 128 B: consumer c reads rows 64c..64c+63
  __half K[kStages][kBlockN * kHeadDim];  // 64 keys x 128 B, K-major for S = Q K^T
  __half V[kStages][kBlockN * kHeadDim];  // 64 keys x 128 B: loaded with K, not read (no P V)
  uint64_t q_full;                        // Q landed
  uint64_t full[kStages];                 // K_j and V_j landed (TMA complete_tx)
  uint64_t empty[kStages];                // both consumers are done with stage j
};
static_assert(sizeof(RingSmem::Q) % 1024 == 0 && kTileBytes % 1024 == 0, "tiles stay aligned");

/// S = Q_c K^T for this consumer's 64 rows (both operands K-major in shared memory).
__device__ __forceinline__ void qk_gemm(float (&S_reg)[kBlockN / 2], const __half* Q_smem,
                                        const __half* K_smem, int c) {
  wgmma_fence_operand(S_reg);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    const uint64_t desc_q = desc_kmajor(reinterpret_cast<const char*>(Q_smem) +
                                        wg::sw128_kmajor_offset(kBlockM, 64 * c, kk));
    const uint64_t desc_k = desc_kmajor(reinterpret_cast<const char*>(K_smem) +
                                        wg::sw128_kmajor_offset(kBlockN, 0, kk));
    wgmma_ss<__half, kBlockN>(S_reg, desc_q, desc_k, /*scale_d=*/kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operand(S_reg);
}

__global__ void __launch_bounds__(kThreads, 1)
    probe_ring_kernel(const __grid_constant__ CUtensorMap map_q,
                      const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, float* S_gmem, int n_blocks) {
  // Dynamic shared memory (more than the 48 KB a static array may take), launched with
  // sizeof(RingSmem) + 1024 bytes: the base is only guaranteed 16-byte aligned, so round it up
  // to the 1024 bytes the 128B swizzle needs.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  RingSmem& s = *reinterpret_cast<RingSmem*>(smem_raw + (1024 - smem_addr(smem_raw) % 1024) % 1024);
  const int batch = blockIdx.z, head = blockIdx.y, m_block = blockIdx.x;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    mbarrier_init(smem_addr(&s.q_full), 1);  // one arrival: the producer's arrive.expect_tx
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(smem_addr(&s.full[st]), 1);
      mbarrier_init(smem_addr(&s.empty[st]), kConsumers);  // one arrival per consumer warpgroup
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  const int wg_index = warpgroup_index();
  if (wg_index == 0) {
    // Producer: gives its registers away; one thread issues every load.
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(smem_addr(&s.q_full), sizeof(s.Q));
      tma_load_4d(smem_addr(s.Q), &map_q, smem_addr(&s.q_full), 0, head, m_block * kBlockM, batch);
#pragma unroll 1
      for (int j = 0; j < n_blocks; ++j) {
        const int st = j % kStages;
        const uint32_t round = j / kStages;
        mbarrier_wait_parity(smem_addr(&s.empty[st]), (round & 1) ^ 1);  // round 0: at once
        const uint32_t full = smem_addr(&s.full[st]);
        mbarrier_arrive_expect_tx(full, 2 * kTileBytes);
        tma_load_4d(smem_addr(s.K[st]), &map_k, full, 0, head, j * kBlockN, batch);
        tma_load_4d(smem_addr(s.V[st]), &map_v, full, 0, head, j * kBlockN, batch);
      }
    }
  } else {
    setmaxnreg_inc<240>();
    const int c = wg_index - 1;  // consumer 0 or 1: Q rows 64c .. 64c+63
    mbarrier_wait_parity(smem_addr(&s.q_full), 0);

    // S of the last block is stored after the loop: it keeps every block's QK^T live.
    float S_reg[kBlockN / 2];
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) S_reg[i] = 0.0f;
#pragma unroll 1
    for (int j = 0; j < n_blocks; ++j) {
      const int st = j % kStages;
      mbarrier_wait_parity(smem_addr(&s.full[st]), (j / kStages) & 1);
      qk_gemm(S_reg, s.Q, s.K[st], c);
      // This warpgroup's wgmmas have read stage st (wait_group 0): release it to the producer.
      if (threadIdx.x % kWarpgroupThreads == 0) mbarrier_arrive(smem_addr(&s.empty[st]));
    }

    // The consumers only: the producer warpgroup is not held up.
    named_barrier_sync(1, kConsumers * kWarpgroupThreads);
    const int t = threadIdx.x - kWarpgroupThreads;
    float* out = S_gmem + ((static_cast<size_t>(batch) * gridDim.y + head) * gridDim.x + m_block) *
                              (kConsumers * kWarpgroupThreads * (kBlockN / 2));
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) out[i * kConsumers * kWarpgroupThreads + t] = S_reg[i];

    // FA3's ping-pong hand-off in miniature: consumer 0 signals, consumer 1 waits for it.
    if (c == 0) {
      named_barrier_arrive(2, kConsumers * kWarpgroupThreads);
    } else {
      named_barrier_sync(2, kConsumers * kWarpgroupThreads);
    }
  }
}

struct alignas(1024) PSmem {
  __half P[64 * kBlockN];  // written by the threads, 128B-swizzled as wgmma expects
  __half V[kBlockN * kHeadDim];
  __half K[kBlockN * kHeadDim];
  uint64_t full;
};

__global__ void __launch_bounds__(kWarpgroupThreads, 1)
    probe_p_smem_kernel(const __grid_constant__ CUtensorMap map_v2d,
                        const __grid_constant__ CUtensorMap map_k3d, const float* P_gmem,
                        float* O_gmem) {
  __shared__ PSmem s;
  const uint32_t full = smem_addr(&s.full);
  if (threadIdx.x == 0) {
    mbarrier_init(full, 1);
    fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(full, 2 * kTileBytes);
    tma_load_2d(smem_addr(s.V), &map_v2d, full, 0, blockIdx.x * kBlockN);
    tma_load_3d(smem_addr(s.K), &map_k3d, full, 0, blockIdx.y, blockIdx.x * kBlockN);
  }

  // Each thread writes 8 consecutive P values (one 16-byte chunk) of a 64 x 64 tile, at its
  // swizzled place: generic-proxy stores that the tensor cores (async proxy) will read.
  const float* src = P_gmem + blockIdx.x * 64 * kBlockN;
  for (int chunk = threadIdx.x; chunk < 64 * kBlockN / 8; chunk += kWarpgroupThreads) {
    uint32_t packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      packed[i] = pack2<__half>(src[8 * chunk + 2 * i], src[8 * chunk + 2 * i + 1]);
    char* dst = reinterpret_cast<char*>(s.P) + wg::sw128(chunk * 16);
    *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  fence_proxy_async_smem();  // order those stores before the wgmma reads of P
  named_barrier_sync(1, kWarpgroupThreads);
  mbarrier_wait_parity(full, 0);

  float O_reg[kHeadDim / 2], X_reg[kBlockN / 2];
  wgmma_fence_operand(O_reg);
  wgmma_fence_operand(X_reg);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPVSteps; ++kk) {  // O = P V, both from shared memory
    const uint64_t desc_p =
        desc_kmajor(reinterpret_cast<const char*>(s.P) + wg::sw128_kmajor_offset(64, 0, kk));
    const uint64_t desc_v = desc_mnmajor(
        reinterpret_cast<const char*>(s.V) + wg::sw128_mnmajor_offset(kBlockN, 0, kk), kBlockN);
    wgmma_ss<__half, kHeadDim, 1>(O_reg, desc_p, desc_v, kk > 0);
  }
  wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {  // X = P K^T, a second group in flight
    const uint64_t desc_p =
        desc_kmajor(reinterpret_cast<const char*>(s.P) + wg::sw128_kmajor_offset(64, 0, kk));
    const uint64_t desc_k =
        desc_kmajor(reinterpret_cast<const char*>(s.K) + wg::sw128_kmajor_offset(kBlockN, 0, kk));
    wgmma_ss<__half, kBlockN>(X_reg, desc_p, desc_k, kk > 0);
  }
  wgmma_commit();
  wgmma_wait<1>();  // the first group (O) is done, the second may still run
  wgmma_fence_operand(O_reg);
  float* out = O_gmem + blockIdx.x * kWarpgroupThreads * (kHeadDim + kBlockN) / 2;
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) out[i * kWarpgroupThreads + threadIdx.x] = O_reg[i];
  wgmma_wait<0>();
  wgmma_fence_operand(X_reg);
  out += kWarpgroupThreads * kHeadDim / 2;
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i) out[i * kWarpgroupThreads + threadIdx.x] = X_reg[i];
}

/// The dQ writer's protocol on one fp32 tile of kDqRows x kHeadDim (see the file comment).
constexpr int kDqRows = 64;
__global__ void __launch_bounds__(kWarpgroupThreads, 1) probe_dq_writer_kernel(float* dq_accum, const float* dq_part) {
  __shared__ __align__(128) float tile[kDqRows * kHeadDim];
  for (int i = threadIdx.x; i < kDqRows * kHeadDim; i += kWarpgroupThreads)
    tile[i] = dq_part[blockIdx.x * kDqRows * kHeadDim + i];
  fence_proxy_async_smem();  // the threads' stores, before the async proxy reads the tile
  __syncthreads();
  if (threadIdx.x == 0) {
    bulk_reduce_add_f32(dq_accum, smem_addr(tile), sizeof(tile));
    bulk_commit_group();
    bulk_wait_group_read<0>();
  }
  __syncthreads();  // the tile may be written again from here on
}

}  // namespace fl::hopper_probe
