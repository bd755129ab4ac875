/// @file tests/cpu/test_spill.cpp
/// @brief Rung 07's claim, re-checked from the compiled code on every build (no GPU needed):
/// the untiled kernel spills at head_dim 128, the main entry's DV-tiled kernel does not.
/// The resource usage comes from `cuobjdump -res-usage` (tests/cuobjdump.h).
#include <map>
#include <string>

#include "07_dv_tiling/variants.h"
#include "catch_compat.h"
#include "cuobjdump.h"
#include "run_command.h"

namespace {

using fl_test::find_cuobjdump;
using fl_test::KernelUsage;
using fl_test::parse_res_usage;

/// The mangled template arguments of DvTraits<T, HEAD_DIM, DV_TILE, BLOCK_M, BLOCK_N>,
/// e.g. "8DvTraitsI6__halfLi128ELi32ELi64ELi64EE" (Itanium ABI: "Li<n>E" is int n).
std::string dv_traits_mangled(const std::string& type, int head_dim, int dv_tile, int block_m,
                              int block_n) {
  std::string s = "8DvTraitsI" + type;
  for (int v : {head_dim, dv_tile, block_m, block_n}) s += "Li" + std::to_string(v) + "E";
  return s + "E";
}

/// The dv_tiled_fwd kernel whose name holds those template arguments (null if absent).
const KernelUsage* find_dv_kernel(const std::map<std::string, KernelUsage>& kernels,
                                  const std::string& type, int head_dim, int dv_tile, int block_m,
                                  int block_n) {
  const std::string args = dv_traits_mangled(type, head_dim, dv_tile, block_m, block_n);
  for (const auto& [name, usage] : kernels)
    if (name.find("dv_tiled_fwd") != std::string::npos && name.find(args) != std::string::npos)
      return &usage;
  return nullptr;
}

const char* const kTypes[] = {"6__half", "13__nv_bfloat16"};  // mangled __half, __nv_bfloat16

}  // namespace

TEST_CASE("mangled DvTraits arguments", "[cpu][spill]") {
  CHECK(dv_traits_mangled("6__half", 128, 32, 64, 64) == "8DvTraitsI6__halfLi128ELi32ELi64ELi64EE");
  const std::string sample =
      "arch = sm_80\n"
      " Function _ZN2fl9dv_tiling12dv_tiled_fwdINS0_8DvTraitsI6__halfLi128ELi128ELi64ELi64EEEEEvNS_"
      "10AttnParamsE:\n"
      "  REG:255 STACK:999 SHARED:0 LOCAL:0 CONSTANT[0]:752\n"
      "arch = sm_90\n"
      " Function _ZN2fl9dv_tiling12dv_tiled_fwdINS0_8DvTraitsI6__halfLi128ELi128ELi64ELi64EEEEEvNS_"
      "10AttnParamsE:\n"
      "  REG:255 STACK:440 SHARED:33792 LOCAL:0 CONSTANT[0]:752 TEXTURE:0\n";
  const auto k = parse_res_usage(sample, "sm_90");
  REQUIRE(k.size() == 1);
  const KernelUsage* u = find_dv_kernel(k, "6__half", 128, 128, 64, 64);
  REQUIRE(u != nullptr);
  CHECK(u->reg == 255);
  CHECK(u->stack == 440);  // the sm_80 cubin's figure is ignored
  CHECK(u->local == 0);
}

#ifdef FL_RUNG07_BINARY
TEST_CASE("rung 07: untiled d=128 spills, the main DV-tiled kernel does not (sm_90)",
          "[cpu][spill]") {
  using namespace fl::dv_tiling;
  const std::string cuobjdump = find_cuobjdump();
  if (cuobjdump.empty()) {
    FAIL("cuobjdump not found (set FL_CUOBJDUMP, or pip install nvidia-cuda-cuobjdump)");
  }
  std::string text;
  const int status = fl_test::run_command(
      "\"" + cuobjdump + "\" -res-usage \"" + std::string(FL_RUNG07_BINARY) + "\"", &text);
  INFO("cuobjdump -res-usage " << FL_RUNG07_BINARY << " exited " << status);
  REQUIRE(status == 0);
  const auto kernels = parse_res_usage(text, "sm_90");
  if (kernels.empty()) {
    FAIL("no sm_90 cubin in " << FL_RUNG07_BINARY << " (CMAKE_CUDA_ARCHITECTURES without 90?)");
  }

  for (const char* type : kTypes) {
    INFO("type " << type);
    // The untiled kernel (DV_TILE = head_dim) at d = 128: q and O alone are 256 floats.
    for (int block_m : {32, 64}) {
      for (int block_n : {32, 64}) {
        const KernelUsage* u = find_dv_kernel(kernels, type, 128, 128, block_m, block_n);
        INFO("untiled d=128 BLOCK_M " << block_m << " BLOCK_N " << block_n);
        REQUIRE(u != nullptr);
        CHECK(u->reg == 255);
        CHECK((u->stack > 0 || u->local > 0));
      }
    }
    // The main entry at each head_dim: no stack frame, no local memory.
    for (int head_dim : {64, 128}) {
      const KernelUsage* u =
          find_dv_kernel(kernels, type, head_dim, main_dv_tile(head_dim), kMainBlockM, kMainBlockN);
      INFO("main entry d=" << head_dim << " DV_TILE " << main_dv_tile(head_dim));
      REQUIRE(u != nullptr);
      CHECK(u->stack == 0);
      CHECK(u->local == 0);
    }
  }
}
#endif
