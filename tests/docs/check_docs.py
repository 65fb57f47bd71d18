#!/usr/bin/env python3
"""Docs that cannot drift: checks of docs/*.md against the code they describe.

    check_docs.py [--root REPO] mgsrun MGSRUN   docs/mgsrun.md against `MGSRUN --help`
    check_docs.py [--root REPO] timeline        docs/timeline.md's events against the sources
    check_docs.py [--root REPO] troubleshooting docs/troubleshooting.md's quoted messages
    check_docs.py [--root REPO] pyapi DOC HEADER=MODULE... [--complete MODULE]...
                                                 a Python API page's tables against the modules

Each prints what it compared and every disagreement, and exits 1 on any (0
when all agree). Everything is read at test time, from the sources as they
are: a new flag, event, message or function without its doc row fails here.
The conventions each check relies on are stated at its function.
"""

import argparse
import ast
import importlib
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fail_report(title, problems, checked):
    print(f"{title}: {checked}")
    for p in problems:
        print(f"  DRIFT: {p}")
    if problems:
        print(f"{title}: {len(problems)} disagreement(s)")
        return 1
    print(f"{title}: OK")
    return 0


# --- Markdown ------------------------------------------------------------------

FENCE = re.compile(r"^\s*```")


def split_code(text):
    """(prose lines with code blocks blanked, [code block as a list of lines])."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        if FENCE.match(line):
            if block is None:
                block = []
            else:
                blocks.append(block)
                block = None
            prose.append("")
        elif block is not None:
            block.append(line)
            prose.append("")
        else:
            prose.append(line)
    return prose, blocks


def sections(text, level):
    """{title: text} of the headings of one level (`## title`), code blocks kept."""
    out, title, lines = {}, None, []
    in_code = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_code = not in_code
        m = None if in_code else re.match(r"^(#+)\s+(.*)$", line)
        if m and len(m.group(1)) <= level:
            if title is not None:
                out[title] = "\n".join(lines)
            title, lines = (m.group(2).strip() if len(m.group(1)) == level else None), []
        else:
            lines.append(line)
    if title is not None:
        out[title] = "\n".join(lines)
    return out


def split_row(line):
    """The cells of a table row; a `|` inside backticks does not split."""
    cells, cur, code = [], "", False
    for i, ch in enumerate(line):
        if ch == "`":
            code = not code
        if ch == "|" and not code and (i == 0 or line[i - 1] != "\\"):
            cells.append(cur)
            cur = ""
        else:
            cur += ch
    cells.append(cur)
    return [c.strip() for c in cells[1:-1]]


def tables(text):
    """[(header cells, [row cells])] of the Markdown tables in `text` (outside code)."""
    prose, _ = split_code(text)
    out, cur = [], None
    for line in prose:
        if line.startswith("|"):
            cells = split_row(line)
            if cur is None:
                cur = (cells, [])
                out.append(cur)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                cur[1].append(cells)
        else:
            cur = None
    return out


def spans(text):
    """The backticked spans of `text` (whitespace runs, line breaks included, as one space)."""
    return [re.sub(r"\s+", " ", s) for s in re.findall(r"`([^`]+)`", text)]


# --- 1. mgsrun.md against mgsrun --help ------------------------------------------

FLAG = re.compile(r"(?<![\w\-./=:'\"\[])(--?[A-Za-z][A-Za-z0-9-]*)")


def parse_help(text):
    """{flag: takes_value}, grouped: (own flags, generated flags, {generated flag: MGS name}, one-dash)."""
    own, generated, described, one_dash = {}, {}, {}, {}
    group, last = None, None
    for line in text.splitlines():
        m = re.match(r"^Open MPI's one-dash spellings work too: (.*)\.$", line)
        if m:
            one_dash = {f.strip(): None for f in m.group(1).split(",")}
            continue
        if line and not line[0].isspace() and line.endswith(":"):
            group = generated if line.startswith("MGS parameters") else own
            continue
        m = re.match(r"^  (-[^\s]+)(?:\s+(\S+))?", line)
        if m and group is not None and re.fullmatch(r"-{1,2}[A-Za-z][\w-]*(,-{1,2}[A-Za-z][\w-]*)*", m.group(1)):
            takes = bool(m.group(2)) and bool(re.fullmatch(r"[A-Z]+|0\|1", m.group(2)))
            names = m.group(1).split(",")
            for n in names:
                group[n] = takes
            last = names
            if group is generated:
                d = re.search(r"\b(MGS_[A-Z0-9_]+):", line)
                if d:
                    described[names[0]] = d.group(1)
            continue
        if group is generated and last and last[0] not in described:
            d = re.match(r"^\s+(MGS_[A-Z0-9_]+):", line)
            if d:
                described[last[0]] = d.group(1)
    return own, generated, described, one_dash


def mgs_params(root):
    """MGS_* names declared in src/common/params.cc and in configuration.md's table."""
    params = re.findall(r"\b\w+Param\(\s*\"(MGS_[A-Z0-9_]+)\"", (root / "src/common/params.cc").read_text())
    documented = re.findall(r"^\| `(MGS_[A-Z0-9_]+)` \|", (root / "docs/configuration.md").read_text(), re.M)
    return params, documented


