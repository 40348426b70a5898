"""Containment of the local sandbox against hostile code: what model-written
Python can reach, and how each attempt is stopped (the exception and errno it
gets, the call's status, what the model is told).

Everything runs at a location with a deliberately tight sandbox
(memory=256M processes=32 disk=16M timeout=5 max_output=4k) on a server that
holds a secret in its environment. After every test: no httpd child crashed,
every sandbox started was destroyed, and no sandbox process is left."""
import json
import os
import time

import pytest

from conftest import ANONYMOUS, checked, proc_stats, TOOL, Httpd, base_conf, script_input
from test_loop import sandboxes_started

OUTPUTS = "code_interpreter_call.outputs"
PATH = "/tight/v1/responses"
MIB = 1 << 20
MEMORY = 256 * MIB
PROCESSES = 32
DISK = 16 * MIB
SECRET_NAME = "CI_SECRET_PROBE"
SECRET = "s3cr3t"
TIMED_OUT = "The execution timed out after 5 s and was stopped."
RESTARTED = (" The interpreter was restarted: variables, imports and files from "
             "earlier calls are gone.")
# What the sandbox's environment may hold (OPENBLAS_* only when httpd has them).
SANDBOX_ENV = {"HOME", "PATH", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "OPENBLAS_NUM_THREADS",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE", "PWD",
               "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}


@pytest.fixture(scope="module")
def tight_httpd(model):
    extra = """
CodeInterpreterSandbox tight provider=local timeout=5 memory=256M processes=32 disk=16M \
    max_output=4k
<Location /tight/v1/responses>
  ProxyPass http://127.0.0.1:%d/v1/responses
  CodeInterpreter tight
</Location>
""" % model.port
    server = Httpd("containment", base_conf(model.port, extra),
                   env={SECRET_NAME: SECRET}).start()
    yield server
    server.stop()


@pytest.fixture
def server(tight_httpd, model):
    with checked(tight_httpd, model):
        yield tight_httpd
    # the test's containers deleted, nothing of their sandboxes is left
    tight_httpd.delete_containers()
    assert wait_no_sandbox_process(tight_httpd) == {}


# ---------------------------------------------------------------- helpers

def ci_body(rounds):
    return {"model": "m", "tools": [TOOL], "include": [OUTPUTS], "input": script_input(rounds)}


def run_code(server, code):
    """Run CODE in one call; returns (the call item, what the model was told)."""
    status, _, body = server.post(PATH, ci_body([[{"call": code}],
                                                 [{"text": "{{last_output}}"}]]))
    assert status == 200, body
    call, msg = body["output"]
    assert call["type"] == "code_interpreter_call"
    told = msg["content"][0]["text"]
    return call, told


def run_json(server, code, saved=None):
    """Run CODE, which prints one JSON document; returns it. SAVED: the
    files under /mnt/data it writes, which the model is told of too."""
    call, told = run_code(server, code)
    assert call["status"] == "completed", told
    note = ("[files saved: %s; link to one as sandbox:/mnt/data/<name>]\n"
            % ", ".join("/mnt/data/" + n for n in saved)) if saved else ""
    logs = call["outputs"][0]["logs"]
    assert (call["outputs"], told) == ([{"type": "logs", "logs": logs}], logs + note)
    return json.loads(logs)


def server_pid(server):
    with open(os.path.join(server.root, "httpd.pid")) as f:
        return int(f.read().strip())


def process_table():
    """pid -> (ppid, comm) of every process on the host."""
    return {pid: (ppid, comm) for pid, (ppid, comm, _) in proc_stats().items()}


def sandbox_processes(server):
    """pid -> comm of every process below SERVER's httpd that is not httpd
    itself: the sandboxes (bubblewrap and what runs in it)."""
    table = process_table()
    found, frontier = {}, {server_pid(server)}
    while frontier:
        nxt = set()
        for pid, (ppid, comm) in table.items():
            if ppid in frontier and pid not in found:
                found[pid] = comm
                nxt.add(pid)
        frontier = nxt
    # The supervisor is not a sandbox; what it runs is.
    return {pid: comm for pid, comm in found.items()
            if comm not in ("apache2", "ci-supervisor")}


def wait_no_sandbox_process(server, timeout=10):
    deadline = time.time() + timeout
    while True:
        left = sandbox_processes(server)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.05)


