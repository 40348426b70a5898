"""Hostile input from every side: malformed and abusive requests from the
client, hostile answers from the model upstream, hostile output from the
sandboxed code. Each case is answered with its documented status and error,
or with the upstream's own answer when the module steps aside; no case
crashes httpd or leaves a sandbox behind."""
import base64
import gzip
import json
import os
import socket
import time

import pytest

from conftest import (API_KEY, checked, proc_stats, SANITIZE, TOOL, Httpd, base_conf,
                      script_input)
from test_loop import sandboxes_started

OUTPUTS = "code_interpreter_call.outputs"
OK_SCRIPT = script_input([[{"text": "ok"}]])
PARSE = "We could not parse the JSON body of your request"
UPSTREAM_PARSE = {"message": PARSE + ".", "type": "invalid_request_error", "param": None,
                  "code": None}
TOO_LARGE_64K = "The request body exceeds this server's limit of 65536 bytes."
RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")
NOT_RUN = "The arguments were not a JSON object with a string field \"code\"; nothing was run."


@pytest.fixture(scope="module")
def hostile_httpd(model):
    extra = """
<Location /big16/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter On
  CodeInterpreterMaxBody 16M
</Location>
CodeInterpreterSandbox tight provider=local timeout=5 memory=256M processes=32 disk=16M \
    max_output=4k
<Location /tight/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter tight
</Location>
""".format(port=model.port)
    server = Httpd("hostile", base_conf(model.port, extra)).start()
    yield server
    server.stop()


@pytest.fixture
def server(hostile_httpd, model):
    """Per test: no crash, created == destroyed."""
    with checked(hostile_httpd, model):
        yield hostile_httpd


# ---------------------------------------------------------------- helpers

def body(**fields):
    """A request with the tool, as bytes; FIELDS override or add."""
    b = {"model": "m", "tools": [TOOL], "input": OK_SCRIPT}
    b.update(fields)
    return json.dumps(b).encode()


def error_of(answer):
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    return answer["error"]


def module_error(code, message, param=None, etype="invalid_request_error"):
    return {"message": message, "type": etype, "param": param, "code": code}


