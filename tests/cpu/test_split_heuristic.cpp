// Rung 08's split heuristic and the split + combine math, on the CPU.
// The heuristic must split only where it pays (few CTAs, long KV), never cut
// pieces shorter than the minimum, and obey --splits. The simulation runs the
// very functions the kernels call (softmax_math.h) on random data, in the
// kernels' order (chunks dealt round-robin to the warps of a split, warps
// merged, then splits merged by log-sum-exp), and checks that it equals one
// softmax.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "08_flash_decoding/split_heuristic.h"
#include "catch_compat.h"
#include "flashladder/softmax_math.h"

using namespace fl;
using namespace fl::decode;

namespace {

constexpr int kH100Sms = 132;

/// Plan for a decode step (seqlen_q = 1) on an H100.
DecodePlan plan(int batch, int heads_q, int heads_kv, int seqlen_k, int splits = 0,
                int seqlen_q = 1) {
  return make_decode_plan(batch, heads_kv, heads_q / heads_kv, seqlen_q, seqlen_k, splits,
                          kH100Sms);
}

}  // namespace

TEST_CASE("split heuristic: one split where splitting does not pay", "[cpu][split]") {
  // batch 8 x 32 heads = 256 CTAs already fill a wave of 132 SMs.
  CHECK(plan(8, 32, 32, 1024).num_splits == 1);
  CHECK(plan(8, 32, 32, 131072).num_splits == 1);  // long, but the grid is full anyway
  CHECK(plan(64, 32, 8, 16384).num_splits == 1);   // big batches fill the SMs: no split
  // Short KV: no piece shorter than min_split_len (256 keys).
  CHECK(plan(1, 32, 8, 100).num_splits == 1);
  CHECK(plan(1, 32, 8, 511).num_splits == 1);
  CHECK(plan(1, 32, 8, 512).num_splits == 2);
}

TEST_CASE("split heuristic: batch 8 at 1k keys (the README's measured rows)", "[cpu][split]") {
  // MHA: 256 CTAs already fill 132 SMs -> no split, no combine.
  CHECK(plan(8, 32, 32, 1024).num_splits == 1);
  // GQA 32:8: 64 CTAs -> 2 splits of 512 keys, 128 CTAs: one per SM.
  const DecodePlan gqa = plan(8, 32, 8, 1024);
  CHECK(gqa.num_splits == 2);
  CHECK(gqa.split_len == 512);
  // Batch 1: 8 CTAs; pieces of at least 256 keys cap it at 4 splits.
  CHECK(plan(1, 32, 8, 1024).num_splits == 4);
}

TEST_CASE("split heuristic: many splits for batch 1 at long seqlen_k", "[cpu][split]") {
  for (int sk : {65536, 131072, 262144}) {
    const DecodePlan gqa = plan(1, 32, 8, sk);  // 8 CTAs unsplit
    INFO("seqlen_k " << sk << ": " << gqa.num_splits << " splits");
    CHECK(gqa.num_splits == 16);
    // The chosen grid is nearly a full wave: one CTA on each of 132 SMs.
    const long long slots = kWaveCtasPerSm * kH100Sms;
    CHECK(wave_efficiency(gqa.work_items * gqa.num_splits, slots) >= 0.9);
    const DecodePlan mha = plan(1, 32, 32, sk);  // 32 CTAs unsplit
    CHECK(mha.num_splits == 4);
    CHECK(wave_efficiency(mha.work_items * mha.num_splits, slots) >= 0.9);
  }
  // Smaller batches split more than larger ones: fewer CTAs to fill the SMs with.
  CHECK(plan(1, 32, 8, 32768).num_splits > plan(4, 32, 8, 32768).num_splits);
  CHECK(plan(4, 32, 8, 32768).num_splits > plan(16, 32, 8, 32768).num_splits);
}

TEST_CASE("split heuristic: bounds and cut", "[cpu][split]") {
  const SplitPolicy pol;
  for (int sms : {1, 16, 108, 132})
    for (long long work : {1LL, 3LL, 8LL, 40LL, 200LL, 1000LL})
      for (int sk : {1, 2, 255, 256, 257, 1000, 4097, 65537, 1 << 20}) {
        const int s = num_splits_heuristic(sms, work, sk, pol);
        INFO("sms " << sms << " work " << work << " seqlen_k " << sk << " -> " << s);
        REQUIRE(s >= 1);
        REQUIRE(s <= std::max(1, sk / pol.min_split_len));
        REQUIRE(s <= pol.max_splits);
        // The cut covers [0, sk) with non-empty pieces.
        int n = 0, len = 0;
        cut_keys(sk, s, &n, &len);
        REQUIRE(n >= 1);
        REQUIRE(n <= s);
        REQUIRE(static_cast<long long>(n - 1) * len < sk);
        REQUIRE(static_cast<long long>(n) * len >= sk);
      }
}

