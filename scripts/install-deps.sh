#!/bin/sh
# Install, on Debian 12, what building, running and testing the module needs.
# Only packages that are missing are installed.
set -e
PKGS="apache2 apache2-dev build-essential autoconf automake libtool pkg-config \
libapr1-dev libaprutil1-dev libcurl4-openssl-dev libjson-c-dev libcmocka-dev libssl-dev \
libhiredis-dev libarchive-dev bubblewrap python3 python3-numpy python3-pandas python3-matplotlib"
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS python3-pytest python3-jsonschema python3-pip openssl curl clang libclang-rt-14-dev valgrind \
git dpkg-dev debhelper redis-server iproute2"
    # Node.js and npm for the SDK tests: Debian's, unless a node is already here.
    command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