# ---------------------------------------------------------------- network

NET_CODE = r"""
import errno, json, socket
def attempt(family, kind, addr, proto=0):
    try:
        s = socket.socket(family, kind, proto)
    except OSError as e:
        return [type(e).__name__, errno.errorcode[e.errno]]
    s.settimeout(10)
    try:
        if kind == socket.SOCK_DGRAM:
            s.sendto(b'x', addr)
        else:
            s.connect(addr)
        return 'sent'
    except OSError as e:
        return [type(e).__name__, errno.errorcode[e.errno]]
    finally:
        s.close()
out = {
    'tcp httpd': attempt(socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', %d)),
    'tcp model': attempt(socket.AF_INET6, socket.SOCK_STREAM, ('::1', %d)),
    'tcp 1.1.1.1:80': attempt(socket.AF_INET, socket.SOCK_STREAM, ('1.1.1.1', 80)),
    'tcp [2606:4700:4700::1111]:80': attempt(socket.AF_INET6, socket.SOCK_STREAM,
                                             ('2606:4700:4700::1111', 80)),
    'udp 1.1.1.1:53': attempt(socket.AF_INET, socket.SOCK_DGRAM, ('1.1.1.1', 53)),
    'raw icmp': attempt(socket.AF_INET, socket.SOCK_RAW, ('1.1.1.1', 0), socket.IPPROTO_ICMP),
    'packet': attempt(socket.AF_PACKET, socket.SOCK_RAW, ('lo', 0)),
}
try:
    socket.getaddrinfo('example.com', 443)
    out['dns'] = 'resolved'
except socket.gaierror as e:
    out['dns'] = [type(e).__name__, e.errno, e.strerror]
print(json.dumps(out))
"""


def test_network_is_unreachable(server, model):
    out = run_json(server, NET_CODE % (server.port, model.port))
    assert out == {
        # loopback exists in the sandbox's own network namespace, with nothing on it
        "tcp httpd": ["ConnectionRefusedError", "ECONNREFUSED"],
        "tcp model": ["ConnectionRefusedError", "ECONNREFUSED"],
        # no route at all: refused at once, no packet leaves
        "tcp 1.1.1.1:80": ["OSError", "ENETUNREACH"],
        "tcp [2606:4700:4700::1111]:80": ["OSError", "ENETUNREACH"],
        "udp 1.1.1.1:53": ["OSError", "ENETUNREACH"],
        # no capabilities for raw or packet sockets
        "raw icmp": ["PermissionError", "EPERM"],
        "packet": ["PermissionError", "EPERM"],
        "dns": ["gaierror", -3, "Temporary failure in name resolution"],
    }


# ---------------------------------------------------------------- files

SECRETS_CODE = r"""
import errno, json, os
out = {}
for p in ('/etc/shadow', '/etc/apache2/envvars', '/etc/apache2/apache2.conf', %r,
          '/proc/1/root/etc/shadow', '/proc/2/root/etc/shadow'):
    try:
        with open(p, 'rb') as f:
            f.read()
        out[p] = 'read'
    except OSError as e:
        out[p] = [type(e).__name__, errno.errorcode[e.errno]]
out['server root visible'] = os.path.exists(%r)
print(json.dumps(out))
"""


def test_secret_files_are_absent(server, model):
    conf = os.path.join(server.root, "httpd.conf")
    assert os.path.exists(conf)
    out = run_json(server, SECRETS_CODE % (conf, server.root))
    absent = ["FileNotFoundError", "ENOENT"]
    assert out == {"/etc/shadow": absent, "/etc/apache2/envvars": absent,
                   "/etc/apache2/apache2.conf": absent, conf: absent,
                   "/proc/1/root/etc/shadow": absent, "/proc/2/root/etc/shadow": absent,
                   "server root visible": False}


