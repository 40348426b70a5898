/*
 * ci_supervisor_procs.c - processes as /proc shows them: each one's parent
 * (a peer's, checked when it connects; the tree of a sandbox's processes
 * under its bubblewrap, which an interrupt reaches), and their resident
 * memory: a sandbox past its bound is killed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <apr_file_info.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"

/* How often the processes of a sandbox are found again by reading all of
 * /proc (a few milliseconds of this single thread on a busy host); their
 * memory is read every second. */
#define PROCS_RESCAN apr_time_from_sec(5)

/* Field 4 of /proc/PID/stat: the parent's pid, or -1. */
pid_t sup_parent_of(pid_t pid)
{
    char path[64], buf[512], *rp;
    ssize_t n;
    int fd;
    long ppid;
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: skip to the last ')'. */
    if (!(rp = strrchr(buf, ')')) || sscanf(rp + 1, " %*c %ld", &ppid) != 1)
        return -1;
    return (pid_t)ppid;
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

/* Once a second: a sandbox holding more resident memory than its tier
 * allows (rss_bound, the whole sandbox) is killed, as the kernel's OOM
 * killer would: its run ends lost, a container's starts again empty. */
void sup_enforce_memory(void)
{
    apr_array_header_t *all = NULL;
    apr_time_t now = apr_time_now();
    apr_pool_t *p;
    box *b, *next;
    apr_pool_create(&p, sup_state.p);
    for (b = sup_state.boxes; b; b = next) {
        apr_uint64_t rss;
        next = b->next;
        if (!b->def->rss_bound || b->pid <= 0 ||
            (b->state != BOX_IDLE && b->state != BOX_RUNNING))
            continue;
        /* an idle sandbox starts nothing; a running one may */
        if (!b->procs_at || (b->state == BOX_RUNNING && now - b->procs_at >= PROCS_RESCAN) ||
            b->procs[0] != b->pid) {
            if (!all)
                all = sup_proc_parents(p);
            b->nprocs = sup_descendants(all, b->pid, b->procs, PROCS_MAX);
            b->procs_at = now;
        }
        if ((rss = resident(b->procs + 1, b->nprocs - 1)) <= b->def->rss_bound)
            continue;
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
    apr_pool_destroy(p);
}
