"""What the PyTorch bench scripts (torch_train.py, torch_overhead.py) share: where the package is,
the commit and date of a run, a log that copies stdout, and the JSON they write.

The commit is FL_GIT_SHA when set (a run from a copy of the tree whose .git is stale says so
there), else what `git rev-parse` gives; both are kept when they differ.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # bench/pytorch/ -> the repository


def cuda_torch(script):
    """PyTorch, with a CUDA device visible to it, for the script named @p script; None after
    printing why nothing is measured (no PyTorch, or no CUDA device), so the script exits 0."""
    try:
        import torch
    except ImportError:
        print("%s: PyTorch is not installed: nothing measured" % script)
        return None
    if not torch.cuda.is_available():
        print("%s: no CUDA device visible to PyTorch: nothing measured" % script)
        return None
    return torch


def import_flashladder(package_dir=None):
    """Imports flashladder from @p package_dir when given, else from PYTHONPATH, else from the
    newest build/*/python; None (with the reason printed) when none works."""
    if package_dir:
        candidates = [package_dir]
    else:
        try:
            import flashladder

            return flashladder
        except ImportError:
            pass
        found = glob.glob(os.path.join(ROOT, "build", "*", "python", "flashladder", "__init__.py"))
        candidates = [os.path.dirname(os.path.dirname(p)) for p in sorted(found, key=os.path.getmtime, reverse=True)]
    for d in candidates:
        sys.path.insert(0, os.path.abspath(d))
        try:
            import flashladder

            return flashladder
        except ImportError as e:
            sys.path.pop(0)
            print("flashladder: not importable from %s (%s)" % (d, e))
    print("flashladder: not found (build it: cmake --preset release && cmake --build --preset release; "
          "then PYTHONPATH=build/release/python, or --package DIR)")
    return None


def package_path(module):
    """The package's folder, relative to the repository root when inside it."""
    d = os.path.dirname(os.path.dirname(os.path.abspath(module.__file__)))
    rel = os.path.relpath(d, ROOT)
    return d if rel.startswith("..") else rel


def git_info():
    """{"git_sha": ..., "git_dirty": bool or None, ["git_sha_as_run": ...]}."""
    out = {}
    try:
        sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", None
    env = os.environ.get("FL_GIT_SHA", "").strip()
    out["git_sha"] = env or sha or "unknown"
    out["git_dirty"] = dirty if not env else None
    if env and sha and not sha.startswith(env[:7]) and not env.startswith(sha[:7]):
        out["git_sha_as_run"] = sha
    return out


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def command_line():
    """This script's command line, relative to the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    return " ".join(["python3", script] + [shlex.quote(a) for a in sys.argv[1:]])


def versions():
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "numpy"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None:
        out["cuda"] = torch.version.cuda
    return out


class Log:
    """Copies everything printed to stdout into a file as well (``with Log(path): ...``)."""

    def __init__(self, path):
        self.file = open(path, "w", encoding="utf-8")
        self.stdout = sys.stdout
        sys.stdout = self

    def write(self, text):
        self.stdout.write(text)
        self.file.write(text)

    def flush(self):
        self.stdout.flush()
        self.file.flush()

    def close(self):
        sys.stdout = self.stdout
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    print("wrote %s" % path)


def update_meta(out_dir, device_name, git, command):
    """Adds @p command to <out_dir>/meta.json (made with the device, date and commit when absent),
    so that the folder is a run of its own that docgen and the notebooks find."""
    path = os.path.join(out_dir, "meta.json")
    meta = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    meta.setdefault("device", device_name)
    meta.setdefault("date", now())
    meta.setdefault("git_sha", git.get("git_sha"))
    commands = meta.setdefault("commands", [])
    if command not in commands:
        commands.append(command)
    write_json(path, meta)


def write_result(out_dir, name, result, device_name):
    """<out_dir>/<name> (the script's JSON) and its command line in <out_dir>/meta.json."""
    write_json(os.path.join(out_dir, name), result)
    update_meta(out_dir, device_name, result, result["command"])


def shape_sweep_main(doc, argv, log_name, run, warmup, add_args=None):
    """The command line of a script timing a grid of shapes (torch_fp8.py, cudnn_fp8.py): --out,
    --iters, --repeats, --warmup (default @p warmup), --quick, --package, and what @p add_args adds
    to the parser; runs @p run(args) with its output copied to <out>/<log_name>."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder (bench/results/<gpu>/...)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--quick", action="store_true", help="seqlen 4k only")
    if add_args:
        add_args(ap)
    ap.add_argument("--package", help="the folder holding flashladder (default: PYTHONPATH, build/*/python)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with Log(os.path.join(args.out, log_name)):
        return run(args)
