/*
 * sandbox_local.c - the "local" provider: one persistent python3 per sandbox
 * inside bubblewrap namespaces (no network, own pid/ipc/uts/user/cgroup
 * namespaces, read-only /usr, a size-capped tmpfs /mnt/data, an empty
 * environment, no inherited descriptors, rlimits).
 *
 * The sandboxes of requests live in the supervisor (ci_supervisor.c), which
 * forks them with ci_local_spawn; the entries below ask it for them
 * (ci_supervisor_client.h): one
 * connection per sandbox, so each sandbox's lifetime is its connection's (a
 * child that dies closes it and the supervisor destroys what it held), and
 * the only write that can come from another thread is INTERRUPT (under the
 * sandbox's lock). The start-up probe, in the parent, launches one sandbox
 * directly.
 */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include "ci_config.h"
#include "ci_json.h"
#include "ci_sandbox.h"
#include "ci_ndjson.h"
#include "local_conf.h"
#include "ci_supervisor_client.h"
#include "files_local.h"
#include "ci_supervisor_wire.h"
#include "ci_workers.h"

#define BWRAP "/usr/bin/bwrap"
#define START_TIMEOUT apr_time_from_sec(60)
#define READ_CHUNK 65536

extern const char ci_kernel_source[];

/* A sandbox as a child sees it: a connection to the supervisor and the id
 * it handed out. */
struct ci_sandbox {
    apr_pool_t *p;
    const ci_sandbox_def *def;
    int fd;
    apr_uint32_t id;
    ci_sup_reader *reader;
    ci_ndjson *nd;
    pthread_mutex_t lock;       /* one writer at a time: run or interrupt */
    volatile int killed;
    int container;              /* a container's (ATTACH): it outlives us */
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

/* Inside a sandbox with an allowlist: the egress proxy's socket (its
 * directory bind-mounted read-only) and the relay's port on loopback. */
#define EGRESS_MOUNT "/run/ci-egress"
#define EGRESS_SOCKET EGRESS_MOUNT "/" CI_EGRESS_SOCKET_NAME
#define EGRESS_RELAY "http://127.0.0.1:3128"
#define EGRESS_RELAY_PORT 3128

static const char *kernel_config(apr_pool_t *p, const ci_sandbox_def *def, int egress)
{
    json_object *cfg = ci_json_own(p, json_object_new_object());
    if (egress) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "socket", json_object_new_string(EGRESS_SOCKET));
        json_object_object_add(e, "port", json_object_new_int(EGRESS_RELAY_PORT));
        json_object_object_add(cfg, "egress", e);
    }
    json_object_object_add(cfg, "max_output", json_object_new_int64(def->max_output));
    json_object_object_add(cfg, "processes", json_object_new_int(CI_LOCAL(def)->processes));
    json_object_object_add(cfg, "preload",
                           json_object_new_string(CI_LOCAL(def)->preload ? CI_LOCAL(def)->preload : ""));
    return ci_json_pstr(p, cfg, NULL);
}

/* The proxy variables every client library reads, at the relay. */
static void egress_env(apr_array_header_t *a)
{
    static const char *const names[] = { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                         "http_proxy", "https_proxy", "all_proxy" };
    unsigned i;
    for (i = 0; i < sizeof(names) / sizeof(*names); i++)
        push3(a, "--setenv", names[i], EGRESS_RELAY);
}

/* The JSON array TEXT (a definition's secrets or skills, checked where it
 * was made), its length in *N (0: none), owned by P. */
static json_object *def_list(apr_pool_t *p, const char *text, apr_size_t *n)
{
    json_object *list = ci_json_own(p, json_tokener_parse(text));
    *n = list && json_object_is_type(list, json_type_array) ? json_object_array_length(list)
                                                             : 0;
    return list;
}

/* A sandbox with domain secrets: each secret's variable holds its
 * placeholder, never its value; and the egress proxy's CA (which signs
 * what it presents for those domains) is trusted beside the system's, by
 * the system bundle's path and by the variables the usual clients read. */
