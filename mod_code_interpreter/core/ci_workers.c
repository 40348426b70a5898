/*
 * ci_workers.c - the per-child execution pool, and forking a sandbox
 * process (done by the local sandbox supervisor's only thread).
 * No httpd headers: errors travel as apr_status_t.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_atomic.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_pool.h>
#include <apr_thread_proc.h>
#include "ci_workers.h"

/* ---- the execution pool ------------------------------------------------ */

struct ci_job {
    void (*fn)(void *);
    void *baton;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *cond;
    int done;
};

static apr_thread_pool_t *workers;
static int queue_limit;
static volatile apr_uint32_t in_flight;

static void *APR_THREAD_FUNC run_job(apr_thread_t *thd, void *data)
{
    ci_job *job = data;
    job->fn(job->baton);
    apr_atomic_dec32(&in_flight);
    apr_thread_mutex_lock(job->lock);
    job->done = 1;
    apr_thread_cond_broadcast(job->cond);
    apr_thread_mutex_unlock(job->lock);
    return NULL;
}

apr_status_t ci_job_submit(apr_pool_t *p, void (*fn)(void *), void *baton,
                           ci_job **out)
{
    ci_job *job;
    apr_status_t rv;

    if (!workers)
        return APR_EINIT;
    if ((int)apr_thread_pool_tasks_count(workers) >= queue_limit)
        return APR_EAGAIN;
    job = apr_pcalloc(p, sizeof(*job));
    job->fn = fn;
    job->baton = baton;
    if ((rv = apr_thread_mutex_create(&job->lock, APR_THREAD_MUTEX_DEFAULT, p)) ||
        (rv = apr_thread_cond_create(&job->cond, p)))
        return rv;
    apr_atomic_inc32(&in_flight);
    if ((rv = apr_thread_pool_push(workers, run_job, job, 0, NULL))) {
        apr_atomic_dec32(&in_flight);
        return rv;
    }
    *out = job;
    return APR_SUCCESS;
}

apr_status_t ci_job_wait(ci_job *job, apr_interval_time_t timeout)
{
    apr_status_t rv = APR_SUCCESS;
    apr_thread_mutex_lock(job->lock);
    if (!job->done) {
        if (timeout < 0)
            while (!job->done)
                apr_thread_cond_wait(job->cond, job->lock);
        else
            apr_thread_cond_timedwait(job->cond, job->lock, timeout);
    }
    rv = job->done ? APR_SUCCESS : APR_TIMEUP;
    apr_thread_mutex_unlock(job->lock);
    return rv;
}

typedef struct fired {
    void (*fn)(void *);
    void *baton;
} fired;

static volatile apr_uint32_t fired_pending;

static void *APR_THREAD_FUNC run_fired(apr_thread_t *thd, void *data)
{
    fired job = *(fired *)data;
    free(data);
    job.fn(job.baton);
    apr_atomic_dec32(&fired_pending);
    return NULL;
}

apr_status_t ci_job_fire(void (*fn)(void *), void *baton)
{
    fired *job;
    if (!workers)
        return APR_EINIT;
    if (!(job = malloc(sizeof(*job))))
        return APR_ENOMEM;
    job->fn = fn;
    job->baton = baton;
    apr_atomic_inc32(&fired_pending);
    if (apr_thread_pool_push(workers, run_fired, job, 0, NULL) != APR_SUCCESS) {
        apr_atomic_dec32(&fired_pending);
        free(job);
        return APR_EAGAIN;
    }
    return APR_SUCCESS;
}

int ci_workers_queued(void)
{
    return (int)apr_atomic_read32(&in_flight);
}

/* ---- forking a sandbox ------------------------------------------------ */

typedef struct spawn_req {
    const char *const *argv;
    const ci_spawn_limits *limits;
    pid_t pid;
    int fds[3];          /* our ends: stdin (write), stdout (read), stderr (read) */
    apr_status_t rv;
} spawn_req;

