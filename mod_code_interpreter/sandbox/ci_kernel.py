# The interpreter that runs inside a local sandbox: one per request, state
# kept between executions like a notebook kernel. It reads one JSON request
# per line ({"code": ...}, {"op": ...} for a file operation, {"shell": ...}
# for a hosted shell call) on its original stdin and answers each with
# NDJSON lines on its original stdout, ending with end_of_execution - the
# line protocol of the E2B code-interpreter server, so one reader serves both.
import ast
import base64
import builtins
import codecs
import io
import json
import os
import resource
import select
import selectors
import signal
import socket
import stat
import sys
import time
import traceback

CONFIG = json.loads(sys.argv[1])
MAX_OUTPUT = int(CONFIG.get("max_output", 65536))
FD_CAPTURE = CONFIG.get("capture", "/tmp/.fd-output")   # tests run it outside
CAPTURE_FD = None   # descriptors 1 and 2 of the kernel and its children
# Popen's arguments for a child in a process group of its own
OWN_GROUP = ({"process_group": 0} if sys.version_info >= (3, 11)
             else {"preexec_fn": os.setpgrp})


def limit_processes():
    # Set inside the sandbox's own user namespace, where it counts only the
    # sandbox's tasks (set outside, it would count every task of the uid).
    n = int(CONFIG.get("processes", 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


class Channel:
    """The protocol stream back to the server, with the output budget."""

    def __init__(self, fd):
        self.fd = fd
        self.sent = 0
        self.dropped = 0

    def line(self, obj):
        data = (json.dumps(obj) + "\n").encode("ascii")
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def budget(self, text):
        """TEXT cut to what is left of the output budget (None: nothing)."""
        # NUL has no place in the text the model reads: U+FFFD stands for it.
        data = text.replace("\0", "\ufffd").encode("utf-8", "replace")
        room = max(MAX_OUTPUT - self.sent, 0)
        if len(data) > room:
            # Cut at a character boundary; count every byte not sent.
            kept = data[:room].decode("utf-8", "ignore").encode("utf-8")
            self.dropped += len(data) - len(kept)
            self.sent = MAX_OUTPUT   # nothing after a cut, to keep the order
            data = kept
        else:
            self.sent += len(data)
        return data.decode("utf-8") or None

    def text(self, kind, text):
        text = self.budget(text) if text else None
        if text:
            self.line({"type": kind, "text": text})

    def result(self, text):
        text = self.budget(text)
        if text:
            self.line({"type": "result", "is_main_result": True, "text": text})

    def finish(self):
        if self.dropped:
            self.line({"type": "dropped", "bytes": self.dropped})
        self.line({"type": "end_of_execution"})
        self.sent = self.dropped = 0


class Stream(io.TextIOBase):
    """sys.stdout / sys.stderr: every write goes out at once, in order."""

    def __init__(self, channel, kind):
        self.channel = channel
        self.kind = kind

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        # What subprocesses wrote to descriptors 1 and 2 came first.
        flush_descriptors(self.channel)
        self.channel.text(self.kind, s)
        return len(s)

    @property
    def encoding(self):
        return "utf-8"


def user_traceback(exc):
    tb = exc.__traceback__
    # Drop the kernel's own frames: the user sees only their cell.
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def send_figures(channel):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png")
        channel.line({"type": "result", "is_main_result": False,
                      "png": base64.b64encode(buf.getvalue()).decode("ascii")})
    plt.close("all")


def send_fd_output(channel, fd):
    # What subprocesses and C code wrote to descriptors 1 and 2.
    size = os.lseek(fd, 0, os.SEEK_END)
    if size:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, min(size, MAX_OUTPUT + 4))
        channel.text("stdout", data.decode("utf-8", "replace"))
        if size > len(data):
            channel.dropped += size - len(data)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)


def run_cell(code, namespace, channel):
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), namespace)
            if value is not None:
                flush_descriptors(channel)
                channel.result(repr(value))
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too
        flush_descriptors(channel)
        channel.line({"type": "error", "name": type(exc).__name__,
                      "value": str(exc), "traceback": user_traceback(exc)})


def flush_descriptors(channel):
    """Send what was written to descriptors 1 and 2 so far, in its place."""
    if CAPTURE_FD is not None and os.fstat(CAPTURE_FD).st_size:
        send_fd_output(channel, CAPTURE_FD)


