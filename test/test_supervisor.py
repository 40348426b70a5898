"""The local sandbox supervisor: one process per server, forked by httpd's
parent, that owns every local sandbox as its direct child. What happens to
sandboxes when a child dies mid-execution, when the supervisor itself dies,
at a graceful restart and at stop, counted from /proc; who may talk to it."""
import os
import pwd
import socket
import stat
import struct
import threading
import time

import pytest

from conftest import (ANONYMOUS, API_KEY, SANITIZE, TOOL, Httpd, base_conf, sanitizer_reports,
                      script_input)
from procstat import proc_table

# The code runs once a "sleep" process exists below the sandbox.
SLOW = "import subprocess\nsubprocess.run(['sleep', '120'])"
LOST = ("The interpreter process died during the execution (out of memory, "
        "a crash, or it exited).")
RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")


EVENT_ONE_CHILD = """
StartServers 1
ServerLimit 1
ThreadsPerChild 25
MinSpareThreads 1
MaxSpareThreads 25
"""


def conf(model_port, warm=0, mpm_lines=EVENT_ONE_CHILD):
    return base_conf(model_port, mpm_lines + """
CodeInterpreterSandbox slow provider=local timeout=300 warm=%d
<Location /slow/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter slow
</Location>
<Location /slow/v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter slow
</Location>
<Location /server-status>
  SetHandler server-status
</Location>
""" % (warm, model_port))


@pytest.fixture
def server(model, request):
    warm = getattr(request, "param", 0)
    server = Httpd("sup-" + request.node.name[:24], conf(model.port, warm)).start()
    yield server
    server.stop()
    reports = sanitizer_reports(server.root)
    assert not reports, "sanitizer reports:\n" + "\n".join(reports)


def wait_for(cond, what, timeout=30):
    """COND's first true value, polled until TIMEOUT: fails naming WHAT."""
    deadline = time.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def parent_pid(server):
    path = os.path.join(server.root, "httpd.pid")

    def read():
        try:
            with open(path) as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0
    return wait_for(read, "httpd's pid file")


def supervisors(server):
    parent = parent_pid(server)
    return [pid for pid, (ppid, comm, _) in proc_table().items()
            if ppid == parent and comm == "ci-supervisor"]


def supervisor(server):
    found = wait_for(lambda: supervisors(server), "the supervisor")
    assert len(found) == 1, found
    return found[0]


def children(server):
    parent = parent_pid(server)
    return [pid for pid, (ppid, comm, _) in proc_table().items()
            if ppid == parent and comm not in ("ci-supervisor",)]


def running(pid, table=None):
    """Whether PID exists and is not a zombie."""
    entry = (table or proc_table()).get(pid)
    return entry is not None and entry[2][0] != "Z"


def descendants(pid):
    """Every running process below PID."""
    table = proc_table()
    found, frontier = set(), {pid}
    while frontier:
        nxt = {p for p, (ppid, _, _) in table.items() if ppid in frontier and p not in found}
        found |= nxt
        frontier = nxt
    return {p for p in found if running(p, table)}


def sandboxes_of(sup):
    """pid -> comm of the supervisor's direct children."""
    return {pid: comm for pid, (ppid, comm, f) in proc_table().items()
            if ppid == sup and f[0] != "Z"}


def post(server, code, path="/slow/v1/responses", timeout=120, tool=TOOL, headers=None):
    return server.post(path, {
        "model": "m", "tools": [tool], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])},
        timeout=timeout, headers=headers)


def start_slow(server, code=SLOW, **kw):
    """A request running CODE (SLOW), in a thread; its answer lands in the list."""
    answers = []

    def go():
        try:
            answers.append(post(server, code, timeout=300, **kw))
        except Exception as e:      # the connection dies with its child
            answers.append(e)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, answers


def wait_busy_sandbox(sup):
    """The one sandbox (bubblewrap) of SUP once SLOW runs in it: its sleep
    process exists."""
    def busy():
        boxes = [p for p, comm in sandboxes_of(sup).items() if comm == "bwrap"]
        table = proc_table()
        if len(boxes) == 1 and any(table[p][1] == "sleep" for p in descendants(boxes[0])
                                   if p in table):
            return boxes[0]
        return None
    return wait_for(busy, "a sandbox running code below supervisor %d" % sup)


