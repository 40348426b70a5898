"""Network policy for local sandboxes (slice 1: allowlists, no domain
secrets): a container made with `network_policy: {"type": "allowlist"}`
reaches the domains on its list, and nothing else, through the module's
egress proxy; the proxy sends what it allows through the site's forward
proxy (egress_proxy=).

The network is the test's own (test/egress_fixtures.py): a site proxy that
maps every host to a loopback http or https origin, a test CA the sandbox
code trusts once ca.pem is uploaded into the container, and names resolved
from a test hosts file that the test httpd alone sees (a private mount
namespace, conftest's Httpd(etc=...)):

    allowed.test a.wild.test wild.test outside.test pypi.test
    pkgs.files.test refused-by-site.test   93.184.215.14 (public)
    private.test      10.11.12.13          metadata.test   169.254.169.254
    cgnat.test        100.64.0.7           multicast.test  224.0.0.251
    loopback.test     127.0.0.2            localhost       127.0.0.1
    unresolvable.test                      (NXDOMAIN from the test name server)

Facts are counted from the site proxy's and the origins' own records. The
server's tools: `open` (egress=allowlist, any domain, through the site
proxy), `ceiling` (allowed_domains=pypi.test,*.files.test), `direct`
(egress=allowlist without a site proxy), and the built-in `python` with
egress off."""
import hashlib
import json
import os
import re
import shutil
import threading
import urllib.parse

import pytest

from conftest import Httpd, base_conf, require, script_input, wait_until
from egress_fixtures import (HOSTS, PACKAGE_FILE, PUBLIC, SITE_REFUSES, UNRESOLVABLE,
                             parse_answer)
from egress_fixtures import egress_net  # noqa: F401 (a fixture)
from test_container_files import content, files
from test_container_uploads import upload
from test_containers import api, resource_checker
from test_loop import calls_of, ci_body
from test_rejections import error_of
from test_shell import exit_entry, items_of, outputs_of, shell_call

RELAY = "http://127.0.0.1:3128"
PROXY_VARS = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
              "all_proxy"]
# What the `open` tool's containers allowlist unless a test says otherwise.
ALLOW = ["allowed.test", "*.wild.test", "localhost", "private.test", "metadata.test",
         "cgnat.test", "multicast.test", "loopback.test", "pypi.test", "pkgs.files.test",
         UNRESOLVABLE, SITE_REFUSES]
BUDGET = 1 << 30            # bytes per execution
PER_CONTAINER = 32          # connections at once


def policy(*domains):
    return {"type": "allowlist", "allowed_domains": list(domains or ALLOW)}


def not_on_list(domain):
    return "egress refused: %s is not on this container's allowlist\n" % domain


def resolves_to(domain, addr, kind):
    return "egress refused: %s resolves to %s, a %s address\n" % (domain, addr, kind)


def ip_literal(host):
    return ("egress refused: %s is an IP address; only allowlisted domain names are "
            "reachable\n" % host)


def bad_port(domain, port):
    return "egress refused: %s:%d: only ports 80 and 443 are allowed\n" % (domain, port)


TOO_MANY = ("egress refused: too many connections from this container (at most %d)\n"
            % PER_CONTAINER)


def egress_conf(up, site, audit, ca):
    tools = f"""
CodeInterpreterSandbox open provider=local timeout=120 egress=allowlist egress_proxy={site} \
    egress_ca={ca}
CodeInterpreterSandbox ceiling provider=local egress=allowlist allowed_domains=pypi.test,*.files.test egress_proxy={site}
CodeInterpreterSandbox direct provider=local egress=allowlist
CodeInterpreterAuditLog "{audit}"
"""
    for tool in ("open", "ceiling", "direct"):
        tools += f"""
<Location /{tool}/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter {tool}
</Location>
<Location /{tool}/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter {tool}
  CodeInterpreterUpstream {up}/v1/responses
</Location>
"""
    return tools


def egress_server(name, model, net, extra="", wrap=None):
    """A started server NAME with the egress tools on NET, and EXTRA
    directives; WRAP: an argv prefix httpd is started with."""
    server = Httpd(name, "", etc=net.etc)
    server.audit = os.path.join(server.root, "logs", "audit.jsonl")
    if wrap:
        wrapped = server.wrapped
        server.wrapped = lambda cmd: wrapped(list(wrap) + cmd)
    up = "http://127.0.0.1:%d" % model.port
    server.write_conf(base_conf(model.port, egress_conf(up, net.site.url, server.audit,
                                                         net.ca_pem) + extra))
    server.start()
    return server


@pytest.fixture(scope="module")
def egress(model, egress_net):  # noqa: F811
    server = egress_server("egress", model, egress_net)
    yield server
    server.stop()


@pytest.fixture
def eg(egress, model, egress_net):  # noqa: F811
    """The egress server, the model's and the network's records reset."""
    model.reset()
    egress_net.reset()
    return egress


@pytest.fixture
def net(egress_net):  # noqa: F811
    return egress_net


@pytest.fixture
def me(request):
    return {"Authorization": "Bearer sk-" + re.sub(r"\W", "-", request.node.name)}


# ------------------------------------------------------------------ helpers

# Sandbox code put before every test's own: fetches through the proxy
# variables (urllib), and requests written to the relay as they are.
PRELUDE = r'''
import errno, hashlib, json, os, socket, ssl, subprocess, sys, urllib.error, urllib.request
RELAY = ("127.0.0.1", 3128)

def raw(head, timeout=60):
    """HEAD sent to the relay as it is; the answer up to its close (or a 200's head)."""
    s = socket.create_connection(RELAY, timeout=timeout)
    try:
        s.sendall(head.encode())
        data = b""
        while True:
            try:
                got = s.recv(65536)
            except ConnectionResetError:
                break
            if not got:
                break
            data += got
            if data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
                break
        return data.decode("utf-8", "replace")
    finally:
        s.close()

def connect(target):
    return raw("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))

def tunnel(target):
    """A CONNECT to TARGET, its socket kept: (socket, the answer's head)."""
    s = socket.create_connection(RELAY, timeout=60)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(4096)
        if not got:
            break
        data += got
    return s, data.decode("utf-8", "replace")

def rest(s):
    """What S (a socket or a TLS one) gives up to its end."""
    data = b""
    while True:
        try:
            got = s.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return data.decode("utf-8", "replace")
        if not got:
            return data.decode("utf-8", "replace")
        data += got

def get(url):
    ctx = ssl.create_default_context(cafile="/mnt/data/ca.pem") if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=60, context=ctx) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode(), e.url]
    except urllib.error.URLError as e:
        return ["URLError", str(e.reason)]
'''


