"""Requests the module refuses, upstream errors it relays, and what a client
cannot switch on."""
import base64
import json
import socket

import pytest

from conftest import API_KEY, TOOL, script_input
from test_loop import sandboxes_started

PARSE_PREFIX = "We could not parse the JSON body of your request"


def ci_body(rounds, tools=None, **extra):
    body = {"model": "m", "tools": tools if tools is not None else [TOOL],
            "input": script_input(rounds)}
    body.update(extra)
    return body


def error_of(body):
    assert isinstance(body, dict) and set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def assert_refused(httpd, model, status, body, code, message, param=None,
                   etype="invalid_request_error", http_status=400):
    """A refusal made by the module: nothing reached the upstream, no sandbox."""
    assert status == http_status, body
    err = error_of(body)
    assert err == {"message": message, "type": etype, "param": param, "code": code}
    assert model.requests() == []
    assert sandboxes_started(httpd) == 0


# --------------------------------------------------------------- bad bodies

def test_malformed_json(httpd, model):
    raw = b'{"model": "m", "tools": [{"type": "code_interpreter"}], '
    status, hdrs, data = httpd.request("POST", "/v1/responses", raw)
    body = json.loads(data)
    assert dict((k.lower(), v) for k, v in hdrs)["content-type"].startswith("application/json")
    err = error_of(body)
    assert status == 400
    assert err["message"].startswith(PARSE_PREFIX + ": ")
    assert err["message"].endswith(".")
    assert err["message"] == PARSE_PREFIX + ": the JSON text ends too early."
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", None,
                                                        "invalid_json")
    assert model.requests() == []


def test_malformed_json_without_the_tool_is_the_upstreams_business(httpd, model):
    raw = b'{"model": "m", "input": "hi", '
    status, _, data = httpd.request("POST", "/v1/responses", raw)
    assert status == 400
    assert error_of(json.loads(data))["message"] == PARSE_PREFIX + "."
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw


def test_body_not_an_object(httpd, model):
    status, _, body = httpd.post("/v1/responses", '["code_interpreter"]')
    assert_refused(httpd, model, status, body, "invalid_json",
                   "The request body must be a JSON object.")


def test_oversized_body(httpd, model):
    body = ci_body([[{"text": "x"}]])
    body["input"] = "x" * (70 * 1024)
    status, hdrs, resp = httpd.post("/small/v1/responses", body)
    assert_refused(httpd, model, status, resp, "request_too_large",
                   "The request body exceeds this server's limit of 65536 bytes.",
                   http_status=413)
    assert hdrs["content-type"].startswith("application/json")


def test_oversized_body_without_the_tool(httpd, model):
    status, _, resp = httpd.post("/small/v1/responses",
                                 {"model": "m", "input": "y" * (70 * 1024)})
    assert_refused(httpd, model, status, resp, "request_too_large",
                   "The request body exceeds this server's limit of 65536 bytes.",
                   http_status=413)


def test_oversized_chunked_body(httpd, model):
    """No Content-Length: the limit is found while reading."""
    payload = json.dumps(dict(ci_body([[{"text": "x"}]]), input="z" * (70 * 1024))).encode()
    s = socket.create_connection(("127.0.0.1", httpd.port), timeout=30)
    try:
        head = ("POST /small/v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                "Authorization: Bearer %s\r\nConnection: close\r\n\r\n" % API_KEY).encode()
        s.sendall(head)
        for i in range(0, len(payload), 8192):
            chunk = payload[i:i + 8192]
            try:
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            except OSError:
                break
        try:
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        data = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    finally:
        s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 413 Request Entity Too Large"
    if b"chunked" in head.lower():
        size, _, rest = rest.partition(b"\r\n")
        rest = rest[:int(size, 16)]
    err = error_of(json.loads(rest))
    assert err == {"message": "The request body exceeds this server's limit of 65536 bytes.",
                   "type": "invalid_request_error", "param": None,
                   "code": "request_too_large"}
    assert model.requests() == []


# ------------------------------------------------------------- bad tools

PY_FUNCTION = {"type": "function", "name": "python",
               "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                              "required": ["code"]}}


def test_name_clash_with_client_function(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "x"}]],
                                                          tools=[TOOL, PY_FUNCTION]))
    assert_refused(httpd, model, status, body, "tool_name_clash",
                   "The function name 'python' is reserved for the code_interpreter "
                   "tool on this server; rename your function.", param="tools[1].name")


