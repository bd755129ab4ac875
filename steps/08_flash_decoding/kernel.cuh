/// @file steps/08_flash_decoding/kernel.cuh
/// @brief Rung 08: Flash-Decoding. Kernel 1 streams one slice (split) of the
/// KV sequence for a whole GQA group and writes a partial O and LSE; kernel 2
/// merges the splits by the log-sum-exp rule.
///
/// @code
///   // clang-format off
///   grid of kernel 1: (split, KV head x row tile, batch), 4 warps per CTA
///
///       keys:  0 ........ L ........ 2L ........ 3L ... seqlen_k
///              |  split 0  |  split 1  |  split 2  | ...
///              v           v           v
///   CTA(s, kvh, b): the G x Sq query rows of KV head kvh (G = heads_q / heads_kv),
///                   padded to one 16-row MMA tile, against keys [s L, (s+1) L)
///
///       keys of the split, in chunks of BLOCK_N:  | w0 | w1 | w2 | w3 | w0 | w1 | ...
///       each warp streams its own chunks through its own cp.async ring
///       (no CTA-wide barrier in the loop) and keeps its own m_i, l_i, O_i:
///            S = Q K_j^T              mma.sync (16 rows x BLOCK_N keys)
///            online softmax           m_i, l_i per row
///            O_i = alpha O_i + P V_j  mma.sync (P stays in registers)
///       after the loop the 4 warps merge (m, l, O) through shared memory
///        -> O_s = O_i / l_i (fp32), LSE_s = m_i + log l_i           (workspace)
///
///   kernel 2, one CTA per output row (b, h, i):
///        LSE = log sum_s exp(LSE_s)     O = sum_s exp(LSE_s - LSE) O_s   -> O (16-bit), LSE
///   // clang-format on
/// @endcode
///
/// Decode is memory-bound: a query row does 4 d FLOPs per key but the key
/// costs 4 d bytes of K and V, about 1 FLOP per byte. What limits it is how
/// many bytes are on their way from HBM (Little's law) and how few
/// instructions each byte costs once it has arrived. Both decide the design:
///  - The matmuls run on tensor cores even though a decode step has only 1-16
///    rows: the m16n8k16 tile pads the rows to 16, yet a 16-key chunk then
///    costs ~130 warp instructions (32 mma, 16 ldmatrix, the softmax), against
///    ~300 for one row and ~1000 for GQA's 4 rows on CUDA cores, where every
///    16-bit value must also be converted to fp32. The cost no longer grows
///    with the rows, so GQA streams as fast as MHA (see the README).
///  - Each warp owns a ring of kStages chunks: 2 chunks of 8 KiB in flight per
///    warp, 64 KiB per CTA, twice what Little's law asks of an SM
///    (~4.3 TB/s x ~1 us / 132 SMs = 33 KB), so one CTA per SM is enough (the
///    split heuristic's wave), and no __syncthreads() per chunk.
///  - The chunk itself is cheap: masks only where a row stops seeing keys,
///    O rescaled only when a row max grows, exp2, and a contiguous loader that
///    is a pointer step (README: how to count the loop's SASS instructions).
#pragma once

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "flashladder/softmax_math.h"
#include "split_heuristic.h"

namespace fl::decode {

/// Tile constants of the split kernel for one head_dim. STAGES is the depth
/// of each warp's cp.async ring: 3 (the default) leaves room for two CTAs per
/// SM; the ablation variants (variants.cu) trade CTAs for deeper rings.
/// KV_BYTES is the bytes of one K or V element in HBM: 2 (16-bit, the rung), or
/// 1 (an e4m3 cache, the `fp8-kv` variant): its ring holds the e4m3 bytes as
/// they arrive, ldmatrix reads them as they are, and each register is widened
/// to fp16 on its way into the MMA (fp8_qk, fp8_pv).
template <int HEAD_DIM, int STAGES = 3, int KV_BYTES = 2>
struct DecodeTraits {
  static constexpr int kHeadDim = HEAD_DIM;
  /// Shape of one mma.sync.m16n8k16 (16-bit inputs, fp32 accumulators).
  static constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;
  static constexpr int kWarpSize = 32;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  /// Query rows per CTA: one MMA tile (rows the problem does not have are zeros).
  static constexpr int kRows = kMaxRowsPerCta;
  /// Bytes of one K or V element in HBM and in the ring (2, or 1 for e4m3).
  static constexpr int kKvBytes = KV_BYTES;
  static constexpr bool kFp8 = KV_BYTES == 1;
  /// Bytes of one K or V row in the ring and the 16-byte pieces cp.async and
  /// ldmatrix move.
  static constexpr int kRowBytes = HEAD_DIM * KV_BYTES;
  static constexpr int kChunkBytes = 16;
  static constexpr int kChunkElems = kChunkBytes / KV_BYTES;
  static constexpr int kChunksPerRow = kRowBytes / kChunkBytes;
  /// K_j + V_j bytes of one warp's chunk. 8 KiB = 16 keys at d=128, 32 at
  /// d=64 (16-bit; twice the keys in e4m3): big enough that one cp.async group
  /// keeps the memory system busy, small enough that 3 stages x 4 warps fit
  /// twice per SM.
  static constexpr int kChunkKvBytes = 8 * 1024;
  /// Keys per warp chunk (BLOCK_N).
  static constexpr int kBlockN = kChunkKvBytes / (2 * kRowBytes);
  /// Chunks in a warp's ring: kStages - 1 in flight while one is consumed.
  static constexpr int kStages = STAGES;

  static constexpr int kNTiles = kBlockN / kMmaN;   ///< 8-key tiles of S
  static constexpr int kDTiles = HEAD_DIM / kMmaN;  ///< 8-column tiles of O
  static constexpr int kDSteps = HEAD_DIM / kMmaK;  ///< k-steps of S = Q K^T
  static constexpr int kNSteps = kBlockN / kMmaK;   ///< k-steps of O += P V

