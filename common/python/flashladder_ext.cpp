/// @file common/python/flashladder_ext.cpp
/// @brief The Python module `flashladder._ext`: the registry, the device query, each rung's
/// `supports` and workspace sizes, and the forward and backward launches, on raw device pointers.
///
/// It never sees a PyTorch tensor: the pure-Python layer (flashladder/) passes each tensor as its
/// data pointer and strides, and the CUDA stream as an integer, so one build serves any PyTorch
/// version (no compile against its C++ ABI). What a launch receives is checked here before it
/// runs, with the same functions the runner uses (fl::validate, fl::supports, the rung's
/// workspace sizes) plus the layout every rung reads (fl::tensor_layout_reason); a refusal is a
/// ValueError whose message is the one-line reason. The GIL is released around each launch.
/// Beside it: ext_params.h (a launch's parameters from the pointers and strides, checked) and
/// ext_ring.cpp (rung 12's plan as Python data).
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ext_params.h"
#include "flashladder/check.h"
#include "flashladder/device.h"
#include "flashladder/dropout_mask.h"
#include "flashladder/fp8_device.h"
#include "flashladder/metadata.h"
#include "flashladder/reference_bwd.h"
#include "flashladder/registry.h"
#include "flashladder/runner.h"
#include "flashladder/static_switch.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fl {

/// Adds ring_plan (rung 12's plan as Python data) to the module: ext_ring.cpp.
void bind_ring_plan(nb::module_& m);

namespace {

using namespace pyext;  // the launch parameters from pointers and strides (ext_params.h)

/// The entry @p number / @p variant, or a ValueError naming what this build has.
const Rung& find_rung(int number, const std::string& variant) {
  if (const Rung* r = registry().find(number, variant)) return *r;
  std::string built;
  for (const Rung& r : registry().all()) built += (built.empty() ? "" : ", ") + r.label();
  throw nb::value_error(("no rung " + std::to_string(number) +
                         (variant.empty() ? std::string() : " variant '" + variant + "'") +
                         " in this build (built: " + built + ")")
                            .c_str());
}

/// Makes device @p index current for its lifetime and restores the previous one, so a launch
/// for a tensor on cuda:1 runs there whatever the calling thread had selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    int current = 0;
    FL_CUDA_CHECK(cudaGetDevice(&current));
    if (current != index) {
      FL_CUDA_CHECK(cudaSetDevice(index));
      previous_ = current;
    }
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// Number of CUDA devices, 0 (never an exception) when there is none or no driver.
int device_count() {
  if (!has_device()) return 0;
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/// "" when a CUDA device exists, else why not ("no usable CUDA device (...)").
std::string no_device_reason() {
  std::string why;
  return has_device(&why) ? "" : "no usable CUDA device (" + why + ")";
}

/// query_device() of device @p index, once per device (a query creates the context and reads
/// the free memory: milliseconds, not for every call). mem_free is the value at that first query.
DeviceInfo device_info(int index) {
  static std::mutex mutex;
  static std::map<int, DeviceInfo> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(index); it != known.end()) return it->second;
  const int n = device_count();
  if (n == 0) throw std::runtime_error(no_device_reason());
  if (index < 0 || index >= n)
    throw nb::value_error(("CUDA device " + std::to_string(index) + " does not exist (" +
                           std::to_string(n) + " device(s))")
                              .c_str());
  DeviceGuard guard(index);
  return known[index] = query_device();
}

/// The reason @p r cannot run @p p on @p d: a lab stub, the problem's own contract
/// (fl::validate), then the generic and the rung's checks (fl::supports). "" if it can.
/// @p fp8: the call passes e4m3 q, k, a transposed V and descales (fp8_forward); @p fp8_kv: a
/// 16-bit q against an e4m3 KV cache with its descales (fp8_kv_forward). Every other launch passes
/// 16-bit tensors, which an FP8 entry would misread, so it refuses them, and each FP8 call refuses
/// the entries that do not read its kind of tensors.
std::string supports_reason(const Rung& r, const Problem& p, const DeviceInfo& d, bool fp8 = false,
                            bool fp8_kv = false) {
  if (!r.not_implemented.empty()) return "not implemented (lab starter): " + r.not_implemented;
  std::string why = validate(p);
  if (why.empty()) why = supports(r, p, d);
  if (why.empty() && r.fp8_kv_cache != fp8_kv)
    why = r.fp8_kv_cache ? "reads an e4m3 KV cache with a 16-bit q (flash_attn_with_kvcache on float8_e4m3fn "
                           "caches), not 16-bit tensors"
                         : "reads no e4m3 KV cache";
  if (why.empty() && fp8_kv) return why;  // the cache's entry: a 16-bit q, whatever fp8_inputs says
  if (why.empty() && r.fp8_inputs && !fp8)
    why = "takes e4m3 q, k, v with their descales (flash_attn_func on float8_e4m3fn tensors), not 16-bit tensors";
  if (why.empty() && !r.fp8_inputs && fp8) why = "takes 16-bit q, k, v, not e4m3";
  return why;
}

/// The append's element kind from its name (metadata.h, AppendElems).
AppendElems append_elems_of(const std::string& name) {
  if (name == "copy16") return AppendElems::copy16;
  if (name == "copy8") return AppendElems::copy8;
  if (name == "fp16_to_e4m3") return AppendElems::fp16_to_e4m3;
  if (name == "bf16_to_e4m3") return AppendElems::bf16_to_e4m3;
  refuse_if("append_cache: elems must be copy16, copy8, fp16_to_e4m3 or bf16_to_e4m3, got '" + name + "'");
  return AppendElems::copy16;
}

/// One registry entry as a dict: what flashladder.rungs() shows.
nb::dict rung_dict(const Rung& r) {
  nb::dict d;
  d["number"] = r.number;
  d["name"] = r.name;
  d["variant"] = r.variant;
  d["label"] = r.label();
  d["summary"] = r.summary;
  d["head_dims"] = r.head_dims;
  d["min_cc"] = r.min_cc;
  d["decode"] = r.decode;
  d["backward"] = static_cast<bool>(r.launch_bwd);
  d["forward_rung"] = r.forward_rung;
  d["writes_o_fp32"] = r.writes_o_fp32;
  d["workspace_kept"] = r.workspace_kept;
  d["fp8_dq"] = r.fp8_dq;
  d["head_dim_v"] = r.head_dim_v;
  d["paged_kv"] = r.paged_kv;
  d["in_tour"] = r.in_tour;
  d["not_implemented"] = r.not_implemented;
  std::vector<std::string> dtypes;
  for (DType t : {DType::fp16, DType::bf16})
    if (dtype_built(t)) dtypes.push_back(dtype_name(t));
  d["dtypes"] = dtypes;
  d["baselines"] = describe_baselines(registry(), r);
  return d;
}

Problem make_problem(int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                     const std::string& dtype, bool causal, float softmax_scale, int num_splits) {
  Problem p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  if (!parse_dtype(dtype, &p.dtype))
    throw nb::value_error(("dtype must be fp16 or bf16, got '" + dtype + "'").c_str());
  p.causal = causal;
  p.softmax_scale = softmax_scale;
  p.num_splits = num_splits;
  return p;
}

/// Makes @p p a packed batch of @p batch sequences, @p total_q query and @p total_k key tokens,
/// the longest @p max_q and @p max_k, without their lengths: what the checks, the routes and the
/// workspaces read (flash_attn_varlen_func's arguments; the lengths stay on the device, in the
/// cu_seqlens given to the launch). The host's cu_seqlens are a stand-in of those totals.
void set_varlen_shape(Problem* p, int batch, int64_t total_q, int64_t total_k, int max_q, int max_k) {
  if (batch < 1 || total_q < 0 || total_k < 0 || max_q < 0 || max_k < 0)
    throw nb::value_error("varlen: batch >= 1 and non-negative totals and maxima");
  if (total_q > int64_t(batch) * max_q || total_k > int64_t(batch) * max_k)
    throw nb::value_error("varlen: more tokens than batch x max_seqlen (max_seqlen_q/k too small)");
  auto stand_in = [batch](int64_t total, int longest) {
    std::vector<int> lens(batch, 0);
    for (int b = 0; b < batch && total > 0; ++b) {
      lens[b] = static_cast<int>(std::min<int64_t>(total, longest));
      total -= lens[b];
    }
    return lens;
  };
  set_varlen(p, stand_in(total_q, max_q), stand_in(total_k, max_k));
  p->seqlen_q = std::max(max_q, 1);
  p->seqlen_k = std::max(max_k, 1);
}

/// The extras a prepared launch of a masked, modified or packed problem takes per call: which of
/// the seven (Extras' order) the problem needs (bit i set: required, non-null) or allows (ALiBi's
/// slopes: null means the paper's), the ints its parameters were made with, and stand-in pointers.
struct PreparedExtras {
  unsigned need = 0, allow = 0;
  std::array<int64_t, 3> ints{0, 0, 0};

