"""
pytest fixtures: a real httpd (Debian's apache2) with mod_proxy and the
module, in a server root generated under test/.run/, in front of the scripted
model upstream (test/fake_model.py).

Every server started with Httpd.start() is checked after every test while it
runs, and once more when it stops (Httpd.check, Httpd.stop): no httpd child
crashed, the sanitizers (when built in) reported nothing, and every sandbox
was destroyed -- counted from the facts, not from what the module logs: the
sandbox processes below the server's httpd processes (local provider), the
sandboxes alive on the fake E2B services the server uses (GET /_state). After
a test none may be left but the warm ones the server reports.
"""
import contextlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from procstat import proc_table

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
# One directory per test session, so concurrent sessions never share a server root.
RUN = os.path.join(HERE, ".run", str(os.getpid()))
# OpenAI's published OpenAPI document and recorded traffic, carried by the
# project in test/spec (its README says what and under which licence);
# CI_SPEC_DIR points elsewhere.
SPEC_DIR = os.environ.get("CI_SPEC_DIR") or os.path.join(HERE, "spec")
OPENAPI = os.path.join(SPEC_DIR, "openai-openapi.json")
RECORDED_STREAM = os.path.join(SPEC_DIR, "recorded", "openai-code-interpreter.stream.jsonl")
# CI=true, as CI sets it: the test command installed every prerequisite, so
# one that is missing fails the run instead of skipping tests.
CI = os.environ.get("CI") == "true"
MODULE = os.environ.get("CI_MODULE", os.path.join(TOP, ".libs", "mod_code_interpreter.so"))
HTTPD = shutil.which("apache2") or "/usr/sbin/apache2"
MODDIR = "/usr/lib/apache2/modules"
PYTHON = "/usr/bin/python3"
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}
# What a client sends along with every request (the model upstream, like
# OpenAI, refuses a request without an API key).
API_KEY = "sk-test-0123456789"
CLIENT_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY}


def require(condition, reason):
    """Skip the calling test (or fixture) saying REASON when CONDITION is
    false; under CI=true fail it instead."""
    if condition:
        return
    if CI:
        pytest.fail("CI=true, and " + reason, pytrace=False)
    pytest.skip(reason)


def require_spec(path):
    """PATH, a file of SPEC_DIR, when it is there; else the calling test skips
    saying what is missing and how to get it back (under CI=true it fails)."""
    require(os.path.exists(path),
            "%s is missing: it is part of the project (test/spec, see its README); "
            "restore it with 'git checkout -- test/spec', or point CI_SPEC_DIR at a copy"
            % path)
    return path


# How many schema checks the session made: values validated against a schema
# of the OpenAPI document, by the tests here and by the Node scripts (their
# SCHEMA-OK marks). Printed at the end of the run, so a run that checked
# nothing shows it.
SCHEMA_CHECKS = {"values": 0, "tests": set()}


def count_schema_checks(n, request=None):
    """Record N values validated against the OpenAPI document by the current
    test (REQUEST, pytest's, names it)."""
    SCHEMA_CHECKS["values"] += n
    test = request.node.nodeid if request is not None else os.environ.get(
        "PYTEST_CURRENT_TEST", "?").split(" ")[0]
    if n:
        SCHEMA_CHECKS["tests"].add(test)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(
        "schema checks: %d values validated against %s, in %d tests"
        % (SCHEMA_CHECKS["values"], os.path.relpath(OPENAPI, TOP),
           len(SCHEMA_CHECKS["tests"])))


def etc_wrapper(etc_dir, names):
    """The argv prefix that runs a command in a private mount namespace where
    each /etc/NAME of NAMES is ETC_DIR/NAME bind-mounted over it (the
    machine's own files are never touched). Needs root and unshare."""
    mounts = " && ".join("mount --bind %s /etc/%s" % (shlex.quote(os.path.join(etc_dir, n)), n)
                         for n in names)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            mounts + ' && exec "$0" "$@"']


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def c_test_names(source):
    """The tests a cmocka program of test/unit runs, from its source's
    TEST...(test_...) lines (so that collection needs no compiler)."""
    with open(os.path.join(HERE, "unit", source)) as f:
        return re.findall(r"^\s*TEST\w*\((test_\w+)\),$", f.read(), re.M)


