"""The fuzz targets (test/fuzz) replay every saved input once: the seeds of
each corpus and the regressions, built with clang, ASan and UBSan
(`make -C test/fuzz regress`). Fuzzing itself is `make -C test/fuzz run`."""
import os
import re
import subprocess

from conftest import HERE, require

FUZZ = os.path.join(HERE, "fuzz")


def test_saved_inputs_replay_cleanly():
    # CI=true makes the Makefile fail, not skip, without clang or its fuzzer
    # runtime; its message says which.
    r = subprocess.run(["make", "--no-print-directory", "-C", FUZZ, "regress", "CI=true"],
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    missing = re.search(r"^fuzz regress failed \(CI=true\): (.*)$", out, re.M)
    require(missing is None, "the fuzz regressions cannot run: %s" % (missing and missing.group(1)))
    assert r.returncode == 0, out
    summary = re.search(r"^regress: (\d+) passed, (\d+) failed$", out, re.M)
    assert summary, out
    assert int(summary.group(1)) > 0 and summary.group(2) == "0", out