  PreparedExtras() = default;
  PreparedExtras(const Problem& p, const std::array<int64_t, 3>& extra_ints) : ints(extra_ints) {
    const bool wanted[7] = {p.varlen(), p.varlen(), !p.sinks.empty(), false, !p.seqused_k.empty(), p.page_size > 0,
                            !p.seqstart_k.empty()};
    for (int i = 0; i < 7; ++i)
      if (wanted[i]) need |= 1u << i;
    allow = need | (p.alibi ? 1u << 3 : 0u);
  }
  /// Extras with a 256-byte aligned stand-in for every pointer the problem needs or allows.
  Extras stand_in() const {
    std::array<uintptr_t, 7> ptrs{};
    for (int i = 0; i < 7; ++i) ptrs[i] = (allow >> i & 1u) ? 256 : 0;
    return extras_of(ptrs, ints);
  }
  /// Whether @p ptrs and @p call_ints fit what the parameters were made with: each needed pointer
  /// non-null, each pointer 4-byte aligned, none the problem does not take, the same ints.
  bool fits(const std::array<uintptr_t, 7>& ptrs, const std::array<int64_t, 3>& call_ints) const {
    if (call_ints != ints) return false;
    for (int i = 0; i < 7; ++i) {
      const bool given = ptrs[i] != 0;
      if ((need >> i & 1u) && !given) return false;
      if (given && (!(allow >> i & 1u) || ptrs[i] % 4 != 0)) return false;
    }
    return true;
  }
  /// Sets the seven pointers in @p a (after fits()).
  static void set(AttnParams* a, const std::array<uintptr_t, 7>& ptrs) {
    a->cu_seqlens_q = reinterpret_cast<const int*>(ptrs[0]);
    a->cu_seqlens_k = reinterpret_cast<const int*>(ptrs[1]);
    a->sinks = reinterpret_cast<const float*>(ptrs[2]);
    a->alibi_slopes = reinterpret_cast<const float*>(ptrs[3]);
    a->seqused_k = reinterpret_cast<const int*>(ptrs[4]);
    a->block_table = reinterpret_cast<const int*>(ptrs[5]);
    a->seqstart_k = reinterpret_cast<const int*>(ptrs[6]);
  }
};

/// Refuses dO, dQ, dK and dV (@p ptr 5 to 8, @p strides 4 to 7) unless each has the strides of O,
/// Q, K and V (ptr and strides 3, 0, 1, 2): the backward kernels index both with one set
/// (backward.h). Every pointer and stride is checked on the way (checked_strides).
void check_grad_strides(const Problem& p, const std::array<uintptr_t, 9>& ptr, const std::array<Strides4, 8>& strides) {
  const char* names[4] = {"dout", "dq", "dk", "dv"};
  const char* like[4] = {"out", "q", "k", "v"};
  const int same[4] = {3, 0, 1, 2};
  const std::array<int64_t, 4> shapes[4] = {q_shape_of(p, p.dv()), q_shape_of(p), kv_shape_of(p),
                                            kv_shape_of(p, 0, p.dv())};
  for (int i = 0; i < 4; ++i) {
    const auto grad = checked_strides(names[i], ptr[5 + i], shapes[i], strides[4 + i]);  // the gradient's first
    const auto its = checked_strides(like[i], ptr[same[i]], shapes[i], strides[same[i]]);
    if (grad != its)
      refuse_if(std::string(names[i]) + " must have the strides of " + like[i] +
                " (the backward kernels index both with one set)");
  }
}

/// True when @p p needs more than a plain prepared launch (the extras, a cache's lengths and
/// starts, pages or V inside K): PreparedForward and PreparedBackward without mods refuse it.
bool beyond_plain(const Problem& p) {
  return p.has_mods() || p.varlen() || !p.seqused_k.empty() || !p.seqstart_k.empty() || p.page_size > 0 || p.v_in_k;
}

/// A forward launch prepared once for one input signature (flashladder._ops' fast path: a call
/// with no mask, modifier or packing and no autograd). The constructor does what every call would
/// repeat: the entry's supports() on the device, the problem's AttnParams, and the strides' checks
/// (against a 16-byte aligned stand-in pointer). A launch then sets the five pointers and the
/// stream; it checks their alignment (the one part of the layout rule a pointer can break) and,
/// when one fails it, launches nothing and returns false, so the caller's full checks say why.
class PreparedForward {
 public:
  /// @p mods: a masked, modified or packed problem (flashladder._ops.Step's launches), whose
  /// extras and dropout state launch_mods() takes per call; @p extra_ints: their ints (as the
  /// forward binding's), which every call must repeat.
  PreparedForward(int number, const std::string& variant, const Problem& p, const std::array<Strides4, 4>& strides,
                  int device, size_t workspace_bytes, bool mods = false,
                  const std::array<int64_t, 3>& extra_ints = {0, 0, 0})
      : rung_(&find_rung(number, variant)), device_(device), workspace_bytes_(workspace_bytes), problem_(p),
        mods_(mods) {
    if (!rung_->launch) refuse_if(rung_->label() + " has no forward launch");
    if (!mods && beyond_plain(p))
      refuse_if("a prepared launch takes no mask, modifier, packing, cache lengths or V inside K (call forward)");
    if (p.v_in_k) refuse_if("a prepared launch takes no V inside K (call forward)");
    refuse_if(supports_reason(*rung_, problem_, device_info(device)));
    constexpr uintptr_t kAligned = 256;  // stands in for the pointers: only the strides are checked here
    if (mods) extras_ = PreparedExtras(problem_, extra_ints);
    params_ = params_for(problem_, {kAligned, kAligned, kAligned, kAligned, kAligned}, strides, extras_.stand_in());
    set_dropout(&params_, problem_, problem_.dropout() ? kAligned : 0);
    params_.dropout.state = nullptr;
  }

  /// A prepared launch of a masked, modified or packed problem (constructed with mods): launch_o32's
  /// pointers (o_fp32 0: none) and the extras (Extras' order) and ints, the dropout state (the
  /// device {seed, offset}; 0 without dropout). False (nothing launched) when one does not fit.
  bool launch_mods(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t o_fp32,
                   const std::array<uintptr_t, 7>& extras, const std::array<int64_t, 3>& extra_ints,
                   uintptr_t dropout_state, uintptr_t workspace, uintptr_t stream, bool workspace_kept = false) const {
    if (!mods_) refuse_if("launch_mods: prepared without mods (call launch)");
    if (o_fp32 != 0 && !rung_->writes_o_fp32) refuse_if(rung_->label() + " writes no fp32 copy of O");
    AttnParams a;
    if (!params_at(q, k, v, o, lse, workspace, workspace_kept, &a) || o_fp32 % 8 != 0 ||
        !extras_.fits(extras, extra_ints) ||
        (problem_.dropout() != (dropout_state != 0)) || dropout_state % 8 != 0)
      return false;
    PreparedExtras::set(&a, extras);
    a.o_fp32 = reinterpret_cast<float*>(o_fp32);
    a.dropout.state = reinterpret_cast<const int64_t*>(dropout_state);
    DeviceGuard guard(device_);
    nb::gil_scoped_release release;
    rung_->launch(a, reinterpret_cast<cudaStream_t>(stream));
    return true;
  }

  /// Launches on @p stream (asynchronous) with q, k, v, out, lse at these addresses and the plan's
  /// workspace (@p workspace_kept: the one the previous launch on @p stream left, which the caller
  /// keeps: AttnParams::workspace_kept, Rung::workspace_kept); false (nothing launched) when a
  /// pointer is null or misaligned.
  bool launch(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t workspace,
              uintptr_t stream, bool workspace_kept = false) const {
    if (mods_) refuse_if("launch: prepared with mods (call launch_mods)");
    AttnParams a;
    if (!params_at(q, k, v, o, lse, workspace, workspace_kept, &a)) return false;
    DeviceGuard guard(device_);
    nb::gil_scoped_release release;
    rung_->launch(a, reinterpret_cast<cudaStream_t>(stream));
    return true;
  }

  /// launch() with O also written in fp32 at @p o_fp32 (the autograd step's forward: the backward's
  /// D reads it); refused where the rung writes no fp32 copy of O (Rung::writes_o_fp32).
  bool launch_o32(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t o_fp32,
                  uintptr_t workspace, uintptr_t stream, bool workspace_kept = false) const {
    if (mods_) refuse_if("launch_o32: prepared with mods (call launch_mods)");
    if (!rung_->writes_o_fp32) refuse_if(rung_->label() + " writes no fp32 copy of O");
    AttnParams a;
    if (!params_at(q, k, v, o, lse, workspace, workspace_kept, &a) || o_fp32 == 0 || o_fp32 % 8 != 0) return false;
    a.o_fp32 = reinterpret_cast<float*>(o_fp32);
    DeviceGuard guard(device_);
    nb::gil_scoped_release release;
    rung_->launch(a, reinterpret_cast<cudaStream_t>(stream));
    return true;
  }

  /// The C++ runner's timing loop (timing.cpp, time_launches: the L2 flushed by cudaMemsetAsync,
  /// a start event, the launch, a stop event; @p iters times after @p warmup launches; the median in
  /// ms) on the default stream, run inside this process: the runner's own loop over these tensors,
  /// so a timing script can tell the process apart from the path between its events. -1 when a
  /// pointer is null or misaligned.
  double time_runner_loop(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t workspace,
                          int iters, int warmup) const {
    if (mods_) refuse_if("time_runner_loop: prepared with mods");
    AttnParams a;
    if (!params_at(q, k, v, o, lse, workspace, false, &a)) return -1.0;
    if (iters < 1 || warmup < 0) refuse_if("time_runner_loop: iters >= 1 and warmup >= 0");
    DeviceGuard guard(device_);
    const DeviceInfo dev = device_info(device_);
    nb::gil_scoped_release release;
    return time_launches([&] { rung_->launch(a, nullptr); }, dev, iters, warmup).median_ms;
  }

  size_t workspace_bytes() const { return workspace_bytes_; }
  bool workspace_kept() const { return rung_->workspace_kept; }
  std::string label() const { return rung_->label(); }
  bool lse_optional() const { return rung_->lse_optional; }
  bool writes_o_fp32() const { return rung_->writes_o_fp32; }

 private:
  /// The prepared parameters with these addresses in @p a; false when a pointer is null or
  /// misaligned (16 bytes; the LSE 4). The LSE may be null where the rung stores none then
  /// (Rung::lse_optional).
  bool params_at(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t workspace,
                 bool workspace_kept, AttnParams* a) const {
    if (q == 0 || k == 0 || v == 0 || o == 0 || (lse == 0 && !rung_->lse_optional) ||
        ((q | k | v | o) % 16) != 0 || lse % 4 != 0)
      return false;
    if (workspace_bytes_ > 0 && workspace == 0) refuse_if("workspace: the rung needs " +
                                                          std::to_string(workspace_bytes_) + " bytes, got none");
    *a = params_;
    a->q = reinterpret_cast<const void*>(q);
    a->k = reinterpret_cast<const void*>(k);
    a->v = reinterpret_cast<const void*>(v);
    a->o = reinterpret_cast<void*>(o);
    a->lse = reinterpret_cast<float*>(lse);
    a->workspace = reinterpret_cast<void*>(workspace);
    a->workspace_bytes = workspace_bytes_;
    a->workspace_kept = workspace_kept && rung_->workspace_kept ? 1 : 0;
    return true;
  }

