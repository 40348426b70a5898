"""Containers on E2B, against the fake E2B service: a container is one E2B
sandbox, made at the conversation's first call with E2B's timeout set to the
container's idle expiry and extended at each use, reached again from any
child through the handle the directory keeps, its execution context
restarted after a failed run, and deleted at E2B when the container is."""
import json
import secrets

import pytest

from conftest import FakeE2B, Httpd, base_conf, script_input, start_helper
from test_loop import calls_of

OUTPUTS = "code_interpreter_call.outputs"
KEY = "e2b_" + secrets.token_hex(20)
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
ME = {"Authorization": "Bearer sk-e2b-containers"}


@pytest.fixture(scope="module")
def env(model):
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY)
    fake = FakeE2B(proc, port)
    extra = """
CodeInterpreterSandbox cloud provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \
    sandbox_url={url} timeout=3 idle=10m
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter cloud
</Location>
<Location /e2b/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter cloud
  CodeInterpreterUpstream http://127.0.0.1:{port}/v1/responses
</Location>
CodeInterpreterSandbox fenced provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \
    sandbox_url={url} egress=allowlist allowed_domains=pypi.org,*.pythonhosted.org
<Location /fenced/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter fenced
</Location>
<Location /fenced/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter fenced
</Location>
""".format(url=fake.url, port=model.port)
    server = Httpd("e2b-containers", base_conf(model.port, extra),
                   env={"E2B_TEST_KEY": KEY}, fakes=[fake])
    try:
        server.start()
        server.fake = fake
        yield server
    finally:
        try:
            server.stop()
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture
def server(env, model):
    env.fake.reset()
    model.reset()
    yield env
    # the test's containers are deleted (at E2B too) by the suite's checks


def turn(server, rounds, **extra):
    body = {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}
    body.update(extra)
    status, _, out = server.post("/e2b/v1/responses", body, headers=ME)
    assert status == 200, out
    return out


