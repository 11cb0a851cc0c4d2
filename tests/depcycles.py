#!/usr/bin/env python3
"""depcycles.py: dependency cycles between the object files of dtrain's
libraries (tests/layering.sh runs it).

Object A depends on object B when A uses a global symbol that B defines
(nm -g). A cycle (a strongly connected component of more than one object)
means neither file can be read, tested or replaced without the other: a
registry that lists its members while the members call back into it, or
two files that each hold what the other needs. The fix is to move what
both need into a file of its own.

Usage: depcycles.py BUILDDIR [SRCDIR]
                         every libtool object (.lo) under BUILDDIR/src; with
                         SRCDIR, only those whose source (.c, .cu) is still
                         in SRCDIR/src, so the objects a build directory
                         keeps of moved or deleted files do not count
       depcycles.py OBJ.o...   these objects (a program's own, say)
       depcycles.py --includes SRCDIR
                         the include graph of SRCDIR/src instead: file A
                         depends on file B when A has #include "B" (found
                         beside A or under src/, as the build's -I does)
Prints each cycle and the mutual edges in it, with the symbols behind them;
exits 1 when there is any cycle, 2 when there is nothing to check.

The design decision: objects are named by their path under src/ (nn/model,
api/model), not their file name, since two directories may hold files of
the same name; and .lo files are read for the object libtool built (PIC
where there is one), so the check works with static or shared builds.
"""
import os
import re
import subprocess
import sys


def objects_of(builddir, srcdir=None):
    """(name, path) of the object behind each .lo under builddir/src."""
    out = []
    top = os.path.join(builddir, "src")
    for d, _, files in os.walk(top):
        for f in sorted(files):
            if not f.endswith(".lo"):
                continue
            rel = os.path.relpath(os.path.join(d, f[:-3]), top)
            if srcdir and not any(os.path.exists(os.path.join(srcdir, "src", rel + e)) for e in (".c", ".cu")):
                continue
            text = open(os.path.join(d, f)).read()
            obj = None
            for key in ("pic_object", "non_pic_object"):
                m = re.search(r"^%s='([^']*)'" % key, text, re.M)
                if m and m.group(1) != "none":
                    obj = os.path.join(d, m.group(1))
                    break
            if obj:
                out.append((rel, obj))
    return out


def symbols(path):
    """(defined, undefined) global symbols of one object."""
    res = subprocess.run(["nm", "-g", path], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("depcycles: nm %s failed: %s" % (path, res.stderr.strip()))
    defined, used = set(), set()
    for line in res.stdout.splitlines():
        p = line.split()
        if len(p) == 2 and p[0] == "U":
            used.add(p[1])
        elif len(p) == 3 and p[1] in "TDBRVWCGSi":
            defined.add(p[2])
    return defined, used


def components(graph):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, comps, n = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def include_graph(srcdir):
    """{file: files it includes}, paths relative to srcdir/src."""
    top = os.path.join(srcdir, "src")
    graph = {}
    for d, _, files in os.walk(top):
        for f in sorted(files):
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(d, f)
            deps = graph.setdefault(os.path.relpath(path, top), set())
            with open(path, errors="replace") as fh:
                text = fh.read()
            for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                for base in (d, top):
                    q = os.path.join(base, m.group(1))
                    if os.path.exists(q):
                        deps.add(os.path.relpath(q, top))
                        break
    for deps in list(graph.values()):
        for b in deps:
            graph.setdefault(b, set())
    return graph


def main_includes(srcdir):
    graph = include_graph(srcdir)
    comps = components(graph)
    for comp in comps:
        print("include cycle (%d): %s" % (len(comp), " ".join(comp)))
    print("%d include cycles among %d files" % (len(comps), len(graph)))
    return 1 if comps else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--includes":
        return main_includes(argv[2])
    if len(argv) in (2, 3) and all(os.path.isdir(a) for a in argv[1:]):
        objs = objects_of(argv[1], argv[2] if len(argv) == 3 else None)
    else:
        objs = [(os.path.splitext(os.path.basename(a))[0], a) for a in argv[1:]]
    if not objs:
        print("depcycles: no objects to check (build first)", file=sys.stderr)
        return 2
    defs, uses = {}, {}
    for name, path in objs:
        defs[name], uses[name] = symbols(path)
    owner = {}
    for name, _ in objs:
        for s in defs[name]:
            owner.setdefault(s, name)
    edges = {name: {} for name, _ in objs}  # edges[a][b] = symbols of b that a uses
    for name, _ in objs:
        for s in uses[name]:
            b = owner.get(s)
            if b and b != name:
                edges[name].setdefault(b, []).append(s)
    comps = components({a: set(e) for a, e in edges.items()})
    for comp in comps:
        print("cycle (%d): %s" % (len(comp), " ".join(comp)))
        for a in comp:
            for b in comp:
                if a < b and b in edges[a] and a in edges[b]:
                    print("    %s <-> %s   (%s / %s)" % (a, b, " ".join(sorted(edges[a][b])[:3]),
                                                      " ".join(sorted(edges[b][a])[:3])))
    print("%d dependency cycles among %d objects" % (len(comps), len(objs)))
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
