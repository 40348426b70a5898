"""The process table from /proc, for the tests and the benchmark (standard
library only, no pytest)."""

import os


def proc_table():
    """pid -> (ppid, comm, the fields of /proc/PID/stat after the comm) of
    every process on the host; processes gone while reading are left out."""
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(name)] = (int(fields[1]), comm, fields)
    return procs
