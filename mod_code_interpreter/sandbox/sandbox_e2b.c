/*
 * sandbox_e2b.c - the "e2b" provider: one E2B cloud sandbox (a microVM
 * running the code-interpreter server, one stateful Python kernel) per
 * ci_sandbox.
 *
 * Control plane (api_base, authenticated by X-API-Key): create the sandbox,
 * extend its lifetime before every execution, delete it. Data plane
 * (sandbox_url, else https://49999-<id>.<domain>, authenticated by the
 * sandbox's own access tokens): POST /execute, whose NDJSON answer is read
 * while it streams in. The API key never goes to the data plane, the sandbox
 * tokens never to the control plane, and the provider's sandbox id and
 * tokens never leave this file except in those calls.
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include <apr_atomic.h>
#include <apr_lib.h>
#include <apr_network_io.h>
#include <apr_strings.h>
#include <apr_uri.h>
#include "ci_config.h"
#include "ci_curl.h"
#include "ci_json.h"
#include "ci_log.h"
#include "ci_sandbox.h"
#include "ci_workers.h"

#define E2B_PORT "49999"
#define E2B_DEFAULT_DOMAIN "e2b.app"
#define CONTROL_CONNECT_MS 10000L
#define CONTROL_TOTAL_MS 30000L
#define DATA_CONNECT_MS 10000L
#define CONTROL_MAX_ANSWER ((apr_size_t)64 * 1024)
#define DELETE_RETRY_DELAY apr_time_from_msec(500)
/* A sandbox must outlive the longest execution by this much. */
#define LIFETIME_MARGIN_S 30
#define MAX_TOKEN_LEN 4096

#define MSG_STOPPED "The execution was stopped because the request ended."
#define MSG_EXPIRED "The sandbox expired (its lifetime ran out) and was " \
                    "discarded."

struct ci_sandbox {
    apr_pool_t *p;
    const ci_sandbox_def *def;
    CURL *curl;               /* reused: keeps both planes' connections warm */
    char *id;                 /* the provider's sandbox id */
    char *api_key;            /* the key this sandbox was created with */
    const char *api_base;     /* without a trailing slash */
    const char *data_base;    /* without a trailing slash */
    char *envd_token;         /* X-Access-Token */
    char *traffic_token;      /* E2B-Traffic-Access-Token, or NULL */
    volatile apr_uint32_t interrupted;
};

/* ---- secrets ------------------------------------------------------------ */

static void wipe(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
}

static char *wiped_free(char *s)
{
    wipe(s);
    free(s);
    return NULL;
}

/* Add "NAME: VALUE" to *LIST without leaving a copy of VALUE behind. An
 * empty VALUE ("NAME:") stops libcurl from sending a header of its own. */
static int add_header(struct curl_slist **list, const char *name,
                      const char *value)
{
    apr_size_t n = strlen(name) + strlen(value) + 3;
    char *line = malloc(n);
    struct curl_slist *next;
    if (!line)
        return -1;
    apr_snprintf(line, n, *value ? "%s: %s" : "%s:", name, value);
    next = curl_slist_append(*list, line);
    wiped_free(line);
    if (!next)
        return -1;
    *list = next;
    return 0;
}

static void free_headers(struct curl_slist *list)
{
    struct curl_slist *h;
    for (h = list; h; h = h->next)
        wipe(h->data);
    curl_slist_free_all(list);
}

/* ---- what the service returns ------------------------------------------ */

/* Provider ids go into URL paths and host names: letters, digits, - and _. */
static int valid_id(const char *s)
{
    apr_size_t n = 0;
    for (; s[n]; n++)
        if (!apr_isalnum(s[n]) && s[n] != '-' && s[n] != '_')
            return 0;
    return n > 0 && n <= 128;
}

static int valid_domain(const char *s)
{
    apr_size_t n = 0;
    if (*s == '.' || *s == '-')
        return 0;
    for (; s[n]; n++)
        if (!apr_isalnum(s[n]) && s[n] != '-' && s[n] != '.')
            return 0;
    return n > 0 && n <= 253;
}

