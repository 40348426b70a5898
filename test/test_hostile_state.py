"""Hostile input on the state surfaces, as an attacker would send it: query
strings that are not UTF-8, code that switches the upload limits off in its
own kernel, a body that never ends, file names that are not UTF-8, fields
of the wrong type. Each gets its exact answer, and no child dies (every
test server's check would see an "exit signal")."""
import json
import socket

from test_containers import api, error_of, make_container, me  # noqa: F401
from test_container_files import files, run_in
from test_container_uploads import multipart, upload
from test_loop import calls_of


def raw_get(server, path, headers):
    status, _, data = server.request("GET", path, headers=headers)
    return status, json.loads(data)


def invalid(param, message):
    return {"message": message, "type": "invalid_request_error", "param": param,
            "code": "invalid_value"}


def test_query_strings_that_are_not_utf8_are_refused(httpd, me):
    cid = make_container(httpd, headers=me)["id"]
    for query in ("name=%FF", "name=%F0%9F%98", "after=%FF", "after=cntr_%C3"):
        key = query.split("=")[0]
        assert error_of(raw_get(httpd, "/v1/containers?" + query, me)) == (400, invalid(
            key, "Invalid '%s': expected a UTF-8 string." % key)), query
    assert error_of(raw_get(httpd, "/v1/containers/%s/files?after=%%FF" % cid, me)) == (
        400, invalid("after", "Invalid 'after': expected a UTF-8 string."))
    # and the same server answers on
    status, listed = raw_get(httpd, "/v1/containers?name=work", me)
    assert status == 200 and [c["id"] for c in listed["data"]] == [cid]


SWITCH_OFF = ("import sys\nk = sys.modules['__main__']\n"
              "k.upload_room = lambda found, name, req: (None, -1)\n"
              "print('switched off')")


def test_limits_hold_when_the_container_switches_off_its_kernels(httpd, model, me):
    path = "/limited/v1/containers"          # max_file=1k max_files=3 max_bytes=2k
    cid = make_container(httpd, path=path, headers=me)["id"]
    out = run_in(httpd, cid, SWITCH_OFF, me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == "switched off\n"
    # max_file, counted by the child that relays the bytes
    assert error_of(upload(httpd, cid, "big.bin", b"z" * (3 << 20), me, path)) == (413, {
        "message": "File 'big.bin' is larger than this server accepts (max_file=1024 "
                   "bytes).",
        "type": "invalid_request_error", "param": None, "code": "file_too_large"})
    for name in ("a", "b"):
        assert upload(httpd, cid, name, b"q" * 1000, me, path)[0] == 200
    # max_bytes and max_files, measured by the supervisor outside the sandbox
    assert error_of(upload(httpd, cid, "c", b"q" * 49, me, path)) == (413, {
        "message": "File 'c' does not fit: container '%s' may hold 2048 bytes of files "
                   "(max_bytes)." % cid,
        "type": "invalid_request_error", "param": None, "code": "container_full"})
    assert upload(httpd, cid, "c", b"q" * 48, me, path)[0] == 200
    for name in ("d", "e", "f", "g"):
        assert error_of(upload(httpd, cid, name, b"", me, path)) == (400, {
            "message": "Container '%s' holds as many files as this server allows "
                       "(max_files=3); delete one first." % cid,
            "type": "invalid_request_error", "param": None, "code": "too_many_files"})
    out = run_in(httpd, cid, "import os; print(sorted((n, os.path.getsize('/mnt/data/' "
                 "+ n)) for n in os.listdir('/mnt/data')))", me)
    assert calls_of(out)[0]["outputs"][0]["logs"] == (
        "[('a', 1000), ('b', 1000), ('c', 48)]\n")


def test_an_upload_whose_body_never_ends_is_not_kept(httpd, me):
    cid = make_container(httpd, headers=me)["id"]
    body, ctype = multipart("short.txt", b"complete multipart, short body")
    head = ("POST /v1/containers/%s/files HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n"
            "Content-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (cid, me["Authorization"], ctype, len(body) + 100000)).encode()
    with socket.create_connection(("127.0.0.1", httpd.port), timeout=60) as s:
        s.sendall(head + body)
        s.shutdown(socket.SHUT_WR)          # the rest never comes
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    # (the client only half-closed: it still reads the answer)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 400 Bad Request", answer
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1]) == {"error": {
        "message": "The upload of 'short.txt' could not be read: the body could not be "
                   "read",
        "type": "invalid_request_error", "param": None, "code": "invalid_upload"}}
    assert files(httpd, cid, me)["data"] == []


def test_a_file_name_that_is_not_utf8_is_refused_for_good(httpd, me):
    cid = make_container(httpd, headers=me)["id"]
    body, ctype = multipart("x", b"data")
    body = body.replace(b'filename="x"', b'filename="\xff\xfe.txt"')
    status, _, data = httpd.request("POST", "/v1/containers/%s/files" % cid, body,
                                    dict(me, **{"Content-Type": ctype}))
    assert (status, json.loads(data)) == (400, {"error": {
        "message": "'\ufffd\ufffd.txt' cannot be a container file's name.",
        "type": "invalid_request_error", "param": "file", "code": "invalid_filename"}})


def test_fields_of_the_wrong_type_are_named(httpd, me):
    cases = [
        ({"name": "x", "expires_after": "soon"}, "expires_after", "an object"),
        ({"name": "x", "memory_limit": 4}, "memory_limit", "a string"),
        ({"name": 7}, "name", "a string"),
        ({"name": "x", "file_ids": "file-1"}, "file_ids", "an array of file ids"),
    ]
    for body, param, expected in cases:
        assert error_of(api(httpd, "POST", "/v1/containers", body, me)) == (400, {
            "message": "Invalid type for '%s': expected %s." % (param, expected),
            "type": "invalid_request_error", "param": param, "code": "invalid_type"}), body
    assert error_of(api(httpd, "POST", "/v1/containers", {
        "name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}}, me)) == (
        400, invalid("expires_after.anchor",
                     "Invalid 'expires_after.anchor': expected 'last_active_at'."))
    status, listed = raw_get(httpd, "/v1/containers", me)
    assert (status, listed["data"]) == (200, [])
