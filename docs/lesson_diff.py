#!/usr/bin/env python3
"""How much code each rung of the ladder changes: the lesson-diff table of docs/lessons.md.

    python3 docs/lesson_diff.py [ROOT] [--bin BUILD/bin | --registry REGISTRY.json]
    python3 docs/lesson_diff.py --write docs/lessons.md [...]   regenerate the table in that page
    python3 docs/lesson_diff.py --check docs/lessons.md [...]   exit 1, with a unified diff, if stale

Each rung is paired with the rung it builds on, as its registration declares it (the registry,
printed by the built `tour --registry-json`: its first baseline on another rung, else its
Rung::builds_on tag; rung 08 builds on 05, whose mma.sync it uses; rung 11 on 05). Never by number
or by #include. For each pair it diffs the two teaching texts and counts code lines: added,
removed, changed (added + removed) and the size of each side. A rung whose registration says it
is a new design against its base (Rung::new_design: another algorithm or another engine) is
labelled with what is new, not counted as one lesson.

The teaching text of a rung is what its CMakeLists.txt declares: fl_add_rung(... LESSON <files>),
in reading order (its tile constants, its kernel, the other files a student reads as the lesson;
launchers, registration and variants are not teaching text). A declared file that #includes a
declared file of an earlier rung ("../NN_name/file") reuses that rung's code: the included file
(its own reused files first) is read before it, on this rung's side too, so reused code counts
as unchanged (the diff runs over the files that are not on both sides), never as removed. Rung 06 instantiates rung 05's kernel unchanged,
so its text is rung 05's tile constants and kernel plus its own traits and instantiation; rungs
13 and 15 call rung 10's named steps, so rung 10's kernel is on both sides of their rows.

Code lines: `//` and `/* */` comments (so Doxygen `///` blocks too) and blank lines removed,
whitespace runs collapsed to one space, each line stripped. String and character literals are
kept as they are (a `//` inside a string is not a comment). The diff is difflib's
SequenceMatcher over those lines (autojunk off), so the counts are deterministic.

In --write / --check mode the page's generated block is the text between the lines
`<!-- gen:lesson-diff -->` and `<!-- /gen:lesson-diff -->`; the rest of the page is not touched.
ROOT defaults to the parent of this script's folder; the registry comes from --registry, else the
`tour` of --bin, else the newest build/*/bin/tour of ROOT.
Exit codes: 0 ok; 1 --check found the block stale; 2 bad arguments, no registry, or a page without
markers. Python 3.11 standard library only.
"""

import argparse
import difflib
import glob
import json
import os
import re
import subprocess
import sys

BEGIN_MARK = "<!-- gen:lesson-diff -->"
END_MARK = "<!-- /gen:lesson-diff -->"
STEP_DIR_RE = re.compile(r"^(?P<num>[0-9]{2})_\w+$")
# `#include "../10_warp_specialized/kernel.cuh"` (code reused from an earlier rung) or
# `#include "scheduler.h"` (a file of the same rung).
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"(?:\.\./(?P<dir>[0-9]{2}_\w+)/)?(?P<file>[^"/]+)"', re.M)
# fl_add_rung(...) in a rung's CMakeLists.txt, and the keywords of its arguments.
ADD_RUNG_RE = re.compile(r"fl_add_rung\(([^)]*)\)")
KEYWORDS = ("NUMBER", "NAME", "SOURCES", "LESSON", "HOPPER")


