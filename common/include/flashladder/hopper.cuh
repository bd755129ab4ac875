/// @file hopper.cuh
/// @brief Small inline wrappers around the Hopper (sm_90a) PTX instructions that rungs 09 and 10
/// are built from: mbarrier, the async-proxy fences, TMA tensor loads, wgmma.mma_async with its
/// fence / commit / wait, setmaxnreg and named barriers. The Hopper counterpart of ptx.cuh;
/// docs/hopper.md is the long explanation with diagrams.
///
/// Each wrapper is one instruction (or one short spin loop), so a kernel reads like the PTX ISA's
/// description of the pipeline and nothing is hidden behind CUTLASS or CuTe.
///
/// **Two proxies.** Hopper's shared memory is written and read by two kinds of agent: ordinary
/// loads and stores (the *generic proxy*) and the copy engine and tensor cores (the *async
/// proxy*: TMA writes tiles, wgmma reads its shared-memory operands). Ordering between the two is
/// never implied; every hand-off names its mechanism:
/// @code
///   // clang-format off
///   who writes           what orders it                    who may then read / reuse
///   TMA (smem tile)      complete_tx on the mbarrier       threads that saw the phase flip,
///                                                          and their wgmmas
///   st.shared, stmatrix  fence.proxy.async + a barrier     wgmma, TMA store
///   mbarrier.init        fence.mbarrier_init + barrier     TMA (complete_tx), other threads
///   wgmma (reads smem)   wait_group + arrive on "empty"    the producer's next TMA into it
///   registers (D, A)     wgmma.fence                       the next wgmma
///   wgmma (writes D)     commit_group + wait_group         the threads of the warpgroup
///   // clang-format on
/// @endcode
///
/// **Build.** `wgmma` and `setmaxnreg` exist only in the architecture-specific target sm_90a
/// (`-gencode=arch=compute_90a,code=sm_90a`; common/FlashLadder.cmake's fl_hopper_target does
/// that). nvcc defines `__CUDA_ARCH_FEAT_SM90_ALL` in that pass only. In any other device pass
/// (sm_80, plain sm_90) every body below becomes a trap, as ptx.cuh does for pre-Ampere GPUs;
/// the Hopper rungs never launch there (their `supports` refuses any GPU that is not sm_90, and a
/// build without sm_90a registers the rung with a reason instead of its kernels).
#pragma once

#include <cuda.h>  // CUtensorMap (header only: nothing links against the driver)
#include <stdint.h>

#include "flashladder/ptx.cuh"  // smem_addr
#include "flashladder/wgmma_desc.h"

namespace fl::hopper {

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FL_SM90A_OR_TRAP 1  // host pass (bodies never run there) or the sm_90a device pass
#else
#define FL_SM90A_OR_TRAP 0  // any other device pass: bodies trap
#endif

using fl::ptx::smem_addr;

/// Threads in a warpgroup: the unit that issues wgmma and setmaxnreg (4 consecutive warps, the
/// first of which has an index divisible by 4).
constexpr int kWarpgroupThreads = 128;

/// threadIdx.x / 128, made visibly warp-uniform to the compiler (a shuffle from lane 0), so
/// `if (warpgroup_index() == 0) { producer } else { consumer }` compiles to one uniform branch
/// per warpgroup: setmaxnreg needs each role to be one side of such a branch.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// ---------------------------------------------------------------------------
// mbarrier: a 64-bit shared-memory object with a pending-arrival count, a pending
// transaction (byte) count and a phase bit. A phase completes when both counts reach
// zero; the phase bit then flips and the arrival count is re-armed to its init value.
//
//   // clang-format off
//   phase:     0 (parity 0)                  | 1 (parity 1)                  | 2 (parity 0) ...
//   producer:  arrive.expect_tx(+bytes) -1   |  arrive.expect_tx(+bytes) -1  |
//   TMA:       ...complete_tx(-bytes) -> 0   |  ...complete_tx(-bytes) -> 0  |
//   consumer:  try_wait.parity(0): spins until phase 0 completes, then true
//                                            try_wait.parity(1) ...
//   // clang-format on
//
// try_wait.parity(P) is true once the phase of parity P has completed, i.e. when the
// barrier's current parity is no longer P. So a waiter only keeps one bit: stage s of
// a ring of S stages, on its k-th use (k = iteration / S), waits for parity k & 1; a
// producer waiting for a stage to be *empty* waits for (k & 1) ^ 1, which is true at
// once on a fresh barrier (the "phase before phase 0" counts as completed).
// ---------------------------------------------------------------------------

/// Initializes the barrier at shared address @p bar to expect @p count arrivals per phase
/// (phase 0, no pending transactions). One thread does this; then fence_mbarrier_init() and a
/// __syncthreads() before anyone (thread or TMA) uses it.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
#if FL_SM90A_OR_TRAP
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  __trap();
#endif
}

