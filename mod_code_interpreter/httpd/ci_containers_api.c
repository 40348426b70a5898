/*
 * ci_containers_api.c - the Containers API (ci_containers_api.h): a thin
 * handler over the directory's operations (ci_supdir.h); every lookup is
 * the caller's own, so another caller's container reads as unknown (404).
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_containers_api.h"
#include "ci_capi.h"
#include "ci_registry.h"
#include <http_config.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_script.h>
#include "ci_cfiles.h"
#include "ci_containers.h"
#include "ci_dirconf.h"
#include "ci_files_in.h"
#include "ci_json.h"
#include "ci_owner.h"
#include "ci_dirclient.h"
#include "ci_state.h"
#include "ci_supdir.h"
#include "ci_module.h"

#define OWNER_KEY "ci-api-owner"
#define MAX_CREATE_BODY (64 * 1024)

typedef struct api_req {
    request_rec *r;
    ci_dir_conf *d;
    const char *owner;
    const char *id;              /* the {id} segment, or NULL: the collection */
    const char *file_id;         /* the {file_id} segment of a file's path */
    ci_error err;
} api_req;

void ci_containers_api_fixups(request_rec *r)
{
    const char *owner = ci_owner_of(r);
    apr_pool_userdata_setn(owner ? owner : "", OWNER_KEY, NULL, r->pool);
}

/* ---- answers ----------------------------------------------------------------- */

static int send_json(request_rec *r, int status, json_object *o)
{
    apr_size_t len;
    const char *body = ci_json_text(o, &len);
    r->status = status;
    ap_set_content_type(r, "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    ap_rwrite(body, (int)len, r);
    return OK;
}

static int fail(api_req *a)
{
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, a->r, "CI0811: containers API answers "
                  "%d: %s", a->err.status, a->err.message);
    if (a->err.status == 503)
        apr_table_setn(a->r->err_headers_out, "Retry-After", "5");
    ci_send_error(a->r, &a->err);
    return OK;
}

static int not_found(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "container_not_found", a->r->pool,
                 "Container with id '%s' not found.", a->id);
    return fail(a);
}

static int bad(api_req *a, const char *param, const char *code, const char *msg)
{
    ci_error_set(&a->err, 400, CI_INVALID, param, code, a->r->pool, "%s", msg);
    return fail(a);
}

static int unavailable(api_req *a)
{
    ci_containers_unavailable(a->r->pool, &a->err);
    return fail(a);
}

/* The container object as OpenAI shows it. */
static json_object *resource(apr_pool_t *p, const ci_container *c)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    json_object *exp = json_object_new_object();
    static const char *const states[] = { "running", "expired", "deleted" };
    json_object_object_add(o, "id", json_object_new_string(c->id));
    json_object_object_add(o, "object", json_object_new_string("container"));
    json_object_object_add(o, "name", json_object_new_string(c->name ? c->name : ""));
    json_object_object_add(o, "created_at",
                           json_object_new_int64(apr_time_sec(c->created_at)));
    json_object_object_add(o, "status", json_object_new_string(states[c->status]));
    json_object_object_add(o, "last_active_at",
                           json_object_new_int64(apr_time_sec(c->last_active_at)));
    json_object_object_add(exp, "anchor", json_object_new_string("last_active_at"));
    json_object_object_add(exp, "minutes",
                           json_object_new_int((c->idle_seconds + 59) / 60));
    json_object_object_add(o, "expires_after", exp);
    json_object_object_add(o, "memory_limit",
                           json_object_new_string(c->memory_limit ? c->memory_limit
                                                                  : CI_DEFAULT_TIER));
    return o;
}

/* ---- the directory ----------------------------------------------------------- */

static json_object *dir_request(api_req *a, const char *op)
{
    json_object *o = ci_dirclient_request(a->r->pool, op, a->owner);
    if (a->id)
        json_object_object_add(o, "id", json_object_new_string(a->id));
    return o;
}

/* REQ asked; the sandboxes its answer lets go (a deleted container's, an
 * evicted one's) are ended here. */
static json_object *dir_ask(api_req *a, json_object *req)
{
    return ci_dirclient_ask_and_end(a->r->server, a->r->pool, req);
}

static ci_dir_status status_of(json_object *ans)
{
    return ci_dirclient_status_of(ans);
}

static int container_of(api_req *a, json_object *ans, const char *key, ci_container *c)
{
    return ci_dirclient_container(a->r->pool, ans, key, c);
}

