"""Containers of a sandbox tool that a reload removes (or declares anew):
they keep their records, expire with their idle time, and their sandboxes
are ended - an E2B one deleted with the key it was made with, a local one
by the supervisor - whatever the configuration became. A turn that names
one is told; a reload that declares the tool again keeps them usable.
Counted from the fake E2B's live list and deletes, and from /proc."""
import json
import os
import threading

import pytest

from conftest import (FakeE2B, Httpd, base_conf, live_processes, script_input,
                      start_helper, wait_until)
from test_loop import calls_of

KEY_A = "e2b_removed_tool_key_a_0123456789"
KEY_B = "e2b_removed_tool_key_b_9876543210"
ME = {"Authorization": "Bearer sk-removed-tool"}
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
OUTPUTS = "code_interpreter_call.outputs"


@pytest.fixture(scope="module")
def e2b():
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY_A, "--api-key", KEY_B)
    yield FakeE2B(proc, port)
    proc.kill()
    proc.wait()


def tools_conf(model_port, e2b_port, key_file, idle="3s"):
    """Two tools with their own locations: E2B's "cloud" and a local
    "nearby", both idle IDLE."""
    return """
CodeInterpreterSandbox cloud provider=e2b api_key=file:{key} api_base=http://127.0.0.1:{e2b} \
    sandbox_url=http://127.0.0.1:{e2b} idle={idle}
CodeInterpreterSandbox nearby provider=local idle={idle}
<Location /cloud/v1/responses>
  ProxyPass http://127.0.0.1:{model}/v1/responses
  CodeInterpreter cloud
</Location>
<Location /nearby/v1/responses>
  ProxyPass http://127.0.0.1:{model}/v1/responses
  CodeInterpreter nearby
</Location>
""".format(key=key_file, e2b=e2b_port, model=model_port, idle=idle)


@pytest.fixture
def server(model, e2b, request):
    server = Httpd("removed-" + request.node.name[5:25], "", fakes=[e2b])
    os.makedirs(server.root, exist_ok=True)
    server.key_file = os.path.join(server.root, "e2b.key")
    with open(server.key_file, "w") as f:
        f.write(KEY_A + "\n")
    server.with_tools = lambda idle="3s": server.write_conf(base_conf(
        model.port, tools_conf(model.port, e2b.port, server.key_file, idle)))
    server.without_tools = lambda: server.write_conf(base_conf(model.port))
    e2b.reset()
    # The service never ends a sandbox by itself here: whatever ends, the
    # module ended.
    e2b.control(timeouts_ignored=True)
    server.with_tools()
    server.start()
    yield server
    server.delete_containers()    # (a removed tool's too: with its own key)
    server.stop()


def turn(server, path, rounds, **extra):
    body = {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}
    body.update(extra)
    status, _, out = server.post(path, body, headers=ME)
    assert status == 200, out
    return out


def sandboxes_now(server):
    return server.sandbox_processes()


def test_a_removed_tools_containers_end_with_their_idle_time(server, model, e2b):
    before = sandboxes_now(server)
    cloud = turn(server, "/cloud/v1/responses", [[{"call": "x = 1"}], [{"text": "set"}]])
    near = turn(server, "/nearby/v1/responses", [[{"call": "y = 2"}], [{"text": "set"}]])
    [sandbox] = e2b.state()["live"]
    local = sandboxes_now(server) - before
    assert len(local) == 1, local                  # the local container's bwrap
    # the key rotates, then a reload removes both tools
    with open(server.key_file, "w") as f:
        f.write(KEY_B + "\n")
    server.graceful()
    server.without_tools()
    server.graceful()
    # Their idle time passes: the E2B sandbox is deleted, with the key it
    # was made with, and the local sandbox is gone from the process table.
    state = e2b.until(lambda st: not st["live"], "the removed tool's E2B sandbox to be "
                      "deleted")
    assert [(d["id"], d["api_key"], d["status"]) for d in state["deletes"]] == [
        (sandbox, KEY_A, 204)]
    assert state["expired"] == 0
    wait_until(lambda: not (local & live_processes()), "the local container's sandbox "
               "to end")
    # the records stay: the containers are listed as expired
    status, _, listed = server.request("GET", "/v1/containers", headers=ME)
    assert status == 200
    seen = {c["id"]: c["status"] for c in json.loads(listed)["data"]}
    assert seen == {calls_of(cloud)[0]["container_id"]: "expired",
                    calls_of(near)[0]["container_id"]: "expired"}


