#include "flashladder/check_bwd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>

namespace fl {

double bwd_check_work(const Problem& p) {
  double qk = 0;  // query-key pairs of every sequence (a packed batch's each of its own lengths)
  for (int b = 0; b < p.batch; ++b) qk += static_cast<double>(p.len_q(b)) * p.len_k(b);
  return qk * p.heads_q * (p.head_dim + p.dv()) / 2;  // d when dv = d: QK^T's and PV's columns
}

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::vector<BwdGroup> every_group(const Problem& p) {
  std::vector<BwdGroup> g;
  g.reserve(static_cast<size_t>(p.batch) * p.heads_kv);
  for (int b = 0; b < p.batch; ++b)
    for (int hk = 0; hk < p.heads_kv; ++hk) g.push_back({b, hk});
  return g;
}

}  // namespace

BwdCheckPlan plan_bwd_check(const Problem& p, CheckMode mode, unsigned long long seed, double budget) {
  BwdCheckPlan plan;
  const double work = bwd_check_work(p);
  const long long total = static_cast<long long>(p.batch) * p.heads_kv;
  // A packed batch's groups differ: the cap and the budget are judged on the longest one.
  double longest = 0;
  for (int b = 0; b < p.batch; ++b) longest = std::max(longest, static_cast<double>(p.len_q(b)) * p.len_k(b));
  const double group_work =
      p.varlen() ? longest * p.group() * (p.head_dim + p.dv()) / 2 : work / static_cast<double>(total);
  if (mode == CheckMode::none) {
    plan.mode = "none";
    plan.note = "--check none: only unwritten (NaN) elements are looked for";
    return plan;
  }
  if (mode == CheckMode::full || (mode == CheckMode::auto_ && work <= budget)) {
    plan.mode = "full";
    plan.groups = every_group(p);
    return plan;
  }
  if (p.alibi || !p.sinks.empty()) {
    // A sampled group is a sub-problem whose query heads are renumbered 0 .. group - 1, but
    // ALiBi's slope and the sink belong to the original head: the sub-problem would compute them
    // for the wrong heads.
    plan.mode = "none";
    plan.note = "not compared: ALiBi's slopes and the sinks belong to the query head, which a sampled "
                "(batch, KV head) group renumbers (--check full compares every group); only unwritten "
                "(NaN) elements are looked for";
    return plan;
  }
  const double cap = kBwdGroupCapFactor * budget;
  if (group_work > cap) {
    plan.mode = "none";
    plan.note = "not compared: one (batch, KV head) group is " + sci(group_work) +
                " units of fp64 reference work (B*Hq*Sq*Sk*d), above the cap of " + sci(cap) +
                " (the backward reference has no row sampling; --check full compares it anyway); "
                "only unwritten (NaN) elements are looked for";
    return plan;
  }
  // The first and the last group (first and last batch, KV head), then seeded random ones while
  // the work stays within the budget.
  std::set<std::pair<int, int>> picked{{0, 0}, {p.batch - 1, p.heads_kv - 1}};
  const long long wanted = std::min(total, std::max<long long>(2, static_cast<long long>(budget / group_work)));
  std::mt19937_64 rng(seed ^ 0xbac4a2dull);
  for (int tries = 0; static_cast<long long>(picked.size()) < wanted && tries < 4096; ++tries)
    picked.insert({static_cast<int>(rng() % p.batch), static_cast<int>(rng() % p.heads_kv)});
  for (const auto& [b, hk] : picked) plan.groups.push_back({b, hk});
  if (static_cast<long long>(plan.groups.size()) == total) {
    plan.mode = "full";
    return plan;
  }
  plan.mode = "sample";
  plan.note = std::to_string(plan.groups.size()) + " of " + std::to_string(total) +
              " (batch, KV head) groups compared (the backward reference has no row sampling; "
              "--check full compares every group)";
  return plan;
}

