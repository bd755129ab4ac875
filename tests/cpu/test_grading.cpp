// The graded parts (common/src/grading.cpp) on rungs described like the real ones, and the
// score table with a stand-in for the GPU: no device needed.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include "catch_compat.h"
#include "flashladder/grading.h"
#include "flashladder/static_switch.h"

using namespace fl;

namespace {

Rung fake_rung(int number, const char* name, std::vector<int> dims, bool decode = false,
               bool paged = false) {
  Rung r;
  r.number = number;
  r.name = name;
  r.head_dims = std::move(dims);
  r.decode = decode;
  r.paged_kv = paged;
  return r;
}

Rung fake_variant(const Rung& main, const char* name, std::vector<int> dims) {
  Rung v = main;
  v.variant = name;
  v.head_dims = std::move(dims);
  return v;
}

/// A rung and its variants, as the registry holds them.
struct Entry {
  Rung rung;
  std::vector<Rung> variants;
  std::vector<const Rung*> variant_ptrs() const {
    std::vector<const Rung*> out;
    for (const Rung& v : variants) out.push_back(&v);
    return out;
  }
};

/// Rungs shaped like the ladder's: any head_dim (01), three (02-05), four (06), two with
/// variants of their own head_dims (07), a paged decode rung with a variant (08), a decode rung
/// without paging, a rung with one head_dim.
std::vector<Entry> ladder_like() {
  std::vector<Entry> out = {{fake_rung(1, "naive", {}), {}},
                            {fake_rung(2, "tiled", {32, 64, 128}), {}},
                            {fake_rung(6, "headdim_tiles", {32, 64, 128, 256}), {}},
                            {fake_rung(7, "dv_tiling", {64, 128}), {}},
                            {fake_rung(8, "flash_decoding", {64, 128}, true, true), {}},
                            {fake_rung(9, "decode_contiguous", {128}, true, false), {}},
                            {fake_rung(10, "one_dim", {128}), {}}};
  out[3].variants = {fake_variant(out[3].rung, "untiled-m64-n64", {128}),
                     fake_variant(out[3].rung, "split-d", {64, 128})};
  out[4].variants = {fake_variant(out[4].rung, "no-pdl", {128})};
  return out;
}

const GradePart* find_part(const std::vector<GradePart>& parts, const std::string& name) {
  for (const auto& p : parts)
    if (p.name == name) return &p;
  return nullptr;
}

CaseResult pass_all(const Rung&, const Problem&, InputKind, CheckMode, unsigned long long) {
  CaseResult r;
  r.ran = true;
  r.check.pass = true;
  return r;
}

}  // namespace

TEST_CASE("graded parts: non-empty, valid, small to large, decode shapes", "[cpu][grading]") {
  for (const Entry& e : ladder_like()) {
    const Rung& r = e.rung;
    INFO(r.label());
    const std::vector<GradePart> parts = grade_parts(r, e.variant_ptrs());
    REQUIRE(!parts.empty());
    std::set<std::string> names;
    int points = 0;
    for (const GradePart& part : parts) {
      INFO("part " << part.name);
      CHECK(names.insert(part.name).second);  // unique names
      CHECK(!part.what.empty());
      CHECK(part.points > 0);
      points += part.points;
      REQUIRE(!part.cases.empty());
      for (size_t i = 0; i < part.cases.size(); ++i) {
        const GradeCase& c = part.cases[i];
        INFO(c.describe());
        CHECK(validate(c.problem).empty());
        if (i > 0) CHECK(grade_work(part.cases[i - 1].problem) <= grade_work(c.problem));
        if (r.decode) CHECK(c.problem.seqlen_q <= 16);
        if (!r.paged_kv) CHECK(c.problem.page_size == 0);
        if (!r.decode) CHECK(c.problem.num_splits == 0);
        // Every case runs on the rung or on one of its variants, at a head_dim it takes.
        const Rung* runs = &r;
        for (const Rung& v : e.variants)
          if (v.variant == c.variant) runs = &v;
        CHECK(runs->variant == c.variant);
        const auto& dims = runs->head_dims;
        if (!dims.empty())
          CHECK(std::find(dims.begin(), dims.end(), c.problem.head_dim) != dims.end());
      }
    }
    CHECK(points == 100);
    for (const char* must : {"plain", "tails", "causal", "gqa", "bf16", "diagnostic", "large"})
      CHECK(find_part(parts, must) != nullptr);
    CHECK((find_part(parts, "splits") != nullptr) == r.decode);
    CHECK((find_part(parts, "paged") != nullptr) == r.paged_kv);
    // variants: one case per variant, and only when there is one.
    const GradePart* vp = find_part(parts, "variants");
    CHECK((vp != nullptr) == !e.variants.empty());
    if (vp) {
      std::set<std::string> names;
      for (const auto& c : vp->cases) names.insert(c.variant);
      CHECK(names.size() == e.variants.size());
      CHECK(vp->cases.size() == e.variants.size());
    }
    for (const auto& part : parts)
      if (part.name != "variants")
        for (const auto& c : part.cases) CHECK(c.variant.empty());
    // head_dims: every other head_dim the rung takes, and only when there is one.
    std::set<int> seen;
    if (const GradePart* hd = find_part(parts, "head_dims"))
      for (const auto& c : hd->cases) seen.insert(c.problem.head_dim);
    std::set<int> others;
    for (int d : r.head_dims.empty() ? std::vector<int>{32, 64, 128} : r.head_dims)
      if (d != grade_head_dim(r)) others.insert(d);
    CHECK(seen == others);
  }
}

