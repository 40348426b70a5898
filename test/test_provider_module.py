"""A sandbox provider and an execution hook from another module, built
apart with apxs against the headers mod_code_interpreter installs
(include/mod_code_interpreter.h, ci_sandbox.h, ci_exec.h, ci_cfiles.h) and nothing else
of its tree: test/provider_module/mod_ci_echo.c registers the provider
"echo" in httpd's provider registry and writes one line per execution from
the execution hook. Counted from that file, which the other module writes."""
import os
import shutil
import subprocess

import pytest

from conftest import RUN, TOP, Httpd, require, script_input

HEADERS = ["include/mod_code_interpreter.h",
           "mod_code_interpreter/sandbox/ci_sandbox.h",
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
    assert ("CodeInterpreterSandbox s: unknown provider 'docker': expected local, e2b "
            "or echo") in err, err


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