  /// Loader: a warp copies kLoadRowsPerPass rows per cp.async instruction.
  static constexpr int kLoadRowsPerPass = kWarpSize / kChunksPerRow;
  static constexpr int kLoadPasses = kBlockN / kLoadRowsPerPass;

  /// Shared memory: per warp, kStages K_j tiles then kStages V_j tiles
  /// (swizzled, no padding). After the loop the same bytes
  /// hold the warps' m, l [kWarps][kRows] and O [kWarps][kRows][HEAD_DIM]
  /// (fp32) for the merge.
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kWarpRingBytes = 2 * kStages * kTileBytes;
  static constexpr int kSmemBytes = kWarps * kWarpRingBytes;
  static constexpr int kMergeBytes = kWarps * kRows * (HEAD_DIM + 2) * 4;

  /// Shared memory of an H100/H200 SM and what the driver reserves per CTA.
  static constexpr int kSmemPerSmSm90 = 228 * 1024;
  static constexpr int kSmemReservedPerCta = 1024;

  static_assert(kRows == kMmaM, "a CTA's rows are one m16n8k16 tile");
  static_assert(HEAD_DIM % kMmaK == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(KV_BYTES == 1 || KV_BYTES == 2, "K/V elements of 16 bits, or e4m3");
  static_assert(kRowBytes >= 64 && (kRowBytes & (kRowBytes - 1)) == 0,
                "ptx::swizzle needs rows of a power of two >= 64 bytes");
  static_assert(kBlockN % (2 * kMmaN) == 0,
                "ldmatrix.x4 loads two 8-key tiles of K, and P needs 16-key k-steps");
  static_assert(kWarpSize % kChunksPerRow == 0 && kBlockN % kLoadRowsPerPass == 0,
                "the loader copies whole rows per pass and whole passes per chunk");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(!kFp8 || kBlockN % 32 == 0, "fp8_qk's ldmatrix.x4 takes 32 keys of one piece");
  static_assert(kMergeBytes <= kSmemBytes, "the merge reuses the K/V rings");
  static_assert(kSmemBytes + kSmemReservedPerCta <= kSmemPerSmSm90,
                "one CTA's rings must fit in an SM's shared memory");
};

/// What the launcher tells the kernels about the cut (see split_heuristic.h).
struct SplitArgs {
  int rows_total;   ///< query rows per (batch, KV head): group x seqlen_q
  int num_splits;   ///< splits launched (1: kernel 1 writes O and LSE itself)
  int split_len;    ///< keys per split
  float* o_part;    ///< [batch*heads_q*seqlen_q][num_splits][head_dim], normalized partial O
  float* lse_part;  ///< [batch*heads_q*seqlen_q][num_splits], natural-log partial LSE
  /// Null, or one zeroed counter per CTA tile (blockIdx.z * gridDim.y + blockIdx.y): the tile's
  /// last split to finish merges the tile's rows (merge_split_rows) and kernel 2 is not launched.
  int* counters;
};

/// Index of output row (b, h, i) in LSE [batch, heads_q, seqlen_q]; the
/// workspace uses the same row order.
__device__ __forceinline__ int64_t out_row(const AttnParams& p, int b, int h, int i) {
  return (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i;
}

/// Where token n of one sequence lives in a paged KV cache: the pool is
/// [num_pages, page_size, heads_kv, head_dim], the block table names the page
/// of slot n / page_size, and n % page_size is the row inside it. The cursor
/// divides once and then steps, since the loader's keys come in order: a
/// division per key would cost more than the rest of the loader. It also reads
/// the block table once per page, not once per row: the loader's cp.async is
/// inline assembly with a memory clobber, so the compiler cannot keep a table
/// entry in a register across it, and every pass of a chunk (32 at d = 128)
/// would wait on its own load of the same entry before it can issue. Any page
/// size works with any chunk size.
struct PagedCursor {
  const int* table;  ///< this sequence's row of the block table
  int page_size;
  int slot;     ///< n / page_size
  int in_page;  ///< n % page_size
  int loaded = -1;   ///< the slot whose page base is held (-1: none yet)
  int64_t base = 0;  ///< table[loaded] * page_size: that page's first pool row

  /// Unused cursor of the contiguous loader.
  __device__ __forceinline__ PagedCursor() : table(nullptr), page_size(1), slot(0), in_page(0) {}
  __device__ __forceinline__ PagedCursor(const AttnParams& p, int b, int n)
      : table(p.block_table + static_cast<int64_t>(b) * p.block_table_stride),
        page_size(p.page_size),
        slot(n / p.page_size),
        in_page(n % p.page_size) {}
  /// Pool row of the current token; reads the block table when the token is on a
  /// page not read yet (only for tokens that exist: a slot past the sequence's
  /// pages is never read).
  __device__ __forceinline__ int64_t row() {
    if (slot != loaded) {
      base = static_cast<int64_t>(table[slot]) * page_size;
      loaded = slot;
    }
    return base + in_page;
  }
  /// Moves to the token @p k places further.
  __device__ __forceinline__ void advance(int k) {
    in_page += k;
    while (in_page >= page_size) {
      in_page -= page_size;
      ++slot;
    }
  }
};

__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
__device__ __forceinline__ int warp_min(int x) {
  for (int off = 16; off > 0; off /= 2) x = min(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

/// Four e4m3 values (the bytes of @p x, the first in the low byte) as two f16x2: @p lo the
/// low two bytes, @p hi the high two. Exact: every e4m3 value is a normal fp16 (4 significant
/// bits, exponents 2^-9 to 2^8). One cvt per half (F2FP.F16.E4M3.UNPACK_B, which reads either
/// 16-bit half of its register, so the split costs nothing).
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t x, uint32_t* lo, uint32_t* hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(*lo), "=r"(*hi)
      : "r"(x));
#else
  __trap();  // the fp8-kv variant needs sm_89 (its min_cc); this keeps older targets building
#endif
}

// An e4m3 cache (the fp8-kv variant) goes into the same m16n8k16 MMAs, in fp16, without a
// 16-bit copy in shared memory: ldmatrix moves 16-bit cells, and a cell of the e4m3 ring is
// two neighbouring values, so each register ldmatrix delivers holds four e4m3 values that
// two cvt instructions widen into two MMA registers. Where they land decides two reorderings,
// both free (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//  - K (fp8_qk): ldmatrix gives lane (g, t) bytes 4t..4t+3 of key g's 16-byte piece kk, i.e.
//    d = 16 kk + 4t .. 4t + 3, where the MMA's b0, b1 are k = 2t, 2t+1 and 2t+8, 2t+9. A dot
//    product does not care about the order of its terms as long as Q uses the same one, so k
//    is permuted: b0 = d 4t, 4t+1 and b1 = d 4t+2, 4t+3, and Q's a0/a2 (a1/a3) are loaded
//    from those columns (fp8_q_col).
//  - V (fp8_pv): ldmatrix.trans moves 16-bit cells, so lane (g, t) gets keys 2t and 2t+1 at
//    d = 2g and 2g+1 (one cell of each key). One byte permute sorts them into (keys 2t, 2t+1)
//    at d = 2g, the b0 of an "even" n-tile of columns 0, 2, .., 14 of the piece, and the same
//    keys at d = 2g+1, the b0 of an "odd" tile. The keys are in the MMA's order, so P is
//    unchanged; the output columns are permuted, and the lane's accumulators of a piece's
//    even and odd tiles are its d = 4t .. 4t + 3 (fp8_o_col), written out as one float4.

/// Column of Q (within its 16-column k-step) that an e4m3 cache's permuted k puts in A
/// fragment register @p e2 (0: a0/a1, 1: a2/a3) of lane quad position @p t: 4t + 2 e2.
__device__ __forceinline__ int fp8_q_col(int t, int e2) { return 4 * t + 2 * e2; }

/// Output column of accumulator O[dt][e] of lane quad position @p t with an e4m3 cache: tile
/// dt is the even (dt % 2 = 0) or odd tile of piece dt / 2.
__device__ __forceinline__ int fp8_o_col(int dt, int t, int e) {
  return 16 * (dt / 2) + 4 * t + 2 * (e % 2) + dt % 2;
}

/// S = Q K_j^T for one chunk of an e4m3 cache: per 16-byte piece kk (a k-step), one ldmatrix.x4
/// of 32 keys (lanes 0-31 address keys 0-31: matrix m is keys 8m..8m+7, the B fragment of
/// n-tile m), each register widened to (b0, b1). Q_frag holds Q in the permuted k order.
template <class Tr>
__device__ __forceinline__ void fp8_qk(float (&S_acc)[Tr::kNTiles][4],
                                       const uint32_t (&Q_frag)[Tr::kDSteps][4], uint32_t K_j,
                                       uint32_t k_lane) {
#pragma unroll
  for (int kk = 0; kk < Tr::kDSteps; ++kk)
#pragma unroll
    for (int q = 0; q < Tr::kBlockN / 32; ++q) {
      uint32_t k8[4];  // matrix m: key 32q + 8m + g, d = 16 kk + 4t .. 4t + 3
      ptx::ldmatrix_x4(k8, K_j + q * 32 * Tr::kRowBytes + (k_lane ^ (kk * 16)));
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        uint32_t b0, b1;
        e4m3x4_to_f16x2x2(k8[m], &b0, &b1);
        ptx::mma_m16n8k16<__half>(S_acc[4 * q + m], Q_frag[kk], b0, b1);
      }
    }
}

/// O += P V for one 16-key k-step of an e4m3 cache (@p V_k: its first key's row in the ring).
/// Per two pieces, one ldmatrix.x4.trans: matrices (keys 0-7 | 8-15) x (piece 2dj | 2dj+1);
/// byte permute 0x3120 turns [key 2t: d 2g, 2g+1 | key 2t+1: d 2g, 2g+1] into
/// [d 2g: keys 2t, 2t+1 | d 2g+1: keys 2t, 2t+1].
template <class Tr>
__device__ __forceinline__ void fp8_pv(float (&O_acc)[Tr::kDTiles][4], const uint32_t (&P_frag)[4],
                                       uint32_t V_k, uint32_t v_lane) {
#pragma unroll
  for (int dj = 0; dj < Tr::kHeadDim / 32; ++dj) {
    uint32_t v8[4];
    ptx::ldmatrix_x4_trans(v8, V_k + (v_lane ^ (dj * 32)));
#pragma unroll
    for (int pc = 0; pc < 2; ++pc) {
      uint32_t even_b0, odd_b0, even_b1, odd_b1;  // keys 2t, 2t+1, then 2t+8, 2t+9
      e4m3x4_to_f16x2x2(__byte_perm(v8[2 * pc], 0, 0x3120), &even_b0, &odd_b0);
      e4m3x4_to_f16x2x2(__byte_perm(v8[2 * pc + 1], 0, 0x3120), &even_b1, &odd_b1);
      const int dt = 2 * (2 * dj + pc);  // the even tile of piece 2dj + pc; dt + 1 the odd one
      ptx::mma_m16n8k16<__half>(O_acc[dt], P_frag, even_b0, even_b1);
      ptx::mma_m16n8k16<__half>(O_acc[dt + 1], P_frag, odd_b0, odd_b1);
    }
  }
}

/// Shape of kernel 2: one CTA of 128 threads per output row. Thread
/// (sg, cg) = (threadIdx.x / kColGroups, threadIdx.x % kColGroups) owns the 4
/// columns 4 cg .. 4 cg + 3 of splits sg, sg + kSplitGroups, ...: its loads are
/// 16-byte float4s, all independent, so a row's partials arrive in one round
/// trip instead of one per split.
template <int HEAD_DIM>
struct CombineTraits {
  static constexpr int kThreads = 128;
  static constexpr int kVec = 4;  ///< fp32 columns per load (16 bytes)
  static constexpr int kColGroups = HEAD_DIM / kVec;
  static constexpr int kSplitGroups = kThreads / kColGroups;
  static_assert(kThreads % kColGroups == 0 && kSplitGroups >= 1, "whole column groups per CTA");
};

/// The merge of one output row (b, h, i), @p row in LSE order, by the 128 threads of a CTA
/// (CombineTraits): kernel 2's body, and the body of the fused merge at the end of kernel 1.
/// Split s holds O_s = softmax over its keys times V, and LSE_s = log of its
/// sum of exp(scores). The whole row's LSE is log sum_s exp(LSE_s) and
/// O = sum_s exp(LSE_s - LSE) O_s: each split weighs by its share of the total
/// softmax mass (the reduction step of the Flash-Decoding write-up, Dao et al., 2023).
/// The partials are read from L2 (__ldcg): in the fused merge other SMs wrote them during this
/// grid, and a line this SM's L1 held could be stale. Starts and ends with every thread.
template <class T, int HEAD_DIM>
__device__ __forceinline__ void combine_row(const AttnParams& p, const SplitArgs& a, int64_t row,
                                            float4 (*part_smem)[CombineTraits<HEAD_DIM>::kColGroups]) {
  using Ct = CombineTraits<HEAD_DIM>;
  constexpr int kWarpSize = 32;
  const int lane = threadIdx.x % kWarpSize;
  const int cg = threadIdx.x % Ct::kColGroups, sg = threadIdx.x / Ct::kColGroups;
  const float* lse_s = a.lse_part + row * a.num_splits;
  const float* O_s = a.o_part + row * a.num_splits * HEAD_DIM;
  float lse = -INFINITY;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);