/* Tokens go into header values: visible ASCII only. */
static int valid_token(const char *s)
{
    apr_size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f)
            return 0;
    return n > 0 && n <= MAX_TOKEN_LEN;
}

static const char *trim_slash(apr_pool_t *p, const char *url)
{
    apr_size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    return apr_pstrmemdup(p, url, n);
}

/* The domain of sandbox hosts when the service names none: that of the API
 * host (api.<domain>), else the public service's. */
static const char *default_domain(apr_pool_t *p, const char *api_base)
{
    apr_uri_t uri;
    if (apr_uri_parse(p, api_base, &uri) == APR_SUCCESS && uri.hostname &&
        !strncasecmp(uri.hostname, "api.", 4) && valid_domain(uri.hostname + 4))
        return uri.hostname + 4;
    return E2B_DEFAULT_DOMAIN;
}

/* Seconds the sandbox lives after each call: the configured lifetime, but
 * never less than one execution needs. */
static int lifetime_of(const ci_sandbox_def *def)
{
    int need = (int)apr_time_sec(def->timeout) + LIFETIME_MARGIN_S;
    return def->lifetime > need ? def->lifetime : need;
}

/* ---- HTTP --------------------------------------------------------------- */

/* A control-plane answer: one allocation of a fixed size, never grown (not
 * a ci_buf), because it holds the sandbox's tokens and is wiped after use:
 * growing would leave copies behind in the pool. */
typedef struct answer {
    char *buf;            /* NULL: the body is read and dropped */
    apr_size_t len, cap;
    int over;
} answer;

static size_t on_answer(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    answer *a = userdata;
    size_t n = size * nmemb;
    if (!a->buf)
        return n;
    if (a->len + n > a->cap) {
        a->over = 1;
        return 0;
    }
    memcpy(a->buf + a->len, ptr, n);
    a->len += n;
    return n;
}

static int is_interrupted(ci_sandbox *sb)
{
    return apr_atomic_read32(&sb->interrupted) != 0;
}

static int interrupted_cb(void *sb)
{
    return is_interrupted(sb);
}

/* Transport options of every call. SB: abort when it is interrupted. T must
 * outlive the call. */
static void set_transport(CURL *h, ci_curl_transport *t, long connect_ms,
                          long total_ms, ci_sandbox *sb)
{
    memset(t, 0, sizeof(*t));
    t->connect_timeout = apr_time_from_msec(connect_ms);
    t->timeout = apr_time_from_msec(total_ms);
    if (sb) {
        t->abort = interrupted_cb;
        t->abort_baton = sb;
    }
    ci_curl_set_transport(h, t);
}

static void set_body(CURL *h, const char *body, apr_size_t len)
{
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
}

/* One control-plane call (METHOD is POST with BODY, or DELETE). *STATUS is
 * the HTTP status, 0 when none arrived. SB: abort when it is interrupted. */
static CURLcode control_call(CURL *h, const char *method, const char *url,
                             const char *key, const char *body, answer *ans,
                             ci_sandbox *sb, long *status)
{
    struct curl_slist *hdrs = NULL;
    answer drop = { NULL, 0, 0, 0 };
    ci_curl_transport t;
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    *status = 0;
    curl_easy_reset(h);
    if (add_header(&hdrs, "X-API-Key", key) ||
        add_header(&hdrs, "Accept", "application/json") ||
        add_header(&hdrs, "Expect", "") ||
        (body && add_header(&hdrs, "Content-Type", "application/json")))
        goto leave;
    set_transport(h, &t, CONTROL_CONNECT_MS, CONTROL_TOTAL_MS, sb);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (body)
        set_body(h, body, strlen(body));
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_answer);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, ans ? ans : &drop);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
leave:
    /* The handle keeps pointers to the list: drop them before freeing it. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    free_headers(hdrs);
    return rc;
}

/* ---- deleting ----------------------------------------------------------- */

