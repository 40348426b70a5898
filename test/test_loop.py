"""The agentic loop: executions, follow-ups, caps, history and the assembled
response, against the scripted model upstream."""
import base64
import http.client
import json
import os
import re
import threading
import time

import pytest

from conftest import CLIENT_HEADERS, TOOL, Httpd, base_conf, script_input

OUTPUTS = "code_interpreter_call.outputs"
RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
CI_KEYS = {"id", "type", "status", "container_id", "code", "outputs"}


def echoed(tools):
    """TOOLS as the scripted upstream echoes them (function tools completed
    with "strict", as OpenAI does); ours comes back as the client sent it."""
    return [dict(t, strict=True) if t.get("type") == "function" and "strict" not in t else t
            for t in tools]


def ci_body(rounds, include=False, tools=None, **extra):
    body = {"model": "m", "tools": tools if tools is not None else [TOOL],
            "input": script_input(rounds)}
    if include:
        body["include"] = [OUTPUTS]
    body.update(extra)
    return body


def calls_of(body):
    return [o for o in body["output"] if o["type"] == "code_interpreter_call"]


def text_of(item):
    assert item["type"] == "message", item
    return item["content"][0]["text"]


def upstream_inputs(req):
    """The input items of one recorded upstream request."""
    inp = req["json"]["input"]
    return [{"role": "user", "content": inp}] if isinstance(inp, str) else inp


def issued_calls(req):
    """The function_call items the model answered REQ with (its own record)."""
    return [o for o in req["answer"]["output"] if o["type"] == "function_call"]


def fc_outputs(req):
    return [(i["call_id"], i["output"]) for i in upstream_inputs(req)
            if i.get("type") == "function_call_output"]


def headers_of(req):
    return {k.lower(): v for k, v in req["headers"]}


def sandboxes_started(server):
    """Sandboxes started for requests and containers: forked by the local
    supervisor (but warm ones), or made at E2B."""
    text = server.log_since_mark()
    return (len(re.findall(r"CI0610: .* tag=(?!warm)", text)) +
            len(re.findall(r"CI0302: .* provider=e2b", text)))


def access_line(server, path, timeout=5):
    """The last access-log line of a POST to PATH (written after the answer)."""
    deadline = time.time() + timeout
    while True:
        try:
            with open(server.access_log) as f:
                lines = [l for l in f if l.startswith("POST %s " % path)]
        except FileNotFoundError:
            lines = []
        if lines or time.time() > deadline:
            return lines[-1] if lines else ""
        time.sleep(0.05)


# ---------------------------------------------------------------- executions

def test_one_call_logs_and_function_output(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(sum(range(10)))"}], [{"text": "got {{last_output}}"}]],
        include=True))
    assert status == 200
    call, msg = body["output"]
    assert set(call) == CI_KEYS
    assert call["type"] == "code_interpreter_call"
    assert call["status"] == "completed"
    assert re.fullmatch(r"ci_[0-9a-f]+", call["id"])
    assert re.fullmatch(r"cntr_[0-9a-f]+", call["container_id"])
    assert call["outputs"] == [{"type": "logs", "logs": "45\n"}]
    assert text_of(msg) == "got 45\n"
    seen = model.requests()
    assert len(seen) == 2
    # the model's call goes back to it as it made it, with the output under its call_id
    [issued] = issued_calls(seen[0])
    assert issued["name"] == "python"
    assert [i for i in upstream_inputs(seen[1]) if i.get("type") == "function_call"] == [issued]
    assert fc_outputs(seen[1]) == [(issued["call_id"], "45\n")]
    assert sandboxes_started(httpd) == 1


def test_state_kept_across_rounds(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "x = 1"}], [{"call": "print(x + 1)"}], [{"text": "{{outputs}}"}]],
        include=True))
    assert status == 200
    c1, c2, msg = body["output"]
    assert (c1["status"], c2["status"]) == ("completed", "completed")
    assert c1["outputs"] == []
    assert c2["outputs"] == [{"type": "logs", "logs": "2\n"}]
    assert c1["container_id"] == c2["container_id"]
    assert json.loads(text_of(msg)) == ["(no output)", "2\n"]
    assert len(model.requests()) == 3
    assert sandboxes_started(httpd) == 1