  // LAB-BEGIN(08-lse-combine): merge the partial outputs by their log-sum-exp
  // (1) LSE = log sum_s exp(LSE_s) (fl::lse_reduce), computed by every warp
  // with the splits spread over its lanes: no barrier needed to share it.
  float m = -INFINITY;
  for (int s = lane; s < a.num_splits; s += kWarpSize) m = fmaxf(m, __ldcg(lse_s + s));
  m = warp_max(m);
  float sum = 0.f;
  for (int s = lane; s < a.num_splits; s += kWarpSize) sum += exp_diff(__ldcg(lse_s + s), m);
  sum = warp_sum(sum);
  lse = (m == -INFINITY) ? -INFINITY : m + logf(sum);
  // (2) This thread's share of O = sum_s w_s O_s, w_s = exp(LSE_s - LSE)
  // (fl::lse_weight: 0 for a split whose keys were all masked). Unrolled so
  // that all of its splits' loads are in flight at once.
#pragma unroll 8
  for (int s = sg; s < a.num_splits; s += Ct::kSplitGroups) {
    const float w = lse_weight(__ldcg(lse_s + s), lse);
    const float4 v =
        __ldcg(reinterpret_cast<const float4*>(O_s + static_cast<int64_t>(s) * HEAD_DIM + cg * Ct::kVec));
    o = make_float4(fmaf(w, v.x, o.x), fmaf(w, v.y, o.y), fmaf(w, v.z, o.z), fmaf(w, v.w, o.w));
  }
  // LAB-END(08-lse-combine)

