/*
 * ci_capi.c - a Containers API request's path, query and body (ci_capi.h).
 */
#include <stdlib.h>
#include <string.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_capi.h"
#include "ci_json.h"

#define MAX_LIMIT 100
#define DEFAULT_LIMIT 20

/* ---- the path ------------------------------------------------------------- */

/* What follows the last "/containers" segment of URI, or NULL. */
static const char *after_containers(const char *uri)
{
    const char *at = NULL, *p = uri;
    while ((p = strstr(p, "/containers"))) {
        if (p[11] == '\0' || p[11] == '/')
            at = p + 11;
        p += 11;
    }
    return at;
}

/* REST follows "{id}/": files[/{file_id}[/content]]. */
static void file_route(apr_pool_t *p, const char *rest, ci_capi_route *out)
{
    const char *slash;
    if (strncmp(rest, "files", 5) || (rest[5] && rest[5] != '/'))
        return;
    rest += 5;
    if (!*rest || !strcmp(rest, "/")) {
        out->kind = CI_CAPI_FILES;
        return;
    }
    rest++;
    if (!(slash = strchr(rest, '/'))) {
        out->file_id = apr_pstrdup(p, rest);
        out->kind = CI_CAPI_FILE;
        return;
    }
    if (slash == rest || strcmp(slash + 1, "content"))
        return;
    out->file_id = apr_pstrmemdup(p, rest, (apr_size_t)(slash - rest));
    out->kind = CI_CAPI_CONTENT;
}

void ci_capi_route_of(apr_pool_t *p, const char *uri, ci_capi_route *out)
{
    const char *route = uri ? after_containers(uri) : NULL, *slash;
    memset(out, 0, sizeof(*out));
    if (!route)
        return;
    out->kind = CI_CAPI_NO_SUCH_PATH;
    if (*route == '/')
        route++;
    if (!*route) {
        out->kind = CI_CAPI_CONTAINERS;
        return;
    }
    if (!(slash = strchr(route, '/'))) {
        out->id = apr_pstrdup(p, route);
        out->kind = CI_CAPI_CONTAINER;
        return;
    }
    if (slash == route)
        return;
    out->id = apr_pstrmemdup(p, route, (apr_size_t)(slash - route));
    file_route(p, slash + 1, out);
    if (out->kind == CI_CAPI_NO_SUCH_PATH)
        out->id = NULL;
}

json_object *ci_capi_list(json_object *data, int has_more)
{
    json_object *out = json_object_new_object();
    int n = (int)json_object_array_length(data);
    json_object_object_add(out, "object", json_object_new_string("list"));
    json_object_object_add(out, "data", data);
    json_object_object_add(out, "first_id", n ? json_object_get(json_object_object_get(
                               json_object_array_get_idx(data, 0), "id")) : NULL);
    json_object_object_add(out, "last_id", n ? json_object_get(json_object_object_get(
                               json_object_array_get_idx(data, n - 1), "id")) : NULL);
    json_object_object_add(out, "has_more", json_object_new_boolean(has_more));
    return out;
}

/* ---- the query ------------------------------------------------------------ */

static int hexval(char c)
{
    return apr_isdigit(c) ? c - '0' : apr_isxdigit(c) ? apr_tolower(c) - 'a' + 10 : -1;
}

/* N bytes of S, form-unescaped: %XX is a byte, '+' a space; a '%' without
 * two hex digits, or %00, makes it NULL. */
static char *unescape(apr_pool_t *p, const char *s, apr_size_t n)
{
    char *out = apr_palloc(p, n + 1), *o = out;
    apr_size_t i;
    for (i = 0; i < n; i++) {
        if (s[i] == '+')
            *o++ = ' ';
        else if (s[i] != '%')
            *o++ = s[i];
        else if (i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0 &&
                 (hexval(s[i + 1]) || hexval(s[i + 2]))) {     /* %00 is not text */
            *o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
            i += 2;
        }
        else
            return NULL;
    }
    *o = '\0';
    return out;
}

/* The query string's parameters, unescaped (%XX, '+'), the first of each
 * name kept; NULL when an escape is malformed or %00. */
static apr_table_t *ci_capi_query(apr_pool_t *p, const char *query)
{
    apr_table_t *t = apr_table_make(p, 4);
    const char *s = query ? query : "";
    while (*s) {
        const char *amp = strchr(s, '&'), *end = amp ? amp : s + strlen(s);
        const char *eq = memchr(s, '=', (apr_size_t)(end - s));
        char *key, *val;
        if (end > s) {
            key = unescape(p, s, (apr_size_t)((eq ? eq : end) - s));
            val = eq ? unescape(p, eq + 1, (apr_size_t)(end - eq - 1)) : apr_pstrdup(p, "");
            if (!key || !val)
                return NULL;
            if (!apr_table_get(t, key))
                apr_table_setn(t, key, val);
        }
        s = amp ? amp + 1 : end;
    }
    return t;
}

