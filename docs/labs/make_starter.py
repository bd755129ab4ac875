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

--lab selects what to stub: a rung number ("05") or a region id ("05-mma-qk"); repeatable.
Without --lab every region is stubbed. --list prints the regions and exits.
Exit codes: 0 written, 1 a marker problem (nothing useful written), 2 bad arguments.
"""

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass, field

# Files that may hold markers (only under steps/: a README quoting a marker is not a region).
SOURCE_EXTENSIONS = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")
BEGIN_RE = re.compile(
    r"^(?P<indent>[ \t]*)//\s*LAB-BEGIN\((?P<id>[A-Za-z0-9_-]+)\)\s*:?\s*(?P<task>.*?)\s*$"
)
END_RE = re.compile(r"^[ \t]*//\s*LAB-END\((?P<id>[A-Za-z0-9_-]+)\)\s*$")
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
    begin: int  # 0-based line index of LAB-BEGIN
    end: int  # 0-based line index of LAB-END
    indent: str
    already_stub: bool = False  # only a TODO line between the markers (a starter tree)


@dataclass
class Rung:
    number: str
    step_dir: str
    own: list = field(default_factory=list)  # ids stubbed in this rung's folder
    borrowed: dict = field(default_factory=dict)  # other rung number -> ids stubbed there


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
                        open_region = Region(
                            rel, m["num"], step_dir, rid, b["task"], idx, -1, b["indent"]
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
    return regions


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


def affected_rungs(out, stubbed):
    """Rungs whose sources (or files they include) lost a region, with the ids per owner rung."""
    rungs = {}
    steps = os.path.join(out, "steps")
    stubbed_ids = {p: ids for p, ids in stubbed.items()}
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
            for rid in stubbed_ids.get(path, []):
                owner = rid.split("-", 1)[0]
                if owner == rung.number:
                    rung.own.append(rid)
                else:
                    rung.borrowed.setdefault(owner, []).append(rid)
        if rung.own or rung.borrowed:
            rungs[rung.number] = rung
    return rungs


def not_implemented_text(out, rung, step_dirs, files_of):
    if rung.own:
        return "lab %s: implement %s in %s (see %s)" % (
            rung.number,
            ", ".join(rung.own),
            " and ".join(files_of(rung.own)),
            handout_for(out, rung.number, rung.step_dir),
        )
    owner = sorted(rung.borrowed)[0]
    ids = rung.borrowed[owner]
    return "lab %s: rung %s reuses %s; implement %s there first (see %s)" % (
        owner,
        rung.number,
        " and ".join(files_of(ids)),
        ", ".join(ids),
        handout_for(out, owner, step_dirs[owner]),
    )


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
    if "not_implemented" in text:
        return "already marked"
    code = code_only(text)
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
    if not wanted:
        return regions
    chosen = []
    for r in regions:
        if r.rung in wanted or r.id in wanted:
            chosen.append(r)
    unknown = [w for w in wanted if w not in {r.rung for r in regions} | {r.id for r in regions}]
    if unknown:
        raise ValueError(
            "--lab %s: no rung or region of that name has markers (see --list)" % ", ".join(unknown)
        )
    return chosen


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
    args = ap.parse_args(argv)

    src = os.path.abspath(args.src)
    try:
        regions = find_regions(src)
    except MarkerError as e:
        print("make_starter.py: error: %s" % e, file=sys.stderr)
        return 1
    if args.list:
        for r in regions:
            print("%-24s %s:%d-%d  %s" % (r.id, r.path, r.begin + 1, r.end + 1, r.task))
        return 0
    if not args.out:
        ap.error("OUT is required (unless --list)")
    out = os.path.abspath(args.out)
    if out == src:
        ap.error("OUT must not be SRC")
    if os.path.exists(out) and os.listdir(out):
        ap.error("%s exists and is not empty" % out)
    try:
        chosen = [r for r in select(regions, args.lab) if not r.already_stub]
    except ValueError as e:
        ap.error(str(e))
    if os.path.exists(out):
        os.rmdir(out)
    copy_tree(src, out)
    with open(os.path.join(out, STARTER_STAMP), "w", encoding="utf-8") as f:
        f.write("lab starter tree from %s; labs: %s\n" % (src, ", ".join(args.lab) or "all"))
    try:
        stubbed = stub_files(out, chosen)
        rungs = affected_rungs(out, stubbed)
        step_dirs = {r.rung: r.step_dir for r in regions}
        for num in sorted(rungs):
            rung = rungs[num]
            msg = not_implemented_text(
                out, rung, step_dirs, lambda ids: sorted({r.path for r in chosen if r.id in ids})
            )
            how = mark_not_implemented(out, rung, msg)
            print("rung %s: %s\n         %s" % (num, how, msg))
    except MarkerError as e:
        print("make_starter.py: error: %s" % e, file=sys.stderr)
        print("make_starter.py: %s is incomplete; delete it" % out, file=sys.stderr)
        return 1
    for r in chosen:
        print("stubbed %-24s %s:%d" % (r.id, r.path, r.begin + 1))
    print(
        "wrote %s: %d region(s) stubbed in %d file(s), %d rung(s) marked not implemented"
        % (out, len(chosen), len(stubbed), len(rungs))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
