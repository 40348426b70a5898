/*
 * ci_filesapi.c - the upstream's Files API (ci_filesapi.h).
 */
#include <string.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include "ci_filesapi.h"
#include "ci_json.h"

#define META_MAX_BODY ((apr_size_t)64 * 1024)

/* FILE_ID %-escaped for a path segment: only unreserved bytes stay. */
static const char *escape_segment(apr_pool_t *p, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = apr_palloc(p, strlen(s) * 3 + 1), *o = out;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~')
            *o++ = (char)c;
        else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

const char *ci_filesapi_url(apr_pool_t *p, const char *responses_url, const char *file_id,
                            int content)
{
    apr_size_t n = strcspn(responses_url, "?#");
    const char *base = apr_pstrmemdup(p, responses_url, n);
    apr_size_t k = strlen(base);
    while (k > 0 && base[k - 1] == '/')
        k--;
    if (k < 10 || strncmp(base + k - 10, "/responses", 10))
        return NULL;
    return apr_pstrcat(p, apr_pstrmemdup(p, base, k - 10), "/files/",
                       escape_segment(p, file_id), content ? "/content" : "", NULL);
}

/* What an upstream's refusal means for a file: not found, denied, or no
 * Files API (a 404 without OpenAI's error object, 405, 501). */
static ci_filesapi_status refusal(apr_pool_t *p, const ci_upstream_answer *ans,
                                  const char *file_id, const char **err)
{
    const char *e = NULL;
    json_object *o = ci_json_parse(p, ans->body, ans->len, &e);
    int has_error = ci_json_get(o, "error", json_type_object) != NULL;
    if (ans->status == 404 && has_error) {
        *err = apr_psprintf(p, "the upstream has no file '%s'", file_id);
        return CI_FILESAPI_NOT_FOUND;
    }
    if (ans->status == 401 || ans->status == 403) {
        *err = apr_psprintf(p, "the upstream refused access to file '%s' (HTTP %d)",
                            file_id, ans->status);
        return CI_FILESAPI_DENIED;
    }
    if (ans->status == 404 || ans->status == 405 || ans->status == 501) {
        *err = apr_psprintf(p, "the upstream has no Files API (HTTP %d)", ans->status);
        return CI_FILESAPI_NO_API;
    }
    *err = apr_psprintf(p, "the upstream's Files API answered HTTP %d", ans->status);
    return CI_FILESAPI_FAILED;
}

ci_filesapi_status ci_filesapi_get(apr_pool_t *p, const char *responses_url,
                                   const apr_table_t *headers,
                                   const ci_upstream_opts *opts, const char *file_id,
                                   ci_filesapi_file *out, const char **err)
{
    const char *url = ci_filesapi_url(p, responses_url, file_id, 0), *e = NULL;
    ci_upstream_opts o = *opts;
    ci_upstream_answer ans;
    json_object *f, *bytes;
    memset(out, 0, sizeof(*out));
    if (!url) {
        *err = "the upstream URL does not end in /responses, so it has no Files API "
               "beside it";
        return CI_FILESAPI_NO_API;
    }
    o.max_body = META_MAX_BODY;
    o.sink = NULL;
    if (ci_upstream_get(p, url, headers, &o, &ans, err) != APR_SUCCESS)
        return CI_FILESAPI_FAILED;
    if (ans.status != 200)
        return refusal(p, &ans, file_id, err);
    f = ci_json_parse(p, ans.body, ans.len, &e);
    bytes = ci_json_get(f, "bytes", json_type_int);
    if (!ci_json_str(f, "filename") || !bytes || json_object_get_int64(bytes) < 0) {
        *err = apr_psprintf(p, "the upstream's file object of '%s' has no filename "
                            "or bytes", file_id);
        return CI_FILESAPI_FAILED;
    }
    out->id = apr_pstrdup(p, file_id);
    out->filename = apr_pstrdup(p, ci_json_str(f, "filename"));
    out->bytes = json_object_get_int64(bytes);
    return CI_FILESAPI_OK;
}

typedef struct content_sink {
    int (*sink)(void *baton, const char *data, apr_size_t len);
    void *baton;
    apr_int64_t max, got;
    int over;
} content_sink;

static int on_content(void *baton, const char *data, apr_size_t len)
{
    content_sink *c = baton;
    if (c->got + (apr_int64_t)len > c->max) {
        c->over = 1;
        return 1;
    }
    c->got += (apr_int64_t)len;
    return c->sink(c->baton, data, len);
}

ci_filesapi_status ci_filesapi_content(apr_pool_t *p, const char *responses_url,
                                       const apr_table_t *headers,
                                       const ci_upstream_opts *opts,
                                       const char *file_id, apr_int64_t max,
                                       int (*sink)(void *baton, const char *data,
                                                   apr_size_t len),
                                       void *baton, const char **err)
{
    const char *url = ci_filesapi_url(p, responses_url, file_id, 1);
    content_sink c = { sink, baton, max, 0, 0 };
    ci_upstream_opts o = *opts;
    ci_upstream_answer ans;
    apr_status_t rv;
    if (!url) {
        *err = "the upstream URL does not end in /responses";
        return CI_FILESAPI_NO_API;
    }
    o.max_body = META_MAX_BODY;        /* for an error answer */
    o.sink = on_content;
    o.sink_baton = &c;
    o.sink_any = 1;
    rv = ci_upstream_get(p, url, headers, &o, &ans, err);
    if (c.over) {
        *err = apr_psprintf(p, "file '%s' has more than %" APR_INT64_T_FMT " bytes",
                            file_id, max);
        return CI_FILESAPI_TOO_LARGE;
    }
    if (rv != APR_SUCCESS)
        return CI_FILESAPI_FAILED;
    if (ans.status != 200)
        return refusal(p, &ans, file_id, err);
    return CI_FILESAPI_OK;
}
