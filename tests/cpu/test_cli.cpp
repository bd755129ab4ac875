// CLI parsing and validation: every bad value exits 2 with a message naming its flag.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "run_command.h"
#include "flashladder/cli.h"

using namespace fl;

namespace {

ParseResult parse(std::vector<const char*> args, Options* o) {
  args.insert(args.begin(), "prog");
  return parse_cli(static_cast<int>(args.size()), args.data(), o);
}

/// Runs a command; returns its exit code and fills @p out with stdout+stderr.
int run(const std::string& cmd, std::string* out) {
  const int rc = fl_test::run_command(cmd, out);
  REQUIRE(rc != -1);
  return rc;
}

}  // namespace

TEST_CASE("flags parse into the problem", "[cpu][cli]") {
  Options o;
  REQUIRE(parse({"--batch", "3", "--seqlen-q", "77", "--seqlen-k=129", "--heads", "8", "--kv-heads", "2",
                 "--dim", "128", "--dtype", "bf16", "--causal", "1", "--iters", "7", "--seed", "9",
                 "--check", "sample", "--input", "ramp", "--json", "x.json", "--no-compare"},
                &o)
              .ok);
  const Problem& p = o.problem;
  REQUIRE((p.batch == 3 && p.seqlen_q == 77 && p.seqlen_k == 129 && p.heads_q == 8 && p.heads_kv == 2));
  REQUIRE((p.head_dim == 128 && p.dtype == DType::bf16 && p.causal));
  REQUIRE((o.iters == 7 && o.seed == 9 && o.check == CheckMode::sample && o.input == InputKind::ramp));
  REQUIRE((o.json_path == "x.json" && !o.compare_baselines));
  REQUIRE(validate(p).empty());
}

TEST_CASE("mask and modifier flags parse into the problem", "[cpu][cli]") {
  Options o;
  REQUIRE(parse({"--seqlen", "64", "--window", "16,-1", "--prefix", "8", "--docs", "10,54", "--softcap", "30",
                 "--alibi"},
                &o)
              .ok);
  const Problem& p = o.problem;
  CHECK(p.window_left == 16);
  CHECK(p.window_right == -1);
  CHECK(p.prefix == 8);
  CHECK(p.doc_starts == std::vector<int>{0, 10, 64});
  CHECK(p.softcap == 30.f);
  CHECK(p.alibi);
  CHECK(p.has_mods());
  CHECK(o.shape_set);
  REQUIRE(validate(p).empty());
}

TEST_CASE("--sinks gives every query head the documented logit, -2 + (h mod 8)", "[cpu][cli]") {
  for (const auto& args :
       {std::vector<const char*>{"--sinks", "--heads", "12", "--kv-heads", "4"},
        std::vector<const char*>{"--heads", "12", "--kv-heads", "4", "--sinks=1"}}) {
    Options o;
    REQUIRE(parse(args, &o).ok);  // before or after --heads: set once the heads are known
    const Problem& p = o.problem;
    REQUIRE(p.sinks.size() == 12);
    for (int h = 0; h < 12; ++h) CHECK(p.sinks[h] == -2.0f + static_cast<float>(h % 8));
    CHECK(p.has_mods());
    CHECK(p.describe().find(" sinks") != std::string::npos);
    REQUIRE(validate(p).empty());
  }
  Options off;
  REQUIRE(parse({"--sinks", "0"}, &off).ok);
  CHECK(off.problem.sinks.empty());
  CHECK(!off.problem.has_mods());
}

TEST_CASE("a boolean flag alone means 1; 0/1/true/false and = still work", "[cpu][cli]") {
  struct Case {
    std::vector<const char*> args;
    bool causal;
  };
  const std::vector<Case> cases = {
      {{"--causal"}, true},
      {{"--causal", "--dim", "128"}, true},
      {{"--dim", "128", "--causal"}, true},
      {{"--causal", "0"}, false},
      {{"--causal", "1"}, true},
      {{"--causal", "false"}, false},
      {{"--causal=0"}, false},
      {{"--causal=true"}, true},
  };
  for (const auto& c : cases) {
    Options o;
    const ParseResult r = parse(c.args, &o);
    INFO(c.args.size() << " args, first " << c.args[0] << ": " << r.error);
    REQUIRE(r.ok);
    REQUIRE(o.problem.causal == c.causal);
  }
  Options o;
  REQUIRE(parse({"--causal", "--dim", "128"}, &o).ok);
  REQUIRE(o.problem.head_dim == 128);  // the next flag is not eaten as a value
}

