/*
 * ci_cgroup.h - sandboxes in cgroup v2: a delegated directory D whose
 * children are the supervisor's leaf (D/supervisor) and one cgroup per
 * sandbox (D/sb-...) with its CPU weight and ceiling, its process count
 * and its memory, all enforced by the kernel outside the sandbox. Where
 * httpd's own service cgroup is delegated to it (systemd's Delegate=),
 * httpd's processes move to a leaf of their own (BASE/httpd) and D is
 * BASE/sandboxes. No httpd here.
 *
 * Who does what: httpd's parent, as root, finds or splits the cgroup and
 * hands D to the children's user (ci_cgroup_split, ci_cgroup_delegate); the
 * supervisor joins D/supervisor before it drops its privileges; it makes a
 * sandbox's cgroup before the spawn and the spawned child joins it before
 * it execs (its first instruction of sandboxed code is already inside);
 * the cgroup is killed and removed when the sandbox ends.
 */
#ifndef CI_CGROUP_H
#define CI_CGROUP_H

#include <sys/types.h>
#include <apr_pools.h>
#include <apr_errno.h>

/* The controllers the sandboxes' cgroups use, in the order they are
 * enabled. */
#define CI_CGROUP_CONTROLLERS "cpu memory pids"
/* A sandbox's cgroup is D/sb-<supervisor's pid>-<number>. */
#define CI_CGROUP_SANDBOX_PREFIX "sb-"

/* The cgroup v2 mount point in the text of /proc/self/mountinfo; NULL when
 * none is mounted. */
const char *ci_cgroup_mount_of(apr_pool_t *p, const char *mountinfo);

/* The v2 path ("/system.slice/apache2.service") in the text of
 * /proc/self/cgroup (its "0::" line); NULL when there is none. */
const char *ci_cgroup_path_of(apr_pool_t *p, const char *proc_cgroup);

/* The directory of this process's own cgroup v2, or NULL with *WHY. The
 * root cgroup is refused: its processes are the whole host's. */
const char *ci_cgroup_own_dir(apr_pool_t *p, const char **why);

/* Which of CI_CGROUP_CONTROLLERS the file DIR/NAME lists ("cpu memory";
 * "" when none, NULL when it cannot be read). */
const char *ci_cgroup_listed(apr_pool_t *p, const char *dir, const char *name);

/* Whether the space-separated LIST has the word WORD. */
int ci_cgroup_has(const char *list, const char *word);

/* httpd's service cgroup BASE (its own), when its manager delegated it
 * (systemd's trusted.delegate mark) and it offers every controller of
 * NEED ("cpu"): every process of BASE moved to BASE/httpd,
 * the controllers BASE is offered enabled for its children, and
 * *SANDBOXES = BASE/sandboxes made. Nothing moves when BASE/httpd already
 * holds them all (a supervisor started again). */
apr_status_t ci_cgroup_split(apr_pool_t *p, const char *base, const char *need,
                             const char **sandboxes, const char **why);

/* D ready for the supervisor (as root): made, the controllers its parent
 * gives it enabled for its children (*ENABLED, those of CI_CGROUP_
 * CONTROLLERS), D/supervisor made (its CPU weight SUPERVISOR_WEIGHT), and
 * both handed to UID/GID as systemd delegates a cgroup (the directories,
 * cgroup.procs, cgroup.threads, cgroup.subtree_control). */
apr_status_t ci_cgroup_delegate(apr_pool_t *p, const char *d, uid_t uid, gid_t gid,
                                const char **enabled, const char **why);

/* The calling process into the cgroup at DIR. */
apr_status_t ci_cgroup_join(const char *dir);

/* A sandbox's bounds in its cgroup (0: none set; the kernel's "max"). */
typedef struct ci_cgroup_limits {
    int cpu_weight;              /* cpu.weight, 1..10000 */
    apr_uint64_t cpu_quota_us;   /* cpu.max: this much per period */
    apr_uint64_t cpu_period_us;
    apr_uint64_t pids;           /* pids.max */
    apr_uint64_t memory;         /* memory.max (and memory.oom.group 1) */
} ci_cgroup_limits;

/* DIR/NAME made with LIMITS, for the controllers ENABLED in DIR (a
 * leftover of that name, whatever ran there, is killed first); *PROCS_FD
 * is its cgroup.procs opened for writing: a child writes "0" to it to join
 * (the caller closes it after the spawn). */
apr_status_t ci_cgroup_make(apr_pool_t *p, const char *dir, const char *name,
                            const char *enabled, const ci_cgroup_limits *lim,
                            int *procs_fd);

/* Every process in DIR/NAME killed (cgroup.kill, or each one SIGKILLed on
 * a kernel without it) and the cgroup removed: APR_SUCCESS, also when it
 * was not there; APR_EBUSY while some are still exiting (call again). */
apr_status_t ci_cgroup_end(apr_pool_t *p, const char *dir, const char *name);

/* Every cgroup under DIR whose name begins with PREFIX and that KEEP (if
 * not NULL) does not claim, ended: how many could not be removed yet. */
int ci_cgroup_sweep(apr_pool_t *p, const char *dir, const char *prefix,
                    int (*keep)(void *baton, const char *name), void *baton);

#endif
