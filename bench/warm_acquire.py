#!/usr/bin/python3
"""Warm local sandboxes: how long a request waits to get one.

One child process with warm=4; 60 requests one after another (each one call,
print(1)), with a pause so the pool refills. The module logs every hand-over
as CI0307 "... (warm, acquired in N us)"; this prints the p50 and p99 of N and
how many requests had to start a sandbox cold (CI0302). The requests carry
no owner: a request's own sandbox is the one a warm pool hands over (a
container's sandbox is made by the supervisor, warm or not, CI0620)."""
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "test"))
import conftest  # noqa: E402

ONE_CHILD = ("StartServers 1\nServerLimit 1\nThreadsPerChild 25\nMinSpareThreads 1\n"
             "MaxSpareThreads 25\nCodeInterpreterSandbox local provider=local warm=4")


def main():
    proc, port = conftest.start_helper("fake_model.py")
    server = conftest.Httpd("bench-warm", conftest.base_conf(port, ONE_CHILD)).start()
    try:
        time.sleep(2)                      # the pool fills
        for _ in range(60):
            status, _, _ = server.post("/v1/responses", {
                "model": "m", "tools": [conftest.TOOL],
                "input": conftest.script_input([[{"call": "print(1)"}], [{"text": "x"}]])},
                headers=conftest.ANONYMOUS)
            assert status == 200
            time.sleep(0.15)
        log = server.log()
    finally:
        server.stop()
        proc.kill()
    acquired = sorted(int(n) for n in re.findall(r"acquired in (\d+) us", log))
    cold = log.count("CI0302:")
    if not acquired:
        sys.exit("warm acquire: no hand-over was logged (CI0307): nothing to measure")
    print("warm acquire: %d hand-overs, %d cold starts; p50 %d us, p99 %d us"
          % (len(acquired), cold, statistics.median(acquired),
             acquired[max(0, int(len(acquired) * 0.99) - 1)]))


if __name__ == "__main__":
    main()
