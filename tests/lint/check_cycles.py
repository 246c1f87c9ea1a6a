#!/usr/bin/env python3
"""No symbol cycles between the modules of libckptstore, of the ckptfs
daemon (fs/) or of ckptctl (tools/), and no call from a store layer to a
layer above it (README.md, "Tour of the code").

Reads the object files the build made for store/, fs/ and tools/ (nm); a
module is one object file. Within each of the three folders it draws an
edge from module A to module B when A uses a symbol that B defines, and
fails on

  * any cycle of two or more modules (a strongly connected component), and
  * in store/, any edge from a lower layer to a higher one (ST_LAYERS order).

Usage: check_cycles.py REPO_DIR BUILD_DIR
       check_cycles.py --self-test   (plants a cycle and an upward call in
                                      store/, a cycle in tools/ and a clean
                                      pair in fs/, each in tiny compiled
                                      modules; exactly the first three must
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


# The programs' folders: every object file of every target built there is a
# module; cycles only, their files have no layer order.
PROGRAM_FOLDERS = ("fs", "tools")


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


def program_objects(build, folder):
    """{module: object path} of every target built in folder, module =
    "folder/file.c" (a file in two targets counts once)."""
    found = {}
    top = os.path.join(build, folder, "CMakeFiles")
    targets = sorted(os.listdir(top)) if os.path.isdir(top) else []
    for target in (t for t in targets if t.endswith(".dir")):
        for where, dirs, files in os.walk(os.path.join(top, target)):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".c.o")):
                path = os.path.join(where, name)
                rel = os.path.relpath(path, os.path.join(top, target))
                found.setdefault(f"{folder}/{rel[:-2]}", path)
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


def link(mods):
    """(graph, uses, owner): graph[A] = the modules whose symbols A uses."""
    owner, uses = {}, {}
    for mod, path in mods.items():
        defined, used = symbols(path)
        uses[mod] = used
        for s in defined:
            owner[s] = mod
    graph = {m: set() for m in mods}
    for mod, used in uses.items():
        for s in used:
            dep = owner.get(s)
            if dep and dep != mod:
                graph[mod].add(dep)
    return graph, uses, owner


def cycles(graph, uses, owner):
    """One problem per cycle, with the symbols behind each of its edges."""
    problems = []
    for comp in strongly_connected(graph):
        edges = []
        for a in comp:
            for b in sorted(graph[a] & set(comp)):
                why = sorted(s for s in uses[a] if owner.get(s) == b)
                edges.append(f"    {a} -> {b}: {', '.join(why[:4])}")
        problems.append("cycle: " + " <-> ".join(comp) + "\n" + "\n".join(edges))
    return problems


def compile_into(tmp, obj, body):
    """Compiles body (C source) into the object file obj."""
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    src = os.path.join(tmp, os.path.basename(obj)[:-2])
    open(src, "w").write(body + "\n")
    subprocess.run(["cc", "-c", src, "-o", obj], check=True)


def self_test():
    """util/low.c calls format/high.c and back: one cycle, one upward call.
    tools/main.c and tools/verb.c call each other: one cycle. fs/glue.c
    calls fs/log.c, which calls nothing back: no problem."""
    with tempfile.TemporaryDirectory() as tmp:
        repo, build = os.path.join(tmp, "repo"), os.path.join(tmp, "build")
        os.makedirs(os.path.join(repo, "store"))
        open(os.path.join(repo, "store", "CMakeLists.txt"), "w").write(
            "set(ST_LAYERS util format)\n")
        for layer, name, body in (("util", "low", "int high(void); int low(void) { return high(); }"),
                                  ("format", "high", "int low(void); int high(void) { return low(); }")):
            d = os.path.join(build, "store", "CMakeFiles", f"ckptstore_{layer}.dir", layer)
            compile_into(tmp, os.path.join(d, name + ".c.o"), body)
        for folder, target, name, body in (
                ("tools", "prog", "main", "int verb(void); int helper(void) { return 1; } "
                                          "int main(void) { return verb(); }"),
                ("tools", "prog", "verb", "int helper(void); int verb(void) { return helper(); }"),
                ("fs", "daemon", "glue", "int log_line(void); int main(void) { return log_line(); }"),
                ("fs", "daemon_support", "log", "int log_line(void) { return 0; }")):
            d = os.path.join(build, folder, "CMakeFiles", f"{target}.dir")
            compile_into(tmp, os.path.join(d, name + ".c.o"), body)
        out = subprocess.run([sys.executable, __file__, repo, build], capture_output=True, text=True)
        print(out.stdout, end="")
        ok = (out.returncode == 1 and "util/low.c calls up into format/high.c" in out.stdout
              and "cycle: format/high.c <-> util/low.c" in out.stdout
              and "cycle: tools/main.c <-> tools/verb.c" in out.stdout
              and "fs/glue.c" not in out.stdout and out.stdout.count("cycle:") == 2)
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
    graph, uses, owner = link(mods)
    problems = []
    for mod, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if rank[dep.split("/")[0]] > rank[mod.split("/")[0]]:
                why = sorted(s for s in uses[mod] if owner.get(s) == dep)
                problems.append(f"{mod} calls up into {dep}: {', '.join(why[:5])}")
    problems += cycles(graph, uses, owner)
    counts, edges = [f"store/ {len(mods)}"], sum(map(len, graph.values()))
    for folder in PROGRAM_FOLDERS:
        pmods = program_objects(build, folder)
        if len(pmods) < 2:
            print(f"check_cycles: found {len(pmods)} object files of {folder}/ under {build}: "
                  "build first")
            return 1
        pgraph, puses, powner = link(pmods)
        problems += cycles(pgraph, puses, powner)
        counts.append(f"{folder}/ {len(pmods)}")
        edges += sum(map(len, pgraph.values()))
    for p in problems:
        print(p)
    print(f"check_cycles: modules: {', '.join(counts)}; {edges} edges, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