def raw_http(server, head, chunks=(), pause=0.0, shut=False):
    """Send HEAD then CHUNKS (pausing between them) on a fresh connection;
    read the answer until the server closes. Returns (status, headers, body)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        s.sendall(head)
        for chunk in chunks:
            if pause:
                time.sleep(pause)
            try:
                s.sendall(chunk)
            except OSError:
                break
        if shut:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    finally:
        s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        out = b""
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        rest = out
    return status, headers, rest


def request_head(path, ctype="application/json", length=None, chunked=False, method="POST",
                 extra=""):
    head = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            "Authorization: Bearer %s\r\n" % (method, path, API_KEY))
    if ctype:
        head += "Content-Type: %s\r\n" % ctype
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    if length is not None:
        head += "Content-Length: %d\r\n" % length
    return (head + extra + "\r\n").encode()


def chunked(data, size=8192):
    return [b"%x\r\n" % len(data[i:i + size]) + data[i:i + size] + b"\r\n"
            for i in range(0, len(data), size)] + [b"0\r\n\r\n"]


# ============================================================ client requests
#
# expect: ("module", status, error)    the module refused; nothing reached the upstream
#         ("upstream", status, error)  passed through untouched; the upstream's answer
#         ("accepted",)                converted, the loop ran, the model said "ok"
#         ("passed",)                  parsed, not ours: forwarded untouched, the model said "ok"

def refused(code, message, param=None, status=400):
    return ("module", status, module_error(code, message, param))


def invalid_json(detail):
    return refused("invalid_json", "%s: %s." % (PARSE, detail))


def bad_type(param, expected):
    return refused("invalid_type", "Invalid type for '%s': expected %s." % (param, expected),
                   param)


def upstream(status, message, param=None):
    return ("upstream", status, {"message": message, "type": "invalid_request_error",
                                 "param": param, "code": None})


ACCEPTED = ("accepted",)
TOOL_BYTES = b'{"tools": [{"type": "code_interpreter"}]'
DEEP = 20000
SCRIPT_BYTES = json.dumps(OK_SCRIPT).encode()


def nested(depth):
    return (b'{"model": "m", "tools": [{"type": "code_interpreter"}], "input": ' + SCRIPT_BYTES
            + b', "x": ' + b"[" * depth + b"]" * depth + b"}")


NOT_SUPPORTED = ("%s are not supported by this server's code_interpreter ('%s'); "
                 "use \"container\": {\"type\": \"auto\"}.")

REQUEST_CASES = [
    # ---- not JSON, broken JSON
    ("not-json", b"code_interpreter please", invalid_json("unexpected character at byte 0")),
    ("not-json-without-the-tool", b"hello there", upstream(400, PARSE + ".")),
    ("truncated-in-a-string", TOOL_BYTES + b', "input": "abc',
     invalid_json("the JSON text ends too early")),
    ("truncated-in-a-key", TOOL_BYTES + b', "inp', invalid_json("the JSON text ends too early")),
    ("invalid-utf8", TOOL_BYTES + b', "input": "\xff\xfe"}',
     invalid_json("invalid UTF-8 at byte 52")),
    ("lone-continuation-byte", TOOL_BYTES + b', "input": "\x80"}',
     invalid_json("invalid UTF-8 at byte 52")),
    ("utf8-cut-short", TOOL_BYTES + b', "input": "\xe2\x82"}',
     invalid_json("invalid UTF-8 at byte 52")),
    ("byte-order-mark", b"\xef\xbb\xbf" + TOOL_BYTES + b"}",
     invalid_json("unexpected character at byte 0")),
    ("nesting-20000-arrays", TOOL_BYTES + b', "x": ' + b"[" * DEEP + b"]" * DEEP + b"}",
     invalid_json("JSON nesting deeper than 128 levels")),
    ("nesting-20000-objects", TOOL_BYTES + b', "x": ' + b'{"a":' * DEEP + b"1" + b"}" * DEEP
     + b"}", invalid_json("JSON nesting deeper than 128 levels")),
    ("nesting-128-accepted", nested(127), ACCEPTED),
    ("nesting-129-refused", nested(128), invalid_json("JSON nesting deeper than 128 levels")),
    ("NaN", TOOL_BYTES + b', "temperature": NaN}', invalid_json("'NaN' is not a JSON number")),
    ("Infinity", TOOL_BYTES + b', "temperature": Infinity}',
     invalid_json("'Infinity' is not a JSON number")),
    ("number-1.", TOOL_BYTES + b', "temperature": 1.}', invalid_json("'1.' is not a JSON number")),
    ("hex-number", TOOL_BYTES + b', "temperature": 0x10}',
     invalid_json("number expected at byte 58")),
    ("trailing-garbage", TOOL_BYTES + b"} x", invalid_json("unexpected character at byte 42")),
    ("two-documents", TOOL_BYTES + b"}{}", invalid_json("unexpected character at byte 41")),
    ("raw-nul-byte", TOOL_BYTES + b', "input": "a\x00b"}',
     invalid_json("unexpected end of data at byte 54")),
    ("single-quotes", b"{'tools': [{'type': 'code_interpreter'}]}",
     invalid_json("unexpected character at byte 20")),
    ("comment", TOOL_BYTES + b" /* c */}",
     invalid_json("object value separator ',' expected at byte 41")),
    ("trailing-comma", b'{"tools": [{"type": "code_interpreter"},]}',
     invalid_json("unexpected character at byte 40")),
    ("bad-escape", TOOL_BYTES + b', "input": "\\x41"}',
     invalid_json("invalid string sequence at byte 53")),
    ("top-level-array", b'[{"type": "code_interpreter"}]',
     refused("invalid_json", "The request body must be a JSON object.")),
    ("top-level-string", b'"code_interpreter"',
     refused("invalid_json", "The request body must be a JSON object.")),
    ("empty-body", b"", upstream(400, PARSE + ".")),
    ("binary-body", bytes(range(256)) * 4 + b"code_interpreter",
     invalid_json("invalid UTF-8 at byte 128")),
    ("binary-body-without-the-tool", bytes(range(256)) * 4, upstream(400, PARSE + ".")),
    # ---- wrong types in every field the module reads
    ("tools-object-not-ours", body(tools={"type": "code_interpreter"}),
     upstream(400, "Invalid type for 'tools': expected an array.", "tools")),
    ("tools-entry-number", body(tools=[1, TOOL]), bad_type("tools[0]", "an object")),
    ("tools-entry-null", body(tools=[None, TOOL]), bad_type("tools[0]", "an object")),
    ("tool_choice-number", body(tool_choice=5),
     bad_type("tool_choice", "a string or an object")),
    ("tool_choice-array", body(tool_choice=[]),
     bad_type("tool_choice", "a string or an object")),
    ("tool_choice-no-type", body(tool_choice={}), bad_type("tool_choice.type", "a string")),
    ("tool_choice-type-number", body(tool_choice={"type": 5}),
     bad_type("tool_choice.type", "a string")),
    ("tool_choice-allowed-without-tools", body(tool_choice={"type": "allowed_tools",
                                                            "mode": "auto"}),
     bad_type("tool_choice.tools", "an array")),
    ("tool_choice-allowed-entry-number", body(tool_choice={"type": "allowed_tools",
                                                           "mode": "auto", "tools": [5]}),
     bad_type("tool_choice.tools[0]", "an object")),
    ("tool_choice-empty-string", body(tool_choice=""),
     refused("invalid_value", "Invalid value for 'tool_choice': ''; expected 'none', 'auto', "
             "'required' or an object.", "tool_choice")),
    ("input-object", body(input={}), bad_type("input", "a string or an array of items")),
    ("input-boolean", body(input=True), bad_type("input", "a string or an array of items")),
    ("input-item-number", body(input=[5]), bad_type("input[0]", "an object")),
    ("input-item-null", body(input=[None]), bad_type("input[0]", "an object")),
    ("include-object", body(include={}), bad_type("include", "an array of strings")),
    ("include-entry-number", body(include=[5]), ACCEPTED),
    ("stream-number", body(stream=1), bad_type("stream", "a boolean")),
    ("stream-null", body(stream=None), ACCEPTED),
    ("background-string", body(background="true"), bad_type("background", "a boolean")),
    ("background-false", body(background=False), ACCEPTED),
    ("max_tool_calls-string", body(max_tool_calls="5"), bad_type("max_tool_calls", "an integer")),
    ("max_tool_calls-float", body(max_tool_calls=1.5), bad_type("max_tool_calls", "an integer")),
    ("max_tool_calls-negative", body(max_tool_calls=-1),
     refused("invalid_value", "Invalid value for 'max_tool_calls': expected an integer of at "
             "least 1.", "max_tool_calls")),
    ("max_tool_calls-10-million", body(max_tool_calls=10 ** 7),
     refused("invalid_value", "Invalid value for 'max_tool_calls': expected an integer of at "
             "least 1.", "max_tool_calls")),
    # json-c would clamp it: the whole body is refused, never altered.
    ("max_tool_calls-beyond-64-bits", body(max_tool_calls=10 ** 30),
     invalid_json("the integer '%d' at byte %d is out of the range this server keeps "
                  "exactly (64 bits)" % (10 ** 30, body(max_tool_calls=10 ** 30).index(
                      str(10 ** 30).encode())))),
    ("conversation-number", body(conversation=5),
     bad_type("conversation", "a string or an object")),
    ("conversation-array", body(conversation=[]),
     bad_type("conversation", "a string or an object")),
    ("container-number", body(tools=[{"type": "code_interpreter", "container": 5}]),
     bad_type("tools[0].container", "an object")),
    ("container-array", body(tools=[{"type": "code_interpreter", "container": []}]),
     bad_type("tools[0].container", "an object")),
    ("container-type-number", body(tools=[{"type": "code_interpreter",
                                           "container": {"type": 5}}]),
     refused("unsupported_parameter", NOT_SUPPORTED % ("Container types other than \"auto\"",
                                                       "tools[0].container.type"),
             "tools[0].container.type")),
    ("container-network-policy-string", body(tools=[{"type": "code_interpreter", "container": {
        "type": "auto", "network_policy": "disabled"}}]),
     bad_type("tools[0].container.network_policy",
              "an object of type \"disabled\" or \"allowlist\"")),
    ("container-file_ids-string", body(tools=[{"type": "code_interpreter", "container": {
        "type": "auto", "file_ids": "file-1"}}]),
     bad_type("tools[0].container.file_ids", "an array of file ids")),
    ("container-file_ids-number-inside", body(tools=[{"type": "code_interpreter",
                                                       "container": {"type": "auto",
                                                                     "file_ids": ["f", 5]}}]),
     bad_type("tools[0].container.file_ids[1]", "a file id")),
    ("container-null", body(tools=[{"type": "code_interpreter", "container": None}]), ACCEPTED),
    ("replayed-call-code-number", body(input=[{"type": "code_interpreter_call", "id": "ci_1",
                                               "code": 5}]),
     bad_type("input[0].code", "a string or null")),
    ("replayed-call-without-id", body(input=[{"type": "code_interpreter_call", "code": "x"}]),
     bad_type("input[0].id", "a string of 1 to 64 characters")),
    ("replayed-call-empty-id", body(input=[{"type": "code_interpreter_call", "id": "",
                                            "code": "x"}]),
     bad_type("input[0].id", "a string of 1 to 64 characters")),
    ("replayed-call-id-number", body(input=[{"type": "code_interpreter_call", "id": 5,
                                             "code": "x"}]),
     bad_type("input[0].id", "a string of 1 to 64 characters")),
    ("replayed-call-outputs-string", body(input=[
        {"type": "code_interpreter_call", "id": "ci_1", "code": "x", "outputs": "x"},
        {"role": "user", "content": OK_SCRIPT}]), ACCEPTED),
    # ---- sheer size
    ("10000-tools", body(tools=[{"type": "function", "name": "f%d" % i,
                                 "parameters": {"type": "object", "properties": {}}}
                                for i in range(9999)] + [TOOL]), ACCEPTED),
    ("10000-code-interpreter-tools", body(tools=[TOOL] * 10000),
     refused("duplicate_tool", "Only one code_interpreter tool may be given.", "tools[1]")),
    ("5MB-instructions", body(instructions="i" * (5 << 20)), ACCEPTED),
    ("100000-input-items", body(input=[{"role": "user", "content": "x"}] * 100000
                                + [{"role": "user", "content": OK_SCRIPT}]), ACCEPTED),
    # an escaped letter or "_" (which no encoder writes) sends the body to the parser:
    # an escaped tool type cannot slip past the byte scan
    ("tool-type-escaped", b'{"model": "m", "input": ' + SCRIPT_BYTES
     + b', "tools": [{"type": "code\\u005finterpreter"}]}', ACCEPTED),
    ("tool-type-all-escaped", b'{"model": "m", "input": ' + SCRIPT_BYTES
     + b', "tools": [{"type": "' + b"".join(b"\\u%04x" % ord(c) for c in "code_interpreter")
     + b'"}]}', ACCEPTED),
    ("escaped-letter-without-the-tool", b'{"model": "m", "input": ' + SCRIPT_BYTES
     + b', "note": "\\u0061"}', ("passed",)),
]


@pytest.mark.parametrize("raw,expect", [pytest.param(raw, expect, id=name)
                                        for name, raw, expect in REQUEST_CASES])
def test_hostile_request(server, model, raw, expect):
    # "x" and "note" carry what some cases test, as vendor parameters the
    # upstream takes (OpenAI itself would refuse them)
    model.allow_parameters("x", "note")
    status, hdrs, data = server.request("POST", "/v1/responses", raw)
    seen = model.requests()
    log = server.log_since_mark()
    kind = expect[0]
    if kind == "passed":
        assert status == 200, data[:500]
        assert json.loads(data)["output"][-1]["content"][0]["text"] == "ok"
        assert len(seen) == 1
        assert base64.b64decode(seen[0]["body_b64"]) == raw
        assert "CI0101" not in log
        return
    if kind == "accepted":
        assert status == 200, data[:500]
        answer = json.loads(data)
        assert answer["output"][-1]["content"][0]["text"] == "ok"
        assert len(seen) == 1
        assert "CI0101: intercepted" in log
        return
    assert status == expect[1], data[:500]
    assert dict(hdrs)["Content-Type"] == "application/json"
    assert error_of(json.loads(data)) == expect[2]
    assert "CI0101" not in log
    if kind == "module":
        assert seen == []
        assert "CI0102: refused (%d)" % expect[1] in log
    else:
        assert len(seen) == 1
        assert base64.b64decode(seen[0]["body_b64"]) == raw


INVALID_UTF8 = [
    ("overlong-slash-2-bytes", b"\xc0\xaf"),
    ("overlong-slash-3-bytes", b"\xe0\x80\xaf"),
    ("overlong-slash-4-bytes", b"\xf0\x80\x80\xaf"),
    ("utf16-surrogate", b"\xed\xa0\x80"),
    ("beyond-U+10FFFF", b"\xf4\x90\x80\x80"),
]


@pytest.mark.parametrize("bad", [pytest.param(b, id=n) for n, b in INVALID_UTF8])
def test_invalid_utf8_forms_are_refused(server, model, bad):
    raw = (b'{"model":"m","tools":[{"type":"code_interpreter"}],"input":' + SCRIPT_BYTES
           + b',"o":"' + bad + b'"}')
    status, _, data = server.request("POST", "/v1/responses", raw)
    assert status == 400, data
    assert error_of(json.loads(data)) == module_error(
        "invalid_json", "%s: invalid UTF-8 at byte %d." % (PARSE, raw.index(bad)))
    assert model.requests() == []


def test_raw_control_character_in_a_string_is_escaped_on_the_way_up(server, model):
    """Lenient: an unescaped newline inside a string is accepted and the
    converted body carries it escaped."""
    raw = TOOL_BYTES + b', "model": "m", "input": ' + SCRIPT_BYTES + b', "note": "a\nb"}'
    model.allow_parameters("note")
    status, _, data = server.request("POST", "/v1/responses", raw)
    assert status == 200, data
    seen = model.requests()
    assert len(seen) == 1
    assert b'"note":"a\\nb"' in base64.b64decode(seen[0]["body_b64"])


# ------------------------------------------------------- transport-level abuse

def test_over_the_cap_without_the_tool_is_413(server, model):
    """Every body at an intercepted location is read, bounded, tool or not."""
    raw = json.dumps({"model": "m", "input": "y" * (70 * 1024)}).encode()
    status, hdrs, data = server.request("POST", "/small/v1/responses", raw)
    assert status == 413
    assert error_of(json.loads(data)) == module_error("request_too_large", TOO_LARGE_64K)
    assert model.requests() == []


def test_over_the_cap_chunked_without_the_tool_is_413(server, model):
    raw = json.dumps({"model": "m", "input": "y" * (70 * 1024)}).encode()
    status, hdrs, data = raw_http(server, request_head("/small/v1/responses", chunked=True),
                                  chunked(raw))
    assert status == 413
    assert hdrs["connection"] == "close"
    assert error_of(json.loads(data)) == module_error("request_too_large", TOO_LARGE_64K)
    assert model.requests() == []


def unsupported_content_type(ctype):
    """The upstream's refusal of a body not declared application/json."""
    return {"message": "Unsupported content type: '%s'. This API method only accepts "
                       "'application/json' requests, but you specified the header "
                       "'Content-Type: %s'. Please try again with a supported content type."
                       % (ctype or "", ctype or ""),
            "type": "invalid_request_error", "param": None, "code": "unsupported_content_type"}


