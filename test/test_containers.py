"""Containers: a conversation keeps its interpreter across requests, by each
route its context can take (previous_response_id, replayed items,
item_references), explicit container ids, owners kept apart, expiry, lazy
creation, one execution at a time, and the Containers API."""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import warnings

import pytest

from conftest import (CLIENT_HEADERS, OPENAPI, TOOL, count_schema_checks, require,
                      require_spec, script_input, wait_for, wait_until)
from test_loop import calls_of, ci_body, sandboxes_started, text_of, upstream_inputs

OUTPUTS = "code_interpreter_call.outputs"
OTHER = {"Authorization": "Bearer sk-someone-else"}
NOT_FOUND = "Container with id '%s' not found."


def turn(server, rounds, path="/v1/responses", headers=None, tools=None, **extra):
    body = ci_body(rounds, include=True, tools=tools, **extra)
    status, _, out = server.post(path, body, headers=headers)
    assert status == 200, out
    return out


def first_turn(server, code="x = 41", **kw):
    return turn(server, [[{"call": code}], [{"text": "set"}]], **kw)


def logs_of(resp, i=0):
    return calls_of(resp)[i]["outputs"][0]["logs"]


def api(server, method, path, body=None, headers=None):
    status, _, data = server.request(method, path, body, headers)
    return status, json.loads(data) if data else None


@pytest.fixture
def me(request):
    """A caller of this test's own: listings hold only its containers."""
    return {"Authorization": "Bearer sk-" + re.sub(r"\W", "-", request.node.name)}


def error_of(status_body):
    status, body = status_body
    return status, body["error"]


# ---------------------------------------------------------------- turns

def test_state_kept_through_previous_response_id(httpd, model):
    first = first_turn(httpd)
    second = turn(httpd, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert logs_of(second) == "42\n"
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]
    assert sandboxes_started(httpd) == 1


def test_state_kept_through_replayed_items(httpd, model):
    script1 = script_input([[{"call": "x = 41"}], [{"text": "set"}]])
    status, _, first = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": [{"role": "user", "content": script1}]})
    assert status == 200
    history = [{"role": "user", "content": script1}] + first["output"]
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": history + [{"role": "user", "content": script_input(
            [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]])}]})
    assert status == 200, second
    assert logs_of(second) == "42\n"
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]


def test_state_kept_through_item_references(httpd, model):
    """As the Vercel AI SDK sends a second turn: every earlier output item as
    an item_reference, ours ("ci_...") and the upstream's ("msg_...")."""
    script1 = script_input([[{"call": "x = 41"}], [{"text": "set"}]])
    status, _, first = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "input": [{"role": "user", "content": script1}]})
    assert status == 200
    refs = [{"type": "item_reference", "id": o["id"]} for o in first["output"]]
    assert refs[0]["id"].startswith("ci_") and refs[1]["id"].startswith("msg_")
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": [{"role": "user", "content": script1}] + refs + [
            {"role": "user", "content": script_input(
                [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]])}]})
    assert status == 200, second
    assert logs_of(second) == "42\n"
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]
    # what reached the upstream: our reference became its own call and our
    # output; the upstream's own reference passed as it was
    sent = upstream_inputs(model.requests()[0])
    assert [i.get("type") for i in sent[1:4]] == [
        "function_call", "function_call_output", "item_reference"]
    assert sent[2]["output"] == "(no output)"
    assert sent[3] == refs[1]


def test_reference_to_an_item_never_returned_is_refused(httpd, model):
    bogus = "ci_" + "0" * 48
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": [{"type": "item_reference", "id": bogus},
                  {"role": "user", "content": "hi"}]})
    assert status == 400
    assert body["error"] == {"message": "Item with id '%s' not found." % bogus,
                             "type": "invalid_request_error", "param": "input",
                             "code": None}
    assert model.requests() == []


def test_reference_to_another_callers_item_is_refused(httpd, model):
    first = first_turn(httpd)
    ours = calls_of(first)[0]["id"]
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": [{"type": "item_reference", "id": ours},
                  {"role": "user", "content": "hi"}]}, headers=OTHER)
    assert status == 400
    assert body["error"]["message"] == "Item with id '%s' not found." % ours