/* What a delete needs, owned by the job (malloc'd: it outlives the sandbox
 * and its pool). */
typedef struct e2b_delete {
    CURL *h;
    char *url;
    char *key;
} e2b_delete;

static void delete_free(e2b_delete *d)
{
    if (d->h)
        curl_easy_cleanup(d->h);
    free(d->url);
    wiped_free(d->key);
    free(d);
}

/* 204 and 404 both mean the sandbox is gone; anything else is tried once
 * more. APR_SUCCESS when it is gone; otherwise *WHY says what the service
 * did (the sandbox then ends with its lifetime). */
static apr_status_t delete_run_status(e2b_delete *d, const char **why)
{
    static __thread char msg[160];
    int attempt;

    if (!d->h)
        d->h = curl_easy_init();
    *why = "could not create an HTTP client handle";
    for (attempt = 0; d->h && attempt < 2; attempt++) {
        long status;
        CURLcode rc = control_call(d->h, "DELETE", d->url, d->key, NULL, NULL,
                                   NULL, &status);
        if (rc == CURLE_OK && (status == 204 || status == 404 || status == 200))
            return APR_SUCCESS;
        if (rc != CURLE_OK)
            apr_snprintf(msg, sizeof(msg), "the E2B sandbox service could not be "
                         "reached (%s)", curl_easy_strerror(rc));
        else
            apr_snprintf(msg, sizeof(msg), "the E2B sandbox service answered "
                         "HTTP %ld", status);
        *why = msg;
        if (attempt == 0)
            apr_sleep(DELETE_RETRY_DELAY);
    }
    return APR_EGENERAL;
}

/* The job of a sandbox's own delete: a failure is logged, never silent. */
static void delete_run(void *baton)
{
    e2b_delete *d = baton;
    const char *why;
    if (delete_run_status(d, &why) != APR_SUCCESS)
        ci_log(CI_LOG_WARNING, "CI0311: an E2B sandbox could not be deleted (%s); "
               "it ends when its lifetime runs out", why);
    delete_free(d);
}

/* Delete SB's provider sandbox off the request path (inline when no worker
 * takes the job). The job takes SB's handle and its warm connection. */
static void delete_sandbox(ci_sandbox *sb)
{
    e2b_delete *d = calloc(1, sizeof(*d));
    apr_size_t n;

    if (!d)
        return;
    n = strlen(sb->api_base) + strlen(sb->id) + sizeof("/sandboxes/");
    d->url = malloc(n);
    d->key = strdup(sb->api_key);
    if (!d->url || !d->key) {
        delete_free(d);
        return;
    }
    apr_snprintf(d->url, n, "%s/sandboxes/%s", sb->api_base, sb->id);
    d->h = sb->curl;
    sb->curl = NULL;
    if (ci_job_fire(delete_run, d) != APR_SUCCESS)
        delete_run(d);
}

/* ---- starting ----------------------------------------------------------- */

static apr_status_t sandbox_cleanup(void *data)
{
    ci_sandbox *sb = data;
    wipe(sb->api_key);
    wipe(sb->envd_token);
    wipe(sb->traffic_token);
    if (sb->curl) {
        curl_easy_cleanup(sb->curl);
        sb->curl = NULL;
    }
    return APR_SUCCESS;
}

static const char *create_body(apr_pool_t *p, const ci_sandbox_def *def,
                               const char *tag)
{
    json_object *body = ci_json_own(p, json_object_new_object());
    json_object *meta = json_object_new_object();
    char host[APRMAXHOSTLEN + 1];

    if (apr_gethostname(host, sizeof(host), p) != APR_SUCCESS)
        apr_cpystrn(host, "unknown", sizeof(host));
    json_object_object_add(meta, "mod_code_interpreter", json_object_new_string("1"));
    json_object_object_add(meta, "server", json_object_new_string(host));
    json_object_object_add(meta, "request", json_object_new_string(tag ? tag : ""));
    json_object_object_add(body, "templateID",
                           json_object_new_string(def->template_id));
    json_object_object_add(body, "timeout", json_object_new_int(lifetime_of(def)));
    json_object_object_add(body, "secure", json_object_new_boolean(1));
    json_object_object_add(body, "allow_internet_access",
                           json_object_new_boolean(def->internet ? 1 : 0));
    json_object_object_add(body, "metadata", meta);
    return ci_json_pstr(p, body, NULL);
}

