"""The hosted shell: OpenAI's `shell` tool with a container_auto or
container_reference environment, run in the request's container - the same
one code_interpreter uses - by the local sandbox.

What a client sends and gets: the tool rewritten into a function for the
upstream, shell_call and shell_call_output items in JSON and in the stream
(command deltas relayed as the model writes them), history replayed by
previous_response_id, replayed items and item references, the limits
(timeout_ms, max_output_length), a command that leaves a process running,
and the exact errors of a bad environment or a container that is not the
caller's."""
import json
import os
import re

import pytest

import fake_model
from conftest import (SPEC_DIR, TOOL, Httpd, base_conf, count_schema_checks, require, script_input,
                      wait_until)
from test_containers import resource_checker
from test_loop import calls_of, upstream_inputs
from test_relay import gate
from test_node_sdk import node_modules  # noqa: F401 (a fixture)
from test_stream import LIFECYCLE, SSE, recorded_gaps, schema_checker, schema_problems, shape, show

SHELL = {"type": "shell", "environment": {"type": "container_auto"}}
OTHER = {"Authorization": "Bearer sk-someone-else-for-the-shell"}


def shell_call(*commands, timeout_ms=None, max_output_length=None, **extra):
    """A script action: the model calls the hosted shell's function."""
    action = {"raw_call": {"name": "shell", "arguments": json.dumps(
        {"commands": list(commands), "timeout_ms": timeout_ms,
         "max_output_length": max_output_length})}}
    action.update(extra)
    return action


def body_of(rounds, tools=None, **extra):
    body = {"model": "m", "tools": tools or [SHELL], "input": script_input(rounds)}
    body.update(extra)
    return body


def turn(server, rounds, tools=None, headers=None, **extra):
    status, _, out = server.post("/v1/responses", body_of(rounds, tools, **extra),
                                 headers=headers)
    assert status == 200, out
    return out


def items_of(resp, kind):
    return [o for o in resp["output"] if o["type"] == kind]


def outputs_of(resp, i=0):
    return items_of(resp, "shell_call_output")[i]["output"]


def exit_entry(stdout="", stderr="", code=0):
    return {"stdout": stdout, "stderr": stderr,
            "outcome": {"type": "exit", "exit_code": code}}


def assert_valid(name, item):
    errors = [e.message for e in resource_checker(name).iter_errors(item)]
    assert errors == [], (name, item, errors)


# ------------------------------------------------------------ the request

def test_the_upstream_gets_a_function_and_the_client_its_tool_back(httpd, model):
    out = turn(httpd, [[shell_call("echo hi")], [{"text": "done"}]])
    sent = model.requests()[0]["json"]
    fn = sent["tools"][0]
    assert fn["type"] == "function" and fn["name"] == "shell" and fn["strict"] is True
    assert fn["parameters"]["required"] == ["commands", "timeout_ms", "max_output_length"]
    assert fn["parameters"]["additionalProperties"] is False
    assert out["tools"] == [SHELL]
    call, result, msg = out["output"]
    assert [call["type"], result["type"], msg["type"]] == [
        "shell_call", "shell_call_output", "message"]
    assert call["id"].startswith("sh_") and result["id"].startswith("sho_")
    assert call["call_id"] == result["call_id"]
    assert call["action"] == {"commands": ["echo hi"], "timeout_ms": None,
                              "max_output_length": None}
    assert call["status"] == "completed" and result["status"] == "completed"
    assert call["environment"]["type"] == "container_reference"
    assert call["environment"]["container_id"].startswith("cntr_")
    assert result["output"] == [exit_entry("hi\n")]
    assert result["max_output_length"] is None
    assert_valid("FunctionShellCall", call)
    assert_valid("FunctionShellCallOutput", result)
    # the model was told the entries, as JSON
    told = upstream_inputs(model.requests()[1])[-1]
    assert told["type"] == "function_call_output"
    assert json.loads(told["output"]) == [exit_entry("hi\n")]


def test_exit_codes_stderr_and_the_working_directory(httpd, model):
    out = turn(httpd, [[shell_call("echo out; echo err >&2; exit 3", "pwd",
                                   "ls /nonexistent-dir")],
                       [{"text": "done"}]])
    assert outputs_of(out) == [
        exit_entry("out\n", "err\n", 3),
        exit_entry("/mnt/data\n"),
        exit_entry("", "ls: cannot access '/nonexistent-dir': No such file or directory\n", 2)]


