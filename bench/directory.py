#!/usr/bin/python3
"""The module's own time per request, by kind of request and container
directory: a caller without an owner (no container), a new conversation (a
container made at its first call) and a turn chained to it with
previous_response_id, then the same two turns with `conversation` (a new
one's first turn, and its second, which finds its container through the
conversation), with the directory in the sandbox supervisor (one
node) and in Redis (CodeInterpreterDirectory, a redis-server on loopback),
against the scripted model. Each request makes one code call, then answers.
The figure is `module_us` of the access log: parsing, rewriting,
assembling and the directory's questions, not the sandbox's or the
upstream's time; p50 and p90 over N of each, and Redis' figure as a ratio to
the supervisor's, measured in the same run. Then one conversation of LONG
(40) chained turns per server: the module time of its last 5 turns against
that of its turns 2 to 6 (a turn must not cost more the longer the
conversation).

With BEFORE=/path/to/an/earlier/mod_code_interpreter.so the earlier build
is measured in the same run, side by side: a server of each build per
directory, their requests interleaved one conversation at a time (A B,
then B A), and the table gains the earlier figures and the ratio
now/before.

Usage: [BEFORE=...] [LONG=40] /usr/bin/python3 bench/directory.py [N]   (default 60;
as root, with the module built: scripts/build.sh; redis-server installed)
"""
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test"))

from conftest import ANONYMOUS, CLEANUP_PATH, MODULE, Httpd, base_conf, script_input, start_helper  # noqa: E402
from test_redisdir_unit import start_redis  # noqa: E402

WARMUP = 5
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
LINE = re.compile(r'^POST /v1/responses HTTP/1\.1 200 .* module_us=(\d+)')
KINDS = ("owner-less", "new conversation", "chained turn", "new, in a conversation",
         "conversation turn")
# Then one long conversation per server: its early turns (2 to SPAN + 1)
# against its last SPAN, which must cost no more.
LONG = int(os.environ.get("LONG", "40"))
SPAN = 5


def post(server, headers, **extra):
    body = {"model": "m", "tools": [TOOL],
            "input": script_input([[{"call": "x = 1"}], [{"text": "ok"}]])}
    body.update(extra)
    began = time.perf_counter()
    status, _, out = server.post("/v1/responses", body, headers=headers)
    server.latencies.append(int((time.perf_counter() - began) * 1e6))
    assert status == 200, out
    return out


def conversation(server, key):
    """One request of each kind, in KINDS' order; the conversation's
    container is then deleted (through the Containers API, not measured),
    so that the servers' caps never come into it."""
    me = {"Authorization": "Bearer " + key}
    post(server, ANONYMOUS)
    first = post(server, me)
    post(server, me, previous_response_id=first["id"])
    # the same two turns through `conversation` (its route to the container)
    conv = "conv_" + secrets.token_hex(12)
    in_conv = post(server, me, conversation=conv)
    post(server, me, conversation=conv)
    for out in (first, in_conv):
        cid = next(o["container_id"] for o in out["output"]
                   if o["type"] == "code_interpreter_call")
        status, _, _ = server.request("DELETE", CLEANUP_PATH + "/" + cid, headers=me)
        assert status == 200, "container %s not deleted: %d" % (cid, status)


def figures(server, n):
    """module_us and the client's latency of each kind, as lists in KINDS'
    order, warm-up left out: {"module": [...], "latency": [...]}; and the
    module_us of the long conversation's early and late turns ("long")."""
    short = len(KINDS) * (WARMUP + n)
    # a request's access log line is written after its answer has left
    deadline = time.monotonic() + 10
    while True:
        with open(server.access_log) as f:
            logged = [int(m.group(1)) for m in map(LINE.match, f) if m]
        if len(logged) >= short + LONG or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(logged) == len(server.latencies) == short + LONG, \
        "%d access log lines, %d answers for %d conversations and %d turns" % (
            len(logged), len(server.latencies), n, LONG)
    us, lat = logged[len(KINDS) * WARMUP:short], server.latencies[len(KINDS) * WARMUP:short]
    turns = logged[short:]
    return {"module": [us[i::len(KINDS)] for i in range(len(KINDS))],
            "latency": [lat[i::len(KINDS)] for i in range(len(KINDS))],
            "long": {"early": turns[1:1 + SPAN], "late": turns[-SPAN:]}}


