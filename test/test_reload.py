"""Graceful reloads under load, key rotation, and a child killed in the
middle of an E2B execution: what it left is deleted by a live child."""
import http.client
import json
import os
import re
import signal
import threading
import time

import pytest

from conftest import CLIENT_HEADERS, TOOL, Httpd, base_conf, script_input, start_helper

KEY_A = "e2b_reload_key_a_0123456789"
KEY_B = "e2b_reload_key_b_9876543210"


@pytest.fixture(scope="module")
def e2b():
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY_A, "--api-key", KEY_B)

    class Fake:
        def call(self, method, path, body=None):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body=json.dumps(body) if body is not None else None)
            data = conn.getresponse().read()
            conn.close()
            return json.loads(data) if data else None

        def state(self):
            return self.call("GET", "/_state")

    fake = Fake()
    fake.port = port
    yield fake
    proc.kill()
    proc.wait()


def conf(model_port, e2b_port, key_file, with_e2b=True):
    tool = ("CodeInterpreterSandbox cloud provider=e2b api_key=file:%s "
            "api_base=http://127.0.0.1:%d sandbox_url=http://127.0.0.1:%d timeout=30\n"
            % (key_file, e2b_port, e2b_port)) if with_e2b else ""
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
    server = Httpd(name, "")
    key_file = os.path.join(server.root, "e2b.key")
    os.makedirs(server.root, exist_ok=True)
    with open(key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.key_file = key_file
    server.write_conf(conf(model.port, e2b.port, key_file))
    e2b.call("POST", "/_reset")
    server.start()
    yield server
    server.stop()


def one_request(server, code="print(1)"):
    return server.post("/e2b/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])},
        timeout=60)


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.1)


def test_load_during_three_reloads(server, model, e2b):
    failures, done = [], []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            status, _, body = one_request(server)
            if status != 200 or body["output"][0]["status"] != "completed":
                failures.append((status, body))
            done.append(status)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    reloads = []
    try:
        # Each reload: (when it began, when it was done, the key it retired).
        time.sleep(4)
        began = time.time()
        with open(server.key_file, "w") as f:
            f.write(KEY_B + "\n")
        server.graceful()                      # rotate A -> B
        reloads.append((began, time.time(), KEY_A))
        time.sleep(5)
        began = time.time()
        with open(server.key_file, "w") as f:
            f.write(KEY_A + "\n")
        server.graceful()                      # and back
        reloads.append((began, time.time(), KEY_B))
        time.sleep(5)
        began = time.time()
        server.write_conf(conf(model.port, e2b.port, server.key_file, with_e2b=False))
        server.graceful()                      # the e2b tool removed
        reloads.append((began, time.time(), None))
        time.sleep(6)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == []
    assert len(done) > 20
    wait_for(lambda: e2b.state()["live"] == [], 30, "sandboxes left behind")
    state = e2b.state()
    assert state["created"] == state["deleted"]
    creates = state["creates"]
    # No create with a retired key from a request accepted after the reload
    # that retired it (requests are short: none two seconds after it).
    for (_, done_at, retired), (next_began, _, _) in zip(reloads[:2], reloads[1:]):
        window = [c for c in creates if done_at + 2 < c["time"] < next_began]
        assert window, "no sandbox was created between two reloads"
        late = [c for c in window if c["api_key"] == retired]
        assert late == [], "created with a retired key after the reload: %s" % [
            (round(c["time"] - done_at, 2), c["api_key"][-4:]) for c in late][:5]
    # After the tool was removed, nothing is created on E2B at all.
    assert [c for c in creates if c["time"] > reloads[2][1] + 2] == []


def test_killed_child_sandbox_is_deleted(server, model, e2b):
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "r", _swallow(lambda: one_request(server, "import time\ntime.sleep(25)"))))
    t.start()
    wait_for(lambda: e2b.state()["live"] != [] and e2b.state()["executes"], 15,
             "the execution never started")
    started = [l for l in server.log().splitlines() if "CI0302:" in l]
    pid = int(re.search(r"\[pid (\d+):", started[-1]).group(1))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: e2b.state()["live"] == [], 30, "the orphaned sandbox was not deleted")
    state = e2b.state()
    assert [d["api_key"] for d in state["deletes"]] == [KEY_A]
    # (The reaper logs once the DELETE has been answered: the fake records it
    # a moment before.)
    wait_for(lambda: "CI0403:" in server.log(), 10, "no CI0403 line")
    assert "CI0403: deleted remote sandbox of container" in server.log()
    t.join()
    # The server keeps serving.
    status, _, body = one_request(server)
    assert status == 200 and body["output"][0]["status"] == "completed"


def _swallow(fn):
    try:
        return fn()
    except Exception as exc:          # the connection dies with the child
        return exc


def test_old_child_creates_nothing_with_a_retired_key(model, e2b, request):
    # prefork keeps an idle keep-alive connection in its old child across a
    # graceful reload: a request that arrives there after the reload must not
    # create a sandbox with the key the reload retired.
    server = Httpd("reload-keepalive", "", mpm="prefork")
    key_file = os.path.join(server.root, "e2b.key")
    os.makedirs(server.root, exist_ok=True)
    with open(key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.write_conf(conf(model.port, e2b.port, key_file).replace(
        "StartServers 2", "StartServers 2\nKeepAliveTimeout 30"))
    e2b.call("POST", "/_reset")
    server.start()
    try:
        body = json.dumps({"model": "m", "tools": [TOOL], "input": script_input(
            [[{"call": "print(1)"}], [{"text": "ok"}]])})
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/e2b/v1/responses", body, CLIENT_HEADERS)
        first = conn.getresponse()
        assert first.status == 200
        first.read()
        with open(key_file, "w") as f:
            f.write(KEY_B + "\n")
        server.graceful()
        try:
            conn.request("POST", "/e2b/v1/responses", body, CLIENT_HEADERS)
            again = conn.getresponse()
            assert again.status == 503
            assert json.loads(again.read())["error"]["code"] == "sandbox_reconfigured"
        except (http.client.RemoteDisconnected, ConnectionError):
            pass                        # the old child closed instead of answering
        conn.close()
        wait_for(lambda: "CI0104: sandbox tool cloud was reconfigured by a reload" in
                 server.log(), 10, "the old child did not refuse")
        status, _, answer = one_request(server)      # a new connection: a new child
        assert status == 200 and answer["output"][0]["status"] == "completed"
        wait_for(lambda: e2b.state()["live"] == [], 15, "sandboxes left behind")
        assert [c["api_key"] for c in e2b.state()["creates"]] == [KEY_A, KEY_B]
    finally:
        server.stop()
