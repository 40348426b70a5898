"""The sandbox kernel's hosted shell calls (ci_kernel.py's shell_call), run
outside a sandbox on a directory of the test's own, as test_kernel_files.py
runs it: each command with bash in the data directory, one after another,
exit codes and output exactly as the kernel reports them, output cut at
max_output characters, timeouts and interrupts that end the command's
process group and the call, background processes that do not hold the call
open, and the files a call changed."""
import os
import signal

import pytest

from conftest import process_exists, process_exited, wait_until
from test_kernel_files import Kernel

MB = 1024 * 1024


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path)
    yield k
    k.close()


@pytest.fixture
def leftovers():
    """Pids of processes a test leaves running on purpose: killed after it."""
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def shell(kernel, commands, timeout_ms=60000, max_output=10000):
    return kernel.ask({"shell": {"commands": commands, "timeout_ms": timeout_ms,
                                 "max_output": max_output}})


def exited(stdout, stderr="", code=0):
    return {"type": "command", "stdout": stdout, "stderr": stderr, "exit_code": code}


def timed_out(stdout="", stderr=""):
    return {"type": "command", "stdout": stdout, "stderr": stderr, "timeout": True}


def value_of(kernel, code):
    """The value of CODE's last expression in the kernel (its repr)."""
    out = kernel.ask({"code": code})
    results = [x["text"] for x in out if x["type"] == "result"]
    assert len(results) == 1, out
    return results[0]


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read()


def running(pid):
    """PID is alive and not a zombie."""
    return process_exists(pid) and not process_exited(pid)


def test_exit_codes_output_and_order(kernel, tmp_path):
    data = os.path.realpath(kernel.dir)
    # the kernel's own working directory is not the commands'
    kernel.ask({"code": "import os; os.chdir('/')"})
    assert shell(kernel, [
        "echo out; echo err >&2; pwd",
        "exit 3",
        "kill -TERM $$",
        "echo one > seq.txt",
        "echo two >> seq.txt; cat seq.txt",
        "cat; readlink /proc/self/fd/0",        # stdin is /dev/null: no wait
        "printf 'a\\0b'; printf '\\377' >&2",
        "no-such-command-here",
    ]) == [
        exited("out\n" + data + "\n", "err\n"),
        exited("", code=3),
        exited("", code=128 + signal.SIGTERM),
        exited(""),
        exited("one\ntwo\n"),
        exited("/dev/null\n"),
        exited("a\ufffdb", "\ufffd"),
        exited("", "bash: line 1: no-such-command-here: command not found\n", 127),
        {"type": "files", "changed": ["seq.txt"]},
    ]
    # nothing the commands wrote went to the kernel's own descriptors
    assert (tmp_path / "capture").stat().st_size == 0
    assert kernel.ask({"code": "print('after')"}) == [
        {"type": "number_of_executions", "execution_count": 1},
        {"type": "stdout", "text": "after"}, {"type": "stdout", "text": "\n"}]


def test_a_call_that_changes_nothing_has_no_files_line(kernel):
    assert shell(kernel, ["true", "echo hi"]) == [exited(""), exited("hi\n")]


def test_a_command_that_cannot_start_is_exit_126(kernel):
    assert shell(kernel, ["echo a\0b", "echo " + "x" * 200000, "echo next"]) == [
        exited("", "bash: cannot run the command: embedded null byte\n", 126),
        # one argument of exec is at most 128 KiB (MAX_ARG_STRLEN)
        exited("", "bash: cannot run the command: [Errno 7] Argument list too long: "
                   "'/bin/bash'\n", 126),
        exited("next\n")]


def test_files_are_shared_with_python(kernel):
    assert shell(kernel, ["echo from-shell > s.txt"]) == [
        exited(""), {"type": "files", "changed": ["s.txt"]}]
    assert value_of(kernel, "open('s.txt').read()") == repr("from-shell\n")
    kernel.ask({"code": "open('p.txt', 'w').write('from-python')"})
    assert shell(kernel, ["cat p.txt"]) == [exited("from-python")]


