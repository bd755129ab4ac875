// The lab starter generator (docs/labs/make_starter.py) on a tiny fake tree: marked regions become
// TODO stubs that still compile, the rung is marked "not implemented", and bad markers (a region
// whose variables are used after it, a pragma right before it) are refused with the region named.
// Regions tagged [same-code: ...] / [copy-of: ...] are stubbed together, and --check-no-solution
// finds a copy of a lab's solution left in its starter tree (on the fake tree and on the project).
// Needs python3 and a C++ compiler (c++) on PATH, as the build itself does.
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "catch_compat.h"
#include "run_command.h"

namespace fs = std::filesystem;

namespace {

const std::string kGenerator = std::string(FL_SOURCE_DIR) + "/docs/labs/make_starter.py";

/// Runs a command; returns its exit code and fills @p out with stdout+stderr.
int run(const std::string& cmd, std::string* out) {
  const int rc = fl_test::run_command(cmd, out);
  REQUIRE(rc != -1);
  return rc;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

/// A fresh empty folder under the temp directory.
fs::path scratch(const std::string& tag) {
  std::string tmpl = (fs::temp_directory_path() / ("fl-lab-" + tag + "-XXXXXX")).string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

// A stand-in for common/'s registry: just what a launch.cu touches.
const char* kFakeRegistry = R"(#pragma once
#include <string>
#include <utility>
#include <vector>
namespace fl {
struct Rung {
  int number = 0;
  std::string variant;
  std::string not_implemented;
};
class Registry {
 public:
  void add(Rung r) { rungs_.push_back(std::move(r)); }
  const std::vector<Rung>& all() const { return rungs_; }
 private:
  std::vector<Rung> rungs_;
};
}  // namespace fl
)";

// Rung 09: one region after a declaration it writes (acc stays valid when stubbed); the region's
// own `value` is not used after it (s.value is a member of the same name, not a use).
const char* kKernel09 = R"(#pragma once
namespace fake {
struct Sum {
  float value;
};
inline float row_sum(const float* x, int n) {
  float acc = 0.f;
  // LAB-BEGIN(09-sum): acc = the sum of x[0..n)
  float value = 0.f;
  for (int i = 0; i < n; ++i) {
    const float v = x[i];
    value += v;
  }
  acc = value;
  // LAB-END(09-sum)
  const Sum s{acc};
  return s.value;
}
}  // namespace fake
)";

// The usual registration: one `reg.add(std::move(r));`.
const char* kLaunch09 = R"(#include "common/registry.h"
#include "kernel.h"
namespace fl {
void register_rung_09(Registry& reg) {
  Rung r;
  r.number = 9;
  reg.add(std::move(r));
}
}  // namespace fl
)";

// Rung 10 reuses rung 09's kernel and registers through helpers (two reg.add calls). It also
// reads rung 09's mark, as the real rung 10 does; reading is not marking, so it is still marked.
const char* kLaunch10 = R"(#include "common/registry.h"
#include "../09_fake/kernel.h"
namespace fl {
inline bool rung09_written(const Rung& r09) { return r09.not_implemented.empty(); }
namespace {
Rung make(const char* variant) {
  Rung r;
  r.number = 10;
  r.variant = variant;
  return r;
}
}  // namespace
void register_rung_10(Registry& reg) {
  reg.add(make(""));
  reg.add(make("other"));
}
}  // namespace fl
)";

// Links both rungs and prints what the runner would see.
const char* kMain = R"(#include <cstdio>
#include "common/registry.h"
namespace fl {
void register_rung_09(Registry&);
void register_rung_10(Registry&);
}
int main() {
  fl::Registry reg;
  fl::register_rung_09(reg);
  fl::register_rung_10(reg);
  const float x[3] = {1.f, 2.f, 3.f};
  std::printf("sum=%g\n", fake::row_sum(x, 3));
  for (const auto& r : reg.all())
    std::printf("rung %d [%s]: %s\n", r.number, r.variant.c_str(), r.not_implemented.c_str());
}
)";

fs::path fake_tree() {
  const fs::path src = scratch("src");
  write(src / "common/registry.h", kFakeRegistry);
  write(src / "steps/09_fake/kernel.h", kKernel09);
  write(src / "steps/09_fake/launch.cu", kLaunch09);
  write(src / "steps/10_reuse/launch.cu", kLaunch10);
  write(src / "main.cpp", std::string("#include \"steps/09_fake/kernel.h\"\n") + kMain);
  write(src / "build/ignored.txt", "a build folder is not copied\n");
  return src;
}

std::string generate(const fs::path& src, const fs::path& out, int* rc,
                     const std::string& extra = "") {
  std::string log;
  *rc = run("python3 '" + kGenerator + "' '" + src.string() + "' '" + out.string() + "' " + extra,
            &log);
  return log;
}

}  // namespace

