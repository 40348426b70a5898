"""Live streaming of intercepted requests (stream: true with code_interpreter).

What a client reading the event stream sees: the HTTP headers, the SSE
framing, the order of the events per item, their shapes against the published
OpenAPI schema and against a recorded real stream, the final response compared
with the JSON path, and the order against the code (shown by holding the code
in the fake E2B sandbox, not by the clock): events leave before the code
finishes, keepalive comments while it runs, an early disconnect stops the loop.
"""
import gzip
import http.client
import json
import os
import socket
import subprocess
import warnings

import pytest

from conftest import (ANONYMOUS, CLIENT_HEADERS, OPENAPI, RECORDED_STREAM, TOOL, FakeE2B, Httpd,
                      base_conf, count_schema_checks, require_spec, script_input,
                      start_helper, wait_until, without_ids)
from fake_model import build_response_object

OUTPUTS = "code_interpreter_call.outputs"
WEATHER = {
    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


# ------------------------------------------------------------- SSE client

class SSE:
    """One streamed answer, read incrementally.

    records: in arrival order, {"kind": "event"|"comment", ...}; an event
    record has "event" (the event: field), "data" (parsed JSON), "raw" (the
    data: text) and "lines" (the block's lines); a comment record has "text".
    """

    def __init__(self, server, path, body, headers=None, timeout=60):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
        hdrs = dict(CLIENT_HEADERS)
        hdrs.update(headers or {})
        self.conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
        self.sock = self.conn.sock
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.records = []
        self.eof = False
        self.bad_lines = []
        self._block = []

    def events(self):
        return [r for r in self.records if r["kind"] == "event"]

    def comments(self):
        return [r for r in self.records if r["kind"] == "comment"]

    def next_record(self):
        """Read until the next event or comment; None at the end of the stream."""
        while not self.eof:
            line = self.resp.readline()
            if not line:
                self.eof = True
                if self._block:
                    self.bad_lines.append(("unterminated block", list(self._block)))
                return None
            if not line.endswith(b"\n") or b"\r" in line:
                self.bad_lines.append(("line ending", line))
            text = line.rstrip(b"\r\n").decode("utf-8")
            if text.startswith(":"):
                rec = {"kind": "comment", "text": text}
                self.records.append(rec)
                return rec
            if text:
                self._block.append(text)
                continue
            if not self._block:
                continue          # the blank line that ends a comment
            block, self._block = self._block, []
            rec = {"kind": "event", "lines": block, "event": None,
                   "raw": None, "data": None}
            for ln in block:
                if ln.startswith("event: "):
                    rec["event"] = ln[len("event: "):]
                elif ln.startswith("data: "):
                    rec["raw"] = ln[len("data: "):]
            try:
                rec["data"] = json.loads(rec["raw"]) if rec["raw"] is not None else None
            except ValueError:
                rec["data"] = None
            self.records.append(rec)
            return rec
        return None

    def until(self, etype):
        """Read up to and including the first event of type ETYPE."""
        while True:
            rec = self.next_record()
            if rec is None:
                raise AssertionError("stream ended before %s; got %s"
                                     % (etype, types(self.events())))
            if rec["kind"] == "event" and rec["event"] == etype:
                return rec

    def read_all(self):
        while self.next_record() is not None:
            pass
        self.close()
        return self

    def close(self):
        self.resp.close()
        self.conn.close()

    def abort(self):
        """Drop the connection at once (the client goes away)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.close()


def stream(server, path, body, headers=None):
    return SSE(server, path, body, headers).read_all()


def stream_body(rounds, tools=None, **extra):
    body = {"model": "m", "stream": True, "tools": tools or [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}
    body.update(extra)
    return body


def types(events):
    return [e["data"]["type"] if e["data"] else e["event"] for e in events]


def shape(events):
    """Event types, each run of one delta type collapsed into "<type>+"."""
    out = []
    for t in types(events):
        if t.endswith(".delta") and out and out[-1] == t + "+":
            continue
        out.append(t + "+" if t.endswith(".delta") else t)
    return out


START = ["response.created", "response.in_progress"]
CALL = ["response.output_item.added", "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta+",
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed", "response.output_item.done"]
MESSAGE = ["response.output_item.added", "response.content_part.added",
           "response.output_text.delta+", "response.output_text.done",
           "response.content_part.done", "response.output_item.done"]
# A reasoning item's summary streams as the upstream writes it.
REASONING = ["response.output_item.added", "response.reasoning_summary_part.added",
             "response.reasoning_summary_text.delta+", "response.reasoning_summary_text.done",
             "response.reasoning_summary_part.done", "response.output_item.done"]
FUNCTION = ["response.output_item.added", "response.function_call_arguments.delta+",
            "response.function_call_arguments.done", "response.output_item.done"]
END = ["response.completed"]
FAILED = ["error", "response.failed"]
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


# ------------------------------------------------------------- checks

def check_framing(s):
    """200, SSE headers, `event: T\\ndata: J\\n\\n` blocks with type == T,
    sequence numbers 0, 1, 2, ..., no [DONE], nothing after the terminal event."""
    assert s.status == 200
    assert s.headers.get("content-type") == "text/event-stream; charset=utf-8"
    assert "content-length" not in s.headers
    assert s.headers.get("content-encoding", "identity") == "identity"
    assert s.eof and not s.bad_lines, s.bad_lines
    events = s.events()
    assert events, "no events"
    for n, e in enumerate(events):
        assert len(e["lines"]) == 2 and e["lines"][0].startswith("event: ") \
            and e["lines"][1].startswith("data: "), e["lines"]
        assert e["raw"] != "[DONE]"
        assert isinstance(e["data"], dict), e["raw"]
        assert e["data"].get("type") == e["event"], e["lines"]
        assert e["data"].get("sequence_number") == n, (n, e["data"])
    assert types(events)[-1] in TERMINAL
    assert s.records[-1] is events[-1], "something followed the terminal event"
    assert sum(t in TERMINAL for t in types(events)) == 1


def check_items(s):
    """Per output item: its events sit between its added and done, carry its
    id, do not interleave with other items', and the pieces add up to the final
    item; the terminal response's output is the list of done items."""
    events = [e["data"] for e in s.events()]
    done_items = []
    current = None            # (output_index, item_id) of the open item
    pieces = {}
    for e in events:
        t = e["type"]
        if t == "response.output_item.added":
            assert current is None, "item %s added while %s is open" % (e["output_index"],
                                                                        current)
            assert e["output_index"] == len(done_items)
            current = (e["output_index"], e["item"].get("id"))
            pieces = {"added": e["item"]}
            item = e["item"]
            if item["type"] == "code_interpreter_call":
                assert item["status"] == "in_progress"
                assert item["code"] == ""
                assert item["outputs"] == []
                assert item["container_id"].startswith("cntr_")
            elif item["type"] == "message":
                assert item["status"] == "in_progress" and item["content"] == []
            elif item["type"] == "function_call":
                assert item["status"] == "in_progress" and item["arguments"] == ""
            elif item["type"] == "reasoning":
                assert item["summary"] == []
            continue
        if "output_index" not in e:
            assert current is None, "%s while item %s is open" % (t, current)
            continue
        assert current is not None, "%s outside any item" % t
        assert e["output_index"] == current[0], (t, e["output_index"], current)
        if "item_id" in e:
            assert e["item_id"] == current[1], (t, e["item_id"], current)
        if t.endswith(".delta"):
            pieces.setdefault(t, []).append(e["delta"])
        elif t != "response.output_item.done":
            pieces[t] = e
        else:
            item = e["item"]
            assert item.get("id") == current[1]
            assert item["type"] == pieces["added"]["type"]
            if item["type"] == "code_interpreter_call":
                code = "".join(pieces["response.code_interpreter_call_code.delta"])
                assert code == pieces["response.code_interpreter_call_code.done"]["code"]
                assert code == item["code"]
                assert item["status"] == "completed"
                assert item["container_id"] == pieces["added"]["container_id"]
            elif item["type"] == "message":
                text = "".join(pieces["response.output_text.delta"])
                assert text == pieces["response.output_text.done"]["text"]
                assert text == item["content"][0]["text"]
                assert pieces["response.content_part.done"]["part"] == item["content"][0]
            elif item["type"] == "function_call":
                args = "".join(pieces["response.function_call_arguments.delta"])
                done = pieces["response.function_call_arguments.done"]
                assert args == done["arguments"] == item["arguments"]
                assert done["name"] == item["name"]
            done_items.append(item)
            current = None
    assert current is None, "item %s never done" % (current,)
    final = events[-1]["response"]
    assert final["output"] == done_items
    return done_items


def check_stream(s):
    check_framing(s)
    return check_items(s)


def upstream_streams(model):
    """The stream flag of every request the upstream received."""
    return [r["json"].get("stream") for r in model.requests()]


# ------------------------------------------------------------- scenarios

def annotated_response():
    """A whole upstream answer: a message citing a container file."""
    text = "a.csv is ready"
    output = [{
        "type": "message", "id": "msg_annotated", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "logprobs": [], "annotations": [{
            "type": "container_file_citation", "container_id": "cntr_cited",
            "file_id": "cfile_1", "filename": "a.csv", "start_index": 0, "end_index": 5}]}],
    }]
    return build_response_object({"model": "m"}, "resp_annotated", [], output)


