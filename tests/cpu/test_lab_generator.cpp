// The lab starter generator (docs/labs/make_starter.py) on a tiny fake tree: marked regions become
// TODO stubs that still compile, the rung is marked "not implemented", and bad markers (a region
// whose variables are used after it, a pragma right before it) are refused with the region named.
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

// Rung 10 reuses rung 09's kernel and registers through helpers (two reg.add calls).
const char* kLaunch10 = R"(#include "common/registry.h"
#include "../09_fake/kernel.h"
namespace fl {
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
