"""Container files (local provider): what the code leaves under /mnt/data is
listed, read (streamed, byte-identical) and deleted through the Containers
API, through the sandbox's own view of its tree: symlinks, FIFOs and
hostile names never reach the host's files."""
import hashlib
import json
import os
import random

import pytest

from test_containers import OTHER, NOT_FOUND, api, error_of, make_container, me, turn  # noqa: F401
from test_containers import resource_checker

FILE_NOT_FOUND = "Container file with id '%s' not found."
BIG = 5 * 1024 * 1024 + 12345


def run_in(server, cid, code, headers):
    tool = {"type": "code_interpreter", "container": cid}
    out = turn(server, [[{"call": code}], [{"text": "{{last_output}}"}]], tools=[tool],
               headers=headers)
    return out


def cfile_id(cid, name):
    return "cfile_" + hashlib.sha256(cid.encode() + b"\0" + name.encode()).hexdigest()[:32]


def files(server, cid, headers, query=""):
    status, listing = api(server, "GET", "/v1/containers/%s/files%s" % (cid, query),
                          headers=headers)
    assert status == 200, listing
    return listing


def content(server, cid, fid, headers):
    status, hdrs, data = server.request(
        "GET", "/v1/containers/%s/files/%s/content" % (cid, fid), headers=headers)
    return status, {k.lower(): v for k, v in hdrs}, data


def big_bytes():
    return random.Random(7).randbytes(BIG)


WRITE = """
import os, random
open('notes.txt', 'w').write('hello\\n')
open('data.bin', 'wb').write(bytes(range(256)) * 4 + b'\\0\\r\\n')
open('big.bin', 'wb').write(random.Random(7).randbytes(%d))
os.mkdir('sub'); open('sub/inner.txt', 'w').write('x')
print(sorted(os.listdir('.')))
""" % BIG


def test_files_listed_read_and_deleted(httpd, model, me):
    c = make_container(httpd, headers=me)
    cid = c["id"]
    assert files(httpd, cid, me) == {"object": "list", "data": [], "first_id": None,
                                     "last_id": None, "has_more": False}
    run_in(httpd, cid, WRITE, me)
    listing = files(httpd, cid, me, "?order=asc&limit=100")
    assert list(resource_checker("ContainerFileListResource").iter_errors(listing)) == []
    one = resource_checker("ContainerFileResource")
    by_path = {f["path"]: f for f in listing["data"]}
    assert sorted(by_path) == ["/mnt/data/big.bin", "/mnt/data/data.bin",
                               "/mnt/data/notes.txt"]
    for name, size in (("notes.txt", 6), ("data.bin", 1027), ("big.bin", BIG)):
        f = by_path["/mnt/data/" + name]
        assert list(one.iter_errors(f)) == []
        assert set(f) == {"id", "object", "created_at", "bytes", "container_id", "path",
                          "source"}
        assert (f["id"], f["object"], f["bytes"], f["container_id"], f["source"]) == (
            cfile_id(cid, name), "container.file", size, cid, "assistant")
        assert abs(f["created_at"] - c["created_at"]) < 600
        status, got = api(httpd, "GET", "/v1/containers/%s/files/%s" % (cid, f["id"]),
                          headers=me)
        assert (status, got) == (200, f)
    assert (listing["first_id"], listing["last_id"]) == (
        listing["data"][0]["id"], listing["data"][-1]["id"])

    status, hdrs, data = content(httpd, cid, cfile_id(cid, "notes.txt"), me)
    assert (status, hdrs["content-type"], hdrs["content-length"], data) == (
        200, "text/plain", "6", b"hello\n")
    status, hdrs, data = content(httpd, cid, cfile_id(cid, "data.bin"), me)
    assert (status, hdrs["content-type"], data) == (
        200, "application/octet-stream", bytes(range(256)) * 4 + b"\0\r\n")
    status, hdrs, data = content(httpd, cid, cfile_id(cid, "big.bin"), me)
    assert (status, hdrs["content-length"]) == (200, str(BIG))
    assert data == big_bytes()

    # ids are stable: the same path keeps its id when rewritten
    run_in(httpd, cid, "open('notes.txt', 'w').write('changed')", me)
    status, got = api(httpd, "GET", "/v1/containers/%s/files/%s" % (
        cid, cfile_id(cid, "notes.txt")), headers=me)
    assert (status, got["bytes"]) == (200, 7)

    fid = cfile_id(cid, "data.bin")
    status, gone = api(httpd, "DELETE", "/v1/containers/%s/files/%s" % (cid, fid),
                       headers=me)
    assert (status, gone) == (200, {"id": fid, "object": "container.file.deleted",
                                    "deleted": True})
    want = (404, {"message": FILE_NOT_FOUND % fid, "type": "invalid_request_error",
                  "param": None, "code": "container_file_not_found"})
    assert error_of(api(httpd, "GET", "/v1/containers/%s/files/%s" % (cid, fid),
                        headers=me)) == want
    assert error_of(api(httpd, "DELETE", "/v1/containers/%s/files/%s" % (cid, fid),
                        headers=me)) == want
    status, _, data = content(httpd, cid, fid, me)
    assert (status, json.loads(data)["error"]) == want
    # the code sees it gone too
    out = run_in(httpd, cid, "import os; print(sorted(os.listdir('.')))", me)
    from test_loop import calls_of
    assert calls_of(out)[0]["outputs"][0]["logs"] == "['big.bin', 'notes.txt', 'sub']\n"


