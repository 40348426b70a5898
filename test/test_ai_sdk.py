"""The Vercel AI SDK as the client: `generateText` from `ai` with the
`@ai-sdk/openai` provider's Responses model and its code interpreter tool
(openai.tools.codeInterpreter), for two turns, the second on the first
turn's response.messages plus a new user message, as an application keeps
a conversation.

What it shows: the SDK takes the code_interpreter_call items this server
returns as provider-executed tool calls and results, and on the next turn
sends them back as item_references ("ci_..." for our call, "msg_..." for the
upstream's message: the provider does so whenever "store" is not false, and
it does not send "store" by default). The server replaces our reference with
the function_call + function_call_output pair the upstream knows, passes the
upstream's own reference through, and runs the second turn in the first
turn's container, where x is still defined.

With store: false the provider sends neither the call nor its result (it
warns that it does not), so nothing tells the server which container the
conversation had: the second turn runs in a new one.

test/node/ai_sdk_turns.mjs drives the SDK (installed as for
test_node_sdk.py, pinned in test/node/package.json).
"""
import base64
import json
import os
import subprocess

import pytest

from conftest import TOOL
from test_loop import issued_calls, sandboxes_started, upstream_inputs
from test_node_sdk import NODE, NODE_DIR, NPM, node_modules  # noqa: F401 (fixture)

OUTPUTS = "code_interpreter_call.outputs"
KEY = "sk-ai-sdk-0123"
TURN1 = [[{"call": "x = 41"}], [{"text": "set"}]]
TURN2 = [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]]
NAME_ERROR = "NameError: name 'x' is not defined"
NOT_SENT = ("Results for OpenAI tool code_interpreter are not sent to the API when store "
            "is false")


