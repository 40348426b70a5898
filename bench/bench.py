#!/usr/bin/python3
"""
The benchmark of mod_code_interpreter (run it with bench/run.sh, which
installs what is missing and builds the module first).

Everything runs on 127.0.0.1 in one go, against one httpd server root
generated under bench/.run/httpd (Debian's apache2, mpm_event, the modules
the tests load):

1. passthrough  requests WITHOUT the tool, through a `CodeInterpreter On`
                location and through a plain mod_proxy location, to nginx
                answering a fixed JSON body (it reads and discards the
                request body); wrk, 10 KB and 1 MB bodies. The verdict:
                httpd's CPU per request, CI/plain, the median of the rounds'
                ratios; two identical servers run each round at the same
                time and at the same steady request rate, one serving the
                module's location and one the plain one, and swap roles the
                next round. Throughput beside it, as fast as it goes. The
                scan's own cost is measured outside httpd (bench/scan.c).
2. module time  intercepted requests (one code call, then a text answer)
                against test/fake_model.py, 10 KB and
                1 MB conversations: %{ci-module-us}n / %{ci-rounds}n from the
                access log; a cross-check from outside (client latency minus
                the upstream's and the sandbox's time); and the CPU of each
                step of the same work outside httpd (bench/micro.c).
3. sandbox      cold start (and what it is made of: the interpreter, the
                kernel's imports, bubblewrap), print(1) round trip in a
                started sandbox, and executions per second at 1, 8, 32 and 64
                concurrent conversations (a new container each), of one
                caller and of eight, with the time requests waited for room;
                one caller's CPU-bound execution timed alone and while
                another caller's container runs six busy processes it left
                behind (CPU_ROUNDS rounds, the ratio of the medians).
4. soak         SOAK requests (default 10,000) at concurrency 32: success
                rate and the RSS of httpd's children.

Compared variants are interleaved (A, B, B, A, ...), never all A then all B;
the passthrough's run side by side, on two servers that swap roles.
Every request loop is bounded in count and in time.

Environment knobs: SOAK, PHASES (e.g. "1,2"), PASS_ROUNDS, PASS_SECONDS,
PASS_DELAY_MS, PASS_DELAY_MS_1M, PASS_SAT_ROUNDS, MODULE_N_10K, MODULE_N_1M,
SANDBOX_PAIRS, RATE_SECONDS, CPU_ROUNDS, PROFILE=1, CI_MODULE (another build of the
module, e.g. an earlier revision's, to measure it the same way).
"""
import base64
import http.client
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
RUN = os.path.join(HERE, ".run")
MODULE = os.environ.get("CI_MODULE", os.path.join(TOP, ".libs", "mod_code_interpreter.so"))
HTTPD = shutil.which("apache2") or "/usr/sbin/apache2"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
WRK = shutil.which("wrk") or "/usr/bin/wrk"
PYTHON = "/usr/bin/python3"
MODDIR = "/usr/lib/apache2/modules"

sys.path.insert(0, os.path.join(TOP, "test"))
from procstat import proc_table  # noqa: E402  (the process table, shared with the tests)
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}

KB10 = 10 * 1024
MB1 = 1024 * 1024


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        sys.exit("%s must be an integer" % name)


# SMOKE=1: every phase with tiny counts (the test command runs it), and the
# run fails when a figure it prints could not be measured: a benchmark whose
# figures can no longer be taken is found at once, not at the next release.
SMOKE = os.environ.get("SMOKE", "0") == "1"
if SMOKE:
    for _knob, _value in (("SOAK", 100), ("PASS_ROUNDS", 4), ("PASS_SECONDS", 1),
                          ("PASS_SAT_ROUNDS", 4), ("MODULE_N_10K", 20), ("MODULE_N_1M", 3),
                          ("MODULE_N_KINDS", 5),
                          ("SANDBOX_PAIRS", 3), ("RATE_SECONDS", 1), ("CPU_ROUNDS", 1)):
        os.environ.setdefault(_knob, str(_value))

SOAK = env_int("SOAK", 10000)
PASS_ROUNDS = env_int("PASS_ROUNDS", 30)
PASS_SECONDS = env_int("PASS_SECONDS", 2)
# The wait of each wrk connection before each request (ms) in the CPU rounds,
# 10 KB and 1 MB: a steady request rate; 0 for as fast as it goes.
PASS_DELAY_MS = [env_int("PASS_DELAY_MS", 10), env_int("PASS_DELAY_MS_1M", 20)]
# Rounds of the throughput measurement (as fast as it goes, one server).
PASS_SAT_ROUNDS = env_int("PASS_SAT_ROUNDS", 6)
MODULE_N_10K = env_int("MODULE_N_10K", 300)
MODULE_N_1M = env_int("MODULE_N_1M", 100)
MODULE_N_KINDS = env_int("MODULE_N_KINDS", 100)
SANDBOX_PAIRS = env_int("SANDBOX_PAIRS", 100)
RATE_SECONDS = env_int("RATE_SECONDS", 10)
CPU_ROUNDS = env_int("CPU_ROUNDS", 5)
RATE_CONCURRENCY = [1, 8, 32, 64]        # phase 3: executions per second at these
PROFILE = os.environ.get("PROFILE", "0") == "1"
PHASES = {p.strip() for p in os.environ.get("PHASES", "1,2,3,4").split(",") if p.strip()}

# Hard bounds on every loop, whatever the knobs say.
MAX_SECONDS_PER_LOOP = 1800


# ---------------------------------------------------------------- helpers

