#include "flashladder/reference_bwd.h"

#include "flashladder/reference.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace fl {

namespace {

template <class Scalar>
using Mat = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Scalar>
using Col = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

/// Offset of element (token, h, 0) of a [tokens, H, D] tensor: every tensor of a dense batch
/// ([batch, S, H, D], token b * S + s) and of a packed one (Problem::q_token, k_token).
inline size_t at(int64_t token, int h, int H, int D) { return (static_cast<size_t>(token) * H + h) * D; }

/// Rows token0 .. token0+n-1 of head h, as an n x D matrix.
template <class Scalar>
Mat<Scalar> rows_of(const std::vector<double>& t, int64_t token0, int h, int n, int H, int D) {
  Mat<Scalar> m(n, D);
  for (int r = 0; r < n; ++r) {
    const size_t base = at(token0 + r, h, H, D);
    for (int c = 0; c < D; ++c) m(r, c) = static_cast<Scalar>(t[base + c]);
  }
  return m;
}

/// Writes an n x D matrix into rows token0 .. token0+n-1 of head h.
template <class Scalar>
void store_rows(const Mat<Scalar>& m, std::vector<double>* t, int64_t token0, int h, int H) {
  const int D = static_cast<int>(m.cols());
  for (int r = 0; r < m.rows(); ++r) {
    const size_t base = at(token0 + r, h, H, D);
    for (int c = 0; c < D; ++c) (*t)[base + c] = static_cast<double>(m(r, c));
  }
}

/// Results shaped like the inputs before any row is computed: zero O, D and gradients, and an
/// LSE of -inf (what a row that sees no key keeps).
BwdResults empty_results(const Problem& p, const BwdInputs& x) {
  BwdResults res;
  res.out.assign(x.dout.size(), 0.0);  // O is shaped like dO: dv columns
  res.dq.assign(x.q.size(), 0.0);
  res.dk.assign(x.k.size(), 0.0);
  res.dv.assign(x.v.size(), 0.0);
  res.lse.assign(p.lse_elements(), -std::numeric_limits<double>::infinity());
  res.delta.assign(res.lse.size(), 0.0);
  if (!p.sinks.empty()) res.dsinks.assign(p.heads_q, 0.0);
  return res;
}

/// The backward pass in Scalar with Eigen. One task per (batch, KV head): it owns that head's
/// dK and dV, so the group's query heads add into them with no race, in a fixed order (the
/// result does not depend on the thread count). Query rows go in chunks so the score matrix
/// is kChunk x seqlen_k, never seqlen_q x seqlen_k. A packed batch's sequences each have their
/// own lengths and causal diagonal (Problem::len_q, len_k); each row sees the keys of
/// Problem::key_span, its scores through Problem::modified_score. A sink enters each row's
/// softmax; its gradient is summed per task, then over the tasks in a fixed order.
template <class Scalar>
BwdResults backward_impl(const Problem& p, const BwdInputs& x) {
  const int B = p.batch, Hq = p.heads_q, Hkv = p.heads_kv;
  const int D = p.head_dim, Dv = p.dv(), G = p.group();  // Q, K, dQ, dK: D columns; V, O, dO, dV: Dv
  BwdResults res = empty_results(p, x);

  constexpr int kChunk = 64;
  const Scalar scale = static_cast<Scalar>(p.scale());
  const bool mods = p.has_mods(), softcapped = p.softcap > 0, sinks = !p.sinks.empty();
  const bool dropout = p.dropout();
  const Scalar dropout_scale = static_cast<Scalar>(1.0 / (1.0 - static_cast<double>(p.dropout_p)));
  // dsink_h of each (batch, KV head) task, for its G query heads: tasks of different batches
  // share a head, so they are added after the parallel loop, in task order.
  std::vector<double> dsink_part(sinks ? static_cast<size_t>(B) * Hkv * G : 0, 0.0);
#pragma omp parallel for schedule(dynamic)
  for (long long t = 0; t < static_cast<long long>(B) * Hkv; ++t) {
    const int b = static_cast<int>(t / Hkv), hk = static_cast<int>(t % Hkv);
    const int Sq = p.len_q(b), Sk = p.len_k(b);
    const Mat<Scalar> K = rows_of<Scalar>(x.k, p.k_token(b, 0), hk, Sk, Hkv, D);
    const Mat<Scalar> V = rows_of<Scalar>(x.v, p.k_token(b, 0), hk, Sk, Hkv, Dv);
    Mat<Scalar> dK = Mat<Scalar>::Zero(Sk, D), dV = Mat<Scalar>::Zero(Sk, Dv);
    for (int h = hk * G; h < (hk + 1) * G; ++h) {
      for (int i0 = 0; i0 < Sq; i0 += kChunk) {
        const int n = std::min(kChunk, Sq - i0);
        const Mat<Scalar> Q = rows_of<Scalar>(x.q, p.q_token(b, i0), h, n, Hq, D);
        const Mat<Scalar> dO = rows_of<Scalar>(x.dout, p.q_token(b, i0), h, n, Hq, Dv);
        Mat<Scalar> P = (Q * K.transpose()) * scale;  // S, turned into P in place
        const Mat<Scalar> S = softcapped ? P : Mat<Scalar>();  // softcapping's derivative reads S
        const size_t stat = p.lse_index(b, h, i0);  // (b, h, i0) of LSE and D; rows follow at stride 1
        const Scalar sink = static_cast<Scalar>(sink_logit(p, h));  // -inf: no sink
        for (int r = 0; r < n; ++r) {
          const KeySpan span = p.key_span(b, i0 + r);  // the keys the row sees (masks.h)
          if (span.lo > span.hi) {  // no key: P = 0, so O, D, dQ are 0 and dK, dV get nothing
            P.row(r).setZero();
            res.lse[stat + r] = static_cast<double>(sink);  // the sink alone (-inf without one)
            continue;
          }
          if (mods)  // softcapping, ALiBi (Problem::modified_score)
            for (int j = span.lo; j <= span.hi; ++j)
              P(r, j) = static_cast<Scalar>(p.modified_score(static_cast<double>(P(r, j)), b, h, i0 + r, j));
          const Scalar m =
              std::max(sink, P.row(r).segment(span.lo, span.hi - span.lo + 1).maxCoeff());
          Scalar l = std::exp(sink - m);  // the sink's term of the denominator, 0 without one
          for (int j = 0; j < Sk; ++j) {
            const Scalar e = j >= span.lo && j <= span.hi ? std::exp(P(r, j) - m) : Scalar(0);
            P(r, j) = e;
            l += e;
          }
          P.row(r) /= l;
          res.lse[stat + r] = static_cast<double>(m + std::log(l));
        }
        // Dropout (FlashAttention 2's): Z = M / (1 - p) elementwise, P_drop = P ∘ Z takes P's
        // place in O and dV, and dP = (dO V^T) ∘ Z; dS = P ∘ (dP - D), D from the dropped O.
        Mat<Scalar> Z;
        if (dropout) {
          Z = Mat<Scalar>::Zero(n, Sk);
          for (int r = 0; r < n; ++r)
            for (int j = 0; j < Sk; ++j)
              if (p.dropout_kept(b, h, i0 + r, j)) Z(r, j) = dropout_scale;
        }
        const Mat<Scalar> Pd = dropout ? Mat<Scalar>(P.array() * Z.array()) : Mat<Scalar>();
        const Mat<Scalar>& P_drop = dropout ? Pd : P;
        const Mat<Scalar> O = P_drop * V;
        const Col<Scalar> Di = (dO.array() * O.array()).rowwise().sum();
        dV.noalias() += P_drop.transpose() * dO;
        Mat<Scalar> dP = dO * V.transpose();
        if (dropout) dP = (dP.array() * Z.array()).matrix();
        Mat<Scalar> dS = (P.array() * (dP.colwise() - Di).array()).matrix();  // d loss / d modified score
        if (softcapped)  // back through the cap: d / d S = dS · (1 - tanh²(S / cap))
          for (int r = 0; r < n; ++r)
            for (int j = 0; j < Sk; ++j)
              if (dS(r, j) != Scalar(0)) dS(r, j) *= static_cast<Scalar>(p.modified_score_grad(static_cast<double>(S(r, j))));
        const Mat<Scalar> dQ = (dS * K) * scale;
        dK.noalias() += (dS.transpose() * Q) * scale;
        store_rows(O, &res.out, p.q_token(b, i0), h, Hq);
        store_rows(dQ, &res.dq, p.q_token(b, i0), h, Hq);
        for (int r = 0; r < n; ++r) res.delta[stat + r] = static_cast<double>(Di(r));
        // dsink_h = -sum_i exp(sink_h - LSE_i) D_i: the sink's probability times D (0 on empty rows)
        if (sinks) {
          Scalar ds = 0;
          for (int r = 0; r < n; ++r)
            ds -= std::exp(sink - static_cast<Scalar>(res.lse[stat + r])) * Di(r);
          dsink_part[static_cast<size_t>(t) * G + (h - hk * G)] += static_cast<double>(ds);
        }
      }
    }
    store_rows(dK, &res.dk, p.k_token(b, 0), hk, Hkv);
    store_rows(dV, &res.dv, p.k_token(b, 0), hk, Hkv);
  }
  for (size_t t = 0; t < dsink_part.size() / G; ++t)  // tasks in order: no dependence on threads
    for (int g = 0; g < G; ++g) res.dsinks[(t % Hkv) * G + g] += dsink_part[t * G + g];
  return res;
}

}  // namespace

