#!/usr/bin/env python3
"""Fail when the top-level modules of a crate import each other in a cycle.

The layers the code aims for (commands -> core -> Redis layer) only go down,
so the graph of "module A names something in module B" must have no cycle.
For every crate in the repository (`src/` next to each Cargo.toml: the root
crate, bench, chaos, clients/rust, core, testsupport...), this reads every
`crate::...`, `$crate::...`, `super::...` and `self::...` path (in `use`,
`pub use` and in code), after removing comments and string literals, and
turns it into an edge between top-level modules:

- `src/foo.rs`, `src/foo/mod.rs` and everything under `src/foo/` are `foo`;
- `super::` is the parent of the module the path is written in (an inline
  `mod tests { ... }` counts), so `super::` in `src/commands/x.rs` is
  `commands` itself: no edge;
- lib.rs/main.rs are the root and are left out (they name everything); a path
  to a root item that the root imported (`use waiting::Waiter;` in lib.rs,
  then `crate::Waiter` elsewhere) counts as an edge to `waiting`;
- `src/bin/` holds other crates (one per binary): a `src/bin/<name>/` with a
  main.rs is checked as a crate of its own.

Intra-doc links such as [`crate::rules`] are comments and do not count.

Usage:
  scripts/check-layers.py [REPO]          exit 1, printing the cycles, if any
  scripts/check-layers.py --print [REPO]  also print each crate's graph
  scripts/check-layers.py --self-test     check this script on small trees
                                          (with and without a cycle)
"""

import io
import os
import re
import sys
import tempfile
from collections import defaultdict

SKIP_DIRS = {"target", ".git", "node_modules"}
IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"
RAW_STRING = re.compile(r'b?r(#*)"')
CHAR_LITERAL = re.compile(r"'(?:\\(?:u\{[0-9A-Fa-f]*\}|x[0-9A-Fa-f]{2}|.)|[^\\'\n])'")


# ---------------------------------------------------------------- source text


