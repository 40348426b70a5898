"""Skills attached to a hosted shell's new container (container_auto
"skills"): a skill of the caller's, uploaded through the Skills API, or an
inline zip, shown read-only in the container's skills folder (OpenAI's
place, a folder <name>-<32 hex> per skill) in the local sandbox, told to
the model in a user message before the request's input, kept by the container across turns; and the exact refusals of what
cannot be attached (an unknown skill, another caller's, a version it does
not have, an inline zip that is no skill, skills where they are not
served). What the model was sent is read from the fake model's records."""
import base64
import io
import json
import os
import re
import zipfile

import pytest

from conftest import Httpd, base_conf, wait_for
from test_shell import exit_entry, items_of, outputs_of, shell_call, turn
from test_skills_api import (BASIC, BASIC_V2, add_version, api, create, other_skill,
                             store_entries)

SKILLS = """
CodeInterpreterAuditLog logs/audit.jsonl
CodeInterpreterSkillStore skills
<Location /v1/skills>
  CodeInterpreterSkills On
</Location>
"""
ME = {"Authorization": "Bearer sk-skills-attach-me"}
OTHER = {"Authorization": "Bearer sk-skills-attach-other"}
CONTEXT_HEAD = ("Skills are installed in your container: each is a folder with a SKILL.md "
                "file of instructions, and often scripts. Before you use a skill, read its "
                "SKILL.md (for example with cat) and follow it; run its scripts from their "
                "folder's path, which is read-only.")


@pytest.fixture(scope="module")
def server(model):
    s = Httpd("skills-attach", base_conf(model.port, SKILLS)).start()
    yield s
    s.stop()


def env(*skills):
    return [{"type": "shell", "environment": {"type": "container_auto",
                                              "skills": list(skills)}}]


def ref(skill_id, version=None):
    r = {"type": "skill_reference", "skill_id": skill_id}
    if version is not None:
        r["version"] = version
    return r


