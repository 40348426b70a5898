"""Two httpd nodes sharing one container directory in Redis
(CodeInterpreterDirectory), against a redis-server the test starts, the
scripted model and the fake E2B service: a conversation keeps its state
across turns on one node (local) and across nodes (E2B), the Containers API
and owners are the same on both nodes, expiry ends each container exactly
once whichever node claims it, and a Redis outage is a 503 with
Retry-After for what needs the directory, nothing for what does not, and
over by itself when Redis is back."""
import json
import os
import random
import re
import secrets
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import shutil
import signal
import tempfile

import pytest

from conftest import (ANONYMOUS, FakeE2B, Httpd, base_conf, require, script_input,
                      start_helper, wait_until)
from test_containers import gone_for_its_call
from test_loop import calls_of
from test_redisdir_unit import SERVER, start_redis

OUTPUTS = "code_interpreter_call.outputs"
KEY = "e2b_" + secrets.token_hex(20)
ME = {"Authorization": "Bearer sk-shared-me"}
OTHER = {"Authorization": "Bearer sk-shared-other"}


def node_conf(model_port, redis_port, secret, fake_url):
    return base_conf(model_port, """
CodeInterpreterDirectory redis://127.0.0.1:{redis}/0
CodeInterpreterSecret file:{secret}
CodeInterpreterMaxSandboxes 1000
CodeInterpreterSandbox cloud provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \\
    sandbox_url={url} timeout=5 idle=10m
CodeInterpreterSandbox cloudbrief provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \\
    sandbox_url={url} timeout=5 idle=2s
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:{model}/v1/responses
  CodeInterpreter cloud
</Location>
<Location /e2b/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter cloud
</Location>
<Location /e2bbrief/v1/responses>
  ProxyPass http://127.0.0.1:{model}/v1/responses
  CodeInterpreter cloudbrief
</Location>
CodeInterpreterSandbox fenced provider=local egress=allowlist
<Location /fenced/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter fenced
</Location>
""".format(redis=redis_port, secret=secret, url=fake_url, model=model_port))


def redis_on(workdir, port):
    """redis-server on PORT again (nothing saved); its process."""
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: proc.poll() is not None or listening(port), "redis-server to listen")
    assert proc.poll() is None, "redis-server did not start again on %d" % port
    return proc


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster(model):
    """Redis, the fake E2B service and two nodes sharing them."""
    require(os.path.exists(SERVER), "the shared directory's tests need redis-server")
    workdir = tempfile.mkdtemp(prefix="ci-shared-")
    secret = os.path.join(workdir, "secret")
    with open(secret, "w") as f:
        f.write(secrets.token_hex(32))
    redis, redis_port = start_redis(workdir)
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY)
    fake = FakeE2B(proc, port)
    c = {"nodes": [], "fake": fake, "redis": redis, "redis_port": redis_port,
         "workdir": workdir}
    try:
        for name in ("node1", "node2"):
            server = Httpd("shared-" + name, node_conf(model.port, redis_port, secret,
                                                         fake.url),
                           env={"E2B_TEST_KEY": KEY}, fakes=[fake])
            server.start()
            c["nodes"].append(server)
        yield c
    finally:
        # a node's last checks may fail (they raise in stop): the other
        # node, the fake, Redis and the directory still go
        try:
            stop_all(c["nodes"])
        finally:
            proc.kill()
            proc.wait()
            c["redis"].kill()
            c["redis"].wait()
            shutil.rmtree(workdir, ignore_errors=True)


def stop_all(servers):
    """Stop every server in SERVERS; the first failure of their checks is
    raised once all of them are stopped."""
    first = None
    for server in servers:
        try:
            server.stop()
        except Exception as e:          # noqa: BLE001 - raised again below
            first = first or e
    if first:
        raise first


@pytest.fixture
def nodes(cluster, model):
    cluster["fake"].reset()
    model.reset()
    return cluster["nodes"]