def test_a_timeout_kills_the_group_and_stops_the_call(kernel, leftovers):
    out = shell(kernel, [
        "echo started; echo $$ > main.pid; sleep 1000 & echo $! > child.pid; "
        "echo late >&2; wait",
        "echo never > never.txt",
    ], timeout_ms=300)
    assert out == [timed_out("started\n", "late\n"),
                   {"type": "files", "changed": ["child.pid", "main.pid"]}]
    pids = [int((kernel.dir / name).read_text()) for name in ("main.pid", "child.pid")]
    leftovers.extend(pids)
    for pid in pids:
        wait_until(lambda: process_exited(pid), "process %d to be killed" % pid)
    assert not (kernel.dir / "never.txt").exists()
    # the kernel goes on: code and commands
    assert value_of(kernel, "1 + 1") == "2"
    assert shell(kernel, ["echo again"]) == [exited("again\n")]


def test_an_interrupt_ends_the_command_and_the_call(kernel, leftovers):
    kernel.send({"shell": {"commands": ["echo $$ > main.pid; echo started; exec sleep 1000",
                                         "echo never > never.txt"],
                            "timeout_ms": 600000, "max_output": 100}})
    pid_file = kernel.dir / "main.pid"
    pid = wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() and
                     int(pid_file.read_text()), "the command to start")
    leftovers.append(pid)
    wait_until(lambda: cmdline(pid) == b"sleep\x001000\x00", "the command to exec sleep")
    os.kill(kernel.proc.pid, signal.SIGINT)       # as the supervisor does
    assert kernel.until_end() == [timed_out("started\n"),
                                 {"type": "files", "changed": ["main.pid"]}]
    wait_until(lambda: process_exited(pid), "the command to be killed")
    assert not (kernel.dir / "never.txt").exists()
    # the kernel survived its KeyboardInterrupt-to-be, and its state
    kernel.ask({"code": "x = 41"})
    assert value_of(kernel, "x + 1") == "42"
    assert shell(kernel, ["echo again"]) == [exited("again\n")]


def test_a_background_process_does_not_hold_the_call(kernel, leftovers):
    # Each inherits the command's stdout and stderr; with pipes the call
    # would wait for them. It ends while they still run.
    out = shell(kernel, ["sleep 1000 & echo $!",
                         "nohup sleep 1000 2>&1 & echo $!",
                         "echo last"])
    pids = [int(out[0]["stdout"]), int(out[1]["stdout"])]
    leftovers.extend(pids)
    assert out == [exited("%d\n" % pids[0]), exited("%d\n" % pids[1]), exited("last\n")]
    for pid in pids:
        assert running(pid)
        # (nohup may not have become sleep yet)
        wait_until(lambda: cmdline(pid) == b"sleep\x001000\x00", "%d to be sleep" % pid)
        assert running(pid)


@pytest.mark.parametrize("command,max_output,stdout,stderr", [
    ("printf 'h\u00e9llo w\u00f6rld'; printf ERR >&2", 5, "h\u00e9llo", ""),
    ("printf abc; printf x >&2", 3, "abc", ""),
    ("printf ab; printf '\u2603\u2603\u2603\u2603\u2603\u2603\u2603\u2603\u2603' >&2", 8,
     "ab", "\u2603" * 6),
    ("printf '\U0001F600%.0s' 1 2 3 4 5 6 7 8 9 10", 3, "\U0001F600" * 3, ""),
    ("printf '\\377\\376\\375'; printf 'e' >&2", 2, "\ufffd\ufffd", ""),
    ("printf ab; printf cd >&2", 0, "", ""),
    ("printf '\U0001F600'", 1, "\U0001F600", ""),
    ("printf 'a\\0\\0'", 2, "a\ufffd", ""),
])
def test_output_is_cut_at_max_output_characters(kernel, command, max_output, stdout, stderr):
    assert shell(kernel, [command], max_output=max_output) == [exited(stdout, stderr)]


def vm_hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_huge_output_is_read_no_further_than_needed(kernel):
    before = vm_hwm(kernel.proc.pid)
    assert shell(kernel, ["head -c %d /dev/zero | tr '\\0' a; head -c %d /dev/zero >&2"
                          % (96 * MB, 96 * MB)], max_output=1000) == [exited("a" * 1000)]
    # 192 MB written; the kernel's peak memory grew by far less than either
    assert vm_hwm(kernel.proc.pid) - before < 8 * MB
