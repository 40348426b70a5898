"""Behaviour fixed while the sources were laid out by part: each test here
fails on the code before the fix.

- server-status's HTML table has as many header cells as cells per row;
- the function's description tells the model whether its sandbox can reach
  the internet (it promised "no internet access" for an E2B tool with
  internet=on);
- an E2B sandbox whose delete fails is logged, never silent.
"""
import re
import time

import pytest

from conftest import TOOL, Httpd, answered_deletes, base_conf, script_input
from test_e2b import e2b, run_one  # noqa: F401  (the fixture, reused)


@pytest.fixture(scope="module")
def status_server(model):
    extra = """
<Location /server-status>
  SetHandler server-status
</Location>
"""
    server = Httpd("fixes", base_conf(model.port, extra)).start()
    yield server
    server.stop()


def test_status_table_rows_match_its_header(status_server, model):
    status, _, body = status_server.post("/v1/responses", {
        "model": "m", "tools": [TOOL],
        "input": script_input([[{"call": "print(1)"}], [{"text": "done"}]])})
    assert status == 200, body
    _, _, html = status_server.request("GET", "/server-status")
    table = html.decode().split("<h2>Code interpreter</h2>", 1)[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table)
    header = re.findall(r"<th>(.*?)</th>", rows[0])
    assert header == ["tool", "live", "warm", "started", "executions", "failures",
                      "timeouts", "mean execution ms"]
    assert len(rows) >= 2
    for row in rows[1:]:
        assert len(re.findall(r"<td>", row)) == len(header), row


def description_sent(model):
    [first] = [r for r in model.requests() if r["json"].get("tools")][:1]
    [ours] = [t for t in first["json"]["tools"] if t.get("name") == "python"]
    return ours["description"]


def test_description_says_an_online_tool_can_reach_the_internet(e2b, model):
    model.reset()
    run_one(e2b, "print(1)", path="/e2bnet/v1/responses")
    text = description_sent(model)
    assert "The sandbox can reach the internet." in text
    assert "no internet" not in text


def test_description_says_an_offline_tool_cannot(e2b, model):
    model.reset()
    run_one(e2b, "print(1)", path="/e2b/v1/responses")
    text = description_sent(model)
    assert "There is no internet access." in text
    assert "reach the internet" not in text


def test_a_failed_delete_is_logged(e2b):
    e2b.fake.reset()
    e2b.server.mark()
    e2b.fake.control(delete_status=500)
    call, told = run_one(e2b, "print(42)")
    assert told == "42\n"
    st = e2b.fake.wait(lambda s: answered_deletes(s) >= 2)
    [create] = st["creates"]
    assert [(d["id"], d["status"]) for d in st["deletes"]] == \
        [(create["id"], 500), (create["id"], 500)]
    deadline = time.time() + 15
    while "CI0311:" not in e2b.server.log_since_mark():
        assert time.time() < deadline, "no CI0311 line"
        time.sleep(0.05)
    lines = [l for l in e2b.server.log_since_mark().splitlines() if "CI0311:" in l]
    assert len(lines) == 1
    assert lines[0].endswith("CI0311: an E2B sandbox could not be deleted (the E2B "
                             "sandbox service answered HTTP 500); it ends when its "
                             "lifetime runs out")
    assert "[code_interpreter:warn]" in lines[0]
    e2b.fake.remove_leftovers()
