"""The Containers API through the official OpenAI Node SDK (client.containers):
create, retrieve, list with the SDK's auto-pagination, delete, an unknown
id; every answer against the published OpenAPI document; then a two-turn
conversation through client.responses.create in a container the client made
and names in the tool, the second turn using what the first defined.
Then container files through client.containers.files (list, retrieve,
content, delete, create from toFile), from test/node/container_files.mjs.

test/node/containers_api.mjs drives the SDK (installed as for
test_node_sdk.py). It calls with a key of its own, so the listings hold only
the containers it made; the key is registered with the server's callers so
that the after-test check deletes what it leaves.
"""
import json
import os
import re

from conftest import SPEC_DIR, count_schema_checks, require
from test_loop import calls_of, sandboxes_started, upstream_inputs
from test_node_sdk import clients, node_script, steps_report  # noqa: F401 (a fixture)

OUTPUTS = "code_interpreter_call.outputs"
KEY = "sk-node-containers-0123"
UNKNOWN = "cntr_" + "0" * 48
TURN1 = [[{"call": "x = 41"}], [{"text": "set"}]]
TURN2 = [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]]
LIST = "/v1/containers?limit=2"


def run_containers(httpd, clients):
    """Run containers_api.mjs with client set CLIENTS; returns its report."""
    httpd.callers.add("Bearer " + KEY)
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % httpd.port, API_KEY=KEY,
               CI_SPEC_DIR=SPEC_DIR)
    proc = node_script(clients, "containers_api.mjs", json.dumps(TURN1), json.dumps(TURN2),
                       env=env)
    return steps_report(proc)


def container(cid, name, minutes=20, status="running"):
    """A container object as the API shows it, but its two timestamps."""
    return {"id": cid, "object": "container", "name": name, "status": status,
            "expires_after": {"anchor": "last_active_at", "minutes": minutes},
            "memory_limit": "1g", "network_policy": {"type": "disabled"}}


def untimed(c):
    """C without created_at and last_active_at (checked on their own)."""
    assert isinstance(c["created_at"], int) and isinstance(c["last_active_at"], int), c
    assert c["last_active_at"] >= c["created_at"], c
    return {k: v for k, v in c.items() if k not in ("created_at", "last_active_at")}


def exchanges(report, method, prefix):
    return [w for w in report["wire"] if w["method"] == method and w["path"].startswith(prefix)]


