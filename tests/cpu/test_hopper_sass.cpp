/// @file tests/cpu/test_hopper_sass.cpp
/// @brief The Hopper wrappers (common/include/flashladder/hopper.cuh), checked from compiled code
/// on every build, no GPU needed (docs/hopper.md, "What the CPU checks"):
///  1. the probe kernel tests/cpu/hopper_probe.cu, built for sm_90a, contains the Hopper
///     instructions each wrapper stands for: HGMMA (wgmma, both the shared-memory and the
///     register-A form, V transposed), UTMALDG (TMA load), SYNCS (mbarrier), USETMAXREG
///     (setmaxnreg); its two wgmma batches are not serialized (one WARPGROUP.ARRIVE and one
///     WARPGROUP.DEPBAR per batch); nothing spills;
///  2. the ptxas guard of the Hopper targets passes that probe and fails
///     tests/cpu/hopper_bad_probe.cu with the report's id: C7508 (setmaxnreg ignored) and C751x
///     (wgmma serialized).
/// Built and run when CMAKE_CUDA_ARCHITECTURES includes 90 (FL_HOPPER) and cuobjdump is found.
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "cuobjdump.h"
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

#ifndef FL_HOPPER_PROBE
TEST_CASE("Hopper probe: not built", "[cpu][hopper]") {
  WARN("skipped: the Hopper probe is built only when CMAKE_CUDA_ARCHITECTURES includes 90");
}
#else
namespace {

/// The instructions of the probe kernel whose mangled name contains @p name (fails if absent).
const std::vector<SassInstr>& kernel_code(
    const std::map<std::string, std::vector<SassInstr> >& kernels, const std::string& name) {
  for (const auto& [mangled, code] : kernels)
    if (mangled.find(name) != std::string::npos) return code;
  FAIL("no kernel named " << name << " in the probe's sm_90a cubin");
  throw;  // unreachable: FAIL throws
}

struct HgmmaCounts {
  int total = 0, a_from_registers = 0, b_transposed = 0;
};
HgmmaCounts hgmma_counts(const std::vector<SassInstr>& code, const std::string& shape) {
  HgmmaCounts n;
  for (const SassInstr& i : code) {
    if (i.opcode != "HGMMA." + shape + ".F32") continue;
    ++n.total;
    n.a_from_registers += hgmma_a_from_registers(i);
    n.b_transposed += i.operands.find(".tnspB") != std::string::npos;
  }
  return n;
}

}  // namespace

TEST_CASE("Hopper probe: every wrapper is the Hopper instruction, no serialization, no spill",
          "[cpu][hopper]") {
  const std::string cuobjdump = fl_test::find_cuobjdump();
  if (cuobjdump.empty()) {
    WARN("skipped: cuobjdump not found (set FL_CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)");
    return;
  }
  std::string text;
  int status = fl_test::run_command(
      "\"" + cuobjdump + "\" -sass \"" + std::string(FL_HOPPER_PROBE_BINARY) + "\"", &text);
  INFO("cuobjdump -sass " << FL_HOPPER_PROBE_BINARY << " exited " << status);
  REQUIRE(status == 0);
  const auto kernels = fl_test::parse_sass(text, "sm_90a");
  REQUIRE(kernels.size() == 2);  // the two probes, sm_90a only (fl_hopper_target)

  SECTION("probe_ring_kernel: producer/consumer warpgroups, TMA ring, SS and RS wgmma") {
    const std::vector<SassInstr>& code = kernel_code(kernels, "probe_ring_kernel");
    // wgmma: 4 k-steps of S = Q K^T (A and B descriptors) and 4 of O += P V (A = P in
    // registers, B = V transposed: tnspB), m64n64k16, in the loop body once (#pragma unroll 1).
    const HgmmaCounts h = hgmma_counts(code, "64x64x16");
    CHECK(count_opcode(code, "HGMMA") == 8);
    CHECK(h.total == 8);
    CHECK(h.a_from_registers == 4);
    CHECK(h.b_transposed == 4);
    // Not serialized: one fence (WARPGROUP.ARRIVE) and one wait (WARPGROUP.DEPBAR) per batch of
    // 4; ptxas puts them around every HGMMA when it serializes.
    CHECK(count_opcode(code, "WARPGROUP.ARRIVE") == 2);
    CHECK(count_opcode(code, "WARPGROUP.DEPBAR") == 2);
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

  status = fl_test::run_command(
      "\"" + cuobjdump + "\" -res-usage \"" + std::string(FL_HOPPER_PROBE_BINARY) + "\"", &text);
  REQUIRE(status == 0);
  const auto usage = fl_test::parse_res_usage(text, "sm_90a");
  REQUIRE(usage.size() == 2);
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
  char dir[] = "/tmp/fl-hopper-probe.XXXXXX";
  if (!mkdtemp(dir)) return -1;
  std::string cmd;
  for (const char* a : {FL_HOPPER_GUARDED_NVCC_ARGS}) cmd += "\"" + std::string(a) + "\" ";
  cmd += defines + " -c \"" + std::string(FL_SOURCE_DIR) + "/" + source + "\" -o \"" + dir +
         "/probe.o\"";
  const int status = fl_test::run_command(cmd, out);
  std::string ignored;
  fl_test::run_command("rm -rf \"" + std::string(dir) + "\"", &ignored);
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
#endif
