#!/bin/sh
# The benchmark: installs what is missing (apt), builds the module, then runs
# every measurement in one go and prints the table (docs/PERFORMANCE.md).
#   bench/run.sh                  full run (soak of 10,000 requests)
#   SOAK=1000 bench/run.sh        shorter soak
#   PHASES=1,2 bench/run.sh       only some parts (1 passthrough, 2 module
#                                 time, 3 sandbox, 4 soak)
#   PROFILE=1 bench/run.sh        also sample httpd's children with perf
# Server roots, logs and results: bench/.run/
set -e
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

PKGS="wrk"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || PKGS="$PKGS nginx-light"
[ "${PROFILE:-0}" = "1" ] && PKGS="$PKGS linux-perf"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    # Installing nginx must not start the distribution's own server on port 80:
    # hold service starts back for the install, unless a policy already does.
    POLICY=/usr/sbin/policy-rc.d
    ADDED_POLICY=""
    if [ ! -e "$POLICY" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
        $SUDO chmod 755 "$POLICY"
        ADDED_POLICY=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        $missing >/dev/null || status=$?
    if [ -n "$ADDED_POLICY" ]; then $SUDO rm -f "$POLICY"; fi
    [ -z "${status:-}" ] || exit "$status"
fi

./scripts/build.sh
/usr/bin/python3 bench/bench.py "$@"
# The warm pool's acquire time belongs with the sandbox (part 3).
case ",${PHASES:-1,2,3,4}," in
    *,3,*) exec /usr/bin/python3 bench/warm_acquire.py ;;
esac