  const Rung* rung_;
  int device_;
  size_t workspace_bytes_;
  Problem problem_;  // the parameters may point into it (a document mask's starts): kept with them
  bool mods_;
  PreparedExtras extras_;
  AttnParams params_{};
};

/// A backward launch prepared once for one input signature and deterministic flag
/// (flashladder._launch.Prepared: the autograd step of plain attention). The constructor does what
/// the backward binding repeats per call: supports() and bwd_supports() on the device, the
/// problem's parameters, and the strides' checks (dO like O, dQ like Q, dK like K, dV like V; against
/// 16-byte aligned stand-in pointers). A launch sets the eleven pointers and the stream; when one
/// is null or misaligned it launches nothing and returns false, so the caller's checked path says why.
class PreparedBackward {
 public:
  /// @p mods, @p extra_ints: as PreparedForward's (launch_mods takes the extras, the sinks'
  /// gradient and the dropout state per call).
  PreparedBackward(int number, const std::string& variant, const Problem& problem,
                   const std::array<Strides4, 8>& strides, int device, size_t workspace_bytes, bool deterministic,
                   bool mods = false, const std::array<int64_t, 3>& extra_ints = {0, 0, 0})
      : rung_(&find_rung(number, variant)), device_(device), problem_(problem), mods_(mods) {
    const Problem& p = problem_;
    if (!rung_->launch_bwd) refuse_if(rung_->label() + " has no backward pass");
    if (!mods && beyond_plain(p))
      refuse_if("a prepared backward takes no mask, modifier, packing, cache lengths or V inside K (call backward)");
    if (p.v_in_k) refuse_if("v_in_k: the backward pass takes V of its own (MLA's latent cache is forward only)");
    refuse_if(supports_reason(*rung_, p, device_info(device)));
    if (rung_->bwd_supports) refuse_if(rung_->bwd_supports(p, deterministic));
    const size_t need = rung_->bwd_workspace_bytes ? rung_->bwd_workspace_bytes(p, deterministic) : 0;
    if (workspace_bytes < need)
      refuse_if("workspace: the rung needs " + std::to_string(need) + " bytes, got " + std::to_string(workspace_bytes));
    constexpr uintptr_t kAligned = 256;  // stands in for the pointers: only the strides are checked here
    if (mods) extras_ = PreparedExtras(p, extra_ints);
    b_.fwd = params_for(p, {kAligned, kAligned, kAligned, kAligned, kAligned},
                        {strides[0], strides[1], strides[2], strides[3]}, extras_.stand_in());
    set_dropout(&b_.fwd, p, p.dropout() ? kAligned : 0);  // the state: launch_mods' (the forward's)
    b_.fwd.dropout.state = nullptr;
    check_grad_strides(p, {kAligned, kAligned, kAligned, kAligned, kAligned, kAligned, kAligned, kAligned, kAligned},
                       strides);
    b_.workspace_bytes = workspace_bytes;
    b_.deterministic = deterministic ? 1 : 0;
  }

  /// Launches on @p stream (asynchronous); false (nothing launched) when a pointer is null or
  /// misaligned (16 bytes; the LSE 4, the fp32 O 8; o_fp32 0: D from the 16-bit O).
  bool launch(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dout, uintptr_t dq,
              uintptr_t dk, uintptr_t dv, uintptr_t o_fp32, uintptr_t workspace, uintptr_t stream) const {
    if (mods_) refuse_if("launch: prepared with mods (call launch_mods)");
    return launch_at(q, k, v, o, lse, dout, dq, dk, dv, o_fp32, workspace, stream, nullptr);
  }

  /// launch() of a masked, modified or packed problem (constructed with mods): the extras
  /// (Extras' order) and ints, the sinks' gradient (fp32 [heads_q], where the problem has sinks;
  /// else 0) and the dropout state (the forward's; 0 without dropout). False (nothing launched)
  /// when one does not fit.
  bool launch_mods(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dout, uintptr_t dq,
                   uintptr_t dk, uintptr_t dv, uintptr_t o_fp32, const std::array<uintptr_t, 7>& extras,
                   const std::array<int64_t, 3>& extra_ints, uintptr_t dsinks, uintptr_t dropout_state,
                   uintptr_t workspace, uintptr_t stream) const {
    if (!mods_) refuse_if("launch_mods: prepared without mods (call launch)");
    const bool sinks = !problem_.sinks.empty();
    if (!extras_.fits(extras, extra_ints) || sinks != (dsinks != 0) || dsinks % 4 != 0 ||
        problem_.dropout() != (dropout_state != 0) || dropout_state % 8 != 0)
      return false;
    auto set = [&](AttnBwdParams* b) {
      PreparedExtras::set(&b->fwd, extras);
      b->dsinks = reinterpret_cast<float*>(dsinks);
      b->fwd.dropout.state = reinterpret_cast<const int64_t*>(dropout_state);
    };
    return launch_at(q, k, v, o, lse, dout, dq, dk, dv, o_fp32, workspace, stream, set);
  }

  size_t workspace_bytes() const { return b_.workspace_bytes; }
  std::string label() const { return rung_->label(); }

 private:
  template <class Set>
  bool launch_at(uintptr_t q, uintptr_t k, uintptr_t v, uintptr_t o, uintptr_t lse, uintptr_t dout, uintptr_t dq,
                 uintptr_t dk, uintptr_t dv, uintptr_t o_fp32, uintptr_t workspace, uintptr_t stream,
                 const Set& set) const {
    if (!q || !k || !v || !o || !lse || !dout || !dq || !dk || !dv || ((q | k | v | o | dout | dq | dk | dv) % 16) ||
        lse % 4 || o_fp32 % 8 || (b_.workspace_bytes > 0 && workspace == 0))
      return false;
    AttnBwdParams b = b_;
    if constexpr (!std::is_same<Set, std::nullptr_t>::value) set(&b);
    b.fwd.q = reinterpret_cast<const void*>(q);
    b.fwd.k = reinterpret_cast<const void*>(k);
    b.fwd.v = reinterpret_cast<const void*>(v);
    b.fwd.o = reinterpret_cast<void*>(o);
    b.fwd.lse = reinterpret_cast<float*>(lse);
    b.fwd.o_fp32 = reinterpret_cast<float*>(o_fp32);
    b.dout = reinterpret_cast<const void*>(dout);
    b.dq = reinterpret_cast<void*>(dq);
    b.dk = reinterpret_cast<void*>(dk);
    b.dv = reinterpret_cast<void*>(dv);
    b.workspace = reinterpret_cast<void*>(workspace);
    DeviceGuard guard(device_);
    nb::gil_scoped_release release;
    rung_->launch_bwd(b, reinterpret_cast<cudaStream_t>(stream));
    return true;
  }

  const Rung* rung_;
  int device_;
  Problem problem_;  // the parameters may point into it (a document mask's starts): kept with them
  bool mods_;
  PreparedExtras extras_;
  AttnBwdParams b_{};
};

/// A serving call prepared once for one signature (flashladder._kvcache's fast path): a
/// flash_attn_with_kvcache step as one binding call, its launches queued back to back with no
/// Python between them: one kernel for the metadata check (the lengths, left padding and block
/// table clamped into a scratch buffer, a violation recorded) and the append of the new keys
/// (sanitize_and_append), then the rung's forward on the clamped copies. The constructor does what every
/// call would repeat, as PreparedForward's: supports() on the device, the AttnParams, the strides'
/// checks; a launch sets the pointers and checks their alignment, and returns false (nothing
/// launched) when one fails it, so the caller's checked path says why.
class PreparedCacheCall {
 public:
  /// @p strides: q, the rung's k and v (a paged pool as its [1, rows, heads, head_dim] view), out;
  /// @p ints: alibi_batch_stride, the sanitized table's columns, the pool's rows; @p cache:
  /// batch, new keys, slots, page (0: contiguous), pool pages (a contiguous cache's rows), table
  /// columns (0: none), heads_kv, head_dim; @p append: the new keys', the key cache's, the new
  /// values' and the value cache's strides (each 4, elements). @p fp8_kv: an e4m3 cache (the
  /// entry reads it with a 16-bit q, each launch passes the descales); @p elems: the append's
  /// element kind (metadata.h, AppendElems).
  PreparedCacheCall(int number, const std::string& variant, const Problem& p, const std::array<Strides4, 4>& strides,
                    const std::array<int64_t, 3>& ints, const std::array<int64_t, 8>& cache,
                    const std::array<Strides4, 4>& append, int device, size_t workspace_bytes,
                    const std::string& elems, bool fp8_kv)
      : rung_(&find_rung(number, variant)),
        device_(device),
        workspace_bytes_(workspace_bytes),
        append_(append),
        elems_(append_elems_of(elems)),
        fp8_kv_(fp8_kv) {
    if (!rung_->launch) refuse_if(rung_->label() + " has no forward launch");
    if (p.varlen() || p.dropout() || p.seqused_k.empty() || p.v_in_k)
      refuse_if("a prepared cache call takes a cache's lengths, no packing, dropout or V inside K (call forward)");
    if ((elems_ != AppendElems::copy16) != fp8_kv)
      refuse_if("a prepared cache call: a 16-bit cache copies 16-bit keys, an e4m3 cache takes e4m3 or quantized ones");
    refuse_if(supports_reason(*rung_, p, device_info(device), false, fp8_kv));
    batch_ = static_cast<int>(cache[0]);
    new_keys_ = static_cast<int>(cache[1]);
    slots_ = cache[2];
    page_ = static_cast<int>(cache[3]);
    pool_pages_ = cache[4];
    columns_ = static_cast<int>(cache[5]);
    heads_kv_ = static_cast<int>(cache[6]);
    head_dim_ = static_cast<int>(cache[7]);
    if (batch_ != p.batch || new_keys_ < 0 || new_keys_ > slots_ || (page_ > 0) != (columns_ > 0) ||
        (p.page_size > 0 && page_ == 0))
      refuse_if("a prepared cache call: the cache's geometry does not match the problem");
    leftpad_ = !p.seqstart_k.empty();
    sinks_ = !p.sinks.empty();
    slopes_ = p.alibi;
    paged_read_ = p.page_size > 0;
    // Stand-ins for the pointers (only the strides are checked here): 256 is aligned for all.
    constexpr uintptr_t kAligned = 256;
    Extras e;
    e.sinks = sinks_ ? kAligned : 0;
    e.alibi_slopes = slopes_ ? kAligned : 0;
    e.seqused_k = kAligned;
    e.block_table = paged_read_ ? kAligned : 0;
    e.seqstart_k = leftpad_ ? kAligned : 0;
    e.alibi_batch_stride = static_cast<int>(ints[0]);
    e.block_table_stride = static_cast<int>(ints[1]);
    e.pool_rows = ints[2];
    params_ = params_for(p, {kAligned, kAligned, kAligned, kAligned, kAligned}, strides, e);
    if (rung_->split_counters) {  // rung 08's plan on this device: its splits merged without kernel 2
      DeviceGuard guard(device_);
      const long long n = rung_->split_counters(p);
      if (n < 0 || n > (1 << 24)) refuse_if("a prepared cache call: " + std::to_string(n) + " split counters");
      counters_ = static_cast<int>(n);
    }
  }

