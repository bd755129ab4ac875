/// @file registry.h
/// @brief How a rung describes itself to the runner, tests and bench.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "flashladder/backward.h"
#include "flashladder/cli.h"
#include "flashladder/problem.h"

namespace fl {

/// One kernel a rung launches, for the resource report.
struct KernelInfo {
  std::string name;        ///< e.g. "qk_scores"
  const void* func;        ///< the __global__ function
  int block_threads;       ///< threads per block
  size_t dynamic_smem;     ///< dynamic shared memory per block (bytes)
};

/// What a rung's speedup is measured against. Every report ("vs baseline": the
/// runner, the tour, the bench report) reads it from here, never from "number - 1".
struct Baseline {
  enum class Kind {
    rung,             ///< one entry: rung `number`, variant `variant` ("" = its main entry)
    fastest_earlier,  ///< the fastest main rung numbered below this one on the same shape
  };
  Kind kind = Kind::rung;
  int number = 0;       ///< Kind::rung: the rung compared with
  std::string variant;  ///< Kind::rung: its variant ("" = the rung itself)
  std::string why;      ///< one line: why this is the right comparison

  /// A baseline on rung @p n (variant @p v), with the reason @p why.
  static Baseline on(int n, std::string why, std::string v = "");
  /// The fastest earlier main rung on the same shape, with the reason @p why.
  static Baseline fastest(std::string why);
  /// "03_online_softmax" style label of the target ("" for fastest_earlier: no fixed target).
  std::string target_label(const std::string& name) const;
};

/// A rung (or one variant of a rung: ablations, sweep points).
struct Rung {
  int number = 0;            ///< 1, 2, ...
  std::string name;          ///< folder name without the number, e.g. "naive"
  std::string variant;       ///< "" for the rung itself, else the variant's name
  std::string summary;       ///< one line
  Peak peak = Peak::fp32_fma;  ///< what "% of peak" refers to
  std::vector<int> head_dims;  ///< head_dims it accepts; empty = any up to kMaxHeadDim
  bool paged_kv = false;       ///< accepts Problem::page_size > 0
  bool varlen = false;         ///< accepts a variable-length batch (Problem::cu_seqlens_q/k)
  bool mods = false;           ///< accepts masks and score modifiers beyond causal (Problem::has_mods)
  bool dropout = false;        ///< accepts attention dropout (Problem::dropout_p)
  bool seqused_k = false;      ///< accepts a KV cache's lengths and starts per sequence (Problem::seqused_k, seqstart_k)
  bool head_dim_v = false;     ///< takes a V head_dim of its own (Problem::head_dim_v, dv != head_dim)
  int min_cc = 0;              ///< minimum compute capability x10 (e.g. 80), 0 = any

