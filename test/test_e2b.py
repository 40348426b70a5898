"""The e2b sandbox provider through httpd, against the fake E2B service
(test/fake_e2b.py): the round trip, what the control plane is sent, which
credentials go where, every failure the service can produce, and API keys
that never leak and rotate on a graceful restart.

After every test: no sandbox is left on the service (created == deleted, none
live), no httpd child crashed, every sandbox the module started it also
destroyed, and no API key reached the error log.
"""
import http.client
import json
import re
import secrets
import socket
import threading

import pytest

from conftest import (ANONYMOUS, CLIENT_HEADERS, TOOL, FakeE2B, Httpd, answered_deletes,
                      base_conf, script_input, start_helper, wait_until)
from test_configtest import assert_syntax_error

OUTPUTS = "code_interpreter_call.outputs"
KEY = "e2b_" + secrets.token_hex(20)
KEY_A = "e2b_" + secrets.token_hex(20)
KEY_B = "e2b_" + secrets.token_hex(20)
ALL_KEYS = (KEY, KEY_A, KEY_B)

RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")
CUT = "The sandbox stopped answering: the output stream was cut."
TIMED_OUT = "The execution timed out after 3 s and was stopped."
DIED = "The interpreter died during the execution."
EXPIRED_MSG = "The sandbox expired (its lifetime ran out) and was discarded."
TOO_MUCH = "The execution produced more output than the sandbox accepts and was stopped."
HTTP_502 = "The sandbox did not answer (HTTP 502): it has timed out or was stopped."
UNAVAILABLE = "The code sandbox could not be started; retry shortly."
NO_TOKEN = ("the E2B sandbox service created a sandbox without an access token "
            "(the data plane cannot be secured)")

# Every response body httpd sent during this module, checked for keys.
BODIES = []
# Sandboxes a test let expire on the service on purpose (never deleted there).
EXPIRED = set()


class Env:
    def __init__(self, server, fake, key_file):
        self.server = server
        self.fake = fake
        self.key_file = key_file


def sandbox_line(name, key_spec, fake_url, more=""):
    return ("CodeInterpreterSandbox %s provider=e2b api_key=%s api_base=%s "
            "sandbox_url=%s timeout=3 max_output=4k%s" % (name, key_spec, fake_url,
                                                         fake_url, more))


def location(path, model_port, tool):
    return ("<Location %s>\n  ProxyPass http://127.0.0.1:%d/v1/responses\n"
            "  CodeInterpreter %s\n</Location>" % (path, model_port, tool))


def write_key(path, key):
    with open(path, "w") as f:
        f.write(key + "\n")


@pytest.fixture(scope="module")
def e2b(model, tmp_path_factory):
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY, "--api-key", KEY_A,
                              "--api-key", KEY_B)
    fake = FakeE2B(proc, port)
    key_file = str(tmp_path_factory.mktemp("e2bkey") / "e2b.key")
    write_key(key_file, KEY_A)
    extra = "\n".join([
        "LogLevel debug",
        sandbox_line("cloud", "env:E2B_TEST_KEY", fake.url),
        location("/e2b/v1/responses", model.port, "cloud"),
        sandbox_line("cloudnet", "env:E2B_TEST_KEY", fake.url, " internet=on lifetime=600"),
        location("/e2bnet/v1/responses", model.port, "cloudnet"),
        sandbox_line("cloudfile", "file:" + key_file, fake.url),
        location("/e2bfile/v1/responses", model.port, "cloudfile"),
        sandbox_line("cloudgone", "env:E2B_TEST_KEY", "http://127.0.0.1:9"),
        location("/e2bgone/v1/responses", model.port, "cloudgone"),
    ])
    server = Httpd("e2b", base_conf(model.port, extra=extra), env={"E2B_TEST_KEY": KEY},
                   fakes=[fake])
    try:
        server.start()
        yield Env(server, fake, key_file)
    finally:
        try:
            server.stop()
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture(autouse=True)
def checked(e2b, model):
    """Per test: reset the fake and the model; afterwards (besides the checks
    of every server, conftest.py) only the sandboxes a test let expire on
    purpose expired, and no key reached the log."""
    e2b.fake.reset()
    model.reset()
    EXPIRED.clear()
    yield
    st = e2b.fake.until(lambda s: not s["live"], "the fake's sandboxes to be deleted")
    assert set(st["expired_ids"]) == EXPIRED
    text = e2b.server.log_since_mark()
    for key in ALL_KEYS:
        assert key not in text