/* ---- the operations ------------------------------------------------------------ */

static int get_one(api_req *a)
{
    json_object *req = dir_request(a, "get"), *ans;
    ci_container c;
    json_object_object_add(req, "touch", json_object_new_boolean(1));
    if (!(ans = dir_ask(a, req)))
        return unavailable(a);
    if (status_of(ans) == CI_DIR_NOT_FOUND || container_of(a, ans, "container", &c))
        return not_found(a);
    return send_json(a->r, 200, resource(a->r->pool, &c));
}

/* Another node's local container is deleted there (its sandbox runs
 * there): 0, or -1 with the 409 sent (*RC). */
static int deletable_here(api_req *a, int *rc)
{
    json_object *ans;
    ci_container c;
    if (!ci_server_directory(a->r->server))
        return 0;
    if (!(ans = dir_ask(a, dir_request(a, "get"))))
        return *rc = unavailable(a), -1;
    if (status_of(ans) == CI_DIR_OK && !container_of(a, ans, "container", &c) &&
        ci_dirclient_elsewhere(a->r, &c, &a->err))
        return *rc = fail(a), -1;
    return 0;
}

static int delete_one(api_req *a)
{
    json_object *ans, *o;
    ci_container c;
    int rc;
    if (deletable_here(a, &rc))
        return rc;
    if (!(ans = dir_ask(a, dir_request(a, "delete"))))
        return unavailable(a);
    if (status_of(ans) != CI_DIR_OK || container_of(a, ans, "container", &c))
        return not_found(a);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0814: container %s deleted",
                  a->id);
    o = ci_json_own(a->r->pool, json_object_new_object());
    json_object_object_add(o, "id", json_object_new_string(a->id));
    json_object_object_add(o, "object", json_object_new_string("container.deleted"));
    json_object_object_add(o, "deleted", json_object_new_boolean(1));
    return send_json(a->r, 200, o);
}

/* Read the list parameters of A's query into PG: 0, or -1 with the 400
 * answer sent (its handler's status in *RC). */
static int read_paging(api_req *a, ci_capi_paging *pg, int *rc)
{
    if (ci_capi_paging_of(a->r->pool, a->r->args, pg, &a->err) == 0)
        return 0;
    *rc = fail(a);
    return -1;
}

/* Answer DATA (an array of objects with an "id", owned by the answer) in
 * OpenAI's list envelope. */
static int send_list(api_req *a, json_object *data, int has_more)
{
    json_object *out = ci_json_own(a->r->pool, json_object_new_object());
    int n = (int)json_object_array_length(data);
    json_object_object_add(out, "object", json_object_new_string("list"));
    json_object_object_add(out, "data", data);
    json_object_object_add(out, "first_id", n ? json_object_get(json_object_object_get(
                               json_object_array_get_idx(data, 0), "id")) : NULL);
    json_object_object_add(out, "last_id", n ? json_object_get(json_object_object_get(
                               json_object_array_get_idx(data, n - 1), "id")) : NULL);
    json_object_object_add(out, "has_more", json_object_new_boolean(has_more));
    return send_json(a->r, 200, out);
}

static int list(api_req *a)
{
    const char *name;
    json_object *req, *ans, *data, *found;
    ci_capi_paging pg;
    int i, n, rc;
    if (read_paging(a, &pg, &rc))
        return rc;
    req = dir_request(a, "list");
    json_object_object_add(req, "limit", json_object_new_int(pg.limit));
    if (pg.order)
        json_object_object_add(req, "order", json_object_new_string(pg.order));
    if (pg.after)
        json_object_object_add(req, "after", json_object_new_string(pg.after));
    if ((name = pg.name))
        json_object_object_add(req, "name", json_object_new_string(name));
    if (!(ans = dir_ask(a, req)))
        return unavailable(a);
    if (!(found = ci_json_get(ans, "data", json_type_array))) {
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, a->r, "CI0841: the container directory "
                      "answered a list without data (status %s)",
                      ci_json_str(ans, "status") ? ci_json_str(ans, "status") : "none");
        return unavailable(a);
    }
    data = json_object_new_array();
    n = (int)json_object_array_length(found);
    for (i = 0; i < n; i++) {
        ci_container c;
        if (!ci_supdir_container_from(a->r->pool, json_object_array_get_idx(found, i), &c))
            json_object_array_add(data, json_object_get(resource(a->r->pool, &c)));
    }
    return send_list(a, data, json_object_get_boolean(
                         ci_json_get(ans, "has_more", json_type_boolean)));
}

