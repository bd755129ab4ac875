// A Problem from its shape in one call, for tests that build many small problems.
#pragma once

#include "flashladder/problem.h"

namespace fl_test {

inline fl::Problem shape(int b, int sq, int sk, int hq, int hkv, int d, bool causal,
                         fl::DType t = fl::DType::fp16) {
  fl::Problem p;
  p.batch = b;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  p.causal = causal;
  p.dtype = t;
  return p;
}

}  // namespace fl_test
