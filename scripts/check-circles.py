#!/usr/bin/python3
"""The structure as the calls draw it: which source file uses a function or
a variable another one defines, read with nm from the built objects (after
scripts/build.sh). Prints the arrows between the folders of
mod_code_interpreter/ and every circle: files that reach each other through
their calls (a strongly connected set).

A circle known today is listed in scripts/known-circles.txt, one per line
(its files, sorted, space separated). The check fails when a circle appears
that is not listed, or a listed one grows; a listed one that is gone or
smaller is reported, to be taken off the list. So circles only ever go.

Usage: scripts/check-circles.py [--picture]
"""
import glob
import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(TOP, "mod_code_interpreter")
KNOWN = os.path.join(TOP, "scripts", "known-circles.txt")


def objects():
    """source path (relative to mod_code_interpreter/) -> its object file."""
    found = {}
    for obj in glob.glob(os.path.join(SRC, "*", ".libs", "*.o")):
        room = os.path.basename(os.path.dirname(os.path.dirname(obj)))
        name = os.path.basename(obj)[:-2]
        if name.startswith("la-"):
            name = name[3:]
        source = os.path.join(room, name + ".c")
        if os.path.exists(os.path.join(SRC, source)):
            found[source] = obj
    return found


def symbols(obj):
    """(defined, used) global symbols of OBJ."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRVWC" and kind.isupper():
            defined.add(name)
    return defined, used


# Registration records, not use: every file of httpd/ names the module
# record for its configuration (ap_get_module_config), and the provider
# table names each built-in provider's record. Arrows through them would
# draw their users into one circle with the file that registers them.
RECORDS = {"code_interpreter_module", "ci_provider_local", "ci_provider_e2b"}


def graph():
    objs = objects()
    if not objs:
        sys.exit("check-circles: no objects under mod_code_interpreter/*/.libs: build first")
    owner, uses = {}, {}
    for source, obj in objs.items():
        defined, used = symbols(obj)
        for name in defined:
            owner[name] = source
        uses[source] = used
    edges = {s: set() for s in objs}
    for source, used in uses.items():
        for name in used:
            if name in RECORDS:
                continue
            if name in owner and owner[name] != source:
                edges[source].add(owner[name])
    return edges


def circles(edges):
    """Strongly connected sets of more than one file (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(frozenset(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def known():
    listed = []
    with open(KNOWN) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                listed.append(frozenset(line.split()))
    return listed


def main():
    edges = graph()
    found = circles(edges)
    if "--picture" in sys.argv:
        arrows = {}
        for a, targets in edges.items():
            for b in targets:
                ra, rb = a.split("/")[0], b.split("/")[0]
                if ra != rb:
                    arrows[(ra, rb)] = arrows.get((ra, rb), 0) + 1
        for (ra, rb), n in sorted(arrows.items()):
            print("%-11s -> %-11s %d calls between files" % (ra, rb, n))
        for c in found:
            print("circle:", " ".join(sorted(c)))
    listed = known()
    bad = [c for c in found if not any(c <= k for k in listed)]
    gone = [k for k in listed if not any(k <= c for c in found)]
    for k in gone:
        print("check-circles: gone or smaller, take it off scripts/known-circles.txt: "
              + " ".join(sorted(k)))
    if bad:
        print("check-circles: a new circle between files (they call each other):")
        for c in bad:
            print("  " + " ".join(sorted(c)))
        sys.exit(1)
    print("check-circles: %d files, %d circles, each a known one (%s)"
          % (len(edges), len(found), os.path.relpath(KNOWN, TOP)))


main()