def test_over_the_cap_with_another_content_type_is_not_read(server, model):
    raw = json.dumps({"model": "m", "input": OK_SCRIPT, "pad": "y" * (70 * 1024)}).encode()
    status, _, data = server.request("POST", "/small/v1/responses", raw,
                                     headers={"Content-Type": "text/plain"})
    # not refused here for its size: the upstream has it, and refuses it itself
    assert status == 400
    assert error_of(json.loads(data)) == unsupported_content_type("text/plain")
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw


def test_slow_body_is_accepted(server, model):
    raw = body()
    pieces = [raw[i:i + 40] for i in range(0, len(raw), 40)]
    status, _, data = raw_http(server, request_head("/v1/responses", length=len(raw)),
                               pieces, pause=0.05)
    assert status == 200, data
    assert json.loads(data)["output"][-1]["content"][0]["text"] == "ok"
    assert "CI0101: intercepted" in server.log_since_mark()


def test_chunked_body_with_the_tool_goes_up_with_a_length(server, model):
    raw = body()
    status, _, data = raw_http(server, request_head("/v1/responses", chunked=True),
                               chunked(raw, 100))
    assert status == 200, data
    seen = model.requests()
    assert len(seen) == 1
    hdrs = {k.lower(): v for k, v in seen[0]["headers"]}
    assert "transfer-encoding" not in hdrs
    assert int(hdrs["content-length"]) == len(base64.b64decode(seen[0]["body_b64"]))


