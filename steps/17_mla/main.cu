// Rung 17: multi-head latent attention (MLA) decode. Everything else is the shared runner (common/).
#include "flashladder/runner.h"

int main(int argc, char** argv) { return fl::run_main(argc, argv, 17); }
