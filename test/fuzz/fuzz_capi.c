/*
 * fuzz_capi.c - a Containers API request as any caller could send it,
 * through the functions its handler calls (ci_capi.h): the path, the query
 * string, a create's JSON body, an upload's Content-Type and multipart body
 * and its file name.
 *
 * The input is four parts separated by NUL bytes: path, query, Content-Type,
 * body (the body is parsed both as a create and as a multipart upload).
 * Checked: no crash, leak or undefined behaviour; a route's ids hold no
 * '/', and a kind with an id has one that is not empty; every refusal is a
 * 400 whose message is valid UTF-8 and whose body serialises to JSON;
 * paging within its bounds and its texts valid UTF-8; a create's idle
 * within what it may be; a file name accepted only when it is one.
 */
#include "fuzz_common.h"
#include "ci_capi.h"
#include "ci_cfiles.h"
#include "ci_error.h"
#include "ci_multipart.h"

#define MAX_MINUTES 60
#define DEFAULT_IDLE 1200

/* The next NUL-separated part of the input, as a string (in P). */
static const char *part(apr_pool_t *p, const uint8_t **data, size_t *size)
{
    const uint8_t *nul = memchr(*data, 0, *size);
    size_t n = nul ? (size_t)(nul - *data) : *size;
    const char *out = apr_pstrmemdup(p, (const char *)*data, n);
    *data += nul ? n + 1 : n;
    *size -= nul ? n + 1 : n;
    return out;
}

static void check_refusal(apr_pool_t *p, const ci_error *err)
{
    apr_size_t n = 0;
    const char *body;
    FUZZ_CHECK(err->status == 400, "a refusal with status %d", err->status);
    FUZZ_CHECK(err->message && fuzz_utf8_valid(err->message, strlen(err->message)),
               "a refusal's message is not UTF-8");
    body = ci_error_body(p, err, &n);
    fuzz_check_json(p, "a refusal", body, n, json_type_object);
}

static void route(apr_pool_t *p, const char *path)
{
    ci_capi_route r;
    ci_capi_route_of(p, path, &r);
    FUZZ_CHECK(!r.id || !strchr(r.id, '/'), "an id with a '/': %s", r.id);
    FUZZ_CHECK(!r.file_id || !strchr(r.file_id, '/'), "a file id with a '/'");
    if (r.kind == CI_CAPI_CONTAINER || r.kind >= CI_CAPI_FILES)
        FUZZ_CHECK(r.kind == CI_CAPI_NO_SUCH_PATH || (r.id && *r.id),
                   "kind %d without an id", (int)r.kind);
    if (r.kind == CI_CAPI_CONTENT)
        FUZZ_CHECK(r.file_id && *r.file_id, "content without a file id");
    if (r.kind == CI_CAPI_NONE)
        FUZZ_CHECK(!r.id && !r.file_id, "no route, yet ids");
}

static void paging(apr_pool_t *p, const char *query)
{
    ci_capi_paging pg;
    ci_error err;
    memset(&err, 0, sizeof(err));
    if (ci_capi_paging_of(p, query, &pg, &err) != 0) {
        check_refusal(p, &err);
        return;
    }
    FUZZ_CHECK(pg.limit >= 1 && pg.limit <= 100, "limit %d", pg.limit);
    FUZZ_CHECK(!pg.order || !strcmp(pg.order, "asc") || !strcmp(pg.order, "desc"),
               "order %s", pg.order);
    FUZZ_CHECK(!pg.after || fuzz_utf8_valid(pg.after, strlen(pg.after)), "after not UTF-8");
    FUZZ_CHECK(!pg.name || fuzz_utf8_valid(pg.name, strlen(pg.name)), "name not UTF-8");
}

static void create(apr_pool_t *p, const char *body, size_t n)
{
    const char *perr = NULL;
    json_object *o = ci_json_parse(p, body, n, &perr);
    ci_error err;
    int idle = -1;
    memset(&err, 0, sizeof(err));
    if (ci_capi_check_create(p, o, MAX_MINUTES, DEFAULT_IDLE, &idle, &err) != 0) {
        check_refusal(p, &err);
        return;
    }
    FUZZ_CHECK(idle == DEFAULT_IDLE || (idle >= 60 && idle <= MAX_MINUTES * 60),
               "idle %d", idle);
    FUZZ_CHECK(ci_json_get(o, "name", json_type_string) != NULL, "a create without a name");
}

typedef struct upload { apr_pool_t *p; int names; } upload;

static int on_begin(void *baton, const ci_multipart_part *part)
{
    upload *u = baton;
    if (part->filename && ci_cfile_name_ok(part->filename, strlen(part->filename))) {
        FUZZ_CHECK(!strchr(part->filename, '/') &&
                       fuzz_utf8_valid(part->filename, strlen(part->filename)),
                   "a file name accepted that cannot be one");
        u->names++;
    }
    return 0;
}

static int on_data(void *baton, const ci_multipart_part *part, const char *d, apr_size_t n)
{
    (void)baton; (void)part; (void)d;
    FUZZ_CHECK(n > 0, "an empty piece of a part");
    return 0;
}

static int on_end(void *baton, const ci_multipart_part *part)
{
    (void)baton; (void)part;
    return 0;
}

static void multipart(apr_pool_t *p, const char *ctype, const char *body, size_t n)
{
    static const ci_multipart_callbacks cb = { on_begin, on_data, on_end };
    ci_multipart_limits lim = { 8192, 16, (apr_size_t)1 << 20 };
    const char *boundary = NULL, *why = NULL;
    upload u = { p, 0 };
    ci_multipart *mp;
    size_t at = 0;
    if (ci_multipart_boundary(p, ctype, &boundary, &why) != CI_MULTIPART_OK)
        return;
    mp = ci_multipart_create(p, boundary, &lim, &cb, &u);
    while (at < n) {                       /* in pieces, as a body arrives */
        size_t k = n - at < 7 ? n - at : 7;
        if (ci_multipart_feed(mp, body + at, k) != CI_MULTIPART_OK)
            return;
        at += k;
    }
    ci_multipart_end(mp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    const char *path = part(p, &data, &size);
    const char *query = part(p, &data, &size);
    const char *ctype = part(p, &data, &size);
    const char *body = apr_pstrmemdup(p, (const char *)data, size);
    route(p, path);
    paging(p, query);
    create(p, body, size);
    multipart(p, ctype, body, size);
    fuzz_pool_destroy(p);
    return 0;
}