def flag_for(name):
    return "--" + name[len("MGS_"):].lower().replace("_", "-")


def check_mgsrun(root, mgsrun):
    """docs/mgsrun.md against what `mgsrun --help` shows.

    * The rule the doc states for generated flags: every MGS_* variable of
      params.cc (and of configuration.md's table) has the flag named after it
      (MGS_STALL_ABORT_S -> --stall-abort-s), described as that variable, in
      --help's "MGS parameters" group, and that group has no other flag.
    * The Options table (section "Options", first column) and the launcher's
      own flags (every other --help group): each table flag is one --help
      shows (a one-dash spelling from --help's "one-dash spellings" line
      included), and each of those --help flags is in the table.
    * Every flag the doc names elsewhere is one --help shows: flags in
      backticked spans that start with "-", the options of `mgsrun ...`
      commands (in spans and code blocks, up to the command they run), and
      the usage block. Left out: `mpirun ...`/`horovodrun ...` commands and
      code comments (their flags are mpirun's), the command after mgsrun's
      options, quoted strings inside a span; a span may name a flag of the
      doc's own `mpirun ...` command lines (what mgsrun adds to mpirun).
    """
    helptext = subprocess.run([mgsrun, "--help"], check=True, capture_output=True, text=True, timeout=30).stdout
    own, generated, described, one_dash = parse_help(helptext)
    problems = []
    if len(own) < 10 or len(generated) < 10 or not one_dash:
        problems.append(f"could not parse `mgsrun --help` ({len(own)} own flags, {len(generated)} generated, "
                        f"{len(one_dash)} one-dash spellings)")
    shown = {**own, **generated}
    arity = dict(shown)
    for f in one_dash:
        arity[f] = shown.get("-" + f, False)
    arity = {f: (2 if f.lstrip("-") == "mca" else 1 if v else 0) for f, v in arity.items()}

    # The rule for generated flags.
    params, documented = mgs_params(root)
    if len(params) < 10:
        problems.append(f"found only {len(params)} MGS_* parameters in src/common/params.cc")
    for name in dict.fromkeys(params + documented):
        flag = flag_for(name)
        if flag not in generated:
            problems.append(f"{name} has no flag {flag} in `mgsrun --help` (mgsrun.md: every MGS_* variable has one)")
        elif described.get(flag) != name:
            problems.append(f"{flag} in `mgsrun --help` is described as {described.get(flag)}, not {name}")
    for flag in generated:
        if flag not in {flag_for(n) for n in params}:
            problems.append(f"`mgsrun --help` lists {flag} among the MGS parameters, but params.cc has no "
                            f"MGS_{flag[2:].upper().replace('-', '_')}")

    doc = (root / "docs/mgsrun.md").read_text()
    options = sections(doc, 2).get("Options", "")
    table_flags = {}
    for header, rows in tables(options):
        if header and header[0] == "option":
            for row in rows:
                for span in spans(row[0]):
                    for flag in FLAG.findall(re.sub(r"\"[^\"]*\"|'[^']*'", "", span)):
                        table_flags[flag] = span
    if not table_flags:
        problems.append("mgsrun.md has no Options table (`| option | meaning |`) listing the launcher's own flags")
    for flag, span in table_flags.items():
        if flag not in own and flag not in one_dash:
            problems.append(f"the Options table names {flag} (in `{span}`), which is not a launcher flag of "
                            f"`mgsrun --help`")
    for flag in own:
        if flag not in table_flags:
            problems.append(f"`mgsrun --help` shows {flag}, which mgsrun.md's Options table does not list")

    # Every other flag the doc names.
    prose, blocks = split_code(doc)
    named = []  # (flag, where)
    mpirun_flags = set()

    def command_flags(line):
        words = [w.strip("[]") for w in line.split()][1:]
        i = 0
        while i < len(words):
            w = words[i]
            i += 1
            if w in ("", "...", "\\"):
                continue
            if w == "--":
                return
            if not w.startswith("-"):
                return  # the command mgsrun runs
            flag = w.split("=", 1)[0]
            named.append((flag, line))
            if "=" not in w:
                i += arity.get(flag, 0)

    lines = []  # logical lines of the code blocks: a line ending in "\" or an indented one continues
    for block in blocks:
        continued = False
        for raw in block:
            text = raw.strip().rstrip("\\").strip()
            if lines and (continued or (raw[:1].isspace() and raw.strip())) and not raw.lstrip().startswith("#"):
                lines[-1] += " " + text
            else:
                lines.append(text)
            continued = raw.rstrip().endswith("\\")
    for line in lines:
        if line.startswith("mgsrun"):
            command_flags(line)
        elif line.startswith("mpirun") or line.startswith("# mpirun"):
            mpirun_flags.update(FLAG.findall(line))
    for span in spans("\n".join(prose)):
        if span.startswith("mgsrun "):
            command_flags(span)
        elif span.startswith("-"):
            for flag in FLAG.findall(re.sub(r"\"[^\"]*\"|'[^']*'", "", span)):
                named.append((flag, span))
    allowed = set(shown) | set(one_dash)
    for flag, where in dict.fromkeys(named):
        if flag not in allowed and not (flag in mpirun_flags and not where.startswith("mgsrun")):
            problems.append(f"mgsrun.md names {flag} (in `{where}`), which `mgsrun --help` does not show")
    return fail_report("mgsrun.md", problems,
                       f"{len(own)} launcher flags and {len(one_dash)} one-dash spellings in --help, "
                       f"{len(table_flags)} in the Options table; {len(generated)} generated flags for "
                       f"{len(params)} parameters; {len(set(f for f, _ in named))} flags named elsewhere")


