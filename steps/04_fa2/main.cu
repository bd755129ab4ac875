// Rung 04: FlashAttention-2 on CUDA cores. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) {
  return fl::run_main(argc, argv, 4);
}