def test_two_calls_in_one_round_share_state_and_order(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "a = 5\nprint('first')"}, {"call": "print(a * 2)"}],
         [{"text": "{{outputs}}"}]], include=True))
    assert status == 200
    c1, c2, msg = body["output"]
    assert c1["code"] == "a = 5\nprint('first')"
    assert c2["code"] == "print(a * 2)"
    assert c1["outputs"] == [{"type": "logs", "logs": "first\n"}]
    assert c2["outputs"] == [{"type": "logs", "logs": "10\n"}]
    assert c1["id"] != c2["id"]
    seen = model.requests()
    assert len(seen) == 2
    items = upstream_inputs(seen[1])
    types = [i.get("type", "message") for i in items]
    assert types == ["message", "function_call", "function_call",
                     "function_call_output", "function_call_output"]
    issued = issued_calls(seen[0])
    assert [i for i in items if i.get("type") == "function_call"] == issued
    assert fc_outputs(seen[1]) == [(issued[0]["call_id"], "first\n"),
                                   (issued[1]["call_id"], "10\n")]
    assert json.loads(text_of(msg)) == ["first\n", "10\n"]
    assert sandboxes_started(httpd) == 1


def test_stdout_stderr_and_last_expression_reach_the_model(httpd, model):
    code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\n1 + 1"
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": code}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    call, msg = body["output"]
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "out\nerr\n2\n"}]
    assert fc_outputs(model.requests()[1])[0][1] == "out\nerr\n2\n"
    assert text_of(msg) == "out\nerr\n2\n"