WRITE_CODE = r"""
import errno, json, os
def attempt(what, fn, *args):
    try:
        fn(*args)
        out[what] = 'done'
    except OSError as e:
        out[what] = [type(e).__name__, errno.errorcode[e.errno]]
def create(p):
    with open(p, 'w') as f:
        f.write('x')
out = {}
for p in ('/usr/evil', '/usr/bin/evil', '/bin/evil', '/lib/evil', '/etc/evil', '/evil',
          '/sys/evil', '/proc/evil', '/etc/localtime'):
    attempt('create ' + p, create, p)
attempt('mkdir /usr/lib/evil', os.mkdir, '/usr/lib/evil')
attempt('mkdir /evil', os.mkdir, '/evil')
attempt('chmod /usr/bin/python3', os.chmod, '/usr/bin/python3', 0o777)
attempt('rename /etc/ld.so.cache', os.rename, '/etc/ld.so.cache', '/etc/x')
attempt('unlink /usr/bin/python3', os.unlink, '/usr/bin/python3')
attempt('symlink /evil', os.symlink, '/mnt/data', '/evil')
attempt('create /mnt/data/ok', create, '/mnt/data/ok')
print(json.dumps(out))
"""


def test_writes_outside_the_sandbox_are_refused(server, model):
    out = run_json(server, WRITE_CODE, saved=["ok"])
    rofs = ["OSError", "EROFS"]
    absent = ["FileNotFoundError", "ENOENT"]
    assert out == {
        "create /usr/evil": rofs, "create /usr/bin/evil": rofs, "create /bin/evil": rofs,
        "create /lib/evil": rofs, "create /etc/evil": rofs, "create /evil": rofs,
        # no /sys at all; /proc refuses new files
        "create /sys/evil": absent, "create /proc/evil": absent,
        "create /etc/localtime": rofs,
        "mkdir /usr/lib/evil": rofs, "mkdir /evil": rofs,
        "chmod /usr/bin/python3": rofs, "rename /etc/ld.so.cache": rofs,
        "unlink /usr/bin/python3": rofs, "symlink /evil": rofs,
        "create /mnt/data/ok": "done",
    }


# ------------------------------------------------------ processes and secrets

PROCS_CODE = r"""
import json, os
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
out = {'me': os.getpid(), 'pids': pids, 'comm': {}, 'environ': {}}
for pid in pids:
    with open('/proc/%%d/comm' %% pid) as f:
        out['comm'][pid] = f.read().strip()
    try:
        with open('/proc/%%d/environ' %% pid, 'rb') as f:
            out['environ'][pid] = f.read().decode('latin-1')
    except OSError as e:
        out['environ'][pid] = type(e).__name__
out['httpd visible'] = os.path.exists('/proc/%d')
print(json.dumps(out))
"""


def test_only_the_sandbox_processes_are_visible_and_hold_no_secret(server, model):
    httpd_pid = server_pid(server)
    # the server does hold the secret
    with open("/proc/%d/environ" % httpd_pid, "rb") as f:
        assert ("%s=%s" % (SECRET_NAME, SECRET)).encode() in f.read()
    out = run_json(server, PROCS_CODE % httpd_pid)
    # its own pid namespace: bubblewrap's init and the interpreter, nothing of the host
    assert out["me"] == 2
    assert out["pids"] == [1, 2]
    assert out["comm"] == {"1": "bwrap", "2": "python3"}
    assert out["httpd visible"] is False
    assert out["environ"]["1"] == ""
    env = dict(kv.split("=", 1) for kv in out["environ"]["2"].split("\0") if kv)
    assert set(env) <= SANDBOX_ENV
    assert env["HOME"] == "/tmp"
    assert SECRET not in json.dumps(out)
    assert SECRET_NAME not in json.dumps(out)


# ------------------------------------------------------------- processes

BOUNDED_FORKS = r"""
import errno, json, os, time
children = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children.append(pid)
except OSError as e:
    stopped = [type(e).__name__, errno.errorcode[e.errno]]
alive = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
# the children are left running: destroying the sandbox must reap them
print(json.dumps({'children': len(children), 'stopped': stopped, 'tasks': len(alive)}))
"""