# ---- file operations ----------------------------------------------------
# The server never resolves a path of the sandbox on the host: code in here
# controls this tree (symlinks, FIFOs, sparse files, odd names). So it asks
# this kernel, whose view is the sandbox's own, and which takes its turn in
# the container's run queue like an execution: no cell runs meanwhile.
# Only regular files directly under /mnt/data; never a symlink followed.
DATA_DIR = CONFIG.get("data_dir", "/mnt/data")     # tests run it outside
FILE_CHUNK = 48 * 1024          # raw bytes per data line (64 KiB of base64)
MAX_LISTED = 10000
MAX_LISTING = 900 * 1024        # bytes of the listing's line (the server reads 1 MiB)
MAX_NAME = 255
MAX_CHANGED = 100


def file_name_ok(name):
    if not isinstance(name, str) or not name or len(name.encode("utf-8", "surrogateescape")) > MAX_NAME:
        return False
    if name in (".", "..") or any(c in name for c in "/\0\n\r"):
        return False
    try:
        name.encode("utf-8")    # not a name the JSON answer can carry exactly
    except UnicodeEncodeError:
        return False
    return True


# Files put here by an upload: name -> (size, mtime_ns) as written. A file
# still so is the user's (source "user"); once code changes it, it is the
# assistant's. Kept in this process, as the container's state is.
UPLOADS = {}


def open_data_dir():
    return os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def regular_files(dfd):
    """name -> stat of each regular file directly under the directory (no
    symlink followed), at most MAX_LISTED, in name order."""
    found = {}
    for name in sorted(os.listdir(dfd)):
        if len(found) >= MAX_LISTED:
            break
        if not file_name_ok(name):
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found[name] = st
    return found


def is_upload(name, st):
    return UPLOADS.get(name) == (st.st_size, st.st_mtime_ns)


def file_list(channel):
    files = []
    size = 0
    dfd = open_data_dir()
    try:
        found = regular_files(dfd)
    finally:
        os.close(dfd)
    for name, st in found.items():
        entry = {"name": name, "bytes": st.st_size, "mtime": int(st.st_mtime)}
        if is_upload(name, st):
            entry["source"] = "user"
        size += len(json.dumps(entry)) + 2
        if size > MAX_LISTING:
            break
        files.append(entry)
    channel.line({"type": "files", "files": files})


def snapshot():
    """name -> (size, mtime_ns, inode) of the container's files, to see
    what an execution changed; {} when /mnt/data cannot be read."""
    try:
        dfd = open_data_dir()
    except OSError:
        return {}
    try:
        return {name: (st.st_size, st.st_mtime_ns, st.st_ino)
                for name, st in regular_files(dfd).items()}
    except OSError:
        return {}
    finally:
        os.close(dfd)


def send_changed(channel, before):
    after = snapshot()
    changed = [name for name, sig in after.items() if before.get(name) != sig]
    if changed:
        channel.line({"type": "files", "changed": changed[:MAX_CHANGED]})


