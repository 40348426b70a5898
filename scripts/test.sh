#!/bin/sh
# Install what is missing, build, and run every test: the C unit tests, the
# integration tests against a real httpd (the OpenAI Node SDK among them, and
# the fuzzers' saved inputs),
# then the integration tests again with an ASan+UBSan build of the module,
# a subset under valgrind, and the mutants (scripts/mutants.sh). The
# benchmark runs once with tiny counts (SMOKE=1 bench/run.sh): it fails when
# a figure it prints can no longer be measured.
#
# Under CI=true (as CI runs it) a missing prerequisite fails the run instead
# of skipping tests, and the Debian package is built and checked. pytest
# prints the reason of every skip (-rs); docs/TESTING.md lists the skips
# that may remain.
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --test
./scripts/build.sh
./scripts/check-rooms.sh
./scripts/check-circles.py
# What the tests read lies in the clone (test/spec among it), and no build
# product is tracked: a new user's clone runs every test.
./scripts/check-clone.sh
if ! pkg-config --exists cmocka; then
    echo "cmocka is missing (libcmocka-dev): the C unit tests are not built"
    [ "${CI:-}" != true ] || exit 1
fi
make check
SMOKE=1 ./bench/run.sh
PYTEST="/usr/bin/python3 -m pytest -q -rs -p no:cacheprovider"
# (test_fuzz.py replays the fuzzers' saved inputs; test_valgrind.py is the
# valgrind run below)
$PYTEST --ignore=test/test_valgrind.py test
./scripts/build-asan.sh
# The installation tests and the fuzzers build their own copies of the
# code, not the module under test: not again.
CI_SANITIZE=1 CI_MODULE="$(pwd)/build-asan/src/.libs/mod_code_interpreter.so" \
    $PYTEST --ignore=test/test_valgrind.py --ignore=test/test_install.py \
    --ignore=test/test_fuzz.py test
# APR pools recycle memory and can hide a use-after-free from ASan: a
# representative subset under valgrind as well.
CI_VALGRIND=1 $PYTEST test/test_valgrind.py
# Mutants: one-line changes to the module that the tests must notice.
./scripts/mutants.sh
