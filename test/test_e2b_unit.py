"""The e2b sandbox provider in C (test/unit/test_e2b.c) against the fake E2B
service: built against the httpd-free library, run once per C test, with
deletes both on the worker pool and inline (no pool started)."""
import os
import shutil
import subprocess

import pytest

from conftest import TOP, require, start_helper

# The configured tree whose test/unit/test_e2b is built and run: this one,
# or another (CI_TREE: scripts/mutants.sh points it at a mutant's copy).
TREE = os.environ.get("CI_TREE") or TOP

@pytest.fixture(scope="module")
def binary():
    """test/unit/test_e2b, built by the project's Makefile against the
    httpd-free library (its one definition, CORE_SOURCES in Makefile.am)."""
    if not os.path.exists(os.path.join(TREE, "Makefile")):
        pytest.fail("%s is not configured: run scripts/build.sh first" % TREE)
    # configure leaves the C tests out without cmocka
    missing = [what for what, there in (
        ("make", shutil.which("make")), ("pkg-config", shutil.which("pkg-config")),
        ("cmocka (libcmocka-dev)", shutil.which("pkg-config") and subprocess.run(
            ["pkg-config", "--exists", "cmocka"]).returncode == 0)) if not there]
    require(not missing, "the E2B C tests need %s" % ", ".join(missing))
    out = subprocess.run(["make", "-C", TREE, "test/unit/test_e2b"],
                         capture_output=True, text=True)
    assert out.returncode == 0, "building test/unit/test_e2b failed:\n" + out.stdout + out.stderr
    return os.path.join(TREE, "test", "unit", "test_e2b")


@pytest.fixture(scope="module")
def fake_port():
    proc, port = start_helper("fake_e2b.py")
    yield port
    proc.kill()
    proc.wait()


def c_tests():
    """The names the C program runs (read from its source, so collection
    needs no compiler)."""
    names = []
    with open(os.path.join(TOP, "test", "unit", "test_e2b.c")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("TEST(test_") and line.endswith("),"):
                names.append(line[len("TEST("):-len("),")])
    return names


@pytest.mark.parametrize("deletes", ["workers", "inline"])
@pytest.mark.parametrize("name", c_tests())
def test_e2b_provider(binary, fake_port, name, deletes):
    env = dict(os.environ, FAKE_E2B_PORT=str(fake_port))
    env.pop("E2B_TEST_INLINE", None)
    if deletes == "inline":
        env["E2B_TEST_INLINE"] = "1"
    out = subprocess.run([binary, name], env=env, capture_output=True, text=True,
                         timeout=120)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "[  PASSED  ] 1 test(s)." in report, report


def test_list_matches_source(binary):
    out = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == c_tests()
