/*
 * ci_supervisor_process.c - the local sandbox supervisor's life in httpd, in the mould of
 * mod_cgid's daemon, but kept across graceful restarts rather than re-forked.
 *
 * - The parent makes the socket (runtime directory, the parent's pid in its
 *   name, mode 0600, owned by User) and listens on it *before* forking the
 *   supervisor, so children never race the bind; its own copy is closed.
 * - What outlives a generation is in retained data: the supervisor's pid and
 *   apr_proc_t, the socket path, the uid it serves, its protocol version.
 * - It is an "other child" registered on pconf again in every generation,
 *   never on the process pool: mod_so unloads this module whenever pconf is
 *   cleared, and a registration that outlived it would leave APR calling
 *   into unmapped code. It is not noted for killing on pconf.
 * - UNREGISTER (pconf cleared) stops it only when httpd is exiting; RESTART
 *   is ignored; DEATH clears the pid first and respawns. A death during the
 *   restart window reaches no registration, so every post_config checks with
 *   waitpid(WNOHANG) and respawns.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <apr_strings.h>
#include <apr_thread_proc.h>
#include <ap_mpm.h>
#include <http_core.h>
#include <http_main.h>
#include <mpm_common.h>
#include <unixd.h>
#include "ci_settings.h"
#include "ci_audit.h"
#include "ci_cgroup.h"
#include "ci_log.h"
#include "ci_registry.h"
#include "ci_supervisor_process.h"
#include "ci_supervisor.h"
#include "ci_supervisor_client.h"
#include "ci_supervisor_wire.h"
#include "ci_workers.h"
#include "ci_module.h"

#define RETAINED_KEY "mod_code_interpreter_supervisor"

typedef struct sup_retained {
    pid_t pid;                 /* 0: none runs */
    apr_proc_t proc;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uid_t uid;
    int version;
    int registered;            /* an other-child registration on this pconf */
} sup_retained;

static sup_retained *keep;
/* This generation's: where a respawn registers, and what it is told. */
static apr_pool_t *gen_pconf;
static server_rec *gen_server;
static const char *gen_wants;
static apr_size_t gen_wants_len;

/* ---- in the supervisor process ------------------------------------------ */

static void reset_signals(void)
{
    /* Every disposition back to the default, SIGCHLD's too: the supervisor
     * reaps its sandboxes and needs their exit statuses. */
    ci_signals_default();
    /* Writes to a dead peer fail with EPIPE rather than kill the supervisor. */
    signal(SIGPIPE, SIG_IGN);
}

/* Keep descriptor 2 only when it is the error log file; anything else (the
 * first generation's terminal, a piped logger) becomes /dev/null. */
static void keep_stderr(int devnull)
{
    struct stat st;
    if (fstat(2, &st) != 0 || !S_ISREG(st.st_mode))
        dup2(devnull, 2);
}

/* Descriptors: 0 and 1 /dev/null, 2 the log, 3 the listening socket,
 * nothing else (listeners, the pipe of death, other modules' files). */
static int close_inherited(int lfd)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return -1;
    dup2(devnull, 0);
    dup2(devnull, 1);
    keep_stderr(devnull);
    if (lfd != 3 && dup3(lfd, 3, O_CLOEXEC) < 0)
        return -1;
    if (syscall(SYS_close_range, 4U, ~0U, 0U) != 0) {
        int fd;
        for (fd = 4; fd < 65536; fd++)
            close(fd);
    }
    return 3;
}

static int hook_claim(const char *tool)
{
    return ci_registry_claim(tool, "warm");
}

static const ci_sup_hooks registry_hooks = {
    hook_claim, ci_registry_set_warm, ci_registry_release
};

static void oom_first(void)
{
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (write(fd, "1000", 4) != 4)
        ci_log(CI_LOG_WARNING, "CI0622: the sandbox supervisor could not raise its "
               "oom_score_adj");
    close(fd);
}

/* Where the supervisor makes its sandboxes' egress sockets: beside its own
 * socket, a directory of its own. */