  // Sum the split groups' shares of each column group.
  part_smem[sg][cg] = o;
  __syncthreads();
  if (sg == 0) {
#pragma unroll
    for (int k = 1; k < Ct::kSplitGroups; ++k) {
      const float4 q = part_smem[k][cg];
      o = make_float4(o.x + q.x, o.y + q.y, o.z + q.z, o.w + q.w);
    }
    const int i = static_cast<int>(row % p.seqlen_q);
    const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
    const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
    T* o_gmem = static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride +
                h * p.o_head_stride + cg * Ct::kVec;
    *reinterpret_cast<uint2*>(o_gmem) = make_uint2(pack2<T>(o.x, o.y), pack2<T>(o.z, o.w));
    if (threadIdx.x == 0) p.lse[row] = lse;
  }
  __syncthreads();  // part_smem free for the next row
}

/// The fused merge (SplitArgs::counters set): after a split CTA has written its partials, the
/// tile's counter counts it in; the CTA that counts last (every other split of the tile is written
/// and visible: each thread's __threadfence before the count) merges the tile's rows itself, with
/// kernel 2's code (combine_row, the same arithmetic: the same bits), and sets the counter back to
/// zero. One launch instead of two: the serving path's host time (the package's prepared cache
/// call zeroes the counters in its metadata check). @p smem: the split's shared memory, free here.
template <class T, int HEAD_DIM>
__device__ __forceinline__ void merge_split_rows(const AttnParams& p, const SplitArgs& a, unsigned char* smem,
                                                 int row0, int rows, int kvh, int b) {
  using Ct = CombineTraits<HEAD_DIM>;
  static_assert(Ct::kThreads == 128, "combine_row's threads are the split CTA's");
  __shared__ int last;
  __threadfence();  // this thread's partials, visible to the CTA that merges
  __syncthreads();
  if (threadIdx.x == 0) {
    int* counter = a.counters + static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
    last = atomicAdd(counter, 1) == a.num_splits - 1;
    if (last) *counter = 0;  // the next launch on these counters starts from zero
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other splits' partials before this CTA's reads (combine_row: __ldcg)
  auto* part_smem = reinterpret_cast<float4(*)[Ct::kColGroups]>(smem);
  for (int r = 0; r < rows; ++r) {
    const int row = row0 + r, i = row / p.group, h = kvh * p.group + row % p.group;
    combine_row<T, HEAD_DIM>(p, a, out_row(p, b, h, i), part_smem);
  }
}

/// Kernel 1: CTA (split, kvh + heads_kv * row_tile, b) computes attention of
/// the rows [row0, row0 + 16) of KV head kvh's group against the keys of its
/// split. Row r of the group is query position i = r / group of query head
/// h = kvh * group + r % group, so the heads sharing this K/V are all served by
/// one read of it (GQA/MQA). Writes the normalized partial O and its LSE to
/// the workspace, or O and LSE directly when there is a single split.
/// PAGED: K/V rows come through the block table (a template parameter, so the
/// contiguous loader is plain pointer arithmetic).
template <class T, class Tr, bool PAGED>
__global__ void __launch_bounds__(Tr::kThreads)
    split_kv_attention(const AttnParams p, const SplitArgs a) {
  constexpr int D = Tr::kHeadDim, ROWS = Tr::kRows, WARPS = Tr::kWarps;
  constexpr int BLOCK_N = Tr::kBlockN, STAGES = Tr::kStages, RB = Tr::kRowBytes;
  constexpr bool FP8 = Tr::kFp8;
  using KV = std::conditional_t<FP8, uint8_t, T>;  // a K or V element in HBM and in the ring
  // The MMAs' inputs: T, or fp16 with an e4m3 cache (its values are exact in fp16; a bf16 Q is
  // scaled by a power of two into fp16's range, q_scale below).
  using M = std::conditional_t<FP8, __half, T>;
  extern __shared__ __align__(128) unsigned char smem_raw[];

  // Let kernel 2 (launched with programmatic stream serialization) get its
  // CTAs in place now; it waits in griddepcontrol.wait until this grid is done.
  if (a.num_splits > 1) ptx::griddep_launch_dependents();

  const int warp = threadIdx.x / Tr::kWarpSize, lane = threadIdx.x % Tr::kWarpSize;
  const int g = lane / 4;  // this lane holds rows g and g + 8 of every MMA fragment
  const int t = lane % 4;  // ... and their columns 2t, 2t + 1
  const int split = blockIdx.x;
  const int kvh = blockIdx.y % p.heads_kv;
  const int row0 = (blockIdx.y / p.heads_kv) * ROWS;
  const int b = blockIdx.z;
  const int rows = min(ROWS, a.rows_total - row0);  // rows of this tile that exist

  // This split's keys. With a causal mask no row of the tile sees past the
  // last row's diagonal, so those keys are not even loaded.
  // A KV cache of per-sequence lengths and starts (AttnParams::seqused_k, seqstart_k): sequence
  // b's keys are its slots k_first .. k_first + len_k - 1, counted from k_first below; the causal
  // diagonal moves with them.
  const int k_first = p.seqstart_k ? p.seqstart_k[b] : 0;
  const int len_k = (p.seqused_k ? p.seqused_k[b] : p.seqlen_k) - k_first;
  const int causal_offset = len_k - p.seqlen_q;
  const int n_begin = static_cast<int>(static_cast<int64_t>(split) * a.split_len);
  int n_end = static_cast<int>(min(static_cast<int64_t>(len_k), static_cast<int64_t>(n_begin) + a.split_len));
  if (p.causal) n_end = min(n_end, (row0 + rows - 1) / p.group + causal_offset + 1);
  const int num_chunks = n_end > n_begin ? (n_end - n_begin + BLOCK_N - 1) / BLOCK_N : 0;
  // Warp w takes chunks w, w + WARPS, w + 2 WARPS, ...: together the warps
  // stream the split front to back.
  const int my_chunks = num_chunks > warp ? (num_chunks - warp + WARPS - 1) / WARPS : 0;
  auto chunk_key0 = [&](int c) { return n_begin + (c * WARPS + warp) * BLOCK_N; };

  const KV* K_gmem = static_cast<const KV*>(p.k) + kvh * p.k_head_stride +
                      (PAGED ? 0 : b * p.k_batch_stride + static_cast<int64_t>(k_first) * p.k_row_stride);
  const KV* V_gmem = static_cast<const KV*>(p.v) + kvh * p.v_head_stride +
                      (PAGED ? 0 : b * p.v_batch_stride + static_cast<int64_t>(k_first) * p.v_row_stride);

  // This warp's ring: STAGES tiles of K, then STAGES tiles of V.
  const uint32_t K_ring = ptx::smem_addr(smem_raw) + warp * Tr::kWarpRingBytes;
  const uint32_t V_ring = K_ring + STAGES * Tr::kTileBytes;
  // An e4m3 cache: the descales of this (batch, KV head): K's scales the scores, V's the output.
  float k_descale = 1.f, v_descale = 1.f;
  if constexpr (FP8) {
    k_descale = p.k_descale[b * p.heads_kv + kvh];
    v_descale = p.v_descale[b * p.heads_kv + kvh];
  }

  // Copies this warp's chunk c into ring stage st: lane copies 16-byte piece
  // lane % kChunksPerRow of keys j0 = lane / kChunksPerRow, j0 +
  // kLoadRowsPerPass, ... Keys past n_end are zero-filled: their P is 0, and
  // 0 * V must not be NaN. Contiguous K/V: key n is row n, so one pass is one
  // pointer step; paged: each key's row comes from the block table.
  const int piece = lane % Tr::kChunksPerRow, j0 = lane / Tr::kChunksPerRow;
  const int col = piece * Tr::kChunkElems;
  // A chunk whose keys cross a page: every pass asks the cursor for its row.
  auto load_chunk_across_pages = [&](int c, int st) {
    const int key0 = chunk_key0(c) + j0;
    PagedCursor page(p, b, k_first + key0);
#pragma unroll
    for (int pass = 0; pass < Tr::kLoadPasses; ++pass) {
      const int n = key0 + pass * Tr::kLoadRowsPerPass;
      const bool valid = n < n_end;
      const uint32_t dst =
          st * Tr::kTileBytes + ptx::swizzle<RB>(j0 + pass * Tr::kLoadRowsPerPass, piece);
      const int64_t row = valid ? page.row() : 0;  // row 0 exists; nothing is read
      ptx::cp_async_16(K_ring + dst, valid ? K_gmem + row * p.k_row_stride + col : K_gmem, valid ? 16 : 0);
      ptx::cp_async_16(V_ring + dst, valid ? V_gmem + row * p.v_row_stride + col : V_gmem, valid ? 16 : 0);
      page.advance(Tr::kLoadRowsPerPass);
    }
  };
  // Paged: pages are a power of two (Problem's check), so a slot is a shift and
  // its row in the page a mask. page_of(c) reads the block-table entry of chunk
  // c's first key (it exists, so its slot is in the table); the main loop reads
  // it one chunk ahead of the copy that needs it, so that the load's latency
  // passes under a chunk of math instead of stalling the warp before its copy.
  const int page_shift = PAGED ? __ffs(p.page_size) - 1 : 0;
  const int page_mask = PAGED ? p.page_size - 1 : 0;
  const int* const table_row = PAGED ? p.block_table + static_cast<int64_t>(b) * p.block_table_stride : nullptr;
  auto page_of = [&](int c) { return table_row[(k_first + chunk_key0(c)) >> page_shift]; };
  auto load_chunk = [&](int c, int st, int page) {
    const int key0 = chunk_key0(c) + j0;
    const KV* k_src = K_gmem + static_cast<int64_t>(key0) * p.k_row_stride + col;
    const KV* v_src = V_gmem + static_cast<int64_t>(key0) * p.v_row_stride + col;
    if constexpr (PAGED) {
      // A chunk on one page (every chunk, when the page holds a whole number of
      // chunks and the cache has no left padding off that grid) is contiguous
      // rows of the pool: its page (read ahead), then the contiguous loader's
      // pointer steps.
      const int in_page0 = (k_first + chunk_key0(c)) & page_mask;
      if (in_page0 + BLOCK_N > p.page_size) {
        load_chunk_across_pages(c, st);
        return;
      }
      const int64_t row = (static_cast<int64_t>(page) << page_shift) + in_page0 + j0;
      k_src = K_gmem + row * p.k_row_stride + col;
      v_src = V_gmem + row * p.v_row_stride + col;
    }
#pragma unroll
    for (int pass = 0; pass < Tr::kLoadPasses; ++pass) {
      const int n = key0 + pass * Tr::kLoadRowsPerPass;
      const bool valid = n < n_end;
      const uint32_t dst =
          st * Tr::kTileBytes + ptx::swizzle<RB>(j0 + pass * Tr::kLoadRowsPerPass, piece);
      ptx::cp_async_16(K_ring + dst, valid ? k_src : K_gmem, valid ? 16 : 0);
      ptx::cp_async_16(V_ring + dst, valid ? v_src : V_gmem, valid ? 16 : 0);
      k_src += Tr::kLoadRowsPerPass * p.k_row_stride;
      v_src += Tr::kLoadRowsPerPass * p.v_row_stride;
    }
  };

  // Start the pipeline first so the Q loads below overlap the first K/V bytes.
  // A group is committed even when empty, so "chunk c landed" is always
  // "all but the newest STAGES - 2 groups are done".
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < my_chunks) load_chunk(st, st, PAGED ? page_of(st) : 0);
    ptx::cp_async_commit();
  }
  // Paged: the page of the chunk the loop's first copy takes, read now.
  int next_page = PAGED && STAGES - 1 < my_chunks ? page_of(STAGES - 1) : 0;