def test_sandboxes_are_direct_children_of_the_supervisor(server, model):
    sup = supervisor(server)
    assert sandboxes_of(sup) == {}
    t, answers = start_slow(server)
    box = wait_busy_sandbox(sup)
    assert proc_table()[box][0] == sup
    assert proc_table()[sup][2][0] in "SR"
    # No sandbox below an httpd child.
    for child in children(server):
        assert descendants(child) == set()
    os.kill(children(server)[0], 9)
    t.join(60)


def test_child_killed_mid_execution_leaves_no_sandbox(server, model):
    """A request's own sandbox (the caller has no owner)."""
    sup = supervisor(server)
    t, answers = start_slow(server, headers=ANONYMOUS)
    box = wait_busy_sandbox(sup)
    doomed = descendants(sup)
    assert box in doomed and len(doomed) >= 3       # bwrap, python, sleep
    [child] = children(server)
    server.mark()
    os.kill(child, 9)
    wait_for(lambda: not any(running(p) for p in doomed), "the sandbox's processes to end")
    assert descendants(sup) == set()
    t.join(60)
    assert not t.is_alive() and isinstance(answers[0], Exception)
    # The supervisor stays; the next request (a new child) is served.
    assert supervisors(server) == [sup]
    status, _, body = post(server, "print(6 * 7)", headers=ANONYMOUS)
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert "CI0611: connection of process %d closed; its 1 sandbox(es) destroyed" \
        % child in server.log_since_mark()


def test_child_killed_mid_execution_interrupts_the_run_and_keeps_the_container(
        server, model):
    sup = supervisor(server)
    status, _, c = server.post("/slow/v1/containers", {"name": "kept"})
    assert status == 200, c
    tool = {"type": "code_interpreter", "container": c["id"]}
    t, answers = start_slow(server, "x = 5\n" + SLOW, tool=tool)
    box = wait_busy_sandbox(sup)
    kernel = {p for p in descendants(box) if proc_table()[p][1] == "python3"}
    sleeper = {p for p in descendants(box) if proc_table()[p][1] == "sleep"}
    [child] = children(server)
    os.kill(child, 9)
    # the run is interrupted (its sleep ends), the interpreter lives on
    wait_for(lambda: not any(running(p) for p in sleeper), "the run to be interrupted")
    t.join(60)
    assert not t.is_alive() and isinstance(answers[0], Exception)
    assert all(running(p) for p in kernel | {box})
    status, _, body = post(server, "print(x)", tool=tool)
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "5\n"}]
    assert body["output"][0]["container_id"] == c["id"]
    # nothing else runs: the container's sandbox is the supervisor's only one
    assert [p for p, comm in sandboxes_of(sup).items() if comm == "bwrap"] == [box]


def test_supervisor_killed_takes_its_sandboxes_and_is_respawned(server, model):
    sup = supervisor(server)
    t, answers = start_slow(server)
    wait_busy_sandbox(sup)
    doomed = descendants(sup)
    server.mark()
    os.kill(sup, 9)
    wait_for(lambda: not any(running(p) for p in doomed), "the sandbox's processes to end")
    # The execution in flight is told its interpreter was lost.
    t.join(60)
    status, _, body = answers[0]
    assert status == 200
    call = body["output"][0]
    assert call["status"] == "completed"     # what clients replay; why is in outputs
    assert call["outputs"] == [{"type": "logs", "logs": LOST}]
    assert body["output"][1]["content"][0]["text"] == LOST + RESTARTED
    new = wait_for(lambda: [p for p in supervisors(server) if p != sup],
                   "a new supervisor")
    assert len(new) == 1 and not running(sup)
    log = server.log_since_mark()
    assert "CI0606: sandbox supervisor %d died" % sup in log
    assert "CI0604: sandbox supervisor %d started" % new[0] in log
    # The directory went with it: a turn chained to a response of before
    # gets a new container (docs/OPERATIONS.md).
    status, _, body = server.post("/slow/v1/responses", {
        "model": "m", "tools": [TOOL], "include": ["code_interpreter_call.outputs"],
        "previous_response_id": body["id"],
        "input": script_input([[{"call": "print(6 * 7)"}], [{"text": "{{last_output}}"}]])})
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert body["output"][0]["container_id"] != call["container_id"]
    assert len([p for p, comm in sandboxes_of(new[0]).items() if comm == "bwrap"]) == 1