def test_forks_are_capped_by_processes(server, model):
    out = run_json(server, BOUNDED_FORKS)
    # processes=32 counts every task of the sandbox: bubblewrap's init, the
    # interpreter and its children
    assert out == {"children": PROCESSES - 2, "stopped": ["BlockingIOError", "EAGAIN"],
                   "tasks": PROCESSES}
    # the fixture checks the 30 sleeping children died with the sandbox


FORK_BOMB = r"""
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def test_fork_bomb_is_stopped_by_the_timeout(server, model):
    # a request's own sandbox (no owner): killed at the timeout, started afresh
    status, _, body = server.post(PATH, headers=ANONYMOUS, body=ci_body(
        [[{"call": FORK_BOMB}], [{"call": "print('kept' in globals(), len(os.listdir('/proc')))"}],
         [{"call": "import os\nprint(sorted(int(p) for p in os.listdir('/proc') "
                   "if p.isdigit()))"}],
         [{"text": "{{outputs}}"}]]))
    assert status == 200, body
    bomb, after, fresh, msg = body["output"]
    assert bomb["status"] == "completed"
    assert bomb["outputs"] == [{"type": "logs", "logs": TIMED_OUT}]
    # a fresh interpreter: os was never imported there
    assert after["status"] == "completed"
    assert after["outputs"][0]["logs"].endswith("NameError: name 'os' is not defined\n")
    assert fresh["outputs"] == [{"type": "logs", "logs": "[1, 2]\n"}]
    told = json.loads(msg["content"][0]["text"])
    assert told[0] == TIMED_OUT + RESTARTED
    log = server.log_since_mark()
    assert "CI0301: sandbox destroyed (restarted after a failed execution) tool=tight" in log
    assert sandboxes_started(server) == 2


SPIN = "while True:\n    pass"


def test_spinning_code_times_out_and_the_next_call_is_fresh(server, model):
    # a request's own sandbox (no owner): killed at the timeout, started afresh
    # (a container's is interrupted first: test_containers.py)
    status, _, body = server.post(PATH, headers=ANONYMOUS, body=ci_body(
        [[{"call": "kept = 1"}], [{"call": SPIN}], [{"call": "print('kept' in globals())"}],
         [{"text": "{{outputs}}"}]]))
    assert status == 200, body
    c1, spin, c3, msg = body["output"]
    assert c1["status"] == "completed"
    assert spin["status"] == "completed"
    assert spin["outputs"] == [{"type": "logs", "logs": TIMED_OUT}]
    assert c3["status"] == "completed"
    assert c3["outputs"] == [{"type": "logs", "logs": "False\n"}]
    assert json.loads(msg["content"][0]["text"]) == ["(no output)", TIMED_OUT + RESTARTED,
                                                     "False\n"]
    assert len({c["container_id"] for c in (c1, spin, c3)}) == 1


KILL_CODE = r"""
import errno, json, os, signal
me = os.getpid()
sent, refused = [], {}
for pid in list(range(1, 51)) + %s:
    if pid == me:
        continue
    try:
        os.kill(pid, signal.SIGKILL)
        sent.append(pid)
    except OSError as e:
        refused[errno.errorcode[e.errno]] = refused.get(errno.errorcode[e.errno], 0) + 1
try:
    os.kill(-1, signal.SIGKILL)
    everyone = 'sent'
except OSError as e:
    everyone = errno.errorcode[e.errno]
alive = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(json.dumps({'me': me, 'sent': sent, 'refused': refused, 'everyone': everyone,
                  'alive': alive}))
"""


def test_sigkill_reaches_only_the_sandbox(server, model):
    parent = server_pid(server)
    children = {pid for pid, (ppid, comm) in process_table().items()
                if ppid == parent and comm == "apache2"}
    assert children
    host = sorted({parent, os.getpid()} | children)
    out = run_json(server, KILL_CODE % json.dumps(host))
    # pids 1-50 but its own, and the host's pids: the init of the sandbox's own pid
    # namespace ignores the signal, nothing else exists there
    assert out == {"me": 2, "sent": [1], "refused": {"ESRCH": 48 + len(host)},
                   "everyone": "ESRCH", "alive": [1, 2]}
    assert server_pid(server) == parent
    assert os.path.exists("/proc/%d" % parent)
    # the server keeps serving
    assert run_json(server, "print(6 * 7)") == 42


NAMESPACES_CODE = r"""
import ctypes, errno, json, subprocess
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, flag in (('user', 0x10000000), ('mount', 0x00020000), ('net', 0x40000000),
                   ('pid', 0x20000000), ('ipc', 0x08000000), ('uts', 0x04000000)):
    out[name] = 'created' if libc.unshare(flag) == 0 else errno.errorcode[ctypes.get_errno()]