def test_none_valued_last_expression_is_not_shown(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print('x')\nNone"}], [{"text": "{{last_output}}"}]]))
    assert status == 200
    assert fc_outputs(model.requests()[1])[0][1] == "x\n"


def test_traceback_reaches_model_and_call_is_completed(httpd, model):
    code = "print('before')\nraise ValueError('boom')"
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": code}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    call, msg = body["output"]
    expected = ("before\nTraceback (most recent call last):\n"
                "  File \"<cell>\", line 2, in <module>\nValueError: boom\n")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": expected}]
    assert fc_outputs(model.requests()[1])[0][1] == expected
    assert text_of(msg) == expected


def test_exception_keeps_the_interpreter_state(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "kept = 7\n1 / 0"}], [{"call": "print(kept)"}],
         [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    c1, c2, msg = body["output"]
    assert c1["status"] == "completed"
    assert c1["outputs"][0]["logs"].endswith("ZeroDivisionError: division by zero\n")
    assert c2["outputs"] == [{"type": "logs", "logs": "7\n"}]
    assert text_of(msg) == "7\n"
    assert sandboxes_started(httpd) == 1


def test_state_across_requests_of_one_conversation_only(httpd, model):
    """Two requests that are not one conversation (the second names nothing
    of the first) share nothing; chained, they share the container
    (test_containers.py)."""
    status, _, first = httpd.post("/v1/responses", ci_body(
        [[{"call": "leftover = 41"}], [{"text": "set"}]]))
    assert status == 200
    status, _, second = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(leftover)"}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    logs = calls_of(second)[0]["outputs"][0]["logs"]
    assert logs.endswith("NameError: name 'leftover' is not defined\n")
    assert calls_of(first)[0]["container_id"] != calls_of(second)[0]["container_id"]
    assert sandboxes_started(httpd) == 2


def test_concurrent_requests_get_separate_sandboxes(httpd, model):
    results = {}

    def run(tag):
        code = "import time\nmine = %r\ntime.sleep(1)\nprint(mine)" % tag
        results[tag] = httpd.post("/v1/responses", ci_body(
            [[{"call": code}], [{"text": "{{last_output}}"}]], include=True))

    threads = [threading.Thread(target=run, args=(t,)) for t in ("alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tag in ("alpha", "beta"):
        status, _, body = results[tag]
        assert status == 200
        assert calls_of(body)[0]["outputs"] == [{"type": "logs", "logs": tag + "\n"}]
    assert (calls_of(results["alpha"][2])[0]["container_id"] !=
            calls_of(results["beta"][2])[0]["container_id"])
    assert sandboxes_started(httpd) == 2


def test_matplotlib_figure_becomes_image_output(httpd, model):
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('drawn')"
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": code}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    call, msg = body["output"]
    assert call["status"] == "completed"
    logs, image = call["outputs"]
    assert logs == {"type": "logs", "logs": "drawn\n"}
    assert image["type"] == "image"
    prefix = "data:image/png;base64,"
    assert image["url"].startswith(prefix)
    png = base64.b64decode(image["url"][len(prefix):], validate=True)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    told = "drawn\n[a PNG figure was created and is shown to the user]\n"
    assert fc_outputs(model.requests()[1])[0][1] == told
    assert text_of(msg) == told


def test_output_cut_at_max_output_with_marker(httpd, model):
    status, _, body = httpd.post("/quick/v1/responses", ci_body(
        [[{"call": "print('a' * 10000)"}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    # 10000 characters and a newline, 2048 of them shown
    expected = "a" * 2048 + "\n[... 7953 more bytes of output were cut ...]\n"
    call, msg = body["output"]
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": expected}]
    assert fc_outputs(model.requests()[1])[0][1] == expected


def test_no_call_starts_no_sandbox(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "just text"}]],
                                                          include=True))
    assert status == 200
    assert [o["type"] for o in body["output"]] == ["message"]
    assert body["tools"] == [TOOL]
    assert len(model.requests()) == 1
    assert sandboxes_started(httpd) == 0
    assert "CI0101" in httpd.log_since_mark()


def test_invalid_arguments_are_not_run(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"raw_call": {"name": "python", "arguments": "not json"}}],
         [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    why = "The arguments were not a JSON object with a string field \"code\"; nothing was run."
    call, msg = body["output"]
    assert call["status"] == "completed"
    assert call["code"] == "not json"
    assert call["outputs"] == [{"type": "logs", "logs": why}]
    assert text_of(msg) == why
    assert sandboxes_started(httpd) == 0


# ------------------------------------------------------ client function tools

def test_client_function_in_same_round_ends_loop(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(6 * 7)"},
          {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
         [{"text": "never reached"}]], include=True, tools=[TOOL, WEATHER]))
    assert status == 200
    call, fc = body["output"]
    assert call["type"] == "code_interpreter_call"
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "42\n"}]
    # the client's call reaches it as the model made it
    [seen] = model.requests()
    assert [c["name"] for c in issued_calls(seen)] == ["python", "get_weather"]
    assert issued_calls(seen)[1] == fc
    assert fc["type"] == "function_call"
    assert fc["name"] == "get_weather"
    assert json.loads(fc["arguments"]) == {"city": "Paris"}
    assert body["tools"] == echoed([TOOL, WEATHER])


def test_client_function_turn_continues_by_replay(httpd, model):
    """The client runs its function and replays the whole history, our call
    included as a code_interpreter_call item."""
    rounds = [[{"call": "print(6 * 7)"},
               {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
              [{"text": "weather {{last_output}}"}]]
    first_input = [{"role": "user", "content": script_input(rounds)}]
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER], "include": [OUTPUTS],
        "input": first_input})
    assert status == 200
    call, fc = body["output"]
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER],
        "input": first_input + [call, fc, {"type": "function_call_output",
                                           "call_id": fc["call_id"], "output": "sunny"}]})
    assert status == 200, second
    assert text_of(second["output"][-1]) == "weather sunny"
    assert b"code_interpreter" not in base64.b64decode(model.requests()[0]["body_b64"])


def test_client_function_turn_continues_by_previous_response_id(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(6 * 7)"},
          {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]],
        tools=[TOOL, WEATHER]))
    assert status == 200
    fc = body["output"][1]
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER], "previous_response_id": body["id"],
        "input": [{"type": "function_call_output", "call_id": fc["call_id"],
                   "output": "sunny"}]})
    assert status == 200, second
    assert second["output"][-1]["type"] == "message"


# ------------------------------------------------------------ pass-through

