"""The e2b sandbox provider in C (test/unit/test_e2b.c) against the fake E2B
service: compiled here against the httpd-free sources, run once per C test,
with deletes both on the worker pool and inline (no pool started)."""
import os
import shutil
import subprocess

import pytest

from conftest import TOP, start_helper

SOURCES = ["ci_json", "ci_error", "ci_config", "ci_exec", "sandbox_e2b", "ci_workers"]
PKGS = ["apr-1", "apr-util-1", "json-c", "libcurl", "cmocka"]


def pkg_config(*args):
    out = subprocess.run(["pkg-config", *args, *PKGS], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("pkg-config cannot find %s: %s" % (" ".join(PKGS), out.stderr.strip()))
    return out.stdout.split()


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    exe = str(tmp_path_factory.mktemp("e2b") / "test_e2b")
    cmd = (["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
            "-I" + os.path.join(TOP, "include")] + pkg_config("--cflags")
           + [os.path.join(TOP, "test", "unit", "test_e2b.c")]
           + [os.path.join(TOP, "mod_code_interpreter", s + ".c") for s in SOURCES]
           + pkg_config("--libs") + ["-o", exe])
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, "compiling test_e2b.c failed:\n" + out.stderr
    return exe


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
