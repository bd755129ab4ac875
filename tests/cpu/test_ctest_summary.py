#!/usr/bin/env python3
"""tests/ctest_summary.py's closing count on a synthetic JUnit file: no build or GPU needed.

    python3 tests/cpu/test_ctest_summary.py      (ctest: cpu_ctest_summary)

A test skipped by exit 77 counts as skipped; a test ctest could not start (its executable was not
built) counts as failed, as ctest itself counts it, though JUnit marks both "notrun".
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import ctest_summary  # noqa: E402

CASES = """<testsuite>
  <testcase name="cpu_ok" status="run"/>
  <testcase name="gpu_skipped" status="notrun"><skipped message="SKIP_RETURN_CODE=77"/></testcase>
  <testcase name="gpu_regex_skipped" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/></testcase>
  <testcase name="gpu_unbuilt" status="notrun"><skipped message="Unable to find executable"/></testcase>
  <testcase name="gpu_unbuilt_too" status="notrun"><skipped message="Unable to find executable"/></testcase>
  <testcase name="cpu_bad" status="fail"><failure message="Failed"/></testcase>
</testsuite>
"""


def summary(junit):
    """The lines post() prints in a build folder whose JUnit file holds @p junit."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "Testing", "Temporary"))
        labels = {"cpu_ok": ["cpu"], "cpu_bad": ["cpu"], "gpu_skipped": ["gpu"],
                  "gpu_regex_skipped": ["gpu"], "gpu_unbuilt": ["gpu"], "gpu_unbuilt_too": ["gpu"]}
        with open(os.path.join(d, ctest_summary.STATE), "w") as f:
            json.dump({"start": time.time() - 10, "gpu": True, "why": "Fake GPU", "labels": labels}, f)
        with open(os.path.join(d, ctest_summary.JUNIT), "w") as f:
            f.write(junit)
        cwd = os.getcwd()
        out = io.StringIO()
        try:
            os.chdir(d)
            with contextlib.redirect_stdout(out):
                ctest_summary.post()
        finally:
            os.chdir(cwd)
        return out.getvalue().splitlines()


class CtestSummary(unittest.TestCase):
    def test_unbuilt_is_failed_not_skipped(self):
        lines = summary(CASES)
        self.assertEqual(lines[-1], "1 passed, 3 failed, 2 skipped")
        self.assertTrue(lines[-2].startswith(
            "Ran 2 of 6 tests; could not start 2 (failed): 2 Unable to find executable; "
            "skipped 2: 2 GPU and sanitizer tests"), lines[-2])

    def test_reason(self):
        import xml.etree.ElementTree as ET
        reasons = [ctest_summary.not_run_reason(c) for c in ET.fromstring(CASES).iter("testcase")]
        self.assertEqual(reasons, ["", "", "", "Unable to find executable",
                                   "Unable to find executable", ""])


if __name__ == "__main__":
    unittest.main()