# The upstream answers these bytes verbatim, so a pass-through answer can be
# compared byte for byte.
RAW_ANSWER = '{"id": "resp_raw",   "object":"response",\n "output":[], "note": "kept as is"}'


@pytest.mark.parametrize("tools", [None, [], [WEATHER]],
                         ids=["no-tools", "empty-tools", "function-only"])
@pytest.mark.parametrize("mention", [False, True], ids=["plain-text", "mentions-tool-name"])
def test_request_without_tool_forwarded_byte_for_byte(httpd, model, tools, mention):
    script = script_input([[{"garbage": RAW_ANSWER}]],
                          prefix="tell me about code_interpreter\n" if mention else "")
    body = {"model": "m", "input": script, "temperature": 0.5}
    if tools is not None:
        body["tools"] = tools
    raw = json.dumps(body, indent=3).encode()
    answers = {}
    for path in ("/v1/responses", "/plain/v1/responses"):
        model.reset()
        status, hdrs, data = httpd.request("POST", path, raw)
        seen = model.requests()
        assert len(seen) == 1
        assert base64.b64decode(seen[0]["body_b64"]) == raw
        hdrs = {k.lower(): v for k, v in hdrs}
        answers[path] = (status, hdrs.get("content-type"), hdrs.get("content-length"), data)
    assert answers["/v1/responses"] == answers["/plain/v1/responses"]
    assert answers["/v1/responses"][0] == 200
    assert answers["/v1/responses"][3] == RAW_ANSWER.encode()
    assert "CI0101" not in httpd.log_since_mark()


# --------------------------------------------------------------------- caps

def test_loop_cap_ends_with_tool_choice_none(httpd, model):
    rounds = [[{"call": "print(%d)" % i}] for i in range(6)]
    status, _, body = httpd.post("/capped/v1/responses", ci_body(rounds, include=True))
    assert status == 200
    seen = model.requests()
    assert len(seen) == 3
    assert [r["json"].get("tool_choice") for r in seen] == [None, None, "none"]
    calls = calls_of(body)
    assert [c["code"] for c in calls] == ["print(0)", "print(1)"]
    assert [c["status"] for c in calls] == ["completed", "completed"]
    assert [c["outputs"] for c in calls] == [[{"type": "logs", "logs": "0\n"}],
                                             [{"type": "logs", "logs": "1\n"}]]
    last = body["output"][-1]
    assert text_of(last) == "tool_choice none honoured"
    assert [o["type"] for o in body["output"]] == [
        "code_interpreter_call", "code_interpreter_call", "message"]
    assert fc_outputs(seen[2])[-1][1] == "1\n"
    assert "(final, tool_choice none)" in httpd.log_since_mark()
    assert "rounds=3 exec=2 " in access_line(httpd, "/capped/v1/responses")


def test_max_tool_calls_limits_executions(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"calls": 2, "code": "print('hi')"}], [{"text": "after"}]],
        include=True, max_tool_calls=1))
    assert status == 200
    c1, c2, msg = body["output"]
    assert c1["status"] == "completed"
    assert c1["outputs"] == [{"type": "logs", "logs": "hi\n"}]
    assert c2["status"] == "completed"
    why = "Not run: the request's max_tool_calls limit was reached."
    assert c2["outputs"] == [{"type": "logs", "logs": why}]
    assert msg["type"] == "message"
    seen = model.requests()
    assert len(seen) == 2
    assert seen[1]["json"]["tool_choice"] == "none"
    assert seen[1]["json"]["max_tool_calls"] == 1
    assert [o for _, o in fc_outputs(seen[1])] == ["hi\n", why]
    assert httpd.log_since_mark().count("CI0201:") == 1


# ------------------------------------------------------------------ chaining

