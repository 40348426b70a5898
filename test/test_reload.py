"""Graceful reloads under load (requests, and conversations in containers),
key rotation, the tool removed, and a child killed in the middle of an E2B
execution: every E2B sandbox made is deleted, with the key it was made with
(what a dead child left, by a live child)."""
import http.client
import json
import os
import re
import signal
import threading
import time

import pytest

from conftest import (ANONYMOUS, CLIENT_HEADERS, TOOL, FakeE2B, Httpd, base_conf,
                      script_input, start_helper)

KEY_A = "e2b_reload_key_a_0123456789"
KEY_B = "e2b_reload_key_b_9876543210"


@pytest.fixture(scope="module")
def e2b():
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY_A, "--api-key", KEY_B)
    yield FakeE2B(proc, port)
    proc.kill()
    proc.wait()


def conf(model_port, e2b_port, key_file, with_e2b=True, idle=None):
    tool = ("CodeInterpreterSandbox cloud provider=e2b api_key=file:%s "
            "api_base=http://127.0.0.1:%d sandbox_url=http://127.0.0.1:%d timeout=30%s\n"
            % (key_file, e2b_port, e2b_port, " idle=%s" % idle if idle else "")
            ) if with_e2b else ""
    return base_conf(model_port, """
StartServers 2
%s
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter %s
</Location>
""" % (tool, model_port, "cloud" if with_e2b else "On"))


@pytest.fixture
def server(model, e2b, request):
    name = "reload-" + request.node.name[:20]
    server = Httpd(name, "", fakes=[e2b])
    key_file = os.path.join(server.root, "e2b.key")
    os.makedirs(server.root, exist_ok=True)
    with open(key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.key_file = key_file
    server.write_conf(conf(model.port, e2b.port, key_file))
    e2b.reset()
    server.start()
    yield server
    server.stop()


def one_request(server, code="print(1)", headers=ANONYMOUS):
    """One request, by default of a caller without an owner: the request's
    own E2B sandbox, deleted when it ends (or by the reaper when its child
    dies)."""
    return server.post("/e2b/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])},
        timeout=60, headers=headers)


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.1)


RECONFIGURED = {"error": {
    "message": "The server is reloading its configuration; retry the request.",
    "type": "server_error", "param": None, "code": "sandbox_reconfigured"}}


def served(status, body):
    """Whether one_request's answer is the right one."""
    return (status == 200 and isinstance(body, dict)
            and [o.get("type") for o in body.get("output") or []] ==
            ["code_interpreter_call", "message"]
            and body["output"][0]["status"] == "completed"
            and body["output"][1]["content"][0]["text"] == "1\n")


def test_load_during_three_reloads(server, model, e2b):
    requests = []              # every request: when it was sent, and what came of it
    stop = threading.Event()

    def attempt():
        try:
            status, headers, body = one_request(server)
        except Exception as exc:          # counted: a failure like any other
            return repr(exc)
        if (status, body) == (503, RECONFIGURED) and headers.get("retry-after") == "1" \
                and headers.get("connection") == "close":
            return "refused"              # by an older child, caught in a reload
        return (status, body)

    def client():
        while not stop.is_set():
            sent = time.time()
            # a refused request is retried (at once: its new connection
            # reaches a child of the new generation), as a client would
            outcomes = [attempt()]
            while outcomes[-1] == "refused" and len(outcomes) < 4:
                outcomes.append(attempt())
            ok = isinstance(outcomes[-1], tuple) and served(*outcomes[-1])
            requests.append({"sent": sent, "answered": time.time(), "ok": ok,
                             "what": outcomes, "refused": outcomes.count("refused"),
                             "container": ok and outcomes[-1][1]["output"][0]["container_id"]})

    def served_since(t, n=40):
        return sum(1 for r in list(requests) if r["sent"] >= t and r["ok"]) >= n

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    # Each reload: (when it began, when it was done, the key current after it;
    # None once the e2b tool is removed).
    reloads = []
    try:
        since = time.time()
        for key in (KEY_B, KEY_A, None):
            wait_for(lambda: served_since(since), 60, "requests served before the reload")
            began = time.time()
            if key is None:
                server.write_conf(conf(model.port, e2b.port, server.key_file, with_e2b=False))
            else:
                with open(server.key_file, "w") as f:
                    f.write(key + "\n")
            server.graceful()
            since = time.time()
            reloads.append((began, since, key))
        wait_for(lambda: served_since(since), 60, "requests served after the last reload")
    finally:
        stop.set()
        for t in threads:
            t.join()
    failures = [r["what"] for r in requests if not r["ok"]]
    assert failures == [], "%d of %d requests failed: %s" % (
        len(failures), len(requests), failures[:5])
    # every refusal came from an older child, and only after a reload began
    refused = [r for r in requests if r["refused"]]
    assert sum(r["refused"] for r in refused) == server.log().count(
        "CI0104: sandbox tool cloud was reconfigured by a reload; refused in this older child")
    assert all(r["answered"] > reloads[0][0] for r in refused), refused
    wait_for(lambda: e2b.state()["live"] == [], 30, "sandboxes left behind")
    state = e2b.state()
    assert state["created"] == state["deleted"]
    key_of = {c["body"]["metadata"]["request"]: c["api_key"] for c in state["creates"]}
    assert len(key_of) == state["created"]
    assert set(key_of) <= {r["container"] for r in requests}
    # Each request created its sandbox with a key current at some moment
    # between its sending and its answer (none once the tool was removed):
    # never with a key retired by a reload done before it was sent.
    spans, start, old = [], float("-inf"), KEY_A
    for began, done, key in reloads:
        spans += [(start, began, {old}), (began, done, {old, key})]
        start, old = done, key
    spans.append((start, float("inf"), {old}))
    wrong = []
    for r in requests:
        keys = set().union(*(k for lo, hi, k in spans if lo < r["answered"] and hi > r["sent"]))
        if key_of.get(r["container"]) not in keys:
            wrong.append((r["sent"], r["answered"], key_of.get(r["container"]), sorted(
                map(str, keys))))
    assert wrong == [], "created with the wrong key (reloads %s): %s" % (reloads, wrong[:5])


