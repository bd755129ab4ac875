#!/usr/bin/env python3
"""The main loop of a kernel in SASS: its instruction count and mix.

    python3 bench/studies/sass_loop.py LIBRARY_OR_OBJECT KERNEL_REGEX [--arch sm_90]

Reads `cuobjdump -sass` of LIBRARY_OR_OBJECT, takes the first kernel whose mangled name matches
KERNEL_REGEX, and finds its main loop as the widest backward branch (the loop's closing BRA and
the address it jumps back to). Prints the loop's address range, its instruction count and the
most frequent opcodes. This is what rung 08's README counts per chunk (a loop body is one
chunk; check the count of HMMA against the chunk's MMAs: 32 per 16 keys at head_dim 128), e.g.

    python3 bench/studies/sass_loop.py build/release/steps/08_flash_decoding/libfl_rung_08.a \\
        '6__halfNS0_12DecodeTraitsILi128ELi3ELi1EEELb0E'

--containing PREFIX takes instead the narrowest loop that holds an instruction whose full opcode
starts with PREFIX (rung 14's step loop: the innermost with HGMMA), and --count P1,P2,... prints
how many of the loop's instructions start with each prefix (full opcodes: "STS.128", "STSM",
"LDS"), e.g. the shared-memory instructions of rung 14's step at d = 128 (its README, "On the
H200"):

    python3 bench/studies/sass_loop.py build/release/steps/14_hopper_backward/libfl_rung_14.a \
        '13__nv_bfloat16NS0_8BwdTilesILi128ELi64ELi2ELb1ELi2ELb0ELi0ELb0EEELb1ENS0_12CausalOrNone' \
        --containing HGMMA --count HGMMA,STSM,STS.128,STS,LDS.64,LDS

A compile-time fact (needs cuobjdump, no GPU); the figure is the compiler's, so name its version.
"""
import argparse
import collections
import re
import subprocess
import sys


def kernels(sass):
    """(name, [(address, instruction)]) per function of a cuobjdump -sass listing."""
    name, body = None, []
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        yield name, body


def main_loop(body):
    """The widest backward branch's [target, branch] range, or None."""
    best = None
    for addr, ins in body:
        m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\w+,\s*)?0x([0-9a-f]+)", ins)
        if m:
            target = int(m.group(1), 16)
            if target < addr and (best is None or addr - target > best[1] - best[0]):
                best = (target, addr)
    return best


def loops(body):
    """Every backward branch's [target, branch] range."""
    out = []
    for addr, ins in body:
        m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\w+,\s*)?0x([0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < addr:
            out.append((int(m.group(1), 16), addr))
    return out


def full_opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]


def narrowest_loop(body, prefix):
    """The narrowest backward branch's range holding an instruction whose full opcode starts with
    @p prefix, or None."""
    best = None
    for lo, hi in loops(body):
        if any(lo <= a <= hi and full_opcode(i).startswith(prefix) for a, i in body):
            if best is None or hi - lo < best[1] - best[0]:
                best = (lo, hi)
    return best


def count_prefixes(ins, prefixes):
    """{prefix: how many of @p ins start with it}; a longer prefix is not counted under a shorter
    one given too ("STS" counts the stores that neither "STS.128" nor "STSM" took)."""
    out = collections.Counter()
    for i in ins:
        op = full_opcode(i)
        match = [p for p in prefixes if op.startswith(p)]
        if match:
            out[max(match, key=len)] += 1
    return out


def opcode(ins):
    return re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0].split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("kernel", help="regex on the mangled name")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--containing", help="the narrowest loop holding this opcode prefix (default: the widest loop)")
    ap.add_argument("--count", help="comma-separated opcode prefixes to count in the loop")
    a = ap.parse_args()
    sass = subprocess.run(["cuobjdump", "-sass", "-arch", a.arch, a.binary], check=True,
                          capture_output=True, text=True).stdout
    for name, body in kernels(sass):
        if re.search(a.kernel, name):
            loop = narrowest_loop(body, a.containing) if a.containing else main_loop(body)
            if loop is None:
                sys.exit("sass_loop.py: %s has no backward branch%s" % (
                    name, " around %s" % a.containing if a.containing else ""))
            ins = [i for addr, i in body if loop[0] <= addr <= loop[1]]
            mix = collections.Counter(opcode(i) for i in ins)
            what = "loop with %s" % a.containing if a.containing else "main loop"
            print("%s\n  %s 0x%x..0x%x: %d instructions" % (name, what, loop[0], loop[1], len(ins)))
            print("  " + ", ".join("%s %d" % kv for kv in mix.most_common(16)))
            if a.count:
                prefixes = a.count.split(",")
                counts = count_prefixes(ins, prefixes)
                print("  counted: " + ", ".join("%s %d" % (p, counts[p]) for p in prefixes))
            return
    sys.exit("sass_loop.py: no kernel matches %r in %s" % (a.kernel, a.binary))


if __name__ == "__main__":
    main()