  // Q as the A operand of S = Q K^T, straight from global memory into the
  // fragment layout (ptx.cuh): a0 = Q[g][2t..], a1 = Q[g+8][2t..],
  // a2 = Q[g][2t+8..], a3 = Q[g+8][2t+8..] of each 16-wide k-step (an e4m3
  // cache's permuted k: columns fp8_q_col). Rows the tile does not have are
  // zeros. key_end[half]: keys row g + 8 half sees.
  uint32_t Q_frag[Tr::kDSteps][4];
  int key_end[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    const int i = row / p.group, h = kvh * p.group + row % p.group;
    const bool valid = row < a.rows_total;
    const T* q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride +
                      (valid ? i * p.q_row_stride + h * p.q_head_stride : 0);
#pragma unroll
    for (int kk = 0; kk < Tr::kDSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        Q_frag[kk][half + 2 * e] =
            valid ? *reinterpret_cast<const uint32_t*>(q_gmem + kk * Tr::kMmaK +
                                                       (FP8 ? fp8_q_col(t, e) : 2 * t + 8 * e))
                  : 0u;
    key_end[half] = p.causal ? min(n_end, i + causal_offset + 1) : n_end;
  }
  // An e4m3 cache with a bf16 Q: the MMAs run in fp16, on Q times q_scale, the power of two that
  // brings the tile's largest |Q| into [2^14, 2^15) (at most 2^100, so 1 / q_scale stays a
  // normal float). A bf16 value (8 significant bits) of at least 2^-29 of the largest is then an
  // fp16 normal (11 bits), exact; a smaller one lands in fp16's subnormals, off by at most 2^-39
  // of the largest (a tile whose largest |Q| is under 2^-85 keeps fewer bits). The scores are
  // divided by q_scale again through scale_log2.
  float q_scale = 1.f;
  if constexpr (FP8 && std::is_same_v<T, __nv_bfloat16>) {
    float amax = 0.f;
#pragma unroll
    for (int kk = 0; kk < Tr::kDSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = unpack2<T>(Q_frag[kk][e]);
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
      }
    amax = warp_max(amax);  // the whole tile: every warp holds all of Q
    int exp2_amax = 0;      // amax < 2^exp2_amax
    frexpf(amax, &exp2_amax);
    if (amax > 0.f && amax < INFINITY) q_scale = ldexpf(1.f, min(15 - exp2_amax, 100));
#pragma unroll
    for (int kk = 0; kk < Tr::kDSteps; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = unpack2<T>(Q_frag[kk][e]);
        Q_frag[kk][e] = pack2<__half>(f.x * q_scale, f.y * q_scale);
      }
  }
  // A chunk needs the mask only if some row of the warp stops seeing keys
  // inside it (the split's last chunk, or the causal diagonal): one number
  // for the whole warp, so the test is a uniform branch.
  const int mask_from = warp_min(min(key_end[0], key_end[1]));

  // ldmatrix row addresses of this lane inside a tile (ptx::swizzle, rows of RB).
  // K as the B operand (not transposed): lanes 0-7 keys 0-7 at piece 0, 8-15
  // keys 0-7 at piece 1, 16-23 keys 8-15 at piece 0, 24-31 keys 8-15 at piece 1
  // -> (b0, b1) of 8-key tile 2nj, then of 8-key tile 2nj + 1.
  // An e4m3 cache (fp8_qk): lane l addresses key l at piece 0.
  const uint32_t k_lane = FP8 ? ptx::swizzle<RB>(lane, 0)
                              : ptx::swizzle<RB>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
  // V as the B operand (transposed): lanes 0-15 keys 0-15 at piece 0, lanes
  // 16-31 the same keys at piece 1 -> (b0, b1) of columns 0-7, then of 8-15.
  // The same for an e4m3 cache (fp8_pv), whose pieces hold 16 columns instead of 8.
  const uint32_t v_lane = ptx::swizzle<RB>(lane % 16, lane / 16);

  // This warp's running state for rows g and g + 8, as in rung 05: m_i is the
  // row max of the raw scores Q K^T (-inf before any key), l_i this lane's
  // share of sum exp(scale (s - m_i)), O_i unnormalized. exp is exp2 of scores
  // pre-multiplied by scale_log2 = softmax_scale log2(e): one FFMA + one MUFU.
  // An e4m3 cache: the raw scores are (q_scale Q) K_e4m3^T, so K's descale and 1 / q_scale
  // join the factor.
  const float scale_log2 = p.softmax_scale * k_descale / q_scale * kLog2e;
  float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};
  float O_acc[Tr::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < Tr::kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) O_acc[dt][e] = 0.f;