@pytest.fixture
def idle_server(model, e2b):
    """The server with E2B containers idle 10 s from its start (a reload
    that changes only idle= leaves an older child making containers with
    its own idle time, as documented)."""
    server = Httpd("reload-idle", "", fakes=[e2b])
    os.makedirs(server.root, exist_ok=True)
    server.key_file = os.path.join(server.root, "e2b.key")
    with open(server.key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.write_conf(conf(model.port, e2b.port, server.key_file, idle="10s"))
    e2b.reset()
    server.start()
    yield server
    server.stop()


def test_conversations_during_three_reloads_leave_no_sandbox(idle_server, model, e2b):
    """Six clients, three of them two-turn conversations (containers, idle
    10 s), through a key rotation, a rotation back and the removal of the
    tool: once every container's idle time has passed, every E2B sandbox
    made is deleted, with the key it was made with."""
    server = idle_server
    e2b.control(timeouts_ignored=True)     # whatever ends, the module ended
    answered = []
    stop = threading.Event()

    def attempt(body, headers):
        for _ in range(4):     # refused by an older child: retried at once
            status, hdrs, out = server.post("/e2b/v1/responses", body, timeout=60,
                                            headers=headers)
            if (status, out) != (503, RECONFIGURED):
                return status, out
        return status, out

    def anonymous():
        while not stop.is_set():
            answered.append(attempt({"model": "m", "tools": [TOOL], "input": script_input(
                [[{"call": "print(1)"}], [{"text": "{{last_output}}"}]])}, ANONYMOUS))

    def conversation(n):
        me = {"Authorization": "Bearer sk-reload-conversation-%d" % n}
        while not stop.is_set():
            status, first = attempt({"model": "m", "tools": [TOOL], "input": script_input(
                [[{"call": "x = 1"}], [{"text": "set"}]])}, me)
            answered.append((status, first))
            if status == 200:
                answered.append(attempt({
                    "model": "m", "tools": [TOOL], "previous_response_id": first["id"],
                    "input": script_input([[{"call": "print(2)"}],
                                           [{"text": "{{last_output}}"}]])}, me))

    reloads = []
    threads = [threading.Thread(target=anonymous) for _ in range(3)] + \
        [threading.Thread(target=conversation, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        for key in (KEY_B, KEY_A, None):
            since = len(answered)
            wait_for(lambda: len(answered) - since >= 30, 60, "requests served")
            if key is None:
                server.write_conf(conf(model.port, e2b.port, server.key_file,
                                       with_e2b=False))
            else:
                with open(server.key_file, "w") as f:
                    f.write(key + "\n")
            began = time.time()
            server.graceful()
            reloads.append((began, key))
        since = len(answered)
        wait_for(lambda: len(answered) - since >= 30, 60, "requests served after")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert [a for a in answered if a[0] != 200] == []
    # every container's idle time (10 s) passes, and its claim (once a second)
    deadline = time.monotonic() + 60
    while e2b.state()["live"] and time.monotonic() < deadline:
        time.sleep(0.2)
    state = e2b.state()
    assert state["live"] == [], "left (reloads at %s): %s" % (
        [round(t, 2) for t, _ in reloads],
        [(sb["metadata"], sb["api_key"][-4:], round(sb["created_at"], 2))
         for sb in state["sandboxes"].values()])
    made = {c["id"]: c["api_key"] for c in state["creates"] if c["status"] == 201}
    gone = {d["id"]: d["api_key"] for d in state["deletes"] if d["status"] == 204}
    assert (state["created"], state["deleted"]) == (len(made), len(made))
    assert gone == made, "deleted with another key: %s" % sorted(
        i for i in made if gone.get(i) != made[i])


def kill_child_mid_execution(server, e2b, gate):
    """Kill -9 the child running a request's code (held by the fake E2B at
    GATE); the client must see its connection die, without an answer."""
    result = {}

    def run():
        try:
            result["r"] = one_request(server)
        except ConnectionError as exc:     # what the death of the child must look like
            result["r"] = exc

    e2b.control(hold_execute=gate)        # the code runs until the child is gone
    t = threading.Thread(target=run)
    t.start()
    e2b.until(lambda s: s["held"], "the execution to start")
    started = [l for l in server.log().splitlines() if "CI0302:" in l]
    pid = int(re.search(r"\[pid (\d+):", started[-1]).group(1))
    server.killed.add(pid)          # not a crash
    os.kill(pid, signal.SIGKILL)
    t.join()
    assert isinstance(result["r"], ConnectionError), result["r"]


def test_killed_child_sandbox_is_deleted(server, model, e2b):
    kill_child_mid_execution(server, e2b, "killed")
    wait_for(lambda: e2b.state()["live"] == [], 30, "the orphaned sandbox was not deleted")
    state = e2b.state()
    assert [(d["api_key"], d["status"]) for d in state["deletes"]] == [(KEY_A, 204)]
    # (The reaper logs once the DELETE has been answered: the fake records it
    # a moment before.)
    wait_for(lambda: "CI0403:" in server.log(), 10, "no CI0403 line")
    assert "CI0403: deleted remote sandbox of container" in server.log()
    e2b.release("killed")
    # The server keeps serving.
    status, _, body = one_request(server)
    assert served(status, body), (status, body)


def test_old_child_creates_nothing_with_a_retired_key(model, e2b, request):
    # prefork keeps an idle keep-alive connection in its old child across a
    # graceful reload: a request that arrives there after the reload must not
    # create a sandbox with the key the reload retired.
    server = Httpd("reload-keepalive", "", mpm="prefork", fakes=[e2b])
    key_file = os.path.join(server.root, "e2b.key")
    os.makedirs(server.root, exist_ok=True)
    with open(key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.write_conf(conf(model.port, e2b.port, key_file).replace(
        "StartServers 2", "StartServers 2\nKeepAliveTimeout 30"))
    e2b.reset()
    server.start()
    try:
        body = json.dumps({"model": "m", "tools": [TOOL], "input": script_input(
            [[{"call": "print(1)"}], [{"text": "ok"}]])})
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/e2b/v1/responses", body, dict(CLIENT_HEADERS, **ANONYMOUS))
        first = conn.getresponse()
        assert first.status == 200
        first.read()
        with open(key_file, "w") as f:
            f.write(KEY_B + "\n")
        server.graceful()
        # the old child answers on the kept connection: a refusal to retry,
        # and the connection closed so that the retry reaches a new child
        conn.request("POST", "/e2b/v1/responses", body, dict(CLIENT_HEADERS, **ANONYMOUS))
        again = conn.getresponse()
        assert again.status == 503
        assert json.loads(again.read()) == {"error": {
            "message": "The server is reloading its configuration; retry the request.",
            "type": "server_error", "param": None, "code": "sandbox_reconfigured"}}
        assert again.getheader("Retry-After") == "1"
        assert again.getheader("Connection") == "close"
        conn.close()
        assert "CI0104: sandbox tool cloud was reconfigured by a reload; refused in this " \
            "older child" in server.log()
        status, _, answer = one_request(server)      # a new connection: a new child
        assert served(status, answer), (status, answer)
        wait_for(lambda: e2b.state()["live"] == [], 15, "sandboxes left behind")
        assert [c["api_key"] for c in e2b.state()["creates"]] == [KEY_A, KEY_B]
    finally:
        server.stop()


def test_reaper_says_deleted_only_once_it_is(server, model, e2b):
    """A dead child's sandbox whose delete fails: the reaper logs the failure
    (CI0405) and tries again, never a CI0403 "deleted" line, until a delete
    succeeds."""
    e2b.control(delete_status=500)
    kill_child_mid_execution(server, e2b, "orphan")
    wait_for(lambda: "CI0405:" in server.log(), 30, "no CI0405 line")
    [line] = [l for l in server.log().splitlines() if "CI0405:" in l][:1]
    assert "could not be deleted (the E2B sandbox service answered HTTP 500); " \
           "trying again" in line
    assert "CI0403:" not in server.log()
    assert e2b.state()["live"] != []
    # The service recovers: the next attempt deletes it, and only then CI0403.
    e2b.control(delete_status=None)
    wait_for(lambda: e2b.state()["live"] == [], 30, "the orphaned sandbox was not deleted")
    wait_for(lambda: "CI0403:" in server.log(), 10, "no CI0403 line")
    assert all(d["status"] == 500 for d in e2b.state()["deletes"][:-1])
    assert e2b.state()["deletes"][-1]["status"] == 204
    e2b.release("orphan")