def status_counts(server):
    _, _, body = server.request("GET", "/server-status?auto")
    lines = dict(l.split(": ", 1) for l in body.decode().splitlines() if ": " in l)
    return (int(lines["CodeInterpreterLiveSandboxes"]),
            int(lines["CodeInterpreterWarmSandboxes"]))


@pytest.mark.parametrize("server", [2], indirect=True)
def test_graceful_keeps_the_supervisor_and_its_warm_sandboxes(server, model):
    sup = supervisor(server)
    wait_for(lambda: status_counts(server) == (2, 2), "two warm sandboxes")
    warm = set(sandboxes_of(sup))
    assert len(warm) == 2
    server.graceful()
    assert supervisors(server) == [sup]
    # The same definition: the same warm sandboxes, still counted.
    assert set(sandboxes_of(sup)) == warm
    assert status_counts(server) == (2, 2)
    status, _, body = post(server, "print(6 * 7)")
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    # a warm one became the request's container; the pool refilled beside it
    wait_for(lambda: status_counts(server) == (3, 2), "the pool to refill")
    assert set(sandboxes_of(sup)) >= warm


@pytest.mark.parametrize("server", [1], indirect=True)
def test_stop_leaves_nothing(server, model):
    sup = supervisor(server)
    wait_for(lambda: status_counts(server) == (1, 1), "a warm sandbox")
    below = descendants(sup)
    assert below
    path = os.path.join(server.root, "ci-supervisor.%d.sock" % parent_pid(server))
    assert os.path.exists(path)
    server.stop()
    wait_for(lambda: not any(running(p) for p in below | {sup}), "every process to end")
    assert not os.path.exists(path)


def socket_path(server):
    return os.path.join(server.root, "ci-supervisor.%d.sock" % parent_pid(server))


def test_socket_is_private_to_the_server_user(server, model):
    st = os.stat(socket_path(server))
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    if os.geteuid() == 0:
        assert st.st_uid == pwd.getpwnam("www-data").pw_uid


