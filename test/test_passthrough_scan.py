"""Bodies that reach the module in small pieces.

The module decides whether a body can carry the code_interpreter tool by
scanning its buckets as they arrive, without copying them. Here a slow client
writes its body 40 bytes at a time (raw socket; Content-Length, and chunked
with one 40-byte chunk per write), with the tool's name, spelt plainly or
with an escape, straddling the 40-byte seams at every offset that matters:
each such body is intercepted, as the fake model's record shows (the tool
arrives there rewritten to our function). Bodies without the tool, near
misses straddling the seams included, reach the upstream byte for byte.

Chunked framing makes the pieces deterministic: httpd hands the module each
chunk's bytes as a piece of their own, which the debug line CI0105 counts.
With Content-Length, how the writes coalesce on the way is up to TCP; the
outcome asserted does not depend on it.
"""
import base64
import json
import re
import socket
import time

import pytest

from conftest import API_KEY, TOOL, script_input

PIECE = 40
# Pacing between a slow client's writes (its writes are what is being
# tested); nothing waits on anything with it.
PACE = 0.002
OK_SCRIPT = script_input([[{"text": "ok"}]])
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
TOO_LARGE_64K = "The request body exceeds this server's limit of 65536 bytes."

NAME = b"code_interpreter"
ESCAPED = b"code\\u005finterpreter"          # as JSON text: code\u005finterpreter
ALL_ESCAPED = b"".join(b"\\u%04x" % c for c in NAME)


# ------------------------------------------------------------------ helpers

@pytest.fixture(autouse=True)
def padded_bodies_accepted(model):
    """The bodies carry a "pad" member to put the name where a test wants
    it: the upstream accepts it, as an OpenAI-compatible one with vendor
    parameters would."""
    model.allow_parameters("pad")
    yield
    model.reset()


def request_head(path, length=None, chunked=False, expect=False):
    head = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" % path
    head += "Content-Type: application/json\r\n"
    head += "Authorization: Bearer %s\r\n" % API_KEY
    if expect:
        head += "Expect: 100-continue\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    else:
        head += "Content-Length: %d\r\n" % length
    return (head + "\r\n").encode()


def pieces_of(raw, chunked, size=PIECE):
    pieces = [raw[i:i + size] for i in range(0, len(raw), size)]
    if chunked:
        return [b"%x\r\n" % len(p) + p + b"\r\n" for p in pieces] + [b"0\r\n\r\n"]
    return pieces


def dechunk(data):
    out = b""
    while True:
        line, _, data = data.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return out
        out += data[:size]
        data = data[size + 2:]


def read_head(s):
    """Read up to the end of an answer's head; (head, what came after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            break
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def send(server, path, raw, chunked, pace=PACE, size=PIECE, expect=False):
    """POST RAW as a client writing SIZE bytes at a time; the answer as
    (status, headers, body bytes). With EXPECT, the client sends
    "Expect: 100-continue" and its body only once the server said 100
    (or not at all when it answered at once: then interim is that answer)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.sendall(request_head(path, None if chunked else len(raw), chunked, expect))
        if expect:
            interim, rest = read_head(s)
            if not interim.startswith(b"HTTP/1.1 100 "):
                return parse_answer(interim + b"\r\n\r\n" + rest + read_all(s))
        for piece in pieces_of(raw, chunked, size):
            if pace:
                time.sleep(pace)
            try:
                s.sendall(piece)
            except OSError:             # answered (and closed) before the end
                break
        data = read_all(s)
    finally:
        s.close()
    return parse_answer(data)


def read_all(s):
    data = b""
    while True:
        got = s.recv(65536)
        if not got:
            return data
        data += got


def parse_answer(data):
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return int(lines[0].split()[1]), headers, body


def placed(spelling, straddle, tools=True):
    """A request whose tools carry SPELLING (bytes, JSON text) as a tool type,
    starting STRADDLE bytes before a 40-byte seam: its first STRADDLE bytes
    end one piece, the rest begin the next. Without TOOLS the spelling sits
    in a message instead, and the only tool is a client function."""
    head = b'{"model":"m","input":' + json.dumps(OK_SCRIPT).encode() + b',"pad":"'
    if tools:
        before, after = b'","tools":[{"type":"', b'"}]}'
    else:
        before = (b'","tools":[' + json.dumps(WEATHER).encode()
                  + b'],"instructions":"say ')
        after = b' back"}'
    pad = (-(len(head) + len(before) + straddle)) % PIECE
    raw = head + b"x" * pad + before + spelling + after
    start = len(head) + pad + len(before)
    assert raw[start:start + len(spelling)] == spelling
    assert (start + straddle) % PIECE == 0
    return raw


