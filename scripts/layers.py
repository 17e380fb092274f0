#!/usr/bin/env python3
"""The layer and cycle check of retryd's source (run by .ci/run).

Reads every `crate::`, `super::`, `self::` and `use` path of every file under
src/ (the library, main.rs and the load tool), resolves each to the file that
defines it, and fails when

  * a file imports a file of a higher layer (LAYERS below, lowest first;
    modules on one line share a layer and must not import each other unless
    they are the same module), or
  * files import each other in a cycle, or
  * sibling folders/files of one folder import each other in a cycle.

A folder's `mod.rs` (or `foo.rs` beside `foo/`) declaring and re-exporting
its own children is not an import of them: edges from a module file into its
own descendants are left out of the cycle checks. Test code (a `tests.rs` or
`*_tests.rs` file, or an inline `mod tests`) is held to the layers but not
to the cycle checks: a module's tests may build their inputs with the
neighbours that use it.

    python3 scripts/layers.py              # check; exit 1 on a violation
    python3 scripts/layers.py --graph      # also print every file edge
    python3 scripts/layers.py --self-test  # plant violations in a copy; each must be caught

The layer table of docs/architecture.md is checked against LAYERS too.
"""

import re
import sys
from pathlib import Path

# Lowest first. Each entry is a set of module prefixes (paths under the crate
# root) that share the layer. A file belongs to the longest prefix it starts
# with. Modules of one layer may not import each other, except within the same
# prefix (so `grpc` and `http` stay parallel).
LAYERS = [
    ("core", ["core"]),
    ("policy loading", ["load"]),
    ("fleet", ["fleet"]),
    ("service", ["service"]),
    ("shared by the doors", ["doors"]),
    ("the doors", ["grpc", "http"]),
    ("server", ["server"]),
    ("offline policy tools", ["safety"]),
    ("cli", ["cli"]),
    ("main", ["main", "bin"]),
]

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"


def module_of(path: Path):
    """The module path (tuple) a file defines."""
    rel = path.relative_to(SRC)
    parts = list(rel.parts)
    if parts == ["lib.rs"]:
        return ()
    if parts == ["main.rs"]:
        return ("main",)
    if parts[0] == "bin":
        # src/bin/retryd-load/main.rs and its modules: their own crate.
        stem = [p for p in parts[2:]]
        stem[-1] = stem[-1][:-3]
        if stem[-1] in ("main", "mod"):
            stem = stem[:-1]
        return ("bin", parts[1], *stem)
    stem = parts[:-1] + [parts[-1][:-3]]
    if stem[-1] == "mod":
        stem = stem[:-1]
    return tuple(stem)


