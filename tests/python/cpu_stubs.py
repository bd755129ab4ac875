"""What the package's CPU tests with PyTorch share (test_hf_cpu.py, test_autograd_cpu.py): their
check() and its failures, and check_qkv's key without its CUDA and 16-bit checks, which they put in
place of _core.check_qkv (the rungs' launches are replaced by references on the CPU). Imported from
this folder, the scripts' own (sys.path[0])."""

FAILURES = []


def check(ok, what):
    """Prints one line, "ok" or "FAIL", and keeps the failures for the script's exit status."""
    print("%s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILURES.append(what)


def exit_status():
    """1 (after the count) when a check failed, else 0."""
    print("%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


def cpu_key(q, k, v, causal=False, softmax_scale=None, *args, **kwargs):
    """check_qkv's key without its CUDA and 16-bit checks."""
    return (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], str(q.dtype), bool(causal),
            softmax_scale or 0.0)
