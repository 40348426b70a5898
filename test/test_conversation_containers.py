"""Containers found through `conversation`: a turn that names a conversation
(an id, or {"id": ...}) goes on in the container that conversation's last
turn used, for the same owner only, as previous_response_id finds it: the
interpreter's variables and the files the shell wrote are there in the next
turn; another owner's conversation of the same id is another one; each
conversation has its own container; the outputs owed to the upstream when a
turn ended beside a client function come along once; a request naming both
a conversation and a previous response is refused before anything reaches
the upstream; and on a shared directory (Redis, two nodes) the next turn
finds the container from either node (E2B), or is told which node runs it
(local).

The scripted model keeps conversations (test/fake_model.py): each turn sends
only its new items with the conversation's id, as OpenAI's clients do."""
import json
import os
import secrets
import subprocess

import pytest

from conftest import SPEC_DIR, TOOL, script_input, wait_until
from test_containers import (OTHER, logs_of, make_container, me, status_of,  # noqa: F401
                             turn, two_each)
from test_loop import calls_of, sandboxes_started, text_of, upstream_inputs
from test_node_sdk import NODE, NODE_DIR, node_modules  # noqa: F401 (a fixture)
from test_shell import SHELL, exit_entry, items_of, outputs_of, shell_call
# the shared directory's cluster (Redis, the fake E2B, two nodes): fixtures
from test_shared_directory import ME, cluster, nodes  # noqa: F401
from test_shared_directory import turn as node_turn

OUTPUTS = "code_interpreter_call.outputs"
SET_X = [[{"call": "x = 41"}], [{"text": "set"}]]
PRINT_X = [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]]
BOTH = {"message": "Mutually exclusive parameters. Ensure you are only providing one "
                   "of: 'previous_response_id' or 'conversation'.",
        "type": "invalid_request_error", "param": None,
        "code": "mutually_exclusive_parameters"}
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def new_conversation():
    """A conversation id of this test's own (the model keeps every one)."""
    return "conv_" + secrets.token_hex(24)


def container_of(resp):
    return calls_of(resp)[0]["container_id"]


def shell_container_of(resp):
    return items_of(resp, "shell_call")[0]["environment"]["container_id"]


# ---------------------------------------------------------------- turns

def test_code_interpreter_state_kept_through_the_conversation(httpd, model):
    conv = new_conversation()
    first = turn(httpd, SET_X, conversation=conv)
    second = turn(httpd, PRINT_X, conversation=conv)
    assert logs_of(second) == "42\n"
    assert container_of(second) == container_of(first)
    assert sandboxes_started(httpd) == 1
    # the conversation went upstream as it came, each turn with its new items
    sent = [r["json"] for r in model.requests()]
    assert all(b["conversation"] == conv and "previous_response_id" not in b for b in sent)
    # the object form names the same conversation
    third = turn(httpd, [[{"call": "print(x * 2)"}], [{"text": "ok"}]],
                 conversation={"id": conv})
    assert (logs_of(third), container_of(third)) == ("82\n", container_of(first))


def test_hosted_shell_files_kept_through_the_conversation(httpd, model):
    conv = new_conversation()
    first = turn(httpd, [[shell_call("echo from-turn-1 > kept.txt")], [{"text": "ok"}]],
                 tools=[SHELL], conversation=conv)
    assert outputs_of(first) == [exit_entry()]
    second = turn(httpd, [[shell_call("cat /mnt/data/kept.txt")], [{"text": "ok"}]],
                  tools=[SHELL], conversation=conv)
    assert outputs_of(second) == [exit_entry("from-turn-1\n")]
    assert shell_container_of(second) == shell_container_of(first)
    # and the Python tool of the next turn is in that same container
    third = turn(httpd, [[{"call": "print(open('/mnt/data/kept.txt').read().strip())"}],
                         [{"text": "ok"}]], tools=[TOOL, SHELL], conversation=conv)
    assert (logs_of(third), container_of(third)) == ("from-turn-1\n",
                                                     shell_container_of(first))


def test_another_owner_with_the_same_conversation_id_gets_its_own(httpd, model):
    conv = new_conversation()
    first = turn(httpd, SET_X, conversation=conv)
    theirs = turn(httpd, PRINT_X, conversation=conv, headers=OTHER)
    assert logs_of(theirs).endswith("NameError: name 'x' is not defined\n")
    assert container_of(theirs) != container_of(first)
    # their turn recorded their own conversation: the first owner's still
    # leads to its own container, and theirs to theirs
    mine = turn(httpd, PRINT_X, conversation=conv)
    assert (logs_of(mine), container_of(mine)) == ("42\n", container_of(first))
    again = turn(httpd, [[{"call": "print('x' in globals())"}], [{"text": "ok"}]],
                 conversation=conv, headers=OTHER)
    assert (logs_of(again), container_of(again)) == ("False\n", container_of(theirs))