def hello_from(path, uid=None):
    """Connect to PATH (as UID in a forked process when given), send HELLO,
    and return what came back before the supervisor closed the connection."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(path)
            body = b'{"version":1}'
            got = b""
            try:
                s.sendall(struct.pack(">IBI", len(body) + 5, 1, 0) + body)
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, BrokenPipeError):
                pass        # closed before or after our HELLO was read
            os.write(w, b"closed:" + got)
        except Exception as e:
            os.write(w, ("error:%s" % e).encode())
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as the server's user")
def test_a_process_of_the_same_user_that_is_not_a_child_is_refused(server, model):
    path = socket_path(server)
    server.mark()
    uid = pwd.getpwnam("www-data").pw_uid
    # Same uid as the children, but its parent is not httpd's: a CGI script.
    os.chmod(os.path.dirname(path), 0o755)
    assert hello_from(path, uid) == b"closed:"
    assert hello_from(path) == b"closed:"          # root, not httpd's parent
    log = wait_for(lambda: server.log_since_mark().count("CI0612:") == 2 and
                   server.log_since_mark(), "two refusals in the log")
    assert "CI0612: connection refused: process" in log
    # The server's own children are still served.
    status, _, body = post(server, "print(6 * 7)")
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]


def test_requests_keep_working_across_graceful_restarts(server, model):
    sup = supervisor(server)
    stop = threading.Event()
    answers = []

    def client():
        while not stop.is_set():
            status, _, body = post(server, "print(6 * 7)")
            answers.append((status, body["output"][0]["outputs"]
                            if status == 200 else body))
    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(answers) >= 3, "the first answers")
        for _ in range(2):
            before = len(answers)
            server.graceful()
            wait_for(lambda: len(answers) >= before + 3, "answers after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert supervisors(server) == [sup]
    assert set(map(repr, answers)) == {repr((200, [{"type": "logs", "logs": "42\n"}]))}


def test_supervisor_killed_just_before_a_graceful_restart_is_replaced(server, model):
    """Whether the parent hears the death first or the restart's post_config
    finds it with waitpid, exactly one new supervisor serves afterwards."""
    sup = supervisor(server)
    os.kill(sup, 9)
    server.graceful()
    new = wait_for(lambda: [p for p in supervisors(server) if p != sup], "a new supervisor")
    assert len(new) == 1
    status, _, body = post(server, "print(6 * 7)")
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
    assert supervisors(server) == new


@pytest.mark.parametrize("server", [2], indirect=True)
def test_a_warm_sandbox_that_dies_is_replaced_and_uncounted(server, model):
    sup = supervisor(server)
    wait_for(lambda: status_counts(server) == (2, 2), "two warm sandboxes")
    warm = set(sandboxes_of(sup))
    victim = min(warm)
    os.kill(victim, 9)
    wait_for(lambda: len(set(sandboxes_of(sup)) - warm) == 1 and
             status_counts(server) == (2, 2), "a replacement")
    assert victim not in sandboxes_of(sup)
    assert len(sandboxes_of(sup)) == 2


def uid_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError("no Uid line for %d" % pid)


def supervisor_running_as(server, uid):
    """The supervisor, once it has dropped its privileges: it is named
    before it takes User, so a fresh one may still be root for a moment."""
    return wait_for(lambda: [pid for pid in supervisors(server) if uid_of(pid) == uid],
                    "a supervisor running as uid %d" % uid)[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to change User")
def test_a_changed_user_restarts_the_supervisor(server, model):
    www = pwd.getpwnam("www-data").pw_uid
    nobody = pwd.getpwnam("nobody")
    sup = supervisor_running_as(server, www)
    assert supervisors(server) == [sup]
    conf_path = os.path.join(server.root, "httpd.conf")
    with open(conf_path) as f:
        text = f.read()
    assert "User www-data\n" in text
    with open(conf_path, "w") as f:
        f.write(text.replace("User www-data\n", "User nobody\n"))
    server.mark()
    server.graceful()
    assert not running(sup)
    new = supervisor_running_as(server, nobody.pw_uid)
    assert supervisors(server) == [new]
    assert os.stat(socket_path(server)).st_uid == nobody.pw_uid
    assert "CI0605: sandbox supervisor %d stopped (User changed)" % sup \
        in server.log_since_mark()
    status, _, body = post(server, "print(6 * 7)")
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]


def test_chrootdir_is_refused_at_configtest(model):
    server = Httpd("sup-chroot", conf(model.port) + "\nChrootDir /\n")
    server.write_conf()
    result = server.configtest()
    assert result.returncode != 0
    assert ("CI0609: ChrootDir cannot be used with mod_code_interpreter: the local "
            "sandbox supervisor runs bubblewrap from the host's /usr") in result.stderr


@pytest.mark.parametrize("mpm,action", [("event", "restart"), ("prefork", "graceful"),
                                        ("prefork", "restart")])
def test_restarts_keep_the_supervisor(model, mpm, action):
    """Signals httpd sends its process group at a restart do not reach the
    supervisor; a restart that kills the children takes their sandboxes."""
    lines = EVENT_ONE_CHILD if mpm == "event" else "StartServers 2\n"
    server = Httpd("sup-%s-%s" % (mpm, action), conf(model.port, 0, lines), mpm=mpm).start()
    try:
        sup = supervisor(server)
        parent = parent_pid(server)
        resumed = server.log().count("resuming normal operations")
        server.ctl(action)
        wait_for(lambda: server.log().count("resuming normal operations") > resumed,
                 "httpd to read its configuration again")
        assert parent_pid(server) == parent
        assert supervisors(server) == [sup]
        status, _, body = post(server, "print(6 * 7)")
        assert status == 200
        assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "42\n"}]
        assert supervisors(server) == [sup]
    finally:
        server.stop()


def test_child_killed_mid_upload_leaves_nothing(server, model):
    """The child dies while the kernel writes an upload: the supervisor
    abandons the put for it, and the kernel removes what it wrote."""
    from test_container_uploads import multipart
    status, _, c = server.post("/slow/v1/containers", {"name": "upload"})
    assert status == 200, c
    tool = {"type": "code_interpreter", "container": c["id"]}
    status, _, body = post(server, "x = 1", tool=tool)
    assert status == 200, body
    sup = supervisor(server)
    [box] = [p for p, comm in sandboxes_of(sup).items() if comm == "bwrap"]
    [kernel] = [p for p in descendants(box) if proc_table()[p][1] == "python3"]
    data = "/proc/%d/root/mnt/data" % kernel      # the sandbox's own view
    payload, ctype = multipart("partial.bin", b"p" * (8 * 1024 * 1024))
    head = ("POST /slow/v1/containers/%s/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (c["id"], API_KEY, ctype, len(payload))).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(head + payload[:len(payload) // 2])
        wait_for(lambda: any(n.startswith(".upload-") for n in os.listdir(data)),
                 "the kernel to be writing the upload")
        [child] = children(server)
        os.kill(child, 9)
        wait_for(lambda: os.listdir(data) == [], "the partial upload to be removed")
    # the container goes on, its state and its queue intact
    status, _, body = post(server, "import os; print(x, os.listdir('/mnt/data'))", tool=tool)
    assert status == 200
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "1 []\n"}]


# ---------------------------------------------------------------- memory
# Written straight to the descriptor the kernel's frames go out on
# (reachable from a cell), without a newline: 40 MiB; and 6 MiB, after which
# the interpreter kills itself (its sandbox is killed with the line unread).
FLOOD = ("import os, sys\nchunk = b'x' * (1 << 20)\n"
         "for _ in range(40):\n    os.write(sys.stdout.channel.fd, chunk)\n")
HALF_LINE_THEN_DIE = ("import os, signal, sys\n"
                      "os.write(sys.stdout.channel.fd, b'x' * (6 << 20))\n"
                      "os.kill(os.getpid(), signal.SIGKILL)\n")
# ci_ndjson_line_cap for max_output=64k: 8 MiB + 12 * 64 KiB
LINE_CAP = (8 << 20) + 12 * (64 << 10)
LONG_LINE = ("The execution wrote a line of more than %d bytes to the interpreter's "
             "output channel and was stopped." % LINE_CAP)


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run_in_each(server, code, tools):
    """CODE run in every container of TOOLS at once: the answers."""
    answers = [None] * len(tools)

    def one(i):
        answers[i] = post(server, code, tool=tools[i])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(tools))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return answers


@pytest.mark.parametrize("code,logs", [(FLOOD, LONG_LINE), (HALF_LINE_THEN_DIE, LOST)],
                         ids=["past-the-line-cap", "killed-mid-line"])
def test_a_sandboxs_output_line_is_bounded_and_freed(server, model, code, logs):
    """Four containers whose code floods the protocol channel without a
    newline: each call ends with the documented error, and the supervisor
    holds no more memory afterwards than a fraction of one container's line
    (before: each container's reader kept its line, up to 32 MB, until its
    next run; a line had no cap of its own)."""
    sup = supervisor(server)
    tools = []
    for i in range(4):
        status, _, c = server.post("/slow/v1/containers", {"name": "flood%d" % i})
        assert status == 200, c
        tools.append({"type": "code_interpreter", "container": c["id"]})
    for status, _, body in run_in_each(server, "print(1)", tools):
        assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "1\n"}]
    before = vm_rss_kb(sup)             # every sandbox started, its reader made
    for status, _, body in run_in_each(server, code, tools):
        assert status == 200
        assert body["output"][0]["outputs"] == [{"type": "logs", "logs": logs}]
    after = vm_rss_kb(sup)
    if not SANITIZE:                    # ASan's quarantine keeps what was freed
        assert after - before < 16 * 1024, (before, after)
    # the container answers again, on a fresh interpreter
    status, _, body = post(server, "print(2)", tool=tools[0])
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "2\n"}]


# ---------------------------------------------------------------- CPU
SCHED_OTHER, SCHED_IDLE = 0, 5
# A cell that leaves busy work behind: three processes that ignore SIGINT
# and SIGTERM, in process groups of their own, and a thread of the
# interpreter; and says what a new session gets.
SPIN = ("import signal\nfor s in (signal.SIGINT, signal.SIGTERM):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass")
BUSY_BEHIND = """
import os, subprocess, sys, threading
for what, start in (("Popen", lambda: subprocess.Popen(["true"], start_new_session=True)),
                    ("setsid", os.setsid)):
    try:
        start()
        print(what, "made a session")
    except PermissionError as e:
        print(what, "refused:", e.strerror)
