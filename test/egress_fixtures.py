"""The network the egress tests see: loopback servers run as threads of the
test process, and the names the test httpd resolves.

- a test CA and a server certificate for the test names, made with the
  `openssl` CLI into a temporary directory (TestCA);
- an http origin and an https origin (Origin), both serving
    /redirect?to=URL   302 to URL
    /headers           200, the request's header lines as the body
    /huge              200 with a Content-Length of 4 GiB, sent until the
                       peer goes (the byte-budget test)
    /simple/...        a PEP 503 index of one pure-Python wheel (PACKAGE),
                       built here with zipfile; its link points at
                       http://pkgs.files.test/files/NAME
    /files/NAME        the wheel
    anything else      an echo: "SCHEME HOST METHOD PATH\\n"
  and recording every request (scheme, host, method, path, bytes sent);
- the site's forward proxy (SiteProxy, the tools' egress_proxy=): CONNECT
  name:port and absolute-form requests, every host mapped to the origin of
  its port (80: http, 443: https), every (method, host, port) recorded;
  hosts in its `refuse` set get a 403;
- a DNS server answering NXDOMAIN to every question (NxDomain), the only
  name server the test httpd knows: a name outside the hosts file does not
  resolve, at once;
- the hosts file and resolv.conf (etc_files) that conftest's Httpd(etc=...)
  bind-mounts over /etc/hosts and /etc/resolv.conf in a private mount
  namespace of the test httpd: the machine's own files are never touched.

Nothing here needs the module: test_egress_fixtures.py checks it all on its
own."""
import base64
import hashlib
import html
import io
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import require

# Public (global unicast) addresses for the names that must pass the
# egress proxy's address check, one per name; nothing ever connects to
# them: with egress_proxy= the proxy asks the site proxy for the address it
# checked (CONNECT address:port), which sends every address to the origin
# of its port.
PUBLIC = "93.184.215.14"
PRIVATE = "10.11.12.13"
METADATA = "169.254.169.254"
CGNAT = "100.64.0.7"
MULTICAST = "224.0.0.251"
LOOPBACK_ALIAS = "127.0.0.2"

# name -> the one address the test hosts file gives it
HOSTS = {
    "allowed.test": PUBLIC,
    "a.wild.test": "93.184.215.15",
    "wild.test": "93.184.215.16",
    "outside.test": "93.184.215.17",
    "pypi.test": "93.184.215.18",
    "pkgs.files.test": "93.184.215.19",
    "refused-by-site.test": "93.184.215.20",
    "private.test": PRIVATE,
    "metadata.test": METADATA,
    "cgnat.test": CGNAT,
    "multicast.test": MULTICAST,
    "loopback.test": LOOPBACK_ALIAS,
}
# In no hosts file and NXDOMAIN at the test name server.
UNRESOLVABLE = "unresolvable.test"
# What the site proxy refuses (403), by name or address: the egress proxy's
# "site proxy refused".
SITE_REFUSES = "refused-by-site.test"
# The test name server (glibc asks port 53): an address of the loopback net
# no usual resolver binds, one per test session (sessions may run at once).
DNS_ADDR = "127.53.%d.%d" % ((os.getpid() >> 8) & 255, os.getpid() & 255)

PACKAGE = "ci-egress-probe"
PACKAGE_MODULE = "ci_egress_probe"
PACKAGE_VERSION = "1.0"
PACKAGE_FILE = "%s-%s-py3-none-any.whl" % (PACKAGE_MODULE, PACKAGE_VERSION)
PACKAGE_HOST = "pkgs.files.test"
INDEX_HOST = "pypi.test"
HUGE_LENGTH = 4 << 30


def hosts_text():
    """The test hosts file: localhost (IPv4 only, so that it resolves to one
    address), this machine's name, and HOSTS."""
    lines = ["127.0.0.1\tlocalhost", "127.0.1.1\t%s" % socket.gethostname()]
    lines += ["%s\t%s" % (addr, name) for name, addr in sorted(HOSTS.items())]
    return "\n".join(lines) + "\n"


def resolv_text():
    return "nameserver %s\noptions timeout:1 attempts:1\n" % DNS_ADDR


def etc_files():
    """For conftest's Httpd(etc=...): /etc/NAME -> contents."""
    return {"hosts": hosts_text(), "resolv.conf": resolv_text()}


# ------------------------------------------------------------------ the CA

