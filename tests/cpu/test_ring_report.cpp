// Rung 12's report on the CPU: its JSON (schema flashladder.ring/1) has, key for key and in the
// same order, the objects of the reports committed under bench/results/, which bench/report.py
// and bench/docblocks/ring.py read; a replay and ranks sharing a GPU name their times as the
// readers expect; and the text report says what each kind of ring measured.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "12_ring_attention/ring_report.h"
#include "catch_compat.h"

using namespace fl;
using namespace fl::ring;

namespace {

/// The key paths ("timing.ring_median_ms") of every object in a JSON text, in document order.
/// Enough JSON for the reports: objects, arrays, strings (escapes skipped), numbers, literals.
class KeyPaths {
 public:
  explicit KeyPaths(const std::string& s) : s_(s) { value(""); }
  std::vector<std::string> paths;

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string string() {
    std::string out;
    ++i_;  // the opening quote
    while (s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      out += s_[i_++];
    }
    ++i_;
    return out;
  }
  void value(const std::string& prefix) {
    ws();
    if (s_[i_] == '{') {
      ++i_;
      ws();
      while (s_[i_] != '}') {
        ws();
        const std::string key = string();
        paths.push_back(prefix + key);
        ws();
        ++i_;  // ':'
        value(prefix + key + ".");
        ws();
        if (s_[i_] == ',') ++i_;
        ws();
      }
      ++i_;
    } else if (s_[i_] == '[') {
      ++i_;
      ws();
      while (s_[i_] != ']') {
        value(prefix);
        ws();
        if (s_[i_] == ',') ++i_;
        ws();
      }
      ++i_;
    } else if (s_[i_] == '"') {
      string();
    } else {
      while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' &&
             !std::isspace(static_cast<unsigned char>(s_[i_])))
        ++i_;
    }
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::vector<std::string> key_paths(const std::string& json) {
  return KeyPaths(json).paths;
}

/// The key paths of a committed report, without what the bench adds after the run
/// (bench/pytorch/runinfo.py: git_sha_as_run).
std::vector<std::string> committed_paths(const std::string& rel) {
  std::ifstream f(std::string(FL_SOURCE_DIR) + "/" + rel);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> out;
  for (const std::string& k : key_paths(ss.str()))
    if (k != "git_sha_as_run") out.push_back(k);
  return out;
}

enum class Kind { ring, replay, shared };

/// A report of a P-rank ring as rank 0 fills it, with every part present.
Report sample(Kind kind, int P) {
  Report r;
  r.p.batch = 1;
  r.p.seqlen_q = r.p.seqlen_k = 1001;
  r.p.heads_q = 8;
  r.p.heads_kv = 2;
  r.p.head_dim = 64;
  r.p.dtype = DType::bf16;
  r.p.causal = true;
  r.world = P;
  r.replay = kind == Kind::replay;
  r.shared_gpu = kind == Kind::shared;
  r.forward_label = "10_warp_specialized";
  r.nccl_version = "2.28.9";
  r.date = "2026-11-24T01:41:21Z";
  r.git_sha = "15efc66";
  r.dev.name = "Fake GPU";
  r.dev.cc_major = 9;
  r.dev.sm_count = 132;
  r.opt.seed = 2024;
  r.opt.warmup = 3;
  r.check.pass = r.check.checked = true;
  r.check.mode = "full";
  r.check.rows = 1001;
  r.check.tol = {0.016, 0.03, 0.01};
  r.single_ran = true;
  r.single_check = r.check;
  r.vs_single = {0.00390625, 0.0029};
  r.single_timing.timed = true;
  r.single_timing.median_ms = 10.0;
  r.iters = 3;
  r.ring_ms = {6.0, 5.0, 7.0};
  for (int k = 0; k < P; ++k) {
    const std::vector<double> row(P, 2.5);
    r.compute.push_back(row);
    r.merge.push_back(row);
    if (!r.replay) {
      r.exposed.push_back(row);
      r.transfer.push_back(row);
    }
  }
  r.pairs = pairs_per_rank(r.sharding, r.p.causal, r.p.seqlen_q, P);
  for (int s = 0; s < P; ++s) r.send_bytes.push_back(s + 1 < P ? 1024.0 : 0.0);
  return r;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("ring report: the JSON's keys are those of the committed runs, in order",
          "[cpu][ring_report]") {
  // A two-GPU ring and rings of ranks sharing one GPU, as bench/run_ring.sh wrote them.
  REQUIRE(key_paths(report_json(sample(Kind::ring, 2))) ==
          committed_paths("bench/results/nvidia-h200-x2/ring/ring_p2_n131072_zigzag_causal0.json"));
  REQUIRE(
      key_paths(report_json(sample(Kind::shared, 2))) ==
      committed_paths(
          "bench/results/nvidia-h100-80gb-hbm3/ring-shared/shared_p2_n131072_zigzag_causal1.json"));
  // The replays were run before the report had "shared_gpu" (the readers take it as false).
  std::vector<std::string> replay = key_paths(report_json(sample(Kind::replay, 2)));
  replay.erase(std::find(replay.begin(), replay.end(), "shared_gpu"));
  REQUIRE(
      replay ==
      committed_paths(
          "bench/results/nvidia-h100-80gb-hbm3/ring-1gpu/replay_r2_n131072_zigzag_causal1.json"));
}

TEST_CASE("ring report: the values the readers key on", "[cpu][ring_report]") {
  const std::string ring = report_json(sample(Kind::ring, 2));
  CHECK(has(ring,
            "{\"schema\":\"flashladder.ring/1\",\"rung\":\"12_ring_attention\","
            "\"variant\":\"zigzag\",\"gpus\":2,\"ranks\":2,\"replay\":false,"
            "\"shared_gpu\":false,"));
  CHECK(has(ring, "\"date\":\"2026-11-24T01:41:21Z\",\"git_sha\":\"15efc66\""));
  CHECK(has(ring, "\"problem\":{\"batch\":1,\"seqlen\":1001,"));
  // T1 / (P x median ring) = 10 / (2 x 6).
  CHECK(has(ring,
            "\"ring_median_ms\":6,\"ring_min_ms\":5,\"ring_max_ms\":7,"
            "\"single_median_ms\":10,\"scaling_efficiency\":0.833333333,"));
  CHECK(has(ring, "\"send_bytes_per_step\":[1024,0]"));
  // A replay: every rank on one GPU, its times a bound; no transfer.
  const std::string replay = report_json(sample(Kind::replay, 3));
  CHECK(has(replay, "\"gpus\":1,\"ranks\":3,\"replay\":true,\"shared_gpu\":false,"));
  CHECK(has(replay, "\"slowest_rank_median_ms\":6,"));
  CHECK(has(replay, "\"compute_bound_efficiency\":"));
  CHECK_FALSE(has(replay, "exposed_comm"));
  CHECK_FALSE(has(replay, "scaling_efficiency"));
  // Ranks sharing one GPU: no scaling efficiency.
  const std::string shared = report_json(sample(Kind::shared, 2));
  CHECK(has(shared, "\"gpus\":1,\"ranks\":2,\"replay\":false,\"shared_gpu\":true,"));
  CHECK(has(shared, "\"ring_median_ms\":6,"));
  CHECK_FALSE(has(shared, "scaling_efficiency"));
  CHECK_FALSE(has(shared, "ring_tflops"));
}

TEST_CASE("ring report: the text says what each kind of ring measured", "[cpu][ring_report]") {
  const std::string ring = report_text(sample(Kind::ring, 2));
  CHECK(has(ring, "12_ring_attention[zigzag]: ring attention over 2 GPUs (NCCL 2.28.9)"));
  CHECK(has(ring, "scaling efficiency T1 / (P x TP) = 0.833"));
  CHECK(has(ring, "within the ring's tolerance"));
  const std::string replay = report_text(sample(Kind::replay, 3));
  CHECK(has(replay, "the 3 ranks of a ring replayed on one GPU"));
  CHECK(has(replay, "the scaling efficiency's compute bound"));
  CHECK(has(replay, "     0     2.5000              -     2.5000          -      1.0 KiB\n"));
  const std::string shared = report_text(sample(Kind::shared, 2));
  CHECK(has(shared, "the times below are no 2-GPU ring's"));
  CHECK(has(shared, "no scaling efficiency: one GPU shared"));
  // A failed check, a single-GPU run skipped.
  Report bad = sample(Kind::ring, 2);
  bad.check.pass = false;
  bad.check.reason = "3 outputs never written (NaN)";
  bad.single_ran = false;
  bad.single_skipped = "needs 3.0 GiB of GPU memory, 1.0 GiB free";
  const std::string text = report_text(bad);
  CHECK(has(text, "check:   FAIL (full, 1001 rows)"));
  CHECK(has(text, ": 3 outputs never written (NaN)\n"));
  CHECK(has(text, "single:  skipped: needs 3.0 GiB of GPU memory, 1.0 GiB free\n"));
}

TEST_CASE("ring report: median and the agreement with the single-GPU output",
          "[cpu][ring_report]") {
  CHECK(median({}) == 0);
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  const DType t = DType::fp16;
  const std::vector<uint16_t> one = {to_bits(1.0f, t), to_bits(2.0f, t)};
  const std::vector<uint16_t> other = {to_bits(1.0f, t), to_bits(2.5f, t)};
  const Agreement a = agreement(t, other, one);
  CHECK(a.max_abs == 0.5);
  CHECK(std::abs(a.rel_fro - 0.5 / std::sqrt(5.0)) < 1e-12);
  const std::vector<uint16_t> nan = {0xffff, to_bits(2.0f, t)};
  CHECK(std::isinf(agreement(t, nan, one).max_abs));
}

TEST_CASE("ring report: the backward pass's part (--backward)", "[cpu][ring_report]") {
  Report r = sample(Kind::ring, 2);
  // Without --backward the report has no backward part: the committed runs' keys hold.
  CHECK_FALSE(has(report_json(r), "\"backward\""));
  BackwardReport& b = r.bwd;
  b.ran = true;
  b.label = "14_hopper_backward[o32-delta]";
  b.check.summary = r.check;
  b.check.groups = b.check.groups_total = 4;
  b.ring_ms = {12.0, 11.0, 13.0};
  b.total_ms = {18.0, 16.0, 20.0};
  b.single_label = "14_hopper_backward";
  b.single_timing.timed = true;
  b.single_timing.median_ms = 22.0;
  b.send_bytes = {5120.0, 4096.0};
  for (int k = 0; k < 2; ++k) {
    const std::vector<double> row(2, 6.0);
    b.compute.push_back(row);
    b.merge.push_back(row);
    b.exposed.push_back(row);
    b.transfer.push_back(row);
  }
  const std::string json = report_json(r);
  CHECK(has(json, "\"backward\":{\"rung\":\"14_hopper_backward[o32-delta]\",\"check\":{"));
  // Backward: 22 / (2 x 12); forward + backward: (10 + 22) / (2 x 18).
  CHECK(has(json, "\"ring_bwd_median_ms\":12,\"ring_fwd_bwd_median_ms\":18,\"single_bwd_median_ms\":22,"
                  "\"single_fwd_bwd_median_ms\":32,\"scaling_efficiency_bwd\":0.916666667,"
                  "\"scaling_efficiency_fwd_bwd\":0.888888889,"));
  CHECK(has(json, "\"send_bytes_per_step\":[5120,4096]"));
  const std::string text = report_text(r);
  CHECK(has(text, "backward: 14_hopper_backward[o32-delta] on each step's launches\n"));
  CHECK(has(text, "scaling efficiency 0.917 backward, 0.889 forward + backward"));
  CHECK(has(text, "4 of 4 (batch, KV head) groups: dQ rel_fro"));
  // A replay names the bound, not the ring's time.
  r.replay = true;
  const std::string replay = report_json(r);
  CHECK(has(replay, "\"slowest_rank_fwd_bwd_median_ms\":18,"));
  CHECK(has(replay, "\"compute_bound_efficiency_fwd_bwd\":0.888888889"));
  CHECK_FALSE(has(replay, "scaling_efficiency_fwd_bwd"));
}
