// ladder_bench: every registered rung over the standard sweeps (bench/README.md).
//
//   prefill:  batch*seqlen = 16k tokens, hidden 2048 (heads = 2048/d),
//             seqlen 512..16k, head_dim 32, 64 and 128, causal 0/1
//   decode:   batch 1 and 8, 32 query heads, 32 or 8 KV heads, head_dim 128,
//             seqlen_q 1, seqlen_k 1k..128k
//   ablation: the prefill shape at seqlen 4096, head_dim 32..256, causal 0/1,
//             for every prefill rung with variants: the rung and each variant
//             back to back (the READMEs' ablation and traits tables)
//   paged:    rung 08 (every rung that takes a paged KV cache), batch 1, 32/8
//             heads, head_dim 128, seqlen_k 16k/64k/128k, pages of 16, 64 and
//             256 tokens and contiguous (page 0), back to back
//   backward: the backward rungs (Rung::launch_bwd: 11, 14) on the prefill shapes,
//             seqlen 512..16k, head_dim 64, 128 and 256, causal 0/1, once with
//             deterministic=0 and once with 1 ("/det"); the forward pass runs
//             once before (O, LSE), only launch_bwd is timed; TFLOPS by
//             attention_bwd_flops (2.5 x the forward's), GB/s by attention_bwd_bytes
//   backward-gqa: the backward family's shapes with GQA 4:1 (heads_kv = heads_q / 4: 16 query
//             heads on 4 KV heads at head_dim 128, 32 on 8 at 64, 8 on 2 at 256), deterministic=0 only: the
//             layers of a GQA model, where a KV head's dK, dV sum over its group's query heads
//   backward-gqa8: the same with GQA 8:1 (heads_kv = heads_q / 8: 16 on 2 at 128, 32 on 4 at 64,
//             8 on 1 at 256)
//   hopper-prefill: the Hopper forward rungs (09, 10, 15) on the prefill shapes at head_dim 64,
//             128 and 256, seqlen 512..16k, causal 0/1 (rung 15's grid: short sequences too)
//   llama:    the Hopper forward rungs on Llama-3-8B's prefill: batch 1, 32 query heads on 8 KV
//             heads, head_dim 128, causal, seqlen 8k and 16k
//   varlen:   the rungs that take a packed batch (Rung::varlen: 15) on 64 sequences of 128..8k
//             tokens (mixed_lengths, seed 2024), 32 query heads on 8 KV heads, head_dim 128,
//             causal 0/1
//   varlen-backward: the backward rungs that take it (rung 14) on the same packed batch, the
//             backward pass alone
//   masks:    rung 16's masks and score modifiers (the rungs with Rung::mods) at head_dim 128,
//             16/16 heads, batch x seqlen = 32k tokens: causal (N 8k, 32k), a window of 4096
//             keys (window_size (4096, 0), N 8k, 32k), documents (N 32k, document_starts:
//             512..8k tokens, seed 2024), prefix-LM (2048 bidirectional keys, N 8k), softcap 50,
//             ALiBi and attention sinks (N 8k, causal); rung 15 (its main entry) runs the plain
//             causal cells beside them, the cost of the machinery. Names
//             "masks/d128/<case>/N<n>"; FLOPs count the unmasked pairs only
//   masks-backward: the same shapes, the backward pass alone (as the backward family), for the
//             backward entries with Rung::mods (16_masks[backward], whatever its variant name);
//             rung 14 runs the plain causal cells beside it
//   mla-decode: MLA's decode step on the latent cache (rung 17; Rung::decode entries, rung 08
//             refusing head_dim 576 in one line): batch 1, 8, 32, 128 x seqlen_k 1k, 4k, 16k, 64k
//             (batch x seqlen_k <= 512k keys: the cache within 600 MB, its host copy seconds),
//             heads 16, 64, 128 on one latent head, head_dim 576 (V = its first 512 columns),
//             seqlen_q 1 and 2 (causal, bottom-right: MTP's second token), pages of 64 tokens;
//             GB/s of the cache read once (kv_bytes), TFLOP/s of 2 x pairs x (576 + 512).
//             Names "mla-decode/d576/B<b>/H<h>/Sq<sq>/Sk<sk>/P64"
//   mla-prefill: MLA's prefill (rung 16's forward, Rung::head_dim_v): head_dim 192, V and O 128,
//             16 heads (DeepSeek-V3's 128 over 8 GPUs), batch x seqlen = 16k tokens, seqlen
//             1k..16k, causal 0/1
//   mla-prefill-backward: the same shapes, the backward pass alone (rung 16's backward entry,
//             Rung::head_dim_v: rung 14's kernel with V's and dO's maps at 128 columns)
//   decode-fp8: an FP8 KV cache (Rung::fp8_kv_cache: rung 08's fp8-kv, e4m3 K and V made once,
//             per (batch, KV head) scales, outside the time) beside the 16-bit decode rungs:
//             batch 1 and 8, 32 query heads on 8 KV heads, head_dim 128, seqlen_k 4k..128k,
//             contiguous and pages of 64; GB/s of the cache's bytes as each reads them (one byte
//             per element for e4m3), quantize_ms and e2e_rel_fro as the fp8 family's
//   fp8:      the FP8 rungs (Rung::fp8_inputs: 13) and the entries they name as baselines
//             (rung 10) on the prefill shapes at head_dim 64, 128 and 256, causal 0/1; the
//             e4m3 inputs are made once (per-head scales) outside the time, and the counters
//             add quantize_ms (their cost) and e2e_rel_fro (the error against fp64 on the
//             16-bit inputs)
//
// Time is manual (CUDA events around one launch, L2 flushed before each);
// counters: TFLOPS and GB/s from the median, the shape for joining with the
// PyTorch script's JSON. A shape a rung does not support is not registered:
// it is listed with its reason on stderr and in the JSON context ("skip: ...").
//
// Own flags (before Google Benchmark's): --fl_family=prefill|decode|ablation|paged|backward|backward-gqa|backward-gqa8|fp8|
// hopper-prefill|llama|varlen|varlen-backward|masks|masks-backward|mla-decode|mla-prefill|mla-prefill-backward|
// decode-fp8|all
// (comma-separated list allowed) --fl_rungs=1,4,6 --fl_variants (variants in the prefill
// and decode sweeps too) --fl_quick --fl_check=none|sample --fl_head_dims=64,128
// --fl_dtype=fp16|bf16 (the 16-bit type of every family but fp8's; fp16 by default)
// --fl_list (print the families' shapes, the entries that would run each before the device's
// checks, and the masks family's document starts; no GPU needed, nothing timed)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flashladder/runner.h"

