"""Self-test of the fake E2B service (test/fake_e2b.py)."""

import base64
import http.client
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_e2b  # noqa: E402

KEY = "e2b_test_key"


@pytest.fixture(scope="module")
def server():
    srv, port = fake_e2b.start(api_keys=(KEY, "e2b_other_key"))
    yield srv
    srv.stop()


@pytest.fixture
def fake(server):
    server.reset()
    return Client(server.server_address[1])


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def request(self, method, path, body=None, headers=None, chunked=False, conn=None):
        conn = conn or self.conn
        headers = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        if chunked and data is not None:
            # split into several chunks
            pieces = [data[i:i + 7] for i in range(0, len(data), 7)]
            headers["Transfer-Encoding"] = "chunked"
            conn.request(method, path, body=iter(pieces), headers=headers, encode_chunked=True)
        else:
            conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp, raw

    def json(self, method, path, body=None, key=KEY, **kw):
        headers = kw.pop("headers", {})
        if key is not None:
            headers["X-API-Key"] = key
        resp, raw = self.request(method, path, body, headers=headers, **kw)
        return resp.status, (json.loads(raw) if raw else None), resp

    def create(self, path="/sandboxes", body=None, **kw):
        body = body or {"templateID": "code-interpreter-v1", "timeout": 300, "secure": True}
        status, reply, _ = self.json("POST", path, body, **kw)
        assert status == 201, reply
        return reply

    def exec_headers(self, sb):
        h = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999"}
        if sb.get("envdAccessToken"):
            h["X-Access-Token"] = sb["envdAccessToken"]
        if sb.get("trafficAccessToken"):
            h["E2B-Traffic-Access-Token"] = sb["trafficAccessToken"]
        return h

    def execute_raw(self, sb, code, extra=None, headers=None, conn=None):
        body = {"code": code}
        body.update(extra or {})
        resp, raw = self.request("POST", "/execute", body,
                                 headers=headers if headers is not None else self.exec_headers(sb),
                                 conn=conn)
        return resp, raw

    def execute(self, sb, code, **kw):
        resp, raw = self.execute_raw(sb, code, **kw)
        assert resp.status == 200, raw
        return parse_lines(raw)

    def state(self):
        status, st, _ = self.json("GET", "/_state", key=None)
        assert status == 200
        return st

    def control(self, **switches):
        status, reply, _ = self.json("POST", "/_control", switches, key=None)
        assert status == 200, reply
        return reply


def parse_lines(raw):
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


def types(lines):
    return [line["type"] for line in lines]


# ---------------------------------------------------------------------------

