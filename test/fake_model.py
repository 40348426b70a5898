#!/usr/bin/python3
"""Scripted OpenAI-compatible Responses API server used as the model upstream in tests.

It behaves like a provider that has no hosted code interpreter: only function
tools are accepted.  What it answers is driven by a script embedded in the
conversation itself, so the same script works whether the history is replayed
item by item or chained through previous_response_id / conversation.

Script
------
The last user message whose text contains ``SCRIPT:`` holds, after that
marker, a JSON array of rounds; each round is a list of actions.  The round
answered is the number of distinct responses of this server whose output items
(function_call, assistant message, reasoning; recognised by their ids, or the
call_id of a function_call) appear after that message in the conversation.
Without a script the answer is ``[[{"text": "ok"}]]``; past the end of the
script it is ``[{"text": "done"}]``.

Actions (output items come out in order):
  {"call": "<code>", "name"?: str}       function_call, arguments {"code": code},
                                         name defaults to the offered code tool
  {"calls": N, "code": "<code>", "name"?}  N such function_calls
  {"raw_call": {"name": n, "arguments": s}}  function_call with arguments verbatim
  {"function": {"name": n, "arguments": {...} or "str"}}  client function call
  {"text": "..."}                        assistant message; {{last_output}} and
                                         {{outputs}} are substituted
  {"big": N}                             assistant message of N bytes of "x"
  {"reasoning": "summary"}               reasoning item with one summary part
  {"error": {"status", "body", "headers"}}  the whole answer is that error
  {"garbage": "<raw>"}                   200 application/json with that raw body
  {"sleep": s}                           wait s seconds before answering
  {"hold": "<gate>", "after"?: K}        wait until the test opens the gate
                                         (POST /_release): a stream after its
                                         first K events (default 0), a JSON
                                         answer before it is sent. A gate still
                                         shut after HOLD_LIMIT seconds drops the
                                         connection without a word.
  {"stream_fail": "message"}             stream: error + response.failed instead
                                         of response.completed; otherwise 500
  {"stream_cut": K}                      stream: drop the connection after K
                                         events; otherwise a truncated body
  {"stream_gate": true}                  stream: write each delta event only once
                                         the test has seen every earlier one at
                                         its client (POST /_gate {"acked": N},
                                         N the deltas it has seen in all; GET
                                         /_gate tells sent, acked, timeouts); a
                                         delta waits at most 30 s, then the
                                         stream is cut and a timeout counted
  {"hang_up": true}                      answer in full, then close the
                                         connection without saying so (no
                                         Connection: close), as an upstream
                                         dropping an idle keep-alive does
Any action may carry "times": N; it then applies only to the first N requests
that reach its round and is skipped afterwards (for retry tests).

Like OpenAI, it refuses (before reading the script) a request without an
``Authorization: Bearer <key>`` header (401; any key is accepted), a create
whose Content-Type is not application/json (400, unsupported_content_type) and
a create with a top-level parameter that CreateResponse does not define (400,
unknown_parameter), unless the test allowed it (POST /_control).

The Files API, as OpenAI's (Authorization required, a file visible only to
the key that uploaded it; another key or an unknown id gets 404 "No such File
object: ID"):
  POST /v1/files             multipart/form-data "file" and "purpose": the
                             file object (id "file-...", bytes, filename, ...)
  GET /v1/files/{id}         the file object
  GET /v1/files/{id}/content the bytes (application/octet-stream)

Control endpoints (no authentication):
  GET /_requests    every request received, in order: "method", "path",
                    "headers", "body_b64", "json", "peer" (the client's
                    address:port, i.e. which connection it came on), and once
                    answered "status" and "answer" (the JSON body sent back; for
                    a stream, the response of its terminal event)
  POST /_reset      forget the requests, open every gate, clear /_control
  POST /_control    {"extra_parameters": [names]}: top-level parameters to
                    accept besides CreateResponse's (an OpenAI-compatible
                    upstream that takes vendor extensions)
  POST /_release    {"gate": name}: open a gate (before or while it is waited on)
  GET /_holds       {"waiting": [gates held now], "expired": [gates given up]}
  GET /_gate        stream_gate: {"sent", "acked", "timeouts", "abandoned"}:
                    deltas written and seen, waits that ran out, streams
                    whose reader left while a delta waited
  POST /_gate       {"acked": N}: the test has seen N deltas at its client
  GET /_health
"""

