"""Children's lives under every MPM: start, keep-alive connections held
open, graceful restart, more requests, stop, thirty times over. No child may
die of a signal and no sanitizer may report, whatever a child was doing when
the parent's signal reached it (starting its threads, idle in accept, or
holding a kept connection across the restart)."""
import http.client
import json
import os

import pytest

from conftest import (ANONYMOUS, CLIENT_HEADERS, SANITIZE, TOOL, FakeE2B, Httpd,
                      base_conf, script_input, start_helper, wait_until)

CYCLES = int(os.environ.get("CI_LIFECYCLE_CYCLES", "30"))
KEY = "e2b_lifecycle_key_0123456789"
# ASan multiplies a start's cost; prefork is where children die from signal
# handlers (the other MPMs end their children from the main thread), so the
# sanitizer pass runs prefork alone.
MPMS = ["prefork"] if SANITIZE else ["prefork", "worker", "event"]


@pytest.fixture(scope="module")
def e2b():
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY)
    yield FakeE2B(proc, port)
    proc.kill()
    proc.wait()


# Spare children (or threads) wanted beyond what starts, so that children
# are still starting when the signals come.
SPARES = {"prefork": "MinSpareServers 4\nMaxSpareServers 8",
          "worker": "ThreadsPerChild 4\nMinSpareThreads 16\nMaxSpareThreads 32",
          "event": "ThreadsPerChild 4\nMinSpareThreads 16\nMaxSpareThreads 32"}


def conf(mpm, model_port, e2b_port, key_file):
    # Every thread the module may start in a child: the execution pool, the
    # reaper of remote sandboxes (an E2B tool).
    return base_conf(model_port, """
StartServers 3
%s
KeepAliveTimeout 30
CodeInterpreterSandbox cloud provider=e2b api_key=file:%s api_base=http://127.0.0.1:%d sandbox_url=http://127.0.0.1:%d
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter cloud
</Location>
""" % (SPARES[mpm], key_file, e2b_port, e2b_port, model_port))


def body(code):
    return json.dumps({"model": "m", "tools": [TOOL], "input": script_input(
        [[{"call": code}], [{"text": "{{last_output}}"}]])})


def ask(conn, path, headers):
    """One request on CONN. An idle kept connection that a reload closed
    (the threaded MPMs close those of their old children) is opened again
    and the request sent once more, as clients do."""
    for attempt in (1, 2):
        try:
            conn.request("POST", path, body("print(6 * 7)"), dict(CLIENT_HEADERS, **headers))
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            conn.close()
            if attempt == 2:
                raise


def served(status, data):
    """A full answer, or the refusal an old child gives a kept connection
    after a reload retired its tool (the client retries on a new one)."""
    if status == 200:
        return json.loads(data)["output"][-1]["content"][0]["text"] == "42\n"
    return status == 503 and json.loads(data)["error"]["code"] == "sandbox_reconfigured"


def requests_on_kept_connections(server, conns):
    for i, conn in enumerate(conns):
        path = "/e2b/v1/responses" if i % 2 else "/v1/responses"
        headers = ANONYMOUS if i % 3 == 0 else {}
        status, data = ask(conn, path, headers)
        assert served(status, data), (status, data)


def open_connections(server, n):
    return [http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            for _ in range(n)]


@pytest.mark.parametrize("mpm", MPMS)
def test_thirty_starts_reloads_and_stops(mpm, model, e2b):
    for cycle in range(CYCLES):
        server = Httpd("lifecycle-%s" % mpm, "", mpm=mpm, fakes=[e2b])
        os.makedirs(server.root, exist_ok=True)
        key_file = os.path.join(server.root, "e2b.key")
        with open(key_file, "w") as f:
            f.write(KEY + "\n")
        server.write_conf(conf(mpm, model.port, e2b.port, key_file))
        e2b.reset()
        server.start()
        try:
            conns = open_connections(server, 3)
            requests_on_kept_connections(server, conns)
            server.graceful()
            # the kept connections now reach old children; new ones the new
            requests_on_kept_connections(server, conns + open_connections(server, 2))
            for conn in conns:
                conn.close()
            server.delete_containers()
        finally:
            server.stop()        # asserts: no "exit signal", no sanitizer report
        assert "exit signal" not in server.log(), (cycle, server.log())