def test_cli_prints_ready_and_accepts_repeated_keys():
    proc = subprocess.Popen(
        [sys.executable, os.path.join(os.path.dirname(__file__), "fake_e2b.py"),
         "--port", "0", "--api-key", "k_one", "--api-key", "k_two", "--domain", "e2b.test"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.fullmatch(r"READY (\d+)\n", line)
        assert m, line
        c = Client(int(m.group(1)))
        for key in ("k_one", "k_two"):
            assert c.create(key=key)["domain"] == "e2b.test"
        status, reply, _ = c.json("POST", "/sandboxes", {"templateID": "t"}, key=KEY)
        assert status == 401
        assert reply == {"code": 401, "message": "Invalid API key"}
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.stderr.read() == ""  # quiet without --verbose


def test_create_on_both_paths_and_with_chunked_body(fake, server):
    a = fake.create("/sandboxes")
    body = {"templateID": "code-interpreter-v1", "timeout": 120, "secure": True,
            "allow_internet_access": False, "metadata": {"owner": "t1"}, "envVars": {"A": "1"}}
    b = fake.create("/v2/sandboxes", body=body, chunked=True, key="e2b_other_key")
    for sb in (a, b):
        assert re.fullmatch(r"i[a-z0-9]{19}", sb["sandboxID"])
        assert sb["clientID"] == "6532622b"
        assert sb["envdVersion"] == "0.2.0"
        assert sb["alias"] == "code-interpreter-v1"
        assert sb["templateID"] == "code-interpreter-v1"
        assert sb["envdAccessToken"] and sb["trafficAccessToken"]
        # like the service, the answer names where sandboxes live: here, loopback
        assert sb["domain"] == "localhost"
    assert a["sandboxID"] != b["sandboxID"]
    assert a["envdAccessToken"] != b["envdAccessToken"]
    st = fake.state()
    assert st["created"] == 2 and sorted(st["live"]) == sorted([a["sandboxID"], b["sandboxID"]])
    assert [c["path"] for c in st["creates"]] == ["/sandboxes", "/v2/sandboxes"]
    assert [c["api_key"] for c in st["creates"]] == [KEY, "e2b_other_key"]
    assert st["creates"][1]["body"] == body and st["creates"][1]["chunked"] is True
    assert st["creates"][1]["headers"]["x-api-key"] == "e2b_other_key"
    sbox = server.sandboxes[b["sandboxID"]]
    assert 119 < sbox.expires_at - time.time() <= 120
    assert sbox.metadata == {"owner": "t1"}


def test_create_validation_and_auth(fake):
    status, reply, _ = fake.json("POST", "/sandboxes", {"timeout": 10})
    assert status == 400 and reply["code"] == 400 and reply["message"]
    status, reply, _ = fake.json("POST", "/sandboxes", {"templateID": "x", "timeout": "10"})
    assert status == 400
    status, reply, _ = fake.json("POST", "/sandboxes", {"templateID": "x"}, key="wrong")
    assert (status, reply) == (401, {"code": 401, "message": "Invalid API key"})
    status, reply, _ = fake.json("POST", "/v2/sandboxes", {"templateID": "x"}, key=None)
    assert (status, reply) == (401, {"code": 401, "message": "Invalid API key"})
    sb = fake.create()
    status, reply, _ = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"], key="wrong")
    assert status == 401
    st = fake.state()
    assert st["created"] == 1 and st["deleted"] == 0
    assert [c["status"] for c in st["creates"]] == [400, 400, 401, 401, 201]


def test_execute_keeps_state_and_line_order(fake, server):
    sb = fake.create()
    first = fake.execute(sb, "x = 41")
    assert first == [{"type": "number_of_executions", "execution_count": 1},
                     {"type": "end_of_execution"}]
    second = fake.execute(sb, "print('hello')\nprint('world')\nx + 1")
    assert types(second) == ["number_of_executions", "stdout", "stdout", "result", "end_of_execution"]
    assert second[0]["execution_count"] == 2
    assert [l["text"] for l in second[1:3]] == ["hello\n", "world\n"]
    assert all(isinstance(l["timestamp"], int) for l in second[1:3])
    assert second[1]["timestamp"] <= second[2]["timestamp"]
    assert second[3] == {"type": "result", "is_main_result": True, "text": "42"}
    assert server.sandboxes[sb["sandboxID"]].kernel["x"] == 41
    # a None trailing value gives no result; stderr is its own stream
    third = fake.execute(sb, "import sys\nsys.stderr.write('oops\\n')\nNone")
    assert types(third) == ["number_of_executions", "stderr", "end_of_execution"]
    assert third[1]["text"] == "oops\n"
    st = fake.state()
    assert len(st["executes"]) == 3 and st["executes"][0]["sandbox_id"] == sb["sandboxID"]
    assert st["leaks"] == []


def test_stream_has_no_content_type_and_is_chunked(fake):
    sb = fake.create()
    resp, raw = fake.execute_raw(sb, "1")
    assert resp.status == 200
    assert resp.getheader("Content-Type") is None
    assert resp.getheader("Transfer-Encoding") == "chunked"
    assert raw.endswith(b'{"type": "end_of_execution"}\n')


def test_sandboxes_have_separate_kernels_and_run_concurrently(fake):
    a, b = fake.create(), fake.create()
    fake.execute(a, "v = 'a'")
    fake.execute(b, "v = 'b'")
    out = {}

    def run(sb, name):
        c = Client(fake.port)
        out[name] = c.execute(sb, "print(v)")

    # both held at once: they run side by side
    fake.control(hold_execute="both")
    threads = [threading.Thread(target=run, args=(a, "a")), threading.Thread(target=run, args=(b, "b"))]
    for t in threads:
        t.start()
    wait_state(fake, lambda s: sorted(h["sandbox_id"] for h in s["held"]) ==
               sorted([a["sandboxID"], b["sandboxID"]]), "both executions held")
    fake.json("POST", "/_release", {"gate": "both"}, key=None)
    for t in threads:
        t.join()
    assert [l["text"] for l in out["a"] if l["type"] == "stdout"] == ["a\n"]
    assert [l["text"] for l in out["b"] if l["type"] == "stdout"] == ["b\n"]


def test_exception_gives_error_line(fake):
    sb = fake.create()
    lines = fake.execute(sb, "print('before')\n1/0\nprint('after')")
    assert types(lines) == ["number_of_executions", "stdout", "error", "end_of_execution"]
    err = lines[2]
    assert err["name"] == "ZeroDivisionError" and err["value"] == "division by zero"
    assert err["traceback"].startswith("Traceback (most recent call last):\n")
    assert "1/0" in err["traceback"] and "fake_e2b" not in err["traceback"]
    lines = fake.execute(sb, "def f(:\n  pass")
    assert types(lines) == ["number_of_executions", "error", "end_of_execution"]
    assert lines[1]["name"] == "SyntaxError"


def test_env_vars_from_create_and_execute(fake):
    sb = fake.create(body={"templateID": "code-interpreter-v1", "envVars": {"FAKE_A": "1"}})
    lines = fake.execute(sb, "import os\n(os.environ.get('FAKE_A'), os.environ.get('FAKE_B'))",
                         extra={"env_vars": {"FAKE_B": "2"}})
    assert lines[1]["text"] == "('1', '2')"
    assert "FAKE_A" not in os.environ and "FAKE_B" not in os.environ


def test_png_marker_emits_display_result(fake):
    sb = fake.create()
    lines = fake.execute(sb, "print('__FAKE_PNG__')")
    assert types(lines) == ["number_of_executions", "stdout", "result", "end_of_execution"]
    res = lines[2]
    assert res["is_main_result"] is False and set(res) == {"type", "is_main_result", "png"}
    assert base64.b64decode(res["png"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_keepalive_lines_during_long_execution(fake):
    sb = fake.create()
    fake.control(keepalive_interval=0.2)
    lines = fake.execute(sb, "import time\ntime.sleep(0.9)\nprint('done')")
    t = types(lines)
    assert t[0] == "number_of_executions" and t[-1] == "end_of_execution"
    assert t.count("keepalive") >= 2
    assert t.index("stdout") > t.index("keepalive")


def test_data_plane_auth_and_leak_recording(fake):
    sb = fake.create()
    good = fake.exec_headers(sb)
    resp, raw = fake.execute_raw(sb, "1", headers=dict(good, **{"X-Access-Token": "nope"}))
    assert (resp.status, raw) == (401, b"unauthorized")
    no_traffic = {k: v for k, v in good.items() if k != "E2B-Traffic-Access-Token"}
    resp, raw = fake.execute_raw(sb, "1", headers=no_traffic)
    assert resp.status == 401
    resp, raw = fake.execute_raw(sb, "1", headers=dict(good, **{"E2b-Sandbox-Id": "i" + "0" * 19}))
    assert (resp.status, raw) == (502, b"sandbox not found")
    resp, raw = fake.execute_raw(sb, "1", extra={"context_id": "default", "language": "python"})
    assert resp.status == 400 and resp.getheader("Content-Type").startswith("text/plain")
    resp, raw = fake.execute_raw(sb, "1", extra={"context_id": "nope"})
    assert resp.status == 404
    assert fake.state()["leaks"] == []
    resp, raw = fake.execute_raw(sb, "1", headers=dict(good, **{"X-API-Key": KEY}))
    assert resp.status == 200
    leaks = fake.state()["leaks"]
    assert len(leaks) == 1 and leaks[0]["plane"] == "data" and leaks[0]["what"] == "api_key"
    # an access token sent to the control plane is a leak too
    fake.json("GET", "/sandboxes/" + sb["sandboxID"], headers={"X-Access-Token": sb["envdAccessToken"]})
    leaks = fake.state()["leaks"]
    assert len(leaks) == 2 and leaks[1]["plane"] == "control" and leaks[1]["what"] == "access_token"


def test_delete_then_404(fake):
    sb = fake.create()
    status, body, resp = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert status == 204 and body is None
    status, body, _ = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert status == 404
    assert body == {"code": 404, "message": 'sandbox "%s" not found' % sb["sandboxID"]}
    resp, raw = fake.execute_raw(sb, "1")
    assert resp.status == 502
    st = fake.state()
    assert st["deleted"] == 1 and st["live"] == []
    peer = "%s:%d" % fake.conn.sock.getsockname()[:2]
    assert st["deletes"] == [
        {"id": sb["sandboxID"], "api_key": KEY, "status": 204, "peer": peer},
        {"id": sb["sandboxID"], "api_key": KEY, "status": 404, "peer": peer}]


def test_timeout_inspect_list_and_expiry(fake):
    a = fake.create(body={"templateID": "code-interpreter-v1", "metadata": {"tag": "x", "n": "1"}})
    b = fake.create(body={"templateID": "code-interpreter-v1", "metadata": {"tag": "y"}})
    status, info, _ = fake.json("GET", "/sandboxes/" + a["sandboxID"])
    assert status == 200 and info["state"] == "running" and info["metadata"] == {"tag": "x", "n": "1"}
    assert {"templateID", "sandboxID", "clientID", "startedAt", "endAt"} <= set(info)
    status, found, _ = fake.json("GET", "/v2/sandboxes?metadata=tag%3Dx%26n%3D1&limit=10")
    assert status == 200 and [s["sandboxID"] for s in found] == [a["sandboxID"]]
    status, found, _ = fake.json("GET", "/v2/sandboxes?metadata=tag%3Dz")
    assert found == []
    status, found, resp = fake.json("GET", "/v2/sandboxes?limit=1")
    assert len(found) == 1 and resp.getheader("X-Next-Token") == "1"
    status, _, _ = fake.json("POST", "/sandboxes/%s/timeout" % a["sandboxID"], {"timeout": 600})
    assert status == 204
    status, body, _ = fake.json("POST", "/sandboxes/%s/timeout" % ("i" + "1" * 19), {"timeout": 5})
    assert status == 404 and body["code"] == 404
    # a timeout of 0 lets it expire: the data plane answers like a timed-out sandbox
    status, _, _ = fake.json("POST", "/sandboxes/%s/timeout" % b["sandboxID"], {"timeout": 0})
    assert status == 204
    resp, raw = fake.execute_raw(b, "1")
    assert (resp.status, raw) == (502, b"sandbox not found")
    status, _, _ = fake.json("GET", "/sandboxes/" + b["sandboxID"])
    assert status == 404
    st = fake.state()
    assert st["expired"] == 1 and st["deleted"] == 0 and st["live"] == [a["sandboxID"]]
    assert [(t["id"], t["timeout"]) for t in st["timeouts"]][0] == (a["sandboxID"], 600)


def test_default_timeout_and_expire_endpoint(fake, server):
    sb = fake.create(body={"templateID": "code-interpreter-v1"})
    left = server.sandboxes[sb["sandboxID"]].expires_at - time.time()
    assert 14 < left <= 15
    fake.json("POST", "/_expire", {"id": sb["sandboxID"]}, key=None)
    assert fake.state()["expired_ids"] == [sb["sandboxID"]]


def test_switch_garbage_lines(fake):
    sb = fake.create()
    fake.control(garbage_lines=True)
    resp, raw = fake.execute_raw(sb, "print(1)\n2")
    lines = raw.decode().splitlines()
    garbage = [l for l in lines if not l.startswith('{"type"')]
    assert "not json at all" in garbage and '{"truncated":' in garbage
    real = [json.loads(l) for l in lines if l.startswith('{"type"')]
    assert types(real) == ["number_of_executions", "stdout", "result", "end_of_execution"]
    assert lines[0].startswith('{"type"') and lines[-1] == '{"type": "end_of_execution"}'


def test_switch_cut_stream(fake):
    sb = fake.create()
    fake.control(cut_stream=True)
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=10)
    resp, raw = fake.execute_raw(sb, "print('a')\nprint('b')\n3", conn=conn)
    lines = parse_lines(raw)
    assert types(lines) == ["number_of_executions", "stdout", "stdout"]
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        fake.execute_raw(sb, "1", conn=conn)


def test_switch_slow_stream(fake):
    sb = fake.create()
    fake.control(slow_stream=0.15)
    t0 = time.monotonic()
    lines = fake.execute(sb, "print(1)\nprint(2)")
    assert time.monotonic() - t0 >= 0.4  # three gaps between four lines
    assert types(lines) == ["number_of_executions", "stdout", "stdout", "end_of_execution"]


def test_switch_huge_output(fake):
    sb = fake.create()
    fake.control(huge_output=200 * 1024 + 5)
    lines = fake.execute(sb, "print('not run')")
    out = [l for l in lines if l["type"] == "stdout"]
    assert sum(len(l["text"]) for l in out) == 200 * 1024 + 5
    assert len(out) == 4 and all(len(l["text"]) <= 64 * 1024 for l in out)
    assert lines[-1] == {"type": "end_of_execution"}


def test_switch_kernel_dies(fake, server):
    sb = fake.create()
    fake.execute(sb, "y = 1")
    fake.control(kernel_dies=True)
    lines = fake.execute(sb, "print(y)")
    assert types(lines) == ["number_of_executions", "error", "end_of_execution"]
    assert lines[1] == {"type": "error", "name": "UnexpectedEndOfExecution",
                        "value": "Kernel died", "traceback": ""}
    assert "y" not in server.sandboxes[sb["sandboxID"]].kernel


def test_switch_delete_status(fake):
    sb = fake.create()
    for code in (500, 404):
        fake.control(delete_status=code)
        status, body, _ = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
        assert status == code and body["code"] == code
    assert fake.state()["live"] == [sb["sandboxID"]]
    fake.control(delete_status=None)
    status, _, _ = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert status == 204


def test_switch_create_status(fake):
    for code in (401, 429, 500, 503):
        fake.control(create_status=code)
        status, body, _ = fake.json("POST", "/sandboxes", {"templateID": "code-interpreter-v1"})
        assert status == code
        assert body["code"] == code and isinstance(body["message"], str)
    st = fake.state()
    assert st["created"] == 0 and st["live"] == []


def test_switch_create_without_token(fake):
    fake.control(create_without_token=True)
    sb = fake.create()
    assert "envdAccessToken" not in sb and sb["trafficAccessToken"]
    lines = fake.execute(sb, "1 + 1")
    assert lines[1]["text"] == "2"


def test_switch_execute_status(fake):
    sb = fake.create()
    fake.control(execute_status=500)
    resp, raw = fake.execute_raw(sb, "1")
    assert resp.status == 500 and resp.getheader("Content-Type").startswith("text/plain")
    fake.control(execute_status=502)
    resp, raw = fake.execute_raw(sb, "1")
    assert resp.status == 502


def test_control_rejects_unknown_switch_and_reset_clears(fake):
    status, body, _ = fake.json("POST", "/_control", {"no_such_switch": True}, key=None)
    assert status == 400 and "no_such_switch" in body["error"]
    status, body, _ = fake.json("POST", "/_control", {"slow_stream": "fast"}, key=None)
    assert status == 400
    fake.control(garbage_lines=True)
    fake.create()
    status, _, _ = fake.json("POST", "/_reset", {}, key=None)
    assert status == 200
    st = fake.state()
    assert st["switches"] == {} and st["live"] == [] and st["created"] == 0 and st["creates"] == []


def test_keep_alive_connection_reused(fake):
    sb = fake.create()
    sock = fake.conn.sock
    fake.execute(sb, "1")
    fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert fake.conn.sock is sock


def test_switch_domain_and_create_without_domain(fake):
    fake.control(domain="sandboxes.example")
    assert fake.create()["domain"] == "sandboxes.example"
    fake.control(create_without_domain=True)
    assert fake.create()["domain"] is None
    fake.control(create_without_domain=None, domain=None)
    assert fake.create()["domain"] == "localhost"
    status, body, _ = fake.json("POST", "/_control", {"domain": 5}, key=None)
    assert (status, body) == (400, {"error": "switch domain wants a string"})


def wait_state(fake, predicate, what):
    deadline = time.monotonic() + 10
    while True:
        st = fake.state()
        if predicate(st):
            return st
        assert time.monotonic() < deadline, "waited 10 s for %s: %s" % (what, st)
        time.sleep(0.01)


def test_held_execution_runs_its_code_once_released(fake):
    sb = fake.create()
    fake.control(hold_execute="go", keepalive_interval=0.05)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "lines", Client(fake.port).execute(sb, "print('ran')")))
    t.start()
    st = wait_state(fake, lambda s: s["held"], "the held execution")
    assert st["held"] == [{"gate": "go", "what": "execute", "sandbox_id": sb["sandboxID"]}]
    # the stream has begun and keeps alive while the code waits
    st = wait_state(fake, lambda s: s["executes"][0]["status"] == 200, "the stream")
    assert "lines" not in out
    assert fake.json("POST", "/_release", {"gate": "go"}, key=None)[0] == 200
    t.join(10)
    lines = out["lines"]
    assert types(lines)[0] == "number_of_executions"
    assert types(lines)[-2:] == ["stdout", "end_of_execution"]
    assert set(types(lines)[1:-2]) <= {"keepalive"}
    assert fake.state()["held"] == []
    # an open gate stays open
    assert types(fake.execute(sb, "1")) == ["number_of_executions", "result",
                                            "end_of_execution"]


def test_held_delete_is_answered_once_released(fake):
    sb = fake.create()
    fake.control(hold_delete="del")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "r", Client(fake.port).json("DELETE", "/sandboxes/" + sb["sandboxID"])[0]))
    t.start()
    st = wait_state(fake, lambda s: s["held"], "the held delete")
    assert st["held"] == [{"gate": "del", "what": "delete", "sandbox_id": sb["sandboxID"]}]
    assert [d["status"] for d in st["deletes"]] == [None]
    assert st["live"] == [sb["sandboxID"]] and "r" not in out
    fake.json("POST", "/_release", {"gate": "del"}, key=None)
    t.join(10)
    assert out["r"] == 204
    st = fake.state()
    assert [d["status"] for d in st["deletes"]] == [204] and st["live"] == []


