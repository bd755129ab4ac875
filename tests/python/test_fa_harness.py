#!/usr/bin/env python3
"""bench/studies/fa_tests/run.py on tests/python/fa_harness/test_cases.py (no GPU): every outcome
it tells apart counted as the cases say (passed 4, failed 1, refused 1, skipped 1, internal 1), the
share that ran (passed + failed over the cases not skipped), a sample of 1/2 keeping fewer cases,
a budget leaving cases unrun (not counted), and a file that cannot be collected failing the run.
Exit 77 (skipped) without PyTorch or pytest.

    PYTHONPATH=build/ci/python python3 tests/python/test_fa_harness.py
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RUN = os.path.join(ROOT, "bench", "studies", "fa_tests", "run.py")
CASES = os.path.join(HERE, "fa_harness", "test_cases.py")


def run(out, *extra, tests=CASES):
    rc = subprocess.run([sys.executable, RUN, "--tests", tests, "--out", out] + list(extra),
                        capture_output=True, text=True).returncode
    path = os.path.join(out, "fa_tests.json")
    with open(path, encoding="utf-8") as f:
        return rc, json.load(f)


def main():
    for name in ("torch", "pytest", "pytest_timeout"):
        if importlib.util.find_spec(name) is None:
            print("%s is not installed: skipped (exit 77)" % name)
            return SKIP
    failures = []

    def check(ok, what):
        print("%s  %s" % ("ok  " if ok else "FAIL", what))
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="fl-fa-harness-") as tmp:
        rc, d = run(os.path.join(tmp, "all"))
        check(rc == 0, "run.py exits 0 when the file ran (some cases failing is its result, not an error)")
        check(d["total"] == {"passed": 4, "failed": 1, "refused": 1, "skipped": 1, "internal": 1},
              "each outcome counted as the cases say: %s" % d["total"])
        check(d["not_skipped"] == 7 and d["ran"] == 5 and abs(d["ran_share"] - 5 / 7) < 1e-9,
              "the share that ran: passed + failed over the cases not skipped (5 of 7)")
        check(d["refusals"] and d["refusals"][0][0].startswith("flashladder:"),
              "the refusal's one line is kept: %s" % (d["refusals"][:1],))
        check(d["per_test"].get("test_pass") == {"passed": 2}, "per test function: test_pass's two cases passed")
        rc, d2 = run(os.path.join(tmp, "half"), "--sample", "1/2")
        check(rc == 0 and 0 < d2["cases"] < d["cases"], "--sample 1/2 keeps some cases, not all (%d of %d)"
              % (d2["cases"], d["cases"]))
        rc3, d3 = run(os.path.join(tmp, "half2"), "--sample", "1/2")
        check(d3["per_test"] == d2["per_test"], "--sample keeps the same cases every time")
        rc, d4 = run(os.path.join(tmp, "budget"), "--budget", "1e-9")
        check(rc == 0 and d4["not_reached"] == 8 and d4["cases"] == 0,
              "--budget: the cases left once it has passed are not run and not counted (%s)" % d4["total"])
        broken = os.path.join(tmp, "test_broken.py")
        with open(broken, "w", encoding="utf-8") as f:
            f.write("import no_such_module_here\n\ndef test_x():\n    pass\n")
        rc, _ = run(os.path.join(tmp, "broken"), tests=broken)
        check(rc == 1, "a file that cannot be collected fails the run (exit %d)" % rc)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