  /// Ints of scratch (int32) a launch needs: the clamped lengths before and after the append, the
  /// left padding and the table, then the rung's split counters (Rung::split_counters: zeroed by
  /// the check's launch, counted by the split kernel, whose last CTA per tile merges the splits).
  int64_t scratch_ints() const { return 3 * int64_t(batch_) + int64_t(batch_) * columns_ + counters_; }

  /// The step on @p stream: q, the caches as the rung reads them (@p k_read, @p v_read) and as the
  /// append writes them (@p k_cache, @p v_cache: the same memory), out, lse, the workspace, the
  /// caller's lengths (int32 [batch]), left padding and block table (0 each when unused; the
  /// table's row stride @p table_stride), the new keys and values (0 without), sinks, slopes and
  /// the int32 scratch (scratch_ints()). An e4m3 cache's descales: @p k_descale and @p v_descale the
  /// cache's (the append quantizes with them), @p scores_k_descale the one the scores take (k's, or
  /// q_descale x k_descale for an e4m3 q). False (nothing launched) on a null or misaligned pointer.
  bool launch(uintptr_t q, uintptr_t k_read, uintptr_t v_read, uintptr_t o, uintptr_t lse, uintptr_t workspace,
              uintptr_t seqlens, uintptr_t leftpad, uintptr_t table, int64_t table_stride, uintptr_t k_new,
              uintptr_t v_new, uintptr_t sinks, uintptr_t slopes, uintptr_t scratch, uintptr_t stream,
              uintptr_t k_descale, uintptr_t v_descale, uintptr_t scores_k_descale) const {
    auto aligned4 = [](uintptr_t x) { return x % 4 == 0; };
    const bool descales = k_descale != 0 && v_descale != 0 && scores_k_descale != 0 &&
                          aligned4(k_descale | v_descale | scores_k_descale);
    if (fp8_kv_ != descales || (!fp8_kv_ && (k_descale | v_descale | scores_k_descale) != 0)) return false;
    if (q == 0 || k_read == 0 || v_read == 0 || o == 0 || lse == 0 || seqlens == 0 || scratch == 0 ||
        ((q | k_read | v_read | o) % 16) != 0 || !aligned4(lse | seqlens | leftpad | table | sinks | slopes | scratch) ||
        (leftpad != 0) != leftpad_ || (table != 0) != (columns_ > 0) || (sinks != 0) != sinks_ ||
        (slopes != 0) != slopes_ || ((k_new != 0) != (new_keys_ > 0)) || ((v_new != 0) != (new_keys_ > 0)) ||
        (workspace_bytes_ > 0 && workspace == 0))
      return false;
    int* out_seqlens = reinterpret_cast<int*>(scratch);
    int* out_used = out_seqlens + batch_;
    int* out_leftpad = out_used + batch_;
    int* out_table = out_leftpad + batch_;
    int* counters = counters_ > 0 ? out_table + int64_t(batch_) * columns_ : nullptr;
    AttnParams a = params_;
    a.q = reinterpret_cast<const void*>(q);
    a.k = reinterpret_cast<const void*>(k_read);
    a.v = reinterpret_cast<const void*>(v_read);
    a.o = reinterpret_cast<void*>(o);
    a.lse = reinterpret_cast<float*>(lse);
    a.workspace = reinterpret_cast<void*>(workspace);
    a.workspace_bytes = workspace_bytes_;
    a.seqused_k = out_used;
    a.seqstart_k = leftpad_ ? out_leftpad : nullptr;
    a.block_table = paged_read_ ? out_table : nullptr;
    a.sinks = reinterpret_cast<const float*>(sinks);
    a.alibi_slopes = reinterpret_cast<const float*>(slopes);
    a.k_descale = reinterpret_cast<const float*>(scores_k_descale);
    a.v_descale = reinterpret_cast<const float*>(v_descale);
    a.split_counters = counters;
    DeviceGuard guard(device_);
    const MetadataSink sink = metadata_sink(device_);
    const auto st = reinterpret_cast<cudaStream_t>(stream);
    const int* raw_lengths = reinterpret_cast<const int*>(seqlens);
    const int* raw_table = reinterpret_cast<const int*>(table);
    nb::gil_scoped_release release;
    fl::sanitize_and_append(raw_lengths, new_keys_, batch_, slots_, reinterpret_cast<const int*>(leftpad), raw_table,
                            columns_, table_stride, page_, pool_pages_, out_seqlens, out_used,
                            leftpad_ ? out_leftpad : nullptr, columns_ > 0 ? out_table : nullptr,
                            reinterpret_cast<const void*>(k_new), append_[0].data(), reinterpret_cast<void*>(k_read),
                            append_[1].data(), reinterpret_cast<const void*>(v_new), append_[2].data(),
                            reinterpret_cast<void*>(v_read), append_[3].data(), heads_kv_, head_dim_, sink, st, elems_,
                            reinterpret_cast<const float*>(k_descale), reinterpret_cast<const float*>(v_descale),
                            counters, counters_);
    rung_->launch(a, st);
    return true;
  }

  size_t workspace_bytes() const { return workspace_bytes_; }
  std::string label() const { return rung_->label(); }

 private:
  const Rung* rung_;
  int device_;
  size_t workspace_bytes_;
  std::array<Strides4, 4> append_;
  AppendElems elems_ = AppendElems::copy16;
  bool fp8_kv_ = false;
  int batch_ = 0, new_keys_ = 0, page_ = 0, columns_ = 0, heads_kv_ = 0, head_dim_ = 0, counters_ = 0;
  int64_t slots_ = 0, pool_pages_ = 0;
  bool leftpad_ = false, sinks_ = false, slopes_ = false, paged_read_ = false;
  AttnParams params_{};
};

}  // namespace
}  // namespace fl