import argparse
import base64
import email.parser
import email.policy
import json
import re
import secrets
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DEFAULT_SCRIPT = [[{"text": "ok"}]]
HOLD_LIMIT = 60.0
MISSING_KEY = ("You didn't provide an API key. You need to provide your API key in an "
               "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
               "or as the password field (with blank username) if you're accessing the API "
               "from your browser and are prompted for a username and password. You can "
               "obtain an API key from https://platform.openai.com/account/api-keys.")
# The top-level parameters of a create request: the properties of CreateResponse
# in OpenAI's OpenAPI document (test_fake_model.py checks the list against it).
CREATE_PARAMETERS = frozenset((
    "background", "context_management", "conversation", "include", "input",
    "instructions", "max_output_tokens", "max_tool_calls", "metadata", "model",
    "moderation", "parallel_tool_calls", "previous_response_id", "prompt",
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning",
    "safety_identifier", "service_tier", "store", "stream", "stream_options",
    "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
    "truncation", "user",
))
DONE_ROUND = [{"text": "done"}]
TOOL_CHOICE_NONE_TEXT = "tool_choice none honoured"

_ITEM_ID_RE = re.compile(r"^(?:fc|msg|rs)_(\d+)_\d+$")
_CALL_ID_RE = re.compile(r"^call_(\d+)_\d+$")
_CALL_ACTIONS = ("call", "calls", "raw_call", "function")
_KNOWN_ACTIONS = _CALL_ACTIONS + (
    "text", "big", "reasoning", "error", "garbage", "sleep", "stream_fail", "stream_cut",
    "hang_up", "hold", "stream_gate",
)
GATE_WAIT = 30.0


def echoed_tools(tools):
    """Tools as OpenAI echoes them: function tools completed with "strict"
    (true unless the request said otherwise)."""
    out = []
    for tool in tools or []:
        if isinstance(tool, dict) and tool.get("type") == "function" and "strict" not in tool:
            tool = dict(tool, strict=True)
        out.append(tool)
    return out


