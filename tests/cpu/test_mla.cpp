// Multi-head latent attention's decode shape (rung 17) in the harness, no GPU needed: head_dim
// 576 with V's 512 as K's first columns (Problem::v_in_k, --v-in-k), validated as that pair only;
// the inputs, the bytes (the cache read once), the CLI; the rungs before 17 refusing it in one
// line; and rung 17's split plan (steps/17_mla/mla_plan.h): whole 64-key blocks, no empty split.
#include <string>
#include <vector>

#include "17_mla/mla_plan.h"
#include "catch_compat.h"
#include "problem_shape.h"
#include "flashladder/cli.h"
#include "flashladder/inputs.h"
#include "flashladder/reference.h"
#include "flashladder/registry.h"

using namespace fl;

namespace {

Problem mla_shape(int batch, int sq, int sk, int heads) { return mla_problem(batch, sq, sk, heads, DType::fp16, false); }

}  // namespace

TEST_CASE("MLA's cache: 576/512 validated as a pair, V in K needs dv <= d", "[cpu][mla]") {
  Problem p = mla_shape(1, 1, 100, 16);
  REQUIRE(validate(p).empty());
  p.v_in_k = false;  // the harness also takes 576/512 with V a tensor of its own
  REQUIRE(validate(p).empty());
  for (int dv : {0, 256, 576}) {  // 576 only with dv 512
    Problem q = mla_shape(1, 1, 100, 16);
    q.head_dim_v = dv;
    q.v_in_k = false;
    const std::string why = validate(q);
    INFO(dv << ": " << why);
    REQUIRE(why.rfind("--dim ", 0) == 0);
    REQUIRE(why.find("576 with --dim-v 512") != std::string::npos);
    REQUIRE(why.find('\n') == std::string::npos);
  }
  Problem wide = fl_test::shape(1, 8, 8, 2, 2, 64, false);
  wide.head_dim_v = 128;
  wide.v_in_k = true;  // V cannot be K's first 128 columns of 64
  REQUIRE(validate(wide).rfind("--v-in-k", 0) == 0);
  Problem d512 = fl_test::shape(1, 8, 8, 2, 2, 128, false);
  d512.head_dim_v = 512;  // 512 is V's head_dim only beside 576
  REQUIRE(validate(d512).rfind("--dim-v", 0) == 0);
}

TEST_CASE("MLA's inputs: V is K's first 512 columns; the cache's bytes count once", "[cpu][mla]") {
  const Problem p = mla_shape(2, 2, 37, 16);
  for (InputKind kind : {InputKind::random, InputKind::ones, InputKind::identity, InputKind::ramp,
                         InputKind::outlier}) {
    const HostInputs in = make_inputs(p, kind, 3);
    REQUIRE(in.k.size() == p.kv_elements());
    REQUIRE(in.v.size() == p.v_elements());
    bool same = true;
    for (size_t row = 0; row < in.v.size() / kMlaHeadDimV; ++row)
      for (int c = 0; c < kMlaHeadDimV; ++c)
        same = same && in.v[row * kMlaHeadDimV + c] == in.k[row * kMlaHeadDim + c];
    INFO(static_cast<int>(kind));
    REQUIRE(same);
  }
  Problem own = p;
  own.v_in_k = false;
  REQUIRE(kv_bytes(p) == 2.0 * p.total_k() * kMlaHeadDim);
  REQUIRE(kv_bytes(own) == 2.0 * p.total_k() * (kMlaHeadDim + kMlaHeadDimV));
  // The FLOPs are the same either way: QK^T over 576, PV over 512.
  REQUIRE(attention_flops(p) == 2.0 * p.batch * p.heads_q * p.seqlen_q * p.seqlen_k * (576 + 512));
  REQUIRE(p.describe().find("d=576 dv=512 v=k[:dv]") != std::string::npos);
}