def zip_of(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def inline(files, name="basic-math", description="Adds numbers, inline."):
    return {"type": "inline", "name": name, "description": description,
            "source": {"type": "base64", "media_type": "application/zip",
                       "data": base64.b64encode(zip_of(files)).decode()}}


def refused(server, tools, headers=ME):
    status, _, out = server.post("/v1/responses", {"model": "m", "tools": tools,
                                                    "input": "SCRIPT: []"}, headers=headers)
    return status, out["error"]


def first_input(model):
    return model.requests()[-1]["json"]["input"]


def test_a_referenced_skill_is_in_the_container_read_only_and_told(server, model):
    sk = create(server, BASIC, ME)
    mount = "basic-math-" + sk["id"][len("skill_"):]
    where = "/home/oai/skills/" + mount  # check-clone: a path in a container
    n = len(model.requests())
    out = turn(server, [[shell_call("ls /home/oai/skills", "cat %s/SKILL.md" % where,  # check-clone: a path in a container
                                    "python3 %s/scripts/add.py 2 3" % where,
                                    "touch %s/x 2>&1; echo $?" % where)],
                        [{"text": "done"}]], tools=env(ref(sk["id"])), headers=ME)
    ls, cat, add, touch = outputs_of(out)
    assert ls == exit_entry(mount + "\n")
    assert cat == exit_entry(BASIC["basic_math/SKILL.md"].decode())
    assert add == exit_entry("5\n")
    assert touch == exit_entry("touch: cannot touch '%s/x': Read-only file system\n1\n" % where)
    # the model was told, in a user message before the request's own input
    sent = model.requests()[n]["json"]["input"]
    assert sent[0] == {"type": "message", "role": "user", "content": [{
        "type": "input_text",
        "text": CONTEXT_HEAD + "\n- basic-math: Adds numbers. (%s/SKILL.md)" % where}]}
    assert sent[1]["role"] == "user" and "SCRIPT:" in json.dumps(sent[1])
    # every round carries it: the follow-up too
    assert model.requests()[n + 1]["json"]["input"][0] == sent[0]
    # the client's tools come back as it sent them
    assert out["tools"] == env(ref(sk["id"]))


def audit_lines(server, event):
    with open(os.path.join(server.root, "logs", "audit.jsonl")) as f:
        return [json.loads(line) for line in f if json.loads(line).get("event") == event]


def test_the_audit_log_names_each_containers_skills(server, model):
    sk = create(server, other_skill("audited"), ME)
    add_version(server, sk["id"], other_skill("audited"), ME)     # the same bundle again
    files = {"inl/SKILL.md": b"---\nname: inl\ndescription: Inline.\n---\n"}
    out = turn(server, [[shell_call("true")], [{"text": "ok"}]], headers=ME,
               tools=env(ref(sk["id"], 2), inline(files, "inl", "Told.")))
    container = container_of(out)
    lines = [x for x in audit_lines(server, "skills") if x["container_id"] == container]
    assert len(lines) == 1
    line = lines[0]
    assert set(line) == {"time", "request_id", "client", "event", "container_id", "owner",
                         "skills"}
    assert re.fullmatch(r"own_[0-9a-f]{64}", line["owner"])   # the keyed hash, never the key
    (first, second) = line["skills"]
    assert {k: first[k] for k in ("skill_id", "version", "name")} == {
        "skill_id": sk["id"], "version": 2, "name": "audited"}
    assert re.fullmatch(r"[0-9a-f]{64}", first["bundle"])
    assert {k: second[k] for k in ("inline", "name")} == {"inline": True, "name": "inl"}
    assert "skill_id" not in second


def test_the_container_keeps_its_skills_on_the_next_turn(server, model):
    sk = create(server, other_skill("keeps_it"), ME)
    where = "/home/oai/skills/keeps-it-" + sk["id"][len("skill_"):]  # check-clone: a path in a container
    first = turn(server, [[shell_call("cat %s/notes.txt" % where)], [{"text": "ok"}]],
                 tools=env(ref(sk["id"])), headers=ME)
    assert outputs_of(first) == [exit_entry("notes of keeps_it\n")]
    n = len(model.requests())
    second = turn(server, [[shell_call("cat %s/notes.txt" % where)], [{"text": "ok"}]],
                  tools=env(ref(sk["id"])), headers=ME, previous_response_id=first["id"])
    assert outputs_of(second) == [exit_entry("notes of keeps_it\n")]
    container = items_of(first, "shell_call")[0]["environment"]["container_id"]
    assert items_of(second, "shell_call")[0]["environment"]["container_id"] == container
    # told once, when the container was made: the chain holds it since
    assert "Skills are installed" not in json.dumps(model.requests()[n]["json"]["input"])


def test_versions_latest_and_the_default(server, model):
    sk = create(server, BASIC, ME)
    add_version(server, sk["id"], BASIC_V2, ME)          # 2: the latest, not the default
    where = "/home/oai/skills/basic-math-" + sk["id"][len("skill_"):]  # check-clone: a path in a container
    for version, has_sub in ((None, False), ("latest", True), (2, True), ("1", False)):
        out = turn(server, [[shell_call("ls %s/scripts" % where)], [{"text": "ok"}]],
                   tools=env(ref(sk["id"], version)), headers=ME)
        assert outputs_of(out) == [exit_entry("add.py\nsub.py\n" if has_sub else "add.py\n")]


def test_an_inline_skill(server, model):
    files = {"inline_math/SKILL.md": b"---\nname: inline-math\ndescription: From a zip.\n"
                                     b"---\n# Inline\n",
             "inline_math/run.sh": b"echo inline\n"}
    n = len(model.requests())
    out = turn(server, [[shell_call("ls /home/oai/skills", "sh /home/oai/skills/*/run.sh")],  # check-clone: a path in a container
                        [{"text": "ok"}]], tools=env(inline(files, "inline-math", "Told.")),
               headers=ME)
    ls, run = outputs_of(out)
    assert ls["stdout"].startswith("inline-math-") and len(ls["stdout"]) == len(
        "inline-math-") + 33
    assert run == exit_entry("inline\n")
    told = model.requests()[n]["json"]["input"][0]["content"][0]["text"]
    assert told.endswith("\n- inline-math: Told. (/home/oai/skills/%s/SKILL.md)"  # check-clone: a path in a container
                         % ls["stdout"].strip())


def bundles(server):
    """The bundles in the store: (2 hex, digest) of each tree, and of each
    zip (a leftover of a removal, named apart, is none)."""
    out = set()
    for e in store_entries(server):
        parts = e.rstrip("/").split("/")
        if len(parts) == 2 and re.fullmatch(r"[0-9a-f]{64}(\.zip)?", parts[1]):
            out.add((parts[0], parts[1]))
    return out


def container_of(out):
    return items_of(out, "shell_call")[0]["environment"]["container_id"]


def test_an_inline_bundle_goes_with_its_container(server, model):
    files = {"goes_away/SKILL.md": b"---\nname: goes-away\ndescription: Gone later.\n---\n",
             "goes_away/data.txt": b"kept while the container runs\n"}
    before = bundles(server)
    out = turn(server, [[shell_call("cat /home/oai/skills/*/data.txt")], [{"text": "ok"}]],  # check-clone: a path in a container
               tools=env(inline(files)), headers=ME)
    assert outputs_of(out) == [exit_entry("kept while the container runs\n")]
    added = bundles(server) - before
    assert len(added) == 2                           # its tree and its zip
    status, _ = api(server, "DELETE", "/v1/containers/" + container_of(out), ME)
    assert status == 200
    # nothing names it any more: the supervisor removes it once its sandbox
    # is gone, after the deletion's answer
    assert wait_for(lambda: bundles(server), before) == before


def test_a_deleted_version_stays_while_a_container_shows_it(server, model):
    sk = create(server, other_skill("shown_on"), ME)
    where = "/home/oai/skills/shown-on-" + sk["id"][len("skill_"):]  # check-clone: a path in a container
    before = bundles(server)
    out = turn(server, [[shell_call("cat %s/notes.txt" % where)], [{"text": "ok"}]],
               tools=env(ref(sk["id"])), headers=ME)
    assert outputs_of(out) == [exit_entry("notes of shown_on\n")]
    assert api(server, "DELETE", "/v1/skills/" + sk["id"], ME)[0] == 200
    assert bundles(server) == before                 # the container still shows it
    again = turn(server, [[shell_call("cat %s/notes.txt" % where)], [{"text": "ok"}]],
                 tools=env(ref(sk["id"])), headers=ME, previous_response_id=out["id"])
    assert outputs_of(again) == [exit_entry("notes of shown_on\n")]
    assert api(server, "DELETE", "/v1/containers/" + container_of(out), ME)[0] == 200
    # its end removed it (the tree and the zip), once its sandbox was gone
    assert wait_for(lambda: len(before - bundles(server)), 2) == 2


def test_a_container_made_with_skills_through_the_containers_api(server, model):
    sk = create(server, other_skill("api_made"), ME)
    mount = "api-made-" + sk["id"][len("skill_"):]
    status, c = api(server, "POST", "/v1/containers", ME,
                    {"name": "with skills", "skills": [ref(sk["id"])]})
    assert status == 200, c
    assert "skills" not in c                  # OpenAI's container object does not echo them
    told = CONTEXT_HEAD + "\n- api-made: Skill api_made. (/home/oai/skills/%s/SKILL.md)" % mount  # check-clone: a path in a container
    # the hosted shell, by reference: the files are there, and the model is told
    n = len(model.requests())
    out = turn(server, [[shell_call("cat /home/oai/skills/%s/notes.txt" % mount)],  # check-clone: a path in a container
                        [{"text": "ok"}]], headers=ME,
               tools=[{"type": "shell", "environment": {"type": "container_reference",
                                                        "container_id": c["id"]}}])
    assert outputs_of(out) == [exit_entry("notes of api_made\n")]
    assert model.requests()[n]["json"]["input"][0]["content"][0]["text"] == told
    # code_interpreter in the same container: the same files, and told too
    n = len(model.requests())
    status, _, out = server.post("/v1/responses", {
        "model": "m", "include": ["code_interpreter_call.outputs"],
        "tools": [{"type": "code_interpreter", "container": c["id"]}],
        "input": "SCRIPT: " + json.dumps([
            [{"call": "print(open('/home/oai/skills/%s/notes.txt').read(), end='')" % mount}],  # check-clone: a path in a container
            [{"text": "{{last_output}}"}]])}, headers=ME)
    assert status == 200, out
    assert out["output"][-1]["content"][0]["text"] == "notes of api_made\n"
    assert model.requests()[n]["json"]["input"][0]["content"][0]["text"] == told
    assert api(server, "DELETE", "/v1/containers/" + c["id"], ME)[0] == 200


def test_the_containers_api_refuses_a_skill_it_cannot_attach(server, model):
    status, body = api(server, "POST", "/v1/containers", ME,
                       {"name": "x", "skills": [ref("skill_" + "2" * 32)]})
    assert (status, body["error"]) == (400, {
        "type": "invalid_request_error", "code": "skill_not_found",
        "param": "skills[0].skill_id",
        "message": "Skill with id 'skill_%s' not found." % ("2" * 32)})
    status, listing = api(server, "GET", "/v1/containers", ME)
    assert [x["name"] for x in listing["data"]].count("x") == 0


def test_unknown_or_another_callers_skill_is_refused(server, model):
    theirs = create(server, other_skill("theirs_only"), OTHER)
    n = len(model.requests())
    for skill_id in ("skill_" + "0" * 32, theirs["id"]):
        assert refused(server, env(ref(skill_id))) == (400, {
            "type": "invalid_request_error", "code": "skill_not_found",
            "param": "tools[0].environment.skills[0].skill_id",
            "message": "Skill with id '%s' not found." % skill_id})
    assert len(model.requests()) == n                  # refused before round 1


def test_a_version_the_skill_does_not_have(server, model):
    sk = create(server, other_skill("one_version"), ME)
    assert refused(server, env(ref(sk["id"], 7))) == (400, {
        "type": "invalid_request_error", "code": "skill_version_not_found",
        "param": "tools[0].environment.skills[0].version",
        "message": "Skill '%s' has no version '7'." % sk["id"]})


def test_malformed_entries(server, model):
    sk = create(server, other_skill("malformed"), ME)
    cases = [
        (ref(sk["id"], 0), "tools[0].environment.skills[0].version",
         "A skill's 'version' must be a version number or \"latest\".", "invalid_value"),
        ({"type": "skill_reference"}, "tools[0].environment.skills[0].skill_id",
         "Invalid type for 'tools[0].environment.skills[0].skill_id': expected a skill id "
         "of 1 to 64 characters.", "invalid_type"),
        ({"type": "other"}, "tools[0].environment.skills[0].type",
         "A skill's 'type' must be \"skill_reference\" or \"inline\".", "invalid_value"),
        (dict(inline(BASIC), source={"type": "url"}), "tools[0].environment.skills[0].source",
         "An inline skill's source must be {\"type\": \"base64\", \"media_type\": "
         "\"application/zip\", \"data\": ...}.", "invalid_value"),
    ]
    for entry, param, message, code in cases:
        status, error = refused(server, env(entry))
        assert (status, error["param"], error["message"]) == (400, param, message)
        assert error["code"] == code
    status, error = refused(server, env(ref(sk["id"]), ref(sk["id"])))
    assert (status, error) == (400, {
        "type": "invalid_request_error", "code": "duplicate_skill",
        "param": "tools[0].environment.skills[1]",
        "message": "Skill 'malformed' is given twice."})


def test_an_inline_zip_that_is_no_skill(server, model):
    status, error = refused(server, env(inline({"x/readme.txt": b"no manifest"})))
    assert (status, error) == (400, {
        "type": "invalid_request_error", "code": None,
        "param": "tools[0].environment.skills[0].source.data",
        "message": "The skill has no SKILL.md at the top of its folder."})


def test_skills_where_they_are_not_served(httpd, model):
    status, _, out = httpd.post("/v1/responses", {
        "model": "m", "tools": env(ref("skill_" + "1" * 32)), "input": "SCRIPT: []"},
        headers=ME)
    assert (status, out["error"]) == (400, {
        "type": "invalid_request_error", "code": "unsupported_parameter",
        "param": "tools[0].environment.skills[0]",
        "message": "Skills are not available here: this server does not serve skills "
                   "(CodeInterpreterSkills)."})
