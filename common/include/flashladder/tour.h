/// @file tour.h
/// @brief The tour (bin/tour): every main rung in order, each lesson on a problem where it holds,
/// one table per lesson with the speedup over each rung's first baseline.
#pragma once

namespace fl {

/// The tour: every main rung in order, one table per section. Returns an ExitCode.
int tour_main(int argc, char** argv);

}  // namespace fl
