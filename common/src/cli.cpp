#include "flashladder/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace fl {

const char* check_mode_name(CheckMode m) {
  switch (m) {
    case CheckMode::full: return "full";
    case CheckMode::sample: return "sample";
    case CheckMode::none: return "none";
    default: return "auto";
  }
}

const char* input_kind_name(InputKind k) {
  switch (k) {
    case InputKind::ones: return "ones";
    case InputKind::identity: return "identity";
    case InputKind::ramp: return "ramp";
    case InputKind::outlier: return "outlier";
    default: return "random";
  }
}

FlagArg split_flag(const char* arg) {
  FlagArg f;
  f.flag = arg;
  const auto eq = f.flag.find('=');
  f.has_eq = f.flag.rfind("--", 0) == 0 && eq != std::string::npos;
  if (f.has_eq) {
    f.value = f.flag.substr(eq + 1);
    f.flag = f.flag.substr(0, eq);
  }
  return f;
}

bool parse_int_value(const std::string& s, int* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < -2147483647LL || v > 2147483647LL) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_double_value(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

namespace {

bool parse_ll(const std::string& s, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

/// Integer flag: syntax here, range in validate() (so messages name the flag).
bool parse_int(const std::string& flag, const std::string& s, int* out, ParseResult* r) {
  if (!parse_int_value(s, out)) {
    r->ok = false;
    r->error = flag + ": expected an integer, got '" + s + "'";
    return false;
  }
  return true;
}

/// --sinks' logits, one per query head: -2 + (h mod 8), so -2 .. 5 in the units of a scaled
/// score. With random inputs a row's largest score is about 0.5 + sqrt(2 ln keys) (3.4 at 64
/// keys, 4.2 at 1024), so some heads' sinks lie above their rows' maxima and some far below;
/// whole numbers are exact in fp16, bf16 and fp32.
std::vector<float> sink_pattern(int heads_q) {
  std::vector<float> s(static_cast<size_t>(std::max(heads_q, 0)));
  for (size_t h = 0; h < s.size(); ++h) s[h] = -2.0f + static_cast<float>(h % 8);
  return s;
}

/// Value of a boolean flag: 1/true or 0/false.
bool parse_bool(const std::string& s, bool* out) {
  if (s != "0" && s != "1" && s != "true" && s != "false") return false;
  *out = (s == "1" || s == "true");
  return true;
}

}  // namespace

ParseResult parse_cli(int argc, const char* const* argv, Options* o) {
  ParseResult r;
  bool kv_heads_set = false, seqlen_k_set = false, sinks_set = false, sinks = false;
  std::vector<int> lens_q, lens_k;  // --seqlens-q/-k: a variable-length batch
  for (int a = 1; a < argc && r.ok; ++a) {
    FlagArg fa = split_flag(argv[a]);
    const std::string flag = fa.flag;
    std::string& value = fa.value;
    const bool has_eq = fa.has_eq;
    // Flags without a value.
    if (flag == "--help" || flag == "-h") { o->help = true; continue; }
    if (flag == "--no-compare") { o->compare_baselines = false; continue; }
    if (flag == "--sweep") { o->sweep = true; continue; }
    if (flag == "--list") { o->list = true; continue; }
    if (flag == "--registry-json") { o->registry_json = true; continue; }
    if (flag == "--device-info") { o->device_info = true; continue; }
    auto need = [&]() -> bool {
      if (has_eq) return true;
      if (a + 1 >= argc) {
        r.ok = false;
        r.error = flag + ": missing value";
        return false;
      }
      value = argv[++a];
      return true;
    };
    Problem& p = o->problem;
    static const char* const kShapeFlags[] = {"--batch",    "--seqlen",    "-n",          "--seqlen-q",
                                              "--seqlen-k", "--seqlens-q", "--seqlens-k", "--heads",
                                              "--kv-heads", "--dim",       "--dim-v",     "--causal",
                                              "--scale",    "--window",    "--prefix",    "--docs",
                                              "--softcap",  "--alibi",     "--sinks",     "--dropout",
                                              "--v-in-k"};
    for (const char* s : kShapeFlags) o->shape_set = o->shape_set || flag == s;
    if (flag == "--batch") { if (need()) parse_int(flag, value, &p.batch, &r); }
    else if (flag == "--seqlen" || flag == "-n") {
      if (need() && parse_int(flag, value, &p.seqlen_q, &r)) { if (!seqlen_k_set) p.seqlen_k = p.seqlen_q; }
    }
    else if (flag == "--seqlen-q") { if (need()) parse_int(flag, value, &p.seqlen_q, &r); }
    else if (flag == "--seqlen-k") { if (need() && parse_int(flag, value, &p.seqlen_k, &r)) seqlen_k_set = true; }
    else if (flag == "--seqlens-q" || flag == "--seqlens-k") {
      // A comma-separated list of lengths, one per sequence of a packed batch (0 allowed).
      std::vector<int>& lens = flag == "--seqlens-q" ? lens_q : lens_k;
      if (need()) {
        lens.clear();
        std::stringstream ss(value);
        std::string item;
        int n = 0;
        while (r.ok && std::getline(ss, item, ',')) {
          if (!parse_int_value(item, &n) || n < 0) {
            r.ok = false;
            r.error = flag + ": expected comma-separated lengths >= 0, got '" + value + "'";
          }
          lens.push_back(n);
        }
        if (r.ok && lens.empty()) {
          r.ok = false;
          r.error = flag + ": expected at least one length";
        }
      }
    }
    else if (flag == "--window" || flag == "--docs") {
      // --window L,R: FlashAttention's window_size (-1: that side open). --docs L,L,..: the
      // lengths of the documents each sequence is made of (a document mask).
      if (need()) {
        std::vector<int> v;
        std::stringstream ss(value);
        std::string item;
        int n = 0;
        while (r.ok && std::getline(ss, item, ',')) {
          if (!parse_int_value(item, &n)) {
            r.ok = false;
            r.error = flag + ": expected comma-separated integers, got '" + value + "'";
          }
          v.push_back(n);
        }
        if (r.ok && flag == "--window" && v.size() != 2) {
          r.ok = false;
          r.error = "--window: expected two sizes, left,right (-1: open), got '" + value + "'";
        } else if (r.ok && flag == "--window") {
          p.window_left = v[0];
          p.window_right = v[1];
        } else if (r.ok) {
          p.doc_starts.assign(1, 0);
          for (int len : v) p.doc_starts.push_back(p.doc_starts.back() + len);
        }
      }
    }
    else if (flag == "--prefix") { if (need()) parse_int(flag, value, &p.prefix, &r); }
    else if (flag == "--softcap") {
      if (need()) {
        double v = 0;
        if (!parse_double_value(value, &v) || !(v >= 0)) {
          r.ok = false;
          r.error = "--softcap: expected a number >= 0 (0: off), got '" + value + "'";
        } else {
          p.softcap = static_cast<float>(v);
        }
      }
    }
    else if (flag == "--dropout") {
      if (need()) {
        double v = 0;
        if (!parse_double_value(value, &v) || !(v >= 0 && v < 1)) {
          r.ok = false;
          r.error = "--dropout: expected a probability in [0, 1) (0: off), got '" + value + "'";
        } else {
          p.dropout_p = static_cast<float>(v);
        }
      }
    }
    else if (flag == "--dropout-rounds") { if (need()) parse_int(flag, value, &p.dropout_rounds, &r); }
    else if (flag == "--heads") { if (need()) parse_int(flag, value, &p.heads_q, &r); }
    else if (flag == "--kv-heads") { if (need() && parse_int(flag, value, &p.heads_kv, &r)) kv_heads_set = true; }
    else if (flag == "--dim") { if (need()) parse_int(flag, value, &p.head_dim, &r); }
    else if (flag == "--dim-v") { if (need()) parse_int(flag, value, &p.head_dim_v, &r); }
    else if (flag == "--splits") { if (need()) parse_int(flag, value, &p.num_splits, &r); }
    else if (flag == "--page-size") { if (need()) parse_int(flag, value, &p.page_size, &r); }
    else if (flag == "--iters") {
      if (need() && parse_int(flag, value, &o->iters, &r) && o->iters < 1) {
        r.ok = false;
        r.error = "--iters must be >= 1, got " + value;
      }
    }
    else if (flag == "--warmup") {
      if (need() && parse_int(flag, value, &o->warmup, &r) && o->warmup < 0) {
        r.ok = false;
        r.error = "--warmup must be >= 0, got " + value;
      }
    }
    else if (flag == "--dtype") {
      if (need() && !parse_dtype(value, &p.dtype)) {
        r.ok = false;
        r.error = "--dtype: expected fp16 or bf16, got '" + value + "'";
      }
    }
    else if (flag == "--causal" || flag == "--deterministic" || flag == "--hadamard" ||
             flag == "--alibi" || flag == "--sinks" || flag == "--v-in-k") {
      // A boolean flag: alone it means 1; "--causal 0|1|true|false" and "--causal=0" still work.
      if (!has_eq) {
        value = "1";
        // The next word is its value unless it is the next flag (no positional arguments exist).
        if (a + 1 < argc && argv[a + 1][0] != '-') value = argv[++a];
      }
      bool* target = flag == "--causal"     ? &p.causal
                     : flag == "--alibi"    ? &p.alibi
                     : flag == "--sinks"    ? &sinks
                     : flag == "--v-in-k"   ? &p.v_in_k
                     : flag == "--hadamard" ? &o->fp8.hadamard
                                            : &o->deterministic;
      sinks_set = sinks_set || flag == "--sinks";
      if (!parse_bool(value, target)) {
        r.ok = false;
        r.error = flag + ": expected 0 or 1 (or nothing, meaning 1), got '" + value + "'";
      }
    }
    else if (flag == "--scale") {
      if (need()) {
        double v = 0;
        if (!parse_double_value(value, &v) || !(v > 0)) {
          r.ok = false;
          r.error = "--scale: expected a number > 0, got '" + value + "'";
        } else {
          p.softmax_scale = static_cast<float>(v);
        }
      }
    }
    else if (flag == "--seed") {
      long long v;
      if (need()) {
        if (!parse_ll(value, &v) || v < 0) { r.ok = false; r.error = "--seed: expected a non-negative integer, got '" + value + "'"; }
        else o->seed = static_cast<unsigned long long>(v);
      }
    }
    else if (flag == "--check") {
      if (need()) {
        if (value == "full") o->check = CheckMode::full;
        else if (value == "sample") o->check = CheckMode::sample;
        else if (value == "none") o->check = CheckMode::none;
        else if (value == "auto") o->check = CheckMode::auto_;
        else { r.ok = false; r.error = "--check: expected full, sample, none or auto, got '" + value + "'"; }
      }
    }
    else if (flag == "--input") {
      if (need()) {
        if (value == "random") o->input = InputKind::random;
        else if (value == "ones") o->input = InputKind::ones;
        else if (value == "identity") o->input = InputKind::identity;
        else if (value == "ramp") o->input = InputKind::ramp;
        else if (value == "outlier") o->input = InputKind::outlier;
        else { r.ok = false; r.error = "--input: expected random, ones, identity, ramp or outlier, got '" + value + "'"; }
      }
    }
    else if (flag == "--fp8-scale") {
      if (need() && !parse_fp8_scaling(value, &o->fp8.scaling)) {
        r.ok = false;
        r.error = "--fp8-scale: expected head or tensor, got '" + value + "'";
      }
    }
    else if (flag == "--json") { if (need()) o->json_path = value; }
    else if (flag == "--variant") { if (need()) o->variant = value; }
    else {
      r.ok = false;
      r.error = "unknown flag '" + flag + "' (see --help)";
    }
  }
  // MHA by default: --heads alone sets both.
  if (r.ok && !kv_heads_set) o->problem.heads_kv = o->problem.heads_q;
  // One sink per query head: set once --heads is known, wherever it came on the line.
  if (r.ok && sinks_set)
    o->problem.sinks = sinks ? sink_pattern(o->problem.heads_q) : std::vector<float>{};
  if (r.ok && !lens_k.empty() && lens_q.empty()) {
    r.ok = false;
    r.error = "--seqlens-k: needs --seqlens-q (the packed batch's query lengths)";
  }
  if (r.ok && !lens_q.empty()) set_varlen(&o->problem, lens_q, lens_k);
  // The dropout mask's seed is the inputs' (--seed, wherever it came on the line), offset 0.
  if (r.ok) o->problem.dropout_seed = o->seed;
  return r;
}

std::string usage(const std::string& program) {
  std::ostringstream s;
  s << "usage: " << program << " [flags]\n"
    << "Runs one attention problem, checks it against the fp64 CPU reference, times it,\n"
    << "and compares with the rung's declared baselines on the same input. A backward rung\n"
    << "runs its forward pass once (O, LSE), then times and checks dQ, dK, dV.\n\n"
    << "problem:\n"
    << "  --batch N          batch size (default 4)\n"
    << "  --seqlen N         seqlen_q = seqlen_k = N\n"
    << "  --seqlen-q N       query length (default 1024)\n"
    << "  --seqlen-k N       key/value length (default: seqlen-q)\n"
    << "  --seqlens-q L,L,.. a packed batch of variable-length sequences (rungs 14-16): one\n"
    << "                     query length per sequence; sets --batch and max seqlen\n"
    << "  --seqlens-k L,L,.. their key lengths (default: --seqlens-q)\n"
    << "  --heads N          query heads (default 16)\n"
    << "  --kv-heads N       key/value heads, divides --heads (default: --heads)\n"
    << "  --dim N            head_dim, multiple of 8, <= 256 (default 64)\n"
    << "  --dim-v N          V's and O's head_dim, multiple of 8, <= 256, any pair with --dim\n"
    << "                     (default: --dim; MLA's prefill: --dim 192 --dim-v 128)\n"
    << "  --v-in-k [0|1]     V is K's first --dim-v columns, one tensor (MLA's latent cache:\n"
    << "                     --dim 576 --dim-v 512 --kv-heads 1, rung 17)\n"
    << "  --dtype T          fp16 | bf16 (default fp16)\n"
    << "  --causal [0|1]     bottom-right aligned causal mask (default 0; alone: 1)\n"
    << "  --scale X          softmax scale (default 1/sqrt(dim))\n"
    << "  --window L,R       sliding window: query i sees keys i+off-L .. i+off+R (-1: open)\n"
    << "  --prefix N         prefix-LM: the first N keys are seen by every query\n"
    << "  --docs L,L,..      document mask: the lengths of the documents of each sequence\n"
    << "  --softcap X        cap * tanh(score / cap) on the scaled scores (0: off)\n"
    << "  --alibi [0|1]      ALiBi biases with the paper's slopes\n"
    << "  --sinks [0|1]      attention sinks: head h's logit, -2 + (h mod 8), joins each row's\n"
    << "                     softmax denominator with no value (--window, --prefix, --docs,\n"
    << "                     --softcap, --alibi and --sinks: rung 16 and its backward; the\n"
    << "                     other rungs refuse them in one line)\n"
    << "  --dropout P        attention dropout: each P element kept when its Philox4x32 byte\n"
    << "                     is <= floor((1 - P) 255) (probability within 1/256 of 1 - P),\n"
    << "                     scaled by 1 / (1 - P), seeded by --seed (rung 16 and its backward)\n"
    << "  --dropout-rounds R Philox's rounds for --dropout: 7 (default, FlashAttention 2's) or\n"
    << "                     10 (Philox4x32-10, the ablation)\n"
    << "  --splits N         split-KV count for decode rungs (default 0 = heuristic)\n"
    << "  --page-size N      paged KV cache with N-token pages (default 0 = contiguous)\n"
    << "run:\n"
    << "  --input K          random | ones | identity | ramp | outlier (default random)\n"
    << "  --fp8-scale S      FP8 rungs: one scale per head (default) or per tensor\n"
    << "  --hadamard         FP8 rungs: rotate Q and K by a random Hadamard matrix first\n"
    << "  --seed N           input seed (default 2024)\n"
    << "  --check M          auto | full | sample | none (default auto: full when small)\n"
    << "  --iters N          timed launches, median reported (default 50)\n"
    << "  --warmup N         untimed launches first (default 5)\n"
    << "  --variant NAME     run a variant of the rung (ablations; see --list)\n"
    << "  --sweep            run the rung's sweep table (rungs that define one)\n"
    << "  --deterministic [0|1]  backward rungs: dQ summed in a fixed order, bitwise identical\n"
    << "                     run to run (default 0: atomics; alone: 1)\n"
    << "  --no-compare       do not time the rung's baselines (see --list)\n"
    << "  --json FILE        also write the report as JSON\n"
    << "  --list             list the rungs and variants built, with their baselines\n"
    << "  --registry-json    the same as JSON (read by bench/report.py and bench/docgen.py)\n"
    << "  --device-info      print the GPU and its peak rates\n"
    << "exit codes: 0 ok, 1 check failed, 2 bad or unsupported input, 77 no usable CUDA device\n";
  return s.str();
}

}  // namespace fl