static const char *egress_dir(apr_pool_t *p)
{
    apr_size_t len = strlen(keep->path);
    if (len > 5 && !strcmp(keep->path + len - 5, ".sock"))
        len -= 5;
    return apr_pstrcat(p, apr_pstrndup(p, keep->path, len), ".egress", NULL);
}

/* The egress directory and what the sandboxes' directories in it hold
 * (one socket each) go. */
static void remove_egress_dir(apr_pool_t *p)
{
    const char *base = egress_dir(p);
    DIR *d = opendir(base);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *sub;
        if (e->d_name[0] == '.')
            continue;
        sub = apr_pstrcat(p, base, "/", e->d_name, NULL);
        unlink(apr_pstrcat(p, sub, "/" CI_EGRESS_SOCKET_NAME, NULL));
        unlink(apr_pstrcat(p, sub, "/" CI_EGRESS_CA_NAME, NULL));
        unlink(apr_pstrcat(p, sub, "/" CI_EGRESS_BUNDLE_NAME, NULL));
        rmdir(sub);
    }
    if (d)
        closedir(d);
    rmdir(base);
}

/* The egress directory, empty, owned by the children's user, mode 0700. */
static int make_egress_dir(apr_pool_t *p)
{
    const char *base = egress_dir(p);
    remove_egress_dir(p);
    if (mkdir(base, 0700) != 0 ||
        (geteuid() == 0 &&
         chown(base, ap_unixd_config.user_id, ap_unixd_config.group_id) != 0))
        return -1;
    return 0;
}

/* The audit log's file, for appending, or -1 (none, piped, or it cannot be
 * opened: the error log still has each egress line). */
static int open_audit(server_rec *s)
{
    apr_pool_t *p;
    const char *path;
    int fd = -1;
    apr_pool_create(&p, NULL);
    if ((path = ci_audit_file_path(p, s)) &&
        (fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0)
        ci_log(CI_LOG_WARNING, "CI0626: the audit log %s cannot be opened for the "
               "egress proxy's lines: %s", path, strerror(errno));
    apr_pool_destroy(p);
    return fd;
}

/* The egress proxy's bounds, as the main server's directives set them
 * (0: the proxy's default). */
static void egress_settings(ci_sup_config *cfg, const ci_server_conf *c)
{
    cfg->egress_max_total = c->egress_max_total > 0 ? c->egress_max_total : 0;
    cfg->egress_max_per_owner = c->egress_max_per_owner > 0 ? c->egress_max_per_owner : 0;
    cfg->egress_lifetime = c->egress_lifetime > 0 ? c->egress_lifetime : 0;
    cfg->egress_proxy_resolves = c->egress_proxy_resolves == 1;
}

/* The sandboxes' cgroups, as CodeInterpreterSandboxCgroup asks: found (or
 * httpd's own split) and delegated by the parent, as root, before the
 * supervisor is forked; the supervisor joins it and hands it on. */
static struct {
    const char *dir, *enabled, *why;
} cgroup;

/* CodeInterpreterSandboxCgroup for this start of the supervisor: -1 when an
 * explicit directory cannot be used (then it is not started: the operator
 * asked for bounds the kernel would not hold); auto falls back to
 * scheduling alone, saying why. */
static int find_cgroup(apr_pool_t *p, server_rec *s)
{
    const ci_server_conf *c = ci_server_config(s);
    const char *mode = c->sandbox_cgroup ? c->sandbox_cgroup : "auto", *base, *d = NULL;
    int explicit = mode[0] == '/';
    cgroup.dir = NULL;
    cgroup.enabled = "";
    cgroup.why = NULL;
    if (!strcasecmp(mode, "off"))
        cgroup.why = "CodeInterpreterSandboxCgroup off";
    else if (geteuid() != 0)
        cgroup.why = "httpd does not start as root";
    else if (explicit)
        d = mode;
    else if ((base = ci_cgroup_own_dir(p, &cgroup.why)) &&
             ci_cgroup_split(p, base, "cpu", &d, &cgroup.why) != APR_SUCCESS)
        d = NULL;
    if (d && ci_cgroup_delegate(p, d, ap_unixd_config.user_id, ap_unixd_config.group_id,
                                &cgroup.enabled, &cgroup.why) == APR_SUCCESS) {
        cgroup.dir = d;
        /* No supervisor runs now: every sandbox cgroup there is an earlier
         * one's (one that died, or ran as another User), and goes. */
        ci_cgroup_sweep(p, d, CI_CGROUP_SANDBOX_PREFIX, NULL, NULL);
    }
    if (explicit && !cgroup.dir) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s, "CI0673: "
                     "CodeInterpreterSandboxCgroup %s cannot be used: %s", mode,
                     cgroup.why);
        return -1;
    }
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "CI0674: sandboxes' cgroups: %s%s%s",
                 cgroup.dir ? cgroup.dir : "none (", cgroup.dir ? "" : cgroup.why,
                 cgroup.dir ? "" : ")");
    return 0;
}