def strip_comments_and_strings(text):
    """The text with comments, string and char literals blanked out.

    Newlines are kept, so line numbers stay right; lifetimes ('a) are kept.
    """
    out = []
    i, n = 0, len(text)

    def blank(segment):
        return "".join(c if c == "\n" else " " for c in segment)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
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
            out.append(blank(text[i:j]))
            i = j
        elif c in "br" and RAW_STRING.match(text, i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = RAW_STRING.match(text, i)
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            m = CHAR_LITERAL.match(text, i)
            if m:
                out.append(blank(m.group(0)))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top_level(group):
    """The comma-separated items of a use group's inside, braces respected."""
    items, depth, start = [], 0, 0
    for k, c in enumerate(group):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(group[start:k])
            start = k + 1
    items.append(group[start:])
    return [item.strip() for item in items if item.strip()]


def matching_brace(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def first_ident(item):
    m = re.match(r"\s*(" + IDENT + r")", item)
    return m.group(1) if m else None


def unraw(name):
    return name[2:] if name.startswith("r#") else name


# ---------------------------------------------------------------- one crate


class Crate:
    def __init__(self, label, src_dir, module_files):
        self.label = label
        self.src_dir = src_dir
        # relative path -> (top-level module, module path as a list)
        self.module_files = module_files
        self.modules = sorted({top for top, _ in module_files.values()})
        self.root_aliases = {}  # a name the root imported -> its module
        # (from, to) -> [(file, line)]
        self.edges = defaultdict(list)


def module_path_of(rel):
    """`foo/bar.rs` -> ['foo', 'bar']; `foo/mod.rs` -> ['foo']."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts.pop()
    return [unraw(p) for p in parts]


def find_crates(repo):
    """Every crate under `repo`: a src/ beside a Cargo.toml (up to three
    levels down, as clients/rust/cli)."""
    crates = []
    candidates = [repo]
    level = [repo]
    for _ in range(3):
        below = []
        for parent in level:
            for entry in sorted(os.listdir(parent)):
                sub = os.path.join(parent, entry)
                if entry in SKIP_DIRS or entry.startswith(".") or not os.path.isdir(sub):
                    continue
                below.append(sub)
        candidates.extend(below)
        level = below
    for base in candidates:
        src = os.path.join(base, "src")
        if os.path.isfile(os.path.join(base, "Cargo.toml")) and os.path.isdir(src):
            crates.append(collect_crate(os.path.relpath(src, repo), src, exclude_bin=True))
            bin_dir = os.path.join(src, "bin")
            if os.path.isdir(bin_dir):
                for name in sorted(os.listdir(bin_dir)):
                    one = os.path.join(bin_dir, name)
                    if os.path.isfile(os.path.join(one, "main.rs")):
                        crates.append(collect_crate(os.path.relpath(one, repo), one, exclude_bin=False))
    return crates


def collect_crate(label, src_dir, exclude_bin):
    files = {}
    for dirpath, dirnames, filenames in os.walk(src_dir):
        dirnames[:] = sorted(d for d in dirnames if not (exclude_bin and dirpath == src_dir and d == "bin"))
        for f in sorted(filenames):
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src_dir)
            if rel in ("lib.rs", "main.rs"):
                continue
            path = module_path_of(rel)
            files[rel] = (path[0], path)
    return Crate(label, src_dir, files)


PATH_START = re.compile(r"(?<![\w$])(\$crate|crate|super|self)\s*::")
INLINE_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")
PATH_STEP = re.compile(r"\s*::\s*(" + IDENT + r"|\{|\*)")


def read_root_aliases(crate):
    """Names the root (lib.rs/main.rs) brought in with `use`: name -> module."""
    for root in ("lib.rs", "main.rs"):
        path = os.path.join(crate.src_dir, root)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = strip_comments_and_strings(f.read())
        for m in re.finditer(r"\buse\s+([^;]*);", text):
            tree = re.sub(r"^\s*(::)?\s*((crate|self)\s*::\s*)?", "", m.group(1))
            add_root_aliases(crate, tree, None)


def add_root_aliases(crate, tree, top):
    """Walk one use tree of the root, `top` being its module once known."""
    tree = tree.strip()
    if tree.startswith("{"):
        for item in split_top_level(tree[1:matching_brace(tree, 0)]):
            add_root_aliases(crate, item, top)
        return
    m = re.match(r"(" + IDENT + r")\s*(?:::\s*(.*?)|\s+as\s+(" + IDENT + r"))?\s*$", tree, re.S)
    if not m:
        return  # `*` and oddities: nothing named
    head, rest, alias = unraw(m.group(1)), m.group(2), m.group(3)
    if top is None:
        if head not in crate.modules:
            return  # an external crate or a root item
        top = head
    if rest is None:
        name = unraw(alias) if alias else head
        if name != "_" and name != "self":
            crate.root_aliases[name] = top
        return
    if rest.strip() == "self":
        crate.root_aliases[head] = top
        return
    add_root_aliases(crate, rest, top)


def targets_from_root(crate, text, at):
    """The modules named by the path going on at `at` from the crate root."""
    m = PATH_STEP.match(text, at)
    if not m:
        return []
    step = m.group(1)
    if step == "{":
        open_at = m.end() - 1
        found = []
        for item in split_top_level(text[open_at + 1:matching_brace(text, open_at)]):
            name = first_ident(item)
            if name:
                found.extend(root_name(crate, unraw(name)))
        return found
    if step == "*":
        return []
    return root_name(crate, unraw(step))


def root_name(crate, name):
    if name in crate.modules:
        return [name]
    if name in crate.root_aliases:
        return [crate.root_aliases[name]]
    return []  # self, or an item of lib.rs itself


def scan_file(crate, rel):
    top, file_module = crate.module_files[rel]
    with open(os.path.join(crate.src_dir, rel), encoding="utf-8") as f:
        text = strip_comments_and_strings(f.read())

    # Where each inline `mod name {` opens and closes, to know which module a
    # path is written in (for `super::` and `self::`).
    inline = []  # (start, end, name)
    for m in INLINE_MOD.finditer(text):
        open_at = m.end() - 1
        inline.append((open_at, matching_brace(text, open_at), unraw(m.group(1))))

    def module_at(pos):
        path = list(file_module)
        for start, end, name in inline:  # outer ones first
            if start < pos <= end:
                path.append(name)
        return path

    consumed = 0
    for m in PATH_START.finditer(text):
        if m.start() < consumed:
            continue
        word = m.group(1)
        if word in ("crate", "$crate"):
            base = []
        else:
            base = module_at(m.start())
            if word == "super":
                base = base[:-1]
        at = m.end() - 2  # at the `::`
        # Further `super::` steps climb on.
        while True:
            step = re.match(r"\s*::\s*super\b", text[at:])
            if not step or word == "crate" or word == "$crate":
                break
            if not base:
                break  # above the root: not valid Rust, ignore
            base = base[:-1]
            at += step.end()
        consumed = at
        if base:
            targets = [base[0]]
        else:
            targets = targets_from_root(crate, text, at)
        line = text.count("\n", 0, m.start()) + 1
        for target in targets:
            if target != top:
                crate.edges[(top, target)].append((os.path.join(crate.label, rel), line))


def build_graph(crate):
    read_root_aliases(crate)
    for rel in sorted(crate.module_files):
        scan_file(crate, rel)
    graph = {module: set() for module in crate.modules}
    for (source, target) in crate.edges:
        graph[source].add(target)
    return graph


# ---------------------------------------------------------------- cycles


def strongly_connected(graph):
    """Tarjan's algorithm: the components with more than one module."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(max(1000, 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(result)


def shortest_cycle_through(graph, start, within):
    """The shortest cycle start -> ... -> start inside one component."""
    previous, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in within:
                    continue
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def canonical(cycle):
    body = cycle[:-1]
    k = body.index(min(body))
    body = body[k:] + body[:k]
    return tuple(body + [body[0]])


def report_cycles(crate, graph, out):
    """Print the cycles of one crate; return how many components have one."""
    components = strongly_connected(graph)
    for component in components:
        members = set(component)
        cycles = sorted({canonical(c) for c in (shortest_cycle_through(graph, v, members) for v in component) if c})
        print(f"{crate.label}: import cycle among {', '.join(component)}", file=out)
        for cycle in cycles:
            print(f"  {' -> '.join(cycle)}", file=out)
            for source, target in zip(cycle, cycle[1:]):
                places = crate.edges[(source, target)]
                more = f" (+{len(places) - 1} more)" if len(places) > 1 else ""
                print(f"      {source} -> {target}: {places[0][0]}:{places[0][1]}{more}", file=out)
    return len(components)


def print_graph(crate, graph, out):
    print(f"{crate.label}: {len(graph)} top-level modules", file=out)
    width = max((len(m) for m in graph), default=0)
    for module in sorted(graph):
        targets = ", ".join(sorted(graph[module])) or "-"
        print(f"  {module.ljust(width)} -> {targets}", file=out)


def check(repo, show_graph=False, out=sys.stdout):
    """0 when no crate under `repo` has an import cycle, 1 otherwise."""
    crates = find_crates(repo)
    failing = 0
    for crate in crates:
        graph = build_graph(crate)
        if show_graph:
            print_graph(crate, graph, out)
        failing += report_cycles(crate, graph, out)
    if failing:
        print(f"check-layers: {failing} import cycle(s) between top-level modules; "
              "a lower layer must not import a higher one", file=out)
        return 1
    print(f"check-layers: no import cycle in {len(crates)} crate(s) "
          f"({', '.join(c.label for c in crates) or 'none found'})", file=out)
    return 0


# ---------------------------------------------------------------- self-test


SELF_TESTS = [
    # (name, {path: text}, expected exit code, text the output must contain
    #  [, text it must not contain])
    ("acyclic tree passes", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b; mod c;\nuse a::run;\n",
        "src/a.rs": "use crate::b::Thing;\nuse crate::{b, c::Other};\n",
        "src/b/mod.rs": "pub mod x;\nuse crate::c;\n",
        "src/b/x.rs": "use super::super::c::Deep;\nuse super::Sibling;\n",
        "src/c.rs": "pub struct Other;\nfn f() { let s = \"crate::a::x\"; } // crate::a\n",
    }, 0, "no import cycle"),
    ("two-module cycle fails", {
        "Cargo.toml": "",
        "src/lib.rs": "mod waiting; mod grant;\n",
        "src/waiting.rs": "use crate::grant::grant;\n",
        "src/grant.rs": "fn f() { crate::waiting::wake(); }\n",
    }, 1, "grant -> waiting -> grant"),
    ("a cycle through a nested file and super::super:: fails", {
        "Cargo.toml": "",
        "src/lib.rs": "mod p; mod r;\n",
        "src/p/mod.rs": "mod q;\n",
        "src/p/q.rs": "use super::super::r::X;\n",
        "src/r.rs": "use crate::{\n    p::{\n        Y,\n    },\n};\n",
    }, 1, "p -> r -> p"),
    ("super:: inside commands/ is commands itself", {
        "Cargo.toml": "",
        "src/lib.rs": "mod commands; mod util;\n",
        "src/commands/mod.rs": "mod x;\npub fn helper() {}\n",
        "src/commands/x.rs": "fn f() { super::helper(); }\nuse super::{helper};\nuse self::inner::Z;\n",
        "src/util.rs": "use crate::commands::helper;\n",
    }, 0, "no import cycle"),
    ("a root re-export counts as its module", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\npub use b::{Thing as Renamed, other::{self}};\n",
        "src/a.rs": "fn f() -> crate::Renamed { todo!() }\n",
        "src/b.rs": "pub mod other;\nuse crate::a;\n",
        "src/b/other.rs": "",
    }, 1, "a -> b -> a"),
    ("pub use crate:: re-export in a module is an edge", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\n",
        "src/a.rs": "pub use crate::b::Thing;\n",
        "src/b.rs": "pub(crate) fn f() { let _ = crate::a::Thing; }\n",
    }, 1, "a -> b -> a"),
    ("comments, doc links and strings do not count", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\n",
        "src/a.rs": "//! See [`crate::b`].\n/* use crate::b; /* nested crate::b */ */\n"
                    "const S: &str = \"crate::b::X\";\nconst R: &str = r#\"crate::b\"#;\n"
                    "const C: char = '\"'; fn f<'a>(x: &'a str) {}\n",
        "src/b.rs": "use crate::a;\n",
    }, 0, "no import cycle"),
    ("super:: in an inline test module of a top file", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\n",
        "src/a.rs": "#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::b::helper;\n}\n",
        "src/b.rs": "use crate::a::Thing;\n",
    }, 1, "a -> b -> a"),
    ("every workspace member is checked on its own", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\n",
        "src/a.rs": "use crate::b;\n",
        "src/b.rs": "",
        "core/Cargo.toml": "",
        "core/src/lib.rs": "mod b; mod a;\n",
        "core/src/a.rs": "",
        "core/src/b.rs": "use crate::a;\nuse crate::a::X;\n",
        "client/Cargo.toml": "",
        "client/src/lib.rs": "mod lease; mod conn;\n",
        "client/src/lease.rs": "use crate::conn::Conn;\n",
        "client/src/conn.rs": "use crate::lease::Lease;\n",
    }, 1, "client/src: import cycle among conn, lease", "among a, b"),
    ("binaries in src/bin are other crates", {
        "Cargo.toml": "",
        "src/lib.rs": "mod a; mod b;\n",
        "src/a.rs": "use crate::b;\n",
        "src/b.rs": "",
        "src/bin/tool.rs": "mod b; use crate::a;\n",
        "src/bin/big/main.rs": "mod x; mod y;\n",
        "src/bin/big/x.rs": "use crate::y;\n",
        "src/bin/big/y.rs": "use crate::x;\n",
    }, 1, "src/bin/big: import cycle among x, y", "src: import cycle among a, b"),
]


