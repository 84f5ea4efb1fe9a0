#!/usr/bin/env python3
"""The layers of src/ point one way (docs/how-it-works.md, "The layers").

    python3 tests/tools/layers.py [--build DIR] [--selftest]

Checks, on the source tree this file sits in:
  1. includes: a file of layer L (src/L/, include/outbox_relay/L/) includes
     headers of its own folder or of a lower layer only; a peer (pg and
     kafka; relay, ops and consume) is not lower. An internal header (one
     in src/L/) is included from its own folder only.
  2. headers follow their modules: src/L/x.c's public header, if any, is
     include/outbox_relay/L/x.h.
  3. with --build DIR (a configured and built tree): calls, read from the
     object files with nm. A file of layer L calls functions of its own
     folder or of lower layers only (this catches what a local prototype
     would hide from check 1), and no two files call each other, directly
     or round a circle: a circle means one module split in several files.
  4. the direction stated in docs/how-it-works.md is this file's LAYERS.
Prints every violation with file and line; exits 1 on any, 0 otherwise.
--selftest builds small trees with one violation each and checks that each
is found (a check that cannot fail proves nothing).
"""
import os
import re
import subprocess
import sys
import tempfile

# Lowest first. Folders on one line are peers: neither may use the other.
LAYERS = [
    ["base"],
    ["decode"],
    ["core"],
    ["pg", "kafka"],
    ["config"],
    ["relay", "ops", "consume"],
    ["cmd"],
]
LEVEL = {name: i for i, row in enumerate(LAYERS) for name in row}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The line docs/how-it-works.md states the direction in.
DOC_LINE = " ← ".join(" | ".join(row) for row in LAYERS)


def allowed(src_layer, dst_layer):
    return src_layer == dst_layer or LEVEL[dst_layer] < LEVEL[src_layer]


def layer_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "src" and len(rel) == 3:
        return rel[1]
    if rel[:2] == ["include", "outbox_relay"] and len(rel) == 4:
        return rel[2]
    return None


def sources(root):
    for top in ("src", os.path.join("include", "outbox_relay")):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.join(d, f)


def check_tree(root):
    errors = []
    for path in sources(root):
        rel = os.path.relpath(path, root)
        layer = layer_of(root, path)
        if layer not in LEVEL:
            errors.append(f"{rel}: not in a layer folder ({', '.join(LEVEL)})")
            continue
        text = open(path, encoding="utf-8").read()
        for m in INCLUDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            target = m.group(1)
            parts = target.split("/")
            if parts[0] == "outbox_relay":
                if len(parts) != 3 or parts[1] not in LEVEL:
                    errors.append(f"{rel}:{line}: includes {target}: not a layer's header")
                elif not allowed(layer, parts[1]):
                    errors.append(f"{rel}:{line}: {layer} includes {target}: "
                                  f"{parts[1]} is not below {layer}")
            else:
                here = os.path.normpath(os.path.join(os.path.dirname(path), target))
                if not os.path.exists(here):
                    errors.append(f"{rel}:{line}: includes {target}, which is not beside it")
                elif os.path.dirname(here) != os.path.dirname(path):
                    errors.append(f"{rel}:{line}: includes {target}: an internal header "
                                  "of another folder")
        if path.endswith(".c") and rel.startswith("src" + os.sep):
            name = os.path.basename(path)[:-2] + ".h"
            for other in LEVEL:
                hdr = os.path.join(root, "include", "outbox_relay", other, name)
                if other != layer and os.path.exists(hdr):
                    errors.append(f"{rel}: its header is include/outbox_relay/{other}/{name}, "
                                  f"not in {layer}")
    return errors


def nm(obj):
    out = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True,
                         check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines()
               if len(l.split()) == 3 and l.split()[1] in "TDBRVW"}
    out = subprocess.run(["nm", "--undefined-only", obj], capture_output=True, text=True,
                         check=True).stdout
    used = {l.split()[-1] for l in out.splitlines() if l.split()}
    return defined, used