def test_two_conversations_of_one_owner_have_two_containers(httpd, model):
    one, two = new_conversation(), new_conversation()
    first = turn(httpd, [[{"call": "x = 1"}], [{"text": "set"}]], conversation=one)
    second = turn(httpd, [[{"call": "x = 2"}], [{"text": "set"}]], conversation=two)
    assert container_of(first) != container_of(second)
    back = turn(httpd, [[{"call": "print(x)"}], [{"text": "ok"}]], conversation=one)
    assert (logs_of(back), container_of(back)) == ("1\n", container_of(first))
    back = turn(httpd, [[{"call": "print(x)"}], [{"text": "ok"}]], conversation=two)
    assert (logs_of(back), container_of(back)) == ("2\n", container_of(second))


def test_an_explicit_container_wins_over_the_conversation(httpd, model):
    conv = new_conversation()
    first = turn(httpd, SET_X, conversation=conv)
    c = make_container(httpd)
    named = turn(httpd, PRINT_X, conversation=conv,
                 tools=[{"type": "code_interpreter", "container": c["id"]}])
    assert container_of(named) == c["id"]
    assert logs_of(named).endswith("NameError: name 'x' is not defined\n")
    # the conversation goes on where its last turn ran
    nxt = turn(httpd, [[{"call": "x = 7\nprint(x)"}], [{"text": "ok"}]], conversation=conv)
    assert container_of(nxt) == c["id"] != container_of(first)


def test_a_client_function_in_a_conversation_brings_our_owed_output_once(httpd, model):
    """The last round called our tool and a client function: the upstream's
    conversation holds our call without its output, which the next turn
    brings (before the client's own output), and only that turn."""
    conv = new_conversation()
    first = turn(httpd, [[{"call": "y = 6 * 7\nprint(y)"},
                          {"function": {"name": "get_weather", "arguments": {"city": "P"}}}],
                         [{"call": "print(y)"}], [{"text": "{{last_output}}"}]],
                 tools=[TOOL, WEATHER], conversation=conv)
    fc = [o for o in first["output"] if o["type"] == "function_call"][0]
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER], "include": [OUTPUTS], "conversation": conv,
        "input": [{"type": "function_call_output", "call_id": fc["call_id"],
                   "output": "sunny"}]})
    assert status == 200, second
    assert (logs_of(second), container_of(second)) == ("42\n", container_of(first))
    sent = upstream_inputs(model.requests()[0])
    assert [(i["type"], i["output"]) for i in sent] == [
        ("function_call_output", "42\n"), ("function_call_output", "sunny")]
    model.reset()
    third = turn(httpd, [[{"text": "third"}]], tools=[TOOL, WEATHER], conversation=conv)
    assert text_of(third["output"][-1]) == "third"
    # nothing brought: the client's input went as it was written
    assert model.requests()[0]["json"]["input"] == [
        {"role": "user", "content": script_input([[{"text": "third"}]])}]


def test_owed_output_brought_by_a_turn_without_a_container_is_not_brought_again(
        httpd, model):
    """The conversation's container expired (idle=2s) before the client sent
    its function's output; the turn runs no code, so makes no container: it
    still records that the owed output was brought."""
    me = {"Authorization": "Bearer sk-conversation-owed-" + secrets.token_hex(4)}
    conv = new_conversation()
    status, _, first = httpd.post("/brief/v1/responses", dict(
        {"model": "m", "tools": [TOOL, WEATHER], "conversation": conv},
        input=script_input([[{"call": "print(6 * 7)"},
                             {"function": {"name": "get_weather", "arguments": {}}}],
                            [{"text": "no code this time"}]])), headers=me)
    assert status == 200, first
    cid = container_of(first)
    fc = [o for o in first["output"] if o["type"] == "function_call"][0]

    def status_of_it():
        _, _, data = httpd.request("GET", "/brief/v1/containers?limit=100", headers=me)
        return {c["id"]: c["status"] for c in json.loads(data)["data"]}.get(cid)
    wait_until(lambda: status_of_it() == "expired", "the container to expire")
    model.reset()
    status, _, second = httpd.post("/brief/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER], "conversation": conv,
        "input": [{"type": "function_call_output", "call_id": fc["call_id"],
                   "output": "sunny"}]}, headers=me)
    assert status == 200, second
    assert text_of(second["output"][-1]) == "no code this time"
    assert [i["output"] for i in upstream_inputs(model.requests()[0])] == ["42\n", "sunny"]
    model.reset()
    status, _, third = httpd.post("/brief/v1/responses", {
        "model": "m", "tools": [TOOL, WEATHER], "conversation": conv,
        "input": script_input([[{"text": "third"}]])}, headers=me)
    assert status == 200, third
    assert model.requests()[0]["json"]["input"] == [
        {"role": "user", "content": script_input([[{"text": "third"}]])}]


