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

Usage:
  scripts/check-docs.py [FILE ...]   default docs/architecture.md; exit 1 on
                                     any name it cannot find, listing them
  scripts/check-docs.py --self-test  check this script on a small tree
"""

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
    if not candidates and owner[:1].isupper():
        candidates = [f for f, t in texts.items() if defines(t, owner)]
    return any(defines(texts[f], item) for f in candidates)


def check(repo, doc):
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
                    missing.append(f"file {word}")
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.rs", word):
                if not any(os.path.basename(f) == word for f in files):
                    missing.append(f"file {word}")
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+(\(\))?", word):
                if not check_name(repo, files, texts, word):
                    missing.append(f"name {word}")
    return sorted(set(missing))


def self_test():
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
        want = ["file gone.rs", "file src/gone.rs", "name LockKey::take", "name Serve::Renew", "name decide::renew"]
        assert got == want, got
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
            print(f"{os.path.relpath(doc, repo)}: no {m}")
        failed |= bool(missing)
    if not failed:
        print(f"check-docs: every file and function {', '.join(os.path.relpath(d, repo) for d in docs)} names exists")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