def test_body_shorter_than_its_length(server, model):
    raw = body()
    status, hdrs, data = raw_http(server, request_head("/v1/responses", length=len(raw) + 100),
                                  [raw], shut=True)
    assert status == 400
    assert hdrs["connection"] == "close"
    assert error_of(json.loads(data)) == module_error(
        "body_read_error", "The request body could not be read.")
    assert model.requests() == []


def test_malformed_chunk_framing(server, model):
    """Refused by httpd's own HTTP input filter, before the module sees a body."""
    status, hdrs, data = raw_http(server, request_head("/v1/responses", chunked=True),
                                  [b"zz\r\n" + body() + b"\r\n0\r\n\r\n"])
    assert status == 400
    assert hdrs["content-type"] == "text/html; charset=iso-8859-1"
    assert data.endswith(b"</html>\n")
    assert model.requests() == []


@pytest.mark.parametrize("ctype", ["text/plain", None, "application/x-www-form-urlencoded"],
                         ids=["text-plain", "no-content-type", "form"])
def test_other_content_types_pass_through_untouched(server, model, ctype):
    raw = body()
    status, _, data = raw_http(server, request_head("/v1/responses", ctype=ctype,
                                                    length=len(raw)), [raw])
    # the upstream, which takes JSON only, refuses it itself
    assert status == 400
    assert error_of(json.loads(data)) == unsupported_content_type(ctype)
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    assert "CI0101" not in server.log_since_mark()