def test_paging(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "import os\nfor i in range(5):\n"
           "    open('f%d.csv' % i, 'w').write('a,b\\n')\n"
           "    os.utime('f%d.csv' % i, (1700000000 + i, 1700000000 + i))", me)
    ids = [cfile_id(cid, "f%d.csv" % i) for i in range(5)]
    page = files(httpd, cid, me, "?limit=2&order=asc")
    assert ([f["id"] for f in page["data"]], page["has_more"]) == (ids[:2], True)
    assert [f["created_at"] for f in page["data"]] == [1700000000, 1700000001]
    page = files(httpd, cid, me, "?limit=2&order=asc&after=" + ids[1])
    assert ([f["id"] for f in page["data"]], page["has_more"]) == (ids[2:4], True)
    page = files(httpd, cid, me, "?limit=2&order=asc&after=" + ids[3])
    assert ([f["id"] for f in page["data"]], page["has_more"]) == (ids[4:], False)
    page = files(httpd, cid, me)
    assert [f["id"] for f in page["data"]] == ids[::-1]
    assert page["first_id"] == ids[4] and page["last_id"] == ids[0]
    status, hdrs, _ = content(httpd, cid, ids[0], me)
    assert (status, hdrs["content-type"]) == (200, "text/csv")
    for bad in ("?limit=0", "?limit=101", "?limit=x"):
        assert error_of(api(httpd, "GET", "/v1/containers/%s/files%s" % (cid, bad),
                            headers=me))[0] == 400
    assert error_of(api(httpd, "GET", "/v1/containers/%s/files?order=up" % cid,
                        headers=me))[0] == 400


def host_passwd():
    with open("/etc/passwd", "rb") as f:
        return f.read()


