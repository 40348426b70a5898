#!/bin/sh
# Build the module in the checkout (./configure once, then make).
set -e
cd "$(dirname "$0")/.."
[ -x configure ] || ./autogen.sh >/dev/null
[ -f Makefile ] || ./configure ${CONFIGURE_FLAGS:-} >/dev/null
make -j"$(nproc)" >/dev/null
echo "built $(pwd)/.libs/mod_code_interpreter.so"
