/*
 * ci_cgroup.c - sandboxes in cgroup v2 (ci_cgroup.h). Plain system calls on
 * the files the kernel gives a cgroup; no httpd here.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <linux/magic.h>
#include <unistd.h>
#include <apr_strings.h>
#include "ci_cgroup.h"

/* The supervisor's share beside the sandboxes (each 100): it relays every
 * sandbox's output and runs the egress proxy. httpd's own leaf gets the
 * same beside all the sandboxes together. */
#define SUPERVISOR_WEIGHT "1000"
#define HTTPD_WEIGHT "1000"

/* ---- small files ---------------------------------------------------------------- */

/* The text of PATH (at most 64 KiB), or NULL. */
static char *read_text(apr_pool_t *p, const char *path)
{
    char *buf, *text;
    apr_size_t got = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (!(buf = malloc(65536))) {
        close(fd);
        return NULL;
    }
    while (got < 65535 && (n = read(fd, buf + got, 65535 - got)) > 0)
        got += (apr_size_t)n;
    close(fd);
    text = apr_pstrmemdup(p, buf, got);
    free(buf);
    return text;
}

/* TEXT written to DIR/NAME in one write. */
static apr_status_t write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    ssize_t n;
    int fd, e;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
        return APR_FROM_OS_ERROR(errno);
    n = write(fd, text, strlen(text));
    e = errno;
    close(fd);
    return n == (ssize_t)strlen(text) ? APR_SUCCESS : APR_FROM_OS_ERROR(n < 0 ? e : EIO);
}

static const char *why_of(apr_pool_t *p, const char *what, const char *path, apr_status_t rv)
{
    char buf[128];
    return apr_psprintf(p, "%s %s: %s", what, path, apr_strerror(rv, buf, sizeof(buf)));
}

/* ---- where the cgroup is ------------------------------------------------------------ */