def build_c_test(tree, target, what):
    """TARGET (test/unit/NAME) built by TREE's Makefile against the
    httpd-free library; its path. WHAT names the tests in messages."""
    if not os.path.exists(os.path.join(tree, "Makefile")):
        pytest.fail("%s is not configured: run scripts/build.sh first" % tree)
    # configure leaves the C tests out without cmocka
    missing = [name for name, there in (
        ("make", shutil.which("make")), ("pkg-config", shutil.which("pkg-config")),
        ("cmocka (libcmocka-dev)", shutil.which("pkg-config") and subprocess.run(
            ["pkg-config", "--exists", "cmocka"]).returncode == 0)) if not there]
    require(not missing, "%s need %s" % (what, ", ".join(missing)))
    out = subprocess.run(["make", "-C", tree, target], capture_output=True, text=True)
    assert out.returncode == 0, "building %s failed:\n%s%s" % (target, out.stdout, out.stderr)
    return os.path.join(tree, target)


def run_c_test(binary, name, env):
    """Run the one C test NAME of BINARY with ENV: it must pass."""
    out = subprocess.run([binary, name], env=env, capture_output=True, text=True,
                         timeout=120)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "[  PASSED  ] 1 test(s)." in report, report


def assert_lists_source(binary, source):
    """BINARY --list names the tests its SOURCE holds, in order."""
    out = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == c_test_names(source)