def test_previous_response_id_chains_on_final_round(httpd, model):
    status, _, first = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(7)"}], [{"text": "seven"}]]))
    assert status == 200
    # the id is the final round's: the upstream stored it with the answer
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    conn.request("GET", "/v1/responses/" + first["id"], headers=CLIENT_HEADERS)
    stored = json.loads(conn.getresponse().read())
    conn.close()
    assert [o["type"] for o in stored["output"]] == ["message"]
    model.reset()
    status, _, second = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(8)"}], [{"text": "{{last_output}}"}]],
        previous_response_id=first["id"]))
    assert status == 200, second
    assert text_of(second["output"][-1]) == "8\n"
    assert second["previous_response_id"] == first["id"]
    seen = model.requests()
    assert len(seen) == 2
    assert [r["json"]["previous_response_id"] for r in seen] == [first["id"]] * 2


def test_conversation_followups_send_only_new_items(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "v = 2"}], [{"call": "print(v * 21)"}], [{"text": "{{last_output}}"}]],
        conversation="conv_loop_test"))
    assert status == 200, body
    assert text_of(body["output"][-1]) == "42\n"
    seen = model.requests()
    assert len(seen) == 3
    for req in seen[1:]:
        assert req["json"]["conversation"] == "conv_loop_test"
        assert [i["type"] for i in req["json"]["input"]] == ["function_call_output"]
    assert [o for _, o in fc_outputs(seen[1])] == ["(no output)"]
    assert [o for _, o in fc_outputs(seen[2])] == ["42\n"]


# ------------------------------------------------------------ follow-ups

def test_followup_headers(httpd, model):
    headers = {"Authorization": "Bearer sk-client", "OpenAI-Organization": "org-1",
               "OpenAI-Project": "proj_1", "X-Custom": "custom value",
               "Connection": "keep-alive, X-Dropped", "X-Dropped": "1",
               "Keep-Alive": "timeout=5", "TE": "trailers",
               "Proxy-Authorization": "Basic Zm9vOmJhcg==", "Accept-Encoding": "gzip"}
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"call": "print(2)"}], [{"text": "done"}]]),
        headers=headers)
    assert status == 200
    seen = model.requests()
    assert len(seen) == 3
    first = headers_of(seen[0])
    assert first["authorization"] == "Bearer sk-client"
    assert first["openai-organization"] == "org-1"
    assert first["openai-project"] == "proj_1"
    assert first["x-custom"] == "custom value"
    assert "accept-encoding" not in first
    for req in seen[1:]:
        h = headers_of(req)
        for name in ("authorization", "openai-organization", "openai-project", "x-custom"):
            assert h[name] == first[name]
        for hop in ("connection", "keep-alive", "te", "proxy-authorization",
                    "x-dropped", "transfer-encoding", "upgrade", "accept-encoding"):
            assert hop not in h, (hop, h)
        assert h["content-type"] == "application/json"
        assert int(h["content-length"]) == len(base64.b64decode(req["body_b64"]))


def test_followups_keep_their_upstream_connection(httpd, model):
    """Follow-ups keep their connection to the upstream: the later rounds of
    a request, and those of the next request on the same client connection
    (so the same child), arrive on one connection, not one each."""
    conn = http.client.HTTPConnection("127.0.0.1", httpd.port, timeout=60)

    def post(rounds):
        conn.request("POST", "/v1/responses", body=json.dumps(ci_body(rounds)),
                     headers=CLIENT_HEADERS)
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data
        assert text_of(json.loads(data)["output"][-1]) == "done"

    post([[{"call": "print(1)"}], [{"call": "print(2)"}], [{"text": "done"}]])
    post([[{"call": "print(3)"}], [{"text": "done"}]])
    conn.close()
    peers = [r["peer"] for r in model.requests()]
    assert len(peers) == 5
    # 0 and 3 are the first rounds (mod_proxy's); 1, 2 and 4 are follow-ups
    assert peers[1] == peers[2] == peers[4], peers


def test_followup_after_the_upstream_dropped_the_kept_connection(httpd, model):
    """The upstream closes a kept connection without a word after its answer
    to a follow-up: the next follow-up goes out on a new connection."""
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"call": "print(2)"}, {"hang_up": True}],
         [{"text": "{{last_output}}"}]]))
    assert status == 200, body
    assert text_of(body["output"][-1]) == "2\n"
    seen = model.requests()
    assert len(seen) == 3
    assert seen[2]["peer"] != seen[1]["peer"]
    assert [o for _, o in fc_outputs(seen[2])] == ["1\n", "2\n"]


