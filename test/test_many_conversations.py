"""One application's key serving many conversations at once: every turn
keeps its conversation's state or is refused, explicitly and with
Retry-After; an active container is never evicted; another caller beside
them is not starved; an idle one evicted to make room tells its next turn.
Local sandboxes and E2B (the fake, with a concurrency limit that answers
429 as E2B does)."""
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import (FakeE2B, Httpd, base_conf, script_input, start_helper,
                      wait_until)
from test_loop import calls_of

KEY = "e2b_many_conversations_0123456789"
APP = {"Authorization": "Bearer sk-one-application"}
OTHER = {"Authorization": "Bearer sk-another-application"}
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
OUTPUTS = "code_interpreter_call.outputs"
TURNS = 3


def conversation(server, path, k, headers, turns=TURNS):
    """TURNS turns chained by previous_response_id: turn t sets v{k} = t
    after checking the value the turn before left. The answers (status,
    headers, body) of the turns made: a conversation stops at a refusal."""
    answers, previous = [], None
    for t in range(turns):
        code = "v = %d" % (k * 10) if t == 0 else \
            "assert v == %d, v\nv += 1\nprint(v)" % (k * 10 + t - 1)
        body = {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
                "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])}
        if previous:
            body["previous_response_id"] = previous
        status, hdrs, out = server.post(path, body, headers=headers, timeout=300)
        answers.append((status, hdrs, out))
        if status != 200:
            break
        previous = out["id"]
    return answers


def kept_state(answers, k):
    """Every turn answered 200, in one container, with the state the turns
    before left."""
    if len(answers) != TURNS or any(status != 200 for status, _, _ in answers):
        return False
    calls = [calls_of(out)[0] for _, _, out in answers]
    logs = [c["outputs"][0]["logs"] if c["outputs"] else "" for c in calls[1:]]
    return len({c["container_id"] for c in calls}) == 1 and \
        logs == ["%d\n" % (k * 10 + t) for t in range(1, TURNS)]


CAPACITY_REFUSAL = {"error": {
    "message": "This server runs as many containers as it allows "
               "(CodeInterpreterMaxSandboxes 64, the last 8 of them for callers that hold "
               "fewer), all of them in use; retry shortly.",
    "type": "server_error", "param": None, "code": "sandbox_capacity"}}
E2B_REFUSAL = {"error": {
    "message": "The sandbox service has no room for another sandbox now (its concurrency "
               "limit); retry shortly.",
    "type": "server_error", "param": None, "code": "sandbox_capacity"}}


def refused_explicitly(answers, refusal):
    status, hdrs, out = answers[-1]
    return status == 503 and hdrs.get("retry-after") == "5" and out == refusal


@pytest.fixture(scope="module")
def e2b():
    proc, port = start_helper("fake_e2b.py", "--api-key", KEY)
    yield FakeE2B(proc, port)
    proc.kill()
    proc.wait()


def start(model, e2b, name, extra=""):
    conf = base_conf(model.port, """
{extra}
CodeInterpreterSandbox cloud provider=e2b api_key=env:E2B_TEST_KEY api_base={url} \\
    sandbox_url={url} timeout=30
<Location /e2b/v1/responses>
  ProxyPass http://127.0.0.1:{port}/v1/responses
  CodeInterpreter cloud
</Location>
<Location /e2b/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter cloud
</Location>
""".format(extra=extra, url=e2b.url, port=model.port))
    e2b.reset()
    server = Httpd(name, conf, env={"E2B_TEST_KEY": KEY}, fakes=[e2b])
    server.start()
    return server


@pytest.fixture(params=["local", "e2b"])
def provider(request):
    return request.param


def path_of(provider):
    return "/v1/responses" if provider == "local" else "/e2b/v1/responses"


def test_one_key_48_conversations_default_configuration(model, e2b, provider):
    server = start(model, e2b, "many-48-" + provider)
    try:
        with ThreadPoolExecutor(48) as pool:
            results = list(pool.map(lambda k: conversation(server, path_of(provider), k, APP),
                                    range(48)))
        lost = [(k, [a[:1] + (a[2] if a[0] != 200 else None,) for a in r])
                for k, r in enumerate(results) if not kept_state(r, k)]
        assert lost == []
        server.delete_containers()
    finally:
        server.stop()


def test_128_conversations_on_a_64_container_server(model, e2b, provider):
    server = start(model, e2b, "many-128-" + provider, "CodeInterpreterMaxSandboxes 64")
    if provider == "e2b":
        e2b.control(max_live=64)          # E2B's own limit: never the first to bind
    try:
        with ThreadPoolExecutor(136) as pool:
            app = [pool.submit(conversation, server, path_of(provider), k, APP)
                   for k in range(128)]
            other = [pool.submit(conversation, server, path_of(provider), 200 + k, OTHER)
                     for k in range(8)]
            app = [f.result() for f in app]
            other = [f.result() for f in other]
        # the other caller is not starved: the last eighth is kept for it
        assert [kept_state(r, 200 + k) for k, r in enumerate(other)] == [True] * 8, [
            (k, [a[0] if a[0] == 200 else a[:1] + (a[2],) for a in r])
            for k, r in enumerate(other) if not kept_state(r, 200 + k)]
        # every conversation of the application kept its state, or was
        # refused at its first turn, explicitly; none lost a container it had
        kept = [k for k, r in enumerate(app) if kept_state(r, k)]
        refused = [k for k, r in enumerate(app) if len(r) == 1 and
                   refused_explicitly(r, CAPACITY_REFUSAL)]
        assert sorted(kept + refused) == list(range(128)), [
            (k, [a[0] for a in r], r[-1][2]) for k, r in enumerate(app)
            if k not in kept and k not in refused][:3]
        assert len(kept) == 56            # 64, less the 8 kept for other callers
        status = server.status_lines()
        assert "refused_server_cap=72 " in status["CodeInterpreterAdmissions"] + " "
        server.delete_containers()
    finally:
        e2b.control(max_live=None)
        server.stop()


def test_e2b_answering_429_is_retried_until_a_sandbox_frees(model, e2b):
    server = start(model, e2b, "many-429")
    e2b.control(max_live=2)
    try:
        first = [conversation(server, "/e2b/v1/responses", k, APP, turns=1)[0]
                 for k in range(2)]
        assert [a[0] for a in first] == [200, 200]
        third = {}
        t = threading.Thread(target=lambda: third.update(
            answers=conversation(server, "/e2b/v1/responses", 2, APP, turns=1)))
        t.start()
        # the service refuses it (429) at least once: then a container goes
        e2b.until(lambda st: any(c["status"] == 429 for c in st["creates"]),
                  "a create answered 429")
        cid = calls_of(first[0][2])[0]["container_id"]
        status, _, _ = server.request("DELETE", "/e2b/v1/containers/" + cid, headers=APP)
        assert status == 200
        t.join(60)
        assert third["answers"][0][0] == 200, third["answers"]
        statuses = [c["status"] for c in e2b.state()["creates"]]
        assert statuses[:2] == [201, 201] and statuses[-1] == 201 and 429 in statuses
        server.delete_containers()
    finally:
        e2b.control(max_live=None)
        server.stop()


def test_an_idle_container_evicted_for_another_tells_its_next_turn(model, e2b):
    server = start(model, e2b, "many-evict", """
CodeInterpreterMaxContainersPerOwner 1
CodeInterpreterEvictionGrace 1s
CodeInterpreterCapacityWait 0
""")
    try:
        [(status, _, first)] = conversation(server, "/v1/responses", 1, APP, turns=1)
        assert status == 200
        old = calls_of(first)[0]["container_id"]

        def second_conversation():
            [answer] = conversation(server, "/v1/responses", 2, APP, turns=1)
            if answer[0] == 503:     # the first is still within its grace
                assert answer[2]["error"]["code"] == "container_limit", answer
                return None
            return answer
        wait_until(second_conversation, "the idle container to be evicted for another")
        # the first conversation's next turn: a new container (once the
        # second's is idle in its turn), and the model told why

        def next_turn():
            model.reset()
            status, _, out = server.post("/v1/responses", {
                "model": "m", "tools": [TOOL], "include": [OUTPUTS],
                "previous_response_id": first["id"],
                "input": script_input([[{"call": "print(v)"}],
                                       [{"text": "{{last_output}}"}]])}, headers=APP)
            if status == 503:
                assert out["error"]["code"] == "container_limit", out
                return None
            assert status == 200, out
            return out
        out = wait_until(next_turn, "room for the first conversation's next turn")
        assert calls_of(out)[0]["container_id"] != old
        told = [i["output"] for r in model.requests() for i in r["json"]["input"]
                if i.get("type") == "function_call_output"][0]
        assert told.startswith("Note: container %s of the earlier turns has expired. "
                               "This code runs in a new container" % old)
        assert "evicted=2" in server.status_lines()["CodeInterpreterAdmissions"]
        server.delete_containers()
    finally:
        server.stop()
