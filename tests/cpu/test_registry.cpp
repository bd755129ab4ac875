// Generic supports() messages, checked on fake devices (no GPU needed).
#include <cstdio>
#include <string>

#include "catch_compat.h"
#include "flashladder/registry.h"
#include "run_command.h"

using namespace fl;

TEST_CASE("generic supports gives one-line reasons", "[cpu][registry]") {
  Rung r;
  r.number = 5;
  r.name = "tensor_cores";
  r.head_dims = {32, 64, 128};
  r.min_cc = 80;
  Problem p;
  DeviceInfo volta, hopper;
  volta.cc_major = 7;
  hopper.cc_major = 9;
  p.head_dim = 64;
  REQUIRE(supports(r, p, hopper).empty());
  REQUIRE(supports(r, p, volta).find("compute capability >= 8.0") != std::string::npos);
  p.head_dim = 96;
  REQUIRE(supports(r, p, hopper).find("head_dim 96 not supported (supported: 32, 64, 128)") != std::string::npos);
  p.head_dim = 64;
  p.page_size = 16;
  REQUIRE(supports(r, p, hopper).find("paged KV") != std::string::npos);
  p.page_size = 0;
  r.supports = [](const Problem& q, const DeviceInfo&) { return q.causal ? std::string("no causal here") : ""; };
  p.causal = true;
  REQUIRE(supports(r, p, hopper) == "no causal here");
}

TEST_CASE("registry orders rungs and finds the previous main rung", "[cpu][registry]") {
  Registry reg;
  Rung a, b, bv, c;
  a.number = 1;
  a.name = "naive";
  b.number = 4;
  b.name = "fa2";
  bv = b;
  bv.variant = "fa1-order";
  c.number = 3;
  c.name = "online";
  reg.add(b);
  reg.add(bv);
  reg.add(a);
  reg.add(c);
  REQUIRE(reg.all().front().number == 1);
  REQUIRE(reg.previous(4)->number == 3);
  REQUIRE(reg.previous(1) == nullptr);
  REQUIRE(reg.find(4, "fa1-order")->label() == "04_fa2[fa1-order]");
  REQUIRE(reg.mains().size() == 3);
}

TEST_CASE("baselines: a variant defaults to its rung; candidates resolve the declaration", "[cpu][registry]") {
  Registry reg;
  Rung a, b, c, cv, d;
  a.number = 1;
  a.name = "naive";
  b.number = 4;
  b.name = "fa2";
  b.baselines = {Baseline::on(1, "improves on")};
  c.number = 5;
  c.name = "tc";
  cv = c;
  cv.variant = "untiled";
  d.number = 8;
  d.name = "decode";
  d.decode = true;
  d.baselines = {Baseline::fastest("fastest earlier")};
  for (const Rung& r : {a, b, c, cv, d}) reg.add(r);
  // A variant without a declaration is compared with its own rung.
  const Rung* v = reg.find(5, "untiled");
  REQUIRE(v->baselines.size() == 1);
  REQUIRE(v->baselines[0].number == 5);
  REQUIRE(v->baselines[0].variant.empty());
  // A fixed baseline resolves to its one entry; "fastest earlier" to every main numbered below.
  REQUIRE(reg.candidates(*reg.find(4), reg.find(4)->baselines[0]).front()->label() == "01_naive");
  const auto earlier = reg.candidates(*reg.find(8), reg.find(8)->baselines[0]);
  REQUIRE(earlier.size() == 3);  // 01, 04, 05: mains only, the variant is not a candidate
  for (const Rung* e : earlier) REQUIRE(e->variant.empty());
  // The JSON the report and docgen read.
  const std::string js = registry_json(reg);
  REQUIRE(js.find("\"schema\": \"flashladder.registry/1\"") != std::string::npos);
  REQUIRE(js.find("{\"kind\": \"fastest_earlier\", \"label\": \"the fastest earlier rung\"") != std::string::npos);
  REQUIRE(js.find("\"label\": \"05_tc[untiled]\"") != std::string::npos);
  REQUIRE(describe_baselines(reg, *reg.find(4)).front() == "vs 01_naive: improves on");
}

