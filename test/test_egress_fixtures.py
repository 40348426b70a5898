"""The egress tests' network on its own (test/egress_fixtures.py), without
the module's egress proxy: the site proxy and the origins reached from the
test process with urllib, the https origin verified against the test CA,
the package index read by pip, the test hosts file and name server seen
through conftest's private mount namespace, and a test httpd started in it."""
import hashlib
import os
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import PYTHON, Httpd, base_conf, require, wait_until
from egress_fixtures import (DNS_ADDR, HOSTS, PACKAGE_FILE, SITE_REFUSES, UNRESOLVABLE,
                             hosts_text, in_etc_namespace, resolv_text)
from egress_fixtures import egress_net  # noqa: F401 (a fixture)


@pytest.fixture
def net(egress_net):  # noqa: F811
    egress_net.reset()
    return egress_net


def opener(net, https=False):
    handlers = [urllib.request.ProxyHandler({"http": net.site.url, "https": net.site.url})]
    if https:
        handlers.append(urllib.request.HTTPSHandler(context=net.ca.client_context()))
    return urllib.request.build_opener(*handlers)


def fetch(net, url):
    with opener(net, url.startswith("https")).open(url, timeout=30) as r:
        return r.status, r.read()


def test_http_through_the_site_proxy_echoes_the_host(net):
    assert fetch(net, "http://allowed.test/echo/plain?q=1") == (
        200, b"http allowed.test GET /echo/plain?q=1\n")
    assert net.site.seen() == [("GET", "allowed.test", 80)]
    assert net.origin_requests() == [("http", "allowed.test", "GET", "/echo/plain?q=1")]


def test_https_through_connect_verifies_against_the_test_ca(net):
    for name in ("allowed.test", "a.wild.test", UNRESOLVABLE):
        assert fetch(net, "https://%s/echo/tls" % name) == (
            200, ("https %s GET /echo/tls\n" % name).encode())
    assert net.site.seen() == [("CONNECT", "allowed.test", 443),
                               ("CONNECT", "a.wild.test", 443),
                               ("CONNECT", UNRESOLVABLE, 443)]
    # the system's CAs do not know the test CA
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.build_opener(urllib.request.ProxyHandler(
            {"https": net.site.url})).open("https://allowed.test/", timeout=30)
    assert isinstance(e.value.reason, ssl_error())


def ssl_error():
    import ssl
    return ssl.SSLCertVerificationError


def test_a_redirect_is_followed_to_its_target(net):
    assert fetch(net, "http://allowed.test/redirect?to=http://outside.test/landing") == (
        200, b"http outside.test GET /landing\n")
    assert net.site.seen() == [("GET", "allowed.test", 80), ("GET", "outside.test", 80)]


def test_the_headers_page_echoes_the_request_headers(net):
    req = urllib.request.Request("http://allowed.test/headers", headers={"X-Probe": "p 1"})
    with opener(net).open(req, timeout=30) as r:
        status, lines = r.status, r.read().decode().splitlines()
    assert status == 200
    assert "X-Probe: p 1" in lines and "Host: allowed.test" in lines, lines
    assert all(": " in line for line in lines), lines


def test_the_site_proxy_refuses_its_own_list_and_other_ports(net):
    with pytest.raises(urllib.error.HTTPError) as e:
        fetch(net, "http://%s/x" % SITE_REFUSES)
    assert e.value.code == 403
    with pytest.raises(OSError) as e:
        fetch(net, "https://%s/x" % SITE_REFUSES)
    assert "403" in str(e.value)
    s = socket.create_connection(("127.0.0.1", net.site.port), timeout=30)
    s.sendall(b"CONNECT allowed.test:22 HTTP/1.1\r\nHost: allowed.test:22\r\n\r\n")
    assert s.recv(4096).split(b"\r\n")[0] == b"HTTP/1.1 502 Bad Gateway"
    s.close()
    assert net.site.seen() == [("GET", SITE_REFUSES, 80), ("CONNECT", SITE_REFUSES, 443),
                               ("CONNECT", "allowed.test", 22)]
    assert net.origin_requests() == []


