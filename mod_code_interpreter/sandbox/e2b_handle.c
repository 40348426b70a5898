/*
 * e2b_handle.c - a sandbox of the e2b provider as this process holds it:
 * the ids and tokens the service's answers may carry, its local state (its
 * HTTP handle, the key and control plane it is reached with, all wiped by
 * its pool's cleanup), and a container's handle: what another process needs
 * to reach the same sandbox, made and taken back (e2b_open: with no call).
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include "ci_json.h"
#include "e2b_internal.h"

#define MAX_TOKEN_LEN 4096
#define HANDLE_VERSION 1

/* ---- what the service returns ------------------------------------------ */

/* Provider ids go into URL paths and host names: letters, digits, - and _. */
int e2b_valid_id(const char *s)
{
    apr_size_t n = 0;
    for (; s[n]; n++)
        if (!apr_isalnum(s[n]) && s[n] != '-' && s[n] != '_')
            return 0;
    return n > 0 && n <= 128;
}

/* Tokens go into header values: visible ASCII only. */
int e2b_valid_token(const char *s)
{
    apr_size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f)
            return 0;
    return n > 0 && n <= MAX_TOKEN_LEN;
}

const char *e2b_trim_slash(apr_pool_t *p, const char *url)
{
    apr_size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    return apr_pstrmemdup(p, url, n);
}

apr_status_t e2b_sandbox_cleanup(void *data)
{
    ci_sandbox *sb = data;
    e2b_wipe(sb->api_key);
    e2b_wipe(sb->envd_token);
    e2b_wipe(sb->traffic_token);
    if (sb->curl) {
        curl_easy_cleanup(sb->curl);
        sb->curl = NULL;
    }
    return APR_SUCCESS;
}

/* ---- a sandbox's local state -------------------------------------------- */

/* SB's local state for DEF: its cleanup, its HTTP handle, the key and the
 * control plane it is reached with. */
apr_status_t e2b_sandbox_init(ci_sandbox *sb, apr_pool_t *p, const ci_sandbox_def *def,
                              const char **err)
{
    if (!CI_E2B(def)->api_key || !*CI_E2B(def)->api_key) {
        *err = "no E2B API key is configured";
        return APR_EINIT;
    }
    sb->p = p;
    sb->def = def;
    apr_pool_cleanup_register(p, sb, e2b_sandbox_cleanup, apr_pool_cleanup_null);
    if (!(sb->curl = curl_easy_init())) {
        *err = "could not create an HTTP client handle";
        return APR_ENOMEM;
    }
    sb->api_key = apr_pstrdup(p, CI_E2B(def)->api_key);
    sb->api_base = e2b_trim_slash(p, CI_E2B(def)->api_base);
    return APR_SUCCESS;
}

/* ---- a container's handle ----------------------------------------------- */

/* Wipe the text of KEY's string member of ROOT before json-c frees it. */
static void wipe_member(json_object *root, const char *key)
{
    json_object *v = ci_json_get(root, key, json_type_string);
    if (v)
        explicit_bzero((char *)json_object_get_string(v),
                       (size_t)json_object_get_string_len(v));
}

void e2b_wipe_handle_json(json_object *root)
{
    wipe_member(root, "access_token");
    wipe_member(root, "traffic_token");
}

/* An http(s) base URL with a host and nothing that could redirect the
 * tokens elsewhere (user info, query, fragment). */
static int valid_base_url(apr_pool_t *p, const char *url)
{
    apr_uri_t uri;
    return strlen(url) <= 2048 && apr_uri_parse(p, url, &uri) == APR_SUCCESS &&
           uri.scheme && (!strcasecmp(uri.scheme, "https") ||
                          !strcasecmp(uri.scheme, "http")) &&
           uri.hostname && *uri.hostname && !uri.user && !uri.password &&
           !uri.query && !uri.fragment;
}

/* {"version":1, "sandbox_id", "data_url", "access_token",
 *  "traffic_token"?, "context_id"}: everything another process needs to
 * reach the same sandbox and its context; the API key is not in it (the
 * tool's definition has it). Secret (tokens). NULL once SB is released. */
const char *e2b_handle(ci_sandbox *sb, apr_pool_t *p)
{
    json_object *h;
    const char *text;
    apr_size_t len;
    char *out;

    if (!sb->id || !sb->envd_token)
        return NULL;
    h = json_object_new_object();
    json_object_object_add(h, "version", json_object_new_int(HANDLE_VERSION));
    json_object_object_add(h, "sandbox_id", json_object_new_string(sb->id));
    json_object_object_add(h, "data_url", json_object_new_string(sb->data_base));
    json_object_object_add(h, "access_token", json_object_new_string(sb->envd_token));
    if (sb->traffic_token)
        json_object_object_add(h, "traffic_token",
                               json_object_new_string(sb->traffic_token));
    if (sb->context_id)
        json_object_object_add(h, "context_id", json_object_new_string(sb->context_id));
    text = ci_json_text(h, &len);
    out = apr_pstrmemdup(p, text, len);
    /* json-c's copies of the tokens: wiped before they are freed */
    explicit_bzero((char *)text, len);
    e2b_wipe_handle_json(h);
    json_object_put(h);
    return out;
}

/* Fill SB from HANDLE (what e2b_handle made). NULL, or why not (never any
 * part of the handle). */
static const char *take_handle(ci_sandbox *sb, apr_pool_t *tmp, const char *handle)
{
    apr_size_t n = strlen(handle);
    json_object *root, *version;
    const char *err, *id, *url, *envd, *traffic, *context, *why = NULL;

    if (n > MAX_HANDLE_LEN || !(root = ci_json_parse(tmp, handle, n, &err)))
        return MSG_HANDLE;
    version = ci_json_get(root, "version", json_type_int);
    id = ci_json_str(root, "sandbox_id");
    url = ci_json_str(root, "data_url");
    envd = ci_json_str(root, "access_token");
    traffic = ci_json_str(root, "traffic_token");
    context = ci_json_str(root, "context_id");
    if (!version || json_object_get_int(version) != HANDLE_VERSION ||
        !id || !e2b_valid_id(id) || !url || !valid_base_url(tmp, url) ||
        !envd || !e2b_valid_token(envd) || (traffic && !e2b_valid_token(traffic)) ||
        !context || !e2b_valid_id(context))
        why = MSG_HANDLE;
    else {
        sb->id = apr_pstrdup(sb->p, id);
        sb->data_base = e2b_trim_slash(sb->p, url);
        sb->envd_token = apr_pstrdup(sb->p, envd);
        sb->traffic_token = traffic ? apr_pstrdup(sb->p, traffic) : NULL;
        sb->context_id = apr_pstrdup(sb->p, context);
    }
    e2b_wipe_handle_json(root);
    return why;
}

apr_status_t e2b_open(apr_pool_t *p, const ci_sandbox_def *def, const char *handle,
                      ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    apr_status_t rv;
    apr_pool_t *tmp;
    const char *why;

    if ((rv = e2b_sandbox_init(sb, p, def, err)) != APR_SUCCESS)
        return rv;
    sb->container = 1;
    sb->data_dir = 1;
    apr_pool_create(&tmp, p);
    why = take_handle(sb, tmp, handle);
    apr_pool_destroy(tmp);
    if (why) {
        *err = why;
        e2b_sandbox_cleanup(sb);
        sb->id = NULL;
        return APR_EINVAL;
    }
    *out = sb;
    return APR_SUCCESS;
}
