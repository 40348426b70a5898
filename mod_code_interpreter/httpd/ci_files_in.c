/*
 * ci_files_in.c - files into containers (ci_files_in.h).
 */
#include <string.h>
#include <apr_file_io.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>
#include <util_filter.h>

#include "ci_files_in.h"
#include "ci_dirclient.h"
#include "ci_json.h"
#include "ci_multipart.h"
#include "ci_module.h"

#define CHUNK ((apr_size_t)64 * 1024)
#define MAX_PART_HEADER 16384
#define MAX_PARTS 16
#define MAX_FIELD 65536               /* bytes of a form field beside the file */
#define MAX_EPILOGUE 65536            /* bytes after the multipart's close delimiter */
#define FILES_TIMEOUT apr_time_from_sec(300)

/* ---- answers ---------------------------------------------------------------- */

/* A refused or failed put of NAME into T, as an answer. */
static int put_refused(request_rec *r, const ci_file_target *t, const char *name,
                       ci_file_status st, const char *why, ci_error *err)
{
    const ci_file_limits *l = &t->def->files;
    switch (st) {
    case CI_FILE_TOO_LARGE:
        ci_error_set(err, 413, CI_INVALID, NULL, "file_too_large", r->pool,
                     "File '%s' is larger than this server accepts (max_file=%"
                     APR_UINT64_T_FMT " bytes).", name, l->max_file);
        return 413;
    case CI_FILE_TOO_MANY:
        ci_error_set(err, 400, CI_INVALID, NULL, "too_many_files", r->pool,
                     "Container '%s' holds as many files as this server allows "
                     "(max_files=%" APR_UINT64_T_FMT "); delete one first.",
                     t->container, l->max_files);
        return 400;
    case CI_FILE_NO_ROOM:
        if (l->max_bytes)
            ci_error_set(err, 413, CI_INVALID, NULL, "container_full", r->pool,
                         "File '%s' does not fit: container '%s' may hold %"
                         APR_UINT64_T_FMT " bytes of files (max_bytes).", name,
                         t->container, l->max_bytes);
        else
            ci_error_set(err, 413, CI_INVALID, NULL, "container_full", r->pool,
                         "File '%s' does not fit in container '%s': its disk is "
                         "full.", name, t->container);
        return 413;
    case CI_FILE_SOURCE_FAILED:
        ci_error_set(err, 400, CI_INVALID, NULL, "invalid_upload", r->pool,
                     "The upload of '%s' could not be read: %s", name,
                     why ? why : "the body ended early");
        return 400;
    default:
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "CI0821: file %s could not be "
                      "put into container %s: %s", name, t->container,
                      why ? why : "unknown reason");
        ci_error_set(err, 503, CI_SERVER, NULL, "container_unavailable", r->pool,
                     "The file could not be written into the container; retry "
                     "shortly.");
        return 503;
    }
}

/* The name a file gets under /mnt/data: its last path segment (browsers
 * and SDKs may send a whole path), which must be a container file name.
 * NULL when it cannot be one. */
static const char *file_name_of(apr_pool_t *p, const char *given)
{
    const char *slash = strrchr(given, '/'), *back = strrchr(given, '\\');
    const char *name = slash > back ? slash + 1 : back ? back + 1 : given;
    return ci_cfile_name_ok(name, strlen(name)) && name[0] != '.'
         ? apr_pstrdup(p, name) : NULL;
}

/* The stored file NAME of T, as listed now: OK with *OUT, or an answer. */
static int stored(request_rec *r, const ci_file_target *t, const char *name,
                  ci_cfile *out, ci_error *err)
{
    apr_array_header_t *files = NULL;
    const char *why = NULL;
    const ci_cfile *f;
    if (t->def->provider->files_list(r->pool, t, &files, &why) == CI_FILE_OK &&
        (f = ci_cfiles_find(files, ci_cfile_id(r->pool, t->container, name)))) {
        *out = *f;
        return OK;
    }
    return put_refused(r, t, name, CI_FILE_FAILED,
                       why ? why : "it is not listed after the upload", err);
}

/* ---- the upstream's Files API ------------------------------------------------ */

