// Rung 02: tiled, fused, two passes over K/V. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) {
  return fl::run_main(argc, argv, 2);
}