def turn(server, rounds, path="/v1/responses", headers=ME, **extra):
    body = {"model": "m", "include": [OUTPUTS], "input": script_input(rounds),
            "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
    body.update(extra)
    status, hdrs, out = server.post(path, body, headers=headers)
    return status, hdrs, out


def test_local_container_keeps_state_across_turns(nodes):
    node1 = nodes[0]
    status, _, first = turn(node1, [[{"call": "x = 41"}], [{"text": "set"}]])
    assert status == 200, first
    status, _, second = turn(node1, [[{"call": "print(x + 1)"}], [{"text": "ok"}]],
                             previous_response_id=first["id"])
    assert status == 200, second
    assert calls_of(second)[0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]


def test_e2b_conversation_across_nodes(nodes, cluster):
    node1, node2 = nodes
    status, _, first = turn(node1, [[{"call": "x = 41"}], [{"text": "set"}]],
                            path="/e2b/v1/responses")
    assert status == 200, first
    cid = calls_of(first)[0]["container_id"]
    # the next turn lands on the other node: the same container, its state
    status, _, second = turn(node2, [[{"call": "print(x + 1)"}], [{"text": "ok"}]],
                             path="/e2b/v1/responses", previous_response_id=first["id"])
    assert status == 200, second
    assert (calls_of(second)[0]["container_id"],
            calls_of(second)[0]["outputs"]) == (cid, [{"type": "logs", "logs": "42\n"}])
    assert cluster["fake"].state()["created"] == 1
    # fed a file through node 2, which node 1's next turn reads
    from test_container_uploads import multipart
    body, ctype = multipart("n2.txt", b"from node 2")
    status, _, f = node2.request("POST", "/e2b/v1/containers/%s/files" % cid, body,
                                 dict(ME, **{"Content-Type": ctype}))
    assert (status, json.loads(f)["path"]) == (200, "/mnt/data/n2.txt")
    status, _, third = turn(node1, [[{"call": "print(open('/mnt/data/n2.txt').read())"}],
                                    [{"text": "ok"}]], path="/e2b/v1/responses",
                            previous_response_id=second["id"])
    assert (status, calls_of(third)[0]["outputs"]) == (
        200, [{"type": "logs", "logs": "from node 2\n"}])
    # both nodes list it, for its owner only; deleted through node 2
    for server in nodes:
        status, _, listing = server.request("GET", "/e2b/v1/containers", headers=ME)
        assert [c["id"] for c in json.loads(listing)["data"]] == [cid]
        status, _, listing = server.request("GET", "/e2b/v1/containers", headers=OTHER)
        assert json.loads(listing)["data"] == []
    status, _, gone = node2.request("DELETE", "/e2b/v1/containers/" + cid, headers=ME)
    assert (status, json.loads(gone)["deleted"]) == (200, True)
    # (its DELETE goes out from the child's worker pool: waited for)
    state = wait_until(lambda: (lambda st: st if st["deleted"] else None)(
        cluster["fake"].state()), "the sandbox's DELETE")
    assert (state["created"], state["deleted"], state["live"]) == (1, 1, [])
    status, _, body = node1.request("GET", "/e2b/v1/containers/" + cid, headers=ME)
    assert (status, json.loads(body)["status"]) == (200, "deleted")


def test_owners_apart_across_nodes(nodes):
    node1, node2 = nodes
    status, _, c = node1.post("/v1/containers", {"name": "mine"}, headers=ME)
    assert status == 200, c
    status, _, body = node2.request("GET", "/v1/containers/" + c["id"], headers=OTHER)
    assert (status, json.loads(body)["error"]) == (404, {
        "message": "Container with id '%s' not found." % c["id"],
        "type": "invalid_request_error", "param": None, "code": "container_not_found"})
    status, _, body = node2.request("GET", "/v1/containers/" + c["id"], headers=ME)
    assert (status, json.loads(body)["id"]) == (200, c["id"])


def test_expiry_ends_local_containers_on_their_nodes(nodes):
    """idle=2s: each node's claim ends its own local containers (their
    sandboxes' processes go), and the records read expired on both nodes.
    (That each due container is claimed once, whichever node asks first,
    the directory's C tests prove with two racing callers.)"""
    from test_containment import wait_no_sandbox_process
    for server in nodes:
        server.delete_containers_at("/v1/containers", ME)
    made = []
    for server in nodes:
        status, _, out = turn(server, [[{"call": "y = 1"}], [{"text": "ok"}]],
                              path="/brief/v1/responses")
        assert status == 200, out
        made.append(calls_of(out)[0]["container_id"])
    for server in nodes:
        assert wait_no_sandbox_process(server, timeout=30) == {}
    for cid in made:
        for server in nodes:
            status, _, body = server.request("GET", "/v1/containers/" + cid, headers=ME)
            assert (status, json.loads(body)["status"]) == (200, "expired")


def test_expiry_ends_e2b_containers(nodes, cluster):
    made = []
    for server in nodes:
        status, _, out = turn(server, [[{"call": "y = 1"}], [{"text": "ok"}]],
                              path="/e2bbrief/v1/responses")
        assert status == 200, out
        made.append(calls_of(out)[0]["container_id"])
    fake = cluster["fake"]
    # ended at E2B (by a node's claim, or by E2B's own timeout, which is the
    # same idle expiry), and expired in the directory
    wait_until(lambda: fake.state()["live"] == [], "the E2B sandboxes to end")
    def statuses():
        # listed, not retrieved: a retrieval is a use, and would keep them
        listing = json.loads(nodes[1].request("GET", "/v1/containers?limit=100",
                                              headers=ME)[2])
        return {c["id"]: c["status"] for c in listing["data"] if c["id"] in made}
    assert wait_until(lambda: statuses() == dict.fromkeys(made, "expired") or None,
                      "the containers to read expired")


def test_redis_outage_is_a_503_and_passes_through_what_needs_no_directory(nodes, cluster):
    node1 = nodes[0]
    redis = cluster["redis"]
    redis.send_signal(signal.SIGSTOP)            # stops answering: timeouts
    try:
        status, hdrs, out = turn(node1, [[{"call": "print(1)"}], [{"text": "x"}]])
        assert (status, hdrs.get("retry-after"), out["error"]) == (503, "5", {
            "message": "The container directory of this server is unavailable; retry "
                       "shortly.", "type": "server_error", "param": None,
            "code": "containers_unavailable"})
        # no tool, no directory: passed through
        status, _, out = node1.post("/v1/responses", {"model": "m", "input": script_input(
            [[{"text": "plain"}]])}, headers=ME)
        assert (status, out["output"][-1]["content"][0]["text"]) == (200, "plain")
        # a request without an owner needs no directory either
        status, _, out = turn(node1, [[{"call": "print(2)"}], [{"text": "ok"}]],
                              headers=ANONYMOUS)
        assert status == 200, out
    finally:
        redis.send_signal(signal.SIGCONT)
    # back by itself
    status, _, out = turn(node1, [[{"call": "print(3)"}], [{"text": "ok"}]])
    assert status == 200, out
    assert calls_of(out)[0]["outputs"] == [{"type": "logs", "logs": "3\n"}]


def test_a_shared_directory_needs_the_secret(model):
    server = Httpd("shared-nosecret", base_conf(model.port, """
CodeInterpreterDirectory redis://127.0.0.1:6399/0
"""))
    server.write_conf()
    out = server.configtest()
    assert out.returncode != 0
    assert ("CI0006: CodeInterpreterDirectory (%s:" % os.path.join(server.root, "httpd.conf")) \
        in out.stderr + out.stdout
    assert ("needs CodeInterpreterSecret: the nodes sharing a directory must share the "
            "secret that hashes owners and seals handles") in out.stderr + out.stdout


def test_a_local_container_is_bound_to_its_node(nodes):
    node1, node2 = nodes
    status, _, first = turn(node1, [[{"call": "x = 41"}], [{"text": "set"}]])
    assert status == 200, first
    cid = calls_of(first)[0]["container_id"]
    name1 = "127.0.0.1:%d" % node1.port
    want = {"message": "Container '%s' runs on node %s of this service, not on this one: "
                       "send the requests that use it there (the X-CodeInterpreter-Node "
                       "header names it)." % (cid, name1),
            "type": "invalid_request_error", "param": None, "code": "container_on_other_node"}
    # the next turn on the other node: told where to go, before round 1
    status, hdrs, out = turn(node2, [[{"call": "print(x)"}], [{"text": "x"}]],
                             previous_response_id=first["id"])
    assert (status, hdrs.get("x-codeinterpreter-node"), out["error"]) == (409, name1, want)
    tool = {"type": "code_interpreter", "container": cid}
    status, hdrs, out = turn(node2, [[{"call": "print(x)"}], [{"text": "x"}]],
                             tools=[tool])
    assert (status, hdrs.get("x-codeinterpreter-node"), out["error"]) == (409, name1, want)
    for method, path in (("GET", "/v1/containers/%s/files" % cid),
                         ("DELETE", "/v1/containers/%s" % cid)):
        status, hdrs, body = node2.request(method, path, headers=ME)
        assert (status, dict((k.lower(), v) for k, v in hdrs)["x-codeinterpreter-node"],
                json.loads(body)["error"]) == (409, name1, want), path
    # reading it is fine anywhere; on its own node, it goes on
    status, _, body = node2.request("GET", "/v1/containers/" + cid, headers=ME)
    assert (status, json.loads(body)["status"]) == (200, "running")
    status, _, second = turn(node1, [[{"call": "print(x + 1)"}], [{"text": "ok"}]],
                             previous_response_id=first["id"])
    assert calls_of(second)[0]["outputs"] == [{"type": "logs", "logs": "42\n"}]


LOAD = 300


def test_load_conversations_keep_their_state_on_random_nodes(nodes, cluster):
    """300 two-turn conversations at once, each turn on a random node: every
    conversation keeps its state, and every E2B sandbox made is deleted
    once. Run once, not under the sanitizers (they slow it tenfold)."""
    if os.environ.get("CI_SANITIZE"):
        pytest.skip("the load test runs once, in the plain build, not under ASan")
    fake = cluster["fake"]

    def conversation(i):
        rng = random.Random(i)
        me = {"Authorization": "Bearer sk-load-%d" % i}
        status, _, first = turn(rng.choice(nodes), [[{"call": "v = %d" % i}],
                                                    [{"text": "set"}]],
                                path="/e2b/v1/responses", headers=me)
        if status != 200:
            return "turn 1: %d %s" % (status, first)
        status, _, second = turn(rng.choice(nodes), [[{"call": "print(v * 2)"}],
                                                     [{"text": "ok"}]],
                                 path="/e2b/v1/responses", headers=me,
                                 previous_response_id=first["id"])
        if status != 200:
            return "turn 2: %d %s" % (status, second)
        cid = calls_of(first)[0]["container_id"]
        if (calls_of(second)[0]["container_id"], calls_of(second)[0]["outputs"]) != (
                cid, [{"type": "logs", "logs": "%d\n" % (2 * i)}]):
            return "conversation %d lost its state: %s" % (i, calls_of(second))
        return cid

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        done = list(pool.map(conversation, range(LOAD), timeout=120))
    took = time.monotonic() - started
    bad = [d for d in done if not d.startswith("cntr_")]
    assert bad == [], bad[:3]
    assert len(set(done)) == LOAD
    print("%d two-turn conversations on two nodes in %.1f s" % (LOAD, took))
    # every container deleted, through either node: each sandbox once
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(lambda i: random.Random(-i).choice(nodes).request(
            "DELETE", "/e2b/v1/containers/" + done[i],
            headers={"Authorization": "Bearer sk-load-%d" % i})[0], range(LOAD)))
    assert statuses == [200] * LOAD
    # (a sandbox's DELETE goes out from the child's worker pool: waited for)
    state = wait_until(lambda: (lambda st: st if st["deleted"] >= LOAD else None)(
        fake.state()), "every sandbox's DELETE")
    assert (state["created"], state["deleted"], state["live"]) == (LOAD, LOAD, [])