def test_gzip_body_passes_through_untouched(server, model):
    raw = gzip.compress(body())
    status, _, data = server.request("POST", "/v1/responses", raw,
                                     headers={"Content-Encoding": "gzip"})
    assert status == 400
    assert error_of(json.loads(data)) == UPSTREAM_PARSE
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
def test_other_methods_pass_through_untouched(server, model, method):
    raw = body()
    status, _, data = server.request(method, "/v1/responses", raw)
    assert status == 404
    assert error_of(json.loads(data))["message"] == "Invalid URL (%s /v1/responses)" % method
    seen = model.requests()
    assert len(seen) == 1
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    assert "CI0101" not in server.log_since_mark()


def test_half_closed_client_is_taken_for_gone(server, model):
    """A client that shuts its sending side down after the request is
    treated as departed: the loop stops before answering."""
    raw = body(input=script_input([[{"call": "print(1)"}], [{"text": "never"}]]))
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        s.sendall(request_head("/v1/responses", length=len(raw)) + raw)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(30)
        assert s.recv(65536) == b""
    finally:
        s.close()
    deadline = time.time() + 10
    while "CI0206" not in server.log_since_mark() and time.time() < deadline:
        time.sleep(0.05)
    assert "CI0206: client went away; loop stopped after round 1" in server.log_since_mark()
    assert len(model.requests()) == 1