/* The service's own message from an error body {code, message}: short,
 * printable, and never anything holding KEY. */
static const char *service_message(apr_pool_t *p, const answer *a, const char *key)
{
    const char *err, *msg;
    json_object *root;
    char *out, *c;

    if (!a->len || a->over || !(root = ci_json_parse(p, a->buf, a->len, &err)))
        return NULL;
    if (!(msg = ci_json_str(root, "message")) || !*msg || strstr(msg, key))
        return NULL;
    out = apr_pstrndup(p, msg, 200);
    for (c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    return out;
}

static const char *refused(apr_pool_t *p, long status, const answer *a,
                           const char *key)
{
    const char *msg = service_message(p, a, key);
    return apr_psprintf(p, "the E2B sandbox service refused to create a sandbox "
                           "(HTTP %ld%s%s)", status, msg ? ": " : "",
                        msg ? msg : "");
}

static const char *unreachable(apr_pool_t *p, CURLcode rc, const answer *a)
{
    if (a->over)
        return "the E2B sandbox service answered with an oversized body";
    return apr_psprintf(p, "the E2B sandbox service could not be reached (%s)",
                        curl_easy_strerror(rc));
}

/* Copy what a 201 answer says into SB. NULL, or why it is not usable (SB->id
 * is set when a sandbox exists all the same). */
static const char *take_created(ci_sandbox *sb, apr_pool_t *tmp, const answer *a)
{
    json_object *root;
    const char *err, *id, *envd, *traffic, *domain, *why = NULL;

    if (a->over || !(root = ci_json_parse(tmp, a->buf, a->len, &err)))
        return "the E2B sandbox service answered with an unreadable body";
    id = ci_json_str(root, "sandboxID");
    envd = ci_json_str(root, "envdAccessToken");
    traffic = ci_json_str(root, "trafficAccessToken");
    domain = ci_json_str(root, "domain");
    if (!id || !valid_id(id))
        why = "the E2B sandbox service answered without a usable sandbox id";
    else {
        sb->id = apr_pstrdup(sb->p, id);
        if (!envd || !valid_token(envd))
            why = "the E2B sandbox service created a sandbox without an access "
                  "token (the data plane cannot be secured)";
        else if (traffic && *traffic && !valid_token(traffic))
            why = "the E2B sandbox service answered with an unusable traffic "
                  "token";
        else if (domain && *domain && !valid_domain(domain))
            why = "the E2B sandbox service answered with an unusable domain";
    }
    if (!why) {
        sb->envd_token = apr_pstrdup(sb->p, envd);
        sb->traffic_token = traffic && *traffic ? apr_pstrdup(sb->p, traffic) : NULL;
        if (sb->def->sandbox_url)
            sb->data_base = trim_slash(sb->p, sb->def->sandbox_url);
        else
            sb->data_base = apr_pstrcat(sb->p, "https://" E2B_PORT "-", sb->id, ".",
                                        domain && *domain ? domain
                                            : default_domain(sb->p, sb->api_base),
                                        NULL);
    }
    return why;
}

static apr_status_t e2b_start(apr_pool_t *p, const ci_sandbox_def *def,
                              const char *tag, ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    answer ans = { NULL, 0, CONTROL_MAX_ANSWER, 0 };
    apr_status_t rv = APR_EGENERAL;
    apr_pool_t *tmp;
    CURLcode rc;
    long status;

    if (!def->api_key || !*def->api_key) {
        *err = "no E2B API key is configured";
        return APR_EINIT;
    }
    sb->p = p;
    sb->def = def;
    apr_pool_cleanup_register(p, sb, sandbox_cleanup, apr_pool_cleanup_null);
    if (!(sb->curl = curl_easy_init())) {
        *err = "could not create an HTTP client handle";
        return APR_ENOMEM;
    }
    sb->api_key = apr_pstrdup(p, def->api_key);
    sb->api_base = trim_slash(p, def->api_base);
    /* The request and the answer (tokens in it) live only until here. */
    apr_pool_create(&tmp, p);
    ans.buf = apr_palloc(tmp, ans.cap);
    rc = control_call(sb->curl, "POST", apr_pstrcat(tmp, sb->api_base, "/sandboxes", NULL),
                      sb->api_key, create_body(tmp, def, tag), &ans, NULL, &status);
    if (rc != CURLE_OK) {
        *err = unreachable(p, rc, &ans);
        rv = rc == CURLE_OPERATION_TIMEDOUT ? APR_TIMEUP : APR_ECONNREFUSED;
    }
    else if (status != 201)
        *err = refused(p, status, &ans, sb->api_key);
    else if ((*err = take_created(sb, tmp, &ans)) != NULL) {
        if (sb->id)
            delete_sandbox(sb);   /* it exists all the same */
    }
    else {
        *out = sb;
        rv = APR_SUCCESS;
    }
    explicit_bzero(ans.buf, ans.len);
    apr_pool_destroy(tmp);
    return rv;
}

/* ---- running ------------------------------------------------------------ */

/* Extend the lifetime before an execution. Only "the sandbox is gone" (404)
 * and an interrupt matter; any other failure is ignored. CI_EXEC_COMPLETED
 * when the execution may go ahead, else why not (*MSG for the model). */
static ci_exec_outcome extend_lifetime(ci_sandbox *sb, apr_pool_t *p, const char **msg)
{
    const char *url = apr_pstrcat(p, sb->api_base, "/sandboxes/", sb->id,
                                  "/timeout", NULL);
    const char *body = apr_psprintf(p, "{\"timeout\":%d}", lifetime_of(sb->def));
    long status;
    CURLcode rc = control_call(sb->curl, "POST", url, sb->api_key, body, NULL,
                               sb, &status);
    if (rc == CURLE_ABORTED_BY_CALLBACK || is_interrupted(sb)) {
        *msg = MSG_STOPPED;
        return CI_EXEC_INTERRUPTED;
    }
    if (rc == CURLE_OK && status == 404) {
        *msg = MSG_EXPIRED;
        return CI_EXEC_LOST;
    }
    return CI_EXEC_COMPLETED;
}

typedef struct stream {
    CURL *h;
    ci_ndjson *nd;
    long status;
    apr_size_t other;     /* bytes of a non-200 body, dropped */
} stream;

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream *st = userdata;
    size_t n = size * nmemb;
    if (!st->status)
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status != 200) {
        st->other += n;
        return st->other > CONTROL_MAX_ANSWER ? 0 : n;
    }
    return ci_ndjson_feed(st->nd, ptr, n) < 0 ? 0 : n;
}

