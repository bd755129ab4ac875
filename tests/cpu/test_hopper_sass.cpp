/// @file tests/cpu/test_hopper_sass.cpp
/// @brief The Hopper wrappers (common/include/flashladder/hopper.cuh), checked from compiled code
/// on every build, no GPU needed (docs/hopper.md, "What the CPU checks"):
///  1. the probe kernels tests/cpu/hopper_probe.cu, built for sm_90a, contain the Hopper
///     instructions each wrapper stands for: HGMMA (wgmma from shared-memory descriptors, V
///     transposed), UTMALDG (TMA load), UBLKRED (bulk reduce-add), SYNCS (mbarrier), USETMAXREG
///     (setmaxnreg), BAR.ARV (named barrier arrive); their wgmma batches are not serialized (one
///     WARPGROUP.ARRIVE per batch, one WARPGROUP.DEPBAR per wait); nothing spills;
///  2. the ptxas guard of the Hopper targets passes that probe and fails
///     tests/cpu/hopper_bad_probe.cu with the report's id: C7508 (setmaxnreg ignored) and C751x
///     (wgmma serialized);
///  3. rung 09's own kernels (steps/09_wgmma_tma, every instance in fl_rung_09): S = Q K^T is
///     SS wgmma, O += P V is RS wgmma (A = P from registers, V transposed), each loop batch once
///     and not serialized; Q, K and V arrive by 4D TMA on mbarriers; nothing spills
///     ([cpu][hopper_rung09]);
///  4. rungs 10, 13 and 14 likewise ([cpu][hopper_rung10], [cpu][hopper_rung13],
///     [cpu][hopper_rung14]: the backward's five GEMMs, RS for dV and dK, trans-a for dQ, the
///     bulk reduce-add of the dQ writer);
///  5. rung 16's backward ([cpu][hopper_rung16]): rung 14's five GEMMs whatever the mask and
///     modifiers, and softcap's price in special functions: one MUFU.TANH beside each
///     exponential of P (MUFU.EX2; ALiBi adds one EX2 for its slope), none without softcap.
///  6. rung 17's MLA decode ([cpu][hopper_rung17]): S = Q K^T in 36 SS wgmma k-steps over 576
///     dims, O += P V in 4 SS wgmma k-steps per warpgroup (P from shared memory, V transposed),
///     nine 4D TMA boxes per K block, nothing in local memory.
/// Built and run when CMAKE_CUDA_ARCHITECTURES includes 90 (FL_HOPPER) and cuobjdump is found
/// (3: and rung 09 is built, see FL_RUNGS).
#include <stdlib.h>  // atoi
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "09_wgmma_tma/traits.h"
#include "catch_compat.h"
#include "cuobjdump.h"
#include "flashladder/static_switch.h"
#include "run_command.h"

#ifdef FL_HOPPER_PROBE
#include "hopper_probe_config.h"
#endif

namespace {

using fl_test::count_opcode;
using fl_test::SassInstr;

/// HGMMA with A from registers: its first source is a register ("R56, gdesc[UR12].tnspB, ..."),
/// where the shared-memory form has the A descriptor ("gdesc[UR16], ...").
bool hgmma_a_from_registers(const SassInstr& i) {
  const size_t comma = i.operands.find(", ");
  return comma != std::string::npos && i.operands.compare(comma + 2, 1, "R") == 0 &&
         i.operands.compare(comma + 2, 2, "RZ") != 0;
}

/// cuobjdump's @p what ("-sass", "-res-usage") of @p binary: fails the test without cuobjdump and
/// requires it to exit 0.
std::string cuobjdump_text(const char* what, const char* binary) {
  const std::string cuobjdump = fl_test::find_cuobjdump();
  if (cuobjdump.empty()) {
    FAIL("cuobjdump not found (set FL_CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)");
  }
  std::string text;
  const int status = fl_test::run_cuobjdump(cuobjdump, what, binary, &text);
  INFO("cuobjdump " << what << " " << binary << " exited " << status);
  REQUIRE(status == 0);
  return text;
}

}  // namespace

TEST_CASE("SASS parsing of cuobjdump -sass", "[cpu][hopper]") {
  const std::string sample =
      "\tcode for sm_90a\n"
      "\t\tFunction : _Z1kv\n"
      "        /*03e0*/                   HGMMA.64x64x16.F32 R24, gdesc[UR16], RZ, !UPT ;  /* "
      "0x00e0 */\n"
      "                                                                      /* 0x000fe2 */\n"
      "        /*0970*/                   HGMMA.64x64x16.F32 R24, R56, gdesc[UR12].tnspB, RZ ; "
      "/* 0x1 */\n"
      "        /*0e90*/               @P0 ELECT P1, URZ, PT ;   /* 0x2 */\n"
      "        /*0eb0*/                   UTMALDG.4D [UR8], [UR14] ;   /* 0x3 */\n";
  std::string text = "arch = sm_80\n" + sample + "arch = sm_90a\n" + sample;
  const auto k = fl_test::parse_sass(text, "sm_90a");
  REQUIRE(k.size() == 1);
  const std::vector<SassInstr>& code = k.at("_Z1kv");
  REQUIRE(code.size() == 4);
  CHECK(code[0].opcode == "HGMMA.64x64x16.F32");
  CHECK(code[0].operands == "R24, gdesc[UR16], RZ, !UPT");
  CHECK(code[2].opcode == "ELECT");  // the guard predicate is not the opcode
  CHECK(count_opcode(code, "HGMMA") == 2);
  CHECK(count_opcode(code, "UTMALDG") == 1);
  CHECK_FALSE(hgmma_a_from_registers(code[0]));
  CHECK(hgmma_a_from_registers(code[1]));
}

// Without sm_90 in CMAKE_CUDA_ARCHITECTURES, or without cuobjdump, tests/CMakeLists.txt registers
// none of the [cpu][hopper*] entries (ctest lists them as not run), so none passes on nothing.
#ifdef FL_HOPPER_PROBE
namespace {

/// The instructions of the kernel whose mangled name contains @p name (fails if absent).
const std::vector<SassInstr>& kernel_code(
    const std::map<std::string, std::vector<SassInstr> >& kernels, const std::string& name) {
  for (const auto& [mangled, code] : kernels)
    if (mangled.find(name) != std::string::npos) return code;
  FAIL("no kernel named " << name << " in the sm_90a cubin");
  throw;  // unreachable: FAIL throws
}

struct HgmmaCounts {
  int total = 0, a_from_registers = 0, b_transposed = 0;
};
/// The HGMMAs of shape @p shape ("64x128x16") with accumulator and input types @p types
/// ("F32" for fp16 inputs, "F32.BF16" for bf16).
HgmmaCounts hgmma_counts(const std::vector<SassInstr>& code, const std::string& shape,
                         const std::string& types = "F32") {
  HgmmaCounts n;
  for (const SassInstr& i : code) {
    if (i.opcode != "HGMMA." + shape + "." + types) continue;
    ++n.total;
    n.a_from_registers += hgmma_a_from_registers(i);
    n.b_transposed += i.operands.find(".tnspB") != std::string::npos;
  }
  return n;
}

}  // namespace