/* The request body, parsed (at most MAX_CREATE_BODY bytes). */
static json_object *read_json(api_req *a)
{
    char *buf = apr_palloc(a->r->pool, MAX_CREATE_BODY + 1);
    apr_size_t len = 0;
    long n;
    const char *perr = NULL;
    if (ap_setup_client_block(a->r, REQUEST_CHUNKED_DECHUNK) != OK ||
        !ap_should_client_block(a->r))
        return NULL;
    while (len < MAX_CREATE_BODY &&
           (n = ap_get_client_block(a->r, buf + len, MAX_CREATE_BODY - len)) > 0)
        len += (apr_size_t)n;
    buf[len] = '\0';
    return ci_json_parse(a->r->pool, buf, len, &perr);
}

static int check_create(api_req *a, json_object *body, const ci_sandbox_def *def,
                        int *idle)
{
    const char *tier, *why;
    const ci_sandbox_def *tiered;
    if (ci_capi_check_create(a->r->pool, body, def->max_idle / 60, def->idle, idle,
                             &a->err) != 0)
        return fail(a), -1;
    if ((tier = ci_json_str(body, "memory_limit")) &&
        (why = ci_sandbox_def_tier(a->r->pool, def, tier, &tiered)))
        return bad(a, "memory_limit", "invalid_value", why), -1;
    return 0;
}

/* The new container C gets FILES (the caller's, at the upstream): 0, or -1
 * with A->err set and the container deleted again (nothing half-made). */
static int provision(api_req *a, const ci_container *c, const apr_array_header_t *files)
{
    if (ci_files_provision(a->r, a->d, a->owner, c, files, NULL, &a->err) == OK)
        return 0;
    a->id = c->id;
    /* deleted: its sandbox, when it got one, ends with the answer */
    dir_ask(a, dir_request(a, "delete"));
    a->id = NULL;
    return -1;
}

/* A create waits for room at most CodeInterpreterCapacityWait. */
static apr_time_t capacity_deadline(api_req *a)
{
    return apr_time_now() + apr_time_from_sec(
                                ci_server_capacity_wait(ci_server_config(a->r->server)));
}

static int create(api_req *a)
{
    const ci_sandbox_def *def = ci_sandbox_lookup(a->r->server,
                                                  a->d->sandbox ? a->d->sandbox : "local");
    json_object *body = read_json(a), *req, *ans, *ids;
    apr_array_header_t *files = NULL;
    ci_container c;
    ci_dir_status why;
    int idle, waited = 0;
    if (!def) {
        ci_error_set(&a->err, 500, CI_SERVER, NULL, "server_error", a->r->pool,
                     "The code interpreter is misconfigured on this server.");
        return fail(a);
    }
    if (check_create(a, body, def, &idle))
        return OK;
    /* file_ids: each checked at the upstream before anything is made */
    if ((ids = ci_json_get(body, "file_ids", json_type_array)) &&
        json_object_array_length(ids) > 0 &&
        ci_files_check_ids(a->r, a->d, ids, "file_ids", &files, &a->err) != OK)
        return fail(a);
    req = ci_containers_create_request(a->r, a->owner, def,
                                       ci_json_str(body, "memory_limit"), NULL,
                                       ci_json_str(body, "name"), idle, 0);
    if (!(ans = ci_containers_create_waiting(a->r, req, capacity_deadline(a), &waited)))
        return unavailable(a);
    why = status_of(ans);
    ci_containers_note_admission(a->r, def->name, ci_json_str(ci_json_get(
                                     ans, "container", json_type_object), "id"),
                                 waited, ans);
    if (ci_containers_capacity(why)) {
        ci_containers_refused(a->r, why, 429, &a->err);
        return fail(a);
    }
    if (why != CI_DIR_OK || container_of(a, ans, "container", &c))
        return unavailable(a);
    if (files && provision(a, &c, files))
        return fail(a);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0815: container %s created "
                  "(tool %s)", c.id, def->name);
    return send_json(a->r, 200, resource(a->r->pool, &c));
}

/* ---- container files ---------------------------------------------------------
 * Read, written and deleted through the container's own sandbox, by its
 * provider's file entries (ci_sandbox.h): no path of the sandbox is ever
 * resolved here. Ids: ci_cfiles.h. */

#define CFILE_MAX_GET ((apr_int64_t)1 << 30)    /* bytes of one download */