using namespace fl;

namespace {

struct Config {
  std::set<std::string> families{"prefill", "decode",        "ablation",       "paged", "backward",
                                 "backward-gqa", "backward-gqa8", "fp8", "hopper-prefill", "llama", "varlen",
                                 "varlen-backward", "masks", "masks-backward", "mla-decode", "mla-prefill",
                                 "mla-prefill-backward", "decode-fp8"};
  std::set<int> rungs;  // empty: all
  std::set<int> head_dims;
  bool variants = false;
  bool quick = false;
  bool list = false;  ///< --fl_list: print the shapes, time nothing
  DType dtype = DType::fp16;  ///< --fl_dtype: the 16-bit inputs (the fp8 family keeps fp16)
  CheckMode check = CheckMode::none;
  bool wants(const char* family) const { return families.count(family) > 0; }
};

/// The families that time a backward pass (launch_bwd).
bool is_backward(const std::string& family) {
  return family == "backward" || family == "backward-gqa" || family == "backward-gqa8" || family == "varlen-backward" ||
         family == "masks-backward" || family == "mla-prefill-backward";
}

/// The families of rung 16's masks and score modifiers (forward and backward).
bool is_masks(const std::string& family) {
  return family == "masks" || family == "masks-backward";
}

/// The families of MLA (rung 17's decode on the latent cache, rung 16's 192/128 prefill).
bool is_mla(const std::string& family) {
  return family == "mla-decode" || family == "mla-prefill" || family == "mla-prefill-backward";
}

/// The entry that runs the masks family's plain causal cells beside the rungs with Rung::mods:
/// rung 16 is rung 15's forward pass with masks and modifiers, so the same cells on both price
/// the machinery (span bounds, block classes, the modifier hooks) where it has nothing to do.
constexpr int kMasksBaselineRung = 15;
/// The masks-backward family's: rung 14, whose kernel rung 16's backward runs with the masks.
constexpr int kMasksBackwardBaselineRung = 14;

struct Shape {
  std::string family;
  Problem p;
  bool deterministic = false;  ///< backward family: AttnBwdParams::deterministic
  std::string mask_case{};     ///< masks families: "causal", "window4096", "docs", ...
  std::string name() const {
    std::ostringstream s;
    s << family << "/d" << p.head_dim;
    if (is_masks(family))
      s << "/" << mask_case << "/N" << p.seqlen_q;
    else if (family == "mla-decode")
      s << "/B" << p.batch << "/H" << p.heads_q << "/Sq" << p.seqlen_q << "/Sk" << p.seqlen_k;
    else if (family == "varlen" || family == "varlen-backward")
      s << "/S" << p.batch << "/causal" << (p.causal ? 1 : 0);
    else if (family == "prefill" || family == "ablation" || family == "fp8" || family == "hopper-prefill" ||
             family == "llama" || family == "mla-prefill" || is_backward(family))
      s << "/N" << p.seqlen_q << "/causal" << (p.causal ? 1 : 0);
    else
      s << "/B" << p.batch << "/Hkv" << p.heads_kv << "/Sk" << p.seqlen_k;
    if (family == "paged" || family == "mla-decode" || family == "decode-fp8") s << "/P" << p.page_size;
    if (deterministic) s << "/det";
    return s.str();
  }
};

/// The prefill shape of the sweep (bench/README.md): 16k tokens, hidden 2048.
Shape prefill_shape(const char* family, int n, int d, bool causal) {
  Shape s{family, {}};
  s.p.batch = 16384 / n;
  s.p.seqlen_q = s.p.seqlen_k = n;
  s.p.heads_q = s.p.heads_kv = 2048 / d;
  s.p.head_dim = d;
  s.p.causal = causal;
  return s;
}

/// The masks family's documents in a sequence of @p n tokens: lengths drawn in order from
/// mixed_lengths' stream (@p lo .. @p hi, @p seed) until they fill the n tokens exactly. A draw
/// that would overrun, or leave fewer than @p lo tokens, is cut: the last document takes the rest
/// when the rest fits in @p hi, else the one before it leaves @p lo tokens for the last. Every
/// document then has lo .. hi tokens (when n >= lo and hi >= 2 lo). Returns the starts, 0 first
/// and n last (Problem::doc_starts). bench/pytorch/torch_flex.py's document_starts is the same function;
/// `ladder_bench --fl_list` prints the starts and tests/cpu/test_torch_scripts.py compares them.
std::vector<int> document_starts(int n, int lo, int hi, unsigned long long seed) {
  // At least as many draws as documents: each has lo tokens or more.
  const std::vector<int> draws = mixed_lengths(n / lo + 1, lo, hi, seed);
  std::vector<int> starts{0};
  for (size_t i = 0; starts.back() < n; ++i) {
    const int rest = n - starts.back();
    int len = draws[i];
    if (rest <= hi && (len >= rest || rest - len < lo)) len = rest;
    else if (rest - len < lo) len = rest - lo;
    starts.push_back(starts.back() + len);
  }
  return starts;
}

/// The masks family's shapes (bench/README.md): batch x seqlen = 32k tokens, 16/16 heads,
/// head_dim 128, one mask or modifier per case.
std::vector<Shape> mask_shapes(const char* family) {
  constexpr int kTokens = 32768, kWindow = 4096, kPrefix = 2048;
  constexpr float kSoftcap = 50.f;
  auto shape = [&](const char* mask_case, int n) {
    Shape s{family, {}};
    s.mask_case = mask_case;
    s.p.batch = kTokens / n;
    s.p.seqlen_q = s.p.seqlen_k = n;
    s.p.heads_q = s.p.heads_kv = 16;
    s.p.head_dim = 128;
    s.p.causal = true;
    return s;
  };
  std::vector<Shape> out;
  for (int n : {8192, 32768}) out.push_back(shape("causal", n));
  // A window of w keys over N = 2w beside causal at 2w: the "<= 1.3 x causal" check.
  for (int n : {8192, 32768}) {
    Shape s = shape("window4096", n);
    s.p.window_left = kWindow;
    s.p.window_right = 0;
    out.push_back(s);
  }
  Shape docs = shape("docs", kTokens);  // causal within each document
  docs.p.doc_starts = document_starts(kTokens, 512, 8192, 2024);
  out.push_back(docs);
  // Not causal: masks.h's prefix rule is causal past the prefix, bidirectional within it.
  Shape prefix = shape("prefix2048", 8192);
  prefix.p.causal = false;
  prefix.p.prefix = kPrefix;
  out.push_back(prefix);
  Shape softcap = shape("softcap50", 8192);
  softcap.p.softcap = kSoftcap;
  out.push_back(softcap);
  Shape alibi = shape("alibi", 8192);
  alibi.p.alibi = true;
  out.push_back(alibi);
  // A fixed pattern of sink logits: -0.25, 0.25, 0.75, 1.25 repeated over the heads.
  Shape sinks = shape("sinks", 8192);
  for (int h = 0; h < sinks.p.heads_q; ++h) sinks.p.sinks.push_back(0.5f * (h % 4) - 0.25f);
  out.push_back(sinks);
  return out;
}

Shape decode_shape(const char* family, int b, int hkv, int sk, int page) {
  Shape s{family, {}};
  s.p.batch = b;
  s.p.seqlen_q = 1;
  s.p.seqlen_k = sk;
  s.p.heads_q = 32;
  s.p.heads_kv = hkv;
  s.p.head_dim = 128;
  s.p.page_size = page;
  return s;
}

/// MLA's decode step (bench/README.md, the mla-decode family): @p heads query heads over one latent
/// cache row of 576 dims per key (V its first 512), in pages of 64 keys; two queries are causal.
Shape mla_decode_shape(int b, int heads, int sq, int sk) {
  Shape s{"mla-decode", {}};
  s.p.batch = b;
  s.p.seqlen_q = sq;
  s.p.seqlen_k = sk;
  s.p.heads_q = heads;
  s.p.heads_kv = 1;
  s.p.head_dim = kMlaHeadDim;
  s.p.head_dim_v = kMlaHeadDimV;
  s.p.v_in_k = true;
  s.p.page_size = 64;
  s.p.causal = sq > 1;
  return s;
}

/// The mla-decode family's grid, bench/pytorch/torch_mla.py's too (its --list prints the same names):
/// batch x seqlen_k bounded by kMlaKeys keys, so no cell's cache (and its host copy) is large.
constexpr long long kMlaKeys = 512 * 1024;
std::vector<Shape> mla_decode_shapes(bool quick) {
  std::vector<Shape> out;
  for (int b : {1, 8, 32, 128})
    for (int sk : {1024, 4096, 16384, 65536}) {
      if (static_cast<long long>(b) * sk > kMlaKeys || (quick && (sk == 1024 || sk == 16384))) continue;
      for (int heads : {16, 64, 128})
        for (int sq : {1, 2}) out.push_back(mla_decode_shape(b, heads, sq, sk));
    }
  return out;
}

std::vector<Shape> sweep(const Config& c) {
  std::vector<Shape> out;
  auto dim_ok = [&](int d) { return c.head_dims.empty() || c.head_dims.count(d) > 0; };
  if (c.wants("prefill"))
    for (int d : {32, 64, 128}) {
      if (!dim_ok(d)) continue;
      for (int causal : {0, 1})
        for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
          if (c.quick && (n == 512 || n == 8192)) continue;
          out.push_back(prefill_shape("prefill", n, d, causal));
        }
    }
  if (c.wants("decode"))
    for (int b : {1, 8})
      for (int hkv : {32, 8})
        for (int sk = 1024; sk <= 131072; sk *= 2) {
          if (c.quick && (sk == 2048 || sk == 8192 || sk == 32768)) continue;
          out.push_back(decode_shape("decode", b, hkv, sk, 0));
        }
  if (c.wants("decode-fp8"))  // the FP8 cache beside the 16-bit one: GQA 32/8, contiguous and pages of 64
    for (int b : {1, 8})
      for (int page : {0, 64})
        for (int sk = 4096; sk <= 131072; sk *= 2) {
          if (c.quick && (sk == 8192 || sk == 32768)) continue;
          out.push_back(decode_shape("decode-fp8", b, 8, sk, page));
        }
  if (c.wants("ablation"))
    for (int d : {32, 64, 128, 256})
      if (dim_ok(d))
        for (int causal : {0, 1}) out.push_back(prefill_shape("ablation", 4096, d, causal));
  if (c.wants("fp8"))  // the FP8 rung beside the 16-bit rung it changes, head_dim 64 to 256
    for (int d : {64, 128, 256}) {
      if (!dim_ok(d)) continue;
      for (int causal : {0, 1})
        for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
          if (c.quick && (n == 512 || n == 8192)) continue;
          out.push_back(prefill_shape("fp8", n, d, causal));
        }
    }
  if (c.wants("hopper-prefill"))
    for (int d : {64, 128, 256}) {
      if (!dim_ok(d)) continue;
      for (int causal : {0, 1})
        for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
          if (c.quick && (n == 1024 || n == 8192)) continue;
          out.push_back(prefill_shape("hopper-prefill", n, d, causal));
        }
    }
  if (c.wants("llama") && dim_ok(128))
    for (int n : {8192, 16384}) {
      Shape s{"llama", {}};
      s.p.batch = 1;
      s.p.seqlen_q = s.p.seqlen_k = n;
      s.p.heads_q = 32;
      s.p.heads_kv = 8;
      s.p.head_dim = 128;
      s.p.causal = true;
      out.push_back(s);
    }
  for (const char* family : {"varlen", "varlen-backward"})
    if (c.wants(family) && dim_ok(128))
      for (int causal : {0, 1}) {
        Shape s{family, {}};
        set_varlen(&s.p, mixed_lengths(64, 128, 8192, 2024));
        s.p.heads_q = 32;
        s.p.heads_kv = 8;
        s.p.head_dim = 128;
        s.p.causal = causal;
        out.push_back(s);
      }
  for (const char* family : {"masks", "masks-backward"})
    if (c.wants(family) && dim_ok(128))
      for (Shape& s : mask_shapes(family)) out.push_back(s);
  if (c.wants("mla-decode") && dim_ok(kMlaHeadDim))
    for (Shape& s : mla_decode_shapes(c.quick)) out.push_back(s);
  for (const char* family : {"mla-prefill", "mla-prefill-backward"})  // DeepSeek-V3's 192/128, 16 heads per GPU
    if (c.wants(family) && dim_ok(192))
      for (int causal : {0, 1})
        for (int n : {1024, 2048, 4096, 8192, 16384}) {
          if (c.quick && (n == 2048 || n == 8192)) continue;
          Shape s = prefill_shape(family, n, 192, causal);
          s.p.heads_q = s.p.heads_kv = 16;
          s.p.head_dim_v = 128;
          out.push_back(s);
        }
  if (c.wants("paged"))
    for (int sk : {16384, 65536, 131072})
      for (int page : {0, 16, 64, 256}) {
        if (c.quick && sk == 65536) continue;
        out.push_back(decode_shape("paged", 1, 8, sk, page));
      }
  if (c.wants("backward"))
    for (int d : {64, 128, 256}) {
      if (!dim_ok(d)) continue;
      for (int causal : {0, 1})
        for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
          if (c.quick && (n == 512 || n == 8192)) continue;
          for (bool det : {false, true}) {
            Shape s = prefill_shape("backward", n, d, causal);
            s.deterministic = det;
            out.push_back(s);
          }
        }
    }
  for (const auto& [family, group] : {std::pair<const char*, int>{"backward-gqa", 4}, {"backward-gqa8", 8}})
    if (c.wants(family))
      for (int d : {64, 128, 256}) {
        if (!dim_ok(d)) continue;
        for (int causal : {0, 1})
          for (int n : {512, 1024, 2048, 4096, 8192, 16384}) {
            if (c.quick && (n == 512 || n == 8192)) continue;
            Shape s = prefill_shape(family, n, d, causal);
            s.p.heads_kv = s.p.heads_q / group;
            out.push_back(s);
          }
      }
  for (Shape& s : out)
    if (s.family != "fp8") s.p.dtype = c.dtype;
  return out;
}