TEST_CASE("Hopper probe: every wrapper is the Hopper instruction, no serialization, no spill",
          "[cpu][hopper]") {
  std::string text = cuobjdump_text("-sass", FL_HOPPER_PROBE_BINARY);
  const auto kernels = fl_test::parse_sass(text, "sm_90a");
  REQUIRE(kernels.size() == 3);  // the three probes, sm_90a only (fl_hopper_target)

  SECTION("probe_ring_kernel: producer/consumer warpgroups, TMA ring, SS wgmma") {
    const std::vector<SassInstr>& code = kernel_code(kernels, "probe_ring_kernel");
    // wgmma: 4 k-steps of S = Q K^T (A and B descriptors, both K-major), m64n64k16, in the loop
    // body once (#pragma unroll 1). (The register-A form is checked in rung 09's kernels.)
    const HgmmaCounts h = hgmma_counts(code, "64x64x16");
    CHECK(count_opcode(code, "HGMMA") == 4);
    CHECK(h.total == 4);
    CHECK(h.a_from_registers == 0);
    CHECK(h.b_transposed == 0);
    // Not serialized: one fence (WARPGROUP.ARRIVE) and one wait (WARPGROUP.DEPBAR) for the batch
    // of 4; ptxas puts them around every HGMMA when it serializes.
    CHECK(count_opcode(code, "WARPGROUP.ARRIVE") == 1);
    CHECK(count_opcode(code, "WARPGROUP.DEPBAR") == 1);
    // TMA: Q, K_j, V_j as 4D boxes; the three tensor maps prefetched.
    CHECK(count_opcode(code, "UTMALDG.4D") == 3);
    CHECK(count_opcode(code, "UTMACCTL.PF") == 3);
    // mbarrier: 5 inits (q_full, full[2], empty[2]), fence.mbarrier_init, 2 arrive.expect_tx,
    // 1 plain arrive (a consumer releasing a stage), try_wait loops.
    CHECK(count_opcode(code, "SYNCS.EXCH.64") == 5);
    CHECK(count_opcode(code, "FENCE.VIEW.ASYNC.S") == 1);
    CHECK(count_opcode(code, "SYNCS.ARRIVE.TRANS64.A1T0") == 1);
    CHECK(count_opcode(code, "SYNCS.ARRIVE.TRANS64") == 3);
    CHECK(count_opcode(code, "SYNCS.PHASECHK.TRANS64.TRYWAIT") >= 3);
    // setmaxnreg: the producer's dec and the consumers' inc, both kept (not ignored).
    CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 1);
    CHECK(count_opcode(code, "USETMAXREG.TRY_ALLOC") == 1);
    // Named barriers: bar.arrive 2 by consumer 0 (bar.sync: __syncthreads, 1 and 2).
    CHECK(count_opcode(code, "BAR.ARV") == 1);
    CHECK(count_opcode(code, "BAR.SYNC") == 3);
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }
  SECTION("probe_p_smem_kernel: P stored by threads, proxy fence, 2D/3D TMA, wait_group 1") {
    const std::vector<SassInstr>& code = kernel_code(kernels, "probe_p_smem_kernel");
    const HgmmaCounts h = hgmma_counts(code, "64x64x16");
    CHECK(h.total == 8);
    CHECK(h.a_from_registers == 0);
    CHECK(h.b_transposed == 4);  // O = P V: V MN-major; X = P K^T: K K-major
    CHECK(count_opcode(code, "WARPGROUP.ARRIVE") == 1);  // one fence, two groups
    int depbar_le1 = 0;
    for (const SassInstr& i : code)
      depbar_le1 += i.opcode == "WARPGROUP.DEPBAR.LE" && i.operands == "gsb0, 0x1";
    CHECK(depbar_le1 == 1);  // wgmma_wait<1>
    CHECK(count_opcode(code, "WARPGROUP.DEPBAR") == 2);
    // fence.proxy.async.shared::cta = MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S (here ptxas lets one
    // FENCE.VIEW.ASYNC.S serve fence.mbarrier_init too).
    CHECK(count_opcode(code, "MEMBAR.ALL.CTA") == 1);
    CHECK(count_opcode(code, "FENCE.VIEW.ASYNC.S") >= 1);
    CHECK(count_opcode(code, "UTMALDG.2D") == 1);
    CHECK(count_opcode(code, "UTMALDG.3D") == 1);
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }

  SECTION("probe_dq_writer_kernel: an fp32 tile added into global memory by the TMA unit") {
    const std::vector<SassInstr>& code = kernel_code(kernels, "probe_dq_writer_kernel");
    // cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 is one UBLKRED.G.S.ADD.F32;
    // cp.async.bulk.wait_group.read 0 waits on a scoreboard (DEPBAR.LE SB0, 0x0).
    CHECK(count_opcode(code, "UBLKRED.G.S.ADD.F32.RN") == 1);
    CHECK(count_opcode(code, "UBLKRED") == 1);
    CHECK(count_opcode(code, "DEPBAR.LE") >= 1);
    CHECK(count_opcode(code, "RED") == 0);  // no per-element atomics
    CHECK(count_opcode(code, "MEMBAR.ALL.CTA") == 1);
    CHECK(count_opcode(code, "FENCE.VIEW.ASYNC.S") == 1);
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }

  text = cuobjdump_text("-res-usage", FL_HOPPER_PROBE_BINARY);
  const auto usage = fl_test::parse_res_usage(text, "sm_90a");
  REQUIRE(usage.size() == 3);
  for (const auto& [name, u] : usage) {
    INFO(name << ": REG " << u.reg << " STACK " << u.stack << " LOCAL " << u.local);
    CHECK(u.stack == 0);
    CHECK(u.local == 0);
    // __launch_bounds__(384, 1): 65536 / 384 registers, rounded down to a multiple of 8.
    if (name.find("probe_ring_kernel") != std::string::npos) CHECK(u.reg == 168);
  }
}

namespace {

/// The guarded nvcc of the Hopper targets on @p source with @p defines; returns the exit code
/// and fills @p out with everything it printed.
int guarded_compile(const std::string& source, const std::string& defines, std::string* out) {
  // A fresh folder in the system's temporary directory (TMPDIR, else the platform default).
  std::string templ = (std::filesystem::temp_directory_path() / "fl-hopper-probe.XXXXXX").string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) return -1;
  const std::string dir(buf.data());
  std::string cmd;
  for (const char* a : {FL_HOPPER_GUARDED_NVCC_ARGS}) cmd += "\"" + std::string(a) + "\" ";
  cmd += defines + " -c \"" + std::string(FL_SOURCE_DIR) + "/" + source + "\" -o \"" + dir +
         "/probe.o\"";
  const int status = fl_test::run_command(cmd, out);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return status;
}

}  // namespace

