/*
 * ci_supervisor_egress.c - the egress proxy (ci_egress.h) from the
 * supervisor's side. A sandbox whose container has an allowlist gets a
 * directory of its own under the configuration's egress_dir, holding the
 * socket the proxy listens on for it; bubblewrap mounts that directory
 * inside. The proxy is started the first time a sandbox needs it, and
 * again (every listener re-made in place) if it dies: a sandbox's mount is
 * of the directory, so a socket made again is the one it sees.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <apr_file_io.h>
#include <apr_strings.h>
#include <openssl/sha.h>
#include "ci_policy.h"
#include "ci_directory.h"
#include "ci_request.h"
#include "ci_egress.h"
#include "ci_json.h"
#include "ci_log.h"
#include "ci_supervisor_internal.h"

#define SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

static pid_t proxy_pid;           /* 0: not running */
static int proxy_control = -1;
/* The server's CA, made once for the supervisor's life (in memory only): a
 * proxy started again signs with the same one. */
static ci_egress_ca proxy_ca;
static int proxy_ca_state;        /* 0: not made yet, 1: made, -1: failed */

/* The secrets as the proxy takes them: domain, placeholder, value (the
 * variable's name is the sandbox's business). */
static json_object *proxy_secrets(apr_pool_t *p, const char *secrets)
{
    json_object *list = ci_json_own(p, json_tokener_parse(secrets));
    json_object *out = json_object_new_array();
    apr_size_t i, n = list ? json_object_array_length(list) : 0;
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(list, i), *o = json_object_new_object();
        json_object_object_add(o, "domain", json_object_new_string(ci_json_str(s, "domain")));
        json_object_object_add(o, "placeholder",
                               json_object_new_string(ci_json_str(s, "placeholder")));
        json_object_object_add(o, "value", json_object_new_string(ci_json_str(s, "value")));
        json_object_array_add(out, o);
    }
    return out;
}

/* The proxy's key for the owner of container ID: a digest of the keyed
 * owner the directory holds (what the proxy knows of an owner is only
 * that two containers share one), or "" when there is none. */
static const char *owner_digest(apr_pool_t *p, const char *id)
{
    ci_container *rec = id && sup_state.dir ? ci_directory_find(sup_state.dir, id) : NULL;
    unsigned char md[SHA256_DIGEST_LENGTH];
    char *hex;
    int i;
    if (!rec || !rec->owner || !*rec->owner)
        return "";
    SHA256((const unsigned char *)rec->owner, strlen(rec->owner), md);
    hex = apr_palloc(p, 33);
    for (i = 0; i < 16; i++)
        apr_snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return hex;
}

/* The container B is the sandbox of, or NULL. */
static const char *container_of(const box *b)
{
    return b->tag && !strncmp(b->tag, "cntr_", 5) ? b->tag : NULL;
}

/* The policy the proxy enforces for B, as ci_egress_add takes it. */
static const char *policy_of(apr_pool_t *p, const box *b)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object *domains = ci_domains_json(p, b->def->allowlist);
    json_object_object_add(o, "container", json_object_new_string(
        b->tag && !strncmp(b->tag, "cntr_", 5) ? b->tag : ""));
    json_object_object_add(o, "tool", json_object_new_string(b->def->name));
    json_object_object_add(o, "owner", json_object_new_string(owner_digest(p,
                                                                  container_of(b))));
    json_object_object_add(o, "domains", domains);
    if (b->def->egress_proxy)
        json_object_object_add(o, "proxy", json_object_new_string(b->def->egress_proxy));
    if (b->def->egress_ca)
        json_object_object_add(o, "origin_ca", json_object_new_string(b->def->egress_ca));
    if (b->def->secrets)
        json_object_object_add(o, "secrets", proxy_secrets(p, b->def->secrets));
    return ci_json_pstr(p, o, NULL);
}

/* A socket listening at DIR/CI_EGRESS_SOCKET_NAME, or -1. The path is
 * bound relative to DIR: the runtime directory's absolute path may be too
 * long for a socket address. The supervisor has one thread, so the
 * working directory is its own for the moment. */