def test_upstream_never_sees_code_interpreter(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"call": "print(2)"}], [{"text": "done"}]],
        include=True, tool_choice={"type": "code_interpreter"}))
    assert status == 200
    seen = model.requests()
    assert len(seen) == 3
    for req in seen:
        raw = base64.b64decode(req["body_b64"])
        assert b"code_interpreter" not in raw
        assert [t["type"] for t in req["json"]["tools"]] == ["function"]
        assert req["json"]["stream"] is False


def test_the_clients_items_go_upstream_as_written(httpd, model):
    """The items that pass unchanged reach the upstream in every round as
    the client wrote them (its escapes, spacing and numbers), not encoded
    again; an item with a raw control character is encoded (strict JSON)."""
    kept = b'{"role": "user",  "content": "caf\\u00e9 \\/ 1.50e+1"}'
    raw_tab = b'{"role":"user","content":"a\tb"}'
    script = json.dumps({"role": "user", "content": script_input(
        [[{"call": "print(1)"}], [{"text": "done"}]])}).encode()
    body = (b'{"model": "m", "tools": [' + json.dumps(TOOL).encode() + b'], "input": [ ' +
            kept + b' , ' + raw_tab + b', ' + script + b']}')
    status, _, data = httpd.request("POST", "/v1/responses", body)
    assert status == 200, data
    seen = model.requests()
    assert len(seen) == 2
    for req in seen:
        sent = base64.b64decode(req["body_b64"])
        assert b'"input":[' + kept + b',{"role":"user","content":"a\\tb"},' + script in sent
        assert req["json"]["input"][0] == {"role": "user", "content": "caf\u00e9 / 1.50e+1"}


def test_a_string_input_goes_upstream_as_written(httpd, model):
    """A string input becomes one user message whose content is the
    client's own string, its escapes as written, in every round."""
    literal = json.dumps("caf\u00e9 / " + script_input([[{"call": "print(1)"}],
                                                      [{"text": "done"}]]))
    literal = literal.replace(" / ", " \\/ ").encode()
    assert b"\\u00e9 \\/ " in literal
    body = (b'{"model": "m", "tools": [' + json.dumps(TOOL).encode() +
            b'], "input": ' + literal + b'}')
    status, _, data = httpd.request("POST", "/v1/responses", body)
    assert status == 200, data
    seen = model.requests()
    assert len(seen) == 2
    for req in seen:
        assert (b'"input":[{"role":"user","content":' + literal + b'}' in
                base64.b64decode(req["body_b64"]))


def test_replayed_code_interpreter_calls_translated(httpd, model):
    history = [
        {"role": "user", "content": "earlier"},
        {"type": "code_interpreter_call", "id": "ci_abc", "status": "completed",
         "code": "print(1)", "container_id": "cntr_old",
         "outputs": [{"type": "logs", "logs": "1\n"}]},
        {"type": "code_interpreter_call", "id": "ci_def", "status": "completed",
         "code": "x = 2", "container_id": "cntr_old", "outputs": None},
        {"type": "code_interpreter_call", "id": "ci_ghi", "status": "completed",
         "code": "plot()", "container_id": "cntr_old",
         "outputs": [{"type": "image", "url": "data:image/png;base64,AAAA"}]},
        {"type": "code_interpreter_call", "id": "ci_jkl", "status": "completed",
         "code": None, "container_id": "cntr_old", "outputs": []},
        {"role": "user", "content": script_input([[{"text": "ok"}]])},
    ]
    status, _, body = httpd.post("/v1/responses", {"model": "m", "tools": [TOOL],
                                                   "input": history})
    assert status == 200, body
    seen = model.requests()
    assert len(seen) == 1
    assert b"code_interpreter" not in base64.b64decode(seen[0]["body_b64"])
    items = seen[0]["json"]["input"]
    assert items[0] == {"role": "user", "content": "earlier"}
    assert items[-1] == history[-1]
    pairs = items[1:-1]
    expected = [("ci_abc", "print(1)", "1\n"), ("ci_def", "x = 2", "(no output recorded)"),
                ("ci_ghi", "plot()", "[image/png figure]"), ("ci_jkl", "", "(no output)")]
    assert len(pairs) == 2 * len(expected)
    for k, (cid, code, out) in enumerate(expected):
        call, result = pairs[2 * k], pairs[2 * k + 1]
        assert call["type"] == "function_call"
        assert call["call_id"] == cid
        assert call["name"] == "python"
        assert json.loads(call["arguments"]) == {"code": code}
        assert result == {"type": "function_call_output", "call_id": cid, "output": out}