TEST_CASE("graded parts test what their names say", "[cpu][grading]") {
  for (const Entry& e : ladder_like()) {
    const Rung& r = e.rung;
    INFO(r.label());
    const std::vector<GradePart> parts = grade_parts(r, e.variant_ptrs());
    const GradePart& plain = *find_part(parts, "plain");
    for (const auto& c : plain.cases) {
      CHECK_FALSE(c.problem.causal);
      CHECK(c.problem.heads_q == c.problem.heads_kv);
      CHECK(c.problem.dtype == (dtype_built(DType::fp16) ? DType::fp16 : DType::bf16));
      CHECK(c.problem.head_dim == grade_head_dim(r));
    }
    // Tails: 1 x 1, and seqlen_q != seqlen_k both ways.
    bool one_by_one = false, q_longer = false, k_longer = false;
    for (const auto& c : find_part(parts, "tails")->cases) {
      one_by_one = one_by_one || (c.problem.seqlen_q == 1 && c.problem.seqlen_k == 1);
      q_longer = q_longer || c.problem.seqlen_q > c.problem.seqlen_k;
      k_longer = k_longer || c.problem.seqlen_q < c.problem.seqlen_k;
    }
    CHECK(one_by_one);
    CHECK(k_longer);
    if (!r.decode) CHECK(q_longer);
    // Causal: every case masked, and some row sees no key (query i sees keys <= i + Sk - Sq).
    bool no_key_row = false;
    for (const auto& c : find_part(parts, "causal")->cases) {
      CHECK(c.problem.causal);
      no_key_row = no_key_row || c.problem.visible_keys(0) == 0;
    }
    CHECK(no_key_row);
    bool mqa = false;
    for (const auto& c : find_part(parts, "gqa")->cases) {
      CHECK(c.problem.heads_q > c.problem.heads_kv);
      mqa = mqa || c.problem.heads_kv == 1;
    }
    CHECK(mqa);
    for (const auto& c : find_part(parts, "bf16")->cases) CHECK(c.problem.dtype == DType::bf16);
    std::set<InputKind> inputs;
    for (const auto& c : find_part(parts, "diagnostic")->cases) inputs.insert(c.input);
    CHECK(inputs == std::set<InputKind>{InputKind::ones, InputKind::identity, InputKind::ramp});
    const GradePart& large = *find_part(parts, "large");
    REQUIRE(large.cases.size() == 1);  // one large case at most: the grade stays fast
    CHECK(large.cases[0].check == CheckMode::sample);
    // Every other case is checked in full, and small enough for a quick fp64 reference.
    for (const auto& part : parts)
      if (part.name != "large")
        for (const auto& c : part.cases) {
          INFO(c.describe());
          CHECK(c.check == CheckMode::full);
          CHECK(grade_work(c.problem) <= 2.5e8);
        }
  }
}