  /// "" if the rung can run @p p on @p d, else a one-line reason. Generic
  /// checks (head_dims, paged_kv, min_cc, memory) are done by the runner.
  std::function<std::string(const Problem& p, const DeviceInfo& d)> supports;
  /// Scratch bytes in HBM the rung needs (0 if none).
  std::function<size_t(const Problem& p)> workspace_bytes;
  /// Optional: the CTAs `launch` starts for @p p on a GPU with d.sm_count multiprocessors (rung
  /// 08: its split plan for that GPU). The package's default route compares grids with it.
  std::function<long long(const Problem& p, const DeviceInfo& d)> grid_ctas;
  /// Launches the rung's kernels on @p stream (asynchronous; throws on launch errors).
  std::function<void(const AttnParams& params, cudaStream_t stream)> launch;
  /// Optional (rung 08): the int32 counters `launch` takes in AttnParams::split_counters for @p p
  /// (zeroed by the caller) to merge a split plan without its combine launch; 0: none needed.
  std::function<long long(const Problem& p)> split_counters;
  /// The kernels it launches for @p p (for the resource report).
  std::function<std::vector<KernelInfo>(const Problem& p)> kernels;
  /// Optional extra report lines (e.g. rung 01: the bytes S needs in HBM).
  std::function<std::vector<std::string>(const Problem& p)> notes;
  /// Optional: a study built for one kind of problem only (rung 16's softcap-exp-fma: softcap)
  /// sets what it needs on a generic test problem, so the shared GPU matrix runs it.
  std::function<void(Problem& p)> study_problem;
  /// Shown in the tour and by default in the bench (variants set false).
  bool in_tour = true;
  /// A decode kernel (a few query rows against a long KV cache): the tour runs
  /// it on its decode problem, the tests give it decode shapes.
  bool decode = false;
  /// What this rung is compared with, headline first. Empty for rung 01 (the
  /// reference point); a variant with none gets its rung's main entry (Registry::add).
  std::vector<Baseline> baselines;
  /// The rungs whose code this one starts from, where no baseline names one (rung 08 is compared
  /// with the fastest earlier rung, rung 11 with PyTorch): the first is the one its lesson diff
  /// compares with (docs/lesson_diff.py). Registry::builds_on resolves it for every rung.
  std::vector<int> builds_on;
  /// Non-empty when the rung is a new design against the rung it builds on (another algorithm or
  /// another engine): what is new, in a few words ("tensor cores (...) in place of CUDA-core
  /// FMAs"). The lessons table labels the row with it instead of counting it as one lesson.
  std::string new_design;
  /// A backward rung (11): launches the backward kernels on @p params (dQ, dK, dV from Q, K, V,
  /// O, LSE and dO). Set only for backward rungs; `launch` then runs the forward pass of rung
  /// `forward_rung` (which the backward pass needs, and which the runner times separately).
  std::function<void(const AttnBwdParams& params, cudaStream_t stream)> launch_bwd;
  /// Scratch bytes in HBM the backward pass needs (its dQ accumulator), for @p deterministic.
  std::function<size_t(const Problem& p, bool deterministic)> bwd_workspace_bytes;
  /// A backward rung's refusals that depend on the deterministic mode ("" when it runs), after
  /// `supports`; unset: none.
  std::function<std::string(const Problem& p, bool deterministic)> bwd_supports;
  /// A backward rung: whether its D = rowsum(dO ∘ O) reads the forward's fp32 O on @p p
  /// (steps/11_backward/delta_policy.h's reads_o32); the runner and the package then have the
  /// forward write it, and else not (D from the 16-bit O, or the exact pass). Unset: never.
  std::function<bool(const Problem& p)> bwd_reads_o_fp32;
  /// The rung whose forward pass a backward rung runs first (0 = none).
  int forward_rung = 0;
  /// An FP8 rung (13): `launch` receives e4m3 Q, K and a transposed V with their descales
  /// (AttnParams' FP8 fields), which the runner makes from the 16-bit inputs with DeviceFp8
  /// (fp8_device.h) before the launch; O and the LSE are as for every rung.
  bool fp8_inputs = false;
  /// With fp8_inputs: only K and V are e4m3, in their own layout (not transposed), each with its
  /// descale per (batch, KV head), Q and O 16-bit: an FP8 KV cache (rung 08's `fp8-kv`). DeviceFp8
  /// makes them (its cache mode), paged or contiguous.
  bool fp8_kv_cache = false;
  /// A backward rung whose dQ comes from e4m3 operands (rung 14's `fp8-dq`: dS and K_j in e4m3):
  /// its dQ is judged against gradient_tolerance_floor_fp8, dK and dV against the 16-bit one.
  bool fp8_dq = false;
  /// `launch` writes AttnParams::o_fp32 (O before its 16-bit rounding) when that pointer is set:
  /// the forward passes a backward pass can take its D from (rungs 05, 06, 09, 10; a backward
  /// rung copies its forward_rung's flag).
  bool writes_o_fp32 = false;
  /// `launch` takes AttnParams::lse == nullptr and then stores no LSE (rung 15): the package's
  /// fast path allocates none when the caller does not ask for it.
  bool lse_optional = false;
  /// A workspace kept across the launches of one signature on one stream serves each of them:
  /// zeros before the first, and each launch leaves it fit for the next (rung 15: its kernel puts
  /// its counters back to zero; rung 16: its classifier rewrites the lists and zeroes the counter).
  /// The package then allocates it once per stream, not per call, and sets
  /// AttnParams::workspace_kept (rung 15 skips its counters' memset).
  bool workspace_kept = false;
  /// Optional: what `--sweep` runs (rung 07's variant table). Returns an ExitCode.
  std::function<int(const Options& opt)> sweep;
  /// Set only in a generated lab starter tree: the runner then prints
  /// "not implemented: <text>" and exits 1 instead of launching.
  std::string not_implemented;