SCENARIOS = {
    "one_call": ("/v1/responses", None,
                 [[{"call": "print(6 * 7)"}], [{"text": "the answer is {{last_output}}"}]]),
    "several_rounds": ("/v1/responses", None,
                       [[{"call": "x = 20"}], [{"call": "print(x + 1)"}],
                        [{"text": "got {{last_output}}"}]]),
    "two_calls_one_round": ("/v1/responses", None,
                            [[{"call": "a = 1"}, {"call": "print(a + 1)"}],
                             [{"text": "outputs {{outputs}}"}]]),
    "reasoning": ("/v1/responses", None,
                  [[{"reasoning": "Add them up."}, {"call": "print(2 + 3)"}],
                   [{"text": "five"}]]),
    "client_function": ("/v1/responses", [TOOL, WEATHER],
                        [[{"call": "print(5)"},
                          {"function": {"name": "get_weather",
                                        "arguments": {"city": "Paris"}}}]]),
    "sandbox_failure": ("/quick/v1/responses", None,
                        [[{"call": "import time\ntime.sleep(30)"}],
                         [{"text": "it took too long"}]]),
    "followup_failure": ("/v1/responses", None,
                         [[{"call": "print(1)"}],
                          [{"error": {"status": 500}}]]),
    "annotation": ("/v1/responses", None,
                   [[{"call": "open('a.csv', 'w').write('x')"}],
                    [{"garbage": annotated_response()}]]),
}