static int refuse(apr_pool_t *p, ci_error *err, const char *param, const char *code,
                  const char *msg)
{
    ci_error_set(err, 400, CI_INVALID, param, code, p, "%s", msg);
    return -1;
}

/* A parameter the directory and the answer can carry: UTF-8, no NUL. */
static int text_ok(const char *v)
{
    return !v || ci_utf8_valid_prefix(v, strlen(v)) == strlen(v);
}

static int text_param(apr_pool_t *p, const char *key, const char *v, ci_error *err)
{
    if (text_ok(v))
        return 0;
    return refuse(p, err, key, "invalid_value",
                  apr_psprintf(p, "Invalid '%s': expected a UTF-8 string.", key));
}

int ci_capi_paging_of(apr_pool_t *p, const char *query, ci_capi_paging *out,
                      ci_error *err)
{
    apr_table_t *q = ci_capi_query(p, query);
    const char *limit;
    char *end;
    long n;
    memset(out, 0, sizeof(*out));
    out->limit = DEFAULT_LIMIT;
    if (!q)
        return refuse(p, err, NULL, "invalid_value",
                      "The query string holds an escape that is not %XX.");
    if ((limit = apr_table_get(q, "limit"))) {
        n = strtol(limit, &end, 10);
        if (*end || !*limit || n < 1 || n > MAX_LIMIT)
            return refuse(p, err, "limit", "integer_out_of_range",
                          "Invalid 'limit': expected an integer from 1 to 100.");
        out->limit = (int)n;
    }
    out->order = apr_table_get(q, "order");
    if (out->order && strcmp(out->order, "asc") && strcmp(out->order, "desc"))
        return refuse(p, err, "order", "invalid_value",
                      "Invalid 'order': expected 'asc' or 'desc'.");
    out->after = apr_table_get(q, "after");
    out->name = apr_table_get(q, "name");
    return text_param(p, "after", out->after, err) || text_param(p, "name", out->name, err)
         ? -1 : 0;
}

/* ---- a create's body ---------------------------------------------------- */

/* Member KEY of BODY, when present and not null, is of type T. */
static int wrong_type(apr_pool_t *p, json_object *body, const char *key, json_type t,
                      const char *expected, ci_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(body, key, &v) || !v || json_object_is_type(v, t))
        return 0;
    ci_error_set(err, 400, CI_INVALID, key, "invalid_type", p,
                 "Invalid type for '%s': expected %s.", key, expected);
    return -1;
}

static int check_expiry(apr_pool_t *p, json_object *exp, int max_minutes, int *idle,
                        ci_error *err)
{
    const char *anchor = ci_json_str(exp, "anchor");
    json_object *v = ci_json_get(exp, "minutes", json_type_int);
    if (!anchor || strcmp(anchor, "last_active_at"))
        return refuse(p, err, "expires_after.anchor", "invalid_value",
                      "Invalid 'expires_after.anchor': expected 'last_active_at'.");
    if (!v || json_object_get_int64(v) < 1 || json_object_get_int64(v) > max_minutes)
        return refuse(p, err, "expires_after.minutes", "invalid_value",
                      apr_psprintf(p, "Invalid 'expires_after.minutes': expected an "
                                   "integer from 1 to %d.", max_minutes));
    *idle = (int)json_object_get_int64(v) * 60;
    return 0;
}

int ci_capi_check_create(apr_pool_t *p, json_object *body, int max_minutes,
                         int default_idle, int *idle_seconds, ci_error *err)
{
    json_object *v, *exp;
    *idle_seconds = default_idle;
    if (!json_object_is_type(body, json_type_object))
        return refuse(p, err, NULL, "invalid_json", "The request body must be a JSON object.");
    if (!json_object_object_get_ex(body, "name", &v) || !v)
        return refuse(p, err, "name", "missing_required_parameter",
                      "Missing required parameter: 'name'.");
    if (wrong_type(p, body, "name", json_type_string, "a string", err) ||
        wrong_type(p, body, "file_ids", json_type_array, "an array of file ids", err) ||
        wrong_type(p, body, "memory_limit", json_type_string, "a string", err) ||
        wrong_type(p, body, "expires_after", json_type_object, "an object", err))
        return -1;
    if ((exp = ci_json_get(body, "expires_after", json_type_object)))
        return check_expiry(p, exp, max_minutes, idle_seconds, err);
    return 0;
}
