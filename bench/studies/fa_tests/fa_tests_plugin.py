"""A pytest plugin for run.py: samples FlashAttention 2's test cases and classifies each outcome.

FA_TESTS_SAMPLE="k/n" keeps the cases whose node id hashes (SHA-1) to less than k modulo n, the
same cases on every machine. FA_TESTS_OUT names the JSON written at the end: per test function
and in all, each case as

  passed    the call ran on flashladder and FlashAttention's checks passed
  failed    it ran and a check failed, or it raised something that is not a refusal
  refused   flashladder raised its one-line refusal ("flashladder: ...": an argument or shape it
            does not take), the count FlashAttention's tests lose to a gap in the API
  internal  the test calls FlashAttention's C++ extension itself (flash_attn_gpu,
            _flash_attn_varlen_forward), which flashladder does not imitate
  skipped   FlashAttention's own skip (pytest.skip: a GPU or size it leaves out)
  not_reached  left unrun once FA_TESTS_BUDGET seconds had passed (the report is still written)
"""

import collections
import hashlib
import json
import os
import time

import pytest

_RESULTS = {}
_DETAIL = {}


def _sample():
    text = os.environ.get("FA_TESTS_SAMPLE", "1/1")
    k, n = (int(x) for x in text.split("/"))
    return k, n


def pytest_collection_modifyitems(config, items):
    k, n = _sample()
    if (k, n) == (1, 1):
        return
    keep, drop = [], []
    for item in items:
        h = int(hashlib.sha1(item.nodeid.encode()).hexdigest(), 16)
        (keep if h % n < k else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


_START = time.time()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    budget = float(os.environ.get("FA_TESTS_BUDGET", "0") or 0)
    if budget and time.time() - _START > budget:
        _RESULTS[item.nodeid] = "not_reached"
        return True  # handled: not run
    return None


def _classify(call):
    exc = call.excinfo
    if exc is None:
        return None, ""
    text = str(exc.value).strip().splitlines()[0] if str(exc.value).strip() else exc.typename
    if isinstance(exc.value, (NotImplementedError, ValueError, RuntimeError, TypeError)) and \
            text.startswith("flashladder:"):
        return "refused", text
    if isinstance(exc.value, (ImportError, AttributeError)) and (
            "flash_attn_gpu" in text or "_flash_attn_varlen_forward" in text):
        return "internal", text
    return "failed", "%s: %s" % (exc.typename, text)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        _RESULTS.setdefault(item.nodeid, "skipped")
        return
    if report.failed:
        kind, text = _classify(call)
        _RESULTS[item.nodeid] = kind or "failed"
        _DETAIL[item.nodeid] = text
    elif report.when == "call" and item.nodeid not in _RESULTS:
        _RESULTS[item.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("FA_TESTS_OUT")
    if not path:
        return
    per_test = collections.defaultdict(collections.Counter)
    for nodeid, kind in _RESULTS.items():
        per_test[nodeid.split("[")[0].split("::")[-1]][kind] += 1
    total = collections.Counter(_RESULTS.values())
    refusals = collections.Counter(t for n, t in _DETAIL.items() if _RESULTS[n] == "refused")
    failures = [{"case": n, "error": t} for n, t in sorted(_DETAIL.items()) if _RESULTS[n] == "failed"]
    k, n = _sample()
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"sample": "%d/%d" % (k, n), "total": dict(total),
                   "per_test": {t: dict(c) for t, c in sorted(per_test.items())},
                   "refusals": refusals.most_common(), "failures": failures[:200],
                   "failures_total": len(failures)}, f, indent=1)
        f.write("\n")