TEST_CASE("MLA's reference: V in K gives what a separate V of the same values gives", "[cpu][mla]") {
  Problem p = mla_shape(1, 2, 45, 3);
  p.causal = true;
  const HostInputs in = make_inputs(p, InputKind::random, 11);
  Problem own = p;
  own.v_in_k = false;  // the same tensors, V passed as its own
  const RowResults a = reference_fp64(p, in, all_rows(p)), b = reference_fp64(own, in, all_rows(own));
  REQUIRE(a.out.size() == static_cast<size_t>(p.seqlen_q) * p.heads_q * kMlaHeadDimV);
  REQUIRE(a.out == b.out);
  REQUIRE(a.lse == b.lse);
}

TEST_CASE("--v-in-k: parsed as a flag, in the usage", "[cpu][mla]") {
  auto parse = [](std::vector<const char*> args, Options* o) {
    args.insert(args.begin(), "prog");
    return parse_cli(static_cast<int>(args.size()), args.data(), o);
  };
  Options o;
  REQUIRE(parse({"--dim", "576", "--dim-v", "512", "--v-in-k", "--kv-heads", "1", "--heads", "16"}, &o).ok);
  REQUIRE(o.problem.v_in_k);
  REQUIRE(validate(o.problem).empty());
  Options off;
  REQUIRE(parse({"--v-in-k", "0"}, &off).ok);
  REQUIRE_FALSE(off.problem.v_in_k);
  REQUIRE(usage("prog").find("--v-in-k") != std::string::npos);
}

TEST_CASE("the rungs before 17 refuse MLA's head_dim in one line", "[cpu][mla]") {
  Rung any;  // rung 01's kind: no head_dim list, "any up to 256"
  any.number = 1;
  any.name = "naive";
  Rung listed;
  listed.number = 16;
  listed.name = "masks";
  listed.head_dims = {64, 128, 256};
  listed.head_dim_v = true;
  DeviceInfo hopper;
  hopper.cc_major = 9;
  const Problem p = mla_shape(1, 1, 100, 16);
  for (const Rung* r : {&any, &listed}) {
    const std::string why = generic_supports(*r, p, hopper);
    INFO(why);
    REQUIRE(why.find("head_dim 576 not supported") != std::string::npos);
    REQUIRE(why.find('\n') == std::string::npos);
  }
}

TEST_CASE("rung 17's plan: 64-row tiles, splits of whole blocks, none empty", "[cpu][mla]") {
  using mla::make_mla_plan;
  for (int heads : {16, 24, 64, 128})
    for (int sq : {1, 2, 4})
      for (int sk : {1, 63, 64, 65, 777, 4099, 65537})
        for (int req : {0, 1, 3, 7, 300})
          for (int batch : {1, 8, 132}) {
            const mla::MlaPlan m = make_mla_plan(batch, heads, sq, sk, req, 132);
            INFO(batch << " x " << sq << " x " << heads << " heads, " << sk << " keys, " << req << " splits");
            REQUIRE(m.rows == sq * heads);
            REQUIRE(m.row_tiles == (sq * heads + 63) / 64);
            REQUIRE(m.split_len % mla::kBlockN == 0);
            REQUIRE(m.num_splits >= 1);
            REQUIRE(static_cast<long long>(m.num_splits) * m.split_len >= sk);  // every key has a split
            REQUIRE(static_cast<long long>(m.num_splits - 1) * m.split_len < sk);  // the last is not empty
            if (req > 0) REQUIRE(m.num_splits <= req);
            if (req == 0 && m.work_items >= 132) REQUIRE(m.num_splits == 1);  // a full wave: no split
            REQUIRE(mla::mla_workspace_floats(m, batch, heads, sq) ==
                    (m.num_splits > 1 ? static_cast<size_t>(batch) * heads * sq * m.num_splits * 513 : 0));
          }
  // One sequence of 128 heads on 132 SMs: 2 tiles, split to fill the GPU in pieces of >= 256 keys.
  const mla::MlaPlan one = make_mla_plan(1, 128, 1, 8192, 0, 132);
  REQUIRE(one.row_tiles == 2);
  REQUIRE(one.num_splits > 1);
  REQUIRE(one.split_len >= 256);
}
