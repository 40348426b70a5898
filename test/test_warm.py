"""The warm pool: local sandboxes started in advance, handed to one request
each, with preload= modules already imported."""
import time

import pytest

from conftest import TOOL, Httpd, base_conf, script_input


@pytest.fixture(scope="module")
def warm(model):
    # One child process, so the pool holds exactly warm=2 sandboxes.
    extra = """
StartServers 1
ServerLimit 1
ThreadsPerChild 25
MinSpareThreads 1
MaxSpareThreads 25
CodeInterpreterSandbox local provider=local warm=2 preload=json,statistics
<Location /server-status>
  SetHandler server-status
</Location>
"""
    server = Httpd("warm", base_conf(model.port, extra)).start()
    yield server
    server.stop()


def run(server, code):
    status, _, body = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])})
    assert status == 200
    return body["output"][0]


def counts(server):
    _, _, body = server.request("GET", "/server-status?auto")
    lines = dict(l.split(": ", 1) for l in body.decode().splitlines() if ": " in l)
    return (int(lines["CodeInterpreterLiveSandboxes"]),
            int(lines["CodeInterpreterWarmSandboxes"]))


def wait_counts(server, want):
    """Until (live, warm) is WANT; warm sandboxes count toward the live total."""
    deadline = time.time() + 20
    while counts(server) != want:
        assert time.time() < deadline, "live, warm stayed at %s" % (counts(server),)
        time.sleep(0.05)


def wait_ready(server, n):
    """Until N sandboxes are live and all of them warm (ready, not handed out)."""
    wait_counts(server, (n, n))


def test_warm_sandbox_has_preloaded_modules(warm, model):
    wait_ready(warm, 2)
    warm.mark()
    call = run(warm, "print(json.dumps({'a': statistics.mean([1, 2, 3])}))")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": '{"a": 2}\n'}]
    # A warm sandbox became the request's container, which outlives it; the
    # pool refilled to its size beside it.
    log = warm.log_since_mark()
    assert "CI0620: warm sandbox " in log
    assert "became container %s's" % call["container_id"] in log
    wait_counts(warm, (3, 2))


def test_warm_sandbox_serves_one_request_only(warm, model):
    wait_ready(warm, 2)
    first = run(warm, "secret = 'first request'\nprint(secret)")
    second = run(warm, "print(secret)")
    assert first["outputs"] == [{"type": "logs", "logs": "first request\n"}]
    assert second["container_id"] != first["container_id"]
    assert "NameError: name 'secret' is not defined" in second["outputs"][0]["logs"]
    # Taken sandboxes are the two containers now; the pool refills to its size.
    wait_counts(warm, (4, 2))