TEST_CASE("split heuristic: --splits overrides", "[cpu][split]") {
  const DecodePlan p7 = plan(8, 32, 32, 1000, 7);  // the heuristic alone would pick 1
  CHECK_FALSE(p7.from_heuristic);
  CHECK(p7.num_splits == 7);
  CHECK(p7.split_len == 143);
  CHECK(plan(1, 32, 8, 65537, 1).num_splits == 1);
  CHECK(plan(1, 32, 8, 4097, 3).num_splits == 3);
  // More splits than keys, or than pieces of ceil(seqlen_k / splits): never an empty split.
  CHECK(plan(1, 8, 8, 3, 7).num_splits == 3);
  CHECK(plan(1, 8, 8, 1, 7).num_splits == 1);
  const DecodePlan p9 = plan(1, 8, 8, 9, 4);  // 4 pieces of 3 would leave the 4th empty
  CHECK(p9.num_splits == 3);
  CHECK(p9.split_len == 3);
}

TEST_CASE("split heuristic: rows per CTA and workspace", "[cpu][split]") {
  // A CTA carries one 16-row MMA tile of (query head, query position) rows.
  const DecodePlan gqa = plan(1, 32, 8, 4096);  // 4 rows: one tile, 12 rows of padding
  CHECK(gqa.rows_total == 4);
  CHECK(gqa.rows_per_cta == kMaxRowsPerCta);
  CHECK(gqa.row_tiles == 1);
  CHECK(plan(1, 16, 2, 4096, 0, 2).row_tiles == 1);    // 8 heads x 2 queries = 16 rows
  CHECK(plan(1, 16, 2, 4096, 0, 3).row_tiles == 2);    // 24 rows
  const DecodePlan mqa = plan(2, 32, 1, 4096, 0, 16);  // 32 heads x 16 queries = 512 rows
  CHECK(mqa.rows_total == 512);
  CHECK(mqa.rows_per_cta == 16);
  CHECK(mqa.row_tiles == 32);
  CHECK(mqa.work_items == 2 * 1 * 32);
  const DecodePlan one = plan(8, 32, 32, 1024);
  CHECK(workspace_bytes(one, 8, 32, 1, 128) == 0);  // one split writes O directly
  const DecodePlan p3 = plan(2, 8, 2, 1000, 3);
  CHECK(workspace_bytes(p3, 2, 8, 1, 128) == 2u * 8 * 1 * 3 * (128 + 1) * sizeof(float));
}