def test_a_command_past_timeout_ms_ends_the_call(httpd, model):
    first = turn(httpd, [[shell_call("echo before", "sleep 60", "echo never",
                                     timeout_ms=300)], [{"text": "done"}]])
    assert outputs_of(first) == [exit_entry("before\n"),
                                 {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]
    # nothing of the stopped command is left (its group was sent SIGKILL:
    # the dying sleep may be seen for an instant), and the container serves on
    wait_until(lambda: not sleepers("sleep 60"), "the timed-out command to be gone")
    second = turn(httpd, [[shell_call("echo again")], [{"text": "done"}]],
                  previous_response_id=first["id"])
    assert outputs_of(second) == [exit_entry("again\n")]
    cid = items_of(first, "shell_call")[0]["environment"]["container_id"]
    assert items_of(second, "shell_call")[0]["environment"]["container_id"] == cid


def test_output_past_max_output_length_is_cut(httpd, model):
    # 30 two-byte characters on stdout, then 5 on stderr: 12 characters in all
    out = turn(httpd, [[shell_call("printf '\u00e9%.0s' $(seq 30); printf 'abcde' >&2",
                                   max_output_length=12)], [{"text": "done"}]])
    result = items_of(out, "shell_call_output")[0]
    assert result["output"] == [exit_entry("\u00e9" * 12, "", 0)]
    assert result["max_output_length"] == 12
    out = turn(httpd, [[shell_call("printf 'abc'; printf 'defgh' >&2",
                                   max_output_length=6)], [{"text": "done"}]])
    assert outputs_of(out) == [exit_entry("abc", "def", 0)]


def sleepers(marker):
    """Processes whose command line is MARKER (a sleep with a unique count)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if f.read().replace(b"\0", b" ").strip() == marker.encode():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_background_process_does_not_hold_the_call(httpd, model, me):
    marker = "sleep 987%d" % os.getpid()
    out = turn(httpd, [[shell_call("%s >/dev/null 2>&1 &" % marker, "echo started")],
                       [{"text": "done"}]], headers=me)
    assert outputs_of(out) == [exit_entry(), exit_entry("started\n")]
    # the call ended while its daemon lives on in the container ...
    assert sleepers(marker)
    cid = items_of(out, "shell_call")[0]["environment"]["container_id"]
    status, _, _ = httpd.request("DELETE", "/v1/containers/" + cid, None, me)
    assert status == 200
    # ... until the container ends
    wait_until(lambda: not sleepers(marker), "the daemon to end with its container")


@pytest.fixture
def me(request):
    return {"Authorization": "Bearer sk-" + re.sub(r"\W", "-", request.node.name)}


# ---------------------------------------------------------- one container

def test_python_writes_and_the_shell_reads_through_previous_response_id(httpd, model):
    tools = [TOOL, SHELL]
    first = turn(httpd, [[{"call": "open('/mnt/data/note.txt', 'w').write('from python')"}],
                         [{"text": "saved"}]], tools=tools)
    second = turn(httpd, [[shell_call("cat note.txt")], [{"text": "{{last_output}}"}]],
                  tools=tools, previous_response_id=first["id"])
    assert outputs_of(second) == [exit_entry("from python")]
    assert (items_of(second, "shell_call")[0]["environment"]["container_id"] ==
            calls_of(first)[0]["container_id"])


def test_the_shell_writes_and_python_reads_through_replayed_items(httpd, model):
    tools = [TOOL, SHELL]
    script1 = script_input([[shell_call("echo -n from-shell > made.txt")],
                            [{"text": "made"}]])
    status, _, first = httpd.post("/v1/responses", {
        "model": "m", "tools": tools, "input": [{"role": "user", "content": script1}]})
    assert status == 200, first
    history = [{"role": "user", "content": script1}] + first["output"]
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": tools, "include": ["code_interpreter_call.outputs"],
        "input": history + [{"role": "user", "content": script_input(
            [[{"call": "print(open('/mnt/data/made.txt').read())"}],
             [{"text": "{{last_output}}"}]])}]})
    assert status == 200, second
    assert calls_of(second)[0]["outputs"][0]["logs"] == "from-shell\n"
    # what the upstream got for the replayed shell items: its own function
    # call and the output the model was told
    sent = upstream_inputs(model.requests()[0])
    call, told = sent[1], sent[2]
    assert call == {"type": "function_call", "call_id": items_of(first, "shell_call")[0]["call_id"],
                    "name": "shell", "arguments": json.dumps(
                        {"commands": ["echo -n from-shell > made.txt"], "timeout_ms": None,
                         "max_output_length": None}, separators=(",", ":"))}
    assert told["type"] == "function_call_output" and json.loads(told["output"]) == [
        exit_entry()]


def test_item_references_to_shell_items_bring_the_container(httpd, model):
    script1 = script_input([[shell_call("echo -n kept > ref.txt")], [{"text": "ok"}]])
    status, _, first = httpd.post("/v1/responses", {
        "model": "m", "tools": [SHELL], "input": [{"role": "user", "content": script1}]})
    assert status == 200, first
    refs = [{"type": "item_reference", "id": o["id"]} for o in first["output"]]
    model.reset()
    status, _, second = httpd.post("/v1/responses", {
        "model": "m", "tools": [SHELL],
        "input": [{"role": "user", "content": script1}] + refs + [
            {"role": "user", "content": script_input([[shell_call("cat ref.txt")],
                                                      [{"text": "done"}]])}]})
    assert status == 200, second
    assert outputs_of(second) == [exit_entry("kept")]
    sent = upstream_inputs(model.requests()[0])
    assert [i.get("type") for i in sent[1:4]] == [
        "function_call", "function_call_output", "item_reference"]


def test_tool_choice_shell_forces_the_function(httpd, model):
    turn(httpd, [[shell_call("true")], [{"text": "done"}]], tool_choice={"type": "shell"})
    first, follow = model.requests()
    assert first["json"]["tool_choice"] == {"type": "function", "name": "shell"}
    assert follow["json"]["tool_choice"] == "auto"


# --------------------------------------------------------------- refusals

def refusal(server, tools, **extra):
    status, _, body = server.post("/v1/responses", {
        "model": "m", "tools": tools, "input": "hi", **extra})
    return status, body.get("error")


def test_a_bad_environment_is_refused(httpd, model):
    assert refusal(httpd, [TOOL, {"type": "shell", "environment": {"type": "vm"}}]) == (
        400, {"type": "invalid_request_error", "code": "invalid_value",
              "param": "tools[1].environment.type",
              "message": "Invalid value: 'vm'. Supported values are: 'container_auto', "
                         "'container_reference' and 'local'."})
    assert refusal(httpd, [{"type": "shell", "environment": "container_auto"}]) == (
        400, {"type": "invalid_request_error", "code": "invalid_type",
              "param": "tools[0].environment",
              "message": "Invalid type for 'tools[0].environment': expected an object."})
    assert refusal(httpd, [{"type": "shell",
                            "environment": {"type": "container_reference"}}]) == (
        400, {"type": "invalid_request_error", "code": "invalid_type",
              "param": "tools[0].environment.container_id",
              "message": "Invalid type for 'tools[0].environment.container_id': "
                         "expected a container id."})
    assert refusal(httpd, [SHELL, {"type": "shell", "environment": {
        "type": "container_reference", "container_id": "cntr_x"}}]) == (
        400, {"type": "invalid_request_error", "code": "duplicate_tool",
              "param": "tools[1]", "message": "Only one hosted shell tool may be given."})
    assert model.requests() == []


def test_a_foreign_or_unknown_container_reads_as_code_interpreter_does(httpd, model, me):
    status, _, made = httpd.post("/v1/containers", {"name": "mine"}, headers=me)
    assert status == 200
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "input": "hi", "tools": [{"type": "shell", "environment": {
            "type": "container_reference", "container_id": made["id"]}}]}, headers=OTHER)
    assert status == 404
    assert body["error"] == {"type": "invalid_request_error", "code": "container_not_found",
                             "param": "tools[0].environment.container_id",
                             "message": "Container with id '%s' not found." % made["id"]}
    status, _, code_body = httpd.post("/v1/responses", {
        "model": "m", "input": "hi", "tools": [{"type": "code_interpreter",
                                                 "container": made["id"]}]}, headers=OTHER)
    assert (status, code_body["error"]["message"]) == (404, body["error"]["message"])
    # the owner's own reference works, and names the container it ran in
    out = turn(httpd, [[shell_call("echo mine")], [{"text": "done"}]], headers=me,
               tools=[{"type": "shell", "environment": {"type": "container_reference",
                                                        "container_id": made["id"]}}])
    assert items_of(out, "shell_call")[0]["environment"]["container_id"] == made["id"]
    assert outputs_of(out) == [exit_entry("mine\n")]


def test_two_tools_naming_different_containers_are_refused(httpd, model):
    status, err = refusal(httpd, [{"type": "code_interpreter", "container": "cntr_a"},
                                  {"type": "shell", "environment": {
                                      "type": "container_reference",
                                      "container_id": "cntr_b"}}])
    assert (status, err) == (400, {
        "type": "invalid_request_error", "code": "conflicting_container",
        "param": "tools[1].environment.container_id",
        "message": "The code_interpreter and shell tools of a request share one container; "
                   "give its id once ('tools[1].environment.container_id')."})


def test_a_local_shell_is_the_clients(httpd, model):
    local = {"type": "shell", "environment": {"type": "local"}}
    status, _, out = httpd.post("/v1/responses", body_of([[{"text": "done"}]],
                                                         tools=[TOOL, local]))
    # the client's shell passed to the upstream as it came (this one has no
    # shell of its own, and says so)
    assert model.requests()[0]["json"]["tools"][1] == local
    assert (status, out["error"]["message"]) == (400, "Unsupported tool type: shell")


# ------------------------------------------------------------- streaming

def stream_problems(s):
    """Where the stream S fails the schema: every item, delta and error event
    must validate as it is; a lifecycle event's response may fail only where
    the recorded real stream's does (its upstream-verbatim fields)."""
    check = schema_checker()
    known = recorded_gaps(check)
    return [p for p in schema_problems(s, check)
            if not (p[0] in LIFECYCLE and (p[0], p[1], p[2]) in known)]


def test_the_stream_validates_and_keeps_openais_order(httpd, model):
    commands = ["echo one", "printf 't\\u00e9st' >&2; exit 4"]
    s = SSE(httpd, "/v1/responses", dict(body_of([[shell_call(*commands)],
                                                  [{"text": "done"}]]), stream=True))
    assert s.status == 200
    s.read_all()
    left = stream_problems(s)
    assert not left, show(left)
    kinds = [t for t in shape(s.events())
             if "shell_call" in t or t.startswith("response.output_item")]
    assert kinds[:14] == [
        "response.output_item.added",
        "response.shell_call_command.added", "response.shell_call_command.delta+",
        "response.shell_call_command.done",
        "response.shell_call_command.added", "response.shell_call_command.delta+",
        "response.shell_call_command.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.shell_call_output_content.delta+", "response.shell_call_output_content.done",
        "response.shell_call_output_content.delta+", "response.shell_call_output_content.done",
        "response.output_item.done"]
    data = [e["data"] for e in s.events()]
    done = [d for d in data if d["type"] == "response.shell_call_command.done"]
    assert [(d["output_index"], d["command_index"], d["command"]) for d in done] == [
        (0, 0, commands[0]), (0, 1, commands[1])]
    contents = [d for d in data if d["type"].startswith("response.shell_call_output_content")]
    assert [(d["type"], d["output_index"], d["command_index"]) for d in contents] == [
        ("response.shell_call_output_content.delta", 1, 0),
        ("response.shell_call_output_content.done", 1, 0),
        ("response.shell_call_output_content.delta", 1, 1),
        ("response.shell_call_output_content.done", 1, 1)]
    assert contents[2]["delta"] == {"stdout": "", "stderr": "t\u00e9st"}
    assert contents[3]["output"] == [exit_entry("", "t\u00e9st", 4)]
    final = data[-1]
    assert final["type"] == "response.completed"
    call, result, msg = final["response"]["output"]
    assert (call["type"], result["type"], msg["type"]) == (
        "shell_call", "shell_call_output", "message")
    assert result["output"] == [exit_entry("one\n"), exit_entry("", "t\u00e9st", 4)]
    # the message after the call's output item
    texts = [d for d in data if d["type"] == "response.output_text.done"]
    assert texts[0]["output_index"] == 2


def test_command_deltas_reach_the_client_before_the_call_runs(httpd, model):
    """The fake writes each arguments delta only once the client has seen the
    previous one (stream_gate): a module that held the commands until the
    round was in would never get the next delta."""
    model.reset()
    commands = ["echo 'a fairly long first command to split into pieces'",
                "echo second && echo 'and more words to stream'"]
    action = shell_call(*commands, stream_gate=True)
    arguments = action["raw_call"]["arguments"]
    # the arguments deltas the fake writes, and how much of the commands the
    # client has seen once each has been relayed (plain ASCII: one byte of
    # the arguments is one character of a command)
    pieces = fake_model._argument_chunks(arguments)
    inside = [False] * len(arguments)
    at = 0
    for c in commands:
        at = arguments.index(json.dumps(c), at) + 1
        inside[at:at + len(c)] = [True] * len(c)
        at += len(c)
    upto, visible = 0, []
    for piece in pieces:
        upto += len(piece)
        visible.append(sum(inside[:upto]))
    s = SSE(httpd, "/v1/responses", dict(body_of([[action], [{"text": "done"}]]),
                                         stream=True))
    assert s.status == 200
    deltas = []
    while True:
        rec = s.next_record()
        if rec is None:
            break
        if rec["kind"] != "event":
            continue
        if rec["event"] == "response.shell_call_command.delta":
            deltas.append((rec["data"]["command_index"], rec["data"]["delta"]))
            seen = sum(len(d) for _, d in deltas)
            model._call("POST", "/_gate", {"acked": sum(1 for v in visible if v <= seen)})
        if rec["event"] == "response.output_item.added" and \
                rec["data"]["item"]["type"] == "shell_call_output":
            # the call ran only after every command was streamed
            assert "".join(d for i, d in deltas if i == 0) == commands[0]
            assert "".join(d for i, d in deltas if i == 1) == commands[1]
    s.close()
    g = gate(model)
    assert g["timeouts"] == 0, g
    assert g["sent"] == g["acked"] == len(pieces)
    assert len(deltas) > 2


# ------------------------------------------------------------- the audit

def test_the_audit_line_names_commands_and_exit_codes(model):
    model.reset()
    server = Httpd("audit-shell", "")
    path = os.path.join(server.root, "logs", "audit.jsonl")
    server.write_conf(base_conf(model.port, 'CodeInterpreterAuditLog "%s"' % path))
    server.start()
    try:
        out = turn(server, [[shell_call("echo hi", "exit 5")], [{"text": "done"}]])
        lines = wait_until(lambda: os.path.exists(path) and open(path).read().splitlines(),
                           "the audit line")
    finally:
        server.stop()
    (line,) = [json.loads(l) for l in lines]
    assert line["call_id"] == items_of(out, "shell_call")[0]["id"]
    assert line["kind"] == "commands"
    assert line["commands"] == ["echo hi", "exit 5"]
    assert line["exit_codes"] == [0, 5]
    assert line["output_bytes"] == 3
    assert "code" not in line


# ------------------------------------------------------------ the clients

def test_the_node_sdk_parses_shell_items_that_match_the_schema(httpd, model, node_modules):
    from test_node_sdk import NODE, NODE_DIR, SdkRun
    import subprocess
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % httpd.port,
               CI_SPEC_DIR=SPEC_DIR, TOOLS=json.dumps([TOOL, SHELL]))
    rounds = [[shell_call("echo node")], [{"text": "done"}]]
    run = SdkRun(subprocess.run([NODE, os.path.join(NODE_DIR, "sdk_json.mjs"),
                                 json.dumps(rounds)], cwd=NODE_DIR, env=env,
                                capture_output=True, text=True, timeout=120))
    assert run.returncode == 0, str(run)
    assert [i["type"] for i in run.response["output"]] == [
        "shell_call", "shell_call_output", "message"]
    assert run.response["output"][1]["output"] == [exit_entry("node\n")]
    skipped = run.marked("SKIP-SCHEMA:")
    require(not skipped, "the OpenAPI document is absent, the items were not validated: %s"
            % (skipped or [""])[0])
    count_schema_checks(len(run.marked("SCHEMA-OK:")))
    assert run.marked("SCHEMA-OK:") == [
        "output[0] FunctionShellCall", "output[1] FunctionShellCallOutput",
        "Response (upstream-verbatim user/cache_write_tokens normalised)"]