def ci_body(rounds):
    return {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}


def post(env, rounds, path="/e2b/v1/responses"):
    """POST a scripted request; returns (status, headers, parsed body). The
    caller has no owner: the request's own sandbox, deleted when it ends (a
    container's E2B sandbox: test_e2b_containers.py)."""
    status, hdrs, raw = env.server.request("POST", path, ci_body(rounds),
                                           headers=ANONYMOUS)
    BODIES.append(raw)
    for key in ALL_KEYS:
        assert key.encode() not in raw
    return status, {k.lower(): v for k, v in hdrs}, json.loads(raw)


def run_one(env, code, path="/e2b/v1/responses"):
    """One call running CODE; returns (call item, what the model was told)."""
    status, _, body = post(env, [[{"call": code}], [{"text": "{{last_output}}"}]], path)
    assert status == 200, body
    call, msg = body["output"]
    assert call["type"] == "code_interpreter_call"
    return call, msg["content"][0]["text"]


def deletes_settled(env, count):
    """Wait for COUNT deletes and for the connection of the last one to end:
    the module's delete job closes its connection when it is done, so no
    retry can follow."""
    return env.fake.until(lambda s: len(s["deletes"]) >= count
                          and s["deletes"][-1]["status"] is not None
                          and s["deletes"][-1]["peer"] in s["closed"],
                          "%d deletes, the last one's connection closed" % count)


def module_problems(text):
    return [line for line in text.splitlines()
            if "[code_interpreter:error]" in line or "[code_interpreter:warn]" in line]


# ------------------------------------------------------------ round trip

def test_state_is_kept_across_rounds_in_one_sandbox(e2b):
    status, _, body = post(e2b, [[{"call": "x = 41"}], [{"call": "print(x + 1)"}],
                                 [{"text": "told: {{last_output}}"}]])
    assert status == 200, body
    c1, c2, msg = body["output"]
    assert (c1["status"], c2["status"]) == ("completed", "completed")
    assert c1["code"] == "x = 41"
    assert c2["code"] == "print(x + 1)"
    assert c1.get("outputs") == []
    assert c2["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert msg["content"][0]["text"] == "told: 42\n"
    assert c1["container_id"] == c2["container_id"]
    assert c1["container_id"].startswith("cntr_")

    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert st["created"] == 1
    [create] = st["creates"]
    assert create["status"] == 201
    sid = create["id"]
    assert [e["sandbox_id"] for e in st["executes"]] == [sid, sid]
    assert [e["body"] for e in st["executes"]] == [{"code": "x = 41"},
                                                   {"code": "print(x + 1)"}]
    assert [e["status"] for e in st["executes"]] == [200, 200]
    # the lifetime is extended before each execution
    assert [(t["id"], t["timeout"], t["status"]) for t in st["timeouts"]] == \
        [(sid, 300, 204), (sid, 300, 204)]
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(sid, 204)]
    assert st["deleted"] == 1
    e2b.server.wait_sandboxes_destroyed()
    log = e2b.server.log_since_mark()
    assert log.count("CI0302:") == 1
    assert log.count("CI0301:") == 1
    assert "tool=cloud provider=e2b container=%s" % c1["container_id"] in log
    assert "CI0301: sandbox destroyed (request ended) tool=cloud container=%s" \
        % c1["container_id"] in log


def test_each_request_gets_its_own_sandbox(e2b):
    c1, told1 = run_one(e2b, "y = 1\nprint('y' in globals())")
    c2, told2 = run_one(e2b, "print('y' in globals())")
    assert (told1, told2) == ("True\n", "False\n")
    assert c1["container_id"] != c2["container_id"]
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 2)
    assert st["created"] == 2
    assert len({c["id"] for c in st["creates"]}) == 2