def test_held_create_makes_its_sandbox_once_released(fake):
    fake.control(hold_create="make")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", Client(fake.port).json(
        "POST", "/sandboxes", {"templateID": "code-interpreter-v1"})))
    t.start()
    st = wait_state(fake, lambda s: s["held"], "the held create")
    assert st["held"] == [{"gate": "make", "what": "create", "sandbox_id": None}]
    assert [c["status"] for c in st["creates"]] == [None]
    assert st["live"] == [] and "r" not in out
    fake.json("POST", "/_release", {"gate": "make"}, key=None)
    t.join(10)
    status, body, _ = out["r"]
    assert status == 201
    st = fake.state()
    assert [c["status"] for c in st["creates"]] == [201]
    assert st["live"] == [body["sandboxID"]]


def test_gate_left_shut_gives_up(fake, monkeypatch):
    monkeypatch.setattr(fake_e2b, "HOLD_LIMIT", 0.2)
    sb = fake.create()
    fake.control(hold_execute="never", hold_delete="never")
    lines = fake.execute(sb, "print('ran')")
    assert lines == [{"type": "number_of_executions", "execution_count": 1},
                     {"type": "error", "name": "FakeHoldExpired",
                      "value": "gate never was not opened within 0.2 s", "traceback": ""},
                     {"type": "end_of_execution"}]
    status, body, _ = fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert (status, body) == (500, {"code": 500,
                                    "message": "gate never was not opened within 0.2 s"})
    st = fake.state()
    assert [h["what"] for h in st["hold_expired"]] == ["execute", "delete"]
    assert st["live"] == [sb["sandboxID"]]