def run_scenario(server, name):
    path, tools, rounds = SCENARIOS[name]
    return stream(server, path, stream_body(rounds, tools))


# ------------------------------------------------------------- servers

def httpd_pid(server):
    with open(os.path.join(server.root, "httpd.pid")) as f:
        return int(f.read().strip())


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def sandboxes_of(server):
    """bwrap processes (pgrep -x bwrap) descended from SERVER's httpd."""
    root = httpd_pid(server)
    out = subprocess.run(["pgrep", "-x", "bwrap"], capture_output=True, text=True).stdout
    mine = []
    for pid in (int(p) for p in out.split()):
        p, hops = pid, 0
        while p and p > 1 and hops < 64:
            if p == root:
                mine.append(pid)
                break
            p, hops = _ppid(p), hops + 1
    return mine


E2B_KEY = "e2b_stream_test_key"


@pytest.fixture(scope="session")
def stream_e2b():
    """The fake E2B service behind /e2b/ and /e2bka/: its gates hold the code
    until a test has seen what it waits for."""
    proc, port = start_helper("fake_e2b.py", "--api-key", E2B_KEY)
    yield FakeE2B(proc, port)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def stream_httpd(model, stream_e2b):
    up = "http://127.0.0.1:%d" % model.port
    extra = f"""
<Location /gz/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  SetOutputFilter DEFLATE
  # compress whatever the client accepts (the module drops Accept-Encoding
  # before the upstream sees it): only no-gzip can keep a stream plain
  SetEnv force-gzip 1
</Location>
CodeInterpreterSandbox cloud provider=e2b api_key={E2B_KEY} api_base={stream_e2b.url} \
    sandbox_url={stream_e2b.url} timeout=60
<Location /e2b/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter cloud
</Location>
<Location /e2bka/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter cloud
  CodeInterpreterKeepalive 1
</Location>
"""
    server = Httpd("stream", base_conf(model.port, extra=extra), fakes=[stream_e2b]).start()
    yield server
    server.stop()