UNAVAILABLE = {"message": "The container directory of this server is unavailable; retry "
                          "shortly.", "type": "server_error", "param": None,
               "code": "containers_unavailable"}


def test_redis_killed_and_restarted_under_load(nodes, cluster):
    """Turns keep coming while Redis is killed and started again (empty: it
    saves nothing): each is answered in full or refused with the 503, no
    child dies, and the nodes serve again by themselves."""
    seen = []                         # (when, status) of every turn
    lock = threading.Lock()
    stop = threading.Event()

    def load(k):
        rng = random.Random(k)
        while not stop.is_set():
            me = {"Authorization": "Bearer sk-restart-%d" % k}
            status, hdrs, out = turn(rng.choice(nodes), [[{"call": "print(7)"}],
                                                         [{"text": "ok"}]], headers=me)
            ok = (status == 200 and calls_of(out)[0]["outputs"] ==
                  [{"type": "logs", "logs": "7\n"}]) or \
                 (status == 503 and hdrs.get("retry-after") == "5" and
                  out["error"] == UNAVAILABLE)
            with lock:
                seen.append((time.monotonic(), status, ok or out))

    threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(seen) >= 8, "turns before the outage")
        cluster["redis"].kill()
        cluster["redis"].wait()
        wait_until(lambda: any(s == 503 for _, s, _ in seen), "a turn refused in the outage")
        cluster["redis"] = redis_on(cluster["workdir"], cluster["redis_port"])
        back = time.monotonic()
        wait_until(lambda: sum(1 for w, s, _ in seen if w > back and s == 200) >= 8,
                   "turns served after Redis is back")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert [x for _, _, x in seen if x is not True] == []
    for server in nodes:
        assert "exit signal" not in open(server.error_log).read()


