/// @file catch_compat.h
/// @brief One include for Catch2 v2 (Debian 12) and v3 (Ubuntu 24.04).
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define FL_CATCH_MAJOR 3
using Catch::Approx;  // v2 puts Approx in the global namespace, v3 in Catch
#else
#include <catch2/catch.hpp>
#define FL_CATCH_MAJOR 2
#endif
