#!/usr/bin/env python3
"""Fail when docs/architecture.md names a file or a function that does not
exist, so the map cannot drift from the code.

What it reads, in backticks (`...`) only:

- a path with a slash and a known ending (`src/lease.rs`, `core/src/hold.rs`,
  `redis/key.rs`, `commands/*.rs`, `tests/`): the file (or folder) must exist,
  either from the repository's root or below `src/` or `core/src/` (a glob
  must match at least one file);
- a bare Rust file name (`waiting.rs`): some file of that name must exist
  under `src/` or `core/src/`;
- `a::b` or `a::b::c` (a module or a type, then a function, method, type or
  variant): the last name must be defined (`fn`, `struct`, `enum`, `trait`,
  `type`, `const`, `static`, a variant) in a file named after the part
  before it (`decide::acquire` in a `decide.rs`, `LockKey::put` in a file
  that defines `LockKey`). Names of other crates (`std::`, `redis_module::`)
  and of Redis (`RM_*`) are not checked.

On docs/architecture.md (the map), it also fails when the page leaves
something out:

- a `.rs` file under `src/` or `core/src/` (any depth): the page must name
  it by a path that is its own: its path from the root (`src/sync.rs`,
  `core/src/sync.rs`), or a shorter tail no other file has (`redis/key.rs`,
  `waiting.rs`); a glob (`commands/*.rs`) or a shared tail (`sync.rs`,
  `mod.rs`) names no file;
- a command of the module's command table (the `&[...]` array of rows in
  `src/lib.rs` or `src/commands/mod.rs` whose first string literals are
  dotted names, `c"lock.acquire"`): in backticks, any case (`LOCK.ACQUIRE`);
  a row whose name has no dot is a subcommand (of its constructor's
  `parent: Some(c"...")`, else of the row above it with a dot), named as
  `LOCK.LEASE GRANT`;
- a decision function of the core: every top-level `pub fn` of
  `core/src/decide.rs`, and of each core file the decision table (the
  table whose header has a `Function (core)` column) names in that column
  (`sync::waited` makes `core/src/sync.rs` a file of decisions,
  `Waiting::look` the file that defines `Waiting`): named as
  `module::function` in backticks, or by a glob (`args::parse_*`).

Usage:
  scripts/check-docs.py [FILE ...]   default docs/architecture.md; exit 1 on
                                     any name it cannot find or any file,
                                     command or decision the map leaves out,
                                     listing them
  scripts/check-docs.py --self-test  check this script on small trees
"""

import fnmatch
import glob
import os
import re
import sys
import tempfile

ROOTS = ["", "src", "core/src"]
SKIP_PREFIXES = ("std::", "core::ffi", "redis_module::", "raw::", "libc::", "redis::")
CODE = re.compile(r"`([^`\n]+)`")
PATH_END = re.compile(r"\.(rs|md|py|sh|toml|c)$|/$")


def rust_files(repo):
    out = []
    for base in ("src", "core/src", "tests", "testsupport/src", "chaos/src", "bench/src"):
        for dirpath, _, files in os.walk(os.path.join(repo, base)):
            out.extend(os.path.join(dirpath, f) for f in files if f.endswith(".rs"))
    return out


def defines(text, name):
    """Whether `text` defines `name` as an item, a method or a variant."""
    item = re.compile(
        r"\b(?:fn|struct|enum|trait|type|const|static|mod)\s+" + re.escape(name) + r"\b"
    )
    variant = re.compile(r"^\s*" + re.escape(name) + r"\s*(?:[({,]|$)", re.M)
    return bool(item.search(text) or variant.search(text))


def check_path(repo, path):
    for root in ROOTS:
        full = os.path.join(repo, root, path)
        if any(ch in path for ch in "*?["):
            if glob.glob(full):
                return True
        elif os.path.exists(full):
            return True
    return False


def check_name(repo, files, texts, name):
    parts = [p for p in name.replace("()", "").split("::") if p]
    if len(parts) < 2:
        return True
    owner, item = parts[-2], parts[-1]
    if owner in ("crate", "super", "self"):
        return any(defines(t, item) for t in texts.values())
    # A module: a file named after it. A type: a file that defines it.
    candidates = [f for f in files if os.path.basename(f) == owner + ".rs"]
    candidates += [f for f in files if f.endswith(os.sep + owner + os.sep + "mod.rs")]
    # A folder module re-exports what its files define (`wait_queue::release`
    # lives in `wait_queue/handoff.rs`).
    candidates += [f for f in files if (os.sep + owner + os.sep) in f]
    if not candidates and owner[:1].isupper():
        candidates = [f for f, t in texts.items() if defines(t, owner)]
    return any(defines(texts[f], item) for f in candidates)


