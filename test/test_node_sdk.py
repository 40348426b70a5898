"""The official OpenAI Node SDK as the client: it sends the hosted tool, parses
what comes back, and the answer matches the published OpenAPI document.

The SDK lives in test/node (package.json + package-lock.json); node_modules is
installed with `npm ci` once per session when it is missing.
"""
import json
import os
import shutil
import subprocess

import pytest

from conftest import HERE

NODE_DIR = os.path.join(HERE, "node")
NODE = shutil.which("node")
NPM = shutil.which("npm")
SCRIPT = [[{"call": "print(sum(range(10)))"}], [{"text": "done"}]]

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="node and npm are needed for the SDK tests (missing: %s)"
    % ", ".join(n for n, p in (("node", NODE), ("npm", NPM)) if p is None))


@pytest.fixture(scope="session")
def node_modules():
    target = os.path.join(NODE_DIR, "node_modules")
    if not os.path.isdir(target):
        r = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail("npm ci failed in %s:\n%s\n%s" % (NODE_DIR, r.stdout, r.stderr))
    return target


class SdkRun:
    """The outcome of one run of a script in test/node."""

    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = proc.stdout.splitlines()
        self.response = None
        if lines and lines[0].startswith("{"):
            self.response = json.loads(lines[0])
        self.lines = lines[1:]

    def marked(self, prefix):
        return [l[len(prefix):].strip() for l in self.lines if l.startswith(prefix)]

    def __str__(self):
        return "exit %d\nstdout:\n%s\nstderr:\n%s" % (self.returncode, self.stdout, self.stderr)


def run_sdk(httpd, script, rounds, path="/v1"):
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d%s" % (httpd.port, path))
    proc = subprocess.run([NODE, os.path.join(NODE_DIR, script), json.dumps(rounds)],
                          cwd=NODE_DIR, env=env, capture_output=True, text=True, timeout=120)
    return SdkRun(proc)


def test_sdk_parses_code_interpreter_response(httpd, model, node_modules):
    run = run_sdk(httpd, "sdk_json.mjs", SCRIPT)
    # 0: all good, 1: only the schema check failed (the next test reports it).
    assert run.returncode in (0, 1) and run.response is not None, str(run)
    body = run.response
    assert body["object"] == "response"
    assert body["status"] == "completed", str(run)
    calls = [i for i in body["output"] if i["type"] == "code_interpreter_call"]
    msgs = [i for i in body["output"] if i["type"] == "message"]
    assert [i["type"] for i in body["output"]] == ["code_interpreter_call", "message"], str(run)
    call = calls[0]
    assert call["status"] == "completed"
    assert call["code"] == "print(sum(range(10)))"
    assert call["outputs"] == [{"type": "logs", "logs": "45\n"}]
    assert call["container_id"].startswith("cntr_")
    assert msgs[0]["role"] == "assistant"
    assert msgs[0]["content"][0]["type"] == "output_text"
    assert msgs[0]["content"][0]["text"] == "done"
    # The SDK's own convenience accessor sees the final answer.
    assert body["output_text"] == "done"
    assert body["tools"] == [{"type": "code_interpreter", "container": {"type": "auto"}}]
    # The model was asked twice: once for the code, once with its output.
    assert len(model.requests()) == 2


def test_sdk_response_matches_openapi_schema(httpd, model, node_modules):
    run = run_sdk(httpd, "sdk_json.mjs", SCRIPT)
    skipped = run.marked("SKIP-SCHEMA:")
    if skipped:
        pytest.skip("schema validation skipped: %s" % skipped[0])
    failed = run.marked("SCHEMA-FAIL:")
    assert not failed, "the response does not match the OpenAPI schema:\n" + "\n".join(failed)
    assert run.returncode == 0, str(run)
    ok = run.marked("SCHEMA-OK:")
    assert "output[0] CodeInterpreterToolCall" in ok, str(run)
    assert any(name.startswith("Response") for name in ok), str(run)