def open_regular(name, dfd):
    """A descriptor of the regular file NAME, or None: no symlink is
    followed (O_NOFOLLOW), no FIFO blocks the open (O_NONBLOCK)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd


def file_get(channel, name, limit):
    dfd = open_data_dir()
    try:
        fd = open_regular(name, dfd)
    finally:
        os.close(dfd)
    if fd is None:
        channel.line({"type": "not_found"})
        return
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            channel.line({"type": "too_large", "bytes": size})
            return
        channel.line({"type": "file", "bytes": size})
        left = size
        while left > 0:
            data = os.read(fd, min(FILE_CHUNK, left))
            if not data:
                break
            left -= len(data)
            channel.line({"type": "data", "b64": base64.b64encode(data).decode("ascii")})
        if left:
            channel.line({"type": "error", "name": "FileChanged",
                          "value": "the file shrank while it was read"})
    finally:
        os.close(fd)


def file_delete(channel, name):
    dfd = open_data_dir()
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(name)
        os.unlink(name, dir_fd=dfd)
        channel.line({"type": "deleted"})
    except OSError:
        channel.line({"type": "not_found"})
    finally:
        os.close(dfd)


# An upload: after the request line, the server sends chunks, each a
# length line ("N\n") then N bytes; "0\n" ends it (commit), "-1\n"
# abandons it. The bytes go to a new file beside the target, renamed over
# it at the end: a failed upload leaves nothing, and the rename replaces a
# symlink of that name instead of writing through it.
def read_chunks(requests, out_fd, room):
    """Copy the chunks to OUT_FD: "done", "abandoned", "too_large" (past
    ROOM bytes, -1: no bound) or "no_space"; the stream is read to its end
    whatever happens, so the next request line is where it should be."""
    written, outcome = 0, None
    while True:
        n = int(requests.readline().strip() or b"-1")
        if n <= 0:
            return outcome or ("done" if n == 0 else "abandoned")
        data = requests.read(n)
        if len(data) != n:
            raise EOFError("the upload was cut short")
        written += n
        if outcome:
            continue
        if 0 <= room < written:
            outcome = "too_large"
            continue
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out_fd, view):]
        except OSError:
            outcome = "no_space"


def upload_room(found, name, req):
    """Why the upload of NAME cannot start ("too_many"), or None, and the
    bytes it may have (-1: no bound)."""
    others = {k: st for k, st in found.items() if k != name}
    max_files, max_bytes = int(req.get("max_files", 0)), int(req.get("max_bytes", 0))
    if max_files and name not in found and len(others) + 1 > max_files:
        return "too_many", 0
    room = [int(req["max_file"])] if req.get("max_file") else []
    if max_bytes:
        room.append(max(max_bytes - sum(st.st_size for st in others.values()), 0))
    return None, min(room) if room else -1


def file_put(channel, requests, req):
    name = req["name"]
    dfd = open_data_dir()
    tmp = None
    try:
        refused, room = upload_room(regular_files(dfd), name, req)
        if refused:
            channel.line({"type": refused})
            return
        tmp = ".upload-%s" % os.urandom(8).hex()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=dfd)
        try:
            channel.line({"type": "ready", "room": room})
            outcome = read_chunks(requests, fd, room)
        finally:
            os.close(fd)
        if outcome == "done":
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp = None
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            UPLOADS[name] = (st.st_size, st.st_mtime_ns)
            channel.line({"type": "stored", "bytes": st.st_size,
                          "mtime": int(st.st_mtime)})
        else:
            channel.line({"type": outcome})
    finally:
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)


def file_op(channel, req, requests):
    op = req.get("op")
    name = req.get("name")
    try:
        if op == "list":
            file_list(channel)
        elif op in ("get", "delete", "put") and not file_name_ok(name):
            channel.line({"type": "refused", "value": "not a file name"})
        elif op == "get":
            file_get(channel, name, int(req.get("max", 0)))
        elif op == "delete":
            file_delete(channel, name)
        elif op == "put":
            file_put(channel, requests, req)
        else:
            channel.line({"type": "refused", "value": "unknown operation"})
    except BaseException as exc:   # KeyboardInterrupt (the deadline) too
        channel.line({"type": "error", "name": type(exc).__name__, "value": str(exc)})
    channel.line({"type": "end_of_execution"})


# ---- the hosted shell ---------------------------------------------------
# {"shell": {"commands": [...], "timeout_ms": N, "max_output": M}}: each
# command runs with bash -c in /mnt/data, stdin /dev/null, in a session
# (and so a process group) of its own, one after another. Its stdout and
# stderr go to unlinked files, not pipes: a process it leaves running in
# the background holds only those, and the call waits for the command's own
# process alone. Past N ms its group is killed and the call stops there.
# The supervisor's SIGINT (the tool's deadline, the request gone) is noted
# rather than raised while a call runs, so it ends the wait for the current
# command (whose group is killed) and never a line half-written.
SHELL = "/bin/bash"
CANNOT_RUN = 126        # bash's own exit code for a command it cannot run
SCRATCH_DIR = os.path.dirname(FD_CAPTURE) or "."


class Interrupt:
    """SIGINT during a shell call: noted, and a byte on a pipe that wakes
    the wait (signal.set_wakeup_fd) however the signal falls."""

    def __enter__(self):
        self.hit = False
        self.wake, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.old_fd = signal.set_wakeup_fd(self.wake_w)
        self.old_handler = signal.signal(signal.SIGINT, self.note)
        return self

    def note(self, signum, frame):
        self.hit = True

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.old_handler)
        signal.set_wakeup_fd(self.old_fd)
        os.close(self.wake)
        os.close(self.wake_w)


def unlinked_file():
    """A descriptor of a new file no name reaches (the scratch directory's
    tmpfs bounds it)."""
    try:
        return os.open(SCRATCH_DIR, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError:     # a file system without O_TMPFILE (tests run outside)
        path = os.path.join(SCRATCH_DIR, ".shell-%s" % os.urandom(8).hex())
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                     os.O_CLOEXEC, 0o600)
        os.unlink(path)
        return fd


def file_text(fd, limit):
    """At most LIMIT characters of what was written to FD, as text (UTF-8,
    invalid bytes and NUL as U+FFFD), read no further than they reach: a
    byte makes at most one character, so each read asks for as many bytes
    as characters are still wanted, whatever the file's size."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    parts, have, offset = [], 0, 0
    while have < limit:
        data = os.pread(fd, min(limit - have, 1 << 20), offset)
        text = decoder.decode(data, final=not data)
        parts.append(text)
        have += len(text)
        offset += len(data)
        if not data:
            break
    return "".join(parts).replace("\0", "\ufffd")[:limit]


