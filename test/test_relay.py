"""Live token relay: a streaming client sees the model's words and code as the
upstream writes them.

The fake model's stream_gate writes each delta event only once the test has
seen every earlier one at its client (POST /_gate {"acked": N}). A module
that relays passes; one that waited for the round would leave the fake
waiting for an acknowledgement that never comes: the fake gives up, cuts the
stream and counts a timeout, and the test fails on what the client got.
Nothing here reads the clock.
"""
import json

from conftest import TOOL
from test_stream import LIFECYCLE, SSE, check_stream, recorded_gaps, schema_checker, \
    schema_problems, show, stream_body, types

# Code whose JSON text holds escapes of every kind: quotes, a backslash, a
# newline, a tab, and characters outside ASCII (json.dumps writes \\uXXXX).
CODE = 'print("h\u00e9llo, w\u00f6rld \u2014 \u2713", "a\\\\b")\nx = 1\t# done'
TEXT = "The code printed {{last_output}} and that is the whole answer."


def gate(model):
    return json.loads(model._call("GET", "/_gate"))


def read_acking(model, s):
    """Read the whole stream; after each delta event, tell the fake it was
    seen. Returns the deltas by type, in order."""
    seen = 0
    deltas = {}
    while True:
        rec = s.next_record()
        if rec is None:
            break
        if rec["kind"] != "event" or not rec["event"].endswith(".delta"):
            continue
        deltas.setdefault(rec["event"], []).append(rec["data"]["delta"])
        seen += 1
        model._call("POST", "/_gate", {"acked": seen})
    s.close()
    return deltas


def test_each_delta_reaches_the_client_before_the_next_is_written(httpd, model):
    model.reset()
    rounds = [[{"call": CODE, "stream_gate": True}], [{"text": TEXT, "stream_gate": True}]]
    s = SSE(httpd, "/v1/responses", stream_body(rounds))
    assert s.status == 200
    deltas = read_acking(model, s)

    g = gate(model)
    assert g["timeouts"] == 0, g
    code_deltas = deltas["response.code_interpreter_call_code.delta"]
    text_deltas = deltas["response.output_text.delta"]
    # Every delta the upstream wrote went out before the next was written.
    assert g["sent"] == g["acked"] == len(code_deltas) + len(text_deltas)
    assert len(code_deltas) > 3 and len(text_deltas) > 3
    assert "".join(code_deltas) == CODE
    final = s.events()[-1]["data"]
    assert final["type"] == "response.completed"
    call, msg = final["response"]["output"]
    assert call["code"] == CODE
    assert "".join(text_deltas) == msg["content"][0]["text"]
    assert msg["content"][0]["text"].startswith("The code printed h\u00e9llo")
    # Both rounds were asked for as streams.
    assert [r["json"]["stream"] for r in model.requests()] == [True, True]


def test_relayed_stream_is_well_formed(httpd, model):
    """Sequence numbers 0..n, items whole and in order, every event a
    ResponseStreamEvent, and the same items as the JSON answer's."""
    model.reset()
    rounds = [[{"reasoning": "Think first."}, {"call": CODE}], [{"text": TEXT}]]
    s = SSE(httpd, "/v1/responses", stream_body(rounds)).read_all()
    check_stream(s)
    assert [e["data"]["sequence_number"] for e in s.events()] == \
        list(range(len(s.events())))
    # Every item, delta and error event validates as it is; a lifecycle
    # event's response only where the recorded real stream's does.
    check = schema_checker()
    known = recorded_gaps(check)
    problems = [p for p in schema_problems(s, check)
                if not (p[0] in LIFECYCLE and p[:3] in known)]
    assert problems == [], show(problems)
    assert types(s.events())[:2] == ["response.created", "response.in_progress"]
    assert types(s.events()).count("response.created") == 1
    assert types(s.events()).count("response.completed") == 1
    output = s.events()[-1]["data"]["response"]["output"]
    assert [i["type"] for i in output] == ["reasoning", "code_interpreter_call", "message"]


def test_items_after_a_call_wait_until_it_has_run(httpd, model):
    """Two calls in one round: the second call's events, though the upstream
    wrote them before the first ran, reach the client after the first's
    result."""
    model.reset()
    rounds = [[{"call": "print('one')"}, {"call": "print('two')"}], [{"text": "ok"}]]
    s = SSE(httpd, "/v1/responses", stream_body(rounds)).read_all()
    check_stream(s)
    seq = [(e["data"]["type"], e["data"].get("output_index")) for e in s.events()]
    first_done = seq.index(("response.output_item.done", 0))
    second_added = seq.index(("response.output_item.added", 1))
    assert first_done < second_added


def test_an_error_event_mid_round_ends_the_response(httpd, model):
    model.reset()
    rounds = [[{"call": "print(1)"}], [{"text": "partial", "stream_fail": "the model broke"}]]
    s = SSE(httpd, "/v1/responses", stream_body(rounds)).read_all()
    events = [e["data"] for e in s.events()]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    message = "The model upstream failed while streaming: the model broke"
    err = dict(events[-2])
    del err["sequence_number"]
    assert err == {"type": "error", "code": "server_error", "message": message,
                   "param": None,
                   "error": {"type": "server_error", "code": "server_error",
                             "message": message, "param": None}}
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": message}
    # The text written before the error reached the client.
    assert "".join(e["delta"] for e in events
                   if e["type"] == "response.output_text.delta") == "partial"


def test_a_cut_stream_ends_the_response(httpd, model):
    model.reset()
    rounds = [[{"call": "print(1)"}], [{"text": "never finished", "stream_cut": 5}]]
    s = SSE(httpd, "/v1/responses", stream_body(rounds)).read_all()
    events = [e["data"] for e in s.events()]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    message = "The model upstream's answer was cut short."
    err = dict(events[-2])
    del err["sequence_number"]
    assert err == {"type": "error", "code": "upstream_broken", "message": message,
                   "param": None,
                   "error": {"type": "server_error", "code": "upstream_broken",
                             "message": message, "param": None}}
    assert events[-1]["response"]["error"] == {"code": "server_error", "message": message}


def test_json_clients_still_get_whole_rounds(httpd, model):
    model.reset()
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": "SCRIPT: " + json.dumps([[{"call": "print(2)"}], [{"text": "two"}]])})
    assert status == 200, body
    assert [r["json"]["stream"] for r in model.requests()] == [False, False]
    assert body["output"][-1]["content"][0]["text"] == "two"