def log(msg=""):
    print(msg, flush=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def schedstat_ns(pid):
    """Time on a CPU of every thread of PID, in ns; None without schedstat."""
    task = "/proc/%d/task" % pid
    total = 0
    try:
        tids = os.listdir(task)
    except OSError:
        return 0                        # gone meanwhile
    for tid in tids:
        try:
            with open("%s/%s/schedstat" % (task, tid)) as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue
        except (OSError, ValueError, IndexError):
            return None
    return total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def pct(values, p):
    """Percentile by linear interpolation (p in 0..100); None when empty."""
    v = sorted(values)
    if not v:
        return None
    if len(v) == 1:
        return v[0]
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def med(values):
    return pct(values, 50)


def median_interval(values, resamples=2000):
    """95 % bootstrap interval of the median of VALUES (fixed seed: the same
    samples give the same interval)."""
    import random
    if len(values) < 4:
        return None, None
    rng = random.Random(0)
    meds = sorted(med([rng.choice(values) for _ in values]) for _ in range(resamples))
    return meds[int(resamples * 0.025)], meds[int(resamples * 0.975) - 1]


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_us(v):
    if v is None:
        return "-"
    if v >= 10000:
        return "%.1f ms" % (v / 1000.0)
    if v >= 1000:
        return "%.2f ms" % (v / 1000.0)
    return "%.0f µs" % v


def fmt_us1(v):
    """µs with a tenth below 1 ms (CPU per request)."""
    if v is None or v >= 1000:
        return fmt_us(v)
    return "%.1f µs" % v


def fmt_ratio(v):
    return "-" if v is None else "%.3f" % v


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = "%.1f GiB" % (kb / 1048576.0)
    except (OSError, ValueError, IndexError):
        pass

    def first_line(cmd):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            text = (out.stdout + out.stderr).strip().splitlines()
            return text[0] if text else "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    httpd = first_line([HTTPD, "-v"]).replace("Server version: ", "")
    rev = first_line(["git", "-C", TOP, "rev-parse", "--short", "HEAD"])
    try:
        dirty = subprocess.run(["git", "-C", TOP, "status", "--porcelain", "--",
                                "mod_code_interpreter"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        dirty = ""
    return {
        "revision": rev + (" + uncommitted changes" if dirty else ""),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "httpd": httpd,
        "nginx": first_line([NGINX, "-v"]).replace("nginx version: ", ""),
        "wrk": first_line([WRK, "-v"]).split(" [")[0],
        "python": first_line([PYTHON, "-V"]),
        "module": MODULE,
    }


# ------------------------------------------------------------- bodies

WORDS = ("the model reads the table and sums each column before it plots the "
         "totals per region, then compares quarter over quarter growth with "
         "last year and notes outliers in a short list").split()


def padding(n):
    """About n bytes of plain text with line breaks."""
    out, size, i = [], 0, 0
    while size < n:
        w = WORDS[i % len(WORDS)]
        i += 1
        sep = "\n" if i % 17 == 0 else " "
        out.append(w + sep)
        size += len(w) + 1
    text = "".join(out)
    return text[:n]


def sized(build, size):
    """build(pad_text) -> dict; returns the JSON bytes of exactly SIZE bytes."""
    base = len(json.dumps(build("")).encode())
    body = json.dumps(build(padding(size - base))).encode()
    # A line break encodes as two bytes: trim until it fits, then pad with spaces.
    pad = padding(size - base)
    while len(body) > size:
        pad = pad[:-(len(body) - size)]
        body = json.dumps(build(pad)).encode()
    if len(body) < size:
        pad = pad + " " * (size - len(body))
        body = json.dumps(build(pad)).encode()
    return body


def passthrough_body(size):
    """A request with a client function tool and no code_interpreter."""
    def build(pad):
        return {
            "model": "bench-model",
            "store": False,
            "tools": [{"type": "function", "name": "get_weather",
                       "description": "Weather for a city.",
                       "parameters": {"type": "object",
                                      "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}}],
            "input": [{"role": "user", "content": pad},
                      {"role": "user", "content": "What is the weather in Paris?"}],
        }
    return sized(build, size)


def script_message(rounds):
    return {"role": "user", "content": "SCRIPT: " + json.dumps(rounds)}


ONE_CALL = [[{"call": "print(1)"}], [{"text": "the answer is {{last_output}}"}]]
# One round of 1 + WARM_CALLS calls: the first starts the sandbox, the others
# run in the started one.
WARM_CALLS = 10
MANY_CALLS = [[{"calls": 1 + WARM_CALLS, "code": "print(1)"}],
              [{"text": "the answer is {{last_output}}"}]]


def intercepted_body(size, rounds=ONE_CALL):
    """A conversation with the code_interpreter tool, padded by a long earlier
    message, scripted for the fake model."""
    def build(pad):
        return {
            "model": "bench-model",
            "store": False,
            "tools": [TOOL],
            "include": ["code_interpreter_call.outputs"],
            "input": [{"role": "user", "content": pad}, script_message(rounds)],
        }
    if size is None:
        return json.dumps(build("Earlier: a short message.")).encode()
    return sized(build, size)


def check_answer(calls):
    """A checker of an intercepted answer: CALLS completed code_interpreter_call
    items that printed 1, then the model's text."""
    def check(data):
        try:
            body = json.loads(data)
            out = body["output"]
            ci = [o for o in out if o.get("type") == "code_interpreter_call"]
            msgs = [o for o in out if o.get("type") == "message"]
            if len(ci) != calls or not msgs:
                return False
            for c in ci:
                if c.get("status") != "completed":
                    return False
                if c.get("outputs") != [{"type": "logs", "logs": "1\n"}]:
                    return False
            return msgs[-1]["content"][0]["text"] == "the answer is 1\n"
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return False
    return check


# ------------------------------------------------------------- servers

class FakeModel:
    """test/fake_model.py on a free port (it answers with TCP_NODELAY, so
    no answer waits for a delayed ACK)."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [PYTHON, os.path.join(os.path.dirname(HERE), "test", "fake_model.py"),
             "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            self.proc.kill()
            raise RuntimeError("fake_model.py did not start: %r" % line)
        self.port = int(line.split()[1])

    def reset(self):
        """Drop the requests it keeps for inspection."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            c.request("POST", "/_reset")
            c.getresponse().read()
            c.close()
        except OSError:
            pass

    def requests(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/_requests")
        data = c.getresponse().read()
        c.close()
        return json.loads(data)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Nginx:
    """The fast upstream: nginx answering a fixed JSON body to any request,
    after reading (and discarding) the request body."""

    ANSWER = json.dumps({
        "id": "resp_bench", "object": "response", "status": "completed",
        "model": "bench-model", "output": [{
            "type": "message", "id": "msg_bench", "status": "completed",
            "role": "assistant", "content": [{
                "type": "output_text", "text": "It is sunny in Paris.",
                "annotations": []}]}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    })

    def __init__(self):
        self.root = os.path.join(RUN, "nginx")
        os.makedirs(os.path.join(self.root, "logs"), exist_ok=True)
        self.port = free_port()
        conf = os.path.join(self.root, "nginx.conf")
        answer = self.ANSWER.replace("\\", "\\\\").replace("'", "\\'")
        with open(conf, "w") as f:
            f.write(f"""
worker_processes 1;
pid {self.root}/nginx.pid;
error_log {self.root}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {self.root}/body;
    proxy_temp_path {self.root}/proxy;
    fastcgi_temp_path {self.root}/fastcgi;
    uwsgi_temp_path {self.root}/uwsgi;
    scgi_temp_path {self.root}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    client_max_body_size 64m;
    client_body_buffer_size 2m;
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            default_type application/json;
            return 200 '{answer}';
        }}
    }}
}}
""")
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.root, "-c", conf, "-e", os.path.join(self.root, "logs", "error.log"),
             "-g", "daemon off;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not wait_port(self.port):
            self.stop()
            raise RuntimeError("nginx did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Httpd:
    """One httpd server root under bench/.run/httpd."""

    def __init__(self, nginx_port, model_port, name="httpd"):
        self.root = os.path.join(RUN, name)
        self.port = free_port()
        self.nginx_port = nginx_port
        self.model_port = model_port
        self.error_log = os.path.join(self.root, "logs", "error_log")
        self.access_log = os.path.join(self.root, "logs", "access_log")
        self.conf = os.path.join(self.root, "httpd.conf")

    def write_conf(self):
        os.makedirs(os.path.join(self.root, "logs"), exist_ok=True)
        os.chmod(self.root, 0o755)
        user = "User www-data\nGroup www-data\n" if os.geteuid() == 0 else ""
        mods = ["authz_core", "proxy", "proxy_http", "headers", "status", "mime",
                "deflate", "filter", "env", "setenvif"]
        loads = "\n".join("LoadModule %s_module %s/mod_%s.so" % (m, MODDIR, m) for m in mods)
        fast = "http://127.0.0.1:%d/v1/responses" % self.nginx_port
        model = "http://127.0.0.1:%d/v1/responses" % self.model_port
        conf = f"""
ServerRoot "{self.root}"
ServerName 127.0.0.1
Listen 127.0.0.1:{self.port}
PidFile "{self.root}/httpd.pid"
DefaultRuntimeDir "{self.root}"
Mutex file:{self.root}
LoadModule mpm_event_module {MODDIR}/mod_mpm_event.so
{loads}
LoadModule code_interpreter_module {MODULE}
{user}
# A fixed set of children for the whole run: no child is started or retired
# while it runs, so the RSS of the children is comparable over time.
StartServers 2
ServerLimit 2
ThreadLimit 64
ThreadsPerChild 64
MaxRequestWorkers 128
MinSpareThreads 1
MaxSpareThreads 128
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
Timeout 120
TypesConfig /etc/mime.types
# Each of phase 3's conversations is one request: its container is idle
# once it is answered, and expires 5 s later (as one-shot requests would be
# served); room for 64 at once, and a short grace, so that new
# conversations take the places of idle ones meanwhile.
CodeInterpreterMaxSandboxes 160
CodeInterpreterEvictionGrace 2s
CodeInterpreterSandbox local provider=local idle=5s
<Location /bench-status>
  SetHandler server-status
</Location>

ErrorLog "{self.error_log}"
LogLevel warn
ErrorLogFormat "[%{{cu}}t] [%l] [%{{X-Bench-Id}}i] %M"
LogFormat "%{{X-Bench-Id}}i\\t%U\\t%>s\\t%D\\t%{{ci-rounds}}n\\t%{{ci-executions}}n\\t%{{ci-module-us}}n\\t%{{ci-sandbox-us}}n\\t%{{ci-upstream-us}}n\\t%{{ci-admit-wait-us}}n" bench
CustomLog "{self.access_log}" bench

# 1. the fast upstream, with and without the module
<Location /fast/ci/v1/responses>
  ProxyPass {fast}
  CodeInterpreter On
</Location>
<Location /fast/plain/v1/responses>
  ProxyPass {fast}
</Location>
# 2.-4. the scripted model upstream
<Location /model/ci/v1/responses>
  ProxyPass {model}
  CodeInterpreter On
</Location>
<Location /model/plain/v1/responses>
  ProxyPass {model}
</Location>
# 2. requests without an owner (an owner expression that is always empty):
# a sandbox of their own, no container
<Location /model/anon/v1/responses>
  ProxyPass {model}
  CodeInterpreter On
  CodeInterpreterOwner "%{{HTTP:X-Bench-No-Such-Header}}"
</Location>
# the same, with each sandbox start and execution in the error log
<Location /model/trace/v1/responses>
  ProxyPass {model}
  CodeInterpreter On
  LogLevel warn code_interpreter:debug
</Location>
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    def ctl(self, action):
        return subprocess.run([HTTPD, "-d", self.root, "-f", self.conf, "-k", action],
                              capture_output=True, text=True)

    def start(self):
        self.write_conf()
        # Keep the logs of an earlier start of this root: error_log.1, ...
        for p in (self.error_log, self.access_log):
            if os.path.exists(p):
                k = 1
                while os.path.exists("%s.%d" % (p, k)):
                    k += 1
                os.rename(p, "%s.%d" % (p, k))
        out = self.ctl("start")
        if out.returncode != 0 or not wait_port(self.port):
            raise RuntimeError("httpd did not start: %s%s\n%s" % (out.stdout, out.stderr,
                                                                 self.read(self.error_log)))
        # Both children up before anything is measured.
        deadline = time.time() + 10
        while len(self.children()) < 2 and time.time() < deadline:
            time.sleep(0.05)
        return self

    def stop(self):
        parent = self.parent_pid()
        self.ctl("stop")
        pidfile = os.path.join(self.root, "httpd.pid")
        deadline = time.time() + 20
        while os.path.exists(pidfile) and time.time() < deadline:
            time.sleep(0.05)
        # ... and until the parent is gone.
        while parent and time.time() < deadline:
            try:
                os.kill(parent, 0)
            except OSError:
                break
            time.sleep(0.05)

    @staticmethod
    def read(path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def parent_pid(self):
        try:
            with open(os.path.join(self.root, "httpd.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def children(self):
        """pids of the parent's apache2 children (not the sandboxes: those are
        the children's children)."""
        parent = self.parent_pid()
        if parent is None:
            return []
        return sorted(pid for pid, (ppid, comm, _) in proc_table().items()
                      if ppid == parent and comm == "apache2")

    def cpu_us(self):
        """CPU time used so far by the children, in µs: the sum of their
        threads' time on a CPU from /proc/PID/task/TID/schedstat (in ns; the
        children's threads live as long as the server here). Where schedstat
        is missing, user + system time from /proc/PID/stat (clock ticks,
        10 ms: 1 % of a 2 s round)."""
        total = 0
        for pid in self.children():
            ns = schedstat_ns(pid)
            if ns is None:
                return self.cpu_us_ticks()
            total += ns
        return total / 1000.0

    def cpu_us_ticks(self):
        hz = os.sysconf("SC_CLK_TCK")
        stats = proc_table()
        total = sum(int(stats[pid][2][11]) + int(stats[pid][2][12])
                    for pid in self.children() if pid in stats)
        return total * 1e6 / hz

    def rss_kb(self):
        """Sum of VmRSS of the children, in kB, and their pids."""
        total = 0
        kids = self.children()
        for pid in kids:
            try:
                with open("/proc/%d/status" % pid) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
            except OSError:
                pass
        return total, kids

    def sandbox_processes(self):
        """Processes below the children (live sandboxes)."""
        kids = set(self.children())
        return sum(1 for ppid, _, _ in proc_table().values() if ppid in kids)


class AccessLog:
    """The bench access log, keyed by X-Bench-Id."""

    FIELDS = ("id", "path", "status", "total_us", "rounds", "executions",
              "module_us", "sandbox_us", "upstream_us", "wait_us")

    def __init__(self, path):
        self.path = path

    def entries(self, ids, timeout=20):
        """The lines of the given request ids (waits for them to be written)."""
        want = set(ids)
        deadline = time.time() + timeout
        found = {}
        while True:
            found = {}
            try:
                with open(self.path, errors="replace") as f:
                    for line in f:
                        parts = line.rstrip("\n").split("\t")
                        if len(parts) != len(self.FIELDS) or parts[0] not in want:
                            continue
                        e = dict(zip(self.FIELDS, parts))
                        for k in self.FIELDS[2:]:
                            try:
                                e[k] = int(e[k])
                            except ValueError:
                                e[k] = None
                        found[e["id"]] = e
            except FileNotFoundError:
                pass
            if len(found) >= len(want) or time.time() > deadline:
                return found
            time.sleep(0.1)


# ------------------------------------------------------------- clients

class Client:
    """One keep-alive connection to httpd, as the caller OWNER."""

    def __init__(self, port, owner="sk-bench"):
        self.port = port
        self.owner = owner
        self.conn = None

    def post(self, path, body, rid, timeout=120):
        """Returns (status, data, seconds). A kept-alive connection that the
        server closed meanwhile is replaced once, before anything was read."""
        for attempt in (0, 1):
            reused = self.conn is not None
            t0 = time.perf_counter()
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                           timeout=timeout)
                self.conn.request("POST", path, body=body,
                                  headers={"Content-Type": "application/json",
                                           "Authorization": "Bearer " + self.owner,
                                           "X-Bench-Id": rid})
                resp = self.conn.getresponse()
            except (BrokenPipeError, ConnectionResetError,
                    http.client.RemoteDisconnected) as exc:
                self.close()
                if reused and attempt == 0:
                    continue
                return 0, str(exc).encode(), time.perf_counter() - t0
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                return 0, str(exc).encode(), time.perf_counter() - t0
            try:
                data = resp.read()
                status = resp.status
                if resp.will_close:
                    self.close()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                status, data = 0, str(exc).encode()
            return status, data, time.perf_counter() - t0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def load(port, path, body, tag, count, concurrency, seconds, check=None, owners=1):
    """COUNT requests (at most; fewer when SECONDS run out) on CONCURRENCY
    connections, of OWNERS callers (the connections spread over them).
    Returns (records, elapsed seconds)."""
    seconds = min(seconds, MAX_SECONDS_PER_LOOP)
    lock = threading.Lock()
    state = {"next": 0}
    records = []
    t_start = time.perf_counter()
    deadline = t_start + seconds

    def worker(k):
        client = Client(port, "sk-bench" if owners == 1 else "sk-bench-%d" % (k % owners))
        while True:
            with lock:
                if state["next"] >= count or time.perf_counter() >= deadline:
                    break
                state["next"] += 1
                i = state["next"]
            rid = "%s-%d" % (tag, i)
            status, data, secs = client.post(path, body, rid)
            ok = status == 200 and (check(data) if check else True)
            with lock:
                records.append({"id": rid, "status": status, "lat_us": secs * 1e6, "ok": ok,
                                "error": None if ok else data[:300]})
        client.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True)
               for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.perf_counter() - t_start


def running_containers(port):
    """server-status's count of running containers (None: unknown)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/bench-status?auto")
        text = conn.getresponse().read().decode()
        conn.close()
    except (OSError, http.client.HTTPException):
        return None
    m = re.search(r"CodeInterpreterContainers: running=(\d+)", text)
    return int(m.group(1)) if m else None


def wait_no_containers(port, seconds=60):
    """Until no container runs (they expire), for at most SECONDS."""
    deadline = time.time() + seconds
    while running_containers(port) and time.time() < deadline:
        time.sleep(0.5)


def start_wrk(url, body_file, connections, seconds, threads=2, delay_ms=0):
    env = dict(os.environ, BODY_FILE=body_file, DELAY_MS=str(delay_ms))
    cmd = [WRK, "-t%d" % threads, "-c%d" % connections, "-d%ds" % seconds, "--timeout", "30s",
           "-s", os.path.join(HERE, "post.lua"), url]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wrk_result(proc, seconds):
    try:
        stdout, stderr = proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
            r["errors"] = (r["connect_errors"] + r["read_errors"] + r["write_errors"]
                           + r["status_errors"] + r["timeouts"])
            return r
    raise RuntimeError("wrk printed no result:\n%s\n%s" % (stdout, stderr))


def run_wrk(url, body_file, connections, seconds, threads=2, delay_ms=0):
    return wrk_result(start_wrk(url, body_file, connections, seconds, threads, delay_ms),
                      seconds)


def as_server_user():
    """preexec_fn: run as the user httpd's children run as (www-data) when
    root, as the module's sandboxes do."""
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam("www-data")
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


KERNEL_SRC = os.path.join(TOP, "mod_code_interpreter", "sandbox", "ci_kernel.py")


def kernel_ready_us():
    """Start the module's kernel (ci_kernel.py) the way the sandbox does, but
    outside bubblewrap, and time it until it reports ready."""
    try:
        with open(KERNEL_SRC) as f:
            src = f.read()
    except OSError:
        return None
    # Its capture file where the server's user may write it (in a sandbox:
    # the sandbox's own /tmp).
    tmp = tempfile.mkdtemp(prefix="ci-kernel-")
    if os.geteuid() == 0:
        os.chown(tmp, pwd.getpwnam("www-data").pw_uid, -1)
    cfg = json.dumps({"max_output": 65536, "processes": 64, "preload": "",
                      "capture": os.path.join(tmp, "fd-output")})
    try:
        t0 = time.perf_counter()
        p = subprocess.Popen([PYTHON, "-I", "-c", src, cfg], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             preexec_fn=as_server_user,
                             env={"HOME": "/tmp", "LANG": "C.UTF-8"})
        line = p.stdout.readline()
        el = (time.perf_counter() - t0) * 1e6
        p.kill()
        p.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return el if b"ready" in line else None


def build_prog(name):
    """Compile bench/NAME.c against the module's core library; the path of
    the program, or None (with the reason printed)."""
    out = os.path.join(RUN, name)
    lib = os.path.join(TOP, ".libs", "libcicore.a")

    def flags(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            return r.stdout.split() if r.returncode == 0 else None
        except OSError:
            return None
    parts = [flags(["apr-1-config", "--includes", "--cppflags"]),
             flags(["pkg-config", "--cflags", "json-c"]),
             flags(["pkg-config", "--libs", "json-c"]),
             flags(["apr-1-config", "--link-ld"]),
             flags(["apu-1-config", "--link-ld"])]
    if not os.path.exists(lib) or any(x is None for x in parts):
        log("   (no bench/%s.c: the core library or the build flags are missing)" % name)
        return None
    cmd = (["gcc", "-O2", "-g", "-std=gnu11",
            "-I", os.path.join(TOP, "mod_code_interpreter", "core"),
            "-I", os.path.join(TOP, "mod_code_interpreter", "sandbox")] + parts[0]
           + parts[1] + [os.path.join(HERE, name + ".c"), lib] + parts[2] + parts[3]
           + parts[4] + ["-lcurl", "-o", out])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        log("   (bench/%s.c did not build)\n" % name + r.stderr[-2000:])
        return None
    return out


def build_micro():
    return build_prog("micro")


def run_micro(prog, files, iterations, cold):
    env = dict(os.environ, MICRO_COLD="1" if cold else "0")
    r = subprocess.run([prog] + list(files) + [str(iterations)], capture_output=True,
                       text=True, env=env, timeout=900)
    if r.returncode != 0:
        log("   (CPU breakdown failed: %s)" % r.stderr.strip()[-500:])
        return None
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def post_direct(port, body):
    """POST to the model upstream itself (not through httpd)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/responses", body=body,
              headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"})
    data = c.getresponse().read()
    c.close()
    return data


# ------------------------------------------------------------- the phases

class Bench:
    def __init__(self):
        self.results = {}
        self.rows = []          # the final table
        self.notes = []

    def row(self, figure, measured, baseline, rat, target="", verdict=""):
        self.rows.append((figure, measured, baseline, rat, target, verdict))

    # ---- 1. passthrough -------------------------------------------------

    def passthrough(self, servers):
        """SERVERS: two identical httpd servers.

        httpd's CPU per request (the verdict): in each round one server
        serves the CodeInterpreter On location and the other the plain one,
        both at the same time, and they swap roles the next round, so both
        variants of a round share whatever else the machine does then. Each
        wrk connection waits PASS_DELAY_MS before each request: both servers
        get the same steady request rate. (As fast as it goes, the two
        servers split the CPUs at random from one round to the next, and the
        CPU a request costs depends on the rate: at 32 connections a round's
        ratio then swung by 6 % between identical servers on this machine;
        at a steady rate by 2 %.)

        Throughput: as fast as it goes, on one server, the two variants one
        after the other (A B, then B A)."""
        log("== 1. passthrough: requests without the tool, CodeInterpreter On vs plain "
            "mod_proxy, nginx upstream")
        log("   (load average before: %s)" % loadavg())
        # (label, size, wrk connections, delay per request (ms), target for
        # httpd's CPU per request, CI/plain; the 1 MB target grows with what
        # the scan costs, below)
        sizes = [("10 KB", KB10, 32, PASS_DELAY_MS[0], 1.02),
                 ("1 MB", MB1, 8, PASS_DELAY_MS[1], 1.05)]
        files = {}
        for label, size, _, _, _ in sizes:
            p = os.path.join(RUN, "pass-%d.json" % size)
            with open(p, "wb") as f:
                f.write(passthrough_body(size))
            files[label] = p
        scan = self.scan_cost(files)

        def url(server, v):
            return "http://127.0.0.1:%d/fast/%s/v1/responses" % (server.port, v)

        def measured(server, r, cpu0):
            r["httpd_cpu_us_per_req"] = ((server.cpu_us() - cpu0) / r["requests"]
                                         if r["requests"] else None)
            r["server"] = servers.index(server)
            r["loadavg"] = loadavg()
            return r

        def pair(rnd, label, conns, delay, seconds):
            """One CPU round: CI on one server, plain on the other, at once."""
            roles = dict(zip(("ci", "plain"), servers if rnd % 2 == 0 else servers[::-1]))
            order = ("ci", "plain") if rnd % 2 == 0 else ("plain", "ci")
            cpu0 = {v: roles[v].cpu_us() for v in order}
            procs = {v: start_wrk(url(roles[v], v), files[label], conns, seconds,
                                  delay_ms=delay) for v in order}
            out = {v: wrk_result(procs[v], seconds) for v in order}
            return {v: measured(roles[v], out[v], cpu0[v]) for v in order}

        # Warm both paths on both servers (connections to nginx, allocator pools).
        for label, size, conns, delay, _ in sizes:
            for rnd in (0, 1):
                pair(rnd, label, conns, delay, 2)
        log("   httpd's CPU per request: %d rounds of %d s, both variants at once on two "
            "servers, at a steady rate" % (PASS_ROUNDS, PASS_SECONDS))
        runs = {(label, v): [] for label, _, _, _, _ in sizes for v in ("plain", "ci")}
        for rnd in range(PASS_ROUNDS):
            for label, size, conns, delay, _ in sizes:
                out = pair(rnd, label, conns, delay, PASS_SECONDS)
                for v in ("ci", "plain"):
                    runs[(label, v)].append(out[v])
                log("   round %2d %-5s CI (server %d) %6.0f req/s %s/req  plain (server %d) "
                    "%6.0f req/s %s/req  ratio %.3f  load %s"
                    % (rnd + 1, label, out["ci"]["server"] + 1, out["ci"]["rps"],
                       fmt_us1(out["ci"]["httpd_cpu_us_per_req"]), out["plain"]["server"] + 1,
                       out["plain"]["rps"], fmt_us1(out["plain"]["httpd_cpu_us_per_req"]),
                       out["ci"]["httpd_cpu_us_per_req"] / out["plain"]["httpd_cpu_us_per_req"],
                       out["ci"]["loadavg"]))
        log("   throughput: %d rounds of %d s as fast as it goes, one server, A B then B A"
            % (PASS_SAT_ROUNDS, PASS_SECONDS))
        sat = {(label, v): [] for label, _, _, _, _ in sizes for v in ("plain", "ci")}
        for rnd in range(PASS_SAT_ROUNDS):
            for label, size, conns, _, _ in sizes:
                order = ("plain", "ci") if rnd % 2 == 0 else ("ci", "plain")
                for v in order:
                    cpu0 = servers[0].cpu_us()
                    r = measured(servers[0], run_wrk(url(servers[0], v), files[label], conns,
                                                     PASS_SECONDS), cpu0)
                    sat[(label, v)].append(r)
                    log("   round %2d %-5s %-5s %8.0f req/s  p50 %s  p99 %s  httpd CPU %s/req"
                        % (rnd + 1, label, v, r["rps"], fmt_us(r["p50_us"]),
                           fmt_us(r["p99_us"]), fmt_us1(r["httpd_cpu_us_per_req"])))
        if PROFILE:
            self.profile_passthrough(servers[0], sizes, files, url)
        res = {}
        for label, size, conns, delay, target in sizes:
            fig = self.passthrough_figures(runs[(label, "plain")], runs[(label, "ci")])
            fig["saturated"] = self.passthrough_figures(sat[(label, "plain")],
                                                        sat[(label, "ci")])
            fig["connections"] = conns
            fig["delay_ms"] = delay
            fig["scan_us"] = scan.get(label)
            if fig["scan_us"] is not None and fig["plain_cpu_us_per_req"]:
                # the scan is the one thing the module must do on this path:
                # a target of less than its cost plus 1 % could not be met
                target = max(target, 1.01 + fig["scan_us"] / fig["plain_cpu_us_per_req"])
            fig["cpu_target"] = target
            res[label] = fig
            self.report_passthrough(label, fig)
        self.results["passthrough"] = res

    def profile_passthrough(self, server, sizes, files, url):
        """perf samples of each variant alone on SERVER; what share of them
        is the module's own code, and so how much of the CPU per request."""
        prof_res = {}
        for label, size, conns, _, _ in sizes:
            for v in ("ci", "plain"):
                prof = self.start_profile("pass-%d-%s" % (size, v), server)
                cpu0 = server.cpu_us()
                r = run_wrk(url(server, v), files[label], conns, max(PASS_SECONDS, 5))
                cpu = (server.cpu_us() - cpu0) / r["requests"] if r["requests"] else None
                if not prof:
                    continue
                text = self.stop_profile(prof)
                m = re.search(r"([0-9.]+)%\s+mod_code_interpreter\.so", text or "")
                share = float(m.group(1)) if m else 0.0
                prof_res["%s %s" % (label, v)] = {"cpu_us_per_req": cpu, "module_pct": share}
                log("   %s %s under perf: httpd CPU %s/req; the module's own code %.2f %% of "
                    "the samples, about %s per request"
                    % (label, v, fmt_us1(cpu), share, fmt_us1(cpu * share / 100 if cpu else None)))
        self.results["passthrough_profile"] = prof_res

    @staticmethod
    def passthrough_figures(plain, ci):
        """The figures of one size from its rounds. Each round's two runs are
        next to each other in time: their ratio is the least disturbed by
        whatever else the machine does; a ratio is the median of the rounds'
        ratios, with the middle half of them beside it."""
        def paired(key):
            return [c[key] / p[key] for p, c in zip(plain, ci) if c[key] and p[key]]

        cpu = paired("httpd_cpu_us_per_req")
        rps = paired("rps")
        if not cpu or not rps:
            return None
        fig = {
            "rounds": len(plain),
            "plain_rps": med([r["rps"] for r in plain]),
            "ci_rps": med([r["rps"] for r in ci]),
            "plain_p50_us": med([r["p50_us"] for r in plain]),
            "ci_p50_us": med([r["p50_us"] for r in ci]),
            "plain_p99_us": med([r["p99_us"] for r in plain]),
            "ci_p99_us": med([r["p99_us"] for r in ci]),
            "plain_cpu_us_per_req": med([r["httpd_cpu_us_per_req"] for r in plain
                                         if r["httpd_cpu_us_per_req"]]),
            "ci_cpu_us_per_req": med([r["httpd_cpu_us_per_req"] for r in ci
                                      if r["httpd_cpu_us_per_req"]]),
            "paired_cpu_ratios": cpu,
            "paired_ratios": rps,
            "cpu_ratio": med(cpu),
            "cpu_ratio_p25": pct(cpu, 25), "cpu_ratio_p75": pct(cpu, 75),
            "cpu_ratio_interval": median_interval(cpu),
            "throughput_ratio": med(rps),
            "throughput_ratio_p25": pct(rps, 25), "throughput_ratio_p75": pct(rps, 75),
            "p50_ratio": med(paired("p50_us")),
            "p99_ratio": med(paired("p99_us")),
            "errors": sum(r["errors"] for r in plain + ci),
            "loadavg": [r["loadavg"] for r in plain + ci],
        }
        fig["cpu_ratio_of_medians"] = ratio(fig["ci_cpu_us_per_req"],
                                            fig["plain_cpu_us_per_req"])
        fig["throughput_ratio_of_medians"] = ratio(fig["ci_rps"], fig["plain_rps"])
        return fig

    def report_passthrough(self, label, fig):
        target = fig["cpu_target"]
        verdict = "PASS" if fig["cpu_ratio"] is not None and fig["cpu_ratio"] <= target \
            else "FAIL"
        scan = fig["scan_us"]
        sat = fig["saturated"]
        lo, hi = fig["cpu_ratio_interval"]
        log("   %s (%d connections; ratios: median of the rounds' CI/plain, middle half "
            "of the rounds in brackets):" % (label, fig["connections"]))
        log("     httpd CPU per request (%d rounds, %d ms between requests, about %.0f "
            "req/s each)  CI %s  plain %s  ratio %.3f [%.3f..%.3f] (95 %% interval of "
            "the median %s..%s; ratio of the medians %.3f)  target <= %.3f%s  %s"
            % (fig["rounds"], fig["delay_ms"], fig["plain_rps"],
               fmt_us1(fig["ci_cpu_us_per_req"]), fmt_us1(fig["plain_cpu_us_per_req"]),
               fig["cpu_ratio"], fig["cpu_ratio_p25"], fig["cpu_ratio_p75"],
               fmt_ratio(lo), fmt_ratio(hi), fig["cpu_ratio_of_medians"], target,
               "" if scan is None else " (the scan: %s)" % fmt_us1(scan), verdict))
        log("     latency at that rate p50 CI %s  plain %s  ratio %.3f; p99 CI %s  plain %s  "
            "ratio %.3f"
            % (fmt_us(fig["ci_p50_us"]), fmt_us(fig["plain_p50_us"]), fig["p50_ratio"],
               fmt_us(fig["ci_p99_us"]), fmt_us(fig["plain_p99_us"]), fig["p99_ratio"]))
        if sat:
            log("     as fast as it goes (%d rounds): throughput CI %.0f req/s  plain %.0f "
                "req/s  ratio %.3f [%.3f..%.3f]; httpd CPU per request CI %s  plain %s  "
                "ratio %.3f; latency p50 ratio %.3f, p99 ratio %.3f"
                % (sat["rounds"], sat["ci_rps"], sat["plain_rps"], sat["throughput_ratio"],
                   sat["throughput_ratio_p25"], sat["throughput_ratio_p75"],
                   fmt_us1(sat["ci_cpu_us_per_req"]), fmt_us1(sat["plain_cpu_us_per_req"]),
                   sat["cpu_ratio"], sat["p50_ratio"], sat["p99_ratio"]))
        errors = fig["errors"] + (sat["errors"] if sat else 0)
        if errors:
            log("     errors: %d" % errors)
        self.row("passthrough %s httpd CPU per request" % label,
                 fmt_us1(fig["ci_cpu_us_per_req"]),
                 "plain mod_proxy %s" % fmt_us1(fig["plain_cpu_us_per_req"]),
                 "%s [%s..%s]" % (fmt_ratio(fig["cpu_ratio"]), fmt_ratio(fig["cpu_ratio_p25"]),
                                  fmt_ratio(fig["cpu_ratio_p75"])),
                 "<= %.3f" % target, verdict)
        if sat:
            self.row("passthrough %s throughput" % label,
                     "%.0f req/s" % sat["ci_rps"],
                     "plain mod_proxy %.0f req/s" % sat["plain_rps"],
                     fmt_ratio(sat["throughput_ratio"]))
            self.row("passthrough %s latency p50 / p99" % label,
                     "%s / %s" % (fmt_us(sat["ci_p50_us"]), fmt_us(sat["ci_p99_us"])),
                     "%s / %s" % (fmt_us(sat["plain_p50_us"]), fmt_us(sat["plain_p99_us"])),
                     "%s / %s" % (fmt_ratio(sat["p50_ratio"]), fmt_ratio(sat["p99_ratio"])))

    def scan_cost(self, files):
        """What the passthrough path's scan costs on each body outside httpd
        (bench/scan.c, in the 8000-byte pieces a socket read gives, the body
        in the cache as a piece just received is): {label: µs}."""
        prog = build_prog("scan")
        out = {}
        if not prog:
            return out
        for label, path in files.items():
            r = subprocess.run([prog, path, "8000", "300"], capture_output=True, text=True,
                               timeout=300)
            steps = {}
            for line in r.stdout.splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    steps[d["step"]] = d["cpu_us"]
            if r.returncode != 0 or "scan in pieces, warm" not in steps:
                log("   (scan cost of %s not measured: %s)" % (label, r.stderr.strip()[-300:]))
                continue
            out[label] = steps["scan in pieces, warm"]
            log("   the scan, outside httpd, %s body in 8000-byte pieces: %s warm, %s cold "
                "(the whole-body scan it replaced: %s)"
                % (label, fmt_us1(steps["scan in pieces, warm"]),
                   fmt_us1(steps.get("scan in pieces, cold")),
                   fmt_us1(steps.get("whole-body scan (before)"))))
        self.results["scan_us"] = out
        return out

    # ---- 2. module time -------------------------------------------------

    def module_time(self, httpd, model, alog):
        log("== 2. module time per round: one code call then a text answer, "
            "fake model upstream, concurrency 1")
        log("   (load average before: %s)" % loadavg())
        res = {}
        ci_path, plain_path = "/model/ci/v1/responses", "/model/plain/v1/responses"
        sizes = [("10 KB", KB10, MODULE_N_10K, 200.0), ("1 MB", MB1, MODULE_N_1M, 10000.0)]
        client = Client(httpd.port)
        micro = build_micro()
        for label, size, n, target in sizes:
            body = intercepted_body(size)
            check = check_answer(1)
            # What the module sends upstream in the first round: the same
            # exchange through the plain location costs the proxy and the
            # upstream, not the module.
            model.reset()
            status, data, _ = client.post(ci_path, body, "m-probe-%d" % size)
            if status != 200 or not check(data):
                raise RuntimeError("intercepted request failed: %s %r" % (status, data[:500]))
            seen = model.requests()
            first = base64.b64decode(seen[0]["body_b64"])
            # The three bodies of the CPU breakdown: the client's request and
            # the upstream's two answers to what the module sent.
            micro_files = []
            for name, data in (("request", body), ("answer1", post_direct(model.port, first)),
                               ("answer2", post_direct(model.port,
                                                       base64.b64decode(seen[1]["body_b64"])))):
                path = os.path.join(RUN, "micro-%s-%d.json" % (name, size))
                with open(path, "wb") as f:
                    f.write(data)
                micro_files.append(path)
            model.reset()
            for i in range(3):          # warm-up
                client.post(ci_path, body, "m-warm-%d-%d" % (size, i))
                client.post(plain_path, first, "m-warmp-%d-%d" % (size, i))
            profiler = self.start_profile("module-%d" % size, httpd) if PROFILE else None
            pairs = []
            t_end = time.time() + MAX_SECONDS_PER_LOOP
            for i in range(n):
                if time.time() > t_end:
                    break
                a_id, b_id = "m%d-ci-%d" % (size, i), "m%d-plain-%d" % (size, i)
                order = ((ci_path, body, a_id), (plain_path, first, b_id))
                if i % 2:
                    order = order[::-1]
                lat = {}
                oks = {}
                for path, b, rid in order:
                    status, data, secs = client.post(path, b, rid)
                    lat[rid] = secs * 1e6
                    oks[rid] = status == 200 and (check(data) if path == ci_path else True)
                pairs.append((a_id, b_id, lat[a_id], lat[b_id], oks[a_id] and oks[b_id]))
                if i % 20 == 19:
                    model.reset()
            if profiler:
                self.stop_profile(profiler)
            entries = alog.entries([p[0] for p in pairs] + [p[1] for p in pairs])
            per_round, module_us, outside, outside_srv, plain_lat, ci_lat = [], [], [], [], [], []
            sandbox, upstream = [], []
            failures = 0
            for a_id, b_id, la, lb, ok in pairs:
                ea, eb = entries.get(a_id), entries.get(b_id)
                if not ok or not ea or not eb or not ea["rounds"] or ea["module_us"] is None:
                    failures += 1
                    continue
                per_round.append(ea["module_us"] / ea["rounds"])
                module_us.append(ea["module_us"])
                sandbox.append(ea["sandbox_us"])
                upstream.append(ea["upstream_us"])
                plain_lat.append(lb)
                ci_lat.append(la)
                outside.append(la - lb - ea["upstream_us"] - ea["sandbox_us"])
                outside_srv.append(ea["total_us"] - eb["total_us"] - ea["upstream_us"]
                                   - ea["sandbox_us"])
            rounds = entries[pairs[0][0]]["rounds"] if pairs and pairs[0][0] in entries else None
            fig = {
                "requests": len(pairs), "failures": failures, "rounds": rounds,
                "per_round_p50_us": med(per_round), "per_round_p99_us": pct(per_round, 99),
                "module_us_p50": med(module_us), "module_us_p99": pct(module_us, 99),
                "outside_us_p50": med(outside), "outside_us_p99": pct(outside, 99),
                "outside_server_us_p50": med(outside_srv),
                "plain_round_p50_us": med(plain_lat), "plain_round_p99_us": pct(plain_lat, 99),
                "ci_request_p50_us": med(ci_lat), "ci_request_p99_us": pct(ci_lat, 99),
                "sandbox_us_p50": med(sandbox), "upstream_us_p50": med(upstream),
            }
            fig["per_round_vs_plain_round"] = ratio(fig["per_round_p50_us"],
                                                    fig["plain_round_p50_us"])
            fig["outside_vs_module"] = ratio(fig["outside_us_p50"], fig["module_us_p50"])
            res[label] = fig
            log("   %s conversation (%d requests, %d failed, %s rounds each):"
                % (label, len(pairs), failures, rounds))
            log("     module time per round  p50 %s  p99 %s  (target p50 <= %s)"
                % (fmt_us(fig["per_round_p50_us"]), fmt_us(fig["per_round_p99_us"]),
                   fmt_us(target)))
            log("     module time per request p50 %s  p99 %s"
                % (fmt_us(fig["module_us_p50"]), fmt_us(fig["module_us_p99"])))
            log("     a plain proxied round of the same body p50 %s  p99 %s; "
                "module per round / plain round %.3f"
                % (fmt_us(fig["plain_round_p50_us"]), fmt_us(fig["plain_round_p99_us"]),
                   fig["per_round_vs_plain_round"] or 0))
            log("     intercepted request p50 %s  p99 %s  (sandbox p50 %s, follow-up p50 %s)"
                % (fmt_us(fig["ci_request_p50_us"]), fmt_us(fig["ci_request_p99_us"]),
                   fmt_us(fig["sandbox_us_p50"]), fmt_us(fig["upstream_us_p50"])))
            log("     cross-check from outside: client latency - plain round - follow-up "
                "- sandbox = p50 %s (server-side %%D: %s); outside / module %.2f"
                % (fmt_us(fig["outside_us_p50"]), fmt_us(fig["outside_server_us_p50"]),
                   fig["outside_vs_module"] or 0))
            if micro:
                hot = run_micro(micro, micro_files, 2000 if size < MB1 else 30, cold=False)
                cold = run_micro(micro, micro_files, 300 if size < MB1 else 20, cold=True)
                if hot and cold:
                    fig["cpu_breakdown"] = {"hot": hot, "cold": cold}
                    log("     CPU of the module's steps outside httpd, medians (warm caches / "
                        "each phase starting with cold caches):")
                    for h, c in zip(hot, cold):
                        log("       %-78s %10s %10s" % (h["step"], fmt_us(h["cpu_us"]),
                                                       fmt_us(c["cpu_us"])))
                    total_hot, total_cold = hot[-1]["cpu_us"], cold[-1]["cpu_us"]
                    fig["core_cpu_per_round_hot_us"] = total_hot / (rounds or 2)
                    fig["core_cpu_per_round_cold_us"] = total_cold / (rounds or 2)
            p50 = fig["per_round_p50_us"]
            self.row("module time per round, %s" % label,
                     "p50 %s / p99 %s" % (fmt_us(p50), fmt_us(fig["per_round_p99_us"])),
                     "plain proxied round p50 %s" % fmt_us(fig["plain_round_p50_us"]),
                     fmt_ratio(fig["per_round_vs_plain_round"]),
                     "p50 <= %s" % fmt_us(target),
                     "PASS" if p50 is not None and p50 <= target and not failures else "FAIL")
            self.row("  cross-check from outside, %s (per request)" % label,
                     "p50 %s" % fmt_us(fig["outside_us_p50"]),
                     "ci-module-us p50 %s" % fmt_us(fig["module_us_p50"]),
                     fmt_ratio(fig["outside_vs_module"]))
            if "core_cpu_per_round_cold_us" in fig:
                self.row("  same work outside httpd, CPU per round (cold / warm caches)",
                         "%s / %s" % (fmt_us(fig["core_cpu_per_round_cold_us"]),
                                      fmt_us(fig["core_cpu_per_round_hot_us"])),
                         "ci-module-us per round p50 %s" % fmt_us(p50),
                         fmt_ratio(ratio(fig["core_cpu_per_round_cold_us"], p50)))
        client.close()
        self.results["module_time"] = res

    # The kinds of request phase 2 compares at 10 KB: (label, path, chained,
    # target per round in us: the issue's).
    KINDS = (("owner-less", "/model/anon/v1/responses", False, 120.0),
             ("new conversation", "/model/ci/v1/responses", False, 200.0),
             ("chained turn", "/model/ci/v1/responses", True, 150.0))

    def module_time_by_kind(self, httpd, model, alog):
        """Module time per round at 10 KB for a request without an owner
        (no container), a new conversation (its container made at the first
        call) and a turn chained to it (previous_response_id: its container
        found), interleaved with a plain proxied round of the body the
        module sends upstream: one conversation of each kind per iteration,
        the order of the owner-less request and the plain round alternated
        (the chained turn needs the new conversation's id)."""
        log("   by kind, 10 KB, %d of each, interleaved with a plain round:" % MODULE_N_KINDS)
        client = Client(httpd.port, owner="sk-bench-kinds")
        # stored upstream (store: true), as a chained turn needs its
        # predecessor to be, for every kind alike
        body = json.loads(intercepted_body(KB10))
        body["store"] = True
        body = json.dumps(body).encode()
        check = check_answer(1)
        model.reset()
        status, data, _ = client.post(self.KINDS[0][1], body, "k-probe")
        if status != 200 or not check(data):
            raise RuntimeError("owner-less request failed: %s %r" % (status, data[:500]))
        first = base64.b64decode(model.requests()[0]["body_b64"])
        ids = {k[0]: [] for k in self.KINDS}
        ids["plain"] = []
        plain = []                # the plain rounds as the client saw them (us)
        failures = 0
        t_end = time.time() + MAX_SECONDS_PER_LOOP
        for i in range(MODULE_N_KINDS + 3):
            if time.time() > t_end:
                break
            tag = "k%d" % i if i >= 3 else "kw%d" % i        # 3 of warm-up
            edges = [("owner-less", body), ("plain", first)]
            if i % 2:
                edges.reverse()
            order = [edges[0], ("new conversation", body), ("chained turn", None), edges[1]]
            previous = None
            for kind, b in order:
                rid = "%s-%s" % (tag, kind.replace(" ", "-"))
                path = {"plain": "/model/plain/v1/responses"}.get(
                    kind, dict((k[0], k[1]) for k in self.KINDS).get(kind))
                if kind == "chained turn":
                    if previous is None:
                        failures += 1
                        continue
                    b = json.loads(body)
                    b["previous_response_id"] = previous
                    b = json.dumps(b).encode()
                status, data, secs = client.post(path, b, rid)
                ok = status == 200 and (kind == "plain" or check(data))
                if kind == "plain" and ok and i >= 3:
                    plain.append(secs * 1e6)
                if kind == "new conversation" and ok:
                    previous = json.loads(data)["id"]
                if not ok:
                    failures += 1
                elif i >= 3:
                    ids[kind].append(rid)
            if i % 20 == 19:
                model.reset()
        client.close()
        entries = alog.entries([r for v in ids.values() for r in v])
        res = {"failures": failures, "plain_round_p50_us": med(plain)}
        log("     plain proxied round p50 %s" % fmt_us(med(plain)))
        for kind, _, _, target in self.KINDS:
            per_round = [entries[r]["module_us"] / entries[r]["rounds"] for r in ids[kind]
                         if r in entries and entries[r]["rounds"] and
                         entries[r]["module_us"] is not None]
            p50 = med(per_round)
            res[kind] = {"requests": len(per_round), "per_round_p50_us": p50,
                         "per_round_p90_us": pct(per_round, 90),
                         "vs_plain_round": ratio(p50, med(plain))}
            log("     %-17s module time per round p50 %s  p90 %s  / plain round %s"
                % (kind, fmt_us(p50), fmt_us(pct(per_round, 90)),
                   fmt_ratio(res[kind]["vs_plain_round"])))
            self.row("module time per round, 10 KB, %s" % kind,
                     "p50 %s / p90 %s" % (fmt_us(p50), fmt_us(pct(per_round, 90))),
                     "plain proxied round p50 %s" % fmt_us(med(plain)),
                     fmt_ratio(res[kind]["vs_plain_round"]), "p50 <= %s" % fmt_us(target),
                     "PASS" if p50 is not None and p50 <= target and not failures
                     else "FAIL")
        self.results["module_time_by_kind"] = res

    # ---- 3. sandbox -----------------------------------------------------

    def error_log_times(self, httpd, ids):
        """Per request id: interception time, sandbox start duration and the
        executions (time logged, duration), from the debug error log."""
        want = set(ids)
        out = {}
        line_re = re.compile(r"^\[(\S+ \S+)\] \[[^\]]*\] \[([^\]]*)\] (.*)$")
        for line in httpd.read(httpd.error_log).splitlines():
            m = line_re.match(line)
            if not m or m.group(2) not in want:
                continue
            ts = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
            ts += float("0" + m.group(1)[19:]) if len(m.group(1)) > 19 else 0.0
            msg = m.group(3)
            e = out.setdefault(m.group(2), {"execs": []})
            if "CI0101:" in msg:
                e["intercepted"] = ts
            elif "CI0302:" in msg or ("CI0305:" in msg and " attached " in msg):
                # a request's own sandbox started, or its container's
                # attached (started for it, or reached again)
                mm = re.search(r" in (\d+) us", msg)
                if mm:
                    e["start_us"] = int(mm.group(1))
            elif "CI0201:" in msg:
                mm = re.search(r" in (\d+) us", msg)
                if mm:
                    e["execs"].append((ts, int(mm.group(1))))
        return out

    def sandbox(self, httpd, model, alog):
        log("== 3. sandbox: cold start, print(1) in a started sandbox, executions per second")
        log("   (load average before: %s)" % loadavg())
        trace = "/model/trace/v1/responses"
        one, two = intercepted_body(None, ONE_CALL), intercepted_body(None, MANY_CALLS)
        check1, check2 = check_answer(1), check_answer(1 + WARM_CALLS)
        client = Client(httpd.port)
        for i in range(3):
            client.post(trace, one, "s-warm-%d" % i)
        model.reset()
        ones, twos, bare, kernel = [], [], [], []
        failures = 0
        t_end = time.time() + MAX_SECONDS_PER_LOOP
        for i in range(SANDBOX_PAIRS):
            if time.time() > t_end:
                break
            steps = [("one", one, check1), ("two", two, check2), ("bare", None, None),
                     ("kernel", None, None)]
            if i % 2:
                steps = [steps[1], steps[0], steps[3], steps[2]]
            for kind, body, check in steps:
                if kind == "bare":
                    # The baseline: a bare interpreter started outside any sandbox.
                    t0 = time.perf_counter()
                    subprocess.run([PYTHON, "-I", "-c", "print(1)"], stdout=subprocess.DEVNULL,
                                   preexec_fn=as_server_user)
                    bare.append((time.perf_counter() - t0) * 1e6)
                    continue
                if kind == "kernel":
                    k = kernel_ready_us()
                    if k is not None:
                        kernel.append(k)
                    continue
                rid = "s-%s-%d" % (kind, i)
                status, data, _ = client.post(trace, body, rid)
                if status != 200 or not check(data):
                    failures += 1
                    continue
                (ones if kind == "one" else twos).append(rid)
            if i % 20 == 19:
                model.reset()
        client.close()
        entries = alog.entries(ones + twos)
        times = self.error_log_times(httpd, ones + twos)
        sb_one = [entries[r]["sandbox_us"] for r in ones if r in entries]
        sb_two = [entries[r]["sandbox_us"] for r in twos if r in entries]
        start_us = [times[r]["start_us"] for r in ones if r in times and "start_us" in times[r]]
        first_exec = [times[r]["execs"][0][1] for r in ones if r in times and times[r]["execs"]]
        to_first_end = [(times[r]["execs"][0][0] - times[r]["intercepted"]) * 1e6
                        for r in ones if r in times and times[r]["execs"]
                        and "intercepted" in times[r]]
        # Every call after the first, as the provider times it (write the code,
        # read until end_of_execution).
        warm_exec = [d for r in twos if r in times for _, d in times[r]["execs"][1:]]
        second_exec = [times[r]["execs"][1][1] for r in twos
                       if r in times and len(times[r]["execs"]) >= 2]
        # As the request thread sees them (pool dispatch included), per request:
        # (ci-sandbox-us - sandbox start - first execution) / WARM_CALLS.
        warm_seen = [(entries[r]["sandbox_us"] - times[r]["start_us"] - times[r]["execs"][0][1])
                     / WARM_CALLS
                     for r in twos if r in entries and r in times and "start_us" in times[r]
                     and len(times[r]["execs"]) == 1 + WARM_CALLS]
        dispatch = [entries[r]["sandbox_us"] - times[r]["start_us"] - times[r]["execs"][0][1]
                    for r in ones if r in entries and r in times and "start_us" in times[r]
                    and times[r]["execs"]]
        # From the notes alone: the difference of the medians, per warm call.
        warm_diff = ((med(sb_two) - med(sb_one)) / WARM_CALLS) if sb_one and sb_two else None
        fig = {
            "pairs": len(ones), "failures": failures,
            "cold_sandbox_us_p50": med(sb_one), "cold_sandbox_us_p99": pct(sb_one, 99),
            "cold_start_only_us_p50": med(start_us), "cold_start_only_us_p99": pct(start_us, 99),
            "first_exec_us_p50": med(first_exec),
            "intercept_to_first_exec_end_us_p50": med(to_first_end),
            "intercept_to_first_exec_end_us_p99": pct(to_first_end, 99),
            "warm_rt_us_p50_notes": warm_diff,
            "warm_rt_us_p50": med(warm_seen), "warm_rt_us_p99": pct(warm_seen, 99),
            "warm_exec_us_p50": med(warm_exec), "warm_exec_us_p99": pct(warm_exec, 99),
            "second_exec_us_p50": med(second_exec), "second_exec_us_p99": pct(second_exec, 99),
            "dispatch_us_p50": med(dispatch),
            "bare_python_us_p50": med(bare), "bare_python_us_p99": pct(bare, 99),
            "kernel_ready_us_p50": med(kernel), "kernel_ready_us_p99": pct(kernel, 99),
        }
        fig["cold_vs_bare"] = ratio(fig["cold_sandbox_us_p50"], fig["bare_python_us_p50"])
        log("   cold start (one print(1) per request, %d requests, %d failed):"
            % (len(ones), failures))
        log("     ci-sandbox-us (spawn + ready + first execution) p50 %s  p99 %s"
            % (fmt_us(fig["cold_sandbox_us_p50"]), fmt_us(fig["cold_sandbox_us_p99"])))
        log("       of which sandbox start (CI0302) p50 %s  p99 %s; first execution p50 %s;"
            " pool dispatch p50 %s"
            % (fmt_us(fig["cold_start_only_us_p50"]), fmt_us(fig["cold_start_only_us_p99"]),
               fmt_us(fig["first_exec_us_p50"]), fmt_us(fig["dispatch_us_p50"])))
        log("     interception -> end of first execution (error log) p50 %s  p99 %s"
            % (fmt_us(fig["intercept_to_first_exec_end_us_p50"]),
               fmt_us(fig["intercept_to_first_exec_end_us_p99"])))
        log("     bare python3 -I -c 'print(1)' outside any sandbox p50 %s; ratio %.2f"
            % (fmt_us(fig["bare_python_us_p50"]), fig["cold_vs_bare"] or 0))
        log("     the module's kernel (ci_kernel.py) until ready, outside any sandbox p50 %s"
            % fmt_us(fig["kernel_ready_us_p50"]))
        if fig["kernel_ready_us_p50"] and fig["cold_start_only_us_p50"]:
            log("     so a start is about: interpreter %s + the kernel's imports %s + "
                "bubblewrap and the spawn %s"
                % (fmt_us(fig["bare_python_us_p50"]),
                   fmt_us(fig["kernel_ready_us_p50"] - fig["bare_python_us_p50"]),
                   fmt_us(fig["cold_start_only_us_p50"] - fig["kernel_ready_us_p50"])))
        log("   print(1) in a started sandbox (calls 2..%d of a request, %d requests):"
            % (1 + WARM_CALLS, len(twos)))
        log("     as the request sees it (ci-sandbox-us - start - first call) / %d: p50 %s  p99 %s"
            % (WARM_CALLS, fmt_us(fig["warm_rt_us_p50"]), fmt_us(fig["warm_rt_us_p99"])))
        log("     execution alone (CI0201): every warm call p50 %s  p99 %s; the second call "
            "p50 %s  p99 %s"
            % (fmt_us(fig["warm_exec_us_p50"]), fmt_us(fig["warm_exec_us_p99"]),
               fmt_us(fig["second_exec_us_p50"]), fmt_us(fig["second_exec_us_p99"])))
        log("     from the notes alone (median %d calls - median 1 call) / %d: %s"
            % (1 + WARM_CALLS, WARM_CALLS, fmt_us(warm_diff)))
        self.row("sandbox cold start (spawn + ready + print(1))",
                 "p50 %s / p99 %s" % (fmt_us(fig["cold_sandbox_us_p50"]),
                                      fmt_us(fig["cold_sandbox_us_p99"])),
                 "bare python3 start p50 %s" % fmt_us(fig["bare_python_us_p50"]),
                 fmt_ratio(fig["cold_vs_bare"]))
        self.row("  interception -> end of first execution",
                 "p50 %s / p99 %s" % (fmt_us(fig["intercept_to_first_exec_end_us_p50"]),
                                      fmt_us(fig["intercept_to_first_exec_end_us_p99"])),
                 "", "")
        warm = fig["warm_rt_us_p50"]
        self.row("print(1) round trip, started sandbox",
                 "p50 %s / p99 %s (notes: %s)" % (fmt_us(warm), fmt_us(fig["warm_rt_us_p99"]),
                                                  fmt_us(warm_diff)),
                 "target 5 ms", fmt_ratio(ratio(warm, 5000.0)), "p50 <= 5 ms",
                 "PASS" if warm is not None and warm <= 5000 and not failures else "FAIL")

        # executions per second: many conversations at once, of one caller
        # (one application's key) and of eight
        log("   executions per second (one print(1) per request, each a new conversation "
            "with a container, /model/ci):")
        alog = AccessLog(httpd.access_log)
        half = max(1, RATE_SECONDS // 2)
        check = check_answer(1)
        rates = {}
        for owners in (1, 8):
            # the last pass's containers (another caller's) gone first
            wait_no_containers(httpd.port)
            per = {c: [] for c in RATE_CONCURRENCY}
            for k, c in enumerate(RATE_CONCURRENCY + RATE_CONCURRENCY[::-1]):
                recs, secs = load(httpd.port, "/model/ci/v1/responses", one,
                                  "r%d-%d-%d" % (owners, c, k), count=200 * half * max(1, c),
                                  concurrency=c, seconds=half, check=check, owners=owners)
                per[c].append((recs, secs))
                model.reset()
            for c in RATE_CONCURRENCY:
                recs = [r for rs, _ in per[c] for r in rs]
                secs = sum(t for _, t in per[c])
                ok = [r for r in recs if r["ok"]]
                lat = [r["lat_us"] for r in ok]
                logged = alog.entries([r["id"] for r in recs])
                waits = [e["wait_us"] for e in logged.values() if e["wait_us"] is not None]
                rates[(owners, c)] = r = {
                    "requests": len(recs), "ok": len(ok), "seconds": secs,
                    "exec_per_s": len(ok) / secs if secs else 0,
                    "lat_p50_us": med(lat), "lat_p99_us": pct(lat, 99),
                    "wait_p50_us": med(waits), "wait_p99_us": pct(waits, 99)}
                bad = [x for x in recs if not x["ok"]]
                log("     %d caller(s), concurrency %2d: %6.1f executions/s  (%d requests in "
                    "%.1f s, %d failed)  latency p50 %s p99 %s; waited for room p50 %s p99 %s"
                    % (owners, c, r["exec_per_s"], len(recs), secs, len(bad),
                       fmt_us(r["lat_p50_us"]), fmt_us(r["lat_p99_us"]),
                       fmt_us(r["wait_p50_us"]), fmt_us(r["wait_p99_us"])))
                if bad:
                    log("       first failure: %s %r" % (bad[0]["status"], bad[0]["error"]))
        fig["cpu_share"] = self.cpu_share(httpd)
        fig["rates"] = {"%d-%d" % k: v for k, v in rates.items()}
        base = rates[(1, 1)]["exec_per_s"]
        for (owners, c), r in sorted(rates.items()):
            self.row("executions/s, %d caller(s), concurrency %d" % (owners, c),
                     "%.1f/s (latency p50 %s / p99 %s; wait p50 %s / p99 %s)"
                     % (r["exec_per_s"], fmt_us(r["lat_p50_us"]), fmt_us(r["lat_p99_us"]),
                        fmt_us(r["wait_p50_us"]), fmt_us(r["wait_p99_us"])),
                     "1 caller, concurrency 1: %.1f/s" % base,
                     fmt_ratio(ratio(r["exec_per_s"], base)),
                     "0 failed", "PASS" if r["ok"] == r["requests"] else
                     "FAIL: %d failed" % (r["requests"] - r["ok"]))
        self.results["sandbox"] = fig

    # ---- 3. (end) one caller's CPU against another's busy container --------

    def timed_cell(self, port, owner, code):
        """CODE run in a new conversation of OWNER: the last line it printed."""
        body = intercepted_body(None, [[{"call": code}], [{"text": "{{last_output}}"}]])
        status, data, _ = Client(port, owner).post("/model/ci/v1/responses", body,
                                                   "cpu-%s-%d" % (owner, time.time_ns()))
        if status != 200:
            return None
        out = json.loads(data)["output"]
        texts = [o["content"][0]["text"] for o in out if o.get("type") == "message"]
        return texts[-1].strip().splitlines()[-1] if texts and texts[-1].strip() else None

    def cpu_share(self, httpd):
        """One caller's CPU-bound execution (a loop timed inside the cell),
        alone and while another caller's container runs six busy processes
        that its cell started (in new sessions where allowed, ignoring
        SIGINT and SIGTERM) and left behind; CPU_ROUNDS rounds, each
        measuring both, the busy container expiring between rounds."""
        log("   one caller's CPU-bound execution, alone and beside another caller's "
            "container running six busy processes it left behind (%d rounds):" % CPU_ROUNDS)
        loop = ("import time\nt = time.perf_counter()\nx = 0\n"
                "for i in range(2000000):\n    x += i * i\n"
                "print(round((time.perf_counter() - t) * 1e6))")
        spin = ("import signal\nfor s in (signal.SIGINT, signal.SIGTERM):\n"
                "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass")
        busy = ("import subprocess, sys\nfor _ in range(6):\n    try:\n"
                "        subprocess.Popen([sys.executable, '-c', %r], start_new_session=True)\n"
                "    except PermissionError:\n"
                "        subprocess.Popen([sys.executable, '-c', %r], process_group=0)\n"
                "print('started')" % (spin, spin))
        alone, beside = [], []
        for r in range(CPU_ROUNDS):
            wait_no_containers(httpd.port)
            for _ in range(3):
                v = self.timed_cell(httpd.port, "sk-cpu-alone", loop)
                if v and v.isdigit():
                    alone.append(int(v))
            if self.timed_cell(httpd.port, "sk-cpu-busy", busy) != "started":
                log("     round %d: the busy container did not start" % r)
                continue
            # what an execution leaves behind is moved to SCHED_IDLE within
            # a second (the supervisor's pass): measured after it
            time.sleep(1.5)
            for _ in range(3):
                v = self.timed_cell(httpd.port, "sk-cpu-alone", loop)
                if v and v.isdigit():
                    beside.append(int(v))
        fig = {"alone_us_p50": med(alone), "beside_busy_us_p50": med(beside),
               "alone": alone, "beside_busy": beside}
        fig["ratio"] = ratio(fig["beside_busy_us_p50"], fig["alone_us_p50"])
        log("     alone p50 %s; beside the busy container p50 %s; ratio %s"
            % (fmt_us(fig["alone_us_p50"]), fmt_us(fig["beside_busy_us_p50"]),
               fmt_ratio(fig["ratio"])))
        self.row("CPU-bound execution beside another caller's busy container",
                 "p50 %s" % fmt_us(fig["beside_busy_us_p50"]),
                 "alone p50 %s" % fmt_us(fig["alone_us_p50"]), fmt_ratio(fig["ratio"]),
                 "<= 1.5", "PASS" if fig["ratio"] is not None and fig["ratio"] <= 1.5
                 else "FAIL")
        wait_no_containers(httpd.port)
        return fig

    # ---- 4. soak --------------------------------------------------------

    def soak_run(self, httpd, model, path, body, check, tag):
        """SOAK requests at concurrency 32 in chunks of 1,000, the RSS of the
        children sampled after each chunk (when the server is idle)."""
        rss0, kids0 = httpd.rss_kb()
        log("     RSS of the children at start: %d kB (%d children)" % (rss0, len(kids0)))
        samples = [(0, rss0, kids0)]
        done = ok = 0
        failures = []
        t0 = time.perf_counter()
        chunk = 1000
        while done < SOAK:
            n = min(chunk, SOAK - done)
            recs, _ = load(httpd.port, path, body, "%s-%d" % (tag, done), count=n,
                           concurrency=32, seconds=MAX_SECONDS_PER_LOOP, check=check)
            done += len(recs)
            ok += sum(1 for r in recs if r["ok"])
            failures += [r for r in recs if not r["ok"]][:5]
            model.reset()
            time.sleep(0.5)           # let the last requests' cleanups run
            rss, kids = httpd.rss_kb()
            samples.append((done, rss, kids))
            log("     %6d requests  ok %6d  RSS %d kB  children %s  %.0f req/s"
                % (done, ok, rss, kids, done / (time.perf_counter() - t0)))
            if len(recs) < n or time.perf_counter() - t0 > MAX_SECONDS_PER_LOOP * 2:
                log("     stopped: the time bound was reached")
                break
        elapsed = time.perf_counter() - t0
        after_1000 = next((x for x in samples if x[0] >= 1000), samples[-1])
        end = samples[-1]
        return {
            "requests": done, "ok": ok, "success_rate": ok / done if done else 0,
            "rss_start_kb": rss0, "rss_after_1000_kb": after_1000[1], "rss_end_kb": end[1],
            "rss_growth": ratio(end[1], after_1000[1]) - 1 if after_1000[1] else None,
            "samples": [(x[0], x[1]) for x in samples],
            "same_children": all(x[2] == samples[0][2] for x in samples),
            "seconds": elapsed, "req_per_s": done / elapsed if elapsed else 0,
            "failures": [(f["status"], str(f["error"])[:200]) for f in failures[:3]],
        }

    def soak(self, httpd, model):
        log("== 4. soak: %d requests at concurrency 32 on a fresh server: first plain "
            "mod_proxy (the baseline), then intercepted ones (one print(1) each)" % SOAK)
        log("   (load average before: %s)" % loadavg())
        log("   plain mod_proxy, /model/plain (no module work):")
        base = self.soak_run(httpd, model, "/model/plain/v1/responses", passthrough_body(1000),
                             None, "soak-plain")
        httpd.stop()
        httpd.port = free_port()
        httpd.start()
        log("   intercepted, /model/ci:")
        fig = self.soak_run(httpd, model, "/model/ci/v1/responses",
                            intercepted_body(None, ONE_CALL), check_answer(1), "soak")
        fig["leftover_sandboxes"] = httpd.sandbox_processes()
        fig["baseline"] = base
        log("     success %d/%d (%.3f %%), %.1f req/s; RSS after 1,000 %d kB, at the end %d kB "
            "(growth %+.1f %%; plain mod_proxy %+.1f %%); children unchanged: %s; "
            "live sandboxes after: %d"
            % (fig["ok"], fig["requests"], 100.0 * fig["success_rate"], fig["req_per_s"],
               fig["rss_after_1000_kb"], fig["rss_end_kb"], 100.0 * (fig["rss_growth"] or 0),
               100.0 * (base["rss_growth"] or 0), fig["same_children"],
               fig["leftover_sandboxes"]))
        for status, err in fig["failures"]:
            log("       failure: %s %s" % (status, err))
        done, ok = fig["requests"], fig["ok"]
        self.row("soak %d requests, concurrency 32: success" % done,
                 "%.2f %% (%d/%d)" % (100.0 * fig["success_rate"], ok, done),
                 "plain mod_proxy %.2f %%" % (100.0 * base["success_rate"]), "",
                 "100 %", "PASS" if ok == done and done else "FAIL")
        self.row("soak: RSS of httpd's children, after 1,000 -> end",
                 "%d -> %d kB (%+.1f %%)" % (fig["rss_after_1000_kb"], fig["rss_end_kb"],
                                             100.0 * (fig["rss_growth"] or 0)),
                 "plain mod_proxy %d -> %d kB (%+.1f %%)"
                 % (base["rss_after_1000_kb"], base["rss_end_kb"],
                    100.0 * (base["rss_growth"] or 0)),
                 fmt_ratio(ratio(fig["rss_end_kb"], fig["rss_after_1000_kb"])), "growth <= 10 %",
                 "-" if done <= 1000 else
                 "PASS" if fig["rss_growth"] is not None and fig["rss_growth"] <= 0.10
                 and fig["same_children"] else "FAIL")
        self.results["soak"] = fig

    # ---- profiling (PROFILE=1) -----------------------------------------

    def start_profile(self, name, httpd):
        perf = shutil.which("perf")
        if not perf:
            log("   (PROFILE=1 but perf is missing)")
            return None
        out = os.path.join(RUN, "perf-%s.data" % name)
        pids = ",".join(str(p) for p in httpd.children())
        proc = subprocess.Popen([perf, "record", "-q", "-F", "2999", "-e", "cpu-clock", "-g",
                                 "-p", pids, "-o", out],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        return proc, out

    def stop_profile(self, profiler):
        proc, out = profiler
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # The sandboxes forked meanwhile are followed too: keep httpd's own
        # threads (comm apache2), in percent of their samples.
        texts = []
        # every library (the module's share, however small), then the
        # functions of 0.5 % or more
        for sort, limit in (("dso", "0.01"), ("dso,sym", "0.5")):
            rep = subprocess.run(["perf", "report", "-i", out, "--comms", "apache2",
                                  "--percentage", "relative", "--no-children", "--stdio",
                                  "--sort", sort, "-g", "none", "--percent-limit", limit],
                                 capture_output=True, text=True)
            texts.append(rep.stdout)
        path = out + ".txt"
        with open(path, "w") as f:
            f.write("\n".join(texts))
        log("   profile of httpd's children, their own threads (%s):" % path)
        for text in texts:
            lines = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
            for line in lines[:15]:
                log("     " + line)
        return "\n".join(texts)

    # ---- the table ------------------------------------------------------

    def table(self):
        head = ("figure", "measured", "baseline", "ratio", "target", "verdict")
        rows = [head] + [tuple(str(c) for c in r) for r in self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = []
        for k, r in enumerate(rows):
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(len(head))).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def markdown(self):
        out = ["| figure | measured | baseline | ratio | target | verdict |",
               "|---|---|---|---|---|---|"]
        for r in self.rows:
            out.append("| " + " | ".join(str(c) for c in r) + " |")
        return "\n".join(out)


def main():
    if not os.path.exists(MODULE):
        sys.exit("the module is not built: %s (bench/run.sh builds it)" % MODULE)
    for tool in (HTTPD, NGINX, WRK):
        if not os.path.exists(tool):
            sys.exit("%s is missing (bench/run.sh installs it)" % tool)
    if os.path.isdir(RUN):
        shutil.rmtree(RUN)
    os.makedirs(RUN)
    os.chmod(RUN, 0o755)

    m = machine()
    log("machine: %d CPUs, %s, %s, kernel %s" % (m["nproc"], m["cpu"], m["memory"], m["kernel"]))
    log("         %s; %s; %s; %s" % (m["httpd"], m["nginx"], m["wrk"], m["python"]))
    log("module:  %s at %s" % (m["module"], m["revision"]))
    log("run: phases %s, SOAK=%d, PASS_ROUNDS=%d x %d s, MODULE_N_10K=%d, MODULE_N_1M=%d, "
        "SANDBOX_PAIRS=%d, RATE_SECONDS=%d"
        % (",".join(sorted(PHASES)), SOAK, PASS_ROUNDS, PASS_SECONDS, MODULE_N_10K,
           MODULE_N_1M, SANDBOX_PAIRS, RATE_SECONDS))

    bench = Bench()
    nginx = model = httpd = None
    t0 = time.time()
    try:
        nginx = Nginx()
        model = FakeModel()
        httpd = Httpd(nginx.port, model.port).start()
        alog = AccessLog(httpd.access_log)
        if "1" in PHASES:
            second = Httpd(nginx.port, model.port, "httpd-b").start()
            try:
                bench.passthrough((httpd, second))
            finally:
                second.stop()
        if "2" in PHASES:
            bench.module_time(httpd, model, alog)
            bench.module_time_by_kind(httpd, model, alog)
        if "3" in PHASES:
            bench.sandbox(httpd, model, alog)
        if "4" in PHASES:
            httpd.stop()
            httpd.port = free_port()
            httpd.start()
            bench.soak(httpd, model)
        logdirs = [os.path.dirname(httpd.error_log)]
        if "1" in PHASES:
            logdirs.append(os.path.dirname(second.error_log))
        logs = sorted(os.path.join(d, f) for d in logdirs for f in os.listdir(d)
                      if f == "error_log" or f.startswith("error_log."))
        crash_lines = [l for p in logs for l in httpd.read(p).splitlines() if "exit signal" in l]
        if crash_lines:
            log("!! %d httpd children crashed during the run:" % len(crash_lines))
            for l in crash_lines[:5]:
                log("   " + l)
        bench.row("httpd children that crashed during the run", str(len(crash_lines)), "", "",
                  "0", "PASS" if not crash_lines else "FAIL")
        bench.results["crashes"] = crash_lines
    finally:
        if httpd:
            httpd.stop()
        if model:
            model.stop()
        if nginx:
            nginx.stop()

    elapsed = time.time() - t0
    log()
    log("machine: %d CPUs, %s, kernel %s, %s; module at %s"
        % (m["nproc"], m["cpu"], m["kernel"], m["httpd"], m["revision"]))
    log(bench.table())
    log("(%.0f s in all; figures and samples in %s)" % (elapsed, os.path.join(RUN, "results.json")))
    with open(os.path.join(RUN, "results.json"), "w") as f:
        json.dump({"machine": m, "elapsed_s": elapsed, "soak": SOAK,
                   "results": bench.results, "table": bench.rows}, f, indent=1, default=str)
    with open(os.path.join(RUN, "results.md"), "w") as f:
        f.write(bench.markdown() + "\n")
    if SMOKE:
        missing = unmeasured(bench)
        for what in missing:
            log("!! not measured: %s" % what)
        if missing or bench.results.get("crashes"):
            sys.exit("SMOKE: %d figure(s) could not be measured, %d children crashed"
                     % (len(missing), len(bench.results.get("crashes") or [])))
        log("SMOKE: every figure was measured, no child crashed")


def unmeasured(bench):
    """The figures of BENCH that could not be taken: a result that is None,
    a table cell that prints as "-"."""
    out = []

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, path + [str(k)])
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, path + [str(i)])
        elif o is None:
            out.append(".".join(path))
    walk(bench.results, [])
    for figure, measured, baseline, rat, _target, _verdict in bench.rows:
        for cell in (measured, baseline, rat):
            if re.search(r"(^|\s)-(\s|$|/)", cell or ""):
                out.append("%s: %s" % (figure, cell))
    return out


if __name__ == "__main__":
    main()
