#!/bin/sh
# The httpd-free library (CORE_SOURCES in Makefile.am, and the headers beside
# it) must not include an httpd header: it is unit-tested and fuzzed without
# a server. Fails naming the file and the line.
set -e
cd "$(dirname "$0")/.."
files=$(sed -n '/^CORE_SOURCES = /,/[^\\]$/p' Makefile.am | grep -o 'mod_code_interpreter/[^ ]*\.c')
[ -n "$files" ] || { echo "check-core: no CORE_SOURCES in Makefile.am"; exit 1; }
headers=$(ls mod_code_interpreter/core/*.h mod_code_interpreter/sandbox/*.h)
bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](httpd|http_[a-z_]*|ap_[a-z_]*|apr?_?mpm|util_[a-z_]*|mod_[a-z_]*|unixd|scoreboard|mpm_common)\.h[>"]' \
      $files $headers || true)
if [ -n "$bad" ]; then
    echo "check-core: the httpd-free library includes httpd headers:"
    echo "$bad"
    exit 1
fi
echo "check-core: $(echo $files | wc -w) sources and $(echo $headers | wc -w) headers free of httpd headers"
