// Generic supports() messages, checked on fake devices (no GPU needed).
#include "catch_compat.h"
#include "flashladder/registry.h"

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