/* In the supervisor, still root: into its leaf of the sandboxes' cgroup
 * directory, the common ancestor of every sandbox's cgroup that its user
 * may write (a process is moved between cgroups only by one who may write
 * the cgroup.procs of both ends' common ancestor). */
static void join_cgroup(ci_sup_config *cfg, const ci_server_conf *c, apr_pool_t *p)
{
    char err[128];
    apr_status_t rv;
    cfg->cgroup_why = cgroup.why;
    cfg->cgroup_cpu_quota_us = c->sandbox_cpus_set ? c->sandbox_cpu_quota_us : 100000;
    if (!cgroup.dir)
        return;
    if ((rv = ci_cgroup_join(apr_pstrcat(p, cgroup.dir, "/supervisor", NULL))) !=
        APR_SUCCESS) {
        cfg->cgroup_why = apr_psprintf(p, "the supervisor could not join %s/supervisor: "
                                       "%s", cgroup.dir, apr_strerror(rv, err, sizeof(err)));
        return;
    }
    cfg->cgroup_dir = cgroup.dir;
    cfg->cgroup_enabled = cgroup.enabled;
}

static void supervisor_main(int lfd, pid_t parent, server_rec *s)
{
    apr_pool_t *p;
    ci_sup_config cfg;
    int audit_fd;

    prctl(PR_SET_NAME, "ci-supervisor");
    /* A session of its own: what httpd sends its process group (SIGHUP to
     * every child at a restart under prefork, SIGTERM at a stop) is not for
     * the supervisor, which the parent stops itself. */
    setsid();
    reset_signals();
    if ((lfd = close_inherited(lfd)) < 0)
        _exit(1);
    /* the audit log is root's: opened now, for the egress proxy's lines */
    audit_fd = open_audit(s);
    apr_pool_create(&p, NULL);
    memset(&cfg, 0, sizeof(cfg));
    join_cgroup(&cfg, ci_server_config(s), p);
    ci_log_set(ci_log_stderr_sink, ap_get_server_module_loglevel(s, APLOG_MODULE_INDEX));
    /* Every sandbox is the OOM killer's first choice (oom_score_adj 1000),
     * before anything of httpd's: set here, while the process may still
     * write it (after setuid it is not dumpable, and its /proc files, and
     * those of its children until they exec, belong to root), and
     * inherited by every sandbox it forks. Among processes of that score
     * the kernel takes the largest: a sandbox, not this small process. */
    oom_first();
    /* As mod_cgid's daemon does: become User/Group (and whatever else the
     * MPM and unixd would do to a child). */
    if (ap_run_drop_privileges(p, s) != 0) {
        ci_log(CI_LOG_ERR, "CI0601: the sandbox supervisor could not drop its "
               "privileges");
        _exit(1);
    }
    /* After setuid, which clears it; then check the parent is still there. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(0);
    cfg.listen_fd = lfd;
    cfg.parent = parent;
    cfg.uid = ap_unixd_config.user_id;
    cfg.hooks = &registry_hooks;
    cfg.wants = gen_wants;
    cfg.wants_len = gen_wants_len;
    cfg.egress_dir = egress_dir(p);
    cfg.audit_fd = audit_fd;
    egress_settings(&cfg, ci_server_config(s));
    ci_supervisor_run(p, &cfg);
    _exit(0);
}

/* ---- in the parent ----------------------------------------------------------- */

/* A socket listening at PATH, owned by the children's user, mode 0600, or
 * -1. */
static int make_socket(server_rec *s, const char *path)
{
    struct sockaddr_un sa;
    mode_t old;
    int fd, rc;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    apr_cpystrn(sa.sun_path, path, sizeof(sa.sun_path));
    if (unlink(path) != 0 && errno != ENOENT)
        return -1;
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return -1;
    old = umask(0077);              /* never reachable by others, not even briefly */
    rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc != 0 || chmod(path, 0600) != 0 ||
        (geteuid() == 0 &&
         chown(path, ap_unixd_config.user_id, ap_unixd_config.group_id) != 0) ||
        listen(fd, 256) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void maintenance(int reason, void *data, apr_wait_t status);

static void register_other_child(void)
{
    if (!keep->pid || keep->registered)
        return;
    keep->proc.pid = keep->pid;
    apr_proc_other_child_register(&keep->proc, maintenance, keep, NULL, gen_pconf);
    keep->registered = 1;
}

/* Registry slots the supervisor held (its warm sandboxes) are released the
 * way a dead child's are. */
static void release_slots_of(pid_t pid)
{
    ap_generation_t gen = 0;
    ap_mpm_query(AP_MPMQ_GENERATION, &gen);
    ap_run_child_status(gen_server, pid, gen, -1, MPM_CHILD_EXITED);
}

static int spawn(void)
{
    server_rec *s = gen_server;
    int fd = make_socket(s, keep->path);
    pid_t parent = getpid(), pid;
    if (fd < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "CI0602: the sandbox "
                     "supervisor's socket %s could not be made", keep->path);
        return -1;
    }
    if (find_cgroup(gen_pconf, s) < 0) {
        close(fd);
        return -1;
    }
    if (make_egress_dir(gen_pconf) < 0)
        ap_log_error(APLOG_MARK, APLOG_WARNING, errno, s, "CI0625: the sandbox "
                     "supervisor's egress directory %s could not be made: containers "
                     "with an allowlist will not start", egress_dir(gen_pconf));
    if ((pid = fork()) < 0) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, errno, s, "CI0603: the sandbox "
                     "supervisor could not be forked");
        close(fd);
        return -1;
    }
    if (pid == 0)
        supervisor_main(fd, parent, s);
    close(fd);
    keep->pid = pid;
    keep->uid = ap_unixd_config.user_id;
    keep->version = CI_SUP_VERSION;
    keep->registered = 0;
    register_other_child();
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "CI0604: sandbox supervisor %ld "
                 "started, socket %s", (long)pid, keep->path);
    return 0;
}