TEST_CASE("Hopper build: the ptxas guard passes the probe, fails the bad probes by id",
          "[cpu][hopper]") {
  std::string out;
  int status = guarded_compile("tests/cpu/hopper_probe.cu", "", &out);
  INFO("good probe output:\n" << out);
  CHECK(status == 0);
  for (const char* id : {"C7508", "C7510", "C7511", "C7515"})
    CHECK(out.find(id) == std::string::npos);

  status = guarded_compile("tests/cpu/hopper_bad_probe.cu", "-DFL_BAD_SETMAXNREG", &out);
  INFO("setmaxnreg without __launch_bounds__(threads, 1):\n" << out);
  CHECK(status != 0);
  CHECK(out.find("(C7508)") != std::string::npos);
  CHECK(out.find("ptxas_guard: error") != std::string::npos);

  status = guarded_compile("tests/cpu/hopper_bad_probe.cu", "-DFL_BAD_WGMMA", &out);
  INFO("accumulator written inside a wgmma batch:\n" << out);
  CHECK(status != 0);
  CHECK(out.find("(C751") != std::string::npos);
  CHECK(out.find("wgmma.mma_async instructions are serialized") != std::string::npos);
  CHECK(out.find("ptxas_guard: error") != std::string::npos);
}

#ifdef FL_RUNG09_BINARY
namespace {

/// One wgmma_tma_fwd_kernel<T, Cfg> instance of rung 09: the mangled Cfg and its tiles.
struct Rung09Instance {
  std::string cfg;  ///< e.g. "11HopperTilesILi128EE", "10WgmmaTilesILi128ELi2ELi64ELi2EE"
  int head_dim, block_n, stages;
};

template <class Cfg>
Rung09Instance rung09_instance(const std::string& mangled_cfg) {
  return {mangled_cfg, Cfg::kHeadDim, Cfg::kBlockN, Cfg::kStages};
}

/// The mangled WgmmaTiles<HEAD_DIM, WARPGROUPS, BLOCK_N, STAGES> of an ablation variant
/// (Itanium ABI: "Li<n>E" is int n).
template <class Cfg>
Rung09Instance rung09_variant() {
  std::string s = "10WgmmaTilesI";
  for (int v : {Cfg::kHeadDim, Cfg::kWarpgroups, Cfg::kBlockN, Cfg::kStages})
    s += "Li" + std::to_string(v) + "E";
  return rung09_instance<Cfg>(s + "E");
}

/// The wgmma events of @p code in program order: "ARRIVE" (wgmma.fence), "HGMMA.<shape.types>
/// SS" (A and B descriptors), "HGMMA.<shape.types> RS tnspB" (A from registers, B transposed),
/// "DEPBAR <operands>" (wgmma.wait_group).
std::vector<std::string> wgmma_events(const std::vector<SassInstr>& code) {
  std::vector<std::string> events;
  for (const SassInstr& i : code) {
    if (i.opcode == "WARPGROUP.ARRIVE") {
      events.push_back("ARRIVE");
    } else if (i.opcode.compare(0, 16, "WARPGROUP.DEPBAR") == 0) {
      events.push_back("DEPBAR " + i.operands);
    } else if (i.opcode.compare(0, 6, "HGMMA.") == 0) {
      std::string e = i.opcode + (hgmma_a_from_registers(i) ? " RS" : " SS");
      if (i.operands.find(".tnspB") != std::string::npos) e += " tnspB";
      events.push_back(e);
    }
  }
  return events;
}

}  // namespace