static void limit(int resource, apr_uint64_t value)
{
    struct rlimit rl;
    if (!value)
        return;
    rl.rlim_cur = rl.rlim_max = (rlim_t)value;
    setrlimit(resource, &rl);
}

void ci_signals_default(void)
{
    struct sigaction dfl;
    sigset_t none;
    int sig;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* ---- a sandbox's sessions ---------------------------------------------- */

/* The sandbox's processes share one session, the supervisor's (which has no
 * terminal), and cannot make another: with the kernel's autogroups (the
 * default on most distributions), every session is a scheduling group of
 * its own that competes with httpd's as an equal whatever the priority of
 * the processes in it, so a process in a session of its own would escape
 * the SCHED_IDLE the supervisor gives it. setsid() fails with EPERM; so do
 * the ioctls that push input into a terminal (TIOCSTI, TIOCLINUX: what
 * bubblewrap's --new-session guarded against), and every system call of
 * another ABI (x32, i386), which this filter does not read. */
#if defined(__x86_64__)
#define SESSION_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SESSION_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef SESSION_ARCH
#if __BYTE_ORDER == __LITTLE_ENDIAN
#define ARG_LOW(n) (offsetof(struct seccomp_data, args) + 8 * (n))
#else
#define ARG_LOW(n) (offsetof(struct seccomp_data, args) + 8 * (n) + 4)
#endif
#define REFUSE BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

static struct sock_filter session_filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SESSION_ARCH, 1, 0),
    REFUSE,
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __x86_64__
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1),
    REFUSE,
#endif
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsid, 0, 1),
    REFUSE,
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 4),
    /* the request's low 32 bits: all the kernel reads of it */
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(1)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1),
    REFUSE,
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};
#endif

int ci_spawn_sessions_refused(void)
{
#ifdef SESSION_ARCH
    return 1;
#else
    return 0;
#endif
}

/* In the child before exec: the filter, for it and all it will start
 * (no_new_privs, which bubblewrap sets anyway, lets an unprivileged process
 * install one). 0, or -1. */
static int refuse_sessions(void)
{
#ifdef SESSION_ARCH
    struct sock_fprog prog = { sizeof(session_filter) / sizeof(*session_filter),
                               session_filter };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -1;
#endif
    return 0;
}

/* Between vfork and exec, in the parent's memory: system calls only, no
 * allocation, no return. */
static void exec_child(const spawn_req *req, int in_r, int out_w, int err_w)
{
    static char *const empty_env[] = { NULL };

    ci_signals_default();
    setpgid(0, 0);
    /* The start-up probe runs in the parent, as root: become the user the
     * children will run as, so that it tests what they will do. */
    if (req->limits->switch_user && getuid() == 0 &&
        (setgroups(0, NULL) || setgid(req->limits->gid) || setuid(req->limits->uid)))
        _exit(125);
    if (req->limits->join_cgroup && write(req->limits->cgroup_fd, "0", 1) != 1)
        _exit(123);
    if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        _exit(126);
    /* bubblewrap hands every open descriptor to the sandbox: keep 0-2 only. */
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        int fd;
        for (fd = 3; fd < 65536; fd++)
            close(fd);
    }
    if (req->limits->oom_first) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "1000", 4);
            close(fd);
        }
    }
    limit(RLIMIT_AS, req->limits->address_space);
    limit(RLIMIT_FSIZE, req->limits->file_size);
    limit(RLIMIT_CPU, req->limits->cpu_seconds);
    {
        struct rlimit none_core = { 0, 0 };   /* no core files */
        setrlimit(RLIMIT_CORE, &none_core);
    }
    if (req->limits->contained) {
        /* No priority ever raised: a process the supervisor put at
         * SCHED_IDLE stays there (the kernel lets a process leave it, or
         * lower its nice value, only as far as RLIMIT_NICE allows). */
        struct rlimit no_raise = { 0, 0 };
        if (setrlimit(RLIMIT_NICE, &no_raise) != 0 || refuse_sessions() != 0)
            _exit(124);
    }
    execve(req->argv[0], (char *const *)req->argv, empty_env);
    _exit(127);
}

