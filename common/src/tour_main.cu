// The tour: every built rung, in order, on one default problem.
#include "flashladder/tour.h"

int main(int argc, char** argv) { return fl::tour_main(argc, argv); }