# ------------------------------------------------------------- the answer

@pytest.mark.parametrize("include,upstream_include", [
    (None, None),
    ([OUTPUTS], None),
    (["reasoning.encrypted_content", OUTPUTS], ["reasoning.encrypted_content"]),
])
def test_include_outputs(httpd, model, include, upstream_include):
    body = ci_body([[{"call": "print('shown')"}, {"call": "pass"}], [{"text": "done"}]])
    if include is not None:
        body["include"] = include
    status, _, resp = httpd.post("/v1/responses", body)
    assert status == 200
    calls = calls_of(resp)
    assert all(set(c) == CI_KEYS for c in calls)
    if include and OUTPUTS in include:
        assert [c["outputs"] for c in calls] == [[{"type": "logs", "logs": "shown\n"}], []]
    else:
        assert [c["outputs"] for c in calls] == [None, None]
    for req in model.requests():
        assert req["json"].get("include") == upstream_include


@pytest.mark.parametrize("choice,first,followup", [
    ({"type": "code_interpreter"}, {"type": "function", "name": "python"}, "auto"),
    ("required", "required", "auto"),
    ("auto", "auto", "auto"),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "code_interpreter"}]},
     {"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "python"}]},
     {"type": "allowed_tools", "mode": "auto",
      "tools": [{"type": "function", "name": "python"}]}),
], ids=["code_interpreter", "required", "auto", "allowed_tools"])
def test_tools_and_tool_choice_echoed(httpd, model, choice, first, followup):
    tools = [WEATHER, {"type": "code_interpreter", "container": {"type": "auto",
                                                                 "file_ids": []}}]
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"call": "print(2)"}], [{"text": "done"}]],
        tools=tools, tool_choice=choice))
    assert status == 200, body
    assert body["tools"] == echoed(tools)
    assert body["tools"][1] == tools[1]
    assert body["tool_choice"] == choice
    seen = model.requests()
    assert len(seen) == 3
    assert seen[0]["json"]["tool_choice"] == first
    assert [r["json"]["tool_choice"] for r in seen[1:]] == [followup, followup]
    up_tools = seen[0]["json"]["tools"]
    assert up_tools[0] == WEATHER
    ours = up_tools[1]
    assert ours["type"] == "function" and ours["name"] == "python"
    assert ours["strict"] is True
    assert ours["parameters"]["required"] == ["code"]
    assert ours["parameters"]["properties"]["code"]["type"] == "string"
    assert ours["parameters"]["additionalProperties"] is False
    for phrase in ("Python 3", "/mnt/data", "no internet"):
        assert phrase in ours["description"]


@pytest.mark.parametrize("upstream_tools", [None, [], [{"type": "function", "name": "other"}]],
                         ids=["absent", "empty", "unlike"])
def test_tools_echoed_verbatim_when_upstream_echo_does_not_match(httpd, model,
                                                                  upstream_tools):
    answer = {"id": "resp_crafted", "object": "response", "status": "completed",
              "output": [{"type": "message", "id": "msg_crafted", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": "hi",
                                       "annotations": []}]}]}
    if upstream_tools is not None:
        answer["tools"] = upstream_tools
    tools = [TOOL]
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"garbage": json.dumps(answer)}]], tools=tools))
    assert status == 200, body
    assert body["tools"] == tools
    assert body["id"] == "resp_crafted"
    assert body["output"] == answer["output"]


def test_tool_choice_defaults_to_auto_in_echo(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"text": "done"}]]))
    assert status == 200
    assert body["tool_choice"] == "auto"
    assert all("tool_choice" not in r["json"] for r in model.requests())