/* The caller's credentials, and nothing else, for the Files API. */
static apr_table_t *files_headers(request_rec *r)
{
    static const char *const passed[] = { "Authorization", "OpenAI-Organization",
                                          "OpenAI-Project" };
    apr_table_t *h = apr_table_make(r->pool, 3);
    apr_size_t i;
    for (i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
        if (apr_table_get(r->headers_in, passed[i]))
            apr_table_setn(h, passed[i], apr_table_get(r->headers_in, passed[i]));
    return h;
}

static void files_opts(const ci_loc_conf *d, ci_upstream_opts *o)
{
    memset(o, 0, sizeof(*o));
    ci_loc_transport(d, &o->transport);
    o->transport.timeout = FILES_TIMEOUT;
}

static int files_api_refused(request_rec *r, ci_filesapi_status st, const char *id,
                             const char *param, const char *why, ci_error *err)
{
    if (st == CI_FILESAPI_NOT_FOUND || st == CI_FILESAPI_DENIED) {
        ci_error_set(err, 400, CI_INVALID, param, "file_not_found", r->pool,
                     "File with id '%s' not found.", id);
        return 400;
    }
    if (st == CI_FILESAPI_NO_API) {
        ci_error_set(err, 400, CI_INVALID, param, "files_unsupported", r->pool,
                     "file_ids cannot be used here: the model upstream has no Files API "
                     "(%s).", why);
        return 400;
    }
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "CI0822: file %s could not be read "
                  "from the upstream's Files API: %s", id, why ? why : "unknown reason");
    ci_error_set(err, 502, CI_SERVER, param, "upstream_files_failed", r->pool,
                 "File with id '%s' could not be read from the model upstream's Files "
                 "API; retry shortly.", id);
    return 502;
}

int ci_files_check_ids(request_rec *r, const ci_loc_conf *d, json_object *ids,
                       const char *param, apr_array_header_t **files, ci_error *err)
{
    const char *url = ci_loc_upstream_url(r, d), *why = NULL;
    apr_table_t *h = files_headers(r);
    ci_upstream_opts o;
    size_t i, n = json_object_array_length(ids);
    files_opts(d, &o);
    *files = apr_array_make(r->pool, n ? (int)n : 1, sizeof(ci_filesapi_file));
    for (i = 0; i < n; i++) {
        json_object *id = json_object_array_get_idx(ids, i);
        ci_filesapi_status st;
        if (!json_object_is_type(id, json_type_string) || !json_object_get_string_len(id)) {
            ci_error_set(err, 400, CI_INVALID, param, "invalid_type", r->pool,
                         "Invalid type for '%s[%d]': expected a file id.", param, (int)i);
            return 400;
        }
        if (!url)
            return files_api_refused(r, CI_FILESAPI_NO_API, json_object_get_string(id),
                                     param, "no upstream URL is configured here", err);
        st = ci_filesapi_get(r->pool, url, h, &o, json_object_get_string(id),
                             apr_array_push(*files), &why);
        if (st != CI_FILESAPI_OK)
            return files_api_refused(r, st, json_object_get_string(id), param, why, err);
    }
    return OK;
}

/* ---- the container's sandbox -------------------------------------------------- */

/* Reach C's sandbox through its provider: started when it has none yet
 * (its handle recorded), else kept alive from now (a file operation is a
 * use, and E2B ends a sandbox at its own timeout). OK, or 503 when it
 * could not be started. */
static int reach_sandbox(request_rec *r, const char *owner, const ci_container *c,
                         ci_file_target *t, ci_error *err)
{
    const ci_provider *prov = t->def->provider;
    ci_sandbox *sb = NULL;
    const char *why = NULL, *handle;
    apr_pool_t *p;
    apr_status_t rv;
    if (ci_dirclient_adopt(r, owner, c, t->def) < 0) {
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", r->pool,
                     "The code sandbox could not be started; retry shortly.");
        return 503;
    }
    apr_pool_create(&p, r->pool);
    rv = prov->attach(p, t->def, c->id, t->handle,
                      c->idle_seconds > 0 ? c->idle_seconds : t->def->idle, &sb, &why);
    if (rv != APR_SUCCESS && t->handle) {
        apr_pool_destroy(p);         /* gone at the provider: the file entries say so */
        return OK;
    }
    if (rv != APR_SUCCESS) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0823: the sandbox of container "
                      "%s could not start for its files: %s", c->id,
                      why ? why : "unknown reason");
        apr_pool_destroy(p);
        ci_error_set(err, 503, CI_SERVER, NULL, "sandbox_unavailable", r->pool,
                     "The code sandbox could not be started; retry shortly.");
        return 503;
    }
    if (!t->handle && (handle = prov->handle ? prov->handle(sb, r->pool) : NULL)) {
        ci_dirclient_record_handle(r, r->pool, owner, c->id, handle);
        t->handle = handle;
    }
    prov->release(sb);
    apr_pool_destroy(p);
    return OK;
}