def test_request_without_a_call_creates_no_sandbox(e2b, model):
    status, _, body = post(e2b, [[{"text": "no code today"}]])
    assert status == 200, body
    assert [i["type"] for i in body["output"]] == ["message"]
    st = e2b.fake.state()
    assert (st["created"], st["creates"], st["executes"]) == (0, [], [])


# ------------------------------------------------------- the create body

def test_create_body(e2b):
    call, told = run_one(e2b, "print(6 * 7)")
    assert told == "42\n"
    st = e2b.fake.state()
    [create] = st["creates"]
    assert create["path"] == "/sandboxes"
    assert create["headers"]["x-api-key"] == KEY
    assert create["headers"]["content-type"] == "application/json"
    body = create["body"]
    assert body == {
        "templateID": "code-interpreter-v1",
        "timeout": 300,
        "secure": True,
        "allow_internet_access": False,
        "metadata": {
            "mod_code_interpreter": "1",
            "server": socket.gethostname(),
            "request": call["container_id"],
        },
    }
    assert body["metadata"]["request"].startswith("cntr_")


def test_create_body_with_internet_and_lifetime(e2b):
    call, told = run_one(e2b, "print(6 * 7)", path="/e2bnet/v1/responses")
    assert told == "42\n"
    st = e2b.fake.state()
    [create] = st["creates"]
    assert create["body"]["allow_internet_access"] is True
    assert create["body"]["timeout"] == 600
    assert create["body"]["secure"] is True
    assert create["body"]["metadata"]["request"] == call["container_id"]
    assert [t["timeout"] for t in st["timeouts"]] == [600]


# ---------------------------------------------------- which credential where

def test_key_on_control_plane_only_token_on_data_plane_only(e2b):
    status, _, body = post(e2b, [[{"call": "a = 1"}], [{"call": "print(a)"}],
                                 [{"text": "{{last_output}}"}]])
    assert status == 200, body
    assert body["output"][-1]["content"][0]["text"] == "1\n"
    live = e2b.fake.state()
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert st["leaks"] == []
    [create] = st["creates"]
    assert create["api_key"] == KEY
    assert "x-access-token" not in create["headers"]
    assert "e2b-traffic-access-token" not in create["headers"]
    assert [d["api_key"] for d in st["deletes"]] == [KEY]
    assert len(st["executes"]) == 2
    tokens = set()
    for ex in st["executes"]:
        h = ex["headers"]
        assert "x-api-key" not in h
        assert not any(key in v for v in h.values() for key in ALL_KEYS)
        assert h.get("x-access-token")
        assert h.get("e2b-traffic-access-token")
        assert h["e2b-sandbox-id"] == create["id"]
        assert h["e2b-sandbox-port"] == "49999"
        assert h["content-type"] == "application/json"
        assert ex["status"] == 200
        tokens.add((h["x-access-token"], h["e2b-traffic-access-token"]))
    assert len(tokens) == 1
    # the sandbox was already deleted when the answer arrived, or still held
    # the very tokens the executions carried
    if create["id"] in live["sandboxes"]:
        sb = live["sandboxes"][create["id"]]
        assert tokens == {(sb["envdAccessToken"], sb["trafficAccessToken"])}