TEST_CASE("rung 09: SS wgmma for QK^T, RS wgmma for PV, TMA on mbarriers, no spill (sm_90a)",
          "[cpu][hopper_rung09]") {
  using namespace fl::hopper09;
  // launch.cu instantiates the three head_dims of the rung and its six ablation variants (three
  // at d = 128, two at d = 64, one at d = 256), for each dtype the build keeps (FL_DTYPE):
  // 9 x 2 = 18 kernels in a full build.
  const std::vector<Rung09Instance> instances = {
      rung09_instance<HopperTiles<64> >("11HopperTilesILi64EE"),
      rung09_instance<HopperTiles<128> >("11HopperTilesILi128EE"),
      rung09_instance<HopperTiles<256> >("11HopperTilesILi256EE"),
      rung09_variant<Variant_d128_128x64>(),
      rung09_variant<Variant_d128_64x128>(),
      rung09_variant<Variant_d128_128x128_s1>(),
      rung09_variant<Variant_d64_128x128>(),
      rung09_variant<Variant_d64_128x64_s2>(),
      rung09_variant<Variant_d256_128x64>(),
  };
  struct Dtype {
    fl::DType dtype;
    const char* mangled;  // the mangled T right after the kernel's "I"
    const char* types;    // HGMMA's types suffix: fp32 accumulators, fp16 (default) or bf16 inputs
  };
  std::vector<Dtype> dtypes;
  for (const Dtype& d : {Dtype{fl::DType::fp16, "6__half", "F32"},
                         Dtype{fl::DType::bf16, "13__nv_bfloat16", "F32.BF16"}})
    if (fl::dtype_built(d.dtype)) dtypes.push_back(d);

  std::string text = cuobjdump_text("-sass", FL_RUNG09_BINARY);
  const auto kernels = fl_test::parse_sass(text, "sm_90a");
  CHECK(kernels.size() == instances.size() * dtypes.size());
  for (const auto& [name, code] : kernels) {
    INFO(name);
    CHECK(name.find("wgmma_tma_fwd_kernel") != std::string::npos);  // no other kernel
  }

  for (const Dtype& dt : dtypes) {
    for (const Rung09Instance& in : instances) {
      const std::string name = std::string("wgmma_tma_fwd_kernelI") + dt.mangled + "NS0_" + in.cfg;
      INFO("kernel " << name << " (head_dim " << in.head_dim << ", BLOCK_N " << in.block_n << ", "
                     << in.stages << " stages)");
      const std::vector<SassInstr>& code = kernel_code(kernels, name);

      // wgmma. The K/V loop is `#pragma unroll 1`, so each GEMM appears once, fully unrolled
      // over its k-steps (wgmma's K is 16):
      //   S = Q K^T:  head_dim / 16 k-steps of m64 n(BLOCK_N) k16, A = Q and B = K from
      //               descriptors (SS), both K-major (no tnspB);
      //   O += P V:   BLOCK_N / 16 k-steps of m64 n(head_dim) k16, A = P from registers (RS),
      //               B = V MN-major (tnspB).
      // d=64 128x128: 4 + 8; d=128 128x128: 8 + 8; d=256 128x64: 16 + 4; d=128 128x64: 8 + 4;
      // d=128 64x128 and 1-stage: 8 + 8.
      const int qk_steps = in.head_dim / 16, pv_steps = in.block_n / 16;
      const std::string qk_shape = "64x" + std::to_string(in.block_n) + "x16";
      const std::string pv_shape = "64x" + std::to_string(in.head_dim) + "x16";
      CHECK(count_opcode(code, "HGMMA") == qk_steps + pv_steps);
      const HgmmaCounts qk = hgmma_counts(code, qk_shape, dt.types);
      const HgmmaCounts pv = hgmma_counts(code, pv_shape, dt.types);
      if (qk_shape == pv_shape) {  // BLOCK_N == head_dim: one opcode for both GEMMs
        CHECK(qk.total == qk_steps + pv_steps);
        CHECK(qk.a_from_registers == pv_steps);
        CHECK(qk.b_transposed == pv_steps);
      } else {
        CHECK(qk.total == qk_steps);
        CHECK(qk.a_from_registers == 0);
        CHECK(qk.b_transposed == 0);
        CHECK(pv.total == pv_steps);
        CHECK(pv.a_from_registers == pv_steps);
        CHECK(pv.b_transposed == pv_steps);
      }
      // Not serialized, and in this order: one wgmma.fence (WARPGROUP.ARRIVE) before each
      // batch, its HGMMAs back to back, one wait_group 0 (WARPGROUP.DEPBAR.LE gsb0, 0x0) after
      // it; a serialized batch has ARRIVE and DEPBAR around every HGMMA.
      CHECK(count_opcode(code, "WARPGROUP.ARRIVE") == 2);
      CHECK(count_opcode(code, "WARPGROUP.DEPBAR") == 2);
      std::vector<std::string> expected = {"ARRIVE"};
      for (int k = 0; k < qk_steps; ++k)
        expected.push_back("HGMMA." + qk_shape + "." + dt.types + " SS");
      expected.push_back("DEPBAR gsb0, 0x0");
      expected.push_back("ARRIVE");
      for (int k = 0; k < pv_steps; ++k)
        expected.push_back("HGMMA." + pv_shape + "." + dt.types + " RS tnspB");
      expected.push_back("DEPBAR gsb0, 0x0");
      CHECK(wgmma_events(code) == expected);

      // TMA: 4D boxes of 64 columns (128 bytes) under the 128B swizzle, head_dim / 64 per
      // tile. Q: head_dim / 64 boxes, once. K and V: head_dim / 64 each per load_kv, which
      // is inlined at two sites: the prologue (its `s < STAGES && s < n_blocks` loop stays a
      // loop, one copy) and the refill of stage s in the K/V loop (one copy). Total
      // head_dim / 64 x (1 + 2 x 2) = 5, 10, 20 for d = 64, 128, 256. No 2D/3D loads.
      const int col_blocks = in.head_dim / 64;
      CHECK(count_opcode(code, "UTMALDG.4D") == col_blocks * (1 + 2 * 2));
      CHECK(count_opcode(code, "UTMALDG") == count_opcode(code, "UTMALDG.4D"));
      CHECK(count_opcode(code, "UTMACCTL.PF") == 3);  // the three tensor maps prefetched
      // mbarriers: 1 + 2 x STAGES inits (Q, then k_full and v_full per stage; the init loop
      // is unrolled), fence.mbarrier_init, 5 arrive.expect_tx (Q, then K and V at the prologue
      // site and at the refill site); no plain arrive (.A1T0): a stage is released by
      // __syncthreads, not by an "empty" barrier; try-waits on Q, K_j and V_j (ptxas may add
      // a retry copy of a wait).
      CHECK(count_opcode(code, "SYNCS.EXCH.64") == 1 + 2 * in.stages);
      CHECK(count_opcode(code, "FENCE.VIEW.ASYNC.S") == 1);
      CHECK(count_opcode(code, "SYNCS.ARRIVE.TRANS64") == 5);
      CHECK(count_opcode(code, "SYNCS.ARRIVE.TRANS64.A1T0") == 0);
      CHECK(count_opcode(code, "SYNCS.PHASECHK.TRANS64.TRYWAIT") >= 3);
      // __syncthreads after the barrier inits and before each refill.
      CHECK(count_opcode(code, "BAR.SYNC") == 2);
      CHECK(count_opcode(code, "LDL") == 0);
      CHECK(count_opcode(code, "STL") == 0);
    }
  }

  text = cuobjdump_text("-res-usage", FL_RUNG09_BINARY);
  const auto usage = fl_test::parse_res_usage(text, "sm_90a");
  CHECK(usage.size() == instances.size() * dtypes.size());
  for (const auto& [name, u] : usage) {
    INFO(name << ": REG " << u.reg << " STACK " << u.stack << " LOCAL " << u.local);
    CHECK(u.reg > 0);
    CHECK(u.stack == 0);  // no spill: the accumulators (traits.h, kAccRegs) fit
    CHECK(u.local == 0);
  }
}
#endif  // FL_RUNG09_BINARY