# ============================================================ hostile upstream

def not_a_response(rnd, detail=""):
    return (502, module_error("bad_upstream_response",
                              "The model upstream answered round %d with something that is "
                              "not a Responses API response%s." % (rnd, detail),
                              etype="server_error"))


TOO_LARGE = (502, module_error("upstream_too_large",
                               "The model upstream's answer exceeds this server's limit.",
                               etype="server_error"))
CALL = {"call": "print(1)"}

UPSTREAM_CASES = [
    ("html", [[{"garbage": "<html>oops</html>"}]], "/v1/responses",
     not_a_response(1, ": unexpected character at byte 0"), 1),
    ("empty-200", [[{"garbage": ""}]], "/v1/responses",
     not_a_response(1, ": the JSON text ends too early"), 1),
    ("truncated-json", [[{"garbage": '{"id": "r", "output": [{"type": "mess'}]],
     "/v1/responses", not_a_response(1, ": the JSON text ends too early"), 1),
    ("truncated-json-on-a-follow-up", [[CALL], [{"garbage": '{"output": ['}]], "/v1/responses",
     not_a_response(2, ": the JSON text ends too early"), 2),
    ("output-not-an-array", [[{"garbage": '{"id": "r", "output": {}}'}]], "/v1/responses",
     not_a_response(1), 1),
    ("top-level-array", [[{"garbage": "[]"}]], "/v1/responses", not_a_response(1), 1),
    ("nesting-5000", [[{"garbage": '{"output": ' + "[" * 5000 + "]" * 5000 + "}"}]],
     "/v1/responses", not_a_response(1, ": JSON nesting deeper than 128 levels"), 1),
    ("NaN", [[{"garbage": '{"output": [], "temperature": NaN}'}]], "/v1/responses",
     not_a_response(1, ": 'NaN' is not a JSON number"), 1),
    ("cut-short", [[{"text": "hello"}, {"stream_cut": 1}]], "/v1/responses",
     (502, module_error("upstream_broken", "The model upstream's answer was cut short.",
                        etype="server_error")), 1),
    ("cut-short-on-a-follow-up", [[CALL], [{"text": "hello"}, {"stream_cut": 1}]],
     "/v1/responses",
     (502, module_error("upstream_unreachable", "The model upstream could not be reached for "
                        "a follow-up call.", etype="server_error")), 2),
    ("100MB-answer", [[{"big": 100 * 1000 * 1000}]], "/big16/v1/responses", TOO_LARGE, 1),
    ("100MB-answer-on-a-follow-up", [[CALL], [{"big": 100 * 1000 * 1000}]],
     "/big16/v1/responses", TOO_LARGE, 2),
    ("follow-up-past-the-deadline", [[CALL], [{"sleep": 4}, {"text": "late"}]],
     "/deadline/v1/responses",
     (504, module_error("deadline_exceeded", "The request did not finish within this "
                        "server's deadline of 2 seconds.", etype="server_error")), None),
]


@pytest.mark.parametrize("rounds,path,expect,calls",
                         [pytest.param(r, p, e, c, id=n) for n, r, p, e, c in UPSTREAM_CASES])
def test_hostile_upstream_answer(server, model, rounds, path, expect, calls):
    status, _, answer = server.post(path, {"model": "m", "tools": [TOOL],
                                           "input": script_input(rounds)})
    assert status == expect[0], answer
    assert error_of(answer) == expect[1]
    if calls is not None:   # past a deadline: how far the loop got depends on the clock
        assert len(model.requests()) == calls


def test_non_object_output_items_are_skipped(server, model):
    status, _, answer = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"garbage": '{"id": "r", "output": [1, "x", null, []]}'}]])})
    assert status == 200
    assert answer == {"id": "r", "output": [], "tools": [TOOL], "tool_choice": "auto"}


# name, arguments, whether the code ran, what the client and the model are told
ARGUMENT_CASES = [
    ("not-json", "not json at all", False, NOT_RUN),
    ("code-a-number", '{"code": 5}', False, NOT_RUN),
    ("an-array", '["print(1)"]', False, NOT_RUN),
    ("missing", None, False, NOT_RUN),
    ("nesting-1000", "[" * 1000 + "]" * 1000, False, NOT_RUN),
    ("NaN", '{"code": "print(1)", "x": NaN}', False, NOT_RUN),
    ("extra-field", '{"code": "print(1)", "x": 2}', True, "1\n"),
]


