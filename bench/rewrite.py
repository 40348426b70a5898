#!/usr/bin/python3
"""The CPU of the client body's rewrite alone (ci_request_rewrite and the
release of its pool; bench/rewrite.c, outside httpd, warm caches, median),
on conversations of two shapes at 10 KB and 1 MB:

- "new turn": the benchmark's intercepted body (bench.py): a long earlier
  user message and the new one, nothing for the rewrite to translate;
- "stateless history": what a client that keeps its own history (no
  previous_response_id) sends: turns of a user message, the
  code_interpreter_call our answer gave it (its code and logs) and the
  assistant's message, every third item one the rewrite translates.

With BEFORE_TREE=/path/to/another/built/tree, the same program is also built
against that tree's core library (its .libs/libcicore.a and headers) and
measured in the same run, alternately, with the ratio now/before.

Usage: [BEFORE_TREE=...] /usr/bin/python3 bench/rewrite.py   (as root or
not; after scripts/build.sh or make, which builds bench/rewrite)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench import intercepted_body  # noqa: E402

KB10, MB1 = 10 * 1024, 1024 * 1024
ROUNDS = 3                     # runs of each program, alternated: the median
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}


def stateless_history(size):
    """Turns (user message, code_interpreter_call, assistant message) up to
    SIZE bytes of JSON."""
    items, i = [], 0
    while len(json.dumps(items)) < size:
        items.append({"role": "user", "content": "Turn %d: what is the square root of "
                      "%d? " % (i, i) + "Some context. " * 20})
        items.append({"type": "code_interpreter_call", "id": "ci_%048x" % i,
                      "status": "completed", "container_id": "cntr_%048x" % 1,
                      "code": "import math\nprint(math.sqrt(%d))" % i,
                      "outputs": [{"type": "logs", "logs": "%.6f\n" % (i ** 0.5)}]})
        items.append({"type": "message", "role": "assistant", "id": "msg_%d" % i,
                      "status": "completed",
                      "content": [{"type": "output_text", "annotations": [],
                                   "text": "The square root of %d is %.6f. " % (i, i ** 0.5)
                                   + "An explanation. " * 25}]})
        i += 1
    return json.dumps({"model": "bench-model", "store": False, "tools": [TOOL],
                       "input": items}).encode()


def flags(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()


def build(tree, out):
    """bench/rewrite.c built against TREE's core library, into OUT."""
    lib = os.path.join(tree, ".libs", "libcicore.a")
    if not os.path.exists(lib):
        sys.exit("no %s: build that tree first" % lib)
    cmd = (["gcc", "-O2", "-std=gnu11",
            "-I", os.path.join(tree, "mod_code_interpreter", "core"),
            "-I", os.path.join(tree, "mod_code_interpreter", "sandbox")]
           + flags(["apr-1-config", "--includes", "--cppflags"])
           + flags(["pkg-config", "--cflags", "json-c"])
           + [os.path.join(HERE, "rewrite.c"), lib]
           + flags(["pkg-config", "--libs", "json-c"]) + flags(["apr-1-config", "--link-ld"])
           + flags(["apu-1-config", "--link-ld"]) + ["-lcurl", "-lcrypto", "-lhiredis",
                                                     "-o", out])
    subprocess.run(cmd, check=True)
    return out


def cpu_us(prog, path, iterations):
    r = subprocess.run([prog, path, str(iterations)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s %s: %s" % (prog, path, r.stderr.strip()))
    return json.loads(r.stdout)["cpu_us"]


def fmt(us):
    return "%.1f µs" % us if us < 1000 else "%.2f ms" % (us / 1000)


def main():
    work = tempfile.mkdtemp(prefix="ci-bench-rewrite-")
    progs = {"now": build(TOP, os.path.join(work, "rewrite-now"))}
    if os.environ.get("BEFORE_TREE"):
        progs["before"] = build(os.environ["BEFORE_TREE"], os.path.join(work, "rewrite-before"))
    shapes = [("new turn", intercepted_body), ("stateless history", stateless_history)]
    print("| body | size | " + " | ".join("%s (CPU, median)" % b for b in progs)
          + (" | now/before |" if "before" in progs else " |"))
    print("|---" * (2 + len(progs) + ("before" in progs)) + "|")
    for name, make in shapes:
        for label, size in (("10 KB", KB10), ("1 MB", MB1)):
            path = os.path.join(work, "%s-%d.json" % (name.replace(" ", "-"), size))
            with open(path, "wb") as f:
                f.write(make(size))
            got = {b: [] for b in progs}
            for k in range(ROUNDS):
                for b in (sorted(progs) if k % 2 else sorted(progs, reverse=True)):
                    got[b].append(cpu_us(progs[b], path, 2000 if size < MB1 else 40))
            med = {b: statistics.median(v) for b, v in got.items()}
            row = "| %s | %s | %s |" % (name, label, " | ".join(fmt(med[b]) for b in progs))
            if "before" in progs:
                row += " %.2f |" % (med["now"] / med["before"])
            print(row)
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
