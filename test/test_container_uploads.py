"""Files into containers (local provider): multipart uploads streamed to the
sandbox, files of the model upstream's Files API by id (on upload, on
container create), the operator's limits, and what a refused or broken
upload leaves (nothing)."""
import http.client
import json
import os
import random

import pytest

from test_containers import OTHER, NOT_FOUND, api, error_of, make_container, me  # noqa: F401
from test_containers import resource_checker
from test_container_files import cfile_id, content, files, fresh, peaks, run_in  # noqa: F401
from conftest import wait_until
from test_loop import calls_of


def multipart(filename, data, boundary="----ci-test-boundary-7MA4YWxkTrZu0gW",
              extra=()):
    """A multipart/form-data body with a "file" part (and EXTRA fields)."""
    out = b""
    for name, value in extra:
        out += (b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n"
                % (boundary.encode(), name.encode(), value.encode()))
    out += (b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" % (boundary.encode(),
                                                                  filename.encode()))
    out += data + b"\r\n--%s--\r\n" % boundary.encode()
    return out, "multipart/form-data; boundary=" + boundary


def upload(server, cid, filename, data, headers, path="/v1/containers"):
    body, ctype = multipart(filename, data)
    status, _, answer = server.request("POST", "%s/%s/files" % (path, cid), body,
                                       dict(headers, **{"Content-Type": ctype}))
    return status, json.loads(answer)


def names_seen_by_code(server, cid, headers):
    out = run_in(server, cid, "import os; print(sorted(os.listdir('/mnt/data')))", headers)
    return calls_of(out)[0]["outputs"][0]["logs"]


def model_file(model, headers, filename, data, purpose="user_data"):
    """A file of the fake model's Files API, uploaded as its owner."""
    body, ctype = multipart(filename, data, extra=(("purpose", purpose),))
    conn = http.client.HTTPConnection("127.0.0.1", model.port, timeout=10)
    conn.request("POST", "/v1/files", body=body,
                 headers=dict(headers, **{"Content-Type": ctype}))
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, answer
    return answer


CSV = b"name,price\napple,3\npear,5\n"