def test_reset_opens_every_gate(fake, server):
    sb = fake.create()
    fake.control(hold_execute="forgotten")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "lines", Client(fake.port).execute(sb, "print('freed')")))
    t.start()
    wait_state(fake, lambda s: s["held"], "the held execution")
    server.reset()
    t.join(10)
    assert types(out["lines"])[-2:] == ["stdout", "end_of_execution"]
    assert out["lines"][-2]["text"] == "freed\n"


def test_release_wants_a_gate_name(fake):
    status, body, _ = fake.json("POST", "/_release", {"gate": 1}, key=None)
    assert (status, body) == (400, {"error": "want {\"gate\": name}"})


def test_requests_carry_their_peer_and_ended_connections_are_listed(fake):
    c = Client(fake.port)
    sb = c.create()
    c.execute(sb, "1")
    c.json("POST", "/sandboxes/%s/timeout" % sb["sandboxID"], {"timeout": 30})
    c.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    peer = "%s:%d" % c.conn.sock.getsockname()[:2]
    st = fake.state()
    assert [r["peer"] for k in ("creates", "executes", "timeouts", "deletes")
            for r in st[k]] == [peer] * 4
    assert peer not in st["closed"]
    c.conn.close()
    wait_state(fake, lambda s: peer in s["closed"], "the connection to end")


def test_client_gone_ends_a_quiet_execution_stream(fake):
    sb = fake.create()
    fake.control(hold_execute="gone", keepalive_interval=60)
    c = Client(fake.port)
    c.conn.request("POST", "/execute", body=json.dumps({"code": "1"}),
                   headers=dict(fake.exec_headers(sb), **{"Content-Type": "application/json"}))
    wait_state(fake, lambda s: s["held"], "the held execution")
    peer = "%s:%d" % c.conn.sock.getsockname()[:2]
    c.conn.close()
    # noticed while the code is still held, long before a keepalive would fail
    st = wait_state(fake, lambda s: peer in s["closed"], "the stream to end")
    assert [h["what"] for h in st["held"]] == ["execute"]


# -- lifetime and execution contexts (containers) -----------------------------

def test_timeout_needs_the_key_and_counts_from_now(fake, server):
    sb = fake.create()
    path = "/sandboxes/%s/timeout" % sb["sandboxID"]
    for key in (None, "e2b_wrong"):
        status, body, _ = fake.json("POST", path, {"timeout": 30}, key=key)
        assert (status, body) == (401, {"code": 401, "message": "Invalid API key"})
    assert fake.state()["timeouts"] == []
    for seconds in (600, 10):   # longer, then shorter: each counted from the call
        before = time.time()
        status, body, _ = fake.json("POST", path, {"timeout": seconds})
        after = time.time()
        assert (status, body) == (204, None)
        assert before + seconds <= server.sandboxes[sb["sandboxID"]].expires_at <= after + seconds
    status, body, _ = fake.json("POST", path, {"timeout": "10"})
    assert status == 400 and body["code"] == 400
    peer = "%s:%d" % fake.conn.sock.getsockname()[:2]
    assert fake.state()["timeouts"] == [
        {"id": sb["sandboxID"], "timeout": 600, "status": 204, "peer": peer},
        {"id": sb["sandboxID"], "timeout": 10, "status": 204, "peer": peer},
        {"id": sb["sandboxID"], "timeout": "10", "status": 400, "peer": peer}]