def test_the_agents_sdk_hosted_shell_replays_its_history(httpd, model, node_modules):
    """@openai/agents' shellTool({environment: {type: "container_auto"}}) for
    two turns, the second on the first's whole history: the SDK takes our
    shell items, replays them, and the second turn's cat finds the file the
    first turn's python wrote."""
    from test_agents_sdk import run_agents, succeeded
    turn1 = [[{"call": "open('/mnt/data/agent.txt', 'w').write('written by python')"}],
             [shell_call("cat agent.txt")], [{"text": "read it"}]]
    turn2 = [[shell_call("cat agent.txt; echo; ls")], [{"text": "{{last_output}}"}]]
    report = run_agents(httpd, "--shell", turn1=turn1, turn2=turn2)
    succeeded(report)
    first, second = report["turns"]
    # the SDK took our shell items as a hosted call and its output
    assert [i["type"] for i in first["newItems"]] == [
        "tool_call_item", "tool_call_item", "tool_call_output_item", "message_output_item"]
    assert [i["rawItem"]["type"] for i in first["newItems"]] == [
        "hosted_tool_call", "shell_call", "shell_call_output", "message"]
    assert json.loads(first["newItems"][2]["output"]) == [
        {"stdout": "written by python", "stderr": "", "outcome": {"type": "exit",
                                                                  "exitCode": 0}}]
    # what the SDK sent on turn 2: our items, replayed as it keeps them
    replayed = [i for i in report["sent"][-1]["input"] if isinstance(i, dict)]
    assert {"shell_call", "shell_call_output"} <= {i.get("type") for i in replayed}
    # the upstream got them as its own function call and output
    sent = upstream_inputs(model.requests()[-2])
    assert "shell_call" not in {i.get("type") for i in sent}
    told = json.loads(upstream_inputs(model.requests()[-1])[-1]["output"])
    assert told == [exit_entry("written by python\nagent.txt\n")]