TEST_CASE("--heads alone means MHA; --seqlen sets both lengths", "[cpu][cli]") {
  Options o;
  REQUIRE(parse({"--heads", "12", "--seqlen", "300"}, &o).ok);
  REQUIRE(o.problem.heads_kv == 12);
  REQUIRE((o.problem.seqlen_q == 300 && o.problem.seqlen_k == 300));
}

TEST_CASE("syntax errors name the flag", "[cpu][cli]") {
  const std::vector<std::pair<std::vector<const char*>, std::string>> bad = {
      {{"--dtype", "fp8"}, "--dtype"},   {{"--dim", "abc"}, "--dim"},       {{"--causal", "2"}, "--causal"},
      {{"--check", "most"}, "--check"},  {{"--iters", "0"}, "--iters"},     {{"--batch"}, "--batch"},
      {{"--bogus", "1"}, "--bogus"},     {{"--scale", "-1"}, "--scale"},    {{"--input", "zeros"}, "--input"},
      {{"--seed", "-5"}, "--seed"},      {{"--window", "3"}, "--window"},   {{"--window", "a,b"}, "--window"},
      {{"--softcap", "-1"}, "--softcap"}, {{"--docs", "1,x"}, "--docs"},    {{"--alibi", "2"}, "--alibi"},
      {{"--sinks", "2"}, "--sinks"},
  };
  for (const auto& [args, flag] : bad) {
    Options o;
    const ParseResult r = parse(args, &o);
    INFO(flag << ": " << r.error);
    REQUIRE_FALSE(r.ok);
    REQUIRE(r.error.find(flag) != std::string::npos);
  }
}

TEST_CASE("validation errors name the flag", "[cpu][cli]") {
  const std::vector<std::pair<std::vector<const char*>, std::string>> bad = {
      {{"--dim", "0"}, "--dim"},          {{"--dim", "300"}, "--dim"},     {{"--dim", "60"}, "--dim"},
      {{"--seqlen-q", "-3"}, "--seqlen-q"}, {{"--seqlen-k", "0"}, "--seqlen-k"}, {{"--batch", "0"}, "--batch"},
      {{"--heads", "6", "--kv-heads", "4"}, "--kv-heads"}, {{"--page-size", "48"}, "--page-size"},
      {{"--splits", "-1"}, "--splits"},   {{"--window", "-2,0"}, "--window"}, {{"--prefix", "-1"}, "--prefix"},
  };
  for (const auto& [args, flag] : bad) {
    Options o;
    REQUIRE(parse(args, &o).ok);
    const std::string why = validate(o.problem);
    INFO(flag << ": " << why);
    REQUIRE(why.find(flag) != std::string::npos);
  }
}

TEST_CASE("executables exit 2 on bad input, before touching the GPU", "[cpu][cli]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--dim 0", "--dim"}, {"--seqlen-q -3", "--seqlen-q"}, {"--dtype fp8", "--dtype"},
      {"--variant nope", "--variant"}, {"--kv-heads 3", "--kv-heads"},
      {"--deterministic", "--deterministic"},  // rung 01 has no backward pass
      // Features rung 01 does not take: refused in one line on any machine, GPU or not.
      {"--window 128,0", "--window"}, {"--softcap 30", "--softcap"}, {"--seqlens-q 3,4", "--seqlens-q"},
      {"--sinks", "--sinks"}, {"--page-size 16", "--page-size"}};
  for (const auto& [args, flag] : cases) {
    std::string out;
    const int rc = run(std::string(FL_STEP01_BINARY) + " " + args, &out);
    INFO(args << " -> " << out);
    REQUIRE(rc == 2);
    REQUIRE(out.find(flag) != std::string::npos);
    REQUIRE(out.find('\n') == out.size() - 1);  // one line
  }
  std::string out;
  REQUIRE(run(std::string(FL_STEP01_BINARY) + " --help", &out) == 0);
  REQUIRE(out.find("--seqlen-q") != std::string::npos);
}

TEST_CASE("executables exit 0 or 77 (skipped) on the default problem", "[cpu][cli]") {
  std::string out;
  const int rc = run(std::string(FL_STEP01_BINARY) + " --device-info", &out);
  INFO(out);
  REQUIRE((rc == 0 || rc == 77));
  if (rc == 77) REQUIRE(out.find("no usable CUDA device") != std::string::npos);
}