def test_max_instance_length_caps_then_refuses_the_timeout(fake, server):
    sb = fake.create()
    path = "/sandboxes/%s/timeout" % sb["sandboxID"]
    sandbox = server.sandboxes[sb["sandboxID"]]
    fake.control(max_instance_length=100)
    assert fake.json("POST", path, {"timeout": 600})[0] == 204
    assert sandbox.expires_at == pytest.approx(sandbox.created_at + 100, abs=1e-3)
    fake.control(max_instance_length=0)
    status, body, _ = fake.json("POST", path, {"timeout": 600})
    assert (status, body) == (400, {"code": 400, "message": "Max instance length exceeded"})
    st = fake.state()
    assert [t["status"] for t in st["timeouts"]] == [204, 400]
    # past the cap it has ended, as at the service: gone, counted as expired
    assert st["live"] == [] and st["expired_ids"] == [sb["sandboxID"]]


def context_call(fake, sb, method, path, body=None, headers=None):
    resp, raw = fake.request(method, path, body,
                             headers=headers if headers is not None else fake.exec_headers(sb))
    return resp, raw


def new_context(fake, sb, body=None):
    resp, raw = context_call(fake, sb, "POST", "/contexts",
                             body if body is not None else {"language": "python"})
    assert resp.status == 200, raw
    return json.loads(raw)


def test_contexts_have_their_own_namespaces_and_restart_empties_one(fake, server):
    sb = fake.create()
    ctx = new_context(fake, sb, {"language": "Python", "cwd": "/home/user"})  # check-clone: a sandbox's path
    assert set(ctx) == {"id", "language", "cwd"}
    assert (ctx["language"], ctx["cwd"]) == ("python", "/home/user")  # check-clone: a sandbox's path
    default = server.sandboxes[sb["sandboxID"]].default_context_id
    resp, raw = context_call(fake, sb, "GET", "/contexts")
    assert resp.status == 200
    assert sorted(c["id"] for c in json.loads(raw)) == sorted([default, ctx["id"]])

    fake.execute(sb, "x = 'mine'", extra={"context_id": ctx["id"]})
    fake.execute(sb, "x = 'default'")
    lines = fake.execute(sb, "x", extra={"context_id": ctx["id"]})
    assert lines[0] == {"type": "number_of_executions", "execution_count": 2}
    assert lines[1]["text"] == "'mine'"
    assert fake.execute(sb, "x", extra={"context_id": "default"})[1]["text"] == "'default'"

    resp, raw = context_call(fake, sb, "POST", "/contexts/%s/restart" % ctx["id"])
    assert (resp.status, raw) == (200, b"null")
    lines = fake.execute(sb, "x", extra={"context_id": ctx["id"]})
    assert lines[0] == {"type": "number_of_executions", "execution_count": 1}
    assert lines[1]["name"] == "NameError"
    assert server.sandboxes[sb["sandboxID"]].kernel["x"] == "default"

    resp, raw = context_call(fake, sb, "POST", "/contexts/nope/restart")
    assert (resp.status, raw) == (404, b"Context nope not found")
    resp, raw = context_call(fake, sb, "DELETE", "/contexts/%s" % ctx["id"])
    assert (resp.status, raw) == (200, b"null")
    resp, raw = fake.execute_raw(sb, "1", extra={"context_id": ctx["id"]})
    assert (resp.status, raw) == (404, ("Context %s not found" % ctx["id"]).encode())

    st = fake.state()
    assert [(c["sandbox_id"], c["id"], c["status"]) for c in st["contexts"]] == \
        [(sb["sandboxID"], ctx["id"], 200)]
    assert [(r["sandbox_id"], r["context_id"], r["status"]) for r in st["restarts"]] == \
        [(sb["sandboxID"], ctx["id"], 200), (sb["sandboxID"], "nope", 404)]
    assert st["sandboxes"][sb["sandboxID"]]["contexts"] == {
        default: {"id": default, "language": "python", "cwd": "/home/user",  # check-clone: a sandbox's path
                  "execution_count": 2}}
    assert st["leaks"] == []


def test_context_calls_want_the_traffic_token_not_the_access_token(fake):
    sb = fake.create()
    only_traffic = {k: v for k, v in fake.exec_headers(sb).items() if k != "X-Access-Token"}
    resp, raw = context_call(fake, sb, "POST", "/contexts", {}, headers=only_traffic)
    assert resp.status == 200 and json.loads(raw)["language"] == "python"
    no_traffic = {k: v for k, v in fake.exec_headers(sb).items()
                  if k != "E2B-Traffic-Access-Token"}
    resp, raw = context_call(fake, sb, "POST", "/contexts", {}, headers=no_traffic)
    assert (resp.status, raw) == (401, b"unauthorized")
    resp, raw = context_call(fake, sb, "POST", "/contexts", {"language": "r"})
    assert resp.status == 500 and raw.startswith(b"Failed to create context")


def test_restart_ends_the_execution_streaming_from_the_context(fake, server):
    sb = fake.create()
    ctx = new_context(fake, sb)
    fake.execute(sb, "kept = 1", extra={"context_id": ctx["id"]})
    fake.control(hold_execute="busy")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("lines", Client(fake.port).execute(
        sb, "late = 1", extra={"context_id": ctx["id"]})))
    t.start()
    wait_state(fake, lambda s: s["held"], "the held execution")
    resp, raw = context_call(fake, sb, "POST", "/contexts/%s/restart" % ctx["id"])
    assert resp.status == 200
    t.join(10)
    assert out["lines"] == [{"type": "number_of_executions", "execution_count": 2},
                            dict(fake_e2b.UNEXPECTED_END),
                            {"type": "end_of_execution"}]
    # the next execution runs at once in the empty context, not behind the
    # old one (still held)
    fake.control(hold_execute=None)
    lines = fake.execute(sb, "print(sorted(k for k in globals() if not k.startswith('_')))",
                         extra={"context_id": ctx["id"]})
    assert lines[1]["text"] == "[]\n"
    assert [h["what"] for h in fake.state()["held"]] == ["execute"]
    fake.json("POST", "/_release", {"gate": "busy"}, key=None)
    wait_state(fake, lambda s: not s["held"], "the old execution to go on")
    assert "late" not in server.sandboxes[sb["sandboxID"]].context(ctx["id"]).namespace


