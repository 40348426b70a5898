/*
 * sandbox_local.c - the "local" provider: one persistent python3 per sandbox
 * inside bubblewrap namespaces (no network, own pid/ipc/uts/user/cgroup
 * namespaces, read-only /usr, a size-capped tmpfs /mnt/data, an empty
 * environment, no inherited descriptors, rlimits). Processes are forked by
 * the child's spawner thread (ci_workers.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include "ci_config.h"
#include "ci_json.h"
#include "ci_sandbox.h"
#include "ci_workers.h"

#define BWRAP "/usr/bin/bwrap"
#define START_TIMEOUT apr_time_from_sec(60)
#define READ_CHUNK 65536

extern const char ci_kernel_source[];

struct ci_sandbox {
    apr_pool_t *p;
    const ci_sandbox_def *def;
    pid_t pid;
    int in_fd, out_fd, err_fd;
    ci_ndjson *nd;
    volatile int killed;
};

static void push(apr_array_header_t *a, const char *s)
{
    *(const char **)apr_array_push(a) = s;
}

static void push3(apr_array_header_t *a, const char *x, const char *y, const char *z)
{
    push(a, x);
    push(a, y);
    if (z)
        push(a, z);
}

/* Pass a variable through from httpd's environment when it is set there:
 * OpenBLAS needs its core type pinned on some processors. */
static void pass_env(apr_array_header_t *a, const char *name)
{
    const char *v = getenv(name);
    if (v && *v)
        push3(a, "--setenv", name, v);
}

static const char *kernel_config(apr_pool_t *p, const ci_sandbox_def *def)
{
    json_object *cfg = ci_json_own(p, json_object_new_object());
    json_object_object_add(cfg, "max_output", json_object_new_int64(def->max_output));
    json_object_object_add(cfg, "processes", json_object_new_int(def->processes));
    json_object_object_add(cfg, "preload",
                           json_object_new_string(def->preload ? def->preload : ""));
    return ci_json_pstr(p, cfg, NULL);
}