# --- 2. timeline.md's events against the sources ---------------------------------

def skip_string(text, i):
    """Index after the C++ string or character literal that starts at text[i]."""
    q = text[i]
    i += 1
    while i < len(text) and text[i] != q:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def call_args(text, open_paren):
    """The text of a call's arguments, from its "(" to the matching ")"."""
    depth, i = 0, open_paren
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = skip_string(text, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
        i += 1
    return text[open_paren + 1:]


def strip_comments(text):
    """C++ text without its comments (string and character literals kept as they are)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/|(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')",
                  lambda m: m.group(1) or (" " if m.group(0).startswith("//") else "\n" * m.group(0).count("\n")),
                  text, flags=re.S)


def code_events(root):
    """{event: [file:line]} of the literal activity names passed to a span(...) call in src/ and cuda/.

    Rank 0's Timeline::span(tensor, activity, ...) writes every event; its
    callers, and the helpers named span that forward to it (Executor::span, the
    local `span` lambdas of the sparse exchanges), are all called `span`. The
    events are the ALL_CAPS string literals among a span call's arguments;
    calls that pass a variable on (the helpers themselves) have none.
    """
    events = {}
    for d in ("src", "cuda"):
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp"):
                continue
            text = strip_comments(path.read_text())
            for m in re.finditer(r"\bspan\s*\(", text):
                line = text.count("\n", 0, m.start()) + 1
                for name in re.findall(r"\"([A-Z][A-Z0-9_]*)\"", call_args(text, m.end() - 1)):
                    events.setdefault(name, []).append(f"{path.relative_to(root)}:{line}")
    return events


def doc_events(doc):
    """{event: where} documented in timeline.md's "Events" section.

    Convention: an event is an ALL_CAPS backticked name in the first column of
    a table whose first header cell is "event", or one in bold (**`NAME`**) in
    the section's prose.
    """
    section = sections(doc, 2).get("Events", "")
    out = {}
    for header, rows in tables(section):
        if header and header[0] == "event":
            for row in rows:
                for span in spans(row[0]):
                    if re.fullmatch(r"[A-Z][A-Z0-9_]*", span):
                        out[span] = "table"
    for name in re.findall(r"\*\*`([A-Z][A-Z0-9_]*)`\*\*", section):
        out.setdefault(name, "bold")
    return out


def check_timeline(root):
    emitted = code_events(root)
    documented = doc_events((root / "docs/timeline.md").read_text())
    problems = []
    if "NEGOTIATE" not in emitted or len(emitted) < 10:
        problems.append(f"found only {len(emitted)} events in the sources (expected NEGOTIATE and more): "
                        "has the way events are written changed?")
    for e, where in sorted(emitted.items()):
        if e not in documented:
            problems.append(f"{e} is written by the code ({', '.join(where)}) but timeline.md does not list it")
    for e in sorted(documented):
        if e not in emitted:
            problems.append(f"timeline.md lists {e}, which no span(...) call in src/ or cuda/ writes")
    return fail_report("timeline.md", problems, f"{len(emitted)} events written by the code, "
                                                f"{len(documented)} listed in the doc")


# --- 3. troubleshooting.md's quoted messages against the sources ------------------

SEP = "\x00"  # a format field or an expression: where a message's literal text is cut


def unescape(s):
    return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)
                                                                              if len(m.group(1)) == 1 else "?"), s)


def cpp_literals(text):
    """The string literals of a C/C++/CUDA file, adjacent ones ("a" "b") joined."""
    tok = re.compile(r"//[^\n]*|/\*.*?\*/|R\"(?P<d>[^(\s]*)\((?P<raw>.*?)\)(?P=d)\"|"
                     r"\"(?P<s>(?:[^\"\\\n]|\\.)*)\"|'(?:[^'\\\n]|\\.)*'", re.S)
    out, prev_end = [], None
    for m in tok.finditer(text):
        if m.group("s") is None and m.group("raw") is None:
            if not m.group(0).startswith("/"):
                prev_end = None
            continue
        s = m.group("raw") if m.group("raw") is not None else unescape(m.group("s"))
        if prev_end is not None and out and text[prev_end:m.start()].strip() == "":
            out[-1] += s
        else:
            out.append(s)
        prev_end = m.end()
    # spdlog/fmt fields ({}, {:.1f}) and printf conversions are filled in at run time
    return [re.sub(r"\{(?::[^{}]*)?\}|%[-+#0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z)?[sdfgeuxicp]", SEP, s) for s in out]


def py_literals(text):
    """The string literals of a Python file, implicitly concatenated ones joined; f-string fields cut."""
    out, joined = [], False
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return out
    for t in toks:
        if t.type == tokenize.STRING:
            prefix = re.match(r"[rRbBuUfF]*", t.string).group(0).lower()
            body = t.string[len(prefix):]
            q = body[:3] if body[:3] in ('"""', "'''") else body[0]
            s = body[len(q):-len(q)]
            if "r" not in prefix:
                s = unescape(s)
            if "f" in prefix:
                s = s.replace("{{", "\x01").replace("}}", "\x02")
                s = re.sub(r"\{(?:[^{}]|\{[^{}]*\})*\}", SEP, s).replace("\x01", "{").replace("\x02", "}")
            else:  # str.format fields and %-conversions
                s = re.sub(r"\{[\w.\[\]]*(?:![rsa])?(?::[^{}]*)?\}|%[-+#0]*\d*(?:\.\d+)?[sdrfgxi]", SEP, s)
            if joined:
                out[-1] += s
            else:
                out.append(s)
            joined = True
        elif t.type not in (tokenize.NL, tokenize.COMMENT):
            joined = False
    return out


def source_fragments(root):
    """{file: [literal fragment]}: every string literal of src/, launcher/, bindings/python/, cuda/, cut at SEP."""
    files = {}
    for d in ("src", "launcher", "bindings/python", "cuda"):
        for path in sorted((root / d).rglob("*")):
            if path.suffix in (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp"):
                lits = cpp_literals(path.read_text(errors="replace"))
            elif path.suffix == ".py":
                lits = py_literals(path.read_text(errors="replace"))
            else:
                continue
            files[str(path.relative_to(root))] = [f for lit in lits for f in lit.split(SEP)]
    return files


def _word_cut(a, b):
    """Whether a join of a and b would cut a word (both sides letters or digits)."""
    return bool(a) and bool(b) and a[-1].isalnum() and b[0].isalnum()


def in_literal(piece, fragment):
    """Whether `piece` occurs in `fragment` without cutting a word of it at either end."""
    i = fragment.find(piece)
    while i >= 0:
        if not _word_cut(fragment[:i], piece) and not _word_cut(piece, fragment[i + len(piece):]):
            return True
        i = fragment.find(piece, i + 1)
    return False


def covered(piece, fragments):
    """Whether `piece` occurs in one fragment, or is fragments joined end to end (the end of one, whole
    ones, the start of another) as a message concatenated from literals and values is. No fragment may
    be cut inside a word, and no part of a join may be a single letter or digit, so a letter standing
    for a value (`rank r`) is taken neither from a literal's first word nor from a literal "r"."""
    if any(in_literal(piece, f) for f in fragments):
        return True
    def part(text):  # a usable part of a join
        return not (len(text) == 1 and text.isalnum())

    n = len(piece)
    frags = [f for f in fragments if part(f)]
    starts = set()  # positions of piece reachable at a fragment boundary
    for f in frags:
        for k in range(2 if piece[0].isalnum() else 1, min(len(f), n - 1) + 1):
            if f.endswith(piece[:k]) and not _word_cut(f[:len(f) - k], piece[:k]):
                starts.add(k)
    todo, seen = sorted(starts), set(starts)
    while todo:
        i = todo.pop()
        rest = piece[i:]
        for f in frags:
            if part(rest) and f.startswith(rest) and not _word_cut(rest, f[len(rest):]):
                return True
            if rest.startswith(f) and i + len(f) not in seen:
                seen.add(i + len(f))
                todo.append(i + len(f))
    return False


PLACEHOLDER = re.compile(r"\.\.\.|…|<[^<>\s][^<>]*>|\{\}")


def quotes(doc):
    """The messages troubleshooting.md quotes.

    Convention: in a table whose first header cell starts with "message", a
    row whose first cell starts with a backticked span quotes messages: every
    backticked span in that cell is (part of) a message mgs writes. `...`
    stands for text left out and `<...>` for a part that varies (a name, a
    number, a path). A row whose first cell starts with plain text describes a
    message of another program in words.
    """
    out = []
    for header, rows in tables(doc):
        if header and header[0].lower().startswith("message"):
            for row in rows:
                if row and row[0].startswith("`"):
                    out.extend(spans(row[0]))
    return out


def check_troubleshooting(root):
    """Every quoted message's literal pieces (the text between placeholders) occur in the sources: each
    piece inside one string literal, or as string literals joined end to end (see covered())."""
    files = source_fragments(root)
    everything = sorted({f for frags in files.values() for f in frags})
    qs = quotes((root / "docs/troubleshooting.md").read_text())
    problems = []
    if len(qs) < 30:
        problems.append(f"found only {len(qs)} quoted messages in troubleshooting.md")
    for q in qs:
        # A status name in front ("MGS_ERR_CONFIG: ...") comes from the status table, the rest from the code.
        status = re.match(r"(MGS_ERR_[A-Z_]+): ", q)
        rest = q[status.end():] if status else q
        pieces = ([status.group(1)] if status else []) + [p for p in PLACEHOLDER.split(rest) if p.strip()]
        missing = [p for p in pieces if not covered(p, everything)]
        if missing:
            problems.append(f"`{q}`: no source string has " + "; ".join(repr(p) for p in missing))
    return fail_report("troubleshooting.md", problems,
                       f"{len(qs)} quoted messages against the string literals of {len(files)} source files")


# --- 4. Python API tables against the modules ----------------------------------------

FRAMEWORKS = ("torch", "tensorflow", "keras", "numpy")


def static_public(root, module):
    """`__all__` of a module's source (when its framework cannot be imported here)."""
    base = root / "bindings/python" / Path(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return sorted({n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                   and not n.name.startswith("_")})


def public_names(mod):
    if hasattr(mod, "__all__"):
        return list(mod.__all__)
    return sorted(n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(os)))


def check_pyapi(root, doc_name, table_specs, complete):
    """The API tables of a Python page against the modules they list.

    Convention: the tables of the page whose first header cell starts with
    HEADER list names of MODULE: in their first column, each backticked span
    starts with a name (`allreduce(tensor, ...)`, `Compression.fp16`), which
    must exist in the module. For each module given with --complete (the page
    says its tables list every public name), every name of the module's
    `__all__` must be listed too.
    """
    doc = (root / "docs" / doc_name).read_text()
    problems, notes = [], []
    listed = {}  # module -> {name: span}
    found_tables = {header: 0 for header, _ in table_specs}
    for header, rows in tables(doc):
        for want, module in table_specs:
            if header and header[0].startswith(want):
                found_tables[want] += 1
                for row in rows:
                    for span in spans(row[0]):
                        m = re.match(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\(|$)", span)
                        if m:
                            listed.setdefault(module, {})[m.group(1)] = span
                        else:
                            problems.append(f"{doc_name}: `{span}` in a `{want}` table does not start with a name")
    for want, n in found_tables.items():
        if n == 0:
            problems.append(f"{doc_name} has no table whose first column is headed `{want}`")
    for module in dict.fromkeys([m for _, m in table_specs] + complete):
        try:
            mod = importlib.import_module(module)
            public = public_names(mod)
            how = "imported"
        except ModuleNotFoundError as e:
            if e.name not in FRAMEWORKS:
                raise
            # The framework is not installed for this Python: read the module's __all__ instead.
            mod, public, how = None, static_public(root, module), f"read from its source ({e.name} not installed)"
        notes.append(f"{module} {how}: {len(public)} public names, {len(listed.get(module, {}))} listed")
        for name, span in sorted(listed.get(module, {}).items()):
            if mod is None:
                ok = name.split(".")[0] in public
            else:
                obj, ok = mod, True
                for part in name.split("."):
                    if not hasattr(obj, part):
                        ok = False
                        break
                    obj = getattr(obj, part)
            if not ok:
                problems.append(f"{doc_name} lists `{span}`, but {module} has no {name}")
        if module in complete:
            documented = {n.split(".")[0] for n in listed.get(module, {})}
            for name in public:
                if name not in documented:
                    problems.append(f"{module}.{name} is public (in __all__) but {doc_name}'s tables do not list it")
    return fail_report(doc_name, problems, "; ".join(notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT)
    sub = ap.add_subparsers(dest="check", required=True)
    p = sub.add_parser("mgsrun")
    p.add_argument("mgsrun")
    sub.add_parser("timeline")
    sub.add_parser("troubleshooting")
    p = sub.add_parser("pyapi")
    p.add_argument("doc")
    p.add_argument("tables", nargs="+", help="HEADER=MODULE: tables headed HEADER list MODULE's names")
    p.add_argument("--complete", action="append", default=[], help="a module whose every public name is listed")
    args = ap.parse_args()
    root = args.root.resolve()
    if args.check == "mgsrun":
        return check_mgsrun(root, args.mgsrun)
    if args.check == "timeline":
        return check_timeline(root)
    if args.check == "troubleshooting":
        return check_troubleshooting(root)
    sys.path.insert(0, str(root / "bindings/python"))
    return check_pyapi(root, args.doc, [tuple(t.split("=", 1)) for t in args.tables], args.complete)


if __name__ == "__main__":
    sys.exit(main())
