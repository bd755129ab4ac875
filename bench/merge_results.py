#!/usr/bin/env python3
"""Joins result folders of one GPU, measured in parts, into one folder.

    python3 bench/merge_results.py OUT PART [PART ...] [--git-sha SHA]

Each PART is a folder written by `bench/run_all.sh --family prefill|decode --results PART` (or a
whole run). OUT gets:
  ladder_bench.json, torch_sdpa.json  the parts' benchmarks one after another; the context of the
  torch_flex.json, torch_mla.json     first part, plus "parts" (each part's device, date, sha)
  meta.json                           {"device", "date" (the latest), "git_sha", "parts": [...]}
  every other file of each part       logs, and any name already taken, get the part's family
                                      (or "partN" when two parts share one) before the extension
                                      (ladder_bench.log -> ladder_bench.decode.log)
  report.md                           bench/report.py over the joined files
The parts must come from the same device; parts with different git shas are joined, and meta.json
lists every sha (the notebooks and the report show them). --git-sha SHA records SHA instead of what
the parts say, for trees whose .git did not follow the checkout they were measured from (a copied
working tree with a stale .git); the parts' own values stay in meta.json's "parts". The report's
baselines come from the newest built tour (bench/report.py --registry).
"""
import json
import os
import shutil
import subprocess
import sys

# report.py reads torch_flex.json and torch_mla.json from the folder of ladder_bench.json.
JOINED = ("ladder_bench.json", "torch_sdpa.json", "torch_flex.json", "torch_mla.json")


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def part_meta(d):
    path = os.path.join(d, "meta.json")
    meta = load(path) if os.path.exists(path) else {}
    meta.setdefault("family", "all")  # run_all.sh without --family
    meta["folder"] = os.path.basename(os.path.normpath(d))
    return meta


def join_json(parts, name, metas):
    out = None
    for d, meta in zip(parts, metas):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            continue
        j = load(path)
        if out is None:
            out = j
            out["context"]["parts"] = []
        else:
            out["benchmarks"].extend(j["benchmarks"])
            for k, v in j["context"].items():  # keep the later part's skip reasons too
                if k.startswith("skip: "):
                    out["context"].setdefault(k, v)
        out["context"]["parts"].append({"family": meta["family"], "date": j["context"].get("date", ""),
                                        "git_sha": j["context"].get("git_sha", ""),
                                        "device": j["context"].get("device", "")})
    return out


def main(argv):
    sha_override = None
    if "--git-sha" in argv:
        i = argv.index("--git-sha")
        if i + 1 >= len(argv):
            sys.exit(__doc__)
        sha_override = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 3:
        sys.exit(__doc__)
    out, parts = argv[1], argv[2:]
    metas = [part_meta(d) for d in parts]
    devices = {m.get("device") for m in metas if m.get("device")}
    if len(devices) > 1:
        sys.exit("merge_results.py: parts come from different devices: %s" % sorted(devices))
    os.makedirs(out, exist_ok=True)
    for name in JOINED:
        j = join_json(parts, name, metas)
        if j is not None and sha_override:
            j["context"]["git_sha"] = sha_override
        if j is not None:
            with open(os.path.join(out, name), "w", encoding="utf-8") as f:
                json.dump(j, f, indent=1)
    families = [m["family"] for m in metas]
    for i, (d, meta) in enumerate(zip(parts, metas)):
        # The part's families name its files ("prefill,ablation" -> "prefill+ablation").
        tag = meta["family"].replace(",", "+") if families.count(meta["family"]) == 1 else "part%d" % (i + 1)
        for name in sorted(os.listdir(d)):
            if name in JOINED or name in ("meta.json", "report.md"):
                continue
            src, dst = os.path.join(d, name), os.path.join(out, name)
            if (os.path.exists(dst) or (len(parts) > 1 and name.endswith(".log"))) and not os.path.isdir(src):
                stem, ext = os.path.splitext(name)
                dst = os.path.join(out, "%s.%s%s" % (stem, tag, ext))
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dst)
    shas = sorted({m.get("git_sha", "unknown") for m in metas})
    meta = {"device": metas[0].get("device", "unknown"),
            "date": max(m.get("date", "") for m in metas),
            "git_sha": sha_override or (shas[0] if len(shas) == 1 else shas),
            "parts": metas}
    with open(os.path.join(out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    report = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.py"),
              os.path.join(out, "ladder_bench.json"), "--variants", "--out", os.path.join(out, "report.md")]
    if os.path.exists(os.path.join(out, "torch_sdpa.json")):
        report[3:3] = ["--torch", os.path.join(out, "torch_sdpa.json")]
    if os.path.exists(os.path.join(out, "ceilings.json")):
        report += ["--ceilings", os.path.join(out, "ceilings.json")]
    subprocess.run(report, check=True)
    print("merge_results.py: wrote %s from %d part(s)" % (out, len(parts)))


if __name__ == "__main__":
    main(sys.argv)