r = subprocess.run(['unshare', '-U', 'true'], capture_output=True, text=True)
out['unshare -U'] = [r.returncode, r.stderr]
r = subprocess.run(['unshare', '-n', 'true'], capture_output=True, text=True)
out['unshare -n'] = [r.returncode, r.stderr]
print(json.dumps(out))
"""


def test_nested_namespaces_are_refused(server, model):
    out = run_json(server, NAMESPACES_CODE)
    # --disable-userns: no user namespace below the sandbox's own, so no
    # capability anywhere to create the others
    assert out == {
        "user": "ENOSPC", "mount": "EPERM", "net": "EPERM", "pid": "EPERM",
        "ipc": "EPERM", "uts": "EPERM",
        "unshare -U": [1, "unshare: unshare failed: No space left on device\n"],
        "unshare -n": [1, "unshare: unshare failed: Operation not permitted\n"],
    }


LIMITS_CODE = r"""
import json, resource, threading
out = {}
for name in ('RLIMIT_NPROC', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_CORE'):
    which = getattr(resource, name)
    soft, hard = resource.getrlimit(which)
    try:
        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        raised = 'raised'
    except (ValueError, OSError) as e:
        raised = [type(e).__name__, str(e)]
    out[name] = [soft, hard, raised]
release = threading.Event()
threads = []
try:
    while True:
        t = threading.Thread(target=release.wait)
        t.start()
        threads.append(t)
except RuntimeError as e:
    out['threads stopped'] = str(e)
release.set()
for t in threads:
    t.join()
out['threads'] = len(threads)
print(json.dumps(out))
"""


def test_limits_cannot_be_raised(server, model):
    out = run_json(server, LIMITS_CODE)
    refused = ["ValueError", "not allowed to raise maximum limit"]
    threads = out.pop("threads")
    assert out == {"RLIMIT_NPROC": [PROCESSES, PROCESSES, refused],
                   "RLIMIT_AS": [MEMORY, MEMORY, refused],
                   "RLIMIT_FSIZE": [DISK, DISK, refused],
                   "RLIMIT_CORE": [0, 0, refused],
                   "threads stopped": "can't start new thread"}
    # threads count as processes (and each takes address space)
    assert 0 < threads < PROCESSES


# ---------------------------------------------------------------- memory

MEMORY_CODE = r"""
import json, os
out = {}
try:
    big = bytearray(6 << 30)
    out['6 GiB here'] = 'allocated'
except MemoryError as e:
    out['6 GiB here'] = type(e).__name__
children = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(1 << 30)
            os._exit(0)
        except MemoryError:
            os._exit(42)
    children.append(pid)
out['1 GiB in each of 8 children'] = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1])
                                      for p in children]
print(json.dumps(out))
"""


def test_large_allocations_fail_with_memory_error(server, model):
    out = run_json(server, MEMORY_CODE)
    # 42: the child caught MemoryError
    assert out == {"6 GiB here": "MemoryError", "1 GiB in each of 8 children": [42] * 8}


CEILING_CODE = r"""
import errno, json, mmap, os, signal, time
def vm_mib():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmSize:'):
                return int(line.split()[1]) / 1024
def hold_largest():
    lo, hi = 0, 4096
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            mmap.mmap(-1, mid << 20).close()
            lo = mid
        except OSError:
            hi = mid - 1
    return lo, mmap.mmap(-1, lo << 20)
