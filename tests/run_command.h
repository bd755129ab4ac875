/// @file run_command.h
/// @brief Runs a shell command from a CPU test: exit code and combined output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fl_test {

/// Runs @p cmd with stderr folded into stdout; fills @p out; returns the exit
/// code (-1 if it could not start or did not exit normally).
inline int run_command(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace fl_test