@pytest.mark.parametrize("arguments,ran,told",
                         [pytest.param(a, r, t, id=n) for n, a, r, t in ARGUMENT_CASES])
def test_hostile_call_arguments(server, model, arguments, ran, told):
    raw_call = {"name": "python"}
    if arguments is not None:
        raw_call["arguments"] = arguments
    code, answer = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"raw_call": raw_call}], [{"text": "{{last_output}}"}]])})[::2]
    assert code == 200, answer
    call, msg = answer["output"]
    # (a call not run ends completed too: see test_agents_sdk.py)
    assert call["status"] == "completed"
    assert call["code"] == ("print(1)" if ran else (arguments or ""))
    assert call["outputs"] == [{"type": "logs", "logs": told}]
    assert msg["content"][0]["text"] == told
    assert sandboxes_started(server) == (1 if ran else 0)


def test_ten_megabytes_of_code_run(server, model):
    code = "s = '" + "a" * (10 << 20) + "'\nprint(len(s))"
    status, _, answer = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])})
    assert status == 200
    call, msg = answer["output"]
    assert call["status"] == "completed"
    assert call["code"] == code
    assert call["outputs"] == [{"type": "logs", "logs": "10485760\n"}]
    assert msg["content"][0]["text"] == "10485760\n"


def children_rss_kib(server):
    with open(os.path.join(server.root, "httpd.pid")) as f:
        parent = int(f.read())
    total = 0
    for pid, (ppid, _, _) in proc_stats().items():
        if ppid != parent:
            continue
        try:
            with open("/proc/%d/status" % pid) as f:
                total += int([l for l in f if l.startswith("VmRSS:")][0].split()[1])
        except (OSError, IndexError):
            continue
    return total


def thousand_calls(server, **extra):
    rounds = [[{"calls": 1000, "code": "n = globals().get('n', 0) + 1"}],
              [{"call": "print(n)"}], [{"text": "{{last_output}}"}]]
    req = {"model": "m", "tools": [TOOL], "input": script_input(rounds)}
    req.update(extra)
    status, _, answer = server.post("/v1/responses", req)
    assert status == 200, answer
    return answer


def test_a_thousand_calls_in_one_answer_all_run(server, model):
    """CodeInterpreterMaxLoops counts rounds: every call of a round runs, in
    one sandbox, in order; memory stays bounded."""
    thousand_calls(server)
    before = children_rss_kib(server)
    for _ in range(3):
        answer = thousand_calls(server)
    after = children_rss_kib(server)
    calls = [o for o in answer["output"] if o["type"] == "code_interpreter_call"]
    assert len(calls) == 1001
    assert {c["status"] for c in calls} == {"completed"}
    assert len({c["container_id"] for c in calls}) == 1
    assert answer["output"][-1]["content"][0]["text"] == "1000\n"
    assert server.log_since_mark().count("CI0201:") == 4 * 1001
    assert len(model.requests()) == 4 * 3
    # generous: allocator caching, not growth per request (the sanitizer
    # build keeps freed memory in quarantine, so it gets more room)
    bound = 256 * 1024 if SANITIZE else 64 * 1024
    assert after - before < bound, (before, after)


def test_a_thousand_calls_bounded_by_max_tool_calls(server, model):
    answer = thousand_calls(server, max_tool_calls=3)
    calls = [o for o in answer["output"] if o["type"] == "code_interpreter_call"]
    assert len(calls) == 1000
    # 3 ran, 997 were not run (what the model is told below): all are finished
    assert [c["status"] for c in calls] == ["completed"] * 1000
    seen = model.requests()
    # the cap was reached in round 1: one last call with tool_choice none
    assert len(seen) == 2
    assert seen[1]["json"]["tool_choice"] == "none"
    outputs = [i["output"] for i in seen[1]["json"]["input"]
               if i.get("type") == "function_call_output"]
    assert outputs == ["(no output)"] * 3 + [
        "Not run: the request's max_tool_calls limit was reached."] * 997
    assert answer["output"][-1]["content"][0]["text"] == "tool_choice none honoured"
    assert server.log_since_mark().count("CI0201:") == 3


# ============================================================ hostile output

CUT = "\n[... %d more bytes of output were cut ...]\n"
FD = "import os\n"

