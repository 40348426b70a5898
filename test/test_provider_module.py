"""A sandbox provider and an execution hook from another module, built
apart with apxs against the headers mod_code_interpreter installs
(include/mod_code_interpreter.h and what it includes: ci_provider.h,
ci_declare.h, ci_exec.h, ci_cfiles.h) and nothing else
of its tree: test/provider_module/mod_ci_echo.c registers the provider
"echo" in httpd's provider registry and writes one line per execution from
the execution hook. Counted from that file, which the other module writes."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

import re

from conftest import MODULE, RUN, TOP, Httpd, require, script_input
from test_container_uploads import multipart

HEADERS = ["include/mod_code_interpreter.h",
           "mod_code_interpreter/sandbox/ci_provider.h",
           "mod_code_interpreter/core/ci_declare.h",
           "mod_code_interpreter/core/ci_exec.h",
           "mod_code_interpreter/core/ci_cfiles.h"]
TOOL = {"type": "code_interpreter", "container": {"type": "auto"}}


def build_echo(name, *defines):
    """The other module, built with apxs (with DEFINES) from a directory
    holding its source and the installed headers only."""
    require(shutil.which("apxs") is not None, "apxs is missing (apache2-dev)")
    work = os.path.join(RUN, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "include"))
    for h in HEADERS:
        shutil.copy(os.path.join(TOP, h), os.path.join(work, "include"))
    shutil.copy(os.path.join(TOP, "test/provider_module/mod_ci_echo.c"), work)
    r = subprocess.run(["apxs", "-c", "-I" + os.path.join(work, "include"),
                        "-Wc,-Wall", "-Wc,-Werror"] + ["-D" + d for d in defines] +
                       ["mod_ci_echo.c"], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return os.path.join(work, ".libs", "mod_ci_echo.so")


def test_the_module_exports_what_its_headers_declare_and_nothing_else():
    """Built with -fvisibility=hidden: the functions the installed headers
    mark CI_DECLARE, the execution hook's runner and the module record are
    the shared object's only symbols, so none of its helpers meets another
    module's of the same name."""
    require(shutil.which("nm") is not None, "nm is missing (binutils)")
    declared = set()
    for h in HEADERS:
        with open(os.path.join(TOP, h)) as f:
            declared |= set(re.findall(r"CI_DECLARE\([^)]*\)\s*(\w+)\(", f.read()))
    out = subprocess.run(["nm", "-D", "--defined-only", MODULE], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines()
                if not line.split()[-1].startswith("_")}
    assert "ci_cfiles_add" in declared and len(declared) == 11, declared
    assert exported == declared | {"ci_run_execution", "code_interpreter_module"}


@pytest.fixture(scope="module")
def echo_module():
    return build_echo("provider-module")


def echo_conf(module, model_port, log):
    return f"""
LoadModule ci_echo_module {module}
CiEchoExecutionLog {log}
CodeInterpreterSandbox echoer provider=echo prefix=echo:
<Location /v1/responses>
  ProxyPass http://127.0.0.1:{model_port}/v1/responses
  CodeInterpreter echoer
</Location>
"""


@pytest.fixture
def server(echo_module, model):
    server = Httpd("provider-module", "")
    server.execution_log = os.path.join(server.root, "executions.log")
    server.write_conf(echo_conf(echo_module, model.port, server.execution_log))
    # The children (User) write it.
    with open(server.execution_log, "w"):
        pass
    os.chmod(server.execution_log, 0o666)
    server.start()
    yield server
    server.stop()


def test_another_modules_provider_runs_the_code(server):
    status, _, body = server.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": "hello"}], [{"call": "again"}],
                               [{"text": "{{last_output}}"}]])})
    assert status == 200, body
    calls = [o for o in body["output"] if o["type"] == "code_interpreter_call"]
    assert [c["outputs"] for c in calls] == [[{"type": "logs", "logs": "echo:hello\n"}],
                                             [{"type": "logs", "logs": "echo:again\n"}]]
    assert body["output"][-1]["content"][0]["text"] == "echo:again\n"
    # The execution hook saw both, in order, as the client did.
    with open(server.execution_log) as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    assert lines == [["echoer", "echo", "code", calls[0]["id"], "completed", "11", "hello"],
                     ["echoer", "echo", "code", calls[1]["id"], "completed", "11", "again"]]