# ------------------------------------------- a container like any other

def test_an_expired_container_reference_is_refused_as_code_interpreters_is(httpd, model):
    from test_containers import api, make_container
    c = make_container(httpd, path="/brief/v1/containers")
    tool = {"type": "shell", "environment": {"type": "container_reference",
                                             "container_id": c["id"]}}
    status, _, out = httpd.post("/brief/v1/responses", body_of(
        [[shell_call("echo -n x > kept.txt")], [{"text": "set"}]], tools=[tool]))
    assert status == 200, out
    wait_until(lambda: not httpd.sandbox_processes(), "its sandbox to be destroyed")
    assert api(httpd, "GET", "/brief/v1/containers/" + c["id"])[1]["status"] == "expired"
    status, _, body = httpd.post("/brief/v1/responses", body_of([[{"text": "never"}]],
                                                                tools=[tool]))
    assert (status, body["error"]) == (400, {
        "message": "Container with id '%s' has expired and can no longer be used; use "
                   "a new container." % c["id"],
        "type": "invalid_request_error", "param": "tools[0].environment.container_id",
        "code": "container_expired"})


def test_the_shells_container_is_listed_and_its_files_served(httpd, model, me):
    out = turn(httpd, [[shell_call("printf 'a,b\\n1,2\\n' > t.csv")], [{"text": "done"}]],
               headers=me)
    cid = items_of(out, "shell_call")[0]["environment"]["container_id"]
    status, _, listing = httpd.request("GET", "/v1/containers", None, me)
    assert status == 200
    assert [c["id"] for c in json.loads(listing)["data"]] == [cid]
    status, _, files = httpd.request("GET", "/v1/containers/%s/files" % cid, None, me)
    [f] = json.loads(files)["data"]
    assert (f["path"], f["bytes"], f["source"]) == ("/mnt/data/t.csv", 8, "assistant")
    status, _, content = httpd.request(
        "GET", "/v1/containers/%s/files/%s/content" % (cid, f["id"]), None, me)
    assert (status, content) == (200, b"a,b\n1,2\n")


def test_max_tool_calls_counts_shell_calls(httpd, model):
    out = turn(httpd, [[shell_call("echo first"), shell_call("echo second")],
                       [{"text": "done"}]], max_tool_calls=1)
    first, second = (o["output"] for o in items_of(out, "shell_call_output"))
    assert first == [exit_entry("first\n")]
    assert second == [exit_entry("", "Not run: the request's max_tool_calls limit was "
                                     "reached.", 1)]
    # the output items follow their calls
    assert [o["type"] for o in out["output"]] == [
        "shell_call", "shell_call_output", "shell_call", "shell_call_output", "message"]
