#include "flashladder/check_bwd.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>

namespace fl {

double bwd_check_work(const Problem& p) {
  double qk = 0;  // query-key pairs of every sequence (a packed batch's each of its own lengths)
  for (int b = 0; b < p.batch; ++b) qk += static_cast<double>(p.len_q(b)) * p.len_k(b);
  return qk * p.heads_q * p.head_dim;
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
  const double group_work = p.varlen() ? longest * p.group() * p.head_dim : work / static_cast<double>(total);
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
                                    const std::vector<BwdGroup>& groups) {
  const int G = p.group(), D = p.head_dim, H = p.heads_q;
  std::vector<uint16_t> out;
  for (const BwdGroup& g : groups)
    for (int s = 0; s < p.len_q(g.b); ++s) {
      const size_t base = (static_cast<size_t>(p.q_token(g.b, s)) * H + static_cast<size_t>(g.hk) * G) * D;
      out.insert(out.end(), t.begin() + base, t.begin() + base + static_cast<size_t>(G) * D);
    }
  return out;
}

std::vector<uint16_t> gather_kv_like(const Problem& p, const std::vector<uint16_t>& t,
                                     const std::vector<BwdGroup>& groups) {
  const int D = p.head_dim, H = p.heads_kv;
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

BwdCheck check_backward(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                        const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                        const std::vector<uint16_t>& dv, CheckMode mode, unsigned long long seed,
                        double budget, const std::vector<float>* dsinks) {
  const size_t q_elems = p.q_elements(), kv_elems = p.kv_elements();
  if (dq.size() != q_elems || dout.size() != q_elems || in.q.size() != q_elems || dk.size() != kv_elems ||
      dv.size() != kv_elems || in.k.size() != kv_elems || in.v.size() != kv_elems)
    throw std::invalid_argument("check_backward: tensor sizes do not match " + p.describe());
  BwdCheck c;
  c.groups_total = p.batch * p.heads_kv;
  const BwdCheckPlan plan = plan_bwd_check(p, mode, seed, budget);
  c.note = plan.note;
  c.groups = static_cast<int>(plan.groups.size());
  if (plan.mode == "full") {
    c.grads = check_gradients(p, in, dout, dq, dk, dv, dsinks);
  } else if (plan.mode == "sample") {
    const Problem sub = group_problem(p, plan.groups);
    HostInputs sub_in;
    sub_in.q = gather_q_like(p, in.q, plan.groups);
    sub_in.k = gather_kv_like(p, in.k, plan.groups);
    sub_in.v = gather_kv_like(p, in.v, plan.groups);
    c.grads = check_gradients(sub, sub_in, gather_q_like(p, dout, plan.groups), gather_q_like(p, dq, plan.groups),
                              gather_kv_like(p, dk, plan.groups), gather_kv_like(p, dv, plan.groups));
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