int ci_files_target(request_rec *r, const char *owner, const ci_container *c, int start,
                    ci_file_target *t, ci_error *err)
{
    const ci_sandbox_def *def = ci_sandbox_of_container(r->server, r->pool, c->tool,
                                                        c->provider, c->allowlist);
    memset(t, 0, sizeof(*t));
    if (!def) {
        ci_error_set(err, 409, CI_INVALID, NULL, "container_unavailable", r->pool,
                     "Container '%s' runs on a sandbox tool this server no longer "
                     "serves (it was removed or changed): its files cannot be reached.",
                     c->id);
        return 409;
    }
    if (!(def->provider->caps & CI_CAP_FILES)) {
        ci_error_set(err, 501, CI_SERVER, NULL, "not_implemented", r->pool,
                     "Container files are not available for containers of the %s "
                     "provider.", def->provider->name);
        return 501;
    }
    def = ci_sandbox_def_container(r->pool, def, c->memory_limit, c->allowlist,
                                   ci_dirclient_unseal_secrets(r, c));
    t->def = def;
    t->container = c->id;
    t->handle = ci_dirclient_unseal(r, c);
    /* A local container's sandbox is found by its id: attaching is how
     * it is started when it has none, and costs little when it has one. A
     * remote one with a handle is kept alive by attaching, for any use. */
    if ((start && (!c->handle || !(def->provider->caps & CI_CAP_REMOTE))) ||
        (c->handle && (def->provider->caps & CI_CAP_REMOTE)))
        return reach_sandbox(r, owner, c, t, err);
    return OK;
}

/* ---- from the upstream: spooled, then sent on ---------------------------------- */

typedef struct spool {
    apr_file_t *f;
    int failed;
} spool;

static int spool_write(void *baton, const char *data, apr_size_t len)
{
    spool *s = baton;
    return (s->failed = apr_file_write_full(s->f, data, len, NULL) != APR_SUCCESS);
}

static apr_ssize_t spool_read(void *baton, char *buf, apr_size_t len)
{
    spool *s = baton;
    apr_size_t n = len;
    apr_status_t rv = apr_file_read(s->f, buf, &n);
    if (rv == APR_EOF)
        return 0;
    return rv == APR_SUCCESS ? (apr_ssize_t)n : -1;
}

/* An unlinked temporary file (gone when closed, or when the child dies). */
static apr_status_t spool_open(apr_pool_t *p, spool *s)
{
    const char *dir = NULL;
    char *tmpl;
    apr_status_t rv = apr_temp_dir_get(&dir, p);
    if (rv != APR_SUCCESS)
        return rv;
    tmpl = apr_pstrcat(p, dir, "/ci-upload-XXXXXX", NULL);
    rv = apr_file_mktemp(&s->f, tmpl, APR_FOPEN_CREATE | APR_FOPEN_READ |
                         APR_FOPEN_WRITE | APR_FOPEN_EXCL | APR_FOPEN_DELONCLOSE, p);
    if (rv == APR_SUCCESS)
        apr_file_remove(tmpl, p);
    return rv;
}

