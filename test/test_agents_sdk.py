"""The OpenAI Agents SDK (@openai/agents) as the client: an Agent whose tool is
the hosted code interpreter, run for two turns, the second on the first
turn's whole history.

What it shows: the SDK accepts the code_interpreter_call items and the answer
this server builds, replays those items on the next turn, the server hands
them to the upstream as function_call + function_call_output pairs (no
code_interpreter_call reaches it), and the second turn runs in a new sandbox
(nothing the first turn's code defined is there).

The SDK is installed in test/node like the OpenAI Node SDK (see
test_node_sdk.py); test/node/agents_run.mjs drives it. The two-turn test runs
with both client sets (the pinned @openai/agents and the current one).
"""
import base64
import json
import os

import pytest

from conftest import TOOL
from test_node_sdk import clients, node_modules, node_script  # noqa: F401 (fixtures)

OUTPUTS = "code_interpreter_call.outputs"
TURN1 = [[{"call": "x = 6 * 7\nprint(x)"}], [{"text": "forty-two"}]]
# Turn 2 runs in turn 1's container (the replayed call names it): x is there.
TURN2 = [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]]


def run_agents(httpd, *flags, turn1=TURN1, turn2=TURN2, path="/v1", clients="pinned"):
    """Run agents_run.mjs with client set CLIENTS; returns its report (turns,
    sent, error)."""
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d%s" % (httpd.port, path))
    proc = node_script(clients, "agents_run.mjs", *flags, json.dumps(turn1), json.dumps(turn2),
                       env=env)
    detail = "exit %d\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), detail
    report = json.loads(proc.stdout.splitlines()[0])
    report["detail"] = detail
    return report


def succeeded(report):
    assert report["error"] is None, "turn %s failed: %s" % (
        report["error"]["turn"], json.dumps(report["error"], indent=1))
    assert len(report["turns"]) == 2


def ci_items(history):
    """The code_interpreter_call items of an Agents SDK history."""
    return [i for i in history
            if i.get("type") == "hosted_tool_call"
            and (i.get("providerData") or {}).get("type") == "code_interpreter_call"]


def inputs_of(req):
    inp = req["json"]["input"]
    return [{"role": "user", "content": inp}] if isinstance(inp, str) else inp


