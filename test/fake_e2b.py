#!/usr/bin/env python3
"""Fake E2B sandbox service for the test suite.

One HTTP/1.1 server on loopback speaks both halves of the E2B protocol:

* the control plane (``POST /sandboxes``, ``POST /v2/sandboxes``,
  ``DELETE /sandboxes/{id}``, ``POST /sandboxes/{id}/timeout``,
  ``GET /sandboxes/{id}``, ``GET /sandboxes``, ``GET /v2/sandboxes``),
  authenticated by ``X-API-Key``;
* the code-interpreter data plane (``POST /execute``, ``POST /contexts``,
  ``GET /contexts``, ``DELETE /contexts/{id}``, ``POST /contexts/{id}/restart``,
  ``GET /health``), authenticated by the sandbox's ``X-Access-Token`` /
  ``E2B-Traffic-Access-Token`` (the context calls by the traffic token alone,
  as the SDKs send them) and routed by ``E2b-Sandbox-Id``. Code really runs, in
  a Python namespace per execution context that persists across executions
  (each sandbox starts with one default context; ``/execute`` without
  ``context_id`` runs there), and the answer is the NDJSON stream the real
  service sends. Restarting a context empties its namespace and ends an
  execution still streaming from it with an ``UnexpectedEndOfExecution``
  error, as the real server's kernel restart does.

Test control (no authentication):

* ``POST /_control`` with a JSON object sets switches (see ``SWITCHES``); a
  ``null`` value clears one. The answer is the current switch set.
* ``POST /_reset`` clears switches, sandboxes, counters and records.
* ``POST /_expire`` with ``{"id": ...}`` (or ``{}`` for all) expires sandboxes
  now, as if their timeout had passed.
* ``POST /_release`` with ``{"gate": name}`` opens a gate (before or while it is
  waited on). The switches ``hold_execute`` and ``hold_delete`` name a gate:
  an execution then runs its code (the stream has begun, keepalives flow) only
  once that gate is open, a delete is answered only then. A gate still shut
  after ``HOLD_LIMIT`` seconds gives up: the execution ends with an error line
  named ``FakeHoldExpired``, the delete with a 500.
* ``GET /_state`` returns what happened (see ``FakeE2BServer.snapshot``): among
  others, every control-plane, execute and context request with the client's
  address:port (``peer``): ``creates``, ``deletes``, ``timeouts`` (each
  ``POST /sandboxes/{id}/timeout``), ``executes``, ``contexts`` (each
  ``POST /contexts``), ``restarts`` (each ``POST /contexts/{id}/restart``);
  and ``closed``, the client addresses of the connections that have ended
  since (a client that drops its connection after a request shows there).

Run: ``python3 test/fake_e2b.py --port 0 [--api-key KEY ...] [--verbose]``;
prints ``READY <port>`` once listening. In-process: ``start()``.
"""

import argparse
import ast
import base64
import builtins
import io
import json
import linecache
import os
import queue
import secrets
import select
import signal
import socket
import string
import struct
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
import zlib
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_API_KEY = "e2b_test_key"
CLIENT_ID = "6532622b"
ENVD_VERSION = "0.2.0"
# The control plane's own default when a create body has no "timeout"
# (the SDKs always send one, 300 s by default).
API_DEFAULT_TIMEOUT = 15
# Where sandboxes live, as the create answer says (``domain``): the data plane
# of sandbox <id> is https://49999-<id>.<domain>. Loopback, so that a client
# which does not override the data-plane URL never leaves the host.
DEFAULT_DOMAIN = "localhost"
HOLD_LIMIT = 60.0
CLIENT_CHECK = 0.05   # how often a quiet execution stream looks for its client
DEFAULT_KEEPALIVE = 5.0
HUGE_LINE_BYTES = 64 * 1024
GARBAGE_LINES = (b"not json at all\n", b'{"truncated":\n')
PNG_MARKER = "__FAKE_PNG__"
CONTEXT_CWD = "/home/user"
# What the server's streaming execution says when its context's connection
# closes under it (template/server/messaging.py).
UNEXPECTED_END = {"type": "error", "name": "UnexpectedEndOfExecution",
                  "value": "Connection to the execution was closed before the execution "
                           "was finished",
                  "traceback": ""}

# name -> type used to coerce values posted to /_control
SWITCHES = {
    "garbage_lines": bool,
    "cut_stream": bool,
    "slow_stream": float,
    "huge_output": int,
    "kernel_dies": bool,
    "delete_status": int,
    "create_status": int,
    "create_without_token": bool,
    "keepalive_interval": float,
    "execute_status": int,
    "default_timeout": int,
    "domain": str,
    "create_without_domain": bool,
    "hold_execute": str,
    "hold_delete": str,
    # seconds a sandbox may live from its start (the plan's cap): a timeout
    # call ends it no later, and once it is older the call answers 400
    "max_instance_length": float,
    # the status POST /contexts and POST /contexts/{id}/restart answer with
    # (a plain-text error, as the server's), doing nothing
    "context_status": int,
}