def test_a_turn_on_a_removed_tools_container_is_told(server, model, e2b):
    first = turn(server, "/cloud/v1/responses", [[{"call": "x = 1"}], [{"text": "set"}]])
    old = calls_of(first)[0]["container_id"]
    server.without_tools()
    server.graceful()
    model.reset()
    # auto, chained: a new container, and the model is told why
    second = turn(server, "/v1/responses", [[{"call": "print(x)"}],
                                            [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert calls_of(second)[0]["container_id"] != old
    assert calls_of(second)[0]["outputs"][0]["logs"].endswith(
        "NameError: name 'x' is not defined\n")
    told = [i["output"] for i in model.requests()[1]["json"]["input"]
            if i.get("type") == "function_call_output"][-1]
    assert told.startswith(
        "Note: container %s of the earlier turns runs on a sandbox tool this server no "
        "longer serves. This code runs in a new container: variables, imports and "
        "files from before are gone and must be recreated.\n" % old)
    # named explicitly: refused before anything goes upstream
    status, _, out = server.post("/v1/responses", {
        "model": "m", "tools": [{"type": "code_interpreter", "container": old}],
        "input": script_input([[{"text": "never"}]])}, headers=ME)
    assert (status, out) == (400, {"error": {
        "message": "Container with id '%s' runs on a sandbox tool this server no longer "
                   "serves (it was removed or changed); use a new container." % old,
        "type": "invalid_request_error", "param": "tools[0].container",
        "code": "container_unavailable"}})
    # its files cannot be reached either
    status, _, out = server.post("/v1/containers/%s/files" % old, {"file_id": "file-x"},
                                 headers=ME)
    assert (status, out["error"]["code"]) == (409, "container_unavailable")


def test_a_container_made_across_the_reload_that_removed_its_tool_is_deleted(
        server, model, e2b):
    """A turn accepted before the reload that rotates the key and removes the
    tool makes its container's sandbox after it (the fake holds the create):
    it finishes with the configuration it began with, and the sandbox is
    deleted at its idle expiry with the key it was made with, also when the
    conversation's next turn (on a new child) moves to a new container."""
    e2b.control(hold_create="reload")
    first = {}
    t = threading.Thread(target=lambda: first.setdefault("out", turn(
        server, "/cloud/v1/responses", [[{"call": "x = 1"}], [{"text": "set"}]])))
    t.start()
    e2b.until(lambda st: st["held"], "the create to reach the service")
    with open(server.key_file, "w") as f:
        f.write(KEY_B + "\n")
    server.without_tools()
    server.graceful()
    e2b.release("reload")
    t.join()
    [create] = e2b.state()["creates"]
    assert (create["api_key"], create["status"]) == (KEY_A, 201)
    old = calls_of(first["out"])[0]["container_id"]
    # the next turn, on a new child: a new (local) container, and the model
    # is told why
    second = turn(server, "/v1/responses", [[{"call": "print(2)"}],
                                            [{"text": "{{last_output}}"}]],
                  previous_response_id=first["out"]["id"])
    assert calls_of(second)[0]["container_id"] != old
    # the old container's idle time passes: its sandbox is deleted with KEY_A
    state = e2b.until(lambda st: not st["live"], "the sandbox made across the reload "
                      "to be deleted")
    assert [(d["id"], d["api_key"], d["status"]) for d in state["deletes"]] == [
        (create["id"], KEY_A, 204)]
    status, _, listed = server.request("GET", "/v1/containers", headers=ME)
    assert {c["id"]: c["status"] for c in json.loads(listed)["data"]}[old] == "expired"


def test_a_tool_declared_again_keeps_its_containers(server, model, e2b):
    server.with_tools(idle="10m")
    server.graceful()
    first = turn(server, "/cloud/v1/responses", [[{"call": "x = 41"}], [{"text": "set"}]])
    server.without_tools()
    server.graceful()
    server.with_tools(idle="10m")
    server.graceful()
    second = turn(server, "/cloud/v1/responses", [[{"call": "print(x + 1)"}],
                                                  [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert calls_of(second)[0]["container_id"] == calls_of(first)[0]["container_id"]
    assert calls_of(second)[0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert len(e2b.state()["creates"]) == 1