def refused_at_configtest(name, module, sandbox_line):
    """httpd -t with MODULE loaded and SANDBOX_LINE: refused; its stderr."""
    server = Httpd(name, "")
    server.write_conf(f"""
LoadModule ci_echo_module {module}
{sandbox_line}
""")
    r = server.configtest()
    assert r.returncode != 0
    return r.stderr


def test_an_unknown_provider_lists_the_registered_ones(echo_module, model):
    err = refused_at_configtest("provider-module-unknown", echo_module,
                                "CodeInterpreterSandbox s provider=docker")
    assert ("CodeInterpreterSandbox s: unknown provider 'docker': expected local, e2b, "
            "echo or echofs") in err, err


def test_the_providers_own_key_is_checked(echo_module, model):
    err = refused_at_configtest("provider-module-key", echo_module,
                                "CodeInterpreterSandbox s provider=echo colour=blue")
    assert "CodeInterpreterSandbox s: unknown key 'colour' for provider echo: expected " \
        "one of " in err, err
    assert err.rstrip().endswith(", prefix") or ", prefix\n" in err, err


def test_a_provider_without_the_entries_of_its_capabilities_is_refused(model):
    """The same module built to claim the hosted shell without a
    run_commands entry: refused at configtest, naming what it lacks,
    before any request could meet the missing entry."""
    module = build_echo("provider-module-shell", "CI_ECHO_CLAIMS_SHELL")
    err = refused_at_configtest("provider-module-caps", module,
                                "CodeInterpreterSandbox s provider=echo")
    assert ("CodeInterpreterSandbox s: provider 'echo' has no run_commands entry, which "
            "CI_CAP_SHELL needs") in err, err


# ---- echofs: an outside provider's containers and their files -------------

ME = {"Authorization": "Bearer sk-provider-module-files"}
OTHER = {"Authorization": "Bearer sk-provider-module-someone-else"}