NB_MODULE(_ext, m) {
  using namespace fl;
  m.doc() = "FlashLadder's rungs on raw CUDA pointers (the flashladder package wraps it for PyTorch)";
  m.attr("MAX_HEAD_DIM") = kMaxHeadDim;
  m.attr("MLA_HEAD_DIM") = kMlaHeadDim;      // MLA's latent cache: Q and K (problem.h)
  m.attr("MLA_HEAD_DIM_V") = kMlaHeadDimV;   // its values, the cache rows' first columns

  nb::class_<DeviceInfo>(m, "DeviceInfo",
                         "What a rung's supports() reads about a GPU; build one by hand to ask "
                         "about a GPU this machine does not have")
      .def(nb::init<>())
      .def_rw("name", &DeviceInfo::name)
      .def_rw("cc_major", &DeviceInfo::cc_major)
      .def_rw("cc_minor", &DeviceInfo::cc_minor)
      .def_rw("sm_count", &DeviceInfo::sm_count)
      .def_rw("clock_khz", &DeviceInfo::clock_khz)
      .def_rw("smem_per_block_optin", &DeviceInfo::smem_per_block_optin)
      .def_rw("smem_per_sm", &DeviceInfo::smem_per_sm)
      .def_rw("regs_per_sm", &DeviceInfo::regs_per_sm)
      .def_rw("l2_bytes", &DeviceInfo::l2_bytes)
      .def_rw("mem_total", &DeviceInfo::mem_total)
      .def_rw("mem_free", &DeviceInfo::mem_free)
      .def_rw("peak_fp32_tflops", &DeviceInfo::peak_fp32_tflops)
      .def_rw("peak_tensor_tflops", &DeviceInfo::peak_tensor_tflops)
      .def_rw("peak_gbps", &DeviceInfo::peak_gbps)
      .def_rw("cuda_runtime_version", &DeviceInfo::cuda_runtime_version)
      .def_rw("driver_version", &DeviceInfo::driver_version)
      .def_prop_ro("arch", &DeviceInfo::arch)
      .def("__repr__", [](const DeviceInfo& d) {
        return "DeviceInfo(" + d.name + ", " + d.arch() + ", " + std::to_string(d.sm_count) + " SMs)";
      });

  nb::class_<Problem>(m, "Problem", "One attention problem (the runner's fl::Problem)")
      .def(nb::init<>())
      .def("__init__",
           [](Problem* self, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv,
              int head_dim, const std::string& dtype, bool causal, float softmax_scale,
              int num_splits) {
             new (self) Problem(make_problem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim,
                                             dtype, causal, softmax_scale, num_splits));
           },
           "batch"_a, "seqlen_q"_a, "seqlen_k"_a, "heads_q"_a, "heads_kv"_a, "head_dim"_a,
           "dtype"_a = "fp16", "causal"_a = false, "softmax_scale"_a = 0.0f, "num_splits"_a = 0)
      .def_rw("batch", &Problem::batch)
      .def_rw("seqlen_q", &Problem::seqlen_q)
      .def_rw("seqlen_k", &Problem::seqlen_k)
      .def_rw("heads_q", &Problem::heads_q)
      .def_rw("heads_kv", &Problem::heads_kv)
      .def_rw("head_dim", &Problem::head_dim)
      .def_rw("head_dim_v", &Problem::head_dim_v, "V's and O's head_dim (0: head_dim; --dim-v)")
      .def_prop_ro("dv", &Problem::dv, "V's and O's head_dim: head_dim_v, or head_dim when 0")
      .def_rw("v_in_k", &Problem::v_in_k,
              "V is K's first dv columns (MLA's latent cache, --v-in-k): a launch's v must be a view of k's "
              "first columns, the same pointer and strides")
      .def_prop_rw(
          "dtype", [](const Problem& p) { return std::string(dtype_name(p.dtype)); },
          [](Problem& p, const std::string& s) {
            if (!parse_dtype(s, &p.dtype))
              throw nb::value_error(("dtype must be fp16 or bf16, got '" + s + "'").c_str());
          })
      .def_rw("causal", &Problem::causal)
      .def_rw("softmax_scale", &Problem::softmax_scale)
      .def_rw("num_splits", &Problem::num_splits)
      .def_rw("window_left", &Problem::window_left)
      .def_rw("window_right", &Problem::window_right)
      .def_rw("prefix", &Problem::prefix)
      .def_rw("softcap", &Problem::softcap)
      .def_rw("alibi", &Problem::alibi)
      .def_rw("dropout_p", &Problem::dropout_p)
      .def_prop_rw(
          "sinks", [](const Problem& p) { return !p.sinks.empty(); },
          [](Problem& p, bool on) { p.sinks.assign(on ? p.heads_q : 0, 0.f); },
          "attention sinks on (their values stay on the device; set after heads_q)")
      .def("set_varlen", &set_varlen_shape, "batch"_a, "total_q"_a, "total_k"_a, "max_q"_a, "max_k"_a,
           "a packed batch of these totals and maxima (flash_attn_varlen_func's)")
      .def_prop_ro("varlen", &Problem::varlen)
      .def_rw("page_size", &Problem::page_size)
      .def_prop_rw(
          "seqused_k", [](const Problem& p) { return !p.seqused_k.empty(); },
          [](Problem& p, bool on) { p.seqused_k.assign(on ? p.batch : 0, 0); },
          "keys used per sequence on (their counts stay on the device; set after batch and set_varlen)")
      .def_prop_rw(
          "seqstart_k", [](const Problem& p) { return !p.seqstart_k.empty(); },
          [](Problem& p, bool on) { p.seqstart_k.assign(on ? p.batch : 0, 0); },
          "first key slots per sequence on (a left-padded cache; on the device; set after batch)")
      .def("scale", &Problem::scale, "softmax_scale, or 1/sqrt(head_dim) when it is 0")
      .def("describe", &Problem::describe)
      .def("__repr__", &Problem::describe);

  m.def(
      "rungs",
      [] {
        std::vector<nb::dict> out;
        for (const Rung& r : registry().all()) out.push_back(rung_dict(r));
        return out;
      },
      "Every registered entry (rungs and their variants), in ladder order, as dicts");

  m.def(
      "tolerance_floor",
      [](const std::string& dtype, bool gradients, bool fp8) {
        DType t;
        if (!parse_dtype(dtype, &t))
          throw nb::value_error(("dtype must be fp16 or bf16, got '" + dtype + "'").c_str());
        const Tolerance f = fp8 ? (gradients ? gradient_tolerance_floor_fp8(t) : tolerance_floor_fp8(t))
                                : gradients ? gradient_tolerance_floor(t) : tolerance_floor(t);
        nb::dict d;
        d["rel_fro"] = f.rel_fro;
        d["max_abs"] = f.max_abs;
        d["lse_abs"] = f.lse_abs;
        d["lse_rel"] = f.lse_rel;
        return d;
      },
      "dtype"_a, "gradients"_a = false, "fp8"_a = false,
      "The ladder's per-dtype tolerance floors (check.h; gradients: reference_bwd.h; fp8: an FP8 rung's "
      "output of that dtype, tolerance_floor_fp8, or with gradients a gradient from e4m3 operands, "
      "gradient_tolerance_floor_fp8): relative Frobenius, max abs (scaled by max(1, max |ref|)), "
      "LSE max abs and LSE relative (of max |LSE|)");

  m.def("device_count", &device_count, "CUDA devices visible (0, never an error, without one)");
  m.def("no_device_reason", &no_device_reason,
        "'' when a CUDA device exists, else why not (no device, no driver)");
  m.def("device_info", &device_info, "index"_a = 0,
        "The device as the runner sees it (queried once per device); RuntimeError without one");
  m.def(
      "flush_l2",
      [](uintptr_t buf, size_t bytes, uintptr_t stream, int device) {
        if (buf == 0 || bytes == 0) throw nb::value_error("flush_l2: a buffer and its bytes");
        DeviceGuard guard(device);
        L2Flusher::flush_buffer(reinterpret_cast<void*>(buf), bytes, reinterpret_cast<cudaStream_t>(stream));
      },
      "buf"_a, "bytes"_a, "stream"_a, "device"_a,
      "The runner's L2 flush (common/src/device.cpp, L2Flusher): bytes zeros written at buf on the "
      "stream with cudaMemsetAsync (asynchronous); the timing scripts flush the way the runner does");

  m.def(
      "time_runner_case",
      [](int number, const std::string& variant, const Problem& p, int iters, int warmup, int device,
         unsigned long long seed) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch) refuse_if(r.label() + " has no forward launch");
        if (iters < 1 || warmup < 0) refuse_if("time_runner_case: iters >= 1 and warmup >= 0");
        refuse_if(supports_reason(r, p, device_info(device)));
        DeviceGuard guard(device);
        const DeviceInfo dev = device_info(device);
        const HostInputs in = make_inputs(p, InputKind::random, seed);
        nb::gil_scoped_release release;
        FwdCase c(r, p, in, seed);  // the runner's run_one_fwd: its inputs, its buffers, one launch
        c.launch();
        return c.time(dev, iters, warmup).median_ms;
      },
      "number"_a, "variant"_a, "problem"_a, "iters"_a, "warmup"_a, "device"_a = 0, "seed"_a = 2024,
      "The C++ runner's forward case, whole, inside this process: its inputs (make_inputs, random: "
      "N(0,1) + 0.25 for Q and K, + 0.5 for V), its own device buffers, one launch, then its timing "
      "loop (time_launches); the median in ms. A timing script compares it with the runner binary "
      "(the process) and with the same loop over its own tensors (the inputs and their memory)");

  m.def(
      "grid_ctas",
      [](int number, const std::string& variant, const Problem& p, const DeviceInfo& d) -> long long {
        const Rung& r = find_rung(number, variant);
        return r.grid_ctas ? r.grid_ctas(p, d) : -1;
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a,
      "CTAs the entry's launch starts for the problem on the device (-1: the entry does not say)");
  m.def(
      "supports",
      [](int number, const std::string& variant, const Problem& p, const DeviceInfo& d) {
        return supports_reason(find_rung(number, variant), p, d);
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a,
      "'' if the entry can run the problem on the device, else its one-line reason");
  m.def(
      "supports",
      [](int number, const std::string& variant, const Problem& p, int device) {
        return supports_reason(find_rung(number, variant), p, device_info(device));
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a = 0);

  m.def(
      "bwd_supports",
      [](int number, const std::string& variant, const Problem& p, bool deterministic) -> std::string {
        const Rung& r = find_rung(number, variant);
        if (!r.launch_bwd) return r.label() + " has no backward pass";
        return r.bwd_supports ? r.bwd_supports(p, deterministic) : "";
      },
      "number"_a, "variant"_a, "problem"_a, "deterministic"_a = false,
      "'' if the entry's backward pass takes the problem (beyond supports: its own limits), else why not");

  m.def(
      "layout_reason",
      [](const std::string& name, uintptr_t ptr, const std::array<int64_t, 4>& shape,
         const Strides4& strides) { return layout_reason(name, ptr, shape, strides); },
      "name"_a, "data_ptr"_a, "shape"_a, "strides"_a,
      "'' if a [batch, seqlen, heads, head_dim] tensor with this pointer and these strides "
      "(elements) can be read by every rung, else why not");

  m.def(
      "workspace_bytes",
      [](int number, const std::string& variant, const Problem& p, int device) {
        const Rung& r = find_rung(number, variant);
        const DeviceInfo d = device_info(device);
        refuse_if(supports_reason(r, p, d));
        DeviceGuard guard(device);  // rung 08 sizes its splits from the current device
        return forward_workspace_bytes(r, p);
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a = 0,
      "Bytes of scratch the forward pass needs (ValueError with the reason if it cannot run)");

  m.def(
      "bwd_workspace_bytes",
      [](int number, const std::string& variant, const Problem& p, bool deterministic, int device) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch_bwd) refuse_if(r.label() + " has no backward pass");
        refuse_if(supports_reason(r, p, device_info(device)));
        if (r.bwd_supports) refuse_if(r.bwd_supports(p, deterministic));
        return r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : size_t{0};
      },
      "number"_a, "variant"_a, "problem"_a, "deterministic"_a = false, "device"_a = 0,
      "Bytes of scratch the backward pass needs");

  m.def(
      "bwd_reads_o_fp32",
      [](int number, const std::string& variant, const Problem& p) {
        const Rung& r = find_rung(number, variant);
        return r.bwd_reads_o_fp32 && r.bwd_reads_o_fp32(p);
      },
      "number"_a, "variant"_a, "problem"_a,
      "Whether the backward's D reads the forward's fp32 O on this problem (Rung::bwd_reads_o_fp32: the "
      "16-bit O on short rows, the exact pass on the longest, delta_policy.h); the autograd "
      "forward writes it only then");

  m.def(
      "forward",
      [](int number, const std::string& variant, const Problem& p, const std::array<uintptr_t, 5>& ptr,
         const std::array<Strides4, 4>& strides, uintptr_t workspace, size_t workspace_bytes,
         uintptr_t stream, int device, uintptr_t o_fp32, const std::array<uintptr_t, 7>& extras,
         const std::array<int64_t, 3>& extra_ints, uintptr_t dropout_state, bool planned) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch) refuse_if(r.label() + " has no forward launch");
        // planned: the caller's plan (flashladder._core.plan_forward) already asked supports and
        // workspace_bytes for this Problem on this device; the per-call checks below remain.
        if (!planned) refuse_if(supports_reason(r, p, device_info(device)));
        if (o_fp32 != 0 && !r.writes_o_fp32) refuse_if(r.label() + " writes no fp32 copy of O");
        AttnParams a = params_for(p, ptr, strides, extras_of(extras, extra_ints));
        set_dropout(&a, p, dropout_state);
        a.o_fp32 = fp32_o_pointer(o_fp32);
        DeviceGuard guard(device);
        if (!planned) check_workspace(workspace, workspace_bytes, forward_workspace_bytes(r, p));
        else if (workspace_bytes > 0 && workspace == 0) refuse_if("workspace: null");
        a.workspace = reinterpret_cast<void*>(workspace);
        a.workspace_bytes = workspace_bytes;
        nb::gil_scoped_release release;
        r.launch(a, reinterpret_cast<cudaStream_t>(stream));
      },
      "number"_a, "variant"_a, "problem"_a, "ptrs"_a, "strides"_a, "workspace"_a,
      "workspace_bytes"_a, "stream"_a, "device"_a, "o_fp32"_a = 0,
      "extras"_a = std::array<uintptr_t, 7>{0, 0, 0, 0, 0, 0, 0}, "extra_ints"_a = std::array<int64_t, 3>{0, 0, 0},
      "dropout_state"_a = 0, "planned"_a = false,
      "Launches the entry's forward pass (asynchronous, on the stream). ptrs: q, k, v, out, lse "
      "(fp32 [batch, heads_q, seqlen_q], contiguous; packed: [heads_q, total_q]); strides: q, k, "
      "v, out (4 each, elements; packed: of the [1, tokens, heads, head_dim] view); o_fp32: 0, or "
      "a dense fp32 buffer like out for O before its rounding (entries with writes_o_fp32); "
      "extras: cu_seqlens_q, cu_seqlens_k (int32), sinks, alibi_slopes (fp32), seqused_k, block_table "
      "(int32), seqstart_k (int32) or 0 each; extra_ints: alibi_batch_stride, block_table_stride, the page pool's rows; "
      "dropout_state: with dropout (Problem.dropout_p > 0), the device int64 {seed, offset} the kernels read; "
      "planned: the problem was checked and the workspace sized by the caller's plan (supports, "
      "workspace_bytes), so neither is asked again");

  // ---- FP8 from PyTorch (rung 13): the package's quantize, V's transpose and the launch ---------
  m.def(
      "fp8_quantize",
      [](uintptr_t x, const std::string& dtype, const std::array<int, 4>& shape, const std::array<int64_t, 3>& strides,
         int heads_kv, bool hadamard, unsigned long long seed, uintptr_t out, uintptr_t amax, uintptr_t descale,
         uintptr_t stream, int device) {
        DType t;
        if (!parse_dtype(dtype, &t)) refuse_if("fp8_quantize: x must be fp16 or bf16, got '" + dtype + "'");
        if (!x || !out || !amax || !descale) refuse_if("fp8_quantize: a null pointer");
        if (shape[3] != 64 && shape[3] != 128 && shape[3] != 256)
          refuse_if("fp8_quantize: head_dim must be 64, 128 or 256 (one warp per row), got " + std::to_string(shape[3]));
        if (heads_kv < 1 || shape[2] % heads_kv != 0)
          refuse_if("fp8_quantize: heads (" + std::to_string(shape[2]) + ") must be a multiple of num_heads_kv (" +
                    std::to_string(heads_kv) + ")");
        DeviceGuard guard(device);
        nb::gil_scoped_release release;
        quantize_e4m3(reinterpret_cast<const void*>(x), t, shape[0], shape[1], shape[2], shape[3], strides.data(),
                      heads_kv, hadamard, seed, reinterpret_cast<uint8_t*>(out), reinterpret_cast<float*>(amax),
                      reinterpret_cast<float*>(descale), reinterpret_cast<cudaStream_t>(stream));
      },
      "x"_a, "dtype"_a, "shape"_a, "strides"_a, "heads_kv"_a, "hadamard"_a, "seed"_a, "out"_a, "amax"_a, "descale"_a,
      "stream"_a, "device"_a,
      "x (16-bit [batch, seqlen, heads, head_dim], strides: batch, row, head in elements) to dense e4m3 at out, "
      "one descale (amax / 448) per (batch, KV head) at descale (fp32 [batch, heads_kv]); amax: scratch of as "
      "many floats; hadamard: rows rotated first (fp8_device.h, quantize_e4m3). Asynchronous");
  m.def("fp8_vt_seqlen", &vt_row_length, "seqlen_k"_a,
        "Row length of rung 13's transposed V: seqlen_k rounded up to 16 keys (fp8.h)");
  m.def(
      "fp8_transpose_v",
      [](uintptr_t v, const std::array<int, 4>& shape, const std::array<int64_t, 3>& strides, uintptr_t vt,
         uintptr_t stream, int device) {
        if (!v || !vt) refuse_if("fp8_transpose_v: a null pointer");
        DeviceGuard guard(device);
        nb::gil_scoped_release release;
        transpose_v_e4m3(reinterpret_cast<const uint8_t*>(v), shape[0], shape[1], shape[2], shape[3], strides.data(),
                         vt_row_length(shape[1]), reinterpret_cast<uint8_t*>(vt),
                         reinterpret_cast<cudaStream_t>(stream));
      },
      "v"_a, "shape"_a, "strides"_a, "vt"_a, "stream"_a, "device"_a,
      "e4m3 v [batch, seqlen_k, heads_kv, head_dim] to rung 13's V^T [batch, heads_kv, head_dim, "
      "fp8_vt_seqlen(seqlen_k)] at vt (fp8_device.h, transpose_v_e4m3). Asynchronous");
  m.def(
      "fp8_supports",
      [](int number, const std::string& variant, const Problem& p, int device) {
        return supports_reason(find_rung(number, variant), p, device_info(device), true);
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a = 0,
      "'' if the entry runs the problem on e4m3 q, k, v (its dtype: O's), else its one-line reason");
  m.def(
      "fp8_forward",
      [](int number, const std::string& variant, const Problem& p, const std::array<uintptr_t, 5>& ptr,
         const std::array<uintptr_t, 3>& descales, const std::array<int64_t, 3>& q_strides,
         const std::array<int64_t, 3>& k_strides, uintptr_t stream, int device, bool planned) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch) refuse_if(r.label() + " has no forward launch");
        // planned: the caller asked fp8_supports for this Problem on this device before (its plan)
        if (!planned) refuse_if(supports_reason(r, p, device_info(device), true));
        const char* names[5] = {"q", "k", "v (transposed)", "out", "lse"};
        for (int i = 0; i < 5; ++i)
          if (ptr[i] == 0 || ptr[i] % (i == 4 ? 4 : 16) != 0)
            refuse_if(std::string("fp8_forward: ") + names[i] + " is null or not 16-byte aligned");
        for (int i = 0; i < 3; ++i)
          if (descales[i] == 0 || descales[i] % 4 != 0) refuse_if("fp8_forward: a descale is null or misaligned");
        for (int i = 0; i < 3; ++i)
          if (q_strides[i] % 16 != 0 || k_strides[i] % 16 != 0)
            refuse_if("fp8_forward: q's and k's batch, row and head strides must be multiples of 16 bytes");
        AttnParams a = make_attn_params(p);  // O and the LSE dense, as the caller allocates them
        a.q = reinterpret_cast<const void*>(ptr[0]);
        a.k = reinterpret_cast<const void*>(ptr[1]);
        a.v = reinterpret_cast<const void*>(ptr[2]);
        a.o = reinterpret_cast<void*>(ptr[3]);
        a.lse = reinterpret_cast<float*>(ptr[4]);
        a.q_batch_stride = q_strides[0];
        a.q_row_stride = q_strides[1];
        a.q_head_stride = q_strides[2];
        a.k_batch_stride = k_strides[0];
        a.k_row_stride = k_strides[1];
        a.k_head_stride = k_strides[2];
        a.q_descale = reinterpret_cast<const float*>(descales[0]);
        a.k_descale = reinterpret_cast<const float*>(descales[1]);
        a.v_descale = reinterpret_cast<const float*>(descales[2]);
        a.vt_seqlen = vt_row_length(p.seqlen_k);
        DeviceGuard guard(device);
        nb::gil_scoped_release release;
        r.launch(a, reinterpret_cast<cudaStream_t>(stream));
      },
      "number"_a, "variant"_a, "problem"_a, "ptrs"_a, "descales"_a, "q_strides"_a, "k_strides"_a, "stream"_a,
      "device"_a, "planned"_a = false,
      "Launches an FP8 entry (rung 13) on e4m3 tensors (asynchronous). ptrs: q [batch, seqlen_q, heads_q, d] "
      "and k [batch, seqlen_k, heads_kv, d] (e4m3, strides batch, row, head in bytes, multiples of 16), V^T as "
      "fp8_transpose_v writes it, out (problem.dtype, dense [batch, seqlen_q, heads_q, d]), lse (fp32 dense "
      "[batch, heads_q, seqlen_q]); descales: q's, k's, v's (fp32 [batch, heads_kv], contiguous); planned: "
      "fp8_supports was asked for this problem and device before, so it is not asked again");

  // ---- an e4m3 KV cache from PyTorch (rung 08's fp8-kv): its plan and its launch ---------------
  m.def(
      "fp8_kv_workspace_bytes",
      [](int number, const std::string& variant, const Problem& p, int device) {
        const Rung& r = find_rung(number, variant);
        refuse_if(supports_reason(r, p, device_info(device), false, true));
        DeviceGuard guard(device);  // rung 08 sizes its splits from the current device
        return forward_workspace_bytes(r, p);
      },
      "number"_a, "variant"_a, "problem"_a, "device"_a = 0,
      "Bytes of scratch an e4m3 KV cache's entry needs for the problem (ValueError with its reason if it cannot "
      "run it: supports with a 16-bit q against an e4m3 cache)");
  m.def(
      "fp8_kv_forward",
      [](int number, const std::string& variant, const Problem& p, const std::array<uintptr_t, 5>& ptr,
         const std::array<Strides4, 4>& strides, const std::array<uintptr_t, 2>& descales, uintptr_t workspace,
         size_t workspace_bytes, uintptr_t stream, int device, const std::array<uintptr_t, 7>& extras,
         const std::array<int64_t, 3>& extra_ints) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch) refuse_if(r.label() + " has no forward launch");
        refuse_if(supports_reason(r, p, device_info(device), false, true));
        for (uintptr_t d : descales)
          if (d == 0 || d % 4 != 0) refuse_if("fp8_kv_forward: k_descale and v_descale: fp32 buffers, 4-byte aligned");
        AttnParams a = params_for(p, ptr, strides, extras_of(extras, extra_ints));
        a.k_descale = reinterpret_cast<const float*>(descales[0]);
        a.v_descale = reinterpret_cast<const float*>(descales[1]);
        DeviceGuard guard(device);
        check_workspace(workspace, workspace_bytes, forward_workspace_bytes(r, p));
        a.workspace = reinterpret_cast<void*>(workspace);
        a.workspace_bytes = workspace_bytes;
        nb::gil_scoped_release release;
        r.launch(a, reinterpret_cast<cudaStream_t>(stream));
      },
      "number"_a, "variant"_a, "problem"_a, "ptrs"_a, "strides"_a, "descales"_a, "workspace"_a, "workspace_bytes"_a,
      "stream"_a, "device"_a, "extras"_a, "extra_ints"_a,
      "Launches an e4m3 KV cache's entry (rung 08's fp8-kv; asynchronous): ptrs q (16-bit), the e4m3 caches as "
      "the entry reads them (a pool as its [1, rows, heads_kv, head_dim] view), out (q's dtype), lse (fp32 "
      "[batch, heads_q, seqlen_q]); strides in elements (e4m3: bytes); descales: k's and v's (fp32 [batch, "
      "heads_kv], contiguous); extras and extra_ints as forward's (the cache's seqused_k, block_table, "
      "seqstart_k)");

  // ---- metadata read on the device (metadata.h): checked and clamped without a synchronization --
  m.def(
      "sanitize_varlen",
      [](uintptr_t cu_q, uintptr_t cu_k, int batch, int64_t total_q, int64_t total_k, int max_q, int max_k,
         uintptr_t out_q, uintptr_t out_k, uintptr_t stream, int device) {
        if (!cu_q || !cu_k || !out_q || !out_k) refuse_if("sanitize_varlen: a null pointer");
        DeviceGuard guard(device);
        const MetadataSink sink = metadata_sink(device);
        nb::gil_scoped_release release;
        sanitize_cu_seqlens(reinterpret_cast<const int*>(cu_q), reinterpret_cast<const int*>(cu_k), batch, total_q,
                            total_k, max_q, max_k, reinterpret_cast<int*>(out_q), reinterpret_cast<int*>(out_k), sink,
                            reinterpret_cast<cudaStream_t>(stream));
      },
      "cu_q"_a, "cu_k"_a, "batch"_a, "total_q"_a, "total_k"_a, "max_q"_a, "max_k"_a, "out_q"_a, "out_k"_a,
      "stream"_a, "device"_a,
      "cu_seqlens_q and cu_seqlens_k (int32 [batch + 1]) checked on the device against the tokens and "
      "max_seqlen, their clamped copies written to out_q and out_k (metadata.h)");
  m.def(
      "sanitize_cache",
      [](uintptr_t seqlens, int new_keys, int batch, int64_t slots, uintptr_t leftpad, uintptr_t table, int columns,
         int64_t table_stride, int page, int64_t pool_pages, uintptr_t rows, int64_t row_count,
         uintptr_t out_seqlens, uintptr_t out_used, uintptr_t out_leftpad, uintptr_t out_table, uintptr_t stream,
         int device, bool cu_lengths) {
        if (!seqlens || !out_seqlens || !out_used || (leftpad && !out_leftpad) || (table && !out_table))
          refuse_if("sanitize_cache: a null pointer");
        if (new_keys < 0 || new_keys > slots) refuse_if("sanitize_cache: the new keys do not fit the cache's slots");
        DeviceGuard guard(device);
        const MetadataSink sink = metadata_sink(device);
        nb::gil_scoped_release release;
        fl::sanitize_cache(reinterpret_cast<const int*>(seqlens), new_keys, batch, slots,
                           reinterpret_cast<const int*>(leftpad), reinterpret_cast<const int*>(table), columns,
                           table_stride, page, pool_pages, reinterpret_cast<const int*>(rows), row_count,
                           reinterpret_cast<int*>(out_seqlens),
                           reinterpret_cast<int*>(out_used), reinterpret_cast<int*>(out_leftpad),
                           reinterpret_cast<int*>(out_table), sink, reinterpret_cast<cudaStream_t>(stream),
                           cu_lengths);
      },
      "seqlens"_a, "new_keys"_a, "batch"_a, "slots"_a, "leftpad"_a, "table"_a, "columns"_a, "table_stride"_a,
      "page"_a, "pool_pages"_a, "rows"_a, "row_count"_a, "out_seqlens"_a, "out_used"_a, "out_leftpad"_a,
      "out_table"_a, "stream"_a, "device"_a, "cu_lengths"_a = false,
      "A cache's lengths (before the append), left padding, block table and cache_batch_idx rows checked on "
      "the device, their clamped copies written (metadata.h)");
  m.def(
      "append_cache",
      [](uintptr_t k, const std::array<int64_t, 4>& k_strides, uintptr_t k_cache,
         const std::array<int64_t, 4>& k_cache_strides, uintptr_t v, const std::array<int64_t, 4>& v_strides,
         uintptr_t v_cache, const std::array<int64_t, 4>& v_cache_strides, int batch, int new_keys, int heads,
         int head_dim, uintptr_t seqlens, int64_t slots, uintptr_t table, int64_t table_stride, int page,
         int64_t pool_pages, uintptr_t rows, uintptr_t stream, int device, const std::string& elems,
         uintptr_t k_descale, uintptr_t v_descale) {
        if (!k || !k_cache || !v || !v_cache || !seqlens) refuse_if("append_cache: a null pointer");
        const AppendElems kind = append_elems_of(elems);
        if ((k_descale | v_descale) % 4 != 0) refuse_if("append_cache: descales must be 4-byte aligned fp32");
        DeviceGuard guard(device);
        const MetadataSink sink = metadata_sink(device);
        nb::gil_scoped_release release;
        fl::append_cache(reinterpret_cast<const void*>(k), k_strides.data(), reinterpret_cast<void*>(k_cache),
                         k_cache_strides.data(), reinterpret_cast<const void*>(v), v_strides.data(),
                         reinterpret_cast<void*>(v_cache), v_cache_strides.data(), batch, new_keys, heads, head_dim,
                         reinterpret_cast<const int*>(seqlens), slots, reinterpret_cast<const int*>(table),
                         table_stride, page, pool_pages, reinterpret_cast<const int*>(rows), sink,
                         reinterpret_cast<cudaStream_t>(stream), kind, reinterpret_cast<const float*>(k_descale),
                         reinterpret_cast<const float*>(v_descale));
      },
      "k"_a, "k_strides"_a, "k_cache"_a, "k_cache_strides"_a, "v"_a, "v_strides"_a, "v_cache"_a,
      "v_cache_strides"_a, "batch"_a, "new_keys"_a, "heads"_a, "head_dim"_a, "seqlens"_a, "slots"_a, "table"_a,
      "table_stride"_a, "page"_a, "pool_pages"_a, "rows"_a, "stream"_a, "device"_a, "elems"_a = "copy16",
      "k_descale"_a = 0, "v_descale"_a = 0,
      "New keys and values ([batch, new, heads, head_dim]) written into their caches at each sequence's length "
      "in one launch, paged (table) or contiguous (rows or row b); out-of-bounds writes skipped and recorded. "
      "elems: copy16 (16-bit into 16-bit), copy8 (e4m3 into e4m3), fp16_to_e4m3 or bf16_to_e4m3 (16-bit "
      "quantized into an e4m3 cache with its k_descale and v_descale, fp32 [batch, heads])");
  m.def(
      "metadata_errors",
      [](int device, bool clear) { return metadata_error_text(device, clear); }, "device"_a, "clear"_a = true,
      "The first metadata violation the device's check kernels recorded since the last clear, in words "
      "('' when none reached the host yet); clear: reset the record (synchronizes the device when set)");

  m.def(
      "dropout_mask",
      [](uintptr_t out, int batch, int heads_q, int rows, int cols, uintptr_t cu_q, uintptr_t cu_k, float p,
         uintptr_t state, uintptr_t stream, int device) {
        if (!out || !state || state % 8 != 0) refuse_if("dropout_mask: an output and an 8-byte aligned state");
        if ((cu_q == 0) != (cu_k == 0)) refuse_if("dropout_mask: both cu_seqlens or neither");
        if (!(p > 0.f && p < 1.f)) refuse_if("dropout_mask: p in (0, 1)");
        if (static_cast<int64_t>(batch) * heads_q > 65535 || rows > 65535)
          refuse_if("dropout_mask: batch x heads_q and the rows must each be at most 65535");
        DeviceGuard guard(device);
        nb::gil_scoped_release release;
        fl::dropout_mask(reinterpret_cast<uint8_t*>(out), batch, heads_q, rows, cols,
                         reinterpret_cast<const int*>(cu_q), reinterpret_cast<const int*>(cu_k), p,
                         reinterpret_cast<const int64_t*>(state), reinterpret_cast<cudaStream_t>(stream));
      },
      "out"_a, "batch"_a, "heads_q"_a, "rows"_a, "cols"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a, "p"_a, "state"_a,
      "stream"_a, "device"_a,
      "The dropout mask (uint8 [batch, heads_q, rows, cols], 1 kept) of probability p under the device "
      "{seed, offset} at state, by the kernels' own function (dropout.h); packed sequences (cu_seqlens, int32) "
      "count rows and keys within each, and their padding reads 1");

  bind_ring_plan(m);  // ext_ring.cpp

  nb::class_<PreparedCacheCall>(m, "PreparedCacheCall",
                                "A flash_attn_with_kvcache step prepared for one signature: the metadata "
                                "check, the append and the rung's forward queued by one call")
      .def(nb::init<int, const std::string&, const Problem&, const std::array<Strides4, 4>&,
                    const std::array<int64_t, 3>&, const std::array<int64_t, 8>&, const std::array<Strides4, 4>&,
                    int, size_t, const std::string&, bool>(),
           "number"_a, "variant"_a, "problem"_a, "strides"_a, "extra_ints"_a, "cache"_a, "append_strides"_a,
           "device"_a, "workspace_bytes"_a, "elems"_a = "copy16", "fp8_kv"_a = false)
      .def("launch", &PreparedCacheCall::launch, "q"_a, "k_read"_a, "v_read"_a, "out"_a, "lse"_a, "workspace"_a,
           "seqlens"_a, "leftpad"_a, "table"_a, "table_stride"_a, "k_new"_a, "v_new"_a, "sinks"_a, "slopes"_a,
           "scratch"_a, "stream"_a, "k_descale"_a = 0, "v_descale"_a = 0, "scores_k_descale"_a = 0,
           "Queues the check, the append and the forward; False (nothing launched) on a null or misaligned "
           "pointer, or descales that do not match the cache's kind (an e4m3 cache: all three)")
      .def_prop_ro("scratch_ints", &PreparedCacheCall::scratch_ints)
      .def_prop_ro("workspace_bytes", &PreparedCacheCall::workspace_bytes)
      .def_prop_ro("label", &PreparedCacheCall::label);

  nb::class_<PreparedForward>(m, "PreparedForward",
                              "A forward launch prepared for one input signature: supports(), the "
                              "problem's parameters and the strides checked once; launch() sets the "
                              "pointers and the stream")
      .def(nb::init<int, const std::string&, const Problem&, const std::array<Strides4, 4>&, int, size_t, bool,
                    const std::array<int64_t, 3>&>(),
           "number"_a, "variant"_a, "problem"_a, "strides"_a, "device"_a, "workspace_bytes"_a, "mods"_a = false,
           "extra_ints"_a = std::array<int64_t, 3>{0, 0, 0},
           "strides: q, k, v, out (4 each, elements; packed: of the [1, tokens, heads, head_dim] view); "
           "workspace_bytes: the plan's (workspace_bytes()); mods: a masked, modified or packed problem, "
           "launched by launch_mods; extra_ints: as forward's, repeated by every launch_mods")
      .def("launch_mods", &PreparedForward::launch_mods, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "o_fp32"_a,
           "extras"_a, "extra_ints"_a, "dropout_state"_a, "workspace"_a, "stream"_a, "workspace_kept"_a = false,
           "A launch of a problem prepared with mods: forward's extras, extra_ints and dropout_state, o_fp32 "
           "0 or a dense fp32 O; False, launching nothing, when a pointer or the ints do not fit")
      .def("launch", &PreparedForward::launch, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "workspace"_a, "stream"_a,
           "workspace_kept"_a = false,
           "Launches (asynchronous); False, launching nothing, when a pointer is null or not aligned "
           "(16 bytes; the LSE 4). lse may be 0 where lse_optional: no LSE is stored. workspace_kept: the "
           "workspace is the one the previous launch on this stream left (zeros before the first), kept by "
           "the caller, where workspace_kept is True (Rung::workspace_kept)")
      .def("launch_o32", &PreparedForward::launch_o32, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "o_fp32"_a,
           "workspace"_a, "stream"_a, "workspace_kept"_a = false,
           "launch() with O also written in fp32 at o_fp32 (dense like out, 8-byte aligned): the "
           "autograd step's forward; refused where writes_o_fp32 is False")
      .def("time_runner_loop", &PreparedForward::time_runner_loop, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
           "workspace"_a, "iters"_a, "warmup"_a,
           "The C++ runner's timing loop (time_launches: memset flush, events, median ms) on the default "
           "stream, inside this process; -1 when a pointer is null or misaligned")
      .def_prop_ro("workspace_bytes", &PreparedForward::workspace_bytes)
      .def_prop_ro("workspace_kept", &PreparedForward::workspace_kept,
                   "True when a workspace kept per stream across launches serves them (Rung::workspace_kept)")
      .def_prop_ro("lse_optional", &PreparedForward::lse_optional,
                   "True when launch() takes lse = 0 and then stores no LSE (Rung::lse_optional)")
      .def_prop_ro("writes_o_fp32", &PreparedForward::writes_o_fp32,
                   "True when launch_o32() can write O in fp32 too (Rung::writes_o_fp32)")
      .def_prop_ro("label", &PreparedForward::label);

  nb::class_<PreparedBackward>(m, "PreparedBackward",
                               "A backward launch prepared for one input signature and deterministic "
                               "flag: supports(), bwd_supports(), the parameters and the strides checked "
                               "once; launch() sets the pointers and the stream")
      .def(nb::init<int, const std::string&, const Problem&, const std::array<Strides4, 8>&, int, size_t, bool, bool,
                    const std::array<int64_t, 3>&>(),
           "number"_a, "variant"_a, "problem"_a, "strides"_a, "device"_a, "workspace_bytes"_a, "deterministic"_a,
           "mods"_a = false, "extra_ints"_a = std::array<int64_t, 3>{0, 0, 0},
           "strides: q, k, v, out, dout, dq, dk, dv (4 each, elements); workspace_bytes: the plan's "
           "(bwd_workspace_bytes()); mods, extra_ints: as PreparedForward's")
      .def("launch_mods", &PreparedBackward::launch_mods, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a,
           "dk"_a, "dv"_a, "o_fp32"_a, "extras"_a, "extra_ints"_a, "dsinks"_a, "dropout_state"_a, "workspace"_a,
           "stream"_a,
           "A launch of a problem prepared with mods: backward's extras, extra_ints, dsinks and dropout_state; "
           "False, launching nothing, when a pointer or the ints do not fit")
      .def("launch", &PreparedBackward::launch, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a,
           "dv"_a, "o_fp32"_a, "workspace"_a, "stream"_a,
           "Launches (asynchronous); False, launching nothing, when a pointer is null or not aligned "
           "(16 bytes; the LSE 4, o_fp32 8, 0 for D from the 16-bit O)")
      .def_prop_ro("workspace_bytes", &PreparedBackward::workspace_bytes)
      .def_prop_ro("label", &PreparedBackward::label);

  m.def(
      "backward",
      [](int number, const std::string& variant, const Problem& p, const std::array<uintptr_t, 9>& ptr,
         const std::array<Strides4, 8>& strides, uintptr_t workspace, size_t workspace_bytes,
         bool deterministic, uintptr_t stream, int device, uintptr_t o_fp32,
         const std::array<uintptr_t, 7>& extras, const std::array<int64_t, 3>& extra_ints, uintptr_t dsinks,
         uintptr_t dropout_state, bool planned) {
        const Rung& r = find_rung(number, variant);
        if (!r.launch_bwd) refuse_if(r.label() + " has no backward pass");
        if (p.v_in_k) refuse_if("v_in_k: the backward pass takes V of its own (MLA's latent cache is forward only)");
        // planned: as forward's (flashladder._core.plan_backward asked supports, bwd_supports and
        // bwd_workspace_bytes for this Problem, this device and this deterministic flag).
        if (!planned) refuse_if(supports_reason(r, p, device_info(device)));
        if (!planned && r.bwd_supports) refuse_if(r.bwd_supports(p, deterministic));
        AttnBwdParams b{};
        b.fwd = params_for(p, {ptr[0], ptr[1], ptr[2], ptr[3], ptr[4]},
                           {strides[0], strides[1], strides[2], strides[3]},
                           extras_of(extras, extra_ints));
        set_dropout(&b.fwd, p, dropout_state);  // the forward's state: the same mask regenerated
        if (!p.sinks.empty() && (dsinks == 0 || dsinks % 4 != 0))
          refuse_if("dsinks: the problem has sinks: a 4-byte aligned fp32 [heads_q] buffer for their gradient");
        b.dsinks = p.sinks.empty() ? nullptr : reinterpret_cast<float*>(dsinks);
        check_grad_strides(p, ptr, strides);
        b.fwd.o_fp32 = fp32_o_pointer(o_fp32);  // D from O before its rounding, when given
        b.dout = reinterpret_cast<const void*>(ptr[5]);
        b.dq = reinterpret_cast<void*>(ptr[6]);
        b.dk = reinterpret_cast<void*>(ptr[7]);
        b.dv = reinterpret_cast<void*>(ptr[8]);
        DeviceGuard guard(device);
        if (!planned) check_workspace(workspace, workspace_bytes,
                                      r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0);
        else if (workspace_bytes > 0 && workspace == 0) refuse_if("workspace: null");
        b.workspace = reinterpret_cast<void*>(workspace);
        b.workspace_bytes = workspace_bytes;
        b.deterministic = deterministic ? 1 : 0;
        nb::gil_scoped_release release;
        r.launch_bwd(b, reinterpret_cast<cudaStream_t>(stream));
      },
      "number"_a, "variant"_a, "problem"_a, "ptrs"_a, "strides"_a, "workspace"_a,
      "workspace_bytes"_a, "deterministic"_a, "stream"_a, "device"_a, "o_fp32"_a = 0,
      "extras"_a = std::array<uintptr_t, 7>{0, 0, 0, 0, 0, 0, 0}, "extra_ints"_a = std::array<int64_t, 3>{0, 0, 0},
      "dsinks"_a = 0, "dropout_state"_a = 0, "planned"_a = false,
      "Launches the entry's backward pass (asynchronous); extras as forward's, dsinks: the sinks' "
      "gradient (fp32 [heads_q]) when the problem has sinks. ptrs: q, k, v, out, lse, dout, dq, dk, "
      "dv; strides: q, k, v, out, dout, dq, dk, dv (dout like out, dq like q, dk like k, dv like v); "
      "o_fp32: 0, or the forward's fp32 O (dense like out), which D = rowsum(dO * O) then reads; "
      "dropout_state: the forward's (the same device {seed, offset}: the mask is regenerated); "
      "planned: as forward's (supports, bwd_supports and bwd_workspace_bytes asked by the caller's plan)");
}