class ApiError(Exception):
    """An OpenAI-shaped error answer."""

    def __init__(self, status, message, param=None, etype="invalid_request_error",
                 code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.etype = etype
        self.code = code

    def body(self):
        return {"error": {"message": self.message, "type": self.etype,
                          "param": self.param, "code": self.code}}


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.responses = {}       # response id -> {"input", "output", "response"}
        self.conversations = {}   # conversation id -> list of items
        self.items = {}           # item id -> item (for item_reference)
        self.files = {}           # file id -> {"owner", "object", "data"} (Files API)
        self.serial = 0
        self.hits = {}            # (script, round, action index) -> count
        self.extra_parameters = set()
        self.gates = {}           # gate name -> threading.Event
        self.waiting = []         # gates held now (one entry per waiting answer)
        self.expired = []         # gates given up after HOLD_LIMIT
        # stream_gate: deltas written, deltas the test saw, waits that ran out
        self.gate = {"sent": 0, "acked": 0, "timeouts": 0, "abandoned": 0}
        self.gate_changed = threading.Condition(self.lock)

    def gate_wait(self, sock):
        """Before a gated delta: every earlier one must have been seen. Gives
        up when the reader of this stream (SOCK's peer) has gone away
        ("abandoned") or after GATE_WAIT seconds ("timeouts")."""
        deadline = time.monotonic() + GATE_WAIT
        with self.gate_changed:
            while self.gate["acked"] < self.gate["sent"]:
                if _peer_closed(sock):
                    self.gate["abandoned"] += 1
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    self.gate["timeouts"] += 1
                    return False
                self.gate_changed.wait(min(left, 0.05))
            self.gate["sent"] += 1
            return True

    def gate_ack(self, acked):
        with self.gate_changed:
            self.gate["acked"] = acked
            self.gate_changed.notify_all()

    def next_serial(self):
        with self.lock:
            self.serial += 1
            return self.serial

    def _gate(self, name):
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def release(self, name):
        self._gate(name).set()

    def hold(self, name):
        """Wait until gate NAME is opened; False when HOLD_LIMIT passed first."""
        gate = self._gate(name)
        with self.lock:
            self.waiting.append(name)
        opened = gate.wait(HOLD_LIMIT)
        with self.lock:
            self.waiting.remove(name)
            if not opened:
                self.expired.append(name)
        return opened

    def reset(self):
        with self.lock:
            self.requests.clear()
            self.extra_parameters = set()
            gates, self.gates = self.gates, {}
            self.expired = []
            self.gate = {"sent": 0, "acked": 0, "timeouts": 0, "abandoned": 0}
            self.gate_changed.notify_all()
        for gate in gates.values():
            gate.set()


# ---------------------------------------------------------------- helpers

def upload_file(state, owner, content_type, body):
    """A file of POST /v1/files, stored for OWNER: its file object."""
    if not (content_type or "").lower().startswith("multipart/form-data"):
        raise ApiError(400, "Expected a multipart/form-data body.")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    fields, upload = {}, None
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name == "file" and part.get_filename() is not None:
            upload = (part.get_filename(), part.get_payload(decode=True) or b"")
        elif name:
            fields[name] = part.get_payload(decode=True).decode("utf-8", "replace")
    if upload is None:
        raise ApiError(400, "Missing required parameter: 'file'.", "file")
    if not fields.get("purpose"):
        raise ApiError(400, "Missing required parameter: 'purpose'.", "purpose")
    obj = {"id": "file-" + secrets.token_hex(12), "object": "file",
           "bytes": len(upload[1]), "created_at": int(time.time()),
           "filename": upload[0], "purpose": fields["purpose"], "status": "processed",
           "expires_at": None, "status_details": None}
    with state.lock:
        state.files[obj["id"]] = {"owner": owner, "object": obj, "data": upload[1]}
    return obj


def _peer_closed(sock):
    """Whether the other end of SOCK has closed it (readable, nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _json_bytes(obj):
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def message_text(item):
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("input_text", "text", "output_text"):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return ""


def output_string(output):
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [p.get("text", "") for p in output
                 if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(texts)
    return json.dumps(output)


def item_serial(item):
    """The response serial encoded in an item this server generated, or None."""
    itype = item.get("type")
    if itype not in ("function_call", "message", "reasoning"):
        return None
    if itype == "message" and item.get("role") != "assistant":
        return None
    ident = item.get("id")
    if isinstance(ident, str):
        m = _ITEM_ID_RE.match(ident)
        if m:
            return int(m.group(1))
    if itype == "function_call":
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            m = _CALL_ID_RE.match(call_id)
            if m:
                return int(m.group(1))
    return None


def _chunks(text, pieces=20, minimum=8):
    if not text:
        return []
    size = max(minimum, -(-len(text) // pieces))
    return [text[i:i + size] for i in range(0, len(text), size)]


# ------------------------------------------------------------ the model

class Answer:
    """What to send back for one POST /v1/responses."""

    def __init__(self, status=200, body=b"", headers=None, response=None,
                 stream=False, sleep=0.0, fail=None, cut=None, hang_up=False,
                 hold=None, hold_after=0, gate=False):
        self.status = status
        self.body = body
        self.headers = headers or []
        self.response = response
        self.stream = stream
        self.sleep = sleep
        self.fail = fail
        self.cut = cut
        self.hang_up = hang_up
        self.gate = gate
        self.hold = hold
        self.hold_after = hold_after


def check_authorization(value):
    scheme, _, key = (value or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(401, MISSING_KEY)


def check_content_type(value):
    if (value or "").split(";", 1)[0].strip().lower() != "application/json":
        raise ApiError(400, "Unsupported content type: '%s'. This API method only accepts "
                       "'application/json' requests, but you specified the header "
                       "'Content-Type: %s'. Please try again with a supported content type."
                       % (value or "", value or ""), code="unsupported_content_type")


def check_parameters(state, body):
    with state.lock:
        extra = set(state.extra_parameters)
    for name in body:
        if name not in CREATE_PARAMETERS and name not in extra:
            raise ApiError(400, "Unknown parameter: '%s'." % name, name,
                           code="unknown_parameter")


def normalize_input(state, raw):
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise ApiError(400, "Invalid type for 'input': expected a string or an array.", "input")
    items = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ApiError(400, "Invalid type for 'input[%d]': expected an object." % i, "input")
        if "type" not in item and "role" in item:
            item = dict(item, type="message")
        itype = item.get("type")
        if itype == "code_interpreter_call":
            raise ApiError(400, "Unsupported input item type: code_interpreter_call", "input")
        if itype == "item_reference":
            with state.lock:
                found = state.items.get(item.get("id"))
            if found is None:
                raise ApiError(400, "Item with id '%s' not found." % item.get("id"), "input")
            item = found
        items.append(item)
    return items


def check_tools(body):
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ApiError(400, "Invalid type for 'tools': expected an array.", "tools")
    for tool in tools:
        ttype = tool.get("type") if isinstance(tool, dict) else None
        if ttype != "function":
            raise ApiError(400, "Unsupported tool type: %s" % ttype, "tools")
    tc = body.get("tool_choice")
    if isinstance(tc, dict):
        ttype = tc.get("type")
        if ttype == "allowed_tools":
            for allowed in tc.get("tools") or []:
                atype = allowed.get("type") if isinstance(allowed, dict) else None
                if atype != "function":
                    raise ApiError(400, "Unsupported tool_choice type: %s" % atype, "tool_choice")
        elif ttype != "function":
            raise ApiError(400, "Unsupported tool_choice type: %s" % ttype, "tool_choice")
    return tools


def check_calls(conv):
    seen = set()
    for item in conv:
        itype = item.get("type")
        if itype == "function_call":
            seen.add(item.get("call_id"))
        elif itype == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in seen:
                raise ApiError(400, "No tool call found for function call output with call_id %s."
                               % call_id, "input")
    # every call needs an output later on; report the earliest unanswered one
    first = None
    answered = set()
    for item in reversed(conv):
        if item.get("type") == "function_call_output":
            answered.add(item.get("call_id"))
        elif item.get("type") == "function_call":
            call_id = item.get("call_id")
            if call_id is not None and call_id not in answered:
                first = call_id
    if first is not None:
        raise ApiError(400, "No tool output found for function call %s." % first, "input")


def find_script(conv):
    index = None
    text = None
    for i, item in enumerate(conv):
        if item.get("type") == "message" and item.get("role") == "user":
            t = message_text(item)
            if "SCRIPT:" in t:
                index, text = i, t
    if index is None:
        return None, "", DEFAULT_SCRIPT
    raw = text.split("SCRIPT:", 1)[1].strip()
    try:
        script, _ = json.JSONDecoder().raw_decode(raw)
    except ValueError as exc:
        raise ApiError(400, "Invalid SCRIPT: %s" % exc, "input")
    if not isinstance(script, list):
        raise ApiError(400, "Invalid SCRIPT: expected an array of rounds.", "input")
    rounds = []
    for rnd in script:
        if isinstance(rnd, dict):
            rnd = [rnd]
        if not isinstance(rnd, list) or not all(isinstance(a, dict) for a in rnd):
            raise ApiError(400, "Invalid SCRIPT: each round must be an array of objects.", "input")
        rounds.append(rnd)
    return index, raw, rounds


def code_tool_name(tools):
    names = []
    for tool in tools:
        params = tool.get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(props, dict) and "code" in props:
            names.append(tool.get("name"))
    if not names:
        raise ApiError(400, "Script calls code but no code tool was offered.", "tools")
    if len(names) > 1:
        raise ApiError(400, "Script calls code but several code tools were offered: %s."
                       % ", ".join(str(n) for n in names), "tools")
    return names[0]


def build_response_object(body, rid, conv, output, status="completed", conversation=None):
    reasoning_items = sum(1 for it in output if it.get("type") == "reasoning")
    input_tokens = 10 + len(conv)
    output_tokens = 5 * len(output)
    reasoning = {"effort": None, "summary": None}
    if isinstance(body.get("reasoning"), dict):
        reasoning.update(body["reasoning"])
    text = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
    resp = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body.get("model") or "fake-model",
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": reasoning,
        "store": body.get("store", True),
        "temperature": 1,
        "text": text,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": echoed_tools(body.get("tools")),
        "top_p": 1,
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 3 * reasoning_items},
            "total_tokens": input_tokens + output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
    }
    if conversation is not None:
        resp["conversation"] = {"id": conversation}
    return resp


def respond(state, body):
    """Turn one parsed request body into an Answer (raises ApiError)."""
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid type for body: expected an object.", None)
    check_parameters(state, body)
    tools = check_tools(body)
    new_items = normalize_input(state, body.get("input"))

    prev_id = body.get("previous_response_id")
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None and prev_id is not None:
        raise ApiError(400, "Cannot use both 'conversation' and 'previous_response_id'.",
                       "conversation")

    history = []
    if prev_id is not None:
        with state.lock:
            stored = state.responses.get(prev_id)
        if stored is None:
            raise ApiError(400, "Previous response with id '%s' not found." % prev_id,
                           "previous_response_id")
        history = stored["input"] + stored["output"]
    elif conversation is not None:
        with state.lock:
            history = list(state.conversations.get(conversation, []))
    conv = history + new_items
    check_calls(conv)

    script_index, script_raw, script = find_script(conv)
    start = 0 if script_index is None else script_index + 1
    serials = set()
    for item in conv[start:]:
        s = item_serial(item)
        if s is not None:
            serials.add(s)
    round_index = len(serials)
    actions = script[round_index] if round_index < len(script) else DONE_ROUND

    # "times" limits an action to the first N requests reaching its round
    active = []
    with state.lock:
        for i, action in enumerate(actions):
            if "times" in action:
                key = (script_raw, round_index, i)
                count = state.hits.get(key, 0)
                state.hits[key] = count + 1
                if count >= int(action["times"]):
                    continue
            active.append(action)

    sleep = 0.0
    fail = None
    cut = None
    hang_up = False
    gate = False
    hold = None
    hold_after = 0
    for action in active:
        kind = [k for k in action if k in _KNOWN_ACTIONS]
        if not kind:
            raise ApiError(400, "Unknown script action: %s" % json.dumps(action), "input")
        if "sleep" in action:
            sleep += float(action["sleep"])
        if "stream_fail" in action:
            fail = str(action["stream_fail"])
        if "stream_cut" in action:
            cut = int(action["stream_cut"])
        if action.get("hang_up"):
            hang_up = True
        if action.get("stream_gate"):
            gate = True
        if "hold" in action:
            hold = str(action["hold"])
            hold_after = int(action.get("after", 0))

    for action in active:
        if "error" in action:
            err = action["error"] or {}
            ebody = err.get("body", {"error": {"message": "The server had an error while "
                                               "processing your request.",
                                               "type": "server_error", "param": None,
                                               "code": None}})
            raw = ebody.encode("utf-8") if isinstance(ebody, str) else _json_bytes(ebody)
            headers = [(k, str(v)) for k, v in (err.get("headers") or {}).items()]
            return Answer(int(err.get("status", 500)), raw, headers, sleep=sleep, hold=hold)
        if "garbage" in action:
            g = action["garbage"]
            raw = g.encode("utf-8") if isinstance(g, str) else _json_bytes(g)
            return Answer(200, raw, sleep=sleep, hold=hold)

    tool_choice_none = body.get("tool_choice") == "none"
    outputs_after = [output_string(it.get("output")) for it in conv[start:]
                     if it.get("type") == "function_call_output"]
    last_output = ""
    for it in conv:
        if it.get("type") == "function_call_output":
            last_output = output_string(it.get("output"))

    serial = state.next_serial()
    output = []

    def add_message(text):
        k = len(output)
        output.append({
            "type": "message", "id": "msg_%04d_%d" % (serial, k), "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [],
                         "logprobs": []}],
        })

    def add_call(name, arguments):
        k = len(output)
        output.append({
            "type": "function_call", "id": "fc_%04d_%d" % (serial, k),
            "call_id": "call_%04d_%d" % (serial, k), "name": name,
            "arguments": arguments, "status": "completed",
        })

    for action in active:
        if tool_choice_none and any(k in action for k in _CALL_ACTIONS):
            add_message(TOOL_CHOICE_NONE_TEXT)
            continue
        if "call" in action:
            name = action.get("name") or code_tool_name(tools)
            add_call(name, json.dumps({"code": action["call"]}))
        elif "calls" in action:
            name = action.get("name") or code_tool_name(tools)
            for _ in range(int(action["calls"])):
                add_call(name, json.dumps({"code": action.get("code", "")}))
        elif "raw_call" in action:
            rc = action["raw_call"]
            add_call(rc.get("name"), rc.get("arguments", ""))
        elif "function" in action:
            fn = action["function"]
            args = fn.get("arguments", {})
            add_call(fn.get("name"), args if isinstance(args, str) else json.dumps(args))
        elif "text" in action:
            text = str(action["text"])
            text = text.replace("{{last_output}}", last_output)
            text = text.replace("{{outputs}}", json.dumps(outputs_after))
            add_message(text)
        elif "big" in action:
            add_message("x" * int(action["big"]))
        elif "reasoning" in action:
            k = len(output)
            output.append({
                "type": "reasoning", "id": "rs_%04d_%d" % (serial, k),
                "summary": [{"type": "summary_text", "text": str(action["reasoning"])}],
                "encrypted_content": "enc_%04d_%d" % (serial, k),
            })

    rid = "resp_%04d_%s" % (serial, secrets.token_hex(12))
    resp = build_response_object(body, rid, conv, output, conversation=conversation)
    stream = bool(body.get("stream", False))

    if fail is not None and not stream:
        err = ApiError(500, fail, None, etype="server_error", code="server_error")
        return Answer(500, _json_bytes(err.body()), sleep=sleep, hold=hold)

    if fail is None and cut is None:
        with state.lock:
            for item in new_items + output:
                if isinstance(item.get("id"), str):
                    state.items[item["id"]] = item
            if body.get("store", True) is not False:
                state.responses[rid] = {"input": conv, "output": output, "response": resp}
            if conversation is not None:
                state.conversations.setdefault(conversation, []).extend(new_items + output)

    return Answer(200, _json_bytes(resp), response=resp, stream=stream,
                  sleep=sleep, fail=fail, cut=cut, hang_up=hang_up, hold=hold,
                  hold_after=hold_after, gate=gate)


def _content_span(arguments):
    """Where what the client sees of a call's arguments lies: the code string
    of {"code": ...}, the command strings of {"commands": [...], ...} (from
    the first command's first character to the last one's closing quote);
    (start, end) offsets, or None for other arguments."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    if isinstance(args, dict) and isinstance(args.get("commands"), list) \
            and args["commands"] and '["' in arguments and '"]' in arguments:
        return arguments.index('["') + 2, arguments.rindex('"]')
    if isinstance(args, dict) and arguments.startswith('{"code": "'):
        return len('{"code": "'), len(arguments) - 2
    return None


def _argument_chunks(arguments):
    """A call's arguments in deltas, each holding some of what the client
    sees (the code, or the shell's commands): what comes before it rides
    with the first piece, what comes after it with the last."""
    pieces = _chunks(arguments)
    span = _content_span(arguments) or (len('{"code": "'), len(arguments) - 2)
    while len(pieces) > 1 and len(pieces[0]) <= span[0]:
        pieces[0:2] = [pieces[0] + pieces[1]]
    while len(pieces) > 1 and len(arguments) - len(pieces[-1]) >= span[1]:
        pieces[-2:] = [pieces[-2] + pieces[-1]]
    return pieces


def stream_events(resp, fail=None):
    """The SSE events (type, payload) for a response, in OpenAI's order."""
    events = []

    def ev(etype, **payload):
        data = {"type": etype, "sequence_number": len(events)}
        data.update(payload)
        events.append((etype, data))

    base = dict(resp, status="in_progress", output=[], usage=None)
    ev("response.created", response=base)
    ev("response.in_progress", response=base)
    for i, item in enumerate(resp["output"]):
        itype = item["type"]
        iid = item["id"]
        if itype == "message":
            ev("response.output_item.added", output_index=i,
               item=dict(item, status="in_progress", content=[]))
            for ci, part in enumerate(item["content"]):
                text = part["text"]
                ev("response.content_part.added", item_id=iid, output_index=i,
                   content_index=ci,
                   part={"type": "output_text", "annotations": [], "logprobs": [], "text": ""})
                for delta in _chunks(text):
                    ev("response.output_text.delta", item_id=iid, output_index=i,
                       content_index=ci, delta=delta, logprobs=[])
                ev("response.output_text.done", item_id=iid, output_index=i,
                   content_index=ci, text=text, logprobs=[])
                ev("response.content_part.done", item_id=iid, output_index=i,
                   content_index=ci, part=part)
        elif itype == "function_call":
            ev("response.output_item.added", output_index=i,
               item=dict(item, arguments="", status="in_progress"))
            for delta in _argument_chunks(item["arguments"]):
                ev("response.function_call_arguments.delta", item_id=iid, output_index=i,
                   delta=delta)
            ev("response.function_call_arguments.done", item_id=iid, output_index=i,
               name=item["name"], arguments=item["arguments"])
        elif itype == "reasoning":
            ev("response.output_item.added", output_index=i, item=dict(item, summary=[]))
            for si, part in enumerate(item["summary"]):
                ev("response.reasoning_summary_part.added", item_id=iid, output_index=i,
                   summary_index=si, part={"type": "summary_text", "text": ""})
                for delta in _chunks(part["text"]):
                    ev("response.reasoning_summary_text.delta", item_id=iid, output_index=i,
                       summary_index=si, delta=delta)
                ev("response.reasoning_summary_text.done", item_id=iid, output_index=i,
                   summary_index=si, text=part["text"])
                ev("response.reasoning_summary_part.done", item_id=iid, output_index=i,
                   summary_index=si, part=part)
        ev("response.output_item.done", output_index=i, item=item)
    if fail is None:
        ev("response.completed", response=resp)
    else:
        ev("error", code="server_error", message=fail, param=None,
           error={"type": "server_error", "code": "server_error", "message": fail,
                  "param": None})
        failed = dict(resp, status="failed", usage=None,
                      error={"code": "server_error", "message": fail})
        ev("response.failed", response=failed)
    return events


# ------------------------------------------------------------- HTTP layer

class Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True    # answers leave at once, no delayed-ACK stall
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1.0"
    sys_version = ""

    def log_message(self, fmt, *args):
        if getattr(self.server, "verbose", False):
            super().log_message(fmt, *args)

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    # -- body and answers

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            data = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ValueError("truncated chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        trailer = self.rfile.readline(65537)
                        if trailer in (b"\r\n", b"\n", b""):
                            break
                    break
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    raise ValueError("truncated chunk")
                data.append(chunk)
                self.rfile.readline(3)
            return b"".join(data)
        length = self.headers.get("Content-Length")
        if length:
            n = int(length)
            data = self.rfile.read(n)
            if len(data) < n:
                raise ValueError("truncated body")
            return data
        return b""

    def _note_answer(self, status, answer):
        """Record what the current request was answered (see GET /_requests)."""
        record = getattr(self, "_record", None)
        if record is not None:
            with self.server.state.lock:
                record["status"] = status
                record["answer"] = answer

    def _send(self, status, body=b"", ctype="application/json", headers=()):
        if ctype == "application/json":
            try:
                answer = json.loads(body.decode("utf-8")) if body else None
            except (ValueError, UnicodeDecodeError, RecursionError):
                answer = None          # "garbage" answers are recorded as None
            self._note_answer(status, answer)
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
        self.send_header("x-request-id", "req_" + secrets.token_hex(8))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if status != 204 and self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _send_error(self, err):
        self._send(err.status, _json_bytes(err.body()))

    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.flush()

    # -- routing

    def _dispatch(self):
        try:
            self._handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True     # the client left before the answer

    def _handle(self):
        self._record = None
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self._send_error(ApiError(400, "Could not read the request body.", None))
            return
        path = urlsplit(self.path).path
        state = self.server.state

        if path == "/_health" and self.command == "GET":
            self._send(200, b"ok", "text/plain")
            return
        if path == "/_requests" and self.command == "GET":
            with state.lock:
                data = list(state.requests)
            self._send(200, _json_bytes(data))
            return
        if path == "/_gate" and self.command == "GET":
            with state.lock:
                data = dict(state.gate)
            self._send(200, _json_bytes(data))
            return
        if path == "/_gate" and self.command == "POST":
            state.gate_ack(int(json.loads(body or b"{}").get("acked", 0)))
            self._send(200, b"{}")
            return
        if path == "/_reset" and self.command == "POST":
            state.reset()
            self._send(204)
            return
        if path.startswith("/_"):
            self._control(path, body)
            return

        try:
            parsed = json.loads(body.decode("utf-8")) if body else None
        except (ValueError, UnicodeDecodeError):
            parsed = None
            bad_json = True
        else:
            bad_json = False
        self._record = {
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_b64": base64.b64encode(body).decode("ascii"),
            "json": parsed,
            "peer": "%s:%d" % self.client_address[:2],
        }
        with state.lock:
            state.requests.append(self._record)

        try:
            check_authorization(self.headers.get("Authorization"))
        except ApiError as err:
            self._send_error(err)
            return
        if self.command == "POST" and path.rstrip("/") in ("/v1/responses", "/responses"):
            try:
                check_content_type(self.headers.get("Content-Type"))
            except ApiError as err:
                self._send_error(err)
                return
            if bad_json or not body:
                self._send_error(ApiError(
                    400, "We could not parse the JSON body of your request.", None))
                return
            self._create(parsed)
            return
        if re.match(r"^(?:/v1)?/files(?:/|$)", path):
            self._files(path, body)
            return
        m = re.match(r"^(?:/v1)?/responses/([^/]+)$", path)
        if m and self.command == "GET":
            with state.lock:
                stored = state.responses.get(m.group(1))
            if stored is None:
                self._send_error(ApiError(404, "Response with id '%s' not found."
                                          % m.group(1), None))
            else:
                self._send(200, _json_bytes(stored["response"]))
            return
        self._send_error(ApiError(404, "Invalid URL (%s %s)" % (self.command, path), None))

    # -- the Files API: POST /v1/files (multipart "file" and "purpose"),
    # GET /v1/files/{id} (the file object), GET /v1/files/{id}/content (its
    # bytes). A file belongs to the key that uploaded it: another key gets
    # OpenAI's 404.

    def _files(self, path, body):
        state = self.server.state
        owner = self.headers.get("Authorization")
        m = re.match(r"^(?:/v1)?/files/([^/]+)(/content)?$", path)
        if self.command == "POST" and path.rstrip("/") in ("/v1/files", "/files"):
            try:
                obj = upload_file(state, owner, self.headers.get("Content-Type"), body)
            except ApiError as err:
                self._send_error(err)
                return
            self._send(200, _json_bytes(obj))
            return
        if not m or self.command != "GET":
            self._send_error(ApiError(404, "Invalid URL (%s %s)" % (self.command, path)))
            return
        with state.lock:
            stored = state.files.get(m.group(1))
        if stored is None or stored["owner"] != owner:
            self._send_error(ApiError(404, "No such File object: %s" % m.group(1), "id"))
        elif m.group(2):
            self._send(200, stored["data"], "application/octet-stream")
        else:
            self._send(200, _json_bytes(stored["object"]))

    def _control(self, path, body):
        state = self.server.state
        try:
            values = json.loads(body.decode("utf-8")) if body else {}
        except (ValueError, UnicodeDecodeError):
            values = None
        if path == "/_holds" and self.command == "GET":
            with state.lock:
                holds = {"waiting": list(state.waiting), "expired": list(state.expired)}
            self._send(200, _json_bytes(holds))
        elif path == "/_release" and self.command == "POST":
            if not isinstance(values, dict) or not isinstance(values.get("gate"), str):
                self._send(400, _json_bytes({"error": "want {\"gate\": name}"}))
                return
            state.release(values["gate"])
            self._send(204)
        elif path == "/_control" and self.command == "POST":
            extra = values.get("extra_parameters") if isinstance(values, dict) else None
            if set(values or {}) - {"extra_parameters"} or not isinstance(extra, list) \
                    or not all(isinstance(n, str) for n in extra):
                self._send(400, _json_bytes({"error": "want {\"extra_parameters\": [names]}"}))
                return
            with state.lock:
                state.extra_parameters = set(extra)
            self._send(200, _json_bytes({"extra_parameters": sorted(extra)}))
        else:
            self._send(404, _json_bytes({"error": "no control endpoint %s %s"
                                                  % (self.command, path)}))

    def _hold(self, answer):
        """Wait for the answer's gate; False (and the connection dropped) when
        it stayed shut."""
        if self.server.state.hold(answer.hold):
            return True
        self.close_connection = True
        self._note_answer(None, None)
        return False

    def _create(self, parsed):
        try:
            answer = respond(self.server.state, parsed)
        except ApiError as err:
            self._send_error(err)
            return
        if answer.sleep > 0:
            time.sleep(answer.sleep)
        if answer.hold is not None and not (answer.stream and answer.response is not None) \
                and not self._hold(answer):
            return
        if not answer.stream or answer.response is None:
            if answer.cut is not None and answer.response is not None:
                self._send_truncated(answer)
                return
            self._send(answer.status, answer.body, "application/json", answer.headers)
            if answer.hang_up:
                self.close_connection = True
            return
        self._stream(answer)
        if answer.hang_up:
            self.close_connection = True

    def _send_truncated(self, answer):
        self._note_answer(200, None)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body[:len(answer.body) // 2])
        self.wfile.flush()

    def _stream(self, answer):
        events = stream_events(answer.response, answer.fail)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_" + secrets.token_hex(8))
        self.end_headers()
        self._note_answer(200, None if answer.cut is not None else events[-1][1]["response"])
        try:
            for n, (etype, data) in enumerate(events):
                if answer.cut is not None and n >= answer.cut:
                    self.close_connection = True
                    return
                if answer.hold is not None and n == answer.hold_after and \
                        not self._hold(answer):
                    return
                if answer.gate and etype.endswith(".delta") and \
                        not self.server.state.gate_wait(self.connection):
                    self.close_connection = True
                    return
                frame = ("event: %s\ndata: %s\n\n" % (etype, json.dumps(data, ensure_ascii=False)))
                self._write_chunk(frame.encode("utf-8"))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True


class FakeModelServer(ThreadingHTTPServer):
    # A real service listens with a deep backlog. Python's default of 5
    # overflows when a hundred conversations connect at once: the kernel then
    # drops the handshake's last ACK and a connection can wait, unaccepted,
    # for the proxy's whole timeout (a 502 that no real upstream would cause).
    request_queue_size = 1024
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, verbose=False):
        super().__init__(address, Handler)
        self.state = State()
        self.verbose = verbose


def start(port=0, host="127.0.0.1", verbose=False):
    """Run a server in a background daemon thread; returns (server, port)."""
    server = FakeModelServer((host, port), verbose=verbose)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, server.server_address[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Scripted Responses API upstream for tests.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    server = FakeModelServer((args.host, args.port), verbose=args.verbose)
    sys.stdout.write("READY %d\n" % server.server_address[1])
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