TEST_CASE("regions become TODO stubs that compile; rungs say 'not implemented'", "[cpu][labs]") {
  const fs::path src = fake_tree();
  const fs::path out = scratch("out") / "starter";
  int rc = -1;
  const std::string log = generate(src, out, &rc);
  INFO(log);
  REQUIRE(rc == 0);

  const std::string kernel = read(out / "steps/09_fake/kernel.h");
  CHECK(kernel.find("// TODO(lab 09-sum): acc = the sum of x[0..n)") != std::string::npos);
  CHECK(kernel.find("value += v;") == std::string::npos);           // the solution is gone
  CHECK(kernel.find("// LAB-BEGIN(09-sum)") != std::string::npos);  // the markers stay
  CHECK(kernel.find("float acc = 0.f;") != std::string::npos);      // code before it stays
  CHECK(read(src / "steps/09_fake/kernel.h").find("value += v;") !=
        std::string::npos);  // source kept
  CHECK_FALSE(fs::exists(out / "build"));

  const std::string l09 = read(out / "steps/09_fake/launch.cu");
  const size_t mark = l09.find("r.not_implemented =");
  REQUIRE(mark != std::string::npos);
  CHECK(mark < l09.find("reg.add(std::move(r));"));
  CHECK(l09.find("lab 09: implement 09-sum in steps/09_fake/kernel.h") != std::string::npos);
  CHECK(read(out / "steps/10_reuse/launch.cu").find("register_rung_10_solution") !=
        std::string::npos);

  // The starter compiles and links, and every entry of both rungs is marked.
  std::string cc;
  const std::string exe = (out / "fake_runner").string();
  const int build =
      run("cd '" + out.string() + "' && c++ -std=c++17 -Wall -Werror -I. -o '" + exe +
              "' main.cpp -x c++ steps/09_fake/launch.cu -x c++ steps/10_reuse/launch.cu",
          &cc);
  INFO(cc);
  REQUIRE(build == 0);
  std::string ran;
  REQUIRE(run("'" + exe + "'", &ran) == 0);
  INFO(ran);
  CHECK(ran.find("sum=0") != std::string::npos);  // the stub computes nothing
  CHECK(ran.find("rung 9 []: lab 09: implement 09-sum") != std::string::npos);
  CHECK(ran.find("rung 10 []: lab 09: rung 10 reuses steps/09_fake/kernel.h") != std::string::npos);
  CHECK(ran.find("rung 10 [other]: lab 09: rung 10 reuses") != std::string::npos);

  // --lab picks regions: stubbing only rung 10's (none) leaves everything as it was.
  const fs::path out2 = scratch("out2") / "starter";
  generate(src, out2, &rc, "--lab 10");
  CHECK(rc == 2);  // rung 10 has no region: a clear usage error
  fs::remove_all(src);
  fs::remove_all(out.parent_path());
  fs::remove_all(out2.parent_path());
}

TEST_CASE("bad markers are refused with the region named", "[cpu][labs]") {
  struct Case {
    const char* what;
    const char* body;
    const char* expect;
  };
  const Case cases[] = {
      {"declaration used after the region",
       "inline float f(const float* x) {\n  // LAB-BEGIN(09-dot): s = x[0] * 2\n  const float s = "
       "x[0] * 2;\n"
       "  // LAB-END(09-dot)\n  return s + 1;\n}\n",
       "region 09-dot declares 's', which is still used after LAB-END(09-dot)"},
      {"pragma right before LAB-BEGIN",
       "inline void f(float* x) {\n#pragma unroll\n  // LAB-BEGIN(09-loop): double x\n"
       "  for (int i = 0; i < 4; ++i) x[i] *= 2;\n  // LAB-END(09-loop)\n}\n",
       "right before LAB-BEGIN(09-loop)"},
      {"return value inside the region",
       "inline float f(float x) {\n  // LAB-BEGIN(09-ret): return 2x\n  return 2 * x;\n  // "
       "LAB-END(09-ret)\n}\n",
       "region 09-ret contains 'return <value>'"},
      {"region that closes a block it did not open",
       "inline void f(float* x) {\n  if (x) {\n    // LAB-BEGIN(09-half): half\n    x[0] = 1;\n  "
       "}\n"
       "  // LAB-END(09-half)\n}\n",
       "region 09-half does not begin and end in the same block"},
      {"missing LAB-END", "inline void f() {\n  // LAB-BEGIN(09-open): never closed\n}\n",
       "LAB-BEGIN(09-open) has no LAB-END(09-open)"},
      {"id without the rung number", "// LAB-BEGIN(dot): x\n// LAB-END(dot)\n",
       "region id 'dot' must start with the rung number '09-'"},
      {"tag naming no region",
       "inline void f(float* x) {\n  // LAB-BEGIN(09-t): t\n  // [same-code: 08-nope]\n"
       "  x[0] = 1;\n  // LAB-END(09-t)\n}\n",
       "LAB-BEGIN(09-t) names '08-nope' in its tags, which is no region of this tree"},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      const fs::path src = scratch("bad");
      write(src / "steps/09_bad/kernel.h", c.body);
      write(src / "steps/09_bad/launch.cu", kLaunch09);
      const fs::path out = scratch("badout") / "starter";
      int rc = -1;
      const std::string log = generate(src, out, &rc);
      INFO(log);
      CHECK(rc == 1);
      CHECK(log.find(c.expect) != std::string::npos);
      CHECK(log.find("steps/09_bad/kernel.h:") != std::string::npos);  // file and line named
      fs::remove_all(src);
      fs::remove_all(out.parent_path());
    }
  }
}

