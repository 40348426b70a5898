"""The end-to-end path a new user tries first."""
import json

from conftest import TOOL, script_input


def test_one_call_shows_logs(httpd, model):
    status, _, body = httpd.post("/v1/responses", {
        "model": "m", "tools": [TOOL], "include": ["code_interpreter_call.outputs"],
        "input": script_input([[{"call": "print(sum(range(10)))"}],
                               [{"text": "the sum is {{last_output}}"}]])})
    assert status == 200
    call, msg = body["output"]
    assert call["type"] == "code_interpreter_call"
    assert call["status"] == "completed"
    assert call["code"] == "print(sum(range(10)))"
    assert call["outputs"] == [{"type": "logs", "logs": "45\n"}]
    assert call["container_id"].startswith("cntr_")
    assert msg["content"][0]["text"] == "the sum is 45\n"
    assert body["tools"] == [TOOL]


def test_request_without_tool_is_forwarded_byte_for_byte(httpd, model):
    raw = b'{"model":"m",  "input":"hello",\n "tools":[]}'
    status, _, data = httpd.request("POST", "/v1/responses", raw)
    assert status == 200
    seen = model.requests()
    assert len(seen) == 1
    import base64
    assert base64.b64decode(seen[0]["body_b64"]) == raw
    assert json.loads(data)["output"][0]["type"] == "message"
