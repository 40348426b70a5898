#!/bin/sh
# Run httpd in one process (apache2 -X) under valgrind's memcheck with the
# module loaded, drive a representative subset of requests against it (one
# call, several rounds, a stream, a rejection, a timeout, an upstream error,
# a client that leaves, a container's files listed, downloaded, deleted and
# uploaded, an upload cited)
# and exit non-zero on any memory error valgrind reports, or if a request
# does not get its expected answer.
#
# APR pools recycle memory, which can hide a use-after-free from ASan; the
# pool debugging of valgrind's memcheck sees every access of the process.
# Suppressions for known noise outside the module go in test/valgrind.supp.
#
# Environment: CI_MODULE (the module to load, default .libs/), VALGRIND_LOG
# (where valgrind writes, default under the server root).
set -e
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    echo "installing valgrind"
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y valgrind >/dev/null
    else
        sudo apt-get install -y valgrind >/dev/null
    fi
fi
if [ -z "${CI_MODULE:-}" ] && [ ! -f .libs/mod_code_interpreter.so ]; then
    ./scripts/build.sh
fi

exec /usr/bin/python3 - "$@" <<'EOF'
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.getcwd(), "test"))
from conftest import (ANONYMOUS, HTTPD, MODULE, TOOL, Httpd, base_conf, script_input,
                      start_helper)

SUPPRESSIONS = os.path.join(os.getcwd(), "test", "valgrind.supp")
OUTPUTS = "code_interpreter_call.outputs"
failures = []


def check(name, ok, detail=""):
    print("%-40s %s" % (name, "ok" if ok else "FAILED " + detail), flush=True)
    if not ok:
        failures.append(name)


def ci_body(rounds, **extra):
    body = {"model": "m", "tools": [TOOL], "include": [OUTPUTS],
            "input": script_input(rounds)}
    body.update(extra)
    return body


def main():
    if not os.path.exists(MODULE):
        print("the module is not built: " + MODULE)
        return 2
    model, model_port = start_helper("fake_model.py")
    server = Httpd("valgrind", base_conf(model_port))
    server.write_conf()
    log = os.environ.get("VALGRIND_LOG") or os.path.join(server.root, "valgrind.log")
    cmd = ["valgrind", "--tool=memcheck", "--error-exitcode=99", "--leak-check=no",
           "--track-origins=yes", "--vgdb=no", "--num-callers=30", "--log-file=" + log]
    if os.path.exists(SUPPRESSIONS):
        cmd.append("--suppressions=" + SUPPRESSIONS)
    cmd += [HTTPD, "-X", "-d", server.root, "-f", os.path.join(server.root, "httpd.conf")]
    print("module: " + MODULE, flush=True)
    print(" ".join(cmd), flush=True)
    vg = subprocess.Popen(cmd, env=server.env)
    try:
        deadline = time.time() + 180
        while True:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                break
            except OSError:
                if vg.poll() is not None or time.time() > deadline:
                    print("httpd under valgrind did not start (exit %s)" % vg.poll())
                    print(server.log())
                    return 2
                time.sleep(0.25)
        drive(server)
    finally:
        if vg.poll() is None:
            vg.send_signal(signal.SIGTERM)
        try:
            rc = vg.wait(timeout=300)
        except subprocess.TimeoutExpired:
            vg.kill()
            rc = vg.wait()
        model.kill()
        model.wait()
    with open(log, errors="replace") as f:
        report = f.read()
    summary = [l for l in report.splitlines() if "ERROR SUMMARY" in l]
    print(summary[-1].split("== ", 1)[-1] if summary else "no valgrind summary", flush=True)
    if rc != 0 or not summary or " 0 errors " not in summary[-1]:
        print(report)
        print("valgrind exit status %d; valgrind log: %s" % (rc, log))
        return 1
    started, destroyed = server.sandbox_counts()
    check("sandboxes started == destroyed", started == destroyed,
          "%d started, %d destroyed" % (started, destroyed))
    check("no child crashed", "exit signal" not in server.log())
    if failures:
        print("failed: " + ", ".join(failures))
        return 1
    return 0