static void secrets_env(apr_pool_t *p, apr_array_header_t *a, const char *secrets)
{
    static const char *const bundle_vars[] = { "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                                               "CURL_CA_BUNDLE", "PIP_CERT" };
    apr_size_t i, n;
    json_object *list = def_list(p, secrets, &n);
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(list, i);
        push3(a, "--setenv", apr_pstrdup(p, ci_json_str(s, "name")),
              apr_pstrdup(p, ci_json_str(s, "placeholder")));
    }
    for (i = 0; i < sizeof(bundle_vars) / sizeof(*bundle_vars); i++)
        push3(a, "--setenv", bundle_vars[i], EGRESS_MOUNT "/" CI_EGRESS_BUNDLE_NAME);
    push3(a, "--setenv", "NODE_EXTRA_CA_CERTS", EGRESS_MOUNT "/" CI_EGRESS_CA_NAME);
}

/* A container's skills: each folder of the store's, bound read-only at
 * CI_SKILLS_ROOT/MOUNT (bwrap makes the folders above it). */
static void skill_binds(apr_pool_t *p, apr_array_header_t *a, const char *skills)
{
    apr_size_t i, n;
    json_object *list = def_list(p, skills, &n);
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(list, i);
        push3(a, "--ro-bind", apr_pstrdup(p, ci_json_str(s, "tree")),
              apr_pstrcat(p, CI_SKILLS_ROOT "/", ci_json_str(s, "mount"), NULL));
    }
}

static const char *const *bwrap_argv(apr_pool_t *p, const ci_sandbox_def *def,
                                     const char *egress_dir)
{
    apr_array_header_t *a = apr_array_make(p, 96, sizeof(const char *));
    const char *disk = apr_psprintf(p, "%" APR_UINT64_T_FMT, CI_LOCAL(def)->disk);

    push(a, BWRAP);
    push(a, "--unshare-all");
    push(a, "--unshare-user");
    push(a, "--disable-userns");
    push(a, "--die-with-parent");
    /* No --new-session: every sandbox stays in the supervisor's session,
     * which has no terminal, and cannot make one of its own (ci_spawn_here's
     * contained: a session would be a scheduling group of its own). */
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
    if (egress_dir) {
        push3(a, "--ro-bind", egress_dir, EGRESS_MOUNT);
        /* the public CA certificates, for https through the tunnel */
        push3(a, "--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs");
        if (def->secrets)       /* the system's bundle, with the proxy's CA */
            push3(a, "--ro-bind",
                  apr_pstrcat(p, egress_dir, "/" CI_EGRESS_BUNDLE_NAME, NULL),
                  "/etc/ssl/certs/ca-certificates.crt");
    }
    if (def->skills)
        skill_binds(p, a, def->skills);
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
    if (egress_dir)
        egress_env(a);
    if (egress_dir && def->secrets)
        secrets_env(p, a, def->secrets);
    push(a, "--");
    push(a, CI_LOCAL(def)->python);
    push(a, "-I");
    push(a, "-c");
    push(a, ci_kernel_source);
    push(a, kernel_config(p, def, egress_dir != NULL));
    push(a, NULL);
    return (const char *const *)a->elts;
}

/* ---- the start-up probe's own sandbox (parent, no supervisor yet) ------- */

typedef struct direct {
    pid_t pid;
    int in_fd, out_fd, err_fd;
    ci_ndjson *nd;
} direct;

static void direct_stop(direct *d)
{
    ci_spawn_kill(&d->pid);
    if (d->in_fd >= 0) close(d->in_fd);
    if (d->out_fd >= 0) close(d->out_fd);
    if (d->err_fd >= 0) close(d->err_fd);
    d->in_fd = d->out_fd = d->err_fd = -1;
}

/* Read until the kernel's "ready", EOF or the deadline. */
static int direct_ready(direct *d, apr_time_t deadline)
{
    char buf[READ_CHUNK];
    while (!ci_ndjson_ready(d->nd)) {
        struct pollfd pfd = { d->out_fd, POLLIN, 0 };
        apr_interval_time_t left = deadline - apr_time_now();
        ssize_t n;
        int rc;
        if (left <= 0)
            return 0;
        rc = poll(&pfd, 1, (int)apr_time_as_msec(left) + 1);
        if (rc <= 0)
            continue;
        n = read(d->out_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || ci_ndjson_feed(d->nd, buf, (apr_size_t)n) < 0)
            return 0;
    }
    return 1;
}