/// Is variant @p r the declared baseline of some main rung (rung 07's untiled kernel)? Then the
/// sweeps run it beside the mains, so every "vs baseline" ratio is measured.
/// With @p fp8_only, only the FP8 main rungs' baselines count (the fp8 family: rung 10).
bool is_a_main_baseline(const Rung& r, bool fp8_only = false) {
  for (const Rung* m : registry().mains())
    if (!fp8_only || m->fp8_inputs)
      for (const Baseline& b : m->baselines)
        if (b.kind == Baseline::Kind::rung && b.number == r.number && b.variant == r.variant) return true;
  return false;
}

/// Does the sweep run entry @p r on shape @p s (before supports())? A backward rung runs the
/// backward families only (its `launch` is another rung's forward pass).
bool runs_in(const Config& c, const Shape& s, const Rung& r) {
  const std::string& f = s.family;
  if (f == "masks-backward")  // the backward entries with masks, and rung 14 on the plain causal cells
    return r.launch_bwd && (r.mods || (s.mask_case == "causal" && r.number == kMasksBackwardBaselineRung &&
                                       r.variant.empty()));
  if (f == "mla-prefill-backward")  // the backward entries that take V's own head_dim (rung 16's)
    return r.launch_bwd && r.head_dim_v && (r.variant.empty() || c.variants || r.mods);
  if (is_backward(f))  // a forward rung's backward entry (16_masks[backward]) runs with the main entries
    return r.launch_bwd && (f != "varlen-backward" || r.varlen) && (r.variant.empty() || c.variants || r.mods);
  if (r.launch_bwd) return false;
  if (f == "masks")  // the rungs with masks, and rung 15 on the plain causal cells
    return r.mods ? r.variant.empty() || c.variants
                  : s.mask_case == "causal" && r.number == kMasksBaselineRung && r.variant.empty();
  if (f == "ablation") {
    // Rungs with ablation variants (not a --sweep study, not a decode kernel): the rung and every
    // variant, back to back on one shape.
    if (r.decode || r.sweep) return false;
    for (const Rung& o : registry().all())
      if (o.number == r.number && !o.variant.empty()) return true;
    return false;
  }
  if (f == "paged") return r.paged_kv && r.variant.empty();
  // MLA: the decode rungs on the latent cache (rung 17; rung 08 is listed with its refusal), the
  // forward rungs that take V's own head_dim on the prefill (rung 16).
  if (f == "mla-decode") return r.decode && (r.variant.empty() || c.variants);
  if (f == "mla-prefill") return r.head_dim_v && !r.decode && (r.variant.empty() || c.variants);
  if (f == "hopper-prefill" || f == "llama")  // the 16-bit Hopper forward rungs
    return r.min_cc >= 90 && !r.fp8_inputs && (r.variant.empty() || c.variants);
  if (f == "varlen") return r.varlen && (r.variant.empty() || c.variants);
  if (f == "fp8")  // FP8 rungs, and the entries they declare as their baselines (rung 10)
    return r.fp8_inputs && !r.fp8_kv_cache ? r.variant.empty() || c.variants : is_a_main_baseline(r, true);
  if (f == "decode-fp8") {  // the FP8 KV cache entries, and the 16-bit main entry of each one's rung
    if (r.fp8_kv_cache) return true;
    if (!r.variant.empty() || r.fp8_inputs || !r.decode) return false;
    for (const Rung& o : registry().all())
      if (o.number == r.number && o.fp8_kv_cache) return true;
    return false;
  }
  return r.variant.empty() || c.variants || is_a_main_baseline(r);
}