def test_last_value_and_stderr_are_shown_in_order(e2b):
    call, told = run_one(e2b, "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "out\nerr\n42\n"}]
    assert told == "out\nerr\n42\n"


def test_png_result_becomes_an_image_output(e2b):
    call, told = run_one(e2b, "print('__FAKE_PNG__')")
    assert call["status"] == "completed"
    logs, image = call["outputs"]
    assert logs == {"type": "logs", "logs": "__FAKE_PNG__\n"}
    assert image["type"] == "image"
    assert image["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    assert told == "__FAKE_PNG__\n[a PNG figure was created and is shown to the user]\n"


def test_output_cut_at_a_character_boundary(e2b):
    call, told = run_one(e2b, "print('a' + '\u00e9' * 3000)")
    assert call["status"] == "completed"
    expected = "a" + "\u00e9" * 2047 + "\n[... 1907 more bytes of output were cut ...]\n"
    assert call["outputs"] == [{"type": "logs", "logs": expected}]
    assert told == expected


# ------------------------------------------------------ failures in a stream

def test_garbage_lines_are_skipped(e2b):
    e2b.fake.control(garbage_lines=True)
    status, _, body = post(e2b, [[{"call": "x = 41"}], [{"call": "print(x + 1)"}],
                                 [{"text": "{{last_output}}"}]])
    assert status == 200, body
    c1, c2, msg = body["output"]
    assert (c1["status"], c2["status"]) == ("completed", "completed")
    assert c2["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert msg["content"][0]["text"] == "42\n"
    assert e2b.fake.state()["created"] == 1


def test_keepalive_lines_are_ignored(e2b):
    e2b.fake.control(keepalive_interval=0.1)
    call, told = run_one(e2b, "import time\ntime.sleep(0.6)\nprint(42)")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert told == "42\n"


def test_cut_stream_fails_the_call(e2b):
    e2b.fake.control(cut_stream=True)
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "42\n" + CUT}]
    assert told == "42\n" + CUT + RESTARTED


def test_cut_stream_discards_the_sandbox_for_the_next_call(e2b):
    e2b.fake.control(cut_stream=True)
    status, _, body = post(e2b, [[{"call": "x = 41"}], [{"call": "print('x' in globals())"}],
                                 [{"text": "{{outputs}}"}]])
    assert status == 200, body
    c1, c2, msg = body["output"]
    assert [c["status"] for c in (c1, c2)] == ["completed", "completed"]
    assert c1["outputs"] == [{"type": "logs", "logs": CUT}]
    assert c2["outputs"] == [{"type": "logs", "logs": "False\n" + CUT}]
    assert json.loads(msg["content"][0]["text"]) == [CUT + RESTARTED,
                                                     "False\n" + CUT + RESTARTED]
    assert c1["container_id"] == c2["container_id"]
    # each failed execution discards its sandbox; the next call starts another
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 2)
    assert st["created"] == 2
    assert [d["status"] for d in st["deletes"]] == [204, 204]
    assert len({e["sandbox_id"] for e in st["executes"]}) == 2
    e2b.server.wait_sandboxes_destroyed()
    log = e2b.server.log_since_mark()
    assert "CI0301: sandbox destroyed (restarted after a failed execution)" in log


def test_execution_that_never_ends_times_out(e2b):
    # The code is held until after the answer: only the timeout can end it.
    e2b.fake.control(hold_execute="never")
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": TIMED_OUT}]
    assert told == TIMED_OUT + RESTARTED
    st = e2b.fake.state()
    assert [h["what"] for h in st["held"]] == ["execute"]
    # the module dropped the stream of the execution it gave up
    e2b.fake.until(lambda s: s["executes"][0]["peer"] in s["closed"],
                   "the module to drop the execution's stream")
    e2b.fake.release("never")


def test_output_before_a_timeout_is_kept(e2b):
    call, told = run_one(e2b, "print(0)\nprint(1)\nimport threading\n"
                              "threading.Event().wait(60)\nprint(2)")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "0\n1\n" + TIMED_OUT}]
    assert told == "0\n1\n" + TIMED_OUT + RESTARTED


def test_huge_output_is_cut_with_the_marker(e2b):
    e2b.fake.control(huge_output=1024 * 1024)
    call, told = run_one(e2b, "print('anything')")
    assert call["status"] == "completed"
    marker = "[... %d more bytes of output were cut ...]\n" % (1024 * 1024 - 4096)
    assert call["outputs"] == [{"type": "logs", "logs": "x" * 4096 + "\n" + marker}]
    assert told == "x" * 4096 + "\n" + marker


def test_output_past_the_hard_cap_stops_the_execution(e2b):
    e2b.fake.control(huge_output=33 * 1024 * 1024)
    call, told = run_one(e2b, "print('anything')")
    assert call["status"] == "completed"
    [logs] = call["outputs"]
    m = re.fullmatch(r"x{4096}\n\[\.\.\. (\d+) more bytes of output were cut \.\.\.\]\n"
                     + re.escape(TOO_MUCH), logs["logs"])
    assert m, logs["logs"][4000:]
    assert 30 * 1024 * 1024 < int(m.group(1)) < 32 * 1024 * 1024
    assert told == logs["logs"] + RESTARTED