OUTPUT_CASES = [
    ("stdout-buffer-missing", "import sys\nsys.stdout.buffer.write(b'\\xff\\x00bin')",
     "completed", "Traceback (most recent call last):\n  File \"<cell>\", line 2, in <module>\n"
                  "AttributeError: 'Stream' object has no attribute 'buffer'\n"),
    ("invalid-utf8-to-fd-1", FD + "n = os.write(1, b'A\\xff\\xfeB\\n')", "completed",
     "A\ufffd\ufffdB\n"),
    ("lone-surrogate", "print('\\ud800')", "completed", "?\n"),
    ("100MB-of-prints", "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))"
                        "\nprint('end')", "completed",
     "x" * 4096 + CUT % (100 * (1 << 20) + 4 - 4096)),
    ("100MB-to-fd-1", FD + "n, err = 0, None\ntry:\n    for _ in range(100):\n"
                           "        n += os.write(1, b'z' * (1 << 20))\n"
                           "except OSError as e:\n    err = e.errno",
     "completed", "z" * 4096 + CUT % ((16 << 20) - 4096)),
    ("100MB-from-a-subprocess", "import subprocess\n"
                                "r = subprocess.run('yes | head -c 100000000', shell=True)",
     "completed", "y\n" * 2048 + "[... %d more bytes of output were cut ...]\n"
     % ((16 << 20) - 4096)),
    ("1MB-line-without-newline", "print('y' * 1000000, end='')", "completed",
     "y" * 4096 + CUT % (1000000 - 4096)),
    ("40MB-on-the-protocol-pipe", FD + "for _ in range(40):\n    os.write(4, b'x' * (1 << 20))",
     "failed", "The execution wrote a line of more than %d bytes to the interpreter's output "
               "channel and was stopped." % ((8 << 20) + 12 * 4096)),
]


@pytest.mark.parametrize("code,outcome,logs",
                         [pytest.param(c, s, l, id=n) for n, c, s, l in OUTPUT_CASES])
def test_hostile_output(server, model, code, outcome, logs):
    answer = server.post("/tight/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": code}], [{"call": "print('next')"}],
                               [{"text": "{{outputs}}"}]])})[2]
    call, following, msg = answer["output"]
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": logs}]
    # a failed execution: the model is also told the interpreter restarted
    told = logs + (RESTARTED if outcome == "failed" else "")
    # the interpreter (or its replacement) still answers
    assert following["outputs"] == [{"type": "logs", "logs": "next\n"}]
    assert json.loads(msg["content"][0]["text"]) == [told, "next\n"]


def test_descriptor_output_stops_at_the_file_size_limit(server, model):
    answer = server.post("/tight/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": OUTPUT_CASES[4][1]}],
                               [{"call": "import errno\nprint(n, errno.errorcode[err])"}],
                               [{"text": "done"}]])})[2]
    assert answer["output"][1]["outputs"] == [{"type": "logs",
                                               "logs": "%d EFBIG\n" % (16 << 20)}]


def test_forged_protocol_lines_only_shift_the_code_s_own_output(server, model):
    """The code shares its process with the interpreter's protocol stream and
    can write to it: after a forged end of execution, the next call reports
    what the forging code printed later (what code prints is its own business
    anyway); the request still ends and its sandbox is destroyed."""
    forge = (FD + "import time\n"
             "os.write(4, b'{\"type\": \"stdout\", \"text\": \"forged\\\\n\"}\\n"
             "{\"type\": \"end_of_execution\"}\\n')\n"
             "time.sleep(1)\nprint('late')")
    answer = server.post("/tight/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": forge}], [{"call": "print('second')"}],
                               [{"text": "{{outputs}}"}]])})[2]
    first, second, msg = answer["output"]
    assert (first["status"], second["status"]) == ("completed", "completed")
    assert first["outputs"] == [{"type": "logs", "logs": "forged\n"}]
    assert second["outputs"] == [{"type": "logs", "logs": "late\n"}]
    assert json.loads(msg["content"][0]["text"]) == ["forged\n", "late\n"]


def test_nul_characters_in_output_become_replacement_characters(server, model):
    # Nothing after a NUL is lost: it is shown as U+FFFD.
    answer = server.post("/tight/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": "print('a\\x00b')\nprint('after')"}],
                               [{"text": "{{last_output}}"}]])})[2]
    assert answer["output"][0]["outputs"] == [{"type": "logs", "logs": "a\ufffdb\nafter\n"}]


@pytest.mark.parametrize("code,logs", [
    ("import os\nn = os.write(1, b'first\\n')\n'second'", "first\n'second'\n"),
    ("import os\nn = os.write(1, b'first\\n')\nraise ValueError('second')",
     "first\nTraceback (most recent call last):\n  File \"<cell>\", line 3, in <module>\n"
     "ValueError: second\n"),
], ids=["before-the-last-value", "before-a-traceback"])
def test_descriptor_output_keeps_its_place(server, model, code, logs):
    answer = server.post("/tight/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": code}], [{"text": "done"}]])})[2]
    assert answer["output"][0]["outputs"] == [{"type": "logs", "logs": logs}]
