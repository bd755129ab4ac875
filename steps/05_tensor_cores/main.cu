// Rung 05: FlashAttention-2 on tensor cores. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) {
  return fl::run_main(argc, argv, 5);
}
