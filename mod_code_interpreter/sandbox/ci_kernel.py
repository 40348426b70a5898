# The interpreter that runs inside a local sandbox: one per request, state
# kept between executions like a notebook kernel. It reads one JSON request
# per line ({"code": ...}) on its original stdin and answers each with
# NDJSON lines on its original stdout, ending with end_of_execution - the
# line protocol of the E2B code-interpreter server, so one reader serves both.
import ast
import base64
import builtins
import io
import json
import os
import resource
import stat
import sys
import traceback

CONFIG = json.loads(sys.argv[1])
MAX_OUTPUT = int(CONFIG.get("max_output", 65536))
FD_CAPTURE = CONFIG.get("capture", "/tmp/.fd-output")   # tests run it outside
CAPTURE_FD = None   # descriptors 1 and 2 of the kernel and its children


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


def file_list(channel):
    files = []
    size = 0
    dfd = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in sorted(os.listdir(dfd)):
            if len(files) >= MAX_LISTED:
                break
            if not file_name_ok(name):
                continue
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                entry = {"name": name, "bytes": st.st_size, "mtime": int(st.st_mtime)}
                size += len(json.dumps(entry)) + 2
                if size > MAX_LISTING:
                    break
                files.append(entry)
    finally:
        os.close(dfd)
    channel.line({"type": "files", "files": files})


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
    dfd = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
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
    dfd = os.open(DATA_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
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


def file_op(channel, req):
    op = req.get("op")
    name = req.get("name")
    try:
        if op == "list":
            file_list(channel)
        elif op in ("get", "delete") and not file_name_ok(name):
            channel.line({"type": "refused", "value": "not a file name"})
        elif op == "get":
            file_get(channel, name, int(req.get("max", 0)))
        elif op == "delete":
            file_delete(channel, name)
        else:
            channel.line({"type": "refused", "value": "unknown operation"})
    except BaseException as exc:   # KeyboardInterrupt (the deadline) too
        channel.line({"type": "error", "name": type(exc).__name__, "value": str(exc)})
    channel.line({"type": "end_of_execution"})


def main():
    limit_processes()
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
    for raw in requests:
        req = json.loads(raw)
        if "op" in req:
            file_op(channel, req)
            continue
        code = req.get("code", "")
        channel.line({"type": "number_of_executions", "execution_count": 1})
        run_cell(code, namespace, channel)
        sys.stdout.flush()
        try:
            send_figures(channel)
        except Exception as exc:
            channel.text("stderr", "could not render a figure: %s\n" % exc)
        send_fd_output(channel, capture)
        channel.finish()


main()
