/// @file ptx.cuh
/// @brief Small inline wrappers around the PTX instructions the tensor-core
/// rungs (05, 06) are built from: ldmatrix, mma.sync m16n8k16, cp.async, the
/// shared-memory swizzle, programmatic dependent launch and ex2.approx.
///
/// Each wrapper is one instruction, so the kernels read like the PTX manual's
/// data-movement diagrams and nothing is hidden behind a library. All of them
/// need sm_80 (Ampere) or newer; the rungs that use them set `min_cc = 80`, so
/// on older GPUs the runner refuses before any kernel is launched. When this
/// header is compiled for an older architecture (e.g. -arch=sm_75 in a build
/// that targets several GPUs) the bodies become a trap so the build still works.
///
/// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for
/// mma.m16n8k16"), for lane = 32 * warp + lane, g = lane / 4, t = lane % 4:
/// @code
///   // clang-format off
///   A (16 x 16, row-major), 4 registers of 2 x 16-bit:
///     a0 = A[g    ][2t, 2t+1]    a2 = A[g    ][2t+8, 2t+9]
///     a1 = A[g + 8][2t, 2t+1]    a3 = A[g + 8][2t+8, 2t+9]
///   B (16 x 8, "col": stored as B^T rows), 2 registers:
///     b0 = B[2t, 2t+1][g]        b1 = B[2t+8, 2t+9][g]
///   C/D (16 x 8, fp32), 4 registers:
///     c0, c1 = C[g    ][2t, 2t+1]
///     c2, c3 = C[g + 8][2t, 2t+1]
///   // clang-format on
/// @endcode
/// Note that two C tiles side by side (columns 0-7 and 8-15) hold exactly the
/// values an A fragment of the next MMA wants: (c0,c1 | c2,c3) of the left tile
/// are a0 | a1 and those of the right tile are a2 | a3. This is why attention's
/// P = softmax(S) can stay in registers between the two matmuls.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fl::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FL_PTX_SM80_OR_TRAP 0  // device pass for an older GPU: bodies trap
#else
#define FL_PTX_SM80_OR_TRAP 1
#endif

/// Generic pointer -> 32-bit shared-state-space address (what ldmatrix,
/// cp.async and friends take).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------
// ldmatrix: a warp loads four 8 x 8 tiles of 16-bit values from shared memory
// straight into MMA fragment layout. Lanes 8i..8i+7 give the row addresses of
// tile i (each row is 16 contiguous bytes); register r[i] of every lane then
// holds tile i's row lane / 4, elements 2 (lane % 4) and 2 (lane % 4) + 1.
// ---------------------------------------------------------------------------

/// Four 8 x 8 tiles, rows as stored (A operands, and B operands whose
/// rows are the N index, like K in S = Q K^T).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  __trap();
#endif
}

/// Four 8 x 8 tiles, each transposed on the way: the B operand of O += P V,
/// where V is stored [key][dim] (row-major, K x N) but the MMA wants it
/// column-major. Lane now holds column lane / 4, rows 2 (lane % 4), +1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// mma.sync m16n8k16: D = A B + D with 16-bit A/B and fp32 accumulators, one
// warp-wide instruction (the Ampere-style tensor-core path; Hopper still runs
// it, at roughly 2/3 of its wgmma peak).
// ---------------------------------------------------------------------------

/// D(16x8, fp32) += A(16x16) * B(16x8) for storage type T (__half or
/// __nv_bfloat16); accumulates in place.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     uint32_t b0, uint32_t b1) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            uint32_t b0, uint32_t b1) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// cp.async: global -> shared copies that bypass the registers and run in the
// background. Copies issued since the last commit form a "group"; wait_group N
// blocks until at most N groups are still in flight. A multi-stage pipeline
// keeps STAGES - 1 groups in flight while the warps compute on the oldest.
// ---------------------------------------------------------------------------

