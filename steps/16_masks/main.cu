// Rung 16: masks and score modifiers as code. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) { return fl::run_main(argc, argv, 16); }