/// Makes preceding mbarrier.init visible to the async proxy (the TMA unit that will signal
/// complete_tx on it). Its only PTX form is .release.cluster; inside one CTA it costs nothing
/// extra. The __syncthreads() that follows publishes the init to the other threads.
__device__ __forceinline__ void fence_mbarrier_init() {
#if FL_SM90A_OR_TRAP
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Arrives on @p bar (one of its `count` arrivals) without waiting: a consumer releasing a
/// ring stage ("empty" barrier) after its wgmma reads of that stage have completed. Release
/// semantics: this thread's earlier memory accesses happen before the phase completes.
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#if FL_SM90A_OR_TRAP
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  __trap();
#endif
}

/// Arrives on @p bar and adds @p bytes to the transactions the current phase waits for: the
/// producer calls it once per stage with the total bytes of the TMA loads it is about to issue
/// (the loads' complete_tx then count those bytes back down). Order does not matter: a TMA may
/// complete before its expect_tx is seen, because the phase cannot complete while this thread's
/// arrival is still pending.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if FL_SM90A_OR_TRAP
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

/// One bounded wait (the hardware may suspend the thread for a while): true once the phase of
/// parity @p parity has completed. Acquire semantics: a true result makes everything released
/// into that phase (the TMA bytes, the arriving threads' writes) visible to this thread.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity) {
#if FL_SM90A_OR_TRAP
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
#else
  __trap();
  return false;
#endif
}

/// Spins until the phase of parity @p parity of @p bar has completed (see the diagram above).
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------
// Proxy fence
// ---------------------------------------------------------------------------

/// Orders this thread's earlier generic-proxy shared-memory writes (st.shared, stmatrix) before
/// later async-proxy accesses (wgmma operand reads, TMA stores) of the same CTA's shared memory.
/// Every writing thread executes it, then a barrier (__syncthreads or a named barrier) hands
/// the tile over. Not needed for tiles written by TMA: their mbarrier phase already orders them.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if FL_SM90A_OR_TRAP
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// TMA: cp.async.bulk.tensor, global -> shared, one box of a tensor map (tma.h) per
// instruction, issued by ONE thread. Coordinates are element indices, innermost
// dimension first (the tensor map's order); a box that sticks out of the tensor is
// filled with zeros (the map's OOB fill), which is how the rungs handle seqlen tails
// without padding. Completion is counted in bytes on the mbarrier @p bar: always the
// full box bytes, zeros included. The destination must be 1024-byte aligned for the
// 128B swizzle (the pattern repeats every 1024 bytes).
// ---------------------------------------------------------------------------

/// Fetches the 128-byte tensor map into the TMA unit's descriptor cache ahead of the first
/// load (one thread, kernel start). @p map is the address of a `const __grid_constant__
/// CUtensorMap` kernel parameter.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if FL_SM90A_OR_TRAP
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  __trap();
#endif
}

/// 2D box at (c0, c1) -> shared address @p dst, completing on @p bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
#if FL_SM90A_OR_TRAP
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

/// 3D box at (c0, c1, c2).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2) {
#if FL_SM90A_OR_TRAP
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

/// 4D box at (c0, c1, c2, c3): the ladder's [batch, seqlen, heads, head_dim] tensors, whose
/// maps (tma.h) list the dimensions innermost first as (dim, head, seq, batch). A K tile of
/// rung 09 is `tma_load_4d(dst, &map_K, bar, 64 * cb, head_kv, n_block * BLOCK_N, batch)` for
/// each 64-element column block cb of head_dim.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
#if FL_SM90A_OR_TRAP
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  __trap();
#endif
}

