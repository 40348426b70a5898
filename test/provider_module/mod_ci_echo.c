/*
 * mod_ci_echo.c - a module built apart from mod_code_interpreter, against
 * its installed headers only, as another project would build one: it adds
 * a sandbox provider "echo" (its "interpreter" prints back the code it is
 * given, after its own key prefix=) and writes one line per execution,
 * from the execution hook, to the file CiEchoExecutionLog names.
 *
 * A second provider, "echofs", has containers and their files: each of its
 * sandboxes is a directory under its key store= that outlives the process
 * that made it (CI_CAP_REMOTE), reached again by its name (the handle), and
 * its container files are that directory's regular files (CI_CAP_FILES).
 * Its interpreter echoes too, and knows two commands: "ls" prints the
 * files' names, "write NAME=TEXT" writes one.
 *
 * The tests build it with apxs (test/test_provider_module.py).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <apr_general.h>
#include <apr_strings.h>
#include <ap_provider.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include "mod_code_interpreter.h"

module AP_MODULE_DECLARE_DATA ci_echo_module;

static const char *execution_log;

struct ci_sandbox {
    const char *prefix;
    const char *store;          /* echofs: store= */
    const char *id;             /* echofs: the directory's name under store= */
    const char *dir;            /* echofs: the directory */
};

typedef struct echo_conf {
    const char *prefix;
    const char *store;          /* echofs: where its sandboxes are */
} echo_conf;

static void echo_defaults(apr_pool_t *p, ci_sandbox_def *d)
{
    echo_conf *c = apr_pcalloc(p, sizeof(*c));
    c->prefix = "";
    d->conf = c;
}

static void *echo_conf_copy(apr_pool_t *p, const void *conf)
{
    return apr_pmemdup(p, conf, sizeof(echo_conf));
}

static const char *echo_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    const echo_conf *c = d->conf;
    return apr_pstrcat(p, "prefix=", c->prefix, " store=", c->store ? c->store : "", NULL);
}

static const char *echo_parse_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                  const char *v, int *known)
{
    echo_conf *c = d->conf;
    *known = !strcmp(key, "prefix") ||
             (!strcmp(key, "store") && !strcmp(d->provider->name, "echofs"));
    if (!strcmp(key, "prefix"))
        c->prefix = v;
    else if (*known && *v != '/')
        return apr_psprintf(p, "'%s' is not an absolute path", v);
    else if (*known)
        c->store = v;
    return NULL;
}

static apr_status_t echo_start(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                               ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    sb->prefix = ((const echo_conf *)d->conf)->prefix;
    *out = sb;
    return APR_SUCCESS;
}

static const char *echofs_command(ci_sandbox *sb, apr_pool_t *p, const char *code);

static apr_status_t echo_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                             ci_exec_result *res)
{
    const char *said = sb->dir ? echofs_command(sb, p, code) : NULL;
    memset(res, 0, sizeof(*res));
    res->outcome = CI_EXEC_COMPLETED;
    res->text = said ? said : apr_pstrcat(p, sb->prefix, code, "\n", NULL);
    res->text_len = strlen(res->text);
    res->images = apr_array_make(p, 1, sizeof(const char *));
    return APR_SUCCESS;
}

static void echo_interrupt(ci_sandbox *sb)
{
}

static void echo_destroy(ci_sandbox *sb)
{
}

/* echofs needs store=. */
static const char *echofs_resolve(apr_pool_t *p, ci_sandbox_def *d)
{
    return ((const echo_conf *)d->conf)->store ? NULL : "echofs needs store=";
}

/* Built with -DCI_ECHO_CLAIMS_SHELL, it claims the hosted shell without
 * the entry that runs it: the configuration must refuse it. */
#ifdef CI_ECHO_CLAIMS_SHELL
#define ECHO_CAPS CI_CAP_SHELL
#else
#define ECHO_CAPS 0
#endif

static const ci_provider echo_provider = {
    .name = "echo",
    .caps = ECHO_CAPS,
    .keys = "prefix",
    .defaults = echo_defaults,
    .conf_copy = echo_conf_copy,
    .fingerprint = echo_fingerprint,
    .parse_key = echo_parse_key,
    .start = echo_start,
    .run = echo_run,
    .interrupt = echo_interrupt,
    .destroy = echo_destroy,
};

