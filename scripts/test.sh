#!/bin/sh
# Install what is missing, build, and run every test: the C unit tests, the
# fuzzers' saved inputs, the integration tests against a real httpd (the OpenAI Node SDK among them),
# then the integration tests again with an ASan+UBSan build of the module,
# and a subset under valgrind.
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --test
./scripts/build.sh
./scripts/check-core.sh
make check
make -C test/fuzz regress
/usr/bin/python3 -m pytest -q -p no:cacheprovider test
./scripts/build-asan.sh
CI_SANITIZE=1 CI_MODULE="$(pwd)/build-asan/src/.libs/mod_code_interpreter.so" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider test
# APR pools recycle memory and can hide a use-after-free from ASan: a
# representative subset under valgrind as well.
CI_VALGRIND=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider test/test_valgrind.py
