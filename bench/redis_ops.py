#!/usr/bin/python3
"""Redis' own time for each operation of the shared container directory
(core/ci_directory.lua, loaded as the module loads it: a function
library), from its SLOWLOG, outside httpd: N conversations of a new turn
(create, finish) and a chained turn (response with touch, finish), as the
module asks them, against a redis-server of its own on loopback.

- RUNNING=0: every conversation's container is deleted after it (the node
  runs few); RUNNING=1 keeps them all running (the node runs up to N, under
  caps that never bind): what a create costs as a node fills.
- GAP (seconds, default 0): a pause after each operation. 0 runs them back
  to back (Redis warm); a real turn leaves tens of milliseconds between two
  operations (the model's answer), in which an idle machine lets Redis'
  caches go cold: GAP=0.03 measures that.
- LUA_BEFORE=/path/to/an/earlier/ci_directory.lua: that version measured
  too, alternately, on a server of its own.

Usage: [RUNNING=1] [GAP=0.03] [LUA_BEFORE=...] /usr/bin/python3 bench/redis_ops.py [N]
(default 300; redis-server installed)
"""
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test"))

from test_redisdir_unit import start_redis  # noqa: E402

LUA = os.path.join(HERE, "..", "mod_code_interpreter", "sandbox", "ci_directory.lua")
TAIL = "return apply(ARGV)\n"        # the source's last line (core/ci_redis.c)
NODE = "127.0.0.1:8080"
LIMITS = {"node": 100000, "owner": 100000, "retention": 3600, "budget": 0, "grace": 300,
          "reserve": 8}
OPS = ("create", "finish", "response", "delete")
OP = re.compile(r'\{"op": "(\w+)"')


class Redis:
    """A RESP connection to the server on PORT."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def __call__(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return int(rest) if kind == b":" else rest.decode()
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        return [self.read() for _ in range(int(rest))]


def load(redis, path):
    """The library of PATH loaded: its function's name."""
    with open(path) as f:
        src = f.read()
    if not src.endswith(TAIL):
        sys.exit("%s does not end as the directory's source does" % path)
    fn = "ci_dir_" + hashlib.sha1(src.encode()).hexdigest()
    redis("FUNCTION", "LOAD", "REPLACE", "#!lua name=%s\n%sredis.register_function('%s', "
          "function(keys, args) return apply(args) end)\n" % (fn, src[:-len(TAIL)], fn))
    return fn


def conversation(i):
    """The operations of a new turn and a chained one, as the module asks."""
    owner = "own_" + secrets.token_hex(32)
    cid = "cntr_" + secrets.token_hex(24)
    item = json.dumps([{"type": "function_call", "call_id": "call_%d" % i, "name": "python",
                        "arguments": json.dumps({"code": "x = 1"})},
                       {"type": "function_call_output", "call_id": "call_%d" % i,
                        "output": "(no output)"}])

    def finish(rid):
        return {"op": "finish", "owner": owner, "container_id": cid, "response_id": rid,
                "items": [{"id": "ci_" + secrets.token_hex(24), "text": item}], "node": NODE}
    first, second = "resp_" + secrets.token_hex(12), "resp_" + secrets.token_hex(12)
    return [{"op": "create", "owner": owner, "id": cid, "tool": "local", "provider": "local",
             "memory_bytes": 1 << 30, "idle": 1200, "limits": LIMITS, "hold": 660,
             "node": NODE, "auth": secrets.token_hex(32)},
            finish(first),
            {"op": "response", "owner": owner, "response_id": first, "touch": True,
             "hold": 660, "node": NODE},
            finish(second),
            {"op": "delete", "owner": owner, "id": cid, "node": NODE}]


def run(redis, fn, convs, now, gap, running):
    for ops in convs:
        for op in ops if not running else ops[:-1]:
            now[0] += 1000
            redis("FCALL", fn, "0", json.dumps(op), str(now[0]), secrets.token_hex(24))
            if gap:
                time.sleep(gap)


def by_op(redis):
    got = {}
    for entry in redis("SLOWLOG", "GET", "-1"):
        args = entry[3]
        if args and args[0].upper() == "FCALL":
            # (SLOWLOG keeps an argument's first 128 bytes: "op" comes first)
            got.setdefault(OP.match(args[3]).group(1), []).append(entry[2])
    return got


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    gap = float(os.environ.get("GAP", "0"))
    running = os.environ.get("RUNNING") == "1"
    versions = {"now": LUA}
    if os.environ.get("LUA_BEFORE"):
        versions["before"] = os.environ["LUA_BEFORE"]
    work = tempfile.mkdtemp(prefix="ci-bench-redis-")
    servers, results = {}, {}
    try:
        for v, path in versions.items():
            proc, port = start_redis(work, "--slowlog-log-slower-than", "0",
                                     "--slowlog-max-len", str(10 * n + 100))
            redis = Redis(port)
            servers[v] = (proc, redis, load(redis, path), [1796000000000000])
            redis("SLOWLOG", "RESET")
        for i in range(n):                 # a conversation at a time, alternately
            for v in (sorted(versions) if i % 2 else sorted(versions, reverse=True)):
                _, redis, fn, now = servers[v]
                run(redis, fn, [conversation(i)], now, gap, running)
        for v, (_, redis, _, _) in servers.items():
            results[v] = by_op(redis)
    finally:
        for proc, _, _, _ in servers.values():
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("Redis' own time per operation (SLOWLOG), %d conversations, gap %s s, %s" % (
        n, gap, "containers kept running" if running else "each container deleted after"))
    print("| operation | " + " | ".join("%s p50 / mean" % v for v in versions) +
          (" | now/before (p50) |" if "before" in versions else " |"))
    print("|---" * (1 + len(versions) + ("before" in versions)) + "|")
    for op in OPS:
        if op not in results["now"]:
            continue
        cells = ["%d / %.0f µs" % (statistics.median(results[v][op]),
                                   statistics.mean(results[v][op])) for v in versions]
        row = "| %s | %s |" % (op, " | ".join(cells))
        if "before" in versions:
            row += " %.2f |" % (statistics.median(results["now"][op]) /
                                statistics.median(results["before"][op]))
        print(row)


if __name__ == "__main__":
    main()
