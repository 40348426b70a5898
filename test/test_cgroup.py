"""Sandboxes in cgroup v2 (CodeInterpreterSandboxCgroup): each start of a
local sandbox in a cgroup of its own under the directory the operator
gives, its processes all inside before any of its code runs, the whole
cgroup killed and removed when the sandbox ends; the supervisor in its own
leaf; leftovers of a supervisor before it killed at its start; a directory
that is no cgroup refused at httpd's start. What the kernel holds there
(cpu.weight, cpu.max, pids.max, memory.max) is checked where the host
gives the directory those controllers; this host's cgroup v2 may have none
(a hybrid layout), and the mode shown then says so."""
import os
import signal
import subprocess

import pytest

from conftest import Httpd, base_conf, require, script_input, wait_until
from procstat import proc_table

CONF = """
CodeInterpreterSandboxCgroup %s
CodeInterpreterSandboxCPUs 0.5
<Location /server-status>
  SetHandler server-status
</Location>
"""


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.startswith("cgroup2 "):
                return left.split()[4]
    return None


def read(path):
    with open(path) as f:
        return f.read()


def procs_of(path):
    return {int(p) for p in read(os.path.join(path, "cgroup.procs")).split()}


def sandbox_cgroups(top):
    return sorted(n for n in os.listdir(top) if n.startswith("sb-"))


def remove_tree(top):
    """TOP and every cgroup below it, their processes killed first."""
    if not os.path.isdir(top):
        return
    for name in os.listdir(top):
        sub = os.path.join(top, name)
        if os.path.isdir(sub):
            remove_tree(sub)
    for pid in procs_of(top):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not procs_of(top), "the processes of %s to exit" % top)
    os.rmdir(top)


@pytest.fixture
def top(request):
    mount = cgroup2_mount()
    require(os.geteuid() == 0 and mount,
            "sandboxes' cgroups need root and a cgroup v2 mount")
    path = os.path.join(mount, "ci-test-%d-%s" % (os.getpid(), request.node.name[:20]))
    remove_tree(path)
    yield path
    remove_tree(path)


@pytest.fixture
def server(model, top):
    server = Httpd("cgroup", base_conf(model.port, CONF % top)).start()
    yield server
    server.stop()


def supervisor_of(server):
    """The supervisor, once it is named (at the start of its main) and in
    its cgroup leaf (before it drops its privileges)."""
    def named():
        parent = server.parent_pid()
        return [pid for pid, (ppid, comm, _) in proc_table().items()
                if parent and ppid == parent and comm == "ci-supervisor"]
    wait_until(named, "the supervisor")
    [sup] = named()
    return sup