static void stop(const char *why)
{
    pid_t pid = keep->pid;
    int status;
    if (!pid)
        return;
    keep->pid = 0;
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, gen_server, "CI0605: sandbox supervisor "
                 "%ld stopped (%s)", (long)pid, why);
    kill(pid, SIGKILL);               /* its sandboxes die with it */
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    unlink(keep->path);
    remove_egress_dir(gen_pconf);
}

static void maintenance(int reason, void *data, apr_wait_t status)
{
    int mpm_state = AP_MPMQ_STOPPING;
    pid_t dead;
    switch (reason) {
    case APR_OC_REASON_DEATH:
        /* The pid is reaped: forget it before anything could signal it. */
        dead = keep->pid;
        keep->pid = 0;
        keep->registered = 0;
        apr_proc_other_child_unregister(data);
        release_slots_of(dead);
        ap_mpm_query(AP_MPMQ_MPM_STATE, &mpm_state);
        if (mpm_state != AP_MPMQ_STOPPING) {
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, gen_server, "CI0606: sandbox "
                         "supervisor %ld died (status %d); starting a new one",
                         (long)dead, (int)status);
            spawn();
        }
        break;
    case APR_OC_REASON_UNREGISTER:
        /* pconf is being cleared: at a restart the supervisor stays. */
        keep->registered = 0;
        if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_EXITING)
            stop("httpd exits");
        break;
    default:                          /* RESTART, LOST: it carries on */
        break;
    }
}