def test_switch_context_status(fake):
    sb = fake.create()
    ctx = new_context(fake, sb)
    fake.control(context_status=503)
    resp, raw = context_call(fake, sb, "POST", "/contexts", {})
    assert (resp.status, raw) == (503, b"Service unavailable")
    resp, raw = context_call(fake, sb, "POST", "/contexts/%s/restart" % ctx["id"])
    assert (resp.status, raw) == (503, b"Service unavailable")
    st = fake.state()
    assert [c["status"] for c in st["contexts"]] == [200, 503]
    assert [r["status"] for r in st["restarts"]] == [503]


# ---- envd (port 49983): /files and the filesystem service --------------------

USER_AUTH = "Basic " + base64.b64encode(b"user:").decode()


def envd_headers(sb, **extra):
    h = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49983",
         "X-Access-Token": sb["envdAccessToken"]}
    h.update(extra)
    return h


def fs_call(fake, sb, method, body, headers=None):
    """One Connect call (JSON codec): (status, parsed body)."""
    h = headers if headers is not None else envd_headers(
        sb, **{"Connect-Protocol-Version": "1", "Authorization": USER_AUTH})
    resp, raw = fake.request("POST", "/filesystem.Filesystem/" + method, body, headers=h)
    return resp.status, json.loads(raw) if raw else None


def sandbox_root(server, sb):
    return server.sandboxes[sb["sandboxID"]].files.root


def multipart(name, data, boundary="b0undary"):
    return (("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
             "Content-Type: application/octet-stream\r\n\r\n" % (boundary, name)).encode()
            + data + ("\r\n--%s--\r\n" % boundary).encode())


def upload(fake, sb, path, data, chunked=False):
    h = envd_headers(sb, **{"Content-Type": "multipart/form-data; boundary=b0undary"})
    resp, raw = fake.request("POST", "/files?path=%s&username=user" % path,
                             multipart(path, data), headers=h, chunked=chunked)
    return resp, raw


def test_envd_list_dir_reports_links_with_their_targets_type(fake, server):
    sb = fake.create()
    assert fs_call(fake, sb, "ListDir", {"path": "/mnt/data", "depth": 1}) == (
        404, {"code": "not_found",
              "message": "path not found: lstat /mnt/data: no such file or directory"})
    status, made = fs_call(fake, sb, "MakeDir", {"path": "/mnt/data"})
    assert status == 200
    assert made["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    assert made["entry"]["path"] == "/mnt/data"
    assert fs_call(fake, sb, "MakeDir", {"path": "/mnt/data"}) == (
        409, {"code": "already_exists", "message": "directory already exists: /mnt/data"})
    root = sandbox_root(server, sb)
    with open(root + "/mnt/data/a.txt", "wb") as f:
        f.write(b"hello")
    os.symlink("/etc/passwd", root + "/mnt/data/link")
    os.symlink("/nowhere", root + "/mnt/data/dangling")
    os.mkdir(root + "/mnt/data/sub")
    os.utime(root + "/mnt/data/a.txt", ns=(1767322800123456789, 1767322800123456789))
    status, listing = fs_call(fake, sb, "ListDir", {"path": "/mnt/data", "depth": 1})
    assert status == 200
    entries = {e["name"]: e for e in listing["entries"]}
    assert [e["name"] for e in listing["entries"]] == ["a.txt", "dangling", "link", "sub"]
    assert entries["a.txt"] == {"name": "a.txt", "type": "FILE_TYPE_FILE",
                                "path": "/mnt/data/a.txt", "size": "5", "mode": 0o644,
                                "permissions": "-rw-r--r--", "owner": "user", "group": "user",
                                "modifiedTime": "2026-01-02T03:00:00.123456789Z"}
    link = entries["link"]
    assert (link["type"], link["symlinkTarget"], link["size"], link["permissions"]) == \
        ("FILE_TYPE_FILE", "/etc/passwd", "11", "Lrwxrwxrwx")
    dangling = entries["dangling"]
    assert "type" not in dangling and "mode" not in dangling
    assert dangling["symlinkTarget"] == "/mnt/data/dangling"
    assert entries["sub"]["type"] == "FILE_TYPE_DIRECTORY"
    status, st = fs_call(fake, sb, "Stat", {"path": "/mnt/data/link"})
    assert status == 200 and st["entry"]["symlinkTarget"] == "/etc/passwd"
    assert fs_call(fake, sb, "Stat", {"path": "/mnt/data/none"}) == (
        404, {"code": "not_found",
              "message": "file not found: lstat /mnt/data/none: no such file or directory"})


def test_envd_move_remove_and_connect_errors(fake, server):
    sb = fake.create()
    fs_call(fake, sb, "MakeDir", {"path": "/mnt/data"})
    root = sandbox_root(server, sb)
    with open(root + "/mnt/data/a", "w") as f:
        f.write("x")
    os.symlink("/etc/passwd", root + "/mnt/data/link")
    status, moved = fs_call(fake, sb, "Move", {"source": "/mnt/data/a",
                                               "destination": "/mnt/data/link"})
    assert status == 200 and moved["entry"]["type"] == "FILE_TYPE_FILE"
    assert "symlinkTarget" not in moved["entry"]
    with open(root + "/etc/passwd") as f:
        assert f.read() == fake_e2b.FAKE_PASSWD          # replaced, not written through
    assert fs_call(fake, sb, "Move", {"source": "/mnt/data/a", "destination": "/mnt/data/b"}) \
        == (404, {"code": "not_found", "message": "source file not found: rename /mnt/data/a "
                                                  "/mnt/data/b: no such file or directory"})
    assert fs_call(fake, sb, "Remove", {"path": "/mnt/data/link"}) == (200, {})
    assert fs_call(fake, sb, "Remove", {"path": "/mnt/data/link"}) == (200, {})
    assert os.listdir(root + "/mnt/data") == []
    assert fs_call(fake, sb, "Stat", {"path": "/x", "extra": 1}) == (
        400, {"code": "invalid_argument", "message": "unmarshal into filesystem.StatRequest: "
                                                     "proto: unknown field \"extra\""})
    assert fs_call(fake, sb, "Stat", {"path": "/"}, headers=envd_headers(sb)) == (
        401, {"code": "unauthenticated", "message": "no user specified"})
    assert fs_call(fake, sb, "Stat", {"path": "/"}, headers=envd_headers(
        sb, Authorization="Basic " + base64.b64encode(b"nobody:").decode())) == (
        401, {"code": "unauthenticated", "message": "invalid username: 'nobody'"})
    status, body = fs_call(fake, sb, "Stat", {"path": "/"}, headers=envd_headers(
        sb, Authorization=USER_AUTH, **{"X-Access-Token": "wrong"}))
    assert (status, body) == (401, {"code": 401, "message": fake_e2b.ENVD_UNAUTHORIZED})
    assert fs_call(fake, sb, "Chmod", {"path": "/"}) == (
        404, {"code": "unimplemented",
              "message": "/filesystem.Filesystem/Chmod is not implemented"})
    resp, _ = fake.request("POST", "/filesystem.Filesystem/Stat", b"{}",
                           headers=envd_headers(sb, **{"Content-Type": "text/plain"}))
    assert resp.status == 415
    status, _ = fs_call(fake, sb, "Stat", {"path": "/"},
                        headers=envd_headers(sb, **{"E2b-Sandbox-Port": "49999",
                                                    "Authorization": USER_AUTH}))
    assert status == 404
    calls = fake.state()["envd"]
    assert all(c["sandbox_id"] == sb["sandboxID"] for c in calls)


def test_envd_files_download_follows_links_and_upload_streams(fake, server):
    sb = fake.create()
    root = sandbox_root(server, sb)
    data = bytes(range(256)) * 4096
    resp, raw = upload(fake, sb, "/mnt/data/blob.bin", data, chunked=True)
    assert (resp.status, json.loads(raw)) == (
        200, [{"name": "blob.bin", "path": "/mnt/data/blob.bin", "type": "file"}])
    resp, raw = fake.request("GET", "/files?path=/mnt/data/blob.bin&username=user",
                             headers=envd_headers(sb))
    assert resp.status == 200 and raw == data
    assert resp.getheader("Content-Length") == str(len(data))
    assert resp.getheader("Content-Disposition") == 'inline; filename="blob.bin"'
    os.symlink("/etc/passwd", root + "/mnt/data/link")
    resp, raw = fake.request("GET", "/files?path=/mnt/data/link&username=user",
                             headers=envd_headers(sb))
    assert (resp.status, raw) == (200, fake_e2b.FAKE_PASSWD.encode())
    resp, raw = fake.request("GET", "/files?path=/mnt/data/none&username=user",
                             headers=envd_headers(sb))
    assert (resp.status, raw) == (
        404, b'{"code":404,"message":"path \'/mnt/data/none\' does not exist"}\n')
    resp, raw = fake.request("GET", "/files?path=/mnt/data&username=user",
                             headers=envd_headers(sb))
    assert (resp.status, raw) == (
        400, b'{"code":400,"message":"path \'/mnt/data\' is a directory"}\n')
    resp, raw = fake.request("GET", "/files?path=/mnt/data/blob.bin&username=user",
                             headers=envd_headers(sb, **{"X-Access-Token": "wrong"}))
    assert (resp.status, raw) == (
        401, b'{"code":401,"message":"access token present in header but does not match"}\n')
    h = envd_headers(sb)
    del h["X-Access-Token"]
    resp, raw = fake.request("GET", "/files?path=/mnt/data/blob.bin&username=user", headers=h)
    assert (resp.status, raw) == (
        401, b'{"code":401,"message":"missing signature query parameter"}\n')
    resp, raw = fake.request("GET", "/files?path=/mnt/data/blob.bin", headers=envd_headers(sb))
    assert (resp.status, raw) == (400, b'{"code":400,"message":"no user specified"}\n')


def test_envd_cut_upload_leaves_what_arrived(fake, server):
    sb = fake.create()
    root = sandbox_root(server, sb)
    head = multipart("/mnt/data/cut.bin", b"")[:-len("\r\n--b0undary--\r\n")]
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=30)
    conn.putrequest("POST", "/files?path=/mnt/data/cut.bin&username=user")
    for k, v in envd_headers(sb, **{"Content-Type": "multipart/form-data; boundary=b0undary",
                                    "Transfer-Encoding": "chunked"}).items():
        conn.putheader(k, v)
    conn.endheaders()
    piece = head + b"z" * 100000
    conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    conn.close()
    wait_state(fake, lambda st: any(c["status"] == "cut" for c in st["envd"]), "the cut upload")
    assert os.path.getsize(root + "/mnt/data/cut.bin") > 0


