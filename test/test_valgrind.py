"""httpd with the module under valgrind's memcheck, driven through a
representative subset of requests (scripts/valgrind-subset.sh). Opt-in: it
takes a while; set CI_VALGRIND=1."""
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "scripts", "valgrind-subset.sh")

pytestmark = pytest.mark.skipif(
    os.environ.get("CI_VALGRIND") != "1",
    reason="the valgrind run is opt-in: set CI_VALGRIND=1 to run scripts/valgrind-subset.sh")


def test_no_memory_error_under_valgrind():
    r = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "ERROR SUMMARY: 0 errors from 0 contexts" in out, out
    assert "FAILED" not in out, out
