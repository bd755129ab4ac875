// Main of the GPU tests: without a usable CUDA device every test exits 77,
// which ctest reports as skipped (not passed, not failed). Listing the tests
// (catch_discover_tests, --list-*) never needs a device.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstring>
#include <string>

#include "catch_compat.h"
#include "flashladder/device.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  std::string why;
  if (!listing && !fl::has_device(&why)) {
    std::printf("no usable CUDA device (%s): GPU tests skipped\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