BwdInputs widen_bwd_inputs(const Problem& p, const HostInputs& in,
                           const std::vector<uint16_t>& dout) {
  auto widen = [&](const std::vector<uint16_t>& t) {
    std::vector<double> w(t.size());
    for (size_t n = 0; n < t.size(); ++n) w[n] = from_bits(t[n], p.dtype);
    return w;
  };
  return {widen(in.q), widen(in.k), widen(in.v), widen(dout)};
}

BwdResults reference_bwd_fp64(const Problem& p, const BwdInputs& x) {
  return backward_impl<double>(p, x);
}

BwdResults reference_bwd_fp64(const Problem& p, const HostInputs& in,
                              const std::vector<uint16_t>& dout) {
  return backward_impl<double>(p, widen_bwd_inputs(p, in, dout));
}

BwdResults reference_bwd_fp32(const Problem& p, const HostInputs& in,
                              const std::vector<uint16_t>& dout) {
  // 16-bit values are exact in float: the fp32 run starts from the same inputs as fp64.
  return backward_impl<float>(p, widen_bwd_inputs(p, in, dout));
}

BwdResults naive_loops_bwd(const Problem& p, const HostInputs& in,
                           const std::vector<uint16_t>& dout) {
  return naive_loops_bwd(p, widen_bwd_inputs(p, in, dout));
}