class TestCA:
    """A CA and one server certificate (every test name) made with openssl."""

    def __init__(self, directory):
        self.dir = directory
        self.ca_pem = os.path.join(directory, "ca.pem")
        self.cert = os.path.join(directory, "server.pem")
        self.key = os.path.join(directory, "server.key")
        names = sorted(set(HOSTS) | {UNRESOLVABLE})
        ext = os.path.join(directory, "server.ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\n"
                    "keyUsage=critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=serverAuth\n"
                    "subjectKeyIdentifier=hash\n"
                    "authorityKeyIdentifier=keyid,issuer\n"
                    "subjectAltName=" + ",".join("DNS:" + n for n in names) + "\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._openssl("req", "-x509", *ec, "-keyout", os.path.join(directory, "ca.key"),
                      "-out", self.ca_pem, "-days", "7",
                      "-subj", "/CN=mod_code_interpreter egress test CA",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        csr = os.path.join(directory, "server.csr")
        self._openssl("req", *ec, "-keyout", self.key, "-out", csr,
                      "-subj", "/CN=allowed.test")
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca_pem,
                      "-CAkey", os.path.join(directory, "ca.key"), "-CAcreateserial",
                      "-out", self.cert, "-days", "7", "-extfile", ext)
        with open(self.ca_pem, "rb") as f:
            self.ca_bytes = f.read()

    @staticmethod
    def _openssl(*args):
        out = subprocess.run(["openssl", *args], capture_output=True, text=True)
        assert out.returncode == 0, "openssl %s failed:\n%s" % (args[0], out.stderr)

    def server_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def client_context(self):
        return ssl.create_default_context(cafile=self.ca_pem)


# --------------------------------------------------------------- the wheel

