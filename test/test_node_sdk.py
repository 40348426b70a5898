"""The official OpenAI Node SDK as the client: it sends the hosted tool, parses
what comes back, and the answer matches the published OpenAPI document; the
live event stream reads through the SDK's streaming interfaces, in OpenAI's
order, and ends in the same response as the JSON path.

Two client sets run the scripts: "pinned", test/node (package.json +
package-lock.json: the versions the project was built against), and
"current", test/node-current (the current openai 7.x and @openai/agents
0.20). The scripts live in test/node only; test/node-current holds symlinks
to them, run with --preserve-symlinks-main so that their imports ("openai")
resolve from test/node-current/node_modules. Each set's node_modules is
installed with `npm ci` once per session when it is missing.
"""
import json
import os
import shutil
import subprocess

import pytest

from conftest import HERE, SPEC_DIR, TOOL, count_schema_checks, require, script_input, without_ids

NODE_DIR = os.path.join(HERE, "node")
NODE = shutil.which("node")
NPM = shutil.which("npm")
SCRIPT = [[{"call": "print(sum(range(10)))"}], [{"text": "done"}]]
STREAM_SCRIPT = [[{"call": "total = sum(range(10))\nprint(total)"}],
                 [{"text": "the sum is {{last_output}}"}]]
OUTPUTS = "code_interpreter_call.outputs"



# The client sets: the folder each one's package.json is in.
CLIENT_SETS = {"pinned": NODE_DIR, "current": os.path.join(HERE, "node-current")}
# Node's flags for a set: test/node-current's scripts are symlinks to
# test/node's, and ESM resolves packages from the script's own path, not
# NODE_PATH: the link's path must be kept for "openai" to be found there.
NODE_FLAGS = {"pinned": [], "current": ["--preserve-symlinks", "--preserve-symlinks-main"]}
_installed = {}


def install_clients(name):
    """The node_modules of client set NAME, installed with `npm ci` once."""
    if name in _installed:
        return _installed[name]
    require(NODE is not None and NPM is not None,
            "node and npm are needed for the SDK tests (missing: %s)"
            % ", ".join(n for n, p in (("node", NODE), ("npm", NPM)) if p is None))
    where = CLIENT_SETS[name]
    target = os.path.join(where, "node_modules")
    if not os.path.isdir(target):
        r = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=where,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail("npm ci failed in %s:\n%s\n%s" % (where, r.stdout, r.stderr))
    _installed[name] = target
    return target


@pytest.fixture(scope="session")
def node_modules():
    """test/node's packages (the OpenAI SDK, the Agents SDK), installed once."""
    return install_clients("pinned")


@pytest.fixture(params=list(CLIENT_SETS))
def clients(request):
    """Each client set in turn ("pinned", "current"), installed."""
    install_clients(request.param)
    return request.param


def node_script(clients, script, *args, env, timeout=180):
    """Run test/node's SCRIPT with client set CLIENTS; the CompletedProcess."""
    where = CLIENT_SETS[clients]
    return subprocess.run([NODE, *NODE_FLAGS[clients], os.path.join(where, script), *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=timeout)


def steps_report(proc):
    """The report a steps script (common.mjs's stepper) printed, checked:
    it ran to its end, and no step threw."""
    detail = "exit %d\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), detail
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["error"] is None, "step %s threw: %s" % (
        report["error"]["step"], json.dumps(report["error"], indent=1))
    assert proc.returncode == 0, detail
    return report


class SdkRun:
    """The outcome of one run of a script in test/node."""

    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = proc.stdout.splitlines()
        self.response = None
        if lines and lines[0].startswith("{"):
            self.response = json.loads(lines[0])
        self.lines = lines[1:]

    def marked(self, prefix):
        return [l[len(prefix):].strip() for l in self.lines if l.startswith(prefix)]

    def __str__(self):
        return "exit %d\nstdout:\n%s\nstderr:\n%s" % (self.returncode, self.stdout, self.stderr)


def run_node(httpd, script, *args, path="/v1", clients="pinned"):
    """Run SCRIPT in test/node against HTTPD; returns the CompletedProcess."""
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d%s" % (httpd.port, path),
               CI_SPEC_DIR=SPEC_DIR)
    return node_script(clients, script, *args, env=env, timeout=120)


def run_sdk(httpd, script, rounds, path="/v1", clients="pinned"):
    return SdkRun(run_node(httpd, script, json.dumps(rounds), path=path, clients=clients))


def test_sdk_parses_code_interpreter_response(httpd, model, clients):
    run = run_sdk(httpd, "sdk_json.mjs", SCRIPT, clients=clients)
    # 0: all good, 1: only the schema check failed (the next test reports it).
    assert run.returncode in (0, 1) and run.response is not None, str(run)
    body = run.response
    assert body["object"] == "response"
    assert body["status"] == "completed", str(run)
    calls = [i for i in body["output"] if i["type"] == "code_interpreter_call"]
    msgs = [i for i in body["output"] if i["type"] == "message"]
    assert [i["type"] for i in body["output"]] == ["code_interpreter_call", "message"], str(run)
    call = calls[0]
    assert call["status"] == "completed"
    assert call["code"] == "print(sum(range(10)))"
    assert call["outputs"] == [{"type": "logs", "logs": "45\n"}]
    assert call["container_id"].startswith("cntr_")
    assert msgs[0]["role"] == "assistant"
    assert msgs[0]["content"][0]["type"] == "output_text"
    assert msgs[0]["content"][0]["text"] == "done"
    # The SDK's own convenience accessor sees the final answer.
    assert body["output_text"] == "done"
    assert body["tools"] == [{"type": "code_interpreter", "container": {"type": "auto"}}]
    # The model was asked twice: once for the code, once with its output.
    assert len(model.requests()) == 2