static int data_headers(ci_sandbox *sb, struct curl_slist **hdrs)
{
    return add_header(hdrs, "Content-Type", "application/json") ||
           add_header(hdrs, "Expect", "") ||
           add_header(hdrs, "X-Access-Token", sb->envd_token) ||
           (sb->traffic_token &&
            add_header(hdrs, "E2B-Traffic-Access-Token", sb->traffic_token)) ||
           add_header(hdrs, "E2b-Sandbox-Id", sb->id) ||
           add_header(hdrs, "E2b-Sandbox-Port", E2B_PORT);
}

static const char *status_failure(apr_pool_t *p, long status)
{
    if (status == 502)
        return "The sandbox did not answer (HTTP 502): it has timed out or was "
               "stopped.";
    return apr_psprintf(p, "The sandbox refused the execution (HTTP %ld).", status);
}

/* How the execution ended, from how the transfer ended (*MSG for the
 * model); CI_EXEC_COMPLETED lets the reader decide (completed, error, cut or
 * too much output). */
static ci_exec_outcome stream_failure(ci_sandbox *sb, apr_pool_t *p, const stream *st,
                                      CURLcode rc, apr_interval_time_t took,
                                      const char **msg)
{
    if (ci_ndjson_ended(st->nd))
        return CI_EXEC_COMPLETED;
    if (rc == CURLE_ABORTED_BY_CALLBACK || is_interrupted(sb)) {
        *msg = MSG_STOPPED;
        return CI_EXEC_INTERRUPTED;
    }
    if (st->status && st->status != 200) {
        *msg = status_failure(p, st->status);
        return CI_EXEC_LOST;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT && (st->status || took >= sb->def->timeout)) {
        *msg = apr_psprintf(p, "The execution timed out after %d s and was "
                               "stopped.", (int)apr_time_sec(sb->def->timeout));
        return CI_EXEC_TIMED_OUT;
    }
    if (rc != CURLE_OK && !st->status) {
        /* The model is told what happened; the operator, where. */
        *msg = apr_psprintf(p, "The sandbox could not be reached (%s).",
                            curl_easy_strerror(rc));
        ci_log(CI_LOG_WARNING, "CI0312: the E2B sandbox at %s could not be reached (%s)",
               sb->data_base, curl_easy_strerror(rc));
        return CI_EXEC_LOST;
    }
    return CI_EXEC_COMPLETED;
}

