"""The local sandbox: timeouts and restarts, and what sandboxed code can and
cannot reach."""
import json
import os
import subprocess
import threading
import time

import pytest

from conftest import ANONYMOUS, checked, proc_stats, TOOL, Httpd, base_conf, script_input
from test_loop import sandboxes_started

OUTPUTS = "code_interpreter_call.outputs"
RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")
TIMED_OUT = "The execution timed out after 3 s and was stopped."
# The environment the sandbox sets (OPENBLAS_* pass through when httpd has them).
SANDBOX_ENV = {"HOME", "PATH", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "OPENBLAS_NUM_THREADS",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE", "PWD",
               "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}
SECRET = "s3cr3t-value-that-must-not-leak"


def ci_body(rounds, include=True):
    body = {"model": "m", "tools": [TOOL], "input": script_input(rounds)}
    if include:
        body["include"] = [OUTPUTS]
    return body


# The sandbox itself is under test here, in its simplest life: a request's
# own (the caller has no owner), destroyed when the request ends. Containers
# run the same sandbox longer (test_containers.py).

def run_code(server, code, path="/v1/responses"):
    """Run CODE in one call; returns (call item, what the model was told)."""
    status, _, body = server.post(path, ci_body([[{"call": code}],
                                                 [{"text": "{{last_output}}"}]]),
                                  headers=ANONYMOUS)
    assert status == 200, body
    call, msg = body["output"]
    assert call["type"] == "code_interpreter_call"
    return call, msg["content"][0]["text"]


def run_json(server, code, path="/v1/responses"):
    """Run CODE whose last line prints one JSON document; returns it."""
    call, told = run_code(server, code, path)
    assert call["status"] == "completed", told
    return json.loads(told)


# ---------------------------------------------------------- processes

def descendants(root_pid):
    """pid -> (ppid, comm, state) of every process below ROOT_PID."""
    procs = proc_stats()
    found, frontier = {}, {root_pid}
    while frontier:
        nxt = set()
        for pid, (ppid, comm, state) in procs.items():
            if ppid in frontier and pid not in found:
                found[pid] = (ppid, comm, state)
                nxt.add(pid)
        frontier = nxt
    return found


def server_pid(server):
    """The parent httpd's pid (the pid file may lag the listener at start)."""
    path = os.path.join(server.root, "httpd.pid")
    deadline = time.time() + 10
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        assert time.time() < deadline, "no pid file " + path
        time.sleep(0.05)


def sandbox_processes(server):
    """The sandbox processes (bubblewrap and its children) of SERVER."""
    below = descendants(server_pid(server))
    bw = {pid for pid, (_, comm, _) in below.items() if comm == "bwrap"}
    return {pid for pid in below if pid in bw or any(a in bw for a in ancestors(pid, below))}


def ancestors(pid, table):
    out = []
    while pid in table:
        pid = table[pid][0]
        out.append(pid)
    return out


def pgrep_bwrap():
    r = subprocess.run(["pgrep", "-x", "bwrap"], capture_output=True, text=True)
    return {int(p) for p in r.stdout.split()}


def alive(pids):
    return {pid for pid in pids if os.path.exists("/proc/%d" % pid)}


def wait_gone(pids, timeout=5):
    """Poll until none of PIDS exists any more (no bwrap among them either);
    returns those left."""
    deadline = time.time() + timeout
    while True:
        left = (pgrep_bwrap() & pids) | alive(pids)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.1)


def while_running(server, code, path="/v1/responses", settle=1.0):
    """Start a request running CODE; after SETTLE seconds note the sandbox
    processes; returns (those pids, a function that waits for the answer)."""
    result = {}

    def run():
        result["r"] = server.post(path, ci_body([[{"call": code}],
                                                 [{"text": "{{last_output}}"}]]),
                                  headers=ANONYMOUS)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 15
    pids = set()
    time.sleep(settle)
    while not pids and time.time() < deadline:
        pids = sandbox_processes(server)
        if not pids:
            time.sleep(0.05)

    def finish():
        t.join()
        return result["r"]
    return pids, finish