def build_wheel():
    """The bytes of PACKAGE_FILE: a pure-Python wheel, built with zipfile
    (fixed dates: the same bytes every time)."""
    dist = "%s-%s.dist-info" % (PACKAGE_MODULE, PACKAGE_VERSION)
    files = [
        ("%s/__init__.py" % PACKAGE_MODULE,
         b'MESSAGE = "fetched through the egress proxy"\n'),
        ("%s/METADATA" % dist,
         ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: A package of the "
          "egress tests\n" % (PACKAGE, PACKAGE_VERSION)).encode()),
        ("%s/WHEEL" % dist, b"Wheel-Version: 1.0\nGenerator: mod_code_interpreter tests\n"
                            b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = ""
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record += "%s,sha256=%s,%d\n" % (name, digest.decode(), len(data))
    record += "%s/RECORD,,\n" % dist
    files.append(("%s/RECORD" % dist, record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return buf.getvalue()


class Package:
    def __init__(self):
        self.name = PACKAGE
        self.filename = PACKAGE_FILE
        self.data = build_wheel()
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.url = "http://%s/files/%s" % (PACKAGE_HOST, PACKAGE_FILE)

    def root_page(self):
        return ('<!DOCTYPE html>\n<html><body>\n<a href="/simple/%s/">%s</a>\n'
                '</body></html>\n' % (self.name, self.name)).encode()

    def project_page(self):
        return ('<!DOCTYPE html>\n<html><body>\n<a href="%s#sha256=%s">%s</a>\n'
                '</body></html>\n' % (html.escape(self.url), self.sha256,
                                       self.filename)).encode()


# ------------------------------------------------------------- the origins

class _OriginHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120

    def setup(self):
        if self.server.tls is not None:
            self.request.settimeout(self.timeout)
            self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, *args):
        pass

    def _record(self):
        target = self.path
        if target.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(target)
            target = u.path + ("?" + u.query if u.query else "")
        rec = {"scheme": self.server.scheme, "host": self.headers.get("Host", ""),
               "method": self.command, "path": target, "sent": 0, "done": False,
               "headers": {k.lower(): v for k, v in self.headers.items()}}
        with self.server.lock:
            self.server.records.append(rec)
        return rec

    def _send(self, rec, status, body, ctype="text/plain; charset=utf-8", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            rec["sent"] += len(body)
        rec["done"] = True

    def do_GET(self):
        rec = self._record()
        u = urllib.parse.urlsplit(rec["path"])
        pkg = self.server.package
        if u.path == "/redirect":
            to = urllib.parse.parse_qs(u.query).get("to", [""])[0]
            return self._send(rec, 302, b"", extra=(("Location", to),))
        if u.path == "/headers":
            lines = "".join("%s: %s\n" % (k, v) for k, v in self.headers.items())
            return self._send(rec, 200, lines.encode())
        if u.path == "/huge":
            return self._huge(rec)
        if u.path.startswith("/hold/"):
            return self._hold(rec, u.path[len("/hold/"):])
        if u.path == "/simple/":
            return self._send(rec, 200, pkg.root_page(), "text/html")
        if u.path == "/simple/%s/" % pkg.name:
            return self._send(rec, 200, pkg.project_page(), "text/html")
        if u.path == "/files/" + pkg.filename:
            return self._send(rec, 200, pkg.data, "application/octet-stream")
        body = "%s %s %s %s\n" % (self.server.scheme, rec["host"], self.command, rec["path"])
        self._send(rec, 200, body.encode())

    do_HEAD = do_GET
    do_POST = do_GET

    def _hold(self, rec, name):
        """Answered once the test says so (Origin.release), or after 120 s."""
        with self.server.lock:
            event = self.server.holds.setdefault(name, threading.Event())
        event.wait(120)
        self._send(rec, 200, ("released %s\n" % name).encode())

    def _huge(self, rec):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(HUGE_LENGTH))
        self.end_headers()
        chunk = b"\x5a" * (1 << 20)
        try:
            while rec["sent"] < HUGE_LENGTH:
                self.wfile.write(chunk)
                rec["sent"] += len(chunk)
        except OSError:
            self.close_connection = True
        finally:
            rec["done"] = True


class Origin:
    """An http or https origin on a free loopback port, in threads."""

    def __init__(self, package, tls=None):
        self.scheme = "https" if tls else "http"
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _OriginHandler)
        self.server.daemon_threads = True
        self.server.tls = tls
        self.server.scheme = self.scheme
        self.server.package = package
        self.server.records = []
        self.server.holds = {}
        self.server.lock = threading.Lock()
        self.server.handle_error = lambda request, address: None
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def records(self):
        """Every request since the last reset: dicts of scheme, host (its Host
        header), method, path, sent (body bytes written) and done."""
        with self.server.lock:
            return [dict(r) for r in self.server.records]

    def live_records(self):
        """The records themselves (their sent/done move on)."""
        with self.server.lock:
            return list(self.server.records)

    def release(self, name):
        """Every request for /hold/NAME is answered, now and later."""
        with self.server.lock:
            event = self.server.holds.setdefault(name, threading.Event())
        event.set()

    def reset(self):
        with self.server.lock:
            self.server.records.clear()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------ the site proxy

def _read_head(sock, limit=65536):
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(4096)
        if not got:
            return None, data
        data += got
        if len(data) > limit:
            return None, data
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _pipe(src, dst):
    try:
        while True:
            got = src.recv(65536)
            if not got:
                break
            dst.sendall(got)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _SiteHandler(socketserver.BaseRequestHandler):
    def handle(self):
        site = self.server.site
        client = self.request
        client.settimeout(120)
        try:
            head, rest = _read_head(client)
        except OSError:
            return
        if head is None:
            return
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
            return
        method, target, version = parts
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            host = host.strip("[]")
            port = int(port) if port.isdigit() else 0
        else:
            u = urllib.parse.urlsplit(target)
            host, port = u.hostname or "", u.port or 80
            path = u.path or "/"
            lines[0] = "%s %s%s %s" % (method, path, "?" + u.query if u.query else "",
                                       version)
        rec = {"method": method, "host": host, "port": port, "open": True}
        with site.lock:
            site.recs.append(rec)
        try:
            self._serve(site, client, method, host, port, lines, rest)
        finally:
            rec["open"] = False

    def _serve(self, site, client, method, host, port, lines, rest):
        if host.lower() in site.refuse:
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
            return
        origin = {80: site.http_port, 443: site.https_port}.get(port)
        if origin is None:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
            return
        up = socket.create_connection(("127.0.0.1", origin), timeout=120)
        try:
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    up.sendall(rest)
            else:
                up.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + rest)
            back = threading.Thread(target=_pipe, args=(up, client), daemon=True)
            back.start()
            _pipe(client, up)
            back.join()
        finally:
            up.close()


class _ThreadingTCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, address):
        pass


class SiteProxy:
    """The site's forward proxy: every host goes to the origin of its port."""

    def __init__(self, http_port, https_port, refuse=(SITE_REFUSES, HOSTS[SITE_REFUSES])):
        self.server = _ThreadingTCP(("127.0.0.1", 0), _SiteHandler)
        self.server.site = self
        self.http_port, self.https_port = http_port, https_port
        self.refuse = set(refuse)
        self.lock = threading.Lock()
        self.recs = []
        self.base = 0
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def seen(self):
        """(method, host, port) of every connection since the last reset, in
        order of arrival: host as asked (a name, or an address)."""
        with self.lock:
            return [(r["method"], r["host"], r["port"]) for r in self.recs[self.base:]]

    def open_connections(self):
        with self.lock:
            return sum(1 for r in self.recs if r["open"])

    def reset(self):
        """Forget what was seen (a connection still open is counted on by
        open_connections() until it ends)."""
        with self.lock:
            self.recs = [r for r in self.recs if r["open"]]
            self.base = len(self.recs)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------- the name server

