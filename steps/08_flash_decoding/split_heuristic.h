/// @file steps/08_flash_decoding/split_heuristic.h
/// @brief How many pieces rung 08 cuts the KV sequence into, and which keys
/// each piece gets. Plain C++ (no CUDA) so the CPU tests check it directly.
///
/// The problem (the Flash-Decoding write-up, Dao et al., 2023): at decode time
/// a (batch, KV head) pair has only a handful of query rows, so a grid with one
/// CTA per pair can leave most SMs idle (B=1 with 8 KV heads launches 8 CTAs on
/// a 132-SM H100). Splitting the keys into S pieces multiplies the CTAs by S;
/// the price is a combine kernel and S partial outputs in HBM. The rule below,
/// after FlashAttention-2's num_splits_heuristic, counts "waves" of CTAs:
///
///   slots     = SMs x kWaveCtasPerSm (1)          (one wave)
///   ctas(S)   = work_items x S                    (work_items = batch x heads_kv x row tiles)
///   waves(S)  = ctas(S) / slots
///   eff(S)    = waves(S) / ceil(waves(S))         (1.0 = the last wave is full)
///
/// - If the unsplit grid already fills most of a wave, splitting cannot make
///   the GPU busier: use 1 split (no workspace, no combine).
/// - Never cut a piece shorter than min_split_len keys: a short piece spends
///   more time starting up and writing its partial result than streaming K/V.
/// - Otherwise take the smallest S whose efficiency is within a few percent of
///   the best one: more splits than that only add combine work.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace fl::decode {

/// Query rows (group x seqlen_q) one CTA carries: the M = 16 of one
/// mma.sync.m16n8k16 tile. A decode step has 1 to 16 rows per KV head in the
/// usual cases (MHA: 1, GQA 32:8: 4, 8 KV heads with 4 speculative tokens: 16);
/// the rows a tile does not need are zeros and are never stored. With more rows
/// the rows are tiled and each row tile re-reads its split of K/V (from L2
/// mostly, since the tiles of a split run at the same time).
constexpr int kMaxRowsPerCta = 16;

/// CTAs per SM that make one wave for the heuristic: one. Two CTAs of the
/// split kernel fit on an H100/H200 SM (96 KiB of shared memory each), but one
/// already keeps 64 KiB of K/V in flight, about twice what Little's law asks
/// of an SM (README), so a second CTA per SM adds no bandwidth, only splits to
/// combine. The check is the split study (README.md's generated split table,
/// B=1, 32/8 heads): 16 splits (128 CTAs, one per SM) against 32 splits (256
/// CTAs, two per SM). The second resident CTA still serves grids larger than
/// one wave.
constexpr int kWaveCtasPerSm = 1;

/// The knobs of the heuristic, with the values rung 08 uses.
struct SplitPolicy {
  /// Shortest piece worth launching, in keys: 256 keys are 4 chunks of a
  /// CTA's 4 warps at head_dim 128. Shorter pieces spend more on starting up
  /// and on their partial result than on streaming. Whether pieces this short
  /// still pay for the combine kernel is in README.md's generated split table
  /// (at 4k keys, 16 splits are pieces of 256 keys).
  int min_split_len = 256;
  /// Upper bound on splits (bounds the workspace and the combine loop).
  int max_splits = 128;
  /// One wave is sm_count x ctas_per_sm CTAs.
  int ctas_per_sm = kWaveCtasPerSm;
  /// The unsplit grid is "big enough" when it fills this fraction of a wave.
  double full_wave_fraction = 0.8;
  /// Take the smallest split count within this fraction of the best efficiency.
  double efficiency_target = 0.95;
};

/// Fraction of the CTA slots busy when @p ctas CTAs run in waves of @p slots
/// (1.0 when the last wave is full).
inline double wave_efficiency(long long ctas, long long slots) {
  if (ctas <= 0 || slots <= 0) return 0.0;
  const double waves = static_cast<double>(ctas) / static_cast<double>(slots);
  return waves / std::ceil(waves);
}