def test_sandbox_expired_between_calls(e2b, model):
    result = {}

    def run():
        result["r"] = post(e2b, [[{"call": "x = 41"}],
                                 [{"hold": "expired"}, {"call": "print(x + 1)"}],
                                 [{"call": "print('x' in globals())"}],
                                 [{"text": "{{outputs}}"}]])

    t = threading.Thread(target=run)
    t.start()
    # the first call has run and the model holds the second round back
    wait_until(lambda: model.holds()["waiting"] == ["expired"], "the second round")
    st = e2b.fake.state()
    assert len(st["executes"]) == 1
    first = st["creates"][0]["id"]
    EXPIRED.add(first)
    assert e2b.fake.call("POST", "/_expire", {"id": first})[0] == 200
    model.release("expired")
    t.join()
    status, _, body = result["r"]
    assert status == 200, body
    c1, c2, c3, msg = body["output"]
    assert [c["status"] for c in (c1, c2, c3)] == ["completed"] * 3
    assert c2["outputs"] == [{"type": "logs", "logs": EXPIRED_MSG}]
    assert c3["outputs"] == [{"type": "logs", "logs": "False\n"}]
    assert json.loads(msg["content"][0]["text"]) == \
        ["(no output)", EXPIRED_MSG + RESTARTED, "False\n"]
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 2)
    second = st["creates"][1]["id"]
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(first, 404), (second, 204)]
    # the expired sandbox was not sent the second execution
    assert [e["sandbox_id"] for e in st["executes"]] == [first, second]


def test_kernel_dies_fails_the_call(e2b):
    e2b.fake.control(kernel_dies=True)
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    text = "UnexpectedEndOfExecution: Kernel died\n"
    assert call["outputs"] == [{"type": "logs", "logs": text + DIED}]
    assert told == text + DIED + RESTARTED


def test_execute_502_fails_the_call(e2b):
    e2b.fake.control(execute_status=502)
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": HTTP_502}]
    assert told == HTTP_502 + RESTARTED


def test_exception_is_a_completed_call_with_the_traceback(e2b):
    call, told = run_one(e2b, "1 / 0")
    assert call["status"] == "completed"
    [logs] = call["outputs"]
    assert logs["logs"].startswith("Traceback (most recent call last):\n")
    assert logs["logs"].endswith("ZeroDivisionError: division by zero\n")
    assert told == logs["logs"]


# -------------------------------------------------- failures to create

@pytest.mark.parametrize("status,message", [
    (401, "Invalid API key"),
    (429, "Rate limit exceeded, please try again later"),
    (500, "Internal server error"),
])
def test_create_refused_is_503(e2b, status, message):
    """A refusal is answered 503; one that may pass (429: E2B's limit on
    concurrent sandboxes, or 5xx) is tried again, backing off, for up to
    10 s first."""
    e2b.fake.control(create_status=status)
    code, hdrs, body = post(e2b, [[{"call": "print(42)"}], [{"text": "{{last_output}}"}]])
    assert code == 503
    assert body == {"error": {"message": UNAVAILABLE, "type": "server_error",
                              "param": None, "code": "sandbox_unavailable"}} if status != 429 \
        else {"error": {"message": "The sandbox service has no room for another sandbox now "
                                   "(its concurrency limit); retry shortly.",
                        "type": "server_error", "param": None, "code": "sandbox_capacity"}}
    assert "retry-after" in hdrs
    st = e2b.fake.state()
    assert len(st["creates"]) == 1 if status == 401 else len(st["creates"]) > 3
    assert {c["status"] for c in st["creates"]} == {status}
    assert st["executes"] == []
    log = e2b.server.log_since_mark()
    assert ("CI0303: sandbox of tool cloud could not start: the E2B sandbox service "
            "refused to create a sandbox (HTTP %d: %s)" % (status, message)) in log
    assert "CI0302:" not in log


