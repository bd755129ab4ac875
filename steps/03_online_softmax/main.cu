// Rung 03: FlashAttention-1 (online softmax, K/V-outer loop). Everything else is the shared runner.
#include "flashladder/runner.h"

int main(int argc, char** argv) {
  return fl::run_main(argc, argv, 3);
}