def test_symlinks_and_fifos_are_never_served(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "import os\n"
           "open('real.txt', 'w').write('real')\n"
           "os.symlink('/etc/passwd', 'passwd')\n"
           "os.symlink('real.txt', 'alias.txt')\n"
           "os.symlink('/mnt/data', 'loop')\n"
           "os.mkfifo('pipe')\n", me)
    listing = files(httpd, cid, me)
    assert [f["path"] for f in listing["data"]] == ["/mnt/data/real.txt"]
    secret = host_passwd()
    for name in ("passwd", "alias.txt", "pipe", "loop"):
        fid = cfile_id(cid, name)
        for status, _, data in (content(httpd, cid, fid, me),
                                httpd.request("GET", "/v1/containers/%s/files/%s" % (
                                    cid, fid), headers=me),
                                httpd.request("DELETE", "/v1/containers/%s/files/%s" % (
                                    cid, fid), headers=me)):
            assert status == 404
            assert json.loads(data)["error"]["message"] == FILE_NOT_FOUND % fid
            assert secret not in data and b"root:" not in data
    # the symlinks are still there, untouched (a DELETE never unlinked them)
    from test_loop import calls_of
    out = run_in(httpd, cid, "import os; print(sorted(os.listdir('.')))", me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == \
        "['alias.txt', 'loop', 'passwd', 'pipe', 'real.txt']\n"
    # a file replaced by a symlink is a file no more (the kernel itself never
    # follows one: test_kernel_files.py)
    run_in(httpd, cid, "import os; os.remove('real.txt'); "
           "os.symlink('/etc/passwd', 'real.txt')", me)
    status, _, data = content(httpd, cid, cfile_id(cid, "real.txt"), me)
    assert status == 404 and b"root:" not in data


def test_hostile_names(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "import os\n"
           "for n in ['new\\nline', 'carriage\\rreturn', 'ok name \u00fc.csv', '-x',"
           " '..hidden', 'back\\\\slash']:\n"
           "    open(n, 'w').write('x')\n"
           "fd = os.open(b'bad\\xff\\xfe', os.O_CREAT | os.O_WRONLY); os.close(fd)\n", me)
    listing = files(httpd, cid, me, "?order=asc")
    assert sorted(f["path"] for f in listing["data"]) == [
        "/mnt/data/-x", "/mnt/data/..hidden", "/mnt/data/back\\slash",
        "/mnt/data/ok name \u00fc.csv"]
    for f in listing["data"]:
        status, _, data = content(httpd, cid, f["id"], me)
        assert (status, data) == (200, b"x")
    # ids that are paths lead nowhere
    for fid in ("..", "../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd",  # check-clone: a hostile name
                "cfile_x%00y", "cfile_x%0Ay"):
        status, _, data = httpd.request(
            "GET", "/v1/containers/%s/files/%s/content" % (cid, fid), headers=me)
        assert status in (400, 404) and b"root:" not in data
    status, _, _ = httpd.request("GET", "/v1/containers/%s/files/x/other" % cid,
                                 headers=me)
    assert status == 404
    status, _, _ = httpd.request("POST", "/v1/containers/%s/files/x/content" % cid,
                                 headers=me)
    assert status == 405


def test_foreign_and_unknown_read_as_not_found(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "open('mine.txt', 'w').write('private')", me)
    fid = cfile_id(cid, "mine.txt")
    want = (404, {"message": NOT_FOUND % cid, "type": "invalid_request_error",
                  "param": None, "code": "container_not_found"})
    base = "/v1/containers/%s/files" % cid
    for method, path in (("GET", base), ("GET", base + "/" + fid),
                         ("DELETE", base + "/" + fid), ("GET", base + "/" + fid + "/content")):
        status, _, data = httpd.request(method, path, headers=OTHER)
        assert (status, json.loads(data)["error"]) == want, path
        assert b"private" not in data
    unknown = "cntr_" + "0" * 48
    status, body = api(httpd, "GET", "/v1/containers/%s/files" % unknown, headers=me)
    assert (status, body["error"]["message"]) == (404, NOT_FOUND % unknown)
    other_fid = cfile_id(cid, "nothere.txt")
    assert error_of(api(httpd, "GET", base + "/" + other_fid, headers=me)) == (
        404, {"message": FILE_NOT_FOUND % other_fid, "type": "invalid_request_error",
              "param": None, "code": "container_file_not_found"})
    # still there for its owner
    status, _, data = content(httpd, cid, fid, me)
    assert (status, data) == (200, b"private")


def test_a_file_operation_waits_for_the_run_in_progress(httpd, model, me):
    """Files are read in the container's turn: never beside running code."""
    import threading
    from conftest import wait_until
    cid = make_container(httpd, headers=me)["id"]

    def executing():
        line = httpd.status_lines()["CodeInterpreterContainers"]
        return dict(f.split("=") for f in line.split())["executing"] == "1"

    done = {}
    code = ("import time\nopen('first.txt', 'w').write('1')\ntime.sleep(1.5)\n"
            "open('last.txt', 'w').write('2')")
    t = threading.Thread(target=lambda: done.setdefault("out", run_in(httpd, cid, code,
                                                                        me)))
    t.start()
    wait_until(executing, "the run to be executing")
    listing = files(httpd, cid, me, "?order=asc")
    t.join()
    # listed after the run's end: its last file is there
    assert sorted(f["path"] for f in listing["data"]) == ["/mnt/data/first.txt",
                                                          "/mnt/data/last.txt"]
    assert "out" in done


@pytest.fixture(scope="module")
def fresh(model):
    """A server of this module's own: its children's peak memory is this
    module's doing."""
    from conftest import Httpd, base_conf
    server = Httpd("container-files", base_conf(model.port)).start()
    yield server
    server.stop()


def peaks(server):
    """pid -> peak resident kB (VmHWM) of the server's children."""
    out = {}
    for pid in server._children(server.parent_pid()):
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        out[pid] = int(line.split()[1])
        except OSError:
            pass
    return out


def test_a_large_download_is_streamed(fresh, model, me):
    size = 48 * 1024 * 1024
    cid = make_container(fresh, headers=me)["id"]
    run_in(fresh, cid, "import random\nr = random.Random(11)\n"
           "with open('large.bin', 'wb') as f:\n"
           "    for i in range(48):\n"
           "        f.write(r.randbytes(1 << 20))", me)
    before = peaks(fresh)
    status, hdrs, data = content(fresh, cid, cfile_id(cid, "large.bin"), me)
    after = peaks(fresh)
    assert (status, hdrs["content-length"], len(data)) == (200, str(size), size)
    r = random.Random(11)
    assert data == b"".join(r.randbytes(1 << 20) for _ in range(48))
    if os.environ.get("CI_SANITIZE"):
        return      # ASan's quarantine keeps what was freed: peaks say nothing
    grown = max(after[pid] - before.get(pid, 0) for pid in after)
    # the whole file held at once would be 48 MB (and 64 MB of base64)
    assert grown < 16 * 1024, "a child's peak memory grew by %d kB" % grown
