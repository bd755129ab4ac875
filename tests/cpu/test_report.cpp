// Report text and JSON.
#include "catch_compat.h"
#include "flashladder/report.h"

using namespace fl;

TEST_CASE("bytes are formatted with binary units", "[cpu][report]") {
  REQUIRE(format_bytes(512) == "512 B");
  REQUIRE(format_bytes(256.0 * 1024 * 1024) == "256.0 MiB");
  REQUIRE(format_bytes(16.0 * 1024 * 1024 * 1024) == "16.0 GiB");
}

TEST_CASE("JSON escapes and nests", "[cpu][report]") {
  Json j;
  j.begin_object().kv("a", 1).kv("s", "q\"uote\n").begin_array("xs").kv(nullptr, 1.5).kv(nullptr, true).end_array();
  j.kv("nan", std::nan("")).end_object();
  REQUIRE(j.str() == "{\"a\":1,\"s\":\"q\\\"uote\\n\",\"xs\":[1.5,true],\"nan\":null}");
}

TEST_CASE("a run report has the fields the bench and notebooks read", "[cpu][report]") {
  RunReport r;
  r.rung_number = 1;
  r.rung_name = "naive";
  r.summary = "three kernels";
  r.device.name = "Fake GPU";
  r.device.cc_major = 9;
  r.device.peak_fp32_tflops = 50;
  r.timing.timed = true;
  r.timing.median_ms = 2.0;
  r.timing.iters = 20;
  r.check.checked = true;
  r.check.pass = true;
  r.check.mode = "full";
  r.workspace_bytes = 1 << 20;
  r.notes = {"S in HBM: 1.0 MiB"};
  r.date = "2026-11-23T10:00:00Z";
  r.git_sha = "abc123";
  const std::string text = format_report(r);
  REQUIRE(text.find("rung 01 naive") != std::string::npos);
  REQUIRE(text.find("PASS") != std::string::npos);
  REQUIRE(text.find("S in HBM") != std::string::npos);
  REQUIRE(text.find("2026-11-23T10:00:00Z, commit abc123") != std::string::npos);
  const std::string js = to_json(r);
  for (const char* key : {"\"schema\":\"flashladder.run/1\"", "\"median_ms\":2", "\"tflops\"", "\"device\"",
                          "\"problem\"", "\"check\"", "\"date\":\"2026-11-23T10:00:00Z\"",
                          "\"git_sha\":\"abc123\""})
    REQUIRE(js.find(key) != std::string::npos);
}

TEST_CASE("a run report's problem names its masks and score modifiers, only those set", "[cpu][report]") {
  RunReport r;
  r.problem.head_dim = 64;
  const std::string plain = to_json(r);
  for (const char* key : {"\"softcap\"", "\"window_left\"", "\"prefix\"", "\"documents\"", "\"alibi\"", "\"sinks\""})
    CHECK(plain.find(key) == std::string::npos);
  r.problem.softcap = 50;
  r.problem.window_left = 255;
  r.problem.prefix = 16;
  r.problem.doc_starts = {0, 100, r.problem.seqlen_k};
  r.problem.alibi = true;
  r.problem.sinks.assign(r.problem.heads_q, 0.5f);
  const std::string js = to_json(r);
  for (const char* key : {"\"softcap\":50", "\"window_left\":255", "\"window_right\":-1", "\"prefix\":16",
                          "\"documents\":2", "\"alibi\":true", "\"sinks\":true"})
    CHECK(js.find(key) != std::string::npos);
}
