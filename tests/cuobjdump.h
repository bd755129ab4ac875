/// @file cuobjdump.h
/// @brief What the CPU tests read from compiled device code with cuobjdump (no GPU needed):
/// per-kernel resource usage (rung 07's spill claim, test_spill.cpp) and per-kernel SASS
/// (the Hopper probe, test_hopper_sass.cpp).
///
/// `cuobjdump -res-usage <library>` prints, per cubin and kernel,
///   arch = sm_90
///    Function _ZN2fl9dv_tiling12dv_tiled_fwdINS0_8DvTraitsI6__halfLi128ELi128ELi64ELi64EEEEEv...:
///     REG:255 STACK:440 SHARED:33792 LOCAL:0 ...
/// STACK is the per-thread stack frame (where ptxas puts spilled registers), LOCAL is local
/// memory the source itself asked for; both must be 0 for "no spill".
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"

namespace fl_test {

/// Resource usage of one kernel in one cubin.
struct KernelUsage {
  int reg = -1, stack = -1, local = -1;
};

/// cuobjdump to use: $FL_CUOBJDUMP, then the build's CUDA toolkit, then PATH ("" if none runs).
inline std::string find_cuobjdump() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("FL_CUOBJDUMP")) candidates.push_back(env);
#ifdef FL_CUOBJDUMP
  candidates.push_back(FL_CUOBJDUMP);
#endif
  candidates.push_back("cuobjdump");
  for (const std::string& c : candidates) {
    std::string version;
    if (run_command("\"" + c + "\" --version", &version) == 0) return c;
  }
  return "";
}

/// Runs `cuobjdump FLAG BINARY` (FLAG: "-sass" or "-res-usage"), its output in @p text; the exit
/// status.
inline int run_cuobjdump(const std::string& cuobjdump, const char* flag, const std::string& binary,
                         std::string* text) {
  return run_command("\"" + cuobjdump + "\" " + flag + " \"" + binary + "\"", text);
}

namespace detail {
inline std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}
}  // namespace detail

/// Parses `cuobjdump -res-usage` output: mangled kernel name -> usage, cubins of @p arch only
/// ("sm_90", "sm_90a").
inline std::map<std::string, KernelUsage> parse_res_usage(const std::string& text,
                                                          const std::string& arch) {
  std::map<std::string, KernelUsage> kernels;
  std::istringstream in(text);
  std::string line, current_arch, current_fn;
  auto field = [](const std::string& l, const std::string& key) {
    const size_t pos = l.find(" " + key + ":");
    return pos == std::string::npos ? -1 : std::atoi(l.c_str() + pos + key.size() + 2);
  };
  while (std::getline(in, line)) {
    const size_t a = line.find("arch = ");
    if (a != std::string::npos) {
      current_arch = detail::trimmed(line.substr(a + 7));
      continue;
    }
    const size_t f = line.find("Function ");
    if (f != std::string::npos) {
      current_fn = line.substr(f + 9);
      if (!current_fn.empty() && current_fn.back() == ':') current_fn.pop_back();
      continue;
    }
    if (!current_fn.empty() && line.find("REG:") != std::string::npos) {
      if (current_arch == arch) {
        const std::string padded = " " + line;
        kernels[current_fn] = {field(padded, "REG"), field(padded, "STACK"),
                               field(padded, "LOCAL")};
      }
      current_fn.clear();
    }
  }
  return kernels;
}

/// One SASS instruction as `cuobjdump -sass` prints it, e.g.
///   /*03e0*/   HGMMA.64x64x16.F32 R24, gdesc[UR16], RZ, !UPT ;   /* 0x00e0... */
/// opcode "HGMMA.64x64x16.F32", operands "R24, gdesc[UR16], RZ, !UPT" (a guard predicate such
/// as "@P0" is dropped).
struct SassInstr {
  std::string opcode;
  std::string operands;
};

/// Parses `cuobjdump -sass` output: mangled kernel name -> its instructions, cubins of @p arch.
inline std::map<std::string, std::vector<SassInstr>> parse_sass(const std::string& text,
                                                                const std::string& arch) {
  std::map<std::string, std::vector<SassInstr>> kernels;
  std::istringstream in(text);
  std::string line, current_arch, current_fn;
  while (std::getline(in, line)) {
    const size_t a = line.find("arch = ");
    if (a != std::string::npos) {
      current_arch = detail::trimmed(line.substr(a + 7));
      continue;
    }
    const size_t f = line.find("Function : ");
    if (f != std::string::npos) {
      current_fn = detail::trimmed(line.substr(f + 11));
      continue;
    }
    if (current_arch != arch || current_fn.empty()) continue;
    // "/*addr*/  [@P0] OPCODE operands ;  /* encoding */"
    const size_t open = line.find("/*");
    const size_t close = open == std::string::npos ? open : line.find("*/", open + 2);
    if (close == std::string::npos) continue;
    const std::string addr = line.substr(open + 2, close - open - 2);
    if (addr.empty() || addr.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    std::string body = line.substr(close + 2);
    const size_t semi = body.find(';');
    if (semi == std::string::npos) continue;
    body = detail::trimmed(body.substr(0, semi));
    if (!body.empty() && body[0] == '@') body = detail::trimmed(body.substr(body.find(' ') + 1));
    const size_t sp = body.find(' ');
    SassInstr ins;
    ins.opcode = body.substr(0, sp);
    ins.operands = sp == std::string::npos ? "" : detail::trimmed(body.substr(sp + 1));
    if (!ins.opcode.empty()) kernels[current_fn].push_back(ins);
  }
  return kernels;
}

/// Instructions of @p code whose opcode starts with @p prefix (e.g. "HGMMA", "UTMALDG").
inline int count_opcode(const std::vector<SassInstr>& code, const std::string& prefix) {
  int n = 0;
  for (const SassInstr& i : code) n += i.opcode.compare(0, prefix.size(), prefix) == 0;
  return n;
}

}  // namespace fl_test