static ci_exec_outcome execute(ci_sandbox *sb, apr_pool_t *p, const char *code,
                               ci_ndjson *nd, const char **msg)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    struct curl_slist *hdrs = NULL;
    stream st = { sb->curl, nd, 0, 0 };
    long total_ms = (long)apr_time_as_msec(sb->def->timeout);
    apr_time_t began = apr_time_now();
    ci_curl_transport t;
    const char *body;
    apr_size_t len;
    CURLcode rc;

    json_object_object_add(req, "code", json_object_new_string(code));
    body = ci_json_pstr(p, req, &len);
    curl_easy_reset(sb->curl);
    if (data_headers(sb, &hdrs)) {
        free_headers(hdrs);
        *msg = "The sandbox request could not be prepared (out of memory).";
        return CI_EXEC_LOST;
    }
    set_transport(sb->curl, &t, DATA_CONNECT_MS, total_ms > 0 ? total_ms : 1L, sb);
    curl_easy_setopt(sb->curl, CURLOPT_URL,
                     apr_pstrcat(p, sb->data_base, "/execute", NULL));
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, hdrs);
    set_body(sb->curl, body, len);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(sb->curl, CURLOPT_WRITEDATA, &st);
    rc = curl_easy_perform(sb->curl);
    if (!st.status)
        curl_easy_getinfo(sb->curl, CURLINFO_RESPONSE_CODE, &st.status);
    curl_easy_setopt(sb->curl, CURLOPT_HTTPHEADER, NULL);
    free_headers(hdrs);
    return stream_failure(sb, p, &st, rc, apr_time_now() - began, msg);
}

static apr_status_t e2b_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                            ci_exec_result *res)
{
    apr_time_t began = apr_time_now();
    ci_exec_result got;
    ci_exec_outcome why = CI_EXEC_INTERRUPTED;
    const char *msg = MSG_STOPPED;
    apr_pool_t *tmp;
    ci_ndjson *nd;

    /* The reader and its line buffer live only as long as this execution. */
    apr_pool_create(&tmp, p);
    nd = ci_ndjson_create(tmp, sb->def->max_output, CI_HARD_OUTPUT_CAP);
    if (!is_interrupted(sb) &&
        (why = extend_lifetime(sb, tmp, &msg)) == CI_EXEC_COMPLETED)
        why = execute(sb, tmp, code, nd, &msg);
    ci_ndjson_result(nd, why, why == CI_EXEC_COMPLETED ? NULL : msg, &got);
    *res = *ci_exec_result_copy(p, &got);
    res->duration = apr_time_now() - began;
    apr_pool_destroy(tmp);
    return APR_SUCCESS;
}

