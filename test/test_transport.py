"""Follow-up transport settings: timeouts, proxies."""
import pytest

from conftest import TOOL, Httpd, base_conf, script_input


@pytest.fixture(scope="module")
def transport(model):
    extra = """
<Location /slow/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter On
  CodeInterpreterUpstreamTimeout 1
</Location>
<Location /proxied/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter On
  CodeInterpreterProxy http://127.0.0.1:9
</Location>
""" % (model.port, model.port)
    # Proxy variables in httpd's environment must not redirect follow-ups.
    env = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "all_proxy": "http://127.0.0.1:9"}
    server = Httpd("transport", base_conf(model.port, extra), env=env).start()
    yield server
    server.stop()


def body(rounds):
    return {"model": "m", "tools": [TOOL], "input": script_input(rounds)}


def test_environment_proxies_are_ignored(transport, model):
    model.reset()
    status, _, answer = transport.post("/v1/responses", body(
        [[{"call": "print(2)"}], [{"text": "{{last_output}}"}]]))
    assert status == 200
    assert answer["output"][-1]["content"][0]["text"] == "2\n"
    assert len(model.requests()) == 2


def test_upstream_timeout_gives_504(transport, model):
    # The follow-up is held until after the answer: only the timeout ends it.
    model.reset()
    status, headers, answer = transport.post("/slow/v1/responses", body(
        [[{"call": "print(1)"}], [{"hold": "slow"}, {"text": "late"}]]))
    assert status == 504
    assert answer == {"error": {
        "message": "The model upstream did not answer a follow-up call in time.",
        "type": "server_error", "param": None, "code": "upstream_timeout"}}
    assert model.holds()["waiting"] == ["slow"]
    model.release("slow")


def test_configured_proxy_is_used(transport, model):
    # The configured proxy (a closed port) is where the follow-up goes: it
    # fails as unreachable, which proves the proxy setting is honoured.
    model.reset()
    status, _, answer = transport.post("/proxied/v1/responses", body(
        [[{"call": "print(1)"}], [{"text": "never"}]]))
    assert status == 502
    assert answer == {"error": {
        "message": "The model upstream could not be reached for a follow-up call.",
        "type": "server_error", "param": None, "code": "upstream_unreachable"}}
    assert len(model.requests()) == 1