def wait_command(proc, deadline, interrupt):
    """Wait for PROC alone: True when it ended by itself; False when it was
    past DEADLINE or interrupted, and then its whole group is killed.
    Reaped either way."""
    pidfd = os.pidfd_open(proc.pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(interrupt.wake, select.POLLIN)
        while not interrupt.hit:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready = poller.poll(int(left * 1000) + 1)
            # An interrupt wins: the command may have just died of it too.
            if not interrupt.hit and any(fd == pidfd for fd, _ in ready):
                proc.wait()
                return True
    finally:
        os.close(pidfd)
    try:
        os.killpg(proc.pid, signal.SIGKILL)    # its leader unreaped: the group is ours
    except ProcessLookupError:
        pass
    proc.wait()
    return False


def run_command(command, timeout, limit, interrupt):
    """One command's line: its output cut at LIMIT characters (stdout
    first, stderr gets what is left), and its exit code, or timeout."""
    import subprocess   # here: the kernel's start does not pay for it
    out, err = unlinked_file(), unlinked_file()
    try:
        try:
            # $0 "bash", as in bash's own messages ("bash: line 1: ...")
            # a process group of its own, in the sandbox's one session (a
            # new session is refused: it would escape the sandbox's CPU share)
            proc = subprocess.Popen(["bash", "-c", command], executable=SHELL, cwd=DATA_DIR,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    **OWN_GROUP)
        except (OSError, ValueError) as exc:    # too long, a NUL, no process left
            return {"type": "command", "stdout": "",
                    "stderr": ("bash: cannot run the command: %s\n" % exc)[:limit],
                    "exit_code": CANNOT_RUN}
        ended = wait_command(proc, time.monotonic() + timeout, interrupt)
        stdout = file_text(out, limit)
        line = {"type": "command", "stdout": stdout,
                "stderr": file_text(err, limit - len(stdout))}
        if not ended:
            line["timeout"] = True
        else:       # 128 + N for a death by signal N, as a shell reports it
            code = proc.returncode
            line["exit_code"] = code if code >= 0 else 128 - code
        return line
    finally:
        os.close(out)
        os.close(err)


def run_commands(channel, action, interrupt):
    timeout = int(action["timeout_ms"]) / 1000.0
    limit = int(action["max_output"])
    for command in action["commands"]:
        if interrupt.hit:
            break
        line = run_command(command, timeout, limit, interrupt)
        channel.line(line)
        if line.get("timeout"):
            break


def shell_call(channel, action):
    before = snapshot()
    with Interrupt() as interrupt:
        try:
            run_commands(channel, action, interrupt)
        except Exception as exc:
            channel.line({"type": "error", "name": type(exc).__name__, "value": str(exc)})
        send_changed(channel, before)
        # Still within: a SIGINT that comes as the call ends is noted, not raised.
        channel.finish()


# ---- the egress relay ------------------------------------------------------
# A container with an allowlist has one way out: the egress proxy outside,
# through a Unix socket mounted at CONFIG["egress"]["socket"]. The proxy
# variables point at this relay, on the sandbox's own loopback; it carries
# each connection to that socket as it is. One process, one task (the
# sandbox's task count is bounded), never blocking on one connection.

class Leg:
    """One direction of a relayed connection: bytes read from SRC, waiting
    to be written to DST."""

    def __init__(self, src, dst):
        self.src, self.dst, self.buf, self.eof = src, dst, b"", False


class Relayed:
    def __init__(self, client, upstream):
        self.legs = (Leg(client, upstream), Leg(upstream, client))
        self.closed = False

    def events(self, sock):
        ev = 0
        for leg in self.legs:
            if leg.src is sock and not leg.buf and not leg.eof:
                ev |= selectors.EVENT_READ
            if leg.dst is sock and leg.buf:
                ev |= selectors.EVENT_WRITE
        return ev

    def step(self, sock, mask):
        for leg in self.legs:
            if leg.src is sock and mask & selectors.EVENT_READ:
                data = sock.recv(65536)
                leg.buf, leg.eof = data, not data
            if leg.dst is sock and mask & selectors.EVENT_WRITE and leg.buf:
                try:
                    leg.buf = leg.buf[sock.send(leg.buf):]
                except (BrokenPipeError, ConnectionResetError):
                    # its reader is gone (the proxy answered and closed): what
                    # it said still goes the other way
                    leg.buf, leg.eof = b"", True
            if leg.eof and not leg.buf:
                try:
                    leg.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        return all(leg.eof and not leg.buf for leg in self.legs)


def relay_register(sel, relayed):
    for sock in {leg.src for leg in relayed.legs}:
        ev = relayed.events(sock)
        key = sel.get_map().get(sock)
        if key and ev:
            sel.modify(sock, ev, relayed)
        elif key:
            sel.unregister(sock)
        elif ev:
            sel.register(sock, ev, relayed)


def relay_close(sel, relayed):
    relayed.closed = True
    for leg in relayed.legs:
        if leg.src in sel.get_map():
            sel.unregister(leg.src)
        leg.src.close()


def relay_accept(sel, listener, path):
    try:
        client, _ = listener.accept()
    except OSError:
        return
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    client.setblocking(False)
    upstream.setblocking(False)
    relay_register(sel, Relayed(client, upstream))


def relay_loop(listener, path, kernel_alive):
    sel = selectors.DefaultSelector()
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ, None)
    sel.register(kernel_alive, selectors.EVENT_READ, "kernel")
    while True:
        for key, mask in sel.select():
            relayed = key.data
            if relayed == "kernel":
                return                  # the kernel is gone: so is the relay
            if relayed is None:
                relay_accept(sel, listener, path)
                continue
            if relayed.closed:
                continue
            try:
                done = relayed.step(key.fileobj, mask)
            except OSError:
                done = True
            if done:
                relay_close(sel, relayed)
            else:
                relay_register(sel, relayed)