TEST_CASE("the built registry: every rung after 01 declares a baseline that resolves", "[cpu][registry]") {
  std::string out;
  REQUIRE(fl_test::run_command(std::string(FL_TOUR_BINARY) + " --registry-json", &out) == 0);
  // Each entry is one line: {"label": "...", ..., "baselines": [...]}.
  size_t mains = 0;
  size_t pos = 0;
  while ((pos = out.find("{\"label\": \"", pos)) != std::string::npos) {
    const size_t end = out.find('\n', pos);
    const std::string line = out.substr(pos, end - pos);
    pos = end;
    const size_t at = std::string("{\"label\": \"").size();
    const std::string label = line.substr(at, line.find('"', at) - at);
    const bool is_main = line.find("\"variant\": \"\"") != std::string::npos;
    INFO(label);
    if (is_main) ++mains;
    if (label == "01_naive") {
      REQUIRE(line.find("\"baselines\": []") != std::string::npos);
      continue;
    }
    // A backward rung (11) has no earlier backward rung to improve on: the bench compares it with
    // PyTorch's backward (report.py's backward section), so it may declare none.
    if (line.find("\"backward\": true") != std::string::npos && line.find("\"baselines\": []") != std::string::npos)
      continue;
    REQUIRE(line.find("\"baselines\": [{") != std::string::npos);
    // A fixed baseline names an entry that is registered too.
    const std::string key = "{\"kind\": \"rung\", \"label\": \"";
    size_t b = 0;
    while ((b = line.find(key, b)) != std::string::npos) {
      b += key.size();
      const std::string target = line.substr(b, line.find('"', b) - b);
      INFO("baseline " << target);
      REQUIRE(out.find("{\"label\": \"" + target + "\"") != std::string::npos);
    }
    if (label == "08_flash_decoding") {
      REQUIRE(line.find("\"decode\": true") != std::string::npos);
      REQUIRE(line.find("fastest_earlier") != std::string::npos);
    }
    if (label == "07_dv_tiling") {  // a study: its own untiled kernel first, then rung 04
      REQUIRE(line.find("\"label\": \"07_dv_tiling[untiled-m64-n64]\"") < line.find("\"label\": \"04_fa2\""));
    }
    // Every main rung after 01 names the rung it builds on, registered too (the lessons table's pair).
    if (is_main) {
      const size_t at_b = line.find("\"builds_on\": ");
      REQUIRE(at_b != std::string::npos);
      const int base = std::stoi(line.substr(at_b + std::string("\"builds_on\": ").size()));
      REQUIRE(base > 0);
      char prefix[32];
      std::snprintf(prefix, sizeof prefix, "{\"label\": \"%02d_", base);
      REQUIRE(out.find(prefix) != std::string::npos);
    }
  }
  REQUIRE(mains >= 2);
}

TEST_CASE("builds_on: the first baseline on another rung, else the explicit tag", "[cpu][registry]") {
  Registry reg;
  Rung a, b, c, d;
  a.number = 4;
  a.name = "fa2";
  b.number = 7;  // a study: its own variant first, then rung 04
  b.name = "dv";
  b.baselines = {Baseline::on(7, "its own untiled kernel", "untiled"), Baseline::on(4, "the CUDA-core kernel")};
  c.number = 8;  // compared with the fastest earlier rung: the tag says what it builds on
  c.name = "decode";
  c.baselines = {Baseline::fastest("fastest earlier")};
  c.builds_on = {4};
  c.new_design = "split-KV decode";
  d.number = 11;  // no baseline rung, no tag
  d.name = "bwd";
  for (const Rung& r : {a, b, c, d}) reg.add(r);
  REQUIRE(reg.builds_on(*reg.find(7)) == 4);
  REQUIRE(reg.builds_on(*reg.find(8)) == 4);
  REQUIRE(reg.builds_on(*reg.find(11)) == 0);
  REQUIRE(reg.builds_on(*reg.find(4)) == 0);
  const std::string js = registry_json(reg);
  REQUIRE(js.find("\"builds_on\": 4, \"new_design\": \"split-KV decode\"") != std::string::npos);
}

TEST_CASE("tile_limits: the shared limits of the tiled rungs", "[cpu][registry]") {
  Problem p;
  p.head_dim = 128;
  DeviceInfo d;
  d.smem_per_block_optin = 100 * 1024;
  REQUIRE(tile_limits(p, d, 64 * 1024) == "");
  REQUIRE(tile_limits(p, d, 160 * 1024).find("needs 163840 bytes of shared memory") == 0);
  p.heads_q = 70000;
  REQUIRE(tile_limits(p, d, 64 * 1024) == "heads_q and batch must be <= 65535 (grid y and z)");
  p.heads_q = 16;
  d.smem_per_block_optin = 0;  // unknown GPU: the shared-memory check is left to the launch
  REQUIRE(tile_limits(p, d, 1 << 20) == "");
}
