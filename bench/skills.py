#!/usr/bin/python3
"""What a skill costs a new container: the client's latency of a hosted
shell turn that makes a new container and runs one command in it, with a
10 MB skill attached (a skill_reference to a skill uploaded through the
Skills API) against the same turn without, interleaved, against the
scripted model; and the upload of that skill (the Skills API's create:
the multipart body read, the bundle checked, zipped and stored).

The local sandbox binds the skill's folder from the store, so attaching
it copies nothing; what it adds is resolving the reference (one question
to the supervisor), the user message that tells the model, and the bind.

Usage: /usr/bin/python3 bench/skills.py [N]   (default 40; as root, with the
module built: scripts/build.sh)
"""
import io
import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test"))

from conftest import CLEANUP_PATH, Httpd, base_conf, script_input, start_helper  # noqa: E402

SKILLS = """
CodeInterpreterSkillStore skills
<Location /v1/skills>
  CodeInterpreterSkills On
</Location>
"""
ME = {"Authorization": "Bearer sk-bench-skills"}
SIZE = 10 * 1024 * 1024
WARMUP = 3


def multipart(files):
    boundary = uuid.uuid4().hex
    out = io.BytesIO()
    for name, data in files.items():
        out.write(b"--%s\r\nContent-Disposition: form-data; name=\"files[]\"; "
                  b"filename=\"%s\"\r\n\r\n" % (boundary.encode(), name.encode()))
        out.write(data + b"\r\n")
    out.write(b"--%s--\r\n" % boundary.encode())
    return out.getvalue(), "multipart/form-data; boundary=" + boundary


def upload(server):
    """A skill of SIZE bytes (incompressible), created: (its id, seconds)."""
    files = {"big_data/SKILL.md": b"---\nname: big-data\ndescription: Ten megabytes.\n---\n",
             "big_data/data.bin": os.urandom(SIZE)}
    body, ctype = multipart(files)
    began = time.perf_counter()
    status, _, out = server.request("POST", "/v1/skills", body,
                                    dict(ME, **{"Content-Type": ctype}))
    took = time.perf_counter() - began
    assert status == 200, out
    return json.loads(out)["id"], took


def turn(server, skills):
    env = {"type": "container_auto"}
    if skills:
        env["skills"] = skills
    body = {"model": "m", "tools": [{"type": "shell", "environment": env}],
            "input": script_input([[{"raw_call": {"name": "shell", "arguments": json.dumps(
                {"commands": ["ls /home/oai/skills 2>/dev/null | wc -l"],  # check-clone: a path in a container
                 "timeout_ms": None, "max_output_length": None})}}], [{"text": "ok"}]])}
    began = time.perf_counter()
    status, _, out = server.post("/v1/responses", body, headers=ME)
    took = time.perf_counter() - began
    assert status == 200, out
    result = next(o for o in out["output"] if o["type"] == "shell_call_output")
    assert result["output"][0]["stdout"] == ("1\n" if skills else "0\n"), result
    cid = next(o for o in out["output"] if o["type"] == "shell_call")["environment"][
        "container_id"]
    status, _, _ = server.request("DELETE", CLEANUP_PATH + "/" + cid, headers=ME)
    assert status == 200
    return took


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    model, port = start_helper("fake_model.py")
    server = Httpd("bench-skills", base_conf(port, SKILLS)).start()
    try:
        uploads = []
        for _ in range(3):
            sid, took = upload(server)
            uploads.append(took)
        ref = [{"type": "skill_reference", "skill_id": sid}]
        times = {"without": [], "with": []}
        for i in range(WARMUP + n):
            for kind in (("without", "with") if i % 2 == 0 else ("with", "without")):
                took = turn(server, ref if kind == "with" else None)
                if i >= WARMUP:
                    times[kind].append(took)
    finally:
        server.stop()
        model.kill()
    p50 = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("a new container's first shell turn, %d of each, interleaved (p50):" % n)
    print("| turn | p50 | ratio |")
    print("|---|---|---|")
    print("| without a skill | %.1f ms | 1.00 |" % p50["without"])
    print("| with a 10 MB skill | %.1f ms | %.2f |" % (p50["with"], p50["with"] / p50["without"]))
    print("upload of the 10 MB skill (Skills API create), median of 3: %.0f ms"
          % (statistics.median(uploads) * 1e3))


if __name__ == "__main__":
    main()