static int file_not_found(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "container_file_not_found",
                 a->r->pool, "Container file with id '%s' not found.", a->file_id);
    return fail(a);
}

/* The caller's container A->id, checked, and where its files are (*T;
 * with START, its sandbox started when it has none): 0, or -1 with the
 * answer sent (*RC). */
static int own_container(api_req *a, int start, ci_file_target *t, int *rc)
{
    json_object *req = dir_request(a, "get"), *ans;
    ci_container c;
    json_object_object_add(req, "touch", json_object_new_boolean(1));   /* a use */
    if (!(ans = dir_ask(a, req)))
        return *rc = unavailable(a), -1;
    if (status_of(ans) == CI_DIR_NOT_FOUND || container_of(a, ans, "container", &c))
        return *rc = not_found(a), -1;
    if (ci_dirclient_elsewhere(a->r, &c, &a->err))
        return *rc = fail(a), -1;
    if (start && c.status != CI_CNTR_RUNNING) {
        ci_error_set(&a->err, 400, CI_INVALID, NULL, "container_expired", a->r->pool,
                     "Container with id '%s' has expired and can no longer be used; "
                     "use a new container.", a->id);
        return *rc = fail(a), -1;
    }
    if (ci_files_target(a->r, a->owner, &c, start, t, &a->err) != OK)
        return *rc = fail(a), -1;
    return 0;
}

static int files_unreadable(api_req *a, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, a->r, "CI0816: the files of container "
                  "%s could not be read: %s", a->id, why ? why : "unknown reason");
    ci_error_set(&a->err, 503, CI_SERVER, NULL, "container_unavailable", a->r->pool,
                 "The container's files could not be read; retry shortly.");
    return fail(a);
}

/* T's files (sorted, ci_cfiles.h): 0, or -1 with the answer sent (*RC). */
static int list_files(api_req *a, const ci_file_target *t, apr_array_header_t **files,
                      int *rc)
{
    const char *why = NULL;
    ci_file_status st = t->def->provider->files_list(a->r->pool, t, files, &why);
    if (st == CI_FILE_NO_SANDBOX)
        *files = apr_array_make(a->r->pool, 1, sizeof(ci_cfile));
    else if (st != CI_FILE_OK)
        return *rc = files_unreadable(a, why), -1;
    return 0;
}

static json_object *file_resource(api_req *a, const ci_cfile *f)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(f->id));
    json_object_object_add(o, "object", json_object_new_string("container.file"));
    json_object_object_add(o, "created_at", json_object_new_int64(f->created_at));
    json_object_object_add(o, "bytes", json_object_new_int64(f->bytes));
    json_object_object_add(o, "container_id", json_object_new_string(a->id));
    json_object_object_add(o, "path", json_object_new_string(
                               apr_pstrcat(a->r->pool, "/mnt/data/", f->name, NULL)));
    json_object_object_add(o, "source", json_object_new_string(f->user ? "user"
                                                                         : "assistant"));
    return o;
}

static int files_list(api_req *a)
{
    apr_array_header_t *files, *page;
    ci_file_target t;
    json_object *data;
    ci_capi_paging pg;
    int has_more = 0, i, rc;
    if (read_paging(a, &pg, &rc) || own_container(a, 0, &t, &rc) ||
        list_files(a, &t, &files, &rc))
        return rc;
    page = ci_cfiles_page(a->r->pool, files, pg.after, pg.limit,
                          !pg.order || !strcmp(pg.order, "desc"), &has_more);
    data = json_object_new_array();
    for (i = 0; i < page->nelts; i++)
        json_object_array_add(data, file_resource(a, &APR_ARRAY_IDX(page, i, ci_cfile)));
    return send_list(a, data, has_more);
}

/* The caller's file A->file_id: 0 with *OUT and *T, or -1 with the answer
 * sent. */
static int own_file(api_req *a, ci_file_target *t, const ci_cfile **out, int *rc)
{
    apr_array_header_t *files;
    if (own_container(a, 0, t, rc) || list_files(a, t, &files, rc))
        return -1;
    if (!(*out = ci_cfiles_find(files, a->file_id)))
        return *rc = file_not_found(a), -1;
    return 0;
}

static int file_get(api_req *a)
{
    const ci_cfile *f;
    ci_file_target t;
    int rc;
    if (own_file(a, &t, &f, &rc))
        return rc;
    return send_json(a->r, 200, ci_json_own(a->r->pool, file_resource(a, f)));
}