/// The split count the heuristic picks (>= 1).
/// @param sm_count     multiprocessors of the GPU (132 on an H100 SXM)
/// @param work_items   CTAs of the unsplit grid: batch x heads_kv x row tiles
/// @param seqlen_k     keys per sequence
/// @param pol          the knobs (SplitPolicy: wave, shortest split, bounds)
inline int num_splits_heuristic(int sm_count, long long work_items, int seqlen_k,
                                const SplitPolicy& pol = SplitPolicy{}) {
  const long long slots = static_cast<long long>(std::max(sm_count, 1)) * pol.ctas_per_sm;
  if (work_items >= pol.full_wave_fraction * static_cast<double>(slots)) return 1;
  const int by_length = std::max(1, seqlen_k / std::max(pol.min_split_len, 1));
  const int max_splits = std::max(1, std::min(by_length, pol.max_splits));
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s)
    best = std::max(best, wave_efficiency(work_items * s, slots));
  for (int s = 1; s <= max_splits; ++s)
    if (wave_efficiency(work_items * s, slots) >= pol.efficiency_target * best) return s;
  return 1;  // not reached: the best split count itself qualifies
}

/// Everything the launcher needs to know about how the work is cut up.
struct DecodePlan {
  int rows_total = 0;          ///< query rows per (batch, KV head): group x seqlen_q
  int rows_per_cta = 0;        ///< rows one CTA holds: kMaxRowsPerCta (one MMA tile)
  int row_tiles = 0;           ///< ceil(rows_total / rows_per_cta)
  long long work_items = 0;    ///< CTAs without splitting: batch x heads_kv x row_tiles
  int num_splits = 1;          ///< splits actually launched (none of them empty)
  int split_len = 0;           ///< keys per split (the last one may be shorter)
  bool from_heuristic = true;  ///< false when Problem::num_splits overrode it
};

/// Cuts [0, seqlen_k) into at most @p splits pieces of equal length
/// ceil(seqlen_k / splits); returns the pieces that are not empty. For example
/// seqlen_k = 9 with 4 requested gives 3 pieces of 3 keys, never an empty 4th.
inline void cut_keys(int seqlen_k, int splits, int* num_splits, int* split_len) {
  const int s = std::max(1, std::min(splits, std::max(seqlen_k, 1)));
  const int len = (seqlen_k + s - 1) / s;
  *split_len = std::max(len, 1);
  *num_splits = std::max(1, (seqlen_k + *split_len - 1) / *split_len);
}

/// The plan for one problem. @p requested_splits > 0 overrides the heuristic
/// (--splits N; an upper bound: a split is never empty).
inline DecodePlan make_decode_plan(int batch, int heads_kv, int group, int seqlen_q, int seqlen_k,
                                   int requested_splits, int sm_count,
                                   const SplitPolicy& pol = SplitPolicy{}) {
  DecodePlan d;
  d.rows_total = group * seqlen_q;
  d.rows_per_cta = kMaxRowsPerCta;
  d.row_tiles = (d.rows_total + d.rows_per_cta - 1) / d.rows_per_cta;
  d.work_items = static_cast<long long>(batch) * heads_kv * d.row_tiles;
  d.from_heuristic = requested_splits <= 0;
  const int wanted = d.from_heuristic ? num_splits_heuristic(sm_count, d.work_items, seqlen_k, pol)
                                      : requested_splits;
  cut_keys(seqlen_k, wanted, &d.num_splits, &d.split_len);
  return d;
}

/// Workspace of the split kernel: a normalized partial O (fp32, head_dim
/// values) and a partial LSE (fp32) per (output row, split). Nothing when
/// there is one split: that CTA writes O and LSE directly.
inline size_t partial_o_elems(const DecodePlan& d, int batch, int heads_q, int seqlen_q,
                              int head_dim) {
  if (d.num_splits <= 1) return 0;
  return static_cast<size_t>(batch) * heads_q * seqlen_q * d.num_splits * head_dim;
}
inline size_t partial_lse_elems(const DecodePlan& d, int batch, int heads_q, int seqlen_q) {
  if (d.num_splits <= 1) return 0;
  return static_cast<size_t>(batch) * heads_q * seqlen_q * d.num_splits;
}
inline size_t workspace_bytes(const DecodePlan& d, int batch, int heads_q, int seqlen_q,
                              int head_dim) {
  return (partial_o_elems(d, batch, heads_q, seqlen_q, head_dim) +
          partial_lse_elems(d, batch, heads_q, seqlen_q)) *
         sizeof(float);
}

}  // namespace fl::decode