/// A contiguous run of @p bytes from global @p src to shared @p dst (no tensor map: the plain
/// bulk copy), completing on @p bar like a tensor load. Both addresses 16-byte aligned, bytes a
/// multiple of 16. Rung 14 loads the LSE and D of a query block with it, from rows padded to the
/// block so that no copy reads past them.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#if FL_SM90A_OR_TRAP
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// Bulk reduce-add, shared -> global: cp.reduce.async.bulk ... .add.f32 adds a contiguous run of
// fp32 values in shared memory into global memory, element by element, atomically per element,
// issued by ONE thread and carried out by the TMA unit while the threads go on. This is how
// FlashAttention-3's backward adds each block's dQ share into the fp32 dQ accumulator: a writer
// warp hands the tile to the TMA unit, in place of the math warps' per-element atomics.
//
//   (every writing thread)  st.shared ...; fence_proxy_async_smem(); then a barrier
//   (one thread)            bulk_reduce_add_f32(dst, src, bytes) x k; bulk_commit_group()
//   (that thread)           bulk_wait_group_read<0>()   the sources are read: the tile may be reused
//
// Both addresses 16-byte aligned, bytes a multiple of 16. The adds of one group finish in no fixed
// order, so float sums differ run to run in the last bits, as with atomics.
// ---------------------------------------------------------------------------

/// Adds @p bytes / 4 floats at shared address @p src into global @p dst (its bulk group: the
/// next bulk_commit_group).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
#if FL_SM90A_OR_TRAP
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(src), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

/// 4D box from shared @p src to global at (c0, c1, c2, c3) of @p map (tma_load_4d's coordinates;
/// its bulk group: the next bulk_commit_group). Elements of the box outside the tensor are not
/// written. Rung 14 writes each K/V block's dK and dV with it: the math warps stage a tile in shared
/// memory in the map's 128-byte swizzle, fence (fence_proxy_async_smem), meet at a barrier, and one
/// thread issues the copy, then waits for its read (bulk_wait_group_read) before the tile is reused.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
#if FL_SM90A_OR_TRAP
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
#else
  __trap();
#endif
}