def self_test():
    failures = 0
    for name, files, want_code, want_text, *rest in SELF_TESTS:
        unwanted = rest[0] if rest else None
        with tempfile.TemporaryDirectory(prefix="check-layers-") as repo:
            for path, text in files.items():
                full = os.path.join(repo, path)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "w", encoding="utf-8") as f:
                    f.write(text)

            capture = io.StringIO()
            code = check(repo, show_graph=True, out=capture)
            output = capture.getvalue()
            if code != want_code or want_text not in output or (unwanted and unwanted in output):
                failures += 1
                print(f"FAIL {name}: exit {code} (want {want_code}); output should "
                      f"contain {want_text!r}" + (f" and not {unwanted!r}" if unwanted else "")
                      + f":\n{output}")
    if failures:
        print(f"check-layers self-test: {failures} of {len(SELF_TESTS)} failed")
        return 1
    print(f"check-layers self-test: {len(SELF_TESTS)} cases passed")
    return 0


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = {a for a in argv if a.startswith("--")}
    unknown = flags - {"--print", "--self-test", "--help"}
    if unknown or len(args) > 1 or "--help" in flags:
        print(__doc__.strip())
        return 0 if "--help" in flags and not unknown else 2
    if "--self-test" in flags:
        return self_test()
    repo = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    return check(os.path.abspath(repo), show_graph="--print" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