# ------------------------------------------------------------ timeouts

def test_timeout_fails_the_call_and_restarts_the_interpreter(httpd, model):
    rounds = [[{"call": "kept = 1"}],
              [{"call": "import time\ntime.sleep(10)"}],
              [{"call": "print('kept' in globals())"}],
              [{"text": "{{outputs}}"}]]
    status, _, body = httpd.post("/quick/v1/responses", ci_body(rounds), headers=ANONYMOUS)
    assert status == 200, body
    c1, c2, c3, msg = body["output"]
    assert c1["status"] == "completed"
    assert c2["status"] == "completed"
    assert c2["outputs"] == [{"type": "logs", "logs": TIMED_OUT}]
    assert c3["status"] == "completed"
    assert c3["outputs"] == [{"type": "logs", "logs": "False\n"}]
    assert len({c["container_id"] for c in (c1, c2, c3)}) == 1
    told = json.loads(msg["content"][0]["text"])
    assert told == ["(no output)", TIMED_OUT + RESTARTED, "False\n"]
    log = httpd.log_since_mark()
    assert sandboxes_started(httpd) == 2
    assert "CI0301: sandbox destroyed (restarted after a failed execution)" in log


def test_timeout_keeps_output_printed_before_it(httpd, model):
    call, told = run_code(httpd, "import time\nprint('started', flush=True)\ntime.sleep(10)",
                          path="/quick/v1/responses")
    assert call["status"] == "completed"
    assert call["outputs"] == [{"type": "logs", "logs": "started\n" + TIMED_OUT}]
    assert told.startswith("started\n")
    assert told.endswith(TIMED_OUT + RESTARTED)


def test_timed_out_sandbox_processes_are_killed(httpd, model):
    pids, finish = while_running(httpd, "import time\ntime.sleep(10)",
                                 path="/quick/v1/responses")
    assert pids, "no sandbox process seen while the code ran"
    status, _, body = finish()
    assert status == 200
    assert body["output"][0]["status"] == "completed"
    assert wait_gone(pids) == set()


def test_interpreter_exit_fails_the_call_and_restarts(httpd, model):
    status, _, body = httpd.post("/quick/v1/responses", ci_body(
        [[{"call": "kept = 1\nimport os\nos._exit(3)"}],
         [{"call": "print('kept' in globals())"}], [{"text": "{{outputs}}"}]]),
        headers=ANONYMOUS)
    assert status == 200, body
    c1, c2, msg = body["output"]
    died = ("The interpreter process died during the execution (out of memory, a "
            "crash, or it exited).")
    assert c1["status"] == "completed"
    assert c1["outputs"] == [{"type": "logs", "logs": died}]
    assert c2["outputs"] == [{"type": "logs", "logs": "False\n"}]
    assert json.loads(msg["content"][0]["text"]) == [died + RESTARTED, "False\n"]


def test_system_exit_is_a_traceback(httpd, model):
    call, told = run_code(httpd, "import sys\nsys.exit(2)", path="/quick/v1/responses")
    assert call["status"] == "completed"
    assert told == ("Traceback (most recent call last):\n"
                    "  File \"<cell>\", line 2, in <module>\nSystemExit: 2\n")


def test_memory_is_bounded(httpd, model):
    call, told = run_code(httpd, "x = bytearray(2 * 1024 ** 3)", path="/quick/v1/responses")
    assert call["status"] == "completed"
    assert told.endswith("\nMemoryError\n")


# ------------------------------------------------------------- isolation

FD_CODE = r"""
import json, os
fds = os.listdir('/proc/self/fd')
links = {}
for fd in fds:
    try:
        links[fd] = os.readlink('/proc/self/fd/' + fd)
    except OSError:
        links[fd] = None
print(json.dumps(links))
"""