int ci_files_put_upstream(request_rec *r, const ci_loc_conf *d, const ci_file_target *t,
                          const ci_filesapi_file *f, ci_cfile *out, ci_error *err)
{
    const char *name = file_name_of(r->pool, f->filename), *why = NULL;
    apr_int64_t max = t->def->files.max_file ? (apr_int64_t)t->def->files.max_file
                                             : APR_INT64_MAX;
    ci_file_source src;
    ci_upstream_opts o;
    ci_filesapi_status fst;
    ci_file_status st;
    apr_off_t zero = 0;
    spool s = { NULL, 0 };
    apr_pool_t *p;
    int rc;
    if (!name) {
        ci_error_set(err, 400, CI_INVALID, NULL, "invalid_filename", r->pool,
                     "File '%s' has a name that cannot be a container file.", f->id);
        return 400;
    }
    if (f->bytes > max)
        return put_refused(r, t, name, CI_FILE_TOO_LARGE, NULL, err);
    apr_pool_create(&p, r->pool);
    if (spool_open(p, &s) != APR_SUCCESS) {
        apr_pool_destroy(p);
        return put_refused(r, t, name, CI_FILE_FAILED, "no temporary file", err);
    }
    files_opts(d, &o);
    fst = ci_filesapi_content(p, ci_loc_upstream_url(r, d), files_headers(r), &o, f->id,
                              max, spool_write, &s, &why);
    if (fst == CI_FILESAPI_TOO_LARGE)
        rc = put_refused(r, t, name, CI_FILE_TOO_LARGE, NULL, err);
    else if (fst != CI_FILESAPI_OK || s.failed)
        rc = files_api_refused(r, s.failed ? CI_FILESAPI_FAILED : fst, f->id, NULL,
                               s.failed ? "the temporary file could not be written" : why,
                               err);
    else if (apr_file_seek(s.f, APR_SET, &zero) != APR_SUCCESS)
        rc = put_refused(r, t, name, CI_FILE_FAILED, "the temporary file", err);
    else {
        src.read = spool_read;
        src.baton = &s;
        st = t->def->provider->file_put(p, t, name, &t->def->files, &src, &why);
        rc = st == CI_FILE_OK ? stored(r, t, name, out, err)
                              : put_refused(r, t, name, st, why, err);
    }
    apr_pool_destroy(p);           /* closes (and so removes) the spool */
    return rc;
}

int ci_files_provision(request_rec *r, const ci_loc_conf *d, const char *owner,
                       const ci_container *c, const apr_array_header_t *files,
                       const char **handle, ci_error *err)
{
    ci_file_target t;
    ci_cfile out;
    int i, rc;
    if ((rc = ci_files_target(r, owner, c, 1, &t, err)) != OK)
        return rc;
    if (t.handle && handle)
        *handle = t.handle;
    for (i = 0; i < files->nelts; i++)
        if ((rc = ci_files_put_upstream(r, d, &t,
                                        &APR_ARRAY_IDX(files, i, ci_filesapi_file),
                                        &out, err)) != OK)
            return rc;
    return OK;
}

/* ---- from a multipart body, as it arrives ------------------------------------ */

typedef struct upload {
    request_rec *r;
    ci_multipart *mp;
    apr_bucket_brigade *bb;
    ci_multipart_status status;
    int eos;                        /* the body's end was read */
    int in_file, file_seen, file_done;
    const char *filename;
    apr_size_t field;               /* bytes of the current form field */
    apr_size_t epilogue;            /* bytes after the close delimiter */
    char *pending;                  /* the file's bytes fed but not yet read */
    apr_size_t plen, poff;
    char *chunk;
    const char *why;                /* why the body was refused */
} upload;

static int on_part_begin(void *baton, const ci_multipart_part *part)
{
    upload *u = baton;
    u->field = 0;
    u->in_file = !u->file_seen && part->filename && !strcmp(part->name, "file");
    if (u->in_file) {
        u->file_seen = 1;
        u->filename = apr_pstrdup(u->r->pool, part->filename);
    }
    return 0;
}

static int on_part_data(void *baton, const ci_multipart_part *part, const char *data,
                        apr_size_t len)
{
    upload *u = baton;
    (void)part;
    if (!u->in_file) {
        u->field += len;
        if (u->field > MAX_FIELD)
            u->why = "a form field beside the file is too large";
        return u->field > MAX_FIELD;
    }
    memcpy(u->pending + u->plen, data, len);   /* at most one chunk fed at a time */
    u->plen += len;
    return 0;
}

static int on_part_end(void *baton, const ci_multipart_part *part)
{
    upload *u = baton;
    (void)part;
    if (u->in_file)
        u->file_done = 1;
    u->in_file = 0;
    return 0;
}

/* Feed the next piece of the body: 0, or -1 when the body is refused or
 * ended before its close delimiter or before its announced length. After the
 * close delimiter the rest of the body (an epilogue, bounded) is read and
 * dropped: a file is kept only once the request body has been read to its
 * end, so a body cut short leaves nothing. */