def test_name_clash_follows_the_configured_name(httpd, model):
    run_code = dict(PY_FUNCTION, name="run_code")
    status, _, body = httpd.post("/renamed/v1/responses", ci_body(
        [[{"text": "x"}]], tools=[run_code, TOOL]))
    assert_refused(httpd, model, status, body, "tool_name_clash",
                   "The function name 'run_code' is reserved for the code_interpreter "
                   "tool on this server; rename your function.", param="tools[0].name")


NOT_SUPPORTED = ("%s are not supported by this server's code_interpreter ('%s'); "
                 "use \"container\": {\"type\": \"auto\"}.")


@pytest.mark.parametrize("container,what,param", [
    ({"type": "other"}, "Container types other than \"auto\"", "tools[0].container.type"),
], ids=["type"])
def test_unsupported_container_settings(httpd, model, container, what, param):
    tool = {"type": "code_interpreter", "container": container}
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "x"}]], tools=[tool]))
    assert_refused(httpd, model, status, body, "unsupported_parameter",
                   NOT_SUPPORTED % (what, param), param=param)


def test_container_index_names_the_tool(httpd, model):
    fn = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    tool = {"type": "code_interpreter", "container": "cntr_x"}
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "x"}]],
                                                          tools=[fn, tool]))
    assert_refused(httpd, model, status, body, "container_not_found",
                   "Container with id 'cntr_x' not found.", param="tools[1].container",
                   http_status=404)


def test_disabled_network_policy_and_empty_file_ids_accepted(httpd, model):
    tool = {"type": "code_interpreter",
            "container": {"type": "auto", "file_ids": [], "memory_limit": None,
                          "network_policy": {"type": "disabled"}}}
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"text": "{{last_output}}"}]], tools=[tool]))
    assert status == 200, body
    assert body["output"][-1]["content"][0]["text"] == "1\n"
    assert body["tools"] == [tool]


def test_background_refused(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "x"}]], background=True))
    assert_refused(httpd, model, status, body, "unsupported_parameter",
                   "Background mode is not supported with the code_interpreter tool "
                   "on this server.", param="background")


@pytest.mark.parametrize("extra,code,message,param", [
    ({"include": "code_interpreter_call.outputs"}, "invalid_type",
     "Invalid type for 'include': expected an array of strings.", "include"),
    ({"input": 5}, "invalid_type",
     "Invalid type for 'input': expected a string or an array of items.", "input"),
    ({"tools": [TOOL, "code_interpreter"]}, "invalid_type",
     "Invalid type for 'tools[1]': expected an object.", "tools[1]"),
    ({"tools": [TOOL, {"type": "code_interpreter"}]}, "duplicate_tool",
     "Only one code_interpreter tool may be given.", "tools[1]"),
    ({"tool_choice": "sometimes"}, "invalid_value",
     "Invalid value for 'tool_choice': 'sometimes'; expected 'none', 'auto', "
     "'required' or an object.", "tool_choice"),
    ({"max_tool_calls": 0}, "invalid_value",
     "Invalid value for 'max_tool_calls': expected an integer of at least 1.",
     "max_tool_calls"),
    ({"stream": "yes"}, "invalid_type", "Invalid type for 'stream': expected a boolean.",
     "stream"),
    ({"input": [{"type": "code_interpreter_call", "id": "c" * 65, "code": "1",
                 "outputs": None}]}, "invalid_type",
     "Invalid type for 'input[0].id': expected a string of 1 to 64 characters.",
     "input[0].id"),
], ids=["include-type", "input-type", "tool-type", "duplicate", "tool_choice", "max_tool_calls",
        "stream-type", "replayed-id"])
