#!/usr/bin/env python3
"""Fake E2B sandbox service for the test suite.

One HTTP/1.1 server on loopback speaks both halves of the E2B protocol:

* the control plane (``POST /sandboxes``, ``POST /v2/sandboxes``,
  ``DELETE /sandboxes/{id}``, ``POST /sandboxes/{id}/timeout``,
  ``GET /sandboxes/{id}``, ``GET /sandboxes``, ``GET /v2/sandboxes``),
  authenticated by ``X-API-Key``;
* envd, the sandbox's agent (port 49983; see "envd" below): ``GET /files``,
  ``POST /files`` (multipart/form-data, written as it streams in) and the
  Connect service ``/filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove}``
  (JSON codec), over a real directory per sandbox that stands for its "/"
  (``root`` in ``/_state``); executed code sees that sandbox's ``/mnt/data``
  there, so a test can make files by running code; and the process service
  ``/process.Process/Start`` (server streaming, Connect envelopes) and
  ``/process.Process/SendSignal``: the process really runs, on this host, in
  the sandbox's directory (``/mnt/data`` in its arguments and cwd mapped the
  same way), and its stream ends, as envd's does, only once every holder of
  its stdout and stderr has closed them;
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
  waited on). The switches ``hold_execute``, ``hold_delete`` and
  ``hold_create`` name a gate: an execution then runs its code (the stream has
  begun, keepalives flow) only once that gate is open, a delete is answered
  only then, and an authorized create makes its sandbox (and answers) only
  then (it is in ``creates`` meanwhile, its ``status`` null). A gate still
  shut after ``HOLD_LIMIT`` seconds gives up: the execution ends with an error
  line named ``FakeHoldExpired``, the delete and the create with a 500.
* ``GET /_state`` returns what happened (see ``FakeE2BServer.snapshot``): among
  others, every control-plane, execute and context request with the client's
  address:port (``peer``): ``creates``, ``deletes``, ``timeouts`` (each
  ``POST /sandboxes/{id}/timeout``), ``executes``, ``contexts`` (each
  ``POST /contexts``), ``restarts`` (each ``POST /contexts/{id}/restart``),
  ``envd`` (each envd call);
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
import mimetypes
import os
import queue
import re
import secrets
import select
import shutil
import signal
import socket
import stat
import string
import struct
import subprocess
import sys
import tempfile
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
CONTEXT_CWD = "/home/user"  # check-clone: a sandbox's path
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
    # seconds between keepalives of /execute and of process streams (these
    # otherwise follow the request's Keepalive-Ping-Interval, 90 s without)
    "keepalive_interval": float,
    "execute_status": int,
    "default_timeout": int,
    "domain": str,
    "create_without_domain": bool,
    "hold_execute": str,
    "hold_delete": str,
    "hold_create": str,
    # seconds a sandbox may live from its start (the plan's cap): a timeout
    # call ends it no later, and once it is older the call answers 400
    "max_instance_length": float,
    # the account's concurrent sandboxes: a create beyond them answers 429,
    # as E2B does
    "max_live": int,
    # sandboxes outlive their timeouts (only a DELETE ends them): proves
    # that the module ends what it must rather than leave it to the service
    "timeouts_ignored": bool,
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


# ---------------------------------------------------------------------------
# envd, the sandbox's own agent (e2b-dev/infra packages/envd), on port 49983:
# GET and POST /files, and the Connect service filesystem.Filesystem (JSON
# codec) - Stat, ListDir, MakeDir, Move, Remove. A real host directory
# stands for the sandbox's "/": every path envd is given is resolved inside
# it, symlinks included (an absolute link target means the sandbox's root,
# never the host's), so a test can plant links, directories and large files.

ENVD_PORT = "49983"
# The users the fake's sandboxes have (envd looks the Basic user up).
SANDBOX_USERS = {"user": "/home/user", "root": "/root"}  # check-clone: a sandbox's path
MAX_LINKS = 255
FAKE_PASSWD = ("root:x:0:0:root:/root:/bin/bash\n"
               "user:x:1000:1000::/home/user:/bin/bash\n")
ENVD_UNAUTHORIZED = ("unauthorized access, please provide a valid access token or "
                     "method signing if supported")
# Connect error codes -> HTTP statuses (the Connect protocol's table).
CONNECT_STATUS = {"canceled": 499, "unknown": 500, "invalid_argument": 400,
                  "deadline_exceeded": 504, "not_found": 404, "already_exists": 409,
                  "permission_denied": 403, "resource_exhausted": 429,
                  "failed_precondition": 400, "aborted": 409, "out_of_range": 400,
                  "unimplemented": 404, "internal": 500, "unavailable": 503,
                  "data_loss": 500, "unauthenticated": 401}
# Each method's request fields (protojson refuses any other).
FILESYSTEM_METHODS = {"Stat": ("path",), "ListDir": ("path", "depth"),
                      "MakeDir": ("path",), "Remove": ("path",),
                      "Move": ("source", "destination")}
UPLOAD_PIECE = 64 * 1024
# The process service (packages/envd/internal/services/process).
PROCESS_METHODS = ("Start", "SendSignal")
STREAM_TYPE = "application/connect+json"
PROCESS_KEEPALIVE = 90.0        # envd's default without Keepalive-Ping-Interval
STD_CHUNK = 32 * 1024           # envd reads each pipe 32 KiB at a time
# Every process a sandbox runs carries this variable (its root): what the
# fake kills when the sandbox ends (the real one's VM goes), descendants too.
ROOT_MARKER = "FAKE_E2B_SANDBOX_ROOT"
# Go's syscall.Signal names, as os.ProcessState.String() says them.
GO_SIGNALS = {1: "hangup", 2: "interrupt", 3: "quit", 4: "illegal instruction",
              5: "trace/breakpoint trap", 6: "aborted", 7: "bus error",
              8: "floating point exception", 9: "killed", 10: "user defined signal 1",
              11: "segmentation fault", 12: "user defined signal 2", 13: "broken pipe",
              14: "alarm clock", 15: "terminated"}
SIGNALS = {"SIGNAL_SIGKILL": signal.SIGKILL, 9: signal.SIGKILL,
           "SIGNAL_SIGTERM": signal.SIGTERM, 15: signal.SIGTERM}


class EnvdError(Exception):
    """A Connect error: its code (not_found, ...) and message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _go_json(obj):
    """JSON as Go writes it (no spaces)."""
    return json.dumps(obj, separators=(",", ":"))


