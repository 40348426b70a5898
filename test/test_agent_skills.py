"""A skill on the Agents SDK's hosted shell, end to end, with each client
set (test_node_sdk.py): test/node/agent_skill.mjs uploads the basic_math
skill with client.skills.create, then runs an Agent whose tool is
shellTool({environment: {type: "container_auto", skills: [{type:
"skill_reference", skillId}]}}). The scripted model reads the skill's
SKILL.md and runs its add.py in the container's skills folder (basic-math-<hex>); a
second run, chained on the first with previousResponseId, runs add.py again
in the same container."""
import json
import os

import pytest

from conftest import Httpd, base_conf
from test_node_sdk import clients, node_script  # noqa: F401 (a fixture)
from test_shell import exit_entry, shell_call
from test_skills_api import BASIC
from test_skills_attach import CONTEXT_HEAD, SKILLS

KEY = "sk-agent-skills-0123"
WHERE = "/home/oai/skills/basic-math-@HEX@"  # check-clone: a path in a container
TURN1 = [[shell_call("cat %s/SKILL.md" % WHERE, "python3 %s/scripts/add.py 2 3" % WHERE)],
         [{"text": "{{last_output}}"}]]
TURN2 = [[shell_call("python3 %s/scripts/add.py 2 3" % WHERE)], [{"text": "{{last_output}}"}]]


@pytest.fixture(scope="module")
def server(model):
    s = Httpd("agent-skills", base_conf(model.port, SKILLS)).start()
    yield s
    s.stop()


def run_agent_skill(server, tmp_path, clients):
    """Run agent_skill.mjs with client set CLIENTS; its report."""
    for path, data in BASIC.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    server.callers.add("Bearer " + KEY)
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % server.port, API_KEY=KEY)
    proc = node_script(clients, "agent_skill.mjs", str(tmp_path / "basic_math"),
                       json.dumps(TURN1), json.dumps(TURN2), env=env)
    detail = "exit %d\nstdout:\n%s\nstderr:\n%s" % (proc.returncode, proc.stdout, proc.stderr)
    assert proc.returncode in (0, 1) and proc.stdout.startswith("{"), detail
    report = json.loads(proc.stdout.splitlines()[0])
    assert report["error"] is None, json.dumps(report["error"], indent=1)
    assert proc.returncode == 0, detail
    return report


def raw_items(turn, kind):
    return [i["rawItem"] for i in turn["newItems"] if i["rawItem"].get("type") == kind]


def test_an_agent_runs_a_skill_on_the_hosted_shell(server, model, clients, tmp_path):
    n = len(model.requests())
    report = run_agent_skill(server, tmp_path, clients)
    sk = report["skill"]
    assert sk["id"].startswith("skill_") and sk["name"] == "basic-math", sk
    where = WHERE.replace("@HEX@", sk["id"][len("skill_"):])
    skill_md = BASIC["basic_math/SKILL.md"].decode()
    first, second = report["turns"]

    # what the SDK sent: the hosted shell with the skill referenced
    sent = report["sent"]
    assert [b["tools"] for b in sent] == [[{"type": "shell", "environment": {
        "type": "container_auto",
        "skills": [{"type": "skill_reference", "skill_id": sk["id"]}]}}]] * 2
    assert "previous_response_id" not in sent[0]
    assert sent[1]["previous_response_id"] == first["lastResponseId"]

    # run 1: the model was told of the skill, before the input
    told = model.requests()[n]["json"]["input"]
    assert told[0] == {"type": "message", "role": "user", "content": [{
        "type": "input_text",
        "text": CONTEXT_HEAD + "\n- basic-math: Adds numbers. (%s/SKILL.md)" % where}]}
    assert "SCRIPT:" in json.dumps(told[1])
    # the SDK saw the shell call on the skill's folder and its outputs
    [call1] = raw_items(first, "shell_call")
    assert call1["action"]["commands"] == ["cat %s/SKILL.md" % where,
                                           "python3 %s/scripts/add.py 2 3" % where]
    [out1] = raw_items(first, "shell_call_output")
    assert out1["callId"] == call1["callId"]
    assert out1["output"] == [sdk_entry(skill_md), sdk_entry("5\n")]
    # {{last_output}}: the call's output as the model was given it
    assert json.loads(first["finalOutput"]) == [exit_entry(skill_md), exit_entry("5\n")]
    container = call1["providerData"]["environment"]["container_id"]
    assert container.startswith("cntr_")

    # run 2, chained: the same container, the skill still there, not told again
    assert "Skills are installed" not in json.dumps(model.requests()[n + 2]["json"]["input"])
    [call2] = raw_items(second, "shell_call")
    assert call2["action"]["commands"] == ["python3 %s/scripts/add.py 2 3" % where]
    assert call2["providerData"]["environment"] == {"type": "container_reference",
                                                    "container_id": container}
    [out2] = raw_items(second, "shell_call_output")
    assert out2["output"] == [sdk_entry("5\n")]
    assert json.loads(second["finalOutput"]) == [exit_entry("5\n")]
    assert len(model.requests()) == n + 4


def sdk_entry(stdout):
    """A shell output entry as the Agents SDK keeps it (camelCase)."""
    return {"stdout": stdout, "stderr": "", "outcome": {"type": "exit", "exitCode": 0}}