def check_descriptors(server):
    links = {int(k): v for k, v in run_json(server, FD_CODE).items()}
    # the listing's own descriptor is closed by the time it is read back
    listing = [fd for fd, target in links.items() if target is None]
    assert len(listing) == 1
    del links[listing[0]]
    # 0 is /dev/null, 1 and 2 go to the capture file of descriptor output
    assert links[0] == "/dev/null"
    assert links[1] == links[2] == "/tmp/.fd-output"
    # the kernel's two protocol pipes took the first free numbers: nothing
    # was inherited at 3 or above
    assert links[3].startswith("pipe:[") and links[4].startswith("pipe:[")
    assert links[3] != links[4]
    pipes = [fd for fd, target in links.items() if target.startswith("pipe:")]
    assert pipes == [3, 4]
    for fd, target in links.items():
        assert not target.startswith("socket:"), (fd, target)
        assert not target.startswith("anon_inode:"), (fd, target)
        assert target.startswith("pipe:") or target in ("/dev/null", "/tmp/.fd-output"), \
            (fd, target)
    assert max(links) < 10


def test_no_server_descriptor_visible(httpd, model):
    check_descriptors(httpd)


def test_no_descriptor_of_a_piped_logger_visible(probe_server, model):
    # a piped logger's descriptor is open in every child, without close-on-exec
    check_descriptors(probe_server)


NET_CODE = r"""
import json, socket
out = {}
for name, port in (('httpd', %d), ('model', %d)):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2).close()
        out[name] = 'connected'
    except OSError as e:
        out[name] = type(e).__name__
try:
    socket.getaddrinfo('example.com', 80)
    out['dns'] = 'resolved'
except OSError as e:
    out['dns'] = type(e).__name__
out['ifaces'] = [n for _, n in socket.if_nameindex()]
print(json.dumps(out))
"""


def test_no_network(httpd, model):
    out = run_json(httpd, NET_CODE % (httpd.port, model.port))
    assert out["httpd"] == "ConnectionRefusedError"
    assert out["model"] == "ConnectionRefusedError"
    assert out["dns"] == "gaierror"
    assert out["ifaces"] == ["lo"]


FILES_CODE = r"""
import json, os
out = {'etc': sorted(os.listdir('/etc')), 'root': sorted(os.listdir('/'))}
for p in ('/etc/apache2', '/etc/shadow', '/etc/passwd', '/etc/ssl', '/root', '/home',
          '/var', '/work', %r):
    out[p] = os.path.exists(p)
for p in ('/etc/shadow', '/etc/apache2/apache2.conf'):
    try:
        open(p).read()
        out['read ' + p] = 'read'
    except OSError as e:
        out['read ' + p] = type(e).__name__
print(json.dumps(out))
"""


def test_host_files_not_visible(httpd, model):
    out = run_json(httpd, FILES_CODE % httpd.root)
    assert set(out["etc"]) <= {"ld.so.cache", "alternatives", "matplotlibrc", "fonts",
                               "localtime"}
    assert set(out["root"]) <= {"usr", "bin", "sbin", "lib", "lib64", "etc", "proc",
                                "dev", "tmp", "mnt"}
    for p in ("/etc/apache2", "/etc/shadow", "/etc/passwd", "/etc/ssl", "/root", "/home",
              "/var", "/work", httpd.root):
        assert out[p] is False, p
    assert out["read /etc/shadow"] == "FileNotFoundError"
    assert out["read /etc/apache2/apache2.conf"] == "FileNotFoundError"


FS_CODE = r"""
import json, os
out = {'cwd': os.getcwd()}
with open('result.txt', 'w') as f:
    f.write('written')
out['mnt'] = open('/mnt/data/result.txt').read()
out['listing'] = os.listdir('/mnt/data')
with open('/tmp/scratch', 'w') as f:
    f.write('ok')
for p in ('/usr/evil', '/usr/lib/evil', '/usr/bin/python3', '/evil', '/etc/evil',
          '/proc/evil'):
    try:
        open(p, 'a').close()
        out[p] = 'written'
    except OSError as e:
        out[p] = e.errno
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())
out['cap_eff'] = status['CapEff'].strip()
out['uid'] = os.getuid()
print(json.dumps(out))
"""


