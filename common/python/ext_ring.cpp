/// @file common/python/ext_ring.cpp
/// @brief The extension's ring plan (flashladder._ext.ring_plan): rung 12's plan of one rank
/// (common/include/flashladder/ring_plan.h, plain C++) as Python data, for the package's ring
/// (flashladder/_ring.py), which runs the same plan as the rung.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <exception>
#include <string>

#include "flashladder/ring_plan.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fl {
namespace {

/// Rung 12's plan of rank @p rank (ring_plan.h) as Python data, for the package's ring
/// (flashladder._ring): its shard's chunks and, per step, whose K/V it holds, what it sends and
/// receives, and its launches (local rows of its Q shard against rows of the K/V shard held).
nb::dict ring_plan_dict(const std::string& sharding, bool causal, int n, int ranks, int rank,
                        int key_cap) {
  ring::Sharding sh{};
  if (!ring::parse_sharding(sharding, &sh))
    throw nb::value_error(
        ("ring: sharding must be 'zigzag' or 'contiguous', got '" + sharding + "'").c_str());
  ring::RankPlan plan;
  try {
    plan = ring::plan_rank(sh, causal, n, ranks, rank, key_cap);
  } catch (const std::exception& e) {
    throw nb::value_error(e.what());
  }
  nb::list chunks;
  for (const ring::LocalChunk& c : plan.q_shard.chunks)
    chunks.append(nb::make_tuple(c.chunk, c.global.begin, c.global.len, c.local));
  nb::list steps;
  for (const ring::StepPlan& sp : plan.steps) {
    nb::list launches;
    for (const ring::Launch& l : sp.launches)
      launches.append(nb::make_tuple(l.q.begin, l.q.len, l.k.begin, l.k.len, l.causal));
    nb::dict d;
    d["step"] = sp.step;
    d["src_rank"] = sp.src_rank;
    d["kv_len"] = sp.kv_len;
    d["send_to"] = sp.send_to;
    d["recv_from"] = sp.recv_from;
    d["send_len"] = sp.send_len;
    d["recv_len"] = sp.recv_len;
    d["launches"] = launches;
    steps.append(d);
  }
  nb::dict out;
  out["sharding"] = ring::sharding_name(sh);
  out["key_cap"] = key_cap;
  out["forward_key_cap"] = ring::forward_key_cap(n);
  out["causal"] = causal;
  out["n"] = n;
  out["ranks"] = ranks;
  out["rank"] = rank;
  out["shard_len"] = plan.q_shard.len;
  out["chunks"] = chunks;
  out["steps"] = steps;
  return out;
}

}  // namespace

void bind_ring_plan(nb::module_& m) {
  m.def("ring_plan", &ring_plan_dict, "sharding"_a, "causal"_a, "n"_a, "ranks"_a, "rank"_a,
        "key_cap"_a = 0,
        "Rung 12's plan of one rank (ring_plan.h): 'chunks' (chunk, global begin, length, first "
        "local "
        "row) of its shard, and per step 'src_rank' (whose K/V it holds), 'kv_len', 'send_to', "
        "'recv_from', 'send_len', 'recv_len' (rows passed on after the step) and 'launches' "
        "(q_begin, "
        "q_len, k_begin, k_len, causal: local rows of its Q shard against rows of the K/V shard "
        "held, "
        "causal bottom-right aligned; key_cap > 0: every launch cut by split_keys to at most that "
        "many "
        "keys, several launches of a step then sharing rows), 'key_cap' and 'forward_key_cap' (the "
        "cap "
        "the forward of a pass with a backward takes on rows of n keys, forward_key_cap)");
}

}  // namespace fl