BwdResults naive_loops_bwd(const Problem& p, const BwdInputs& x) {
  const int B = p.batch, Hq = p.heads_q, Hkv = p.heads_kv;
  const int D = p.head_dim, Dv = p.dv();  // Q, K: D columns; V, O, dO: Dv
  const double scale = p.scale();
  BwdResults res = empty_results(p, x);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / p.group();
      for (int i = 0; i < p.len_q(b); ++i) {
        const size_t qi = at(p.q_token(b, i), h, Hq, D), oi = at(p.q_token(b, i), h, Hq, Dv);
        const size_t stat = p.lse_index(b, h, i);
        // Scores of the keys row i sees, j = span.lo + index (a causal row sees keys 0 .. i +
        // len_k - len_q), modified (softcapping, ALiBi); raw: before the modifiers.
        const KeySpan span = p.key_span(b, i);
        std::vector<double> s, raw;
        for (int j = span.lo; j <= span.hi; ++j) {
          double dot = 0;
          for (int c = 0; c < D; ++c) dot += x.q[qi + c] * x.k[at(p.k_token(b, j), hk, Hkv, D) + c];
          raw.push_back(dot * scale);
          s.push_back(p.modified_score(dot * scale, b, h, i, j));
        }
        // The sink (gpt-oss): a logit in the denominator with no value; a row that sees no key
        // gets LSE = sink, every other output 0.
        const bool sinks = !p.sinks.empty();
        const double sink = sinks ? static_cast<double>(p.sinks[h]) : 0.0;
        if (s.empty()) {  // no key: every output of this row stays 0
          if (sinks) res.lse[stat] = sink;
          continue;
        }
        double m = *std::max_element(s.begin(), s.end());
        if (sinks) m = std::max(m, sink);
        double l = sinks ? std::exp(sink - m) : 0.0;
        for (double e : s) l += std::exp(e - m);
        std::vector<double> prob(s.size());
        for (size_t j = 0; j < s.size(); ++j) prob[j] = std::exp(s[j] - m) / l;
        res.lse[stat] = m + std::log(l);
        // Dropout: z_j = M_ij / (1 - p) (1 without dropout); P_ij z_j is what O and dV see.
        std::vector<double> z(s.size(), 1.0);
        if (p.dropout())
          for (size_t j = 0; j < s.size(); ++j)
            z[j] = p.dropout_kept(b, h, i, span.lo + static_cast<int>(j))
                       ? 1.0 / (1.0 - static_cast<double>(p.dropout_p))
                       : 0.0;
        // O_i = sum_j P_ij z_j V_j, then D_i = dO_i . O_i.
        for (size_t j = 0; j < s.size(); ++j)
          for (int c = 0; c < Dv; ++c)
            res.out[oi + c] += prob[j] * z[j] *
                               x.v[at(p.k_token(b, span.lo + static_cast<int>(j)), hk, Hkv, Dv) + c];
        double delta = 0;
        for (int c = 0; c < Dv; ++c) delta += x.dout[oi + c] * res.out[oi + c];
        res.delta[stat] = delta;
        // d L / d sink = sum_c dO_ic (d O_ic / d sink) = -P_i,sink D_i, P_i,sink = e^{sink - m} / l.
        if (sinks) res.dsinks[h] -= std::exp(sink - m) / l * delta;
        for (size_t j = 0; j < s.size(); ++j) {
          const int64_t tok = p.k_token(b, span.lo + static_cast<int>(j));
          const size_t kj = at(tok, hk, Hkv, D), vj = at(tok, hk, Hkv, Dv);
          double dp = 0;  // dP_ij = (dO_i . V_j) z_j
          for (int c = 0; c < Dv; ++c) dp += x.dout[oi + c] * x.v[vj + c];
          dp *= z[j];
          const double ds = prob[j] * (dp - delta) * p.modified_score_grad(raw[j]);
          for (int c = 0; c < Dv; ++c) res.dv[vj + c] += prob[j] * z[j] * x.dout[oi + c];
          for (int c = 0; c < D; ++c) {
            res.dq[qi + c] += scale * ds * x.k[kj + c];
            res.dk[kj + c] += scale * ds * x.q[qi + c];
          }
        }
      }
    }
  return res;
}