def strip_comments(text):
    """@p text without // and /* */ comments; string and char literals are left alone.

    A block comment becomes one space (so `a/**/b` stays two tokens); newlines inside a block
    comment are kept, so the other lines do not move."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":  # line comment: up to (not including) the newline
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "/" and nxt == "*":  # block comment
            j = text.find("*/", i + 2)
            body = text[i + 2 : (n if j < 0 else j)]
            out.append(" " + "\n" * body.count("\n"))
            i = n if j < 0 else j + 2
        elif c in "\"'":  # string or character literal, with backslash escapes
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def code_lines(text):
    """The code lines of a C++/CUDA source: comments and blank lines gone, whitespace normalized."""
    lines = []
    for line in strip_comments(text).splitlines():
        line = " ".join(line.split())
        if line:
            lines.append(line)
    return lines


def declared_lesson(root, step_dir):
    """The files fl_add_rung(... LESSON ...) of the rung's CMakeLists.txt declares, in order, or
    None for a folder without fl_add_rung (rung 12) or without LESSON."""
    path = os.path.join(root, "steps", step_dir, "CMakeLists.txt")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        m = ADD_RUNG_RE.search(strip_cmake_comments(fh.read()))
    if not m:
        return None
    files, key = [], None
    for tok in m.group(1).split():
        if tok in KEYWORDS:
            key = tok
        elif key == "LESSON":
            files.append(tok)
    return files or None


def strip_cmake_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def rungs(root):
    """[(number, folder name)] of the rungs under ROOT/steps that declare a lesson, in order."""
    steps = os.path.join(root, "steps")
    found = []
    for name in sorted(os.listdir(steps)):
        m = STEP_DIR_RE.match(name)
        if m and declared_lesson(root, name):
            found.append((m.group("num"), name))
    return found


def with_reused(root, path, _seen=()):
    """@p path (repository-relative) preceded by the declared files it #includes: an earlier
    rung's (reused code) or its own rung's, each with its own includes first (see the module
    docstring)."""
    with open(os.path.join(root, path), encoding="utf-8") as fh:
        text = fh.read()
    own_dir = path.split("/")[1]
    files = []
    for m in INCLUDE_RE.finditer(strip_comments(text)):
        d, f = m.group("dir") or own_dir, m.group("file")
        inc = f"steps/{d}/{f}"
        if inc != path and inc not in _seen and f in (declared_lesson(root, d) or ()):
            files += [x for x in with_reused(root, inc, _seen + (path,)) if x not in files]
    return files + [path]


def teaching_files(root, step_dir):
    """Repository-relative paths of a rung's teaching text: its declared files in order, each
    preceded by the earlier rungs' declared files it reuses, each file once."""
    files = []
    for f in declared_lesson(root, step_dir) or ():
        files += [x for x in with_reused(root, f"steps/{step_dir}/{f}") if x not in files]
    return files


