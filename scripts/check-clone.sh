#!/bin/sh
# What a user's clone needs to run the tests is in the clone, and nothing the
# build makes is tracked. Fails, naming the file and the line, when
#  - a test, script or benchmark names a path outside the clone: a relative
#    path that climbs above the top of the tree (from the file's own folder
#    or from the top, where the tests run; or joined onto the tree's top:
#    TOP/REPO/ROOT, ".."), or an absolute path
#    under a developer's folders (/work, /home, /root). A line that names
#    such a path on purpose (a path inside a sandbox, a hostile name sent to
#    the server) says so with "check-clone:" and why;
#  - git tracks an executable (an ELF file: the build's, never a source).
# Usage: scripts/check-clone.sh [FILE...]   (default: the tracked files of
# test/, scripts/, bench/, .ci/ and the top-level build files)
set -e
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PYTHON'
import os
import re
import subprocess
import sys

TOP = os.getcwd()
SCANNED = ("test/", "scripts/", "bench/", ".ci/")
TOP_FILES = ("Makefile.am", "configure.ac", "autogen.sh")
# test/fuzz/ holds the fuzzers' saved inputs (any bytes, not code), test/spec/
# the documents the tests validate against.
DATA = ("test/fuzz/corpus", "test/fuzz/regressions", "test/spec/")
# this script names the patterns it looks for
SELF = "scripts/check-clone.sh"
CODE = re.compile(r"\.(py|sh|mjs|js|c|h|am|ac|json|cfg|conf|in)$|^[^.]*$")
# a path literal with ".." segments: "../x", '../../x'
CLIMB = re.compile(r"""(?<![\w.])((?:\.\./)+)[\w.-]*""")
# joined onto the tree's top: (TOP, "..", ...), path.resolve(REPO, "..")
JOIN_ABOVE = re.compile(r"""\b(TOP|REPO|ROOT)\b\s*,\s*["']\.\.["']""")
DEV_ABSOLUTE = re.compile(r"""["'\s=(](/work|/home|/root)/""")


def tracked():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True)
        return [f for f in out.stdout.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk("."):
            dirs[:] = [x for x in dirs if x not in (".git", "node_modules", ".run")]
            found += [os.path.relpath(os.path.join(d, f)) for f in files]
        return found


def outside(path):
    real = os.path.normpath(path)
    return real != TOP and not real.startswith(TOP + os.sep)


def path_problems(name):
    problems = []
    here = os.path.dirname(os.path.join(TOP, name))
    try:
        with open(name, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (UnicodeDecodeError, FileNotFoundError):
        return problems
    for n, line in enumerate(lines, 1):
        if "check-clone:" in line:
            continue
        for m in CLIMB.finditer(line):
            # relative to the file's folder, or to the top (where the tests
            # run; a Makefile runs in its own folder)
            if outside(os.path.join(here, m.group(0))) or (
                    not os.path.basename(name).startswith("Makefile")
                    and outside(os.path.join(TOP, m.group(0)))):
                problems.append("%s:%d: %s climbs out of the clone" % (name, n, m.group(0)))
        if JOIN_ABOVE.search(line):
            problems.append("%s:%d: a path above the tree's top" % (name, n))
        if DEV_ABSOLUTE.search(line):
            problems.append("%s:%d: an absolute path under a developer's folders" % (name, n))
    return problems


def is_elf(name):
    try:
        with open(name, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except (IsADirectoryError, FileNotFoundError):
        return False


files = sys.argv[1:] or tracked()
scanned = [f for f in files
           if (f.startswith(SCANNED) or f in TOP_FILES) and not f.startswith(DATA) and f != SELF
           and CODE.search(os.path.basename(f))]
problems = []
for f in scanned:
    problems += path_problems(f)
problems += ["%s: an executable is tracked (the build makes it: ignore it, git rm --cached)" % f
             for f in files if is_elf(f)]
if problems:
    print("check-clone: what the tests need must be in the clone, and no build product tracked:")
    print("\n".join(problems))
    sys.exit(1)
print("check-clone: %d files name no path outside the clone; %d tracked files, no executable"
      % (len(scanned), len(files)))
PYTHON