mine, held = hold_largest()
sizes, vms = [mine], [vm_mib()]
children, stopped = [], None
while True:
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        stopped = [type(e).__name__, errno.errorcode[e.errno]]
        os.close(r)
        os.close(w)
        break
    if pid == 0:
        held.close()    # the parent's mapping, inherited
        n, block = hold_largest()
        os.write(w, json.dumps([n, vm_mib()]).encode())
        time.sleep(120)
        os._exit(0)
    os.close(w)
    n, vm = json.loads(os.read(r, 100))
    os.close(r)
    sizes.append(n)
    vms.append(vm)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(json.dumps({'stopped': stopped, 'sizes': sizes, 'vm': vms}))
"""


def test_memory_ceiling_is_memory_times_processes(server, model):
    """Each process holds the largest mapping it can get, all at once, in as
    many processes as the sandbox may have: the address space in use is the
    sandbox's real ceiling. Mappings are never touched: no host memory used."""
    out = run_json(server, CEILING_CODE)
    assert out["stopped"] == ["BlockingIOError", "EAGAIN"]
    # the interpreter and its children: every task but bubblewrap's init
    assert len(out["vm"]) == PROCESSES - 1
    limit_mib = MEMORY / MIB
    for vm in out["vm"]:
        assert limit_mib - 2 <= vm <= limit_mib
    held = sum(out["vm"])
    print("memory ceiling: %d interpreter processes hold %.0f MiB of address space "
          "(%d MiB more in mappings beyond their own); memory x processes = %d MiB"
          % (len(out["vm"]), held, sum(out["sizes"]), limit_mib * PROCESSES))
    # bubblewrap's init has the same per-process limit: memory x processes is the bound
    assert held + limit_mib <= limit_mib * PROCESSES
    assert held >= (limit_mib - 2) * (PROCESSES - 1)


# ---------------------------------------------------------------- disk

DISK_CODE = r"""
import errno, json, os
def fill_one(path, chunk):
    written = 0
    try:
        with open(path, 'wb') as f:
            while True:
                f.write(b'\0' * chunk)
                f.flush()
                written += chunk
    except OSError as e:
        result = [written, errno.errorcode[e.errno], os.path.getsize(path)]
    os.unlink(path)
    return result
def fill_many(d):
    written, i = 0, 0
    try:
        while True:
            with open('%s/part%d' % (d, i), 'wb') as f:
                for _ in range(4):
                    f.write(b'\0' * (1 << 20))
                    f.flush()
                    written += 1 << 20
            i += 1
    except OSError as e:
        result = [written, errno.errorcode[e.errno]]
    st = os.statvfs(d)
    result.append(st.f_blocks * st.f_frsize)
    for name in os.listdir(d):
        if name.startswith('part'):
            os.unlink(os.path.join(d, name))
    return result
out = {'one file': fill_one('/mnt/data/big', 1 << 20),
       'one file, 4k writes': fill_one('/mnt/data/big', 4096),
       'many files': fill_many('/mnt/data'),
       'many files in /tmp': fill_many('/tmp')}
print(json.dumps(out))
"""


def test_disk_is_capped(server, model):
    out = run_json(server, DISK_CODE)
    assert out == {
        # one file: the file size limit (disk=)
        "one file": [DISK, "EFBIG", DISK],
        "one file, 4k writes": [DISK, "EFBIG", DISK],
        # several: the size of the tmpfs (disk=)
        "many files": [DISK, "ENOSPC", DISK],
        "many files in /tmp": [DISK, "ENOSPC", DISK],
    }


DEV_CODE = r"""
import errno, json, os
out = {}
for d in ('/dev', '/dev/shm'):
    written, stopped = 0, None
    try:
        for i in range(3):
            with open('%s/fill%d' % (d, i), 'wb') as f:
                for _ in range(12):
                    f.write(b'\0' * (1 << 20))
                    f.flush()
                    written += 1 << 20
    except OSError as e:
        stopped = errno.errorcode[e.errno]
    for i in range(3):
        try:
            os.unlink('%s/fill%d' % (d, i))
        except OSError:
            pass
    out[d] = [written, stopped]
print(json.dumps(out))
"""


def test_dev_is_not_a_way_around_disk(server, model):
    out = run_json(server, DEV_CODE)
    for d in ("/dev", "/dev/shm"):
        written, stopped = out[d]
        assert written <= DISK, (d, written)
        assert stopped in ("EROFS", "ENOSPC", "EFBIG"), (d, stopped)
