#!/usr/bin/env python3
"""FlashAttention 2's own test file, run on flashladder: the share of its cases that run and pass.

    PYTHONPATH=build/release/python python3 bench/studies/fa_tests/run.py \\
        --tests PATH/flash-attention/tests/test_flash_attn.py --out DIR [--sample 1/20] [-k EXPR]

The test file is FlashAttention's (github.com/Dao-AILab/flash-attention, tests/test_flash_attn.py),
not part of this repository: give its path. This folder puts a package named ``flash_attn`` first on
the path (flash_attn/: flashladder's functions under FlashAttention's names, unchanged, and the
few helpers its tests import: bert_padding, layers.rotary, and the S_dmask block width of
flash_attn_interface), then runs pytest on the file with fa_tests_plugin.py, which samples the
cases (--sample k/n: the same cases everywhere, by a hash of each case's id) and classifies each:
passed, failed, refused (flashladder's one-line refusal), internal (the test calls
FlashAttention's C++ extension itself) or skipped (FlashAttention's own skip); with --budget, the
cases left once it has passed are not run and not counted (not_reached). Writes
DIR/fa_tests.json (the plugin's counts, with the share that ran: passed + failed over the cases
not skipped, and the share of those that passed), DIR/pytest.log and DIR/meta.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "pytorch"))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", required=True, help="FlashAttention's tests/test_flash_attn.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--package", help="the folder holding flashladder (default: PYTHONPATH)")
    ap.add_argument("--sample", default="1/1", help="k/n: run the cases whose id hashes below k modulo n")
    ap.add_argument("-k", dest="expr", help="pytest's -k expression")
    ap.add_argument("--source", default="", help="where the test file comes from, kept in the report "
                    "(e.g. 'flash-attention 0251105a')")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per case (pytest-timeout)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds after which the remaining cases are left unrun (counted as not_reached)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out_json = os.path.abspath(os.path.join(args.out, "fa_tests.json"))
    paths = [HERE] + ([os.path.abspath(args.package)] if args.package else []) + \
        [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), FA_TESTS_OUT=out_json, FA_TESTS_SAMPLE=args.sample,
               FA_TESTS_BUDGET=str(args.budget))
    cmd = [sys.executable, "-m", "pytest", os.path.abspath(args.tests), "-p", "fa_tests_plugin", "-q",
           "-p", "no:cacheprovider", "--timeout=%d" % args.timeout, "-rfE", "--tb=line"]
    if args.expr:
        cmd += ["-k", args.expr]
    t0 = time.time()
    with open(os.path.join(args.out, "pytest.log"), "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, env=env, cwd=os.path.dirname(os.path.abspath(args.tests)), stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if not os.path.exists(out_json):
        print("fa_tests: pytest ended (exit %d) without the plugin's report: see %s" %
              (rc, os.path.join(args.out, "pytest.log")))
        return 1
    with open(out_json, encoding="utf-8") as f:
        data = json.load(f)
    t = data["total"]
    cases = sum(n for kind, n in t.items() if kind != "not_reached")
    not_skipped = cases - t.get("skipped", 0)
    ran = t.get("passed", 0) + t.get("failed", 0)
    data.update({"cases": cases, "not_skipped": not_skipped, "ran": ran,
                 "ran_share": ran / not_skipped if not_skipped else None,
                 "passed_share_of_ran": t.get("passed", 0) / ran if ran else None,
                 "pytest_exit": rc, "seconds": round(time.time() - t0, 1),
                 "not_reached": t.get("not_reached", 0), "tests_file": os.path.basename(args.tests),
                 "tests_source": args.source})
    try:
        import torch
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        data["versions"] = {"torch": torch.__version__}
    except ImportError:
        device = "unknown"
    data["device"] = {"name": device}
    data.update(runinfo.git_info())
    data["date"] = runinfo.now()
    runinfo.write_json(out_json, data)
    runinfo.update_meta(args.out, device, runinfo.git_info(), runinfo.command_line())
    print("fa_tests: %d cases (sample %s), %d not skipped: %d ran (%s), %d passed, %d failed, %d refused, "
          "%d internal" % (cases, args.sample, not_skipped, ran,
                           "%.1f%%" % (100 * data["ran_share"]) if data["ran_share"] is not None else "-",
                           t.get("passed", 0), t.get("failed", 0), t.get("refused", 0), t.get("internal", 0)))
    for text, count in data["refusals"][:10]:
        print("  refused %5d  %s" % (count, text))
    if rc not in (0, 1):  # 0: all passed, 1: some failed; else pytest stopped (collection, usage)
        print("fa_tests: pytest stopped with exit %d before running the file: see %s" %
              (rc, os.path.join(args.out, "pytest.log")))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