static int listen_in(const char *dir)
{
    struct sockaddr_un sa;
    int fd, here, rc = -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    apr_cpystrn(sa.sun_path, CI_EGRESS_SOCKET_NAME, sizeof(sa.sun_path));
    if ((here = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -1;
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 && chdir(dir) == 0) {
        unlink(CI_EGRESS_SOCKET_NAME);
        rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
             chmod(CI_EGRESS_SOCKET_NAME, 0600) == 0 && listen(fd, SOMAXCONN) == 0 ? 0 : -1;
    }
    if (fchdir(here) != 0)
        rc = -1;
    close(here);
    if (rc < 0 && fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Hand B's listener to the proxy. 0, or -1. */
static int register_box(box *b)
{
    apr_pool_t *p;
    int fd = listen_in(b->egress_dir), rc;
    if (fd < 0)
        return -1;
    apr_pool_create(&p, b->pool);
    rc = ci_egress_add(proxy_control, b->id, fd, policy_of(p, b));
    apr_pool_destroy(p);
    close(fd);
    return rc;
}

/* The CA the proxy signs its certificates with, or NULL (it could not be
 * made: TLS is then not terminated, said once). */
static const ci_egress_ca *server_ca(void)
{
    if (proxy_ca_state == 0) {
        const char *err = ci_egress_make_ca(sup_state.p, &proxy_ca);
        proxy_ca_state = err ? -1 : 1;
        if (err)
            ci_log(CI_LOG_ERR, "CI0645: the egress CA could not be made (%s): no domain "
                   "secret is sent", err);
    }
    return proxy_ca_state > 0 ? &proxy_ca : NULL;
}

/* The CA's certificate a sandbox with secrets trusts, or NULL. */
static const char *proxy_ca_pem(void)
{
    const ci_egress_ca *ca = server_ca();
    return ca ? ca->cert_pem : NULL;
}

/* The operator's settings (ci_sup_config; 0: the default) over LIM. */
static void settings_limits(ci_egress_limits *lim)
{
    const ci_sup_config *cfg = sup_state.cfg;
    if (cfg->egress_max_total > 0)
        lim->max_total = cfg->egress_max_total;
    if (cfg->egress_max_per_owner > 0)
        lim->max_per_owner = cfg->egress_max_per_owner;
    if (cfg->egress_lifetime > 0)
        lim->lifetime_seconds = cfg->egress_lifetime;
    lim->proxy_resolves = cfg->egress_proxy_resolves;
}

/* The proxy, started if it does not run. 0, or -1. */
static int proxy_running(void)
{
    ci_egress_limits lim;
    if (proxy_pid > 0)
        return 0;
    ci_egress_default_limits(&lim);
    settings_limits(&lim);
    proxy_pid = ci_egress_start(sup_state.p, &lim, server_ca(), sup_state.cfg->audit_fd,
                                &proxy_control);
    if (proxy_pid <= 0) {
        ci_log(CI_LOG_ERR, "CI0640: the egress proxy could not be started: %s",
               strerror(errno));
        proxy_pid = 0;
        return -1;
    }
    ci_log(CI_LOG_INFO, "CI0641: egress proxy %ld started", (long)proxy_pid);
    return 0;
}

/* LEN bytes of DATA as DIR/NAME (mode 0644: the sandbox reads it). */
static int write_file(apr_pool_t *p, const char *dir, const char *name, const char *data,
                      apr_size_t len)
{
    const char *path = apr_pstrcat(p, dir, "/", name, NULL);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    apr_size_t done = 0;
    ssize_t n;
    if (fd < 0)
        return -1;
    while (done < len && (n = write(fd, data + done, len - done)) > 0)
        done += (apr_size_t)n;
    close(fd);
    return done == len ? 0 : -1;
}

/* The system's CA bundle, or "" when there is none. */
static const char *system_bundle(apr_pool_t *p, apr_size_t *len)
{
    char *text = NULL;
    apr_file_t *f;
    apr_finfo_t fi;
    *len = 0;
    if (apr_file_open(&f, SYSTEM_BUNDLE, APR_FOPEN_READ, 0, p) != APR_SUCCESS)
        return "";
    if (apr_file_info_get(&fi, APR_FINFO_SIZE, f) == APR_SUCCESS && fi.size > 0 &&
        fi.size < (apr_off_t)16 << 20) {
        text = apr_palloc(p, (apr_size_t)fi.size);
        if (apr_file_read_full(f, text, (apr_size_t)fi.size, len) != APR_SUCCESS)
            *len = 0;
    }
    apr_file_close(f);
    return *len ? text : "";
}

/* A sandbox with secrets trusts the proxy's CA: DIR gets it, and the
 * system's bundle with it appended (mounted over the system's). */
static int write_trust(box *b)
{
    apr_pool_t *p;
    apr_size_t len;
    const char *ca = proxy_ca_pem(), *bundle;
    int rc;
    if (!ca)
        return -1;
    apr_pool_create(&p, b->pool);
    bundle = system_bundle(p, &len);
    bundle = apr_pstrcat(p, apr_pstrmemdup(p, bundle, len), len ? "\n" : "", ca, NULL);
    rc = write_file(p, b->egress_dir, CI_EGRESS_CA_NAME, ca, strlen(ca)) ||
         write_file(p, b->egress_dir, CI_EGRESS_BUNDLE_NAME, bundle, strlen(bundle)) ? -1 : 0;
    apr_pool_destroy(p);
    return rc;
}

int sup_egress_open(box *b)
{
    const char *dir;
    if (!sup_state.cfg->egress_dir || proxy_running() < 0)
        return -1;
    dir = apr_psprintf(b->pool, "%s/%u", sup_state.cfg->egress_dir, b->id);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -1;
    b->egress_dir = dir;
    if ((b->def->secrets && write_trust(b) < 0) || register_box(b) < 0) {
        ci_log(CI_LOG_ERR, "CI0642: sandbox %u: its egress socket could not be made "
               "in %s", b->id, dir);
        rmdir(dir);
        b->egress_dir = NULL;
        return -1;
    }
    return 0;
}

void sup_egress_close(box *b)
{
    if (!b->egress_dir)
        return;
    if (proxy_pid > 0)
        ci_egress_remove(proxy_control, b->id);
    unlink(apr_pstrcat(b->pool, b->egress_dir, "/" CI_EGRESS_SOCKET_NAME, NULL));
    unlink(apr_pstrcat(b->pool, b->egress_dir, "/" CI_EGRESS_CA_NAME, NULL));
    unlink(apr_pstrcat(b->pool, b->egress_dir, "/" CI_EGRESS_BUNDLE_NAME, NULL));
    rmdir(b->egress_dir);
    b->egress_dir = NULL;
}

void sup_egress_claim(box *b)
{
    apr_pool_t *p;
    if (!b->egress_dir || proxy_pid <= 0)
        return;
    apr_pool_create(&p, b->pool);
    if (ci_egress_claim(proxy_control, b->id, container_of(b),
                        owner_digest(p, container_of(b))) < 0)
        ci_log(CI_LOG_ERR, "CI0650: sandbox %u: the egress proxy was not told its "
               "container", b->id);
    apr_pool_destroy(p);
}

void sup_egress_execution(box *b)
{
    if (b->egress_dir && proxy_pid > 0)
        ci_egress_execution(proxy_control, b->id);
}

int sup_egress_reaped(pid_t pid)
{
    box *b;
    if (proxy_pid <= 0 || pid != proxy_pid)
        return 0;
    close(proxy_control);
    proxy_control = -1;
    proxy_pid = 0;
    ci_log(CI_LOG_ERR, "CI0643: egress proxy %ld died; starting a new one", (long)pid);
    if (proxy_running() < 0)
        return 1;
    for (b = sup_state.boxes; b; b = b->next)
        if (b->egress_dir && register_box(b) < 0)
            ci_log(CI_LOG_ERR, "CI0644: sandbox %u: its egress socket could not be "
                   "made again", b->id);
    return 1;
}
