#include "flashladder/reference.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

namespace fl {

std::vector<RowId> all_rows(const Problem& p) {
  std::vector<RowId> rows;
  rows.reserve(static_cast<size_t>(p.total_q()) * p.heads_q);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.len_q(b); ++i) rows.push_back({b, h, i});
  return rows;
}

std::vector<RowId> sample_rows(const Problem& p, unsigned long long seed) {
  std::set<std::tuple<int, int, int>> picked;
  auto add = [&](int b, int h, int i) {
    if (b >= 0 && b < p.batch && h >= 0 && h < p.heads_q && i >= 0 && i < p.len_q(b))
      picked.insert({b, h, i});
  };
  const int B = p.batch, H = p.heads_q, S = p.seqlen_q;
  // A packed batch: the first, last and tail rows of every sequence too (each masks its own).
  if (p.varlen())
    for (int b = 0; b < B; ++b)
      for (int i : {0, 1, p.len_q(b) - 2, p.len_q(b) - 1, p.len_q(b) / 64 * 64, p.len_q(b) / 128 * 128})
        add(b, (b * 7) % H, i);
  // First and last rows of the first and last (batch, head).
  for (int i : {0, 1, S - 2, S - 1}) {
    add(0, 0, i);
    add(B - 1, H - 1, i);
  }
  // Tail rows: the rows past the last full tile of 64 and of 128 queries.
  for (int tile : {64, 128}) {
    const int start = (S / tile) * tile;
    for (int i = start; i < S && i < start + 8; ++i) add(B - 1, H - 1, i);
    for (int i = std::max(0, start - 2); i < start; ++i) add(0, H / 2, i);
  }
  // One whole head (strided when long, so the check stays within seconds).
  const int wb = B / 2, wh = (H > 1) ? H - 2 : 0;
  const int stride = std::max(1, S / 2048);
  for (int i = 0; i < S; i += stride) add(wb, wh, i);
  add(wb, wh, S - 1);
  // Random rows anywhere, including every head of one batch (GQA groups).
  std::mt19937_64 rng(seed ^ 0x5eedull);
  for (int n = 0; n < 512; ++n) {
    const int b = static_cast<int>(rng() % B);
    add(b, static_cast<int>(rng() % H), static_cast<int>(rng() % std::max(1, p.len_q(b))));
  }
  for (int h = 0; h < H; ++h) add(B - 1, h, static_cast<int>(rng() % std::max(1, p.len_q(B - 1))));
  std::vector<RowId> rows;
  for (auto& t : picked) rows.push_back({std::get<0>(t), std::get<1>(t), std::get<2>(t)});
  return rows;
}

std::vector<RowId> rows_for_check(const Problem& p, CheckMode mode, unsigned long long seed) {
  if (mode == CheckMode::none) return {};
  if (mode == CheckMode::full) return all_rows(p);
  if (mode == CheckMode::sample) return sample_rows(p, seed);
  // auto: full while the fp64 work (B*H*Sq*Sk*d MACs) is small.
  double qk = 0;  // query-key products the reference computes (all of them: it masks after)
  for (int b = 0; b < p.batch; ++b) qk += static_cast<double>(p.len_q(b)) * p.len_k(b);
  const double macs = qk * p.heads_q * (p.head_dim + p.dv()) / 2;  // d when dv = d
  return macs <= 4.0e9 ? all_rows(p) : sample_rows(p, seed);
}