def long_conversation(servers, key):
    """One conversation of LONG chained turns on each server, their turns
    interleaved."""
    me = {"Authorization": "Bearer " + key + "-long"}
    previous = {id(s): None for s in servers}
    for t in range(LONG):
        for server in (servers if t % 2 == 0 else servers[::-1]):
            extra = {"previous_response_id": previous[id(server)]} if t else {}
            previous[id(server)] = post(server, me, **extra)["id"]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def measure(model_port, directory, extra, builds, n):
    """{build: figures} for one directory, the builds' servers side by side."""
    servers = {}
    try:
        for build, module in builds.items():
            servers[build] = Httpd("bench-directory-%s-%s" % (directory, build),
                                   base_conf(model_port, extra), module=module).start()
            servers[build].latencies = []
        key = "sk-bench-" + secrets.token_hex(6)
        order = list(servers.values())
        for i in range(WARMUP + n):
            for server in (order if i % 2 == 0 else order[::-1]):
                conversation(server, key)
        long_conversation(order, key)
        return {build: figures(server, n) for build, server in servers.items()}
    finally:
        for server in servers.values():
            server.delete_containers()
            server.stop()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    builds = {"now": MODULE}
    if os.environ.get("BEFORE"):
        builds["before"] = os.environ["BEFORE"]
    workdir = tempfile.mkdtemp(prefix="ci-bench-dir-")
    model, model_port = start_helper("fake_model.py")
    redis, redis_port = start_redis(workdir)
    secret = os.path.join(workdir, "secret")
    with open(secret, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        results = {
            "supervisor": measure(model_port, "supervisor", "", builds, n),
            "redis": measure(model_port, "redis",
                             "CodeInterpreterDirectory redis://127.0.0.1:%d/0\n"
                             "CodeInterpreterSecret file:%s\n" % (redis_port, secret),
                             builds, n),
        }
    finally:
        model.kill()
        redis.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    print("per request, %d of each kind per server, one code call each; "
          "module: module_us of the access log; latency: as the client saw it" % n)
    for figure in ("module", "latency"):
        table(figure, results, builds)
    print("\n| a conversation of %d turns | directory | " % LONG + " | ".join(
        "%s: turns 2-%d / last %d, module p50 (ratio)" % (b, SPAN + 1, SPAN) for b in builds)
        + " |")
    print("|---" * (2 + len(builds)) + "|")
    for directory in ("supervisor", "redis"):
        cells = []
        for b in builds:
            got = results[directory][b]["long"]
            early, late = statistics.median(got["early"]), statistics.median(got["late"])
            cells.append("%d / %d µs (%.2f)" % (early, late, late / early))
        print("| module time of a turn | %s | %s |" % (directory, " | ".join(cells)))


def table(figure, results, builds):
    print("\n| %s | directory | " % figure + " | ".join(
        "%s p50 / p90 (mean)" % b for b in builds) + " | Redis/supervisor (p50)" +
        (" | now/before (p50)" if "before" in builds else "") + " |")
    print("|---" * (3 + len(builds) + ("before" in builds)) + "|")
    for i, kind in enumerate(KINDS):
        for directory in ("supervisor", "redis"):
            got = {b: results[directory][b][figure][i] for b in builds}
            base = results["supervisor"]["now"][figure][i]
            cells = ["%d / %d µs (%.0f)" % (pct(got[b], .5), pct(got[b], .9),
                                           statistics.mean(got[b])) for b in builds]
            row = "| %s | %s | %s | %.2f |" % (kind, directory, " | ".join(cells),
                                               pct(got["now"], .5) / pct(base, .5))
            if "before" in builds:
                row += " %.2f |" % (pct(got["now"], .5) / pct(got["before"], .5))
            print(row)

if __name__ == "__main__":
    main()