def test_an_expired_conversation_container_is_a_new_one_and_the_model_is_told(
        httpd, model):
    me = {"Authorization": "Bearer sk-conversation-expiry-" + secrets.token_hex(4)}
    conv = new_conversation()
    status, _, first = httpd.post("/brief/v1/responses", dict(
        ci_request(SET_X), conversation=conv), headers=me)
    assert status == 200, first
    cid = container_of(first)

    def status_of_it():
        _, _, data = httpd.request("GET", "/brief/v1/containers?limit=100", headers=me)
        return {c["id"]: c["status"] for c in json.loads(data)["data"]}.get(cid)
    wait_until(lambda: status_of_it() == "expired", "the container to expire")
    model.reset()
    status, _, second = httpd.post("/brief/v1/responses", dict(
        ci_request(PRINT_X), conversation=conv), headers=me)
    assert status == 200, second
    assert container_of(second) != cid
    assert logs_of(second).endswith("NameError: name 'x' is not defined\n")
    told = upstream_inputs(model.requests()[1])
    assert any("Note: container %s of the earlier turns has expired." % cid
               in json.dumps(item) for item in told), told


def ci_request(rounds):
    return {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}


# ------------------------- the conversation's question, before the parse

def refused_conversation_turn(server, conv, headers):
    """A turn of CONV that the module refuses after the parse."""
    status, _, out = server.post("/v1/responses", dict(
        ci_request([[{"text": "x"}]]), conversation=conv, stream="yes"), headers=headers)
    assert (status, out["error"]["param"]) == (400, "stream"), out


def test_a_conversations_question_goes_out_before_the_parse(two_each, model, me):
    """As a chained turn's: asked before the body is parsed, so even a turn
    then refused is a use of the conversation's container, which is then not
    the least recently used one when a new conversation needs room (at most
    two each here)."""
    conv = new_conversation()
    first = turn(two_each, SET_X, headers=me, conversation=conv)
    other = make_container(two_each, headers=me)["id"]       # used after the first
    refused_conversation_turn(two_each, conv, me)
    turn(two_each, [[{"call": "print(1)"}], [{"text": "ok"}]], headers=me)
    assert (status_of(two_each, container_of(first), me), status_of(two_each, other, me)) \
        == ("running", "expired")


def test_a_refused_conversation_turn_holds_nothing(two_each, model, me):
    """Refused after its question went out: the conversation's container is
    let go, and goes when it is the least recently used."""
    conv = new_conversation()
    first = turn(two_each, SET_X, headers=me, conversation=conv)
    other = make_container(two_each, headers=me)["id"]
    refused_conversation_turn(two_each, conv, me)
    assert status_of(two_each, other, me) == "running"      # a use: now the later one
    turn(two_each, [[{"call": "print(1)"}], [{"text": "ok"}]], headers=me)
    assert (status_of(two_each, container_of(first), me), status_of(two_each, other, me)) \
        == ("expired", "running")


# ------------------------------------------------------------ refusals

def test_conversation_and_previous_response_id_are_refused_together(httpd, model):
    first = turn(httpd, SET_X)
    model.reset()
    for conversation in (new_conversation(), {"id": new_conversation()}):
        for tools in ([TOOL], [SHELL]):
            status, _, body = httpd.post("/v1/responses", dict(
                ci_request(PRINT_X), tools=tools, conversation=conversation,
                previous_response_id=first["id"]))
            assert (status, body) == (400, {"error": BOTH})
    assert model.requests() == []


def test_both_pass_through_untouched_without_our_tools(httpd, model):
    body = {"model": "m", "input": "hi", "conversation": new_conversation(),
            "previous_response_id": "resp_anything"}
    status, _, out = httpd.post("/v1/responses", body)
    # the upstream's own answer, to the body as the client wrote it
    assert status == 400 and out["error"]["param"] == "conversation", out
    assert [r["json"] for r in model.requests()] == [body]