/// Closes this thread's bulk copies issued since the last commit into one bulk group.
__device__ __forceinline__ void bulk_commit_group() {
#if FL_SM90A_OR_TRAP
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Waits until at most @p N of this thread's bulk groups still read their shared-memory sources:
/// with N = 0, every source tile may be overwritten. (The global adds may still be in flight; a
/// kernel's end, or bulk_wait_group, waits for them.)
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
#if FL_SM90A_OR_TRAP
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

/// Waits until at most @p N of this thread's bulk groups are incomplete, global writes included.
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
#if FL_SM90A_OR_TRAP
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// wgmma: D(64 x N, fp32 registers) = A(64 x 16) * B(16 x N) + scale_d * D, issued by a
// whole warpgroup and executed asynchronously by the tensor cores.
//
//   wgmma_fence()                  registers written before this are safe to feed in
//   wgmma_ss / wgmma_rs  x k       queued; the tensor cores run them in order
//   wgmma_commit()                 close the batch into a "wgmma-group"
//   ... other work (softmax of the previous block, issuing TMA) ...
//   wgmma_wait<0>()                the group is done: D may be read, its smem reused
//
// Accumulator layout (PTX ISA, "Register Fragments: wgmma .m64nNk16"), thread t of the
// warpgroup, w = t / 32 (its warp), g = (t % 32) / 4, q = t % 4: the warp owns rows
// 16w .. 16w+15, and register d[4j + i] holds
//   // clang-format off
//   i = 0, 1:  D[16w + g    ][8j + 2q + i]
//   i = 2, 3:  D[16w + g + 8][8j + 2q + i - 2]        for j = 0 .. N/8 - 1
//   // clang-format on
// i.e. N/8 side-by-side m16n8 C fragments, exactly mma.sync's (ptx.cuh). The A fragment of
// the register form (RS) is mma.sync's m16n8k16 A fragment for the warp's 16 rows, so the
// S accumulators of columns 16kk .. 16kk+15 become P's A fragment for k-step kk by packing
//   a[0] = pack(d[8kk+0], d[8kk+1])   a[1] = pack(d[8kk+2], d[8kk+3])
//   a[2] = pack(d[8kk+4], d[8kk+5])   a[3] = pack(d[8kk+6], d[8kk+7])
// (FA2's register reuse, now per warpgroup).
//
// The compiler's side of the contract: the wgmma asm statements name the accumulators as
// operands, but the hardware writes them later, at wait_group. wgmma_fence_operand()
// pins them around the batch so the compiler moves no read or write of D across it.
// ptxas checks the pattern and, when it cannot prove it, serializes every wgmma
// ("Potential Performance Loss", C7510/C7511/C7515), which the Hopper build turns into
// an error (common/FlashLadder.cmake, fl_hopper_target).
// ---------------------------------------------------------------------------

/// Orders all prior register accesses (accumulators and A fragments) and the warpgroup's prior
/// shared-memory accesses before the next wgmma.mma_async. Required before the first wgmma of
/// every batch: whenever anything other than a wgmma of the same shape touched D or A.
__device__ __forceinline__ void wgmma_fence() {
#if FL_SM90A_OR_TRAP
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Closes all uncommitted wgmma.mma_async of this warpgroup into one wgmma-group.
__device__ __forceinline__ void wgmma_commit() {
#if FL_SM90A_OR_TRAP
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

/// Waits until at most @p N wgmma-groups of this warpgroup are pending. Reading an accumulator,
/// or overwriting an A fragment or a shared-memory operand, of a pending group is undefined:
/// wait first. N > 0 keeps the tensor cores busy while the warpgroup does other work (FA3's
/// softmax of block j under the QK^T of block j + 1).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
#if FL_SM90A_OR_TRAP
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}

/// A compiler-only fence on each register of @p r: emits nothing, but the compiler must assume
/// the asm reads and writes them, so no access to them moves across it. Call on D (and the RS
/// form's A) before wgmma_fence() and after wgmma_wait() (FA3: warpgroup_fence_operand).
template <int K>
__device__ __forceinline__ void wgmma_fence_operand(float (&r)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int K>
__device__ __forceinline__ void wgmma_fence_operand(uint32_t (&r)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

/// Descriptor of a K-major 128B-swizzled operand at generic shared pointer @p p (wgmma_desc.h).
__device__ __forceinline__ uint64_t desc_kmajor(const void* p) {
  return fl::wgmma::desc_kmajor_sw128(smem_addr(p));
}
/// Descriptor of an MN-major 128B-swizzled operand (V: trans-b = 1) in a tile @p rows_total rows
/// (keys) high.
__device__ __forceinline__ uint64_t desc_mnmajor(const void* p, uint32_t rows_total) {
  return fl::wgmma::desc_mnmajor_sw128(smem_addr(p), rows_total);
}

namespace detail {

// The instruction's operand lists, spelled out once: inline asm takes only numbered operands
// (%0, %1, ...; nvcc rejects symbolic names), and an m64nNk16 accumulator is N / 2 registers.
// FL_WGMMA_ACC_<N> lists %0 .. %(N/2 - 1); FL_WGMMA_OUT_<N>(d) binds them to d[0 .. N/2 - 1].
// clang-format off
#define FL_WGMMA_ACC_16  "%0, %1, %2, %3, %4, %5, %6, %7"
#define FL_WGMMA_ACC_32  FL_WGMMA_ACC_16  ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FL_WGMMA_ACC_48  FL_WGMMA_ACC_32  ", %16, %17, %18, %19, %20, %21, %22, %23"
#define FL_WGMMA_ACC_64  FL_WGMMA_ACC_48  ", %24, %25, %26, %27, %28, %29, %30, %31"
#define FL_WGMMA_ACC_80  FL_WGMMA_ACC_64  ", %32, %33, %34, %35, %36, %37, %38, %39"
#define FL_WGMMA_ACC_96  FL_WGMMA_ACC_80  ", %40, %41, %42, %43, %44, %45, %46, %47"
#define FL_WGMMA_ACC_112 FL_WGMMA_ACC_96  ", %48, %49, %50, %51, %52, %53, %54, %55"
#define FL_WGMMA_ACC_128 FL_WGMMA_ACC_112 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define FL_WGMMA_ACC_144 FL_WGMMA_ACC_128 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define FL_WGMMA_ACC_160 FL_WGMMA_ACC_144 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define FL_WGMMA_ACC_176 FL_WGMMA_ACC_160 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define FL_WGMMA_ACC_192 FL_WGMMA_ACC_176 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define FL_WGMMA_ACC_208 FL_WGMMA_ACC_192 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define FL_WGMMA_ACC_224 FL_WGMMA_ACC_208 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define FL_WGMMA_ACC_240 FL_WGMMA_ACC_224 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define FL_WGMMA_ACC_256 FL_WGMMA_ACC_240 ", %120, %121, %122, %123, %124, %125, %126, %127"

#define FL_WGMMA_D8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
                          "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define FL_WGMMA_OUT_16(d)  FL_WGMMA_D8(d, 0)
#define FL_WGMMA_OUT_32(d)  FL_WGMMA_OUT_16(d),  FL_WGMMA_D8(d, 8)
#define FL_WGMMA_OUT_48(d)  FL_WGMMA_OUT_32(d),  FL_WGMMA_D8(d, 16)
#define FL_WGMMA_OUT_64(d)  FL_WGMMA_OUT_48(d),  FL_WGMMA_D8(d, 24)
#define FL_WGMMA_OUT_80(d)  FL_WGMMA_OUT_64(d),  FL_WGMMA_D8(d, 32)
#define FL_WGMMA_OUT_96(d)  FL_WGMMA_OUT_80(d),  FL_WGMMA_D8(d, 40)
#define FL_WGMMA_OUT_112(d) FL_WGMMA_OUT_96(d),  FL_WGMMA_D8(d, 48)
#define FL_WGMMA_OUT_128(d) FL_WGMMA_OUT_112(d), FL_WGMMA_D8(d, 56)
#define FL_WGMMA_OUT_144(d) FL_WGMMA_OUT_128(d), FL_WGMMA_D8(d, 64)
#define FL_WGMMA_OUT_160(d) FL_WGMMA_OUT_144(d), FL_WGMMA_D8(d, 72)
#define FL_WGMMA_OUT_176(d) FL_WGMMA_OUT_160(d), FL_WGMMA_D8(d, 80)
#define FL_WGMMA_OUT_192(d) FL_WGMMA_OUT_176(d), FL_WGMMA_D8(d, 88)
#define FL_WGMMA_OUT_208(d) FL_WGMMA_OUT_192(d), FL_WGMMA_D8(d, 96)
#define FL_WGMMA_OUT_224(d) FL_WGMMA_OUT_208(d), FL_WGMMA_D8(d, 104)
#define FL_WGMMA_OUT_240(d) FL_WGMMA_OUT_224(d), FL_WGMMA_D8(d, 112)
#define FL_WGMMA_OUT_256(d) FL_WGMMA_OUT_240(d), FL_WGMMA_D8(d, 120)

// One shape for one 16-bit type. Operands after the N/2 accumulators are numbered
// from K0 = N/2:
//   SS: %K0 desc_a, %K1 desc_b, %K2 scale_d, %K3 trans_b, %K4 trans_a
//   RS: %K0..%K3 the A fragment, %K4 desc_b, %K5 scale_d, %K6 trans_b
// scale_d is a predicate in PTX (0: D = A B, overwrite; 1: D = A B + D), set from a
// register so one code path zero-initializes on the first k-step. imm-scale-a/b = 1 (no
// negation); imm-trans-b = 1 reads an MN-major B (V stored [key][dim]) and is a compile-time
// template argument; so is imm-trans-a of the SS form (1: an MN-major A, rung 14's dQ = dS K
// with dS stored [key][query]). A in registers is always K-major.
#define FL_WGMMA_DEFINE_T(T, TY, N, K0, K1, K2, K3, K4, K5, K6)                              \
  template <>                                                                               \
  struct WgmmaOp<T, N> {                                                                    \
    template <int TRANS_B, int TRANS_A>                                                     \
    static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t desc_a,          \
                                              uint64_t desc_b, int scale_d) {               \
      asm volatile(                                                                         \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #K2 ", 0;\n"                                 \
          "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {"                  \
          FL_WGMMA_ACC_##N "}, %" #K0 ", %" #K1 ", p, 1, 1, %" #K4 ", %" #K3 ";\n}\n"       \
          : FL_WGMMA_OUT_##N(d)                                                             \
          : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_B), "n"(TRANS_A));            \
    }                                                                                       \
    template <int TRANS_B>                                                                  \
    static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4],  \
                                              uint64_t desc_b, int scale_d) {               \
      asm volatile(                                                                         \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #K5 ", 0;\n"                                 \
          "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {"                  \
          FL_WGMMA_ACC_##N "}, {%" #K0 ", %" #K1 ", %" #K2 ", %" #K3 "}, %" #K4             \
          ", p, 1, 1, %" #K6 ";\n}\n"                                                       \
          : FL_WGMMA_OUT_##N(d)                                                             \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d),          \
            "n"(TRANS_B));                                                                  \
    }                                                                                       \
  };
#define FL_WGMMA_DEFINE(N, K0, K1, K2, K3, K4, K5, K6)                    \
  FL_WGMMA_DEFINE_T(__half, "f16", N, K0, K1, K2, K3, K4, K5, K6)        \
  FL_WGMMA_DEFINE_T(__nv_bfloat16, "bf16", N, K0, K1, K2, K3, K4, K5, K6)

template <class T, int N>
struct WgmmaOp;  // defined below for N = 16, 32, ..., 256 (every tile width rungs 09-10 use)

FL_WGMMA_DEFINE(16,    8,   9,  10,  11,  12,  13,  14)
FL_WGMMA_DEFINE(32,   16,  17,  18,  19,  20,  21,  22)
FL_WGMMA_DEFINE(48,   24,  25,  26,  27,  28,  29,  30)
FL_WGMMA_DEFINE(64,   32,  33,  34,  35,  36,  37,  38)
FL_WGMMA_DEFINE(80,   40,  41,  42,  43,  44,  45,  46)
FL_WGMMA_DEFINE(96,   48,  49,  50,  51,  52,  53,  54)
FL_WGMMA_DEFINE(112,  56,  57,  58,  59,  60,  61,  62)
FL_WGMMA_DEFINE(128,  64,  65,  66,  67,  68,  69,  70)
FL_WGMMA_DEFINE(144,  72,  73,  74,  75,  76,  77,  78)
FL_WGMMA_DEFINE(160,  80,  81,  82,  83,  84,  85,  86)
FL_WGMMA_DEFINE(176,  88,  89,  90,  91,  92,  93,  94)
FL_WGMMA_DEFINE(192,  96,  97,  98,  99, 100, 101, 102)
FL_WGMMA_DEFINE(208, 104, 105, 106, 107, 108, 109, 110)
FL_WGMMA_DEFINE(224, 112, 113, 114, 115, 116, 117, 118)
FL_WGMMA_DEFINE(240, 120, 121, 122, 123, 124, 125, 126)
FL_WGMMA_DEFINE(256, 128, 129, 130, 131, 132, 133, 134)

// FP8 (rung 13): e4m3 x e4m3 -> f32, k32 per instruction. 8-bit operands have no transpose
// immediates: both must be K-major. Operands after the N/2 accumulators:
//   SS: %K0 desc_a, %K1 desc_b, %K2 scale_d
//   RS: %K0..%K3 the A fragment (4 e4m3 per register), %K4 desc_b, %K5 scale_d
#define FL_WGMMA_DEFINE_E4M3(N, K0, K1, K2, K3, K4, K5)                                       \
  template <>                                                                                 \
  struct WgmmaE4m3<N> {                                                                       \
    static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t desc_a,            \
                                              uint64_t desc_b, int scale_d) {                 \
      asm volatile(                                                                           \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #K2 ", 0;\n"                                   \
          "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {"                        \
          FL_WGMMA_ACC_##N "}, %" #K0 ", %" #K1 ", p, 1, 1;\n}\n"                              \
          : FL_WGMMA_OUT_##N(d)                                                               \
          : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                          \
    }                                                                                         \
    static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4],    \
                                              uint64_t desc_b, int scale_d) {                 \
      asm volatile(                                                                           \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #K5 ", 0;\n"                                   \
          "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {"                        \
          FL_WGMMA_ACC_##N "}, {%" #K0 ", %" #K1 ", %" #K2 ", %" #K3 "}, %" #K4 ", p, 1, 1;\n}\n" \
          : FL_WGMMA_OUT_##N(d)                                                               \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));           \
    }                                                                                         \
  };