def test_create_without_token_is_503_and_the_sandbox_deleted(e2b):
    e2b.fake.control(create_without_token=True)
    code, hdrs, body = post(e2b, [[{"call": "print(42)"}], [{"text": "{{last_output}}"}]])
    assert code == 503
    assert body == {"error": {"message": UNAVAILABLE, "type": "server_error",
                              "param": None, "code": "sandbox_unavailable"}}
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    [create] = st["creates"]
    assert create["status"] == 201
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(create["id"], 204)]
    assert st["executes"] == []
    log = e2b.server.log_since_mark()
    assert "CI0303: sandbox of tool cloud could not start: " + NO_TOKEN in log


def test_control_plane_unreachable_is_503(e2b):
    code, _, body = post(e2b, [[{"call": "print(42)"}], [{"text": "{{last_output}}"}]],
                         path="/e2bgone/v1/responses")
    assert code == 503
    assert body == {"error": {"message": UNAVAILABLE, "type": "server_error",
                              "param": None, "code": "sandbox_unavailable"}}
    log = e2b.server.log_since_mark()
    assert ("CI0303: sandbox of tool cloudgone could not start: the E2B sandbox "
            "service could not be reached (") in log


# ---------------------------------------------------------- streaming

def sse_events(raw):
    """The data: payloads of an SSE answer, parsed."""
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data:"):
                out.append(json.loads(line[5:].strip()))
    return out


def test_streamed_round_trip(e2b):
    body = ci_body([[{"call": "x = 41"}], [{"call": "print(x + 1)"}],
                    [{"text": "{{last_output}}"}]])
    body["stream"] = True
    status, _, raw = e2b.server.request("POST", "/e2b/v1/responses", body,
                                        headers=ANONYMOUS)
    BODIES.append(raw)
    assert status == 200
    events = sse_events(raw)
    assert events[-1]["type"] == "response.completed"
    c1, c2, msg = events[-1]["response"]["output"]
    assert (c1["status"], c2["status"]) == ("completed", "completed")
    assert c2["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert msg["content"][0]["text"] == "42\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert st["created"] == 1
    assert len({e["sandbox_id"] for e in st["executes"]}) == 1


def test_streamed_create_failure(e2b):
    e2b.fake.control(create_status=401)
    body = ci_body([[{"call": "print(42)"}], [{"text": "{{last_output}}"}]])
    body["stream"] = True
    status, _, raw = e2b.server.request("POST", "/e2b/v1/responses", body,
                                        headers=ANONYMOUS)
    BODIES.append(raw)
    for key in ALL_KEYS:
        assert key.encode() not in raw
    assert status == 200
    events = sse_events(raw)
    errors = [e for e in events if e["type"] == "error"]
    assert errors == [{
        "type": "error", "sequence_number": len(events) - 2,
        "code": "sandbox_unavailable", "message": UNAVAILABLE, "param": None,
        "error": {"type": "server_error", "code": "sandbox_unavailable",
                  "message": UNAVAILABLE, "param": None}}]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "server_error",
                                               "message": UNAVAILABLE}
    assert len(e2b.fake.state()["creates"]) == 1


# ---------------------------------------------------------- interrupts and load

def test_client_disconnect_stops_the_execution_and_deletes(e2b, model):
    # The code is held for the whole test: only the disconnect (or the
    # execution timeout, which the log tells apart) can stop it.
    e2b.fake.control(hold_execute="disconnect")
    conn = http.client.HTTPConnection("127.0.0.1", e2b.server.port, timeout=10)
    conn.request("POST", "/e2b/v1/responses",
                 body=json.dumps(ci_body([[{"call": "print('never')"}],
                                          [{"text": "{{last_output}}"}]])),
                 headers=dict(CLIENT_HEADERS, **ANONYMOUS))
    st = e2b.fake.until(lambda s: s["held"], "the execution to start")
    [execute] = st["executes"]
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    st = e2b.fake.until(lambda s: s["deletes"] and s["deletes"][0]["status"] is not None,
                        "the sandbox to be deleted")
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(execute["sandbox_id"], 204)]
    # the module dropped the execution's stream, the code still held
    assert [h["what"] for h in st["held"]] == ["execute"]
    e2b.fake.until(lambda s: execute["peer"] in s["closed"],
                   "the module to drop the execution's stream")
    e2b.server.wait_sandboxes_destroyed()
    log = e2b.server.log_since_mark()
    # stopped by the disconnect: not recorded as a failed (timed out) call,
    # no restart, no follow-up
    assert "CI0206: client went away; loop stopped after round 1" in log
    assert "CI0201" not in log
    assert "restarted after a failed execution" not in log
    assert "CI0301: sandbox destroyed (request ended) tool=cloud " in log
    assert len(model.requests()) == 1
    e2b.fake.release("disconnect")