# What the map must cover (docs/architecture.md only).
MAP = "docs/architecture.md"
COVERED_DIRS = ("src", "core/src")
TABLE_FILES = ("src/lib.rs", "src/commands/mod.rs")
DECIDE = "core/src/decide.rs"
STRING = re.compile(r'(?:c|b)?"((?:[^"\\\n]|\\.)*)"')
DOTTED = re.compile(r"[a-z][a-z0-9_-]*\.[a-z0-9_.-]+")
PATH_TOKEN = re.compile(r"[A-Za-z0-9_./*-]+\.rs\b")
TOP_PUB_FN = re.compile(r"^pub\s+(?:const\s+|async\s+|unsafe\s+)*fn\s+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def strip_comments(text):
    """`text` with its comments blanked and its string literals kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text[i] == "'" and re.match(r"'(?:[^'\\]|\\.[^']*)'", text[i:]):
            m = re.match(r"'(?:[^'\\]|\\.[^']*)'", text[i:])
            out.append(m.group(0))
            i += len(m.group(0))
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def closing(text, start):
    """The index of the bracket closing the one at `start` (strings skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i = [], start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    return len(text)


def split_rows(body):
    """The elements of an array literal's body, split at its top-level commas."""
    rows, depth, start, i = [], 0, 0, 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            i += 1
            while i < len(body) and body[i] != '"':
                i += 2 if body[i] == "\\" else 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            rows.append(body[start:i])
            start = i + 1
        i += 1
    rows.append(body[start:])
    return [r.strip() for r in rows if r.strip()]


def constructor_parent(text, name):
    """The `parent: Some(c"...")` a row constructor `fn name` sets, if any."""
    m = re.search(r"\bfn\s+" + re.escape(name) + r"\s*\(", text)
    if not m:
        return None
    brace = text.find("{", closing(text, m.end() - 1))
    if brace < 0:
        return None
    body = text[brace : closing(text, brace) + 1]
    parent = re.search(r"\bparent\s*:\s*Some\s*\(\s*" + STRING.pattern, body)
    return parent.group(1) if parent else None


def command_table(repo):
    """The commands of the module's command table, as "lock.acquire" or
    "lock.lease grant", or None if no file holds such a table."""
    names, found = [], False
    for rel in TABLE_FILES:
        path = os.path.join(repo, rel)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = strip_comments(handle.read())
        for m in re.finditer(r"\b(?:const|static)\s+\w+\s*:\s*&(?:'static\s+)?\[[^\]=;]*\]\s*=\s*&\[", text):
            start = m.end() - 1
            rows = split_rows(text[start + 1 : closing(text, start)])
            firsts = [(row, STRING.search(row)) for row in rows]
            if not any(lit and DOTTED.fullmatch(lit.group(1)) for _, lit in firsts):
                continue
            found = True
            last_dotted = None
            for row, lit in firsts:
                if not lit:
                    continue
                name = lit.group(1).lower()
                if DOTTED.fullmatch(name):
                    names.append(name)
                    last_dotted = name
                    continue
                own = re.search(r"\bparent\s*:\s*Some\s*\(\s*" + STRING.pattern, row)
                ctor = re.match(r"([A-Za-z_]\w*)\s*[({]", row)
                parent = (own and own.group(1)) or (ctor and constructor_parent(text, ctor.group(1)))
                parent = (parent or last_dotted or "").lower()
                names.append(f"{parent} {name}".strip())
    return names if found else None


def covered_files(repo):
    """Every `.rs` file under `src/` and `core/src/`, from the root, with `/`."""
    out = []
    for base in COVERED_DIRS:
        for dirpath, _, files in os.walk(os.path.join(repo, base)):
            for f in files:
                if f.endswith(".rs"):
                    out.append(os.path.relpath(os.path.join(dirpath, f), repo).replace(os.sep, "/"))
    return sorted(out)


def named_files(text, paths):
    """The files of `paths` that `text` names by a path only they have."""
    named = set()
    for token in PATH_TOKEN.findall(text):
        if token.startswith("./"):
            token = token[2:]
        if "*" in token:
            continue
        if token in paths:
            named.add(token)
            continue
        tails = [p for p in paths if p.endswith("/" + token)]
        if len(tails) == 1:
            named.add(tails[0])
    return named


def module_name(path):
    """`core/src/decide.rs` is `decide`; `core/src/hold/mod.rs` is `hold`."""
    base = os.path.basename(path)
    return os.path.basename(os.path.dirname(path)) if base == "mod.rs" else base[:-3]


def decision_table_words(text):
    """The words of the `Function (core)` column of the decision table, or
    None when the page has no such table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            continue
        column = next((j for j, c in enumerate(cells) if re.match(r"(?i)function\b.*\bcore\b", c)), None)
        if column is None:
            continue
        words = []
        for row in lines[i + 2 :]:
            if not row.lstrip().startswith("|"):
                break
            row_cells = [c.strip() for c in row.strip().strip("|").split("|")]
            if column < len(row_cells):
                for span in CODE.findall(row_cells[column]):
                    words += [w.strip(".;:`") for w in re.split(r"[\s,()→]+", span) if w.strip(".;:`")]
        return words
    return None


def decision_files(repo, text, texts):
    """`core/src/decide.rs`, and every core file the decision table names."""
    core = {os.path.relpath(f, repo).replace(os.sep, "/"): t for f, t in texts.items()}
    core = {f: t for f, t in core.items() if f.startswith("core/src/")}
    out = {DECIDE} if DECIDE in core else set()
    for word in decision_table_words(text) or []:
        if word.endswith(".rs"):
            out |= {f for f in core if f == word or f.endswith("/" + word)}
            continue
        parts = word.split("::")
        if len(parts) < 2:
            continue
        owner = parts[-2]
        by_name = {f for f in core if module_name(f) == owner}
        if not by_name and owner[:1].isupper():
            kind = re.compile(r"\b(?:struct|enum|trait|type)\s+" + re.escape(owner) + r"\b")
            by_name = {f for f, t in core.items() if kind.search(t)}
        out |= by_name
    return sorted(out)


def omissions(repo, text, texts):
    """What the map leaves out: files, commands, decision functions."""
    out = []
    paths = covered_files(repo)
    named = named_files(text, set(paths))
    out += [f"omits file {p}" for p in paths if p not in named]

    spans = CODE.findall(text)
    commands = command_table(repo)
    if commands is None:
        out.append("no command table (in " + " or ".join(TABLE_FILES) + ")")
    for command in commands or []:
        words = command.split(" ")
        pattern = re.compile(
            r"(?<![\w.])" + r"\s+".join(re.escape(w) for w in words) + r"(?![\w.])", re.I
        )
        if not any(pattern.search(span) for span in spans):
            out.append(f"omits command {command.upper()}")

    if decision_table_words(text) is None:
        out.append("no decision table (a table with a `Function (core)` column)")
    words = set()
    for span in spans:
        words |= {w.strip(".;:`") for w in re.split(r"[\s,()→]+", span)}
    globs = [w for w in words if "*" in w and "::" in w]
    for rel in decision_files(repo, text, texts):
        module = module_name(rel)
        for function in TOP_PUB_FN.findall(texts[os.path.join(repo, rel)]):
            name = f"{module}::{function}"
            if any(w == name or w.endswith("::" + name) for w in words):
                continue
            if any(fnmatch.fnmatchcase(name, "::".join(g.split("::")[-2:])) for g in globs):
                continue
            out.append(f"omits decision {name}")
    return out


def check(repo, doc, complete=None):
    """What `doc` names that does not exist; and, for the map (or when
    `complete`), what it leaves out."""
    files = rust_files(repo)
    texts = {}
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as handle:
            texts[f] = handle.read()
    with open(doc, encoding="utf-8") as handle:
        text = handle.read()
    missing = []
    for match in CODE.finditer(text):
        token = match.group(1).strip()
        for word in re.split(r"[\s,()→]+", token):
            word = word.strip(".;:`")
            if not word or word.startswith(SKIP_PREFIXES) or word.startswith("RM_"):
                continue
            if "/" in word and PATH_END.search(word):
                if not check_path(repo, word):
                    missing.append(f"no file {word}")
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.rs", word):
                if not any(os.path.basename(f) == word for f in files):
                    missing.append(f"no file {word}")
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+(\(\))?", word):
                if not check_name(repo, files, texts, word):
                    missing.append(f"no name {word}")
    if complete is None:
        complete = os.path.abspath(doc) == os.path.abspath(os.path.join(repo, MAP))
    if complete:
        missing += omissions(repo, text, texts)
    return sorted(set(missing))


def write(repo, rel, text):
    path = os.path.join(repo, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# A small module for the map's rules: a command table (with a row commented
# out, a container and its subcommand, and an array that is not a table), a
# file name two crates share, decisions in decide.rs and in files the
# decision table names.
TABLE = """//! The table of contents.
const COMMANDS: &[Spec] = &[
    spec(c"lock.acquire", c"write deny-oom", "write fast", true, acquire::run),
    // spec(c"lock.gone", c"write", "write", true, gone::run),
    spec(c"sem.info",     c"readonly fast",  "read fast",  true, info::run),
    container(c"lock.lease"),
    sub(c"grant",         c"write",          "write, fast", true, lease::grant),
];
const WORDS: &[&str] = &["not.a command"];
/// A subcommand of LOCK.LEASE.
const fn sub(name: &'static CStr, flags: &'static CStr, c: &'static str, l: bool, b: Body) -> Spec {
    Spec { /* parent: Some(c"lock.wrong"), */ parent: Some(c"lock.lease"), ..spec(name, flags, c, l, b) }
}
"""
TREE = {
    "src/commands/mod.rs": "//! Commands.\npub mod acquire;\n",
    "src/commands/acquire.rs": "//! ACQUIRE.\npub fn run() {}\n",
    "src/redis/key.rs": "//! Keys.\npub struct LockKey;\nimpl LockKey { pub fn put(&self) {} }\n",
    "src/sync.rs": "//! Module-wide SYNC state.\n",
    "core/src/lib.rs": "//! The core.\n",
    "core/src/decide.rs": (
        "pub fn acquire() {}\npub const fn serve() {}\nfn private() {}\n"
        "impl Serve {\n    pub fn method(&self) {}\n}\n"
        "#[cfg(test)]\nmod tests {\n    pub fn helper() {}\n}\n"
    ),
    "core/src/sync.rs": "pub struct Waiting;\nimpl Waiting {\n    pub fn look(&self) {}\n}\npub fn waited() {}\n",
    "core/src/group.rs": "pub fn horizon() {}\npub fn due() {}\n",
    "core/src/args.rs": "pub fn parse_a() {}\npub fn parse_b() {}\n",
    "core/src/hold/mod.rs": "pub struct Hold;\npub fn admits() {}\n",
}
MAP_OK = """# Map
`src/lib.rs`: the table. `commands/mod.rs`, `commands/acquire.rs`: commands.
`redis/key.rs`: keys. `src/sync.rs`, `core/src/sync.rs`: SYNC. `core/src/lib.rs`.
`decide.rs` `group.rs` `args.rs` `hold/mod.rs`
Commands: `LOCK.ACQUIRE k 1000`, `sem.info`, `LOCK.LEASE GRANT ttl`.

| Decision | Function (core) | Executed by |
| --- | --- | --- |
| acquire | `decide::acquire`, `decide::serve` | the command |
| SYNC | `Waiting::look`, `sync::waited` | the command |
| parse | `args::parse_*` | each command |
| lease | `group::horizon` | |

`hold::admits` (WRONGTYPE); a lease's end is `group::due`.
"""


def self_test():
    # Names that must exist (any page).
    with tempfile.TemporaryDirectory() as repo:
        os.makedirs(os.path.join(repo, "src/commands"))
        os.makedirs(os.path.join(repo, "core/src"))
        with open(os.path.join(repo, "core/src/decide.rs"), "w") as f:
            f.write("pub fn acquire() {}\npub enum Serve {\n    Grant,\n}\n")
        with open(os.path.join(repo, "src/commands/acquire.rs"), "w") as f:
            f.write("pub struct LockKey;\nimpl LockKey { pub fn put(&self) {} }\n")
        doc = os.path.join(repo, "doc.md")
        with open(doc, "w") as f:
            f.write(
                "`decide::acquire` `Serve::Grant` `LockKey::put` `src/commands/acquire.rs` "
                "`commands/*.rs` `acquire.rs` `std::fmt::Display`\n"
            )
        assert check(repo, doc) == [], check(repo, doc)
        with open(doc, "w") as f:
            f.write("`decide::renew` `LockKey::take` `src/gone.rs` `gone.rs` `Serve::Renew`\n")
        got = check(repo, doc)
        want = [
            "no file gone.rs",
            "no file src/gone.rs",
            "no name LockKey::take",
            "no name Serve::Renew",
            "no name decide::renew",
        ]
        assert got == want, got

    # What the map must not leave out.
    def map_check(changes=(), files=None, table="src/lib.rs"):
        with tempfile.TemporaryDirectory() as repo:
            for rel, text in dict(TREE, **(files or {})).items():
                write(repo, rel, text)
            if table == "src/commands/mod.rs":
                write(repo, table, TREE[table] + TABLE)
                write(repo, "src/lib.rs", "//! The table of contents.\n")
            elif table:
                write(repo, table, TABLE)
            else:
                write(repo, "src/lib.rs", "//! No table.\n")
            text = MAP_OK
            for old, new in changes:
                assert old in text, old
                text = text.replace(old, new)
            write(repo, MAP, text)
            # Only the map has to be complete.
            write(repo, "other.md", text)
            assert check(repo, os.path.join(repo, "other.md")) == []
            return check(repo, os.path.join(repo, MAP))

    assert map_check() == [], map_check()
    # The table may live in commands/mod.rs.
    assert map_check(table="src/commands/mod.rs") == []

    # Files: a shared tail (`sync.rs`) or a glob names none; a new file
    # must be added, at any depth.
    got = map_check(
        changes=[
            ("`src/sync.rs`, `core/src/sync.rs`", "`sync.rs`"),
            ("`commands/mod.rs`, `commands/acquire.rs`", "`commands/mod.rs`, `commands/*.rs`"),
            ("`hold/mod.rs`", "`mod.rs`"),
        ],
        files={"src/redis/kept_reply.rs": "//! A kept reply.\n"},
    )
    want = [
        "omits file core/src/hold/mod.rs",
        "omits file core/src/sync.rs",
        "omits file src/commands/acquire.rs",
        "omits file src/redis/kept_reply.rs",
        "omits file src/sync.rs",
    ]
    assert got == want, got

    # Commands: in backticks, a whole name (`lock.acquired` is not
    # LOCK.ACQUIRE), a subcommand with its container; a row commented out
    # is not a command.
    got = map_check(
        changes=[
            ("`LOCK.ACQUIRE k 1000`", "`lock.acquired` LOCK.ACQUIRE"),
            ("`sem.info`", "`sem.information`"),
            ("`LOCK.LEASE GRANT ttl`", "`LOCK.LEASE` GRANT"),
        ]
    )
    want = ["omits command LOCK.ACQUIRE", "omits command LOCK.LEASE GRANT", "omits command SEM.INFO"]
    assert got == want, got
    # No table found is a failure, not a pass.
    assert map_check(table=None) == ["no command table (in src/lib.rs or src/commands/mod.rs)"]

    # Decisions: every top-level `pub fn` of decide.rs (not a method, not a
    # test's), and of each core file the decision table names (`group::`,
    # `args::`, `Waiting::` names sync.rs); a glob covers what it matches.
    got = map_check(
        changes=[
            ("`decide::acquire`, `decide::serve`", "`decide::acquire`"),
            ("`args::parse_*`", "`args::parse_a`"),
            ("a lease's end is `group::due`", "a lease's end"),
            ("`Waiting::look`, `sync::waited`", "`Waiting::look`"),
        ],
        files={"core/src/group.rs": "pub fn horizon() {}\npub fn due() {}\npub fn is_live() {}\n"},
    )
    want = [
        "omits decision args::parse_b",
        "omits decision decide::serve",
        "omits decision group::due",
        "omits decision group::is_live",
        "omits decision sync::waited",
    ]
    assert got == want, got
    # A file the table does not name holds no decisions the map must list;
    # a page with no decision table fails.
    got = map_check(changes=[("| lease | `group::horizon` | |\n", ""), ("`group::due`", "the end")])
    assert got == [], got
    got = map_check(changes=[("Function (core)", "Function")])
    assert got == ["no decision table (a table with a `Function (core)` column)"], got
    print("check-docs self-test: ok")


def main(argv):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    docs = argv[1:] or [os.path.join(repo, "docs/architecture.md")]
    failed = False
    for doc in docs:
        missing = check(repo, doc)
        for m in missing:
            print(f"{os.path.relpath(doc, repo)}: {m}")
        if missing:
            print(f"{os.path.relpath(doc, repo)}: {len(missing)} problem(s)")
        failed |= bool(missing)
    if not failed:
        names = [os.path.relpath(d, repo) for d in docs]
        covers = f"; {MAP} names every file, command and decision function" if MAP in names else ""
        print(f"check-docs: every file and function {', '.join(names)} names exists{covers}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