STATUS_MESSAGES = {
    400: "Bad request",
    401: "Invalid API key",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    429: "Rate limit exceeded, please try again later",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
}


def _tiny_png():
    """A valid 1x1 RGBA PNG."""
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00\xff")
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


PNG_BASE64 = base64.b64encode(_tiny_png()).decode("ascii")


def _rfc3339(ts):
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _new_sandbox_id():
    alphabet = string.ascii_lowercase + string.digits
    return "i" + "".join(secrets.choice(alphabet) for _ in range(19))


# ---------------------------------------------------------------------------
# Per-thread stdout/stderr: executions run concurrently in their own threads,
# each writing to its own sinks; every other thread writes where it used to.

_tls = threading.local()
_install_lock = threading.Lock()
_env_lock = threading.RLock()


class _StreamRouter(io.TextIOBase):
    def __init__(self, name, fallback):
        super().__init__()
        self._name = name
        self._fallback = fallback

    def _dest(self):
        sinks = getattr(_tls, "sinks", None)
        if sinks is not None:
            return sinks[self._name]
        return self._fallback

    def writable(self):
        return True

    def write(self, s):
        dest = self._dest()
        if dest is None:
            return len(s)
        return dest.write(s)

    def flush(self):
        dest = self._dest()
        if dest is not None:
            dest.flush()

    def isatty(self):
        return False

    def fileno(self):
        return self._dest().fileno()

    @property
    def encoding(self):
        return "utf-8"

    def __getattr__(self, attr):
        return getattr(self._dest(), attr)


def _install_routers():
    with _install_lock:
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if not isinstance(current, _StreamRouter):
                setattr(sys, name, _StreamRouter(name, current))


class _Sink(io.TextIOBase):
    """Collects one stream of an execution and emits it line by line."""

    def __init__(self, name, emit):
        super().__init__()
        self._name = name
        self._emit = emit
        self._buf = ""

    def writable(self):
        return True

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        self._buf += s
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            self._emit(self._name, line + "\n")
        return len(s)

    def flush(self):
        if self._buf:
            text, self._buf = self._buf, ""
            self._emit(self._name, text)


_DONE = object()


class Context:
    """One execution context (a Jupyter kernel in the real server): its own
    namespace, one execution at a time."""

    def __init__(self, context_id, language="python", cwd=CONTEXT_CWD):
        self.id = context_id
        self.language = language
        self.cwd = cwd
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}
        self.lock = threading.Lock()
        self.execution_count = 0
        self.pending = []       # put() of each execution streaming from it
        self.dropped = False    # restarted or removed: its executions are over

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Sandbox:
    def __init__(self, sandbox_id, api_key, body, timeout, with_token):
        now = time.time()
        self.id = sandbox_id
        self.api_key = api_key
        self.body = body
        self.template_id = body["templateID"]
        self.metadata = dict(body.get("metadata") or {})
        self.env_vars = dict(body.get("envVars") or {})
        self.created_at = now
        self.expires_at = now + timeout
        self.envd_token = secrets.token_hex(16) if with_token else None
        self.traffic_token = secrets.token_hex(16)
        self.execution_count = 0   # in all its contexts
        # The server starts a default Python context (its id is a kernel id
        # like any other); "default" names it too.
        default = Context(str(uuid.uuid4()))
        self.default_context_id = default.id
        self.contexts = {default.id: default}

    def context(self, context_id=None):
        """The context CONTEXT_ID (None or "default": the default one), or None."""
        if not context_id or context_id == "default":
            context_id = self.default_context_id
        return self.contexts.get(context_id)

    @property
    def kernel(self):
        """The default context's namespace, which persists across executions."""
        return self.context().namespace

    def details(self):
        return {
            "templateID": self.template_id,
            "alias": self.template_id,
            "sandboxID": self.id,
            "clientID": CLIENT_ID,
            "startedAt": _rfc3339(self.created_at),
            "endAt": _rfc3339(self.expires_at),
            "envdVersion": ENVD_VERSION,
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "metadata": dict(self.metadata),
            "state": "running",
        }