/* vfork, not fork: the child borrows this process's memory until it execs,
 * so nothing is copied. fork() write-protected every page of the httpd child
 * (tens of MB, 70 threads) on each sandbox start, and every thread then paid
 * a copy-on-write fault on each page it next wrote: a couple of hundred
 * faults per request, which showed as the module's own time. The child only
 * makes system calls (exec_child), and every signal stays blocked until it
 * has reset the handlers, so no handler of ours runs in the borrowed
 * memory. Only this thread waits for the exec; the others run on. */
static pid_t spawn_child(const spawn_req *req, int in_r, int out_w, int err_w)
{
    sigset_t all, saved;
    pid_t pid;
    int saved_errno;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid = vfork();
    if (pid == 0)
        exec_child(req, in_r, out_w, err_w);
    saved_errno = errno;
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    errno = saved_errno;
    return pid;
}

static void close_pair(int p[2])
{
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
}

static void serve(spawn_req *req)
{
    int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
    pid_t pid;

    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
        req->rv = APR_FROM_OS_ERROR(errno);
        goto fail;
    }
    pid = spawn_child(req, in[0], out[1], err[1]);
    if (pid < 0) {
        req->rv = APR_FROM_OS_ERROR(errno);
        goto fail;
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    req->pid = pid;
    req->fds[0] = in[1];
    req->fds[1] = out[0];
    req->fds[2] = err[0];
    req->rv = APR_SUCCESS;
    return;
fail:
    close_pair(in);
    close_pair(out);
    close_pair(err);
}

void ci_spawn_kill(pid_t *pid)
{
    int status;
    if (*pid <= 0)
        return;
    kill(-*pid, SIGKILL);
    kill(*pid, SIGKILL);
    /* still ours until waitpid: no other process can have taken the pid */
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR)
        ;
    *pid = -1;
}

apr_status_t ci_spawn_here(const char *const *argv, const ci_spawn_limits *limits,
                           pid_t *pid, int *stdin_fd, int *stdout_fd, int *stderr_fd)
{
    spawn_req req;
    memset(&req, 0, sizeof(req));
    req.argv = argv;
    req.limits = limits;
    serve(&req);
    if (req.rv == APR_SUCCESS) {
        *pid = req.pid;
        *stdin_fd = req.fds[0];
        *stdout_fd = req.fds[1];
        *stderr_fd = req.fds[2];
    }
    return req.rv;
}

/* ---- start and stop ---------------------------------------------------- */

static apr_status_t stop_all(void *data)
{
    /* Teardown work (remote sandbox deletes) must not be dropped with the
     * queue: let it drain first, for a bounded time. */
    apr_time_t until = apr_time_now() + apr_time_from_sec(30);
    while (workers && apr_atomic_read32(&fired_pending) && apr_time_now() < until)
        apr_sleep(apr_time_from_msec(20));
    if (workers) {
        apr_thread_pool_destroy(workers);
        workers = NULL;
    }
    return APR_SUCCESS;
}

apr_status_t ci_workers_start(apr_pool_t *pchild, int threads, int limit_queue)
{
    apr_status_t rv;

    queue_limit = limit_queue;
    if ((rv = apr_thread_pool_create(&workers, 0, threads, pchild)))
        return rv;
    /* Threads stay idle for the next execution (creating one per execution
     * showed in profiles) and retire after a minute. */
    apr_thread_pool_idle_max_set(workers, (apr_size_t)threads);
    apr_thread_pool_idle_wait_set(workers, apr_time_from_sec(60));
    apr_pool_pre_cleanup_register(pchild, NULL, stop_all);
    return APR_SUCCESS;
}
