/*
 * ci_supervisor_procs.c - processes as /proc shows them: each one's parent
 * (a peer's, checked when it connects; the tree of a sandbox's processes
 * under its bubblewrap, which an interrupt reaches), their resident
 * memory (a sandbox past its bound is killed), and their scheduling (every
 * thread of a sandbox but its interpreter's main thread at SCHED_IDLE).
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
#include <apr_strings.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"
#include "ci_workers.h"

/* How often the processes of a sandbox are found again by reading all of
 * /proc (a few milliseconds of this single thread on a busy host, once for
 * all sandboxes): every second while it runs code or after it did, every 5
 * seconds otherwise; their memory is read every second. */
#define PROCS_RESCAN apr_time_from_sec(5)

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
static apr_uint64_t resident(const pid_t *pids, int n)
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
static pid_t find_kernel(const box *b)
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
static int idle_threads(pid_t pid, pid_t keep)
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

/* B's processes as last found: all at SCHED_IDLE but its interpreter's
 * main thread, which runs each execution's code at the priority it was
 * started with. What an execution starts (processes, threads) is moved
 * within a second; what it leaves running after it is never above
 * SCHED_IDLE again, so it runs only on CPU time that nothing else of the
 * host (httpd, another owner's execution) wants. */
static void contain_cpu(box *b)
{
    int i, moved = 0;
    if (!b->kernel_pid)
        b->kernel_pid = find_kernel(b);
    if (!b->kernel_pid)
        return;                       /* not yet started: next time */
    for (i = 0; i < b->nprocs; i++)
        moved += idle_threads(b->procs[i], b->kernel_pid);
    if (moved)
        ci_log(CI_LOG_DEBUG, "CI0671: sandbox %u: %d thread(s) moved to SCHED_IDLE",
               b->id, moved);
}

/* How a sandbox's CPU is held, for status: by the kernel in a cgroup v2 of
 * its own, with the cpu controller ("cgroup2"; the scheduling below as
 * well); or every thread but its interpreter's main thread at SCHED_IDLE,
 * and no session of its own ("sched_idle"); or, on an architecture the
 * session filter does not know, SCHED_IDLE alone, which the kernel's
 * autogroups defeat ("sched_idle_sessions_allowed"). */
const char *sup_cpu_mode(void)
{
    if (sup_cgroups_hold_cpu())
        return "cgroup2";
    return ci_spawn_sessions_refused() ? "sched_idle" : "sched_idle_sessions_allowed";
}

const char *sup_cpu_mode_text(apr_pool_t *p)
{
    const char *idle = ci_spawn_sessions_refused()
        ? "every process of a sandbox but its interpreter's main thread at SCHED_IDLE, "
          "set by the supervisor; no new session in a sandbox"
        : "every process of a sandbox but its interpreter's main thread at SCHED_IDLE; "
          "this architecture's sandboxes may start sessions, which the kernel's "
          "autogroups schedule apart";
    return apr_psprintf(p, "%s (%s; %s)", sup_cpu_mode(), sup_cgroup_text(p), idle);
}

/* Whether B's processes are to be found again now. */
static int rescan_due(const box *b, apr_time_t now)
{
    return !b->procs_at || b->procs[0] != b->pid || b->ran_since_scan ||
           now - b->procs_at >= (b->state == BOX_RUNNING ? apr_time_from_sec(1)
                                                          : PROCS_RESCAN);
}

/* B holds more resident memory than its tier allows (rss_bound, the whole
 * sandbox): it is killed, as the kernel's OOM killer would: its run ends
 * lost, a container's starts again empty. */
static void enforce_memory(box *b)
{
    apr_uint64_t rss;
    if (!b->def->rss_bound ||
        (rss = resident(b->procs + 1, b->nprocs - 1)) <= b->def->rss_bound)
        return;
    ci_log(CI_LOG_WARNING, "CI0621: sandbox %u of tool %s holds %" APR_UINT64_T_FMT
           " bytes, over its bound of %" APR_UINT64_T_FMT ": killed", b->id,
           b->def->name, rss, b->def->rss_bound);
    if (b->state == BOX_RUNNING)
        sup_stop_run(b, CI_EXEC_LOST);
    else if (!b->owner && !b->container) {
        sup_box_free(b);              /* a warm one: the pool makes another */
        sup_state.refill_due = 1;
    }
    else
        sup_box_kill(b);
}

/* Once a second: each live sandbox's processes, found again when due, are
 * held to the CPU they may take and the memory they may hold. */
void sup_watch_processes(void)
{
    apr_array_header_t *all = NULL;
    apr_time_t now = apr_time_now();
    apr_pool_t *p;
    box *b, *next;
    apr_pool_create(&p, sup_state.p);
    for (b = sup_state.boxes; b; b = next) {
        next = b->next;
        if (b->pid <= 0 || (b->state != BOX_IDLE && b->state != BOX_RUNNING))
            continue;
        if (rescan_due(b, now)) {
            if (!all)
                all = sup_proc_parents(p);
            b->nprocs = sup_descendants(all, b->pid, b->procs, PROCS_MAX);
            b->procs_at = now;
            b->ran_since_scan = b->state == BOX_RUNNING;
            contain_cpu(b);
        }
        enforce_memory(b);
    }
    apr_pool_destroy(p);
    sup_cgroup_sweep();
}
