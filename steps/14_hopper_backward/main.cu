// Rung 14: the Hopper backward pass. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) { return fl::run_main(argc, argv, 14); }