Tolerance gradient_tolerance_floor(DType t) {
  // A FlashAttention-2 style backward rounds P (for dV) and dS (for dQ, dK) to 16 bits before
  // the fp32-accumulating MMAs, then stores dQ, dK, dV in 16 bits. Every row of dS sums to zero,
  // so dQ_i = s sum_j dS_ij K_j cancels while the rounding errors of dS do not: dQ's relative
  // error grows with the keys a row sees. A CPU model of such a kernel (tests/cpu/
  // test_reference_bwd.cpp) measured dQ at rel_fro 1.3e-3 (fp16) and 1.05e-2 (bf16) for 4096
  // non-causal keys, 2.4e-3 / 1.9e-2 for 16384; dK and dV stay near the forward's one rounding.
  // So the relative floor is twice the forward's (3x headroom up to 4096 keys, the check shapes
  // this fp64 reference is meant for); the absolute floor, scaled by max |ref|, is the forward's.
  const Tolerance f = tolerance_floor(t);
  return {2 * f.rel_fro, f.max_abs, f.lse_abs};
}

Tolerance gradient_tolerance_floor_fp8(DType t) {
  // dS's rows sum to zero, so dQ = s dS K cancels while the e4m3 rounding of dS does not: the
  // 16-bit rule above, on the FP8 forward's floors.
  const Tolerance f = tolerance_floor_fp8(t);
  return {2 * f.rel_fro, f.max_abs, f.lse_abs, f.lse_rel};
}

