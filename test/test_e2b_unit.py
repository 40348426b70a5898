"""The e2b sandbox provider in C (test/unit/test_e2b.c) against the fake E2B
service: built against the httpd-free library, run once per C test, with
deletes both on the worker pool and inline (no pool started)."""
import os

import pytest

from conftest import (TOP, assert_lists_source, build_c_test, c_test_names, run_c_test,
                      start_helper)

# The configured tree whose test/unit/test_e2b is built and run: this one,
# or another (CI_TREE: scripts/mutants.sh points it at a mutant's copy).
TREE = os.environ.get("CI_TREE") or TOP

@pytest.fixture(scope="module")
def binary():
    """test/unit/test_e2b, built by the project's Makefile against the
    httpd-free library (its one definition, CORE_SOURCES in Makefile.am)."""
    return build_c_test(TREE, "test/unit/test_e2b", "the E2B C tests")


@pytest.fixture(scope="module")
def fake_port():
    proc, port = start_helper("fake_e2b.py")
    yield port
    proc.kill()
    proc.wait()


def c_tests():
    return c_test_names("test_e2b.c")


@pytest.mark.parametrize("deletes", ["workers", "inline"])
@pytest.mark.parametrize("name", c_tests())
def test_e2b_provider(binary, fake_port, name, deletes):
    env = dict(os.environ, FAKE_E2B_PORT=str(fake_port))
    env.pop("E2B_TEST_INLINE", None)
    if deletes == "inline":
        env["E2B_TEST_INLINE"] = "1"
    run_c_test(binary, name, env)


def test_list_matches_source(binary):
    assert_lists_source(binary, "test_e2b.c")