static int file_delete(api_req *a)
{
    const ci_cfile *f;
    ci_file_target t;
    json_object *o;
    const char *why = NULL;
    ci_file_status st;
    int rc;
    if (own_file(a, &t, &f, &rc))
        return rc;
    st = t.def->provider->file_delete(a->r->pool, &t, f->name, &why);
    if (st == CI_FILE_FAILED)
        return files_unreadable(a, why);
    if (st != CI_FILE_OK)
        return file_not_found(a);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0817: file %s of container %s "
                  "deleted", a->file_id, a->id);
    o = ci_json_own(a->r->pool, json_object_new_object());
    json_object_object_add(o, "id", json_object_new_string(a->file_id));
    json_object_object_add(o, "object", json_object_new_string("container.file.deleted"));
    json_object_object_add(o, "deleted", json_object_new_boolean(1));
    return send_json(a->r, 200, o);
}

/* A content type from the name's extension. */
static const char *content_type_of(const char *name)
{
    static const char *const types[][2] = {
        { "csv", "text/csv" }, { "txt", "text/plain" }, { "json", "application/json" },
        { "png", "image/png" }, { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" },
        { "gif", "image/gif" }, { "svg", "image/svg+xml" }, { "pdf", "application/pdf" },
        { "html", "text/html" }, { "md", "text/markdown" }, { "py", "text/x-python" },
        { "xml", "application/xml" }, { "zip", "application/zip" },
        { "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
        { "docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document" },
        { "pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation" },
        { "tsv", "text/tab-separated-values" }, { "webp", "image/webp" },
    };
    const char *dot = strrchr(name, '.');
    apr_size_t i;
    for (i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcasecmp(dot + 1, types[i][0]))
            return types[i][1];
    return "application/octet-stream";
}

/* The download's sink: the headers once the size is known, then the
 * bytes as they come. */
typedef struct content_out {
    request_rec *r;
    apr_int64_t bytes, sent;
    int started;
} content_out;

static int content_size(void *baton, apr_int64_t bytes)
{
    content_out *c = baton;
    c->started = 1;
    c->bytes = bytes;
    c->r->status = 200;
    ap_set_content_length(c->r, (apr_off_t)bytes);
    return 0;
}

static int content_data(void *baton, const char *buf, apr_size_t len)
{
    content_out *c = baton;
    if (ap_rwrite(buf, (int)len, c->r) < 0)
        return -1;
    c->sent += (apr_int64_t)len;
    return 0;
}

static int file_content(api_req *a)
{
    const ci_cfile *f;
    ci_file_target t;
    content_out c = { a->r, 0, 0, 0 };
    ci_file_sink sink = { content_size, content_data, &c };
    const char *why = NULL;
    ci_file_status st;
    int rc;
    if (own_file(a, &t, &f, &rc))
        return rc;
    ap_set_content_type(a->r, content_type_of(f->name));
    st = t.def->provider->file_get(a->r->pool, &t, f->name, CFILE_MAX_GET, &sink, &why);
    if (!c.started) {
        if (st == CI_FILE_TOO_LARGE) {
            ci_error_set(&a->err, 413, CI_INVALID, NULL, "file_too_large", a->r->pool,
                         "Container file with id '%s' is larger than this server "
                         "serves (%" APR_INT64_T_FMT " bytes).", a->file_id,
                         CFILE_MAX_GET);
            return fail(a);
        }
        return st == CI_FILE_FAILED ? files_unreadable(a, why) : file_not_found(a);
    }
    if (st != CI_FILE_OK || c.sent != c.bytes) {
        /* The headers are out: the body is cut short and the connection
         * closed, so the client sees it from the Content-Length. */
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, a->r, "CI0818: file %s of "
                      "container %s cut after %" APR_INT64_T_FMT " of %" APR_INT64_T_FMT
                      " bytes: %s", a->file_id, a->id, c.sent, c.bytes,
                      why ? why : "the file changed or the client left");
        a->r->connection->keepalive = AP_CONN_CLOSE;
        a->r->connection->aborted = 1;
    }
    return OK;
}

/* {"file_id": ID}: a file of the upstream's Files API. */
static int upload_file_id(api_req *a, const ci_file_target *t, ci_cfile *out)
{
    json_object *body = read_json(a), *ids;
    apr_array_header_t *files;
    int status;
    if (!ci_json_str(body, "file_id")) {
        ci_error_set(&a->err, 400, CI_INVALID, "file_id", "missing_required_parameter",
                     a->r->pool, "Missing required parameter: 'file_id' (or a "
                     "multipart/form-data body with a 'file').");
        return 400;
    }
    ids = ci_json_own(a->r->pool, json_object_new_array());
    json_object_array_add(ids, json_object_get(ci_json_get(body, "file_id",
                                                           json_type_string)));
    if ((status = ci_files_check_ids(a->r, a->d, ids, "file_id", &files, &a->err)) != OK)
        return status;
    return ci_files_put_upstream(a->r, a->d, t, &APR_ARRAY_IDX(files, 0, ci_filesapi_file),
                                 out, &a->err);
}

static int file_upload(api_req *a)
{
    const char *type = apr_table_get(a->r->headers_in, "Content-Type");
    ci_file_target t;
    ci_cfile f;
    int rc, status;
    if (own_container(a, 1, &t, &rc))
        return rc;
    status = type && !strncasecmp(type, "multipart/", 10)
           ? ci_files_put_multipart(a->r, &t, &f, &a->err)
           : upload_file_id(a, &t, &f);
    if (status != OK)
        return a->err.status ? fail(a) : status;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0819: file %s (%s, %"
                  APR_INT64_T_FMT " bytes) put into container %s", f.id, f.name, f.bytes,
                  a->id);
    return send_json(a->r, 200, ci_json_own(a->r->pool, file_resource(a, &f)));
}

/* ---- routing -------------------------------------------------------------------- */

static int method_not_allowed(api_req *a, const char *allow)
{
    apr_table_setn(a->r->headers_out, "Allow", allow);
    ci_error_set(&a->err, 405, CI_INVALID, NULL, "method_not_allowed", a->r->pool,
                 "Method %s is not allowed here (allowed: %s).", a->r->method, allow);
    return fail(a);
}

static int no_path(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "not_found", a->r->pool,
                 "No such Containers API path: %s", a->r->uri);
    return fail(a);
}