@pytest.fixture
def sserver(stream_httpd, stream_e2b, model):
    """The stream server, its model and fake E2B reset (checked afterwards
    like every server: conftest.py)."""
    model.reset()
    stream_e2b.reset()
    yield stream_httpd


# ------------------------------------------------------------- headers, framing

def test_headers_and_framing_without_gzip(sserver, model):
    s = stream(sserver, "/gz/v1/responses",
               stream_body(SCENARIOS["one_call"][2]), headers={"Accept-Encoding": "gzip"})
    check_framing(s)
    assert "content-encoding" not in s.headers
    assert s.headers.get("cache-control") == "no-cache"
    assert types(s.events())[-1] == "response.completed"
    # a streaming client's rounds stream upstream too (relayed as they come)
    assert upstream_streams(model) == [True, True]


def test_deflate_is_active_at_that_location(sserver, model):
    # The same location compresses the JSON path, so the stream above is
    # plain because streaming turns compression off, not by accident.
    body = stream_body(SCENARIOS["one_call"][2], stream=False)
    status, hdrs, data = sserver.request("POST", "/gz/v1/responses", body,
                                         headers={"Accept-Encoding": "gzip"})
    assert status == 200
    assert dict((k.lower(), v) for k, v in hdrs).get("content-encoding") == "gzip"
    answer = json.loads(gzip.decompress(data))
    assert answer["output"][0]["type"] == "code_interpreter_call"


# ------------------------------------------------------------- event order