static const char *const *bwrap_argv(apr_pool_t *p, const ci_sandbox_def *def)
{
    apr_array_header_t *a = apr_array_make(p, 96, sizeof(const char *));
    const char *disk = apr_psprintf(p, "%" APR_UINT64_T_FMT, def->disk);

    push(a, BWRAP);
    push(a, "--unshare-all");
    push(a, "--unshare-user");
    push(a, "--disable-userns");
    push(a, "--die-with-parent");
    push(a, "--new-session");
    push3(a, "--cap-drop", "ALL", NULL);
    push3(a, "--hostname", "sandbox", NULL);
    push3(a, "--ro-bind", "/usr", "/usr");
    push3(a, "--symlink", "usr/bin", "/bin");
    push3(a, "--symlink", "usr/sbin", "/sbin");
    push3(a, "--symlink", "usr/lib", "/lib");
    push3(a, "--symlink", "usr/lib64", "/lib64");
    /* Only what the interpreter and its libraries read from /etc: never all
     * of it (/etc/apache2 holds the server's secrets). */
    push3(a, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache");
    push3(a, "--ro-bind-try", "/etc/alternatives", "/etc/alternatives");
    push3(a, "--ro-bind-try", "/etc/matplotlibrc", "/etc/matplotlibrc");
    push3(a, "--ro-bind-try", "/etc/fonts", "/etc/fonts");
    push3(a, "--ro-bind-try", "/etc/localtime", "/etc/localtime");
    push3(a, "--proc", "/proc", NULL);
    push3(a, "--dev", "/dev", NULL);
    /* --dev is a writable tmpfs without a size: make it read-only, and give
     * /dev/shm the same bounded size as the other writable places. */
    push3(a, "--remount-ro", "/dev", NULL);
    push3(a, "--size", disk, NULL);
    push3(a, "--tmpfs", "/dev/shm", NULL);
    push3(a, "--size", disk, NULL);
    push3(a, "--tmpfs", "/tmp", NULL);
    push3(a, "--size", disk, NULL);
    push3(a, "--tmpfs", "/mnt/data", NULL);
    push3(a, "--remount-ro", "/", NULL);
    push3(a, "--chdir", "/mnt/data", NULL);
    push(a, "--clearenv");
    push3(a, "--setenv", "HOME", "/tmp");
    push3(a, "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin");
    push3(a, "--setenv", "LANG", "C.UTF-8");
    push3(a, "--setenv", "MPLBACKEND", "Agg");
    push3(a, "--setenv", "MPLCONFIGDIR", "/tmp/.matplotlib");
    push3(a, "--setenv", "OPENBLAS_NUM_THREADS", "1");
    push3(a, "--setenv", "OMP_NUM_THREADS", "1");
    push3(a, "--setenv", "MKL_NUM_THREADS", "1");
    push3(a, "--setenv", "PYTHONDONTWRITEBYTECODE", "1");
    pass_env(a, "OPENBLAS_CORETYPE");
    pass_env(a, "OPENBLAS_L2_SIZE");
    push(a, "--");
    push(a, def->python);
    push(a, "-I");
    push(a, "-c");
    push(a, ci_kernel_source);
    push(a, kernel_config(p, def));
    push(a, NULL);
    return (const char *const *)a->elts;
}

/* ---- process handling -------------------------------------------------- */

static void kill_sandbox(ci_sandbox *sb)
{
    if (sb->pid > 0 && !sb->killed) {
        sb->killed = 1;
        /* The whole process group; the pid namespace dies with its init. */
        kill(-sb->pid, SIGKILL);
        kill(sb->pid, SIGKILL);
    }
}

static void reap(ci_sandbox *sb)
{
    int status;
    if (sb->pid <= 0)
        return;
    kill_sandbox(sb);
    while (waitpid(sb->pid, &status, 0) < 0 && errno == EINTR)
        ;
    sb->pid = -1;
}

static void close_fds(ci_sandbox *sb)
{
    if (sb->in_fd >= 0) close(sb->in_fd);
    if (sb->out_fd >= 0) close(sb->out_fd);
    if (sb->err_fd >= 0) close(sb->err_fd);
    sb->in_fd = sb->out_fd = sb->err_fd = -1;
}

static void local_destroy(ci_sandbox *sb)
{
    reap(sb);
    close_fds(sb);
}

static void local_interrupt(ci_sandbox *sb)
{
    kill_sandbox(sb);
}

/* Read the kernel's output until end_of_execution (or ready), the deadline,
 * EOF or the hard cap. CI_EXEC_COMPLETED when the awaited line came, else
 * how it stopped early. */
static ci_exec_outcome read_until(ci_sandbox *sb, apr_time_t deadline, int want_ready)
{
    char buf[READ_CHUNK];
    for (;;) {
        struct pollfd pfd = { sb->out_fd, POLLIN, 0 };
        apr_interval_time_t left = deadline - apr_time_now();
        ssize_t n;
        int rc;
        if (want_ready ? ci_ndjson_ready(sb->nd) : ci_ndjson_ended(sb->nd))
            return CI_EXEC_COMPLETED;
        if (left <= 0)
            return CI_EXEC_TIMED_OUT;
        rc = poll(&pfd, 1, (int)apr_time_as_msec(left) + 1);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0)
            continue;
        n = read(sb->out_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sb->killed ? CI_EXEC_INTERRUPTED : CI_EXEC_LOST;
        if (ci_ndjson_feed(sb->nd, buf, (apr_size_t)n) < 0)
            return CI_EXEC_LOST;      /* past the hard cap: the reader says so */
    }
}

static const char *start_failure(apr_pool_t *p, ci_sandbox *sb, ci_exec_outcome why)
{
    char buf[512];
    ssize_t n;
    int fl;
    kill_sandbox(sb);
    reap(sb);
    fl = sb->err_fd >= 0 ? 1 : 0;
    n = fl ? read(sb->err_fd, buf, sizeof(buf) - 1) : -1;
    buf[n > 0 ? n : 0] = '\0';
    if (n > 0 && strchr(buf, '\n'))
        *strchr(buf, '\n') = '\0';
    return apr_psprintf(p, "the local sandbox did not start (%s)%s%s",
                        why == CI_EXEC_TIMED_OUT ? "timeout" : "eof",
                        n > 0 ? ": " : "", n > 0 ? buf : "");
}

/* Launch the real sandbox of DEF and wait for its kernel's "ready". The
 * requests' sandboxes come from the spawner thread (SPAWN = ci_spawn); the
 * start-up probe launches the same thing from the parent (ci_spawn_here). */
static apr_status_t launch(apr_pool_t *p, const ci_sandbox_def *def,
                           const ci_spawn_limits *lim,
                           apr_status_t (*spawn)(const char *const *,
                                                 const ci_spawn_limits *, pid_t *,
                                                 int *, int *, int *),
                           ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    ci_exec_outcome why;
    apr_status_t rv;

    sb->p = p;
    sb->def = def;
    sb->in_fd = sb->out_fd = sb->err_fd = -1;
    sb->nd = ci_ndjson_create(p, def->max_output, CI_HARD_OUTPUT_CAP);
    rv = spawn(bwrap_argv(p, def), lim, &sb->pid, &sb->in_fd, &sb->out_fd,
               &sb->err_fd);
    if (rv != APR_SUCCESS) {
        *err = "the local sandbox could not be forked";
        return rv;
    }
    why = read_until(sb, apr_time_now() + START_TIMEOUT, 1);
    if (why != CI_EXEC_COMPLETED) {
        *err = start_failure(p, sb, why);
        close_fds(sb);
        return APR_EGENERAL;
    }
    *out = sb;
    return APR_SUCCESS;
}

static void limits_of(const ci_sandbox_def *def, ci_spawn_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->address_space = def->memory;
    lim->file_size = def->disk;
}

static apr_status_t local_start(apr_pool_t *p, const ci_sandbox_def *def,
                                const char *tag, ci_sandbox **out, const char **err)
{
    ci_spawn_limits lim;
    limits_of(def, &lim);
    return launch(p, def, &lim, ci_spawn, out, err);
}

static int write_all(int fd, const char *data, apr_size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (apr_size_t)n;
    }
    return 0;
}