def pieces_logged(log):
    """(bytes, pieces, packed, verdict) of the last CI0105 line."""
    m = re.findall(r"CI0105: body of (\d+) bytes in (\d+) pieces \((\d+) packed\): ([^\n]*)",
                   log)
    assert m, log
    n, pieces, packed, verdict = m[-1]
    return int(n), int(pieces), int(packed), verdict.strip()


def upstream_body(model):
    seen = model.requests()
    assert len(seen) == 1, seen
    hdrs = {k.lower(): v for k, v in seen[0]["headers"]}
    body = base64.b64decode(seen[0]["body_b64"])
    return seen[0], hdrs, body


def assert_intercepted(httpd, model, status, data):
    assert status == 200, data[:500]
    answer = json.loads(data)
    assert answer["output"][-1]["content"][0]["text"] == "ok"
    assert [t["type"] for t in answer["tools"]] == ["code_interpreter"]
    req, hdrs, body = upstream_body(model)
    # what reached the model: our function in the tool's place
    assert [(t["type"], t["name"]) for t in req["json"]["tools"]] == [("function", "python")]
    assert set(req["json"]["tools"][0]["parameters"]["properties"]) == {"code"}
    assert NAME not in body and ESCAPED not in body
    assert int(hdrs["content-length"]) == len(body)
    assert "transfer-encoding" not in hdrs
    log = httpd.log_since_mark()
    assert "CI0101: intercepted" in log
    return pieces_logged(log)


def assert_passed(httpd, model, raw, status, data):
    assert status == 200, data[:500]
    assert json.loads(data)["output"][-1]["content"][0]["text"] == "ok"
    _, hdrs, body = upstream_body(model)
    assert body == raw
    assert int(hdrs["content-length"]) == len(raw)
    assert "transfer-encoding" not in hdrs
    log = httpd.log_since_mark()
    assert "CI0101" not in log
    n, pieces, packed, verdict = pieces_logged(log)
    assert n == len(raw)
    return pieces, packed, verdict


FRAMINGS = [pytest.param(False, id="content-length"), pytest.param(True, id="chunked")]
# a seam after each of the first bytes of the name, and inside its escape
NAME_STRADDLES = [1, 4, 5, 8, 15]
ESCAPED_STRADDLES = [1, 4, 5, 6, 7, 8, 9, 10, 20]


# ------------------------------------------------ the tool, split across writes

