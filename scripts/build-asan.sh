#!/bin/sh
# Build an AddressSanitizer + UndefinedBehaviorSanitizer copy of the module in
# build-asan/ (a copy of the tracked sources, configured on its own).
set -e
cd "$(dirname "$0")/.."
DEST=build-asan/src
mkdir -p "$DEST"
git ls-files -z | xargs -0 tar cf - | (cd "$DEST" && tar xf -)
cd "$DEST"
[ -x configure ] || ./autogen.sh >/dev/null
[ -f Makefile ] || ./configure --enable-sanitizers >/dev/null
make -j"$(nproc)" >/dev/null
echo "built $(pwd)/.libs/mod_code_interpreter.so (sanitizers)"