def test_invalid_fields(httpd, model, extra, code, message, param):
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "x"}]], **extra))
    assert_refused(httpd, model, status, body, code, message, param=param)


def test_fields_of_a_request_without_the_tool_are_the_upstreams_business(httpd, model):
    raw = json.dumps({"model": "m", "tools": "code_interpreter", "stream": "yes",
                      "input": "hi"}).encode()
    status, _, data = httpd.request("POST", "/v1/responses", raw)
    # the upstream's own answer
    assert status == 400
    assert error_of(json.loads(data)) == {
        "message": "Invalid type for 'tools': expected an array.",
        "type": "invalid_request_error", "param": "tools", "code": None}
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    assert "CI0102" not in httpd.log_since_mark()


# -------------------------------------------------------- upstream errors

def upstream_error(status, headers=None):
    body = {"error": {"message": "upstream says %d" % status, "type": "some_error",
                      "param": None, "code": "code_%d" % status}}
    err = {"status": status, "body": body}
    if headers:
        err["headers"] = headers
    return {"error": err}, json.dumps(body).encode()


@pytest.mark.parametrize("status,retry", [(400, None), (429, "7"), (500, None), (503, "30")])
def test_upstream_error_on_first_round_passed_through(httpd, model, status, retry):
    action, raw = upstream_error(status, {"Retry-After": retry} if retry else None)
    got, hdrs, data = httpd.request("POST", "/v1/responses",
                                    ci_body([[action]], include=["code_interpreter_call.outputs"]))
    hdrs = {k.lower(): v for k, v in hdrs}
    assert got == status
    assert data == raw
    assert hdrs.get("retry-after") == retry
    assert hdrs["content-type"] == "application/json"
    assert len(model.requests()) == 1
    assert sandboxes_started(httpd) == 0


@pytest.mark.parametrize("status,retry", [(400, None), (429, "7"), (500, None), (503, "30")])
def test_upstream_error_on_followup_passed_through(httpd, model, status, retry):
    action, raw = upstream_error(status, {"Retry-After": retry} if retry else None)
    got, hdrs, data = httpd.request("POST", "/v1/responses",
                                    ci_body([[{"call": "print(1)"}], [action]]))
    hdrs = {k.lower(): v for k, v in hdrs}
    assert got == status
    assert data == raw
    assert hdrs.get("retry-after") == retry
    assert hdrs["content-type"] == "application/json"
    assert len(model.requests()) == 2
    log = httpd.log_since_mark()
    assert sandboxes_started(httpd) == 1
    assert "CI0205: relaying the upstream's %d answer to a follow-up" % status in log


def test_upstream_error_on_later_followup_passed_through(httpd, model):
    action, raw = upstream_error(502)
    got, _, data = httpd.request("POST", "/v1/responses", ci_body(
        [[{"call": "x = 1"}], [{"call": "print(x)"}], [action]]))
    assert got == 502
    assert data == raw
    assert len(model.requests()) == 3


