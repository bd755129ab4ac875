/// @file tests/cpu/test_tma_args.cpp
/// @brief The tensor-map arguments of the Hopper rungs (common/include/flashladder/tma.h), built
/// by a pure function so they can be checked without a driver: dims innermost first, byte
/// strides, the box, the bytes a load writes, and the one-line reasons for tensors TMA cannot
/// address. cuTensorMapEncodeTiled itself needs a GPU driver and is exercised by the GPU tests
/// of rungs 09-10.
#include <cstdint>
#include <string>

#include "catch_compat.h"
#include "flashladder/tma.h"

namespace {

const void* at(uintptr_t address) {
  return reinterpret_cast<const void*>(address);
}

}  // namespace

TEST_CASE("tensor map of a dense [batch, seqlen, heads, head_dim] tensor", "[cpu][hopper_tma]") {
  // K of B=2, Sk=1000, Hkv=16, d=128, fp16, dense: strides in elements (AttnParams).
  const int64_t head = 128, row = 16 * 128, batch = 1000 * 16 * 128;
  fl::TmaTiledArgs a;
  REQUIRE(fl::tma_args_bshd(at(0x10000), 2, 1000, 16, 128, batch, row, head, 176, &a) == "");
  CHECK(a.rank == 4);
  // Innermost first: (dim, head, seq, batch).
  CHECK(a.dims[0] == 128);
  CHECK(a.dims[1] == 16);
  CHECK(a.dims[2] == 1000);
  CHECK(a.dims[3] == 2);
  // Byte strides of dims 1..3 (2-byte elements).
  CHECK(a.strides_bytes[0] == 256);
  CHECK(a.strides_bytes[1] == 4096);
  CHECK(a.strides_bytes[2] == 4096000);
  // The box: 64 columns (128 B, the swizzle span) x 1 head x 176 rows x 1 batch.
  CHECK(a.box[0] == 64);
  CHECK(a.box[1] == 1);
  CHECK(a.box[2] == 176);
  CHECK(a.box[3] == 1);
  for (int i = 0; i < 4; ++i) CHECK(a.elem_strides[i] == 1);
  // One load = 176 rows x 128 B; a K stage at head_dim 128 is two of them.
  CHECK(a.box_bytes() == 176 * 128);
}

TEST_CASE("tensor map of GQA K/V and of a strided (packed QKV) view", "[cpu][hopper_tma]") {
  fl::TmaTiledArgs a;
  // GQA: 4 KV heads of d=64; the map only sees heads_kv, the kernel picks head_q / group.
  REQUIRE(fl::tma_args_bshd(at(0x20000), 1, 4096, 4, 64, 4096 * 4 * 64, 4 * 64, 64, 192, &a) == "");
  CHECK(a.dims[1] == 4);
  CHECK(a.strides_bytes[0] == 128);
  CHECK(a.box_bytes() == 192 * 128);
  // A view into a packed [B, S, 3, H, d] QKV buffer: row stride 3 H d, head stride d.
  REQUIRE(fl::tma_args_bshd(at(0x20000), 2, 77, 8, 128, 77 * 3 * 8 * 128, 3 * 8 * 128, 128, 128,
                            &a) == "");
  CHECK(a.strides_bytes[1] == 3 * 8 * 128 * 2);
  CHECK(a.dims[2] == 77);  // the tail rows 77.. of a 128-row box come in as zeros
}

TEST_CASE("tensors TMA cannot address get a one-line reason", "[cpu][hopper_tma]") {
  fl::TmaTiledArgs a;
  const int64_t head = 128, row = 16 * 128, batch = 1000 * 16 * 128;
  std::string why = fl::tma_args_bshd(at(0x10000), 2, 1000, 16, 36, batch, row, 40, 128, &a);
  CHECK(why.find("head_dim a multiple of 8") != std::string::npos);
  CHECK(why.find("got 36") != std::string::npos);
  // 80 and 96 are addressable: the last 64-column box reads zeros past the head (rung 16).
  CHECK(fl::tma_args_bshd(at(0x10000), 2, 1000, 16, 96, 1000 * 16 * 96, 16 * 96, 96, 128, &a) == "");
  CHECK(a.dims[0] == 96);
  CHECK(a.box[0] == 64);
  why = fl::tma_args_bshd(at(0x10002), 2, 1000, 16, 128, batch, row, head, 128, &a);
  CHECK(why.find("16-byte aligned") != std::string::npos);
  why = fl::tma_args_bshd(at(0x10000), 2, 1000, 16, 128, batch, 2052, head, 128, &a);
  CHECK(why.find("row stride") != std::string::npos);
  CHECK(why.find("got 2052") != std::string::npos);
  why = fl::tma_args_bshd(at(0x10000), 2, 1000, 16, 128, batch, row, head, 300, &a);
  CHECK(why.find("1..256 rows") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
}

TEST_CASE("Hopper rungs refuse anything but an sm_90 GPU built with sm_90a", "[cpu][hopper_tma]") {
  fl::DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  CHECK(fl::hopper_supports(d, true) == "");
  CHECK(fl::hopper_supports(d, false) == "needs an sm_90 GPU (built without sm_90a)");
  d.cc_major = 8;
  CHECK(fl::hopper_supports(d, true).rfind("needs an sm_90 GPU", 0) == 0);
  CHECK(fl::hopper_supports(d, true).find("sm_80") != std::string::npos);
  d.cc_major = 10;  // sm_90a code does not run on later GPUs
  CHECK(fl::hopper_supports(d, true).find("sm_100") != std::string::npos);
}