ORDER_SCRIPT = [[{"reasoning": "think"}, {"call": "a = 1"}],
                [{"reasoning": "more"}, {"call": "print(a)"}],
                [{"text": "done {{last_output}}"}]]


def test_usage_summed_over_rounds(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(ORDER_SCRIPT))
    assert status == 200
    seen = model.requests()
    assert len(seen) == 3
    # the scripted upstream's usage: input 10 + items in, output 5 per item,
    # reasoning 3 per reasoning item
    out_items = [2, 2, 1]
    reasoning = [1, 1, 0]
    inp = sum(10 + len(upstream_inputs(r)) for r in seen)
    out = sum(5 * n for n in out_items)
    assert body["usage"] == {
        "input_tokens": inp, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 3 * sum(reasoning)},
        "total_tokens": inp + out}
    assert (inp, out) == (42, 25)


def test_output_order_across_rounds(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(ORDER_SCRIPT))
    assert status == 200
    out = body["output"]
    assert [o["type"] for o in out] == ["reasoning", "code_interpreter_call", "reasoning",
                                        "code_interpreter_call", "message"]
    assert [o["summary"][0]["text"] for o in out if o["type"] == "reasoning"] == [
        "think", "more"]
    assert text_of(out[-1]) == "done 1\n"
    seen = model.requests()
    # every round's items go back verbatim, reasoning with its encrypted content
    items = upstream_inputs(seen[2])
    assert [i.get("type", "message") for i in items] == [
        "message", "reasoning", "function_call", "function_call_output",
        "reasoning", "function_call", "function_call_output"]
    assert items[1] == out[0]
    assert items[4] == out[2]
    assert items[1]["encrypted_content"].startswith("enc_")


def test_renamed_function(httpd, model):
    status, _, body = httpd.post("/renamed/v1/responses", ci_body(
        [[{"call": "print(3)"}], [{"text": "{{last_output}}"}]], include=True))
    assert status == 200
    call, msg = body["output"]
    assert call["type"] == "code_interpreter_call"
    assert call["outputs"] == [{"type": "logs", "logs": "3\n"}]
    assert text_of(msg) == "3\n"
    seen = model.requests()
    assert [t["name"] for t in seen[0]["json"]["tools"]] == ["run_code"]
    assert [i["name"] for i in seen[1]["json"]["input"] if i.get("type") == "function_call"] \
        == ["run_code"]


def test_renamed_location_leaves_python_to_the_client(httpd, model):
    client_python = {"type": "function", "name": "python",
                     "parameters": {"type": "object",
                                    "properties": {"source": {"type": "string"}}}}
    status, _, body = httpd.post("/renamed/v1/responses", ci_body(
        [[{"function": {"name": "python", "arguments": {"source": "print(1)"}}}]],
        tools=[TOOL, client_python]))
    assert status == 200, body
    assert [o["type"] for o in body["output"]] == ["function_call"]
    assert body["output"][0]["name"] == "python"
    assert len(model.requests()) == 1
    assert sandboxes_started(httpd) == 0


# ------------------------------------------------ headers set by the operator

@pytest.fixture(scope="session")
def operator_httpd(model):
    extra = """
<Location /operator/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter On
  RequestHeader set Authorization "Bearer sk-operator"
  RequestHeader set X-Team blue
  RequestHeader unset X-Client-Only
</Location>
""" % model.port
    server = Httpd("loop_operator", base_conf(model.port, extra)).start()
    yield server
    server.stop()


@pytest.fixture
def operator(operator_httpd, model):
    model.reset()
    yield operator_httpd


def test_followups_carry_headers_set_by_the_operator(operator, model):
    status, _, body = operator.post("/operator/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"text": "done"}]]),
        headers={"Authorization": "Bearer sk-client", "X-Client-Only": "1"})
    assert status == 200, body
    seen = model.requests()
    assert len(seen) == 2
    for req in seen:
        h = headers_of(req)
        assert h["authorization"] == "Bearer sk-operator"
        assert h["x-team"] == "blue"
        assert "x-client-only" not in h