/* ---- echofs: sandboxes that are directories, with files ------------------ */

#define ECHOFS_ID_HEX 16
#define ECHOFS_MARKS ".uploads"    /* ECHOFS_MARKS/NAME: NAME came from an
                                      upload, unchanged since */

static int echofs_id_ok(const char *id)
{
    size_t i;
    if (strncmp(id, "fs-", 3) || strlen(id) != 3 + ECHOFS_ID_HEX)
        return 0;
    for (i = 3; id[i]; i++)
        if (!strchr("0123456789abcdef", id[i]))
            return 0;
    return 1;
}

static const char *echofs_new_id(apr_pool_t *p)
{
    unsigned char r[ECHOFS_ID_HEX / 2];
    char *id = apr_palloc(p, 4 + ECHOFS_ID_HEX);
    size_t i;
    apr_generate_random_bytes(r, sizeof(r));
    memcpy(id, "fs-", 3);
    for (i = 0; i < sizeof(r); i++)
        apr_snprintf(id + 3 + 2 * i, 3, "%02x", r[i]);
    return id;
}

static ci_sandbox *echofs_sandbox(apr_pool_t *p, const ci_sandbox_def *d, const char *id)
{
    const echo_conf *c = d->conf;
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    sb->prefix = c->prefix;
    sb->store = c->store;
    sb->id = apr_pstrdup(p, id);
    sb->dir = apr_pstrcat(p, c->store, "/", id, NULL);
    return sb;
}

static apr_status_t echofs_failed(apr_pool_t *p, const char *what, const char **err)
{
    int e = errno;
    *err = apr_psprintf(p, "%s: %s", what, strerror(e));
    return APR_FROM_OS_ERROR(e);
}

static apr_status_t echofs_make(apr_pool_t *p, const ci_sandbox_def *d, ci_sandbox **out,
                                const char **err)
{
    ci_sandbox *sb = echofs_sandbox(p, d, echofs_new_id(p));
    if (mkdir(sb->dir, 0700) != 0 ||
        mkdir(apr_pstrcat(p, sb->dir, "/" ECHOFS_MARKS, NULL), 0700) != 0)
        return echofs_failed(p, sb->dir, err);
    *out = sb;
    return APR_SUCCESS;
}

static apr_status_t echofs_start(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                                 ci_sandbox **out, const char **err)
{
    return echofs_make(p, d, out, err);
}

static apr_status_t echofs_attach(apr_pool_t *p, const ci_sandbox_def *d,
                                  const char *container_id, const char *handle,
                                  int idle_seconds, ci_sandbox **out, const char **err)
{
    struct stat st;
    if (!handle)
        return echofs_make(p, d, out, err);
    if (!echofs_id_ok(handle)) {
        *err = "not a handle of echofs";
        return APR_EINVAL;
    }
    *out = echofs_sandbox(p, d, handle);
    return stat((*out)->dir, &st) == 0 && S_ISDIR(st.st_mode) ? APR_SUCCESS : APR_NOTFOUND;
}

