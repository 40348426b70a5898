"""Fair shares of the egress proxy, the address it checked, and bounded
logs (local sandboxes, the test network of test/egress_fixtures.py).

A burst of CONNECTs from several containers at once: every one is answered
(its tunnel, or the documented refusal), counted from what each socket got.
One owner at its limit leaves room for another. Through the site proxy the
egress proxy asks for the address it resolved and checked, never the name.
Refused connections are logged at a bounded rate, with their count."""
import json
import os
import threading
import time

import pytest

from conftest import Httpd, base_conf, wait_until
from egress_fixtures import PUBLIC, UNRESOLVABLE
from egress_fixtures import egress_net  # noqa: F401 (a fixture)
from test_egress import (ALLOW, PER_CONTAINER, TOO_MANY, audit_lines, egress_conf, make,
                         refused, run_json)

BURST = r'''
import selectors, time
N = %d
HEAD = b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n"
t0 = time.monotonic()
socks = [socket.create_connection(RELAY, timeout=100) for _ in range(N)]
for s in socks:
    s.sendall(HEAD)         # all N are out before any answer is read
    s.setblocking(False)
data, done = [b""] * N, [False] * N
sel = selectors.DefaultSelector()
for i, s in enumerate(socks):
    sel.register(s, selectors.EVENT_READ, i)
deadline = t0 + 100
while not all(done) and time.monotonic() < deadline:
    for key, _ in sel.select(timeout=max(0, deadline - time.monotonic())):
        i = key.data
        try:
            got = socks[i].recv(65536)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            got = b""
        data[i] += got
        if not got or (data[i].startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data[i]):
            done[i] = True
            sel.unregister(socks[i])
took = time.monotonic() - t0
answers = [d.decode("utf-8", "replace") if ok else "no answer: " + d.decode("utf-8", "replace")
           for d, ok in zip(data, done)]
for s in socks:
    s.close()
print(json.dumps([answers, took]))
'''

SERVICE_NOFILE = 1024
CONTAINERS = int(os.environ.get("CI_BURST_CONTAINERS", "6"))  # of one owner, at once
CONNECTS = 40               # CONNECTs of each, at once


@pytest.fixture(scope="module")
def fair(model, egress_net):  # noqa: F811
    server = Httpd("egress-fair", "", etc=egress_net.etc)
    # httpd (so the egress proxy) with the soft limit on descriptors a
    # service gets from systemd by default
    wrapped = server.wrapped
    server.wrapped = lambda cmd: wrapped(["prlimit", "--nofile=%d:" % SERVICE_NOFILE, "--"]
                                         + cmd)
    server.audit = os.path.join(server.root, "logs", "audit.jsonl")
    up = "http://127.0.0.1:%d" % model.port
    server.write_conf(base_conf(model.port, egress_conf(up, egress_net.site.url,
                                                         server.audit, egress_net.ca_pem)))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fr(fair, model, egress_net):  # noqa: F811
    model.reset()
    egress_net.reset()
    return fair


@pytest.fixture
def net(egress_net):  # noqa: F811
    return egress_net


def owner(name):
    return {"Authorization": "Bearer sk-fair-" + name}


def bursts(server, cids, headers, n):
    """Each container of CIDS opens N CONNECTs at once, all containers at
    once: [(answers, seconds)] per container."""
    out, errors = {}, []

    def one(cid):
        try:
            out[cid] = run_json(server, cid, BURST % n, headers)
        except BaseException as e:      # reported below
            errors.append(e)
    threads = [threading.Thread(target=one, args=(cid,)) for cid in cids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return [out[cid] for cid in cids]


def test_every_connect_of_a_burst_is_answered(fr, net):
    me = owner("burst")
    cids = [make(fr, net, me) for _ in range(CONTAINERS)]
    t0 = time.monotonic()
    got = bursts(fr, cids, me, CONNECTS)
    took = time.monotonic() - t0
    kinds = {}
    for answers, _ in got:
        for a in answers:
            k = "200" if a.startswith("HTTP/1.1 200") else \
                "403 per container" if refused(a, TOO_MANY) else a[:80]
            kinds[k] = kinds.get(k, 0) + 1
    print("burst: %d containers x %d CONNECTs: %s; the slowest container's answers "
          "took %.2f s, the whole %.2f s" % (CONTAINERS, CONNECTS, kinds,
                                             max(t for _, t in got), took))
    assert kinds == {"200": CONTAINERS * PER_CONTAINER,
                     "403 per container": CONTAINERS * (CONNECTS - PER_CONTAINER)}, kinds