class FakeE2BServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address, api_keys=(DEFAULT_API_KEY,), verbose=False,
                 domain=DEFAULT_DOMAIN):
        self.api_keys = set(api_keys)
        self.domain = domain
        self.verbose = verbose
        self.lock = threading.RLock()
        self.thread = None
        self.reset()
        super().__init__(address, Handler)

    # -- state -------------------------------------------------------------
    def reset(self):
        with self.lock:
            gates, self.gates = getattr(self, "gates", {}), {}
            self.held = []            # {"gate", "what", "sandbox_id"} waiting now
            self.hold_expired = []
            self.closed = []
            self.switches = {}
            self.sandboxes = {}
            self.created = 0
            self.deleted = 0
            self.expired = 0
            self.creates = []
            self.deletes = []
            self.executes = []
            self.timeouts = []
            self.contexts = []
            self.restarts = []
            self.leaks = []
            self.expired_ids = []
            self.issued_tokens = {}  # token -> kind, kept after the sandbox is gone
        for gate in gates.values():
            gate.set()

    def _gate(self, name):
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def release(self, name):
        self._gate(name).set()

    def hold(self, name, what, sandbox_id):
        """Wait until gate NAME is opened; False when HOLD_LIMIT passed first."""
        gate = self._gate(name)
        entry = {"gate": name, "what": what, "sandbox_id": sandbox_id}
        with self.lock:
            self.held.append(entry)
        opened = gate.wait(HOLD_LIMIT)
        with self.lock:
            if entry in self.held:
                self.held.remove(entry)
            if not opened:
                self.hold_expired.append(entry)
        return opened

    def switch(self, name, default=None):
        with self.lock:
            return self.switches.get(name, default)

    def set_switches(self, values):
        """Apply switch values (None clears); raise ValueError on bad input."""
        coerced = {}
        for name, value in values.items():
            if name not in SWITCHES:
                raise ValueError("unknown switch %r (known: %s)" % (name, ", ".join(sorted(SWITCHES))))
            if value is None:
                coerced[name] = None
                continue
            kind = SWITCHES[name]
            if kind is bool:
                if not isinstance(value, bool):
                    raise ValueError("switch %s wants true or false" % name)
                coerced[name] = value
            elif kind is str:
                if not isinstance(value, str) or not value:
                    raise ValueError("switch %s wants a string" % name)
                coerced[name] = value
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError("switch %s wants a number" % name)
                coerced[name] = kind(value)
        with self.lock:
            for name, value in coerced.items():
                if value is None:
                    self.switches.pop(name, None)
                else:
                    self.switches[name] = value
            return dict(self.switches)

    def sweep(self):
        """Remove sandboxes whose timeout has passed."""
        now = time.time()
        with self.lock:
            for sid in [s.id for s in self.sandboxes.values() if s.expires_at <= now]:
                del self.sandboxes[sid]
                self.expired += 1
                self.expired_ids.append(sid)

    def expire(self, sandbox_id=None):
        with self.lock:
            for sb in self.sandboxes.values():
                if sandbox_id is None or sb.id == sandbox_id:
                    sb.expires_at = 0
        self.sweep()

    def live_sandbox(self, sandbox_id):
        self.sweep()
        with self.lock:
            return self.sandboxes.get(sandbox_id)

    def snapshot(self):
        self.sweep()
        with self.lock:
            return {
                "live": list(self.sandboxes),
                "created": self.created,
                "deleted": self.deleted,
                "expired": self.expired,
                "expired_ids": list(self.expired_ids),
                "creates": list(self.creates),
                "deletes": list(self.deletes),
                "executes": list(self.executes),
                "timeouts": list(self.timeouts),
                "contexts": list(self.contexts),
                "restarts": list(self.restarts),
                "leaks": list(self.leaks),
                "held": [dict(h) for h in self.held],
                "hold_expired": list(self.hold_expired),
                "closed": list(self.closed),
                "switches": dict(self.switches),
                "sandboxes": {
                    sb.id: {
                        "api_key": sb.api_key,
                        "templateID": sb.template_id,
                        "body": sb.body,
                        "metadata": sb.metadata,
                        "created_at": sb.created_at,
                        "expires_at": sb.expires_at,
                        "execution_count": sb.execution_count,
                        "default_context_id": sb.default_context_id,
                        "contexts": {cid: dict(ctx.describe(),
                                               execution_count=ctx.execution_count)
                                     for cid, ctx in sb.contexts.items()},
                        "envdAccessToken": sb.envd_token,
                        "trafficAccessToken": sb.traffic_token,
                    }
                    for sb in self.sandboxes.values()
                },
            }

    def stop(self):
        self.shutdown()
        self.server_close()

    # -- code execution ----------------------------------------------------
    def replace_context(self, sb, context_id, remove=False):
        """Restart (or REMOVE) context CONTEXT_ID of SB: a fresh namespace
        under the same id; the executions streaming from the old one end with
        UnexpectedEndOfExecution (their code, a thread here, runs on in the
        dropped namespace). The new context, or None when there is none."""
        with self.lock:
            old = sb.context(context_id)
            if old is None:
                return None
            new = None
            if remove:
                del sb.contexts[old.id]
            else:
                new = Context(old.id, old.language, old.cwd)
                sb.contexts[old.id] = new
            old.dropped = True
            pending, old.pending = old.pending, []
        for put in pending:
            put(dict(UNEXPECTED_END))
            put(_DONE)
        return new

    def run_code(self, sb, ctx, code, env_vars, put):
        """Run code in context CTX of SB; put() each output item, then _DONE."""
        with self.lock:
            ctx.pending.append(put)
        try:
            with ctx.lock:
                with self.lock:
                    if ctx.dropped:   # restarted while this one waited its turn
                        return
                    sb.execution_count += 1
                    ctx.execution_count += 1
                    count = ctx.execution_count
                put({"type": "number_of_executions", "execution_count": count})
                gate = self.switch("hold_execute")
                if gate is not None and not self.hold(gate, "execute", sb.id):
                    put({"type": "error", "name": "FakeHoldExpired",
                         "value": "gate %s was not opened within %g s" % (gate, HOLD_LIMIT),
                         "traceback": ""})
                    return
                env = dict(sb.env_vars)
                env.update(env_vars or {})
                if env:
                    with _env_lock:
                        saved = {k: os.environ.get(k) for k in env}
                        os.environ.update({k: str(v) for k, v in env.items()})
                        try:
                            self._run_cell(ctx.namespace, code, "<cell %s:%d>" % (sb.id, count), put)
                        finally:
                            for k, v in saved.items():
                                if v is None:
                                    os.environ.pop(k, None)
                                else:
                                    os.environ[k] = v
                else:
                    self._run_cell(ctx.namespace, code, "<cell %s:%d>" % (sb.id, count), put)
        except BaseException as exc:  # the fake itself failed; report it as the kernel would
            put({"type": "error", "name": type(exc).__name__, "value": str(exc), "traceback": ""})
        finally:
            with self.lock:
                if put in ctx.pending:
                    ctx.pending.remove(put)
            put(_DONE)

    @staticmethod
    def _run_cell(namespace, code, filename, put):
        def emit(name, text):
            put({"type": name, "text": text, "timestamp": time.time_ns()})
            if name == "stdout" and text.rstrip("\n") == PNG_MARKER:
                put({"type": "result", "is_main_result": False, "png": PNG_BASE64})

        def error(exc, tb):
            lines = traceback.format_exception(type(exc), exc, tb)
            put({"type": "error", "name": type(exc).__name__, "value": str(exc),
                 "traceback": "".join(lines)})

        _install_routers()
        out, err = _Sink("stdout", emit), _Sink("stderr", emit)
        _tls.sinks = {"stdout": out, "stderr": err}
        try:
            try:
                tree = ast.parse(code, filename, "exec")
            except (SyntaxError, ValueError) as exc:
                error(exc, None)
                return
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            try:
                exec(compile(tree, filename, "exec"), namespace)
                value = eval(compile(last, filename, "eval"), namespace) if last else None
            except BaseException as exc:
                tb = exc.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                    tb = tb.tb_next
                out.flush()
                err.flush()
                error(exc, tb)
                return
            out.flush()
            err.flush()
            if value is not None:
                namespace["_"] = value
                put({"type": "result", "is_main_result": True, "text": repr(value)})
        finally:
            _tls.sinks = None
            out.flush()
            err.flush()


class Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True    # answers leave at once, no delayed-ACK stall
    protocol_version = "HTTP/1.1"
    server_version = "fake-e2b"
    timeout = 120

    # -- plumbing ------------------------------------------------------------
    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.__stderr__.write("fake_e2b: %s - %s\n" % (self.address_string(), fmt % args))

    def handle(self):
        try:
            super().handle()
        finally:
            with self.server.lock:
                self.server.closed.append(self._peer())

    def _peer(self):
        return "%s:%d" % self.client_address[:2]

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ValueError("truncated chunked body")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _lower_headers(self):
        return {k.lower(): v for k, v in self.headers.items()}

    def _send(self, status, body=b"", content_type=None, extra=None):
        self.send_response(status)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if status == 204 or status == 304:
            self.end_headers()
            return
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status, obj, extra=None):
        self._send(status, json.dumps(obj).encode(), "application/json", extra)

    def _api_error(self, status, message=None):
        self._json(status, {"code": status, "message": message or STATUS_MESSAGES.get(status, "error")})

    def _text(self, status, text):
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def _dispatch(self):
        try:
            try:
                self.body = self._read_body()
            except ValueError:
                self.close_connection = True
                self._text(400, "bad request body")
                return
            parsed = urllib.parse.urlsplit(self.path)
            self.route = parsed.path
            self.query = parsed.query
            parts = [p for p in parsed.path.split("/") if p]
            if parts and parts[0].startswith("_"):
                self._test_control(parts)
            elif parts[:1] == ["sandboxes"] or parts[:2] == ["v2", "sandboxes"]:
                self._control_plane(parts)
            elif parts[:1] in (["execute"], ["contexts"], ["health"]):
                self._data_plane(parts)
            else:
                self._api_error(404, "path %s not found" % parsed.path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            self.close_connection = True
            if self.server.verbose:
                traceback.print_exc(file=sys.__stderr__)
            try:
                self._text(500, "fake_e2b internal error: %s" % exc)
            except OSError:
                pass

    def _json_body(self):
        if not self.body:
            return None
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    # -- test control --------------------------------------------------------
    def _test_control(self, parts):
        srv = self.server
        name = parts[0]
        if name == "_state" and self.command == "GET":
            self._json(200, srv.snapshot())
        elif name == "_reset" and self.command == "POST":
            srv.reset()
            self._json(200, {})
        elif name == "_control" and self.command == "POST":
            values = self._json_body()
            if not isinstance(values, dict):
                self._json(400, {"error": "want a JSON object of switches"})
                return
            try:
                self._json(200, srv.set_switches(values))
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
        elif name == "_control" and self.command == "GET":
            with srv.lock:
                self._json(200, dict(srv.switches))
        elif name == "_release" and self.command == "POST":
            values = self._json_body()
            if not isinstance(values, dict) or not isinstance(values.get("gate"), str):
                self._json(400, {"error": "want {\"gate\": name}"})
                return
            srv.release(values["gate"])
            self._json(200, {})
        elif name == "_expire" and self.command == "POST":
            values = self._json_body() or {}
            srv.expire(values.get("id") if isinstance(values, dict) else None)
            self._json(200, {"expired": srv.expired})
        else:
            self._api_error(404, "path %s not found" % self.route)

    # -- control plane -------------------------------------------------------
    def _check_control_leaks(self):
        srv = self.server
        headers = self._lower_headers()
        with srv.lock:
            tokens = dict(srv.issued_tokens)
            for name, value in headers.items():
                kind = None
                if name == "x-access-token":
                    kind = "access_token"
                elif name == "e2b-traffic-access-token":
                    kind = "traffic_token"
                else:
                    for tok, tkind in tokens.items():
                        if tok in value:
                            kind = tkind
                            break
                if kind:
                    srv.leaks.append({"plane": "control", "what": kind, "header": name,
                                      "method": self.command, "path": self.route})
            for tok, tkind in tokens.items():
                if tok in self.path:
                    srv.leaks.append({"plane": "control", "what": tkind, "header": None,
                                      "method": self.command, "path": self.route})

    def _control_plane(self, parts):
        srv = self.server
        self._check_control_leaks()
        srv.sweep()
        api_key = self.headers.get("X-API-Key")
        authorized = api_key is not None and api_key in srv.api_keys
        is_create = self.command == "POST" and parts in (["sandboxes"], ["v2", "sandboxes"])
        if is_create:
            self._create(api_key, authorized)
            return
        if not authorized:
            self._api_error(401, "Invalid API key")
            return
        if self.command == "GET" and parts in (["sandboxes"], ["v2", "sandboxes"]):
            self._list()
        elif len(parts) == 2 and parts[0] == "sandboxes":
            sid = parts[1]
            if self.command == "DELETE":
                self._delete(sid, api_key)
            elif self.command == "GET":
                sb = srv.live_sandbox(sid)
                if sb is None:
                    self._not_found(sid)
                else:
                    self._json(200, sb.details())
            else:
                self._api_error(405, "method not allowed")
        elif len(parts) == 3 and parts[0] == "sandboxes" and parts[2] == "timeout" \
                and self.command == "POST":
            self._set_timeout(parts[1])
        else:
            self._api_error(404, "path %s not found" % self.route)

    def _not_found(self, sid):
        self._api_error(404, 'sandbox "%s" not found' % sid)

    def _create(self, api_key, authorized):
        srv = self.server
        body = self._json_body()
        record = {"id": None, "api_key": api_key, "path": self.route, "time": time.time(),
                  "peer": self._peer(),
                  "body": body if body is not None else self.body.decode("utf-8", "replace"),
                  "headers": self._lower_headers(),
                  "chunked": "chunked" in self.headers.get("Transfer-Encoding", "").lower(),
                  "status": None}
        with srv.lock:
            srv.creates.append(record)
            forced = srv.switches.get("create_status")
            without_token = srv.switches.get("create_without_token", False)
            domain = None if srv.switches.get("create_without_domain") else \
                srv.switches.get("domain", srv.domain)
            default_timeout = srv.switches.get("default_timeout", API_DEFAULT_TIMEOUT)
        if not authorized:
            record["status"] = 401
            self._api_error(401, "Invalid API key")
            return
        if forced is not None and forced != 201:
            record["status"] = forced
            self._api_error(forced)
            return
        problem = self._validate_create(body)
        if problem:
            record["status"] = 400
            self._api_error(400, problem)
            return
        timeout = body.get("timeout", default_timeout)
        with srv.lock:
            sid = _new_sandbox_id()
            while sid in srv.sandboxes:
                sid = _new_sandbox_id()
            sb = Sandbox(sid, api_key, body, timeout, with_token=not without_token)
            srv.sandboxes[sid] = sb
            srv.created += 1
            if sb.envd_token:
                srv.issued_tokens[sb.envd_token] = "access_token"
            srv.issued_tokens[sb.traffic_token] = "traffic_token"
            record["id"] = sid
            record["status"] = 201
        reply = {
            "templateID": sb.template_id,
            "sandboxID": sid,
            "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION,
            "alias": sb.template_id,
            "trafficAccessToken": sb.traffic_token,
            "domain": domain,
        }
        if sb.envd_token:
            reply["envdAccessToken"] = sb.envd_token
        self._json(201, reply)

    @staticmethod
    def _validate_create(body):
        if not isinstance(body, dict):
            return "request body has an error: failed to decode request body as a JSON object"
        template = body.get("templateID")
        if not isinstance(template, str) or not template:
            return 'request body has an error: doesn\'t match schema: property "templateID" is missing'
        timeout = body.get("timeout")
        if "timeout" in body and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            return 'request body has an error: property "timeout": must be a non-negative integer'
        for key in ("metadata", "envVars"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                return 'request body has an error: property "%s": must be a map of strings' % key
        for key in ("secure", "allow_internet_access", "autoPause"):
            if key in body and not isinstance(body[key], bool):
                return 'request body has an error: property "%s": must be a boolean' % key
        return None

    def _delete(self, sid, api_key):
        srv = self.server
        record = {"id": sid, "api_key": api_key, "status": None, "peer": self._peer()}
        with srv.lock:
            srv.deletes.append(record)
            gate = srv.switches.get("hold_delete")
        if gate is not None and not srv.hold(gate, "delete", sid):
            record["status"] = 500
            self._api_error(500, "gate %s was not opened within %g s" % (gate, HOLD_LIMIT))
            return
        with srv.lock:
            forced = srv.switches.get("delete_status")
            if forced is not None:
                status = forced
            elif sid in srv.sandboxes:
                del srv.sandboxes[sid]
                srv.deleted += 1
                status = 204
            else:
                status = 404
            record["status"] = status
        if status == 204:
            self._send(204)
        elif status == 404:
            self._not_found(sid)
        else:
            self._api_error(status)

    def _set_timeout(self, sid):
        srv = self.server
        body = self._json_body()
        timeout = body.get("timeout") if isinstance(body, dict) else None
        record = {"id": sid, "timeout": timeout, "status": None, "peer": self._peer()}
        with srv.lock:
            srv.timeouts.append(record)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
            record["status"] = 400
            self._api_error(400, 'request body has an error: property "timeout" is missing or invalid')
            return
        with srv.lock:
            sb = srv.sandboxes.get(sid)
            cap = srv.switches.get("max_instance_length")
            too_old = False
            if sb is not None:
                # as the service: counted from now, shorter or longer than
                # before, never past the cap counted from the start
                now = time.time()
                if cap is not None and now - sb.created_at > cap:
                    too_old = True
                else:
                    ttl = timeout if cap is None else \
                        min(timeout, cap - (now - sb.created_at))
                    sb.expires_at = now + ttl
        if sb is None:
            record["status"] = 404
            self._not_found(sid)
            return
        if too_old:
            # past the plan's cap the sandbox has ended: it is gone (expired)
            # by the time the service says why
            srv.expire(sid)
            record["status"] = 400
            self._api_error(400, "Max instance length exceeded")
            return
        record["status"] = 204
        srv.sweep()  # a timeout of 0 ends the sandbox now
        self._send(204)

    def _list(self):
        srv = self.server
        params = urllib.parse.parse_qs(self.query, keep_blank_values=True)
        wanted = {}
        for raw in params.get("metadata", []):
            for k, v in urllib.parse.parse_qsl(raw, keep_blank_values=True):
                wanted[k] = v
        states = set()
        for raw in params.get("state", []):
            states.update(s for s in raw.split(",") if s)
        try:
            limit = int(params.get("limit", ["100"])[0])
            offset = int(params.get("nextToken", ["0"])[0] or 0)
        except ValueError:
            self._api_error(400, "invalid limit or nextToken")
            return
        if limit < 1 or limit > 100 or offset < 0:
            self._api_error(400, "limit must be between 1 and 100")
            return
        with srv.lock:
            found = [sb for sb in sorted(srv.sandboxes.values(), key=lambda s: s.created_at)
                     if all(sb.metadata.get(k) == v for k, v in wanted.items())]
        if states and "running" not in states:
            found = []
        page = found[offset:offset + limit]
        extra = {}
        if offset + limit < len(found):
            extra["X-Next-Token"] = str(offset + limit)
        self._json(200, [sb.details() for sb in page], extra)

    # -- data plane ----------------------------------------------------------
    def _data_plane(self, parts):
        srv = self.server
        headers = self._lower_headers()
        sid = headers.get("e2b-sandbox-id")
        record = {"sandbox_id": sid, "path": self.route, "headers": headers,
                  "body": self._json_body(), "status": None, "peer": self._peer()}
        with srv.lock:
            if parts == ["execute"]:
                srv.executes.append(record)
            for name, value in headers.items():
                if name == "x-api-key" or any(key in value for key in srv.api_keys):
                    srv.leaks.append({"plane": "data", "what": "api_key", "header": name,
                                      "method": self.command, "path": self.route,
                                      "sandbox_id": sid})
            if any(key in self.path for key in srv.api_keys) or \
                    any(key in self.body.decode("utf-8", "replace") for key in srv.api_keys):
                srv.leaks.append({"plane": "data", "what": "api_key", "header": None,
                                  "method": self.command, "path": self.route, "sandbox_id": sid})
        sb = srv.live_sandbox(sid) if sid else None
        if sb is None:
            record["status"] = 502
            self._text(502, "sandbox not found")
            return
        # The SDKs send the access token with executions only; the traffic
        # token with every call.
        if (parts == ["execute"] and sb.envd_token and
                headers.get("x-access-token") != sb.envd_token) or \
                (sb.traffic_token and headers.get("e2b-traffic-access-token") != sb.traffic_token):
            record["status"] = 401
            self._text(401, "unauthorized")
            return
        if parts == ["health"] and self.command == "GET":
            record["status"] = 200
            self._json(200, "Request was successful")
            return
        if parts[:1] == ["contexts"]:
            self._contexts(sb, parts, record)
            return
        if parts != ["execute"] or self.command != "POST":
            record["status"] = 404
            self._text(404, "Not Found")
            return
        forced = srv.switch("execute_status")
        if forced is not None:
            record["status"] = forced
            self._text(forced, STATUS_MESSAGES.get(forced, "error"))
            return
        req = record["body"]
        if not isinstance(req, dict) or not isinstance(req.get("code"), str):
            record["status"] = 422
            self._json(422, {"detail": [{"type": "missing", "loc": ["body", "code"],
                                         "msg": "Field required"}]})
            return
        context_id, language = req.get("context_id"), req.get("language")
        if context_id and language:
            record["status"] = 400
            self._text(400, "Only one of context_id or language can be provided")
            return
        with srv.lock:
            ctx = sb.context(context_id)
        if ctx is None:
            record["status"] = 404
            self._text(404, "Context %s not found" % context_id)
            return
        if language and str(language).lower() not in ("python", "py", "python3"):
            record["status"] = 400
            self._text(400, "this fake runs python only, not %s" % language)
            return
        env_vars = req.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            record["status"] = 422
            self._json(422, {"detail": [{"type": "dict_type", "loc": ["body", "env_vars"],
                                         "msg": "Input should be a valid dictionary"}]})
            return
        record["status"] = 200
        self._execute(sb, ctx, req["code"], env_vars)

    def _contexts(self, sb, parts, record):
        """The server's context endpoints (template/server/main.py)."""
        srv = self.server
        is_create = parts == ["contexts"] and self.command == "POST"
        is_restart = len(parts) == 3 and parts[2] == "restart" and self.command == "POST"
        if is_restart:
            record["context_id"] = parts[1]
        with srv.lock:
            if is_create:
                srv.contexts.append(record)
            elif is_restart:
                srv.restarts.append(record)
            forced = srv.switches.get("context_status") if is_create or is_restart else None
        if forced is not None:
            record["status"] = forced
            self._text(forced, STATUS_MESSAGES.get(forced, "error"))
            return
        if is_create:
            req = record["body"] if record["body"] is not None else {}
            if not isinstance(req, dict) or \
                    any(k in req and req[k] is not None and not isinstance(req[k], str)
                        for k in ("language", "cwd")):
                record["status"] = 422
                self._json(422, {"detail": [{"type": "string_type", "loc": ["body"],
                                             "msg": "Input should be a valid string"}]})
                return
            language = (req.get("language") or "python").lower().strip()
            if language not in ("python", "py", "python3"):
                record["status"] = 500
                self._text(500, "Failed to create context: this fake runs python only, "
                                "not %s" % language)
                return
            ctx = Context(str(uuid.uuid4()), "python", req.get("cwd") or CONTEXT_CWD)
            with srv.lock:
                sb.contexts[ctx.id] = ctx
            record["status"] = 200
            record["id"] = ctx.id
            self._json(200, ctx.describe())
        elif parts == ["contexts"] and self.command == "GET":
            with srv.lock:
                listed = [ctx.describe() for ctx in sb.contexts.values()]
            record["status"] = 200
            self._json(200, listed)
        elif is_restart:
            restarted = srv.replace_context(sb, parts[1])
            record["status"] = 200 if restarted else 404
            if restarted:
                self._json(200, None)
            else:
                self._text(404, "Context %s not found" % parts[1])
        elif len(parts) == 2 and self.command == "DELETE":
            with srv.lock:
                found = sb.context(parts[1]) is not None
            if found:
                srv.replace_context(sb, parts[1], remove=True)
                record["status"] = 200
                self._json(200, None)
            else:
                record["status"] = 404
                self._text(404, "Context %s not found" % parts[1])
        elif len(parts) <= 2 or (len(parts) == 3 and parts[2] == "restart"):
            record["status"] = 405
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            record["status"] = 404
            self._json(404, {"detail": "Not Found"})

    def _execute(self, sb, ctx, code, env_vars):
        srv = self.server
        with srv.lock:
            sw = dict(srv.switches)
        interval = sw.get("keepalive_interval", DEFAULT_KEEPALIVE)
        if sw.get("huge_output"):
            items = self._huge_items(sb, ctx, sw["huge_output"])
        elif sw.get("kernel_dies"):
            items = self._dead_kernel_items(sb, ctx)
        else:
            q = queue.Queue()
            threading.Thread(target=srv.run_code, args=(sb, ctx, code, env_vars, q.put),
                             name="fake-e2b-exec-%s" % sb.id, daemon=True).start()
            items = self._queue_items(q, interval)
        self._stream(items, cut=sw.get("cut_stream", False), garbage=sw.get("garbage_lines", False),
                     slow=sw.get("slow_stream", 0))

    def _queue_items(self, q, interval):
        """The execution's items as they come, a keepalive after INTERVAL
        seconds without one; stops (ConnectionResetError) as soon as the
        client has closed the connection, as a server notices a peer gone."""
        quiet = 0.0
        while True:
            try:
                item = q.get(timeout=min(interval, CLIENT_CHECK))
            except queue.Empty:
                if self._client_gone():
                    raise ConnectionResetError("the client closed the connection")
                quiet += CLIENT_CHECK
                if quiet >= interval:
                    quiet = 0.0
                    yield {"type": "keepalive"}
                continue
            if item is _DONE:
                return
            quiet = 0.0
            yield item

    def _client_gone(self):
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _huge_items(self, sb, ctx, total):
        with self.server.lock:
            sb.execution_count += 1
            ctx.execution_count += 1
            count = ctx.execution_count
        yield {"type": "number_of_executions", "execution_count": count}
        left = total
        while left > 0:
            n = min(left, HUGE_LINE_BYTES)
            text = "x" * (n - 1) + "\n" if n > 1 else "\n"
            left -= n
            yield {"type": "stdout", "text": text, "timestamp": time.time_ns()}

    def _dead_kernel_items(self, sb, ctx):
        with ctx.lock:
            with self.server.lock:
                sb.execution_count += 1
                ctx.execution_count += 1
                count = ctx.execution_count
        # Jupyter starts the dead kernel again: the context is empty
        self.server.replace_context(sb, ctx.id)
        yield {"type": "number_of_executions", "execution_count": count}
        yield {"type": "error", "name": "UnexpectedEndOfExecution", "value": "Kernel died",
               "traceback": ""}

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, items, cut, garbage, slow):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        sent = 0
        try:
            for item in items:
                if cut and item["type"] not in ("number_of_executions", "stdout", "stderr", "keepalive"):
                    continue
                self._line(item, sent, garbage, slow)
                sent += 1
            if not cut:
                self._line({"type": "end_of_execution"}, sent, garbage, slow)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return
        if cut:
            self.close_connection = True

    def _line(self, item, index, garbage, slow):
        if index:
            if slow:
                time.sleep(slow)
            if garbage:
                self._chunk(GARBAGE_LINES[index % 2])
        self._chunk((json.dumps(item) + "\n").encode("utf-8"))


def start(port=0, api_keys=(DEFAULT_API_KEY,), host="127.0.0.1", verbose=False,
          domain=DEFAULT_DOMAIN):
    """Serve in a background thread; returns (server, port). server.stop() ends it."""
    server = FakeE2BServer((host, port), api_keys=api_keys, verbose=verbose, domain=domain)
    server.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                     name="fake-e2b", daemon=True)
    server.thread.start()
    server.base_url = "http://%s:%d" % (host, server.server_address[1])
    return server, server.server_address[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Fake E2B sandbox service for tests")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api-key", action="append", dest="api_keys",
                        help="an accepted API key (repeatable; default %s)" % DEFAULT_API_KEY)
    parser.add_argument("--domain", default=DEFAULT_DOMAIN,
                        help="the domain create answers name (default %s)" % DEFAULT_DOMAIN)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    server = FakeE2BServer((args.host, args.port), api_keys=args.api_keys or (DEFAULT_API_KEY,),
                           verbose=args.verbose, domain=args.domain)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stdout.write("READY %d\n" % server.server_address[1])
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.1)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
