"""Self-test of the scripted Responses API upstream (test/fake_model.py)."""

import base64
import http.client
import json
import os
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_model  # noqa: E402
from conftest import OPENAPI, require_spec  # noqa: E402

CODE_TOOL = {
    "type": "function",
    "name": "python",
    "description": "Run Python code",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                   "required": ["code"]},
    "strict": False,
}
AUTH = {"Authorization": "Bearer sk-fake-model-test"}
NO_KEY = {"error": {
    "message": "You didn't provide an API key. You need to provide your API key in an "
               "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
               "or as the password field (with blank username) if you're accessing the API "
               "from your browser and are prompted for a username and password. You can "
               "obtain an API key from https://platform.openai.com/account/api-keys.",
    "type": "invalid_request_error", "param": None, "code": None}}


@pytest.fixture(scope="module")
def port():
    server, port = fake_model.start()
    yield port
    server.shutdown()
    server.server_close()


def request(port, method, path, body=None, headers=None, conn=None):
    """HEADERS are added to an API key and, with a body, a JSON Content-Type;
    a None value leaves one out."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    hdrs = dict(AUTH)
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        if isinstance(data, str):
            data = data.encode()
        hdrs["Content-Type"] = "application/json"
    hdrs.update(headers or {})
    hdrs = {k: v for k, v in hdrs.items() if v is not None}
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    if own:
        conn.close()
    return resp, raw


def create(port, body, **kw):
    resp, raw = request(port, "POST", "/v1/responses", body, **kw)
    return resp.status, (json.loads(raw) if raw else None)


def script_msg(rounds):
    return {"role": "user", "content": "please compute SCRIPT: " + json.dumps(rounds)}


def parse_sse(raw):
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ")
        assert lines[1].startswith("data: ")
        etype = lines[0][len("event: "):]
        data = json.loads(lines[1][len("data: "):])
        assert data["type"] == etype
        events.append(data)
    return events


TWO_ROUNDS = [[{"call": "print(6*7)"}], [{"text": "answer={{last_output}} all={{outputs}}"}]]


def test_two_rounds_stateless_replay(port):
    user = script_msg(TWO_ROUNDS)
    st, r1 = create(port, {"model": "m1", "input": [user], "tools": [CODE_TOOL]})
    assert st == 200, r1
    assert r1["object"] == "response" and r1["status"] == "completed"
    assert r1["model"] == "m1"
    assert len(r1["output"]) == 1
    fc = r1["output"][0]
    assert fc["type"] == "function_call" and fc["name"] == "python"
    assert json.loads(fc["arguments"]) == {"code": "print(6*7)"}
    assert fc["id"].startswith("fc_") and fc["call_id"].startswith("call_")
    assert fc["status"] == "completed"
    assert r1["usage"]["input_tokens"] == 11
    assert r1["usage"]["output_tokens"] == 5
    assert r1["usage"]["total_tokens"] == 16

    out = {"type": "function_call_output", "call_id": fc["call_id"], "output": "42\n"}
    st, r2 = create(port, {"input": [user, fc, out], "tools": [CODE_TOOL], "store": False})
    assert st == 200, r2
    msg = r2["output"][0]
    assert msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["content"][0]["text"] == 'answer=42\n all=["42\\n"]'
    assert msg["content"][0]["annotations"] == []
    assert r2["store"] is False
    assert r2["usage"]["input_tokens"] == 13

    # past the end of the script
    st, r3 = create(port, {"input": [user, fc, out, msg, {"role": "user", "content": "more"}],
                           "tools": [CODE_TOOL]})
    assert st == 200
    assert r3["output"][0]["content"][0]["text"] == "done"
    assert len({r1["id"], r2["id"], r3["id"]}) == 3

    # store:false responses cannot be chained
    st, err = create(port, {"input": "x", "previous_response_id": r2["id"]})
    assert st == 400
    assert err["error"]["param"] == "previous_response_id"


def test_two_rounds_previous_response_id(port):
    st, r1 = create(port, {"input": [script_msg(TWO_ROUNDS)], "tools": [CODE_TOOL]})
    assert st == 200
    fc = r1["output"][0]
    st, r2 = create(port, {
        "previous_response_id": r1["id"], "tools": [CODE_TOOL],
        "input": [{"type": "function_call_output", "call_id": fc["call_id"], "output": "42"}],
    })
    assert st == 200, r2
    assert r2["previous_response_id"] == r1["id"]
    assert r2["output"][0]["content"][0]["text"] == 'answer=42 all=["42"]'
    # history: script msg, call, output -> 10 + 3
    assert r2["usage"]["input_tokens"] == 13
    st, r3 = create(port, {"previous_response_id": r2["id"], "input": "again"})
    assert r3["output"][0]["content"][0]["text"] == "done"
    # stored response can be fetched
    resp, raw = request(port, "GET", "/v1/responses/" + r1["id"])
    assert resp.status == 200 and json.loads(raw)["id"] == r1["id"]


def test_conversation(port):
    conv = {"id": "conv_test_1"}
    st, r1 = create(port, {"conversation": conv, "input": [script_msg(TWO_ROUNDS)],
                           "tools": [CODE_TOOL]})
    assert st == 200
    fc = r1["output"][0]
    st, r2 = create(port, {"conversation": "conv_test_1", "tools": [CODE_TOOL], "input": [
        {"type": "function_call_output", "call_id": fc["call_id"], "output": "7"}]})
    assert st == 200, r2
    assert r2["output"][0]["content"][0]["text"].startswith("answer=7")
    st, err = create(port, {"conversation": conv, "previous_response_id": r1["id"],
                            "input": "x"})
    assert st == 400
    assert err["error"]["message"] == "Cannot use both 'conversation' and 'previous_response_id'."
    assert err["error"]["param"] == "conversation"


def test_unanswered_call_and_orphan_output(port):
    st, r1 = create(port, {"input": [script_msg(TWO_ROUNDS)], "tools": [CODE_TOOL]})
    call_id = r1["output"][0]["call_id"]
    st, err = create(port, {"previous_response_id": r1["id"], "input": "what now?"})
    assert st == 400
    assert err["error"] == {"message": "No tool output found for function call %s." % call_id,
                            "type": "invalid_request_error", "param": "input", "code": None}
    st, err = create(port, {"input": [
        {"type": "function_call_output", "call_id": "call_nope", "output": "1"}]})
    assert st == 400
    assert err["error"]["message"] == \
        "No tool call found for function call output with call_id call_nope."
    assert err["error"]["param"] == "input"
    st, err = create(port, {"previous_response_id": "resp_unknown", "input": "x"})
    assert st == 400
    assert err["error"]["message"] == "Previous response with id 'resp_unknown' not found."
    assert err["error"]["param"] == "previous_response_id"


def test_refuses_hosted_code_interpreter(port):
    st, err = create(port, {"input": "hi",
                            "tools": [{"type": "code_interpreter",
                                       "container": {"type": "auto"}}]})
    assert st == 400
    assert err["error"] == {"message": "Unsupported tool type: code_interpreter",
                            "type": "invalid_request_error", "param": "tools", "code": None}
    st, err = create(port, {"input": [
        {"role": "user", "content": "hi"},
        {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
         "container_id": "cntr_1", "code": "1", "outputs": None}]})
    assert st == 400
    assert err["error"]["message"] == "Unsupported input item type: code_interpreter_call"
    assert err["error"]["param"] == "input"
    st, err = create(port, {"input": "hi", "tools": [CODE_TOOL],
                            "tool_choice": {"type": "code_interpreter"}})
    assert st == 400
    assert err["error"]["message"] == "Unsupported tool_choice type: code_interpreter"
    assert err["error"]["param"] == "tool_choice"
    st, err = create(port, {"input": "hi", "tools": [CODE_TOOL], "tool_choice": {
        "type": "allowed_tools", "mode": "auto",
        "tools": [{"type": "function", "name": "python"}, {"type": "code_interpreter"}]}})
    assert st == 400 and err["error"]["param"] == "tool_choice"
    # a script that calls code without any code tool offered
    st, err = create(port, {"input": [script_msg([[{"call": "1"}]])]})
    assert st == 400
    assert err["error"]["message"] == "Script calls code but no code tool was offered."
    assert err["error"]["param"] == "tools"


def test_bad_json_and_unknown_paths(port):
    st, err = create(port, b"{not json")
    assert st == 400
    assert err == {"error": {"message": "We could not parse the JSON body of your request.",
                             "type": "invalid_request_error", "param": None, "code": None}}
    resp, raw = request(port, "GET", "/v1/nothing")
    assert resp.status == 404
    assert json.loads(raw)["error"]["type"] == "invalid_request_error"
    resp, raw = request(port, "GET", "/_health")
    assert resp.status == 200 and raw == b"ok"


# ------------------------------------------------ refused like OpenAI refuses

def test_refuses_a_request_without_an_api_key(port):
    request(port, "POST", "/_reset")
    for headers in ({"Authorization": None}, {"Authorization": "Bearer "},
                    {"Authorization": "Basic dXNlcjpwYXNz"}):
        resp, raw = request(port, "POST", "/v1/responses", {"input": "hi"}, headers=headers)
        assert resp.status == 401, headers
        assert json.loads(raw) == NO_KEY
    # reading a stored response needs one too
    resp, raw = request(port, "GET", "/v1/responses/resp_x", headers={"Authorization": None})
    assert resp.status == 401
    assert json.loads(raw) == NO_KEY
    # refused before the script was read: the round was not used up
    recs = json.loads(request(port, "GET", "/_requests")[1])
    assert [r["status"] for r in recs] == [401] * 4
    assert [r["answer"] for r in recs] == [NO_KEY] * 4
    # any key is taken
    st, r = create(port, {"input": "hi"}, headers={"Authorization": "bearer sk-other"})
    assert st == 200, r


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded"],
                         ids=["none", "text-plain", "form"])
def test_refuses_a_body_not_declared_json(port, ctype):
    resp, raw = request(port, "POST", "/v1/responses", {"input": "hi"},
                        headers={"Content-Type": ctype})
    assert resp.status == 400
    shown = ctype or ""
    assert json.loads(raw) == {"error": {
        "message": "Unsupported content type: '%s'. This API method only accepts "
                   "'application/json' requests, but you specified the header "
                   "'Content-Type: %s'. Please try again with a supported content type."
                   % (shown, shown),
        "type": "invalid_request_error", "param": None, "code": "unsupported_content_type"}}


def test_takes_json_with_a_charset(port):
    st, r = create(port, {"input": "hi"},
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert st == 200, r


def test_refuses_unknown_parameters(port):
    request(port, "POST", "/_reset")
    body = {"model": "m", "input": "hi", "max_agentic_loops": 3, "x": 1}
    st, err = create(port, body)
    assert st == 400
    assert err == {"error": {"message": "Unknown parameter: 'max_agentic_loops'.",
                             "type": "invalid_request_error", "param": "max_agentic_loops",
                             "code": "unknown_parameter"}}
    # a test may allow vendor extensions, until the next reset
    resp, raw = request(port, "POST", "/_control",
                        {"extra_parameters": ["max_agentic_loops"]})
    assert resp.status == 200 and json.loads(raw) == {"extra_parameters": ["max_agentic_loops"]}
    st, err = create(port, body)
    assert st == 400
    assert err["error"]["param"] == "x" and err["error"]["message"] == "Unknown parameter: 'x'."
    st, r = create(port, {"input": "hi", "max_agentic_loops": 3})
    assert st == 200, r
    request(port, "POST", "/_reset")
    st, err = create(port, {"input": "hi", "max_agentic_loops": 3})
    assert st == 400 and err["error"]["code"] == "unknown_parameter"
    for bad in ({"extra_parameters": "x"}, {"extra_parameters": [1]}, {"other": []}, []):
        resp, raw = request(port, "POST", "/_control", bad)
        assert resp.status == 400, bad


def test_known_parameters_are_those_of_create_response():
    with open(require_spec(OPENAPI)) as f:
        schemas = json.load(f)["components"]["schemas"]
    props = set()

    def walk(schema):
        if "$ref" in schema:
            walk(schemas[schema["$ref"].rsplit("/", 1)[1]])
            return
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in schema.get(key, []):
                walk(sub)
        props.update(schema.get("properties", {}))

    walk(schemas["CreateResponse"])
    assert fake_model.CREATE_PARAMETERS == props


def test_requests_record_what_was_answered(port):
    request(port, "POST", "/_reset")
    st, r = create(port, {"input": [script_msg([[{"call": "1"}]])], "tools": [CODE_TOOL]})
    assert st == 200
    st, err = create(port, {"input": "x", "previous_response_id": "resp_nope"})
    assert st == 400
    resp, raw = request(port, "POST", "/v1/responses",
                        {"input": [script_msg([[{"text": "s"}]])], "stream": True})
    final = parse_sse(raw)[-1]["response"]
    recs = json.loads(request(port, "GET", "/_requests")[1])
    assert [(rec["status"], rec["answer"]) for rec in recs] == [(200, r), (400, err),
                                                                (200, final)]


def test_no_script_answers_ok(port):
    st, r = create(port, {"input": "hello", "metadata": {"a": "b"}, "instructions": "be nice"})
    assert st == 200
    assert r["output"][0]["content"][0]["text"] == "ok"
    assert r["metadata"] == {"a": "b"} and r["instructions"] == "be nice"
    assert r["model"] == "fake-model" and r["tool_choice"] == "auto"
    assert r["parallel_tool_calls"] is True and r["tools"] == []


def test_streaming_event_order(port):
    rounds = [[{"reasoning": "thinking"}, {"text": "hello streaming world"},
               {"call": "print(1)"}]]
    resp, raw = request(port, "POST", "/v1/responses",
                        {"input": [script_msg(rounds)], "tools": [CODE_TOOL], "stream": True})
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    assert resp.getheader("Transfer-Encoding") == "chunked"
    events = parse_sse(raw)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] == "response.completed"
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == [] and events[0]["response"]["usage"] is None
    # collapse repeated deltas for an order check
    compact = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
    assert compact == [
        "response.created", "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "hello streaming world"
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [o["type"] for o in final["output"]] == ["reasoning", "message", "function_call"]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1, 2]
    assert added[1]["item"]["status"] == "in_progress" and added[1]["item"]["content"] == []


def holds(port):
    resp, raw = request(port, "GET", "/_holds")
    assert resp.status == 200
    return json.loads(raw)


def release(port, gate):
    resp, raw = request(port, "POST", "/_release", {"gate": gate})
    assert resp.status == 204, raw


def wait_held(port, gate):
    deadline = time.monotonic() + 10
    while gate not in holds(port)["waiting"]:
        assert time.monotonic() < deadline, "nothing waits on gate %s: %s" % (gate, holds(port))
        time.sleep(0.01)


def test_held_stream_waits_for_its_gate_and_keeps_the_connection(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    rounds = [[{"text": "a"}, {"hold": "mid-stream", "after": 2}]]
    conn.request("POST", "/v1/responses", headers=dict(AUTH, **{
        "Content-Type": "application/json"}), body=json.dumps(
            {"input": [script_msg(rounds)], "stream": True}))
    resp = conn.getresponse()
    assert resp.status == 200
    first = b""
    while first.count(b"\n\n") < 2:
        first += resp.readline()
    assert [e["type"] for e in parse_sse(first)] == ["response.created",
                                                     "response.in_progress"]
    wait_held(port, "mid-stream")
    release(port, "mid-stream")
    events = [e["type"] for e in parse_sse(first + resp.read())]
    assert events[2] == "response.output_item.added"
    assert events[-1] == "response.completed"
    assert holds(port) == {"waiting": [], "expired": []}
    # same connection still usable
    st, r = create(port, {"input": "x"}, conn=conn)
    assert st == 200
    conn.close()


def test_held_json_answer_waits_for_its_gate(port):
    got = {}
    body = {"input": [script_msg([[{"text": "late"}, {"hold": "json"}]])]}
    t = threading.Thread(target=lambda: got.setdefault("r", create(port, body)))
    t.start()
    wait_held(port, "json")
    assert "r" not in got
    release(port, "json")
    t.join(10)
    assert got["r"][0] == 200
    assert got["r"][1]["output"][0]["content"][0]["text"] == "late"
    # a gate opened before anything waits on it lets the answer through
    release(port, "early")
    st, r = create(port, {"input": [script_msg([[{"text": "x"}, {"hold": "early"}]])]})
    assert st == 200


def test_reset_opens_every_gate(port):
    got = {}
    body = {"input": [script_msg([[{"text": "freed"}, {"hold": "forgotten"}]])]}
    t = threading.Thread(target=lambda: got.setdefault("r", create(port, body)))
    t.start()
    wait_held(port, "forgotten")
    resp, _ = request(port, "POST", "/_reset")
    assert resp.status == 204
    t.join(10)
    assert got["r"][0] == 200


def test_gate_left_shut_drops_the_connection(port, monkeypatch):
    monkeypatch.setattr(fake_model, "HOLD_LIMIT", 0.2)
    request(port, "POST", "/_reset")
    with pytest.raises(http.client.RemoteDisconnected):
        create(port, {"input": [script_msg([[{"text": "never"}, {"hold": "shut"}]])]})
    assert holds(port) == {"waiting": [], "expired": ["shut"]}
    [rec] = json.loads(request(port, "GET", "/_requests")[1])
    assert (rec["status"], rec["answer"]) == (None, None)


def test_chunked_request_body(port):
    body = json.dumps({"input": [script_msg([[{"text": "chunked fine"}]])]}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
    conn.request("POST", "/v1/responses", body=iter(pieces), encode_chunked=True,
                 headers=dict(AUTH, **{"Content-Type": "application/json",
                                       "Transfer-Encoding": "chunked",
                                       "X-Probe": "chunk-test"}))
    resp = conn.getresponse()
    data = json.loads(resp.read())
    assert resp.status == 200
    assert data["output"][0]["content"][0]["text"] == "chunked fine"
    # keep-alive after a chunked request
    st, r = create(port, {"input": "again"}, conn=conn)
    assert st == 200
    conn.close()
    resp, raw = request(port, "GET", "/_requests")
    recs = [r for r in json.loads(raw)
            if ["X-Probe", "chunk-test"] in r["headers"]]
    assert len(recs) == 1
    assert base64.b64decode(recs[0]["body_b64"]) == body
    assert recs[0]["method"] == "POST" and recs[0]["path"] == "/v1/responses"


def test_tool_choice_none(port):
    rounds = [[{"reasoning": "r"}, {"call": "1"}, {"function": {"name": "f", "arguments": {}}},
               {"text": "kept"}]]
    st, r = create(port, {"input": [script_msg(rounds)], "tool_choice": "none"})
    assert st == 200, r
    assert [o["type"] for o in r["output"]] == ["reasoning", "message", "message", "message"]
    texts = [o["content"][0]["text"] for o in r["output"][1:]]
    assert texts == ["tool_choice none honoured", "tool_choice none honoured", "kept"]
    assert r["tool_choice"] == "none"
    assert r["usage"]["output_tokens_details"]["reasoning_tokens"] == 3


def test_other_actions(port):
    rounds = [[{"calls": 3, "code": "x=1"}, {"function": {"name": "lookup",
                                                          "arguments": {"q": 1}}},
               {"raw_call": {"name": "python", "arguments": "not json"}}, {"big": 1000}]]
    st, r = create(port, {"input": [script_msg(rounds)], "tools": [CODE_TOOL]})
    assert st == 200, r
    out = r["output"]
    assert [o["name"] for o in out[:5]] == ["python"] * 3 + ["lookup", "python"]
    assert out[3]["arguments"] == '{"q": 1}' and out[4]["arguments"] == "not json"
    assert out[5]["content"][0]["text"] == "x" * 1000
    assert len({o["id"] for o in out}) == 6
    # error action with headers, limited by "times"
    rounds = [[{"error": {"status": 429, "body": {"error": {"message": "slow down",
                                                           "type": "rate_limit_error",
                                                           "param": None, "code": None}},
                          "headers": {"Retry-After": "7"}}, "times": 1},
               {"text": "after retry"}]]
    body = {"input": [script_msg(rounds)]}
    resp, raw = request(port, "POST", "/v1/responses", body)
    assert resp.status == 429 and resp.getheader("Retry-After") == "7"
    assert json.loads(raw)["error"]["message"] == "slow down"
    st, r = create(port, body)
    assert st == 200 and r["output"][0]["content"][0]["text"] == "after retry"
    # garbage
    resp, raw = request(port, "POST", "/v1/responses",
                        {"input": [script_msg([[{"garbage": "{\"id\": "}]])]})
    assert resp.status == 200 and raw == b"{\"id\": "
    assert resp.getheader("Content-Type") == "application/json"


def test_hang_up_closes_silently_and_peer_is_recorded(port):
    request(port, "POST", "/_reset")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = {"input": [script_msg([[{"text": "bye"}, {"hang_up": True}]])]}
    resp, raw = request(port, "POST", "/v1/responses", body, conn=conn)
    assert resp.status == 200
    assert json.loads(raw)["output"][0]["content"][0]["text"] == "bye"
    assert resp.getheader("Connection") is None       # nothing said ...
    assert conn.sock.recv(1) == b""                    # ... and the connection is gone
    local = "%s:%d" % conn.sock.getsockname()[:2]
    conn.close()
    resp, raw = request(port, "GET", "/_requests")
    assert [r["peer"] for r in json.loads(raw)] == [local]


def test_stream_fail(port):
    resp, raw = request(port, "POST", "/v1/responses", {
        "input": [script_msg([[{"text": "partial"}, {"stream_fail": "boom"}]])],
        "stream": True})
    events = parse_sse(raw)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": "boom"}


def test_reset(port):
    create(port, {"input": "x"})
    resp, _ = request(port, "POST", "/_reset")
    assert resp.status == 204
    resp, raw = request(port, "GET", "/_requests")
    assert json.loads(raw) == []


def test_command_line_ready_line():
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, os.path.join(here, "fake_model.py"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("READY ")
        port = int(line.split()[1])
        st, r = create(port, {"input": "hi"})
        assert st == 200
        # a client that leaves before its held answer is sent is no error
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/responses", headers=dict(AUTH, **{
            "Content-Type": "application/json"}), body=json.dumps(
                {"input": [script_msg([[{"text": "x"}, {"hold": "left"}]])]}))
        wait_held(port, "left")
        conn.close()
        release(port, "left")
        deadline = time.monotonic() + 10
        while json.loads(request(port, "GET", "/_requests")[1])[-1].get("status") is None:
            assert time.monotonic() < deadline, "the held answer was never sent"
            time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.stderr.read() == b""
