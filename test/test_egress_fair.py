"""Fair shares of the egress proxy, the address it checked, and bounded
logs (local sandboxes, the test network of test/egress_fixtures.py).

A burst of CONNECTs from several containers at once: every one is answered
(its tunnel, or the documented refusal), counted from what each socket got.
One owner at its limit leaves room for another. Through the site proxy the
egress proxy asks for the address it resolved and checked, never the name.
Refused connections are logged at a bounded rate, with their count."""
import os
import re
import threading
import time

import pytest

from conftest import wait_until
from egress_fixtures import PUBLIC, UNRESOLVABLE
from egress_fixtures import egress_net  # noqa: F401 (a fixture)
from test_egress import (PER_CONTAINER, TOO_MANY, audit_lines, egress_server, make, refused,
                         run_json)

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

# The soft limit on descriptors httpd starts with here: below what the
# pool's connections need (two each), as a service's 1024 is below 512's.
SERVICE_NOFILE = 256
POOL = 64                   # CodeInterpreterEgressConnections
PER_OWNER = 40              # CodeInterpreterEgressConnectionsPerOwner
LIFETIME = 20               # CodeInterpreterEgressLifetime (s), below the 60 s idle bound
CONTAINERS = int(os.environ.get("CI_BURST_CONTAINERS", "6"))  # of one owner, at once
CONNECTS = 40               # CONNECTs of each, at once
FAIR_CONF = """
CodeInterpreterEgressConnections %d
CodeInterpreterEgressConnectionsPerOwner %d
CodeInterpreterEgressLifetime %ds
CodeInterpreterEgressProxyResolves On
""" % (POOL, PER_OWNER, LIFETIME)


@pytest.fixture(scope="module")
def fair(model, egress_net):  # noqa: F811
    server = egress_server("egress-fair", model, egress_net, FAIR_CONF,
                           wrap=["prlimit", "--nofile=%d:" % SERVICE_NOFILE, "--"])
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


def owner_too_many(n):
    return ("egress refused: too many connections from this owner's containers "
            "(at most %d)\n" % n)


def kind(answer):
    """What one CONNECT got: its tunnel, a documented refusal, or else what."""
    if answer.startswith("HTTP/1.1 200"):
        return "200"
    if refused(answer, TOO_MANY):
        return "403 per container"
    if refused(answer, owner_too_many(PER_OWNER)):
        return "403 per owner"
    return answer[:120]