  /// "01_naive" or "04_fa2[loop-order]".
  std::string label() const;
};

/// All rungs and variants, in ladder order.
class Registry {
 public:
  void add(Rung r);
  const std::vector<Rung>& all() const { return rungs_; }
  /// The rung @p number with @p variant ("" = the rung itself); null if absent.
  const Rung* find(int number, const std::string& variant = "") const;
  /// The main entry of the closest lower-numbered rung; null if none.
  const Rung* previous(int number) const;
  /// The entries baseline @p b of rung @p r can resolve to in this registry:
  /// Kind::rung gives the one entry (none if it was not built); fastest_earlier
  /// every main rung numbered below @p r (the caller times them and keeps the fastest).
  std::vector<const Rung*> candidates(const Rung& r, const Baseline& b) const;
  /// Main entries only (no variants), ascending.
  std::vector<const Rung*> mains() const;
  /// The rung @p r builds on: its first baseline on another rung, else the first of its
  /// Rung::builds_on, else 0 (rung 01).
  int builds_on(const Rung& r) const;

 private:
  std::vector<Rung> rungs_;
};

/// One line per baseline of @p r in @p reg: "vs 04_fa2: <why>" (`--list` prints these).
std::vector<std::string> describe_baselines(const Registry& reg, const Rung& r);

/// The registry as JSON (schema "flashladder.registry/1"): every entry's label,
/// number, variant, summary, decode, in_tour and backward flags, baselines, the rung it builds on
/// (Registry::builds_on) and new_design. `tour --registry-json`
/// prints it; bench/report.py and bench/docgen.py read it, so the baselines have
/// one definition (the registrations).
std::string registry_json(const Registry& reg);

/// The registry of every rung built (generated by CMake: one call per rung).
const Registry& registry();

/// The checks the runner applies before any rung-specific supports():
/// head_dim list, paged KV, compute capability. "" if fine.
std::string generic_supports(const Rung& r, const Problem& p, const DeviceInfo& d);
/// The part of generic_supports that needs no device: the problem's features the rung does not
/// take (a V head_dim of its own, a paged cache, a packed batch, masks and score modifiers), ""
/// if none. The runner asks it
/// before it looks for a GPU, so such a refusal is one line on any machine.
std::string feature_support(const Rung& r, const Problem& p);

/// The limits every tiled kernel checks in its `supports` (rungs 06 and 09): head_dim and dtype
/// built (FL_HEAD_DIM, FL_DTYPE), heads_q and batch within the grid's y and z limits, and
/// @p smem_bytes of dynamic shared memory within the GPU's opt-in limit. "" if fine.
std::string tile_limits(const Problem& p, const DeviceInfo& d, int smem_bytes);

/// What a persistent kernel's int32 counters hold (rungs 15 and 16): at most 2^31 work items of
/// @p block_m query rows and 2^31 tokens x heads. "" if fine.
std::string persistent_size_limits(const Problem& p, int block_m);

/// generic_supports() then r.supports().
std::string supports(const Rung& r, const Problem& p, const DeviceInfo& d);

}  // namespace fl
