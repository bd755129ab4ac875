/// @file grading.h
/// @brief The graded cases of a rung, in named parts from small to large, and the
/// score table. One definition, used by the `grade` executable (bin/grade) and by
/// ctest (tests/gpu/test_grading.cpp: gpu_grade_rungNN).
///
/// A part is one thing a student's kernel must get right (tails, causal masking,
/// GQA, bf16, ...); its cases go from the smallest problem that shows a bug to
/// larger ones, so the first failing case is the easiest one to debug. Host code
/// only: the cases run through a CaseRunner (fl::run_case on a GPU; a stand-in in
/// the CPU tests).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "flashladder/cli.h"
#include "flashladder/problem.h"
#include "flashladder/registry.h"
#include "flashladder/runner.h"

namespace fl {

/// One graded case: a problem, its input pattern and how much of it is checked.
struct GradeCase {
  Problem problem;
  InputKind input = InputKind::random;
  CheckMode check = CheckMode::full;
  unsigned long long seed = 1;
  std::string variant;  ///< "" = the rung itself, else the variant (Rung::variant) that runs it

  /// "B=1 Sq=77 Sk=130 H=4/4 d=64 fp16 causal=0", plus " input=ramp",
  /// " check=sample" and " variant=NAME" when they are not the default.
  std::string describe() const;
};

/// A named part of a rung's grade.
struct GradePart {
  std::string name;              ///< "plain", "tails", "causal", ...
  std::string what;              ///< one line: what it tests
  int points = 0;                ///< its weight in the total
  std::vector<GradeCase> cases;  ///< ordered by grade_work(), small to large
};

/// The work of a case, B * Hq * Sq * Sk * d: the order of the cases in a part.
double grade_work(const Problem& p);

/// The head_dim most cases use: 64 when the rung takes it and the build has it,
/// else the first head_dim the rung takes that the build has.
int grade_head_dim(const Rung& r);

/// The variants (ablations, sweep points) of @p r in @p reg: they run the rung's
/// code too (rung 07's split-d kernel is only reached through one).
std::vector<const Rung*> grade_variants(const Registry& reg, const Rung& r);

/// The graded parts of @p r, in order. Prefill rungs: plain, tails, causal, gqa,
/// bf16, head_dims, diagnostic, variants, large. Decode rungs (Rung::decode;
/// seqlen_q <= 16 everywhere): plain, tails, causal, gqa, splits, paged
/// (Rung::paged_kv only), bf16, head_dims, diagnostic, variants, large. A part with
/// no case (head_dims of a rung with one head_dim, variants of a rung without) is
/// left out and its points go to "plain": the total is always 100.
std::vector<GradePart> grade_parts(const Rung& r, const std::vector<const Rung*>& variants = {});

/// Runs one case (fl::run_case has this signature).
using CaseRunner = std::function<CaseResult(const Rung& r, const Problem& p, InputKind input,
                                            CheckMode mode, unsigned long long seed)>;

/// The outcome of one case.
struct CaseOutcome {
  enum class Status { passed, failed, skipped };
  Status status = Status::failed;
  std::string reason;  ///< why it failed or was skipped ("" if passed)
};

/// The score of one part.
struct PartScore {
  std::string name, what;
  int cases = 0, passed = 0, failed = 0, skipped = 0;
  int points = 0;             ///< earned: max_points x passed / cases run (rounded down)
  int max_points = 0;         ///< the part's points, 0 when no case could run here
  std::string first_failure;  ///< "<case>: <reason>" of the first failing case
  std::string skip_reason;    ///< why the first skipped case was skipped

  /// A case ran, and none failed.
  bool passed_all() const { return passed > 0 && failed == 0; }
};

/// The grade of one rung.
struct GradeReport {
  std::string rung;             ///< "05_tensor_cores"
  std::string device;           ///< "NVIDIA H100 80GB HBM3 (sm_90)", "" if unknown
  std::string not_implemented;  ///< Rung::not_implemented: nothing ran, score 0
  std::vector<PartScore> parts;
  double seconds = 0;  ///< wall time of the grading

  int points() const;
  int max_points() const;
  /// Implemented, at least one case ran, and none failed.
  bool passed_all() const;
};

/// Called after each case (the grade executable's --verbose lines).
using GradeProgress =
    std::function<void(const GradePart& part, const GradeCase& c, const CaseOutcome& outcome)>;

/// Grades @p r: every case of grade_parts(r) through @p run, in order. A case the
/// rung or the GPU cannot run (CaseResult::ran false) is skipped, not failed; an
/// exception (a CUDA error) fails the case with its message. A not-implemented rung
/// runs nothing and scores 0 in every part.
GradeReport grade_rung(const Rung& r, const std::vector<const Rung*>& variants,
                       const CaseRunner& run, const GradeProgress& progress = {});

/// The score table: part, cases, passed, failed, skipped, points, first failure.
std::string format_grade_table(const GradeReport& g);

/// The parts and cases of @p r, without running them (`grade --list`).
std::string format_grade_parts(const Rung& r, const std::vector<const Rung*>& variants = {});

/// The CSV header, starting "student,rung,part,...".
std::string grade_csv_header();

/// One CSV row per part and a "total" row; @p student fills the first column.
std::string format_grade_csv(const GradeReport& g, const std::string& student);

}  // namespace fl