  for (int c = 0; c < my_chunks; ++c) {
    // Chunk c has landed (for this lane); after the warp barrier, for every
    // lane, and every lane is done with the stage chunk c - 1 used...
    ptx::cp_async_wait<STAGES - 2>();
    __syncwarp();
    const int st = c % STAGES;
    // ...so that stage can take chunk c + STAGES - 1.
    if (c + STAGES - 1 < my_chunks) load_chunk(c + STAGES - 1, (c + STAGES - 1) % STAGES, next_page);
    ptx::cp_async_commit();
    // Paged: the next copy's page, read now and first used one chunk later.
    if (PAGED && c + STAGES < my_chunks) next_page = page_of(c + STAGES);

    const uint32_t K_j = K_ring + st * Tr::kTileBytes;
    const uint32_t V_j = V_ring + st * Tr::kTileBytes;
    const int key0 = chunk_key0(c);
    // LAB-BEGIN(08-split-chunk): scores, online softmax and P V for one chunk of the split
    // [same-code: 05-mma-qk 05-online-softmax 05-mma-pv]
    // (1) S = Q K_j^T: 16 rows x BLOCK_N keys, fp32 accumulators.
    float S_acc[Tr::kNTiles][4];
#pragma unroll
    for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) S_acc[nt][e] = 0.f;
    if constexpr (FP8) {
      fp8_qk<Tr>(S_acc, Q_frag, K_j, k_lane);  // an e4m3 cache, widened on the way
    } else {
#pragma unroll
      for (int kk = 0; kk < Tr::kDSteps; ++kk) {
#pragma unroll
        for (int nj = 0; nj < BLOCK_N / 16; ++nj) {
          uint32_t k_frag[4];  // (b0, b1) of key tile 2nj, then of key tile 2nj + 1
          ptx::ldmatrix_x4(k_frag, K_j + nj * 16 * RB + (k_lane ^ (kk * 32)));
          ptx::mma_m16n8k16<T>(S_acc[2 * nj], Q_frag[kk], k_frag[0], k_frag[1]);
          ptx::mma_m16n8k16<T>(S_acc[2 * nj + 1], Q_frag[kk], k_frag[2], k_frag[3]);
        }
      }
    }