def test_upload_then_use_from_code(httpd, model, me):
    c = make_container(httpd, headers=me)
    cid = c["id"]
    status, f = upload(httpd, cid, "prices.csv", CSV, me)
    assert status == 200, f
    assert list(resource_checker("ContainerFileResource").iter_errors(f)) == []
    assert (f["id"], f["object"], f["bytes"], f["container_id"], f["path"],
            f["source"]) == (cfile_id(cid, "prices.csv"), "container.file", len(CSV), cid,
                             "/mnt/data/prices.csv", "user")
    assert abs(f["created_at"] - c["created_at"]) < 600
    assert files(httpd, cid, me)["data"] == [f]
    out = run_in(httpd, cid, "import csv\nrows = list(csv.DictReader(open("
                 "'/mnt/data/prices.csv')))\nprint(sum(int(r['price']) for r in rows))", me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == "8\n"
    status, hdrs, data = content(httpd, cid, f["id"], me)
    assert (status, hdrs["content-type"], data) == (200, "text/csv", CSV)
    # once code changes it, it is the assistant's
    run_in(httpd, cid, "open('/mnt/data/prices.csv', 'a').write('fig,7\\n')", me)
    status, got = api(httpd, "GET", "/v1/containers/%s/files/%s" % (cid, f["id"]),
                      headers=me)
    assert (status, got["bytes"], got["source"]) == (200, len(CSV) + 6, "assistant")


def test_an_upload_replaces_a_file_and_never_writes_through_a_symlink(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "import os\nopen('/mnt/data/target.txt', 'w').write('keep')\n"
           "os.symlink('/mnt/data/target.txt', '/mnt/data/link.txt')", me)
    status, f = upload(httpd, cid, "link.txt", b"new bytes", me)
    assert (status, f["bytes"], f["source"]) == (200, 9, "user")
    out = run_in(httpd, cid, "import os\nprint(os.path.islink('/mnt/data/link.txt'), "
                 "open('/mnt/data/link.txt').read(), open('/mnt/data/target.txt').read())",
                 me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == "False new bytes keep\n"
    # the same name again: replaced, same id
    status, again = upload(httpd, cid, "link.txt", b"newer", me)
    assert (status, again["id"], again["bytes"]) == (200, f["id"], 5)


def test_binary_upload_is_byte_identical_and_streamed(fresh, model, me):
    size = 24 * 1024 * 1024
    data = random.Random(5).randbytes(size)
    cid = make_container(fresh, headers=me)["id"]
    before = peaks(fresh)
    status, f = upload(fresh, cid, "blob.bin", data, me)
    after = peaks(fresh)
    assert (status, f["bytes"]) == (200, size), f
    status, _, back = content(fresh, cid, f["id"], me)
    assert status == 200 and back == data
    out = run_in(fresh, cid, "import hashlib\nprint(hashlib.sha256(open("
                 "'/mnt/data/blob.bin', 'rb').read()).hexdigest())", me)
    import hashlib
    assert calls_of(out)[0]["outputs"][0]["logs"] == hashlib.sha256(data).hexdigest() + "\n"
    if os.environ.get("CI_SANITIZE"):
        return      # ASan's quarantine keeps what was freed: peaks say nothing
    grown = max(after[pid] - before.get(pid, 0) for pid in after)
    # the body held whole would be 24 MB
    assert grown < 8 * 1024, "a child's peak memory grew by %d kB" % grown


@pytest.mark.parametrize("given,stored", [
    ("../../etc/passwd", "passwd"),  # check-clone: a hostile name
    ("C:\\Users\\me\\report.csv", "report.csv"),
    ("résumé 2024.txt", "résumé 2024.txt"),
])
def test_a_path_in_the_filename_keeps_only_its_last_segment(httpd, model, me, given,
                                                            stored):
    cid = make_container(httpd, headers=me)["id"]
    status, f = upload(httpd, cid, given, b"x", me)
    assert (status, f["path"], f["id"]) == (200, "/mnt/data/" + stored,
                                            cfile_id(cid, stored))
    assert names_seen_by_code(httpd, cid, me) == repr([stored]) + "\n"


@pytest.mark.parametrize("given", ["..", ".", "dir/", ".hidden", ".upload-1234"])
def test_names_that_cannot_be_files_are_refused(httpd, model, me, given):
    cid = make_container(httpd, headers=me)["id"]
    assert error_of(upload(httpd, cid, given, b"x", me)) == (400, {
        "message": "'%s' cannot be a container file's name." % given,
        "type": "invalid_request_error", "param": "file", "code": "invalid_filename"})
    assert files(httpd, cid, me)["data"] == []


def test_malformed_and_truncated_bodies_leave_nothing(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    body, ctype = multipart("cut.bin", b"y" * 100000)
    cut = body[:-len(b"\r\n--" + b"----ci-test-boundary-7MA4YWxkTrZu0gW" + b"--\r\n") - 10]
    status, _, answer = httpd.request("POST", "/v1/containers/%s/files" % cid, cut,
                                      dict(me, **{"Content-Type": ctype}))
    assert (status, json.loads(answer)["error"]) == (400, {
        "message": "The upload of 'cut.bin' could not be read: the multipart body ended "
                   "inside the data of a part, without its close delimiter",
        "type": "invalid_request_error", "param": None, "code": "invalid_upload"})
    status, _, answer = httpd.request("POST", "/v1/containers/%s/files" % cid,
                                      b"--x\r\nContent-Disposition: form-data; "
                                      b"name=\"purpose\"\r\n\r\nv\r\n--x--\r\n",
                                      dict(me, **{"Content-Type":
                                                  "multipart/form-data; boundary=x"}))
    assert (status, json.loads(answer)["error"]) == (400, {
        "message": "The upload could not be read: the body has no \"file\" part with a "
                   "filename",
        "type": "invalid_request_error", "param": "file", "code": "invalid_upload"})
    assert names_seen_by_code(httpd, cid, me) == "[]\n"


def test_the_limits_each_refused_and_nothing_half_written(httpd, model, me):
    path = "/limited/v1/containers"
    cid = make_container(httpd, path=path, headers=me)["id"]
    assert error_of(upload(httpd, cid, "big.bin", b"z" * 1025, me, path)) == (413, {
        "message": "File 'big.bin' is larger than this server accepts (max_file=1024 "
                   "bytes).",
        "type": "invalid_request_error", "param": None, "code": "file_too_large"})
    for name in ("a", "b"):
        assert upload(httpd, cid, name, b"q" * 1000, me, path)[0] == 200
    # 2000 bytes held: 48 more fit in max_bytes=2048, not 49
    assert error_of(upload(httpd, cid, "c", b"q" * 49, me, path)) == (413, {
        "message": "File 'c' does not fit: container '%s' may hold 2048 bytes of files "
                   "(max_bytes)." % cid,
        "type": "invalid_request_error", "param": None, "code": "container_full"})
    assert upload(httpd, cid, "c", b"q" * 48, me, path)[0] == 200
    assert error_of(upload(httpd, cid, "d", b"", me, path)) == (400, {
        "message": "Container '%s' holds as many files as this server allows "
                   "(max_files=3); delete one first." % cid,
        "type": "invalid_request_error", "param": None, "code": "too_many_files"})
    # replacing a file is not one more, and its old bytes do not count
    assert upload(httpd, cid, "a", b"r" * 1000, me, path)[0] == 200
    out = run_in(httpd, cid, "import os; print(sorted((n, os.path.getsize('/mnt/data/' "
                 "+ n)) for n in os.listdir('/mnt/data')))", me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == (
        "[('a', 1000), ('b', 1000), ('c', 48)]\n")


def test_upload_by_file_id_from_the_upstream_files_api(httpd, model, me):
    f = model_file(model, me, "sales.csv", CSV)
    cid = make_container(httpd, headers=me)["id"]
    status, got = api(httpd, "POST", "/v1/containers/%s/files" % cid,
                      {"file_id": f["id"]}, me)
    assert status == 200, got
    assert (got["path"], got["bytes"], got["source"]) == ("/mnt/data/sales.csv",
                                                          len(CSV), "user")
    status, _, data = content(httpd, cid, got["id"], me)
    assert (status, data) == (200, CSV)
    # the upstream was asked with the caller's own credentials
    asked = [r for r in model.requests() if r["path"].startswith("/v1/files/")]
    assert [(r["method"], r["path"]) for r in asked] == [
        ("GET", "/v1/files/%s" % f["id"]), ("GET", "/v1/files/%s/content" % f["id"])]
    assert all(dict(r["headers"])["Authorization"] == me["Authorization"] for r in asked)


def test_unknown_and_foreign_file_ids_are_named(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    theirs = model_file(model, OTHER, "theirs.csv", CSV)
    for fid in ("file-nope", theirs["id"]):
        assert error_of(api(httpd, "POST", "/v1/containers/%s/files" % cid,
                            {"file_id": fid}, me)) == (400, {
            "message": "File with id '%s' not found." % fid,
            "type": "invalid_request_error", "param": "file_id",
            "code": "file_not_found"})
    assert error_of(api(httpd, "POST", "/v1/containers", {
        "name": "x", "file_ids": ["file-gone"]}, me)) == (400, {
            "message": "File with id 'file-gone' not found.",
            "type": "invalid_request_error", "param": "file_ids",
            "code": "file_not_found"})
    # The refused create made no container (ids only: a GET is a use, and
    # would move last_active_at past the listing's).
    assert [c["id"] for c in api(httpd, "GET", "/v1/containers?limit=100",
                                 headers=me)[1]["data"]] == [cid]


def test_container_create_with_file_ids(httpd, model, me):
    one = model_file(model, me, "one.txt", b"first")
    two = model_file(model, me, "two.bin", bytes(range(256)))
    status, c = api(httpd, "POST", "/v1/containers", {
        "name": "with files", "file_ids": [one["id"], two["id"]]}, me)
    assert status == 200, c
    listing = files(httpd, c["id"], me, "?order=asc")
    assert sorted((f["path"], f["bytes"], f["source"]) for f in listing["data"]) == [
        ("/mnt/data/one.txt", 5, "user"), ("/mnt/data/two.bin", 256, "user")]


def test_an_upstream_file_over_max_file_is_refused_before_its_content(httpd, model, me):
    f = model_file(model, me, "large.bin", b"L" * 2000)
    cid = make_container(httpd, path="/limited/v1/containers", headers=me)["id"]
    assert error_of(api(httpd, "POST", "/limited/v1/containers/%s/files" % cid,
                        {"file_id": f["id"]}, me)) == (413, {
        "message": "File 'large.bin' is larger than this server accepts (max_file=1024 "
                   "bytes).",
        "type": "invalid_request_error", "param": None, "code": "file_too_large"})
    assert not [r for r in model.requests() if r["path"].endswith("/content")]


def test_uploads_need_the_containers_owner(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    assert error_of(upload(httpd, cid, "x.txt", b"x", OTHER)) == (404, {
        "message": NOT_FOUND % cid, "type": "invalid_request_error", "param": None,
        "code": "container_not_found"})
    assert error_of(api(httpd, "POST", "/v1/containers/%s/files" % cid,
                        {"file_id": "file-x"}, OTHER))[0] == 404
    assert files(httpd, cid, me)["data"] == []


def test_a_client_leaving_mid_upload_leaves_nothing(httpd, model, me):
    import socket
    cid = make_container(httpd, headers=me)["id"]
    run_in(httpd, cid, "open('/mnt/data/kept.txt', 'w').write('k')", me)
    body, ctype = multipart("partial.bin", b"p" * (4 * 1024 * 1024))
    head = ("POST /v1/containers/%s/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (cid, me["Authorization"], ctype, len(body))).encode()
    with socket.create_connection(("127.0.0.1", httpd.port)) as s:
        s.sendall(head + body[:len(body) // 2])
    # the abandoned upload's request is over (the access log has it) ...
    line = "POST /v1/containers/%s/files HTTP/1.1 400" % cid
    wait_until(lambda: line in open(httpd.access_log).read(), "the upload's end")
    # ... and left nothing, not even its temporary file
    assert names_seen_by_code(httpd, cid, me) == "['kept.txt']\n"
    status, f = upload(httpd, cid, "after.txt", b"fine", me)
    assert (status, f["bytes"]) == (200, 4)


READ = "print(open('/mnt/data/sales.csv').read().splitlines()[-1])"


def test_file_ids_on_an_auto_container(httpd, model, me):
    from test_loop import ci_body
    f = model_file(model, me, "sales.csv", CSV)
    tool = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": [f["id"]]}}
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"call": READ}], [{"text": "{{last_output}}"}]], include=True, tools=[tool]),
        headers=me)
    assert status == 200, out
    call = calls_of(out)[0]
    assert call["outputs"] == [{"type": "logs", "logs": "pear,5\n"}]
    listing = files(httpd, call["container_id"], me)["data"]
    assert [(x["path"], x["source"], x["bytes"]) for x in listing] == [
        ("/mnt/data/sales.csv", "user", len(CSV))]
    # the file object was checked before round 1, the content fetched once
    paths = [r["path"] for r in model.requests()]
    assert paths.index("/v1/files/%s" % f["id"]) < paths.index("/v1/responses")
    assert paths.count("/v1/files/%s/content" % f["id"]) == 1


def test_unknown_file_id_on_auto_refused_before_round_one(httpd, model, me):
    from test_loop import ci_body
    model.reset()
    tool = {"type": "code_interpreter", "container": {"type": "auto",
                                                      "file_ids": ["file-nope"]}}
    status, _, out = httpd.post("/v1/responses", ci_body([[{"text": "x"}]], tools=[tool]),
                                headers=me)
    assert (status, out["error"]) == (400, {
        "message": "File with id 'file-nope' not found.", "type": "invalid_request_error",
        "param": "file_ids", "code": "file_not_found"})
    assert [r["path"] for r in model.requests()] == ["/v1/files/file-nope"]


def test_file_ids_of_the_wrong_shape_are_refused(httpd, model, me):
    from test_loop import ci_body
    for ids, param in (("file-1", "tools[0].container.file_ids"),
                       ([7], "tools[0].container.file_ids[0]")):
        tool = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ids}}
        status, _, out = httpd.post("/v1/responses", ci_body([[{"text": "x"}]],
                                                             tools=[tool]), headers=me)
        assert (status, out["error"]["param"], out["error"]["code"]) == (
            400, param, "invalid_type")


@pytest.fixture(scope="module")
def odd(model):
    """A server whose upstream URL has no /responses segment: no Files API
    can be found beside it."""
    from conftest import Httpd, base_conf
    up = "http://127.0.0.1:%d" % model.port
    extra = """
<Location /odd/v1/responses>
  ProxyPass %s/v1/responses
  CodeInterpreter On
  CodeInterpreterUpstream %s/v1/generate
</Location>
""" % (up, up)
    server = Httpd("uploads-odd", base_conf(model.port, extra)).start()
    yield server
    server.stop()


def test_an_upstream_without_a_files_api_is_named(odd, model, me):
    from test_loop import ci_body
    tool = {"type": "code_interpreter", "container": {"type": "auto",
                                                      "file_ids": ["file-1"]}}
    status, _, out = odd.post("/odd/v1/responses", ci_body([[{"text": "x"}]],
                                                           tools=[tool]), headers=me)
    assert (status, out["error"]) == (400, {
        "message": "file_ids cannot be used here: the model upstream has no Files API "
                   "(the upstream URL does not end in /responses, so it has no Files "
                   "API beside it).",
        "type": "invalid_request_error", "param": "file_ids",
        "code": "files_unsupported"})