def test_containers_api_through_the_sdk(httpd, model, clients):
    report = run_containers(httpd, clients)
    steps = report["steps"]

    # Nothing yet: the iterator yields nothing, from one request.
    assert steps["empty"] == []
    empty = report["wire"][0]
    assert (empty["method"], empty["path"], empty["status"]) == ("GET", LIST, 200)
    assert empty["body"] == {"object": "list", "data": [], "first_id": None,
                             "last_id": None, "has_more": False}

    # Three made, as asked.
    first, second, third = steps["created"]
    ids = [first["id"], second["id"], third["id"]]
    for cid in ids:
        assert re.fullmatch(r"cntr_[0-9a-f]{48}", cid), cid
    assert len(set(ids)) == 3
    assert [untimed(c) for c in steps["created"]] == [
        container(ids[0], "first", minutes=5), container(ids[1], "second"),
        container(ids[2], "third")]
    for c in steps["created"]:
        assert c["last_active_at"] == c["created_at"]
    made = exchanges(report, "POST", "/v1/containers")
    assert [w["body"] for w in made] == steps["created"]
    assert [w["status"] for w in made] == [200, 200, 200]

    # Read back as made (reading it counts as activity).
    assert untimed(steps["retrieved"]) == untimed(first)
    assert steps["retrieved"]["created_at"] == first["created_at"]

    # Auto-pagination, two a page: every container exactly once, newest
    # first, the second page asked for after the last id of the first.
    assert [c["id"] for c in steps["listed"]] == ids[::-1]
    assert [untimed(c) for c in steps["listed"]] == [
        container(ids[2], "third"), container(ids[1], "second"),
        container(ids[0], "first", minutes=5)]
    pages = exchanges(report, "GET", "/v1/containers?")[1:3]
    assert [w["path"] for w in pages] == [LIST, LIST + "&after=" + ids[1]]
    assert [(w["status"], [c["id"] for c in w["body"]["data"]], w["body"]["first_id"],
             w["body"]["last_id"], w["body"]["has_more"]) for w in pages] == [
        (200, [ids[2], ids[1]], ids[2], ids[1], True),
        (200, [ids[0]], ids[0], ids[0], False)]
    assert all(w["body"]["object"] == "list" for w in pages)

    # Two turns in the container "first", named in the tool: the second turn
    # sees what the first defined, though it carries none of its history.
    turn1, turn2 = steps["turns"]
    tool = {"type": "code_interpreter", "container": ids[0]}
    for resp, code, outputs, text in ((turn1, "x = 41", [], "set"),
                                      (turn2, "print(x + 1)",
                                       [{"type": "logs", "logs": "42\n"}], "42\n")):
        assert resp["status"] == "completed"
        assert [o["type"] for o in resp["output"]] == ["code_interpreter_call", "message"]
        [call] = calls_of(resp)
        assert (call["status"], call["code"], call["container_id"], call["outputs"]) == (
            "completed", code, ids[0], outputs)
        assert call["id"].startswith("ci_")
        assert resp["output_text"] == text
        assert resp["tools"] == [tool]
    seen = model.requests()
    assert len(seen) == 4, [r["json"] for r in seen]
    assert [len(upstream_inputs(r)) for r in seen] == [1, 3, 1, 3]
    assert upstream_inputs(seen[2]) == [
        {"role": "user", "content": "SCRIPT: " + json.dumps(TURN2)}]
    assert [json.loads(i["arguments"])["code"] for r in seen for i in upstream_inputs(r)
            if i.get("type") == "function_call"] == ["x = 41", "print(x + 1)"]
    assert sandboxes_started(httpd) == 1
    sent = exchanges(report, "POST", "/v1/responses")
    assert len(sent) == 2 and all(w["status"] == 200 for w in sent)

    # Deleted: the answer says so, and the container reads as deleted.
    [gone] = exchanges(report, "DELETE", "/v1/containers/")
    assert (gone["path"], gone["status"], gone["body"]) == (
        "/v1/containers/" + ids[2], 200,
        {"id": ids[2], "object": "container.deleted", "deleted": True})
    assert steps["deleted"]["answer"] == gone["body"]
    after = steps["deleted"]["after"]
    assert untimed(after) == container(ids[2], "third", status="deleted")
    assert after["created_at"] == third["created_at"]
    # ... and is listed no more.
    assert [c["id"] for c in steps["remaining"]] == [ids[1], ids[0]]
    last = exchanges(report, "GET", "/v1/containers?")[-1]
    assert (last["path"], last["body"]["has_more"]) == (LIST, False)

    # An id never made: the SDK's NotFoundError, with OpenAI's error body.
    assert steps["unknown"] == {
        "name": "NotFoundError", "notFound": True, "status": 404,
        "error": {"message": "Container with id '%s' not found." % UNKNOWN,
                  "type": "invalid_request_error", "param": None,
                  "code": "container_not_found"}}
    assert report["wire"][-1]["path"] == "/v1/containers/" + UNKNOWN
    assert len(report["wire"]) == 13


# The one deviation from the published schema: an empty listing has
# "first_id": null and "last_id": null (there is no first or last id), where
# ContainerListResource requires strings. Clients of OpenAI's own list
# endpoints have had to accept missing ids too (64bit/async-openai#496 made
# them optional); the SDK's paginator reads only data and has_more.
EMPTY_LIST_ERRORS = [("/first_id", "type", "must be string"),
                     ("/last_id", "type", "must be string")]


