/*
 * ci_workers.h - per-child execution threads, and forking a sandbox process.
 *
 * Executions and sandbox start/teardown run on a bounded apr_thread_pool so
 * timeouts are enforced off the request thread and a burst cannot start
 * unbounded sandboxes. Sandbox processes are forked by the local sandbox
 * supervisor's only thread (ci_supervisor.c): bubblewrap's --die-with-parent
 * fires when the forking *thread* exits.
 */
#ifndef CI_WORKERS_H
#define CI_WORKERS_H

#include <sys/types.h>
#include <apr_pools.h>
#include <apr_time.h>

/* Create the pool on PCHILD; it is stopped and joined by a pre-cleanup of
 * PCHILD. */
apr_status_t ci_workers_start(apr_pool_t *pchild, int threads, int queue_limit);

typedef struct ci_job ci_job;

/* Queue FN(BATON). APR_EAGAIN when the queue is full (answer 503). The job
 * record is allocated from P, which must outlive the job (see ci_job_wait). */
apr_status_t ci_job_submit(apr_pool_t *p, void (*fn)(void *), void *baton,
                           ci_job **out);

/* Wait up to TIMEOUT (negative: forever). APR_SUCCESS once FN returned,
 * APR_TIMEUP before. */
apr_status_t ci_job_wait(ci_job *job, apr_interval_time_t timeout);

/* Queue FN(BATON) without waiting for it (teardown work). FN owns BATON and
 * its memory. APR_EAGAIN when the queue is full: the caller runs FN itself. */
apr_status_t ci_job_fire(void (*fn)(void *), void *baton);

/* Executions waiting and running in this child (for status). */
int ci_workers_queued(void);

/* Limits applied between fork and exec. */
typedef struct ci_spawn_limits {
    apr_uint64_t address_space; /* RLIMIT_AS, 0: unchanged */
    apr_uint64_t file_size;     /* RLIMIT_FSIZE, 0: unchanged */
    apr_uint64_t cpu_seconds;   /* RLIMIT_CPU, 0: unchanged */
    int switch_user;            /* when root: become UID/GID first */
    int oom_first;              /* oom_score_adj 1000: the kernel's OOM killer
                                   takes it before anything of the server */
    int contained;              /* a sandbox: RLIMIT_NICE 0 (no priority
                                   raised), and no new session (setsid and
                                   terminal input refused by a seccomp
                                   filter, where ci_spawn_sessions_refused) */
    int join_cgroup;            /* write "0" to CGROUP_FD before exec: the
                                   child is in its cgroup before any of its
                                   code runs (ci_cgroup_make) */
    int cgroup_fd;
    uid_t uid;
    gid_t gid;
} ci_spawn_limits;

/* Fork ARGV[0] (an absolute path) from the calling thread, with an empty
 * environment, only fds 0-2 (pipes returned here, O_CLOEXEC on our side),
 * its own process group and LIMITS. *PID is the child; the caller reaps it
 * with waitpid. The calling thread must outlive the process (bubblewrap's
 * --die-with-parent). */
apr_status_t ci_spawn_here(const char *const *argv, const ci_spawn_limits *limits,
                           pid_t *pid, int *stdin_fd, int *stdout_fd, int *stderr_fd);

/* Whether this build refuses a contained process a new session (its
 * architecture is one the filter knows). */
int ci_spawn_sessions_refused(void);

/* Kill what ci_spawn_here started as PID (its process group too: a
 * sandbox's pid namespace dies with its init) and reap it; *PID becomes -1.
 * Nothing when *PID is not positive. */
void ci_spawn_kill(pid_t *pid);

/* Every signal disposition back to the default and none blocked (system
 * calls only: safe between vfork and exec). */
void ci_signals_default(void);

#endif