/// Host inputs of the last shape, shared by consecutive benchmarks of one shape.
const HostInputs& inputs_for(const Problem& p) {
  static std::string key;
  static std::unique_ptr<HostInputs> in;
  if (!in || key != p.describe()) {
    in = std::make_unique<HostInputs>(make_inputs(p, InputKind::random, 2024));
    key = p.describe();
  }
  return *in;
}

/// dO of the last backward shape (make_grad_output), shared like inputs_for().
const std::vector<uint16_t>& grad_output_for(const Problem& p) {
  static std::string key;
  static std::unique_ptr<std::vector<uint16_t>> dout;
  if (!dout || key != p.describe()) {
    dout = std::make_unique<std::vector<uint16_t>>(make_grad_output(p, 2024));
    key = p.describe();
  }
  return *dout;
}

/// The median of @p launch's CUDA-event times, L2 flushed before each; 3..20 launches, about
/// 1 s of GPU time (the first launch sets the count, returned in @p launches).
double median_launch_ms(const std::function<void()>& launch, const DeviceInfo& dev, int* launches) {
  L2Flusher flusher(dev.l2_bytes);
  EventTimer timer;
  auto timed_launch = [&] {
    flusher.flush();
    timer.start();
    launch();
    return static_cast<double>(timer.stop());
  };
  std::vector<double> ms{timed_launch()};
  const int iters = static_cast<int>(std::clamp(1000.0 / std::max(ms[0], 1e-3), 3.0, 20.0));
  while (static_cast<int>(ms.size()) < iters) ms.push_back(timed_launch());
  std::sort(ms.begin(), ms.end());
  *launches = static_cast<int>(ms.size());
  return ms[ms.size() / 2];
}

