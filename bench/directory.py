#!/usr/bin/python3
"""The container directory's share of a turn, measured: the same server
twice, with the directory in its sandbox supervisor (one node) and in Redis
(CodeInterpreterDirectory, a redis-server on loopback), each serving N new
conversations, each followed by a turn chained with previous_response_id,
against the scripted model. The module's own time per request
(`module_us` of the access log: parsing, rewriting, assembling and the
directory's questions; not the sandbox's or the upstream's time) as p50 and
p90, and Redis' figure as a ratio to the supervisor's, measured in the same
run.

Usage: /usr/bin/python3 bench/directory.py [N]   (default 60; as root, with
the module built: scripts/build.sh; redis-server installed)
"""
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test"))

from conftest import Httpd, base_conf, script_input, start_helper  # noqa: E402
from test_redisdir_unit import start_redis  # noqa: E402

WARMUP = 5
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
LINE = re.compile(r'^POST /v1/responses HTTP/1\.1 200 .* module_us=(\d+)')


def turns(server, n, key):
    """N conversations of two turns; the access log's module_us of each
    turn, as (new, chained) lists, warm-up left out."""
    me = {"Authorization": "Bearer " + key}
    for _ in range(WARMUP + n):
        body = {"model": "m", "tools": [TOOL],
                "input": script_input([[{"call": "x = 1"}], [{"text": "ok"}]])}
        status, _, first = server.post("/v1/responses", body, headers=me)
        assert status == 200, first
        body = {"model": "m", "tools": [TOOL], "previous_response_id": first["id"],
                "input": script_input([[{"call": "print(x)"}], [{"text": "ok"}]])}
        status, _, second = server.post("/v1/responses", body, headers=me)
        assert status == 200, second
    with open(server.access_log) as f:
        us = [int(m.group(1)) for m in map(LINE.match, f) if m]
    us = us[2 * WARMUP:]
    return us[0::2], us[1::2]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def measure(model_port, name, extra, n):
    server = Httpd("bench-directory-" + name, base_conf(model_port, extra)).start()
    try:
        return turns(server, n, "sk-bench-" + secrets.token_hex(6))
    finally:
        server.delete_containers()
        server.stop()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    workdir = tempfile.mkdtemp(prefix="ci-bench-dir-")
    model, model_port = start_helper("fake_model.py")
    redis, redis_port = start_redis(workdir)
    secret = os.path.join(workdir, "secret")
    with open(secret, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        results = {
            "supervisor": measure(model_port, "supervisor", "", n),
            "redis": measure(model_port, "redis",
                             "CodeInterpreterDirectory redis://127.0.0.1:%d/0\n"
                             "CodeInterpreterSecret file:%s\n" % (redis_port, secret), n),
        }
    finally:
        model.kill()
        redis.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    print("module_us per turn, %d conversations each (p50 / p90 / mean)" % n)
    for kind, i in (("new conversation", 0), ("chained turn", 1)):
        base = results["supervisor"][i]
        for name in ("supervisor", "redis"):
            v = results[name][i]
            print("  %-17s %-10s %6d / %6d / %6.0f us   ratio p50 %.2f" % (
                kind, name, pct(v, .5), pct(v, .9), statistics.mean(v),
                pct(v, .5) / pct(base, .5)))


if __name__ == "__main__":
    main()
