/*
 * ci_supervisor_watch.c - once a second, each live sandbox's processes (as
 * ci_supervisor_procs.c reads them from /proc) held to what they may take:
 * every thread but its interpreter's main thread at SCHED_IDLE, and its
 * resident memory within its bound (a sandbox past it is killed); and how
 * sandboxes' CPU is held, for the log and status.
 */
#include <apr_strings.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"
#include "ci_workers.h"

/* How often the processes of a sandbox are found again by reading all of
 * /proc (a few milliseconds of this single thread on a busy host, once for
 * all sandboxes): every second while it runs code or after it did, every 5
 * seconds otherwise; their memory is read every second. */
#define PROCS_RESCAN apr_time_from_sec(5)

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
        b->kernel_pid = sup_find_kernel(b);
    if (!b->kernel_pid)
        return;                       /* not yet started: next time */
    for (i = 0; i < b->nprocs; i++)
        moved += sup_idle_threads(b->procs[i], b->kernel_pid);
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
        (rss = sup_resident(b->procs + 1, b->nprocs - 1)) <= b->def->rss_bound)
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