Problem group_problem(const Problem& p, const std::vector<BwdGroup>& groups) {
  Problem s = p;
  s.batch = static_cast<int>(groups.size());
  s.heads_kv = 1;
  s.heads_q = p.group();
  s.softmax_scale = p.scale();
  s.page_size = 0;
  // ALiBi and sinks depend on the original query head: plan_bwd_check never samples with them.
  // Dropout's mask does too: each picked group keeps its (sequence, first query head)'s numbers.
  if (p.dropout()) {
    s.dropout_bh0.clear();
    for (const BwdGroup& g : groups)
      s.dropout_bh0.push_back(
          (p.dropout_bh0.empty() ? static_cast<uint32_t>(g.b) * static_cast<uint32_t>(p.heads_q)
                                 : p.dropout_bh0[static_cast<size_t>(g.b)]) +
          static_cast<uint32_t>(g.hk * p.group()));
  }
  if (p.varlen()) {  // the picked groups' sequences, packed in the order picked
    std::vector<int> lq, lk;
    for (const BwdGroup& g : groups) {
      lq.push_back(p.len_q(g.b));
      lk.push_back(p.len_k(g.b));
    }
    set_varlen(&s, lq, lk);
  }
  return s;
}

std::vector<uint16_t> gather_q_like(const Problem& p, const std::vector<uint16_t>& t,
                                    const std::vector<BwdGroup>& groups, int dim) {
  const int G = p.group(), D = dim > 0 ? dim : p.head_dim, H = p.heads_q;
  std::vector<uint16_t> out;
  for (const BwdGroup& g : groups)
    for (int s = 0; s < p.len_q(g.b); ++s) {
      const size_t base = (static_cast<size_t>(p.q_token(g.b, s)) * H + static_cast<size_t>(g.hk) * G) * D;
      out.insert(out.end(), t.begin() + base, t.begin() + base + static_cast<size_t>(G) * D);
    }
  return out;
}

std::vector<uint16_t> gather_kv_like(const Problem& p, const std::vector<uint16_t>& t,
                                     const std::vector<BwdGroup>& groups, int dim) {
  const int D = dim > 0 ? dim : p.head_dim, H = p.heads_kv;
  std::vector<uint16_t> out;
  for (const BwdGroup& g : groups)
    for (int s = 0; s < p.len_k(g.b); ++s) {
      const size_t base = (static_cast<size_t>(p.k_token(g.b, s)) * H + g.hk) * D;
      out.insert(out.end(), t.begin() + base, t.begin() + base + D);
    }
  return out;
}

void summarize(BwdCheck* c) {
  CheckResult& s = c->summary;
  const BwdCheckResult& g = c->grads;
  s = CheckResult{};
  s.pass = g.pass;
  s.reason = g.reason;
  s.checked = g.dq.checked;
  s.mode = g.dq.mode;
  s.rows = g.dq.checked ? g.dq.rows : 0;
  s.unwritten = g.dq.unwritten + g.dk.unwritten + g.dv.unwritten;
  // The errors and tolerance of the tensor closest to (or furthest past) its tolerance.
  const CheckResult* worst = &g.dq;
  double worst_ratio = -1;
  for (const CheckResult* t : {&g.dq, &g.dk, &g.dv, &g.dsinks}) {
    if (!t->checked && t == &g.dsinks) continue;
    double ratio = 0;
    if (t->tol.rel_fro > 0) ratio = std::max(ratio, t->err.rel_fro / t->tol.rel_fro);
    if (t->tol.max_abs > 0) ratio = std::max(ratio, t->err.max_abs / t->tol.max_abs);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = t;
    }
  }
  s.err = worst->err;
  s.err.nonfinite = g.dq.err.nonfinite + g.dk.err.nonfinite + g.dv.err.nonfinite;
  s.fp32_err = worst->fp32_err;
  s.tol = worst->tol;
}

std::string rows_check_reason(const Problem& p) {
  if (p.varlen()) return "a packed batch";
  if (p.has_mods()) return "a mask or modifier beyond the causal mask";
  if (p.dropout()) return "attention dropout";
  if (p.page_size > 0 || !p.seqused_k.empty() || !p.seqstart_k.empty()) return "a KV cache's layout";
  return "";
}

int rows_check_count(const Problem& p, double budget) {
  const double per_row =
      static_cast<double>(p.heads_q) * std::max(p.seqlen_q, p.seqlen_k) * (p.head_dim + p.dv()) / 2;
  const double fit = kBwdGroupCapFactor * budget / std::max(per_row, 1.0);
  const int n = static_cast<int>(std::min(64.0, std::max(4.0, fit)));
  return std::min(n, std::min(p.seqlen_q, p.seqlen_k) * p.batch);
}

