#include "flashladder/grading.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <utility>

#include "flashladder/static_switch.h"

namespace fl {

std::string GradeCase::describe() const {
  std::string s = problem.describe();
  if (input != InputKind::random) s += std::string(" input=") + input_kind_name(input);
  if (check != CheckMode::full) s += std::string(" check=") + check_mode_name(check);
  if (!variant.empty()) s += " variant=" + variant;
  return s;
}

double grade_work(const Problem& p) {
  return static_cast<double>(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k * p.head_dim;
}

namespace {

/// The head_dims a rung takes; "any" (rung 01) is graded at 32, 64 and 128.
std::vector<int> rung_head_dims(const Rung& r) {
  return r.head_dims.empty() ? std::vector<int>{32, 64, 128} : r.head_dims;
}

/// Builds the cases of one part: shapes at the rung's head_dim and main dtype.
class PartBuilder {
 public:
  PartBuilder(std::string name, std::string what, int points, int head_dim, int seed0)
      : head_dim_(head_dim), seed_(seed0) {
    part_.name = std::move(name);
    part_.what = std::move(what);
    part_.points = points;
  }

  /// Adds B=batch, Sq x Sk, heads hq/hkv; returns it for further changes.
  GradeCase& add(int batch, int sq, int sk, int hq, int hkv, bool causal = false,
                 DType t = kMainDType) {
    GradeCase c;
    c.problem.batch = batch;
    c.problem.seqlen_q = sq;
    c.problem.seqlen_k = sk;
    c.problem.heads_q = hq;
    c.problem.heads_kv = hkv;
    c.problem.head_dim = head_dim_;
    c.problem.dtype = t;
    c.problem.causal = causal;
    c.seed = static_cast<unsigned long long>(seed_++);
    part_.cases.push_back(c);
    return part_.cases.back();
  }

  void set_head_dim(int d) { head_dim_ = d; }

  /// Adds MLA's decode shape (rung 17): @p hq heads over one latent cache of 576 dims whose first
  /// 512 are V (head_dim 576, dv 512, one KV head, V in K).
  GradeCase& add_mla(int batch, int sq, int sk, int hq, bool causal = false, DType t = kMainDType) {
    GradeCase& c = add(batch, sq, sk, hq, 1, causal, t);
    c.problem = mla_problem(batch, sq, sk, hq, t, causal);
    return c;
  }

  /// The part, its cases sorted by work (stable: equal work keeps the written order).
  GradePart done() {
    std::stable_sort(part_.cases.begin(), part_.cases.end(),
                     [](const GradeCase& a, const GradeCase& b) {
                       return grade_work(a.problem) < grade_work(b.problem);
                     });
    return part_;
  }

  /// fp16 unless the build has bf16 only (FL_DTYPE=bf16).
  static constexpr DType kMainDType = dtype_built(DType::fp16) ? DType::fp16 : DType::bf16;

 private:
  GradePart part_;
  int head_dim_ = 64;
  int seed_ = 1;
};

/// One case per variant, at the variant's own head_dim: enough to show that the shared code
/// the lab regions hold also works where the variant calls it.
GradePart variants_part(const std::vector<const Rung*>& variants, bool decode, int points,
                        int seed0) {
  PartBuilder b("variants",
                "the rung's variants (ablations, sweep points): each runs the same lab code",
                points, 64, seed0);
  for (const Rung* v : variants) {
    b.set_head_dim(grade_head_dim(*v));
    GradeCase& c = decode ? b.add(2, 5, 777, 8, 2, true) : b.add(2, 203, 257, 4, 1, true);
    c.variant = v->variant;
  }
  return b.done();
}

/// Appends @p p, or gives its points to the first part ("plain") when it has no case.
void add_part(std::vector<GradePart>* parts, GradePart p) {
  if (!p.cases.empty())
    parts->push_back(std::move(p));
  else
    parts->front().points += p.points;
}

/// The structured inputs (all ones, identity-like Q/K: a peaked softmax, V a ramp), not causal
/// and causal, on one seqlen_q x seqlen_k shape with GQA 4:2: 5 points.
GradePart diagnostic_part(int d, int seqlen_q, int seqlen_k, int seed0) {
  PartBuilder b("diagnostic",
                "structured inputs: all ones, identity-like Q/K (peaked softmax), V a ramp", 5, d,
                seed0);
  for (InputKind in : {InputKind::ones, InputKind::identity, InputKind::ramp})
    for (bool causal : {false, true}) b.add(1, seqlen_q, seqlen_k, 4, 2, causal).input = in;
  return b.done();
}

std::vector<GradePart> prefill_parts(const Rung& r, const std::vector<const Rung*>& variants,
                                     int d) {
  std::vector<GradePart> parts;
  const DType bf16 = DType::bf16;
  {
    PartBuilder b("plain", "fp16, one KV head per query head, no mask, lengths a multiple of 64",
                  20, d, 100);
    b.add(1, 64, 64, 1, 1);
    b.add(1, 128, 128, 2, 2);
    b.add(2, 256, 256, 4, 4);
    b.add(1, 512, 512, 4, 4);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("tails",
                  "lengths that end mid-tile, seqlen_q != seqlen_k both ways, 1 x 1, one row", 15,
                  d, 200);
    b.add(1, 1, 1, 1, 1);
    b.add(1, 1, 203, 2, 2);
    b.add(1, 203, 1, 2, 2);
    b.add(1, 17, 17, 2, 2);
    b.add(1, 77, 130, 4, 4);
    b.add(1, 130, 77, 4, 4);
    b.add(2, 203, 257, 2, 2);
    b.add(1, 1000, 113, 2, 2);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("causal",
                  "bottom-right causal mask; seqlen_q > seqlen_k leaves rows that see no key "
                  "(O = 0, LSE = -inf)",
                  15, d, 300);
    b.add(1, 64, 64, 2, 2, true);
    b.add(1, 113, 113, 2, 2, true);
    b.add(1, 77, 130, 4, 4, true);
    b.add(1, 130, 77, 4, 4, true);
    b.add(2, 257, 203, 2, 2, true);
    b.add(1, 512, 512, 4, 4, true);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("gqa", "GQA and MQA: several query heads read one KV head (h_kv = h / group)", 10,
                  d, 400);
    b.add(1, 128, 128, 4, 2);
    b.add(1, 77, 130, 4, 1);
    b.add(1, 203, 257, 16, 2, true);
    b.add(2, 256, 256, 8, 2, true);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("bf16", "bfloat16 storage: the plain, tail, causal and GQA shapes again", 10, d,
                  500);
    b.add(1, 128, 128, 2, 2, false, bf16);
    b.add(1, 77, 130, 4, 2, false, bf16);
    b.add(1, 130, 77, 4, 4, true, bf16);
    b.add(1, 512, 512, 4, 4, true, bf16);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("head_dims", "the rung's other head_dims, with tails, GQA and causal", 10, d,
                  600);
    for (int other : rung_head_dims(r)) {
      if (other == d) continue;
      b.set_head_dim(other);
      b.add(1, 77, 130, 4, 2);
      b.add(1, 203, 203, 2, 2, true);
    }
    add_part(&parts, b.done());
  }
  parts.push_back(diagnostic_part(d, 130, 200, 700));
  add_part(&parts, variants_part(variants, false, 10, 750));
  {
    PartBuilder b("large", "one large causal GQA problem, sampled rows against the reference", 5, d,
                  800);
    b.add(2, 2048, 2048, 8, 2, true).check = CheckMode::sample;
    parts.push_back(b.done());
  }
  return parts;
}

std::vector<GradePart> decode_parts(const Rung& r, const std::vector<const Rung*>& variants,
                                    int d) {
  std::vector<GradePart> parts;
  const DType bf16 = DType::bf16;
  const bool paged = r.paged_kv;
  {
    PartBuilder b("plain", "decode: fp16, one query row per head, no mask, one KV head per head",
                  15, d, 100);
    b.add(1, 1, 256, 8, 8);
    b.add(1, 1, 1024, 8, 8);
    b.add(2, 4, 2048, 8, 8);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("tails", "1 x 1, KV lengths that end mid-chunk, 1 to 16 query rows", 15, d, 200);
    b.add(1, 1, 1, 1, 1);
    b.add(1, 1, 17, 2, 2);
    b.add(2, 3, 777, 8, 8);
    b.add(1, 16, 1000, 4, 4);
    b.add(1, 5, 4099, 8, 8);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("causal",
                  "bottom-right causal mask over a few rows; seqlen_q > seqlen_k leaves rows that "
                  "see no key (O = 0, LSE = -inf)",
                  10, d, 300);
    b.add(1, 4, 4, 2, 2, true);
    b.add(1, 16, 8, 4, 4, true);
    b.add(2, 3, 777, 8, 2, true);
    b.add(1, 16, 2048, 4, 4, true);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("gqa", "GQA and MQA: a query-head group shares each K/V load", paged ? 10 : 15, d,
                  400);
    b.add(1, 1, 1024, 32, 8);
    b.add(1, 2, 777, 16, 2);
    b.add(1, 1, 4099, 8, 1);
    b.add(2, 4, 2048, 32, 8, true);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("splits",
                  "the split count forced: 1 split (no combine), a few, more splits than chunks",
                  paged ? 10 : 15, d, 500);
    b.add(1, 1, 1000, 8, 2).problem.num_splits = 1;
    b.add(1, 3, 777, 8, 2, true).problem.num_splits = 5;
    b.add(1, 1, 4099, 8, 2).problem.num_splits = 300;
    parts.push_back(b.done());
  }
  if (paged) {
    PartBuilder b("paged", "paged KV cache: keys found through a shuffled block table", 10, d, 600);
    b.add(2, 2, 777, 16, 2, true).problem.page_size = 16;
    b.add(1, 1, 4099, 32, 8).problem.page_size = 256;
    parts.push_back(b.done());
  }
  {
    PartBuilder b("bf16", "bfloat16 storage: decode, causal and no-key rows again", 10, d, 700);
    b.add(1, 16, 8, 4, 4, true, bf16);
    b.add(1, 1, 1024, 8, 2, false, bf16);
    b.add(1, 4, 777, 8, 2, true, bf16);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("head_dims", "the rung's other head_dims", 5, d, 800);
    for (int other : rung_head_dims(r)) {
      if (other == d) continue;
      b.set_head_dim(other);
      b.add(1, 3, 777, 8, 2);
      b.add(1, 1, 4099, 32, 8, true);
    }
    add_part(&parts, b.done());
  }
  parts.push_back(diagnostic_part(d, 4, 200, 900));
  add_part(&parts, variants_part(variants, true, 5, 950));
  {
    PartBuilder b("large", "one long KV cache (32k keys), sampled rows against the reference", 5, d,
                  1000);
    b.add(1, 1, 32768, 32, 8).check = CheckMode::sample;
    parts.push_back(b.done());
  }
  return parts;
}

/// MLA decode (rung 17): heads as rows over one latent cache, its tails, the causal rows of a
/// speculative step, splits, pages, bf16 and one long cache.
std::vector<GradePart> mla_parts() {
  std::vector<GradePart> parts;
  const DType bf16 = DType::bf16;
  {
    PartBuilder b("plain", "MLA decode: 16 to 128 heads over one latent cache row per key, one query per sequence",
                  20, kMlaHeadDim, 100);
    b.add_mla(1, 1, 256, 16);
    b.add_mla(2, 1, 1024, 32);
    b.add_mla(1, 1, 2048, 64);
    b.add_mla(1, 1, 1024, 128);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("tails", "one key, caches that end mid-block, row tiles that end mid-tile (24 heads)", 15,
                  kMlaHeadDim, 200);
    b.add_mla(1, 1, 1, 16);
    b.add_mla(1, 1, 17, 24);
    b.add_mla(2, 3, 777, 24);
    b.add_mla(1, 1, 4099, 128);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("causal", "speculative steps: seqlen_q 2 to 4 under the bottom-right causal mask", 15,
                  kMlaHeadDim, 300);
    b.add_mla(1, 2, 2, 16, true);
    b.add_mla(2, 2, 777, 64, true);
    b.add_mla(1, 4, 1000, 32, true);
    b.add_mla(1, 3, 3, 128, true);
    parts.push_back(b.done());
  }
  {
    PartBuilder b("splits", "the split count forced: one split (no combine), a few, one per block", 15,
                  kMlaHeadDim, 400);
    b.add_mla(1, 1, 1000, 64).problem.num_splits = 1;
    b.add_mla(1, 2, 777, 32, true).problem.num_splits = 5;
    b.add_mla(1, 1, 4099, 16).problem.num_splits = 300;
    parts.push_back(b.done());
  }
  {
    PartBuilder b("paged", "a paged latent cache: blocks of 64 keys found through a shuffled block table", 15,
                  kMlaHeadDim, 500);
    b.add_mla(2, 1, 777, 64).problem.page_size = 64;
    b.add_mla(1, 2, 4099, 128, true).problem.page_size = 64;
    GradeCase& c = b.add_mla(1, 1, 3000, 32);
    c.problem.page_size = 256;
    c.problem.num_splits = 7;  // pieces of 448 keys: splits that start inside a page
    parts.push_back(b.done());
  }
  {
    PartBuilder b("bf16", "bfloat16 storage (DeepSeek's): plain, causal, paged", 10, kMlaHeadDim, 600);
    b.add_mla(1, 1, 1024, 128, false, bf16);
    b.add_mla(1, 2, 777, 64, true, bf16);
    b.add_mla(2, 1, 2000, 16, false, bf16).problem.page_size = 64;
    parts.push_back(b.done());
  }
  {
    PartBuilder b("large", "one long latent cache (64k keys), sampled rows against the reference", 10, kMlaHeadDim,
                  700);
    b.add_mla(1, 1, 65536, 128).check = CheckMode::sample;
    parts.push_back(b.done());
  }
  return parts;
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += '"';
    o += (c == '\n') ? ' ' : c;
  }
  return o + "\"";
}

}  // namespace

int grade_head_dim(const Rung& r) {
  const std::vector<int> dims = rung_head_dims(r);
  if (std::find(dims.begin(), dims.end(), 64) != dims.end() && head_dim_built(64)) return 64;
  for (int d : dims)
    if (head_dim_built(d)) return d;
  return dims.front();  // nothing built: every case reports "not built"
}

std::vector<const Rung*> grade_variants(const Registry& reg, const Rung& r) {
  std::vector<const Rung*> out;
  for (const Rung& v : reg.all())
    if (v.number == r.number && !v.variant.empty()) out.push_back(&v);
  return out;
}

std::vector<GradePart> grade_parts(const Rung& r, const std::vector<const Rung*>& variants) {
  const int d = grade_head_dim(r);
  if (r.head_dims.size() == 1 && r.head_dims[0] == kMlaHeadDim) return mla_parts();
  return r.decode ? decode_parts(r, variants, d) : prefill_parts(r, variants, d);
}

int GradeReport::points() const {
  int n = 0;
  for (const auto& p : parts) n += p.points;
  return n;
}

int GradeReport::max_points() const {
  int n = 0;
  for (const auto& p : parts) n += p.max_points;
  return n;
}

bool GradeReport::passed_all() const {
  if (!not_implemented.empty()) return false;
  int ran = 0;
  for (const auto& p : parts) {
    if (p.failed > 0) return false;
    ran += p.passed;
  }
  return ran > 0;
}

GradeReport grade_rung(const Rung& r, const std::vector<const Rung*>& variants,
                       const CaseRunner& run, const GradeProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  GradeReport g;
  g.rung = r.label();
  g.not_implemented = r.not_implemented;
  auto runs = [&](const GradeCase& c) -> const Rung& {
    for (const Rung* v : variants)
      if (v->variant == c.variant) return *v;
    return r;
  };
  for (const GradePart& part : grade_parts(r, variants)) {
    PartScore s;
    s.name = part.name;
    s.what = part.what;
    s.cases = static_cast<int>(part.cases.size());
    for (const GradeCase& c : part.cases) {
      CaseOutcome o;
      if (!r.not_implemented.empty()) {
        o.reason = "not implemented: " + r.not_implemented;
      } else {
        try {
          const CaseResult res = run(runs(c), c.problem, c.input, c.check, c.seed);
          if (!res.ran) {
            o.status = CaseOutcome::Status::skipped;
            o.reason = res.skipped;
          } else if (res.check.pass) {
            o.status = CaseOutcome::Status::passed;
          } else {
            o.reason = res.check.reason;
          }
        } catch (const std::exception& e) {
          o.reason = std::string("error: ") + e.what();
        }
      }
      switch (o.status) {
        case CaseOutcome::Status::passed:
          ++s.passed;
          break;
        case CaseOutcome::Status::skipped:
          ++s.skipped;
          if (s.skip_reason.empty()) s.skip_reason = o.reason;
          break;
        case CaseOutcome::Status::failed:
          ++s.failed;
          if (s.first_failure.empty()) s.first_failure = c.describe() + ": " + o.reason;
          break;
      }
      if (progress) progress(part, c, o);
    }
    // Points over the cases that could run here; a part nothing could run in is not scored.
    const int ran = s.passed + s.failed;
    s.max_points = ran > 0 || !r.not_implemented.empty() ? part.points : 0;
    s.points = ran > 0 ? part.points * s.passed / ran : 0;
    g.parts.push_back(s);
  }
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

std::string format_grade_table(const GradeReport& g) {
  std::ostringstream o;
  o << "grade " << g.rung;
  if (!g.device.empty()) o << " on " << g.device;
  o << "\n";
  if (!g.not_implemented.empty()) o << "not implemented: " << g.not_implemented << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-11s %5s %6s %6s %7s %7s  %s\n", "part", "cases", "passed",
                "failed", "skipped", "points", "first failure");
  o << line;
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  for (const PartScore& p : g.parts) {
    std::string note = p.first_failure;
    if (note.empty() && p.passed + p.failed == 0 && !p.skip_reason.empty())
      note = "not run here: " + p.skip_reason;
    if (!g.not_implemented.empty()) note = "not implemented";
    const std::string pts = p.max_points > 0 || !g.not_implemented.empty()
                                ? std::to_string(p.points) + "/" + std::to_string(p.max_points)
                                : "-";
    std::snprintf(line, sizeof line, "%-11s %5d %6d %6d %7d %7s  ", p.name.c_str(), p.cases,
                  p.passed, p.failed, p.skipped, pts.c_str());
    o << line << note << "\n";
    cases += p.cases;
    passed += p.passed;
    failed += p.failed;
    skipped += p.skipped;
  }
  const std::string total = std::to_string(g.points()) + "/" + std::to_string(g.max_points());
  std::string verdict;
  if (!g.not_implemented.empty())
    verdict = "FAIL: not implemented";
  else if (failed > 0)
    verdict = "FAIL: " + std::to_string(failed) + " of " + std::to_string(passed + failed) +
              " cases failed";
  else if (passed == 0)
    verdict = "FAIL: no case could run";
  else
    verdict = "PASS";
  std::snprintf(line, sizeof line, "%-11s %5d %6d %6d %7d %7s  ", "total", cases, passed, failed,
                skipped, total.c_str());
  o << line << verdict << "\n";
  if (skipped > 0)
    o << skipped << " case(s) not run: the rung or this build/GPU does not support them "
      << "(\"-\" = part not scored; the total is out of the parts that ran)\n";
  if (g.seconds > 0 && g.not_implemented.empty()) {
    std::snprintf(line, sizeof line, "graded in %.1f s\n", g.seconds);
    o << line;
  }
  return o.str();
}

std::string format_grade_parts(const Rung& r, const std::vector<const Rung*>& variants) {
  std::ostringstream o;
  o << "parts of " << r.label() << (r.decode ? " (decode shapes)" : "") << ":\n";
  for (const GradePart& p : grade_parts(r, variants)) {
    o << "  " << pad(p.name, 11) << " " << p.points << " points, " << p.cases.size()
      << (p.cases.size() == 1 ? " case: " : " cases: ") << p.what << "\n";
    for (const GradeCase& c : p.cases) o << "      " << c.describe() << "\n";
  }
  return o.str();
}

std::string grade_csv_header() {
  return "student,rung,part,cases,passed,failed,skipped,points,max_points,first_failure\n";
}

std::string format_grade_csv(const GradeReport& g, const std::string& student) {
  std::ostringstream o;
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  for (const PartScore& p : g.parts) {
    std::string note =
        !g.not_implemented.empty() ? "not implemented: " + g.not_implemented : p.first_failure;
    o << csv_field(student) << "," << g.rung << "," << p.name << "," << p.cases << "," << p.passed
      << "," << p.failed << "," << p.skipped << "," << p.points << "," << p.max_points << ","
      << csv_field(note) << "\n";
    cases += p.cases;
    passed += p.passed;
    failed += p.failed;
    skipped += p.skipped;
  }
  o << csv_field(student) << "," << g.rung << ",total," << cases << "," << passed << "," << failed
    << "," << skipped << "," << g.points() << "," << g.max_points() << ","
    << (g.passed_all() ? "PASS" : "FAIL") << "\n";
  return o.str();
}

}  // namespace fl