def test_client_function_chain_brings_our_pending_output(httpd, model):
    weather = {"type": "function", "name": "get_weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                              "required": ["city"]}}
    first = turn(httpd, [[{"call": "y = 6 * 7\nprint(y)"},
                          {"function": {"name": "get_weather", "arguments": {"city": "P"}}}],
                         [{"call": "print(y)"}], [{"text": "{{last_output}}"}]],
                 tools=[TOOL, weather])
    fc = first["output"][1]
    assert fc["type"] == "function_call"
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL, weather], "include": [OUTPUTS],
        "previous_response_id": first["id"],
        "input": [{"type": "function_call_output", "call_id": fc["call_id"],
                   "output": "sunny"}]})
    assert status == 200, second
    assert logs_of(second) == "42\n"
    sent = upstream_inputs(model.requests()[0])
    ours = [i for i in first["output"] if i["type"] == "code_interpreter_call"][0]
    assert sent[0]["type"] == "function_call_output"
    assert sent[0]["output"] == "42\n"
    assert sent[1] == {"type": "function_call_output", "call_id": fc["call_id"],
                       "output": "sunny"}
    assert calls_of(second)[0]["container_id"] == ours["container_id"]


def test_another_caller_gets_a_container_of_its_own(httpd, model):
    first = first_turn(httpd)
    script1 = script_input([[{"call": "x = 41"}], [{"text": "set"}]])
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": [{"role": "user", "content": script1}] + first["output"] + [
            {"role": "user", "content": script_input(
                [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]])}]},
        headers=OTHER)
    assert status == 200
    assert logs_of(second).endswith("NameError: name 'x' is not defined\n")
    assert calls_of(second)[0]["container_id"] != calls_of(first)[0]["container_id"]


def test_container_made_only_when_the_tool_is_called(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body([[{"text": "no code"}]]))
    assert status == 200
    assert text_of(body["output"][0]) == "no code"
    status, listing = api(httpd, "GET", "/v1/containers")
    assert listing["data"] == []
    assert sandboxes_started(httpd) == 0


# --------------------------------------------------------- explicit ids

def make_container(server, name="work", path="/v1/containers", headers=None, **extra):
    status, body = api(server, "POST", path, dict({"name": name}, **extra), headers)
    assert status == 200, body
    return body


def test_explicit_container_keeps_state(httpd, model):
    c = make_container(httpd)
    tool = {"type": "code_interpreter", "container": c["id"]}
    turn(httpd, [[{"call": "x = 41"}], [{"text": "set"}]], tools=[tool])
    second = turn(httpd, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
                  tools=[tool])
    assert logs_of(second) == "42\n"
    assert calls_of(second)[0]["container_id"] == c["id"]


def test_unknown_and_foreign_ids_read_the_same(httpd, model):
    c = make_container(httpd)
    unknown = "cntr_" + "0" * 48
    answers = []
    for cid, headers in ((unknown, None), (c["id"], OTHER)):
        status, _, body = httpd.post("/v1/responses", ci_body(
            [[{"text": "never"}]], tools=[{"type": "code_interpreter", "container": cid}]),
            headers=headers)
        answers.append((status, body["error"]))
    assert answers[0] == (404, {"message": NOT_FOUND % unknown,
                                "type": "invalid_request_error",
                                "param": "tools[0].container",
                                "code": "container_not_found"})
    assert answers[1] == (404, dict(answers[0][1], message=NOT_FOUND % c["id"]))
    assert model.requests() == []


def test_memory_tier_not_offered_is_refused(httpd, model):
    status, _, body = httpd.post("/v1/responses", ci_body(
        [[{"text": "never"}]],
        tools=[{"type": "code_interpreter",
                "container": {"type": "auto", "memory_limit": "4g"}}]))
    assert status == 400
    assert body["error"] == {
        "message": "Invalid 'memory_limit': '4g'. This server's sandbox tool local "
                   "offers: 1g.",
        "type": "invalid_request_error", "param": "tools[0].container.memory_limit",
        "code": "invalid_value"}


# ---------------------------------------------------------------- expiry

