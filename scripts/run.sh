#!/bin/sh
# Build the module and start a self-contained httpd with it: server root in
# ./run (inside the checkout), listening on 127.0.0.1:$PORT (default 8080),
# /v1/responses proxied to $UPSTREAM (default https://api.openai.com) with
# the code_interpreter tool served by the local sandbox.
#   scripts/run.sh          start (or restart)
#   scripts/run.sh stop     stop
set -e
cd "$(dirname "$0")/.."
TOP=$(pwd)
ROOT="$TOP/run"
PORT=${PORT:-8080}
UPSTREAM=${UPSTREAM:-https://api.openai.com}
HTTPD=$(command -v apache2 || echo /usr/sbin/apache2)
MODDIR=/usr/lib/apache2/modules

ctl() { "$HTTPD" -d "$ROOT" -f "$ROOT/httpd.conf" -k "$1"; }

if [ "${1:-}" = "stop" ]; then
    [ -f "$ROOT/httpd.pid" ] && ctl stop && echo "stopped"
    exit 0
fi

./scripts/install-deps.sh
./scripts/build.sh
mkdir -p "$ROOT/logs"
chmod 755 "$ROOT"
USERLINE=""
[ "$(id -u)" -eq 0 ] && USERLINE="User www-data
Group www-data"
SSL=""
case "$UPSTREAM" in https://*) SSL="LoadModule ssl_module $MODDIR/mod_ssl.so
SSLProxyEngine on
SSLProxyVerify require
SSLProxyCACertificateFile /etc/ssl/certs/ca-certificates.crt";; esac
cat > "$ROOT/httpd.conf" <<CONF
ServerRoot "$ROOT"
ServerName 127.0.0.1
Listen 127.0.0.1:$PORT
PidFile "$ROOT/httpd.pid"
DefaultRuntimeDir "$ROOT"
Mutex file:$ROOT
LoadModule mpm_event_module $MODDIR/mod_mpm_event.so
LoadModule authz_core_module $MODDIR/mod_authz_core.so
LoadModule mime_module $MODDIR/mod_mime.so
LoadModule proxy_module $MODDIR/mod_proxy.so
LoadModule proxy_http_module $MODDIR/mod_proxy_http.so
LoadModule code_interpreter_module $TOP/.libs/mod_code_interpreter.so
$SSL
$USERLINE
TypesConfig /etc/mime.types
ErrorLog "$ROOT/logs/error_log"
LogLevel warn code_interpreter:info
LogFormat "%h %t \"%r\" %>s %b rounds=%{ci-rounds}n executions=%{ci-executions}n module_us=%{ci-module-us}n" ci
CustomLog "$ROOT/logs/access_log" ci
Timeout 600
<Location /v1/responses>
    ProxyPass $UPSTREAM/v1/responses
    CodeInterpreter On
</Location>
# OpenAI's Containers API and container files; file_ids are read from the
# upstream's Files API beside its Responses API
<Location /v1/containers>
    CodeInterpreterContainers On
    CodeInterpreterUpstream $UPSTREAM/v1/responses
</Location>
CONF
[ -f "$ROOT/httpd.pid" ] && ctl stop 2>/dev/null && sleep 1
ctl start
echo "httpd is listening on http://127.0.0.1:$PORT/v1/responses -> $UPSTREAM"
echo "and serves the Containers API at http://127.0.0.1:$PORT/v1/containers"
echo "logs: $ROOT/logs; stop with: scripts/run.sh stop"