def start_helper(script, *args):
    """Start a test server script; returns (process, port)."""
    proc = subprocess.Popen([PYTHON, os.path.join(HERE, script), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError("%s did not start: %s %s" % (script, line, proc.stderr.read()))
    return proc, int(line.split()[1])


def proc_stats():
    """pid -> (ppid, comm, state) of every process on the host."""
    return {pid: (ppid, comm, fields[0])
            for pid, (ppid, comm, fields) in proc_table().items()}


def without_ids(resp):
    """RESP without ids, timestamps and container ids (to compare answers)."""
    def walk(o):
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()
                    if k not in ("id", "created_at", "container_id")}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o
    return walk(resp)


def process_exists(pid):
    return os.path.exists("/proc/%d" % pid)


def process_exited(pid):
    """PID is gone or a zombie: it has exited (httpd's parent is a daemon,
    reaped by pid 1 whenever that gets to it)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def live_processes():
    """(pid, start time) of every process on the host."""
    return {(pid, fields[19]) for pid, (_, _, fields) in proc_table().items()}


def wait_for(get, want, timeout=30):
    """Poll GET until it returns WANT (bounded by TIMEOUT seconds); return
    the last value either way, for the caller's message."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if value == want or time.monotonic() >= deadline:
            return value
        time.sleep(0.02)


def wait_until(predicate, what, timeout=30):
    """Poll PREDICATE until it returns something true and return that; fail
    naming WHAT when TIMEOUT seconds pass first (a bound, not a pace)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "still waiting after %d s for %s" % (timeout, what)
        time.sleep(0.02)


def script_input(rounds, prefix=""):
    """The user message that scripts the fake model."""
    return prefix + "SCRIPT: " + json.dumps(rounds)


def answered_deletes(state):
    """How many deletes the fake E2B has answered (STATE: its state): a
    delete is recorded when it arrives and gets its status when answered."""
    return sum(1 for d in state["deletes"] if d["status"] is not None)


class FakeE2B:
    """Control of a test/fake_e2b.py started with start_helper."""

    def __init__(self, proc, port):
        self.proc = proc
        self.port = port
        self.url = "http://127.0.0.1:%d" % port

    def call(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        raw = r.read()
        conn.close()
        return r.status, (json.loads(raw) if raw else None)

    def state(self):
        return self.call("GET", "/_state")[1]

    def reset(self):
        assert self.call("POST", "/_reset", {})[0] == 200

    def control(self, **switches):
        status, answer = self.call("POST", "/_control", switches)
        assert status == 200, answer
        return answer

    def release(self, gate):
        assert self.call("POST", "/_release", {"gate": gate})[0] == 200

    def until(self, predicate, what, timeout=30):
        """Poll the state until PREDICATE holds and return it; fail naming WHAT
        when it does not within TIMEOUT seconds."""
        found = {}

        def check():
            st = self.state()
            found["st"] = st
            return predicate(st)
        wait_until(check, what, timeout)
        return found["st"]

    def wait(self, predicate, timeout=10):
        """Poll the state until PREDICATE holds; returns the last state."""
        deadline = time.time() + timeout
        while True:
            st = self.state()
            if predicate(st) or time.time() > deadline:
                return st
            time.sleep(0.05)

    def remove_leftovers(self):
        """Delete, with the key that created them, the sandboxes a test made
        the module leave behind (a forced delete status keeps them alive)."""
        self.control(delete_status=None)
        for sid, sb in self.state()["sandboxes"].items():
            status, _ = self.call("DELETE", "/sandboxes/" + sid,
                                  headers={"X-API-Key": sb["api_key"]})
            assert status == 204


# CI_SANITIZE=1: the module under test was built with ASan/UBSan; httpd is
# started with the sanitizer runtime preloaded and its reports written under
# the server root, and every test fails if one appears.
SANITIZE = os.environ.get("CI_SANITIZE") == "1"


def sanitizer_env(root):
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    return {"LD_PRELOAD": libasan,
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:log_path=" + sanitizer_log(root),
            "UBSAN_OPTIONS": "print_stacktrace=1:log_path=" + sanitizer_log(root)}


def sanitizer_dir(root):
    """Where the sanitizers write their reports: a directory of its own that
    the children (running as User, not root) and the supervisor can write
    to. A report that cannot be written is only "Can't open file" on stderr,
    and the process dies without a word of what it found."""
    return os.path.join(root, "logs", "sanitizer")


def sanitizer_log(root):
    return os.path.join(sanitizer_dir(root), "report")


def make_sanitizer_dir(root):
    d = sanitizer_dir(root)
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o1777)


def sanitizer_reports(root):
    logdir = sanitizer_dir(root)
    out = []
    for name in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
        with open(os.path.join(logdir, name), errors="replace") as f:
            out.append(f.read())
    # a process that could not write its report says so on stderr (the
    # error log): a report lost is a report all the same
    errlog = os.path.join(root, "logs", "error_log")
    if os.path.exists(errlog):
        with open(errlog, errors="replace") as f:
            out += [l for l in f if "ERROR: Can't open file" in l]
    return out


# What httpd's parent logs once it has (re)read its configuration.
RESUMING = "configured -- resuming normal operations"
HTTPD_COMM = os.path.basename(HTTPD)[:15]
# The local sandbox supervisor (httpd/ci_supervisor_process.c names its process so).
SUPERVISOR_COMM = "ci-supervisor"
# Where every test server answers server-status (for its warm sandboxes).
STATUS_PATH = "/.ci-test/server-status"
# Where the suite deletes the containers a test left (every test server).
CLEANUP_PATH = "/.ci-test/containers"
# Headers of a request without an owner (base_conf): no container.
ANONYMOUS = {"X-Anonymous": "1"}
# The Authorization the JavaScript clients in test/node send.
NODE_CALLER = "Bearer test-key"
# How long the checks wait for a sandbox to go (a bound, not a pace).
SETTLE = 30


class Httpd:
    """One httpd server root. conf_body is inserted into the template.
    FAKES: the fake E2B services (FakeE2B) its sandbox tools use. ETC:
    {name: contents} of files httpd sees as /etc/NAME instead of the
    machine's (hosts, resolv.conf): it then runs in a private mount
    namespace where they are bind-mounted (etc_wrapper)."""

    # Started and not stopped yet: every test ends with their check().
    running = []

    def __init__(self, name, conf_body, mpm="event", env=None, fakes=(), etc=None,
                 module=None):
        self.name = name
        # the module it loads: the build under test, or another (the benchmark's
        # earlier build, measured side by side)
        self.module = module or MODULE
        self.etc = dict(etc or {})
        self.fakes = list(fakes)
        # pids of children a test killed on purpose (not crashes)
        self.killed = set()
        self.root = os.path.join(RUN, name)
        self.port = free_port()
        self.conf_body = conf_body
        self.mpm = mpm
        self.env = dict(os.environ, **(env or {}))
        if SANITIZE:
            self.env.update(sanitizer_env(self.root))
        self.error_log = os.path.join(self.root, "logs", "error_log")
        self.access_log = os.path.join(self.root, "logs", "access_log")
        self.log_mark = 0
        # the Authorization values requests carried: their containers are
        # deleted after each test
        self.callers = set()

    def write_conf(self, conf_body=None):
        if conf_body is not None:
            self.conf_body = conf_body
        os.makedirs(os.path.join(self.root, "logs"), exist_ok=True)
        os.chmod(self.root, 0o755)
        if SANITIZE:
            make_sanitizer_dir(self.root)
        user = ""
        if os.geteuid() == 0:
            user = "User www-data\nGroup www-data\n"
        mods = ["authz_core", "proxy", "proxy_http", "headers", "status", "mime",
                "deflate", "filter", "env", "setenvif"]
        loads = "\n".join("LoadModule %s_module %s/mod_%s.so" % (m, MODDIR, m) for m in mods)
        conf = f"""
ServerRoot "{self.root}"
ServerName 127.0.0.1
Listen 127.0.0.1:{self.port}
PidFile "{self.root}/httpd.pid"
DefaultRuntimeDir "{self.root}"
Mutex file:{self.root}
LoadModule mpm_{self.mpm}_module {MODDIR}/mod_mpm_{self.mpm}.so
{loads}
LoadModule code_interpreter_module {self.module}
{user}
ErrorLog "{self.error_log}"
LogLevel warn code_interpreter:debug
LogFormat "%r %>s rounds=%{{ci-rounds}}n exec=%{{ci-executions}}n module_us=%{{ci-module-us}}n" ci
CustomLog "{self.access_log}" ci
Timeout 60
TypesConfig /etc/mime.types
<Location {STATUS_PATH}>
  SetHandler server-status
</Location>
<Location {CLEANUP_PATH}>
  CodeInterpreterContainers On
</Location>
{self.conf_body}
"""
        with open(os.path.join(self.root, "httpd.conf"), "w") as f:
            f.write(conf)

    def wrapped(self, cmd):
        """CMD, in the namespace of the ETC files when there are some."""
        if not self.etc:
            return cmd
        etc_dir = os.path.join(self.root, "etc")
        os.makedirs(etc_dir, exist_ok=True)
        for name, text in self.etc.items():
            with open(os.path.join(etc_dir, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(etc_dir, name), 0o644)
        return etc_wrapper(etc_dir, sorted(self.etc)) + cmd

    def ctl(self, action, check=True):
        cmd = [HTTPD, "-d", self.root, "-f", os.path.join(self.root, "httpd.conf"), "-k", action]
        return subprocess.run(self.wrapped(cmd), env=self.env, capture_output=True, text=True,
                              check=check)

    def configtest(self):
        cmd = [HTTPD, "-d", self.root, "-f", os.path.join(self.root, "httpd.conf"), "-t"]
        return subprocess.run(self.wrapped(cmd), env=self.env, capture_output=True, text=True)

    def start(self):
        if self.etc:
            require(shutil.which("unshare") and shutil.which("mount") and os.geteuid() == 0,
                    "a server with its own /etc files (%s) needs root, unshare and mount"
                    % ", ".join(sorted(self.etc)))
        self.write_conf()
        if os.path.exists(self.error_log):
            os.unlink(self.error_log)
        out = self.ctl("start", check=False)
        if out.returncode:
            raise RuntimeError("httpd %s did not start (exit %d):\n%s%s" % (
                self.name, out.returncode, out.stdout, out.stderr))
        self.log_mark = 0
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                Httpd.running.append(self)
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("httpd did not start:\n" + self.log())

    def stop(self):
        """Stop httpd; then check that it is gone with every sandbox it had,
        and that nothing crashed (the last check of a server)."""
        parent = self.parent_pid()
        live = self.sandbox_processes()      # the warm ones, normally
        self.ctl("stop", check=False)
        pidfile = os.path.join(self.root, "httpd.pid")
        deadline = time.time() + 15
        while os.path.exists(pidfile) and time.time() < deadline:
            time.sleep(0.05)
        if self not in Httpd.running:
            return
        Httpd.running.remove(self)
        if parent is not None:
            wait_until(lambda: process_exited(parent), "httpd %s (pid %d) to exit"
                       % (self.name, parent), SETTLE)
        left = wait_for(lambda: live & live_processes(), set(), SETTLE)
        assert not left, "sandbox processes of %s left running after it stopped: %s" % (
            self.name, sorted(pid for pid, _ in left))
        self.check_fakes()
        self.check_log()

    # ---- the checks ----
    def parent_pid(self):
        try:
            with open(os.path.join(self.root, "httpd.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def supervisor_pid(self):
        """The pid of this server's sandbox supervisor (one)."""
        parent = self.parent_pid()
        [pid] = [pid for pid, (ppid, comm, _) in proc_table().items()
                 if ppid == parent and comm == SUPERVISOR_COMM]
        return pid

    def sandbox_processes(self):
        """(pid, start time) of this server's live local sandboxes: the
        bubblewrap processes its httpd processes or its sandbox supervisor
        started. A zombie counts: a sandbox nobody waited for is not
        destroyed."""
        parent = self.parent_pid()
        if parent is None:
            return set()
        table = proc_table()
        httpds = {parent} | {pid for pid, (ppid, comm, _) in table.items()
                             if ppid == parent and comm in (HTTPD_COMM, SUPERVISOR_COMM)}
        return {(pid, fields[19]) for pid, (ppid, comm, fields) in table.items()
                if ppid in httpds and comm == "bwrap"}

    def status_lines(self):
        """server-status?auto as a dict."""
        status, _, body = self.request("GET", STATUS_PATH + "?auto")
        assert status == 200, (status, body)
        return dict(l.split(": ", 1) for l in body.decode().splitlines() if ": " in l)

    def warm_sandboxes(self):
        return int(self.status_lines().get("CodeInterpreterWarmSandboxes", "0"))

    def check_fakes(self):
        """No sandbox alive on the fake E2B services, and as many deleted
        (or expired) as were created since the fake's last reset."""
        for fake in self.fakes:
            fake.until(lambda st: not st["live"] and
                       st["created"] == st["deleted"] + st["expired"],
                       "the fake E2B sandboxes of %s to be deleted (created == deleted "
                       "+ expired, none live)" % self.name, SETTLE)

    def check_log(self):
        """No child crashed (but those a test killed), no sanitizer report."""
        crashes = [l for l in self.log_since_mark().splitlines() if "exit signal" in l and
                   not any(" child pid %d exit signal" % pid in l for pid in self.killed)]
        assert not crashes, "httpd children of %s crashed:\n%s" % (self.name,
                                                                   "\n".join(crashes))
        reports = sanitizer_reports(self.root)
        assert not reports, "sanitizer reports:\n" + "\n".join(reports)

    def delete_containers(self):
        """Delete every container of the callers this test used, through
        the Containers API; the number deleted."""
        deleted = 0
        for caller in sorted(self.callers | {CLIENT_HEADERS["Authorization"],
                                             NODE_CALLER}):
            deleted += self.delete_containers_at(CLEANUP_PATH, {"Authorization": caller})
        self.callers = set()
        return deleted

    def delete_containers_at(self, path, headers):
        """Delete the running containers the Containers API at PATH lists
        for HEADERS (a location with an owner expression of its own). With a
        shared directory, another node's local container is that node's to
        delete (409 here): it is left to its node's own cleanup."""
        deleted, elsewhere = 0, set()
        while True:
            status, _, data = self._plain("GET", path + "?limit=100", headers)
            if status != 200:
                return deleted
            running = [c["id"] for c in json.loads(data)["data"]
                       if c["status"] == "running" and c["id"] not in elsewhere]
            for cid in running:
                status, _, body = self._plain("DELETE", path + "/" + cid, headers)
                if status == 409 and json.loads(body)["error"]["code"] == \
                        "container_on_other_node":
                    elsewhere.add(cid)
                    continue
                assert status == 200, (cid, status)
                deleted += 1
            if not running:
                return deleted

    def _plain(self, method, path, headers):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, resp.getheaders(), data

    def check(self):
        """After a test: its containers deleted, no sandbox is left but the
        warm ones the server reports (no request is in flight any more), on
        the fakes none at all, the log agrees (as many sandboxes destroyed as
        started) and nothing crashed."""
        self.delete_containers()

        def settled():
            live = self.sandbox_processes()
            return not live or len(live) == self.warm_sandboxes()
        if not wait_for(settled, True, SETTLE):
            live = self.sandbox_processes()
            raise AssertionError(
                "%s: %d sandbox processes (pids %s) after the test, %d warm ones reported"
                % (self.name, len(live), sorted(pid for pid, _ in live),
                   self.warm_sandboxes()))
        self.check_fakes()
        started, destroyed = self.wait_sandboxes_destroyed()
        assert started == destroyed, "%s logged %d sandboxes started, %d destroyed" % (
            self.name, started, destroyed)
        self.check_log()

    def _children(self, parent):
        comm = os.path.basename(HTTPD)[:15]
        return {pid for pid, (ppid, name, _) in proc_table().items()
                if ppid == parent and name == comm}

    def graceful(self):
        """Restart gracefully; return once httpd has read its configuration
        again and a child of the new generation runs."""
        # (the port may answer a moment before the pid file is written)
        parent = wait_until(self.parent_pid, "httpd's pid file")
        before = self._children(parent)
        resumed = self.log().count(RESUMING)
        self.ctl("graceful")
        wait_until(lambda: self.log().count(RESUMING) > resumed,
                   "httpd to read its configuration again")
        wait_until(lambda: self._children(parent) - before, "a child of the new generation")

    def log(self):
        try:
            with open(self.error_log, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def mark(self):
        self.log_mark = len(self.log())

    def log_since_mark(self):
        return self.log()[self.log_mark:]

    def sandbox_counts(self):
        text = self.log_since_mark()
        # CI0302: a sandbox started for a request, CI0307: a warm one handed
        # to a request; CI0301: destroyed with its request.
        return text.count("CI0302:") + text.count("CI0307:"), text.count("CI0301:")

    def wait_sandboxes_destroyed(self, timeout=15):
        deadline = time.time() + timeout
        while True:
            started, destroyed = self.sandbox_counts()
            if started == destroyed or time.time() > deadline:
                return started, destroyed
            time.sleep(0.05)

    # ---- requests ----
    def request(self, method, path, body=None, headers=None, timeout=120):
        """HEADERS are added to CLIENT_HEADERS; a None value leaves one out."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = dict(CLIENT_HEADERS)
        hdrs.update(headers or {})
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        if hdrs.get("Authorization"):
            self.callers.add(hdrs["Authorization"])
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, resp.getheaders(), data

    def post(self, path, body, headers=None, timeout=120):
        """POST JSON; returns (status, headers as dict, parsed body or raw bytes)."""
        status, hdrs, data = self.request("POST", path, body, headers, timeout)
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = data
        return status, {k.lower(): v for k, v in hdrs}, parsed


def base_conf(model_port, extra=""):
    up = "http://127.0.0.1:%d" % model_port
    return f"""
<Location /v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
</Location>
<Location /v1/containers>
  CodeInterpreterContainers On
  CodeInterpreterUpstream {up}/v1/responses
</Location>
<Location /limited/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter limited
</Location>
<Location /limited/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter limited
  CodeInterpreterUpstream {up}/v1/responses
</Location>
# A request with X-Anonymous has no owner: its sandbox is its own, destroyed
# when it ends (ANONYMOUS).
<If "-n %{{HTTP:X-Anonymous}}">
  CodeInterpreterOwner "%{{HTTP:X-No-Such-Header}}"
</If>
<Location /plain/v1/responses>
  ProxyPass {up}/v1/responses
</Location>
CodeInterpreterSandbox quick provider=local timeout=3 max_output=2k
CodeInterpreterSandbox brief provider=local idle=2s retention=1h
CodeInterpreterSandbox tiered provider=local tiers=4g:96M
CodeInterpreterSandbox limited provider=local max_file=1k max_files=3 max_bytes=2k
<Location /tiered/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter tiered
</Location>
<Location /tiered/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter tiered
</Location>
<Location /brief/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter brief
</Location>
<Location /brief/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter brief
</Location>
<Location /quick/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter quick
</Location>
<Location /capped/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  CodeInterpreterMaxLoops 2
</Location>
<Location /small/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  CodeInterpreterMaxBody 64k
</Location>
<Location /deadline/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  CodeInterpreterDeadline 2
</Location>
<Location /unreachable/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  CodeInterpreterUpstream http://127.0.0.1:9/v1/responses
</Location>
<Location /renamed/v1/responses>
  ProxyPass {up}/v1/responses
  CodeInterpreter On
  CodeInterpreterFunctionName run_code
</Location>
{extra}
"""


@pytest.fixture(scope="session")
def model():
    """The scripted model upstream: its port and helpers."""
    proc, port = start_helper("fake_model.py")

    class Model:
        def __init__(self):
            self.port = port

        def _call(self, method, path, body=None):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request(method, path, body=None if body is None else json.dumps(body))
            r = conn.getresponse()
            data = r.read()
            conn.close()
            assert r.status in (200, 204), (method, path, r.status, data)
            return data

        def requests(self):
            """Every request received since the last reset (see fake_model.py)."""
            return json.loads(self._call("GET", "/_requests"))

        def reset(self):
            """Forget the requests, open every gate, accept no extra parameter."""
            self._call("POST", "/_reset")

        def allow_parameters(self, *names):
            """Accept these top-level parameters besides CreateResponse's."""
            self._call("POST", "/_control", {"extra_parameters": list(names)})

        def holds(self):
            """The gates answers wait on now: {"waiting": [...], "expired": [...]}."""
            return json.loads(self._call("GET", "/_holds"))

        def release(self, gate):
            self._call("POST", "/_release", {"gate": gate})

    yield Model()
    proc.kill()
    proc.wait()


@pytest.fixture(scope="session")
def httpd(model):
    if not os.path.exists(MODULE):
        pytest.exit("the module is not built: %s" % MODULE, returncode=2)
    server = Httpd("main", base_conf(model.port)).start()
    yield server
    server.stop()


@contextlib.contextmanager
def checked(server, model=None):
    """Around one test on SERVER: the model's record is reset and the log
    marked first (the checks afterwards are every_server_checked's)."""
    if model is not None:
        model.reset()
    server.mark()
    yield server


@pytest.fixture(autouse=True)
def every_server_checked(request):
    """Around every test: the log of every running server is marked; after
    it, every server still running passes Httpd.check() (one stopped during
    the test passed the checks of Httpd.stop()). A test on the main server
    starts with the model's record reset."""
    if "httpd" in request.fixturenames:
        request.getfixturevalue("model").reset()
    for server in Httpd.running:
        server.mark()
    yield
    for server in list(Httpd.running):
        server.check()