static const char *direct_failure(apr_pool_t *p, direct *d)
{
    char buf[512];
    ssize_t n = read(d->err_fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    if (strchr(buf, '\n'))
        *strchr(buf, '\n') = '\0';
    return apr_psprintf(p, "the local sandbox did not start%s%s", n > 0 ? ": " : "",
                        n > 0 ? buf : "");
}

static void limits_of(const ci_sandbox_def *def, ci_spawn_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    lim->address_space = CI_LOCAL(def)->memory;
    lim->file_size = CI_LOCAL(def)->disk;
    lim->oom_first = 1;
    lim->contained = 1;
}

/* In the supervisor: fork the sandbox of DEF from its only thread. */
apr_status_t ci_local_spawn(apr_pool_t *p, const ci_sandbox_def *def,
                            const char *egress_dir, int cgroup_fd, pid_t *pid,
                            int *in_fd, int *out_fd, int *err_fd)
{
    ci_spawn_limits lim;
    limits_of(def, &lim);
    lim.join_cgroup = cgroup_fd >= 0;
    lim.cgroup_fd = cgroup_fd;
    return ci_spawn_here(bwrap_argv(p, def, egress_dir), &lim, pid, in_fd, out_fd, err_fd);
}

void ci_local_cgroup_limits(const ci_sandbox_def *def, ci_cgroup_limits *lim)
{
    lim->pids = (apr_uint64_t)CI_LOCAL(def)->processes;
    lim->memory = def->rss_bound;
}

static apr_status_t sandbox_cleanup(void *data)
{
    ci_sandbox *sb = data;
    pthread_mutex_destroy(&sb->lock);
    if (sb->fd >= 0)
        close(sb->fd);
    sb->fd = -1;
    return APR_SUCCESS;
}

static ci_sandbox *sandbox_new(apr_pool_t *p, const ci_sandbox_def *def, int fd,
                               ci_sup_reader *reader)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    sb->p = p;
    sb->def = def;
    sb->fd = fd;
    sb->reader = reader;
    sb->nd = ci_ndjson_create(p, def->max_output, CI_HARD_OUTPUT_CAP);
    pthread_mutex_init(&sb->lock, NULL);
    apr_pool_cleanup_register(p, sb, sandbox_cleanup, apr_pool_cleanup_null);
    return sb;
}

/* Send CREATE or WARM_TAKE for DEF on a new connection and wait for the
 * answer: 1 with *OUT, 0 when the pool had none (WARM_TAKE), -1 with *ERR. */
static int ask_for_sandbox(apr_pool_t *p, const ci_sandbox_def *def, const char *tag,
                           int type, ci_sandbox **out, const char **err)
{
    apr_size_t len;
    const char *payload = ci_sup_create_encode(p, def, tag, &len);
    ci_sup_reader *reader = ci_sup_reader_create(p);
    int fd = ci_supervisor_open(p, type, payload, len, reader, err);
    ci_sandbox *sb;
    ci_sup_frame f;
    if (fd < 0)
        return -1;
    sb = sandbox_new(p, def, fd, reader);
    if (ci_supervisor_read_frame(fd, sb->reader, apr_time_now() + START_TIMEOUT +
                                 CI_SUP_ANSWER_WAIT, &f) != 1) {
        *err = "the sandbox supervisor went away";
        return -1;
    }
    if (f.type == CI_SUP_OK && f.id) {
        sb->id = f.id;
        *out = sb;
        return 1;
    }
    if (f.type == CI_SUP_ERROR)
        *err = apr_pstrmemdup(p, f.data, f.len);
    else if (f.type != CI_SUP_NONE)
        *err = "the sandbox supervisor answered out of turn";
    return f.type == CI_SUP_NONE ? 0 : -1;
}

static apr_status_t local_start(apr_pool_t *p, const ci_sandbox_def *def,
                                const char *tag, ci_sandbox **out, const char **err)
{
    return ask_for_sandbox(p, def, tag, CI_SUP_CREATE, out, err) == 1
        ? APR_SUCCESS : APR_EGENERAL;
}

/* A container's sandbox lives in the supervisor, found by the container's
 * id: no handle, nothing to keep alive (the directory's expiry there).
 * APR_NOTFOUND when the container no longer runs there. */