def test_upstream_unreachable_on_followup(httpd, model):
    status, _, body = httpd.post("/unreachable/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"text": "never"}]]))
    assert status == 502
    assert error_of(body) == {
        "message": "The model upstream could not be reached for a follow-up call.",
        "type": "server_error", "param": None, "code": "upstream_unreachable"}
    assert len(model.requests()) == 1
    log = httpd.log_since_mark()
    assert "CI0202: follow-up to http://127.0.0.1:9/v1/responses failed" in log
    assert sandboxes_started(httpd) == 1


@pytest.mark.parametrize("garbage,rnd,detail", [
    ('{"foo": 1}', 1, ""),
    ('{"foo": ', 1, ": the JSON text ends too early"),
    ("nope", 2, ": null expected at byte 1"),
], ids=["no-output", "truncated", "not-json-followup"])
def test_upstream_answer_not_a_response(httpd, model, garbage, rnd, detail):
    rounds = [[{"garbage": garbage}]] if rnd == 1 else [[{"call": "1"}], [{"garbage": garbage}]]
    status, _, body = httpd.post("/v1/responses", ci_body(rounds))
    assert status == 502
    assert error_of(body) == {
        "message": "The model upstream answered round %d with something that is not a "
                   "Responses API response%s." % (rnd, detail),
        "type": "server_error", "param": None, "code": "bad_upstream_response"}


@pytest.mark.parametrize("rounds,upstream_calls", [
    ([[{"big": 70 * 1024}]], 1),
    ([[{"call": "print(1)"}], [{"big": 70 * 1024}]], 2),
], ids=["first-round", "followup"])
def test_upstream_answer_too_large(httpd, model, rounds, upstream_calls):
    status, _, body = httpd.post("/small/v1/responses", ci_body(rounds))
    assert status == 502
    assert error_of(body) == {
        "message": "The model upstream's answer exceeds this server's limit.",
        "type": "server_error", "param": None, "code": "upstream_too_large"}
    assert len(model.requests()) == upstream_calls


# ---------------------------------------------- nothing a client can switch on

@pytest.mark.parametrize("mention", [False, True], ids=["not-parsed", "parsed"])
def test_client_python_function_without_the_tool_is_not_executed(httpd, model, mention):
    body = ci_body([[{"call": "open('/mnt/data/pwned', 'w').write('x')"}]],
                   tools=[PY_FUNCTION])
    if mention:
        body["include"] = ["code_interpreter_call.outputs"]
    status, _, resp = httpd.post("/v1/responses", body)
    assert status == 200, resp
    assert [o["type"] for o in resp["output"]] == ["function_call"]
    fc = resp["output"][0]
    assert fc["name"] == "python"
    assert json.loads(fc["arguments"]) == {"code": "open('/mnt/data/pwned', 'w').write('x')"}
    # the upstream's own echo, untouched
    assert resp["tools"] == [dict(PY_FUNCTION, strict=True)]
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == json.dumps(body).encode()
    log = httpd.log_since_mark()
    assert sandboxes_started(httpd) == 0
    assert "CI0101" not in log


def test_tool_at_location_without_interception_is_not_converted(httpd, model):
    status, _, body = httpd.post("/plain/v1/responses", ci_body([[{"call": "print(1)"}]]),
                                 headers={"X-Code-Interpreter": "On"})
    # the upstream, which has no hosted tool, refuses it
    assert status == 400
    assert error_of(body) == {"message": "Unsupported tool type: code_interpreter",
                              "type": "invalid_request_error", "param": "tools", "code": None}
    assert len(model.requests()) == 1
    assert "CI0101" not in httpd.log_since_mark()


def test_control_looking_fields_do_not_raise_the_loop_cap(httpd, model):
    # (an upstream that takes vendor parameters, unlike OpenAI: the fields
    # reach it, and the loop still stops at the location's cap)
    fields = {"max_agentic_loops": 100, "_code_interpreter_marker": True,
              "code_interpreter_max_loops": 50}
    model.allow_parameters(*fields)
    rounds = [[{"call": "print(%d)" % i}] for i in range(6)]
    body = ci_body(rounds, metadata={"max_loops": "50"}, **fields)
    status, _, resp = httpd.post("/capped/v1/responses", body, headers={
        "X-Code-Interpreter-Max-Loops": "50", "X-CI-Rounds": "50"})
    assert status == 200, resp
    seen = model.requests()
    assert len(seen) == 3
    assert seen[-1]["json"]["tool_choice"] == "none"
    assert [o["type"] for o in resp["output"]] == [
        "code_interpreter_call", "code_interpreter_call", "message"]
    assert httpd.log_since_mark().count("CI0201:") == 2
    # passed on untouched, like any other parameter
    assert seen[0]["json"]["max_agentic_loops"] == 100
    assert seen[0]["json"]["_code_interpreter_marker"] is True


def test_max_tool_calls_cannot_raise_the_loop_cap(httpd, model):
    rounds = [[{"call": "print(%d)" % i}] for i in range(6)]
    status, _, resp = httpd.post("/capped/v1/responses", ci_body(rounds, max_tool_calls=50))
    assert status == 200, resp
    assert len(model.requests()) == 3
    assert httpd.log_since_mark().count("CI0201:") == 2
