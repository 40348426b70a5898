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
import sys
import traceback

CONFIG = json.loads(sys.argv[1])
MAX_OUTPUT = int(CONFIG.get("max_output", 65536))
FD_CAPTURE = "/tmp/.fd-output"
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
        code = json.loads(raw).get("code", "")
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
