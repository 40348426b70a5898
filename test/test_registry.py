"""The server-wide registry: CodeInterpreterMaxSandboxes across child
processes, and the code interpreter section of server-status."""
import re
import threading
import time

import pytest

from conftest import ANONYMOUS, TOOL, Httpd, base_conf, script_input


@pytest.fixture(scope="module")
def capped(model):
    # prefork with several children: the cap must hold across processes.
    extra = """
StartServers 4
MinSpareServers 4
MaxSpareServers 8
CodeInterpreterMaxSandboxes 1
# the cap's mechanics: an idle container may go at once, nobody waits
CodeInterpreterEvictionGrace 0
CodeInterpreterCapacityWait 0
<Location /server-status>
  SetHandler server-status
</Location>
"""
    server = Httpd("registry", base_conf(model.port, extra), mpm="prefork").start()
    yield server
    server.stop()


def status_lines(server):
    status, _, body = server.request("GET", "/server-status?auto")
    assert status == 200
    return dict(line.split(": ", 1) for line in body.decode().splitlines() if ": " in line)


def one_call(server, code, results, key, headers=None):
    results[key] = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])},
        headers=headers)


def test_cap_holds_for_requests_without_an_owner(capped, model):
    """A request's own sandbox (no owner, no container) holds a slot of the
    server-wide registry while the request runs, and gives it back."""
    results = {}
    slow = threading.Thread(target=one_call, args=(capped, "import time; time.sleep(3)",
                                                   results, "slow", ANONYMOUS))
    slow.start()
    deadline = time.time() + 10
    while status_lines(capped)["CodeInterpreterLiveSandboxes"] != "1":
        assert time.time() < deadline, "the first sandbox never became live"
        time.sleep(0.05)
    one_call(capped, "print(1)", results, "refused", ANONYMOUS)
    slow.join()
    status, headers, body = results["refused"]
    assert (status, body["error"]["code"]) == (503, "sandbox_capacity")
    assert results["slow"][0] == 200
    deadline = time.time() + 10
    while status_lines(capped)["CodeInterpreterLiveSandboxes"] != "0":
        assert time.time() < deadline, "the slot was not given back"
        time.sleep(0.05)
    one_call(capped, "print(7)", results, "after", ANONYMOUS)
    assert results["after"][0] == 200
    assert results["after"][2]["output"][0]["status"] == "completed"


def test_cap_holds_across_children(capped, model):
    results = {}
    slow = threading.Thread(target=one_call, args=(capped, "import time; time.sleep(3)",
                                                   results, "slow"))
    slow.start()
    deadline = time.time() + 10
    while status_lines(capped)["CodeInterpreterLiveSandboxes"] != "1":
        assert time.time() < deadline, "the first sandbox never became live"
        time.sleep(0.05)
    one_call(capped, "print(1)", results, "refused")
    slow.join()
    status, headers, body = results["refused"]
    assert status == 503
    assert headers["retry-after"] == "5"
    assert body["error"]["type"] == "server_error"
    assert body["error"]["code"] == "sandbox_capacity"
    assert body["error"]["message"] == ("This server runs as many containers as it "
                                        "allows (CodeInterpreterMaxSandboxes 1), all of "
                                        "them in use; retry shortly.")
    assert results["slow"][0] == 200
    # The first request's container keeps its slot after the request; the
    # caller's next new conversation takes it over (its own least recently
    # used idle container is expired to make room: never another caller's).
    assert status_lines(capped)["CodeInterpreterLiveSandboxes"] == "1"
    first = results["slow"][2]["output"][0]["container_id"]
    one_call(capped, "print(7)", results, "after")
    assert results["after"][0] == 200
    assert results["after"][2]["output"][0]["status"] == "completed"
    assert results["after"][2]["output"][0]["container_id"] != first
    assert status_lines(capped)["CodeInterpreterLiveSandboxes"] == "1"
    other = {"Authorization": "Bearer sk-another-caller"}
    status, _, body = capped.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": "print(8)"}], [{"text": "done"}]])},
        headers=other)
    assert (status, body["error"]["code"]) == (503, "sandbox_capacity")


def test_status_counts_a_request(capped, model):
    before = status_lines(capped)
    tool = re.findall(r"executions=(\d+)", before["CodeInterpreterTool-local"])[0]
    results = {}
    one_call(capped, "1/0", results, "r")
    assert results["r"][0] == 200
    after = status_lines(capped)
    assert after["CodeInterpreterMaxSandboxes"] == "1"
    counts = dict(kv.split("=") for kv in after["CodeInterpreterTool-local"].split())
    assert int(counts["executions"]) == int(tool) + 1
    assert int(counts["live"]) in (0, 1)
    _, _, html = capped.request("GET", "/server-status")
    assert b"<h2>Code interpreter</h2>" in html
