#!/usr/bin/env python3
"""No symbol cycles between the modules of libckptstore, and no call from a
layer to a layer above it (README.md, "Tour of the code").

Reads the object files the build made for store/ (nm), draws an edge from
module A to module B when A uses a symbol that B defines, and fails on

  * any cycle of two or more modules (a strongly connected component), and
  * any edge from a lower layer to a higher one (ST_LAYERS order).

Usage: check_cycles.py REPO_DIR BUILD_DIR
       check_cycles.py --self-test   (plants a cycle and an upward call in
                                      two tiny compiled modules; both must
                                      be reported)
"""
import os
import re
import subprocess
import sys
import tempfile


def layers_of(repo):
    text = open(os.path.join(repo, "store", "CMakeLists.txt")).read()
    return re.search(r"set\(ST_LAYERS ([^)]*)\)", text).group(1).split()


def objects(build, layers):
    """{module: object path}, module = "layer/file.c"."""
    found = {}
    for layer in layers:
        top = os.path.join(build, "store", "CMakeFiles", f"ckptstore_{layer}.dir", layer)
        if not os.path.isdir(top):
            continue
        for name in sorted(os.listdir(top)):
            if name.endswith(".c.o"):
                found[f"{layer}/{name[:-2]}"] = os.path.join(top, name)
    return found


def symbols(path):
    out = subprocess.run(["nm", "-P", path], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        (used if f[1] == "U" else defined if f[1] in "TDBRC" else set()).add(f[0])
    return defined, used


def strongly_connected(graph):
    """Tarjan's algorithm; returns the components with more than one node."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return comps


def self_test():
    """util/low.c calls format/high.c and back: one cycle, one upward call."""
    with tempfile.TemporaryDirectory() as tmp:
        repo, build = os.path.join(tmp, "repo"), os.path.join(tmp, "build")
        os.makedirs(os.path.join(repo, "store"))
        open(os.path.join(repo, "store", "CMakeLists.txt"), "w").write(
            "set(ST_LAYERS util format)\n")
        for layer, name, body in (("util", "low", "int high(void); int low(void) { return high(); }"),
                                  ("format", "high", "int low(void); int high(void) { return low(); }")):
            d = os.path.join(build, "store", "CMakeFiles", f"ckptstore_{layer}.dir", layer)
            os.makedirs(d)
            src = os.path.join(tmp, name + ".c")
            open(src, "w").write(body + "\n")
            subprocess.run(["cc", "-c", src, "-o", os.path.join(d, name + ".c.o")], check=True)
        out = subprocess.run([sys.executable, __file__, repo, build], capture_output=True, text=True)
        print(out.stdout, end="")
        ok = (out.returncode == 1 and "util/low.c calls up into format/high.c" in out.stdout
              and "cycle: format/high.c <-> util/low.c" in out.stdout)
        print(f"self-test: {'passed' if ok else 'FAILED'}")
        return 0 if ok else 1


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    repo, build = argv[1], argv[2]
    layers = layers_of(repo)
    rank = {name: i for i, name in enumerate(layers)}
    mods = objects(build, layers)
    if len(mods) < len(layers):
        print(f"check_cycles: found {len(mods)} object files under {build}: build first")
        return 1
    owner, uses = {}, {}
    for mod, path in mods.items():
        defined, used = symbols(path)
        uses[mod] = used
        for s in defined:
            owner[s] = mod
    graph = {m: set() for m in mods}
    problems = []
    for mod, used in uses.items():
        for s in used:
            dep = owner.get(s)
            if dep and dep != mod:
                graph[mod].add(dep)
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if rank[dep.split("/")[0]] > rank[mod.split("/")[0]]:
                why = sorted(s for s in uses[mod] if owner.get(s) == dep)
                problems.append(f"{mod} calls up into {dep}: {', '.join(why[:5])}")
    for comp in strongly_connected(graph):
        edges = []
        for a in comp:
            for b in sorted(graph[a] & set(comp)):
                why = sorted(s for s in uses[a] if owner.get(s) == b)
                edges.append(f"    {a} -> {b}: {', '.join(why[:4])}")
        problems.append("cycle: " + " <-> ".join(comp) + "\n" + "\n".join(edges))
    for p in problems:
        print(p)
    print(f"check_cycles: {len(mods)} modules, {sum(map(len, graph.values()))} edges, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