namespace {

/// (batch, row) pairs: the first and the last row of the batch, then seeded random ones, sorted.
std::vector<std::pair<int, int>> pick_rows(int batch, int len, int count, unsigned long long seed) {
  std::set<std::pair<int, int>> picked{{0, 0}, {batch - 1, len - 1}};
  std::mt19937_64 rng(seed);
  const long long total = static_cast<long long>(batch) * len;
  for (int tries = 0; static_cast<long long>(picked.size()) < std::min<long long>(count, total) && tries < 65536;
       ++tries)
    picked.insert({static_cast<int>(rng() % batch), static_cast<int>(rng() % len)});
  return {picked.begin(), picked.end()};
}

/// The sampled rows' gradients in precision F (double: the reference; float: its fp32 twin), from
/// the inputs widened to double (exact) and the forward's LSE and D per (batch, head, query row).
/// dq: [query rows][heads_q][d]; dk: [key rows][heads_kv][d]; dv: [key rows][heads_kv][dv].
template <class F>
void rows_backward(const Problem& p, const BwdInputs& x, const std::vector<double>& lse, const std::vector<double>& delta,
                   const std::vector<std::pair<int, int>>& qrows, const std::vector<std::pair<int, int>>& krows,
                   std::vector<double>* dq, std::vector<double>* dk, std::vector<double>* dv) {
  const int D = p.head_dim, Dv = p.dv(), Hq = p.heads_q, Hk = p.heads_kv, G = p.group(), Sq = p.seqlen_q,
            Sk = p.seqlen_k;
  const F scale = static_cast<F>(p.scale());
  auto q_at = [&](int b, int i, int h) { return &x.q[((static_cast<size_t>(b) * Sq + i) * Hq + h) * D]; };
  auto do_at = [&](int b, int i, int h) { return &x.dout[((static_cast<size_t>(b) * Sq + i) * Hq + h) * Dv]; };
  auto k_at = [&](int b, int j, int hk) { return &x.k[((static_cast<size_t>(b) * Sk + j) * Hk + hk) * D]; };
  auto v_at = [&](int b, int j, int hk) { return &x.v[((static_cast<size_t>(b) * Sk + j) * Hk + hk) * Dv]; };
  auto dot_n = [](const double* a, const double* b, int n) {
    F s = 0;
    for (int c = 0; c < n; ++c) s += static_cast<F>(a[c]) * static_cast<F>(b[c]);
    return s;
  };
  auto dot = [&](const double* a, const double* b) { return dot_n(a, b, D); };     // q . k
  auto dot_v = [&](const double* a, const double* b) { return dot_n(a, b, Dv); };  // dO . v
  // Query i sees key j iff j <= i + seqlen_k - seqlen_q under the (bottom-right) causal mask.
  auto last_key = [&](int i) { return p.causal ? std::min(Sk - 1, i + p.causal_offset()) : Sk - 1; };
  dq->assign(qrows.size() * Hq * D, 0.0);
  dk->assign(krows.size() * Hk * D, 0.0);
  dv->assign(krows.size() * Hk * Dv, 0.0);
#pragma omp parallel for schedule(dynamic)
  for (long long t = 0; t < static_cast<long long>(qrows.size()) * Hq; ++t) {
    const auto [b, i] = qrows[t / Hq];
    const int h = static_cast<int>(t % Hq), hk = h / G, last = last_key(i);
    if (last < 0) continue;  // sees no key: zero dQ
    std::vector<F> s(last + 1);
    F m = -INFINITY;
    for (int j = 0; j <= last; ++j) m = std::max(m, s[j] = scale * dot(q_at(b, i, h), k_at(b, j, hk)));
    F l = 0;
    for (int j = 0; j <= last; ++j) l += std::exp(s[j] - m);
    std::vector<F> o(Dv, 0), g(D, 0);
    for (int j = 0; j <= last; ++j) {
      const F pj = std::exp(s[j] - m) / l;
      const double* vj = v_at(b, j, hk);
      for (int c = 0; c < Dv; ++c) o[c] += pj * static_cast<F>(vj[c]);
    }
    F delta_i = 0;
    const double* doi = do_at(b, i, h);
    for (int c = 0; c < Dv; ++c) delta_i += static_cast<F>(doi[c]) * o[c];
    for (int j = 0; j <= last; ++j) {
      const F pj = std::exp(s[j] - m) / l;
      const F ds = pj * (dot_v(doi, v_at(b, j, hk)) - delta_i);
      const double* kj = k_at(b, j, hk);
      for (int c = 0; c < D; ++c) g[c] += ds * static_cast<F>(kj[c]);
    }
    double* out = &(*dq)[(static_cast<size_t>(t / Hq) * Hq + h) * D];
    for (int c = 0; c < D; ++c) out[c] = static_cast<double>(scale * g[c]);
  }
#pragma omp parallel for schedule(dynamic)
  for (long long t = 0; t < static_cast<long long>(krows.size()) * Hk; ++t) {
    const auto [b, j] = krows[t / Hk];
    const int hk = static_cast<int>(t % Hk);
    std::vector<F> gk(D, 0), gv(Dv, 0);
    const double *kj = k_at(b, j, hk), *vj = v_at(b, j, hk);
    for (int h = hk * G; h < (hk + 1) * G; ++h)
      for (int i = 0; i < Sq; ++i) {
        if (last_key(i) < j) continue;  // query i does not see key j
        const size_t row = (static_cast<size_t>(b) * Hq + h) * Sq + i;
        const F pij = std::exp(scale * dot(q_at(b, i, h), kj) - static_cast<F>(lse[row]));
        const double *qi = q_at(b, i, h), *doi = do_at(b, i, h);
        const F ds = pij * (dot_v(doi, vj) - static_cast<F>(delta[row]));
        for (int c = 0; c < Dv; ++c) gv[c] += pij * static_cast<F>(doi[c]);
        for (int c = 0; c < D; ++c) gk[c] += ds * static_cast<F>(qi[c]);
      }
    const size_t at = (static_cast<size_t>(t / Hk) * Hk + hk);
    for (int c = 0; c < D; ++c) (*dk)[at * D + c] = static_cast<double>(scale * gk[c]);
    for (int c = 0; c < Dv; ++c) (*dv)[at * Dv + c] = static_cast<double>(gv[c]);
  }
}

}  // namespace

