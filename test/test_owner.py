"""Owners: who made a request, kept only as a keyed hash (HMAC-SHA256 with a
key derived from the server secret) - of the Authorization header by
default, of CodeInterpreterOwner's expression where it is set. The audit log
and the access log (%{ci-owner}n) show it; neither ever shows the header."""
import hashlib
import hmac
import json
import os

import pytest

from conftest import API_KEY, TOOL, Httpd, base_conf, script_input, wait_until
from test_configtest import assert_syntax_error, configtest

SECRET = b"0123456789abcdef0123456789abcdef-owner-test-secret"


def owner_key(secret, who):
    key = hmac.new(secret, b"mod_code_interpreter owner", hashlib.sha256).digest()
    return "own_" + hmac.new(key, who.encode(), hashlib.sha256).hexdigest()


def start(model, name, secret_line):
    server = Httpd(name, "")
    os.makedirs(server.root, exist_ok=True)
    audit = os.path.join(server.root, "audit.jsonl")
    extra = """
CodeInterpreterAuditLog "%s"
%s
<Location /by-user/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter On
  CodeInterpreterOwner %%{HTTP:X-User}
</Location>
<Location /by-user/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreterOwner %%{HTTP:X-User}
</Location>
""" % (audit, secret_line, model.port)
    server.write_conf(base_conf(model.port, extra))
    server.audit = audit
    return server.start()


@pytest.fixture(scope="module")
def keyed(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("owner") / "secret"
    path.write_bytes(SECRET)
    server = start(model, "owner-keyed", "CodeInterpreterSecret file:%s" % path)
    yield server
    server.stop()


def run(server, path="/v1/responses", headers=None):
    """One execution; returns the owner its audit line names."""
    before = audit_lines(server)
    status, _, body = server.post(path, {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": "print(1)"}], [{"text": "done"}]])},
        headers=headers)
    assert status == 200, body
    lines = wait_until(lambda: audit_lines(server)[len(before):], "the audit line")
    assert len(lines) == 1
    return lines[0]["owner"]


def audit_lines(server):
    if not os.path.exists(server.audit):
        return []
    with open(server.audit) as f:
        return [json.loads(l) for l in f if l.endswith("\n")]


def test_owner_is_the_keyed_authorization(keyed, model):
    assert run(keyed) == owner_key(SECRET, "Bearer " + API_KEY)
    other = run(keyed, headers={"Authorization": "Bearer sk-someone-else"})
    assert other == owner_key(SECRET, "Bearer sk-someone-else")
    with open(keyed.audit) as f:
        text = f.read()
    assert API_KEY not in text and "sk-someone-else" not in text


def test_owner_expression(keyed, model):
    assert run(keyed, "/by-user/v1/responses", {"X-User": "alice"}) == \
        owner_key(SECRET, "alice")
    # alice's container, found where her expression holds
    assert keyed.delete_containers_at("/by-user/v1/containers", {"X-User": "alice"}) == 1
    # no such header: an empty owner, stored as none
    assert run(keyed, "/by-user/v1/responses") is None


def test_without_a_secret_the_server_keeps_its_own(model):
    server = start(model, "owner-own", "")
    try:
        first = run(server)
        assert first.startswith("own_") and len(first) == 4 + 64
        assert first != owner_key(SECRET, "Bearer " + API_KEY)
        assert run(server) == first
        server.graceful()                 # the same secret after a reload
        assert run(server) == first
    finally:
        server.stop()


def test_secret_file_missing(request):
    line = "CodeInterpreterSecret file:/nonexistent/secret"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, "CodeInterpreterSecret: '/nonexistent/secret' "
                        "cannot be read")


def test_secret_file_too_short(request, tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"x" * 31)
    line = "CodeInterpreterSecret file:%s" % path
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, "CodeInterpreterSecret: '%s' holds too "
                        "little: expected 32 to 4096 bytes (e.g. openssl rand -hex 32 "
                        "> FILE)" % path)


def test_secret_not_a_file_spec(request):
    line = "CodeInterpreterSecret literally"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, "CodeInterpreterSecret: 'literally' is not "
                        "valid: expected file:PATH")


def test_owner_expression_invalid(request):
    line = "CodeInterpreterOwner %{HTTP:X-User"
    server, r = configtest(request, "<Location /x>\n%s\n</Location>" % line)
    assert_syntax_error(server, r, line, "CodeInterpreterOwner: '%{HTTP:X-User' is not a "
                        "valid expression: " + EXPR_ERROR)


EXPR_ERROR = "Unterminated string or variable"