@pytest.mark.parametrize("conversation, param, expected", [
    ("", "conversation", "a string of 1 to 128 characters"),
    ("c" * 129, "conversation", "a string of 1 to 128 characters"),
    ("c\u0000d", "conversation", "a string of 1 to 128 characters"),
    ({}, "conversation.id", "a string"),
    ({"id": 5}, "conversation.id", "a string"),
    ({"id": ""}, "conversation.id", "a string of 1 to 128 characters"),
    (7, "conversation", "a string or an object"),
], ids=["empty", "too-long", "nul", "no-id", "id-number", "id-empty", "number"])
def test_a_malformed_conversation_is_refused(httpd, model, conversation, param, expected):
    status, _, body = httpd.post("/v1/responses", dict(ci_request(SET_X),
                                                       conversation=conversation))
    assert (status, body) == (400, {"error": {
        "message": "Invalid type for '%s': expected %s." % (param, expected),
        "type": "invalid_request_error", "param": param, "code": "invalid_type"}})
    assert model.requests() == []


def test_a_conversation_id_of_128_characters_is_taken(httpd, model):
    conv = "é" * 128                     # characters, not bytes
    first = turn(httpd, SET_X, conversation=conv)
    second = turn(httpd, PRINT_X, conversation=conv)
    assert (logs_of(second), container_of(second)) == ("42\n", container_of(first))


# ------------------------------------------------- the shared directory

def test_e2b_conversation_across_nodes(nodes, cluster):
    node1, node2 = nodes
    conv = new_conversation()
    status, _, first = node_turn(node1, SET_X, path="/e2b/v1/responses", conversation=conv)
    assert status == 200, first
    status, _, second = node_turn(node2, PRINT_X, path="/e2b/v1/responses",
                                  conversation=conv)
    assert status == 200, second
    assert (container_of(second), calls_of(second)[0]["outputs"]) == (
        container_of(first), [{"type": "logs", "logs": "42\n"}])
    assert cluster["fake"].state()["created"] == 1
    # another owner's conversation of that id, on either node: its own
    status, _, theirs = node_turn(node1, PRINT_X, path="/e2b/v1/responses",
                                  conversation=conv,
                                  headers={"Authorization": "Bearer sk-shared-other"})
    assert status == 200, theirs
    assert container_of(theirs) != container_of(first)
    assert calls_of(theirs)[0]["outputs"][0]["logs"].endswith(
        "NameError: name 'x' is not defined\n")
    status, _, third = node_turn(node2, [[{"call": "print(x)"}], [{"text": "ok"}]],
                                 path="/e2b/v1/responses", conversation=conv)
    assert (status, container_of(third)) == (200, container_of(first))


def test_a_local_conversation_container_is_served_on_its_node(nodes):
    """As with previous_response_id: the other node says which node runs
    it (409, X-CodeInterpreter-Node); on that node the conversation goes on."""
    node1, node2 = nodes
    conv = new_conversation()
    status, _, first = node_turn(node1, SET_X, conversation=conv)
    assert status == 200, first
    cid = container_of(first)
    status, hdrs, out = node_turn(node2, PRINT_X, conversation=conv)
    assert (status, hdrs.get("x-codeinterpreter-node"), out["error"]["code"]) == (
        409, "127.0.0.1:%d" % node1.port, "container_on_other_node"), out
    assert cid in out["error"]["message"]
    status, _, second = node_turn(node1, PRINT_X, conversation=conv)
    assert (status, container_of(second), calls_of(second)[0]["outputs"]) == (
        200, cid, [{"type": "logs", "logs": "42\n"}])


def test_the_shared_directory_refuses_both_too(nodes, model):
    status, _, out = node_turn(nodes[1], SET_X, conversation=new_conversation(),
                               previous_response_id="resp_whatever")
    assert (status, out) == (400, {"error": BOTH})
    assert model.requests() == []


# ------------------------------------------------------ the Node SDK

def test_node_sdk_turns_of_one_conversation_share_the_container(httpd, model, node_modules):
    """client.responses.create with `conversation` on each turn, as an
    application keeping its own conversation ids does. (The Agents SDK's
    OpenAIConversationsSession also calls the Conversations API, which the
    scripted model does not serve.)"""
    conv = new_conversation()
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % httpd.port,
               CI_SPEC_DIR=SPEC_DIR)
    proc = subprocess.run(
        [NODE, os.path.join(NODE_DIR, "conversation_turns.mjs"), conv,
         json.dumps(SET_X), json.dumps(PRINT_X)],
        cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        proc.returncode, proc.stdout, proc.stderr)
    first, second = [json.loads(line) for line in proc.stdout.splitlines()[:2]]
    assert second["output_text"] == "42\n"
    assert container_of(second) == container_of(first)
    assert [r["json"]["conversation"] for r in model.requests()] == [conv] * 4