def installed_version(name):
    try:
        with open(os.path.join(NODE_DIR, "node_modules", name, "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def stale_packages():
    with open(os.path.join(NODE_DIR, "package.json")) as f:
        pinned = json.load(f)["dependencies"]
    return {name: (version, installed_version(name)) for name, version in pinned.items()
            if installed_version(name) != version}


@pytest.fixture(scope="session")
def ai_sdk(node_modules):
    """test/node's packages at the versions package.json pins: a node_modules
    installed before `ai` and `@ai-sdk/openai` were added is installed again."""
    if stale_packages():
        r = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail("npm ci failed in %s:\n%s\n%s" % (NODE_DIR, r.stdout, r.stderr))
    stale = stale_packages()
    assert not stale, "packages not at their pinned versions (pinned, installed): %s" % stale
    return node_modules


def run_ai_sdk(httpd, *flags):
    """Run ai_sdk_turns.mjs; returns its report (turns, sent, error)."""
    httpd.callers.add("Bearer " + KEY)
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % httpd.port, API_KEY=KEY)
    proc = subprocess.run(
        [NODE, os.path.join(NODE_DIR, "ai_sdk_turns.mjs"), *flags, json.dumps(TURN1),
         json.dumps(TURN2)],
        cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=180)
    detail = "exit %d\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), detail
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["error"] is None, "turn %s failed: %s" % (
        report["error"]["turn"], json.dumps(report["error"], indent=1))
    assert proc.returncode == 0 and len(report["turns"]) == 2, detail
    assert len(proc.stdout.splitlines()) == 1, detail
    return report


def user(rounds):
    """A user message as the provider sends it."""
    return {"role": "user",
            "content": [{"type": "input_text", "text": "SCRIPT: " + json.dumps(rounds)}]}


def call_and_result(turn, code, outputs):
    """TURN's one code interpreter call, as the SDK reports it: (its tool
    call, its tool result, its container id)."""
    [call], [result] = turn["toolCalls"], turn["toolResults"]
    cid = call["input"]["containerId"]
    assert cid.startswith("cntr_"), call
    assert call["toolCallId"].startswith("ci_"), call
    assert call == {"type": "tool-call", "toolCallId": call["toolCallId"],
                    "toolName": "code_interpreter",
                    "input": {"code": code, "containerId": cid}, "providerExecuted": True}
    assert result == dict(call, type="tool-result", output={"outputs": outputs})
    assert turn["content"][:2] == [call, result]
    assert [p["type"] for p in turn["content"]] == ["tool-call", "tool-result", "text"]
    assert turn["finishReason"] == "stop"
    return call, result, cid


def message_id(turn):
    item = turn["content"][2]["providerMetadata"]["openai"]["itemId"]
    assert item.startswith("msg_"), turn["content"]
    return item


def check_turn1(first):
    call, _, cid = call_and_result(first, "x = 41", [])
    assert first["text"] == "set"
    assert first["warnings"] == []
    msg = message_id(first)
    # What the application passes back on the next turn.
    assert first["responseMessages"] == [{"role": "assistant", "content": [
        call,
        {"type": "tool-result", "toolCallId": call["toolCallId"],
         "toolName": "code_interpreter", "output": {"type": "json", "value": {"outputs": []}}},
        {"type": "text", "text": "set", "providerOptions": {"openai": {"itemId": msg}}}]}]
    return call["toolCallId"], cid, msg


def check_sent(sent, turn2_input, store=None):
    """The two bodies the SDK sent: the hosted tool, its outputs asked for
    (the provider adds the include itself), TURN2_INPUT on the second."""
    extra = {} if store is None else {"store": store}
    assert sent == [
        dict({"model": "m", "input": [user(TURN1)], "include": [OUTPUTS], "tools": [TOOL],
              "tool_choice": "auto"}, **extra),
        dict({"model": "m", "input": turn2_input, "include": [OUTPUTS], "tools": [TOOL],
              "tool_choice": "auto"}, **extra)]


def test_second_turn_references_the_first_and_keeps_its_container(httpd, model, ai_sdk):
    report = run_ai_sdk(httpd)
    first, second = report["turns"]
    ci1, container, msg1 = check_turn1(first)

    # Turn 2 ran in turn 1's container: x was still there.
    call2, _, container2 = call_and_result(
        second, "print(x + 1)", [{"type": "logs", "logs": "42\n"}])
    assert container2 == container
    assert call2["toolCallId"] != ci1
    assert "42" in second["toolResults"][0]["output"]["outputs"][0]["logs"]
    assert second["text"] == "42\n"
    assert second["warnings"] == []

    # What the SDK sent on turn 2: turn 1's items as references, ours and
    # the upstream's, between the two user messages. No "store": the
    # provider leaves it to the API's default (stored), which is why it
    # may refer to the items by id.
    check_sent(report["sent"], [
        user(TURN1), {"type": "item_reference", "id": ci1},
        {"type": "item_reference", "id": msg1}, user(TURN2)])

    # What the upstream received: turn 1 asked twice (code, then its output),
    # turn 2 twice. Our reference never reached it: it became the call the
    # model made in turn 1 and the output it was given; the upstream's own
    # reference passed as it came.
    seen = model.requests()
    assert len(seen) == 4, [r["json"] for r in seen]
    [issued] = issued_calls(seen[0])
    fc = {"type": "function_call", "call_id": issued["call_id"], "name": "python",
          "arguments": issued["arguments"]}
    assert json.loads(issued["arguments"]) == {"code": "x = 41"}
    turn2 = [user(TURN1), fc,
             {"type": "function_call_output", "call_id": issued["call_id"],
              "output": "(no output)"},
             {"type": "item_reference", "id": msg1}, user(TURN2)]
    assert upstream_inputs(seen[2]) == turn2
    [issued2] = issued_calls(seen[2])
    assert upstream_inputs(seen[3]) == turn2 + [
        dict(issued2, status="completed"),
        {"type": "function_call_output", "call_id": issued2["call_id"], "output": "42\n"}]
    for req in seen:
        body = base64.b64decode(req["body_b64"])
        assert b'"ci_' not in body and b"code_interpreter" not in body, req["json"]
        assert "store" not in req["json"]
        assert [t["type"] for t in req["json"]["tools"]] == ["function"]
    # One container, one sandbox, for both turns.
    assert sandboxes_started(httpd) == 1


def test_without_store_the_call_is_not_sent_and_the_container_is_lost(httpd, model,
                                                                         ai_sdk):
    report = run_ai_sdk(httpd, "--no-store")
    first, second = report["turns"]
    ci1, container, msg1 = check_turn1(first)

    # The provider drops the provider-executed call and its result (and says
    # so); the message goes by value.
    check_sent(report["sent"], [
        user(TURN1),
        {"role": "assistant", "content": [{"type": "output_text", "text": "set"}], "id": msg1},
        user(TURN2)], store=False)
    assert second["warnings"] == [{"type": "other", "message": NOT_SENT}]

    # Nothing names turn 1's container any more: turn 2 gets a new one.
    _, result2, container2 = call_and_result(
        second, "print(x + 1)", second["toolResults"][0]["output"]["outputs"])
    assert container2 != container
    [logs] = result2["output"]["outputs"]
    assert logs["type"] == "logs" and logs["logs"].endswith(NAME_ERROR + "\n"), logs
    assert second["text"] == logs["logs"]
    seen = model.requests()
    assert len(seen) == 4, [r["json"] for r in seen]
    assert upstream_inputs(seen[2]) == report["sent"][1]["input"]
    assert all(r["json"]["store"] is False for r in seen)
    assert sandboxes_started(httpd) == 2