/// The counters every benchmark reports (the report joins records on the shape).
void set_counters(benchmark::State& state, const Rung* r, const Shape& s, double med, int launches, double tflops,
                  double gbps) {
  const Problem& p = s.p;
  for (auto _ : state) state.SetIterationTime(med * 1e-3);
  state.counters["median_ms"] = med;
  state.counters["launches"] = launches;
  state.counters["TFLOPS"] = tflops;
  state.counters["GB/s"] = gbps;
  state.counters["rung"] = r->number;
  state.counters["batch"] = p.batch;
  state.counters["seqlen_q"] = p.seqlen_q;
  state.counters["seqlen_k"] = p.seqlen_k;
  state.counters["heads_q"] = p.heads_q;
  state.counters["heads_kv"] = p.heads_kv;
  state.counters["head_dim"] = p.head_dim;
  state.counters["causal"] = p.causal ? 1 : 0;
  state.counters["page_size"] = p.page_size;
  if (is_mla(s.family)) {  // V's own head_dim; 1 where V is the latent cache's first columns
    state.counters["head_dim_v"] = p.dv();
    state.counters["v_in_k"] = p.v_in_k ? 1 : 0;
  }
  if (is_backward(s.family)) state.counters["deterministic"] = s.deterministic ? 1 : 0;
  if (is_masks(s.family)) {  // the case (also in the name), as bench/pytorch/torch_flex.py records it
    state.counters["window_left"] = p.window_left;
    state.counters["window_right"] = p.window_right;
    state.counters["prefix"] = p.prefix;
    state.counters["n_docs"] =
        p.doc_starts.empty() ? 0 : static_cast<double>(p.doc_starts.size() - 1);
    state.counters["softcap"] = p.softcap;
    state.counters["alibi"] = p.alibi ? 1 : 0;
    state.counters["sinks"] = p.sinks.empty() ? 0 : 1;
  }
}

