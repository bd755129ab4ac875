// grade: the per-part score of one or more rungs (common/include/flashladder/grading.h).
//
//   grade NN [NN ...] | all   [--csv [--no-header] [--student NAME]] [--verbose] [--list]
//
// Exit codes: 0 every case passed; 1 a case failed or a rung is not implemented (a lab
// starter scores 0 without a GPU); 2 bad arguments; 77 no usable CUDA device.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flashladder/grading.h"
#include "flashladder/runner.h"

namespace {

const char* kUsage =
    "usage: grade NN [NN ...] | all  [--csv] [--no-header] [--student NAME] [--verbose] [--list]\n"
    "\n"
    "Runs the graded parts of rung NN (plain, tails, causal, gqa, bf16, head_dims,\n"
    "diagnostic, variants, large; decode rungs: decode shapes, splits, paged) against the fp64\n"
    "reference and prints a score table: part, cases, passed, failed, skipped, points,\n"
    "and the first failing case with its reason.\n"
    "\n"
    "  all              every rung of this build\n"
    "  --csv            one CSV row per part and a total row (for a class spreadsheet)\n"
    "  --no-header      --csv without the header line (to append to a file)\n"
    "  --student NAME   the first CSV column (default: empty)\n"
    "  --verbose        one line per case as it runs (to stderr)\n"
    "  --list           print the parts and their cases, run nothing (no GPU needed)\n"
    "\n"
    "Exit: 0 all passed, 1 some failed or not implemented, 2 bad arguments, 77 no GPU.\n"
    "docs/labs/instructors.md explains the parts and how to grade a class.\n";

int bad_args(const std::string& why) {
  std::fprintf(stderr, "grade: error: %s\n%s", why.c_str(), kUsage);
  return fl::kExitBadInput;
}

const char* status_word(fl::CaseOutcome::Status s) {
  switch (s) {
    case fl::CaseOutcome::Status::passed:
      return "PASS";
    case fl::CaseOutcome::Status::skipped:
      return "SKIP";
    default:
      return "FAIL";
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool csv = false, header = true, verbose = false, list = false, all = false;
  std::string student;
  std::vector<int> numbers;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return fl::kExitOk;
    } else if (a == "--csv") {
      csv = true;
    } else if (a == "--no-header") {
      header = false;
    } else if (a == "--verbose") {
      verbose = true;
    } else if (a == "--list") {
      list = true;
    } else if (a == "--student") {
      if (i + 1 >= argc) return bad_args("--student needs a name");
      student = argv[++i];
    } else if (a == "all") {
      all = true;
    } else {
      char* end = nullptr;
      const long n = std::strtol(a.c_str(), &end, 10);
      if (a.empty() || *end != '\0' || n < 1 || n > 99)
        return bad_args("'" + a + "' is not a rung number (e.g. 05) or a flag");
      numbers.push_back(static_cast<int>(n));
    }
  }
  const fl::Registry& reg = fl::registry();
  std::vector<const fl::Rung*> rungs;
  if (all) rungs = reg.mains();
  for (int n : numbers) {
    const fl::Rung* r = reg.find(n);
    if (!r) {
      std::string built;
      for (const fl::Rung* m : reg.mains()) built += " " + m->label();
      return bad_args("rung " + std::to_string(n) + " is not in this build (built:" + built +
                      "; configure with -DFL_RUNGS=... to add it)");
    }
    rungs.push_back(r);
  }
  if (rungs.empty()) return bad_args("which rung? give its number, e.g. 'grade 05'");

  if (list) {
    for (const fl::Rung* r : rungs)
      std::printf("%s", fl::format_grade_parts(*r, fl::grade_variants(reg, *r)).c_str());
    return fl::kExitOk;
  }

  std::string device, no_device;
  try {
    const fl::DeviceInfo dev = fl::query_device();
    device = dev.name + " (" + dev.arch() + ")";
  } catch (const fl::NoDevice& e) {
    no_device = e.what();
  }
  fl::CaseRunner run = fl::run_case;
  fl::GradeProgress progress;
  if (verbose)
    progress = [](const fl::GradePart& part, const fl::GradeCase& c, const fl::CaseOutcome& o) {
      std::fprintf(stderr, "%s %-10s %s%s%s\n", status_word(o.status), part.name.c_str(),
                   c.describe().c_str(), o.reason.empty() ? "" : ": ", o.reason.c_str());
    };

  if (csv && header) std::printf("%s", fl::grade_csv_header().c_str());
  bool failed = false, skipped_no_device = false;
  for (const fl::Rung* r : rungs) {
    if (r->not_implemented.empty() && !no_device.empty()) {
      // A starter rung scores 0 anywhere; anything else needs a GPU.
      std::fprintf(stderr, "grade: %s: %s; grading needs a GPU (exit 77 = skipped)\n",
                   r->label().c_str(), no_device.c_str());
      skipped_no_device = true;
      continue;
    }
    fl::GradeReport g = fl::grade_rung(*r, fl::grade_variants(reg, *r), run, progress);
    g.device = device;
    std::printf("%s",
                csv ? fl::format_grade_csv(g, student).c_str() : fl::format_grade_table(g).c_str());
    if (!csv && rungs.size() > 1) std::printf("\n");
    failed = failed || !g.passed_all();
  }
  if (failed) return fl::kExitCheckFailed;
  return skipped_no_device ? fl::kExitNoDevice : fl::kExitOk;
}
