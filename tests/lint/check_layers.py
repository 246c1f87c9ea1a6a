#!/usr/bin/env python3
"""The layer rules of store/ (README.md, "Tour of the code"), checked on the
includes of every tracked C file.

  * store/<layer>/ may include its own layer, the layers below it
    (path-qualified: "format/st_pack.h") and the public headers of
    store/include/ (unqualified: "ckptstore.h"). The order of the layers is
    ST_LAYERS in store/CMakeLists.txt, bottom first.
  * store/include/ may include only store/include/.
  * fs/, client/ and tools/ may include store/include/, their own folder's
    headers and the installed API (client/include/); tools/ also client/'s
    internal headers (ckptctl links client's mount-control module); never a
    store internal.
  * Every quoted include names a file that exists.

Usage:
  check_layers.py REPO_DIR        check the tree; exit 1 on any violation
  check_layers.py --self-test REPO_DIR
                                  copy the tree, plant violations one at a
                                  time, and check that each one is caught
                                  (and that the clean copy passes)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EDGE_DIRS = ("fs", "client", "tools")


def layers_of(repo):
    text = open(os.path.join(repo, "store", "CMakeLists.txt")).read()
    m = re.search(r"set\(ST_LAYERS ([^)]*)\)", text)
    if not m:
        sys.exit("check_layers: ST_LAYERS not found in store/CMakeLists.txt")
    return m.group(1).split()


def tracked_sources(repo):
    try:
        # *.def: X-macro tables (fs/fs_options.def), included like headers.
        out = subprocess.run(["git", "-C", repo, "ls-files", "*.c", "*.h", "*.def"], check=True,
                             capture_output=True, text=True).stdout.split()
        if out:
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for top, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        found += [os.path.relpath(os.path.join(top, f), repo) for f in files
                  if f.endswith((".c", ".h", ".def"))]
    return found


def check(repo):
    layers = layers_of(repo)
    rank = {name: i for i, name in enumerate(layers)}
    store = os.path.join(repo, "store")
    public = set(os.listdir(os.path.join(store, "include")))
    problems = []
    checked = 0
    for path in tracked_sources(repo):
        parts = path.split("/")
        if parts[0] not in ("store",) + EDGE_DIRS:
            continue  # tests, fuzzers and benchmarks may reach any layer
        checked += 1
        text = open(os.path.join(repo, path), errors="replace").read()
        for inc in INCLUDE.findall(text):
            where = f"{path}: #include \"{inc}\""
            head = inc.split("/")[0] if "/" in inc else None
            if parts[0] == "store":
                own = parts[1] if len(parts) > 2 else None
                if head is None:
                    if inc not in public:
                        problems.append(f"{where}: not a public header (store/include/); "
                                        "qualify it with its layer")
                elif own == "include":
                    problems.append(f"{where}: a public header includes a store internal")
                elif head not in rank:
                    problems.append(f"{where}: unknown layer '{head}'")
                elif own not in rank:
                    problems.append(f"{where}: file outside every layer folder")
                elif rank[head] > rank[own]:
                    problems.append(f"{where}: upward include ({own} is below {head})")
                elif not os.path.exists(os.path.join(store, inc)):
                    problems.append(f"{where}: no such file")
            else:
                local = os.path.join(repo, os.path.dirname(path), inc)
                installed = os.path.join(repo, "client", "include", inc)
                if parts[0] == "tools" and os.path.exists(os.path.join(repo, "client", inc)):
                    continue  # tools/ sits above client/
                if head in rank:
                    problems.append(f"{where}: {parts[0]}/ may not include a store internal")
                elif not (inc in public or os.path.exists(local) or os.path.exists(installed)):
                    problems.append(f"{where}: not a public header of store/, a header of "
                                    f"{parts[0]}/ or the installed API")
    return checked, problems


def self_test(repo):
    """Each plant is (file, line to add, text the report must contain)."""
    layers = layers_of(repo)
    plants = [
        (f"store/{layers[1]}/", f'#include "{layers[-1]}/st_store_impl.h"', "upward include"),
        ("store/include/", f'#include "{layers[0]}/st_wire.h"', "public header includes"),
        ("tools/", f'#include "{layers[2]}/st_backend.h"', "may not include a store internal"),
        ("fs/", '#include "st_wire.h"', "not a public header"),
        (f"store/{layers[3]}/", '#include "st_wire.h"', "not a public header"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        for path in tracked_sources(repo) + ["store/CMakeLists.txt"]:
            os.makedirs(os.path.dirname(os.path.join(clean, path)), exist_ok=True)
            shutil.copy(os.path.join(repo, path), os.path.join(clean, path))
        os.makedirs(os.path.join(clean, "store", "include"), exist_ok=True)
        checked, problems = check(clean)
        if problems or not checked:
            print(f"self-test: the clean copy fails ({checked} files): {problems[:3]}")
            failures += 1
        for folder, line, expect in plants:
            victim = sorted(f for f in os.listdir(os.path.join(clean, folder))
                            if f.endswith(".c") or f.endswith(".h"))[0]
            target = os.path.join(clean, folder, victim)
            original = open(target).read()
            open(target, "w").write(original + "\n" + line + "\n")
            _, problems = check(clean)
            caught = [p for p in problems if expect in p and victim in p]
            print(f"self-test: planted {line!r} in {folder}{victim}: "
                  f"{'caught' if caught else 'MISSED'}" + (f" ({caught[0]})" if caught else ""))
            failures += not caught
            open(target, "w").write(original)
    return failures


def main(argv):
    if len(argv) == 3 and argv[1] == "--self-test":
        failures = self_test(argv[2])
        print(f"self-test: {'passed' if not failures else f'{failures} failed'}")
        return 1 if failures else 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    checked, problems = check(argv[1])
    for p in problems:
        print(p)
    print(f"check_layers: {checked} files checked, {len(problems)} violations")
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
