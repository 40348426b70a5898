#!/bin/sh
# Install what is missing, build, and run every test: the C unit tests, then
# the integration tests against a real httpd, then the Node SDK tests.
set -e
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --test
./scripts/build.sh
make check
/usr/bin/python3 -m pytest -q -p no:cacheprovider test