#ifdef FL_RUNG10_BINARY
TEST_CASE("rung 10: producer with setmaxnreg, empty barriers, ping-pong, wait_group 1 (sm_90a)",
          "[cpu][hopper_rung10]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG10_BINARY);
  const auto kernels = fl_test::parse_sass(text, "sm_90a");
  struct Tiles {
    const char* mangled;  // the tile struct's name inside the kernel's mangled name
    int head_dim, block_n, stages;
  };
  // HopperWsTiles<D, CAUSAL> (steps/10_warp_specialized/traits.h), and the tile variants
  // (WsTiles<D, BLOCK_N, STAGES>).
  const Tiles tiles[] = {{"HopperWsTilesILi64ELb0EE", 64, 128, 3},
                         {"HopperWsTilesILi128ELb0EE", 128, 176, 2},
                         {"HopperWsTilesILi128ELb1EE", 128, 128, 2},
                         {"HopperWsTilesILi256ELb0EE", 256, 80, 2},
                         {"WsTilesILi64ELi64ELi3EEE", 64, 64, 3},
                         {"WsTilesILi128ELi128ELi2EEE", 128, 128, 2},
                         {"WsTilesILi256ELi64ELi2EEE", 256, 64, 2}};
  int ws_kernels = 0, no_ws_kernels = 0;
  for (const auto& [name, code] : kernels) {
    INFO(name);
    if (name.find("wgmma_tma_fwd_kernel") != std::string::npos) {  // the no-ws variant: rung 09
      ++no_ws_kernels;
      CHECK(count_opcode(code, "USETMAXREG") == 0);
      continue;
    }
    REQUIRE(name.find("ws_fwd_kernel") != std::string::npos);
    ++ws_kernels;
    // ws_fwd_kernel<T, Tiles, PINGPONG, OVERLAP>: the two bools end the template argument list
    // as "Lb<0|1>ELb<0|1>E", after the tile struct (whose own bool, if any, is inside it).
    const Tiles* t = nullptr;
    for (const Tiles& x : tiles)
      if (name.find(x.mangled) != std::string::npos) t = &x;
    REQUIRE(t != nullptr);
    const size_t at = name.find("ELb", name.find(t->mangled) + std::string(t->mangled).size() - 1);
    REQUIRE(at != std::string::npos);
    const bool pingpong = name[at + 3] == '1', overlap = name[at + 7] == '1';
    const int qk = t->head_dim / 16, pv = t->block_n / 16;
    // Register reallocation: the producer's dec and the consumers' inc, both kept.
    CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 1);
    CHECK(count_opcode(code, "USETMAXREG.TRY_ALLOC") == 1);
    // wgmma. Without overlap, rung 09's loop: one S batch and one P V batch. With overlap the
    // pipeline has a head (S of block 0), a steady loop (S of block n, then P V of block n-1)
    // and a tail (P V of the last block): each GEMM appears twice.
    CHECK(count_opcode(code, "HGMMA") == (overlap ? 2 : 1) * (qk + pv));
    // wait_group 1 (S of block n done, P V of block n-1 still running) only with overlap.
    int depbar_le1 = 0;
    for (const SassInstr& i : code)
      depbar_le1 += i.opcode == "WARPGROUP.DEPBAR.LE" && i.operands == "gsb0, 0x1";
    CHECK(depbar_le1 == (overlap ? 1 : 0));
    CHECK(count_opcode(code, "WARPGROUP.ARRIVE") == (overlap ? 4 : 2));  // one per batch
    // Ping-pong: the consumers' turns are named barriers (bar.sync 2/3, bar.arrive 3/2): the
    // only BAR.ARV. __syncthreads (BAR.SYNC 0) once, before the roles split.
    if (pingpong) {
      CHECK(count_opcode(code, "BAR.ARV") >= 2);
      CHECK(count_opcode(code, "BAR.SYNC") == 1 + (overlap ? 3 : 2));
    } else {
      CHECK(count_opcode(code, "BAR.ARV") == 0);
      CHECK(count_opcode(code, "BAR.SYNC") == 1);
    }
    // mbarriers: Q + 4 per stage (k_full, v_full, k_empty, v_empty); the consumers release K
    // and V with a plain arrive on their "empty" barriers (.A1T0).
    CHECK(count_opcode(code, "SYNCS.EXCH.64") == 1 + 4 * t->stages);
    CHECK(count_opcode(code, "SYNCS.ARRIVE.TRANS64.A1T0") >= 1);
    CHECK(count_opcode(code, "UTMALDG.4D") == 3 * (t->head_dim / 64));  // Q, K, V: one site each
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }
  int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  // 4 tiles (d = 64, 128 and 128 causal, 256) x (rung, no-pingpong, no-overlap), and the 3 tile
  // variants; no-ws: rung 09's kernel on the 4 tiles
  CHECK(ws_kernels == (4 * 3 + 3) * dtypes);
  CHECK(no_ws_kernels == 4 * dtypes);

  text = cuobjdump_text("-res-usage", FL_RUNG10_BINARY);
  for (const auto& [name, u] : fl_test::parse_res_usage(text, "sm_90a")) {
    INFO(name << ": REG " << u.reg << " STACK " << u.stack << " LOCAL " << u.local);
    CHECK(u.stack == 0);
    CHECK(u.local == 0);
    // __launch_bounds__(384, 1): the entry count is 65536 / 384 rounded down to 8; setmaxnreg
    // then gives the consumers 240.
    if (name.find("ws_fwd_kernel") != std::string::npos) CHECK(u.reg == 168);
  }
}
#endif  // FL_RUNG10_BINARY

#ifdef FL_RUNG13_BINARY
TEST_CASE("rung 13: FP8 wgmma (QGMMA e4m3) only, no 16-bit tensor op, no local memory (sm_90a)",
          "[cpu][hopper_rung13]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG13_BINARY);
  int kernels = 0;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    INFO(name);
    if (name.find("fp8_fwd_kernel") == std::string::npos) continue;
    ++kernels;
    int qgmma = 0, e4m3 = 0;
    for (const SassInstr& i : code) {
      if (i.opcode.rfind("QGMMA", 0) == 0) {
        ++qgmma;
        e4m3 += i.opcode.find("E4M3.E4M3") != std::string::npos;
      }
    }
    CHECK(qgmma > 0);
    CHECK(e4m3 == qgmma);  // both GEMMs read e4m3
    CHECK(count_opcode(code, "HGMMA") == 0);
    CHECK(count_opcode(code, "HMMA") == 0);
    CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 1);  // rung 10's producer and consumers
    CHECK(count_opcode(code, "USETMAXREG.TRY_ALLOC") == 1);
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }
  // 3 head_dims x (rung, p-unscaled, fast-accum, exp-fma-25, exp-fma-50) per output dtype.
  CHECK(kernels == 15 * (fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16)));
  text = cuobjdump_text("-res-usage", FL_RUNG13_BINARY);
  for (const auto& [name, u] : fl_test::parse_res_usage(text, "sm_90a")) {
    INFO(name << ": REG " << u.reg << " STACK " << u.stack << " LOCAL " << u.local);
    CHECK(u.stack == 0);
    CHECK(u.local == 0);
  }
}
#endif  // FL_RUNG13_BINARY