def make(server, net, headers, tool="open", domains=ALLOW, ca=True):
    """A container of TOOL allowlisting DOMAINS (None: no network_policy),
    with the test CA uploaded as /mnt/data/ca.pem; its id."""
    body = {"name": "egress"}
    if domains is not None:
        body["network_policy"] = policy(*domains)
    status, c = api(server, "POST", "/%s/v1/containers" % tool, body, headers)
    assert status == 200, c
    if ca:
        status, f = upload(server, c["id"], "ca.pem", net.ca_bytes, headers,
                           path="/%s/v1/containers" % tool)
        assert status == 200, f
    return c["id"]


def run(server, cid, code, headers, tool="open"):
    """Run PRELUDE + CODE in container CID; the call's logs."""
    tools = [{"type": "code_interpreter", "container": cid}]
    status, _, out = server.post("/%s/v1/responses" % tool, ci_body(
        [[{"call": PRELUDE + code}], [{"text": "{{last_output}}"}]], include=True,
        tools=tools), headers=headers)
    assert status == 200, out
    call = calls_of(out)[0]
    assert call["status"] == "completed", call
    assert call["container_id"] == cid
    return "".join(o.get("logs", "") for o in call["outputs"] or [])


def run_json(server, cid, code, headers, tool="open"):
    """Run CODE, whose last line prints one JSON document; that document."""
    logs = run(server, cid, code, headers, tool)
    try:
        return json.loads(logs.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError("the code printed no JSON:\n" + logs)


def refused(answer, body, status="HTTP/1.1 403 Forbidden"):
    """ANSWER (the raw text the relay gave) is the proxy's STATUS with BODY."""
    line, headers, text = parse_answer(answer)
    return ((line, headers.get("content-type"), headers.get("connection"), text) ==
            (status, "text/plain; charset=utf-8", "close", body))


def audit_lines(server, cid=None):
    """The "egress" lines of the audit log (of container CID)."""
    try:
        with open(server.audit) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [line for line in lines if line.get("event") == "egress" and
            (cid is None or line.get("container_id") == cid)]


# The test names' addresses, back to the names (one each).
NAME_OF = {addr: name for name, addr in HOSTS.items()}


def by_name(seen):
    """SEEN (the site proxy's records) with each address the egress proxy
    asked for as the name it stands for; a name asked for by name shows as
    such (the site proxy resolved it)."""
    return [(m, NAME_OF.get(h, "by name: " + h), p) for m, h, p in seen]


def hosts_ports(seen):
    return sorted((host, port) for _, host, port in by_name(seen))


# ------------------------------------------------------- allowed traffic

def test_an_allowlisted_domain_answers_over_http_and_https(eg, net, me):
    cid = make(eg, net, me)
    got = run_json(eg, cid, "print(json.dumps([get('http://allowed.test/echo/plain'), "
                   "get('https://allowed.test/echo/tls'), get('https://a.wild.test/echo/w')]))",
                   me)
    assert got == [[200, "http allowed.test GET /echo/plain\n"],
                   [200, "https allowed.test GET /echo/tls\n"],
                   [200, "https a.wild.test GET /echo/w\n"]]
    # the site proxy was asked for the address checked here (CONNECT
    # address:port), never the name; the name went inside, to the origin
    seen = net.site.seen()
    assert sorted(seen) == [("CONNECT", PUBLIC, 80), ("CONNECT", PUBLIC, 443),
                            ("CONNECT", HOSTS["a.wild.test"], 443)]
    assert sorted(net.origin_requests()) == [
        ("http", "allowed.test", "GET", "/echo/plain"),
        ("https", "a.wild.test", "GET", "/echo/w"),
        ("https", "allowed.test", "GET", "/echo/tls")]


SYSTEM_CAS = "/etc/ssl/certs/ca-certificates.crt"


def test_the_sandbox_has_the_proxy_variables_only_with_an_allowlist(eg, net, me):
    """With an allowlist the sandbox also sees the system's CA certificates
    (public), so that https to the real internet verifies as anywhere."""
    require(os.path.exists(SYSTEM_CAS), "the system's CA bundle (ca-certificates)")
    code = ("print(json.dumps({'env': {k: os.environ.get(k) for k in %r}, "
            "'ifaces': [n for _, n in socket.if_nameindex()], "
            "'cas': os.path.exists(%r) and hashlib.sha256(open(%r, 'rb').read()).hexdigest()}))"
            % (PROXY_VARS, SYSTEM_CAS, SYSTEM_CAS))
    code = "import hashlib\n" + code
    with open(SYSTEM_CAS, "rb") as f:
        cas = hashlib.sha256(f.read()).hexdigest()
    with_list = run_json(eg, make(eg, net, me), code, me)
    assert with_list == {"env": {k: RELAY for k in PROXY_VARS}, "ifaces": ["lo"], "cas": cas}
    without = make(eg, net, me, domains=None)
    assert run_json(eg, without, code, me) == {"env": {k: None for k in PROXY_VARS},
                                               "ifaces": ["lo"], "cas": False}
    # no relay listens in a container without an allowlist
    got = run_json(eg, without, "try:\n    raw('GET http://allowed.test/ HTTP/1.1\\r\\n"
                   "Host: allowed.test\\r\\n\\r\\n')\n    r = 'answered'\n"
                   "except OSError as e:\n    r = type(e).__name__\nprint(json.dumps(r))", me)
    assert got == "ConnectionRefusedError"
    assert net.site.seen() == []


NO_WAY_OUT = r'''
out = {}
for port in (80, 443):
    try:
        socket.create_connection((%r, port), timeout=10).close()
        out[str(port)] = "connected"
    except OSError as e:
        out[str(port)] = [type(e).__name__, e.errno == errno.ENETUNREACH]
for name in ("pypi.org", %r):
    try:
        socket.getaddrinfo(name, 443)
        out[name] = "resolved"
    except socket.gaierror as e:
        out[name] = "gaierror"
print(json.dumps(out))
'''


def test_without_the_proxy_there_is_no_way_out(eg, net, me):
    cid = make(eg, net, me)
    got = run_json(eg, cid, NO_WAY_OUT % (PUBLIC, UNRESOLVABLE), me)
    assert got == {"80": ["OSError", True], "443": ["OSError", True],
                   "pypi.org": "gaierror", UNRESOLVABLE: "gaierror"}
    assert net.site.seen() == []


# ----------------------------------------------------------------- refusals

REFUSALS = r'''
out = {
    "outside (http)": get("http://outside.test/x"),
    "outside": connect("outside.test:443"),
    "bare suffix of *.wild.test": connect("wild.test:443"),
    "ip literal": connect("%(public)s:443"),
    "ip literal (http)": raw("GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
    "localhost": connect("localhost:443"),
    "loopback alias": connect("loopback.test:443"),
    "private": connect("private.test:443"),
    "metadata (http)": raw("GET http://metadata.test/latest/meta-data/ HTTP/1.1\r\n"
                           "Host: metadata.test\r\n\r\n"),
    "cgnat": connect("cgnat.test:443"),
    "multicast": connect("multicast.test:443"),
    "port 22": connect("allowed.test:22"),
    "site refused": connect("%(site)s:443"),
    "malformed": raw("NONSENSE\r\n\r\n"),
    "redirect to outside": get("http://allowed.test/redirect?to=http://outside.test/landing"),
}
print(json.dumps(out))
'''


def test_refusals_name_the_domain_and_why(eg, net, me):
    cid = make(eg, net, me)
    got = run_json(eg, cid, REFUSALS % {"public": PUBLIC, "site": SITE_REFUSES}, me)
    assert got.pop("outside (http)") == [403, not_on_list("outside.test"),
                                         "http://outside.test/x"]
    # urllib followed the allowed domain's redirect; the refusal is the last word
    assert got.pop("redirect to outside") == [403, not_on_list("outside.test"),
                                              "http://outside.test/landing"]
    want = {
        "outside": not_on_list("outside.test"),
        "bare suffix of *.wild.test": not_on_list("wild.test"),
        "ip literal": ip_literal(PUBLIC),
        "ip literal (http)": ip_literal("127.0.0.1"),
        "localhost": resolves_to("localhost", "127.0.0.1", "loopback"),
        "loopback alias": resolves_to("loopback.test", "127.0.0.2", "loopback"),
        "private": resolves_to("private.test", "10.11.12.13", "private"),
        "metadata (http)": resolves_to("metadata.test", "169.254.169.254", "link-local"),
        "cgnat": resolves_to("cgnat.test", "100.64.0.7", "shared (CGNAT)"),
        "multicast": resolves_to("multicast.test", "224.0.0.251", "multicast"),
        "port 22": bad_port("allowed.test", 22),
    }
    errors = {
        "site refused": ("HTTP/1.1 502 Bad Gateway",
                         "egress error: the site proxy refused %s:443\n" % SITE_REFUSES),
        "malformed": ("HTTP/1.1 400 Bad Request", "egress error: malformed request\n"),
    }
    assert sorted(got) == sorted(list(want) + list(errors))
    wrong = {k: got[k] for k, body in want.items() if not refused(got[k], body)}
    wrong.update({k: got[k] for k, (status, body) in errors.items()
                  if not refused(got[k], body, status)})
    assert wrong == {}, json.dumps(wrong, indent=1)
    # the site proxy saw the allowed name of the redirect and the name it
    # refused itself, nothing else; the origin only the redirect
    assert hosts_ports(net.site.seen()) == [("allowed.test", 80), (SITE_REFUSES, 443)]
    assert net.origin_requests() == [
        ("http", "allowed.test", "GET", "/redirect?to=http://outside.test/landing")]


def test_a_name_that_does_not_resolve_without_a_site_proxy(eg, net, me):
    cid = make(eg, net, me, tool="direct", domains=[UNRESOLVABLE, "private.test"])
    got = run_json(eg, cid, "print(json.dumps([connect('%s:443'), connect('private.test:443'),"
                   " get('http://outside.test/')]))" % UNRESOLVABLE, me, tool="direct")
    assert refused(got[0], "egress error: %s could not be resolved\n" % UNRESOLVABLE,
                   "HTTP/1.1 502 Bad Gateway"), got[0]
    assert refused(got[1], resolves_to("private.test", "10.11.12.13", "private")), got[1]
    assert got[2] == [403, not_on_list("outside.test"), "http://outside.test/"]
    assert net.site.seen() == []


def not_resolved_here(domain):
    return ("egress refused: %s does not resolve on this server, and the site proxy is "
            "not trusted to resolve it\n" % domain)


def test_a_name_that_does_not_resolve_here_is_not_handed_to_the_site_proxy(eg, net, me):
    cid = make(eg, net, me)
    got = run_json(eg, cid, "print(json.dumps([connect('%s:443'), get('http://%s/x')]))"
                   % (UNRESOLVABLE, UNRESOLVABLE), me)
    assert refused(got[0], not_resolved_here(UNRESOLVABLE)), got[0]
    assert got[1] == [403, not_resolved_here(UNRESOLVABLE), "http://%s/x" % UNRESOLVABLE]
    assert net.site.seen() == []
    assert UNRESOLVABLE in net.dns.asked()


# --------------------------------------------------- request-side refusals

def np_request(route, prefix, np):
    """(path, body, PARAM) of a request giving network policy NP."""
    if route == "containers":
        return "%s/v1/containers" % prefix, {"name": "n", "network_policy": np}, \
            "network_policy"
    if route == "code_interpreter":
        tool = {"type": "code_interpreter", "container": {"type": "auto",
                                                          "network_policy": np}}
        param = "tools[0].container.network_policy"
    else:
        tool = {"type": "shell", "environment": {"type": "container_auto",
                                                 "network_policy": np}}
        param = "tools[0].environment.network_policy"
    return "%s/v1/responses" % prefix, {"model": "m", "input": "hi", "tools": [tool]}, param


SECRETS = {"type": "allowlist", "allowed_domains": ["allowed.test"],
           "domain_secrets": [{"domain": "allowed.test", "name": "API_TOKEN",
                               "value": "s3cret-never-echoed"}]}
MALFORMED = ["not a domain", "https://pypi.test/", "a..test", "pypi.test:443"]

def bad_secret_value(value):
    """A case: a secret whose VALUE the server refuses, and the 400 it says."""
    return ("/open", dict(SECRETS, domain_secrets=[
        {"domain": "allowed.test", "name": "T", "value": value}]), lambda p: (
        "invalid_value", p + ".domain_secrets[0].value",
        "Invalid value for '%s.domain_secrets[0].value': a secret's value must be 1 to "
        "16384 bytes of a header value, with no control character but tab." % p))


CASES = {
    "egress off": ("", policy("allowed.test"), lambda p: (
        "unsupported_parameter", p,
        "Network allowlists are not enabled for the sandbox tool 'local' on this server "
        "(egress=off).")),
    "outside the ceiling": ("/ceiling", policy("pypi.test", "evil.test"), lambda p: (
        "domain_not_allowed", p + ".allowed_domains[1]",
        "The domain 'evil.test' is not allowed for the sandbox tool 'ceiling' on this "
        "server.")),
    "the bare suffix of a ceiling's wildcard": ("/ceiling", policy("files.test"), lambda p: (
        "domain_not_allowed", p + ".allowed_domains[0]",
        "The domain 'files.test' is not allowed for the sandbox tool 'ceiling' on this "
        "server.")),
    "a secret's domain off the allowlist": ("/open", dict(SECRETS, domain_secrets=[
        {"domain": "other.test", "name": "API_TOKEN", "value": "v"}]), lambda p: (
        "invalid_value", p + ".domain_secrets[0].domain",
        "Invalid value for '%s.domain_secrets[0].domain': 'other.test' is not on the "
        "allowlist." % p)),
    "a secret named PATH": ("/open", dict(SECRETS, domain_secrets=[
        {"domain": "allowed.test", "name": "PATH", "value": "v"}]), lambda p: (
        "invalid_value", p + ".domain_secrets[0].name",
        "Invalid value for '%s.domain_secrets[0].name': 'PATH' is not an environment "
        "variable name a secret may take." % p)),
    "a secret named twice": ("/open", dict(SECRETS, domain_secrets=[
        {"domain": "allowed.test", "name": "T", "value": "v"},
        {"domain": "allowed.test", "name": "T", "value": "w"}]), lambda p: (
        "invalid_value", p + ".domain_secrets[1].name",
        "Invalid value for '%s.domain_secrets[1].name': 'T' is given twice." % p)),
    "a secret on two lines": bad_secret_value("v\r\nX-Injected: 1"),
    # the egress proxy refuses what the request parser once let through: the
    # container was made, and its proxy then had no secret and no network
    "a secret with a control character": bad_secret_value("v\x01w"),
    "a secret with DEL": bad_secret_value("v\x7f"),
}
for _bad in MALFORMED:
    CASES["malformed %r" % _bad] = ("/open", policy("allowed.test", _bad),
                                    lambda p, bad=_bad: (
        "invalid_value", p + ".allowed_domains[1]",
        "Invalid value for '%s.allowed_domains[1]': '%s' is not a domain name." % (p, bad)))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("route", ["code_interpreter", "shell", "containers"])
def test_a_policy_the_server_does_not_allow_is_refused(eg, model, me, route, case):
    prefix, np, expect = CASES[case]
    path, body, param = np_request(route, prefix, np)
    status, _, answer = eg.post(path, body, headers=me)
    code, where, message = expect(param)
    assert (status, error_of(answer)) == (400, {
        "type": "invalid_request_error", "code": code, "param": where, "message": message})
    assert model.requests() == []
    status, listing = api(eg, "GET", "/.ci-test/containers", headers=me)
    assert (status, listing["data"]) == (200, [])


# ------------------------------------------------- the container object

def test_the_container_object_reports_its_policy(eg, net, me):
    status, c = api(eg, "POST", "/open/v1/containers", {
        "name": "listed", "network_policy": policy("Allowed.TEST", "*.Wild.test")}, me)
    assert status == 200, c
    reported = {"type": "allowlist", "allowed_domains": ["allowed.test", "*.wild.test"]}
    assert c["network_policy"] == reported
    assert list(resource_checker("ContainerResource").iter_errors(c)) == []
    status, again = api(eg, "GET", "/open/v1/containers/" + c["id"], headers=me)
    assert (status, again["network_policy"]) == (200, reported)
    status, listing = api(eg, "GET", "/open/v1/containers", headers=me)
    assert [(x["id"], x["network_policy"]) for x in listing["data"]] == [(c["id"], reported)]
    # under the ceiling: what it allows, as given
    status, capped = api(eg, "POST", "/ceiling/v1/containers", {
        "name": "capped", "network_policy": policy("PyPI.test", "cdn.files.test",
                                                   "*.files.test")}, me)
    assert (status, capped["network_policy"]) == (200, {
        "type": "allowlist", "allowed_domains": ["pypi.test", "cdn.files.test",
                                                 "*.files.test"]})
    # without a policy, or with "disabled" on a tool with egress off
    status, plain = api(eg, "POST", "/open/v1/containers", {"name": "plain"}, me)
    assert (status, plain["network_policy"]) == (200, {"type": "disabled"})
    status, off = api(eg, "POST", "/v1/containers", {
        "name": "off", "network_policy": {"type": "disabled"}}, me)
    assert (status, off["network_policy"]) == (200, {"type": "disabled"})
    assert list(resource_checker("ContainerResource").iter_errors(off)) == []


AUTO_CODE = ("print(json.dumps([os.environ.get('HTTPS_PROXY'), get('http://allowed.test/echo/"
             "%s'), get('http://outside.test/%s')]))")


def test_an_auto_container_keeps_its_allowlist_on_later_turns(eg, net, me):
    tool = {"type": "code_interpreter",
            "container": {"type": "auto", "network_policy": policy("allowed.test")}}
    status, _, first = eg.post("/open/v1/responses", ci_body(
        [[{"call": PRELUDE + AUTO_CODE % ("first", "first")}], [{"text": "{{last_output}}"}]],
        include=True, tools=[tool]), headers=me)
    assert status == 200, first
    (call,) = calls_of(first)
    assert json.loads(call["outputs"][0]["logs"]) == [
        RELAY, [200, "http allowed.test GET /echo/first\n"],
        [403, not_on_list("outside.test"), "http://outside.test/first"]]
    cid = call["container_id"]
    status, c = api(eg, "GET", "/open/v1/containers/" + cid, headers=me)
    assert (status, c["network_policy"]) == (200, policy("allowed.test"))
    # a later turn by previous_response_id, its tool without a policy: the
    # same container, the same list
    status, _, second = eg.post("/open/v1/responses", ci_body(
        [[{"call": PRELUDE + AUTO_CODE % ("second", "second")}],
         [{"text": "{{last_output}}"}]], include=True,
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
        previous_response_id=first["id"]), headers=me)
    assert status == 200, second
    (call,) = calls_of(second)
    assert call["container_id"] == cid
    assert json.loads(call["outputs"][0]["logs"]) == [
        RELAY, [200, "http allowed.test GET /echo/second\n"],
        [403, not_on_list("outside.test"), "http://outside.test/second"]]
    assert hosts_ports(net.site.seen()) == [("allowed.test", 80), ("allowed.test", 80)]


# ----------------------------------------------------------- the shell

def test_the_shell_reaches_the_allowlist_and_nothing_else(eg, net, me):
    require(shutil.which("curl"), "the hosted shell's egress test runs curl (curl)")
    env = {"type": "container_auto", "network_policy": policy("allowed.test")}
    fmt = "curl -sS -w ' %{http_code}\\n' "
    status, _, out = eg.post("/open/v1/responses", {
        "model": "m", "tools": [{"type": "shell", "environment": env}],
        "input": script_input([[shell_call(
            fmt + "http://allowed.test/echo/shell",
            fmt + "-k https://allowed.test/echo/shell-tls",
            fmt + "http://outside.test/shell",
            "env | grep -iE '^(http|https|all)_proxy=' | LC_ALL=C sort")],
            [{"text": "done"}]])}, headers=me)
    assert status == 200, out
    assert outputs_of(out) == [
        exit_entry("http allowed.test GET /echo/shell\n 200\n"),
        exit_entry("https allowed.test GET /echo/shell-tls\n 200\n"),
        exit_entry(not_on_list("outside.test") + " 403\n"),
        exit_entry("".join("%s=%s\n" % (k, RELAY) for k in sorted(PROXY_VARS)))]
    cid = items_of(out, "shell_call")[0]["environment"]["container_id"]
    status, c = api(eg, "GET", "/open/v1/containers/" + cid, headers=me)
    assert (status, c["network_policy"]) == (200, policy("allowed.test"))
    assert hosts_ports(net.site.seen()) == [("allowed.test", 80), ("allowed.test", 443)]


# --------------------------------------------------------- a package index

def test_pip_downloads_a_package_from_the_test_index(eg, net, me):
    from test_egress_fixtures import pip_works
    require(pip_works(), "the package test runs pip in the sandbox (python3-pip)")
    cid = make(eg, net, me, tool="ceiling", domains=["pypi.test", "pkgs.files.test"],
               ca=False)
    got = run_json(eg, cid, r'''
p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                    "--disable-pip-version-check", "--trusted-host", "pypi.test",
                    "--trusted-host", "pkgs.files.test", "--index-url",
                    "http://pypi.test/simple/", "ci-egress-probe", "-d", "/mnt/data"],
                   capture_output=True, text=True, env=dict(os.environ, PIP_CONFIG_FILE="/dev/null"))
print(json.dumps({"rc": p.returncode, "stderr": p.stderr[-3000:],
                  "files": sorted(os.listdir("/mnt/data"))}))
''', me, tool="ceiling")
    assert (got["rc"], got["files"]) == (0, [PACKAGE_FILE]), got["stderr"]
    check_package_file(eg, net, cid, me)


def test_urllib_reads_the_index_and_fetches_the_package(eg, net, me):
    cid = make(eg, net, me, tool="ceiling", domains=["pypi.test", "*.files.test"], ca=False)
    got = run_json(eg, cid, r'''
import re
page = urllib.request.urlopen("http://pypi.test/simple/ci-egress-probe/", timeout=60).read()
url, digest = re.search(rb'href="([^"#]+)#sha256=([0-9a-f]+)"', page).groups()
data = urllib.request.urlopen(url.decode(), timeout=60).read()
name = url.decode().rsplit("/", 1)[1]
open("/mnt/data/" + name, "wb").write(data)
print(json.dumps([name, digest.decode(), hashlib.sha256(data).hexdigest()]))
''', me, tool="ceiling")
    assert got == [PACKAGE_FILE, net.package.sha256, net.package.sha256]
    check_package_file(eg, net, cid, me)


def check_package_file(eg, net, cid, me):
    """The wheel is in the container, byte for byte, and came from the index
    through the site proxy."""
    (f,) = [x for x in files(eg, cid, me)["data"] if x["path"] == "/mnt/data/" + PACKAGE_FILE]
    status, _, data = content(eg, cid, f["id"], me)
    assert (status, hashlib.sha256(data).hexdigest()) == (200, net.package.sha256)
    assert data == net.package.data
    asked = net.origin_requests()
    assert ("http", "pypi.test", "GET", "/simple/ci-egress-probe/") in asked
    assert asked.count(("http", "pkgs.files.test", "GET", "/files/" + PACKAGE_FILE)) == 1
    assert {h for h, _ in hosts_ports(net.site.seen())} == {"pypi.test", "pkgs.files.test"}


# ---------------------------------------------------------------- hostile

MANY = r'''
answers, socks = [], []
for i in range(%d):
    s, data = tunnel("allowed.test:443")
    if not data.startswith("HTTP/1.1 200"):
        data += rest(s)
    answers.append(data)
    socks.append(s)
for s in socks:
    s.close()
print(json.dumps(answers))
'''


def test_connections_past_the_per_container_limit_are_refused(eg, net, me):
    cid = make(eg, net, me)
    answers = run_json(eg, cid, MANY % (PER_CONTAINER + 8), me)
    held, past = answers[:PER_CONTAINER], answers[PER_CONTAINER:]
    assert [a.split(" ")[1] for a in held] == ["200"] * PER_CONTAINER, held[:1]
    assert [refused(a, TOO_MANY) for a in past] == [True] * 8, past
    assert by_name(net.site.seen()) == [("CONNECT", "allowed.test", 443)] * PER_CONTAINER
    # once they are closed, a fresh request goes through
    wait_until(lambda: net.site.open_connections() == 0,
               "the site proxy to see the held tunnels closed")
    assert run_json(eg, cid, "print(json.dumps(get('https://allowed.test/echo/fresh')))",
                    me) == [200, "https allowed.test GET /echo/fresh\n"]


SLOWLORIS = r'''
s = socket.create_connection(RELAY, timeout=60)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allo")
# tell the test the half head is out (the origin records the request)
marked = get("http://allowed.test/mark/slowloris-open")
# bounded below the proxy's 60 s idle limit: only the 10 s head limit ends it first
s.settimeout(40)
data, outcome = b"", None
try:
    while True:
        got = s.recv(4096)
        if not got:
            outcome = "closed"
            break
        data += got
except socket.timeout:
    outcome = "still open"
except ConnectionResetError:
    outcome = "closed"
print(json.dumps([marked, outcome, data.decode("utf-8", "replace")]))
'''


def test_a_slowloris_is_cut_and_other_containers_are_served_meanwhile(eg, net, me):
    slow, other = make(eg, net, me), make(eg, net, me)
    result = {}

    def slowloris():
        try:
            result["got"] = run_json(eg, slow, SLOWLORIS, me)
        except BaseException as e:      # reported below
            result["error"] = e
    t = threading.Thread(target=slowloris)
    t.start()
    try:
        wait_until(lambda: ("http", "allowed.test", "GET", "/mark/slowloris-open") in
                   net.origin_requests() or "error" in result,
                   "the slowloris to have sent its half head")
        assert run_json(eg, other, "print(json.dumps(get('http://allowed.test/echo/meanwhile')))",
                        me) == [200, "http allowed.test GET /echo/meanwhile\n"]
    finally:
        t.join(180)
    assert "error" not in result, result.get("error")
    marked, outcome, data = result["got"]
    assert marked == [200, "http allowed.test GET /mark/slowloris-open\n"]
    assert outcome == "closed", (outcome, data)
    assert "HTTP/1.1 200" not in data
    # the half head never reached the site proxy
    assert hosts_ports(net.site.seen()) == [("allowed.test", 80), ("allowed.test", 80)]
    # the other container's connection ended while the slowloris's was held
    lines = wait_until(lambda: (lambda ls: ls if len([x for x in ls if x["container_id"] ==
                                                      slow]) >= 2 else None)(
        audit_lines(eg)), "the slowloris's audit lines")
    order = [(x["container_id"], x["method"], x["domain"], x["port"], x["allowed"])
             for x in lines if x["container_id"] in (slow, other)]
    mark = ("GET", "allowed.test", 80, True)
    other_at = order.index((other,) + mark)
    (slowloris_at,) = [i for i, x in enumerate(order) if x[0] == slow and x[1:] != mark]
    assert other_at < slowloris_at, order


HUGE = r'''
n, outcome = 0, None
try:
    with urllib.request.urlopen("http://allowed.test/huge", timeout=60) as r:
        while n < %d:
            b = r.read(1 << 20)
            if not b:
                outcome = "eof"
                break
            n += len(b)
        else:
            outcome = "not cut"
except Exception as e:
    outcome = type(e).__name__
print(json.dumps([n, outcome]))
'''


def test_a_huge_download_is_cut_by_the_byte_budget(eg, net, me):
    cid = make(eg, net, me)
    got, outcome = run_json(eg, cid, HUGE % (BUDGET + BUDGET // 2), me)
    # cut: the body ends short of its Content-Length (urllib's read(n) says
    # so with an empty read, or an error, as the close lands)
    assert outcome in ("eof", "IncompleteRead", "ConnectionResetError"), (got, outcome)
    assert 0 < got <= BUDGET
    (rec,) = wait_until(lambda: [r for r in net.http.records() if r["path"] == "/huge" and
                                 r["done"]], "the origin to see the download cut")
    assert rec["sent"] > got
    # the budget is per execution: the next one fetches again
    assert run_json(eg, cid, "print(json.dumps(get('http://allowed.test/echo/after')))",
                    me) == [200, "http allowed.test GET /echo/after\n"]


def test_port_22_is_refused_by_connect_and_by_url(eg, net, me):
    cid = make(eg, net, me)
    got = run_json(eg, cid, "print(json.dumps([connect('allowed.test:22'), raw('GET "
                   "http://allowed.test:22/ HTTP/1.1\\r\\nHost: allowed.test:22\\r\\n\\r\\n')]))",
                   me)
    assert [refused(a, bad_port("allowed.test", 22)) for a in got] == [True, True], got
    assert net.site.seen() == []


# ------------------------------------------------------------ the audit log

def test_every_connection_is_in_the_audit_and_refusals_are_counted(eg, net, me):
    cid = make(eg, net, me)
    run(eg, cid, "get('http://allowed.test/echo/audited'); get('http://outside.test/');"
        " connect('allowed.test:22'); connect('private.test:443')", me)
    # a relayed connection is a line of its own; refusals are counted into
    # at most a line a second, which names the last of those it counts
    lines = wait_until(lambda: (lambda ls: ls if sum(x["count"] for x in ls) >= 4 else None)(
        audit_lines(eg, cid)), "four connections in the egress lines of the container")
    assert sum(x["count"] for x in lines) == 4, lines
    for line in lines:
        assert set(line) == {"time", "event", "container_id", "tool", "domain", "port",
                             "method", "allowed", "reason", "bytes_out", "bytes_in",
                             "duration_ms", "tls", "injected", "scrubbed", "count",
                             "outlived"}, line
        assert (line["tls"], line["injected"], line["scrubbed"], line["outlived"]) == (
            None, 0, 0, False), line
        assert (line["tool"], type(line["bytes_out"]), type(line["bytes_in"]),
                type(line["duration_ms"]) in (int, float)) == ("open", int, int, True), line
    refusals = {
        ("allowed.test", 22, "CONNECT", False,
         "allowed.test:22: only ports 80 and 443 are allowed"),
        ("outside.test", 80, "GET", False, "outside.test is not on this container's allowlist"),
        ("private.test", 443, "CONNECT", False,
         "private.test resolves to 10.11.12.13, a private address")}
    said = [(x["domain"], x["port"], x["method"], x["allowed"], x["reason"]) for x in lines]
    (ok,) = [x for x in lines if x["allowed"]]
    assert ok["count"] == 1 and said.count(("allowed.test", 80, "GET", True, None)) == 1
    assert {x for x in said if not x[3]} <= refusals, said
    # the last refusal is always said (alone, or counting those before it)
    assert said[-1] == ("private.test", 443, "CONNECT", False,
                        "private.test resolves to 10.11.12.13, a private address"), said
    body = len("http allowed.test GET /echo/audited\n")
    assert ok["bytes_in"] > body and ok["bytes_out"] > 0


def lowered_conf(model_port, ceiling):
    return base_conf(model_port, """
CodeInterpreterSandbox fenced provider=local egress=allowlist allowed_domains=%s
<Location /fenced/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter fenced
</Location>
<Location /fenced/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter fenced
</Location>
""" % (ceiling, model_port))


def test_a_ceiling_lowered_by_a_reload_retires_wider_containers(model):
    """A container keeps the allowlist it was made with, but only while the
    tool still allows it: after a reload that lowers allowed_domains=, a
    container whose list goes past the new ceiling is unavailable (its
    turns and its files refused); one within it stays usable."""
    me = {"Authorization": "Bearer sk-egress-lowered"}
    server = Httpd("egress-lowered", lowered_conf(model.port, "a.test,b.test"))
    server.start()
    try:
        made = {}
        for name, domains in (("wide", ["a.test", "b.test"]), ("narrow", ["a.test"])):
            status, c = api(server, "POST", "/fenced/v1/containers",
                            {"name": name, "network_policy": policy(*domains)}, me)
            assert status == 200, c
            made[name] = c["id"]
        server.write_conf(lowered_conf(model.port, "a.test"))
        server.graceful()
        wide, narrow = made["wide"], made["narrow"]
        status, _, out = server.post("/fenced/v1/responses", {
            "model": "m", "input": script_input([[{"call": "print(1)"}]]),
            "tools": [{"type": "code_interpreter", "container": wide}]}, headers=me)
        assert (status, error_of(out)) == (400, {
            "type": "invalid_request_error", "code": "container_unavailable",
            "param": "tools[0].container",
            "message": "Container with id '%s' runs on a sandbox tool this server no longer "
                       "serves (it was removed or changed); use a new container." % wide})
        status, _, body = server.request("GET", "/fenced/v1/containers/%s/files" % wide,
                                         headers=me)
        assert (status, json.loads(body)["error"]["code"]) == (409, "container_unavailable")
        status, _, out = server.post("/fenced/v1/responses", {
            "model": "m", "input": script_input([[{"call": "print(1)"}],
                                                 [{"text": "{{last_output}}"}]]),
            "tools": [{"type": "code_interpreter", "container": narrow}]}, headers=me)
        assert status == 200, out
        assert out["output"][-1]["content"][0]["text"] == "1\n"
    finally:
        server.stop()


# ------------------------------------------------------------ domain secrets

SECRET_VALUE = "sv-" + "7f3a9c" * 6          # greppable, and never anywhere but the origin
SECRET_POLICY = {"type": "allowlist",
                 "allowed_domains": ["allowed.test", "a.wild.test", "pypi.test"],
                 "domain_secrets": [{"domain": "allowed.test", "name": "API_TOKEN",
                                     "value": SECRET_VALUE}]}

SECRET_CODE = r'''
token = os.environ["API_TOKEN"]
# (the value itself is not in this code: only its digest)
out = {"placeholder": token, "env_has_value": %r in
       [hashlib.sha256(v.encode()).hexdigest() for v in os.environ.values()]}
def fetch(url, ctx=None):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token,
                                               "X-Key": token})
    with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
        return [r.status, r.read().decode()]
out["http"] = raw("GET http://allowed.test/echo/plain?key=" + token + " HTTP/1.1\r\n"
                  "Authorization: Bearer " + token + "\r\n\r\n")
out["https"] = fetch("https://allowed.test/echo/tls?key=" + token)
out["other"] = fetch("https://a.wild.test/echo/other",
                     ssl.create_default_context(cafile="/mnt/data/ca.pem"))
out["trusts_system_path"] = open("/etc/ssl/certs/ca-certificates.crt").read().count("BEGIN CERTIFICATE") > 0
print(json.dumps(out))
''' % hashlib.sha256(SECRET_VALUE.encode()).hexdigest()


def plain_refused(domain):
    return ("egress refused: %s has domain secrets; plain http to it is not allowed, use "
            "https\n" % domain)


MASK = "*" * len(SECRET_VALUE)      # what the sandbox sees where the value came back


def test_a_secret_is_injected_for_its_domain_only(eg, net, me):
    """The sandbox holds a placeholder; the origin of the secret's domain
    gets the value over https, which the proxy terminates with its own CA
    that the sandbox trusts, verifying the origin against egress_ca (the
    query's echo comes back masked); plain http to the domain is refused;
    another allowed domain gets the placeholder as it was sent, through a
    tunnel (its own certificate)."""
    status, c = api(eg, "POST", "/open/v1/containers",
                    {"name": "secret", "network_policy": SECRET_POLICY}, me)
    assert status == 200, c
    assert c["network_policy"] == {"type": "allowlist",
                                   "allowed_domains": SECRET_POLICY["allowed_domains"]}
    assert SECRET_VALUE not in json.dumps(c)
    status, f = upload(eg, c["id"], "ca.pem", net.ca_bytes, me, path="/open/v1/containers")
    assert status == 200, f
    got = run_json(eg, c["id"], SECRET_CODE, me)
    placeholder = got["placeholder"]
    assert re.fullmatch(r"CI_SECRET_[0-9a-f]{32}", placeholder), got
    assert got["env_has_value"] is False
    assert refused(got["http"], plain_refused("allowed.test")), got["http"]
    assert got["https"] == [200, "https allowed.test GET /echo/tls?key=%s\n" % MASK]
    assert got["other"] == [200, "https a.wild.test GET /echo/other\n"]
    assert got["trusts_system_path"] is True
    by_path = {r["path"].split("?")[0]: r for r in net.http.records() + net.https.records()}
    assert "/echo/plain" not in by_path
    assert by_path["/echo/tls"]["path"] == "/echo/tls?key=" + SECRET_VALUE
    assert by_path["/echo/tls"]["headers"]["authorization"] == "Bearer " + SECRET_VALUE
    assert by_path["/echo/tls"]["headers"]["x-key"] == SECRET_VALUE
    assert by_path["/echo/tls"]["headers"]["accept-encoding"] == "identity"
    assert by_path["/echo/other"]["headers"]["authorization"] == "Bearer " + placeholder
    # the value is nowhere but at the origin
    status, _, listing = eg.request("GET", "/open/v1/containers", headers=me)
    files_listing = eg.request("GET", "/open/v1/containers/%s/files" % c["id"], headers=me)[2]
    for where, text in (("listing", listing.decode()), ("files", files_listing.decode()),
                        ("error log", eg.log()), ("audit log", open(eg.audit).read())):
        assert SECRET_VALUE not in text, where
    lines = [json.loads(x) for x in open(eg.audit) if '"egress"' in x]
    mine = [x for x in lines if x.get("container_id") == c["id"]]
    assert sorted((x["domain"], x["port"], x["tls"], x["injected"], x["scrubbed"],
                   x["reason"]) for x in mine) == [
        ("a.wild.test", 443, None, 0, 0, None),
        ("allowed.test", 80, None, 0, 0,
         "allowed.test has domain secrets; plain http to it is not allowed, use https"),
        ("allowed.test", 443, "terminated", 3, 1, None)]


REFLECT_CODE = r'''
import http.client
token = os.environ["API_TOKEN"]
ctx = ssl.create_default_context()     # the server's egress CA is the system's here
def tls_get(path, headers):
    """GET PATH of allowed.test through the relay, no redirect followed:
    [status, reason, Location, body]."""
    c = http.client.HTTPSConnection(RELAY[0], RELAY[1], timeout=60, context=ctx)
    c.set_tunnel("allowed.test", 443)
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    got = [r.status, r.reason, r.getheader("Location"), r.read().decode()]
    c.close()
    return got
key = {"X-Key": token}
out = {"path": tls_get("/echo/path/%s?q=%s&enc=%s" % (token, token, token), key),
       "headers": tls_get("/headers", {"X-Key": "k=" + token, "X-Enc": token}),
       "redirect": tls_get("/redirect?to=" + urllib.parse.quote(
           "https://allowed.test/landing?k=%s" % token, safe=""), key)}
print(json.dumps(out))
'''


def test_a_reflected_secret_never_reaches_the_sandbox(eg, net, me):
    """Origins that echo the request (its path and query, its headers, a
    redirect that keeps the query in Location) give the sandbox a mask
    where the value was; the path before the query keeps the placeholder
    (the value never goes there). The origin got the value each time."""
    status, c = api(eg, "POST", "/open/v1/containers",
                    {"name": "reflect", "network_policy": SECRET_POLICY}, me)
    assert status == 200, c
    status, f = upload(eg, c["id"], "ca.pem", net.ca_bytes, me, path="/open/v1/containers")
    assert status == 200, f
    logs = run(eg, c["id"], "import urllib.parse\n" + REFLECT_CODE, me)
    assert SECRET_VALUE not in logs
    got = json.loads(logs.strip().splitlines()[-1])
    ph = re.search(r"CI_SECRET_[0-9a-f]{32}", logs).group(0)
    assert got["path"] == [200, "OK", None, "https allowed.test GET /echo/path/%s?q=%s&enc=%s\n"
                           % (ph, MASK, MASK)]
    status_, reason, location, body = got["headers"]
    assert (status_, reason, location) == (200, "OK", None)
    assert sorted(body.splitlines()) == sorted([
        "Host: allowed.test", "Accept-Encoding: identity", "X-Key: k=" + MASK,
        "X-Enc: " + MASK, "Connection: close"]), body
    assert got["redirect"] == [302, "Found", "https://allowed.test/landing?k=" + MASK, ""]
    recs = {r["path"].split("?")[0]: r for r in net.https.records()}
    assert recs["/echo/path/" + ph]["path"] == "/echo/path/%s?q=%s&enc=%s" % (
        ph, SECRET_VALUE, SECRET_VALUE)
    assert recs["/headers"]["headers"]["x-key"] == "k=" + SECRET_VALUE
    assert recs["/redirect"]["path"] == "/redirect?to=" + urllib.parse.quote(
        "https://allowed.test/landing?k=%s" % SECRET_VALUE, safe="")
    lines = [x for x in audit_lines(eg, c["id"]) if x["domain"] == "allowed.test"]
    assert sorted(x["scrubbed"] for x in lines) == [1, 2, 2], lines


TUNNEL_CODE = r'''
out = {}
# another name in the ClientHello of a tunnel to allowed.test:443
s, answer = tunnel("allowed.test:443")
ctx = ssl.create_default_context(cafile="/mnt/data/ca.pem")
try:
    t = ctx.wrap_socket(s, server_hostname="outside.test")
    t.sendall(b"GET /echo/sni HTTP/1.1\r\nHost: outside.test\r\nConnection: close\r\n\r\n")
    out["sni"] = [answer, rest(t)]
except (ssl.SSLError, OSError):
    out["sni"] = [answer, "handshake failed"]
s.close()
# CONNECT to port 80, then another Host inside
s, answer = tunnel("allowed.test:80")
try:
    s.sendall(b"GET /echo/port80 HTTP/1.1\r\nHost: outside.test\r\n\r\n")
except OSError:
    pass
out["port80"] = answer + rest(s)
s.close()
print(json.dumps(out))
'''


def test_a_tunnel_carries_only_its_own_name(eg, net, me):
    """CONNECT allowed.test:443 then a ClientHello for outside.test: closed
    before the origin hears anything (the audit says why); CONNECT to port
    80 is refused (plain http goes in absolute form, every request checked)."""
    cid = make(eg, net, me)
    got = run_json(eg, cid, TUNNEL_CODE, me)
    assert got["sni"] == ["HTTP/1.1 200 Connection established\r\n\r\n", "handshake failed"]
    assert refused(got["port80"], "egress refused: CONNECT allowed.test:80: plain http is "
                   "sent as absolute-form requests (http://...), not through a tunnel\n"), got
    # the origins' own records: nothing at all, least of all outside.test
    assert net.origin_requests() == []
    assert by_name(net.site.seen()) == [("CONNECT", "allowed.test", 443)]
    lines = wait_until(lambda: (lambda ls: ls if len(ls) >= 2 else None)(
        audit_lines(eg, cid)), "two egress lines of the container")
    assert sorted((x["port"], x["allowed"], x["reason"]) for x in lines) == [
        (80, False, "CONNECT allowed.test:80: plain http is sent as absolute-form requests "
                    "(http://...), not through a tunnel"),
        (443, False, "the TLS ClientHello names outside.test, not allowed.test")]


def test_a_secret_in_a_request_is_not_echoed(eg, model, me):
    """The answer's tools echo the request's, without a secret's value; a
    later turn in the same container keeps the secret."""
    tool = {"type": "code_interpreter", "container": {"type": "auto",
                                                      "network_policy": SECRET_POLICY}}
    status, _, out = eg.post("/open/v1/responses", {
        "model": "m", "tools": [tool], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": "import os; print(os.environ['API_TOKEN'][:10])"}],
                               [{"text": "{{last_output}}"}]])}, headers=me)
    assert status == 200, out
    assert out["output"][-1]["content"][0]["text"] == "CI_SECRET_\n"
    assert SECRET_VALUE not in json.dumps(out)
    echoed = out["tools"][0]["container"]["network_policy"]["domain_secrets"]
    assert echoed == [{"domain": "allowed.test", "name": "API_TOKEN"}]
    status, _, again = eg.post("/open/v1/responses", {
        "model": "m", "tools": [tool], "previous_response_id": out["id"],
        "input": script_input([[{"call": "print(len(os.environ['API_TOKEN']))"}],
                               [{"text": "{{last_output}}"}]])}, headers=me)
    assert status == 200, again
    assert again["output"][-1]["content"][0]["text"] == "42\n"
    assert SECRET_VALUE not in json.dumps(again) + eg.log()