namespace {

// Three rungs that compute the same clamped dot product. Rung 11 owns the exercise; rung 12
// repeats it under other names (a copy the generator must find); rung 13 teaches it again.
const char* kDot11 = R"(#pragma once
#include <cmath>
inline int clamp_max(int n) { return n; }
inline float dot11(const float* a, const float* b, int n, float scale) {
  float acc = 0.f;
  // LAB-BEGIN(11-dot): acc = scale * sum a[i] b[i], clamped to +-n
  for (int i = 0; i < n; ++i) acc = fmaf(a[i], b[i], acc);
  acc = fminf(acc * scale, clamp_max(n));
  acc = fmaxf(acc, -clamp_max(n));
  // LAB-END(11-dot)
  return acc;
}
)";

// Rung 12's copy, first without markers, then in a region tagged [copy-of: 11-dot].
std::string dot12(bool tagged) {
  return std::string(
             "#pragma once\n#include \"../11_dot/kernel.h\"\n"
             "inline float dot12(const float* x, const float* y, int len, float s) {\n"
             "  float total = 0.f;\n") +
         (tagged ? "  // LAB-BEGIN(12-dot): the clamped dot of lab 11\n  // [copy-of: 11-dot]\n"
                 : "") +
         "  for (int k = 0; k < len; ++k)\n    total = fmaf(x[k], y[k], total);\n"
         "  total = fminf(total * s, clamp_max(len));\n"
         "  total = fmaxf(total, -clamp_max(len));\n" +
         (tagged ? "  // LAB-END(12-dot)\n" : "") + "  return total;\n}\n";
}

// Rung 13 teaches the same code: the tag on the LAB-BEGIN line itself.
const char* kDot13 = R"(#pragma once
#include "../11_dot/kernel.h"
inline float dot13(const float* p, const float* q, int m, float f) {
  float r = 0.f;
  // LAB-BEGIN(13-dot): the clamped dot again [same-code: 11-dot]
  for (int j = 0; j < m; ++j) r = fmaf(p[j], q[j], r);
  r = fminf(r * f, clamp_max(m));
  r = fmaxf(r, -clamp_max(m));
  // LAB-END(13-dot)
  return r;
}
)";

/// kLaunch09 for rung @p n.
std::string launch_of(int n) {
  std::string s = kLaunch09;
  const auto swap = [&](const std::string& from, const std::string& to) {
    s.replace(s.find(from), from.size(), to);
  };
  swap("register_rung_09", "register_rung_" + std::to_string(n));
  swap("r.number = 9;", "r.number = " + std::to_string(n) + ";");
  return s;
}

fs::path dot_tree(bool tagged, bool with13) {
  const fs::path src = scratch("dot");
  write(src / "common/registry.h", kFakeRegistry);
  write(src / "steps/11_dot/kernel.h", kDot11);
  write(src / "steps/11_dot/launch.cu", launch_of(11));
  write(src / "steps/12_copy/kernel.h", dot12(tagged));
  write(src / "steps/12_copy/launch.cu", launch_of(12));
  if (with13) {
    write(src / "steps/13_again/kernel.h", kDot13);
    write(src / "steps/13_again/launch.cu", launch_of(13));
  }
  return src;
}

/// The not-implemented message in a generated launch.cu, its string literals joined.
std::string message_in(const fs::path& launch) {
  std::string s = read(launch);
  for (size_t at; (at = s.find("\"\n")) != std::string::npos;) {
    const size_t next = s.find('"', at + 1);
    s.erase(at, next - at + 1);
  }
  return s;
}