template <int N>
struct WgmmaE4m3;  // N = 64, 128, 192, 256: rung 13's S widths and head_dims

FL_WGMMA_DEFINE_E4M3(64,   32,  33,  34,  35,  36,  37)
FL_WGMMA_DEFINE_E4M3(128,  64,  65,  66,  67,  68,  69)
FL_WGMMA_DEFINE_E4M3(192,  96,  97,  98,  99, 100, 101)
FL_WGMMA_DEFINE_E4M3(256, 128, 129, 130, 131, 132, 133)
#undef FL_WGMMA_DEFINE_E4M3
// clang-format on
#undef FL_WGMMA_DEFINE
#undef FL_WGMMA_DEFINE_T

}  // namespace detail

/// D(64 x N) = A B + (scale_d ? D : 0), A and B both from shared memory (the "SS" form):
/// S = Q K^T with A = Q (64 rows of this warpgroup, K-major) and B = K (N keys, K-major, so
/// TRANS_B = 0). @p desc_a / @p desc_b come from desc_kmajor() at this k-step's offset
/// (fl::wgmma::sw128_kmajor_offset). T is __half or __nv_bfloat16; N a multiple of 16 up to 256.
/// TRANS_A = 1 reads an MN-major A (desc_mnmajor_sw128 at sw128_mnmajor_offset): rung 14's
/// dQ = dS K_j, with dS stored [key][query].
template <class T, int N, int TRANS_B = 0, int TRANS_A = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B is 0 (K-major B) or 1 (MN-major B)");
  static_assert(TRANS_A == 0 || TRANS_A == 1, "TRANS_A is 0 (K-major A) or 1 (MN-major A)");