namespace {

template <class Scalar>
using Mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The keys of sequence b, kv head h, of K (@p is_v false: head_dim columns) or V (dv columns) as
/// a len_k(b) x dim matrix, read through HostInputs' accessors (16-bit bits, or the FP8 path's
/// values).
template <class Scalar>
Mat<Scalar> head_matrix(const Problem& p, const HostInputs& in, bool is_v, int b, int h) {
  const int S = p.len_k(b), D = is_v ? p.dv() : p.head_dim;
  Mat<Scalar> m(S, D);
  for (int s = 0; s < S; ++s) {
    const size_t base = (static_cast<size_t>(p.k_token(b, s)) * p.heads_kv + h) * D;
    for (int c = 0; c < D; ++c)
      m(s, c) = static_cast<Scalar>(is_v ? in.v_at(base + c, p.dtype) : in.k_at(base + c, p.dtype));
  }
  return m;
}

/// Softmax attention for the rows in @p idx (all in one (batch, kv head)),
/// computed in Scalar with Eigen: S = scale Q K^T, masked, softmax, O = P V.
template <class Scalar>
RowResults reference_impl(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows) {
  const int D = p.head_dim, Dv = p.dv();  // Q and K's columns, V and O's
  RowResults res;
  res.out.assign(rows.size() * Dv, 0.0);
  res.lse.assign(rows.size(), -std::numeric_limits<double>::infinity());

  // Group rows by (batch, kv head), then cut each group into chunks of rows.
  std::map<std::pair<int, int>, std::vector<size_t>> groups;
  for (size_t r = 0; r < rows.size(); ++r)
    groups[{rows[r].b, rows[r].h / p.group()}].push_back(r);
  struct Task {
    std::pair<int, int> key;
    size_t begin, end;
  };
  std::vector<Task> tasks;
  constexpr size_t kChunk = 64;
  for (auto& [key, idx] : groups)
    for (size_t s = 0; s < idx.size(); s += kChunk) tasks.push_back({key, s, std::min(idx.size(), s + kChunk)});

  std::vector<std::pair<int, int>> keys;
  for (auto& g : groups) keys.push_back(g.first);
  std::map<std::pair<int, int>, std::pair<Mat<Scalar>, Mat<Scalar>>> kv;
  for (auto& key : keys) kv[key];  // create entries before the parallel fill
#pragma omp parallel for schedule(dynamic)
  for (long long g = 0; g < static_cast<long long>(keys.size()); ++g) {
    auto& e = kv.find(keys[g])->second;  // no insertion: safe in parallel
    e.first = head_matrix<Scalar>(p, in, false, keys[g].first, keys[g].second);
    e.second = head_matrix<Scalar>(p, in, true, keys[g].first, keys[g].second);
  }

  const Scalar scale = static_cast<Scalar>(p.scale());
  const Scalar dropout_scale = static_cast<Scalar>(1.0 / (1.0 - static_cast<double>(p.dropout_p)));
#pragma omp parallel for schedule(dynamic)
  for (long long t = 0; t < static_cast<long long>(tasks.size()); ++t) {
    const Task& task = tasks[t];
    const auto& idx = groups.at(task.key);
    const auto& [K, V] = kv.at(task.key);
    const int n = static_cast<int>(task.end - task.begin);
    Mat<Scalar> Q(n, D);
    for (int r = 0; r < n; ++r) {
      const RowId& row = rows[idx[task.begin + r]];
      const size_t base = (static_cast<size_t>(p.q_token(row.b, row.i)) * p.heads_q + row.h) * D;
      for (int c = 0; c < D; ++c) Q(r, c) = static_cast<Scalar>(in.q_at(base + c, p.dtype));
    }
    Mat<Scalar> S = (Q * K.transpose()) * scale;
    const bool mods = p.has_mods();
    for (int r = 0; r < n; ++r) {
      const size_t out_row = idx[task.begin + r];
      const RowId& row = rows[out_row];
      const KeySpan span = p.key_span(row.b, row.i);  // the keys the row sees (masks.h)
      // The head's sink logit joins the denominator (and the max) with no value; -inf when off.
      const Scalar sink = static_cast<Scalar>(sink_logit(p, row.h));
      if (span.lo > span.hi) {
        S.row(r).setZero();  // O = 0, LSE = the sink (-inf without one)
        res.lse[out_row] = static_cast<double>(sink);
        continue;
      }
      if (mods)  // softcapping, ALiBi (Problem::modified_score)
        for (int j = span.lo; j <= span.hi; ++j)
          S(r, j) = static_cast<Scalar>(p.modified_score(static_cast<double>(S(r, j)), row.b, row.h, row.i, j));
      const Scalar m =
          std::max(sink, S.row(r).segment(span.lo, span.hi - span.lo + 1).maxCoeff());
      Scalar l = std::exp(sink - m);  // 0 without a sink
      for (int j = 0; j < K.rows(); ++j) {
        const Scalar e = j >= span.lo && j <= span.hi ? std::exp(S(r, j) - m) : Scalar(0);
        S(r, j) = e;
        l += e;
      }
      S.row(r) /= l;
      res.lse[out_row] = static_cast<double>(m + std::log(l));
      // Dropout after the softmax (the LSE is the undropped one's): P_ij M_ij / (1 - p).
      if (p.dropout())
        for (int j = span.lo; j <= span.hi; ++j)
          S(r, j) *= p.dropout_kept(row.b, row.h, row.i, j) ? dropout_scale : Scalar(0);
    }
    const Mat<Scalar> O = S * V;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < Dv; ++c)
        res.out[idx[task.begin + r] * Dv + c] = static_cast<double>(O(r, c));
  }
  return res;
}

}  // namespace

