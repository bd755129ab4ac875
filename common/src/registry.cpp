#include "flashladder/registry.h"

#include <algorithm>

#include "flashladder/static_switch.h"

namespace fl {

std::string Rung::label() const {
  std::string s = (number < 10 ? "0" : "") + std::to_string(number) + "_" + name;
  if (!variant.empty()) s += "[" + variant + "]";
  return s;
}

void Registry::add(Rung r) {
  rungs_.push_back(std::move(r));
  std::stable_sort(rungs_.begin(), rungs_.end(), [](const Rung& a, const Rung& b) { return a.number < b.number; });
}

const Rung* Registry::find(int number, const std::string& variant) const {
  for (const auto& r : rungs_)
    if (r.number == number && r.variant == variant) return &r;
  return nullptr;
}

const Rung* Registry::previous(int number) const {
  const Rung* best = nullptr;
  for (const auto& r : rungs_)
    if (r.number < number && r.variant.empty() && (!best || r.number > best->number)) best = &r;
  return best;
}

std::vector<const Rung*> Registry::mains() const {
  std::vector<const Rung*> out;
  for (const auto& r : rungs_)
    if (r.variant.empty()) out.push_back(&r);
  return out;
}

std::string generic_supports(const Rung& r, const Problem& p, const DeviceInfo& d) {
  if (!r.head_dims.empty() &&
      std::find(r.head_dims.begin(), r.head_dims.end(), p.head_dim) == r.head_dims.end()) {
    std::string list;
    for (int h : r.head_dims) list += (list.empty() ? "" : ", ") + std::to_string(h);
    return "head_dim " + std::to_string(p.head_dim) + " not supported (supported: " + list + ")";
  }
  if (!r.head_dims.empty() && !head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with -DFL_HEAD_DIM=" +
           std::to_string(FL_HEAD_DIM_ONLY) + ")";
  if (!dtype_built(p.dtype))
    return std::string(dtype_name(p.dtype)) + " not built (configured with -DFL_DTYPE)";
  if (p.page_size > 0 && !r.paged_kv) return "paged KV cache (--page-size) not supported by this rung";
  const int cc = d.cc_major * 10 + d.cc_minor;
  if (r.min_cc > 0 && cc < r.min_cc)
    return "needs compute capability >= " + std::to_string(r.min_cc / 10) + "." + std::to_string(r.min_cc % 10) +
           " (this GPU is " + d.arch() + ")";
  return "";
}

std::string supports(const Rung& r, const Problem& p, const DeviceInfo& d) {
  std::string why = generic_supports(r, p, d);
  if (why.empty() && r.supports) why = r.supports(p, d);
  return why;
}

}  // namespace fl