/// The backward family: the forward pass once (O, LSE), the backward once on NaN-poisoned
/// gradients (warm-up and check), then launch_bwd alone timed.
void run_bwd_bench_or_throw(benchmark::State& state, const Rung* r, const Shape& s, const DeviceInfo& dev,
                            CheckMode check) {
  const Problem& p = s.p;
  const HostInputs& in = inputs_for(p);
  const std::vector<uint16_t>& dout = grad_output_for(p);
  const BwdRun run = run_bwd_once(*r, p, in, dout, 1, s.deterministic);  // also the warm-up
  const BwdCheck c = check_bwd_run(*r, p, in, dout, run, check, 1);
  if (!c.summary.pass) {
    state.SkipWithError(("check failed: " + c.summary.reason).c_str());
    return;
  }
  int launches = 0;
  DeviceGrads& g = *run.grads;
  const double med = median_launch_ms([&] { r->launch_bwd(g.params(), nullptr); }, dev, &launches);
  set_counters(state, r, s, med, launches, bwd_tflops_of(p, med), bwd_gbps_of(p, med));
  state.SetLabel(r->label() + " " + s.name() + (c.summary.checked ? " check:" + c.summary.mode : ""));
}

/// One benchmark = one (rung, shape). Google Benchmark runs the body once
/// (Iterations(1)); inside, we launch the rung `iters` times with CUDA events
/// around each launch and L2 flushed before it, and report the median as the
/// iteration's manual time. iters adapts to the rung's speed: 3..20 launches,
/// about 1 s of GPU time (slow rungs at long seqlens take seconds per launch;
/// their spread is far below the rung-to-rung gaps). Inputs are made lazily
/// here, so registering the whole sweep costs nothing.
void run_bench_or_throw(benchmark::State& state, const Rung* r, const Shape& s, const DeviceInfo& dev,
                        CheckMode check) {
  if (is_backward(s.family)) {
    run_bwd_bench_or_throw(state, r, s, dev, check);
    return;
  }
  const Problem& p = s.p;
  const HostInputs& in = inputs_for(p);
  DeviceProblem dp(p, in, r->workspace_bytes ? r->workspace_bytes(p) : 0);
  if (r->fp8_inputs) dp.to_fp8(Fp8Options{}, 1, r->fp8_kv_cache);  // per-head e4m3, made once outside the time
  dp.poison_outputs();
  launch_once(*r, dp);  // also the warm-up (module load)
  ErrorStats e2e;
  const CheckResult c = check_forward(p, in, dp, check, 1, &e2e);
  if (!c.pass) {
    state.SkipWithError(("check failed: " + c.reason).c_str());
    return;
  }
  int launches = 0;
  const double med = median_launch_ms([&] { r->launch(dp.params(), nullptr); }, dev, &launches);
  set_counters(state, r, s, med, launches, tflops_of(p, med),
               gbps_of(p, med,
                       s.family == "decode" || s.family == "paged" || s.family == "mla-decode" ||
                               s.family == "decode-fp8"
                           ? Peak::memory  // the cache's bytes (MLA's latent cache once)
                           : r->peak,
                       r->fp8_kv_cache));
  if (r->fp8_inputs) {  // what the FP8 path costs once per Q/K/V, and its end-to-end error
    int qlaunches = 0;
    state.counters["quantize_ms"] = median_launch_ms([&] { dp.fp8()->quantize(); }, dev, &qlaunches);
    if (c.checked) state.counters["e2e_rel_fro"] = e2e.rel_fro;
  }
  state.SetLabel(r->label() + " " + s.name() + (c.checked ? " check:" + c.mode : ""));
}