def _proto_time(ns):
    """A google.protobuf.Timestamp as protojson writes it (UTC, 0/3/6/9
    fractional digits)."""
    secs, nanos = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(secs, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        frac = "%09d" % nanos
        while frac.endswith("000"):
            frac = frac[:-3]
        text += "." + frac
    return text + "Z"


def _go_mode_string(mode):
    """Go's os.FileMode.String() of an lstat mode ("-rw-r--r--",
    "drwxr-xr-x", "Lrwxrwxrwx", "prw-r--r--")."""
    kind = ""
    for test, letter in ((stat.S_ISDIR, "d"), (stat.S_ISLNK, "L"), (stat.S_ISBLK, "D"),
                         (stat.S_ISCHR, "Dc"), (stat.S_ISFIFO, "p"), (stat.S_ISSOCK, "S")):
        if test(mode):
            kind = letter
    bits = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return (kind or "-") + bits


def _file_type(mode):
    if stat.S_ISREG(mode):
        return "FILE_TYPE_FILE"
    if stat.S_ISDIR(mode):
        return "FILE_TYPE_DIRECTORY"
    return None   # FILE_TYPE_UNSPECIFIED: protojson leaves it out


class SandboxFiles:
    """One sandbox's filesystem, as envd sees it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="fake-e2b-")
        for d in ("home/user", "root", "etc", "tmp"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        with open(os.path.join(self.root, "etc", "passwd"), "w") as f:
            f.write(FAKE_PASSWD)

    def discard(self):
        _kill_marked(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    def data_names(self):
        """Every name under /mnt/data (None: it does not exist)."""
        try:
            return sorted(os.listdir(os.path.join(self.root, "mnt", "data")))
        except OSError:
            return None

    def host(self, path, follow=True):
        """(host path, sandbox path) of absolute sandbox PATH, its symlinks
        resolved inside the sandbox (the last component's only if FOLLOW)."""
        todo = [p for p in path.split("/") if p]
        done = []
        hops = 0
        while todo:
            name = todo.pop(0)
            if name in (".", ""):
                continue
            if name == "..":
                if done:
                    done.pop()
                continue
            here = os.path.join(self.root, *done, name)
            if os.path.islink(here) and (todo or follow):
                hops += 1
                if hops > MAX_LINKS:
                    raise EnvdError("failed_precondition",
                                    "cyclic symlink or chain >255 links at %r" % path)
                target = os.readlink(here)
                if target.startswith("/"):
                    done = []
                todo = [p for p in target.split("/") if p] + todo
                continue
            done.append(name)
        return os.path.join(self.root, *done), "/" + "/".join(done)

    def entry(self, path, shown=None):
        """EntryInfo of PATH as protojson writes it (GetEntryFromPath: lstat;
        a symlink has its target's type and mode, its own size, times and
        permissions, and symlinkTarget, the resolved target or, when that
        does not resolve, the link's own path)."""
        hostp, _ = self.host(path, follow=False)
        try:
            st = os.lstat(hostp)
        except FileNotFoundError:
            raise EnvdError("not_found", "file not found: lstat %s: no such file or "
                                         "directory" % path)
        ftype, perm, target = _file_type(st.st_mode), stat.S_IMODE(st.st_mode) & 0o777, None
        if stat.S_ISLNK(st.st_mode):
            try:
                thost, target = self.host(path)
                tst = os.stat(thost)
                ftype, perm = _file_type(tst.st_mode), stat.S_IMODE(tst.st_mode) & 0o777
            except (OSError, EnvdError):
                ftype, perm, target = None, 0, path
        info = {"name": os.path.basename(path.rstrip("/")) or "/"}
        if ftype:
            info["type"] = ftype
        info["path"] = shown or path
        if st.st_size:
            info["size"] = str(st.st_size)        # int64: a JSON string
        if perm:
            info["mode"] = perm
        info["permissions"] = _go_mode_string(st.st_mode)
        info["owner"] = "user"
        info["group"] = "user"
        info["modifiedTime"] = _proto_time(st.st_mtime_ns)
        if target is not None:
            info["symlinkTarget"] = target
        return info

    def list_dir(self, path, depth):
        """ListDir: PATH (followed when a link) must be a directory; its
        entries to DEPTH (links not followed), in lexical order, each named
        under PATH as asked."""
        try:
            hostp, resolved = self.host(path)
        except EnvdError:
            raise
        if not os.path.lexists(hostp):
            raise EnvdError("not_found", "path not found: lstat %s: no such file or "
                                         "directory" % path)
        if not os.path.isdir(hostp):
            raise EnvdError("invalid_argument", "path is not a directory: %s" % resolved)
        entries = []

        def walk(hdir, rel):
            for name in sorted(os.listdir(hdir)):
                sub = rel + [name]
                try:
                    entries.append(self.entry(resolved.rstrip("/") + "/" + "/".join(sub),
                                              shown=path.rstrip("/") + "/" + "/".join(sub)))
                except EnvdError:
                    continue        # gone meanwhile: skipped, as envd does
                h = os.path.join(hdir, name)
                if len(sub) < depth and os.path.isdir(h) and not os.path.islink(h):
                    walk(h, sub)

        walk(hostp, [])
        return {"entries": entries}

    def make_dir(self, path):
        hostp, _ = self.host(path)
        if os.path.exists(hostp):
            if os.path.isdir(hostp):
                raise EnvdError("already_exists", "directory already exists: %s" % path)
            raise EnvdError("invalid_argument",
                            "path already exists but it is not a directory: %s" % path)
        self.ensure_dirs(path)
        return {"entry": self.entry(path)}

    def ensure_dirs(self, path):
        hostp, _ = self.host(path)
        try:
            os.makedirs(hostp, exist_ok=True)
        except OSError as exc:
            raise EnvdError("internal", "failed to create directory: %s" % exc.strerror)

    def remove(self, path):
        """os.RemoveAll: the link itself, never its target; nothing there is
        no error."""
        hostp, _ = self.host(path, follow=False)
        if os.path.isdir(hostp) and not os.path.islink(hostp):
            shutil.rmtree(hostp, ignore_errors=True)
        elif os.path.lexists(hostp):
            os.unlink(hostp)
        return {}

    def move(self, source, destination):
        """os.Rename of the names themselves (a link is moved, or replaced,
        as a link)."""
        src, _ = self.host(source, follow=False)
        self.ensure_dirs(os.path.dirname(destination) or "/")
        dst, _ = self.host(destination, follow=False)
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            raise EnvdError("not_found", "source file not found: rename %s %s: no such "
                                         "file or directory" % (source, destination))
        except OSError as exc:
            raise EnvdError("internal", "error renaming: rename %s %s: %s"
                            % (source, destination, exc.strerror.lower()))
        return {"entry": self.entry(destination)}

    def stat(self, path):
        return {"entry": self.entry(path)}


def _kill_marked(root):
    """SIGKILL every process of this host whose environment marks it as
    sandbox ROOT's (what it ran and what that left behind)."""
    marker = ("%s=%s" % (ROOT_MARKER, root)).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue


def _kill_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _go_status(returncode):
    """(exitCode, exited, status) of a subprocess's return code, as Go's
    os.ProcessState says them (ExitCode(), Exited(), String())."""
    if returncode >= 0:
        return returncode, True, "exit status %d" % returncode
    name = GO_SIGNALS.get(-returncode, "signal %d" % -returncode)
    return -1, False, "signal: " + name


class EnvdProcess:
    """One process envd started: its output goes to the stream that
    subscribes (dropped when none does); it ends once both pipes are closed
    by every holder (or SIGTERM/SIGKILL was sent), and it has exited."""

    def __init__(self, popen, tag):
        self.popen = popen
        self.pid = popen.pid
        self.tag = tag
        self.events = queue.Queue()
        self.subscribed = True
        self.out_cancelled = threading.Event()
        self.readers = [threading.Thread(target=self._read, args=(pipe, kind), daemon=True)
                        for pipe, kind in ((popen.stdout, "stdout"), (popen.stderr, "stderr"))]
        self.end = None

    def start(self, on_end):
        for t in self.readers:
            t.start()
        threading.Thread(target=self._wait, args=(on_end,), daemon=True).start()

    def _read(self, pipe, kind):
        try:
            while True:
                data = os.read(pipe.fileno(), STD_CHUNK)
                if not data:
                    return
                if self.subscribed and not self.out_cancelled.is_set():
                    self.events.put({"data": {kind: base64.b64encode(data).decode()}})
        except OSError:
            return
        finally:
            pipe.close()

    def _wait(self, on_end):
        while any(t.is_alive() for t in self.readers) and not self.out_cancelled.is_set():
            self.out_cancelled.wait(0.05)
        code = self.popen.wait()
        if self.popen.stdin:
            self.popen.stdin.close()
        exit_code, exited, status = _go_status(code)
        end = {"status": status}
        if exit_code:
            end["exitCode"] = exit_code
        if exited:
            end["exited"] = True
        if code != 0:
            end["error"] = status        # cmd.Wait()'s error says the same
        self.end = end
        on_end(self)
        self.events.put({"end": end})
        self.events.put(_DONE)

    def signal(self, sig):
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.out_cancelled.set()
        os.kill(self.pid, sig)


def _envelope(flags, obj):
    data = _go_json(obj).encode()
    return struct.pack(">BI", flags, len(data)) + data


def _absolute(path, user):
    """envd's ExpandAndResolve: "~" and relative paths from the user's home."""
    home = SANDBOX_USERS[user]
    if path.startswith("~"):
        if len(path) > 1 and path[1] != "/":
            raise ValueError("cannot expand user-specific home dir")
        path = home + path[1:]
    if not path.startswith("/"):
        path = home + "/" + path
    return os.path.normpath(path).replace("//", "/")


class MultipartWriter:
    """A multipart/form-data body parsed as it streams in: the data of each
    part goes to the file open_part(headers) returns (None: dropped) as it
    arrives, so that a body cut mid-way leaves a partial file, as envd's
    streaming copy does."""

    def __init__(self, boundary, open_part):
        self.delim = b"\r\n--" + boundary
        self.first = b"--" + boundary
        self.open_part = open_part
        self.buf = b""
        self.state = "preamble"
        self.out = None
        self.done = False

    def feed(self, data):
        self.buf += data
        while self._step():
            pass

    def _step(self):
        if self.state == "preamble":
            i = self.buf.find(self.first)
            if i < 0 or len(self.buf) < i + len(self.first) + 2:
                return False
            rest = self.buf[i + len(self.first):]
            self.buf = rest[2:]
            self.state = "end" if rest.startswith(b"--") else "headers"
            self.done = self.state == "end"
            return not self.done
        if self.state == "headers":
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return False
            head, self.buf = self.buf[:i].decode("utf-8", "replace"), self.buf[i + 4:]
            headers = {}
            for line in head.split("\r\n"):
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            self.out = self.open_part(headers)
            self.state = "data"
            return True
        if self.state == "data":
            i = self.buf.find(self.delim)
            if i < 0:
                keep = len(self.delim) + 2
                if len(self.buf) > keep:
                    self._write(self.buf[:-keep])
                    self.buf = self.buf[-keep:]
                return False
            if len(self.buf) < i + len(self.delim) + 2:
                return False
            self._write(self.buf[:i])
            self._close()
            rest = self.buf[i + len(self.delim):]
            self.buf = rest[2:]
            self.done = rest.startswith(b"--")
            self.state = "end" if self.done else "headers"
            return not self.done
        return False

    def _write(self, data):
        if self.out is not None and data:
            self.out.write(data)
            self.out.flush()

    def _close(self):
        if self.out is not None:
            self.out.close()
            self.out = None

    def abandon(self):
        self._close()


def _disposition(value):
    """name and filename of a Content-Disposition value."""
    params = {}
    for item in value.split(";")[1:]:
        if "=" in item:
            k, v = item.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] == '"':
                v = v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            params[k.strip().lower()] = v
    return params.get("name"), params.get("filename")


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
        self.files = SandboxFiles()
        self.execution_count = 0   # in all its contexts
        # The server starts a default Python context (its id is a kernel id
        # like any other); "default" names it too.
        default = Context(str(uuid.uuid4()))
        self.default_context_id = default.id
        self.contexts = {default.id: default}
        self.processes = {}        # pid -> EnvdProcess, until it has ended

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
    # a deep backlog, as the real service has (see FakeModelServer)
    request_queue_size = 1024
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
            for sb in getattr(self, "sandboxes", {}).values():
                sb.files.discard()
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
            self.envd = []
            self.processes = []     # each process.Process/Start (also in envd)
            self.signals = []       # each process.Process/SendSignal (also in envd)
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

    def sweep(self, forced=False):
        """Remove sandboxes whose timeout has passed (unless timeouts_ignored;
        FORCED: POST /_expire)."""
        now = time.time()
        with self.lock:
            if self.switches.get("timeouts_ignored") and not forced:
                return
            for sid in [s.id for s in self.sandboxes.values() if s.expires_at <= now]:
                self.sandboxes.pop(sid).files.discard()
                self.expired += 1
                self.expired_ids.append(sid)

    def expire(self, sandbox_id=None):
        with self.lock:
            for sb in self.sandboxes.values():
                if sandbox_id is None or sb.id == sandbox_id:
                    sb.expires_at = 0
        self.sweep(forced=True)

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
                "envd": list(self.envd),
                "processes": [dict(r) for r in self.processes],
                "signals": list(self.signals),
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
                        "root": sb.files.root,
                        "data": sb.files.data_names(),
                        "running": sorted(sb.processes),
                    }
                    for sb in self.sandboxes.values()
                },
            }

    def stop(self):
        self.shutdown()
        self.server_close()
        with self.lock:
            for sb in self.sandboxes.values():
                sb.files.discard()

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
                # The code runs in this process: the sandbox's /mnt/data is
                # its directory on the host (the literal path in the code's
                # text is mapped), so that code can make files envd serves.
                code = code.replace("/mnt/data", sb.files.root + "/mnt/data")
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
            parsed = urllib.parse.urlsplit(self.path)
            self.route = parsed.path
            self.query = parsed.query
            parts = [p for p in parsed.path.split("/") if p]
            self.body = b""
            if not (parts == ["files"] and self.command == "POST"):
                try:
                    self.body = self._read_body()
                except ValueError:
                    self.close_connection = True
                    self._text(400, "bad request body")
                    return
            if parts == ["files"] or parts[:1] in (["filesystem.Filesystem"],
                                                    ["process.Process"]):
                self._envd(parts)
            elif parts and parts[0].startswith("_"):
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
            gate = srv.switches.get("hold_create")
        if not authorized:
            record["status"] = 401
            self._api_error(401, "Invalid API key")
            return
        if gate is not None and not srv.hold(gate, "create", None):
            record["status"] = 500
            self._api_error(500, "gate %s was not opened within %g s" % (gate, HOLD_LIMIT))
            return
        if forced is not None and forced != 201:
            record["status"] = forced
            self._api_error(forced)
            return
        srv.sweep()
        with srv.lock:
            full = srv.switches.get("max_live") is not None and \
                len(srv.sandboxes) >= srv.switches["max_live"]
        if full:
            record["status"] = 429
            self._api_error(429, "You have reached the maximum number of concurrent E2B "
                                 "sandboxes")
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
        return Handler._validate_network(body.get("network"))

    @staticmethod
    def _validate_network(net):
        """E2B's network settings: allowOut takes IPs, CIDRs and domains
        (and "*." patterns), denyOut IPs and CIDRs only."""
        if net is None:
            return None
        if not isinstance(net, dict):
            return 'request body has an error: property "network": must be an object'
        for key in ("allowOut", "denyOut"):
            value = net.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return ('request body has an error: property "network.%s": must be an '
                        'array of strings' % key)
        for entry in net.get("denyOut", []):
            if not re.fullmatch(r"[0-9.]+(/[0-9]+)?", entry):
                return ("invalid network config: domains are only supported in allowOut, "
                        "got %r in denyOut" % entry)
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
                srv.sandboxes.pop(sid).files.discard()
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
    def _note_key_leaks(self, plane, headers, sid):
        """Record the API key anywhere in a sandbox-bound request (under the
        server's lock)."""
        srv = self.server
        for name, value in headers.items():
            if name == "x-api-key" or any(key in value for key in srv.api_keys):
                srv.leaks.append({"plane": plane, "what": "api_key", "header": name,
                                  "method": self.command, "path": self.route,
                                  "sandbox_id": sid})
        if any(key in self.path for key in srv.api_keys) or \
                any(key in self.body.decode("utf-8", "replace") for key in srv.api_keys):
            srv.leaks.append({"plane": plane, "what": "api_key", "header": None,
                              "method": self.command, "path": self.route, "sandbox_id": sid})

    def _data_plane(self, parts):
        srv = self.server
        headers = self._lower_headers()
        sid = headers.get("e2b-sandbox-id")
        record = {"sandbox_id": sid, "path": self.route, "headers": headers,
                  "body": self._json_body(), "status": None, "peer": self._peer()}
        with srv.lock:
            if parts == ["execute"]:
                srv.executes.append(record)
            self._note_key_leaks("data", headers, sid)
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

    # -- envd (port 49983) -------------------------------------------------------
    def _envd(self, parts):
        """envd's /files and filesystem.Filesystem calls, routed by
        E2b-Sandbox-Id (and E2b-Sandbox-Port: another port is another
        server, which knows none of these paths)."""
        srv = self.server
        headers = self._lower_headers()
        sid = headers.get("e2b-sandbox-id")
        rpc = parts[0] == "filesystem.Filesystem"
        process = parts[0] == "process.Process"
        record = {"sandbox_id": sid, "method": self.command, "path": self.route,
                  "query": self.query, "headers": headers,
                  "body": self._json_body() if rpc or process else None, "status": None,
                  "peer": self._peer()}
        with srv.lock:
            srv.envd.append(record)
            self._note_key_leaks("envd", headers, sid)
        sb = srv.live_sandbox(sid) if sid else None
        if sb is None:
            self._envd_answer(record, 502, text="sandbox not found")
        elif headers.get("e2b-sandbox-port", ENVD_PORT) != ENVD_PORT:
            self._envd_answer(record, 404, {"detail": "Not Found"})
        elif process:
            self._envd_process(sb, parts, headers, record)
        elif rpc:
            self._envd_rpc(sb, parts, headers, record)
        elif self.command in ("GET", "POST"):
            self._envd_files(sb, headers, record)
        else:
            self._envd_answer(record, 405, text="Method Not Allowed")

    def _envd_answer(self, record, status, obj=None, text=None, envd_error=None):
        """Answer STATUS with OBJ (JSON), TEXT, or envd's jsonError body
        ({"code": status, "message": ...} and a newline)."""
        record["status"] = status
        if envd_error is not None:
            body = (_go_json({"code": status, "message": envd_error}) + "\n").encode()
            self._send(status, body, "application/json; charset=utf-8",
                       {"X-Content-Type-Options": "nosniff"})
        elif text is not None:
            self._text(status, text)
        else:
            self._send(status, _go_json(obj).encode(), "application/json")

    def _connect_error(self, record, err):
        """A Connect unary error: {"code": "not_found", "message": ...}."""
        record["status"] = CONNECT_STATUS[err.code]
        record["error"] = err.code
        self._send(CONNECT_STATUS[err.code],
                   _go_json({"code": err.code, "message": str(err)}).encode(), "application/json")

    def _rpc_user(self, headers):
        """The Basic user of a Connect call (envd 0.2: no default user)."""
        auth = headers.get("authorization", "")
        if not auth.lower().startswith("basic "):
            raise EnvdError("unauthenticated", "no user specified")
        try:
            user = base64.b64decode(auth[6:].strip(), validate=True).decode().split(":", 1)[0]
        except (ValueError, UnicodeDecodeError):
            raise EnvdError("unauthenticated", "invalid authorization header")
        if user not in SANDBOX_USERS:
            raise EnvdError("unauthenticated", "invalid username: '%s'" % user)
        return user

    def _envd_call_ok(self, sb, headers, record, method, methods):
        """The checks before any envd RPC, as envd makes them: the access
        token, a method of the service, POST. False once answered."""
        if sb.envd_token and headers.get("x-access-token") != sb.envd_token:
            self._envd_answer(record, 401, envd_error=ENVD_UNAUTHORIZED)
            return False
        if method not in methods:
            self._connect_error(record, EnvdError("unimplemented", "%s is not implemented"
                                                  % self.route))
            return False
        if self.command != "POST":
            record["status"] = 405
            self._send(405, b"", None, {"Allow": "POST"})
            return False
        return True

    def _envd_rpc(self, sb, parts, headers, record):
        method = parts[1] if len(parts) == 2 else None
        if not self._envd_call_ok(sb, headers, record, method, FILESYSTEM_METHODS):
            return
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            record["status"] = 415
            self._send(415, b"", None, {"Accept-Post": "application/json, application/proto"})
            return
        try:
            user = self._rpc_user(headers)
            req = record["body"]
            if not isinstance(req, dict):
                raise EnvdError("invalid_argument", "unmarshal into filesystem.%sRequest: "
                                                    "syntax error" % method)
            for key in req:
                if key not in FILESYSTEM_METHODS[method]:
                    raise EnvdError("invalid_argument", "unmarshal into filesystem.%sRequest: "
                                    "proto: unknown field \"%s\"" % (method, key))
            answer = self._filesystem_call(sb.files, method, req, user)
        except EnvdError as err:
            self._connect_error(record, err)
            return
        record["status"] = 200
        self._send(200, _go_json(answer).encode(), "application/json")

    # -- envd's process service -------------------------------------------------
    def _envd_process(self, sb, parts, headers, record):
        """process.Process/Start (server streaming: Connect envelopes of JSON)
        and process.Process/SendSignal (unary JSON), as envd's
        services/process answers them."""
        srv = self.server
        method = parts[1] if len(parts) == 2 else None
        with srv.lock:
            if method == "Start":
                srv.processes.append(record)
            elif method == "SendSignal":
                srv.signals.append(record)
        if not self._envd_call_ok(sb, headers, record, method, PROCESS_METHODS):
            return
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        wanted = STREAM_TYPE if method == "Start" else "application/json"
        if ctype != wanted:
            record["status"] = 415
            self._send(415, b"", None, {"Accept-Post": wanted})
            return
        if method == "Start":
            self._process_start(sb, headers, record)
        else:
            self._process_signal(sb, headers, record)

    def _stream_error(self, record, err):
        """A Connect stream's error: HTTP 200, no message, the end-of-stream
        envelope {"error": {"code", "message"}}."""
        record["status"] = 200
        record["error"] = err.code
        body = _envelope(2, {"error": {"code": err.code, "message": str(err)}})
        self._send(200, body, STREAM_TYPE)

    @staticmethod
    def _start_request(body):
        """The StartRequest in the request's one envelope."""
        if len(body) < 5:
            raise EnvdError("invalid_argument", "protocol error: incomplete envelope")
        flags, length = struct.unpack(">BI", body[:5])
        if flags & 1:
            raise EnvdError("internal", "protocol error: sent compressed message without "
                                        "compression support")
        if len(body) != 5 + length:
            raise EnvdError("invalid_argument", "protocol error: promised %d bytes in "
                            "enveloped message, got %d bytes" % (length, len(body) - 5))
        try:
            req = json.loads(body[5:].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            req = None
        if not isinstance(req, dict):
            raise EnvdError("invalid_argument", "unmarshal into process.StartRequest: "
                                                "syntax error")
        return req

    def _process_start(self, sb, headers, record):
        try:
            req = self._start_request(self.body)
            record["body"] = req
            user = self._rpc_user(headers)
            proc = self._spawn(sb, req, user, headers)
        except EnvdError as err:
            self._stream_error(record, err)
            return
        record["pid"] = proc.pid
        self._process_stream(proc, record, headers)

    def _spawn(self, sb, req, user, headers):
        """Start REQ's process as envd does (handler.New, Start): its cwd must
        exist; PATH, HOME, USER, LOGNAME, the sandbox's envVars and the
        request's envs; stdin a pipe unless "stdin" is false; in envd's own
        process group. /mnt/data in its arguments and cwd, and HOME, are the
        sandbox's directory on this host."""
        config = req.get("process")
        if not isinstance(config, dict):
            config = {}
        cmd, args = config.get("cmd", ""), config.get("args") or []
        envs, cwd = config.get("envs") or {}, config.get("cwd") or ""
        if not isinstance(cmd, str) or not isinstance(cwd, str) or \
                not isinstance(args, list) or not all(isinstance(a, str) for a in args) or \
                not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise EnvdError("invalid_argument", "unmarshal into process.StartRequest: "
                                                "invalid value")
        if req.get("pty") is not None:
            raise EnvdError("unimplemented", "this fake runs no pty")
        try:
            cwd = _absolute(cwd or SANDBOX_USERS[user], user)
            host, _ = sb.files.host(cwd)
        except ValueError as exc:
            raise EnvdError("invalid_argument", str(exc))
        if not os.path.exists(host):
            raise EnvdError("invalid_argument", "cwd '%s' does not exist" % cwd)
        data = sb.files.root + "/mnt/data"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "HOME": sb.files.root + SANDBOX_USERS[user], "USER": user, "LOGNAME": user}
        env.update(sb.env_vars)
        env.update(envs)
        env[ROOT_MARKER] = sb.files.root
        argv = [a.replace("/mnt/data", data) for a in [cmd] + args]
        try:
            popen = subprocess.Popen(argv, cwd=host, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL if req.get("stdin") is False
                                     else subprocess.PIPE)
        except OSError as exc:
            raise EnvdError("invalid_argument", "error starting process '%s': %s"
                            % (" ".join([cmd] + args), exc.strerror))
        proc = EnvdProcess(popen, req.get("tag"))
        with self.server.lock:
            sb.processes[proc.pid] = proc

        def ended(p):
            with self.server.lock:
                sb.processes.pop(p.pid, None)

        try:
            timeout_ms = int(headers.get("connect-timeout-ms", "0"))
        except ValueError:
            timeout_ms = 0
        if timeout_ms > 0:
            # exec.CommandContext: the process (not its group) is killed then
            timer = threading.Timer(timeout_ms / 1000.0, _kill_quietly, (proc.pid,))
            timer.daemon = True
            timer.start()
        proc.start(ended)
        return proc

    def _process_stream(self, proc, record, headers):
        """The start event, the data events as the pipes give them (a
        keepalive after each quiet interval), the end event once both pipes
        are closed and the process has exited, then the end of the stream.
        A client that goes away leaves the process running, its output
        dropped."""
        interval = self.server.switch("keepalive_interval")
        if interval is None:
            try:
                interval = float(int(headers.get("keepalive-ping-interval", "")))
            except ValueError:
                interval = PROCESS_KEEPALIVE
        record["status"] = 200
        record["end"] = None
        self.send_response(200)
        self.send_header("Content-Type", STREAM_TYPE)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self._chunk(_envelope(0, {"event": {"start": {"pid": proc.pid}}}))
            quiet = 0.0
            while True:
                try:
                    item = proc.events.get(timeout=min(interval, CLIENT_CHECK))
                except queue.Empty:
                    if self._client_gone():
                        raise ConnectionResetError("the client closed the connection")
                    quiet += CLIENT_CHECK
                    if quiet >= interval:
                        quiet = 0.0
                        self._chunk(_envelope(0, {"event": {"keepalive": {}}}))
                    continue
                if item is _DONE:
                    break
                quiet = 0.0
                self._chunk(_envelope(0, {"event": item}))
                if "end" in item:
                    record["end"] = item["end"]
            self._chunk(_envelope(2, {}))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            proc.subscribed = False
            record["client_gone"] = True
            self.close_connection = True

    def _process_signal(self, sb, headers, record):
        try:
            if "authorization" in headers:
                self._rpc_user(headers)     # authn refuses an unknown user
            req = record["body"]
            if not isinstance(req, dict):
                raise EnvdError("invalid_argument", "unmarshal into "
                                                    "process.SendSignalRequest: syntax error")
            proc = self._find_process(sb, req.get("process"))
            sig = SIGNALS.get(req.get("signal"))
            if sig is None:
                raise EnvdError("unimplemented", "invalid signal: %s"
                                % req.get("signal", "SIGNAL_UNSPECIFIED"))
            record["pid"] = proc.pid
            try:
                proc.signal(sig)
            except OSError as exc:
                raise EnvdError("internal", "error sending signal: %s" % exc.strerror)
        except EnvdError as err:
            self._connect_error(record, err)
            return
        record["status"] = 200
        self._send(200, b"{}", "application/json")

    def _find_process(self, sb, selector):
        """getProcess: by pid, or by tag."""
        selector = selector if isinstance(selector, dict) else {}
        with self.server.lock:
            if isinstance(selector.get("pid"), int):
                proc = sb.processes.get(selector["pid"])
                if proc is None:
                    raise EnvdError("not_found", "process with pid %d not found"
                                    % selector["pid"])
                return proc
            if isinstance(selector.get("tag"), str):
                for proc in sb.processes.values():
                    if proc.tag == selector["tag"]:
                        return proc
                raise EnvdError("not_found", "process with tag %s not found" % selector["tag"])
        raise EnvdError("unimplemented", "invalid input type <nil>")

    @staticmethod
    def _filesystem_call(files, method, req, user):
        def path(key="path"):
            value = req.get(key, "")
            if not isinstance(value, str):
                raise EnvdError("invalid_argument", "invalid value for string field %s" % key)
            try:
                return _absolute(value, user)
            except ValueError as exc:
                raise EnvdError("invalid_argument", str(exc))
        if method == "ListDir":
            depth = req.get("depth", 0)
            if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
                raise EnvdError("invalid_argument", "invalid value for uint32 field depth")
            return files.list_dir(path(), depth or 1)
        if method == "Move":
            return files.move(path("source"), path("destination"))
        return {"Stat": files.stat, "MakeDir": files.make_dir,
                "Remove": files.remove}[method](path())

    def _envd_files(self, sb, headers, record):
        """GET /files?path=&username= (the file, symlinks followed) and
        POST /files (multipart/form-data, each "file" part streamed to the
        path, or to its filename when there is no path)."""
        params = urllib.parse.parse_qs(self.query, keep_blank_values=True)
        path = params.get("path", [""])[0]
        user = params.get("username", [None])[0]
        token = headers.get("x-access-token")
        if sb.envd_token and token is not None and token != sb.envd_token:
            self._envd_answer(record, 401, envd_error="access token present in header but "
                                                      "does not match")
            return
        if sb.envd_token and token is None:
            self._envd_answer(record, 401, envd_error="missing signature query parameter"
                              if "signature" not in params else "invalid signature")
            return
        if not user:
            self._envd_answer(record, 400, envd_error="no user specified")
            return
        if user not in SANDBOX_USERS:
            self._envd_answer(record, 401, envd_error="error looking up user '%s': user: "
                                                      "unknown user %s" % (user, user))
            return
        if self.command == "GET":
            self._envd_download(sb.files, path, user, record)
        else:
            self._envd_upload(sb.files, path, user, headers, record)

    def _envd_download(self, files, path, user, record):
        try:
            path = _absolute(path, user)
            hostp, _ = files.host(path)
        except (ValueError, EnvdError) as exc:
            self._envd_answer(record, 400, envd_error="error expanding and resolving path "
                                                      "'%s': %s" % (path, exc))
            return
        if not os.path.exists(hostp):
            self._envd_answer(record, 404, envd_error="path '%s' does not exist" % path)
            return
        if os.path.isdir(hostp):
            self._envd_answer(record, 400, envd_error="path '%s' is a directory" % path)
            return
        with open(hostp, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
            record["status"] = 200
            self.send_response(200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Disposition", 'inline; filename="%s"'
                             % os.path.basename(path).replace('"', '\\"'))
            self.send_header("Content-Length", str(size))
            self.send_header("Content-Type", ctype)
            self.send_header("Last-Modified", time.strftime(
                "%a, %d %b %Y %H:%M:%S GMT", time.gmtime(os.fstat(f.fileno()).st_mtime)))
            self.send_header("Vary", "Accept-Encoding")
            self.end_headers()
            left = size
            while left > 0:
                piece = f.read(min(left, UPLOAD_PIECE))
                if not piece:
                    break
                self.wfile.write(piece)
                left -= len(piece)

    def _body_pieces(self):
        """The request body as it arrives (chunked or Content-Length);
        ConnectionError when it ends early."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("truncated chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                while size > 0:
                    piece = self.rfile.read(min(size, UPLOAD_PIECE))
                    if not piece:
                        raise ConnectionError("truncated chunk")
                    size -= len(piece)
                    yield piece
                self.rfile.readline(65537)
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            piece = self.rfile.read(min(left, UPLOAD_PIECE))
            if not piece:
                raise ConnectionError("truncated body")
            left -= len(piece)
            yield piece

    def _envd_upload(self, files, path, user, headers, record):
        ctype = headers.get("content-type", "")
        boundary = None
        for item in ctype.split(";")[1:]:
            k, _, v = item.strip().partition("=")
            if k.lower() == "boundary":
                boundary = v.strip('"').encode()
        if not ctype.lower().startswith("multipart/") or not boundary:
            self.close_connection = True
            self._envd_answer(record, 400, envd_error="unsupported content type: %s, expected "
                              "multipart/form-data or application/octet-stream" % ctype)
            return
        written, failure = [], []

        def open_part(part_headers):
            name, filename = _disposition(part_headers.get("content-disposition", ""))
            if name != "file" or failure:
                return None
            try:
                target = _absolute(path or filename or "", user)
            except ValueError as exc:
                failure.append((400, "error resolving path: %s" % exc))
                return None
            if any(w["path"] == target for w in written):
                failure.append((400, "you cannot upload multiple files to the same path "
                                     "'%s' in one upload request, only the first specified "
                                     "file was uploaded" % target))
                return None
            try:
                files.ensure_dirs(os.path.dirname(target))
                hostp, _ = files.host(target)
            except EnvdError as exc:
                failure.append((500, "error ensuring directories: %s" % exc))
                return None
            if os.path.isdir(hostp):
                failure.append((400, "path is a directory: %s" % target))
                return None
            written.append({"name": os.path.basename(target), "path": target, "type": "file"})
            return open(hostp, "wb")   # O_TRUNC, through a link, as envd's OpenFile

        parser = MultipartWriter(boundary, open_part)
        try:
            for piece in self._body_pieces():
                parser.feed(piece)
        except (ConnectionError, ValueError, OSError):
            # what arrived stays written, as with envd's streaming copy
            parser.abandon()
            record["status"] = "cut"
            self.close_connection = True
            return
        parser.abandon()
        record["uploaded"] = [w["path"] for w in written]
        if failure:
            self._envd_answer(record, failure[0][0], envd_error=failure[0][1])
        elif not parser.done:
            self._envd_answer(record, 500, envd_error="error reading form: multipart: "
                                                      "NextPart: EOF")
        else:
            self._envd_answer(record, 200, written)

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