static apr_status_t local_attach(apr_pool_t *p, const ci_sandbox_def *def,
                                 const char *container_id, const char *handle,
                                 int idle_seconds, ci_sandbox **out, const char **err)
{
    *err = NULL;
    if (ask_for_sandbox(p, def, container_id, CI_SUP_ATTACH, out, err) != 1)
        return *err && !strcmp(*err, CI_SUP_NOT_RUNNING) ? APR_NOTFOUND : APR_EGENERAL;
    (*out)->container = 1;
    return APR_SUCCESS;
}

static void local_release(ci_sandbox *sb)
{
    if (sb->fd >= 0)
        close(sb->fd);
    sb->fd = -1;
}

static int local_warm_take(apr_pool_t *p, const ci_sandbox_def *def, const char *tag,
                           ci_sandbox **out)
{
    const char *err = NULL;
    if (def->warm <= 0)
        return 0;
    return ask_for_sandbox(p, def, tag, CI_SUP_WARM_TAKE, out, &err) == 1;
}

static void local_destroy(ci_sandbox *sb)
{
    ci_sup_frame f;
    /* Wait for the supervisor to say it is gone, briefly: closing the
     * connection destroys it anyway. */
    if (sb->fd >= 0 && ci_sup_send(sb->fd, CI_SUP_DESTROY, sb->id, NULL, 0) == 0)
        while (ci_supervisor_read_frame(sb->fd, sb->reader,
                                        apr_time_now() + CI_SUP_ANSWER_WAIT, &f) == 1 &&
               !(f.type == CI_SUP_OK && f.id == sb->id))
            ;
    if (sb->fd >= 0)
        close(sb->fd);
    sb->fd = -1;
}

static void local_interrupt(ci_sandbox *sb)
{
    sb->killed = 1;
    pthread_mutex_lock(&sb->lock);
    if (sb->fd >= 0)
        ci_sup_send(sb->fd, CI_SUP_INTERRUPT, sb->id, NULL, 0);
    pthread_mutex_unlock(&sb->lock);
}

/* Why a shell call that was interrupted, its interpreter kept, ended. */
static const char *shell_kept_text(apr_pool_t *p, ci_exec_outcome why, int secs)
{
    return why == CI_EXEC_TIMED_OUT
        ? apr_psprintf(p, "The shell call timed out after %d s and its command was "
                          "stopped; the container's variables and files are kept.", secs)
        : "The shell call's command was stopped because the request ended; the "
          "container's variables and files are kept.";
}

static const char *failure_text(apr_pool_t *p, const ci_sandbox *sb,
                                ci_exec_outcome why, int kept, int shell)
{
    int secs = (int)apr_time_sec(sb->def->timeout);
    if (kept && shell)
        return shell_kept_text(p, why, secs);
    if (kept)
        return why == CI_EXEC_TIMED_OUT
            ? apr_psprintf(p, "The execution timed out after %d s and was interrupted "
                              "(KeyboardInterrupt); the container's variables and files "
                              "are kept.", secs)
            : "The execution was interrupted (KeyboardInterrupt) because the request "
              "ended; the container's variables and files are kept.";
    switch (why) {
    case CI_EXEC_TIMED_OUT:
        return apr_psprintf(p, "The execution timed out after %d s and was stopped.",
                            secs);
    case CI_EXEC_INTERRUPTED:
        return "The execution was stopped because the request ended.";
    case CI_EXEC_NOT_RUN:
        return "Not run: the sandbox did not accept the call.";
    default:
        return "The interpreter process died during the execution (out of memory, "
               "a crash, or it exited).";
    }
}

/* Relay the execution's frames into the reader until END. The supervisor
 * enforces the timeout; the extra margin here only guards against a
 * supervisor that stopped answering. */
