// Rung 15: persistent scheduling and variable-length batches on Hopper. Everything else is the
// shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) { return fl::run_main(argc, argv, 15); }