TEST_CASE("grade table: points per part, first failure, skips, not implemented", "[cpu][grading]") {
  const Rung r = fake_rung(5, "tensor_cores", {32, 64, 128});
  const std::vector<GradePart> parts = grade_parts(r);

  SECTION("everything passes") {
    int calls = 0;
    const GradeReport g = grade_rung(
        r, {},
        [&](const Rung& a, const Problem& b, InputKind c, CheckMode d, unsigned long long e) {
          ++calls;
          return pass_all(a, b, c, d, e);
        });
    size_t cases = 0;
    for (const auto& p : parts) cases += p.cases.size();
    CHECK(calls == static_cast<int>(cases));
    CHECK(g.passed_all());
    CHECK(g.points() == 100);
    CHECK(g.max_points() == 100);
    const std::string t = format_grade_table(g);
    CHECK(t.find("part        cases passed failed skipped  points  first failure") !=
          std::string::npos);
    CHECK(t.find("100/100  PASS") != std::string::npos);
  }

  SECTION("a failing part names its first (smallest) failing case") {
    // Rows that see no key are wrong: only causal cases with seqlen_q > seqlen_k fail.
    const GradeReport g = grade_rung(
        r, {}, [](const Rung&, const Problem& p, InputKind, CheckMode, unsigned long long) {
          CaseResult res;
          res.ran = true;
          res.check.pass = !(p.causal && p.seqlen_q > p.seqlen_k);
          if (!res.check.pass) res.check.reason = "3 LSE values wrong";
          return res;
        });
    CHECK_FALSE(g.passed_all());
    const PartScore* causal = nullptr;
    for (const auto& p : g.parts)
      if (p.name == "causal") causal = &p;
    REQUIRE(causal != nullptr);
    CHECK(causal->failed == 2);
    CHECK(causal->points == 15 * causal->passed / causal->cases);
    CHECK(causal->first_failure == "B=1 Sq=130 Sk=77 H=4/4 d=" + std::to_string(grade_head_dim(r)) +
                                       (dtype_built(DType::fp16) ? " fp16" : " bf16") +
                                       " causal=1: 3 LSE values wrong");
    const std::string t = format_grade_table(g);
    CHECK(t.find("FAIL:") != std::string::npos);
    CHECK(t.find(causal->first_failure) != std::string::npos);
  }

  SECTION("cases the rung cannot run are skipped, not failed; exceptions fail") {
    const GradeReport g = grade_rung(
        r, {}, [](const Rung&, const Problem& p, InputKind, CheckMode, unsigned long long) {
          if (p.seqlen_k == 1) throw std::runtime_error("CUDA error: illegal memory access");
          CaseResult res;
          res.ran = p.dtype != DType::bf16;
          res.skipped = res.ran ? "" : "dtype not built (configured with FL_DTYPE)";
          res.check.pass = true;
          return res;
        });
    for (const auto& p : g.parts) {
      if (p.name == "bf16") {
        CHECK(p.skipped == p.cases);
        CHECK(p.max_points == 0);  // not scored: the total is out of the parts that ran
        CHECK(p.skip_reason.find("not built") != std::string::npos);
      }
      if (p.name == "tails") {
        CHECK(p.failed == 2);  // 1 x 1 and 203 x 1
        CHECK(p.first_failure.find("error: CUDA error: illegal memory access") !=
              std::string::npos);
      }
    }
    CHECK(g.max_points() == 90);
    CHECK(format_grade_table(g).find("not run here: dtype not built") != std::string::npos);
  }

  SECTION("a variant's case runs on the variant") {
    const Rung v = fake_variant(r, "swizzle-off", {64});
    std::set<std::string> seen;
    const GradeReport g = grade_rung(
        r, {&v},
        [&](const Rung& ran, const Problem& b, InputKind c, CheckMode d, unsigned long long e) {
          seen.insert(ran.label());
          return pass_all(ran, b, c, d, e);
        });
    CHECK(seen == std::set<std::string>{"05_tensor_cores", "05_tensor_cores[swizzle-off]"});
    CHECK(g.passed_all());
    CHECK(g.max_points() == 100);
  }

  SECTION("a lab starter rung scores 0 without running anything") {
    Rung starter = r;
    starter.not_implemented = "lab 05: implement 05-mma-qk in steps/05_tensor_cores/kernel.cuh";
    bool ran = false;
    const GradeReport g = grade_rung(
        starter, {},
        [&](const Rung& a, const Problem& b, InputKind c, CheckMode d, unsigned long long e) {
          ran = true;
          return pass_all(a, b, c, d, e);
        });
    CHECK_FALSE(ran);
    CHECK_FALSE(g.passed_all());
    CHECK(g.points() == 0);
    CHECK(g.max_points() == 100);
    const std::string t = format_grade_table(g);
    CHECK(t.find("not implemented: lab 05: implement 05-mma-qk") != std::string::npos);
    CHECK(t.find("0/100  FAIL: not implemented") != std::string::npos);
    const std::string csv = format_grade_csv(g, "ada");
    CHECK(csv.find("ada,05_tensor_cores,plain,4,0,4,0,0,30,not implemented: lab 05") !=
          std::string::npos);
    CHECK(csv.find("ada,05_tensor_cores,total,") != std::string::npos);
  }

  SECTION("CSV: a header, one row per part, a total row, fields quoted") {
    const GradeReport g = grade_rung(r, {}, pass_all);
    CHECK(grade_csv_header() ==
          "student,rung,part,cases,passed,failed,skipped,points,max_points,first_failure\n");
    const std::string csv = format_grade_csv(g, "Lovelace, Ada");
    CHECK(std::count(csv.begin(), csv.end(), '\n') == static_cast<long>(parts.size()) + 1);
    CHECK(csv.find("\"Lovelace, Ada\",05_tensor_cores,plain,4,4,0,0,30,30,\n") !=
          std::string::npos);
    CHECK(csv.find(",total,") != std::string::npos);
    CHECK(csv.find(",100,100,PASS\n") != std::string::npos);
  }
}