@pytest.mark.parametrize("chunked", FRAMINGS)
@pytest.mark.parametrize("straddle", NAME_STRADDLES)
def test_name_split_across_writes_is_intercepted(httpd, model, chunked, straddle):
    raw = placed(NAME, straddle)
    status, _, data = send(httpd, "/v1/responses", raw, chunked)
    n, pieces, packed, verdict = assert_intercepted(httpd, model, status, data)
    assert n == len(raw)
    assert verdict == "the tool's name is there, parsing"
    if chunked:
        assert pieces >= -(-len(raw) // PIECE)


@pytest.mark.parametrize("chunked", FRAMINGS)
@pytest.mark.parametrize("straddle", ESCAPED_STRADDLES)
def test_escaped_name_split_across_writes_is_intercepted(httpd, model, chunked, straddle):
    raw = placed(ESCAPED, straddle)
    status, _, data = send(httpd, "/v1/responses", raw, chunked)
    n, pieces, _, verdict = assert_intercepted(httpd, model, status, data)
    assert verdict == "the tool's name is there, parsing"
    if chunked:
        assert pieces >= -(-len(raw) // PIECE)


@pytest.mark.parametrize("chunked", FRAMINGS)
def test_name_escaped_letter_by_letter_in_one_byte_writes_is_intercepted(
        httpd, model, chunked):
    raw = placed(ALL_ESCAPED, 3)
    status, _, data = send(httpd, "/v1/responses", raw, chunked, pace=0, size=1)
    assert_intercepted(httpd, model, status, data)


# ------------------------------------------------ no tool: byte for byte

NEAR_MISSES = [
    pytest.param(b"code_interprete", id="name-cut-short"),
    pytest.param(b"code_interpretEr", id="name-with-a-capital"),
    pytest.param(b"code interpreter", id="space-for-underscore"),
    pytest.param(b"caf\\u00e9 \\u00e8\\u000a", id="escapes-encoders-write"),
    pytest.param(b"code\\\\u005finterpreter", id="escaped-backslash-then-u005f"),
    pytest.param(b"line\\nbreak \\\"quoted\\\" \\\\", id="backslashes"),
    pytest.param(b"snake_case_words_and_code_", id="underscores"),
]


@pytest.mark.parametrize("chunked", FRAMINGS)
@pytest.mark.parametrize("straddle", [1, 5, 9])
@pytest.mark.parametrize("spelling", NEAR_MISSES)
def test_without_the_tool_split_across_writes_passes_byte_for_byte(
        httpd, model, chunked, straddle, spelling):
    raw = placed(spelling, straddle, tools=False)
    status, _, data = send(httpd, "/v1/responses", raw, chunked)
    pieces, _, verdict = assert_passed(httpd, model, raw, status, data)
    assert verdict == "no tool, passed through as it came"
    if chunked:
        assert pieces >= -(-len(raw) // PIECE)


@pytest.mark.parametrize("chunked", FRAMINGS)
def test_trickled_body_is_packed_and_passes_byte_for_byte(httpd, model, chunked):
    """A body of ~100 KB in 40-byte pieces: kept as they come, its pieces
    would each hold a buffer of 8 KB; past a bound they are packed instead,
    and the upstream still gets the very bytes."""
    text = "".join("line %d of a long message\n" % i for i in range(4000))
    raw = json.dumps({"model": "m", "tools": [WEATHER],
                      "input": [{"role": "user", "content": text},
                                {"role": "user", "content": OK_SCRIPT}]}).encode()
    status, _, data = send(httpd, "/v1/responses", raw, chunked, pace=0)
    pieces, packed, verdict = assert_passed(httpd, model, raw, status, data)
    assert verdict == "no tool, passed through as it came"
    if chunked:
        # 40-byte chunks: every piece is small; those kept as they came
        # (each counted as a whole 8000-byte buffer) stay within twice the
        # body's bytes plus 64 KB, the rest are packed
        assert pieces >= -(-len(raw) // PIECE)
        assert 0 < (pieces - packed) * 8000 <= 2 * len(raw) + 65536


def test_trickled_body_with_the_tool_at_its_end_is_intercepted(httpd, model):
    text = "".join("line %d of a long message\n" % i for i in range(4000))
    raw = json.dumps({"model": "m", "input": [{"role": "user", "content": text},
                                              {"role": "user", "content": OK_SCRIPT}],
                      "tools": [TOOL]}).encode()
    assert raw.index(NAME) > len(raw) - 100
    status, _, data = send(httpd, "/v1/responses", raw, True, pace=0)
    _, _, packed, _ = assert_intercepted(httpd, model, status, data)
    assert packed > 0


@pytest.mark.parametrize("chunked", FRAMINGS)
def test_large_body_without_the_tool_passes_byte_for_byte(httpd, model, chunked):
    text = "".join("row %d, a value, another value\n" % i for i in range(40000))
    raw = json.dumps({"model": "m", "tools": [WEATHER],
                      "input": [{"role": "user", "content": text},
                                {"role": "user", "content": OK_SCRIPT}]}).encode()
    assert len(raw) > 1 << 20
    status, _, data = send(httpd, "/v1/responses", raw, chunked, pace=0, size=65536)
    _, _, verdict = assert_passed(httpd, model, raw, status, data)
    assert verdict == "no tool, passed through as it came"


def test_trickled_body_over_the_cap_is_413(httpd, model):
    raw = json.dumps({"model": "m", "input": "y" * (70 * 1024)}).encode()
    status, hdrs, data = send(httpd, "/small/v1/responses", raw, True, pace=0)
    assert status == 413
    assert hdrs["connection"] == "close"
    assert json.loads(data) == {"error": {"message": TOO_LARGE_64K,
                                          "type": "invalid_request_error",
                                          "param": None, "code": "request_too_large"}}
    assert model.requests() == []


# ------------------------------------------------------------- 100-continue

@pytest.mark.parametrize("chunked", FRAMINGS)
@pytest.mark.parametrize("tools", [pytest.param(True, id="with-the-tool"),
                                   pytest.param(False, id="without")])
def test_expect_100_continue(httpd, model, chunked, tools):
    """The client sends its body only after the interim 100, which httpd
    sends when the module first reads."""
    raw = placed(ESCAPED if tools else NAME[:-1], 6, tools=tools)
    status, _, data = send(httpd, "/v1/responses", raw, chunked, expect=True)
    if tools:
        assert_intercepted(httpd, model, status, data)
    else:
        assert_passed(httpd, model, raw, status, data)


def test_expect_100_continue_over_the_cap_is_413_at_once(httpd, model):
    """A declared length over the cap is refused before any 100: the client
    never sends the body."""
    s = socket.create_connection(("127.0.0.1", httpd.port), timeout=60)
    try:
        s.sendall(request_head("/small/v1/responses", 70 * 1024, expect=True))
        head, rest = read_head(s)
        status, _, data = parse_answer(head + b"\r\n\r\n" + rest + read_all(s))
    finally:
        s.close()
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(data)["error"]["message"] == TOO_LARGE_64K
    assert model.requests() == []