static void e2b_interrupt(ci_sandbox *sb)
{
    apr_atomic_set32(&sb->interrupted, 1);
}

static void e2b_destroy(ci_sandbox *sb)
{
    if (sb->id)
        delete_sandbox(sb);
    sandbox_cleanup(sb);
}

static const char *e2b_remote_id(ci_sandbox *sb)
{
    return sb->id;
}

/* ---- what a dead process left ------------------------------------------ */

static int e2b_reap_cred(const ci_sandbox_def *d, ci_reap_cred *out)
{
    if (!d->api_key)
        return 0;
    out->locator = d->api_base;
    out->secret = d->api_key;
    return 1;
}

static apr_status_t e2b_reap(const ci_reap_cred *cred, const char *id, const char **err)
{
    e2b_delete *d;
    apr_size_t n;
    apr_status_t rv;
    if (!valid_id(id)) {
        *err = "the sandbox id is not one the service makes";
        return APR_EINVAL;
    }
    if (!(d = calloc(1, sizeof(*d)))) {
        *err = "out of memory";
        return APR_ENOMEM;
    }
    n = strlen(cred->locator) + strlen(id) + sizeof("/sandboxes/");
    d->url = malloc(n);
    d->key = strdup(cred->secret);
    if (!d->url || !d->key) {
        delete_free(d);
        *err = "out of memory";
        return APR_ENOMEM;
    }
    apr_snprintf(d->url, n, "%s/sandboxes/%s", cred->locator, id);
    {
        /* api_base may end with '/': "x//sandboxes" -> "x/sandboxes" */
        char *dbl = strstr(d->url, "//sandboxes/");
        if (dbl)
            memmove(dbl, dbl + 1, strlen(dbl));
    }
    rv = delete_run_status(d, err);
    delete_free(d);
    return rv;
}

/* ---- the tool's keys ----------------------------------------------------- */

static void e2b_defaults(ci_sandbox_def *d)
{
    d->api_key_spec = "env:E2B_API_KEY";
    d->api_base = "https://api.e2b.app";
    d->template_id = "code-interpreter-v1";
    d->lifetime = 300;
    d->internet = 0;
    d->sandbox_url = NULL;
}

static const char *e2b_parse_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                 const char *v, int *known)
{
    *known = 1;
    if (!strcmp(key, "api_key")) {
        if (!*v)
            return "an empty value is not valid: expected env:VAR, file:PATH or the key";
        d->api_key_spec = v;
        return NULL;
    }
    if (!strcmp(key, "api_base")) {
        d->api_base = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "sandbox_url")) {
        d->sandbox_url = v;
        return ci_parse_url(p, v);
    }
    if (!strcmp(key, "template")) {
        if (!*v)
            return "an empty value is not valid: expected a template name";
        d->template_id = v;
        return NULL;
    }
    if (!strcmp(key, "lifetime"))
        return ci_parse_seconds(p, v, CI_MAX_SECONDS, &d->lifetime);
    if (!strcmp(key, "internet"))
        return ci_parse_on_off(p, v, &d->internet);
    *known = 0;
    return NULL;
}

static const char *e2b_resolve(apr_pool_t *p, ci_sandbox_def *d)
{
    return ci_resolve_secret(p, "api_key", d->api_key_spec, &d->api_key);
}

const ci_provider ci_provider_e2b = {
    .name = "e2b",
    .keys = "api_key, api_base, template, lifetime, internet, sandbox_url",
    .defaults = e2b_defaults,
    .parse_key = e2b_parse_key,
    .resolve = e2b_resolve,
    .start = e2b_start,
    .run = e2b_run,
    .interrupt = e2b_interrupt,
    .destroy = e2b_destroy,
    .remote_id = e2b_remote_id,
    .reap_cred = e2b_reap_cred,
    .reap = e2b_reap,
};