def test_sdk_response_matches_openapi_schema(httpd, model, clients):
    run = run_sdk(httpd, "sdk_json.mjs", SCRIPT, clients=clients)
    skipped = run.marked("SKIP-SCHEMA:")
    require(not skipped, "the OpenAPI document is absent, the response was not validated: %s"
            % (skipped or [""])[0])
    failed = run.marked("SCHEMA-FAIL:")
    assert not failed, "the response does not match the OpenAPI schema:\n" + "\n".join(failed)
    assert run.returncode == 0, str(run)
    ok = run.marked("SCHEMA-OK:")
    count_schema_checks(len(ok))
    assert "output[0] CodeInterpreterToolCall" in ok, str(run)
    assert any(name.startswith("Response") for name in ok), str(run)


# ------------------------------------------------------------- streaming

# The events of one code_interpreter_call and of one assistant message, in
# OpenAI's order; a run of one delta type is written "<type>+".
STREAM_START = ["response.created", "response.in_progress"]
STREAM_CALL = ["response.output_item.added", "response.code_interpreter_call.in_progress",
               "response.code_interpreter_call_code.delta+",
               "response.code_interpreter_call_code.done",
               "response.code_interpreter_call.interpreting",
               "response.code_interpreter_call.completed", "response.output_item.done"]
STREAM_MESSAGE = ["response.output_item.added", "response.content_part.added",
                  "response.output_text.delta+", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done"]
STREAM_END = ["response.completed"]


def stream_sdk(httpd, mode, rounds, clients="pinned"):
    """Run sdk_stream.mjs in MODE; returns its parsed report."""
    proc = run_node(httpd, "sdk_stream.mjs", mode, json.dumps(rounds), clients=clients)
    assert proc.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        proc.returncode, proc.stdout, proc.stderr)
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["mode"] == mode
    return report


def collapsed(types):
    out = []
    for t in types:
        if t.endswith(".delta") and out and out[-1] == t + "+":
            continue
        out.append(t + "+" if t.endswith(".delta") else t)
    return out


def check_sdk_events(events):
    """The event order and numbering the SDK saw for STREAM_SCRIPT; returns
    the code_interpreter_call and message items as their done events carry them."""
    types = [e["type"] for e in events]
    assert collapsed(types) == STREAM_START + STREAM_CALL + STREAM_MESSAGE + STREAM_END, types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    by_type = {}
    for e in events:
        by_type.setdefault(e["type"], []).append(e)
    code = "".join(e["delta"] for e in by_type["response.code_interpreter_call_code.delta"])
    assert code == STREAM_SCRIPT[0][0]["call"]
    assert by_type["response.code_interpreter_call_code.done"][0]["code"] == code
    text = "".join(e["delta"] for e in by_type["response.output_text.delta"])
    assert text == "the sum is 45\n"
    assert by_type["response.output_text.done"][0]["text"] == text
    call, msg = [e["item"] for e in by_type["response.output_item.done"]]
    assert call["type"] == "code_interpreter_call" and msg["type"] == "message"
    # The call's events all name the call, the message's the message.
    for e in events:
        if "item_id" in e:
            assert e["item_id"] == (call if e["output_index"] == 0 else msg)["id"], e
    assert call["status"] == "completed"
    assert call["code"] == code
    assert call["outputs"] == [{"type": "logs", "logs": "45\n"}]
    assert call["container_id"].startswith("cntr_")
    assert msg["content"][0]["text"] == text
    return call, msg




def test_sdk_create_stream_sees_every_event_in_order(httpd, model, clients):
    report = stream_sdk(httpd, "create", STREAM_SCRIPT, clients=clients)
    events = report["events"]
    call, msg = check_sdk_events(events)
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    final = report["final"]
    assert final["status"] == "completed"
    assert final["output"] == [call, msg]
    assert final["tools"] == [TOOL]
    # The module followed up itself; both rounds streamed from the upstream
    # and were relayed as they came.
    assert [r["json"].get("stream") for r in model.requests()] == [True, True]


# openai 7's stream helper (responses.stream) refuses a stream whose
# lifecycle events name different responses ("Lifecycle response identity
# changed."): this server's response.created / in_progress carry the first
# round's upstream id, response.completed the last round's (the id a next
# turn chains on). Strict: the day the ids agree, this says so.
STREAM_ID_CHANGES = pytest.mark.xfail(
    strict=True, raises=AssertionError,
    reason="response.completed's id is the last round's, response.created's the first's; "
           "openai 7's ResponseStream requires one id")


@pytest.mark.parametrize("clients", ["pinned", pytest.param("current", marks=STREAM_ID_CHANGES)],
                         indirect=True)
def test_sdk_stream_final_response_equals_the_json_answer(httpd, model, clients):
    report = stream_sdk(httpd, "stream", STREAM_SCRIPT, clients=clients)
    call, msg = check_sdk_events(report["events"])
    final = report["final"]
    assert final["status"] == "completed"
    # What the SDK's stream helper adds to the response it assembles.
    assert final.pop("output_text") == "the sum is 45\n"
    assert final.pop("output_parsed") is None
    for part in final["output"][1]["content"]:
        assert part.pop("parsed") is None
    assert final["output"] == [call, msg]
    assert final == report["events"][-1]["response"]

    status, _, plain = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input(STREAM_SCRIPT)})
    assert status == 200, plain
    assert without_ids(final) == without_ids(plain)
    assert final["output"][0]["container_id"].startswith("cntr_")