def strip(text: str) -> str:
    """Comments, string and char literals blanked (braces inside them would
    confuse the inline-module tracking)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
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
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{1b}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree: str):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    depth, start, items = 0, 0, []
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"as\w+$", "", tree)] if tree else []
    prefix, body = tree[:brace], tree[brace + 1:tree.rfind("}")]
    for i, c in enumerate(body):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    out = []
    for it in items:
        if not it:
            continue
        for sub in expand_use(it):
            out.append(prefix + sub if sub != "self" else prefix.rstrip(":"))
    return out


PATH_RE = re.compile(r"(?<![\w:])((?:crate|super|self|retryd)(?:::(?:super|\w+))+)")
USE_RE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
MOD_OPEN_RE = re.compile(r"\bmod\s+(\w+)\s*\{")


def references(path: Path, modules: set):
    """(module path of the referring code, referenced path tuple) pairs."""
    text = strip(path.read_text())
    base = module_of(path)
    is_bin = base[:1] in (("main",), ("bin",))
    # inline modules: (brace depth at which it closes, name)
    events = []  # (offset, kind, value)
    for m in MOD_OPEN_RE.finditer(text):
        events.append((m.end() - 1, "mod", m.group(1)))
    refs = []

    def current(offset):
        stack, depth, pending = [], 0, {}
        for off, kind, name in events:
            pending[off] = name
        i = 0
        # walk braces up to offset
        for i, c in enumerate(text[:offset]):
            if c == "{":
                depth += 1
                if i in pending:
                    stack.append((depth, pending[i]))
            elif c == "}":
                if stack and stack[-1][0] == depth:
                    stack.pop()
                depth -= 1
        return base + tuple(name for _, name in stack)

    # Precompute the module at each offset lazily by scanning once.
    spans = []  # (start, end, module)
    stack, depth = [], 0
    opens = {off: name for off, _, name in events}
    last, cur = 0, base
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
            if i in opens:
                spans.append((last, i, cur))
                stack.append((depth, opens[i]))
                last, cur = i, base + tuple(n for _, n in stack)
        elif c == "}":
            if stack and stack[-1][0] == depth:
                spans.append((last, i, cur))
                stack.pop()
                last, cur = i, base + tuple(n for _, n in stack)
            depth -= 1
    spans.append((last, len(text), cur))

    def module_at(offset):
        for s, e, m in spans:
            if s <= offset <= e:
                return m
        return base

    def resolve(here, path_str):
        parts = path_str.split("::")
        if parts[0] == "crate" or (parts[0] == "retryd" and is_bin):
            cur, rest = (), parts[1:]
            if parts[0] == "crate" and base[:1] == ("bin",):
                cur = base[:2]
        elif parts[0] in ("self", "super"):
            cur, rest = here, parts
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
        else:
            # a bare first segment: a child module of `here`, else external
            if here + (parts[0],) in modules:
                cur, rest = here, parts
            else:
                return None
        full = cur + tuple(rest)
        # longest prefix that is a module file
        for k in range(len(full), -1, -1):
            if full[:k] in modules:
                return full[:k]
        return None

    for m in USE_RE.finditer(text):
        here = module_at(m.start())
        for p in expand_use(m.group(1)):
            if p.endswith("::*"):
                p = p[:-3]
            r = resolve(here, p)
            if r is not None:
                refs.append((here, r))
    used_spans = [(m.start(), m.end()) for m in USE_RE.finditer(text)]
    for m in PATH_RE.finditer(text):
        if any(s <= m.start() < e for s, e in used_spans):
            continue
        here = module_at(m.start())
        r = resolve(here, m.group(1))
        if r is not None:
            refs.append((here, r))
    return refs


def layer_of(mod):
    best = None
    for idx, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            pt = tuple(p.split("/"))
            if mod[:len(pt)] == pt and (best is None or len(pt) > len(best[1])):
                best = (idx, pt)
    return best


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    files = sorted(p for p in SRC.rglob("*.rs"))
    mod_file = {module_of(p): p for p in files}
    modules = set(mod_file)
    edges = {}
    prod_edges = {}
    problems = []
    is_test = lambda m: any(seg == "tests" or seg.endswith("_tests") for seg in m)
    for p in files:
        src_mod = module_of(p)
        for here, target in references(p, modules):
            if target == src_mod or target == ():
                continue
            edges.setdefault(src_mod, set()).add(target)
            if not is_test(here):
                prod_edges.setdefault(src_mod, set()).add(target)
    show = "--graph" in sys.argv
    name = lambda m: str(mod_file[m].relative_to(ROOT))
    # 1. layers
    for a, targets in sorted(edges.items()):
        la = layer_of(a)
        for b in sorted(targets):
            lb = layer_of(b)
            if show:
                print(f"{name(a)} -> {name(b)}")
            if la is None or lb is None:
                continue
            if lb[0] > la[0]:
                problems.append(f"upward import: {name(a)} ({LAYERS[la[0]][0]}) uses {name(b)} ({LAYERS[lb[0]][0]})")
            elif lb[0] == la[0] and lb[1] != la[1]:
                problems.append(f"sideways import: {name(a)} ({'/'.join(la[1])}) uses {name(b)} ({'/'.join(lb[1])}), parallel modules of one layer")
    for m in modules:
        if m and layer_of(m) is None:
            problems.append(f"no layer: {name(m)} (add its module to LAYERS in scripts/layers.py)")
    # 2. file cycles, without a module's edges into its own descendants
    def is_descendant(child, parent):
        return len(child) > len(parent) and child[:len(parent)] == parent
    fedges = {a: {b for b in t if not is_descendant(b, a)} for a, t in prod_edges.items()}
    for comp in sccs(modules, fedges):
        problems.append("file cycle: " + " <-> ".join(name(m) for m in comp))
    # 3. sibling cycles within each folder (folders and files as entries)
    sib = {}
    for a, targets in fedges.items():
        for b in targets:
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k >= len(a) or k >= len(b):
                continue  # one contains the other
            parent = a[:k]
            sib.setdefault(parent, {}).setdefault(a[k], set()).add(b[k])
    for parent, g in sorted(sib.items()):
        nodes = set(g) | {x for t in g.values() for x in t}
        for comp in sccs(nodes, g):
            where = "/".join(("src",) + parent)
            problems.append(f"folder cycle in {where}/: " + " <-> ".join(comp))
    problems += doc_problems()
    for p in problems:
        print(p)
    n_edges = sum(len(t) for t in edges.values())
    if problems:
        print(f"layers: {len(problems)} problem(s) in {len(files)} files, {n_edges} imports")
        sys.exit(1)
    print(f"layers: OK ({len(files)} files, {n_edges} imports, {len(LAYERS)} layers, no cycle)")


def doc_problems():
    """Every layer of LAYERS is a row of the doc's table, in order, naming its folders."""
    if not DOC.exists():
        return []
    rows = [l for l in DOC.read_text().splitlines() if re.match(r"\| \d+ \|", l)]
    out = []
    if len(rows) != len(LAYERS):
        return [f"{DOC.name}: {len(rows)} layer rows, scripts/layers.py has {len(LAYERS)}"]
    for row, (name, prefixes) in zip(rows, LAYERS):
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[1] != name:
            out.append(f"{DOC.name}: layer {cells[0]} is {cells[1]!r}, scripts/layers.py says {name!r}")
        for p in prefixes:
            if f"src/{p}" not in cells[2]:
                out.append(f"{DOC.name}: layer {name!r} does not name src/{p}")
    return out


def self_test():
    """Copies src/ to a scratch folder, plants each kind of violation in
    turn, and checks the checker reports it (and passes the clean copy)."""
    import shutil
    import subprocess
    import tempfile

    plants = [
        ("src/core/time.rs", "use crate::service::Service;\n", "upward import: src/core/time.rs"),
        ("src/http/routes.rs", "use crate::grpc::pb;\n", "sideways import: src/http/routes.rs"),
        ("src/fleet/caller.rs", "use crate::fleet::memory::MemoryStore;\n", None),
        ("src/fleet/memory.rs", "use crate::fleet::caller::PlacementLimiter;\n", "file cycle"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(SRC, root / "src")
        shutil.copytree(ROOT / "scripts", root / "scripts")
        shutil.copytree(ROOT / "docs", root / "docs")
        run = lambda: subprocess.run([sys.executable, str(root / "scripts" / "layers.py")], capture_output=True, text=True)
        clean = run()
        assert clean.returncode == 0, clean.stdout
        for path, line, expect in plants:
            f = root / path
            f.write_text(line + f.read_text())
            if expect is None:
                continue
            r = run()
            assert r.returncode == 1 and expect in r.stdout, f"{path}: expected {expect!r}, got:\n{r.stdout}"
            print(f"self-test: caught {expect} ({path})")
    print("layers self-test: OK")


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        self_test()
    else:
        main()
