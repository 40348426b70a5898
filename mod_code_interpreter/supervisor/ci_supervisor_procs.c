/*
 * ci_supervisor_procs.c - processes as /proc shows them: each one's parent
 * (a peer's, checked when it connects; the tree of a sandbox's processes
 * under its bubblewrap, which an interrupt reaches), a sandbox's
 * interpreter among them, their resident memory, and a process's threads
 * moved to SCHED_IDLE. Reading only, and the one scheduling call: what is
 * done with it (a sandbox killed past its bound, an interrupt) is the
 * business of the files above (ci_supervisor_watch.c, ci_supervisor_runs.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <apr_file_info.h>
#include "ci_supervisor_internal.h"

/* Fields of /proc/PID/stat: the parent (4) and the start time (22). 0, or
 * -1 when PID is gone. */
static int stat_of(pid_t pid, pid_t *ppid, unsigned long long *start)
{
    char path[64], buf[1024], *rp;
    ssize_t n;
    int fd;
    long pp;
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: skip to the last ')'. */
    if (!(rp = strrchr(buf, ')')) ||
        sscanf(rp + 1, " %*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                       "%*d %*d %*d %*d %llu", &pp, start) != 2)
        return -1;
    *ppid = (pid_t)pp;
    return 0;
}

/* Field 4 of /proc/PID/stat: the parent's pid, or -1. */
pid_t sup_parent_of(pid_t pid)
{
    unsigned long long start;
    pid_t ppid;
    return stat_of(pid, &ppid, &start) == 0 ? ppid : -1;
}

/* Whether PID runs bubblewrap (its command name). */
int sup_is_bwrap(pid_t pid)
{
    char path[64], comm[32];
    ssize_t n;
    int fd;
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 1;                 /* gone, or not ours to judge: leave it */
    n = read(fd, comm, sizeof(comm) - 1);
    close(fd);
    comm[n > 0 ? n : 0] = '\0';
    return !strcmp(comm, "bwrap\n");
}

/* Every process of the host with its parent, read from /proc (from P). */
typedef struct proc_pair { pid_t pid, ppid; } proc_pair;

apr_array_header_t *sup_proc_parents(apr_pool_t *p)
{
    apr_array_header_t *all = apr_array_make(p, 256, sizeof(proc_pair));
    apr_dir_t *dir;
    apr_finfo_t fi;
    if (apr_dir_open(&dir, "/proc", p) != APR_SUCCESS)
        return all;
    while (apr_dir_read(&fi, APR_FINFO_NAME, dir) == APR_SUCCESS) {
        pid_t pid = (pid_t)atol(fi.name);
        proc_pair *pp;
        if (pid <= 0)
            continue;
        pp = apr_array_push(all);
        pp->pid = pid;
        pp->ppid = sup_parent_of(pid);
    }
    apr_dir_close(dir);
    return all;
}

/* ROOT and every process under it in ALL, into OUT (at most MAX); their
 * number. */
int sup_descendants(const apr_array_header_t *all, pid_t root, pid_t *out, int max)
{
    int n = 0, grew = 1, i, k;
    out[n++] = root;
    while (grew && n < max) {
        grew = 0;
        for (i = 0; i < all->nelts && n < max; i++) {
            const proc_pair *pp = &APR_ARRAY_IDX(all, i, proc_pair);
            int known = 0, under = 0;
            for (k = 0; k < n; k++) {
                known |= out[k] == pp->pid;
                under |= out[k] == pp->ppid;
            }
            if (under && !known) {
                out[n++] = pp->pid;
                grew = 1;
            }
        }
    }
    return n;
}

/* Resident bytes of the processes of PIDS (/proc/PID/statm). */
apr_uint64_t sup_resident(const pid_t *pids, int n)
{
    apr_uint64_t total = 0, page = (apr_uint64_t)sysconf(_SC_PAGESIZE);
    int i;
    for (i = 0; i < n; i++) {
        char path[64], buf[128];
        unsigned long size, rss;
        ssize_t got;
        int fd;
        snprintf(path, sizeof(path), "/proc/%ld/statm", (long)pids[i]);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            continue;
        got = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        buf[got > 0 ? got : 0] = '\0';
        if (sscanf(buf, "%lu %lu", &size, &rss) == 2)
            total += (apr_uint64_t)rss * page;
    }
    return total;
}

/* The interpreter of B among its processes: the first started of those
 * bubblewrap's init started that are not bubblewrap (a process whose
 * parent died is its child too, but started later). 0 when none is seen. */
pid_t sup_find_kernel(const box *b)
{
    unsigned long long first = ~0ULL, start;
    pid_t kernel = 0, ppid;
    int i;
    for (i = 1; i < b->nprocs; i++)
        if (stat_of(b->procs[i], &ppid, &start) == 0 && start < first &&
            !sup_is_bwrap(b->procs[i]) && ppid > 0 && sup_is_bwrap(ppid)) {
            first = start;
            kernel = b->procs[i];
        }
    return kernel;
}

/* Every thread of PID but KEEP to SCHED_IDLE: how many were moved. A task
 * already there is left alone (nothing of the sandbox can leave it: its
 * RLIMIT_NICE is 0, ci_spawn_here). */
int sup_idle_threads(pid_t pid, pid_t keep)
{
    static const struct sched_param none = { 0 };
    char path[64];
    struct dirent *e;
    DIR *d;
    int moved = 0;
    snprintf(path, sizeof(path), "/proc/%ld/task", (long)pid);
    if (!(d = opendir(path)))
        return 0;
    while ((e = readdir(d))) {
        pid_t tid = (pid_t)atol(e->d_name);
        if (tid <= 0 || tid == keep || sched_getscheduler(tid) == SCHED_IDLE)
            continue;
        moved += sched_setscheduler(tid, SCHED_IDLE, &none) == 0;
    }
    closedir(d);
    return moved;
}