#ifdef FL_RUNG14_BINARY
TEST_CASE("rung 14: five GEMMs on wgmma (RS for dV, dK; trans-a for dQ), TMA, bulk reduce-add, setmaxnreg (sm_90a)",
          "[cpu][hopper_rung14]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG14_BINARY);
  int ws_kernels = 0, no_ws_kernels = 0, persistent_kernels = 0, fp8_row_kernels = 0, fp8_tile_kernels = 0;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    INFO(name);
    if (name.find("bwd_hopper_kernel") == std::string::npos) continue;
    // bwd_hopper_kernel<T, BwdTiles<D, BLOCK_M, STAGES, WS, DS_BUFS, P_SMEM, FP8_DQ, PERSISTENT>, WRITER>
    // (traits.h; FP8_DQ an int: 0 off, 1 dS per tile, 2 dS per row).
    const size_t at = name.find("BwdTilesILi");
    REQUIRE(at != std::string::npos);
    const int d = std::atoi(name.c_str() + at + 11);
    const size_t m_at = name.find("ELi", at + 11);
    const int block_m = std::atoi(name.c_str() + m_at + 3);
    const size_t ws_at = name.find("ELb", m_at);
    const bool ws = name[ws_at + 3] == '1';
    const size_t p_at = name.find("ELb", ws_at + 4);
    const bool p_smem = name[p_at + 3] == '1';
    const size_t f_at = name.find("ELi", p_at + 4);
    const int fp8_mode = std::atoi(name.c_str() + f_at + 3);
    const bool fp8_dq = fp8_mode != 0;  // dQ = dS K on e4m3 (QGMMA)
    const bool persistent = name[name.find("ELb", f_at + 4) + 3] == '1';
    persistent_kernels += persistent;
    fp8_row_kernels += fp8_mode == 2;
    fp8_tile_kernels += fp8_mode == 1;
    const bool writer = name[name.find("EEELb", p_at) + 5] == '1';
    // S^T and dP^T: d / 16 k-steps each; dV and dK: BLOCK_M / 16 (at d = 256 twice: dK^T and dV^T
    // are two m64 tiles of a warpgroup's 128 dims, A = Q, dO read MN-major); dQ: the block's keys / 16
    // (128, or 64 at d = 256).
    const bool dkv_t = d == 256;
    const int block_n = dkv_t ? 64 : 128, dkv_tiles = dkv_t ? 2 : 1;
    int hgmma = 0, rs = 0, tnsp_a = 0;
    for (const SassInstr& i : code) {
      if (i.opcode.rfind("HGMMA", 0) != 0) continue;
      ++hgmma;
      rs += hgmma_a_from_registers(i);
      tnsp_a += i.operands.find(".tnspA") != std::string::npos;
    }
    const int dq_hgmma = fp8_dq ? 0 : block_n / 16;
    CHECK(hgmma == 2 * (d / 16) + 2 * dkv_tiles * (block_m / 16) + dq_hgmma);
    CHECK(rs == (p_smem ? 0 : 2 * (block_m / 16)));  // P^T and dS^T from registers, unless ss-dkv (or d = 256)
    // dQ = dS K_j: A read MN-major; at d = 256 dK^T and dV^T too. fp8-dq: dQ's k32 steps on e4m3,
    // both operands K-major (8-bit wgmma has no transpose).
    CHECK(tnsp_a == dq_hgmma + (dkv_t ? 2 * dkv_tiles * (block_m / 16) : 0));
    CHECK(count_opcode(code, "QGMMA") == (fp8_dq ? block_n / 32 : 0));
    CHECK(count_opcode(code, "UTMALDG.4D") >= 4 * (d / 64));  // Q, dO, K, V
    CHECK(count_opcode(code, "UBLKCP.S.G") >= 2);             // LSE_i and D_i
    CHECK(count_opcode(code, "UBLKRED.G.S.ADD.F32.RN") == (writer ? 1 : 0));
    if (ws && writer && !dkv_t) {
      // dQ's GEMM before dK_j's, each its own group: dQ's share goes to the writer (its 16-byte
      // stores) while dK_j's GEMM still runs, between the last wgmma issued and the wait for all.
      bool pending = false, overlapped = false;
      for (const SassInstr& i : code) {
        if (i.opcode.rfind("HGMMA", 0) == 0 || i.opcode.rfind("QGMMA", 0) == 0)
          pending = true;
        else if (i.opcode.rfind("WARPGROUP.DEPBAR", 0) == 0 && i.operands.find("0x0") != std::string::npos)
          pending = false;
        else if (pending && i.opcode == "STS.128")
          overlapped = true;
      }
      CHECK(overlapped);
    }
    // No local memory, except one register in the no-ws ablation at d = 64 (S^T and dP^T are 64
    // registers each there, and its math warps also hold the loader's addresses): ptxas spills
    // it once per query block (steps/14_hopper_backward/README.md, "Registers").
    // The persistent grid keeps its tile loop's counters on the stack: in the producer
    // warpgroup's 24 registers the loader and the writer rebuild each tile's walk, and the math
    // warps spill their tile index and, around the dK, dV stores by TMA, the block's coordinates:
    // read once per tile. Between the first and the last wgmma of the walk (the GEMMs and the
    // softmax), no spill but at d = 64 (the no-ws ablation's register, and on the persistent grid
    // the dS^T stores' addresses, reloaded once per query block).
    const int spill = persistent ? 32 : (d == 64 && !ws) ? 1 : 0;
    CHECK(count_opcode(code, "LDL") <= spill);
    CHECK(count_opcode(code, "STL") <= spill);
    {
      size_t first = code.size(), last = 0;
      for (size_t k = 0; k < code.size(); ++k)
        if (code[k].opcode.rfind("HGMMA", 0) == 0 || code[k].opcode.rfind("QGMMA", 0) == 0) {
          first = std::min(first, k);
          last = k;
        }
      int inside = 0;
      for (size_t k = first; k < last; ++k)
        inside += code[k].opcode.rfind("LDL", 0) == 0 || code[k].opcode.rfind("STL", 0) == 0;
      CHECK(inside <= (d == 64 && (!ws || persistent) ? 2 : 0));
    }
    // dK and dV out by TMA (kernel.cuh's store_dkv_tma): one store per 64-column box of each,
    // dK's and dV's issued apart at d = 128 (they take turns in the dS^T tiles' place), together
    // at d = 64; at d = 256 two boxes a turn (one per warpgroup), four turns.
    CHECK(count_opcode(code, "UTMASTG.4D") == (dkv_t ? 8 : 2 * (d / 64)));
    if (ws) {
      ++ws_kernels;
      CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 1);
      CHECK(count_opcode(code, "USETMAXREG.TRY_ALLOC") == 1);
      CHECK(count_opcode(code, "WARPGROUP.ARRIVE") <= 4);  // one per batch: not serialized
    } else {
      ++no_ws_kernels;
      CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 0);
    }
  }
  const int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  // 2 head_dims x (rung, atomic-dq, ss-dkv, one-stage, fp8-dq, fp8-dq-tile, persistent)
  // warp-specialized, and the rung at d = 256; no-ws.
  CHECK(ws_kernels == (2 * 7 + 1) * dtypes);
  CHECK(no_ws_kernels == 2 * dtypes);
  CHECK(persistent_kernels == 2 * dtypes);
  CHECK(fp8_row_kernels == 2 * dtypes);
  CHECK(fp8_tile_kernels == 2 * dtypes);
  text = cuobjdump_text("-res-usage", FL_RUNG14_BINARY);
  for (const auto& [name, u] : fl_test::parse_res_usage(text, "sm_90a")) {
    INFO(name << ": REG " << u.reg << " STACK " << u.stack << " LOCAL " << u.local);
    const bool persistent = name.find("ELb1EEELb") != std::string::npos;  // BwdTiles' last flag: PERSISTENT
    // The spills above: the persistent kernels' per-tile values (48 bytes at d = 128 since dK and dV
    // go out by TMA, 24 at d = 64), the no-ws ablation's register at d = 64.
    CHECK(u.stack <= (persistent ? 48 : name.find("BwdTilesILi64E") != std::string::npos ? 8 : 0));
    CHECK(u.local == 0);
  }
}
#endif  // FL_RUNG14_BINARY