static int on_containers(api_req *a)
{
    return a->r->method_number == M_GET ? list(a)
         : a->r->method_number == M_POST ? create(a)
         : method_not_allowed(a, "GET, POST");
}

static int on_container(api_req *a)
{
    return a->r->method_number == M_GET ? get_one(a)
         : a->r->method_number == M_DELETE ? delete_one(a)
         : method_not_allowed(a, "GET, DELETE");
}

static int on_files(api_req *a)
{
    return a->r->method_number == M_GET ? files_list(a)
         : a->r->method_number == M_POST ? file_upload(a)
         : method_not_allowed(a, "GET, POST");
}

static int on_file(api_req *a)
{
    return a->r->method_number == M_GET ? file_get(a)
         : a->r->method_number == M_DELETE ? file_delete(a)
         : method_not_allowed(a, "GET, DELETE");
}

static int on_content(api_req *a)
{
    return a->r->method_number == M_GET ? file_content(a) : method_not_allowed(a, "GET");
}

static int api_handler(request_rec *r)
{
    ci_dir_conf *d = ci_dir_config(r);
    const char *owner = NULL;
    ci_capi_route route;
    api_req a;
    if (!d || d->containers != 1 || r->main)
        return DECLINED;
    ci_capi_route_of(r->pool, r->uri, &route);
    if (route.kind == CI_CAPI_NONE)
        return DECLINED;
    memset(&a, 0, sizeof(a));
    a.r = r;
    a.d = d;
    apr_pool_userdata_get((void **)&owner, OWNER_KEY, r->pool);
    a.owner = owner;
    if (!a.owner || !*a.owner) {
        ci_error_set(&a.err, 401, CI_INVALID, NULL, "missing_credentials", r->pool,
                     "The Containers API needs a caller: this request carries no "
                     "credentials.");
        return fail(&a);
    }
    a.id = route.id;
    a.file_id = route.file_id;
    switch (route.kind) {
    case CI_CAPI_CONTAINERS: return on_containers(&a);
    case CI_CAPI_CONTAINER:  return on_container(&a);
    case CI_CAPI_FILES:      return on_files(&a);
    case CI_CAPI_FILE:       return on_file(&a);
    case CI_CAPI_CONTENT:    return on_content(&a);
    default:                 return no_path(&a);
    }
}

void ci_containers_api_register_hooks(apr_pool_t *p)
{
    /* First: a ProxyPass covering the location would otherwise take it. */
    ap_hook_handler(api_handler, NULL, NULL, APR_HOOK_FIRST);
}
