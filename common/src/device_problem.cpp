#include "flashladder/device_problem.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace fl {

// ---- DeviceProblem ------------------------------------------------------------
namespace {
int pages_per_seq(const Problem& p) { return (p.seqlen_k + p.page_size - 1) / p.page_size; }
/// Elements of K (@p dim = head_dim) or V (@p dim = dv) on the device: contiguous, or its pages.
size_t kv_elems(const Problem& p, int dim) {
  return p.page_size > 0 ? static_cast<size_t>(p.batch) * pages_per_seq(p) * p.page_size * p.heads_kv * dim
                         : static_cast<size_t>(p.total_k()) * p.heads_kv * dim;
}
/// A 16-bit device tensor, whole, to the host.
std::vector<uint16_t> download16(const DeviceBuffer& b) {
  std::vector<uint16_t> h(b.bytes() / 2);
  b.download(h.data(), b.bytes());
  return h;
}
}  // namespace

size_t DeviceProblem::device_bytes(const Problem& p, size_t workspace_bytes) {
  const size_t qo = (p.q_elements() + p.o_elements()) * 2;
  const size_t kv = (kv_elems(p, p.head_dim) + (p.v_in_k ? 0 : kv_elems(p, p.dv()))) * 2;
  const size_t lse = p.lse_elements() * 4;
  const size_t cu = p.varlen() ? 2 * (static_cast<size_t>(p.batch) + 1) * sizeof(int) : 0;
  return qo + kv + lse + cu + workspace_bytes;
}

DeviceProblem::DeviceProblem(const Problem& p, const HostInputs& in, size_t workspace_bytes,
                             unsigned long long seed)
    : p_(p) {
  const int D = p.head_dim, Dv = p.dv();  // Q, K: D columns; V, O: Dv
  const size_t q_elems = p.q_elements();
  if (in.q.size() != q_elems || in.k.size() != p.kv_elements() || in.v.size() != p.v_elements())
    throw std::invalid_argument("DeviceProblem: Q, K, V do not have the sizes of " + p.describe());
  q_ = DeviceBuffer(q_elems * 2);
  o_ = DeviceBuffer(p.o_elements() * 2);
  lse_ = DeviceBuffer(p.lse_elements() * sizeof(float));
  k_ = DeviceBuffer(kv_elems(p, D) * 2);
  if (!p.v_in_k) v_ = DeviceBuffer(kv_elems(p, Dv) * 2);
  if (workspace_bytes > 0) ws_ = DeviceBuffer(workspace_bytes);
  q_.upload(in.q.data(), q_elems * 2);

  AttnParams& a = params_;
  a = make_attn_params(p);  // shapes, scale, mask fields and dense strides
  const int64_t hd = static_cast<int64_t>(p.heads_kv) * D, hdv = static_cast<int64_t>(p.heads_kv) * Dv;
  if (p.page_size == 0) {
    k_.upload(in.k.data(), in.k.size() * 2);
    if (!p.v_in_k) v_.upload(in.v.data(), in.v.size() * 2);
  } else {
    // Paged KV cache: token j of sequence b lives in page table[b][j / page] at
    // row j % page. Pages are shuffled so a kernel that ignores the table fails.
    const int pps = pages_per_seq(p), page = p.page_size;
    std::vector<int> table(static_cast<size_t>(p.batch) * pps);
    std::iota(table.begin(), table.end(), 0);
    std::mt19937_64 rng(seed ^ 0x9a9edull);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<uint16_t> kp(kv_elems(p, D), 0), vp(kv_elems(p, Dv), 0);
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.seqlen_k; ++j) {
        const size_t slot = static_cast<size_t>(table[b * pps + j / page]) * page + j % page;
        const size_t token = static_cast<size_t>(b) * p.seqlen_k + j;
        std::copy_n(in.k.begin() + token * hd, hd, kp.begin() + slot * hd);
        std::copy_n(in.v.begin() + token * hdv, hdv, vp.begin() + slot * hdv);
      }
    k_.upload(kp.data(), kp.size() * 2);
    if (!p.v_in_k) v_.upload(vp.data(), vp.size() * 2);
    table_ = DeviceBuffer(table.size() * sizeof(int));
    table_.upload(table.data(), table.size() * sizeof(int));
    a.k_batch_stride = a.v_batch_stride = 0;  // unused: the block table locates pages
    a.block_table = table_.as<int>();
    a.block_table_stride = pps;
    a.num_pages = p.batch * pps;
    a.page_size = page;
  }
  if (p.varlen()) {
    cu_q_ = DeviceBuffer(p.cu_seqlens_q.size() * sizeof(int));
    cu_k_ = DeviceBuffer(p.cu_seqlens_k.size() * sizeof(int));
    cu_q_.upload(p.cu_seqlens_q.data(), cu_q_.bytes());
    cu_k_.upload(p.cu_seqlens_k.data(), cu_k_.bytes());
    a.cu_seqlens_q = cu_q_.as<int>();
    a.cu_seqlens_k = cu_k_.as<int>();
  }
  if (!p.doc_starts.empty()) {
    docs_ = DeviceBuffer(p.doc_starts.size() * sizeof(int));
    docs_.upload(p.doc_starts.data(), docs_.bytes());
    a.doc_starts = docs_.as<int>();
  }
  if (!p.seqstart_k.empty()) {
    start_k_ = DeviceBuffer(p.seqstart_k.size() * sizeof(int));
    start_k_.upload(p.seqstart_k.data(), start_k_.bytes());
    a.seqstart_k = start_k_.as<int>();
  }
  if (!p.seqused_k.empty()) {
    used_k_ = DeviceBuffer(p.seqused_k.size() * sizeof(int));
    used_k_.upload(p.seqused_k.data(), used_k_.bytes());
    a.seqused_k = used_k_.as<int>();
  }
  if (!p.sinks.empty()) {
    sinks_ = DeviceBuffer(p.sinks.size() * sizeof(float));
    sinks_.upload(p.sinks.data(), sinks_.bytes());
    a.sinks = sinks_.as<float>();
  }
  a.q = q_.get();
  a.k = k_.get();
  a.v = v_.get();
  if (p.v_in_k) {  // V is K's first dv columns: K's buffer and strides (rung 17 reads K alone)
    a.v = k_.get();
    a.v_batch_stride = a.k_batch_stride;
    a.v_row_stride = a.k_row_stride;
    a.v_head_stride = a.k_head_stride;
  }
  a.o = o_.get();
  a.lse = lse_.as<float>();
  a.workspace = ws_.get();
  a.workspace_bytes = workspace_bytes;
  params16_ = a;
}