#ifdef FL_RUNG16_BINARY
TEST_CASE("rung 16's backward: rung 14's GEMMs under every mask and modifier, one tanh per exponential with softcap",
          "[cpu][hopper_rung16]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG16_BINARY);
  int kernels = 0, softcapped = 0, dropped = 0, ten_rounds = 0, persistent = 0;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    INFO(name);
    // bwd_hopper_kernel<T, BwdTiles<D, BLOCK_M, ..., PERSISTENT>, true, BwdMods<ScoreMod<SOFTCAP,
    // ALIBI>, PDropout<DROPOUT, ROUNDS>>>.
    if (name.find("bwd_hopper_kernel") == std::string::npos) continue;
    const size_t mod = name.find("8ScoreModILb");
    REQUIRE(mod != std::string::npos);
    const bool softcap = name[mod + 12] == '1', alibi = name[mod + 16] == '1';
    const size_t at = name.find("BwdTilesILi");
    REQUIRE(at != std::string::npos);
    const int d = std::atoi(name.c_str() + at + 11);
    const int block_m = std::atoi(name.c_str() + name.find("ELi", at + 11) + 3);
    const int block_n = d == 256 ? 64 : 128, dkv_tiles = d == 256 ? 2 : 1;
    ++kernels;
    softcapped += softcap;
    dropped += name.find("8PDropoutILb1E") != std::string::npos;
    ten_rounds += name.find("8PDropoutILb1ELi10E") != std::string::npos;  // the ablation's generator
    const bool walks = name.find("ELb1EEELb") != std::string::npos;  // BwdTiles' last flag: PERSISTENT
    persistent += walks;
    if (walks) CHECK((!softcap && !alibi && name.find("8PDropoutILb0E") != std::string::npos && d <= 128));
    // The kernel is compiled in more than one of the rung's translation units (launch_template.cuh,
    // once per head_dim file): the archive holds `copies` identical bodies under one name.
    const int gemms = 2 * (d / 16) + 2 * dkv_tiles * (block_m / 16) + block_n / 16;
    const int hgmma = count_opcode(code, "HGMMA"), copies = hgmma / gemms;
    CHECK(copies >= 1);
    CHECK(hgmma == copies * gemms);
    const int tanh = count_opcode(code, "MUFU.TANH"), ex2 = count_opcode(code, "MUFU.EX2");
    CHECK(ex2 > 0);
    // The backward recomputes P = 2^(t - LSE) from the scores, and with softcap t = cap tanh(s / cap):
    // each score's tanh once, its 1 - tanh^2 (dS's factor) from the same value. ALiBi's slope is one
    // more exponential per body.
    CHECK(tanh == (softcap ? ex2 - (alibi ? copies : 0) : 0));
  }
  const int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  // head_dims 64, 128, 256 x (ScoreMod<softcap, alibi>, dropout without a modifier or with ALiBi,
  // and the 10-round ablation's dropout without a modifier), and the persistent grid's kernel at
  // d = 64 and 128 (the mask alone: launch_template.cuh, bwd_persistent)
  CHECK(kernels == (3 * 7 + 2) * dtypes);
  CHECK(persistent == 2 * dtypes);
  CHECK(softcapped == 3 * 2 * dtypes);
  CHECK(dropped == 3 * 3 * dtypes);
  CHECK(ten_rounds == 3 * dtypes);
}

TEST_CASE("rung 16's softcap-exp-fma study: a quarter of the forward's exp2 moved off the XU pipe, the tanh kept",
          "[cpu][hopper_rung16]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG16_BINARY);
  // masked_fwd_kernel<T, Tiles<64, CAUSAL>, MASK, ScoreMod<1, 0>, PDropout<0>, EXP2>: per (dtype,
  // tiles, mask) the study's body (EXP2 = hopper10::Ex2Split<1>) against the rung's (Ex2Mufu).
  // Both take one MUFU.TANH per score; the rung one MUFU.EX2 per score plus the rescale's
  // (alpha, per row), the study three per four scores plus the same rescale's.
  struct Counts {
    int tanh = -1, ex2 = -1, split_tanh = -1, split_ex2 = -1;
  };
  std::map<std::string, Counts> bodies;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    if (name.find("masked_fwd_kernel") == std::string::npos || name.find("8ScoreModILb1ELb0E") == std::string::npos ||
        name.find("TilesILi64E") == std::string::npos)
      continue;
    const bool split = name.find("8Ex2SplitILi1E") != std::string::npos;
    if (!split) REQUIRE(name.find("7Ex2MufuE") != std::string::npos);
    Counts& c = bodies[name.substr(0, name.find("8ScoreModILb1ELb0E"))];  // the dtype, the tiles, the mask
    (split ? c.split_tanh : c.tanh) = count_opcode(code, "MUFU.TANH");
    (split ? c.split_ex2 : c.ex2) = count_opcode(code, "MUFU.EX2");
  }
  int pairs = 0;
  for (const auto& [key, c] : bodies) {
    INFO(key);
    if (c.split_ex2 < 0 || c.ex2 < 0) continue;
    ++pairs;
    CHECK(c.tanh > 0);
    CHECK(c.split_tanh == c.tanh);
    CHECK(c.tanh % 4 == 0);
    CHECK(c.split_ex2 == c.ex2 - c.tanh / 4);
  }
  const int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  CHECK(pairs == 4 * dtypes);  // both tile sets, both masks (launch_template.cuh, exp_fma_built)
}
TEST_CASE("rung 16's forward on MlaTiles (Q and K 192, V 128): its GEMMs' k-steps and TMA boxes, no local memory "
          "before the producer's release", "[cpu][hopper_rung16]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG16_BINARY);
  std::set<std::string> names;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    if (name.find("masked_fwd_kernel") == std::string::npos || name.find("8MlaTiles") == std::string::npos) continue;
    INFO(name);
    names.insert(name);
    // Rung 15's loop (head, steady loop and tail: each GEMM twice): S = Q K^T in 192 / 16 = 12
    // k-steps, O += P V in 128 / 16 = 8 (the tile's 128 keys), the wgmma 128 wide (V's columns).
    CHECK(count_opcode(code, "HGMMA") == 2 * (192 / 16 + 128 / 16));
    // Q's and K's boxes: 3 of 64 columns each; V's: 2 (the d = 256 tiles would take 4 of each).
    CHECK(count_opcode(code, "UTMALDG.4D") == 3 + 3 + 2);
    size_t dealloc = code.size();
    for (size_t i = 0; i < code.size(); ++i)
      if (code[i].opcode.rfind("USETMAXREG.DEALLOC", 0) == 0) dealloc = i;
    for (size_t i = 0; i < code.size(); ++i)
      if (code[i].opcode.rfind("LDL", 0) == 0 || code[i].opcode.rfind("STL", 0) == 0) {
        INFO("local memory at instruction " << i << " (DEALLOC at " << dealloc << ")");
        CHECK(i > dealloc);
      }
  }
  const int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  // One tile for every mask (launch_template.cuh, with_tiles_of): with_mods' 4 score modifiers x
  // 2 masks, dropout's 3 (no modifier under both masks, ALiBi under the span mask) and the 10-round
  // ablation's 2.
  CHECK(static_cast<int>(names.size()) == (4 * 2 + 3 + 2) * dtypes);
}
#endif  // FL_RUNG16_BINARY

#ifdef FL_RUNG17_BINARY
TEST_CASE("rung 17: MLA decode's GEMMs are wgmma, its K blocks TMA boxes, nothing spills (sm_90a)",
          "[cpu][hopper_rung17]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG17_BINARY);
  int kernels = 0;
  for (const auto& [name, code] : fl_test::parse_sass(text, "sm_90a")) {
    if (name.find("mla_decode_kernel") == std::string::npos) continue;
    INFO(name);
    ++kernels;
    // 576 / 16 = 36 k-steps of S (one instruction each, unrolled) and 64 / 16 = 4 of O += P V.
    CHECK(count_opcode(code, "HGMMA") == 36 + 4);
    // The first two blocks and every refill: nine boxes of 64 columns each, two call sites.
    CHECK(count_opcode(code, "UTMALDG.4D") == 2 * 9);
    CHECK(count_opcode(code, "LDL") == 0);
    CHECK(count_opcode(code, "STL") == 0);
  }
  CHECK(kernels == (fl::dtype_built(fl::DType::fp16) ? 1 : 0) + (fl::dtype_built(fl::DType::bf16) ? 1 : 0));
}
#endif  // FL_RUNG17_BINARY