def start_egress_relay():
    """Listen before the kernel says ready; relay in a child of its own.
    Returns the descriptor the kernel holds while it lives, or None."""
    egress = CONFIG.get("egress")
    if not egress:
        return None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(egress["port"])))
    listener.listen(128)
    kernel_alive, alive_end = os.pipe()   # EOF when the kernel ends
    if os.fork() == 0:
        try:
            # never a holder of the kernel's pipes: their EOF is its end
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.setpgid(0, 0)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.close(alive_end)
            relay_loop(listener, egress["socket"], kernel_alive)
        finally:
            os._exit(0)
    os.close(kernel_alive)
    listener.close()
    return alive_end


def main():
    limit_processes()
    relay = start_egress_relay()   # noqa: F841 (held open: the relay's life)
    requests = os.fdopen(os.dup(0), "rb")
    channel = Channel(os.dup(1))
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    global CAPTURE_FD
    capture = os.open(FD_CAPTURE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    CAPTURE_FD = capture
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    sys.stdin = open(os.devnull)
    sys.stdout = Stream(channel, "stdout")
    sys.stderr = Stream(channel, "stderr")
    sys.argv = [""]
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for module in filter(None, CONFIG.get("preload", "").split(",")):
        exec("import " + module, namespace)
    channel.line({"type": "ready"})
    while True:
        raw = requests.readline()
        if not raw:
            break
        req = json.loads(raw)
        if "op" in req:
            file_op(channel, req, requests)
            continue
        if "shell" in req:
            shell_call(channel, req["shell"])
            continue
        code = req.get("code", "")
        channel.line({"type": "number_of_executions", "execution_count": 1})
        before = snapshot()
        run_cell(code, namespace, channel)
        sys.stdout.flush()
        try:
            send_figures(channel)
        except Exception as exc:
            channel.text("stderr", "could not render a figure: %s\n" % exc)
        send_fd_output(channel, capture)
        send_changed(channel, before)
        channel.finish()


main()