void DeviceProblem::to_fp8(const Fp8Options& o, unsigned long long seed, bool kv_cache) {
  fp8_ = std::make_unique<DeviceFp8>(p_, params16_, o, seed, kv_cache);
  fp8_->quantize();
  FL_CUDA_CHECK(cudaDeviceSynchronize());
  params_ = fp8_->params();
}

void DeviceProblem::want_o_fp32() {
  if (o32_.bytes() == 0) o32_ = DeviceBuffer(p_.o_elements() * sizeof(float));
  params_.o_fp32 = params16_.o_fp32 = o32_.as<float>();
}

void DeviceProblem::poison_outputs() {
  o_.poison();
  lse_.poison();
  if (o32_.bytes() > 0) o32_.poison();
}

std::vector<uint16_t> DeviceProblem::download_o() const { return download16(o_); }

std::vector<float> DeviceProblem::download_o_fp32() const {
  std::vector<float> o(o32_.bytes() / sizeof(float));
  if (!o.empty()) o32_.download(o.data(), o32_.bytes());
  return o;
}

std::vector<float> DeviceProblem::download_lse() const {
  std::vector<float> l(lse_.bytes() / 4);
  lse_.download(l.data(), lse_.bytes());
  return l;
}

// ---- DeviceGrads ---------------------------------------------------------------

size_t DeviceGrads::device_bytes(const Problem& p, size_t workspace_bytes) {
  // dO (O's dv columns), dQ, dK, dV (V's dv columns), 16-bit.
  return 2 * (p.o_elements() + p.q_elements() + p.kv_elements() + p.v_elements()) + workspace_bytes;
}

DeviceGrads::DeviceGrads(const Problem& p, const DeviceProblem& fwd, const std::vector<uint16_t>& dout,
                         size_t workspace_bytes, bool deterministic) {
  if (p.page_size > 0) throw std::invalid_argument("the backward pass takes a contiguous K/V (no --page-size)");
  if (p.v_in_k) throw std::invalid_argument("the backward pass takes V of its own (no --v-in-k)");
  if (dout.size() != p.o_elements())
    throw std::invalid_argument("dO has " + std::to_string(dout.size()) + " elements, expected " +
                                std::to_string(p.o_elements()));
  dout_ = DeviceBuffer(p.o_elements() * 2);  // like O: dv columns
  dq_ = DeviceBuffer(p.q_elements() * 2);
  dk_ = DeviceBuffer(p.kv_elements() * 2);
  dv_ = DeviceBuffer(p.v_elements() * 2);  // like V: dv columns
  if (workspace_bytes > 0) ws_ = DeviceBuffer(workspace_bytes);
  if (!p.sinks.empty()) dsinks_ = DeviceBuffer(p.sinks.size() * sizeof(float));
  dout_.upload(dout.data(), dout.size() * 2);
  // dO has O's strides, dQ Q's, dK K's and dV V's (backward.h): the forward's params say them.
  params_.fwd = fwd.params();
  params_.dout = dout_.get();
  params_.dq = dq_.get();
  params_.dk = dk_.get();
  params_.dv = dv_.get();
  params_.workspace = ws_.get();
  params_.workspace_bytes = workspace_bytes;
  params_.deterministic = deterministic ? 1 : 0;
  params_.dsinks = static_cast<float*>(dsinks_.get());
}

void DeviceGrads::poison() {
  dq_.poison();
  dk_.poison();
  dv_.poison();
  if (ws_.bytes() > 0) ws_.poison();
  if (dsinks_.bytes() > 0) dsinks_.poison();
}

std::vector<uint16_t> DeviceGrads::download_dq() const { return download16(dq_); }
std::vector<uint16_t> DeviceGrads::download_dk() const { return download16(dk_); }
std::vector<uint16_t> DeviceGrads::download_dv() const { return download16(dv_); }
std::vector<float> DeviceGrads::download_dsinks() const {
  std::vector<float> out(dsinks_.bytes() / sizeof(float));
  if (!out.empty()) dsinks_.download(out.data(), dsinks_.bytes());
  return out;
}

}  // namespace fl