def test_one_call_order(httpd, model):
    s = run_scenario(httpd, "one_call")
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + MESSAGE + END
    call, msg = items
    assert call["status"] == "completed"
    assert call["code"] == "print(6 * 7)"
    assert call["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert msg["content"][0]["text"] == "the answer is 42\n"
    final = s.events()[-1]["data"]["response"]
    assert final["status"] == "completed"
    assert final["tools"] == [TOOL]
    created = s.events()[0]["data"]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    # a streaming client's rounds stream upstream too (relayed as they come)
    assert upstream_streams(model) == [True, True]


def test_several_rounds_order(httpd, model):
    s = run_scenario(httpd, "several_rounds")
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + CALL + MESSAGE + END
    assert [i["type"] for i in items] == ["code_interpreter_call"] * 2 + ["message"]
    assert items[1]["outputs"] == [{"type": "logs", "logs": "21\n"}]
    assert items[2]["content"][0]["text"] == "got 21\n"
    assert len(model.requests()) == 3


def test_two_calls_in_one_round_order(httpd, model):
    s = run_scenario(httpd, "two_calls_one_round")
    items = check_stream(s)
    # The first call is finished before the second is announced.
    assert shape(s.events()) == START + CALL + CALL + MESSAGE + END
    assert [i["status"] for i in items[:2]] == ["completed", "completed"]
    assert items[0]["container_id"] == items[1]["container_id"]
    assert items[1]["outputs"] == [{"type": "logs", "logs": "2\n"}]
    assert len(model.requests()) == 2


def test_reasoning_item_order(httpd, model):
    s = run_scenario(httpd, "reasoning")
    items = check_stream(s)
    assert shape(s.events()) == START + REASONING + CALL + MESSAGE + END
    assert [i["type"] for i in items] == ["reasoning", "code_interpreter_call", "message"]
    assert items[0]["summary"] == [{"type": "summary_text", "text": "Add them up."}]
    assert items[1]["outputs"] == [{"type": "logs", "logs": "5\n"}]


def test_client_function_call_order(httpd, model):
    s = run_scenario(httpd, "client_function")
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + FUNCTION + END
    call, fn = items
    assert call["type"] == "code_interpreter_call" and call["status"] == "completed"
    assert fn["type"] == "function_call" and fn["name"] == "get_weather"
    assert json.loads(fn["arguments"]) == {"city": "Paris"}
    final = s.events()[-1]["data"]["response"]
    # The upstream echo completes the client function with "strict", as OpenAI does.
    assert final["tools"] == [TOOL, dict(WEATHER, strict=True)]
    # The client's call goes back to the client: no further round.
    assert len(model.requests()) == 1


def test_sandbox_failure_still_completes(httpd, model):
    s = run_scenario(httpd, "sandbox_failure")
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + MESSAGE + END
    call, msg = items
    assert call["status"] == "completed"
    assert msg["content"][0]["text"] == "it took too long"
    assert s.events()[-1]["data"]["response"]["status"] == "completed"


def test_followup_failure_ends_with_error_and_failed(httpd, model):
    s = run_scenario(httpd, "followup_failure")
    check_framing(s)
    assert shape(s.events()) == START + CALL + FAILED
    events = [e["data"] for e in s.events()]
    err, failed = events[-2], events[-1]
    # the upstream's own error, relayed: its type, code and param, its message quoted
    message = ("The model upstream answered a follow-up call with status 500: The server "
               "had an error while processing your request.")
    assert err == {"type": "error", "sequence_number": len(events) - 2,
                   "code": None, "message": message, "param": None,
                   "error": {"type": "server_error", "code": None, "message": message,
                             "param": None}}
    resp = failed["response"]
    assert resp["status"] == "failed"
    assert resp["error"] == {"code": "server_error", "message": message}
    assert [i["type"] for i in resp["output"]] == ["code_interpreter_call"]
    assert resp["output"][0]["status"] == "completed"
    assert len(model.requests()) == 2


def test_annotation_events(httpd, model):
    s = run_scenario(httpd, "annotation")
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + [
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta+", "response.output_text.annotation.added",
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done"] + END
    ann = [e["data"] for e in s.events()
           if e["event"] == "response.output_text.annotation.added"][0]
    assert ann["annotation_index"] == 0
    assert ann["annotation"] == items[1]["content"][0]["annotations"][0]


# ------------------------------------------------------------- schema

_SCHEMA = {}
LIFECYCLE = ("response.created", "response.in_progress", "response.completed",
             "response.failed", "response.incomplete")


def schema_checker():
    """check(event) -> [] when EVENT is a ResponseStreamEvent, else its failures
    as (type, path within the event, keyword, message)."""
    require_spec(OPENAPI)
    if "check" in _SCHEMA:
        return _SCHEMA["check"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from jsonschema import Draft202012Validator, RefResolver
        from jsonschema.exceptions import best_match
        with open(OPENAPI) as f:
            doc = json.load(f)
        resolver = RefResolver.from_schema(doc)
        union = Draft202012Validator(
            {"$ref": "#/components/schemas/ResponseStreamEvent"}, resolver=resolver)
    schemas = doc["components"]["schemas"]
    member_of = {}
    for ref in schemas["ResponseStreamEvent"]["anyOf"]:
        name = ref["$ref"].rsplit("/", 1)[1]
        for t in schemas[name].get("properties", {}).get("type", {}).get("enum", []):
            member_of[t] = name

    def leaves(err):
        if err.context:
            return leaves(best_match(err.context))
        return [err]

    def problems(event):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if union.is_valid(event):
                return []
            etype = event.get("type")
            name = member_of.get(etype)
            if name is None:
                return [(etype, "", "anyOf", "no member of ResponseStreamEvent has this type")]
            # The member schema for this type names the failing path and keyword.
            member = Draft202012Validator({"$ref": "#/components/schemas/" + name},
                                          resolver=resolver)
            out = []
            for err in member.iter_errors(event):
                for leaf in leaves(err):
                    out.append((etype, "/" + "/".join(str(p) for p in leaf.absolute_path),
                                leaf.validator, leaf.message[:160]))
            return out or [(etype, "", "anyOf", "fails ResponseStreamEvent")]

    def check(event):
        count_schema_checks(1)
        return problems(event)

    check.uncounted = problems  # for the recorded stream, which is not ours
    _SCHEMA["check"] = check
    return check


def schema_problems(s, check):
    problems = []
    for e in s.events():
        problems.extend(check(e["data"]))
    return problems


def show(problems):
    return "\n".join("%s %s %s: %s" % p for p in problems)


_RECORDED_GAPS = {}


def recorded_gaps(check):
    """(type, path, keyword) where the recorded real stream itself fails."""
    if "gaps" not in _RECORDED_GAPS:
        _RECORDED_GAPS["gaps"] = {(t, path, kw) for e in recorded_events()
                                  for t, path, kw, _ in check.uncounted(e)}
    return _RECORDED_GAPS["gaps"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_events_deviate_from_the_schema_only_where_the_real_stream_does(
        httpd, model, name):
    # Alongside the strict test above: every item, delta and error event must
    # validate as it is; a lifecycle event's response may only fail where the
    # recorded real stream's does (response.failed against response.completed).
    check = schema_checker()
    known = recorded_gaps(check)
    s = run_scenario(httpd, name)
    check_framing(s)
    left = []
    for t, path, kw, msg in schema_problems(s, check):
        as_recorded = "response.completed" if t == "response.failed" else t
        if t in LIFECYCLE and (as_recorded, path, kw) in known:
            continue
        left.append((t, path, kw, msg))
    assert not left, show(left)


# ------------------------------------------------------------- recorded stream

def recorded_events():
    with open(require_spec(RECORDED_STREAM)) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_keys_match_the_recorded_stream(httpd, model):
    recorded = recorded_events()
    rec_keys, rec_item_keys, rec_part_keys = {}, {}, {}
    for e in recorded:
        rec_keys.setdefault(e["type"], set(e) - {"obfuscation"})
        if "item" in e:
            rec_item_keys.setdefault((e["type"], e["item"]["type"]), set(e["item"]))
        if "part" in e:
            rec_part_keys.setdefault(e["type"], set(e["part"]))
    ours = []
    for name in ("reasoning", "annotation"):
        s = run_scenario(httpd, name)
        check_framing(s)
        ours.extend(e["data"] for e in s.events())
    compared, missing = set(), []
    for e in ours:
        t = e["type"]
        if t not in rec_keys:
            continue
        compared.add(t)
        lack = rec_keys[t] - set(e)
        if lack:
            missing.append("%s lacks %s" % (t, sorted(lack)))
        if "item" in e and (t, e["item"]["type"]) in rec_item_keys:
            compared.add((t, e["item"]["type"]))
            lack = rec_item_keys[(t, e["item"]["type"])] - set(e["item"])
            if lack:
                missing.append("%s item %s lacks %s" % (t, e["item"]["type"], sorted(lack)))
        if "part" in e and t in rec_part_keys:
            lack = rec_part_keys[t] - set(e["part"])
            if lack:
                missing.append("%s part lacks %s" % (t, sorted(lack)))
    assert not missing, "\n".join(missing)
    # Every event type of the recording was compared.
    assert compared >= set(rec_keys), sorted(set(rec_keys) - compared)
    assert compared >= set(rec_item_keys), sorted(set(rec_item_keys) - compared, key=str)


# ------------------------------------------------------------- parity



def test_completed_response_equals_the_json_answer(httpd, model):
    rounds = [[{"reasoning": "Count."}, {"call": "print(sum(range(5)))"}],
              [{"call": "print('again')"}], [{"text": "sum {{outputs}}"}]]
    s = stream(httpd, "/v1/responses", stream_body(rounds))
    check_stream(s)
    streamed = s.events()[-1]["data"]["response"]
    status, _, plain = httpd.post("/v1/responses", stream_body(rounds, stream=False))
    assert status == 200
    for resp in (streamed, plain):
        for item in resp["output"]:
            item.pop("encrypted_content", None)     # minted per answer, like an id
    assert without_ids(streamed) == without_ids(plain)
    assert streamed["output"][1]["container_id"].startswith("cntr_")


# ------------------------------------------------- order against the code

def read_until(s, etype, why):
    """s.until(ETYPE), failing with WHY when the stream stays silent."""
    try:
        return s.until(etype)
    except TimeoutError:
        raise AssertionError("%s did not arrive: %s" % (etype, why)) from None


def test_interpreting_arrives_before_the_code_finishes(sserver, stream_e2b, model):
    # The sandbox holds the code until the client has seen interpreting: the
    # event cannot wait for the code to finish.
    stream_e2b.control(hold_execute="interpreting")
    s = SSE(sserver, "/e2b/v1/responses",
            stream_body([[{"call": 'print("done")'}], [{"text": "{{last_output}}"}]]),
            timeout=30)
    read_until(s, "response.code_interpreter_call.interpreting",
               "it waits for the code, which is held until it arrives")
    # (interpreting may leave before the sandbox is asked to run the code)
    st = stream_e2b.until(lambda st: st["held"], "the code to be held in the sandbox")
    assert [h["what"] for h in st["held"]] == ["execute"]
    stream_e2b.release("interpreting")
    s.read_all()
    items = check_stream(s)
    assert shape(s.events()) == START + CALL + MESSAGE + END
    assert items[0]["outputs"] == [{"type": "logs", "logs": "done\n"}]
    assert items[1]["content"][0]["text"] == "done\n"


def test_keepalive_comments_while_the_code_runs(sserver, stream_e2b, model):
    # The code is held until the client has heard a keepalive comment.
    stream_e2b.control(hold_execute="keepalive")
    s = SSE(sserver, "/e2bka/v1/responses",
            stream_body([[{"call": "print('done')"}], [{"text": "{{last_output}}"}]]),
            timeout=30)
    read_until(s, "response.code_interpreter_call.interpreting", "the stream is stuck")
    stream_e2b.until(lambda st: st["held"], "the code to be held in the sandbox")
    try:
        rec = s.next_record()
    except TimeoutError:
        raise AssertionError("no keepalive while the code runs") from None
    assert (rec["kind"], rec.get("text")) == ("comment", ": keepalive"), rec
    stream_e2b.release("keepalive")
    s.read_all()
    check_stream(s)
    kinds = [(r["kind"], r.get("event") or r.get("text")) for r in s.records]
    start = kinds.index(("event", "response.code_interpreter_call.interpreting"))
    end = kinds.index(("event", "response.code_interpreter_call.completed"))
    between = [k for k in kinds[start + 1:end] if k[0] == "comment"]
    assert between and all(text == ": keepalive" for _, text in between), kinds
    assert all(r["text"] == ": keepalive" for r in s.comments())


def test_disconnect_stops_the_loop(httpd, model):
    # The code never finishes on its own: only the disconnect (or the
    # execution timeout, which the log tells apart) can stop it.
    # (a request's own sandbox, the caller having no owner: it goes with the
    # client; a container's run is interrupted instead, test_containers.py)
    code = "import threading\nthreading.Event().wait()"
    s = SSE(httpd, "/v1/responses",
            stream_body([[{"call": code}], [{"text": "never"}]]), headers=ANONYMOUS)
    s.until("response.code_interpreter_call.interpreting")
    # (interpreting leaves before the sandbox is asked to run the code)
    wait_until(lambda: sandboxes_of(httpd), "a sandbox running the code")
    s.abort()
    wait_until(lambda: not sandboxes_of(httpd), "the sandbox to go with the client")
    wait_until(lambda: "CI0206" in httpd.log_since_mark(), "the loop to stop")
    started, destroyed = httpd.wait_sandboxes_destroyed()
    assert started == destroyed == 1
    log = httpd.log_since_mark()
    assert "CI0206: client went away; loop stopped after round 1" in log
    # interrupted, not timed out: no failed call recorded, no restart
    assert "CI0201" not in log
    assert "restarted after a failed execution" not in log
    assert "CI0301: sandbox destroyed (request ended)" in log
    # and the loop stopped: the upstream never heard of a second round
    assert len(model.requests()) == 1, model.requests()


# ------------------------------------------------------------- passthrough

def test_passthrough_stream_is_not_buffered(httpd, model):
    # The upstream holds the rest of its stream after two events until the
    # client has read them: a buffered relay would never show them.
    body = {"model": "m", "stream": True,
            "input": script_input([[{"hold": "passthrough", "after": 2}]])}
    s = SSE(httpd, "/v1/responses", body, timeout=30)
    assert s.status == 200
    assert s.headers.get("content-type", "").startswith("text/event-stream")
    try:
        s.until("response.in_progress")
    except TimeoutError:
        raise AssertionError("the first events did not arrive while the upstream held the "
                             "rest of its stream: the relay buffers it") from None
    wait_until(lambda: model.holds()["waiting"] == ["passthrough"], "the upstream's hold")
    model.release("passthrough")
    s.read_all()
    assert types(s.events()) == ["response.created", "response.in_progress",
                                 "response.completed"]
    seen = model.requests()
    assert len(seen) == 1 and seen[0]["json"]["stream"] is True
    assert "CI0101" not in httpd.log_since_mark()
