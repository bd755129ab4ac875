#!/usr/bin/env python3
"""Writes a lab starter tree: a copy of FlashLadder with the marked solution regions removed.

    python3 docs/labs/make_starter.py SRC OUT [--lab 05 --lab 08-lse-combine ...]

A rung's kernel marks the code a student writes:

    // LAB-BEGIN(05-mma-qk): S = Q_i K_j^T with ldmatrix + mma.sync m16n8k16
    ... the solution ...
    // LAB-END(05-mma-qk)

The generator copies SRC to OUT (no .git, no build folders), keeps the two marker lines of each
selected region and replaces what lies between them with

    // TODO(lab 05-mma-qk): S = Q_i K_j^T with ldmatrix + mma.sync m16n8k16

so the starter tree still compiles. Every rung whose sources include a stubbed file is marked
"not implemented" in its launch.cu; its executable then prints

    05_tensor_cores: not implemented: lab 05: implement 05-mma-qk, ... (see docs/labs/...)

and exits 1 (common/src/runner.cpp), until the student deletes that line.

A region can only be cut out if nothing after it needs it. The generator refuses, naming the
region and the line, when a region
  - declares a variable that code after LAB-END (in the same block) still uses,
  - contains `return <value>` (the stub would fall off the end of the function),
  - does not start and end in the same block (unbalanced braces or parentheses),
  - directly follows a `#pragma` or an unbraced `if (...)`/`for (...)`/`else`, which would then
    apply to the code after the stub.
Fix the markers in the kernel (move the declaration above LAB-BEGIN, for instance) and rerun.

A region can name the regions that teach the same code, so that no copy of a lab's solution
survives elsewhere in its starter tree. Tags go at the end of the LAB-BEGIN line or on comment
lines of their own right after it:

    // LAB-BEGIN(08-split-chunk): scores, online softmax and P V for one chunk of the split
    // [same-code: 05-mma-qk 05-online-softmax 05-mma-pv]

  [same-code: IDS]  both ways: stubbing this region stubs those, and stubbing one of those
                    stubs this one (rung 08's chunk is rung 05's fragment code for 16 rows);
  [copy-of: IDS]    one way: this region repeats their code (rung 03's scores are lab 02's), so
                    it is stubbed whenever one of them is; stubbing it leaves them alone.
A region stubbed for another lab's sake makes its rung "not implemented" with a message that
says whose code it holds. Partners of partners are stubbed too (the relation is transitive).

--lab selects what to stub: a rung number ("05") or a region id ("05-mma-qk"); repeatable.
Without --lab every region is stubbed. --list prints the regions (and their partners) and exits.

--check-no-solution (no OUT) proves the point: for each lab (or each --lab NN) it generates the
starter tree in a temporary folder and fails, naming file and lines, if any source file of it
still holds MIN_RUN (3) substantial statements in a row of one of the lab's regions (all of a
shorter region's); statements are compared with names and subscripts abstracted (statements()).
A run inside a region that the lab's region names as [copy-of: ...] is expected, not a copy.
Exit codes: 0 written (or clean), 1 a marker problem or a copy found, 2 bad arguments.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

# Files that may hold markers (only under steps/: a README quoting a marker is not a region).
SOURCE_EXTENSIONS = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")
BEGIN_RE = re.compile(
    r"^(?P<indent>[ \t]*)//\s*LAB-BEGIN\((?P<id>[A-Za-z0-9_-]+)\)\s*:?\s*(?P<task>.*?)\s*$"
)
END_RE = re.compile(r"^[ \t]*//\s*LAB-END\((?P<id>[A-Za-z0-9_-]+)\)\s*$")
# Relations at the end of a LAB-BEGIN line's task: "[same-code: 05-mma-qk 05-mma-pv]".
TAG_RE = re.compile(r"\s*\[(?P<kind>same-code|copy-of):(?P<ids>[A-Za-z0-9_\s-]*)\]\s*$")
# ...or on comment lines of their own right after it (so the marker stays within 100 columns).
TAG_LINE_RE = re.compile(r"^[ \t]*//(?P<tags>(\s*\[(same-code|copy-of):[A-Za-z0-9_\s-]*\])+)\s*$")
TODO_RE = re.compile(r"^[ \t]*//\s*TODO\(lab [A-Za-z0-9_-]+\)")
STEP_DIR_RE = re.compile(r"^(?P<num>[0-9]{2})_(?P<name>\w+)$")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"(?P<path>[^"]+)"', re.M)
REGISTER_RE = re.compile(
    r"\bvoid\s+register_rung_(?P<num>[0-9]{2})\s*\(\s*(?:fl::)?Registry\s*&\s*\w+\s*\)\s*\{"
)
ADD_LINE_RE = re.compile(r"^(?P<indent>[ \t]*)reg\.add\(std::move\(r\)\);[ \t]*$", re.M)

# A folder with one of these names (or a CMake build folder) is not copied.
SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", ".cache", "node_modules"}

# Words that start a statement which is not a declaration.
# fmt: off
STATEMENT_KEYWORDS = {
    "for", "if", "else", "while", "do", "switch", "case", "default", "return", "break", "continue",
    "goto", "throw", "try", "catch", "delete", "new", "static_assert", "asm", "__syncthreads",
}
# Words that may precede a declaration's type.
DECL_QUALIFIERS = {
    "const", "constexpr", "static", "volatile", "register", "extern", "inline", "thread_local",
    "mutable", "typename", "__shared__", "__restrict__", "unsigned", "signed", "long", "short",
    "struct", "class", "enum",
}
# fmt: on


class MarkerError(Exception):
    """A marker problem: the message names the file, line and region."""


@dataclass
class Region:
    path: str  # relative to the tree root, e.g. steps/05_tensor_cores/kernel.cuh
    rung: str  # "05"
    step_dir: str  # "05_tensor_cores"
    id: str  # "05-mma-qk"
    task: str  # the one-line task after the colon
    begin: int  # 0-based line index of the last marker line (LAB-BEGIN, or its last tag line)
    end: int  # 0-based line index of LAB-END
    indent: str
    already_stub: bool = False  # only a TODO line between the markers (a starter tree)
    same_code: list = field(default_factory=list)  # [same-code: ...]: stubbed together, both ways
    copy_of: list = field(default_factory=list)  # [copy-of: ...]: stubbed whenever those are
    head: int = -1  # 0-based line index of LAB-BEGIN itself


@dataclass
class Rung:
    number: str
    step_dir: str
    stubbed: list = field(default_factory=list)  # Regions stubbed in files this rung compiles


# ---- reading C++ just well enough --------------------------------------------------------------


def code_only(text):
    """@p text with comments, string/char literals and preprocessor lines blanked out.

    Every character keeps its offset (newlines stay), so positions map back to lines."""
    out = list(text)
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            i += 1
            continue
        if at_line_start and c == "#":  # a preprocessor line, with backslash continuations
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            for k in range(i, j):
                out[k] = " "
            i = j
            continue
        at_line_start = False
        if c == "\n":
            at_line_start = True
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def top_level_statements(code):
    """The statements of @p code that are not inside braces, nested blocks shown as `{}`."""
    stmts, cur = [], []
    brace = paren = 0
    for c in code:
        if c == "{":
            if brace == 0:
                cur.append("{")
            brace += 1
        elif c == "}":
            brace -= 1
            if brace == 0:
                cur.append("}")
                if paren == 0:  # end of a block statement (for/if body, plain block)
                    stmts.append("".join(cur))
                    cur = []
        elif brace == 0:
            if c in "([":
                paren += 1
            elif c in ")]":
                paren -= 1
            if c == ";" and paren == 0:
                stmts.append("".join(cur))
                cur = []
            else:
                cur.append(c)
    if "".join(cur).strip():
        stmts.append("".join(cur))
    return [" ".join(s.split()) for s in stmts if s.strip()]


TOKEN_RE = re.compile(r"[A-Za-z_]\w*|::|->|[0-9][\w.]*|\S")


def declared_names(statement):
    """Names a statement declares at its own scope ("float a = 0, b[4]" -> [a, b]); [] if none."""
    toks = TOKEN_RE.findall(statement)
    if not toks or toks[0] in STATEMENT_KEYWORDS:
        return []
    if toks[0] == "using" and len(toks) > 2 and toks[2] == "=":
        return [toks[1]]
    i = 0
    while i < len(toks) and toks[i] in DECL_QUALIFIERS:
        i += 1
    # The type: a (possibly qualified) name with optional template arguments.
    if i >= len(toks) or not re.match(r"[A-Za-z_]", toks[i]):
        return []
    i += 1
    while i < len(toks):
        if toks[i] == "::" and i + 1 < len(toks):
            i += 2
        elif toks[i] == "<":
            depth = 0
            while i < len(toks):
                depth += {"<": 1, ">": -1}.get(toks[i], 0)
                i += 1
                if depth == 0:
                    break
        else:
            break
    while i < len(toks) and toks[i] in ("*", "&", "const", "__restrict__", "volatile"):
        i += 1
    # The first declarator's name, followed by what can follow a declared name.
    follows = ("=", "[", "{", "(", ",", ";")
    if i >= len(toks) or not re.match(r"[A-Za-z_]", toks[i]) or toks[i] in STATEMENT_KEYWORDS:
        return []
    if i + 1 < len(toks) and toks[i + 1] not in follows:
        return []
    if toks[i] in DECL_QUALIFIERS:
        return []
    names = [toks[i]]
    # Further declarators: ", name" at bracket depth 0.
    depth = 0
    for j in range(i + 1, len(toks)):
        t = toks[j]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == "," and depth == 0:
            k = j + 1
            while k < len(toks) and toks[k] in ("*", "&"):
                k += 1
            if (
                k < len(toks)
                and re.match(r"[A-Za-z_]", toks[k])
                and (k + 1 == len(toks) or toks[k + 1] in follows)
            ):
                names.append(toks[k])
    return names


def brace_depths(code):
    """The brace depth at each character of @p code (the braces themselves count as inside)."""
    depths, depth = [], 0
    for c in code:
        if c == "{":
            depth += 1
        depths.append(depth)
        if c == "}":
            depth -= 1
    return depths


def rest_of_block(code, start):
    """Offsets [start, stop): from @p start to the brace that closes the enclosing block."""
    depth = 0
    for k in range(start, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth < 0:
                return start, k
    return start, len(code)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


# ---- finding and checking regions --------------------------------------------------------------


def find_regions(root):
    """Every marked region under root/steps, in path order. Raises MarkerError on bad markers."""
    regions, seen = [], {}
    steps = os.path.join(root, "steps")
    if not os.path.isdir(steps):
        raise MarkerError("%s has no steps/ folder: not a FlashLadder tree" % root)
    for step_dir in sorted(os.listdir(steps)):
        m = STEP_DIR_RE.match(step_dir)
        if not m or not os.path.isdir(os.path.join(steps, step_dir)):
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(steps, step_dir)):
            dirnames.sort()
            for fname in sorted(filenames):
                if not fname.endswith(SOURCE_EXTENSIONS):
                    continue
                full = os.path.join(dirpath, fname)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                open_region = None
                for idx, line in enumerate(lines):
                    b, e = BEGIN_RE.match(line), END_RE.match(line)
                    where = "%s:%d" % (rel, idx + 1)
                    if b:
                        if open_region:
                            raise MarkerError(
                                "%s: LAB-BEGIN(%s) inside region %s (opened at line %d); "
                                "regions do not nest"
                                % (where, b["id"], open_region.id, open_region.begin + 1)
                            )
                        rid = b["id"]
                        if not rid.startswith(m["num"] + "-"):
                            raise MarkerError(
                                "%s: region id '%s' must start with the rung number "
                                "'%s-'" % (where, rid, m["num"])
                            )
                        if rid in seen:
                            raise MarkerError(
                                "%s: region id '%s' already used at %s" % (where, rid, seen[rid])
                            )
                        if not b["task"]:
                            raise MarkerError(
                                "%s: LAB-BEGIN(%s) needs a one-line task after ':'" % (where, rid)
                            )
                        seen[rid] = where
                        head, marker = b["task"], idx
                        while idx + 1 < len(lines) and TAG_LINE_RE.match(lines[idx + 1]):
                            head += " " + TAG_LINE_RE.match(lines[idx + 1])["tags"].strip()
                            idx += 1  # the region's body starts after its last tag line
                        task, tags = split_tags(head)
                        if not task:
                            raise MarkerError(
                                "%s: LAB-BEGIN(%s) needs a one-line task before its tags"
                                % (where, rid)
                            )
                        open_region = Region(
                            rel,
                            m["num"],
                            step_dir,
                            rid,
                            task,
                            idx,
                            -1,
                            b["indent"],
                            same_code=tags["same-code"],
                            copy_of=tags["copy-of"],
                            head=marker,
                        )
                    elif e:
                        if not open_region or e["id"] != open_region.id:
                            raise MarkerError(
                                "%s: LAB-END(%s) without a matching LAB-BEGIN" % (where, e["id"])
                            )
                        open_region.end = idx
                        body = [l for l in lines[open_region.begin + 1 : idx] if l.strip()]
                        open_region.already_stub = len(body) == 1 and bool(TODO_RE.match(body[0]))
                        regions.append(open_region)
                        open_region = None
                if open_region:
                    raise MarkerError(
                        "%s:%d: LAB-BEGIN(%s) has no LAB-END(%s)"
                        % (rel, open_region.begin + 1, open_region.id, open_region.id)
                    )
    for r in regions:
        for other in r.same_code + r.copy_of:
            if other not in seen or other == r.id:
                what = "the region itself" if other == r.id else "no region of this tree"
                raise MarkerError(
                    "%s:%d: LAB-BEGIN(%s) names '%s' in its tags, which is %s"
                    % (r.path, r.begin + 1, r.id, other, what)
                )
    return regions


def split_tags(task):
    """("task [same-code: a b] [copy-of: c]") -> ("task", {"same-code": [a, b], "copy-of": [c]})."""
    tags = {"same-code": [], "copy-of": []}
    while True:
        m = TAG_RE.search(task)
        if not m:
            return task.strip(), tags
        tags[m["kind"]] = m["ids"].split() + tags[m["kind"]]
        task = task[: m.start()]


def partners(regions):
    """{id: ids to stub with it}: [same-code] both ways, [copy-of] from the original to the copy.

    Direct edges only; select() follows them transitively (a copy of a region that teaches the
    same code as the selected one holds the selected one's code too)."""
    out = {r.id: [] for r in regions}
    for r in regions:
        for other in r.same_code:
            out[r.id].append(other)
            out[other].append(r.id)
        for orig in r.copy_of:
            out[orig].append(r.id)
    return {k: sorted(set(v) - {k}) for k, v in out.items()}


def check_region_alone(lines, r):
    """Problems visible from the region and the line before it; a list of messages."""
    errors = []
    where = "%s:%d" % (r.path, r.begin + 1)
    code = code_only("\n".join(lines[r.begin + 1 : r.end]))
    depths = brace_depths(code)
    if (depths and (min(depths) < 0 or depths[-1] - (code[-1] == "}") != 0)) or code.count(
        "("
    ) != code.count(")"):
        errors.append(
            "%s: region %s does not begin and end in the same block (unbalanced braces or "
            "parentheses): move LAB-END(%s) so the region holds whole statements" % (where, r.id, r.id)
        )
    # `return value` at the region's own level (a lambda's return, deeper, is fine).
    flat = "".join(c if d == 0 else " " for c, d in zip(code, depths))
    ret = re.search(r"\breturn\b\s*[^;\s]", flat)
    if ret:
        errors.append(
            "%s:%d: region %s contains 'return <value>': without it the function would "
            "fall off its end; move the return below LAB-END(%s)"
            % (r.path, r.begin + 2 + code.count("\n", 0, ret.start()), r.id, r.id)
        )
    # The line before LAB-BEGIN must not be a pragma or an unbraced control header: it would
    # apply to whatever follows the stub.
    k = r.begin - 1
    while k >= 0 and (not lines[k].strip() or lines[k].strip().startswith("//")):
        k -= 1
    if k >= 0:
        prev = lines[k].strip()
        prev_code = code_only(lines[k]).strip()
        if prev.startswith("#pragma"):
            errors.append(
                "%s:%d: '%s' right before LAB-BEGIN(%s) would apply to the code after the "
                "stub; move it inside the region" % (r.path, k + 1, prev, r.id)
            )
        elif re.search(r"(\)|\belse|\bdo)$", prev_code):
            errors.append(
                "%s:%d: region %s is the unbraced body of '%s'; add braces around it"
                % (r.path, k + 1, r.id, prev)
            )
    return errors


def check_nothing_used_after(path, text, stubs, solution_line):
    """For each stubbed region of one (already stubbed) file: no name it declared is used after
    it, in the rest of its block. Returns a list of messages.

    @p stubs: (region, declared names, offset just after the LAB-END line) per region;
    @p solution_line maps a line of @p text to the solution's line (for the message)."""
    errors = []
    code = code_only(text)
    for r, names, after in stubs:
        start, stop = rest_of_block(code, after)
        tail = code[start:stop]
        for name in names:
            # A use of the name itself, not a member of the same name (p.lse, a->s, ns::s).
            use = re.search(r"(?<![.:>\w])%s\b" % re.escape(name), tail)
            if not use:
                continue
            # "float s = ..." after the region declares a new s: not a use of the removed one.
            stmt_start = max(tail.rfind(c, 0, use.start()) for c in ";{}(") + 1
            stmt_end = min(
                [k for k in (tail.find(";", use.end()), tail.find("{", use.end())) if k >= 0]
                or [len(tail)]
            )
            if name in declared_names(" ".join(tail[stmt_start:stmt_end].split())):
                continue
            errors.append(
                "%s:%d: region %s declares '%s', which is still used after LAB-END(%s) (line %d); "
                "the stub would not compile. Declare '%s' above LAB-BEGIN(%s) (or move LAB-END "
                "past its last use)"
                % (
                    path,
                    r.begin + 1,
                    r.id,
                    name,
                    r.id,
                    solution_line(line_of(text, start + use.start())),
                    name,
                    r.id,
                )
            )
    return errors


# ---- writing the starter tree ------------------------------------------------------------------


STARTER_STAMP = ".flashladder-starter"  # written into OUT: a starter tree is never copied again


def copy_tree(src, out):
    def ignore(dirpath, names):
        skipped = set()
        for n in names:
            full = os.path.join(dirpath, n)
            if n in SKIP_DIRS or (
                os.path.isdir(full)
                and (
                    n == "build"
                    or n.startswith("build-")
                    or n.startswith("build_")
                    or os.path.abspath(full) == out
                    or os.path.exists(os.path.join(full, "CMakeCache.txt"))
                    or os.path.exists(os.path.join(full, STARTER_STAMP))
                )
            ):
                skipped.add(n)
        return skipped

    shutil.copytree(src, out, ignore=ignore, symlinks=True)


def stub_files(out, regions):
    """Replaces each selected region's body by its TODO line. Returns {path: [ids]}."""
    by_file = {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    stubbed, errors = {}, []
    for path, rs in by_file.items():
        full = os.path.join(out, path)
        with open(full, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for r in rs:
            errors += check_region_alone(lines, r)
        # Declarations are read from the solution, uses from the stubbed text (a later region
        # that uses a name is removed too).
        declared = {
            r.id: [
                n
                for s in top_level_statements(code_only("\n".join(lines[r.begin + 1 : r.end])))
                for n in declared_names(s)
            ]
            for r in rs
        }
        new_lines, origin, marks = [], [], []  # origin: solution line index of each new line
        cursor = 0
        for r in sorted(rs, key=lambda x: x.begin):
            new_lines += lines[cursor : r.begin + 1]
            origin += range(cursor, r.begin + 1)
            new_lines.append("%s// TODO(lab %s): %s" % (r.indent, r.id, r.task))
            new_lines.append(lines[r.end])
            origin += [r.begin + 1, r.end]
            marks.append((r, len(new_lines)))  # index of the first line after LAB-END
            cursor = r.end + 1
        new_lines += lines[cursor:]
        origin += range(cursor, len(lines))
        text = "\n".join(new_lines)
        offsets = [0]
        for l in new_lines:
            offsets.append(offsets[-1] + len(l) + 1)
        errors += check_nothing_used_after(
            path,
            text,
            [(r, declared[r.id], offsets[i]) for r, i in marks],
            lambda line: origin[line - 1] + 1,
        )
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
        stubbed[path] = [r.id for r in rs]
    if errors:
        raise MarkerError(
            "%d marker problem(s); fix the markers in the solution tree:\n  %s"
            % (len(errors), "\n  ".join(errors))
        )
    return stubbed


def includes_of(root, rel_path, seen=None):
    """rel_path and every file it includes with "..." that exists in the tree, transitively."""
    seen = set() if seen is None else seen
    if rel_path in seen:
        return seen
    seen.add(rel_path)
    full = os.path.join(root, rel_path)
    try:
        with open(full, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return seen
    for m in INCLUDE_RE.finditer(text):
        cand = os.path.normpath(os.path.join(os.path.dirname(rel_path), m["path"]))
        if os.path.isfile(os.path.join(root, cand)):
            includes_of(root, cand, seen)
    return seen


def handout_for(root, rung, step_dir):
    """The lab handout docs/labs/labNN_*.md, or the index if the rung has none yet."""
    labs = os.path.join(root, "docs", "labs")
    if os.path.isdir(labs):
        for f in sorted(os.listdir(labs)):
            if f.startswith("lab%s" % rung) and f.endswith(".md"):
                return "docs/labs/" + f
    return "docs/labs/README.md"


def affected_rungs(out, stubbed, by_id):
    """Rungs whose sources (or files they include) lost a region: {number: Rung}."""
    rungs = {}
    steps = os.path.join(out, "steps")
    for step_dir in sorted(os.listdir(steps)):
        m = STEP_DIR_RE.match(step_dir)
        if not m or not os.path.isfile(os.path.join(steps, step_dir, "launch.cu")):
            continue
        files = set()
        for fname in sorted(os.listdir(os.path.join(steps, step_dir))):
            if fname.endswith(SOURCE_EXTENSIONS):
                includes_of(out, os.path.join("steps", step_dir, fname), files)
        rung = Rung(m["num"], step_dir)
        for path in sorted(files):
            rung.stubbed += [by_id[rid] for rid in stubbed.get(path, [])]
        if rung.stubbed:
            rungs[rung.number] = rung
    return rungs


def not_implemented_text(out, rung, step_dirs, cause, pulled_by):
    """The one-line message of a rung that lost regions: one clause per lab that removed them.

    @p cause: region id -> the lab whose code it holds (its own rung when selected directly);
    @p pulled_by: region id -> the selected regions whose code it holds (empty when selected)."""
    groups = {}  # (lab, region in this rung's folder) -> regions
    for r in rung.stubbed:
        groups.setdefault((cause[r.id], r.rung == rung.number), []).append(r)
    clauses = []
    for lab, own_folder in sorted(groups, key=lambda g: (g[0] != rung.number, g[0], not g[1])):
        rs = groups[(lab, own_folder)]
        ids = ", ".join(r.id for r in rs)
        files = " and ".join(sorted({r.path for r in rs}))
        if lab == rung.number and own_folder:
            clauses.append(
                "lab %s: implement %s in %s (see %s)"
                % (lab, ids, files, handout_for(out, rung.number, rung.step_dir))
            )
        elif all(r.rung == lab for r in rs):
            clauses.append(
                "lab %s: rung %s reuses %s; implement %s there first (see %s)"
                % (lab, rung.number, files, ids, handout_for(out, lab, step_dirs[lab]))
            )
        else:
            holds = sorted({o for r in rs for o in pulled_by[r.id]})
            owner = rs[0].rung
            many = len(rs) > 1
            clauses.append(
                "lab %s: %s hold%s lab %s's code (%s), so %s removed too; %s part of lab %s "
                "(see %s)"
                % (
                    lab,
                    ("%s in %s" % (ids, files))
                    if own_folder
                    else "rung %s reuses %s, whose %s" % (rung.number, files, ids),
                    "" if many else "s",
                    lab,
                    ", ".join(holds),
                    "they were" if many else "it was",
                    "they are" if many else "it is",
                    owner,
                    handout_for(out, owner, step_dirs[owner]),
                )
            )
    return "; ".join(clauses)


def cpp_string(s, indent, width=96):
    """@p s as C++ string literal(s), split into adjacent literals so lines stay within @p width."""
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    room = max(20, width - len(indent) - 4)
    pieces, cur = [], ""
    for word in re.split(r"(?<= )", s):  # keep each word's trailing space
        if cur and len(cur) + len(word) > room:
            pieces.append(cur)
            cur = ""
        cur += word
    pieces.append(cur)
    return ("\n" + indent).join('"%s"' % p for p in pieces)


def mark_not_implemented(out, rung, message):
    """Makes rung's registration set Rung::not_implemented. Returns how (for the summary)."""
    rel = os.path.join("steps", rung.step_dir, "launch.cu")
    full = os.path.join(out, rel)
    with open(full, encoding="utf-8") as f:
        text = f.read()
    code = code_only(text)
    # A mark is an assignment; rungs 10 and 11 also *read* other rungs' not_implemented.
    if re.search(r"\bnot_implemented\s*=(?!=)", code):
        return "already marked"
    m = None
    for cand in REGISTER_RE.finditer(code):
        if cand["num"] == rung.number:
            m = cand
    if not m:
        raise MarkerError(
            "%s: no 'void register_rung_%s(Registry& reg) {' to mark the rung not implemented"
            % (rel, rung.number)
        )
    body_start = m.end()
    _, body_end = rest_of_block(code, body_start)
    body = text[body_start:body_end]
    adds = list(ADD_LINE_RE.finditer(body))
    if len(adds) == 1 and len(re.findall(r"\breg\.add\(", code[body_start:body_end])) == 1:
        # The usual shape: one `Rung r; ... reg.add(std::move(r));` (in a loop for variants).
        a = adds[0]
        ind = a["indent"]
        line = (
            "%s// Lab starter: delete this statement when the lab is done.\n%sr.not_implemented =\n%s    %s;\n"
            % (ind, ind, ind, cpp_string(message, ind + "    "))
        )
        pos = body_start + a.start()
        text = text[:pos] + line + text[pos:]
        how = "r.not_implemented set before reg.add"
    else:
        # Anything else (several reg.add calls, helper functions): register the solution's entries
        # into a scratch registry and mark every one of them.
        name_pos = text.index("register_rung_%s" % rung.number, m.start())
        end_name = name_pos + len("register_rung_%s" % rung.number)
        text = text[:end_name] + "_solution" + text[end_name:]
        text = (
            text.rstrip("\n")
            + "\n\n"
            + (
                "// ---- lab starter (docs/labs/make_starter.py) ----------------------------------------\n"
                "// Every entry of this rung runs the stubbed kernel, so each says what to implement instead\n"
                '// of failing its check. When the lab is done, delete this block and the "_solution"\n'
                "// suffix above.\n"
                "namespace fl {\n"
                "void register_rung_%s(Registry& reg) {\n"
                "  Registry solution;\n"
                "  register_rung_%s_solution(solution);\n"
                "  for (Rung r : solution.all()) {\n"
                "    r.not_implemented =\n        %s;\n"
                "    reg.add(std::move(r));\n"
                "  }\n"
                "}\n"
                "}  // namespace fl\n"
            )
            % (rung.number, rung.number, cpp_string(message, " " * 8))
        )
        how = "register_rung_%s wrapped (every entry marked)" % rung.number
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)
    return how


def select(regions, wanted):
    """The regions to stub for --lab @p wanted (all when empty), with why.

    Returns (chosen, cause, pulled_by): cause[id] is the lab whose code the region holds (its own
    rung when it was selected), pulled_by[id] the selected regions whose code it holds (empty
    when it was selected itself). A selected region brings its partners (partners()) along,
    and theirs, so no copy of its code is left in the tree."""
    known = {r.rung for r in regions} | {r.id for r in regions}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(
            "--lab %s: no rung or region of that name has markers (see --list)" % ", ".join(unknown)
        )
    direct = [r for r in regions if not wanted or r.rung in wanted or r.id in wanted]
    direct_ids = {r.id for r in direct}
    part = partners(regions)
    cause, pulled_by = {}, {}
    for r in direct:
        cause[r.id], pulled_by[r.id] = r.rung, []
    for r in direct:
        seen, todo = {r.id}, list(part[r.id])
        while todo:
            other = todo.pop(0)
            if other in seen:
                continue
            seen.add(other)
            todo += part[other]
            if other in direct_ids:
                continue
            if other not in cause:
                cause[other], pulled_by[other] = r.rung, []
            if cause[other] == r.rung:
                pulled_by[other].append(r.id)
    chosen = [r for r in regions if r.id in cause]
    return chosen, cause, pulled_by


# ---- checking that a starter tree holds no copy of its solution ---------------------------------
#
# A region's code can survive in a starter tree outside the region: another rung that teaches the
# same step (rung 08's chunk is rung 05's fragment code for 16 rows), a variant kernel in the same
# file, a copy a later rung started from. --check-no-solution generates each lab's starter tree and
# looks for the lab's solution in every source file of it. Both sides are cut into statements and
# each statement is reduced to a skeleton: comments and preprocessor lines dropped, whitespace
# collapsed, every name that is not a keyword or a called function replaced by `$`, every
# subscript by `[]`. Renaming a variable or dropping an index dimension therefore does not hide a
# copy; `for (...)` headers, braces, `#pragma unroll` and short statements (`x = 0;`, `l += p;`)
# are not "substantial" and never count. A copy is MIN_RUN substantial statements in a row (fewer
# when the region has fewer: all of them, at least 2).

MIN_RUN = 3
# fmt: off
CPP_WORDS = {
    "for", "if", "else", "while", "do", "return", "break", "continue", "switch", "case",
    "const", "constexpr", "static", "auto", "unsigned", "signed", "void", "bool", "char", "int",
    "float", "double", "long", "short", "true", "false", "sizeof", "static_cast",
    "reinterpret_cast", "const_cast", "nullptr", "uint32_t", "uint16_t", "int64_t", "size_t",
    "float2", "float4", "uint2", "uint4", "__shared__", "__restrict__",
}
# fmt: on
SKEL_TOKEN_RE = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*|[0-9][\w.]*|\S")


def skeleton(statement):
    """The statement with names abstracted (see above): "S[i][j] = fmaxf(m, x[j]);" ->
    "$ [] = fmaxf ( $ , $ [] )"."""
    toks = SKEL_TOKEN_RE.findall(statement)
    out, depth = [], 0
    for i, t in enumerate(toks):
        if t == "[":
            if depth == 0 and not (out and out[-1] == "[]"):
                out.append("[]")
            depth += 1
        elif t == "]":
            depth = max(0, depth - 1)
        elif depth:
            continue
        elif re.match(r"[A-Za-z_]", t):
            rest = "".join(toks[i + 1 : i + 12])
            if t in CPP_WORDS:
                out.append(t)
            elif rest.startswith("(") or re.match(r"<[^;<>(){}]*>\(", rest):
                out.append(t.rsplit("::", 1)[-1])  # a called function keeps its name
            else:
                out.append("$")
        else:
            out.append(t)
    return " ".join(out)


def strip_for_header(stmt):
    """"for (int i = 0; i < n; ++i) x[i] = 0" -> "x[i] = 0" (nested headers too); "else" dropped."""
    while True:
        stmt = re.sub(r"^\s*else\b", "", stmt)
        m = re.match(r"^\s*(for|while)\s*\(", stmt)
        if not m:
            return stmt
        depth, k = 0, m.end() - 1
        while k < len(stmt):
            depth += {"(": 1, ")": -1}.get(stmt[k], 0)
            if depth == 0:
                break
            k += 1
        stmt = stmt[k + 1 :]


def substantial(skel):
    """A statement that says something: 10 characters or more, and three names or a call on one
    (not `__syncwarp()`, not `x = 0.f`)."""
    calls = [t for t in skel.split() if re.match(r"[A-Za-z_]", t) and t not in CPP_WORDS]
    names = skel.count("$")
    return len(skel.replace(" ", "")) >= 10 and (names >= 3 or (calls and names >= 1))


def statements(text):
    """[(1-based line, skeleton)] of the substantial statements of C++ @p text."""
    code = code_only(text)
    out, start, paren = [], 0, 0
    for k, c in enumerate(code + ";"):
        if c in "([":
            paren += 1
        elif c in ")]":
            paren = max(0, paren - 1)
        if paren == 0 and c in ";{}":
            raw = code[start:k]
            stmt = strip_for_header(raw)  # a suffix of raw
            skel = skeleton(stmt)
            if skel and substantial(skel):
                first = start + len(raw) - len(stmt.lstrip())
                out.append((code.count("\n", 0, first) + 1, skel))
            start = k + 1
    return out


def find_copies(tree, needles, min_run=MIN_RUN, allowed=lambda r, path, line: False):
    """Runs of a needle's statements in the source files under @p tree.

    @p needles: [(region, [(line, skeleton)])]. A run counts when it has min_run statements, or
    all of a shorter region's (at least 2). @p allowed(region, path, line) excuses a run that
    starts there. Returns [(region, path, (first, last) line of the run, (first, last) line in
    the solution, length)], the longest run per region and file."""
    files = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for fname in sorted(filenames):
            if fname.endswith(SOURCE_EXTENSIONS):
                full = os.path.join(dirpath, fname)
                try:
                    with open(full, encoding="utf-8") as f:
                        files.append((os.path.relpath(full, tree), statements(f.read())))
                except UnicodeDecodeError:
                    continue
    found = []
    for r, sol in needles:
        need = min(min_run, len(sol))
        if need < 2:
            continue
        skels = [sk for _, sk in sol]
        for path, hay in files:
            best = None
            for j in range(len(hay)):
                if allowed(r, path, hay[j][0]):
                    continue
                for i in range(len(skels)):
                    n = 0
                    while i + n < len(skels) and j + n < len(hay) and skels[i + n] == hay[j + n][1]:
                        n += 1
                    if n >= need and (best is None or n > best[4]):
                        run_at = (hay[j][0], hay[j + n - 1][0])
                        best = (r, path, run_at, (sol[i][0], sol[i + n - 1][0]), n)
            if best:
                found.append(best)
    return found


def check_no_solution(src, regions, labs, min_run=MIN_RUN):
    """Generates each lab's starter tree and looks for the lab's solution in it: the code of every
    region of the lab's rung, in every source file of the tree. A run inside a region that the
    needle's region names as [copy-of: ...] (or in their partners) is expected: the lab repeats
    that code on purpose.
    Returns 0 if no lab's tree holds a copy, else 1; prints one line per lab, one per copy."""
    failed = 0
    by_id = {r.id: r for r in regions}
    # A [copy-of] region may look like its originals and everything stubbed with them.
    part = partners(regions)
    expected = {}
    for r in regions:
        seen, todo = set(), list(r.copy_of)
        while todo:
            x = todo.pop()
            if x not in seen and x != r.id:
                seen.add(x)
                todo += part[x]
        expected[r.id] = seen
    for lab in labs:
        own = [r for r in regions if r.rung == lab]
        needles = []
        for r in own:
            with open(os.path.join(src, r.path), encoding="utf-8") as f:
                lines = f.read().split("\n")
            body = statements("\n".join(lines[r.begin + 1 : r.end]))
            needles.append((r, [(r.begin + 1 + line, sk) for line, sk in body]))
        work = tempfile.mkdtemp(prefix="fl-nosol-%s-" % lab)
        out = os.path.join(work, "starter")
        with open(os.devnull, "w") as quiet:
            saved = sys.stdout
            sys.stdout = quiet
            try:
                rc = main([src, out, "--lab", lab])
            finally:
                sys.stdout = saved
        if rc != 0:
            print("lab %s: FAIL: the generator failed (exit %d)" % (lab, rc))
            failed += 1
            shutil.rmtree(work, ignore_errors=True)
            continue
        starter_regions = find_regions(out)

        def region_at(path, line):
            for x in starter_regions:
                if x.path == path and x.begin < line - 1 < x.end:
                    return x
            return None

        def allowed(r, path, line):
            x = region_at(path, line)
            return x is not None and not x.already_stub and x.id in expected[r.id]

        # Report lines of the solution tree: a stubbed region is shorter in the starter tree.
        shifts = {}
        for x in starter_regions:
            if x.already_stub:
                shift = (by_id[x.id].end - by_id[x.id].begin) - (x.end - x.begin)
                shifts.setdefault(x.path, []).append((x.end, shift))

        def to_solution(path, line):
            return line + sum(d for end, d in shifts.get(path, []) if end < line)

        copies = find_copies(out, needles, min_run, allowed)
        unchecked = [r.id for r, sol in needles if min(min_run, len(sol)) < 2]
        if copies:
            failed += 1
            print(
                "lab %s: FAIL: %d cop%s of its solution left in its starter tree"
                % (lab, len(copies), "y" if len(copies) == 1 else "ies")
            )
            for r, path, (a, b), (sa, sb), n in copies:
                x = region_at(path, a)
                if x:
                    fix = "tag region %s [copy-of: %s] (or [same-code: %s] if both labs teach it)"
                    fix %= (x.id, r.id, r.id)
                else:
                    fix = "put that code in a region tagged [copy-of: %s]" % r.id
                at = "%s:%d-%d" % (path, to_solution(path, a), to_solution(path, b))
                print(
                    "  %s (%s:%d-%d): %d statements in a row at %s; %s"
                    % (r.id, r.path, sa, sb, n, at, fix)
                )
        else:
            short = " (too short to check: %s)" % ", ".join(unchecked) if unchecked else ""
            print(
                "lab %s: ok: no run of %d statements of %s in its starter tree%s"
                % (lab, min_run, ", ".join(r.id for r in own), short)
            )
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Write a lab starter tree (marked regions become TODO stubs)."
    )
    ap.add_argument("src", help="FlashLadder source tree (the solution)")
    ap.add_argument("out", nargs="?", help="folder to create (must not exist, or be empty)")
    ap.add_argument(
        "--lab",
        action="append",
        default=[],
        metavar="NN|ID",
        help="stub only this rung (e.g. 05) or region (e.g. 05-mma-qk); repeatable",
    )
    ap.add_argument("--list", action="store_true", help="list the regions and exit")
    ap.add_argument(
        "--check-no-solution",
        action="store_true",
        help="generate each lab's starter tree (or those of --lab NN) in a temporary folder and "
        "fail if any source file of it still holds a run of the lab's solution",
    )
    ap.add_argument(
        "--min-run",
        type=int,
        default=MIN_RUN,
        metavar="N",
        help="--check-no-solution: statements in a row that make a copy (default %(default)s)",
    )
    args = ap.parse_args(argv)

    src = os.path.abspath(args.src)
    try:
        regions = find_regions(src)
    except MarkerError as e:
        print("make_starter.py: error: %s" % e, file=sys.stderr)
        return 1
    if args.list:
        part = partners(regions)
        for r in regions:
            print("%-24s %s:%d-%d  %s" % (r.id, r.path, r.head + 1, r.end + 1, r.task))
            if part[r.id]:
                print("%-24s   stubbed with: %s" % ("", " ".join(part[r.id])))
        return 0
    if args.check_no_solution:
        if args.out:
            ap.error("--check-no-solution takes no OUT (it writes temporary trees)")
        if args.min_run < 2:
            ap.error("--min-run must be at least 2")
        labs = sorted({r.rung for r in regions})
        for w in args.lab:
            if w not in labs:
                ap.error("--check-no-solution --lab takes a lab number: %s" % " ".join(labs))
        chosen_labs = [l for l in labs if not args.lab or l in args.lab]
        return check_no_solution(src, regions, chosen_labs, args.min_run)
    if not args.out:
        ap.error("OUT is required (unless --list or --check-no-solution)")
    out = os.path.abspath(args.out)
    if out == src:
        ap.error("OUT must not be SRC")
    if os.path.exists(out) and os.listdir(out):
        ap.error("%s exists and is not empty" % out)
    try:
        chosen, cause, pulled_by = select(regions, args.lab)
    except ValueError as e:
        ap.error(str(e))
    chosen = [r for r in chosen if not r.already_stub]
    if os.path.exists(out):
        os.rmdir(out)
    copy_tree(src, out)
    with open(os.path.join(out, STARTER_STAMP), "w", encoding="utf-8") as f:
        f.write("lab starter tree from %s; labs: %s\n" % (src, ", ".join(args.lab) or "all"))
    try:
        stubbed = stub_files(out, chosen)
        rungs = affected_rungs(out, stubbed, {r.id: r for r in chosen})
        step_dirs = {r.rung: r.step_dir for r in regions}
        for num in sorted(rungs):
            rung = rungs[num]
            msg = not_implemented_text(out, rung, step_dirs, cause, pulled_by)
            how = mark_not_implemented(out, rung, msg)
            print("rung %s: %s\n         %s" % (num, how, msg))
    except MarkerError as e:
        print("make_starter.py: error: %s" % e, file=sys.stderr)
        print("make_starter.py: %s is incomplete; delete it" % out, file=sys.stderr)
        return 1
    for r in chosen:
        why = " (holds %s's code)" % ", ".join(pulled_by[r.id]) if pulled_by[r.id] else ""
        print("stubbed %-24s %s:%d%s" % (r.id, r.path, r.head + 1, why))
    print(
        "wrote %s: %d region(s) stubbed in %d file(s), %d rung(s) marked not implemented"
        % (out, len(chosen), len(stubbed), len(rungs))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
