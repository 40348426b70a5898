"""The sandbox kernel's file operations (ci_kernel.py's file_op), run
outside a sandbox on a directory of the test's own: names refused, symlinks
never followed, FIFOs never opened for long, sizes bounded, the listing's
exact shape, and the kernel's state kept across them."""
import base64
import json
import os
import subprocess

import pytest

# This tree's kernel, or another's (CI_TREE: scripts/mutants.sh points it at
# a mutant's copy).
TREE = os.environ.get("CI_TREE") or os.path.join(os.path.dirname(__file__), "..")
KERNEL = os.path.join(TREE, "mod_code_interpreter", "sandbox", "ci_kernel.py")


class Kernel:
    def __init__(self, tmp_path):
        self.dir = tmp_path / "data"
        self.dir.mkdir()
        conf = {"data_dir": str(self.dir), "capture": str(tmp_path / "capture"),
                "processes": 4096}
        self.proc = subprocess.Popen(["/usr/bin/python3", KERNEL, json.dumps(conf)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=str(self.dir))
        assert self.read_line() == {"type": "ready"}

    def read_line(self):
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), line
        return json.loads(line)

    def send(self, req):
        self.proc.stdin.write(json.dumps(req).encode() + b"\n")
        self.proc.stdin.flush()

    def until_end(self):
        """The lines of the answer, up to its end_of_execution."""
        out = []
        while True:
            line = self.read_line()
            if line == {"type": "end_of_execution"}:
                return out
            out.append(line)

    def ask(self, req):
        self.send(req)
        return self.until_end()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def kernel(tmp_path):
    k = Kernel(tmp_path)
    yield k
    k.close()


def test_list_get_delete(kernel):
    (kernel.dir / "a.txt").write_bytes(b"hello")
    (kernel.dir / "big.bin").write_bytes(bytes(range(256)) * 1000)
    (kernel.dir / "sub").mkdir()
    os.utime(kernel.dir / "a.txt", (1700000000, 1700000000))
    [listing] = kernel.ask({"op": "list"})
    assert listing["type"] == "files"
    assert [f["name"] for f in listing["files"]] == ["a.txt", "big.bin"]
    assert listing["files"][0] == {"name": "a.txt", "bytes": 5, "mtime": 1700000000}
    out = kernel.ask({"op": "get", "name": "big.bin", "max": 1 << 30})
    assert out[0] == {"type": "file", "bytes": 256000}
    assert all(len(base64.b64decode(x["b64"])) <= 48 * 1024 for x in out[1:])
    assert b"".join(base64.b64decode(x["b64"]) for x in out[1:]) == \
        bytes(range(256)) * 1000
    assert kernel.ask({"op": "get", "name": "big.bin", "max": 1000}) == [
        {"type": "too_large", "bytes": 256000}]
    assert kernel.ask({"op": "get", "name": "a.txt", "max": 5}) == [
        {"type": "file", "bytes": 5}, {"type": "data", "b64": "aGVsbG8="}]
    assert kernel.ask({"op": "delete", "name": "a.txt"}) == [{"type": "deleted"}]
    assert not (kernel.dir / "a.txt").exists()
    assert kernel.ask({"op": "delete", "name": "a.txt"}) == [{"type": "not_found"}]
    assert kernel.ask({"op": "delete", "name": "sub"}) == [{"type": "not_found"}]
    assert (kernel.dir / "sub").is_dir()
    # code still runs, its state intact
    kernel.ask({"code": "x = 5"})
    assert {"type": "result", "is_main_result": True, "text": "6"} in \
        kernel.ask({"code": "x + 1"})


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", "..", ".", "",  # check-clone: hostile names
                                  "a/b", "a\nb", "a\rb", "a\0b", "x" * 256, 7, None])
def test_hostile_names_are_refused(kernel, tmp_path, name):
    (tmp_path / "outside.txt").write_text("outside")
    for op in ("get", "delete"):
        assert kernel.ask({"op": op, "name": name, "max": 100}) == [
            {"type": "refused", "value": "not a file name"}]
    assert (tmp_path / "outside.txt").exists()


def test_symlinks_and_fifos_are_not_followed(kernel, tmp_path):
    (tmp_path / "outside.txt").write_text("outside")
    (kernel.dir / "real.txt").write_text("real")
    os.symlink("/etc/passwd", kernel.dir / "passwd")
    os.symlink(str(tmp_path / "outside.txt"), kernel.dir / "out")
    os.symlink("real.txt", kernel.dir / "alias")
    os.mkfifo(kernel.dir / "pipe")
    [listing] = kernel.ask({"op": "list"})
    assert [f["name"] for f in listing["files"]] == ["real.txt"]
    for name in ("passwd", "out", "alias", "pipe"):
        assert kernel.ask({"op": "get", "name": name, "max": 1 << 20}) == [
            {"type": "not_found"}]
        assert kernel.ask({"op": "delete", "name": name}) == [{"type": "not_found"}]
        assert os.path.lexists(kernel.dir / name)
    assert (tmp_path / "outside.txt").read_text() == "outside"


def test_a_data_directory_that_is_a_symlink_is_not_followed(tmp_path):
    k = Kernel(tmp_path)
    try:
        os.rmdir(k.dir)
        os.symlink("/etc", k.dir)
        out = k.ask({"op": "get", "name": "passwd", "max": 1 << 20})
        assert [x["type"] for x in out] == ["error"]
        [listing] = k.ask({"op": "list"})
        assert listing["type"] == "error"
    finally:
        k.close()


def test_odd_names_are_left_out_of_the_listing(kernel):
    for n in (b"new\nline", b"cr\rname", b"bad\xff", b"ok \xc3\xbc.csv"):
        with open(os.path.join(os.fsencode(kernel.dir), n), "wb") as f:
            f.write(b"x")
    [listing] = kernel.ask({"op": "list"})
    assert [f["name"] for f in listing["files"]] == ["ok \u00fc.csv"]


def test_unknown_operations_are_refused(kernel):
    assert kernel.ask({"op": "chmod", "name": "x"}) == [
        {"type": "refused", "value": "unknown operation"}]