    // (2) Online softmax on the fragments (row g: elements 0, 1; row g + 8:
    // elements 2, 3). Mask keys a row does not see (-inf), block max over the
    // quad, alpha = exp(m_old - m_new), P = exp(S - m_new), l = alpha l + sum P.
    if (key0 + BLOCK_N > mask_from) {
#pragma unroll
      for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + nt * Tr::kMmaN + 2 * t + e % 2 >= key_end[e / 2]) S_acc[nt][e] = -INFINITY;
    }
    float alpha[2];
    bool grew = false;  // did the max of any row of this lane grow?
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float m_block = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < Tr::kNTiles; ++nt)
        m_block = fmaxf(m_block, fmaxf(S_acc[nt][2 * half], S_acc[nt][2 * half + 1]));
      const float m_new = fmaxf(m_i[half], ptx::quad_max(m_block));
      // A row that has seen no key yet has m_new = -inf; subtracting 0 instead
      // keeps exp2(-inf - ...) = 0 and avoids -inf - -inf = NaN.
      const float m_scaled = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
      alpha[half] = ptx::ex2_approx(m_i[half] * scale_log2 - m_scaled);
      grew |= m_new != m_i[half];
      m_i[half] = m_new;
      float l_block = 0.f;
#pragma unroll
      for (int nt = 0; nt < Tr::kNTiles; ++nt)