def test_expired_explicit_container_is_refused(httpd, model):
    c = make_container(httpd, path="/brief/v1/containers")
    assert c["expires_after"] == {"anchor": "last_active_at", "minutes": 1}
    tool = {"type": "code_interpreter", "container": c["id"]}
    turn(httpd, [[{"call": "x = 1"}], [{"text": "set"}]], path="/brief/v1/responses",
         tools=[tool])
    # (reading the container would use it, and keep it alive)
    wait_until(lambda: not httpd.sandbox_processes(), "its sandbox to be destroyed")
    assert api(httpd, "GET", "/brief/v1/containers/" + c["id"])[1]["status"] == "expired"
    status, _, body = httpd.post("/brief/v1/responses", ci_body(
        [[{"text": "never"}]], tools=[tool]))
    assert status == 400
    assert body["error"] == {
        "message": "Container with id '%s' has expired and can no longer be used; use "
                   "a new container." % c["id"],
        "type": "invalid_request_error", "param": "tools[0].container",
        "code": "container_expired"}
    # another caller still reads it as unknown
    status, _, body = httpd.post("/brief/v1/responses", ci_body(
        [[{"text": "never"}]], tools=[tool]), headers=OTHER)
    assert (status, body["error"]["message"]) == (404, NOT_FOUND % c["id"])


def test_expired_auto_container_is_replaced_and_the_model_told(httpd, model):
    first = first_turn(httpd, path="/brief/v1/responses")
    old = calls_of(first)[0]["container_id"]
    wait_until(lambda: not httpd.sandbox_processes(), "its sandbox to be destroyed")
    assert api(httpd, "GET", "/brief/v1/containers/" + old)[1]["status"] == "expired"
    model.reset()
    second = turn(httpd, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
                  path="/brief/v1/responses", previous_response_id=first["id"])
    new = calls_of(second)[0]["container_id"]
    assert new != old
    assert logs_of(second).endswith("NameError: name 'x' is not defined\n")
    told = [i["output"] for i in upstream_inputs(model.requests()[1])
            if i.get("type") == "function_call_output"][-1]
    assert told.startswith("Note: container %s of the earlier turns has expired. This "
                           "code runs in a new container: variables, imports and files "
                           "from before are gone and must be recreated.\n" % old)


GONE = ("Not run: this container no longer runs (it was deleted, or it expired); its "
        "variables and files are gone. The next turn of the conversation gets a new "
        "container.")