def in_threads(server, jobs):
    """Runs each (cid, code, headers) of JOBS at once; their JSON, in order."""
    out, errors = {}, []

    def one(i, cid, code, headers):
        try:
            out[i] = run_json(server, cid, code, headers)
        except BaseException as e:      # reported below
            errors.append(e)
    threads = [threading.Thread(target=one, args=(i,) + job) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return [out[i] for i in range(len(jobs))]


# ------------------------------------------------- an answer for every CONNECT

def test_every_connect_of_a_burst_is_answered(fr, net):
    me = owner("burst")
    cids = [make(fr, net, me) for _ in range(CONTAINERS)]
    t0 = time.monotonic()
    got = in_threads(fr, [(cid, BURST % CONNECTS, me) for cid in cids])
    took = time.monotonic() - t0
    kinds = {}
    for answers, _ in got:
        for a in answers:
            k = kind(a)
            kinds[k] = kinds.get(k, 0) + 1
    print("burst: %d containers x %d CONNECTs: %s; the slowest container's answers "
          "took %.2f s, the whole %.2f s" % (CONTAINERS, CONNECTS, kinds,
                                             max(t for _, t in got), took))
    # every CONNECT was answered, with its tunnel or a documented refusal
    assert sum(kinds.values()) == CONTAINERS * CONNECTS
    assert set(kinds) <= {"200", "403 per container", "403 per owner"}, kinds
    for answers, _ in got:
        assert sum(1 for a in answers if a.startswith("HTTP/1.1 200")) <= PER_CONTAINER


# ----------------------------------------------------------- a share per owner

# N tunnels (CONNECT allowed.test:443, TLS inside, as the proxy requires of
# a tunnel) opened one after the other and held; then, through the first, a
# request the origin answers when the test says (/hold/NAME); then all
# closed. The answers, in order.
HOLD = r'''
ctx = ssl.create_default_context(cafile="/mnt/data/ca.pem")
socks, answers = [], []
for i in range(%(n)d):
    s, answer = tunnel("allowed.test:443")
    if answer.startswith("HTTP/1.1 200"):
        socks.append(ctx.wrap_socket(s, server_hostname="allowed.test"))
    else:
        answer += rest(s)
        s.close()
    answers.append(answer)
w = socks[0]
w.sendall(b"GET /hold/%(name)s HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
said = b""
while b"released" not in said:
    got = w.recv(4096)
    if not got:
        break
    said += got
for s in socks:
    s.close()
print(json.dumps(answers))
'''


def pool_busy(n):
    return "egress error: too many connections through the egress proxy (at most %d)\n" % n


def holding(server, jobs, result):
    """A thread running JOBS (in_threads) into RESULT["got"] (or "error")."""
    def run():
        try:
            result["got"] = in_threads(server, jobs)
        except BaseException as e:      # reported below
            result["error"] = e
    t = threading.Thread(target=run)
    t.start()
    return t


def holds(net, name, n, result):
    wait_until(lambda: sum(1 for r in net.https.records() if r["path"] == "/hold/" + name)
               == n or "error" in result, "%d containers of %s to hold their tunnels"
               % (n, name), 120)
    assert "error" not in result, result["error"]


def kinds_of(result):
    kinds = {}
    for answers in result["got"]:
        for a in answers:
            k = kind(a) if not refused(a, pool_busy(POOL), "HTTP/1.1 503 Service Unavailable") \
                else "503 pool"
            kinds[k] = kinds.get(k, 0) + 1
    return kinds


def test_one_owner_at_its_limit_leaves_room_for_another(fr, net):
    greedy, other = owner("greedy"), owner("other")
    # the greedy owner's two containers could take the whole pool between them
    assert 2 * PER_CONTAINER >= POOL > PER_OWNER and POOL - PER_OWNER < PER_CONTAINER
    mine = [make(fr, net, greedy) for _ in range(2)]
    theirs = make(fr, net, other)
    held, also = {}, {}
    threads = [holding(fr, [(cid, HOLD % {"n": PER_CONTAINER, "name": "greedy"}, greedy)
                            for cid in mine], held)]
    try:
        holds(net, "greedy", 2, held)
        assert net.site.open_connections() == PER_OWNER
        # the other owner gets what is left of the pool, then the pool's 503
        threads.append(holding(fr, [(theirs, HOLD % {"n": PER_CONTAINER, "name": "other"},
                                     other)], also))
        holds(net, "other", 1, also)
        assert net.site.open_connections() == POOL
    finally:
        net.https.release("greedy")
        net.https.release("other")
        for t in threads:
            t.join(300)
    assert "error" not in held and "error" not in also, (held.get("error"), also.get("error"))
    assert kinds_of(held) == {"200": PER_OWNER,
                              "403 per owner": 2 * PER_CONTAINER - PER_OWNER}
    assert kinds_of(also) == {"200": POOL - PER_OWNER,
                              "503 pool": PER_CONTAINER - (POOL - PER_OWNER)}


# ------------------------------------------------ the address that was checked

def test_a_name_that_does_not_resolve_goes_by_name_only_when_allowed(fr, net):
    """CodeInterpreterEgressProxyResolves On (this server): a name that does
    not resolve here goes to the site proxy by name; one that resolves goes
    as its address, as without it (test_egress's server refuses the first)."""
    me = owner("by-name")
    cid = make(fr, net, me)
    got = run_json(fr, cid, "print(json.dumps([get('https://%s/echo/by-name'), "
                   "get('https://allowed.test/echo/by-address')]))" % UNRESOLVABLE, me)
    assert got == [[200, "https %s GET /echo/by-name\n" % UNRESOLVABLE],
                   [200, "https allowed.test GET /echo/by-address\n"]]
    assert sorted(net.site.seen()) == [("CONNECT", PUBLIC, 443), ("CONNECT", UNRESOLVABLE, 443)]
    # the proxy looked the name up itself before handing it on
    assert UNRESOLVABLE in net.dns.asked()


# ------------------------------------------------------------------- lifetime

LONG_TUNNEL = r'''
s, answer = tunnel("allowed.test:443")
t = ssl.create_default_context(cafile="/mnt/data/ca.pem").wrap_socket(
    s, server_hostname="allowed.test")
t.settimeout(%d)
try:
    while True:
        if not t.recv(4096):
            outcome = "closed"
            break
except socket.timeout:
    outcome = "still open"
except (ssl.SSLError, OSError):
    outcome = "closed"
print(json.dumps([answer, outcome]))
'''


def test_a_tunnel_is_closed_at_its_lifetime(fr, net):
    me = owner("lifetime")
    cid = make(fr, net, me)
    # a silent tunnel (its TLS set up): the 60 s idle bound would close it,
    # later than the lifetime
    data, outcome = run_json(fr, cid, LONG_TUNNEL % 55, me)
    assert (data, outcome) == ("HTTP/1.1 200 Connection established\r\n\r\n", "closed")
    (line,) = wait_until(lambda: audit_lines(fr, cid), "the tunnel's audit line")
    assert (line["allowed"], line["outlived"], line["count"]) == (True, True, 1), line


# ---------------------------------------------------------------- bounded logs

REFUSED = 2000
MANY_REFUSED = r'''
n = 0
for i in range(%d):
    s = socket.create_connection(RELAY, timeout=60)
    s.sendall(b"CONNECT outside.test:443 HTTP/1.1\r\nHost: outside.test:443\r\n\r\n")
    data = b""
    while True:
        got = s.recv(4096)
        if not got:
            break
        data += got
    s.close()
    n += data.startswith(b"HTTP/1.1 403 Forbidden")
print(json.dumps(n))
'''
REFUSAL_REASON = "outside.test is not on this container's allowlist"


def error_log_counts(server, cid):
    """The connections each error log line of CID's refusals stands for."""
    with open(server.error_log, errors="replace") as f:
        text = f.read()
    counts = []
    for line in text.splitlines():
        if cid not in line or REFUSAL_REASON not in line:
            continue
        m = re.search(r"CI0930: egress: (\d+) connections", line)
        counts.append(int(m.group(1)) if m else 1 if "CI0901: " in line else 0)
    return counts


def test_refused_connections_are_logged_at_a_bounded_rate_with_their_count(fr, net):
    me = owner("refused")
    cid = make(fr, net, me)
    assert run_json(fr, cid, MANY_REFUSED % REFUSED, me) == REFUSED

    def audit():
        lines = [x for x in audit_lines(fr, cid) if x["reason"] == REFUSAL_REASON]
        return lines if sum(x["count"] for x in lines) >= REFUSED else None
    lines = wait_until(audit, "the audit to count every refusal")
    counts = wait_until(lambda: (lambda c: c if sum(c) >= REFUSED else None)(
        error_log_counts(fr, cid)), "the error log to count every refusal")
    print("%d refusals: %d audit lines, %d error log lines" % (REFUSED, len(lines),
                                                               len(counts)))
    # every refusal counted once, in far fewer lines than refusals
    assert sum(x["count"] for x in lines) == REFUSED
    assert sum(counts) == REFUSED and 0 not in counts
    assert len(lines) <= REFUSED // 20 and len(counts) <= REFUSED // 20, (len(lines),
                                                                          len(counts))
    assert net.site.seen() == []