class NxDomain:
    """A DNS server on DNS_ADDR:53 (UDP and TCP) answering every question
    NXDOMAIN; it records the names asked."""

    def __init__(self, addr=DNS_ADDR):
        self.lock = threading.Lock()
        self.names = []
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((addr, 53))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((addr, 53))
        self.tcp.listen(16)
        self.closing = False
        for target in (self._serve_udp, self._serve_tcp):
            threading.Thread(target=target, daemon=True).start()

    def _answer(self, query):
        if len(query) < 12:
            return None
        # the question's name, for the record
        labels, i = [], 12
        while i < len(query) and query[i]:
            n = query[i]
            labels.append(query[i + 1:i + 1 + n].decode("ascii", "replace"))
            i += 1 + n
        end = i + 5          # the zero label, QTYPE, QCLASS
        with self.lock:
            self.names.append(".".join(labels).lower())
        flags = 0x8000 | (query[2] & 0x79) << 8 | 0x0080 | 3   # QR, opcode+RD, RA, NXDOMAIN
        return (query[:2] + flags.to_bytes(2, "big") + b"\x00\x01" + b"\x00" * 6 +
                query[12:end])

    def _serve_udp(self):
        while not self.closing:
            try:
                query, peer = self.udp.recvfrom(4096)
            except OSError:
                return
            answer = self._answer(query)
            if answer:
                self.udp.sendto(answer, peer)

    def _serve_tcp(self):
        while not self.closing:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    size = int.from_bytes(conn.recv(2), "big")
                    query = b""
                    while len(query) < size:
                        got = conn.recv(size - len(query))
                        if not got:
                            break
                        query += got
                    answer = self._answer(query)
                    if answer:
                        conn.sendall(len(answer).to_bytes(2, "big") + answer)
                except OSError:
                    pass

    def asked(self):
        with self.lock:
            return list(self.names)

    def close(self):
        self.closing = True
        for s in (self.udp, self.tcp):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


# ------------------------------------------------------------- the whole

def in_etc_namespace(etc_dir, names, cmd):
    """CMD run in a private mount namespace where each /etc/NAME (NAMES) is
    ETC_DIR/NAME bind-mounted over it (conftest's Httpd(etc=...) does the same)."""
    from conftest import etc_wrapper
    return etc_wrapper(etc_dir, names) + list(cmd)


class EgressNet:
    """Everything above, started together; reset() forgets the records."""

    def __init__(self, directory):
        self.dir = directory
        self.ca = TestCA(directory)
        self.ca_pem, self.ca_bytes = self.ca.ca_pem, self.ca.ca_bytes
        self.package = Package()
        self.http = Origin(self.package)
        self.https = Origin(self.package, tls=self.ca.server_context())
        self.site = SiteProxy(self.http.port, self.https.port)
        self.dns = NxDomain()
        self.etc = etc_files()

    def origin_requests(self):
        """(scheme, host, method, path) of every request both origins got."""
        return [(r["scheme"], r["host"], r["method"], r["path"])
                for r in self.http.records() + self.https.records()]

    def reset(self):
        for part in (self.http, self.https, self.site):
            part.reset()

    def close(self):
        for part in (self.site, self.http, self.https, self.dns):
            part.close()


def prerequisites():
    """Skip (fail under CI=true) naming what the egress tests lack."""
    require(shutil.which("openssl"), "the egress tests need the openssl CLI (openssl)")
    require(shutil.which("unshare") and shutil.which("mount"),
            "the egress tests need unshare and mount (util-linux, mount)")
    require(os.geteuid() == 0, "the egress tests need root (a private mount namespace "
                               "for the test httpd's /etc/hosts)")


# Module-scoped: each test module that imports it has its own, and the one
# before has closed its servers (the name server's fixed address) by then.
@pytest.fixture(scope="module")
def egress_net():
    prerequisites()
    directory = tempfile.mkdtemp(prefix="ci-egress-")
    os.chmod(directory, 0o755)
    try:
        net = EgressNet(directory)
    except OSError as e:
        shutil.rmtree(directory, ignore_errors=True)
        require(False, "the egress test network could not start: %s" % e)
    yield net
    net.close()
    shutil.rmtree(directory, ignore_errors=True)


def parse_answer(text):
    """An HTTP answer as text -> (status line, {lower-case header: value}, body)."""
    head, _, body = text.partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body

