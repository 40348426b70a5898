"""The container directory in Redis (test/unit/test_redisdir.c, the Lua
script core/ci_directory.lua through core/ci_redis.c) against real
redis-servers: one without a password, one with a password and an ACL user;
the C outage test runs a third of its own on a spare port. Built against
the httpd-free library, run once per C test."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import (TOP, assert_lists_source, build_c_test, c_test_names, free_port,
                      require, run_c_test)

# The configured tree whose test/unit/test_redisdir is built and run: this
# one, or another (CI_TREE, as for the E2B C tests).
TREE = os.environ.get("CI_TREE") or TOP
SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
# test_redisdir.c's AUTH_PASSWORD, AUTH_USER, AUTH_USER_PASSWORD
PASSWORD = "pw-for-the-default-user-7f3a"
USER, USER_PASSWORD = "ci_node", "pw-for-ci-node-91c2"


@pytest.fixture(scope="module")
def binary():
    return build_c_test(TREE, "test/unit/test_redisdir", "the Redis directory's C tests")


def start_redis(workdir, *args):
    """redis-server on a free loopback port, nothing saved; (process, port)."""
    port = free_port()
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", workdir, *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("redis-server exited: %s" % proc.stderr.read())
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not listen on %d" % port)


@pytest.fixture(scope="module")
def redis():
    """The servers' ports: plain, with AUTH; and a free one for the C test's
    own server."""
    require(os.path.exists(SERVER), "the Redis directory's tests need redis-server")
    workdir = tempfile.mkdtemp(prefix="ci-redis-")
    procs = []
    try:
        plain, plain_port = start_redis(workdir)
        procs.append(plain)
        auth, auth_port = start_redis(workdir, "--requirepass", PASSWORD, "--user", USER,
                                      "on", ">" + USER_PASSWORD, "~*", "&*", "+@all")
        procs.append(auth)
        yield {"REDIS_PORT": str(plain_port), "REDIS_AUTH_PORT": str(auth_port),
               "REDIS_SPARE_PORT": str(free_port()), "REDIS_SERVER": SERVER}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def c_tests():
    return c_test_names("test_redisdir.c")


@pytest.mark.parametrize("name", c_tests())
def test_redis_directory(binary, redis, name):
    run_c_test(binary, name, dict(os.environ, **redis))


def test_list_matches_source(binary):
    assert_lists_source(binary, "test_redisdir.c")