static ci_exec_outcome read_execution(ci_sandbox *sb, int *kept)
{
    /* A container's run may wait its turn behind others' first: the
     * request's own deadline interrupts it (and the supervisor answers). */
    apr_time_t deadline = apr_time_now() + sb->def->timeout + apr_time_from_sec(30) +
                          (sb->container ? apr_time_from_sec(24 * 3600) : 0);
    ci_sup_frame f;
    for (;;) {
        int rc = ci_supervisor_read_frame(sb->fd, sb->reader, deadline, &f);
        if (rc != 1)
            return sb->killed ? CI_EXEC_INTERRUPTED : CI_EXEC_LOST;
        if (f.id != sb->id)
            continue;
        if (f.type == CI_SUP_OUTPUT)
            ci_ndjson_feed(sb->nd, f.data, f.len);
        else if (f.type == CI_SUP_END && (f.len == 1 || f.len == 2) &&
                 (unsigned char)f.data[0] <= CI_EXEC_NOT_RUN) {
            *kept = f.len == 2 && f.data[1] == CI_SUP_END_KEPT;
            return (ci_exec_outcome)(unsigned char)f.data[0];
        }
        else if (f.type == CI_SUP_END)
            return CI_EXEC_LOST;
    }
}

/* One execution: frame TYPE (RUN: code; SHELL: a shell call) with PAYLOAD
 * sent, and read to its END into RES. */
static void execute(ci_sandbox *sb, apr_pool_t *p, int type, const char *payload,
                    apr_size_t len, ci_exec_result *res)
{
    apr_time_t began = apr_time_now();
    ci_exec_outcome why;
    int sent, kept = 0;

    ci_ndjson_reset(sb->nd);
    pthread_mutex_lock(&sb->lock);
    sent = !sb->killed && sb->fd >= 0 &&
           ci_sup_send(sb->fd, type, sb->id, payload, len) == 0;
    pthread_mutex_unlock(&sb->lock);
    if (!sent)
        why = sb->killed ? CI_EXEC_INTERRUPTED : CI_EXEC_LOST;
    else
        why = read_execution(sb, &kept);
    /* Past the hard cap, the reader's own message says what happened. */
    ci_ndjson_result(sb->nd, why,
                     why == CI_EXEC_COMPLETED ? NULL
                     : failure_text(p, sb, why, kept, type == CI_SUP_SHELL), res);
    /* A kept interpreter is said so, as is a call not run (nothing was
     * lost); a lost one the model is told about as for any failed
     * execution (ci_exec_model_text). */
    res->failure_says_all = kept || why == CI_EXEC_NOT_RUN;
    res->duration = apr_time_now() - began;
}

static apr_status_t local_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                              ci_exec_result *res)
{
    execute(sb, p, CI_SUP_RUN, code, strlen(code), res);
    return APR_SUCCESS;
}

/* The kernel runs the commands (ci_kernel.py's shell_call); the supervisor
 * bounds the whole call by the tool's timeout, as it bounds a run. */
static apr_status_t local_run_commands(ci_sandbox *sb, apr_pool_t *p,
                                       const ci_shell_action *action, ci_exec_result *res)
{
    apr_size_t len;
    const char *payload = ci_sup_shell_encode(p, action, &len);
    execute(sb, p, CI_SUP_SHELL, payload, len, res);
    if (!res->commands)           /* none ran: still a shell call's result */
        res->commands = apr_array_make(p, 1, sizeof(ci_command_result));
    return APR_SUCCESS;
}

/* ---- start-up probe ---------------------------------------------------- */

/* Start the real sandbox of DEF, with the real arguments, as the user the
 * children run as; then stop it. */
static apr_status_t local_probe(apr_pool_t *p, const ci_sandbox_def *def, uid_t uid,
                                gid_t gid, const char **err)
{
    ci_spawn_limits lim;
    direct d;
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
    memset(&d, 0, sizeof(d));
    d.in_fd = d.out_fd = d.err_fd = -1;
    d.nd = ci_ndjson_create(p, def->max_output, CI_HARD_OUTPUT_CAP);
    rv = ci_spawn_here(bwrap_argv(p, def, NULL), &lim, &d.pid, &d.in_fd, &d.out_fd,
                       &d.err_fd);
    if (rv == APR_SUCCESS && direct_ready(&d, apr_time_now() + START_TIMEOUT)) {
        direct_stop(&d);
        return APR_SUCCESS;
    }
    if (rv == APR_SUCCESS) {
        kill(-d.pid, SIGKILL);
        kill(d.pid, SIGKILL);
        why = direct_failure(p, &d);
        direct_stop(&d);
    }
    *err = apr_psprintf(p, "bubblewrap could not start sandbox tool %s as uid %ld "
                           "(%s); unprivileged user namespaces must be enabled "
                           "(sysctl kernel.unprivileged_userns_clone=1, "
                           "user.max_user_namespaces > 0) and %s must run",
                        def->name, (long)uid, why ? why : "it could not be forked",
                        CI_LOCAL(def)->python);
    return APR_EGENERAL;
}