/// Copies 16 bytes global -> shared (.cg: cached in L2 only; the tile is
/// re-read from shared memory, not L1). If @p src_bytes is 0 nothing is read
/// and the 16 bytes are zero-filled: tails beyond seqlen become zeros in shared
/// memory without a branch around the copy. @p src must still be a valid
/// address (callers pass the tile base).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
#else
  __trap();
#endif
}

/// 4 bytes (one fp32 value) from global to shared memory, asynchronously, through L1 (`.ca`: the
/// only cache mode that takes sizes below 16); @p src_bytes = 0 writes zero instead (a tail).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
#else
  __trap();
#endif
}

/// Closes the current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most @p N committed groups are still in flight (this thread's
/// copies only: a __syncthreads() must follow before other threads read them).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if FL_PTX_SM80_OR_TRAP
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ---------------------------------------------------------------------------
// Swizzle. Shared memory has 32 banks of 4 bytes: one 128-byte line. ldmatrix
// reads 8 rows of 16 bytes at the same column; if the row pitch is a multiple
// of 128 bytes all 8 land in the same 4 banks (8-way conflict). XOR-ing the
// 16-byte chunk index with the row number (mod 8) spreads the 8 rows over the
// 8 chunk slots of a line: zero conflicts, no padding bytes.
// ---------------------------------------------------------------------------

/// Byte offset of 16-byte chunk @p chunk of row @p row in a tile whose rows are
/// ROW_BYTES long, XOR-swizzled so that any 8 consecutive rows (starting at a
/// multiple of 8) read at one logical chunk hit 8 different bank groups.
/// Rows of 64 bytes (head_dim 32 in 16 bits) pack two rows per 128-byte line,
/// so the XOR key is (row / 2) mod 4 there.
///
/// Two properties the kernels rely on:
///  - adding a multiple of 8 rows does not change the XOR key;
///  - for a lane whose logical chunk is c0 in {0, 1}, the chunk c0 + 2k is at
///    `offset ^ (32 * k)`: a k-step of 16 elements is one XOR, no recomputation.
template <int ROW_BYTES>
__host__ __device__ constexpr uint32_t swizzle(int row, int chunk) {
  static_assert(ROW_BYTES % 64 == 0 && (ROW_BYTES & (ROW_BYTES - 1)) == 0,
                "swizzle: rows must be a power of two of at least 64 bytes");
  constexpr int kChunksPerRow = ROW_BYTES / 16;
  constexpr int kRowsPerLine = kChunksPerRow >= 8 ? 1 : 8 / kChunksPerRow;  // 128-byte lines
  constexpr int kKeyMask = (kChunksPerRow >= 8 ? 8 : kChunksPerRow) - 1;
  return static_cast<uint32_t>(row * ROW_BYTES +
                               ((chunk ^ ((row / kRowsPerLine) & kKeyMask)) << 4));
}

// ---------------------------------------------------------------------------
// Programmatic dependent launch (sm_90+; no-ops on older GPUs)
// ---------------------------------------------------------------------------

/// A kernel launched after this one with programmatic stream serialization
/// may start (its CTAs get scheduled) once every CTA of this grid has called
/// this or exited. It does not make this grid's writes visible: the dependent
/// kernel must call griddep_wait() before it reads them.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// Blocks until the grids this kernel depends on (the previous kernel in the
/// stream, when launched with programmatic stream serialization) have
/// completed and their memory operations are visible. Returns at once for a
/// kernel launched the ordinary way.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// Math
// ---------------------------------------------------------------------------

/// 2^x with one MUFU.EX2 (flush-to-zero). Softmax scores are pre-multiplied by
/// log2(e), so exp becomes exp2 and costs a single special-function op;
/// ex2(-inf) = 0, which is what masked scores need.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// Max / sum over the 4 lanes of a quad: lanes 4g .. 4g+3 hold columns 2t, 2t+1
/// of rows g and g+8 of an m16n8 C fragment, so a row's reduction is a quad's.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace fl::ptx
