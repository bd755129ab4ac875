#!/usr/bin/env python3
"""What ctest's closing line does not say: how many tests ran, and how many were skipped and why.

ctest ends with "100% tests passed, 0 tests failed out of N" when most of the N were skipped
(exit 77: no GPU, no PyTorch). tests/CMakeLists.txt runs this script from the build folder's
CTestCustom.cmake, before the tests (`pre`) and after them (`post`):

  pre   the tests this build registers by label (CPU; GPU and sanitizer; CPU tests that need
        PyTorch), and whether this machine has a usable CUDA GPU (rung 01's --device-info);
  post  from the JUnit file the test presets write (CMakePresets.json, outputJUnitFile): how many
        of the tests of this run ran and how many were skipped, by label, and as its last line the
        plain "N passed, N failed, N skipped". Without a JUnit file written by this run (ctest
        without a preset), it prints nothing, and ctest's own line stays the last.

It never changes ctest's result: it exits 0 whatever it finds.
"""
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

STATE = os.path.join("Testing", "Temporary", "fl_ctest_summary.json")
JUNIT = os.path.join("Testing", "Temporary", "junit.xml")  # CMakePresets.json's outputJUnitFile
GUARD = "FL_CTEST_SUMMARY"  # set for the nested `ctest --show-only`, which runs this script too


def labels_by_test():
    env = dict(os.environ, **{GUARD: "nested"})
    out = subprocess.run(["ctest", "--show-only=json-v1"], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    labels = {}
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels[t["name"]] = props.get("LABELS", [])
    return labels


def group(labels):
    """The reason a test can skip, from its labels."""
    if "torch" in labels:
        return "torch"
    if "cpu" in labels:
        return "cpu"
    return "gpu"  # labels gpu and sanitizer: exit 77 without a usable CUDA GPU


def probe_device(binary):
    """(True, name) with a usable CUDA GPU, (False, why) without, (None, why) if unknown."""
    if not binary or not os.path.exists(binary):
        return None, "the device probe is not built"
    try:
        r = subprocess.run([binary, "--device-info"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    text = (r.stdout + r.stderr).strip().splitlines()
    line = text[0] if text else ""
    if r.returncode == 0:
        return True, line
    if r.returncode == 77:
        # "01_naive: no usable CUDA device (why); nothing to run (exit 77 = skipped)" -> why
        why = line.split("no usable CUDA device (", 1)[-1].rsplit("); nothing", 1)[0]
        return False, why
    return None, line


def pre(binary):
    labels = labels_by_test()
    groups = [group(v) for v in labels.values()]
    n_cpu, n_torch, n_gpu = (groups.count(g) for g in ("cpu", "torch", "gpu"))
    has, why = probe_device(binary)
    os.makedirs(os.path.dirname(STATE), exist_ok=True)
    with open(STATE, "w") as f:
        json.dump({"start": time.time(), "gpu": has, "why": why, "labels": labels}, f)
    print(f"This build registers {len(labels)} tests: {n_cpu + n_torch} CPU tests ({n_torch} of them "
          f"need PyTorch and skip without it) and {n_gpu} GPU and sanitizer tests.")
    if has is False:
        print(f"No usable CUDA GPU here ({why}): the {n_gpu} GPU and sanitizer tests will be skipped. "
              "ctest's closing line counts skipped tests among those passed; what ran follows it.")
    elif has:
        print(f"CUDA GPU: {why}. Tests that need more GPUs, compute-sanitizer or PyTorch skip without.")
    else:
        print(f"Whether a CUDA GPU is usable here is unknown ({why}).")


def not_run_reason(case):
    """Why ctest did not run a test it counts as failed ("" for a skip or a test that ran).

    JUnit "notrun" covers both: a skip (exit 77 under SKIP_RETURN_CODE, whose message is
    "SKIP_RETURN_CODE=77", or SKIP_REGULAR_EXPRESSION_MATCHED) and a test that could not start
    ("Unable to find executable", "Required Files Missing", "Fixture dependency failed", ...)."""
    if case.get("status") != "notrun":
        return ""
    node = case.find("skipped")
    message = (node.get("message") if node is not None else "") or ""
    if not message or message.startswith("SKIP_") or message.lower() in ("skipped", "disabled"):
        return ""
    return message


def post():
    try:
        with open(STATE) as f:
            state = json.load(f)
        if os.path.getmtime(JUNIT) < state["start"]:
            return  # the JUnit file is an earlier run's: this run wrote none
        suite = ET.parse(JUNIT).getroot()
    except (OSError, ValueError, KeyError, ET.ParseError):
        return
    passed, failed, not_run, skipped = 0, 0, {}, {}
    for case in suite.iter("testcase"):
        why = not_run_reason(case)
        if case.find("failure") is not None or case.get("status") == "fail":
            failed += 1
        elif why:
            not_run[why] = not_run.get(why, 0) + 1
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            g = group(state["labels"].get(case.get("name"), []))
            skipped[g] = skipped.get(g, 0) + 1
        else:
            passed += 1
    # A test ctest could not start (its executable was not built, a required file is missing) is
    # a failure, as ctest counts it, never a skip: ctest's JUnit file marks both "notrun".
    n_not_run = sum(not_run.values())
    n_skipped = sum(skipped.values())
    names = {"gpu": "GPU and sanitizer tests", "torch": "CPU tests that need PyTorch",
             "cpu": "CPU tests (disabled at configure or exit 77: ctest's list above)"}
    if state.get("gpu") is False:
        names["gpu"] += " (no usable CUDA GPU here)"
    parts = [f"{n} {names[g]}" for g, n in sorted(skipped.items(), key=lambda x: -x[1])]
    line = f"Ran {passed + failed} of {passed + failed + n_not_run + n_skipped} tests"
    if n_not_run:
        line += f"; could not start {n_not_run} (failed): " + ", ".join(
            f"{n} {why}" for why, n in sorted(not_run.items()))
    if n_skipped:
        line += f"; skipped {n_skipped}: " + ", ".join(parts)
    print(line + ".")
    print(f"{passed} passed, {failed + n_not_run} failed, {n_skipped} skipped")


def main():
    if os.environ.get(GUARD):
        return
    try:
        if sys.argv[1] == "pre":
            pre(sys.argv[2] if len(sys.argv) > 2 else "")
        else:
            post()
    except Exception as e:  # a summary must never fail the tests it summarizes
        print(f"ctest_summary.py {sys.argv[1]}: {e}")


if __name__ == "__main__":
    main()