BwdCheck check_backward_rows(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                             const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                             const std::vector<uint16_t>& dv, const BwdForward& fwd, int rows,
                             unsigned long long seed) {
  const std::string why = rows_check_reason(p);
  if (!why.empty()) throw std::invalid_argument("check_backward_rows: " + why + " (" + p.describe() + ")");
  if (!fwd.o || !fwd.lse || fwd.o->size() != p.o_elements() || fwd.lse->size() != p.lse_elements())
    throw std::invalid_argument("check_backward_rows: the forward's O and LSE are needed (" + p.describe() + ")");
  const int D = p.head_dim, Dv = p.dv(), Hq = p.heads_q, Hk = p.heads_kv, Sq = p.seqlen_q, Sk = p.seqlen_k;
  const BwdInputs x = widen_bwd_inputs(p, in, dout);
  // The forward's statistics per (batch, head, query row): its LSE, and D from its O.
  std::vector<double> lse(fwd.lse->begin(), fwd.lse->end()), delta(p.lse_elements(), 0.0);
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < Sq; ++i)
      for (int h = 0; h < Hq; ++h) {
        const size_t at = ((static_cast<size_t>(b) * Sq + i) * Hq + h) * Dv;  // O and dO: dv columns
        double d = 0;
        for (int c = 0; c < Dv; ++c) d += x.dout[at + c] * from_bits((*fwd.o)[at + c], p.dtype);
        delta[(static_cast<size_t>(b) * Hq + h) * Sq + i] = d;
      }
  const auto qrows = pick_rows(p.batch, Sq, rows, seed ^ 0x51d0ull);
  const auto krows = pick_rows(p.batch, Sk, rows, seed ^ 0x6b3aull);
  BwdResults ref, f32;
  rows_backward<double>(p, x, lse, delta, qrows, krows, &ref.dq, &ref.dk, &ref.dv);
  rows_backward<float>(p, x, lse, delta, qrows, krows, &f32.dq, &f32.dk, &f32.dv);
  // The device's rows, in the same order.
  auto gather = [](const std::vector<uint16_t>& t, const std::vector<std::pair<int, int>>& rs, int S, int H,
                   int cols) {
    std::vector<uint16_t> out;
    for (const auto& [b, s] : rs) {
      const size_t at = (static_cast<size_t>(b) * S + s) * H * cols;
      out.insert(out.end(), t.begin() + at, t.begin() + at + static_cast<size_t>(H) * cols);
    }
    return out;
  };
  Problem sub = p;  // compare_gradients reads the dtype, head_dim and dv only
  BwdCheck c;
  c.groups_total = p.batch * p.heads_kv;
  c.grads = compare_gradients(sub, ref, f32, gather(dq, qrows, Sq, Hq, D), gather(dk, krows, Sk, Hk, D),
                              gather(dv, krows, Sk, Hk, Dv));
  c.note = std::to_string(qrows.size()) + " query rows and " + std::to_string(krows.size()) +
           " key rows compared, every head (one (batch, KV head) group is too long for the whole reference): dQ "
           "exact in fp64; dK and dV summed in fp64 over every query with P and D from the forward's LSE and O";
  const std::pair<CheckResult*, const std::vector<uint16_t>*> all[] = {
      {&c.grads.dq, &dq}, {&c.grads.dk, &dk}, {&c.grads.dv, &dv}};
  for (const auto& [t, data] : all) {
    t->mode = "sample-rows";
    t->unwritten = count_unwritten(p, *data, {});
    decide(t);
  }
  c.grads.dq.rows = qrows.size() * Hq;
  c.grads.dk.rows = c.grads.dv.rows = krows.size() * Hk;
  c.grads.finish();
  summarize(&c);
  return c;
}