def test_filesystem_layout(httpd, model):
    import errno
    out = run_json(httpd, FS_CODE)
    assert out["cwd"] == "/mnt/data"
    assert out["mnt"] == "written"
    assert out["listing"] == ["result.txt"]
    assert out["/usr/evil"] == errno.EROFS
    assert out["/usr/lib/evil"] == errno.EROFS
    assert out["/usr/bin/python3"] in (errno.EROFS, errno.EACCES)
    assert out["/evil"] == errno.EROFS
    assert out["/etc/evil"] == errno.EROFS
    assert out["/proc/evil"] != "written"
    assert out["cap_eff"] == "0000000000000000"
    assert out["uid"] != 0


def test_files_do_not_outlive_the_request(httpd, model):
    run_json(httpd, "open('left.txt', 'w').write('x')\nprint('[]')")
    listing = run_json(httpd, "import os, json\nprint(json.dumps(os.listdir('.')))")
    assert listing == []


ENV_CODE = r"""
import json, os
env = dict(os.environ)
others = {}
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            others[pid] = open('/proc/%s/environ' % pid, 'rb').read().decode('latin-1')
        except OSError:
            pass
print(json.dumps({'env': env, 'others': others}))
"""


@pytest.fixture(scope="session")
def probe_httpd(model):
    """A server with secrets in its environment and a piped access logger."""
    extra = 'CustomLog "|/bin/cat >/dev/null" ci\n'
    server = Httpd("sandbox_probe", base_conf(model.port, extra), env={
        "CI_TEST_SECRET": SECRET, "OPENAI_API_KEY": "sk-" + SECRET,
        "OPENBLAS_CORETYPE": "Haswell"}).start()
    yield server
    server.stop()


@pytest.fixture
def probe_server(probe_httpd, model):
    with checked(probe_httpd, model):
        yield probe_httpd


def test_environment_holds_no_secrets(probe_server, model):
    # the server itself has them
    with open("/proc/%d/environ" % server_pid(probe_server), "rb") as f:
        assert SECRET.encode() in f.read()
    out = run_json(probe_server, ENV_CODE)
    env = out["env"]
    assert set(env) <= SANDBOX_ENV
    assert env["HOME"] == "/tmp"
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    assert SECRET not in json.dumps(out)
    assert "OPENAI_API_KEY" not in json.dumps(out)


# ------------------------------------------------------------ teardown

def test_sandbox_processes_gone_after_the_request(httpd, model):
    pids, finish = while_running(httpd, "import time\ntime.sleep(1.5)\nprint('slept')")
    assert pids, "no sandbox process seen while the code ran"
    assert pids & pgrep_bwrap()
    status, _, body = finish()
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "slept\n"}]
    assert wait_gone(pids) == set()
    deadline = time.time() + 5
    while sandbox_processes(httpd) and time.time() < deadline:
        time.sleep(0.1)
    assert sandbox_processes(httpd) == set()


def test_descriptor_output_keeps_its_order(httpd, model):
    call, told = run_code(httpd, "import os\nprint('a', flush=True)\n"
                                 "os.system('echo b')\nprint('c')")
    assert call["status"] == "completed"
    assert told == "a\nb\nc\n"


def test_descriptor_output_reaches_the_model(httpd, model):
    call, told = run_code(httpd, "import os\nos.system('echo from-shell')\n"
                                 "os.write(2, b'raw-stderr\\n')")
    assert call["status"] == "completed"
    assert "from-shell\n" in told
    assert "raw-stderr\n" in told


def test_the_oom_killer_takes_a_sandbox_first(httpd, model):
    call, told = run_code(httpd, "print(open('/proc/self/oom_score_adj').read().strip())")
    assert told == "1000\n"
