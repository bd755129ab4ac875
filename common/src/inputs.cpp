#include "flashladder/inputs.h"

#include <algorithm>
#include <cmath>

namespace fl {

namespace {

/// SplitMix64: a counter-based generator, so element n gets the same value
/// whatever thread computes it.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline double uniform01(uint64_t bits) {  // (0, 1], never 0 so log() is finite
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/// Fills a [batch, seqlen, heads, dim] tensor with f(b, s, h, c).
template <class F>
std::vector<uint16_t> fill(int B, int S, int H, int D, DType t, F f) {
  std::vector<uint16_t> out(static_cast<size_t>(B) * S * H * D);
  const long long rows = static_cast<long long>(B) * S * H;
#pragma omp parallel for schedule(static)
  for (long long r = 0; r < rows; ++r) {
    const int h = static_cast<int>(r % H);
    const int s = static_cast<int>((r / H) % S);
    const int b = static_cast<int>(r / (static_cast<long long>(H) * S));
    for (int c = 0; c < D; ++c) out[static_cast<size_t>(r) * D + c] = to_bits(f(b, s, h, c, r * D + c), t);
  }
  return out;
}

}  // namespace

float normal_at(unsigned long long seed, unsigned long long index) {
  const uint64_t k = splitmix64(seed * 0x2545f4914f6cdd1dull ^ splitmix64(index));
  const double u1 = uniform01(k), u2 = uniform01(splitmix64(k));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

HostInputs make_inputs(const Problem& p, InputKind kind, unsigned long long seed) {
  // A packed batch is filled as one sequence of all its tokens: [1, total, heads, head_dim].
  // V has dv columns: its values are drawn at V's own element numbers, so with dv = d nothing
  // changes, and with dv != d the same formula fills the narrower or wider rows.
  const int B = p.varlen() ? 1 : p.batch, D = p.head_dim, Dv = p.dv();
  const int Sq = static_cast<int>(p.varlen() ? p.total_q() : p.seqlen_q);
  const int Sk = static_cast<int>(p.varlen() ? p.total_k() : p.seqlen_k);
  const DType t = p.dtype;
  // Three independent streams for Q, K, V.
  const unsigned long long sq = seed * 3 + 0, sk = seed * 3 + 1, sv = seed * 3 + 2;
  auto rnd = [](unsigned long long s, float offset) {
    return [s, offset](int, int, int, int, long long n) { return normal_at(s, n) + offset; };
  };
  HostInputs in;
  switch (kind) {
    case InputKind::ones: {
      auto one = [](int, int, int, int, long long) { return 1.0f; };
      in.q = fill(B, Sq, p.heads_q, D, t, one);
      in.k = fill(B, Sk, p.heads_kv, D, t, one);
      in.v = fill(B, Sk, p.heads_kv, Dv, t, one);
      break;
    }
    case InputKind::identity: {
      // Row s is 8 * e_{s mod D}: query i matches the keys j = i (mod D) strongly,
      // so a wrong row or column index changes the output visibly.
      auto unit = [D](int, int s, int, int c, long long) { return c == s % D ? 8.0f : 0.0f; };
      in.q = fill(B, Sq, p.heads_q, D, t, unit);
      in.k = fill(B, Sk, p.heads_kv, D, t, unit);
      in.v = fill(B, Sk, p.heads_kv, Dv, t, rnd(sv, 0.5f));
      break;
    }
    case InputKind::ramp: {
      // V values are multiples of 1/32 in [-1, 1): exact in fp16 and bf16.
      auto ramp = [](int b, int s, int h, int c, long long) {
        return static_cast<float>((s * 7 + c + h * 3 + b * 5) % 64) / 32.0f - 1.0f;
      };
      in.q = fill(B, Sq, p.heads_q, D, t, rnd(sq, 0.25f));
      in.k = fill(B, Sk, p.heads_kv, D, t, rnd(sk, 0.25f));
      in.v = fill(B, Sk, p.heads_kv, Dv, t, ramp);
      break;
    }
    case InputKind::outlier: {
      const OutlierChannels oc = outlier_channels(D);
      std::vector<float> factor(D, outlier_scale(D));
      for (size_t i = 0; i < oc.channel.size(); ++i) factor[oc.channel[i]] *= oc.factor[i];
      auto out = [factor](unsigned long long s) {
        return [s, factor](int, int, int, int c, long long n) { return (normal_at(s, n) + 0.25f) * factor[c]; };
      };
      in.q = fill(B, Sq, p.heads_q, D, t, out(sq));
      in.k = fill(B, Sk, p.heads_kv, D, t, out(sk));
      in.v = fill(B, Sk, p.heads_kv, Dv, t, rnd(sv, 0.5f));
      break;
    }
    default:
      in.q = fill(B, Sq, p.heads_q, D, t, rnd(sq, 0.25f));
      in.k = fill(B, Sk, p.heads_kv, D, t, rnd(sk, 0.25f));
      in.v = fill(B, Sk, p.heads_kv, Dv, t, rnd(sv, 0.5f));
  }
  if (p.v_in_k) {  // MLA's cache: V is K's first dv columns, element for element
    for (size_t row = 0; row < in.v.size() / Dv; ++row)
      std::copy_n(in.k.begin() + row * D, Dv, in.v.begin() + row * Dv);
  }
  return in;
}

std::vector<int> mixed_lengths(int count, int lo, int hi, unsigned long long seed) {
  std::vector<int> out(count);
  const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
  for (int i = 0; i < count; ++i)
    out[i] = lo + static_cast<int>(splitmix64((seed * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(i)) % range);
  return out;
}

OutlierChannels outlier_channels(int head_dim) {
  OutlierChannels oc;
  const int n = std::max(2, head_dim / 32);
  for (int i = 0; i < n; ++i) {
    // Channels 3, 3 + d/n + 2, ...: spread over the head, none at a power-of-two position.
    oc.channel.push_back(std::min(head_dim - 1, 3 + i * (head_dim / n) + 2 * i));
    oc.factor.push_back(n == 1 ? 10.f : 10.f * std::pow(10.f, static_cast<float>(i) / (n - 1)));
  }
  return oc;
}

float outlier_scale(int head_dim) {
  // The scores' variance is about scale^4 x sum(factor^4) x E[(q k)^2] / d, with q and k of mean
  // 0.25 and variance 1 on every channel (E[(q k)^2] = 1.0625^2): solve for a standard deviation
  // of 2.
  double f4 = 0;
  for (float f : outlier_channels(head_dim).factor) f4 += std::pow(static_cast<double>(f), 4);
  f4 += head_dim;  // the ordinary channels, factor 1
  const double target = 2.0;
  return static_cast<float>(std::pow(target * target * head_dim / (f4 * 1.0625 * 1.0625), 0.25));
}

std::vector<uint16_t> make_grad_output(const Problem& p, unsigned long long seed) {
  // make_inputs uses the streams seed * 3 + {0, 1, 2}, which cover every small integer; a large
  // constant xor-ed in keeps dO's stream clear of them for any seed a run would pass.
  const unsigned long long s = seed ^ 0x6a09e667f3bcc909ull;
  return fill(p.varlen() ? 1 : p.batch, static_cast<int>(p.varlen() ? p.total_q() : p.seqlen_q), p.heads_q, p.dv(), p.dtype,
              [s](int, int, int, int, long long n) { return normal_at(s, n) + 0.25f; });
}

}  // namespace fl