BwdCheck check_backward(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                        const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                        const std::vector<uint16_t>& dv, CheckMode mode, unsigned long long seed,
                        double budget, const std::vector<float>* dsinks, const BwdForward& fwd) {
  const size_t q_elems = p.q_elements(), kv_elems = p.kv_elements(), o_elems = p.o_elements(),
               v_elems = p.v_elements();
  if (dq.size() != q_elems || dout.size() != o_elems || in.q.size() != q_elems || dk.size() != kv_elems ||
      dv.size() != v_elems || in.k.size() != kv_elems || in.v.size() != v_elems)
    throw std::invalid_argument("check_backward: tensor sizes do not match " + p.describe());
  const BwdCheckPlan plan = plan_bwd_check(p, mode, seed, budget);
  if (plan.mode == "none" && mode != CheckMode::none && fwd.o && fwd.lse && rows_check_reason(p).empty())
    return check_backward_rows(p, in, dout, dq, dk, dv, fwd, rows_check_count(p, budget), seed);
  BwdCheck c;
  c.groups_total = p.batch * p.heads_kv;
  c.note = plan.note;
  c.groups = static_cast<int>(plan.groups.size());
  if (plan.mode == "full") {
    c.grads = check_gradients(p, in, dout, dq, dk, dv, dsinks);
  } else if (plan.mode == "sample") {
    const Problem sub = group_problem(p, plan.groups);
    HostInputs sub_in;
    sub_in.q = gather_q_like(p, in.q, plan.groups);
    sub_in.k = gather_kv_like(p, in.k, plan.groups);
    sub_in.v = gather_kv_like(p, in.v, plan.groups, p.dv());
    c.grads = check_gradients(sub, sub_in, gather_q_like(p, dout, plan.groups, p.dv()),
                              gather_q_like(p, dq, plan.groups), gather_kv_like(p, dk, plan.groups),
                              gather_kv_like(p, dv, plan.groups, p.dv()));
  } else {
    for (CheckResult* t : {&c.grads.dq, &c.grads.dk, &c.grads.dv}) {
      t->checked = false;
      t->tol = gradient_tolerance_floor(p.dtype);
    }
  }
  // Unwritten elements are counted over the whole tensors, compared or not.
  const std::pair<CheckResult*, const std::vector<uint16_t>*> all[] = {
      {&c.grads.dq, &dq}, {&c.grads.dk, &dk}, {&c.grads.dv, &dv}};
  for (const auto& [t, data] : all) {
    t->mode = plan.mode;
    t->unwritten = count_unwritten(p, *data, {});
    decide(t);
  }
  c.grads.finish();
  summarize(&c);
  return c;
}

}  // namespace fl
