/// @file steps/07_dv_tiling/launch.cu
/// @brief Rung 07's launcher: grid shapes, supports(), the variants of the spill
/// study, and the `--sweep` table (registers, local memory, occupancy, time).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "flashladder/inputs.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/runner.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "variants.h"

namespace fl {
namespace {

using namespace dv_tiling;

/// Which kernel a variant runs.
enum class KernelKind { dv_tiled, split_d };

/// What the sweep table prints about a variant (template arguments, as data).
struct VariantSpec {
  KernelKind kind;
  int dv_tile;  ///< kUntiled = head_dim
  int block_m;
  int block_n;
};

/// One row of the sweep: the variant and the Rung that runs it.
struct SweepEntry {
  VariantSpec spec;
  Rung rung;
};

/// Every variant, filled by register_rung_07 (the sweep runs them in this order).
std::vector<SweepEntry>& sweep_entries() {
  static std::vector<SweepEntry> entries;
  return entries;
}

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

template <class T>
struct TypeTag {
  using type = T;
};

/// Runs f(std::integral_constant<int, D>{}) for head_dim D = 64 or 128, the only
/// ones this rung instantiates (FL_HEADDIM_SWITCH would also build 32 and 256).
template <class R, class F>
R head_dim_switch(int d, F&& f) {
  if constexpr (head_dim_built(64))
    if (d == 64) return f(std::integral_constant<int, 64>{});
  if constexpr (head_dim_built(128))
    if (d == 128) return f(std::integral_constant<int, 128>{});
  throw std::invalid_argument("rung 07: head_dim " + std::to_string(d) + " not built");
}

/// Runs f(TypeTag<T>{}, std::integral_constant<int, D>{}) for the runtime dtype and head_dim.
template <class R, class F>
R dispatch(DType dtype, int head_dim, F&& f) {
  return FL_DTYPE_SWITCH(dtype, T, [&]() -> R {
    return head_dim_switch<R>(head_dim, [&](auto hd) -> R { return f(TypeTag<T>{}, hd); });
  });
}

/// The kernels load rows 16 bytes at a time: every stride must be a multiple of 8
/// elements and every base pointer 16-byte aligned (true of the runner's dense layout).
void check_vector_layout(const AttnParams& p) {
  const int64_t strides[] = {p.q_batch_stride, p.q_row_stride,   p.q_head_stride,  p.k_batch_stride,
                             p.k_row_stride,   p.k_head_stride,  p.v_batch_stride, p.v_row_stride,
                             p.v_head_stride,  p.o_batch_stride, p.o_row_stride,   p.o_head_stride};
  for (int64_t s : strides)
    if (s % kVec != 0)
      throw std::invalid_argument("rung 07 needs strides that are multiples of 8 elements");
  const void* ptrs[] = {p.q, p.k, p.v, p.o};
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      throw std::invalid_argument("rung 07 needs 16-byte aligned Q, K, V and O");
}

/// Checks every variant shares: grid limits and what this build compiled.
std::string grid_supports(const Problem& p) {
  if (p.heads_q > 65535) return "heads_q must be <= 65535 (gridDim.y)";
  if (p.batch > 65535) return "batch must be <= 65535 (gridDim.z)";
  if (!head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (FL_HEAD_DIM)";
  if (!dtype_built(p.dtype)) return std::string(dtype_name(p.dtype)) + " not built (FL_DTYPE)";
  return "";
}

/// DV_TILE as instantiated: kUntiled (or a tile as wide as the row) means one tile.
constexpr int resolved_dv_tile(int dv_tile, int head_dim) {
  return (dv_tile == kUntiled || dv_tile > head_dim) ? head_dim : dv_tile;
}

template <class T, int HEAD_DIM, int DV, int BLOCK_M, int BLOCK_N>
using DvTr = DvTraits<T, HEAD_DIM, resolved_dv_tile(DV, HEAD_DIM), BLOCK_M, BLOCK_N>;

template <class T, int HEAD_DIM>
using SplitTr = SplitDTraits<T, HEAD_DIM, kMainBlockM, kMainBlockN, kSplitThreadsPerRow>;

template <class Tr>
void launch_dv(const AttnParams& p, cudaStream_t stream) {
  check_vector_layout(p);
  const dim3 grid(ceil_div(p.seqlen_q, Tr::BLOCK_M), p.heads_q, p.batch);
  dv_tiled_fwd<Tr><<<grid, Tr::THREADS, 0, stream>>>(p);
  FL_LAUNCH_CHECK("dv_tiled_fwd");
}

template <class Tr>
void launch_split_d(const AttnParams& p, cudaStream_t stream) {
  check_vector_layout(p);
  const dim3 grid(ceil_div(p.seqlen_q, Tr::BLOCK_M), p.heads_q, p.batch);
  split_d_fwd<Tr><<<grid, Tr::THREADS, 0, stream>>>(p);
  FL_LAUNCH_CHECK("split_d_fwd");
}

int run_sweep(const Options& opt);

/// Fields every entry of rung 07 shares.
Rung base_rung() {
  Rung r;
  r.number = 7;
  r.name = "dv_tiling";
  r.peak = Peak::fp32_fma;
  r.head_dims = {64, 128};
  r.workspace_bytes = [](const Problem&) { return size_t{0}; };
  r.sweep = run_sweep;
  return r;
}

/// Extra report lines: what stays in registers and how often K is re-read.
std::vector<std::string> dv_notes(const Problem& p, int dv_tile, int block_m, int block_n) {
  const int dv = resolved_dv_tile(dv_tile, p.head_dim);
  const int tiles = p.head_dim / dv;
  return {"DV_TILE " + std::to_string(dv) + " (" + std::to_string(tiles) +
              " pass(es) over K/V: K re-read and S = QK^T recomputed per pass), BLOCK_M " +
              std::to_string(block_m) + ", BLOCK_N " + std::to_string(block_n),
          "registers per thread hold q_i (" + std::to_string(p.head_dim) +
              " floats) + one O tile (" + std::to_string(dv) +
              " floats); 'local' in the kernel line is the spill space"};
}

/// A DV-tiled entry with compile-time tiles (DV = kUntiled for the untiled kernel).
template <int DV, int BLOCK_M, int BLOCK_N>
Rung make_dv_rung(const std::string& variant) {
  Rung r = base_rung();
  r.variant = variant;
  r.in_tour = false;
  r.summary = DV == kUntiled ? "one query row per thread, all of O_i in registers (spills at d=128)"
                             : "one query row per thread, O_i in DV_TILE-column passes over K/V";
  if (DV != kUntiled)  // a sweep point is compared with the untiled kernel of its block shape
    r.baselines = {Baseline::on(7, "the untiled kernel with the same BLOCK_M and BLOCK_N",
                                dv_variant_name(kUntiled, BLOCK_M, BLOCK_N))};
  r.supports = [](const Problem& p, const DeviceInfo&) -> std::string {
    if (DV != kUntiled && DV >= p.head_dim)
      return "DV_TILE " + std::to_string(DV) + " is not below head_dim " +
             std::to_string(p.head_dim) + ": one tile is the untiled variant";
    return grid_supports(p);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    dispatch<void>(static_cast<DType>(p.dtype), p.head_dim, [&](auto t, auto hd) {
      launch_dv<DvTr<typename decltype(t)::type, decltype(hd)::value, DV, BLOCK_M, BLOCK_N>>(p, s);
    });
  };
  r.kernels = [](const Problem& p) {
    return dispatch<std::vector<KernelInfo>>(p.dtype, p.head_dim, [&](auto t, auto hd) {
      using Tr = DvTr<typename decltype(t)::type, decltype(hd)::value, DV, BLOCK_M, BLOCK_N>;
      return std::vector<KernelInfo>{
          {"dv_tiled_fwd", reinterpret_cast<const void*>(&dv_tiled_fwd<Tr>), Tr::THREADS, 0}};
    });
  };
  r.notes = [](const Problem& p) { return dv_notes(p, DV, BLOCK_M, BLOCK_N); };
  return r;
}

/// The four (BLOCK_M, BLOCK_N) points of the sweep for one DV_TILE.
template <int DV>
void add_block_shapes(std::vector<SweepEntry>* out) {
  out->push_back(
      {{KernelKind::dv_tiled, DV, 32, 32}, make_dv_rung<DV, 32, 32>(dv_variant_name(DV, 32, 32))});
  out->push_back(
      {{KernelKind::dv_tiled, DV, 32, 64}, make_dv_rung<DV, 32, 64>(dv_variant_name(DV, 32, 64))});
  out->push_back(
      {{KernelKind::dv_tiled, DV, 64, 32}, make_dv_rung<DV, 64, 32>(dv_variant_name(DV, 64, 32))});
  out->push_back(
      {{KernelKind::dv_tiled, DV, 64, 64}, make_dv_rung<DV, 64, 64>(dv_variant_name(DV, 64, 64))});
}

Rung make_split_d_rung() {
  Rung r = base_rung();
  r.variant = "split-d";
  r.in_tour = false;
  r.summary = "4 threads per query row, head_dim split across them, dot products by warp shuffles";
  r.baselines = {Baseline::on(7, "the untiled kernel with the same BLOCK_M and BLOCK_N",
                              dv_variant_name(kUntiled, kMainBlockM, kMainBlockN))};
  r.supports = [](const Problem& p, const DeviceInfo&) { return grid_supports(p); };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    dispatch<void>(static_cast<DType>(p.dtype), p.head_dim, [&](auto t, auto hd) {
      launch_split_d<SplitTr<typename decltype(t)::type, decltype(hd)::value>>(p, s);
    });
  };
  r.kernels = [](const Problem& p) {
    return dispatch<std::vector<KernelInfo>>(p.dtype, p.head_dim, [&](auto t, auto hd) {
      using Tr = SplitTr<typename decltype(t)::type, decltype(hd)::value>;
      return std::vector<KernelInfo>{
          {"split_d_fwd", reinterpret_cast<const void*>(&split_d_fwd<Tr>), Tr::THREADS, 0}};
    });
  };
  r.notes = [](const Problem& p) {
    return std::vector<std::string>{
        std::to_string(kSplitThreadsPerRow) + " threads per row, each holding " +
        std::to_string(p.head_dim / kSplitThreadsPerRow) +
        " floats of q_i and of O_i; one pass over K/V, no recomputation"};
  };
  return r;
}

/// The main entry: the DV-tiled kernel with the largest tile that does not spill.
Rung make_main_rung() {
  Rung r = base_rung();
  r.summary = "one query row per thread; O_i in DV_TILE-column passes so nothing spills";
  // A study, not a speed step: compared with the spill it removes, and with the
  // CUDA-core FA2 kernel (same fp32 units, FA2's register tiling).
  r.baselines = {
      Baseline::on(7, "its own untiled kernel, same block shape: the spill DV tiling removes",
                   dv_variant_name(kUntiled, kMainBlockM, kMainBlockN)),
      Baseline::on(4, "the CUDA-core FA2 kernel: the same fp32 units, a register-tiled design")};
  r.new_design = "one query row per thread (the spill study) in place of FA2's warp tiles";
  r.supports = [](const Problem& p, const DeviceInfo&) { return grid_supports(p); };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    dispatch<void>(static_cast<DType>(p.dtype), p.head_dim, [&](auto t, auto hd) {
      constexpr int D = decltype(hd)::value;
      using Tr = DvTr<typename decltype(t)::type, D, main_dv_tile(D), kMainBlockM, kMainBlockN>;
      launch_dv<Tr>(p, s);
    });
  };
  r.kernels = [](const Problem& p) {
    return dispatch<std::vector<KernelInfo>>(p.dtype, p.head_dim, [&](auto t, auto hd) {
      constexpr int D = decltype(hd)::value;
      using Tr = DvTr<typename decltype(t)::type, D, main_dv_tile(D), kMainBlockM, kMainBlockN>;
      return std::vector<KernelInfo>{
          {"dv_tiled_fwd", reinterpret_cast<const void*>(&dv_tiled_fwd<Tr>), Tr::THREADS, 0}};
    });
  };
  r.notes = [](const Problem& p) {
    return dv_notes(p, main_dv_tile(p.head_dim), kMainBlockM, kMainBlockN);
  };
  return r;
}

// ---- the sweep ------------------------------------------------------------------

/// One measured row of the sweep table.
struct SweepRow {
  const SweepEntry* entry = nullptr;
  std::string skipped;  ///< supports() reason, "" if it ran
  KernelResources res;
  CheckResult check;
  Timing timing;
};

bool same_spec(const VariantSpec& a, const VariantSpec& b, int head_dim) {
  return a.kind == b.kind &&
         resolved_dv_tile(a.dv_tile, head_dim) == resolved_dv_tile(b.dv_tile, head_dim) &&
         a.block_m == b.block_m && a.block_n == b.block_n;
}

/// The untiled row a variant is compared with: same BLOCK_M and BLOCK_N for the
/// DV-tiled kernels, untiled-m64-n64 for split-d.
const SweepRow* baseline_of(const std::vector<SweepRow>& rows, const VariantSpec& s) {
  const int m = s.kind == KernelKind::dv_tiled ? s.block_m : kMainBlockM;
  const int n = s.kind == KernelKind::dv_tiled ? s.block_n : kMainBlockN;
  for (const SweepRow& r : rows) {
    const VariantSpec& b = r.entry->spec;
    if (b.kind == KernelKind::dv_tiled && b.dv_tile == kUntiled && b.block_m == m &&
        b.block_n == n && r.skipped.empty() && r.timing.timed)
      return &r;
  }
  return nullptr;
}

void write_sweep_json(const std::string& path, const Problem& p, const DeviceInfo& dev,
                      const std::vector<SweepRow>& rows) {
  Json j;
  j.begin_object();
  j.kv("schema", "flashladder.sweep07/1");
  j.raw("device", device_json(dev));
  j.kv("problem", p.describe());
  j.kv("head_dim", p.head_dim);
  j.kv("dtype", dtype_name(p.dtype));
  j.begin_array("rows");
  for (const SweepRow& r : rows) {
    const VariantSpec& s = r.entry->spec;
    j.begin_object();
    j.kv("variant", r.entry->rung.variant);
    j.kv("kernel", s.kind == KernelKind::dv_tiled ? "dv_tiled" : "split_d");
    j.kv("dv_tile", resolved_dv_tile(s.dv_tile, p.head_dim));
    j.kv("block_m", s.block_m);
    j.kv("block_n", s.block_n);
    j.kv("skipped", r.skipped);
    if (r.skipped.empty()) {
      j.kv("registers", r.res.registers);
      j.kv("local_bytes", r.res.local_bytes);
      j.kv("static_smem", r.res.static_smem);
      j.kv("block_threads", r.res.block_threads);
      j.kv("max_blocks_per_sm", r.res.max_blocks_per_sm);
      j.kv("occupancy", r.res.occupancy);
      j.kv("check_pass", r.check.pass);
      j.kv("median_ms", r.timing.median_ms);
      j.kv("tflops", tflops_of(p, r.timing.median_ms));
    }
    j.end_object();
  }
  j.end_array();
  j.end_object();
  std::ofstream f(path);
  f << j.str() << "\n";
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// `07_dv_tiling --sweep`: every variant on the command line's problem, one table.
int run_sweep(const Options& opt) {
  DeviceInfo dev;
  try {
    dev = query_device();
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "no usable CUDA device: %s\n", e.what());
    return kExitNoDevice;
  }
  const Problem& p = opt.problem;
  if (const std::string why = validate(p); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return kExitBadInput;
  }
  const HostInputs in = make_inputs(p, opt.input, opt.seed);
  DeviceProblem dp(p, in, 0, opt.seed);

  std::vector<SweepRow> rows;
  bool all_pass = true;
  for (const SweepEntry& e : sweep_entries()) {
    SweepRow row;
    row.entry = &e;
    row.skipped = fl::supports(e.rung, p, dev);
    if (row.skipped.empty()) {
      row.res = rung_resources(e.rung, p).at(0);
      dp.poison_outputs();
      launch_once(e.rung, dp);
      row.check = check_output(p, in, dp.download_o(), dp.download_lse(), opt.check, opt.seed);
      if (row.check.checked && !row.check.pass) all_pass = false;
      row.timing = time_rung(e.rung, dp, dev, opt.iters, opt.warmup);
    }
    rows.push_back(std::move(row));
  }

  const VariantSpec main_spec{KernelKind::dv_tiled, main_dv_tile(p.head_dim), kMainBlockM,
                              kMainBlockN};
  std::printf("rung 07 sweep on %s (%s, %d SMs): %s, %d timed runs (median)\n", dev.name.c_str(),
              dev.arch().c_str(), dev.sm_count, p.describe().c_str(), opt.iters);
  std::printf("%-17s %4s %5s %3s %3s %4s %4s %9s %6s %6s %5s %-5s %9s %7s %7s\n", "variant", "DV",
              "tiles", "M", "N", "thr", "regs", "local B/t", "smem", "blk/SM", "occ%", "check",
              "median ms", "TFLOP/s", "vs untl");
  for (const SweepRow& r : rows) {
    const VariantSpec& s = r.entry->spec;
    const bool is_main = same_spec(s, main_spec, p.head_dim);
    const std::string name = r.entry->rung.variant + (is_main ? " *" : "");
    const int dv = resolved_dv_tile(s.dv_tile, p.head_dim);
    if (!r.skipped.empty()) {
      std::printf("%-17s %4d %5d %3d %3d  skipped: %s\n", name.c_str(), dv, p.head_dim / dv,
                  s.block_m, s.block_n, r.skipped.c_str());
      continue;
    }
    const SweepRow* base = baseline_of(rows, s);
    char speedup[16] = "-";
    if (base)
      std::snprintf(speedup, sizeof speedup, "%.2fx", base->timing.median_ms / r.timing.median_ms);
    const char* verdict = !r.check.checked ? "none" : (r.check.pass ? "ok" : "FAIL");
    std::printf("%-17s %4d %5d %3d %3d %4d %4d %9d %6d %6d %5.1f %-5s %9.3f %7.2f %7s\n",
                name.c_str(), dv, p.head_dim / dv, s.block_m, s.block_n, r.res.block_threads,
                r.res.registers, r.res.local_bytes, r.res.static_smem, r.res.max_blocks_per_sm,
                100.0 * r.res.occupancy, verdict, r.timing.median_ms,
                tflops_of(p, r.timing.median_ms), speedup);
  }
  std::printf(
      "* = the main entry.  local B/t = local memory per thread (cudaFuncGetAttributes: the\n"
      "spill slots). Compiler spill stores/loads: configure with -DFL_PTXAS_VERBOSE=ON, or see\n"
      "tests/cpu/test_spill.cpp (cuobjdump -res-usage).  vs untl = untiled time / this time,\n"
      "untiled with the same BLOCK_M and BLOCK_N (split-d: untiled-m64-n64).\n");
  for (const SweepRow& r : rows)
    if (r.check.checked && !r.check.pass)
      std::printf("check FAILED for %s: %s\n", r.entry->rung.variant.c_str(),
                  r.check.reason.c_str());
  if (!opt.json_path.empty()) write_sweep_json(opt.json_path, p, dev, rows);
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace

void register_rung_07(Registry& reg) {
  std::vector<SweepEntry>& entries = sweep_entries();
  entries.clear();
  add_block_shapes<kUntiled>(&entries);
  add_block_shapes<16>(&entries);
  add_block_shapes<32>(&entries);
  add_block_shapes<64>(&entries);
  entries.push_back(
      {{KernelKind::split_d, kUntiled, kMainBlockM, kMainBlockN}, make_split_d_rung()});

  reg.add(make_main_rung());
  for (const SweepEntry& e : entries) reg.add(e.rung);
}

}  // namespace fl