BwdCheckResult compare_gradients(const Problem& p, const BwdResults& ref, const BwdResults& fp32,
                                 const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                                 const std::vector<uint16_t>& dv, const std::vector<float>* dsinks) {
  BwdCheckResult r;
  const Tolerance floor = gradient_tolerance_floor(p.dtype);
  auto judge = [&](const char* name, const std::vector<uint16_t>& got,
                   const std::vector<double>& want, const std::vector<double>& f32,
                   CheckResult* c, int cols) {
    c->checked = true;
    c->mode = "full";
    c->rows = want.size() / static_cast<size_t>(cols);
    if (got.size() != want.size()) {
      c->reason = std::string(name) + " has " + std::to_string(got.size()) +
                  " elements, expected " + std::to_string(want.size());
      c->pass = false;
    } else {
      c->unwritten = count_unwritten(p, got, {});
      c->err = compare_tensor(p.dtype, got, want);
      c->fp32_err = compare_values(f32, want);
      c->tol = tolerance_for(floor, c->fp32_err);
      decide(c);
    }
  };
  judge("dQ", dq, ref.dq, fp32.dq, &r.dq, p.head_dim);
  judge("dK", dk, ref.dk, fp32.dk, &r.dk, p.head_dim);
  judge("dV", dv, ref.dv, fp32.dv, &r.dv, p.dv());
  if (!p.sinks.empty()) {  // one fp32 value per query head, summed over the head's rows
    CheckResult* c = &r.dsinks;
    c->checked = true;
    c->mode = "full";
    c->rows = ref.dsinks.size();
    if (dsinks == nullptr || dsinks->size() != ref.dsinks.size()) {
      c->reason = "dsinks not returned (" + std::to_string(dsinks ? dsinks->size() : 0) + " values, expected " +
                  std::to_string(ref.dsinks.size()) + ")";
      c->pass = false;
    } else {
      c->err = compare_values(std::vector<double>(dsinks->begin(), dsinks->end()), ref.dsinks);
      c->fp32_err = compare_values(fp32.dsinks, ref.dsinks);
      c->tol = tolerance_for(floor, c->fp32_err);
      decide(c);
    }
  }
  r.finish();
  return r;
}

void BwdCheckResult::finish() {
  reason.clear();
  const std::pair<const char*, const CheckResult*> tensors[] = {
      {"dQ", &dq}, {"dK", &dk}, {"dV", &dv}, {"dsinks", &dsinks}};
  for (const auto& [name, c] : tensors)
    if ((c != &dsinks || c->checked) && !c->pass && reason.empty()) reason = std::string(name) + ": " + c->reason;
  pass = reason.empty();
}

BwdCheckResult check_gradients(const Problem& p, const HostInputs& in,
                               const std::vector<uint16_t>& dout, const std::vector<uint16_t>& dq,
                               const std::vector<uint16_t>& dk, const std::vector<uint16_t>& dv,
                               const std::vector<float>* dsinks) {
  const BwdInputs x = widen_bwd_inputs(p, in, dout);
  return compare_gradients(p, backward_impl<double>(p, x), backward_impl<float>(p, x), dq, dk, dv, dsinks);
}

}  // namespace fl