def gone_for_its_call(server, model, first, headers):
    """The turn after FIRST (on SERVER, as HEADERS) found FIRST's container;
    the caller deletes it before the turn's first call (the model still
    thinking): the call is not run, the model is told so, and no sandbox
    is started for the deleted container."""
    cid = calls_of(first)[0]["container_id"]
    before = server.sandbox_processes()
    assert before, "the container's sandbox runs"
    model.reset()
    result = {}

    def second_turn():
        result["answer"] = server.post("/v1/responses", ci_body(
            [[{"hold": "deleted"}, {"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
            include=True, previous_response_id=first["id"]), headers=headers)

    t = threading.Thread(target=second_turn)
    t.start()
    wait_until(lambda: model.holds()["waiting"] == ["deleted"], "the turn to wait for the model")
    assert api(server, "DELETE", "/v1/containers/" + cid, headers=headers)[0] == 200
    wait_until(lambda: before - server.sandbox_processes(), "the container's sandbox to go")
    model.release("deleted")
    t.join()
    status, _, out = result["answer"]
    assert status == 200, out
    [call] = calls_of(out)
    assert (call["container_id"], call["status"], call["outputs"]) == \
        (cid, "completed", [{"type": "logs", "logs": GONE}])
    assert text_of(out["output"][-1]) == GONE
    assert server.sandbox_processes() - before == set()


def test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call(httpd, model, me):
    gone_for_its_call(httpd, model, first_turn(httpd, headers=me), me)


def process_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def queued_at(pid):
    """How many of process PID's Unix sockets hold data it has not read,
    counting a listener's connections not yet accepted (ss, iproute2)."""
    out = subprocess.run(["ss", "-xaHp"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines()
               if "pid=%d," % pid in line and int(line.split()[2]) > 0)


def test_the_answer_leaves_before_the_directory_records_it(httpd, model, me):
    """A turn's answer does not wait for the directory to record it: it
    reaches the client while the supervisor cannot run. The next turn, sent
    at once, still finds its container: the record was sent before the
    answer, and the supervisor reads it before it answers the lookup, even
    with both waiting together."""
    require(shutil.which("ss"), "iproute2's ss counts the supervisor's waiting sockets")
    result = {}

    def first():
        result["first"] = turn(httpd, [[{"call": "x = 41"}],
                                       [{"hold": "final"}, {"text": "set"}]], headers=me)

    t = threading.Thread(target=first)
    t.start()
    wait_until(lambda: model.holds()["waiting"] == ["final"], "the final round to wait")
    sup = httpd.supervisor_pid()
    os.kill(sup, signal.SIGSTOP)
    try:
        wait_until(lambda: process_state(sup) == "T", "the supervisor to stop")
        model.release("final")
        wait_until(lambda: "first" in result, "the answer while the supervisor is stopped",
                   timeout=5)
        assert process_state(sup) == "T"
        cid = calls_of(result["first"])[0]["container_id"]
        second = threading.Thread(target=lambda: result.__setitem__("second", turn(
            httpd, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
            headers=me, previous_response_id=result["first"]["id"])))
        second.start()
        wait_until(lambda: queued_at(sup) >= 2, "the record and the lookup to wait together")
    finally:
        os.kill(sup, signal.SIGCONT)
    t.join()
    second.join()
    [call] = calls_of(result["second"])
    assert (call["container_id"], call["outputs"]) == (cid, [{"type": "logs", "logs": "42\n"}])


# The question that follows a chain is sent before the request is parsed
# (its previous_response_id found by a scan), looking the container up for
# use and holding it; a request that then does not go on in it lets the
# hold go, or the container could not be evicted for the hold's length.

@pytest.fixture(scope="module")
def two_each(model):
    from conftest import Httpd, base_conf
    extra = """
CodeInterpreterMaxContainersPerOwner 2
# a held container is not evicted: without the grace nor the wait for
# room, only a hold keeps an idle one
CodeInterpreterEvictionGrace 0
CodeInterpreterCapacityWait 0
"""
    server = Httpd("containers-two", base_conf(model.port, extra)).start()
    yield server
    server.stop()


def status_of(server, cid, headers):
    return api(server, "GET", "/v1/containers/" + cid, headers=headers)[1]["status"]


def refused_chained_turn(server, first, headers):
    """A turn chained to FIRST that the module refuses after the parse."""
    status, _, out = server.post("/v1/responses", ci_body(
        [[{"text": "x"}]], previous_response_id=first["id"], stream="yes"), headers=headers)
    assert (status, out["error"]) == (400, {
        "message": "Invalid type for 'stream': expected a boolean.",
        "type": "invalid_request_error", "param": "stream", "code": "invalid_type"})


def test_a_chained_turns_question_goes_out_before_the_parse(two_each, model, me):
    """The chain's question is asked before the body is parsed: even a turn
    then refused is a use of the chain's container, which is then not the
    least recently used one when a new conversation needs room."""
    first = first_turn(two_each, headers=me)
    chained = calls_of(first)[0]["container_id"]
    other = make_container(two_each, headers=me)["id"]       # used after the chain's
    refused_chained_turn(two_each, first, me)
    turn(two_each, [[{"call": "print(1)"}], [{"text": "ok"}]], headers=me)
    assert (status_of(two_each, chained, me), status_of(two_each, other, me)) == \
        ("running", "expired")


def test_a_refused_chained_turn_holds_nothing(two_each, model, me):
    """Refused after its chain's question went out: the container the
    chain led to is let go, and goes when it is the least recently used."""
    first = first_turn(two_each, headers=me)
    chained = calls_of(first)[0]["container_id"]
    other = make_container(two_each, headers=me)["id"]
    refused_chained_turn(two_each, first, me)
    assert status_of(two_each, other, me) == "running"      # a use: now the later one
    turn(two_each, [[{"call": "print(1)"}], [{"text": "ok"}]], headers=me)
    assert (status_of(two_each, chained, me), status_of(two_each, other, me)) == \
        ("expired", "running")


def test_a_chained_turn_in_another_container_holds_only_its_own(two_each, model, me):
    """A chained turn that names another container: the chain's container,
    held by the question sent before the parse, is let go at once."""
    first = first_turn(two_each, headers=me)
    chained = calls_of(first)[0]["container_id"]
    other = make_container(two_each, headers=me)["id"]
    out = turn(two_each, [[{"call": "print(2)"}], [{"text": "ok"}]], headers=me,
               tools=[{"type": "code_interpreter", "container": other}],
               previous_response_id=first["id"])
    assert calls_of(out)[0]["container_id"] == other
    turn(two_each, [[{"call": "print(3)"}], [{"text": "ok"}]], headers=me)
    assert (status_of(two_each, chained, me), status_of(two_each, other, me)) == \
        ("expired", "running")


# ------------------------------------------------------ one at a time

def test_two_requests_on_one_container_take_turns(httpd, model):
    c = make_container(httpd)
    tool = {"type": "code_interpreter", "container": c["id"]}
    turn(httpd, [[{"call": "log = []"}], [{"text": "ready"}]], tools=[tool])
    code = ("import time\nlog.append('%s+')\ntime.sleep(0.5)\nlog.append('%s-')\n"
            "print(len(log))")
    results = {}

    def run(tag):
        results[tag] = turn(httpd, [[{"call": code % (tag, tag)}], [{"text": "done"}]],
                            tools=[tool])

    threads = [threading.Thread(target=run, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(logs_of(results[t]) for t in "ab") == ["2\n", "4\n"]
    final = turn(httpd, [[{"call": "print(''.join(log))"}], [{"text": "x"}]],
                 tools=[tool])
    assert logs_of(final) in ("a+a-b+b-\n", "b+b-a+a-\n")


# ------------------------------------------------------------- timeouts

def test_timeout_interrupts_and_the_state_lives_on(httpd, model):
    first = turn(httpd, [[{"call": "x = 1"}], [{"call": "while True: pass"}],
                         [{"text": "{{last_output}}"}]], path="/quick/v1/responses")
    [setter, spinner] = calls_of(first)
    logs = spinner["outputs"][-1]["logs"]
    assert "KeyboardInterrupt" in logs
    assert logs.endswith(
        "The execution timed out after 3 s and was interrupted (KeyboardInterrupt); the "
        "container's variables and files are kept.")
    second = turn(httpd, [[{"call": "print(x)"}], [{"text": "{{last_output}}"}]],
                  path="/quick/v1/responses", previous_response_id=first["id"])
    assert logs_of(second) == "1\n"
    assert calls_of(second)[0]["container_id"] == setter["container_id"]
    assert sandboxes_started(httpd) == 1


def test_timeout_the_code_ignores_restarts_the_container_and_says_so(httpd, model):
    deaf = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
    first = turn(httpd, [[{"call": "x = 1"}], [{"call": deaf}],
                         [{"text": "{{last_output}}"}]], path="/quick/v1/responses")
    [setter, spinner] = calls_of(first)
    assert spinner["outputs"] == [{"type": "logs", "logs":
                                   "The execution timed out after 3 s and was stopped."}]
    told = [i["output"] for i in upstream_inputs(model.requests()[2])
            if i.get("type") == "function_call_output"]
    assert told[-1] == ("The execution timed out after 3 s and was stopped. The "
                        "interpreter was restarted: variables, imports and files from "
                        "earlier calls are gone.")
    second = turn(httpd, [[{"call": "print(x)"}], [{"text": "{{last_output}}"}]],
                  path="/quick/v1/responses", previous_response_id=first["id"])
    assert logs_of(second).endswith("NameError: name 'x' is not defined\n")
    assert calls_of(second)[0]["container_id"] == setter["container_id"]
    assert sandboxes_started(httpd) == 2


# --------------------------------------------------------------- reload

def test_graceful_reload_keeps_the_conversation(httpd, model):
    first = first_turn(httpd)
    httpd.graceful()
    second = turn(httpd, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert logs_of(second) == "42\n"


# -------------------------------------------------------- Containers API

_OPENAPI_DOC = {}


class ResourceChecker:
    """iter_errors(value): the ways VALUE fails the schema NAME of the OpenAPI
    document, each call counted as a schema check."""

    def __init__(self, name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from jsonschema import Draft202012Validator, RefResolver
            if "doc" not in _OPENAPI_DOC:
                with open(OPENAPI) as f:
                    _OPENAPI_DOC["doc"] = json.load(f)
            self.validator = Draft202012Validator(
                {"$ref": "#/components/schemas/" + name},
                resolver=RefResolver.from_schema(_OPENAPI_DOC["doc"]))

    def iter_errors(self, value):
        count_schema_checks(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(self.validator.iter_errors(value))


def resource_checker(name):
    require_spec(OPENAPI)
    return ResourceChecker(name)


def test_api_objects_match_the_schema(httpd, model, me):
    c = make_container(httpd, name="mine", headers=me)
    assert re.fullmatch(r"cntr_[0-9a-f]{48}", c["id"])
    assert (c["object"], c["name"], c["status"], c["memory_limit"]) == (
        "container", "mine", "running", "1g")
    assert c["expires_after"] == {"anchor": "last_active_at", "minutes": 20}
    one = resource_checker("ContainerResource")
    assert list(one.iter_errors(c)) == []
    status, listing = api(httpd, "GET", "/v1/containers", headers=me)
    assert status == 200
    assert list(resource_checker("ContainerListResource").iter_errors(listing)) == []
    assert [x["id"] for x in listing["data"]] == [c["id"]]
    assert (listing["first_id"], listing["last_id"], listing["has_more"]) == (
        c["id"], c["id"], False)
    status, got = api(httpd, "GET", "/v1/containers/" + c["id"], headers=me)
    assert status == 200 and got["id"] == c["id"]
    status, gone = api(httpd, "DELETE", "/v1/containers/" + c["id"], headers=me)
    assert (status, gone) == (200, {"id": c["id"], "object": "container.deleted",
                                    "deleted": True})
    status, got = api(httpd, "GET", "/v1/containers/" + c["id"], headers=me)
    assert (status, got["status"]) == (200, "deleted")


def test_api_lists_page_by_page(httpd, model, me):
    ids = [make_container(httpd, name="n%d" % i, headers=me)["id"] for i in range(5)]
    status, page = api(httpd, "GET", "/v1/containers?limit=2&order=asc", headers=me)
    assert [x["id"] for x in page["data"]] == ids[:2] and page["has_more"] is True
    status, page = api(httpd, "GET", "/v1/containers?limit=2&order=asc&after=" + ids[1], headers=me)
    assert [x["id"] for x in page["data"]] == ids[2:4] and page["has_more"] is True
    status, page = api(httpd, "GET", "/v1/containers?limit=10&order=asc&after=" + ids[3], headers=me)
    assert [x["id"] for x in page["data"]] == ids[4:] and page["has_more"] is False
    status, page = api(httpd, "GET", "/v1/containers", headers=me)
    assert [x["id"] for x in page["data"]] == ids[::-1]
    status, page = api(httpd, "GET", "/v1/containers?name=n3", headers=me)
    assert [x["id"] for x in page["data"]] == [ids[3]]


def test_api_keeps_owners_apart(httpd, model):
    c = make_container(httpd)
    for method in ("GET", "DELETE"):
        assert error_of(api(httpd, method, "/v1/containers/" + c["id"], headers=OTHER)) == (
            404, {"message": NOT_FOUND % c["id"], "type": "invalid_request_error",
                  "param": None, "code": "container_not_found"})
    status, listing = api(httpd, "GET", "/v1/containers", headers=OTHER)
    assert (status, listing["data"]) == (200, [])
    status, got = api(httpd, "GET", "/v1/containers/" + c["id"])
    assert (status, got["status"]) == (200, "running")


def test_api_refusals(httpd, model):
    assert error_of(api(httpd, "GET", "/v1/containers",
                        headers={"Authorization": None})) == (
        401, {"message": "The Containers API needs a caller: this request carries no "
                         "credentials.",
              "type": "invalid_request_error", "param": None,
              "code": "missing_credentials"})
    assert error_of(api(httpd, "GET", "/v1/containers?limit=101")) == (
        400, {"message": "Invalid 'limit': expected an integer from 1 to 100.",
              "type": "invalid_request_error", "param": "limit",
              "code": "integer_out_of_range"})
    assert error_of(api(httpd, "POST", "/v1/containers", {"nom": "x"})) == (
        400, {"message": "Missing required parameter: 'name'.",
              "type": "invalid_request_error", "param": "name",
              "code": "missing_required_parameter"})
    assert error_of(api(httpd, "POST", "/v1/containers",
                        {"name": "x", "expires_after": {"anchor": "last_active_at",
                                                        "minutes": 100000}})) == (
        400, {"message": "Invalid 'expires_after.minutes': expected an integer from 1 "
                         "to 1440.",
              "type": "invalid_request_error", "param": "expires_after.minutes",
              "code": "invalid_value"})
    status, body = api(httpd, "PUT", "/v1/containers")
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")


def test_api_expires_after_is_kept(httpd, model):
    c = make_container(httpd, expires_after={"anchor": "last_active_at", "minutes": 5})
    assert c["expires_after"] == {"anchor": "last_active_at", "minutes": 5}


def test_server_status_counts_containers(httpd, model, me):
    def counts():
        line = httpd.status_lines()["CodeInterpreterContainers"]
        fields = dict(f.split("=") for f in line.split())
        del fields["expired"]           # earlier tests' expired ones are kept a while
        return fields

    c = make_container(httpd, headers=me)
    assert counts() == {"running": "1", "executing": "0", "idle": "1",
                        "local_sandboxes": "0"}
    turn(httpd, [[{"call": "x = 1"}], [{"text": "set"}]], headers=me,
         tools=[{"type": "code_interpreter", "container": c["id"]}])
    assert counts() == {"running": "1", "executing": "0", "idle": "1",
                        "local_sandboxes": "1"}
    assert httpd.status_lines()["CodeInterpreterContainers-local"] == "1"
    api(httpd, "DELETE", "/v1/containers/" + c["id"], headers=me)
    assert counts() == {"running": "0", "executing": "0", "idle": "0",
                        "local_sandboxes": "0"}


def test_a_client_that_leaves_interrupts_the_run_and_the_container_lives_on(httpd, model):
    import http.client
    c = make_container(httpd)
    tool = {"type": "code_interpreter", "container": c["id"]}
    turn(httpd, [[{"call": "x = 5"}], [{"text": "set"}]], tools=[tool])
    conn = http.client.HTTPConnection("127.0.0.1", httpd.port, timeout=30)
    conn.request("POST", "/v1/responses", json.dumps(ci_body(
        [[{"call": "import subprocess\nsubprocess.run(['sleep', '120'])"}],
         [{"text": "never"}]], tools=[tool])), headers=CLIENT_HEADERS)
    wait_until(lambda: any(comm == "sleep" for _, comm in proc_names(httpd)),
               "the code to run")
    conn.sock.shutdown(2)
    conn.close()
    wait_until(lambda: not any(comm == "sleep" for _, comm in proc_names(httpd)),
               "the run to be interrupted")
    second = turn(httpd, [[{"call": "print(x)"}], [{"text": "{{last_output}}"}]],
                  tools=[tool])
    assert logs_of(second) == "5\n"
    assert sandboxes_started(httpd) == 1


def proc_names(server):
    """(pid, command) of every process below the server's sandboxes."""
    from procstat import proc_table
    table = proc_table()
    roots = {pid for pid, _ in server.sandbox_processes()}
    found, frontier = set(), roots
    while frontier:
        frontier = {p for p, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return {(p, table[p][1]) for p in found if p in table}


# ----------------------------------------------------------- memory tiers

def test_memory_tiers_the_tool_offers(httpd, model, me):
    tiered = {"type": "code_interpreter", "container": {"type": "auto",
                                                        "memory_limit": "4g"}}
    first = turn(httpd, [[{"call": "print(1)"}], [{"text": "x"}]],
                 path="/tiered/v1/responses", tools=[tiered], headers=me)
    cid = calls_of(first)[0]["container_id"]
    status, c = api(httpd, "GET", "/tiered/v1/containers/" + cid, headers=me)
    assert (status, c["memory_limit"]) == (200, "4g")
    c = make_container(httpd, path="/tiered/v1/containers", memory_limit="4g", headers=me)
    assert c["memory_limit"] == "4g"
    for path in ("/tiered/v1/responses", "/tiered/v1/containers"):
        body = (ci_body([[{"text": "never"}]], tools=[
            {"type": "code_interpreter", "container": {"type": "auto",
                                                       "memory_limit": "16g"}}])
                if path.endswith("responses") else {"name": "n", "memory_limit": "16g"})
        status, _, answer = httpd.post(path, body, headers=me)
        assert (status, answer["error"]["message"]) == (
            400, "Invalid 'memory_limit': '16g'. This server's sandbox tool tiered "
                 "offers: 1g, 4g.")


def test_a_sandbox_over_its_tier_is_killed(httpd, model):
    """The tier bounds the resident memory of the whole sandbox (measured by
    the supervisor): RLIMIT_AS, per process, would let it through."""
    tiered = {"type": "code_interpreter", "container": {"type": "auto",
                                                        "memory_limit": "4g"}}
    hog = "x = b'x' * (200 << 20)\nimport time\ntime.sleep(30)"
    first = turn(httpd, [[{"call": "kept = 1"}], [{"call": hog}],
                         [{"text": "{{last_output}}"}]],
                 path="/tiered/v1/responses", tools=[tiered])
    assert calls_of(first)[1]["outputs"] == [{"type": "logs", "logs":
        "The interpreter process died during the execution (out of memory, a crash, "
        "or it exited)."}]
    second = turn(httpd, [[{"call": "print('kept' in globals())"}],
                          [{"text": "{{last_output}}"}]],
                  path="/tiered/v1/responses", tools=[tiered],
                  previous_response_id=first["id"])
    assert logs_of(second) == "False\n"
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]


# ------------------------------------------------------ caps and budget

@pytest.fixture(scope="module")
def budgeted(model):
    from conftest import Httpd, base_conf
    extra = """
CodeInterpreterMemoryBudget 200M
CodeInterpreterMaxContainersPerOwner 3
# eviction's mechanics, without the grace that keeps used containers, nor
# the wait for room
CodeInterpreterEvictionGrace 0
CodeInterpreterCapacityWait 0
CodeInterpreterSandbox small provider=local tiers=1g:96M
<Location /small/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter small
</Location>
"""
    server = Httpd("containers-budget", base_conf(model.port, extra)).start()
    yield server
    server.stop()


def test_budget_and_caps_evict_only_the_callers_own(budgeted, model):
    alice = {"Authorization": "Bearer sk-alice"}
    bob = {"Authorization": "Bearer sk-bob"}
    path = "/small/v1/containers"
    a1 = make_container(budgeted, path=path, headers=alice)
    a2 = make_container(budgeted, path=path, headers=alice)
    # two 96M containers fill the 200M budget: bob may not evict alice's
    status, body = api(budgeted, "POST", path, {"name": "b"}, headers=bob)
    assert (status, body["error"]) == (429, {
        "message": "The containers of this server hold all the memory it allows "
                   "(CodeInterpreterMemoryBudget), all of them in use; retry shortly.",
        "type": "invalid_request_error", "param": None, "code": "memory_budget"})
    # alice may: her least recently used idle one goes (a2 was used since)
    assert api(budgeted, "GET", path + "/" + a1["id"], headers=alice)[0] == 200
    a3 = make_container(budgeted, path=path, headers=alice)
    states = {c["id"]: api(budgeted, "GET", path + "/" + c["id"], headers=alice)[1]["status"]
              for c in (a1, a2, a3)}
    assert states == {a1["id"]: "running", a2["id"]: "expired", a3["id"]: "running"}
    # bob's own containers are his to lose
    api(budgeted, "DELETE", path + "/" + a1["id"], headers=alice)
    b1 = make_container(budgeted, path=path, headers=bob)
    assert api(budgeted, "GET", path + "/" + b1["id"], headers=bob)[1]["status"] == "running"
    assert api(budgeted, "GET", path + "/" + a3["id"], headers=alice)[1]["status"] == \
        "running"