def test_containers_api_answers_match_the_openapi_schema(httpd, model, clients):
    report = run_containers(httpd, clients)
    schema = report["schema"]
    require("skipped" not in schema, "the OpenAPI document is absent, the answers were "
            "not validated: %s" % schema.get("skipped"))
    checked = schema["checked"]
    count_schema_checks(len(checked))
    ids = [c["id"] for c in report["steps"]["created"]]
    assert [(c["what"], c["schema"]) for c in checked] == [
        ("GET " + LIST, "ContainerListResource"),
        ("POST /v1/containers", "ContainerResource"),
        ("POST /v1/containers", "ContainerResource"),
        ("POST /v1/containers", "ContainerResource"),
        ("GET /v1/containers/" + ids[0], "ContainerResource"),
        ("GET " + LIST, "ContainerListResource"),
        ("GET %s&after=%s" % (LIST, ids[1]), "ContainerListResource"),
        ("GET /v1/containers/" + ids[2], "ContainerResource"),
        ("GET " + LIST, "ContainerListResource")]
    empty, rest = checked[0], checked[1:]
    assert [(e["instancePath"], e["keyword"], e["message"]) for e in empty["errors"]] == \
        EMPTY_LIST_ERRORS
    failed = [c for c in rest if not c["ok"]]
    assert not failed, "answers that do not match the OpenAPI schema:\n" + json.dumps(
        failed, indent=1)


# ------------------------------------------------------------ container files

FILES_KEY = "sk-node-container-files-0123"
FILES_OTHER = "sk-node-container-files-other"
WRITE_FILES = [[{"call": "open('a.csv', 'w').write('x,y\\n1,2\\n')\n"
                          "open('b.bin', 'wb').write(bytes(range(256)))\n"
                          "open('c.txt', 'w').write('third')"}],
               [{"text": "written"}]]


def test_container_files_through_the_sdk(httpd, model, clients):
    import base64
    httpd.callers.update({"Bearer " + FILES_KEY, "Bearer " + FILES_OTHER})
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % httpd.port,
               API_KEY=FILES_KEY, OTHER_KEY=FILES_OTHER, CI_SPEC_DIR=SPEC_DIR)
    proc = node_script(clients, "container_files.mjs", json.dumps(WRITE_FILES), env=env)
    detail = "exit %d\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), detail
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["error"] is None, json.dumps(report["error"], indent=1)
    cid, steps = report["container"], report["steps"]
    assert steps["turn"] == "completed"
    listed = steps["listed"]
    assert sorted(f["path"] for f in listed) == [
        "/mnt/data/a.csv", "/mnt/data/b.bin", "/mnt/data/c.txt"]
    for f in listed:
        assert (f["object"], f["container_id"], f["source"]) == (
            "container.file", cid, "assistant")
        assert re.fullmatch(r"cfile_[0-9a-f]{32}", f["id"]), f["id"]
    assert steps["retrieved"] == listed
    # auto-pagination: two pages, the second after the first's last id
    pages = [w["path"] for w in report["wire"]
             if w["method"] == "GET" and w["path"].startswith("/v1/containers/%s/files?" % cid)]
    assert len(pages) == 2 and ("after=" + listed[1]["id"]) in pages[1]
    got = {p: (d["type"], d["length"], base64.b64decode(d["b64"]))
           for p, d in steps["downloaded"].items()}
    assert got == {"/mnt/data/a.csv": ("text/csv", "8", b"x,y\n1,2\n"),
                   "/mnt/data/b.bin": ("application/octet-stream", "256", bytes(range(256))),
                   "/mnt/data/c.txt": ("text/plain", "5", b"third")}
    gone = listed[0]["id"]
    assert steps["deleted"]["after"] == {
        "name": "NotFoundError", "status": 404,
        "error": {"message": "Container file with id '%s' not found." % gone,
                  "type": "invalid_request_error", "param": None,
                  "code": "container_file_not_found"}}
    assert [w["status"] for w in report["wire"] if w["method"] == "DELETE"] == [200]
    assert steps["foreign"] == {
        "name": "NotFoundError", "status": 404,
        "error": {"message": "Container with id '%s' not found." % cid,
                  "type": "invalid_request_error", "param": None,
                  "code": "container_not_found"}}
    schema = report["schema"]
    require("skipped" not in schema, "the OpenAPI document is absent: %s" %
            schema.get("skipped"))
    assert len(schema["checked"]) == 2 + 3 + 1 and all(c["ok"] for c in schema["checked"]), \
        json.dumps(schema["checked"], indent=1)
    count_schema_checks(len(schema["checked"]))
    up = steps["uploaded"]
    assert (up["object"], up["path"], up["bytes"], up["source"], up["container_id"]) == (
        "container.file", "/mnt/data/up.csv", 15, "user", cid)
    assert steps["uploaded_back"] is True