const char *ci_cgroup_mount_of(apr_pool_t *p, const char *mountinfo)
{
    const char *line = mountinfo;
    while (line && *line) {
        const char *end = strchr(line, '\n'), *sep;
        char *l = end ? apr_pstrndup(p, line, (apr_size_t)(end - line)) : apr_pstrdup(p, line);
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS] - FSTYPE SOURCE ..." */
        if ((sep = strstr(l, " - ")) && !strncmp(sep + 3, "cgroup2 ", 8)) {
            char *last, *tok = apr_strtok(l, " ", &last);
            int i;
            for (i = 0; tok && i < 4; i++)
                tok = apr_strtok(NULL, " ", &last);
            if (tok)
                return tok;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

const char *ci_cgroup_path_of(apr_pool_t *p, const char *proc_cgroup)
{
    const char *line = proc_cgroup;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        if (!strncmp(line, "0::", 3))
            return end ? apr_pstrndup(p, line + 3, (apr_size_t)(end - line - 3))
                       : apr_pstrdup(p, line + 3);
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

const char *ci_cgroup_own_dir(apr_pool_t *p, const char **why)
{
    const char *mnt = ci_cgroup_mount_of(p, read_text(p, "/proc/self/mountinfo"));
    const char *path = ci_cgroup_path_of(p, read_text(p, "/proc/self/cgroup"));
    if (!mnt) {
        *why = "no cgroup v2 is mounted";
        return NULL;
    }
    if (!path) {
        *why = "this process is in no cgroup v2";
        return NULL;
    }
    if (!strcmp(path, "/")) {
        *why = apr_psprintf(p, "httpd runs in the root cgroup of %s: nothing is "
                            "delegated to it", mnt);
        return NULL;
    }
    return apr_pstrcat(p, mnt, path, NULL);
}

int ci_cgroup_has(const char *list, const char *word)
{
    apr_size_t n = strlen(word);
    const char *s = list;
    while (s && (s = strstr(s, word))) {
        if ((s == list || s[-1] == ' ' || s[-1] == '\n') &&
            (s[n] == '\0' || s[n] == ' ' || s[n] == '\n'))
            return 1;
        s += n;
    }
    return 0;
}

const char *ci_cgroup_listed(apr_pool_t *p, const char *dir, const char *name)
{
    const char *text = read_text(p, apr_pstrcat(p, dir, "/", name, NULL));
    char *wanted = apr_pstrdup(p, CI_CGROUP_CONTROLLERS), *last, *c;
    const char *out = "";
    if (!text)
        return NULL;
    for (c = apr_strtok(wanted, " ", &last); c; c = apr_strtok(NULL, " ", &last))
        if (ci_cgroup_has(text, c))
            out = *out ? apr_pstrcat(p, out, " ", c, NULL) : c;
    return out;
}

/* Each controller of LIST enabled for DIR's children; *ENABLED those that
 * took (a write of one "+name" at a time: one refusal stops no other). */
static void enable_for_children(apr_pool_t *p, const char *dir, const char *list,
                                const char **enabled)
{
    char *copy = apr_pstrdup(p, list), *last, *c;
    for (c = apr_strtok(copy, " ", &last); c; c = apr_strtok(NULL, " ", &last))
        write_text(dir, "cgroup.subtree_control", apr_pstrcat(p, "+", c, NULL));
    *enabled = ci_cgroup_listed(p, dir, "cgroup.subtree_control");
    if (!*enabled)
        *enabled = "";
}

static apr_status_t make_dir(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? APR_SUCCESS
                                                     : APR_FROM_OS_ERROR(errno);
}

/* ---- httpd's parent ------------------------------------------------------------------ */

/* Every process listed in FROM/cgroup.procs written to TO/cgroup.procs,
 * until none is left (a process forked meanwhile is found next round). */
static apr_status_t move_all(apr_pool_t *p, const char *from, const char *to)
{
    int round;
    for (round = 0; round < 16; round++) {
        char *text = read_text(p, apr_pstrcat(p, from, "/cgroup.procs", NULL));
        char *last, *pid;
        int moved = 0;
        if (!text)
            return APR_FROM_OS_ERROR(errno);
        for (pid = apr_strtok(text, "\n", &last); pid; pid = apr_strtok(NULL, "\n", &last)) {
            apr_status_t rv = write_text(to, "cgroup.procs", pid);
            /* ESRCH: it exited meanwhile */
            if (rv != APR_SUCCESS && rv != APR_FROM_OS_ERROR(ESRCH))
                return rv;
            moved++;
        }
        if (!moved)
            return APR_SUCCESS;
    }
    return APR_EBUSY;
}

/* The first word of NEED that LIST lacks, or NULL. */
static const char *lacking(apr_pool_t *p, const char *list, const char *need)
{
    char *copy = apr_pstrdup(p, need), *last, *c;
    for (c = apr_strtok(copy, " ", &last); c; c = apr_strtok(NULL, " ", &last))
        if (!ci_cgroup_has(list, c))
            return c;
    return NULL;
}

/* Whether the cgroup at DIR was delegated by its manager: systemd marks a
 * delegated cgroup with the extended attribute trusted.delegate (or
 * user.delegate) "1". A cgroup that is not is systemd's alone to arrange,
 * even where root could write it. */
static int delegated(const char *dir)
{
    static const char *const names[] = { "trusted.delegate", "user.delegate", NULL };
    char value[8];
    int i;
    for (i = 0; names[i]; i++) {
        ssize_t n = getxattr(dir, names[i], value, sizeof(value) - 1);
        if (n > 0) {
            value[n] = '\0';
            if (!strcmp(value, "1"))
                return 1;
        }
    }
    return 0;
}

apr_status_t ci_cgroup_split(apr_pool_t *p, const char *base, const char *need,
                             const char **sandboxes, const char **why)
{
    const char *leaf = apr_pstrcat(p, base, "/httpd", NULL);
    const char *offered = ci_cgroup_listed(p, base, "cgroup.controllers"), *enabled;
    const char *missing;
    apr_status_t rv;
    *sandboxes = apr_pstrcat(p, base, "/sandboxes", NULL);
    if (!offered) {
        *why = apr_psprintf(p, "httpd's cgroup %s cannot be read", base);
        return APR_EINVAL;
    }
    if (!delegated(base)) {
        *why = apr_psprintf(p, "httpd's cgroup %s is not delegated to it (systemd: "
                            "Delegate= for its unit)", base);
        return APR_ENOTIMPL;
    }
    if ((missing = lacking(p, offered, need))) {
        *why = apr_psprintf(p, "httpd's cgroup %s has no %s controller delegated to it "
                            "(systemd: Delegate=yes for its unit)", base, missing);
        return APR_ENOTIMPL;
    }
    if ((rv = make_dir(leaf)) != APR_SUCCESS) {
        *why = why_of(p, "cannot make", leaf, rv);
        return rv;
    }
    /* "no internal processes": BASE may give its children controllers only
     * once it holds no process itself */
    if ((rv = move_all(p, base, leaf)) != APR_SUCCESS) {
        *why = why_of(p, "cannot move httpd's processes to", leaf, rv);
        return rv;
    }
    enable_for_children(p, base, offered, &enabled);
    if ((missing = lacking(p, enabled, need))) {
        *why = apr_psprintf(p, "the %s controller could not be enabled in %s", missing,
                            base);
        return APR_EGENERAL;
    }
    if (ci_cgroup_has(enabled, "cpu"))
        write_text(leaf, "cpu.weight", HTTPD_WEIGHT);
    if ((rv = make_dir(*sandboxes)) != APR_SUCCESS) {
        *why = why_of(p, "cannot make", *sandboxes, rv);
        return rv;
    }
    return APR_SUCCESS;
}

/* DIR and its delegated files handed to UID/GID. */
static apr_status_t hand_over(apr_pool_t *p, const char *dir, uid_t uid, gid_t gid)
{
    static const char *const files[] = { "cgroup.procs", "cgroup.threads",
                                         "cgroup.subtree_control", NULL };
    int i;
    if (chown(dir, uid, gid) != 0)
        return APR_FROM_OS_ERROR(errno);
    for (i = 0; files[i]; i++)
        if (chown(apr_pstrcat(p, dir, "/", files[i], NULL), uid, gid) != 0 &&
            errno != ENOENT)
            return APR_FROM_OS_ERROR(errno);
    return APR_SUCCESS;
}

/* Whether D (made or to be made) lies in a cgroup v2 file system: its
 * parent directory does (a path elsewhere would be made as a plain
 * directory, and nothing held). */
static int on_cgroup2(apr_pool_t *p, const char *d)
{
    struct statfs fs;
    char *parent = apr_pstrdup(p, d), *slash = strrchr(parent, '/');
    if (!slash || slash == parent)
        return 0;
    *slash = '\0';
    return statfs(parent, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

apr_status_t ci_cgroup_delegate(apr_pool_t *p, const char *d, uid_t uid, gid_t gid,
                                const char **enabled, const char **why)
{
    const char *sup = apr_pstrcat(p, d, "/supervisor", NULL), *offered;
    apr_status_t rv;
    *enabled = "";
    if (!on_cgroup2(p, d)) {
        *why = apr_psprintf(p, "%s is not in a cgroup v2 file system", d);
        return APR_EINVAL;
    }
    if ((rv = make_dir(d)) != APR_SUCCESS) {
        *why = why_of(p, "cannot make", d, rv);
        return rv;
    }
    if (!(offered = ci_cgroup_listed(p, d, "cgroup.controllers"))) {
        *why = apr_psprintf(p, "%s is not a cgroup v2 directory", d);
        return APR_EINVAL;
    }
    /* the supervisor's leaf first: D may hold no process once it gives its
     * children controllers, and the supervisor joins it before it forks */
    if ((rv = make_dir(sup)) != APR_SUCCESS) {
        *why = why_of(p, "cannot make", sup, rv);
        return rv;
    }
    enable_for_children(p, d, offered, enabled);
    if (ci_cgroup_has(*enabled, "cpu"))
        write_text(sup, "cpu.weight", SUPERVISOR_WEIGHT);
    if ((rv = hand_over(p, d, uid, gid)) != APR_SUCCESS ||
        (rv = hand_over(p, sup, uid, gid)) != APR_SUCCESS) {
        *why = why_of(p, "cannot hand over", d, rv);
        return rv;
    }
    return APR_SUCCESS;
}

apr_status_t ci_cgroup_join(const char *dir)
{
    return write_text(dir, "cgroup.procs", "0");
}

/* ---- a sandbox's cgroup --------------------------------------------------------------- */

/* LIM written to the cgroup at PATH for the controllers in ENABLED. */
static apr_status_t set_limits(apr_pool_t *p, const char *path, const char *enabled,
                               const ci_cgroup_limits *lim)
{
    apr_status_t rv = APR_SUCCESS;
    if (ci_cgroup_has(enabled, "cpu")) {
        if (lim->cpu_weight > 0)
            rv = write_text(path, "cpu.weight", apr_itoa(p, lim->cpu_weight));
        if (rv == APR_SUCCESS && lim->cpu_quota_us && lim->cpu_period_us)
            rv = write_text(path, "cpu.max",
                            apr_psprintf(p, "%" APR_UINT64_T_FMT " %" APR_UINT64_T_FMT,
                                         lim->cpu_quota_us, lim->cpu_period_us));
    }
    if (rv == APR_SUCCESS && lim->pids && ci_cgroup_has(enabled, "pids"))
        rv = write_text(path, "pids.max", apr_psprintf(p, "%" APR_UINT64_T_FMT, lim->pids));
    if (rv == APR_SUCCESS && lim->memory && ci_cgroup_has(enabled, "memory")) {
        rv = write_text(path, "memory.max",
                        apr_psprintf(p, "%" APR_UINT64_T_FMT, lim->memory));
        /* past it the whole sandbox goes, as when the supervisor kills it */
        if (rv == APR_SUCCESS)
            write_text(path, "memory.oom.group", "1");
    }
    return rv;
}

apr_status_t ci_cgroup_make(apr_pool_t *p, const char *dir, const char *name,
                            const char *enabled, const ci_cgroup_limits *lim,
                            int *procs_fd)
{
    const char *path = apr_pstrcat(p, dir, "/", name, NULL);
    apr_status_t rv;
    *procs_fd = -1;
    if (mkdir(path, 0755) != 0) {
        if (errno != EEXIST)
            return APR_FROM_OS_ERROR(errno);
        /* a leftover (a supervisor before this one): nothing of it lives on */
        if ((rv = ci_cgroup_end(p, dir, name)) != APR_SUCCESS)
            return rv;
        if (mkdir(path, 0755) != 0)
            return APR_FROM_OS_ERROR(errno);
    }
    if ((rv = set_limits(p, path, enabled, lim)) != APR_SUCCESS ||
        (*procs_fd = open(apr_pstrcat(p, path, "/cgroup.procs", NULL),
                          O_WRONLY | O_CLOEXEC)) < 0) {
        rv = rv != APR_SUCCESS ? rv : APR_FROM_OS_ERROR(errno);
        rmdir(path);
        return rv;
    }
    return APR_SUCCESS;
}

/* Every process of PATH sent SIGKILL: by cgroup.kill (Linux 5.14), which no
 * fork escapes; or one by one from cgroup.procs, where a process forked
 * meanwhile survives this round (the caller tries again until the cgroup
 * is empty and removed). */
static void kill_all(apr_pool_t *p, const char *path)
{
    char *text, *last, *pid;
    if (write_text(path, "cgroup.kill", "1") == APR_SUCCESS)
        return;
    if (!(text = read_text(p, apr_pstrcat(p, path, "/cgroup.procs", NULL))))
        return;
    for (pid = apr_strtok(text, "\n", &last); pid; pid = apr_strtok(NULL, "\n", &last))
        if (atol(pid) > 1)
            kill((pid_t)atol(pid), SIGKILL);
}

apr_status_t ci_cgroup_end(apr_pool_t *p, const char *dir, const char *name)
{
    const char *path = apr_pstrcat(p, dir, "/", name, NULL);
    if (rmdir(path) == 0 || errno == ENOENT)
        return APR_SUCCESS;
    kill_all(p, path);
    if (rmdir(path) == 0 || errno == ENOENT)
        return APR_SUCCESS;
    return errno == EBUSY ? APR_EBUSY : APR_FROM_OS_ERROR(errno);
}

int ci_cgroup_sweep(apr_pool_t *p, const char *dir, const char *prefix,
                    int (*keep)(void *baton, const char *name), void *baton)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int left = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && !(keep && keep(baton, e->d_name)))
            left += ci_cgroup_end(p, dir, e->d_name) != APR_SUCCESS;
    closedir(d);
    return left;
}