/* ---- the tool's keys ----------------------------------------------------- */

#define MAX_PROCESSES 4096
#define MAX_WARM 64

/* A local tool's keys, with their defaults (from P). */
static ci_local_conf *ci_local_conf_create(apr_pool_t *p)
{
    ci_local_conf *c = apr_pcalloc(p, sizeof(*c));
    c->python = "/usr/bin/python3";
    c->memory = (apr_uint64_t)512 << 20;
    c->processes = 64;
    c->disk = (apr_uint64_t)64 << 20;
    c->preload = NULL;
    return c;
}

static void local_defaults(apr_pool_t *p, ci_sandbox_def *d)
{
    d->conf = ci_local_conf_create(p);
    d->warm = 0;
    d->rss_bound = (apr_uint64_t)1 << 30;     /* the default tier, 1g */
}

static void *local_conf_copy(apr_pool_t *p, const void *conf)
{
    const ci_local_conf *c = conf;
    ci_local_conf *out = apr_pmemdup(p, c, sizeof(*c));
    out->python = c->python ? apr_pstrdup(p, c->python) : NULL;
    out->preload = c->preload ? apr_pstrdup(p, c->preload) : NULL;
    return out;
}

static const char *local_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    const ci_local_conf *c = CI_LOCAL(d);
    return apr_psprintf(p, "%s|%" APR_UINT64_T_FMT "|%d|%" APR_UINT64_T_FMT "|%s",
                        c->python ? c->python : "", c->memory, c->processes, c->disk,
                        c->preload ? c->preload : "");
}

/* A memory tier is the resident memory the whole sandbox may hold (the
 * supervisor measures it and kills a sandbox over it: RLIMIT_AS bounds one
 * process, not a sandbox of many). */
static const char *local_tier(apr_pool_t *p, ci_sandbox_def *d, const char *value)
{
    return ci_parse_size(p, value, (apr_uint64_t)1 << 40, &d->rss_bound);
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
    ci_local_conf *c = CI_LOCAL(d);
    *known = 1;
    if (!strcmp(key, "python")) {
        if (v[0] != '/')
            return apr_psprintf(p, "'%s' is not valid: expected an absolute path", v);
        c->python = v;
        return NULL;
    }
    if (!strcmp(key, "memory"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &c->memory);
    if (!strcmp(key, "disk"))
        return ci_parse_size(p, v, (apr_uint64_t)1 << 40, &c->disk);
    if (!strcmp(key, "processes"))
        return ci_parse_count(p, v, MAX_PROCESSES, 0, &c->processes);
    if (!strcmp(key, "warm"))
        return ci_parse_count(p, v, MAX_WARM, 1, &d->warm);
    if (!strcmp(key, "preload")) {
        c->preload = v;
        return parse_preload(p, v);
    }
    *known = 0;
    return NULL;
}

const ci_provider ci_provider_local = {
    .name = "local",
    .caps = CI_CAP_WARM | CI_CAP_CONTAINERS | CI_CAP_FILES | CI_CAP_SHELL | CI_CAP_EGRESS |
            CI_CAP_SKILLS |
            CI_CAP_SITE_PROXY | CI_CAP_SECRETS,
    .keys = "python, memory, processes, disk, warm, preload",
    .defaults = local_defaults,
    .conf_copy = local_conf_copy,
    .fingerprint = local_fingerprint,
    .parse_key = local_parse_key,
    .probe = local_probe,
    .start = local_start,
    .run = local_run,
    .run_commands = local_run_commands,
    .interrupt = local_interrupt,
    .destroy = local_destroy,
    .warm_take = local_warm_take,
    .attach = local_attach,
    .release = local_release,
    .tier = local_tier,
    .files_list = ci_local_files_list,
    .file_get = ci_local_file_get,
    .file_delete = ci_local_file_delete,
    .file_put = ci_local_file_put,
};