def drive(server):
    timeout = 120
    status, _, body = server.post("/v1/responses", ci_body(
        [[{"call": "print(6 * 7)"}], [{"text": "{{last_output}}"}]]), timeout=timeout)
    check("one call", status == 200 and body["output"][-1]["content"][0]["text"] == "42\n",
          str(body)[:300])

    status, _, body = server.post("/v1/responses", ci_body(
        [[{"call": "x = 20"}], [{"call": "x += 1\nprint(x)"}],
         [{"call": "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint(x * 2)"}],
         [{"text": "{{outputs}}"}]]), timeout=timeout)
    check("several rounds", status == 200 and json.loads(
        body["output"][-1]["content"][0]["text"]) == [
            "(no output)", "21\n", "42\n[a PNG figure was created and is shown to the user]\n"],
        str(body)[:300])

    status, hdrs, data = server.request("POST", "/v1/responses", ci_body(
        [[{"call": "print('streamed')"}], [{"text": "done"}]], stream=True), timeout=timeout)
    check("a stream", status == 200 and b"event: response.completed" in data
          and b"streamed" in data, data[:300])

    status, _, body = server.post("/v1/responses", ci_body([[{"text": "x"}]],
                                                           tool_choice="sometimes"))
    check("a rejection", status == 400 and body["error"]["code"] == "invalid_value", str(body))

    status, _, body = server.post("/v1/responses", b'{"tools": [{"type": "code_interpreter"}')
    check("malformed JSON", status == 400 and body["error"]["code"] == "invalid_json", str(body))

    # a request's own sandbox (no owner): killed at the timeout
    status, _, body = server.post("/quick/v1/responses", ci_body(
        [[{"call": "import time\ntime.sleep(10)"}], [{"call": "print('fresh')"}],
         [{"text": "{{outputs}}"}]]), timeout=timeout, headers=ANONYMOUS)
    check("a timeout", status == 200 and body["output"][0]["status"] == "completed"
          and body["output"][0]["outputs"] == [{"type": "logs", "logs": "The execution "
                                                "timed out after 3 s and was stopped."}]
          and body["output"][1]["outputs"] == [{"type": "logs", "logs": "fresh\n"}],
          str(body)[:300])

    status, _, body = server.post("/v1/responses", ci_body(
        [[{"call": "print(1)"}], [{"error": {"status": 503}}]]), timeout=timeout)
    check("an upstream error on a follow-up", status == 503, str(body)[:300])

    status, _, body = server.post("/small/v1/responses",
                                  ci_body([[{"text": "x"}]], pad="y" * 70000))
    check("a body over the limit", status == 413, str(body)[:300])

    raw = json.dumps(ci_body([[{"call": "import time\ntime.sleep(3)"}],
                              [{"text": "never"}]])).encode()
    started = server.log().count("CI0302:")
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-test-valgrind\r\nX-Anonymous: 1\r\n"
              b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
    deadline = time.time() + 60
    while server.log().count("CI0302:") == started and time.time() < deadline:
        time.sleep(0.1)
    s.close()
    while "CI0206" not in server.log() and time.time() < deadline:
        time.sleep(0.1)
    check("a client that leaves", "CI0206: client went away" in server.log())
    status, _, body = server.post("/v1/responses", ci_body(
        [[{"call": "print('still serving')"}], [{"text": "{{last_output}}"}]]), timeout=timeout)
    check("serving after it", status == 200, str(body)[:300])

    # containers: a second turn finds the first's state; a container's
    # timeout is interrupted and its state lives on; the Containers API
    status, _, first = server.post("/quick/v1/responses", ci_body(
        [[{"call": "x = 41"}], [{"call": "import time\ntime.sleep(10)"}],
         [{"text": "set"}]]), timeout=timeout)
    status, _, body = server.post("/quick/v1/responses", dict(ci_body(
        [[{"call": "print(x + 1)"}], [{"text": "{{last_output}}"}]]),
        previous_response_id=first["id"]), timeout=timeout)
    check("a container across turns", status == 200 and
          body["output"][-1]["content"][0]["text"] == "42\n", str(body)[:300])
    status, _, listing = server.request("GET", "/v1/containers")
    ids = [c["id"] for c in json.loads(listing)["data"]]
    for cid in ids:
        server.request("DELETE", "/v1/containers/" + cid)
    check("the Containers API", status == 200 and
          body["output"][0]["container_id"] in ids, str(ids))

    me = {"Authorization": "Bearer sk-test-valgrind-files"}
    status, _, c = server.post("/v1/containers", {"name": "files"}, headers=me)
    check("a container made", status == 200, str(c)[:300])
    if status == 200:
        tool = {"type": "code_interpreter", "container": c["id"]}
        body = ci_body([[{"call": "open('out.bin', 'wb').write(bytes(range(256)) * 600)"}],
                        [{"text": "written"}]])
        body["tools"] = [tool]
        server.post("/v1/responses", body, headers=me, timeout=timeout)
        base = "/v1/containers/%s/files" % c["id"]
        status, _, data = server.request("GET", base + "?limit=5", headers=me)
        listing = json.loads(data) if status == 200 else {"data": []}
        check("its files listed", [f["path"] for f in listing["data"]] ==
              ["/mnt/data/out.bin"], str(data)[:300])
        fid = listing["data"][0]["id"] if listing["data"] else "cfile_none"
        status, _, data = server.request("GET", base + "/" + fid + "/content", headers=me)
        check("a file downloaded", status == 200 and data == bytes(range(256)) * 600,
              "%d, %d bytes" % (status, len(data)))
        status, _, data = server.request("DELETE", base + "/" + fid, headers=me)
        check("a file deleted", status == 200, str(data)[:300])
        status, _, data = server.request("GET", base + "/" + fid, headers=me)
        check("a deleted file is gone", status == 404, str(data)[:300])
        boundary = "valgrind-boundary-1"
        upload = (b"--" + boundary.encode() + b"\r\nContent-Disposition: form-data; "
                  b"name=\"file\"; filename=\"in.bin\"\r\n\r\n" + bytes(range(256)) * 900 +
                  b"\r\n--" + boundary.encode() + b"--\r\n")
        status, _, data = server.request("POST", base, upload, dict(me, **{
            "Content-Type": "multipart/form-data; boundary=" + boundary}))
        check("a file uploaded", status == 200 and json.loads(data)["bytes"] == 256 * 900,
              str(data)[:300])
        body = ci_body([[{"call": "print(len(open('/mnt/data/in.bin', 'rb').read()))"}],
                        [{"text": "[it](sandbox:/mnt/data/in.bin)"}]])
        body["tools"] = [tool]
        status, _, out = server.post("/v1/responses", body, headers=me, timeout=timeout)
        check("an upload used and cited", status == 200 and
              out["output"][-1]["content"][0]["annotations"][0]["filename"] == "in.bin",
              str(out)[:300])
        server.request("DELETE", "/v1/containers/" + c["id"], headers=me)


sys.exit(main())
EOF