def test_execute_writes_into_the_sandbox_data_dir(fake, server):
    sb = fake.create()
    lines = fake.execute(sb, "import os\nos.makedirs('/mnt/data', exist_ok=True)\n"
                             "open('/mnt/data/x.csv', 'w').write('a,b\\n')\n"
                             "print(sorted(os.listdir('/mnt/data')))")
    assert [l["text"] for l in lines if l["type"] == "stdout"] == ["['x.csv']\n"]
    with open(sandbox_root(server, sb) + "/mnt/data/x.csv") as f:
        assert f.read() == "a,b\n"
    assert fake.state()["sandboxes"][sb["sandboxID"]]["data"] == ["x.csv"]
    status, listing = fs_call(fake, sb, "ListDir", {"path": "/mnt/data"})
    assert status == 200 and [e["name"] for e in listing["entries"]] == ["x.csv"]
    root = sandbox_root(server, sb)
    fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert not os.path.exists(root)


# ---- envd's process service -------------------------------------------------

STREAM = "application/connect+json"


def envelope(obj, flags=0):
    data = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(data)) + data


def read_frame(resp):
    """The next Connect envelope of a streaming answer: (flags, JSON)."""
    head = resp.read(5)
    assert len(head) == 5, head
    flags, n = struct.unpack(">BI", head)
    return flags, json.loads(resp.read(n))


def all_frames(raw):
    out, i = [], 0
    while i < len(raw):
        flags, n = struct.unpack(">BI", raw[i:i + 5])
        out.append((flags, json.loads(raw[i + 5:i + 5 + n])))
        i += 5 + n
    assert i == len(raw)
    return out


def process_headers(sb, **extra):
    return envd_headers(sb, **dict({"Content-Type": STREAM, "Authorization": USER_AUTH,
                                    "Connect-Protocol-Version": "1"}, **extra))


def start_process(fake, sb, process, headers=None, conn=None):
    """A whole Start stream: (HTTP status, content type, frames)."""
    resp, raw = fake.request("POST", "/process.Process/Start", envelope({"process": process}),
                             headers=headers or process_headers(sb), conn=conn)
    frames = all_frames(raw) if resp.status == 200 else raw
    return resp.status, resp.getheader("Content-Type"), frames


def process_output(frames, kind):
    return b"".join(base64.b64decode(f["event"]["data"][kind]) for _, f in frames
                    if kind in f.get("event", {}).get("data", {}))


def send_signal(fake, sb, body, headers=None):
    h = headers or envd_headers(sb, **{"Authorization": USER_AUTH,
                                       "Connect-Protocol-Version": "1"})
    resp, raw = fake.request("POST", "/process.Process/SendSignal", body, headers=h)
    return resp.status, json.loads(raw) if raw else None


def data_sandbox(fake):
    sb = fake.create()
    assert fs_call(fake, sb, "MakeDir", {"path": "/mnt/data"})[0] == 200
    return sb