#if FL_SM90A_OR_TRAP
  detail::WgmmaOp<T, N>::template ss<TRANS_B, TRANS_A>(d, desc_a, desc_b, scale_d);
#else
  __trap();
#endif
}

/// D(64 x N) = A B + (scale_d ? D : 0), A from registers (the "RS" form): O += P V with the
/// warp's 16 rows of P packed as above (@p a), B = V from shared memory. V is stored [key][dim]
/// (dim contiguous: MN-major for B), so rung 09 calls it with TRANS_B = 1 and a desc_mnmajor()
/// descriptor; N = head_dim.
template <class T, int N, int TRANS_B = 1>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                         int scale_d) {
  static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B is 0 (K-major B) or 1 (MN-major B)");
#if FL_SM90A_OR_TRAP
  detail::WgmmaOp<T, N>::template rs<TRANS_B>(d, a, desc_b, scale_d);
#else
  __trap();
#endif
}

/// The FP8 SS form (rung 13): D(64 x N) = A B (+ D), A and B e4m3 in shared memory, both
/// K-major (desc_kmajor_sw at kmajor_offset, wgmma_desc.h), 32 of K per instruction.
template <int N>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FL_SM90A_OR_TRAP
  detail::WgmmaE4m3<N>::ss(d, desc_a, desc_b, scale_d);