#ifdef FL_RUNG15_BINARY
TEST_CASE("rung 15: rung 10's loop in a persistent block: item slot, Q empty, the counter (sm_90a)",
          "[cpu][hopper_rung15]") {
  std::string text = cuobjdump_text("-sass", FL_RUNG15_BINARY);
  const auto kernels = fl_test::parse_sass(text, "sm_90a");
  struct Tiles {
    const char* mangled;  // the tile struct's name inside the kernel's mangled name
    int head_dim, block_n, stages, q_bufs;
  };
  // Tiles<D, CAUSAL> and the tile variants PersistentTiles<D, BLOCK_N, STAGES, Q_BUFS>
  // (steps/15_persistent/traits.h).
  const Tiles tiles[] = {{"5TilesILi64ELb0EE", 64, 128, 3, 1},   {"5TilesILi64ELb1EE", 64, 128, 3, 1},
                         {"5TilesILi128ELb0EE", 128, 176, 2, 1}, {"5TilesILi128ELb1EE", 128, 128, 2, 1},
                         {"5TilesILi256ELb0EE", 256, 80, 2, 1},  {"5TilesILi256ELb1EE", 256, 80, 2, 1},
                         {"PersistentTilesILi64ELi192ELi2ELi1EEE", 64, 192, 2, 1},
                         {"PersistentTilesILi128ELi128ELi2ELi1EEE", 128, 128, 2, 1},
                         {"PersistentTilesILi128ELi176ELi2ELi1EEE", 128, 176, 2, 1},
                         {"PersistentTilesILi256ELi64ELi2ELi1EEE", 256, 64, 2, 1},
                         {"PersistentTilesILi64ELi128ELi3ELi2EEE", 64, 128, 3, 2},
                         {"PersistentTilesILi128ELi128ELi2ELi2EEE", 128, 128, 2, 2}};
  int n_kernels = 0;
  for (const auto& [name, code] : kernels) {
    INFO(name);
    REQUIRE(name.find("persistent_fwd_kernel") != std::string::npos);
    ++n_kernels;
    const Tiles* t = nullptr;
    for (const Tiles& x : tiles)
      if (name.find(x.mangled) != std::string::npos) t = &x;
    REQUIRE(t != nullptr);
    // persistent_fwd_kernel<T, Tiles, PERSISTENT, EPILOGUE_OVERLAP, ROW16>: the three bools follow
    // the tile struct as "Lb<0|1>ELb<0|1>ELb<0|1>E".
    const size_t at = name.find("Lb", name.find(t->mangled) + std::string(t->mangled).size());
    REQUIRE(at != std::string::npos);
    const bool persistent = name[at + 2] == '1';
    const bool row16 = name[at + 10] == '1';
    const int qk = t->head_dim / 16, pv = t->block_n / 16;
    CHECK(count_opcode(code, "USETMAXREG.DEALLOC") == 1);
    CHECK(count_opcode(code, "USETMAXREG.TRY_ALLOC") == 1);
    // Rung 10's overlapped loop, once: head, steady loop and tail (each GEMM twice).
    CHECK(count_opcode(code, "HGMMA") == 2 * (qk + pv));
    int depbar_le1 = 0;
    for (const SassInstr& i : code) depbar_le1 += i.opcode == "WARPGROUP.DEPBAR.LE" && i.operands == "gsb0, 0x1";
    CHECK(depbar_le1 == 1);
    // mbarriers: rung 10's (Q + 4 per stage) and Q empty; with two Q tiles, the second's pair.
    CHECK(count_opcode(code, "SYNCS.EXCH.64") == 2 + 4 * t->stages + 2 * (t->q_bufs - 1));
    CHECK(count_opcode(code, "UTMALDG.4D") == 3 * (t->head_dim / 64));
    // The item slot: 16-byte stores (an item, and "no more") and the consumers' 16-byte load.
    CHECK(count_opcode(code, "STS.128") == 2);
    // O's stores: 16-byte pieces after the quad's transpose (two shuffle rounds of two per group
    // of four 8-column blocks and row), or the ablation's 4-byte pairs.
    const int groups = 2 * (t->head_dim / 32);  // per thread: two rows x head_dim / 32 groups
    int stg128 = 0, stg32 = 0;
    for (const SassInstr& i : code) {
      stg128 += i.opcode.rfind("STG.E.128", 0) == 0;
      stg32 += i.opcode == "STG.E" || i.opcode.rfind("STG.E.STRONG", 0) == 0;
    }
    if (row16) {
      CHECK(stg128 == groups);
      CHECK(count_opcode(code, "SHFL.BFLY") >= 4 * groups);
    } else {
      CHECK(stg128 == 0);
    }
    CHECK(count_opcode(code, "LDS.128") >= 1);
    // The persistent grid's claims, its count of blocks done claiming, and the last block's reset
    // of both counters (AttnParams::workspace_kept: the next launch finds them at zero).
    CHECK(count_opcode(code, "ATOMG.E.ADD") == (persistent ? 2 : 0));
    CHECK(count_opcode(code, "ATOMG.E.EXCH") == (persistent ? 2 : 0));
    // Local memory only in the producer, between its register release and its exit: its 24
    // registers hold less than its loop (README: "What is not here yet"); none on the consumers'
    // side, before the release.
    size_t dealloc = code.size(), last_exit = 0;
    for (size_t i = 0; i < code.size(); ++i) {
      if (code[i].opcode.rfind("USETMAXREG.DEALLOC", 0) == 0) dealloc = i;
      if (code[i].opcode == "EXIT") last_exit = i;
    }
    for (size_t i = 0; i < code.size(); ++i)
      if (code[i].opcode.rfind("LDL", 0) == 0 || code[i].opcode.rfind("STL", 0) == 0) {
        INFO("local memory at instruction " << i << " (DEALLOC at " << dealloc << ", last EXIT at " << last_exit << ")");
        CHECK(i > dealloc);
        CHECK(i < last_exit);
      }
  }
  const int dtypes = fl::dtype_built(fl::DType::fp16) + fl::dtype_built(fl::DType::bf16);
  // 6 tiles (d = 64, 128, 256, each causal or not) x 4 kernels (persistent with the epilogue
  // overlap: the rung, fifo and static; no-persistent; no-epilogue-overlap; pair-stores), 4 tile
  // variants and 2 with two Q tiles.
  CHECK(n_kernels == (6 * 4 + 4 + 2) * dtypes);
}
#endif  // FL_RUNG15_BINARY
#endif  // FL_HOPPER_PROBE
