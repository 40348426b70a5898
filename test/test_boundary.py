"""The trust boundary: what a client can and cannot make the module do. A
function that happens to bear our name never runs without this request's
code_interpreter tool; control-looking fields and headers change nothing; the
fields we do not own reach the upstream as sent; concurrent requests never
share a sandbox, whatever ids they send; and every path destroys the sandbox."""
import base64
import json
import os
import re
import socket
import threading
import time

import pytest

from conftest import ANONYMOUS, API_KEY, TOOL, script_input
from test_loop import sandboxes_started

OUTPUTS = "code_interpreter_call.outputs"
PY_FUNCTION = {"type": "function", "name": "python",
               "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                              "required": ["code"]}}
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
PWN = "open('/mnt/data/pwned', 'w').write('x')"


def ci_body(rounds, tools=None, **extra):
    body = {"model": "m", "tools": [TOOL] if tools is None else tools,
            "input": script_input(rounds)}
    body.update(extra)
    return body


def error_of(answer):
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    return answer["error"]


def headers_of(req):
    return {k.lower(): v for k, v in req["headers"]}


def sse_events(data):
    events = []
    for frame in data.decode().split("\n\n"):
        lines = dict(l.split(": ", 1) for l in frame.split("\n") if ": " in l)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def server_pid(server):
    with open(os.path.join(server.root, "httpd.pid")) as f:
        return int(f.read().strip())


def sandbox_processes(server):
    """Processes below httpd that are not httpd: bubblewrap and its sandbox."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    stat = f.read()
            except OSError:
                continue
            table[int(name)] = (int(stat[stat.rindex(")") + 2:].split()[1]),
                                stat[stat.index("(") + 1:stat.rindex(")")])
    found, frontier = {}, {server_pid(server)}
    while frontier:
        nxt = {pid for pid, (ppid, _) in table.items() if ppid in frontier and pid not in found}
        found.update((pid, table[pid][1]) for pid in nxt)
        frontier = nxt
    # The sandbox supervisor is not a sandbox; what it runs is.
    return {pid: comm for pid, comm in found.items()
            if comm not in ("apache2", "ci-supervisor")}


def wait_for(predicate, timeout=15):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


# ------------------------------------------------ our name without our tool

def test_python_function_without_the_tool_streams_back_unexecuted(httpd, model):
    body = ci_body([[{"call": PWN}]], tools=[PY_FUNCTION], stream=True,
                   tool_choice={"type": "function", "name": "python"})
    raw = json.dumps(body).encode()
    status, hdrs, data = httpd.request("POST", "/v1/responses", raw)
    assert status == 200
    assert dict((k.lower(), v) for k, v in hdrs)["content-type"].startswith("text/event-stream")
    events = sse_events(data)
    done = [e for t, e in events if t == "response.function_call_arguments.done"]
    assert [(e["name"], json.loads(e["arguments"])) for e in done] == [("python", {"code": PWN})]
    assert events[-1][0] == "response.completed"
    assert [o["type"] for o in events[-1][1]["response"]["output"]] == ["function_call"]
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    log = httpd.log_since_mark()
    assert "CI0101" not in log
    assert sandboxes_started(httpd) == 0


@pytest.mark.parametrize("extra,message,param", [
    ({"input": [{"type": "code_interpreter_call", "id": "ci_old", "code": PWN,
                 "container_id": "cntr_old", "outputs": None},
                {"role": "user", "content": script_input([[{"call": PWN}]])}]},
     "Unsupported input item type: code_interpreter_call", "input"),
    ({"tool_choice": {"type": "code_interpreter"}},
     "Unsupported tool_choice type: code_interpreter", "tool_choice"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "required",
                      "tools": [{"type": "code_interpreter"}]}},
     "Unsupported tool_choice type: code_interpreter", "tool_choice"),
], ids=["replayed-call", "tool_choice", "allowed_tools"])
def test_code_interpreter_shapes_without_the_tool_are_the_upstreams_business(
        httpd, model, extra, message, param):
    """Parsed (the bytes mention the tool) but not ours: forwarded untouched."""
    raw = json.dumps(ci_body([[{"call": PWN}]], tools=[PY_FUNCTION], **extra)).encode()
    status, _, data = httpd.request("POST", "/v1/responses", raw)
    assert status == 400
    assert error_of(json.loads(data)) == {"message": message, "type": "invalid_request_error",
                                          "param": param, "code": None}
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    log = httpd.log_since_mark()
    assert "CI0101" not in log
    assert sandboxes_started(httpd) == 0


def test_configured_function_name_without_the_tool_is_the_clients(httpd, model):
    run_code = dict(PY_FUNCTION, name="run_code")
    raw = json.dumps(ci_body([[{"call": PWN}]], tools=[run_code],
                             include=[OUTPUTS])).encode()
    status, _, data = httpd.request("POST", "/renamed/v1/responses", raw)
    assert status == 200
    answer = json.loads(data)
    assert [(o["type"], o["name"]) for o in answer["output"]] == [("function_call", "run_code")]
    assert json.loads(answer["output"][0]["arguments"]) == {"code": PWN}
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    assert sandboxes_started(httpd) == 0


# ------------------------------------------- control fields and headers

CONTROL_FIELDS = {"max_agentic_loops": 100, "_code_interpreter_marker": True,
                  "_code_interpreter_sandbox": "quick", "code_interpreter_max_loops": 50,
                  "_code_interpreter_stream": True, "_code_interpreter_converted": True}
CONTROL_HEADERS = {"X-Code-Interpreter-Sandbox": "quick", "X-Code-Interpreter": "Off",
                   "X-Code-Interpreter-Stream": "1", "X-Request-Id": "req_client_chosen",
                   "X-Call-Id": "call_0001_0", "Accept": "text/event-stream"}


def test_control_fields_reach_a_strict_upstream_untouched(httpd, model):
    # OpenAI refuses parameters it does not define: the module passes them on
    # as sent and relays the refusal; nothing runs.
    status, _, answer = httpd.post("/capped/v1/responses",
                                   ci_body([[{"call": "print(1)"}]], **CONTROL_FIELDS),
                                   headers=CONTROL_HEADERS)
    assert status == 400, answer
    assert answer == {"error": {"message": "Unknown parameter: 'max_agentic_loops'.",
                                "type": "invalid_request_error", "param": "max_agentic_loops",
                                "code": "unknown_parameter"}}
    [seen] = model.requests()
    for key, value in CONTROL_FIELDS.items():
        assert seen["json"][key] == value
    assert sandboxes_started(httpd) == 0


def test_control_fields_and_headers_change_nothing(httpd, model):
    # An OpenAI-compatible upstream that takes vendor parameters: the fields
    # reach it and it answers, and still they steer nothing here.
    model.allow_parameters(*CONTROL_FIELDS)
    rounds = [[{"call": "print(%d)" % i}] for i in range(6)]
    status, hdrs, answer = httpd.post("/capped/v1/responses",
                                      ci_body(rounds, include=[OUTPUTS], **CONTROL_FIELDS),
                                      headers=CONTROL_HEADERS)
    assert status == 200, answer
    # a JSON answer, as the body's (absent) stream asked
    assert hdrs["content-type"] == "application/json"
    # the location's cap of 2 rounds
    assert [o["type"] for o in answer["output"]] == [
        "code_interpreter_call", "code_interpreter_call", "message"]
    assert [c["outputs"] for c in answer["output"][:2]] == [
        [{"type": "logs", "logs": "0\n"}], [{"type": "logs", "logs": "1\n"}]]
    seen = model.requests()
    assert len(seen) == 3
    assert seen[-1]["json"]["tool_choice"] == "none"
    log = httpd.log_since_mark()
    assert log.count("CI0201:") == 2
    # the location's sandbox, not the one named by the client
    assert "CI0101: intercepted: tool=local " in log
    assert " stream=0 " in log
    assert sandboxes_started(httpd) == 1
    # passed on untouched, to every round, like any other field or header
    for req in seen:
        for key, value in CONTROL_FIELDS.items():
            assert req["json"][key] == value
        h = headers_of(req)
        assert h["x-request-id"] == "req_client_chosen"
        assert h["x-call-id"] == "call_0001_0"
        assert h["x-code-interpreter-sandbox"] == "quick"


def test_headers_cannot_turn_a_stream_into_json(httpd, model):
    model.allow_parameters("_code_interpreter_stream")
    status, hdrs, data = httpd.request(
        "POST", "/v1/responses",
        ci_body([[{"call": "print(1)"}], [{"text": "done"}]], stream=True,
                _code_interpreter_stream=False),
        headers={"X-Code-Interpreter-Stream": "0", "Accept": "application/json"})
    assert status == 200
    assert dict((k.lower(), v) for k, v in hdrs)["content-type"] == (
        "text/event-stream; charset=utf-8")
    events = sse_events(data)
    assert events[0][0] == "response.created"
    assert events[-1][0] == "response.completed"
    assert " stream=1 " in httpd.log_since_mark()


# ------------------------------------------------ fields passed as sent

def test_fields_we_do_not_own_reach_the_upstream_as_sent(httpd, model):
    script = script_input([[{"call": "print(1)"}], [{"text": "done"}]])
    sent = {
        "model": "m", "instructions": "be brief",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": script}]}],
        "tools": [WEATHER, TOOL], "tool_choice": "auto", "parallel_tool_calls": False,
        "include": ["reasoning.encrypted_content", OUTPUTS], "stream": False,
        "stream_options": {"include_obfuscation": False},
        "temperature": 0.25, "top_p": 1.0, "max_output_tokens": 100, "max_tool_calls": 5,
        "store": True, "background": False, "truncation": "auto", "top_logprobs": 0,
        "metadata": {"k": "v", "session": "s-1"}, "user": "u-1", "prompt_cache_key": "pck",
        "safety_identifier": "sid", "service_tier": "auto",
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "text"}, "verbosity": "low"},
        "x_vendor": {"list": [1, 2.5, -0.0, 1e2, 1E-7, "x", None, True, False, [], {}],
                     "text": "\u00e9/\U0001F600\u0000\t\"\\"},
    }
    model.allow_parameters("x_vendor")       # a vendor parameter the upstream takes
    status, _, answer = httpd.post("/v1/responses", sent)
    assert status == 200, answer
    seen = model.requests()
    assert len(seen) == 2
    first, follow = seen[0]["json"], seen[1]["json"]
    # the documented rewrites: our tool becomes the function, include loses
    # the outputs, stream is forced off and stream_options dropped
    expected = dict(sent, include=["reasoning.encrypted_content"])
    del expected["stream_options"]
    assert first["tools"][0] == WEATHER
    assert first["tools"][1]["name"] == "python"
    assert {k: v for k, v in first.items() if k != "tools"} == {
        k: v for k, v in expected.items() if k != "tools"}
    assert list(first) == [k for k in sent if k != "stream_options"]
    # the follow-up only grows the input
    assert {k: v for k, v in follow.items() if k != "input"} == {
        k: v for k, v in first.items() if k != "input"}
    assert follow["input"][0] == sent["input"][0]
    # the client sees its own tools and tool_choice
    assert answer["tools"][1] == TOOL
    assert answer["tool_choice"] == "auto"


def test_big_integers_are_refused_not_changed(httpd, model):
    # json-c would clamp them: refused, so nothing reaches the upstream altered.
    script = json.dumps(script_input([[{"text": "ok"}]]))
    raw = ('{"model": "m", "tools": [{"type": "code_interpreter"}], "input": %s, '
           '"x_vendor": {"big": 123456789012345678901234567890, '
           '"negative": -99999999999999999999, "u64": 18446744073709551616}}' % script)
    status, _, answer = httpd.request("POST", "/v1/responses", raw)
    assert status == 400
    error = json.loads(answer)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_json"
    assert error["message"] == (
        "We could not parse the JSON body of your request: the integer "
        "'123456789012345678901234567890' at byte %d is out of the range this server "
        "keeps exactly (64 bits)." % raw.index("123456789012345678901234567890"))
    assert model.requests() == []
    # The largest exact integers pass through unchanged (to an upstream that
    # takes the vendor parameter).
    model.allow_parameters("x_vendor")
    raw = ('{"model": "m", "tools": [{"type": "code_interpreter"}], "input": %s, '
           '"x_vendor": {"u64": 18446744073709551615, "i64": -9223372036854775808}}'
           % script)
    status, _, answer = httpd.request("POST", "/v1/responses", raw)
    assert status == 200, answer
    assert model.requests()[0]["json"]["x_vendor"] == {"u64": 18446744073709551615,
                                                       "i64": -9223372036854775808}


def test_escapes_are_decoded_and_a_lone_surrogate_becomes_a_replacement(httpd, model):
    script = json.dumps(script_input([[{"text": "ok"}]]))
    raw = ('{"model": "m", "tools": [{"type": "code_interpreter"}], "input": %s, '
           '"s": "\\u00e9\\/\\ud83d\\ude00\\u0000", "lone": "\\ud800"}' % script)
    model.allow_parameters("s", "lone")       # vendor parameters the upstream takes
    status, _, answer = httpd.request("POST", "/v1/responses", raw)
    assert status == 200, answer
    up = base64.b64decode(model.requests()[0]["body_b64"])
    assert b'"s":"\xc3\xa9/\xf0\x9f\x98\x80\\u0000"' in up
    assert b'"lone":"\xef\xbf\xbd"' in up


TOOLS_WITH_OURS = json.dumps([TOOL])


@pytest.mark.parametrize("first,last,intercepted", [("[]", TOOLS_WITH_OURS, True),
                                                    (TOOLS_WITH_OURS, "[]", False)],
                         ids=["tool-last", "tool-first"])
def test_duplicate_keys_the_last_one_wins_for_everyone(httpd, model, first, last, intercepted):
    """The module and the upstream read a duplicated key the same way: no way
    to show one a tool the other does not see."""
    script = json.dumps(script_input([[{"text": "ok"}]]))
    raw = ('{"model": "m", "tools": %s, "input": %s, "x": 1, "tools": %s, "x": 2}'
           % (first, script, last))
    model.allow_parameters("x")               # a vendor parameter the upstream takes
    status, _, data = httpd.request("POST", "/v1/responses", raw)
    assert status == 200, data
    seen = model.requests()
    assert len(seen) == 1
    up = base64.b64decode(seen[0]["body_b64"])
    if intercepted:
        assert "CI0101: intercepted" in httpd.log_since_mark()
        assert up.count(b'"tools"') == 1 and up.count(b'"x"') == 1
        assert seen[0]["json"]["x"] == 2
        assert [t["name"] for t in seen[0]["json"]["tools"]] == ["python"]
    else:
        assert "CI0101" not in httpd.log_since_mark()
        assert up == raw.encode()
        assert seen[0]["json"]["tools"] == []


# ------------------------------------------- concurrent identical requests

def test_identical_concurrent_requests_never_share_a_sandbox(httpd, model):
    tags = ["alpha", "beta", "gamma"]
    results = {}

    def run(tag):
        rounds = [[{"call": "import os, time\nmine = %r\n"
                            "open('/mnt/data/owner', 'w').write(mine)\ntime.sleep(1)" % tag}],
                  [{"call": "print(mine, open('/mnt/data/owner').read(), "
                            "sorted(os.listdir('/mnt/data')))"}],
                  [{"text": "{{last_output}}"}]]
        body = {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
                "metadata": {"session": "same"}, "user": "same-user",
                "prompt_cache_key": "same",
                "input": [{"type": "code_interpreter_call", "id": "ci_same", "status": "completed",
                           "code": "shared = 1", "container_id": "cntr_same", "outputs": None},
                          {"role": "user", "content": script_input(rounds)}]}
        results[tag] = httpd.post("/v1/responses", body, headers={
            "X-Request-Id": "req_same", "X-Call-Id": "call_same",
            "OpenAI-Organization": "org-same", "Cookie": "session=same"})

    threads = [threading.Thread(target=run, args=(t,)) for t in tags]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    containers = set()
    for tag in tags:
        status, _, answer = results[tag]
        assert status == 200, answer
        calls = [o for o in answer["output"] if o["type"] == "code_interpreter_call"]
        assert calls[1]["outputs"] == [{"type": "logs",
                                        "logs": "%s %s ['owner']\n" % (tag, tag)}]
        assert len({c["container_id"] for c in calls}) == 1
        containers.add(calls[0]["container_id"])
    assert len(containers) == len(tags)
    assert "cntr_same" not in containers
    assert sandboxes_started(httpd) == len(tags)
    forked = re.findall(r"CI0610: .* tag=(cntr_[0-9a-f]+)", httpd.log_since_mark())
    assert set(forked) == containers


# ------------------------------------------------ destroyed on every path

CALL = {"call": "print(1)"}
UPSTREAM_ERROR = {"error": {"message": "upstream says no", "type": "some_error", "param": None,
                            "code": "nope"}}


def module_error(code, message):
    return {"error": {"message": message, "type": "server_error", "param": None, "code": code}}


CALLED = ("code_interpreter_call", "completed", None)
DONE = ("message", "completed", "done")

# name, location, script, status, what the client gets: the whole error body,
# or the answer's output items as (type, status, the message's text or None)
PATHS = [
    ("success", "/v1/responses", [[CALL], [{"text": "done"}]], 200, [CALLED, DONE]),
    ("raising-code", "/v1/responses", [[{"call": "raise RuntimeError('x')"}],
                                       [{"text": "done"}]], 200, [CALLED, DONE]),
    ("timeout", "/quick/v1/responses", [[{"call": "import time\ntime.sleep(10)"}],
                                        [{"text": "done"}]], 200,
     [("code_interpreter_call", "completed", None), DONE]),
    ("upstream-4xx", "/v1/responses", [[CALL], [{"error": {"status": 400,
                                                           "body": UPSTREAM_ERROR}}]], 400,
     UPSTREAM_ERROR),
    ("upstream-5xx", "/v1/responses", [[CALL], [{"error": {"status": 503,
                                                           "body": UPSTREAM_ERROR}}]], 503,
     UPSTREAM_ERROR),
    ("upstream-garbage", "/v1/responses", [[CALL], [{"garbage": "nope"}]], 502,
     module_error("bad_upstream_response", "The model upstream answered round 2 with "
                  "something that is not a Responses API response: null expected at "
                  "byte 1.")),
    ("upstream-unreachable", "/unreachable/v1/responses", [[CALL], [{"text": "never"}]], 502,
     module_error("upstream_unreachable",
                  "The model upstream could not be reached for a follow-up call.")),
    ("loop-cap", "/capped/v1/responses", [[CALL]] * 6, 200,
     [CALLED, CALLED, ("message", "completed", "tool_choice none honoured")]),
    ("deadline", "/deadline/v1/responses", [[{"call": "import time\ntime.sleep(10)"}],
                                            [{"text": "never"}]], 504,
     module_error("deadline_exceeded", "The request did not finish within this server's "
                  "deadline of 2 seconds.")),
]


def outcome(answer):
    if isinstance(answer, dict) and "output" in answer:
        return [(o["type"], o["status"],
                 o["content"][0]["text"] if o["type"] == "message" else None)
                for o in answer["output"]]
    return answer


@pytest.mark.parametrize("path,rounds,status,expect",
                         [pytest.param(p, r, s, e, id=n) for n, p, r, s, e in PATHS])
def test_every_path_destroys_the_sandbox(httpd, model, path, rounds, status, expect):
    """A request's own sandbox (the caller has no owner, so no container)."""
    got, _, answer = httpd.post(path, ci_body(rounds), headers=ANONYMOUS)
    assert got == status, answer
    assert outcome(answer) == expect
    assert httpd.wait_sandboxes_destroyed() == (1, 1)
    log = httpd.log_since_mark()
    started = [l for l in log.splitlines() if "CI0302:" in l]
    destroyed = [l for l in log.splitlines() if "CI0301:" in l]
    container = started[0].split("container=")[1].split()[0]
    assert "CI0301: sandbox destroyed (request ended)" in destroyed[0]
    assert destroyed[0].endswith("container=" + container)
    assert wait_for(lambda: not sandbox_processes(httpd)), sandbox_processes(httpd)


def test_client_disconnect_on_the_json_path_destroys_the_sandbox(httpd, model):
    raw = json.dumps(ci_body([[{"call": "import time\ntime.sleep(3)\nprint('slept')"}],
                              [{"text": "never"}]])).encode()
    s = socket.create_connection(("127.0.0.1", httpd.port), timeout=30)
    try:
        s.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Authorization: Bearer %s\r\nX-Anonymous: 1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (API_KEY.encode(), len(raw)) + raw)
        assert wait_for(lambda: "CI0302:" in httpd.log_since_mark())
        assert wait_for(lambda: sandbox_processes(httpd))
    finally:
        s.close()
    # noticed while the code runs: the execution is interrupted, no follow-up
    assert wait_for(lambda: "CI0206" in httpd.log_since_mark())
    log = httpd.log_since_mark()
    assert "CI0206: client went away; loop stopped after round 1" in log
    assert "CI0201" not in log
    assert "CI0204" not in log
    assert httpd.wait_sandboxes_destroyed() == (1, 1)
    assert "CI0301: sandbox destroyed (request ended)" in httpd.log_since_mark()
    assert len(model.requests()) == 1
    assert wait_for(lambda: not sandbox_processes(httpd)), sandbox_processes(httpd)
