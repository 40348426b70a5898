"""CodeInterpreterAuditLog: one JSON line per execution, to a file or a pipe,
never holding a secret."""
import json
import os
import time

import pytest

from conftest import TOOL, Httpd, base_conf, script_input, wait_until

SECRET = "sk-audit-secret-0123456789"


def start(model, name, target):
    server = Httpd(name, "")
    server.write_conf(base_conf(model.port, 'CodeInterpreterAuditLog "%s"' % target))
    return server.start()


def read_lines(path):
    deadline = time.time() + 10
    while not (os.path.exists(path) and open(path).read().count("\n") >= 2):
        assert time.time() < deadline, "no audit lines in %s" % path
        time.sleep(0.05)
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("kind", ["file", "pipe"])
def test_one_line_per_execution(model, kind):
    model.reset()
    name = "audit-" + kind
    root = Httpd(name, "").root
    path = os.path.join(root, "logs", "audit.jsonl")
    target = path if kind == "file" else "|/bin/cat >> " + path
    server = start(model, name, target)
    try:
        assert processes_of(server.root)     # (what the test below waits to see go)
        status, _, body = server.post("/v1/responses", {
            "model": "m", "tools": [TOOL],
            "input": script_input([[{"call": "print('hi')"}, {"call": "1/0"}],
                                   [{"text": "done"}]])},
            headers={"Authorization": "Bearer " + SECRET})
        assert status == 200
        lines = read_lines(path)
    finally:
        server.stop()
    assert len(lines) == 2
    first, second = lines
    calls = [item for item in body["output"] if item["type"] == "code_interpreter_call"]
    assert [l["call_id"] for l in lines] == [c["id"] for c in calls]
    assert first["code"] == "print('hi')"
    assert first["status"] == "completed"
    assert first["output_bytes"] == 3
    assert first["tool"] == "local"
    assert first["container_id"] == calls[0]["container_id"]
    assert first["request_id"] and first["request_id"] == second["request_id"]
    assert first["duration_ms"] >= 0
    assert second["code"] == "1/0" and second["status"] == "completed"
    assert (first["outcome"], second["outcome"]) == ("completed", "error")
    assert first["event"] == second["event"] == "execution"
    assert set(first) == {"time", "request_id", "client", "event", "tool", "container_id",
                          "owner", "call_id", "code", "output_bytes", "images",
                          "status", "outcome", "failure", "duration_ms"}
    # the caller, as a keyed hash (test_owner.py checks the hash itself)
    assert first["owner"].startswith("own_") and SECRET not in first["owner"]
    with open(path) as f:
        assert SECRET not in f.read()


def test_unwritable_audit_log_fails_start(model):
    server = Httpd("audit-bad", "")
    server.write_conf(base_conf(model.port,
                                'CodeInterpreterAuditLog "/nonexistent/dir/audit.log"'))
    # httpd detaches before its post-configuration phase: the refusal shows
    # in the error log, and no server is left running.
    server.ctl("start", check=False)
    message = ("CI0502: CodeInterpreterAuditLog '/nonexistent/dir/audit.log': the file "
               "cannot be opened for appending")
    wait_until(lambda: message in server.log(), "the refusal in the error log")
    wait_until(lambda: not processes_of(server.root), "httpd to exit")
    assert not os.path.exists(os.path.join(server.root, "httpd.pid"))


def processes_of(root):
    """Processes whose command line names the server root ROOT."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if root.encode() in args:
                found.append(int(name))
    return found