/// A rung that throws (a launch error, a refused argument) is reported as this
/// benchmark's error; the sweep goes on with the next one.
void run_bench(benchmark::State& state, const Rung* r, Shape s, DeviceInfo dev, CheckMode check) {
  try {
    run_bench_or_throw(state, r, s, dev, check);
  } catch (const std::exception& e) {
    state.SkipWithError((std::string("threw: ") + e.what()).c_str());
  }
}

bool take_flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0) return false;
  if (arg[n] == '=') *value = arg + n + 1;
  else if (arg[n] == '\0') *value = "1";
  else return false;
  return true;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) out.push_back(tok);
  return out;
}

std::set<int> int_list(const std::string& s) {
  std::set<int> out;
  for (const std::string& tok : split(s)) out.insert(std::atoi(tok.c_str()));
  return out;
}

/// --fl_list: one line per shape of the chosen families, its problem, the entries that would run
/// it as far as that is known without a GPU (runs_in and feature_support), and the document starts.
void list_shapes(const Config& cfg) {
  for (const Shape& s : sweep(cfg)) {
    std::string rungs;
    for (const Rung& r : registry().all())
      if ((cfg.rungs.empty() || cfg.rungs.count(r.number)) && runs_in(cfg, s, r) &&
          feature_support(r, s.p).empty())
        rungs += (rungs.empty() ? "" : ",") + r.label();
    std::printf("%s\t%s\trungs=%s", s.name().c_str(), s.p.describe().c_str(),
                rungs.empty() ? "-" : rungs.c_str());
    if (!s.p.doc_starts.empty()) {
      std::printf("\tdoc_starts=");
      for (size_t i = 0; i < s.p.doc_starts.size(); ++i)
        std::printf("%s%d", i ? "," : "", s.p.doc_starts[i]);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (take_flag(argv[i], "--fl_family", &v)) {
      cfg.families.clear();
      for (const std::string& f : split(v)) {
        if (f == "all") cfg.families = Config{}.families;
        else if (Config{}.families.count(f)) cfg.families.insert(f);
        else {
          std::fprintf(stderr, "ladder_bench: --fl_family: unknown family '%s' (prefill, decode, ablation, paged, backward, backward-gqa, backward-gqa8, fp8, hopper-prefill, llama, varlen, varlen-backward, masks, masks-backward, mla-decode, mla-prefill, mla-prefill-backward, decode-fp8, all)\n",
                       f.c_str());
          return 2;
        }
      }
    }
    else if (take_flag(argv[i], "--fl_rungs", &v)) cfg.rungs = int_list(v);
    else if (take_flag(argv[i], "--fl_head_dims", &v)) cfg.head_dims = int_list(v);
    else if (take_flag(argv[i], "--fl_variants", &v)) cfg.variants = true;
    else if (take_flag(argv[i], "--fl_quick", &v)) cfg.quick = true;
    else if (take_flag(argv[i], "--fl_list", &v)) cfg.list = true;
    else if (take_flag(argv[i], "--fl_check", &v)) cfg.check = v == "sample" ? CheckMode::sample : CheckMode::none;
    else if (take_flag(argv[i], "--fl_dtype", &v)) {
      if (!parse_dtype(v, &cfg.dtype)) {
        std::fprintf(stderr, "ladder_bench: --fl_dtype: unknown type '%s' (fp16, bf16)\n", v.c_str());
        return 2;
      }
    }
    else rest.push_back(argv[i]);
  }
  if (cfg.list) {
    list_shapes(cfg);
    return 0;
  }
  int bargc = static_cast<int>(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, rest.data())) return 2;

  DeviceInfo dev;
  try {
    dev = query_device();
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "ladder_bench: %s; nothing to benchmark\n", e.what());
    return 77;
  }
  benchmark::AddCustomContext("device", dev.name);
  benchmark::AddCustomContext("arch", dev.arch());
  benchmark::AddCustomContext("sms", std::to_string(dev.sm_count));
  benchmark::AddCustomContext("cuda_version", std::to_string(dev.cuda_runtime_version));
  benchmark::AddCustomContext("driver_version", std::to_string(dev.driver_version));
  benchmark::AddCustomContext("git_sha", FL_GIT_SHA);
  benchmark::AddCustomContext("dtype", dtype_name(cfg.dtype));
  benchmark::AddCustomContext("peak_fp32_tflops", std::to_string(dev.peak_fp32_tflops));
  benchmark::AddCustomContext("peak_tensor_tflops", std::to_string(dev.peak_tensor_tflops));
  benchmark::AddCustomContext("peak_gbps", std::to_string(dev.peak_gbps));

  int registered = 0, skipped = 0;
  // Shape-major order: each shape's inputs are made once and shared by every rung.
  for (const Shape& s : sweep(cfg)) {
    for (const Rung& r : registry().all()) {
      if (!cfg.rungs.empty() && !cfg.rungs.count(r.number)) continue;
      if (!runs_in(cfg, s, r)) continue;
      const std::string name = r.label() + "/" + s.name();
      std::string why = r.not_implemented.empty() ? supports(r, s.p, dev) : "not implemented (lab starter)";
      if (why.empty()) {
        const size_t need = rung_device_bytes(r, s.p, s.deterministic);
        if (static_cast<double>(need) > 0.9 * static_cast<double>(dev.mem_free))
          why = "needs " + format_bytes(static_cast<double>(need)) + ", " +
                format_bytes(static_cast<double>(dev.mem_free)) + " free";
      }
      if (!why.empty()) {
        std::fprintf(stderr, "skip %s: %s\n", name.c_str(), why.c_str());
        benchmark::AddCustomContext("skip: " + name, why);
        ++skipped;
        continue;
      }
      benchmark::RegisterBenchmark(name.c_str(), run_bench, &r, s, dev, cfg.check)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(1);
      ++registered;
    }
  }
  std::fprintf(stderr, "ladder_bench: %d benchmarks, %d rung/shape pairs skipped (reasons above)\n", registered,
               skipped);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
