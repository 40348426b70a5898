/* ci_error.c - OpenAI-shaped errors. */
#include <stdarg.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_error.h"
#include "ci_json.h"

ci_error *ci_error_set(ci_error *err, int status, const char *type,
                       const char *param, const char *code, apr_pool_t *p,
                       const char *fmt, ...)
{
    va_list ap;
    const char *text;
    apr_size_t len;
    va_start(ap, fmt);
    text = apr_pvsprintf(p, fmt, ap);
    va_end(ap);
    /* A message may quote what the client sent (an id, a file name): never
     * bytes that are not UTF-8 in the JSON answer. */
    err->message = ci_utf8_sanitize(p, text, strlen(text), &len);
    err->status = status;
    err->type = type;
    err->param = param;
    err->code = code;
    err->retry_after = status == 503 ? CI_RETRY_AFTER_DEFAULT : 0;
    return err;
}

static json_object *string_or_null(const char *s)
{
    return s ? json_object_new_string(s) : NULL;
}

const char *ci_error_body(apr_pool_t *p, const ci_error *err, apr_size_t *len)
{
    json_object *root = ci_json_own(p, json_object_new_object());
    json_object *e = json_object_new_object();

    json_object_object_add(e, "message", string_or_null(err->message));
    json_object_object_add(e, "type", string_or_null(err->type));
    json_object_object_add(e, "param", string_or_null(err->param));
    json_object_object_add(e, "code", string_or_null(err->code));
    json_object_object_add(root, "error", e);
    return ci_json_pstr(p, root, len);
}

int ci_error_bad_type(apr_pool_t *p, ci_error *err, const char *param,
                      const char *expected)
{
    ci_error_set(err, 400, CI_INVALID, param, "invalid_type", p,
                 "Invalid type for '%s': expected %s.", param, expected);
    return -1;
}