/* Unlink what DIR holds (no directories) and DIR itself. */
static int echofs_empty_and_remove(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return errno == ENOENT ? 0 : -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

static apr_status_t echofs_remove(apr_pool_t *p, const char *store, const char *id,
                                  const char **err)
{
    const char *dir = apr_pstrcat(p, store, "/", id, NULL);
    if (!echofs_id_ok(id)) {
        *err = "not a sandbox of echofs";
        return APR_EINVAL;
    }
    if (echofs_empty_and_remove(apr_pstrcat(p, dir, "/" ECHOFS_MARKS, NULL)) != 0 ||
        echofs_empty_and_remove(dir) != 0)
        return echofs_failed(p, dir, err);
    return APR_SUCCESS;
}

static void echofs_destroy(ci_sandbox *sb)
{
    apr_pool_t *p;
    const char *err;
    apr_pool_create(&p, NULL);
    echofs_remove(p, sb->store, sb->id, &err);
    apr_pool_destroy(p);
}

static const char *echofs_remote_id(ci_sandbox *sb)
{
    return sb->id;
}

static const char *echofs_handle(ci_sandbox *sb, apr_pool_t *p)
{
    return apr_pstrdup(p, sb->id);
}

static void echofs_release(ci_sandbox *sb)
{
}

static int echofs_reap_cred(const ci_sandbox_def *d, ci_reap_cred *out)
{
    out->locator = ((const echo_conf *)d->conf)->store;
    out->secret = "";
    return 1;
}

static apr_status_t echofs_reap(const ci_reap_cred *cred, const char *id, const char **err)
{
    apr_pool_t *p;
    apr_status_t rv;
    apr_pool_create(&p, NULL);
    rv = echofs_remove(p, cred->locator, id, err);
    if (rv != APR_SUCCESS)
        *err = "the sandbox's directory could not be removed";  /* P goes now */
    apr_pool_destroy(p);
    return rv;
}

/* Whether NAME under DIR is a regular file (not followed if a link): its
 * stat in *ST. */
static int echofs_regular(const char *dir, const char *name, struct stat *st)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY), ok;
    if (fd < 0)
        return 0;
    ok = fstatat(fd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode);
    close(fd);
    return ok;
}

static const char *echofs_mark(apr_pool_t *p, const char *dir, const char *name)
{
    return apr_pstrcat(p, dir, "/" ECHOFS_MARKS "/", name, NULL);
}

/* The files of DIR: an array of ci_cfile of CONTAINER, sorted. */
static apr_array_header_t *echofs_files(apr_pool_t *p, const char *dir, const char *container)
{
    apr_array_header_t *files = apr_array_make(p, 8, sizeof(ci_cfile));
    DIR *d = opendir(dir);
    struct dirent *e;
    struct stat st, mark;
    while (d && (e = readdir(d)) != NULL) {
        if (!ci_cfile_name_ok(e->d_name, strlen(e->d_name)) ||
            !echofs_regular(dir, e->d_name, &st))
            continue;
        ci_cfiles_add(p, files, container, e->d_name, st.st_size, st.st_mtime,
                      lstat(echofs_mark(p, dir, e->d_name), &mark) == 0);
    }
    if (d)
        closedir(d);
    ci_cfiles_sort(files);
    return files;
}

/* What the interpreter prints for "ls" (the files' names, one per line, in
 * the API's order) and "write NAME=TEXT"; NULL for other code (echoed). */
static const char *echofs_command(ci_sandbox *sb, apr_pool_t *p, const char *code)
{
    const char *eq, *name, *path;
    apr_array_header_t *files;
    char *out = "";
    int i, fd;
    if (!strcmp(code, "ls")) {
        files = echofs_files(p, sb->dir, sb->id);
        for (i = 0; i < files->nelts; i++)
            out = apr_pstrcat(p, out, APR_ARRAY_IDX(files, i, ci_cfile).name, "\n", NULL);
        return out;
    }
    if (strncmp(code, "write ", 6) || !(eq = strchr(code + 6, '=')))
        return NULL;
    name = apr_pstrndup(p, code + 6, eq - (code + 6));
    if (!ci_cfile_name_ok(name, strlen(name)))
        return apr_psprintf(p, "no file can be named '%s'\n", name);
    path = apr_pstrcat(p, sb->dir, "/", name, NULL);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, eq + 1, strlen(eq + 1)) != (ssize_t)strlen(eq + 1)) {
        if (fd >= 0)
            close(fd);
        return apr_psprintf(p, "%s could not be written\n", name);
    }
    close(fd);
    unlink(echofs_mark(p, sb->dir, name));
    return apr_psprintf(p, "wrote %s\n", name);
}

/* The directory of T's sandbox, or NULL when it has none. */
static const char *echofs_dir_of(apr_pool_t *p, const ci_file_target *t)
{
    const char *dir;
    struct stat st;
    if (!t->handle || !echofs_id_ok(t->handle))
        return NULL;
    dir = apr_pstrcat(p, ((const echo_conf *)t->def->conf)->store, "/", t->handle, NULL);
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? dir : NULL;
}