def test_parallel_requests_each_get_their_own_sandbox(e2b):
    results = {}

    def one(i):
        results[i] = post(e2b, [[{"call": "n = %d" % i}], [{"call": "print(n * 2)"}],
                                [{"text": "{{last_output}}"}]])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        status, _, body = results[i]
        assert status == 200, body
        assert body["output"][-1]["content"][0]["text"] == "%d\n" % (i * 2)
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 6)
    assert st["created"] == 6
    assert len({c["id"] for c in st["creates"]}) == 6
    assert sorted(d["status"] for d in st["deletes"]) == [204] * 6


# ---------------------------------------------------------- deleting

def test_delete_404_is_not_retried(e2b):
    e2b.fake.control(delete_status=404)
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    assert told == "42\n"
    st = deletes_settled(e2b, 1)
    [create] = st["creates"]
    assert [(d["id"], d["status"], d["api_key"]) for d in st["deletes"]] == \
        [(create["id"], 404, KEY)]
    e2b.server.wait_sandboxes_destroyed()
    assert module_problems(e2b.server.log_since_mark()) == []
    e2b.fake.remove_leftovers()


def test_delete_500_is_retried_once(e2b):
    e2b.fake.control(delete_status=500)
    call, told = run_one(e2b, "print(42)")
    assert call["status"] == "completed"
    assert told == "42\n"
    st = deletes_settled(e2b, 2)
    [create] = st["creates"]
    assert [(d["id"], d["status"], d["api_key"]) for d in st["deletes"]] == \
        [(create["id"], 500, KEY), (create["id"], 500, KEY)]
    e2b.fake.remove_leftovers()


def test_delete_is_off_the_request_path(e2b):
    """A delete the service does not answer does not hold up the next
    request on the same connection: the fake holds the delete until both
    answers are in."""
    e2b.fake.control(hold_delete="delete")
    conn = http.client.HTTPConnection("127.0.0.1", e2b.server.port, timeout=30)
    conn.request("POST", "/e2b/v1/responses", headers=dict(CLIENT_HEADERS, **ANONYMOUS),
                 body=json.dumps(ci_body([[{"call": "print(42)"}],
                                          [{"text": "{{last_output}}"}]])))
    r = conn.getresponse()
    first = json.loads(r.read())
    assert r.status == 200, first
    assert first["output"][-1]["content"][0]["text"] == "42\n"
    sock = conn.sock
    e2b.fake.until(lambda s: s["held"], "the delete to reach the service")
    conn.request("POST", "/e2b/v1/responses", headers=dict(CLIENT_HEADERS, **ANONYMOUS),
                 body=json.dumps(ci_body([[{"text": "no code"}]])))
    try:
        r = conn.getresponse()
    except TimeoutError:
        raise AssertionError("the next request waited for the delete") from None
    second = json.loads(r.read())
    assert conn.sock is sock          # the same connection
    conn.close()
    assert r.status == 200, second
    assert second["output"][0]["content"][0]["text"] == "no code"
    st = e2b.fake.state()
    [create] = st["creates"]
    assert st["held"] == [{"gate": "delete", "what": "delete", "sandbox_id": create["id"]}]
    assert [d["status"] for d in st["deletes"]] == [None]
    e2b.fake.release("delete")
    st = deletes_settled(e2b, 1)
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(create["id"], 204)]


# ---------------------------------------------------------- key rotation