def test_the_huge_download_counts_what_it_sent_until_the_peer_left(net):
    r = opener(net).open("http://allowed.test/huge", timeout=30)
    assert r.headers["Content-Length"] == str(4 << 30)
    got = len(r.read(8 << 20))
    r.close()
    assert got == 8 << 20
    (rec,) = wait_until(lambda: [x for x in net.http.records() if x["done"]],
                        "the origin to see the client go")
    assert rec["path"] == "/huge" and rec["sent"] >= got


def test_the_index_serves_the_wheel_to_urllib(net):
    _, root = fetch(net, "http://pypi.test/simple/")
    assert b'href="/simple/ci-egress-probe/"' in root
    _, page = fetch(net, "http://pypi.test/simple/ci-egress-probe/")
    link = page.split(b'href="')[1].split(b'"')[0].decode()
    url, _, frag = link.partition("#")
    assert url == "http://pkgs.files.test/files/" + PACKAGE_FILE
    _, data = fetch(net, url)
    assert data == net.package.data
    assert frag == "sha256=" + hashlib.sha256(data).hexdigest()


def pip_works():
    return subprocess.run([PYTHON, "-m", "pip", "--version"], capture_output=True).returncode == 0


def test_pip_downloads_the_wheel_through_the_site_proxy(net, tmp_path):
    require(pip_works(), "pip download needs pip for %s (python3-pip)" % PYTHON)
    env = dict(os.environ, HTTP_PROXY=net.site.url, http_proxy=net.site.url,
               PIP_CONFIG_FILE=os.devnull)
    out = subprocess.run([PYTHON, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                          "--disable-pip-version-check", "--trusted-host", "pypi.test",
                          "--trusted-host", "pkgs.files.test",
                          "--index-url", "http://pypi.test/simple/", "ci-egress-probe",
                          "-d", str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.listdir(tmp_path) == [PACKAGE_FILE]
    with open(tmp_path / PACKAGE_FILE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == net.package.sha256
    assert ("http", "pypi.test", "GET", "/simple/ci-egress-probe/") in net.origin_requests()
    assert ("http", "pkgs.files.test", "GET", "/files/" + PACKAGE_FILE) in \
        net.origin_requests()


def in_namespace(net, *cmd):
    etc_dir = os.path.join(net.dir, "etc")
    os.makedirs(etc_dir, exist_ok=True)
    for name, text in net.etc.items():
        with open(os.path.join(etc_dir, name), "w") as f:
            f.write(text)
    return subprocess.run(in_etc_namespace(etc_dir, sorted(net.etc), cmd),
                          capture_output=True, text=True, timeout=60)


def test_the_namespace_resolves_the_test_names(net):
    with open("/etc/hosts") as f:
        machine = f.read()
    for name, addr in sorted(HOSTS.items()):
        out = in_namespace(net, "getent", "hosts", name)
        assert (out.returncode, out.stdout.split()) == (0, [addr, name]), out
    out = in_namespace(net, "getent", "ahosts", "localhost")
    assert {line.split()[0] for line in out.stdout.splitlines()} == {"127.0.0.1"}
    # a name outside the hosts file: NXDOMAIN from the test name server
    out = in_namespace(net, PYTHON, "-c", "import socket\ntry:\n"
                       "    socket.getaddrinfo(%r, 443)\nexcept socket.gaierror as e:\n"
                       "    print(e.errno == socket.EAI_NONAME)" % UNRESOLVABLE)
    assert out.stdout == "True\n", out
    assert UNRESOLVABLE in net.dns.asked()
    # the machine's files are untouched
    with open("/etc/hosts") as f:
        assert f.read() == machine
    out = subprocess.run(["getent", "hosts", "private.test"], capture_output=True)
    assert out.returncode == 2


def test_a_server_with_etc_files_sees_them_and_only_it(model, net):
    server = Httpd("etc-files", base_conf(model.port), etc=net.etc)
    server.start()
    try:
        pid = wait_until(server.parent_pid, "the test httpd's pid file")
        with open("/proc/%d/root/etc/hosts" % pid) as f:
            assert f.read() == hosts_text()
        with open("/proc/%d/root/etc/resolv.conf" % pid) as f:
            assert f.read() == resolv_text()
        assert "nameserver %s" % DNS_ADDR not in open("/etc/resolv.conf").read()
        status, _, _ = server.request("GET", "/.ci-test/server-status?auto")
        assert status == 200
    finally:
        server.stop()