static ci_file_status echofs_files_list(apr_pool_t *p, const ci_file_target *t,
                                        apr_array_header_t **files, const char **err)
{
    const char *dir = echofs_dir_of(p, t);
    if (!dir)
        return CI_FILE_NO_SANDBOX;
    *files = echofs_files(p, dir, t->container);
    return CI_FILE_OK;
}

static ci_file_status echofs_send(int fd, apr_int64_t size, const ci_file_sink *sink)
{
    char buf[16384];
    ssize_t n;
    if (sink->size(sink->baton, size))
        return CI_FILE_SINK_FAILED;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        if (sink->data(sink->baton, buf, (apr_size_t)n))
            return CI_FILE_SINK_FAILED;
    return n == 0 ? CI_FILE_OK : CI_FILE_FAILED;
}

static ci_file_status echofs_file_get(apr_pool_t *p, const ci_file_target *t,
                                      const char *name, apr_int64_t max,
                                      const ci_file_sink *sink, const char **err)
{
    const char *dir = echofs_dir_of(p, t);
    struct stat st;
    ci_file_status fs;
    int fd;
    if (!dir)
        return CI_FILE_NO_SANDBOX;
    fd = open(apr_pstrcat(p, dir, "/", name, NULL), O_RDONLY | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fs = CI_FILE_NOT_FOUND;
    else if (st.st_size > max)
        fs = CI_FILE_TOO_LARGE;
    else
        fs = echofs_send(fd, st.st_size, sink);
    if (fd >= 0)
        close(fd);
    if (fs == CI_FILE_FAILED)
        *err = "the file could not be read";
    return fs;
}

static ci_file_status echofs_file_delete(apr_pool_t *p, const ci_file_target *t,
                                         const char *name, const char **err)
{
    const char *dir = echofs_dir_of(p, t);
    struct stat st;
    if (!dir)
        return CI_FILE_NO_SANDBOX;
    if (!echofs_regular(dir, name, &st))
        return CI_FILE_NOT_FOUND;
    unlink(echofs_mark(p, dir, name));
    if (unlink(apr_pstrcat(p, dir, "/", name, NULL)) != 0) {
        *err = "the file could not be removed";
        return CI_FILE_FAILED;
    }
    return CI_FILE_OK;
}

/* SRC into FD, at most MAX bytes (0: any): *BYTES read. */
static ci_file_status echofs_receive(int fd, const ci_file_source *src, apr_uint64_t max,
                                     apr_uint64_t *bytes)
{
    char buf[16384];
    apr_ssize_t n;
    *bytes = 0;
    while ((n = src->read(src->baton, buf, sizeof(buf))) > 0) {
        *bytes += (apr_uint64_t)n;
        if (max && *bytes > max)
            return CI_FILE_TOO_LARGE;
        if (write(fd, buf, (size_t)n) != n)
            return CI_FILE_FAILED;
    }
    return n == 0 ? CI_FILE_OK : CI_FILE_SOURCE_FAILED;
}

/* Whether a file of BYTES named NAME fits beside FILES within LIMITS (the
 * file it replaces does not count). */
static ci_file_status echofs_fits(const apr_array_header_t *files, const char *name,
                                  apr_uint64_t bytes, const ci_file_limits *limits)
{
    apr_uint64_t others = 0, count = 0;
    int i, replaces = 0;
    for (i = 0; i < files->nelts; i++) {
        const ci_cfile *f = &APR_ARRAY_IDX(files, i, ci_cfile);
        if (!strcmp(f->name, name)) {
            replaces = 1;
            continue;
        }
        others += (apr_uint64_t)f->bytes;
        count++;
    }
    if (limits->max_files && !replaces && count + 1 > limits->max_files)
        return CI_FILE_TOO_MANY;
    if (limits->max_bytes && others + bytes > limits->max_bytes)
        return CI_FILE_NO_ROOM;
    return CI_FILE_OK;
}

/* All or nothing: the upload goes to a file of its own beside the marks,
 * and takes NAME's place only once it is whole and fits. */
static ci_file_status echofs_file_put(apr_pool_t *p, const ci_file_target *t,
                                      const char *name, const ci_file_limits *limits,
                                      const ci_file_source *src, const char **err)
{
    const char *dir = echofs_dir_of(p, t), *part;
    apr_uint64_t bytes;
    ci_file_status fs;
    int fd;
    if (!dir)
        return CI_FILE_NO_SANDBOX;
    part = apr_pstrcat(p, dir, "/" ECHOFS_MARKS "/.part-", echofs_new_id(p), NULL);
    if ((fd = open(part, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0) {
        *err = "the upload could not be stored";
        return CI_FILE_FAILED;
    }
    fs = echofs_receive(fd, src, limits->max_file, &bytes);
    close(fd);
    if (fs == CI_FILE_OK)
        fs = echofs_fits(echofs_files(p, dir, t->container), name, bytes, limits);
    if (fs == CI_FILE_OK && rename(part, apr_pstrcat(p, dir, "/", name, NULL)) != 0)
        fs = CI_FILE_FAILED;
    if (fs == CI_FILE_OK && (fd = open(echofs_mark(p, dir, name), O_WRONLY | O_CREAT, 0600)) >= 0)
        close(fd);
    if (fs != CI_FILE_OK)
        unlink(part);
    if (fs == CI_FILE_FAILED)
        *err = "the upload could not be stored";
    return fs;
}

static const ci_provider echofs_provider = {
    .name = "echofs",
    .caps = CI_CAP_REMOTE | CI_CAP_CONTAINERS | CI_CAP_FILES,
    .keys = "prefix, store",
    .defaults = echo_defaults,
    .conf_copy = echo_conf_copy,
    .fingerprint = echo_fingerprint,
    .parse_key = echo_parse_key,
    .resolve = echofs_resolve,
    .start = echofs_start,
    .run = echo_run,
    .interrupt = echo_interrupt,
    .destroy = echofs_destroy,
    .remote_id = echofs_remote_id,
    .reap_cred = echofs_reap_cred,
    .reap = echofs_reap,
    .reap_handle = echofs_reap,
    .attach = echofs_attach,
    .handle = echofs_handle,
    .release = echofs_release,
    .files_list = echofs_files_list,
    .file_get = echofs_file_get,
    .file_delete = echofs_file_delete,
    .file_put = echofs_file_put,
};

/* One line per execution: tool, provider, kind, call, outcome, text. */
static int note_execution(request_rec *r, const ci_execution *e)
{
    apr_file_t *f;
    const char *line;
    if (!execution_log ||
        apr_file_open(&f, execution_log, APR_FOPEN_WRITE | APR_FOPEN_CREATE |
                      APR_FOPEN_APPEND, APR_FPROT_OS_DEFAULT, r->pool) != APR_SUCCESS)
        return DECLINED;
    line = apr_psprintf(r->pool, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e->tool, e->provider,
                        e->kind, e->call_id, e->failed ? "failed" : "completed",
                        (int)e->output_bytes, e->text);
    apr_file_puts(line, f);
    apr_file_close(f);
    return OK;
}

static const char *set_execution_log(cmd_parms *cmd, void *dummy, const char *path)
{
    execution_log = ap_server_root_relative(cmd->pool, path);
    return NULL;
}

static const command_rec echo_directives[] = {
    AP_INIT_TAKE1("CiEchoExecutionLog", set_execution_log, NULL, RSRC_CONF,
                  "a file for one line per execution"),
    {NULL}
};

static void echo_register_hooks(apr_pool_t *p)
{
    ap_register_provider(p, CI_PROVIDER_GROUP, "echo", CI_PROVIDER_VERSION,
                         &echo_provider);
    ap_register_provider(p, CI_PROVIDER_GROUP, "echofs", CI_PROVIDER_VERSION,
                         &echofs_provider);
    APR_OPTIONAL_HOOK(ci, execution, note_execution, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(ci_echo) = {
    STANDARD20_MODULE_STUFF,
    NULL, NULL, NULL, NULL,
    echo_directives,
    echo_register_hooks
};