def check_translated(req, call_id, code, output):
    """REQ, as the upstream received it, carries the replayed call CALL_ID as a
    function_call + function_call_output pair and no code_interpreter_call."""
    assert b"code_interpreter" not in base64.b64decode(req["body_b64"]), req["json"]
    items = inputs_of(req)
    assert not [i for i in items if i.get("type") == "code_interpreter_call"]
    assert [t["type"] for t in req["json"]["tools"]] == ["function"]
    k = next((n for n, i in enumerate(items)
              if i.get("type") == "function_call" and i.get("call_id") == call_id), None)
    assert k is not None, "no function_call %s in %s" % (call_id, json.dumps(items, indent=1))
    call, result = items[k], items[k + 1]
    assert call["name"] == "python"
    assert json.loads(call["arguments"]) == {"code": code}
    assert result == {"type": "function_call_output", "call_id": call_id, "output": output}
    assert [i for i in items if i.get("call_id") == call_id] == [call, result]


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
def test_two_turns_replay_the_code_interpreter_call(httpd, model, clients, streamed):
    report = run_agents(httpd, *(["--stream"] if streamed else []), clients=clients)
    succeeded(report)
    first, second = report["turns"]

    # Turn 1: the SDK took the executed call and the answer.
    assert first["finalOutput"] == "forty-two"
    [call1] = ci_items(first["history"])
    data1 = call1["providerData"]
    assert call1["status"] == "completed"
    assert call1["id"] == data1["id"] and call1["id"].startswith("ci_")
    assert data1["code"] == TURN1[0][0]["call"]
    assert data1["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert data1["container_id"].startswith("cntr_")
    assert [i["type"] for i in first["newItems"]] == ["tool_call_item", "message_output_item"]

    # What the SDK sent: the hosted tool both times, and in turn 2 the whole
    # history, the code_interpreter_call item included.
    sent = report["sent"]
    assert len(sent) == 2, json.dumps(sent, indent=1)
    for body in sent:
        assert [t for t in body["tools"] if t.get("type") == "code_interpreter"] == [TOOL]
        assert OUTPUTS in body["include"]
        assert bool(body.get("stream")) is streamed
    replayed = [i for i in sent[1]["input"] if i.get("type") == "code_interpreter_call"]
    assert len(replayed) == 1, json.dumps(sent[1]["input"], indent=1)
    assert replayed[0]["id"] == call1["id"]
    assert replayed[0]["outputs"] == data1["outputs"]

    # What the upstream received: turn 1 asked twice (code, then its output),
    # turn 2 twice; both turn-2 requests carry the replayed call translated.
    seen = model.requests()
    assert len(seen) == 4, [r["json"] for r in seen]
    # A streamed run's rounds stream from the upstream too; a JSON run's do not.
    assert all(r["json"].get("stream") is streamed for r in seen)
    for req in seen[2:]:
        check_translated(req, call1["id"], data1["code"], "42\n")

    # Turn 2 ran print(x + 1) in turn 1's container, where x is 42.
    [old, call2] = ci_items(second["history"])
    assert old["id"] == call1["id"]
    data2 = call2["providerData"]
    assert call2["id"] != call1["id"]
    assert data2["code"] == TURN2[0][0]["call"]
    assert data2["container_id"] == data1["container_id"]
    assert data2["outputs"] == [{"type": "logs", "logs": "43\n"}]
    assert second["finalOutput"] == "43\n"

    if streamed:
        # The Agents SDK saw the code interpreter's own events, in order.
        for events in (first["events"], second["events"]):
            ci = [e for e in events if e.startswith("model:response.code_interpreter_call")]
            assert ci[0] == "model:response.code_interpreter_call.in_progress", events
            assert ci[-3:] == ["model:response.code_interpreter_call_code.done",
                               "model:response.code_interpreter_call.interpreting",
                               "model:response.code_interpreter_call.completed"], events
            assert events[-2:] == ["item:tool_called", "item:message_output_created"], events
            assert [e for e in events if e in ("model:response.completed",
                                               "model:response.failed")] \
                == ["model:response.completed"], events
    else:
        assert first["events"] is None and second["events"] is None


def test_without_outputs_the_replayed_call_has_none(httpd, model, node_modules):
    # codeInterpreterTool() without includeOutputs: the calls come back with
    # outputs null, and the SDK replays them with outputs [] -- an empty list
    # says "the code printed nothing", so that is what the model is told.
    report = run_agents(httpd, "--no-outputs")
    succeeded(report)
    first, second = report["turns"]
    assert first["finalOutput"] == "forty-two"
    [call1] = ci_items(first["history"])
    assert call1["providerData"]["outputs"] is None
    for body in report["sent"]:
        assert OUTPUTS not in (body.get("include") or [])
    [replayed] = [i for i in report["sent"][1]["input"]
                  if i.get("type") == "code_interpreter_call"]
    assert replayed["id"] == call1["id"] and replayed["outputs"] == []
    seen = model.requests()
    assert len(seen) == 4
    for req in seen[2:]:
        check_translated(req, call1["id"], TURN1[0][0]["call"], "(no output)")
    # The model itself still saw turn 2's real output, in turn 1's container.
    assert second["finalOutput"] == "43\n"


# A timed-out call in a container is interrupted (KeyboardInterrupt) and the
# interpreter lives on; what the call shows is what the model is told.
TIMED_OUT = ('Traceback (most recent call last):\n  File "<cell>", line 2, in <module>\n'
             "KeyboardInterrupt\nThe execution timed out after 3 s and was interrupted "
             "(KeyboardInterrupt); the container's variables and files are kept.")
NOT_RUN = "The arguments were not a JSON object with a string field \"code\"; nothing was run."
SLEEP = "import time\ntime.sleep(30)"
# A call whose execution failed, and one that was not run: the path, turn 1's
# script, the code the call shows, its logs, what the model was told.
UNFINISHED = [
    pytest.param("/quick/v1", [[{"call": SLEEP}], [{"text": "it went wrong"}]],
                 SLEEP, TIMED_OUT, TIMED_OUT, id="timed-out"),
    pytest.param("/v1", [[{"raw_call": {"name": "python", "arguments": "not json"}}],
                         [{"text": "it went wrong"}]],
                 "not json", NOT_RUN, NOT_RUN, id="not-run"),
]


@pytest.mark.parametrize("path,turn1,code,logs,told", UNFINISHED)
def test_a_failed_call_can_be_replayed(httpd, model, node_modules, path, turn1, code, logs,
                                       told):
    # The call is "completed", with why in its outputs: the SDK refuses to
    # replay "failed" or "incomplete" (its schema for a code_interpreter_call
    # status: in_progress, completed, interpreting), so the next turn of an
    # agent that met a sandbox failure would throw before it is sent.
    report = run_agents(httpd, path=path, turn1=turn1, turn2=[[{"text": "fine"}]])
    succeeded(report)
    first, second = report["turns"]
    assert first["finalOutput"] == "it went wrong"
    [call1] = ci_items(first["history"])
    assert call1["status"] == "completed"
    assert call1["providerData"]["code"] == code
    assert call1["providerData"]["outputs"] == [{"type": "logs", "logs": logs}]
    seen = model.requests()
    assert len(seen) == 3, [r["json"] for r in seen]
    # turn 1: the model was told what happened (and that the interpreter restarted)
    told_items = [i for i in inputs_of(seen[1]) if i.get("type") == "function_call_output"]
    assert [i["output"] for i in told_items] == [told]
    # turn 2: the SDK replayed the call as it got it, and the upstream got it
    # as a function call and its output
    [replayed] = [i for i in report["sent"][1]["input"]
                  if i.get("type") == "code_interpreter_call"]
    assert replayed["id"] == call1["id"] and replayed["status"] == "completed"
    assert replayed["outputs"] == [{"type": "logs", "logs": logs}]
    check_translated(seen[2], call1["id"], code, logs)
    assert second["finalOutput"] == "fine"