namespace {

/// One attention row done the way the kernels do it: the keys of each split in
/// chunks of @p chunk, dealt round-robin to @p warps running online softmaxes
/// (softmax_rescale, exp_diff); the warps merged (softmax_merge) into a
/// normalized partial O and LSE per split; then the log-sum-exp merge of the
/// splits (lse_reduce, lse_weight). Scores of masked keys are -inf.
void split_and_combine(const std::vector<float>& s, const std::vector<float>& v, int d, int splits,
                       int chunk, int warps, std::vector<float>* o, float* lse) {
  const int n = static_cast<int>(s.size());
  int num = 0, len = 0;
  cut_keys(n, splits, &num, &len);
  std::vector<float> part_o(static_cast<size_t>(num) * d), part_lse(num);
  for (int sp = 0; sp < num; ++sp) {
    std::vector<SoftmaxState> st(warps, softmax_init());
    std::vector<std::vector<float>> acc(warps, std::vector<float>(d, 0.f));
    const int begin = sp * len, end = std::min(n, begin + len);
    for (int c0 = begin, k = 0; c0 < end; c0 += chunk, ++k) {
      const int w = k % warps;  // chunk k of the split goes to warp k % warps
      const int c1 = std::min(end, c0 + chunk);
      float m_block = -INFINITY;
      for (int j = c0; j < c1; ++j) m_block = std::max(m_block, s[j]);
      const float alpha = softmax_rescale(&st[w], m_block);
      for (float& a : acc[w]) a *= alpha;
      for (int j = c0; j < c1; ++j) {
        const float p = exp_diff(s[j], st[w].m);
        st[w].l += p;
        for (int c = 0; c < d; ++c) acc[w][c] += p * v[static_cast<size_t>(j) * d + c];
      }
    }
    // The CTA's merge of its warps (kernel.cuh, after the loop).
    SoftmaxState merged = softmax_init();
    std::vector<float> o_split(d, 0.f);
    for (int w = 0; w < warps; ++w) {
      float alpha_old = 0, alpha_w = 0;
      merged = softmax_merge(merged, st[w].m, st[w].l, &alpha_old, &alpha_w);
      for (int c = 0; c < d; ++c) o_split[c] = o_split[c] * alpha_old + acc[w][c] * alpha_w;
    }
    const float inv_l = softmax_inv_l(merged);
    for (int c = 0; c < d; ++c) part_o[static_cast<size_t>(sp) * d + c] = o_split[c] * inv_l;
    part_lse[sp] = softmax_lse(merged);
  }
  *lse = lse_reduce(part_lse.data(), num);
  o->assign(d, 0.f);
  for (int sp = 0; sp < num; ++sp) {
    const float w = lse_weight(part_lse[sp], *lse);
    for (int c = 0; c < d; ++c) (*o)[c] += w * part_o[static_cast<size_t>(sp) * d + c];
  }
}

/// The same row as one softmax in double.
void direct_softmax(const std::vector<float>& s, const std::vector<float>& v, int d,
                    std::vector<double>* o, double* lse) {
  double m = -INFINITY;
  for (float x : s) m = std::max(m, static_cast<double>(x));
  o->assign(d, 0.0);
  if (m == -INFINITY) {
    *lse = -INFINITY;
    return;
  }
  double l = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    const double p = std::exp(static_cast<double>(s[j]) - m);
    l += p;
    for (int c = 0; c < d; ++c) (*o)[c] += p * v[j * d + c];
  }
  for (double& x : *o) x /= l;
  *lse = m + std::log(l);
}

}  // namespace

TEST_CASE("split + combine equals one softmax (CPU simulation)", "[cpu][split]") {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int d = 16;
  for (int n : {1, 2, 33, 257, 1000, 4097})
    for (int splits : {1, 2, 3, 7, 64})
      for (int masked_tail : {0, 1, 2}) {  // 0: none; 1: last 40% masked; 2: every key masked
        std::vector<float> s(n), v(static_cast<size_t>(n) * d);
        for (float& x : s) x = 2.f * normal(rng) + 0.5f;  // scores with a spread, off centre
        for (float& x : v) x = normal(rng) + 0.5f;
        if (masked_tail == 1)
          for (int j = n - n * 2 / 5; j < n; ++j)
            s[j] = -INFINITY;  // causal-like: whole splits empty
        if (masked_tail == 2) std::fill(s.begin(), s.end(), -INFINITY);
        std::vector<double> o_ref;
        double lse_ref = 0;
        direct_softmax(s, v, d, &o_ref, &lse_ref);
        for (int warps : {1, 4}) {
          std::vector<float> o;
          float lse = 0;
          split_and_combine(s, v, d, splits, 16, warps, &o, &lse);
          INFO("n " << n << " splits " << splits << " masked " << masked_tail << " warps "
                    << warps);
          if (lse_ref == -INFINITY) {
            REQUIRE(lse == -INFINITY);
            for (float x : o) REQUIRE(x == 0.f);  // a row that sees no key: O = 0
            continue;
          }
          REQUIRE(std::isfinite(lse));
          REQUIRE(std::abs(lse - lse_ref) <= 1e-4 * std::max(1.0, std::abs(lse_ref)));
          for (int c = 0; c < d; ++c) REQUIRE(std::abs(o[c] - o_ref[c]) <= 1e-4);
        }
      }
}

TEST_CASE("lse_combine of two halves agrees with lse_reduce / lse_weight", "[cpu][split]") {
  const float a = 1.25f, b = -0.5f;
  float wa = 0, wb = 0;
  const float l2 = lse_combine(a, b, &wa, &wb);
  const float parts[] = {a, b};
  const float ln = lse_reduce(parts, 2);
  CHECK(std::abs(l2 - ln) <= 1e-6f);
  CHECK(std::abs(wa - lse_weight(a, ln)) <= 1e-6f);
  CHECK(std::abs(wb - lse_weight(b, ln)) <= 1e-6f);
  const float empty[] = {-INFINITY, -INFINITY, -INFINITY};
  CHECK(lse_reduce(empty, 3) == -INFINITY);
  CHECK(lse_weight(-INFINITY, -INFINITY) == 0.f);
}