def test_key_from_file_rotates_on_graceful(e2b):
    call, told = run_one(e2b, "print(42)", path="/e2bfile/v1/responses")
    assert call["status"] == "completed"
    assert told == "42\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert [c["api_key"] for c in st["creates"]] == [KEY_A]
    assert [d["api_key"] for d in st["deletes"]] == [KEY_A]

    write_key(e2b.key_file, KEY_B)
    e2b.server.graceful()
    e2b.fake.reset()
    call, told = run_one(e2b, "print(43)", path="/e2bfile/v1/responses")
    assert call["status"] == "completed"
    assert told == "43\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert [c["api_key"] for c in st["creates"]] == [KEY_B]
    assert [d["api_key"] for d in st["deletes"]] == [KEY_B]
    assert st["leaks"] == []

    # the env: key of the other sandbox is unchanged
    e2b.fake.reset()
    call, told = run_one(e2b, "print(44)")
    assert told == "44\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert [c["api_key"] for c in st["creates"]] == [KEY]


def test_sandbox_in_flight_across_graceful_is_deleted_with_its_own_key(e2b):
    result = {}

    def run():
        result["r"] = post(e2b, [[{"call": "print(7)"}], [{"text": "{{last_output}}"}]],
                           path="/e2bfile/v1/responses")

    old = KEY_B if open(e2b.key_file).read().strip() == KEY_B else KEY_A
    new = KEY_A if old == KEY_B else KEY_B
    e2b.fake.control(hold_execute="reload")
    t = threading.Thread(target=run)
    t.start()
    e2b.fake.until(lambda s: s["held"], "the execution to start")
    write_key(e2b.key_file, new)
    e2b.server.graceful()
    e2b.fake.release("reload")
    t.join()
    status, _, body = result["r"]
    assert status == 200, body
    assert body["output"][-1]["content"][0]["text"] == "7\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 1)
    assert [c["api_key"] for c in st["creates"]] == [old]
    assert [(d["api_key"], d["status"]) for d in st["deletes"]] == [(old, 204)]


@pytest.mark.parametrize("spec,message", [
    ("env:E2B_NOT_SET_ANYWHERE",
     "api_key=env:E2B_NOT_SET_ANYWHERE: the environment variable is not set"),
    ("file:/nonexistent/e2b.key", "api_key=file:/nonexistent/e2b.key: the file cannot be read"),
    ("file:EMPTY", "api_key=file:EMPTY: the file holds no key"),
])
def test_unresolvable_key_fails_configtest(e2b, model, tmp_path, spec, message):
    if spec == "file:EMPTY":
        empty = tmp_path / "empty.key"
        empty.write_text("\n")
        spec = "file:%s" % empty
        message = message.replace("EMPTY", str(empty))
    line = sandbox_line("bad", spec, e2b.fake.url)
    server = Httpd("e2bconf", base_conf(model.port, extra=line))
    server.write_conf()
    out = server.configtest()
    assert_syntax_error(server, out, line, "CodeInterpreterSandbox bad: " + message)
    for key in ALL_KEYS:
        assert key not in out.stderr + out.stdout


def test_literal_key_is_not_echoed_by_configtest_errors(e2b, model):
    line = sandbox_line("bad", KEY, e2b.fake.url, " bogus=1")
    server = Httpd("e2bconf", base_conf(model.port, extra=line))
    server.write_conf()
    out = server.configtest()
    assert_syntax_error(server, out, line,
                        "CodeInterpreterSandbox bad: unknown key 'bogus' for provider e2b: "
                        "expected one of provider, timeout, max_output, idle, max_idle, "
                        "retention, tiers, max_file, max_files, max_bytes, egress, "
                        "allowed_domains, egress_proxy, egress_ca, api_key, api_base, "
                        "template, lifetime, internet, sandbox_url")
    assert KEY not in out.stderr + out.stdout


# ------------------------------------------------------------ no key leaks

def test_zz_no_key_in_the_whole_log_or_any_body(e2b):
    log = e2b.server.log()
    assert "CI0302:" in log            # the log did trace sandboxes
    # every module, not just this one, logged at debug level
    assert re.search(r"\[(?!code_interpreter:)[a-z_]+:debug\]", log)
    for key in ALL_KEYS:
        assert key not in log
        assert not any(key.encode() in body for body in BODIES)
    assert BODIES