def test_two_turns_share_one_e2b_sandbox(server, model):
    first = turn(server, [[{"call": "x = 41"}], [{"text": "set"}]])
    second = turn(server, [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert calls_of(second)[0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    cid = calls_of(first)[0]["container_id"]
    assert calls_of(second)[0]["container_id"] == cid
    st = server.fake.state()
    [create] = st["creates"]
    assert create["body"]["timeout"] == 600              # idle=10m, not lifetime=
    assert create["body"]["metadata"]["container"] == cid
    assert st["deletes"] == []                           # it outlives the requests
    [ctx] = st["contexts"]
    assert [e["body"].get("context_id") for e in st["executes"]] == [ctx["id"]] * 2
    # every use moved E2B's timeout forward by the idle time
    assert st["timeouts"] and {t["timeout"] for t in st["timeouts"]} == {600}
    assert {t["id"] for t in st["timeouts"]} == {create["id"]}
    # deleted through the Containers API: deleted at E2B
    status, _, gone = server.request("DELETE", "/e2b/v1/containers/" + cid, headers=ME)
    assert status == 200
    st = server.fake.until(lambda s: not s["live"], "the sandbox to be deleted")
    assert [(d["id"], d["status"]) for d in st["deletes"]] == [(create["id"], 204)]


def test_a_timeout_restarts_the_context_and_says_so(server, model):
    first = turn(server, [[{"call": "x = 1"}],
                          [{"call": "import time\ntime.sleep(30)"}],
                          [{"text": "{{last_output}}"}]])
    [setter, sleeper] = calls_of(first)
    assert sleeper["outputs"] == [{"type": "logs", "logs":
        "The execution timed out after 3 s and was stopped. The container's interpreter "
        "was restarted: its variables and imports are gone (its files are kept)."}]
    seen = model.requests()
    assert len(seen) == 3, [r["json"]["input"] for r in seen]
    told = [i["output"] for i in seen[2]["json"]["input"]
            if i.get("type") == "function_call_output"][-1]
    assert told == sleeper["outputs"][0]["logs"]         # nothing added to it
    second = turn(server, [[{"call": "print(x)"}], [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    assert calls_of(second)[0]["outputs"][0]["logs"].endswith(
        "NameError: name 'x' is not defined\n")
    assert calls_of(second)[0]["container_id"] == setter["container_id"]
    st = server.fake.state()
    assert len(st["creates"]) == 1
    assert len(st["restarts"]) == 1


def test_a_dead_childs_container_is_not_reaped(server, model):
    """A container's E2B sandbox is not the request's: when the child using
    it dies, the reaper leaves it (it expires at E2B with its container),
    and the next turn finds it."""
    import os
    import re
    import signal
    import threading
    status, _, c = server.post("/e2b/v1/containers", {"name": "kept"}, headers=ME)
    assert status == 200, c
    tool = {"type": "code_interpreter", "container": c["id"]}
    server.fake.control(hold_execute="held")
    result = {}

    def run():
        try:
            result["r"] = server.post("/e2b/v1/responses", {
                "model": "m", "tools": [tool],
                "input": script_input([[{"call": "print(1)"}], [{"text": "x"}]])},
                headers=ME, timeout=60)
        except ConnectionError as exc:
            result["r"] = exc

    t = threading.Thread(target=run)
    t.start()
    server.fake.until(lambda s: s["held"], "the execution to start")
    attached = [l for l in server.log().splitlines()
                if "CI0305: container %s attached" % c["id"] in l]
    pid = int(re.search(r"\[pid (\d+):", attached[-1]).group(1))
    server.killed.add(pid)
    os.kill(pid, signal.SIGKILL)
    t.join()
    assert isinstance(result["r"], ConnectionError), result["r"]
    server.fake.release("held")
    # the parent saw the child die (a new one serves); no sandbox was orphaned
    assert server.status_lines()["CodeInterpreterOrphanedSandboxes"] == "0"
    status, _, body = server.post("/e2b/v1/responses", {
        "model": "m", "tools": [tool], "include": [OUTPUTS],
        "input": script_input([[{"call": "print(6 * 7)"}], [{"text": "x"}]])},
        headers=ME)
    assert status == 200, body
    assert calls_of(body)[0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    st = server.fake.state()
    assert len(st["creates"]) == 1 and st["deletes"] == []
    assert len(st["live"]) == 1


def test_the_plans_lifetime_cap_reads_as_expired(server, model):
    first = turn(server, [[{"call": "x = 1"}], [{"text": "set"}]])
    old = calls_of(first)[0]["container_id"]
    server.fake.control(max_instance_length=0.0)       # its life has run out
    second = turn(server, [[{"call": "print(x)"}], [{"text": "{{last_output}}"}]],
                  previous_response_id=first["id"])
    gone = ("Not run: this container expired at the sandbox service (its lifetime ran "
            "out); its variables and files are gone. The next turn of the conversation "
            "gets a new container.")
    assert calls_of(second)[0]["outputs"] == [{"type": "logs", "logs": gone}]
    status, _, c = server.request("GET", "/e2b/v1/containers/" + old, headers=ME)
    assert json.loads(c)["status"] == "expired"
    server.fake.control(max_instance_length=None)
    model.reset()
    third = turn(server, [[{"call": "print(2)"}], [{"text": "{{last_output}}"}]],
                 previous_response_id=second["id"])
    assert calls_of(third)[0]["container_id"] != old
    assert calls_of(third)[0]["outputs"] == [{"type": "logs", "logs": "2\n"}]
    told = [i["output"] for i in model.requests()[1]["json"]["input"]
            if i.get("type") == "function_call_output"][-1]
    assert told.startswith("Note: container %s of the earlier turns has expired." % old)
    st = server.fake.until(lambda s: len(s["live"]) == 1, "the old sandbox to end")
    assert len(st["creates"]) == 2


def test_files_of_an_e2b_container(server, model):
    """The same files as a local container's, through envd: an upload (and a
    file of the upstream's Files API) the code reads, a file the code writes
    cited in the answer, listed, downloaded byte-identical and deleted; the
    owner checked first on every endpoint."""
    from test_container_files import cfile_id
    from test_container_uploads import CSV, model_file, multipart
    status, _, c = server.post("/e2b/v1/containers", {"name": "files"}, headers=ME)
    assert status == 200, c
    cid = c["id"]
    base = "/e2b/v1/containers/%s/files" % cid
    body, ctype = multipart("prices.csv", CSV)
    status, _, f = server.request("POST", base, body, dict(ME, **{"Content-Type": ctype}))
    f = json.loads(f)
    assert (status, f["id"], f["path"], f["bytes"], f["source"]) == (
        200, cfile_id(cid, "prices.csv"), "/mnt/data/prices.csv", len(CSV), "user")
    up = model_file(model, ME, "more.txt", b"from the files api")
    status, _, g = server.post(base, {"file_id": up["id"]}, headers=ME)
    assert (status, g["path"], g["source"]) == (200, "/mnt/data/more.txt", "user")
    write = ("print(open('/mnt/data/prices.csv').read().count('\\n'), "
             "open('/mnt/data/more.txt').read())\n"
             "_ = open('/mnt/data/out.csv', 'w').write('x,y\\n')")
    link = "sandbox:/mnt/data/out.csv"
    tool = {"type": "code_interpreter", "container": cid}
    body = {"model": "m", "tools": [tool], "include": [OUTPUTS],
            "input": script_input([[{"call": write}], [{"text": "[out](%s)" % link}]])}
    status, _, out = server.post("/e2b/v1/responses", body, headers=ME)
    assert status == 200, out
    assert calls_of(out)[0]["outputs"] == [{"type": "logs",
                                            "logs": "3 from the files api\n"}]
    assert out["output"][-1]["content"][0]["annotations"] == [{
        "type": "container_file_citation", "container_id": cid,
        "end_index": 6 + len(link), "file_id": cfile_id(cid, "out.csv"),
        "filename": "out.csv", "start_index": 6}]
    status, _, listing = server.request("GET", base + "?order=asc", headers=ME)
    assert status == 200
    assert sorted((x["path"], x["source"]) for x in json.loads(listing)["data"]) == [
        ("/mnt/data/more.txt", "user"), ("/mnt/data/out.csv", "assistant"),
        ("/mnt/data/prices.csv", "user")]
    fid = cfile_id(cid, "out.csv")
    status, _, data = server.request("GET", "%s/%s/content" % (base, fid), headers=ME)
    assert (status, data) == (200, b"x,y\n")
    for method, path in (("GET", base), ("POST", base), ("GET", base + "/" + fid),
                         ("DELETE", base + "/" + fid), ("GET", base + "/" + fid + "/content")):
        status, _, body = server.request(method, path,
                                         headers={"Authorization": "Bearer sk-other"})
        assert (status, json.loads(body)["error"]["code"]) == (404, "container_not_found")
    status, _, gone = server.request("DELETE", "%s/%s" % (base, fid), headers=ME)
    assert (status, json.loads(gone)["deleted"]) == (200, True)
    status, _, body = server.request("GET", "%s/%s/content" % (base, fid), headers=ME)
    assert (status, json.loads(body)["error"]["code"]) == (404, "container_file_not_found")


@pytest.fixture(scope="module")
def capped(model):
    """A server whose callers may hold one container: a new one evicts the
    caller's idle one."""
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY)
    fake = FakeE2B(proc, port)
    extra = """
CodeInterpreterMaxContainersPerOwner 1
CodeInterpreterEvictionGrace 0
CodeInterpreterSandbox cloud provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \\
    sandbox_url={url} timeout=3 idle=10m
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter cloud
</Location>
""".format(url=fake.url, port=model.port)
    server = Httpd("e2b-capped", base_conf(model.port, extra), env={"E2B_TEST_KEY": KEY},
                   fakes=[fake])
    try:
        server.start()
        server.fake = fake
        yield server
    finally:
        try:
            server.stop()
        finally:
            proc.kill()
            proc.wait()


def test_an_evicted_containers_sandbox_is_deleted_at_once(capped, model):
    """The caller's second container evicts its first (idle): the first's
    E2B sandbox is deleted then, not left to E2B's own timeout."""
    from conftest import wait_until
    made = []
    for i in range(2):
        status, _, out = capped.post("/e2b/v1/responses", {
            "model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input([[{"call": "v = %d" % i}], [{"text": "ok"}]])},
            headers=ME)
        assert status == 200, out
        made.append(calls_of(out)[0]["container_id"])
    assert made[0] != made[1]
    state = wait_until(lambda: (lambda st: st if st["deleted"] else None)(
        capped.fake.state()), "the evicted container's sandbox to be deleted")
    assert (state["created"], state["deleted"], len(state["live"])) == (2, 1, 1)
    status, _, body = capped.request("GET", "/v1/containers/" + made[0], headers=ME)
    assert (status, json.loads(body)["status"]) == (200, "expired")


def test_an_allowlist_becomes_e2b_network_settings(server, model):
    """A container's allowlist is E2B's own domain filter: the create asks
    for the domains out and everything else denied (E2B's documented form);
    a container without one asks for no internet at all."""
    policy = {"type": "allowlist", "allowed_domains": ["PyPI.org", "*.pythonhosted.org"]}
    tool = {"type": "code_interpreter", "container": {"type": "auto",
                                                      "network_policy": policy}}
    status, _, out = server.post("/fenced/v1/responses", {
        "model": "m", "tools": [tool], "include": [OUTPUTS],
        "input": script_input([[{"call": "print(1)"}], [{"text": "done"}]])}, headers=ME)
    assert status == 200, out
    cid = calls_of(out)[0]["container_id"]
    [create] = server.fake.state()["creates"]
    assert create["status"] == 201
    assert create["body"]["allow_internet_access"] is True
    assert create["body"]["network"] == {"allowOut": ["pypi.org", "*.pythonhosted.org"],
                                         "denyOut": ["0.0.0.0/0"]}
    status, _, c = server.request("GET", "/fenced/v1/containers/" + cid, headers=ME)
    assert status == 200
    assert json.loads(c)["network_policy"] == {"type": "allowlist",
                                   "allowed_domains": ["pypi.org", "*.pythonhosted.org"]}
    # without a policy: no network key, no internet
    server.fake.reset()
    status, _, out = server.post("/fenced/v1/responses", {
        "model": "m", "tools": [TOOL], "include": [OUTPUTS],
        "input": script_input([[{"call": "print(2)"}], [{"text": "done"}]])}, headers=ME)
    assert status == 200, out
    [create] = server.fake.state()["creates"]
    assert "network" not in create["body"]
    assert create["body"]["allow_internet_access"] is False


def test_an_e2b_allowlist_outside_the_ceiling_is_refused(server, model):
    policy = {"type": "allowlist", "allowed_domains": ["pypi.org", "evil.example"]}
    status, _, out = server.post("/fenced/v1/containers", {
        "name": "x", "network_policy": policy}, headers=ME)
    assert (status, out["error"]) == (400, {
        "type": "invalid_request_error", "code": "domain_not_allowed",
        "param": "network_policy.allowed_domains[1]",
        "message": "The domain 'evil.example' is not allowed for the sandbox tool "
                   "'fenced' on this server."})
    assert server.fake.state()["creates"] == []


def test_domain_secrets_on_e2b_are_refused(server, model):
    """E2B's sandboxes reach the internet from E2B's network, never through
    this server's egress proxy: a secret could not be injected outside them."""
    policy = {"type": "allowlist", "allowed_domains": ["pypi.org"],
              "domain_secrets": [{"domain": "pypi.org", "name": "TOKEN", "value": "v"}]}
    status, _, out = server.post("/fenced/v1/containers", {
        "name": "x", "network_policy": policy}, headers=ME)
    assert (status, out["error"]) == (400, {
        "type": "invalid_request_error", "code": "unsupported_parameter",
        "param": "network_policy.domain_secrets",
        "message": "Domain secrets are not supported by the sandbox tool 'fenced' "
                   "(provider e2b): its sandboxes reach the internet without this "
                   "server's egress proxy."})
    assert server.fake.state()["creates"] == []