# ---- records changed in Redis by someone with write access to it --------

def rcli(cluster, *args):
    out = subprocess.run(["redis-cli", "-p", str(cluster["redis_port"]), *args],
                         capture_output=True, text=True, check=True)
    return out.stdout.rstrip("\n")


def record(cluster, cid):
    return json.loads(rcli(cluster, "GET", "ci:c:" + cid))


def rewrite(cluster, cid, rec):
    assert rcli(cluster, "SET", "ci:c:" + cid, json.dumps(rec), "KEEPTTL") == "OK"


def e2b_turn(server, code, headers, **extra):
    status, _, out = turn(server, [[{"call": code}], [{"text": "{{last_output}}"}]],
                          path="/e2b/v1/responses", headers=headers, **extra)
    assert status == 200, out
    return out


def test_a_record_given_to_another_owner_in_redis_reads_as_unknown(nodes, cluster):
    node1, node2 = nodes
    mine = calls_of(e2b_turn(node1, "secret = 'mine'", ME))[0]["container_id"]
    theirs = calls_of(e2b_turn(node1, "x = 1", OTHER))[0]["container_id"]
    rec = record(cluster, mine)
    rec["owner"] = record(cluster, theirs)["owner"]
    rewrite(cluster, mine, rec)
    for server in nodes:
        for who in (OTHER, ME):
            status, _, body = server.request("GET", "/e2b/v1/containers/" + mine,
                                             headers=who)
            assert (status, json.loads(body)["error"]["message"]) == (
                404, "Container with id '%s' not found." % mine)
        status, _, out = server.post("/e2b/v1/responses", {
            "model": "m", "input": script_input([[{"text": "never"}]]),
            "tools": [{"type": "code_interpreter", "container": mine}]}, headers=OTHER)
        assert (status, out["error"]["code"]) == (404, "container_not_found")
    assert "CI0842: the shared directory's record of container %s does not match" % mine \
        in node1.log()
    # its sandbox ends when its idle time passes; the suite's cleanup cannot
    # reach it as anyone's: deleted here at E2B
    cluster["fake"].remove_leftovers()


