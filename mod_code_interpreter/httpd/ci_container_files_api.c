/*
 * ci_container_files_api.c - the Containers API's files endpoints
 * (/v1/containers/{id}/files...): list, upload, retrieve, content, delete,
 * for the caller's own containers.
 *
 * Read, written and deleted through the container's own sandbox, by its
 * provider's file entries (ci_sandbox.h): no path of the sandbox is ever
 * resolved here. Ids: ci_cfiles.h.
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_containers_api_internal.h"
#include <http_log.h>
#include <http_protocol.h>
#include "ci_capi.h"
#include "ci_cfiles.h"
#include "ci_dirclient.h"
#include "ci_files_in.h"
#include "ci_json.h"
#include "ci_module.h"

#define CFILE_MAX_GET ((apr_int64_t)1 << 30)    /* bytes of one download */

static int file_not_found(api_req *a)
{
    ci_error_set(&a->err, 404, CI_INVALID, NULL, "container_file_not_found",
                 a->r->pool, "Container file with id '%s' not found.", a->file_id);
    return capi_fail(a);
}

/* The caller's container A->id, checked, and where its files are (*T;
 * with START, its sandbox started when it has none): 0, or -1 with the
 * answer sent (*RC). */
static int own_container(api_req *a, int start, ci_file_target *t, int *rc)
{
    json_object *req = capi_dir_request(a, "get"), *ans;
    ci_container c;
    json_object_object_add(req, "touch", json_object_new_boolean(1));   /* a use */
    if (!(ans = capi_dir_ask(a, req)))
        return *rc = capi_unavailable(a), -1;
    if (capi_status_of(ans) == CI_DIR_NOT_FOUND || capi_container_of(a, ans, "container", &c))
        return *rc = capi_not_found(a), -1;
    if (ci_dirclient_elsewhere(a->r, &c, &a->err))
        return *rc = capi_fail(a), -1;
    if (start && c.status != CI_CNTR_RUNNING) {
        ci_error_set(&a->err, 400, CI_INVALID, NULL, "container_expired", a->r->pool,
                     "Container with id '%s' has expired and can no longer be used; "
                     "use a new container.", a->id);
        return *rc = capi_fail(a), -1;
    }
    if (ci_files_target(a->r, a->owner, &c, start, t, &a->err) != OK)
        return *rc = capi_fail(a), -1;
    return 0;
}

static int files_unreadable(api_req *a, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, a->r, "CI0816: the files of container "
                  "%s could not be read: %s", a->id, why ? why : "unknown reason");
    ci_error_set(&a->err, 503, CI_SERVER, NULL, "container_unavailable", a->r->pool,
                 "The container's files could not be read; retry shortly.");
    return capi_fail(a);
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

int capi_files_list(api_req *a)
{
    apr_array_header_t *files, *page;
    ci_file_target t;
    json_object *data;
    ci_capi_paging pg;
    int has_more = 0, i, rc;
    if (capi_read_paging(a, &pg, &rc) || own_container(a, 0, &t, &rc) ||
        list_files(a, &t, &files, &rc))
        return rc;
    page = ci_cfiles_page(a->r->pool, files, pg.after, pg.limit,
                          !pg.order || !strcmp(pg.order, "desc"), &has_more);
    data = json_object_new_array();
    for (i = 0; i < page->nelts; i++)
        json_object_array_add(data, file_resource(a, &APR_ARRAY_IDX(page, i, ci_cfile)));
    return capi_send_list(a, data, has_more);
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

int capi_file_get(api_req *a)
{
    const ci_cfile *f;
    ci_file_target t;
    int rc;
    if (own_file(a, &t, &f, &rc))
        return rc;
    return capi_send_json(a->r, 200, ci_json_own(a->r->pool, file_resource(a, f)));
}

int capi_file_delete(api_req *a)
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
    return capi_send_json(a->r, 200, o);
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

int capi_file_content(api_req *a)
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
            return capi_fail(a);
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
    json_object *body = capi_read_json(a), *ids;
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

int capi_file_upload(api_req *a)
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
        return a->err.status ? capi_fail(a) : status;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, a->r, "CI0819: file %s (%s, %"
                  APR_INT64_T_FMT " bytes) put into container %s", f.id, f.name, f.bytes,
                  a->id);
    return capi_send_json(a->r, 200, ci_json_own(a->r->pool, file_resource(a, &f)));
}