spinners = [subprocess.Popen([sys.executable, "-c", %r], process_group=0).pid
            for _ in range(3)]
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
""" % SPIN
# Then: what the cell may do about it.
RAISE_BACK = """
import os, resource
print(resource.getrlimit(resource.RLIMIT_NICE))
for pid in spinners:
    try:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        print(pid, "raised")
    except PermissionError as e:
        print(e.strerror)
"""


def policies(pid):
    """tid -> scheduling policy of every thread of PID (field 41 of its stat)."""
    found = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except OSError:
            continue
        found[int(tid)] = int(stat[stat.rindex(")") + 2:].split()[38])
    return found


def interpreter_of(box):
    """The interpreter of the sandbox BOX (bubblewrap): the python3 that
    bubblewrap's init started."""
    table = proc_table()
    [kernel] = [p for p in descendants(box)
                if table[p][1] == "python3" and table[table[p][0]][1] == "bwrap"]
    return kernel


def test_what_a_container_leaves_running_is_at_sched_idle(server, model):
    """A container's cell leaves busy processes and a busy thread behind and
    returns: every thread of its sandbox but its interpreter's main thread is
    moved to SCHED_IDLE, where nothing of the sandbox can raise it from, and
    no new session takes it out of the sandbox's (autogroups); another
    owner's execution runs at SCHED_OTHER meanwhile."""
    sup = supervisor(server)
    server.mark()
    status, _, c = server.post("/slow/v1/containers", {"name": "busy"})
    assert status == 200, c
    tool = {"type": "code_interpreter", "container": c["id"]}
    status, _, body = post(server, BUSY_BEHIND, tool=tool)
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs":
        "Popen refused: Operation not permitted\nsetsid refused: Operation not permitted\n"}]
    [box] = [p for p, comm in sandboxes_of(sup).items() if comm == "bwrap"]
    kernel = interpreter_of(box)
    session = int(proc_table()[sup][2][3])

    def all_idle():
        procs = descendants(box) | {box}
        if len(procs) < 6:              # bwrap twice, the interpreter, 3 spinners
            return None
        found = {(pid, tid): policy for pid in procs for tid, policy in policies(pid).items()}
        others = {k: v for k, v in found.items() if k != (kernel, kernel)}
        return found if set(others.values()) == {SCHED_IDLE} else None
    found = wait_for(all_idle, "the container's threads at SCHED_IDLE", timeout=10)
    assert found[(kernel, kernel)] == SCHED_OTHER
    assert len([k for k in found if k[0] == kernel]) >= 2       # its busy thread too
    # every process of the sandbox in the supervisor's session
    table = proc_table()
    assert {int(table[p][2][3]) for p in descendants(box) | {box}} == {session}
    status, _, body = post(server, RAISE_BACK, tool=tool)
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs":
        "(0, 0)\n" + "Operation not permitted\n" * 3}]
    # Another owner's execution: at SCHED_OTHER, the spinners still idle.
    status, _, body = post(server, "import os\nprint(os.sched_getscheduler(0), os.nice(0))",
                           headers={"Authorization": "Bearer sk-another-owner"})
    assert body["output"][0]["outputs"] == [{"type": "logs", "logs": "0 0\n"}]
    assert all_idle()
    _, _, status_page = server.request("GET", "/server-status?auto")
    assert "CodeInterpreterSandboxCPU: sched_idle\n" in status_page.decode()
    assert "CI0670: sandboxes' CPU: sched_idle (" in server.log()
