// The masks the CPU tests of masks.h and of rung 16's block lists run over: every kind and their
// combinations, with lengths that make tails, seqlen_q != seqlen_k both ways, one query row and
// windows wider than the sequence, and document masks over the caller's document starts.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "flashladder/masks.h"

namespace fl_test {

struct MaskCase {
  std::string name;
  fl::MaskSpec m;
  int len_q, len_k;
};

/// The cases, the document ones over @p docs (starts, ending at the sequence's length; the
/// caller keeps them alive).
inline std::vector<MaskCase> mask_cases(const std::vector<int>& docs) {
  using fl::MaskSpec;
  std::vector<MaskCase> out;
  for (auto [lq, lk] : {std::pair{300, 300}, std::pair{77, 500}, std::pair{500, 77}, std::pair{1, 129}, std::pair{256, 256}}) {
    out.push_back({"none", MaskSpec{}, lq, lk});
    MaskSpec causal;
    causal.window_right = 0;
    out.push_back({"causal", causal, lq, lk});
    for (auto [l, r] : {std::pair{64, 0}, std::pair{100, 37}, std::pair{-1, 5}, std::pair{3, -1}, std::pair{200, 200},
                        std::pair{1000, 1000}}) {
      MaskSpec w;
      w.window_left = l;
      w.window_right = r;
      out.push_back({"window(" + std::to_string(l) + "," + std::to_string(r) + ")", w, lq, lk});
    }
    MaskSpec prefix;
    prefix.prefix = 50;
    out.push_back({"prefix-lm(50)", prefix, lq, lk});
    MaskSpec prefix_window = prefix;
    prefix_window.window_left = 20;
    out.push_back({"prefix-lm + window left 20", prefix_window, lq, lk});
  }
  // Documents: self-attention over one packed sequence (len_q = len_k = the last start).
  MaskSpec doc;
  doc.doc_starts = docs.data();
  doc.n_docs = static_cast<int>(docs.size()) - 1;
  out.push_back({"document", doc, docs.back(), docs.back()});
  MaskSpec doc_causal = doc;
  doc_causal.window_right = 0;
  out.push_back({"document + causal", doc_causal, docs.back(), docs.back()});
  MaskSpec doc_window = doc_causal;
  doc_window.window_left = 16;
  out.push_back({"document + sliding window 16", doc_window, docs.back(), docs.back()});
  return out;
}

}  // namespace fl_test