def test_process_start_streams_start_data_end(fake, server):
    sb = data_sandbox(fake)
    fake.execute(sb, "open('/mnt/data/from_code.txt', 'w').write('from python\\n')")
    status, ctype, frames = start_process(fake, sb, {
        "cmd": "/bin/bash", "cwd": "/mnt/data",
        "args": ["-c", "cat from_code.txt; echo oops >&2; echo made > made.txt; exit 3"]})
    assert (status, ctype) == (200, STREAM)
    pid = frames[0][1]["event"]["start"]["pid"]
    assert frames[0] == (0, {"event": {"start": {"pid": pid}}})
    assert process_output(frames, "stdout") == b"from python\n"
    assert process_output(frames, "stderr") == b"oops\n"
    assert frames[-2:] == [(0, {"event": {"end": {"exitCode": 3, "exited": True,
                                                   "status": "exit status 3",
                                                   "error": "exit status 3"}}}),
                           (2, {})]
    lines = fake.execute(sb, "print(open('/mnt/data/made.txt').read(), end='')")
    assert [l["text"] for l in lines if l["type"] == "stdout"] == ["made\n"]
    # exit 0: zero values left out; a signal: exitCode -1, not exited
    _, _, frames = start_process(fake, sb, {"cmd": "true"})
    assert frames[-2:] == [(0, {"event": {"end": {"exited": True,
                                                   "status": "exit status 0"}}}), (2, {})]
    _, _, frames = start_process(fake, sb, {"cmd": "/bin/bash", "args": ["-c", "kill -9 $$"]})
    assert frames[-2] == (0, {"event": {"end": {"exitCode": -1, "status": "signal: killed",
                                                "error": "signal: killed"}}})
    starts = fake.state()["processes"]
    assert [s["status"] for s in starts] == [200, 200, 200]
    assert starts[0]["pid"] == pid and starts[0]["end"]["exitCode"] == 3
    assert starts[0]["body"]["process"]["cwd"] == "/mnt/data"
    assert fake.state()["sandboxes"][sb["sandboxID"]]["running"] == []


def test_process_stream_waits_for_inherited_pipes_until_signalled(fake, server):
    sb = data_sandbox(fake)
    fake.control(keepalive_interval=0.1)
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=30)
    conn.request("POST", "/process.Process/Start",
                 envelope({"process": {"cmd": "/bin/bash",
                                       "args": ["-c", "sleep 300 & echo $!"]}}),
                 headers=process_headers(sb))
    resp = conn.getresponse()
    assert resp.status == 200
    pid = read_frame(resp)[1]["event"]["start"]["pid"]
    background = int(base64.b64decode(read_frame(resp)[1]["event"]["data"]["stdout"]))
    # bash has exited, but sleep holds the pipes: keepalives, no end
    assert [read_frame(resp) for _ in range(2)] == [(0, {"event": {"keepalive": {}}})] * 2
    assert fake.state()["sandboxes"][sb["sandboxID"]]["running"] == [pid]
    assert send_signal(fake, sb, {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"}) == \
        (200, {})
    frame = read_frame(resp)
    while frame[1] == {"event": {"keepalive": {}}}:
        frame = read_frame(resp)
    assert frame == (0, {"event": {"end": {"exited": True, "status": "exit status 0"}}})
    assert read_frame(resp) == (2, {})
    conn.close()
    os.kill(background, 0)                        # still running
    signals = fake.state()["signals"]
    assert [(s["pid"], s["status"], s["body"]["signal"]) for s in signals] == \
        [(pid, 200, "SIGNAL_SIGTERM")]
    assert send_signal(fake, sb, {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == (
        404, {"code": "not_found", "message": "process with pid %d not found" % pid})
    # the sandbox ends: what it left running ends with it
    fake.json("DELETE", "/sandboxes/" + sb["sandboxID"])
    assert process_gone(background)


def process_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_process_client_gone_leaves_it_running(fake, server):
    sb = data_sandbox(fake)
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=30)
    conn.request("POST", "/process.Process/Start",
                 envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "echo $$; sleep 300"]}}),
                 headers=process_headers(sb))
    resp = conn.getresponse()
    pid = read_frame(resp)[1]["event"]["start"]["pid"]
    assert read_frame(resp)[1]["event"]["data"]["stdout"]
    conn.close()
    wait_state(fake, lambda st: st["processes"][0].get("client_gone"), "the client to go")
    os.kill(pid, 0)
    assert fake.state()["sandboxes"][sb["sandboxID"]]["running"] == [pid]
    assert send_signal(fake, sb, {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == \
        (200, {})
    wait_state(fake, lambda st: st["sandboxes"][sb["sandboxID"]]["running"] == [],
               "the process to end")


def test_process_errors_as_envd_answers_them(fake, server):
    sb = data_sandbox(fake)
    proc = {"cmd": "true"}
    # envd's own token check: a plain JSON 401
    status, _, body = start_process(fake, sb, proc,
                                    headers=process_headers(sb, **{"X-Access-Token": "bad"}))
    assert (status, json.loads(body)) == (401, {"code": 401,
                                                "message": fake_e2b.ENVD_UNAUTHORIZED})
    # Connect errors of a stream: HTTP 200, the end-of-stream envelope
    h = process_headers(sb)
    del h["Authorization"]
    assert start_process(fake, sb, proc, headers=h) == (200, STREAM, [
        (2, {"error": {"code": "unauthenticated", "message": "no user specified"}})])
    assert start_process(fake, sb, {"cmd": "true", "cwd": "/nope"}) == (200, STREAM, [
        (2, {"error": {"code": "invalid_argument",
                       "message": "cwd '/nope' does not exist"}})])
    # a unary content type on a streaming procedure; an unknown sandbox
    status, _, _ = start_process(fake, sb, proc, headers=process_headers(
        sb, **{"Content-Type": "application/json"}))
    assert status == 415
    status, _, body = start_process(fake, sb, proc, headers=process_headers(
        sb, **{"E2b-Sandbox-Id": "inope"}))
    assert (status, body) == (502, b"sandbox not found")
    assert send_signal(fake, sb, {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}) == (
        404, {"code": "not_found", "message": "process with pid 999999 not found"})
    assert send_signal(fake, sb, {"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"},
                       headers=envd_headers(sb, **{"X-Access-Token": "bad"})) == (
        401, {"code": 401, "message": fake_e2b.ENVD_UNAUTHORIZED})
    st = fake.state()
    # (a sandbox the proxy does not know is no envd's: among the envd calls only)
    assert [s["status"] for s in st["processes"]] == [401, 200, 200, 415]
    assert [s.get("error") for s in st["processes"]] == \
        [None, "unauthenticated", "invalid_argument", None]
    assert [(c["path"], c["status"]) for c in st["envd"] if c["status"] == 502] == \
        [("/process.Process/Start", 502)]
    assert [s["status"] for s in st["signals"]] == [404, 401]
    assert all(c["path"].startswith("/process.Process/") for c in st["envd"][1:])