def objects(build):
    """Object files of src/ in a CMake build tree: (src-relative path, .o)."""
    for d, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            p = os.path.join(d, f)
            i = p.find(os.sep + "src" + os.sep)
            if i >= 0 and "CMakeFiles" in p:
                yield p[i + 1:-2], p


def check_calls(build, root=None):
    errors = []
    owner, uses = {}, {}
    for src, obj in sorted(objects(build)):
        if root is not None and not os.path.exists(os.path.join(root, src)):
            continue  # a stale object of a file since renamed
        defined, used = nm(obj)
        uses[src] = used
        for sym in defined:
            owner[sym] = src
    edges = {}
    for src, used in uses.items():
        layer = src.split("/")[1]
        for sym in sorted(used):
            dst = owner.get(sym)
            if dst is None or dst == src:
                continue
            edges.setdefault(src, {}).setdefault(dst, sym)
            dlayer = dst.split("/")[1]
            if layer in LEVEL and dlayer in LEVEL and not allowed(layer, dlayer):
                errors.append(f"{src}: calls {sym} of {dst}: {dlayer} is not below {layer}")
    errors += [f"call circle: {c}" for c in circles(edges)]
    if not uses:
        errors.append(f"{build}: no object files of src/ (build the tree first)")
    return errors


def circles(edges):
    """Tarjan's strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
                comp.sort()
                calls = [f"{a} → {b} ({edges[a][b]})" for a in comp for b in comp
                         if b in edges.get(a, {})]
                out.append("; ".join(calls))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_doc(root):
    doc = os.path.join(root, "docs", "how-it-works.md")
    text = open(doc, encoding="utf-8").read()
    if DOC_LINE not in text:
        return [f"docs/how-it-works.md does not state the direction as tests/tools/layers.py "
                f"has it: {DOC_LINE}"]
    return []


def selftest():
    cases = {
        "upward include": {"src/base/a.c": '#include "outbox_relay/core/b.h"\n',
                           "include/outbox_relay/core/b.h": ""},
        "peer include": {"src/pg/a.c": '#include "outbox_relay/kafka/b.h"\n',
                         "include/outbox_relay/kafka/b.h": ""},
        "internal header of another folder": {"src/relay/a.c": '#include "../ops/x_internal.h"\n',
                                              "src/ops/x_internal.h": ""},
        "header away from its module": {"src/pg/a.c": "", "include/outbox_relay/core/a.h": ""},
        "file outside the layers": {"src/a.c": ""},
    }
    failed = 0
    for name, files in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for p, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(p)), exist_ok=True)
                open(os.path.join(root, p), "w").write(text)
            if not check_tree(root):
                print(f"selftest: {name} was not found")
                failed += 1
    with tempfile.TemporaryDirectory() as build:
        progs = {"src/relay/a.c": "int b(void); int a(void) { return b(); }\n",
                 "src/relay/b.c": "int a(void); int b(void) { return a(); }\n",
                 "src/base/c.c": "int a(void); int c(void) { return a(); }\n"}
        for p, text in progs.items():
            c = os.path.join(build, p)
            os.makedirs(os.path.dirname(c), exist_ok=True)
            open(c, "w").write(text)
            o = os.path.join(build, "CMakeFiles", "t.dir", p + ".o")
            os.makedirs(os.path.dirname(o), exist_ok=True)
            subprocess.run(["cc", "-c", c, "-o", o], check=True)
        errs = check_calls(build)
        if not any(e.startswith("call circle") for e in errs):
            print("selftest: a call circle was not found")
            failed += 1
        if not any("base/c.c: calls a" in e for e in errs):
            print("selftest: an upward call was not found")
            failed += 1
    print(f"selftest: {len(cases) + 2 - failed} of {len(cases) + 2} violations found")
    return failed == 0


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if "--selftest" in argv:
        return 0 if selftest() else 1
    errors = check_tree(root) + check_doc(root)
    if "--build" in argv:
        errors += check_calls(argv[argv.index("--build") + 1], root)
    for e in errors:
        print(e)
    n = sum(1 for _ in sources(root))
    print(f"layers: {n} files, {len(errors)} violation(s)" +
          ("" if "--build" in argv else " (includes only; --build DIR checks calls)"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