static int feed_more(upload *u)
{
    apr_size_t n = CHUNK;
    apr_status_t rv;
    if (u->status == CI_MULTIPART_DONE && u->eos)
        return 0;
    if (u->eos) {
        u->status = ci_multipart_end(u->mp);
        return u->status == CI_MULTIPART_DONE ? 0 : -1;
    }
    apr_brigade_cleanup(u->bb);
    rv = ap_get_brigade(u->r->input_filters, u->bb, AP_MODE_READBYTES, APR_BLOCK_READ,
                        CHUNK);
    if (rv != APR_SUCCESS) {
        u->why = "the body could not be read";
        return -1;
    }
    u->eos = !APR_BRIGADE_EMPTY(u->bb) && APR_BUCKET_IS_EOS(APR_BRIGADE_LAST(u->bb));
    if (apr_brigade_flatten(u->bb, u->chunk, &n) != APR_SUCCESS) {
        u->why = "the body could not be read";
        return -1;
    }
    u->plen = u->poff = 0;
    if (u->status == CI_MULTIPART_DONE) {
        if ((u->epilogue += n) <= MAX_EPILOGUE)
            return 0;
        u->why = "too many bytes follow the multipart body's close delimiter";
        return -1;
    }
    u->status = ci_multipart_feed(u->mp, u->chunk, n);
    return u->status == CI_MULTIPART_OK || u->status == CI_MULTIPART_DONE ? 0 : -1;
}

/* The file's next bytes; 0 once its part and the body have ended well. */
static apr_ssize_t upload_read(void *baton, char *buf, apr_size_t len)
{
    upload *u = baton;
    apr_size_t n;
    while (u->poff == u->plen) {
        if (u->file_done && u->status == CI_MULTIPART_DONE && u->eos)
            return 0;
        if (feed_more(u) < 0)
            return -1;
    }
    n = u->plen - u->poff < len ? u->plen - u->poff : len;
    memcpy(buf, u->pending + u->poff, n);
    u->poff += n;
    return (apr_ssize_t)n;
}

static int bad_upload(request_rec *r, const char *why, ci_error *err)
{
    ci_error_set(err, 400, CI_INVALID, "file", "invalid_upload", r->pool,
                 "The upload could not be read: %s", why);
    return 400;
}

int ci_files_put_multipart(request_rec *r, const ci_file_target *t, ci_cfile *out,
                           ci_error *err)
{
    static const ci_multipart_callbacks cb = { on_part_begin, on_part_data, on_part_end };
    ci_multipart_limits lim = { MAX_PART_HEADER, MAX_PARTS, APR_SIZE_MAX };
    const char *boundary = NULL, *why = NULL, *name;
    upload u;
    ci_file_source src;
    ci_file_status st;
    memset(&u, 0, sizeof(u));
    if (ci_multipart_boundary(r->pool, apr_table_get(r->headers_in, "Content-Type"),
                              &boundary, &why) != CI_MULTIPART_OK)
        return bad_upload(r, why, err);
    u.r = r;
    u.bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    u.chunk = apr_palloc(r->pool, CHUNK);
    /* a chunk's bytes, and the few the reader held back from the last one */
    u.pending = apr_palloc(r->pool, CHUNK + 256);
    u.mp = ci_multipart_create(r->pool, boundary, &lim, &cb, &u);
    /* Read up to the file part's headers: its name is needed first. */
    while (!u.file_seen && u.status == CI_MULTIPART_OK)
        if (feed_more(&u) < 0)
            break;
    if (!u.file_seen)
        return bad_upload(r, u.why ? u.why
                             : u.status != CI_MULTIPART_OK && u.status != CI_MULTIPART_DONE
                             ? ci_multipart_error(u.mp)
                             : "the body has no \"file\" part with a filename", err);
    if (!(name = file_name_of(r->pool, u.filename))) {
        ci_error_set(err, 400, CI_INVALID, "file", "invalid_filename", r->pool,
                     "'%s' cannot be a container file's name.", u.filename);
        return 400;
    }
    src.read = upload_read;
    src.baton = &u;
    st = t->def->provider->file_put(r->pool, t, name, &t->def->files, &src, &why);
    if (st == CI_FILE_SOURCE_FAILED)
        why = u.why ? u.why : ci_multipart_error(u.mp);
    return st == CI_FILE_OK ? stored(r, t, name, out, err)
                            : put_refused(r, t, name, st, why, err);
}