@pytest.fixture
def fs_server(echo_module, model):
    """The Containers API and the responses on the echofs provider, whose
    sandboxes are directories under STORE (the children write them)."""
    server = Httpd("provider-module-fs", "")
    server.store = os.path.join(server.root, "store")
    os.makedirs(server.store, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(server.store, "www-data", "www-data")
    server.write_conf(f"""
LoadModule ci_echo_module {echo_module}
CodeInterpreterSandbox boxes provider=echofs store={server.store} max_file=64 max_files=2 \
    max_bytes=100
<Location /v1/responses>
  ProxyPass http://127.0.0.1:{model.port}/v1/responses
  CodeInterpreter boxes
</Location>
<Location /v1/containers>
  CodeInterpreterContainers On
  CodeInterpreter boxes
</Location>
""")
    server.start()
    yield server
    server.stop()


def capi(server, method, path, body=None, headers=ME, **kw):
    status, _, data = server.request(method, "/v1/containers" + path, body,
                                     dict(headers, **kw.get("extra", {})))
    return status, json.loads(data) if data and data[:1] in b"{[" else data


def run_in(server, cid, code):
    tool = {"type": "code_interpreter", "container": cid}
    status, _, body = server.post("/v1/responses", {
        "model": "m", "tools": [tool], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": code}], [{"text": "{{last_output}}"}]])},
        headers=ME)
    assert status == 200, body
    return body["output"][-1]["content"][0]["text"]


def upload(server, cid, name, data):
    body, ctype = multipart(name, data)
    return capi(server, "POST", "/%s/files" % cid, body, extra={"Content-Type": ctype})


def sandboxes(server):
    return sorted(os.listdir(server.store))


def cfile_id(cid, name):
    return "cfile_" + hashlib.sha256(cid.encode() + b"\0" + name.encode()).hexdigest()[:32]


def test_an_outside_providers_containers_and_files(fs_server):
    """From the installed headers alone, echofs keeps a container's sandbox
    across requests and serves its files: an upload the code sees, a file
    the code writes, each listed with its source, read, deleted; deleting the
    container removes its sandbox at the provider (reap_handle)."""
    status, c = capi(fs_server, "POST", "", {"name": "outside"})
    assert status == 200, c
    cid = c["id"]
    assert sandboxes(fs_server) == []           # nothing until it is used
    status, f = upload(fs_server, cid, "notes.txt", b"from the client\n")
    assert status == 200, f
    assert (f["id"], f["path"], f["source"], f["bytes"]) == \
        (cfile_id(cid, "notes.txt"), "/mnt/data/notes.txt", "user", 16)
    [box] = sandboxes(fs_server)
    assert run_in(fs_server, cid, "ls") == "notes.txt\n"
    assert run_in(fs_server, cid, "write made.txt=by the code") == "wrote made.txt\n"
    assert sandboxes(fs_server) == [box]        # the same sandbox, reached again
    status, listing = capi(fs_server, "GET", "/%s/files" % cid)
    assert status == 200, listing
    assert sorted((x["path"], x["source"], x["bytes"]) for x in listing["data"]) == \
        [("/mnt/data/made.txt", "assistant", 11), ("/mnt/data/notes.txt", "user", 16)]
    status, data = capi(fs_server, "GET", "/%s/files/%s/content" % (cid, cfile_id(cid, "made.txt")))
    assert (status, data) == (200, b"by the code")
    status, gone = capi(fs_server, "DELETE", "/%s/files/%s" % (cid, cfile_id(cid, "notes.txt")))
    assert status == 200, gone
    assert run_in(fs_server, cid, "ls") == "made.txt\n"
    status, _ = capi(fs_server, "DELETE", "/" + cid)
    assert status == 200
    assert sandboxes(fs_server) == []


def test_an_outside_providers_files_keep_the_operators_limits_and_the_owner(fs_server):
    """max_file, max_bytes and max_files hold on the outside provider (its
    file_put, all or nothing), and another caller does not see the container."""
    status, c = capi(fs_server, "POST", "", {"name": "limited"})
    cid = c["id"]
    assert upload(fs_server, cid, "big.bin", b"x" * 65) == (413, {"error": {
        "message": "File 'big.bin' is larger than this server accepts (max_file=64 bytes).",
        "type": "invalid_request_error", "param": None, "code": "file_too_large"}})
    assert upload(fs_server, cid, "a", b"q" * 60)[0] == 200
    assert upload(fs_server, cid, "b", b"q" * 41) == (413, {"error": {
        "message": "File 'b' does not fit: container '%s' may hold 100 bytes of files "
                   "(max_bytes)." % cid,
        "type": "invalid_request_error", "param": None, "code": "container_full"}})
    assert upload(fs_server, cid, "b", b"q" * 40)[0] == 200
    assert upload(fs_server, cid, "c", b"") == (400, {"error": {
        "message": "Container '%s' holds as many files as this server allows "
                   "(max_files=2); delete one first." % cid,
        "type": "invalid_request_error", "param": None, "code": "too_many_files"}})
    assert upload(fs_server, cid, "a", b"r" * 10)[0] == 200   # a replacement fits
    status, listing = capi(fs_server, "GET", "/%s/files" % cid)
    assert sorted((x["path"], x["bytes"]) for x in listing["data"]) == \
        [("/mnt/data/a", 10), ("/mnt/data/b", 40)]
    [box] = sandboxes(fs_server)                 # nothing half written was left
    assert sorted(os.listdir(os.path.join(fs_server.store, box, ".uploads"))) == ["a", "b"]
    assert capi(fs_server, "GET", "/%s/files" % cid, headers=OTHER) == (404, {"error": {
        "message": "Container with id '%s' not found." % cid,
        "type": "invalid_request_error", "param": None, "code": "container_not_found"}})
    assert capi(fs_server, "DELETE", "/" + cid)[0] == 200
    assert sandboxes(fs_server) == []