static const char *request_line(apr_pool_t *p, const char *code, apr_size_t *len)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "code", json_object_new_string(code));
    return apr_pstrcat(p, ci_json_pstr(p, req, len), "\n", NULL);
}

static const char *failure_text(apr_pool_t *p, const ci_sandbox_def *def,
                                ci_exec_outcome why)
{
    switch (why) {
    case CI_EXEC_TIMED_OUT:
        return apr_psprintf(p, "The execution timed out after %d s and was "
                               "stopped.", (int)apr_time_sec(def->timeout));
    case CI_EXEC_INTERRUPTED:
        return "The execution was stopped because the request ended.";
    default:
        return "The interpreter process died during the execution (out of memory, "
               "a crash, or it exited).";
    }
}

static apr_status_t local_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                              ci_exec_result *res)
{
    apr_time_t began = apr_time_now();
    apr_size_t len;
    const char *line = request_line(p, code, &len);
    ci_exec_outcome why;

    ci_ndjson_reset(sb->nd);
    if (sb->killed || write_all(sb->in_fd, line, len + 1) < 0)
        why = sb->killed ? CI_EXEC_INTERRUPTED : CI_EXEC_LOST;
    else
        why = read_until(sb, began + sb->def->timeout, 0);
    if (why != CI_EXEC_COMPLETED)
        kill_sandbox(sb);
    /* Past the hard cap, the reader's own message says what happened. */
    ci_ndjson_result(sb->nd, why,
                     why == CI_EXEC_COMPLETED ? NULL : failure_text(p, sb->def, why),
                     res);
    res->duration = apr_time_now() - began;
    return APR_SUCCESS;
}

/* ---- start-up probe ---------------------------------------------------- */

/* Start the real sandbox of DEF, with the real arguments, as the user the
 * children run as; then stop it. */
static apr_status_t local_probe(apr_pool_t *p, const ci_sandbox_def *def, uid_t uid,
                                gid_t gid, const char **err)
{
    ci_spawn_limits lim;
    ci_sandbox *sb = NULL;
    const char *why = NULL;
    apr_status_t rv;

    if (access(BWRAP, X_OK) != 0) {
        *err = BWRAP " is missing: install the bubblewrap package";
        return APR_ENOENT;
    }
    limits_of(def, &lim);
    lim.switch_user = 1;
    lim.uid = uid;
    lim.gid = gid;
    rv = launch(p, def, &lim, ci_spawn_here, &sb, &why);
    if (rv == APR_SUCCESS) {
        local_destroy(sb);
        return APR_SUCCESS;
    }
    *err = apr_psprintf(p, "bubblewrap could not start sandbox tool %s as uid %ld "
                           "(%s); unprivileged user namespaces must be enabled "
                           "(sysctl kernel.unprivileged_userns_clone=1, "
                           "user.max_user_namespaces > 0) and %s must run",
                        def->name, (long)uid, why ? why : "no message", def->python);
    return APR_EGENERAL;
}

/* ---- the tool's keys ----------------------------------------------------- */

#define MAX_PROCESSES 4096
#define MAX_WARM 64

static void local_defaults(ci_sandbox_def *d)
{
    d->python = "/usr/bin/python3";
    d->memory = (apr_uint64_t)512 << 20;
    d->processes = 64;
    d->disk = (apr_uint64_t)64 << 20;
    d->warm = 0;
    d->preload = NULL;
}

static const char *parse_preload(apr_pool_t *p, const char *value)
{
    const char *c;
    for (c = value; *c; c++)
        if (!apr_isalnum(*c) && !strchr("_.,", *c))
            return apr_psprintf(p, "'%s' is not a valid module list: expected "
                                   "comma-separated Python module names", value);
    return NULL;
}

static const char *local_parse_key(apr_pool_t *p, ci_sandbox_def *d,
                                   const char *key, const char *v, int *known)
{
    *known = 1;
    if (!strcmp(key, "python")) {
        if (v[0] != '/')
            return apr_psprintf(p, "'%s' is not valid: expected an absolute path", v);
        d->python = v;
        return NULL;
    }
    if (!strcmp(key, "memory"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->memory);
    if (!strcmp(key, "disk"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &d->disk);
    if (!strcmp(key, "processes"))
        return ci_parse_count(p, v, MAX_PROCESSES, 0, &d->processes);
    if (!strcmp(key, "warm"))
        return ci_parse_count(p, v, MAX_WARM, 1, &d->warm);
    if (!strcmp(key, "preload")) {
        d->preload = v;
        return parse_preload(p, v);
    }
    *known = 0;
    return NULL;
}

const ci_provider ci_provider_local = {
    .name = "local",
    .keys = "python, memory, processes, disk, warm, preload",
    .defaults = local_defaults,
    .parse_key = local_parse_key,
    .probe = local_probe,
    .start = local_start,
    .run = local_run,
    .interrupt = local_interrupt,
    .destroy = local_destroy,
    .warmable = 1,
};