/* What this configuration wants warm, as a WARM_SET payload. */
static void build_wants(apr_pool_t *pconf, server_rec *s)
{
    apr_array_header_t *defs = ci_sandbox_all(pconf, s);
    const ci_sandbox_def **warm = apr_pcalloc(pconf, sizeof(*warm) * (defs->nelts + 1));
    int i, n = 0;
    for (i = 0; i < defs->nelts; i++) {
        const ci_sandbox_def *d = APR_ARRAY_IDX(defs, i, const ci_sandbox_def *);
        if ((d->provider->caps & CI_CAP_WARM) && d->warm > 0)
            warm[n++] = d;
    }
    gen_wants = ci_sup_warm_encode(pconf, warm, n, &gen_wants_len);
}

/* Tell the running supervisor this generation's warm pools. */
static void send_wants(apr_pool_t *ptemp)
{
    const char *err = NULL;
    int fd = ci_supervisor_connect(ptemp, &err);
    if (fd >= 0 && ci_sup_send(fd, CI_SUP_WARM_SET, 0, gen_wants, gen_wants_len) == 0) {
        char b;
        /* Its answer, or the close: either way it has read the frame. */
        struct timeval tv = { 10, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)!read(fd, &b, 1);
    }
    else
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, gen_server, "CI0607: the warm "
                     "pools could not be handed to the sandbox supervisor: %s",
                     err ? err : "it went away");
    if (fd >= 0)
        close(fd);
}

/* A supervisor that died while no registration could hear it. */
static void check_alive(void)
{
    int status;
    pid_t rc;
    if (!keep->pid)
        return;
    rc = waitpid(keep->pid, &status, WNOHANG);
    if (rc == 0)
        return;
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, gen_server, "CI0608: sandbox supervisor "
                 "%ld died during a restart; starting a new one", (long)keep->pid);
    release_slots_of(keep->pid);
    keep->pid = 0;
}

int ci_supervisor_process_check_config(apr_pool_t *ptemp, server_rec *s)
{
    if (ap_unixd_config.chroot_dir) {
        ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s, "CI0609: ChrootDir "
                     "cannot be used with mod_code_interpreter: the local sandbox "
                     "supervisor runs bubblewrap from the host's /usr");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    return OK;
}

int ci_supervisor_process_post_config(apr_pool_t *pconf, apr_pool_t *ptemp, server_rec *s)
{
    gen_pconf = pconf;
    gen_server = s;
    if (!(keep = ap_retained_data_get(RETAINED_KEY))) {
        const char *path;
        keep = ap_retained_data_create(RETAINED_KEY, sizeof(*keep));
        path = ap_runtime_dir_relative(pconf, apr_psprintf(ptemp, "ci-supervisor.%ld.sock",
                                                           (long)getpid()));
        if (!path || strlen(path) >= sizeof(keep->path)) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0600: the sandbox "
                         "supervisor's socket path %s is too long for a Unix socket; "
                         "set a shorter DefaultRuntimeDir", path ? path : "(none)");
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        apr_cpystrn(keep->path, path, sizeof(keep->path));
    }
    ci_supervisor_set_path(keep->path);
    build_wants(pconf, s);
    keep->registered = 0;             /* the last generation's went with its pconf */
    check_alive();
    if (keep->pid && (keep->version != CI_SUP_VERSION ||
                      keep->uid != ap_unixd_config.user_id))
        stop(keep->version != CI_SUP_VERSION ? "another protocol version"
                                             : "User changed");
    if (keep->pid) {
        register_other_child();
        send_wants(ptemp);
        return OK;
    }
    return spawn() == 0 ? OK : HTTP_INTERNAL_SERVER_ERROR;
}