#pragma unroll
        for (int e = 2 * half; e < 2 * half + 2; ++e) {
          S_acc[nt][e] = ptx::ex2_approx(fmaf(S_acc[nt][e], scale_log2, -m_scaled));
          l_block += S_acc[nt][e];
        }
      l_i[half] = l_i[half] * alpha[half] + l_block;
    }
    // Rescale O_i only when some row's max grew: after the first chunks of a
    // long split it rarely does, and alpha = 1 would change nothing.
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
      for (int dt = 0; dt < Tr::kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) O_acc[dt][e] *= alpha[e / 2];
    }

    // (3) O_i += P V_j. The C fragments of key tiles 2kk and 2kk + 1, packed
    // to 16 bits, are the A fragment of k-step kk: P never leaves registers.
#pragma unroll
    for (int kk = 0; kk < Tr::kNSteps; ++kk) {
      uint32_t P_frag[4];
      P_frag[0] = pack2<M>(S_acc[2 * kk][0], S_acc[2 * kk][1]);
      P_frag[1] = pack2<M>(S_acc[2 * kk][2], S_acc[2 * kk][3]);
      P_frag[2] = pack2<M>(S_acc[2 * kk + 1][0], S_acc[2 * kk + 1][1]);
      P_frag[3] = pack2<M>(S_acc[2 * kk + 1][2], S_acc[2 * kk + 1][3]);
      if constexpr (FP8) {
        fp8_pv<Tr>(O_acc, P_frag, V_j + kk * 16 * RB, v_lane);  // an e4m3 cache
      } else {
#pragma unroll
        for (int dj = 0; dj < D / 16; ++dj) {
          uint32_t v_frag[4];  // (b0, b1) of columns 16dj..+7, then of 16dj+8..+15
          ptx::ldmatrix_x4_trans(v_frag, V_j + kk * 16 * RB + (v_lane ^ (dj * 32)));
          ptx::mma_m16n8k16<T>(O_acc[2 * dj], P_frag, v_frag[0], v_frag[1]);
          ptx::mma_m16n8k16<T>(O_acc[2 * dj + 1], P_frag, v_frag[2], v_frag[3]);
        }
      }
    }
    // LAB-END(08-split-chunk)
  }
  ptx::cp_async_wait<0>();  // only empty groups can be left; be explicit anyway
  __syncthreads();          // every warp is done with its ring: reuse the bytes for the merge

  // Merge the warps. Each saw a quarter of the split's keys and holds its own
  // (m, l, O) per row; they combine exactly like splits do in kernel 2, with
  // fl::softmax_merge: m = max m_w, l = sum_w exp(m_w - m) l_w, same for O.
  // m goes to shared memory in the natural-log units softmax_merge uses.
  float* m_smem = reinterpret_cast<float*>(smem_raw);  // [WARPS][ROWS]
  float* l_smem = m_smem + WARPS * ROWS;               // [WARPS][ROWS]
  float* O_smem = l_smem + WARPS * ROWS;               // [WARPS][ROWS][D]
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = g + 8 * half;
    const float l = ptx::quad_sum(l_i[half]);  // the quad's 4 column shares of the row sum
    if (t == 0) {
      m_smem[warp * ROWS + r] = m_i[half] * (p.softmax_scale * k_descale / q_scale);  // -inf stays -inf
      l_smem[warp * ROWS + r] = l;
    }
#pragma unroll
    for (int dt = 0; dt < Tr::kDTiles; ++dt) {
      float* o_row = O_smem + (warp * ROWS + r) * D;
      if constexpr (FP8) {  // a piece's even and odd tiles hold columns 4t .. 4t + 3
        if (dt % 2 == 0)
          *reinterpret_cast<float4*>(o_row + fp8_o_col(dt, t, 0)) =
              make_float4(O_acc[dt][2 * half], O_acc[dt + 1][2 * half], O_acc[dt][2 * half + 1],
                          O_acc[dt + 1][2 * half + 1]);
      } else {
        *reinterpret_cast<float2*>(o_row + dt * Tr::kMmaN + 2 * t) =
            make_float2(O_acc[dt][2 * half], O_acc[dt][2 * half + 1]);
      }
    }
  }
  __syncthreads();

  for (int e = threadIdx.x; e < rows * D; e += Tr::kThreads) {
    const int r = e / D, col = e % D;
    SoftmaxState merged = softmax_init();
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      float alpha_old, alpha_w;
      merged =
          softmax_merge(merged, m_smem[w * ROWS + r], l_smem[w * ROWS + r], &alpha_old, &alpha_w);
      o = o * alpha_old + O_smem[(w * ROWS + r) * D + col] * alpha_w;
    }
    o *= softmax_inv_l(merged) * v_descale;  // 0 when the row saw no key: O = 0
    const int row = row0 + r, i = row / p.group, h = kvh * p.group + row % p.group;
    if (a.num_splits == 1) {
      T* o_gmem =
          static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      o_gmem[col] = from_float<T>(o);
      if (col == 0) p.lse[out_row(p, b, h, i)] = softmax_lse(merged);  // -inf: no key seen
    } else {
      a.o_part[(out_row(p, b, h, i) * a.num_splits + split) * D + col] = o;
      if (col == 0) a.lse_part[out_row(p, b, h, i) * a.num_splits + split] = softmax_lse(merged);
    }
  }
  if (a.num_splits > 1 && a.counters != nullptr) merge_split_rows<T, D>(p, a, smem_raw, row0, rows, kvh, b);
}

/// Kernel 2: merges the splits of one output row (b, h, i) per CTA (combine_row).
/// Launched with programmatic stream serialization: its CTAs may start while
/// kernel 1 still runs, and wait for its results in griddepcontrol.wait.
template <class T, int HEAD_DIM>
__global__ void __launch_bounds__(CombineTraits<HEAD_DIM>::kThreads)
    combine_splits(const AttnParams p, const SplitArgs a) {
  using Ct = CombineTraits<HEAD_DIM>;
  __shared__ float4 part_smem[Ct::kSplitGroups][Ct::kColGroups];
  ptx::griddep_wait();  // kernel 1's partials are complete and visible
  combine_row<T, HEAD_DIM>(p, a, blockIdx.x, part_smem);
}

}  // namespace fl::decode