std::string check_no_solution(const fs::path& src, int* rc) {
  std::string log;
  *rc = run("python3 '" + kGenerator + "' '" + src.string() + "' --check-no-solution", &log);
  return log;
}

}  // namespace

TEST_CASE("--check-no-solution finds a lab's code left outside its regions", "[cpu][labs]") {
  // Untagged: lab 11's starter still holds the copy in rung 12, under other names.
  const fs::path bad = dot_tree(false, false);
  int rc = -1;
  std::string log = check_no_solution(bad, &rc);
  INFO(log);
  CHECK(rc == 1);
  CHECK(log.find("lab 11: FAIL: 1 copy of its solution left in its starter tree") !=
        std::string::npos);
  CHECK(
      log.find("11-dot (steps/11_dot/kernel.h:7-9): 3 statements in a row at "
               "steps/12_copy/kernel.h:6-8; put that code in a region tagged [copy-of: 11-dot]") !=
      std::string::npos);
  fs::remove_all(bad);

  // Tagged [copy-of: 11-dot]: lab 11's starter stubs the copy too; lab 12 keeps rung 11 whole
  // (a copy is expected to look like its original).
  const fs::path good = dot_tree(true, false);
  log = check_no_solution(good, &rc);
  INFO(log);
  CHECK(rc == 0);
  CHECK(log.find("lab 11: ok") != std::string::npos);
  CHECK(log.find("lab 12: ok") != std::string::npos);
  const fs::path out = scratch("dotout") / "starter";
  const std::string gen = generate(good, out, &rc, "--lab 11");
  INFO(gen);
  REQUIRE(rc == 0);
  CHECK(read(out / "steps/12_copy/kernel.h").find("fmaf") == std::string::npos);
  CHECK(read(out / "steps/12_copy/kernel.h").find("// [copy-of: 11-dot]") != std::string::npos);
  CHECK(message_in(out / "steps/12_copy/launch.cu")
            .find("lab 11: 12-dot in steps/12_copy/kernel.h holds lab 11's code (11-dot), so it "
                  "was removed too; it is part of lab 12") != std::string::npos);
  const fs::path out12 = scratch("dotout12") / "starter";
  generate(good, out12, &rc, "--lab 12");
  REQUIRE(rc == 0);
  CHECK(read(out12 / "steps/11_dot/kernel.h").find("fmaf") != std::string::npos);  // one way
  fs::remove_all(good);
  fs::remove_all(out.parent_path());
  fs::remove_all(out12.parent_path());
}

TEST_CASE("[same-code] works both ways and brings the copies along", "[cpu][labs]") {
  const fs::path src = dot_tree(true, true);
  int rc = -1;
  const fs::path out = scratch("sameout") / "starter";
  const std::string log = generate(src, out, &rc, "--lab 13");
  INFO(log);
  REQUIRE(rc == 0);
  // 13-dot teaches 11-dot's code: both go, and 12-dot, the copy of 11-dot, with them.
  for (const char* k :
       {"steps/11_dot/kernel.h", "steps/12_copy/kernel.h", "steps/13_again/kernel.h"})
    CHECK(read(out / k).find("fmaf") == std::string::npos);
  CHECK(message_in(out / "steps/11_dot/launch.cu")
            .find("lab 13: 11-dot in steps/11_dot/kernel.h holds lab 13's code (13-dot)") !=
        std::string::npos);
  CHECK(read(out / "steps/13_again/launch.cu").find("lab 13: implement 13-dot") !=
        std::string::npos);
  std::string check;
  CHECK(run("python3 '" + kGenerator + "' '" + src.string() + "' --check-no-solution", &check) ==
        0);
  INFO(check);
  fs::remove_all(src);
  fs::remove_all(out.parent_path());
}

TEST_CASE("no lab's starter tree holds a copy of its solution", "[cpu][labs]") {
  // For each lab of the project: generate its starter tree and look for runs of its solution
  // anywhere in it (another rung that teaches the same code, a variant kernel, a copy).
  int rc = -1;
  const std::string log = check_no_solution(FL_SOURCE_DIR, &rc);
  INFO(log);
  CHECK(rc == 0);
  for (const char* lab : {"02", "03", "04", "05", "07", "08"})
    CHECK(log.find(std::string("lab ") + lab + ": ok") != std::string::npos);
}

TEST_CASE("the project's own markers make a valid starter tree", "[cpu][labs_tree]") {
  // Every region in steps/ must be removable: this fails, naming the region, as soon as a kernel's
  // markers would leave a starter tree that does not compile.
  const fs::path out = scratch("tree") / "starter";
  int rc = -1;
  const std::string log = generate(FL_SOURCE_DIR, out, &rc);
  INFO(log);
  CHECK(rc == 0);
  fs::remove_all(out.parent_path());
}
