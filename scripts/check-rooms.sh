#!/bin/sh
# A folder per process, and no arrow back up. Each folder of
# mod_code_interpreter/ may include (with #include "...") only the headers of
# the folders below it:
#
#   httpd/       httpd's parent and children: core, sandbox, supervisor's
#                public header (the parent forks the supervisor)
#   supervisor/  the sandbox supervisor process: core, sandbox, egress
#   egress/      the egress proxy process: core
#   sandbox/     the provider table and the providers, in httpd's children
#                (and the local provider's fork, in the supervisor): core
#   core/        httpd-free logic every process shares: core
#
# and only httpd/ may include an httpd header (<httpd.h>, <http_*.h>, ...):
# everything else is unit-tested and fuzzed without a server. Also: every
# source of the httpd-free library (CORE_SOURCES in Makefile.am) lies outside
# httpd/. Fails naming the file, the line and the rule.
set -e
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - <<'PYTHON'
import os
import re
import sys

TOP = "mod_code_interpreter"
ALLOWED = {
    "core": {"core"},
    "sandbox": {"core", "sandbox"},
    "egress": {"core", "egress"},
    "supervisor": {"core", "sandbox", "egress", "supervisor"},
    "httpd": {"core", "sandbox", "httpd", "supervisor:ci_supervisor.h"},
}
HTTPD_HEADER = re.compile(r"(httpd|http_[a-z_]*|ap_[a-z_]*|apr?_?mpm|util_[a-z_]*|mod_[a-z_]*"
                          r"|unixd|scoreboard|mpm_common)\.h$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

rooms = sorted(d for d in os.listdir(TOP) if os.path.isdir(os.path.join(TOP, d)))
unknown = set(rooms) - set(ALLOWED)
if unknown:
    sys.exit("check-rooms: %s has no rule here: add it to scripts/check-rooms.sh"
             % ", ".join(sorted(unknown)))
home = {}                       # header name -> its folder
for room in rooms:
    for name in os.listdir(os.path.join(TOP, room)):
        if name.endswith(".h"):
            if name in home:
                sys.exit("check-rooms: %s is in both %s/ and %s/" % (name, home[name], room))
            home[name] = room

bad, files = [], 0
for room in rooms:
    for name in sorted(os.listdir(os.path.join(TOP, room))):
        if not name.endswith((".c", ".h")):
            continue
        files += 1
        path = os.path.join(TOP, room, name)
        with open(path, errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, header = m.groups()
                if kind == "<":
                    if room != "httpd" and HTTPD_HEADER.search(header):
                        bad.append("%s:%d: %s: an httpd header outside httpd/"
                                   % (path, number, header))
                    continue
                there = home.get(os.path.basename(header))
                if there is None:
                    continue                # a generated or system header
                rule = ALLOWED[room]
                if there not in rule and "%s:%s" % (there, header) not in rule:
                    bad.append("%s:%d: %s/ includes %s/%s" % (path, number, room, there,
                                                               header))

with open("Makefile.am") as f:
    text = f.read()
core = re.search(r"^CORE_SOURCES = (.*?[^\\])$", text, re.S | re.M)
if not core:
    sys.exit("check-rooms: no CORE_SOURCES in Makefile.am")
for src in re.findall(r"mod_code_interpreter/(\w+)/\S+\.c", core.group(1)):
    if src == "httpd":
        bad.append("Makefile.am: CORE_SOURCES holds a file of httpd/")
if bad:
    print("check-rooms: an arrow back up, or httpd where it does not belong:")
    print("\n".join(bad))
    sys.exit(1)
print("check-rooms: %d files in %d folders (%s), each including only what lies below it"
      % (files, len(rooms), ", ".join(rooms)))
PYTHON