double sink_logit(const Problem& p, int h) {
  return p.sinks.empty() ? -std::numeric_limits<double>::infinity() : static_cast<double>(p.sinks[h]);
}

RowResults reference_fp64(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows) {
  return reference_impl<double>(p, in, rows);
}

RowResults reference_fp32(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows) {
  return reference_impl<float>(p, in, rows);
}

RowResults naive_loops(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows) {
  const int D = p.head_dim, Dv = p.dv();  // q . k over D columns; O = P V over Dv
  const double scale = p.scale();
  RowResults res;
  res.out.assign(rows.size() * Dv, 0.0);
  res.lse.assign(rows.size(), -std::numeric_limits<double>::infinity());
  auto q_at = [&](const RowId& r, int c) {
    return in.q_at((static_cast<size_t>(p.q_token(r.b, r.i)) * p.heads_q + r.h) * D + c, p.dtype);
  };
  auto kv_at = [&](bool is_v, int b, int j, int hk, int c) {
    const size_t i = (static_cast<size_t>(p.k_token(b, j)) * p.heads_kv + hk) * (is_v ? Dv : D) + c;
    return is_v ? in.v_at(i, p.dtype) : in.k_at(i, p.dtype);
  };
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    const int hk = r.h / p.group();
    // The keys the row sees, j = span.lo + index into s (masks.h), their scores modified.
    const KeySpan span = p.key_span(r.b, r.i);
    std::vector<double> s;
    for (int j = span.lo; j <= span.hi; ++j) {
      double dot = 0;
      for (int c = 0; c < D; ++c) dot += static_cast<double>(q_at(r, c)) * kv_at(false, r.b, j, hk, c);
      s.push_back(p.modified_score(dot * scale, r.b, r.h, r.i, j));
    }
    // The sink (gpt-oss): a logit in the denominator that attends to no value. A row that sees
    // no key keeps O = 0 and gets LSE = sink.
    const bool sinks = !p.sinks.empty();
    const double sink = sinks ? static_cast<double>(p.sinks[r.h]) : 0.0;
    if (s.empty()) {
      if (sinks) res.lse[n] = sink;
      continue;
    }
    double m = *std::max_element(s.begin(), s.end());
    if (sinks) m = std::max(m, sink);
    double l = sinks ? std::exp(sink - m) : 0.0;
    for (double& x : s) l += (x = std::exp(x - m));
    // Dropout: O_i = sum_j P_ij M_ij / (1 - p) V_j, the mask from dropout.h's function.
    const double keep_scale = 1.0 / (1.0 - static_cast<double>(p.dropout_p));
    for (size_t j = 0; j < s.size(); ++j) {
      const int key = span.lo + static_cast<int>(j);
      const double z = p.dropout() ? (p.dropout_kept(r.b, r.h, r.i, key) ? keep_scale : 0.0) : 1.0;
      for (int c = 0; c < Dv; ++c) res.out[n * Dv + c] += s[j] / l * z * kv_at(true, r.b, key, hk, c);
    }
    res.lse[n] = m + std::log(l);
  }
  return res;
}

}  // namespace fl