#else
  __trap();
#endif
}

/// The FP8 RS form: A from registers, 4 e4m3 per register in mma.sync m16n8k32's A order
/// (a[0]: row g, k = 4t .. 4t+3; a[1]: row g+8, same k; a[2], a[3]: k + 16), B K-major in shared
/// memory. Rung 13's O += P V, with V transposed so that it is K-major.
template <int N>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                              int scale_d) {
#if FL_SM90A_OR_TRAP
  detail::WgmmaE4m3<N>::rs(d, a, desc_b, scale_d);
#else
  __trap();
#endif
}

// ---------------------------------------------------------------------------
// Register reallocation and named barriers (warp specialization, rung 10)
// ---------------------------------------------------------------------------

/// Raises this warpgroup's per-thread register limit to @p N (blocks until the CTA's pool has
/// them): the consumer warpgroups that hold the S and O accumulators. All warps of the
/// warpgroup execute it. Takes effect only when the kernel's register count at entry is known
/// (`__launch_bounds__(threads, 1)`); otherwise ptxas ignores it and says so (C7508, an error in
/// this build).
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if FL_SM90A_OR_TRAP
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

/// Lowers this warpgroup's register limit to @p N, returning the rest to the CTA's pool: the
/// producer warpgroup, which only issues TMA (FA3: 24 with two consumer warpgroups, 32 with
/// three). Budget: producers x 128 x N_dec + consumers x 128 x N_inc <= 65536 per SM.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
#if FL_SM90A_OR_TRAP
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#else
  __trap();
#endif
}

/// Hardware barrier @p id (1..15; 0 is __syncthreads') among @p count threads (a multiple of
/// 32): waits until @p count threads have arrived. Unlike __syncthreads, it synchronizes a
/// subset of warps (e.g. the two consumer warpgroups, 256 threads) while the producer keeps
/// running. Orders shared-memory accesses among the participants (generic proxy only). bar.sync
/// exists on every architecture, so this one and named_barrier_arrive need no sm_90a guard.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/// Arrives on barrier @p id without waiting: the signalling half of a hand-off (FA3's ping-pong:
/// consumer warpgroup 1 finishes its GEMMs and lets warpgroup 2 start its own, which waits with
/// named_barrier_sync on the same id and count).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace fl::hopper
