#!/usr/bin/env python3
"""The host time of a serving call (host_serving.py) on two builds of the package, in turn; with
--steps, of a forward + backward step under autograd (host_steps.py) too.

    python3 bench/pytorch/host_serving_ab.py --a DIR_A --b DIR_B --out DIR [--names A,B] [--rounds 2] [--calls 2000]
                                             [--steps]

DIR_A and DIR_B each hold a flashladder package (a build's python/ folder). Each round measures
build A, then build B (host_serving.measure: every serving entry point beside SDPA's decode call),
each in a process of its own (one package per process), on the same GPU. Every process times
SDPA's decode call too, so each build's figures have an SDPA figure from the same minute to be
divided by: the host's speed moves between runs (docs/pytorch.md), the ratio within one process
much less. Writes DIR/host_serving_ab.json:

    {"context": {...}, "names": [A, B], "shape": host_serving.SERVING_SHAPE, "calls": N,
     "runs": [{"build": "a" or "b", "round": r, "package": DIR, "call_us": {...},
               "call_alone_us": {...}, "not_run": {...}}, ...]}

and with --steps, per run also "step_us", "step_alone_us" and "steps_not_run" (host_steps.measure
in the same process, after the serving calls, beside SDPA's default causal step), and
"steps_shape" at the top.

and DIR/host_serving_ab.log (each process's output). docs render it with `gen:host-serving-ab`.
Exits 0 without measuring when PyTorch or a CUDA device is missing (runinfo.cuda_torch).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py

MARK = "HOST_SERVING_AB_RESULT "

#: What each process runs: the package from its folder, host_serving.measure, one JSON line.
CHILD = """
import json, sys
sys.path.insert(0, {here!r})
sys.path.insert(0, {package!r})
import torch
import torch.nn.functional as F
import flashladder
import host_serving
r = host_serving.measure(torch, F, flashladder, torch.device("cuda"), {calls})
r.pop("cpu_profile", None)
if {steps}:
    import host_steps
    from torch.nn.attention import SDPBackend, sdpa_kernel
    s = host_steps.measure(torch, F, flashladder, torch.device("cuda"), {calls},
                           lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))
    r["step_us"], r["step_alone_us"] = s["step_us"], s["step_alone_us"]
    r["steps_not_run"] = s.get("not_run", {{}})
r["package_file"] = flashladder.__file__
print({mark!r} + json.dumps(r))
"""


def parse_child(output):
    """The record a child process printed (its MARK line), or None."""
    for line in output.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return None


def measure_once(package, calls, steps=False):
    """host_serving.measure (and with @p steps host_steps.measure) in a fresh process with the
    package from @p package: (record or None, the process's output)."""
    code = CHILD.format(here=HERE, package=os.path.abspath(package), calls=calls, mark=MARK, steps=bool(steps))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the package comes from @p package alone
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    return (parse_child(p.stdout) if p.returncode == 0 else None), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="folder holding build A's flashladder package")
    ap.add_argument("--b", required=True, help="folder holding build B's flashladder package")
    ap.add_argument("--names", default="A,B", help="the builds' names, comma-separated (for the tables)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of A then B")
    ap.add_argument("--calls", type=int, default=2000, help="calls per entry point per process (host_serving)")
    ap.add_argument("--steps", action="store_true",
                    help="also time a forward + backward step under autograd per entry point (host_steps.py)")
    ap.add_argument("--out", required=True, help="folder for host_serving_ab.json and .log")
    args = ap.parse_args(argv)
    names = args.names.split(",")
    if len(names) != 2 or args.rounds < 1 or args.calls < 10:
        ap.error("--names: two names; --rounds >= 1; --calls >= 10")
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "host_serving_ab.log")):
        torch = runinfo.cuda_torch("host_serving_ab.py")
        if torch is None:
            return 0
        import host_serving

        git = runinfo.git_info()
        device = torch.cuda.get_device_name()
        result = {"context": dict(git, date=runinfo.now(), device=device, command=runinfo.command_line(),
                                  versions=runinfo.versions()),
                  "names": names, "shape": dict(host_serving.SERVING_SHAPE, dtype="fp16"), "calls": args.calls,
                  "runs": []}
        if args.steps:
            import host_steps
            result["steps_shape"] = dict(host_steps.STEP_SHAPE, dtype="fp16")
        failed = 0
        for r in range(1, args.rounds + 1):
            for build, package in (("a", args.a), ("b", args.b)):
                rec, out = measure_once(package, args.calls, args.steps)
                print("== round %d, build %s (%s, %s)" % (r, build, names[build == "b"], package))
                print(out.rstrip())
                if rec is None:
                    failed += 1
                    print("host_serving_ab.py: round %d, build %s: no result" % (r, build))
                    continue
                run = {"build": build, "round": r, "package": package, "call_us": rec["call_us"],
                       "call_alone_us": rec["call_alone_us"], "not_run": rec.get("not_run", {})}
                for key in ("step_us", "step_alone_us", "steps_not_run"):
                    if key in rec:
                        run[key] = rec[key]
                result["runs"].append(run)
        runinfo.write_json(os.path.join(args.out, "host_serving_ab.json"), result)
        runinfo.update_meta(args.out, device, git, runinfo.command_line())
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