def test_a_handle_copied_into_another_record_opens_nothing(nodes, cluster):
    node1, node2 = nodes
    mine = calls_of(e2b_turn(node1, "secret = 'mine'", ME))[0]["container_id"]
    first = e2b_turn(node1, "x = 1", OTHER)
    theirs = calls_of(first)[0]["container_id"]
    [my_sandbox] = [c["id"] for c in cluster["fake"].state()["creates"]
                    if c["body"]["metadata"]["container"] == mine]
    rec = record(cluster, theirs)
    rec["handle"] = record(cluster, mine)["handle"]
    rewrite(cluster, theirs, rec)
    out = e2b_turn(node2, "print(globals().get('secret', 'nothing of theirs'))", OTHER,
                   previous_response_id=first["id"])
    assert calls_of(out)[0]["outputs"] == [{"type": "logs",
                                            "logs": "nothing of theirs\n"}]
    state = cluster["fake"].state()
    assert [e["sandbox_id"] for e in state["executes"]].count(my_sandbox) == 1
    assert "CI0804: a container's handle could not be opened" in node2.log()
    cluster["fake"].remove_leftovers()


def test_a_malformed_record_does_not_stop_the_others(nodes, cluster):
    node1, node2 = nodes
    cid = calls_of(e2b_turn(node1, "x = 1", ME))[0]["container_id"]
    rec = record(cluster, cid)
    del rec["memory_bytes"]
    rewrite(cluster, cid, rec)
    # every create on its node goes on, for every owner
    for who in (ME, OTHER):
        status, _, body = node1.request("POST", "/e2b/v1/containers",
                                        json.dumps({"name": "after"}), headers=who)
        assert status == 200, body
    status, _, body = node1.request("GET", "/e2b/v1/containers/" + cid, headers=ME)
    assert status == 404, body
    cluster["fake"].remove_leftovers()


