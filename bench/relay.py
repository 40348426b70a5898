#!/usr/bin/env python3
"""Live token relay figures, measured in one run on this machine:

- time to the first text delta: a streaming request through httpd with
  CodeInterpreter On (intercepted, its round relayed) against the same
  request sent to the scripted upstream itself, paired and interleaved;
- the module's own time per relayed event (the request note ci-module-us,
  which also holds the request's rewrite, divided by the events the upstream
  streamed).

Usage: bench/relay.py [ROUNDS]   (default 300 pairs; the module must be built)
Everything listens on 127.0.0.1 and stops at the end.
"""
import http.client
import json
import os
import statistics
import sys
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TOP, "test"))

from conftest import CLIENT_HEADERS, TOOL, Httpd, base_conf, script_input, start_helper  # noqa: E402

TEXT = "The relay passes each delta on as soon as it is read. " * 8


def body(tools, text_script):
    return {"model": "m", "stream": True, "tools": tools, "input": script_input(text_script)}


def first_delta(port, path, payload):
    """Seconds from sending PAYLOAD to the first output_text.delta, and the
    number of events the stream carried."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    raw = json.dumps(payload).encode()
    t0 = time.perf_counter()
    conn.request("POST", path, body=raw, headers=CLIENT_HEADERS)
    resp = conn.getresponse()
    first = None
    events = 0
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"event: "):
            events += 1
            if first is None and line.strip() == b"event: response.output_text.delta":
                first = time.perf_counter() - t0
    conn.close()
    assert first is not None, "no text delta came"
    return first, events


def module_times(server, count):
    with open(server.access_log) as f:
        lines = f.read().splitlines()[-count:]
    return [int(l.rsplit("module_us=", 1)[1]) for l in lines]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    proc, model_port = start_helper("fake_model.py")
    server = Httpd("bench-relay", base_conf(model_port, "LogLevel warn")).start()
    try:
        script = [[{"text": TEXT}]]
        direct, relayed, per_event = [], [], []
        for _ in range(20):                          # warm both paths
            first_delta(model_port, "/v1/responses", body([], script))
            first_delta(server.port, "/v1/responses", body([TOOL], script))
        for _ in range(pairs):
            d, _ = first_delta(model_port, "/v1/responses", body([], script))
            r, _ = first_delta(server.port, "/v1/responses", body([TOOL], script))
            direct.append(d)
            relayed.append(r)
        # The upstream's own events per round (what the relay read).
        _, upstream_events = first_delta(model_port, "/v1/responses", body([], script))
        for us in module_times(server, pairs):
            per_event.append(us / upstream_events)
        d50, r50 = statistics.median(direct) * 1e3, statistics.median(relayed) * 1e3
        print("time to the first text delta, p50: upstream itself %.3f ms, through the "
              "module %.3f ms, added %.3f ms (target <= 2 ms)" % (d50, r50, r50 - d50))
        print("  p90: upstream %.3f ms, module %.3f ms"
              % (pct(direct, 0.9) * 1e3, pct(relayed, 0.9) * 1e3))
        print("module time per relayed event (%d events per round), p50 %.1f us, "
              "p90 %.1f us (target p50 <= 20 us)"
              % (upstream_events, statistics.median(per_event), pct(per_event, 0.9)))
    finally:
        server.stop()
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