def tree_of(pid):
    """PID and every process below it."""
    table = proc_table()
    found, frontier = {pid}, {pid}
    while frontier:
        frontier = {p for p, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def run(server, cid, code):
    status, _, body = server.post("/v1/responses", {
        "model": "m", "tools": [{"type": "code_interpreter", "container": cid}],
        "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])})
    assert status == 200, body
    return body["output"][0]["outputs"]


def container(server, name):
    status, _, c = server.post("/v1/containers", {"name": name})
    assert status == 200, c
    return c["id"]


# A cell that leaves a process behind in a process group of its own: still
# one of the sandbox's, in its cgroup.
LEAVE_BEHIND = ("import subprocess\n"
                "p = subprocess.Popen(['sleep', '1000'], process_group=0)\n"
                "print('left', p.pid > 0)")


def test_each_sandbox_is_a_cgroup_of_its_own_killed_whole_at_its_end(server, top):
    sup = supervisor_of(server)
    wait_until(lambda: sup in procs_of(os.path.join(top, "supervisor")),
               "the supervisor in its cgroup")
    first, second = container(server, "one"), container(server, "two")
    assert run(server, first, LEAVE_BEHIND) == [{"type": "logs", "logs": "left True\n"}]
    assert run(server, second, "print(2)") == [{"type": "logs", "logs": "2\n"}]
    groups = sandbox_cgroups(top)
    assert len(groups) == 2, groups
    members = {g: procs_of(os.path.join(top, g)) for g in groups}
    boxes = [pid for pid, (ppid, comm, _) in proc_table().items()
             if ppid == sup and comm == "bwrap"]
    assert len(boxes) == 2, boxes
    # every process of each sandbox, the one left behind too, in one cgroup
    # of its own, and nothing else there
    trees = sorted((tree_of(b) for b in boxes), key=len)
    assert sorted(members.values(), key=len) == trees
    assert len(trees[1]) >= len(trees[0]) + 1          # the sleep
    # deleted: its cgroup goes, with every process in it
    [left_group] = [g for g in groups if members[g] == trees[1]]
    status, _, _ = server.request("DELETE", "/v1/containers/" + first)
    assert status == 200
    wait_until(lambda: left_group not in sandbox_cgroups(top),
               "the deleted container's cgroup to be removed")
    # (removed only once none of its processes runs: a zombie may wait for
    # its reaper a moment longer)
    table = proc_table()
    assert not [p for p in trees[1] if p in table and table[p][2][0] != "Z"]
    assert sandbox_cgroups(top) == [g for g in groups if g != left_group]


def test_the_bounds_are_the_kernels_where_the_controllers_are_given(server, top):
    """With cpu, memory and pids given to the directory: each sandbox's
    cgroup holds its weight, its ceiling (0.5 CPU), its process count
    (processes=64, and bubblewrap's own and the relay's) and its tier's
    memory (1g); server-status says cgroup2. Without them (a hybrid host):
    the cgroups only contain, and status says the scheduling fallback."""
    cid = container(server, "bounds")
    assert run(server, cid, "print(1)") == [{"type": "logs", "logs": "1\n"}]
    [group] = sandbox_cgroups(top)
    enabled = read(os.path.join(top, "cgroup.subtree_control")).split()
    _, _, page = server.request("GET", "/server-status?auto")
    page = page.decode()
    if "cpu" in enabled:
        path = os.path.join(top, group)
        assert read(os.path.join(path, "cpu.weight")) == "100\n"
        assert read(os.path.join(path, "cpu.max")) == "50000 100000\n"
        assert "CodeInterpreterSandboxCPU: cgroup2\n" in page
        if "pids" in enabled:
            assert read(os.path.join(path, "pids.max")) == "68\n"
        if "memory" in enabled:
            assert read(os.path.join(path, "memory.max")) == "%d\n" % (1 << 30)
    else:
        assert "CodeInterpreterSandboxCPU: sched_idle\n" in page
        assert ("CodeInterpreterSandboxCgroup: a cgroup per sandbox under %s, killed "
                "whole when it ends; no controller is enabled there, so no bound is "
                "held by it\n" % top) in page


def test_a_supervisor_starting_kills_what_an_earlier_one_left(model, top):
    """A cgroup of a sandbox that outlived its supervisor (a process in it):
    killed and removed when the next supervisor starts, before it serves."""
    os.makedirs(os.path.join(top, "sb-1-7"))
    stray = subprocess.Popen(["sleep", "1000"])
    with open(os.path.join(top, "sb-1-7", "cgroup.procs"), "w") as f:
        f.write(str(stray.pid))
    server = Httpd("cgroup-left", base_conf(model.port, CONF % top)).start()
    try:
        wait_until(lambda: stray.poll() is not None, "the stray process to be killed")
        assert stray.returncode == -signal.SIGKILL
        wait_until(lambda: sandbox_cgroups(top) == [], "the stray cgroup to be removed")
    finally:
        if stray.poll() is None:
            stray.kill()
        server.stop()


def test_a_directory_that_is_no_cgroup_is_refused_at_start(model, tmp_path):
    """An explicit directory outside cgroup v2: httpd does not start (the
    bounds asked for would not be held), and nothing is made there."""
    require(os.geteuid() == 0, "the supervisor's cgroup needs root")
    path = str(tmp_path / "not-a-cgroup")
    server = Httpd("cgroup-bad", base_conf(model.port, CONF % path))
    server.write_conf()
    server.ctl("start", check=False)
    wait_until(lambda: "AH00020: Configuration Failed, exiting" in server.log(),
               "httpd to give up its start")
    assert ("CI0673: CodeInterpreterSandboxCgroup %s cannot be used: %s is not in a "
            "cgroup v2 file system\n" % (path, path)) in server.log()
    assert not os.path.exists(path)
    assert not os.path.exists(os.path.join(server.root, "httpd.pid"))