def test_an_allowlist_widened_in_redis_reads_as_unknown(nodes, cluster):
    """A container's allowlist is in its record, covered by the record's
    authenticator: every node reports it, and one widened in Redis (a way
    out for the container's code) makes the record unknown."""
    node1, node2 = nodes
    policy = {"type": "allowlist", "allowed_domains": ["pypi.org"]}
    status, _, body = node1.request("POST", "/fenced/v1/containers",
                                    {"name": "fenced", "network_policy": policy}, headers=ME)
    assert status == 200, body
    cid = json.loads(body)["id"]
    status, _, body = node2.request("GET", "/fenced/v1/containers/" + cid, headers=ME)
    assert (status, json.loads(body)["network_policy"]) == (200, policy)
    rec = record(cluster, cid)
    assert rec["allowlist"] == "pypi.org"
    rec["allowlist"] = "pypi.org,*.evil.test"
    rewrite(cluster, cid, rec)
    for server in nodes:
        status, _, body = server.request("GET", "/fenced/v1/containers/" + cid, headers=ME)
        assert (status, json.loads(body)["error"]["message"]) == (
            404, "Container with id '%s' not found." % cid)
    assert "CI0842: the shared directory's record of container %s does not match" % cid \
        in node2.log()


class Monitor:
    """Redis' MONITOR on a connection of its own: the operations of the
    container directory (the "op" of each FCALL's request), as
    Redis saw them, in order. The nodes' own background questions
    (claim_due, which_gone) are left out."""
    BACKGROUND = {"claim_due", "which_gone"}
    OP = re.compile(r'\\"op\\":\\"(\w+)\\"')

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")
        self.sock.sendall(b"MONITOR\r\n")
        assert self.file.readline() == b"+OK\r\n"

    def ops_until(self, marker):
        """The operations seen before MARKER (an ECHO sent by the caller
        once what it counts is done)."""
        ops = []
        for line in self.file:
            line = line.decode(errors="replace")
            if '"ECHO"' in line and marker in line:
                return ops
            if '"FCALL"' in line or '"EVALSHA"' in line:
                ops += [op for op in self.OP.findall(line) if op not in self.BACKGROUND]
        raise AssertionError("MONITOR ended before " + marker)

    def close(self):
        self.sock.close()


def directory_ops(cluster, monitor, what):
    """What MONITOR saw of the directory up to now (WHAT is done: its
    answer was read)."""
    marker = "ci-test-" + secrets.token_hex(8)
    assert rcli(cluster, "ECHO", marker) == marker
    return monitor.ops_until(marker)


def test_a_chained_turn_asks_the_directory_twice(nodes, cluster):
    """A new conversation asks twice (make the container at the first call,
    record the response), and so does a chained turn in a local container
    (the response's container, found and held in one question; the
    response's record), whatever the number of executions: a request that
    holds its container marks no run busy, and its first call uses what the
    first question found. An E2B container is checked again at the first
    call (its sandbox may still answer while its deletion is on its way)."""
    node1 = nodes[0]
    mon = Monitor(cluster["redis_port"])
    try:
        directory_ops(cluster, mon, "nothing yet")
        for path in ("/v1/responses", "/e2b/v1/responses"):
            status, _, first = turn(node1, [[{"call": "x = 1"}], [{"call": "x += 1"}],
                                            [{"text": "set"}]], path=path)
            assert status == 200, first
            new = directory_ops(cluster, mon, "the first turn")
            status, _, second = turn(node1, [[{"call": "x += 1"}], [{"call": "print(x)"}],
                                             [{"text": "ok"}]], path=path,
                                     previous_response_id=first["id"])
            assert status == 200, second
            assert calls_of(second)[1]["outputs"] == [{"type": "logs", "logs": "3\n"}]
            chained = directory_ops(cluster, mon, "the chained turn")
            remote = path.startswith("/e2b")
            assert (path, new, chained) == (
                path, ["create"] + ["set_handle"] * remote + ["finish"],
                ["response"] + ["get"] * remote + ["finish"])
    finally:
        mon.close()


def test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call(nodes, model):
    """As with one node's directory (test_containers.gone_for_its_call): the
    turn found its local container and holds it; the caller deletes it on
    its node before the turn's first call. The first call does not ask
    Redis again, yet the call is not run: the node's supervisor dropped the
    container's shadow and does not take it on again."""
    status, _, first = turn(nodes[0], [[{"call": "x = 41"}], [{"text": "set"}]])
    assert status == 200, first
    gone_for_its_call(nodes[0], model, first, ME)