def load_registry(root, registry=None, bin_dir=None):
    """{rung number: its main registry entry} from a registry JSON file, else from `tour
    --registry-json` of @p bin_dir, else of the newest build/*/bin/tour; SystemExit when none."""
    if registry:
        with open(registry, encoding="utf-8") as fh:
            doc = json.load(fh)
    else:
        bins = [bin_dir] if bin_dir else glob.glob(os.path.join(root, "build", "*", "bin"))
        tours = [os.path.join(b, "tour") for b in bins if os.path.exists(os.path.join(b, "tour"))]
        if not tours:
            raise SystemExit("lesson_diff: no registry: build the tour (cmake --build --preset release), or "
                             "pass --bin BUILD/bin or --registry FILE")
        out = subprocess.run([max(tours, key=os.path.getmtime), "--registry-json"], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit("lesson_diff: tour --registry-json failed: " + out.stderr.strip())
        doc = json.loads(out.stdout)
    return {e["number"]: e for e in doc["rungs"] if not e["variant"]}


def teaching_lines(root, files):
    lines = []
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            lines += code_lines(fh.read())
    return lines


def diff_counts(old, new):
    """(added, removed) code lines from @p old to @p new."""
    added = removed = 0
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def short(files):
    """`05/tile_config.h` + `05/kernel.cuh`: rung number and file name."""
    return " + ".join(f"`{f.split('/')[1][:2]}/{f.rsplit('/', 1)[1]}`" for f in files)


def lesson_table(root, registry):
    """The generated markdown: the table, then the files each row compares. Deterministic.
    @p registry: load_registry()'s dict (which rung each builds on, and new designs)."""
    found = dict((int(n), d) for n, d in rungs(root))
    rows = [
        "| lesson | teaching text | what changes | code lines before | code lines after | added "
        "| removed | changed |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    listing = []
    for n_new, d_new in sorted(found.items()):
        entry = registry.get(n_new)
        base = entry.get("builds_on", 0) if entry else 0
        if base not in found:
            continue  # rung 01, or a base without a kernel of its own
        d_old = found[base]
        f_old, f_new = teaching_files(root, d_old), teaching_files(root, d_new)
        old, new = teaching_lines(root, f_old), teaching_lines(root, f_new)
        # A file on both sides (reused through #include) is unchanged: the diff is of the others.
        added, removed = diff_counts(teaching_lines(root, [f for f in f_old if f not in f_new]),
                                     teaching_lines(root, [f for f in f_new if f not in f_old]))
        what = ("new design: " + entry["new_design"]) if entry.get("new_design") else "one lesson"
        rows.append(
            f"| {base:02d} → {n_new:02d} | {short(f_old)} → {short(f_new)} | {what} | {len(old)} | {len(new)} "
            f"| {added} | {removed} | {added + removed} |"
        )
        listing.append(
            f"- {base:02d} → {n_new:02d}: "
            + ", ".join(f"`{f}`" for f in f_old)
            + " → "
            + ", ".join(f"`{f}`" for f in f_new)
        )
    return "\n".join(rows) + "\n\nFiles compared:\n\n" + "\n".join(listing) + "\n"


def default_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def split_page(text, page):
    """(head up to and including the begin marker line, tail from the end marker line)."""
    lines = text.splitlines(keepends=True)
    try:
        b = next(i for i, l in enumerate(lines) if l.strip() == BEGIN_MARK)
        e = next(i for i, l in enumerate(lines) if l.strip() == END_MARK and i > b)
    except StopIteration:
        raise SystemExit(f"lesson_diff: {page}: no lines '{BEGIN_MARK}' ... '{END_MARK}'") from None
    return "".join(lines[: b + 1]), "".join(lines[e:]), "".join(lines[b + 1 : e])


def main(argv):
    ap = argparse.ArgumentParser(description="Code lines each rung changes against the rung it builds on.")
    ap.add_argument("root", nargs="?", default=None, help="repository root (default: this repo)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--bin", help="the build's bin folder, whose `tour --registry-json` gives the pairs")
    src.add_argument("--registry", help="a registry JSON file (`tour --registry-json`)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", metavar="PAGE", help="rewrite the generated block of PAGE")
    mode.add_argument("--check", metavar="PAGE", help="exit 1 if PAGE's generated block is stale")
    args = ap.parse_args(argv)
    root = args.root or default_root()
    if not os.path.isdir(os.path.join(root, "steps")):
        print(f"lesson_diff: {root}: no steps/ folder", file=sys.stderr)
        return 2

    try:
        registry = load_registry(root, args.registry, args.bin)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    table = lesson_table(root, registry)
    page = args.write or args.check
    if page is None:
        sys.stdout.write(table)
        return 0
    try:
        with open(page, encoding="utf-8") as fh:
            text = fh.read()
        head, tail, current = split_page(text, page)
    except (OSError, SystemExit) as e:
        print(e if isinstance(e, SystemExit) else f"lesson_diff: {e}", file=sys.stderr)
        return 2
    if args.write:
        if current != table:
            with open(page, "w", encoding="utf-8") as fh:
                fh.write(head + table + tail)
        print(f"lesson_diff: {page}: {'up to date' if current == table else 'rewritten'}")
        return 0
    if current == table:
        print(f"lesson_diff: {page}: up to date")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(current.splitlines(keepends=True), table.splitlines(keepends=True),
                             f"{page} (committed)", f"{page} (from the kernels)")
    )
    print(f"lesson_diff: {page} is stale: run python3 docs/lesson_diff.py --write {page}",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
