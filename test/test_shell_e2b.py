"""The hosted shell on E2B, against the fake E2B service (which runs each
command for real through envd's process service, as E2B does): the same
answers as the local sandbox's - one container shared with Python, exit
codes, stderr, the limits, a process left running, the stream - and what the
provider asked of E2B, counted from the fake's records."""
from conftest import script_input
# the fake E2B and an httpd with an E2B tool and its Containers API (timeout=3
# idle=10m), started for this module too
from test_e2b_containers import env, server  # noqa: F401 (fixtures)
from test_loop import calls_of
from test_shell import exit_entry, items_of, outputs_of, shell_call, stream_problems
from test_fake_e2b import process_gone
from test_stream import SSE

TOOLS = [{"type": "code_interpreter", "container": {"type": "auto"}},
         {"type": "shell", "environment": {"type": "container_auto"}}]
ME = {"Authorization": "Bearer sk-e2b-shell"}


def turn(server, rounds, **extra):
    body = {"model": "m", "tools": TOOLS, "include": ["code_interpreter_call.outputs"],
            "input": script_input(rounds)}
    body.update(extra)
    status, _, out = server.post("/e2b/v1/responses", body, headers=ME)
    assert status == 200, out
    return out


def container_of(out):
    return items_of(out, "shell_call")[0]["environment"]["container_id"]


def test_python_and_the_shell_share_one_e2b_sandbox(server, model):
    first = turn(server, [[{"call": "open('/mnt/data/n.txt', 'w').write('from python')"}],
                          [{"text": "saved"}]])
    second = turn(server, [[shell_call("cat n.txt", "echo -n back > m.txt")],
                           [{"text": "ok"}]], previous_response_id=first["id"])
    assert outputs_of(second) == [exit_entry("from python"), exit_entry()]
    third = turn(server, [[{"call": "print(open('/mnt/data/m.txt').read())"}],
                          [{"text": "{{last_output}}"}]], previous_response_id=second["id"])
    assert calls_of(third)[0]["outputs"] == [{"type": "logs", "logs": "back\n"}]
    assert container_of(second) == calls_of(first)[0]["container_id"]
    st = server.fake.state()
    assert len(st["creates"]) == 1                 # one sandbox for both tools
    # each command was one process of envd's, run with bash in /mnt/data
    assert len(st["processes"]) == 2
    status, _, _ = server.request("DELETE", "/e2b/v1/containers/" + container_of(second),
                                  headers=ME)
    assert status == 200
    server.fake.until(lambda s: not s["live"], "the sandbox to be deleted")


def test_exit_codes_timeouts_and_cuts_on_e2b(server, model):
    first = turn(server, [[shell_call("echo out; echo err >&2; exit 3", "ls")],
                          [{"text": "done"}]])
    assert outputs_of(first) == [exit_entry("out\n", "err\n", 3), exit_entry()]
    assert [p["body"]["process"]["cwd"] for p in server.fake.state()["processes"]] == [
        "/mnt/data"] * 2
    second = turn(server, [[shell_call("echo before", "sleep 60", "echo never",
                                       timeout_ms=300)], [{"text": "done"}]],
                  previous_response_id=first["id"])
    assert outputs_of(second) == [exit_entry("before\n"),
                                  {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]
    third = turn(server, [[shell_call("printf '\u00e9%.0s' $(seq 30); printf 'abcde' >&2",
                                      max_output_length=12)], [{"text": "done"}]],
                 previous_response_id=second["id"])
    assert outputs_of(third) == [exit_entry("\u00e9" * 12)]
    # the stopped command was signalled through envd, and nothing of it runs
    sid = server.fake.state()["creates"][0]["id"]
    st = server.fake.until(lambda s: not s["sandboxes"][sid]["running"],
                           "the stopped command's process to end")
    assert len(st["signals"]) == 1
    server.request("DELETE", "/e2b/v1/containers/" + container_of(first), headers=ME)
    server.fake.until(lambda s: not s["live"], "the sandbox to be deleted")


def test_a_background_process_lives_until_the_container_ends(server, model):
    out = turn(server, [[shell_call("sleep 600 >/dev/null 2>&1 & echo $!", "echo started")],
                        [{"text": "done"}]])
    first, second = outputs_of(out)
    assert second == exit_entry("started\n")
    daemon = int(first["stdout"])                  # the fake's processes are the host's
    assert not process_gone(daemon)                # the daemon lives on ...
    server.request("DELETE", "/e2b/v1/containers/" + container_of(out), headers=ME)
    st = server.fake.until(lambda s: not s["live"], "the sandbox to be deleted")
    assert [d["status"] for d in st["deletes"]] == [204]   # ... until its sandbox goes
    assert process_gone(daemon)


def test_the_stream_on_e2b_validates(server, model):
    body = {"model": "m", "tools": TOOLS, "stream": True,
            "input": script_input([[shell_call("echo one", "exit 2")], [{"text": "done"}]])}
    s = SSE(server, "/e2b/v1/responses", body, headers=ME).read_all()
    try:
        assert s.status == 200
        assert stream_problems(s) == []       # (skips without the OpenAPI document)
        final = s.events()[-1]["data"]
        assert final["type"] == "response.completed"
        call, result, _ = final["response"]["output"]
        assert result["output"] == [exit_entry("one\n"), exit_entry("", "", 2)]
    finally:                                  # its sandbox deleted however it ends
        assert server.delete_containers_at("/e2b/v1/containers", ME) == 1
    server.fake.until(lambda s: not s["live"], "the sandbox to be deleted")
