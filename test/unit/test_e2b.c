/*
 * test_e2b.c - the e2b sandbox provider against the fake E2B service
 * (test/fake_e2b.py), driven directly through E2B->
 *
 * The fake is started by the caller; its port comes from FAKE_E2B_PORT.
 * Every test resets the fake, sets its switches through /_control and reads
 * what it saw from /_state. With E2B_TEST_INLINE set, no worker pool is
 * started and deletes run inline (ci_job_fire refuses); otherwise they run
 * on the pool, and the tests wait for them.
 *
 * Usage: test_e2b [--list | NAME-PATTERN]
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <json-c/json.h>

#include "ci_cfiles.h"
#include "ci_config.h"
#include "ci_exec.h"
#include "ci_log.h"
#include "ci_sandbox.h"
#include "e2b_internal.h"
#include "ci_workers.h"

#define E2B (ci_provider_named("e2b"))

#define KEY "e2b_test_key"
#define TAG "cntr_0123456789abcdef"

/* What the provider tells the model (sandbox_e2b.c, ci_exec.c). */
#define CUT "The sandbox stopped answering: the output stream was cut."
#define DIED "The interpreter died during the execution."
#define EXPIRED "The sandbox expired (its lifetime ran out) and was discarded."
#define TOO_MUCH "The execution produced more output than the sandbox accepts " \
                 "and was stopped."
#define STOPPED "The execution was stopped because the request ended."
#define NOT_REACHED "The sandbox could not be reached (Couldn't connect to server)."
#define RESTARTED " The container's interpreter was restarted: its variables and " \
                  "imports are gone (its files are kept)."
#define GONE_404 "the E2B sandbox no longer exists (HTTP 404)"
#define GONE_CAP "the E2B sandbox has lived as long as the E2B plan allows (HTTP 400: " \
                 "Max instance length exceeded)"
#define BAD_HANDLE "the container's E2B handle is not usable"
#define IDLE 600
#define REFUSED "the E2B sandbox service refused to create a sandbox "
#define NO_TOKEN "the E2B sandbox service created a sandbox without an access " \
                 "token (the data plane cannot be secured)"
/* The fake's image (fake_e2b.py PNG_BASE64). */
#define FAKE_PNG "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="

static const char *fake_base;
static apr_pool_t *global_pool;

/* ======================================================================== */
/* talking to the fake                                                      */
/* ======================================================================== */

typedef struct buf {
    char *data;
    size_t len;
} buf;

static size_t collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
    buf *b = ud;
    size_t n = size * nmemb;
    char *grown = realloc(b->data, b->len + n + 1);
    if (!grown)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* METHOD PATH on the fake with an optional JSON BODY; the parsed answer
 * (the caller puts it). */
static json_object *fake_call(const char *method, const char *path, const char *body)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    char url[512];
    buf b = { NULL, 0 };
    long status = 0;
    json_object *out;

    snprintf(url, sizeof(url), "%s%s", fake_base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (curl_easy_perform(h) != CURLE_OK)
        fail_msg("the fake E2B service at %s does not answer", fake_base);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    if (status != 200)
        fail_msg("%s %s: HTTP %ld %s", method, path, status, b.data ? b.data : "");
    out = json_tokener_parse(b.data ? b.data : "null");
    free(b.data);
    return out;
}

static void fake_reset(void)
{
    json_object_put(fake_call("POST", "/_reset", NULL));
}

/* ---- what the provider logs (ci_log) ---------------------------------- */

static apr_thread_mutex_t *log_lock;
static char logged[16384];
static size_t logged_len;

static void log_sink(ci_log_level level, const char *file, int line, const char *msg)
{
    size_t n = strlen(msg);
    apr_thread_mutex_lock(log_lock);
    if (logged_len + n + 1 < sizeof(logged)) {
        memcpy(logged + logged_len, msg, n);
        logged[logged_len + n] = '\n';
        logged_len += n + 1;
        logged[logged_len] = '\0';
    }
    apr_thread_mutex_unlock(log_lock);
}

static void log_reset(void)
{
    apr_thread_mutex_lock(log_lock);
    logged_len = 0;
    logged[0] = '\0';
    apr_thread_mutex_unlock(log_lock);
}

/* Every line logged since the test began, each ending in a newline. */
static const char *log_text(apr_pool_t *p)
{
    const char *copy;
    apr_thread_mutex_lock(log_lock);
    copy = apr_pstrdup(p, logged);
    apr_thread_mutex_unlock(log_lock);
    return copy;
}

static void fake_switch(const char *json)
{
    json_object_put(fake_call("POST", "/_control", json));
}

static json_object *fake_state(void)
{
    return fake_call("GET", "/_state", NULL);
}

static json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

static const char *str_member(json_object *o, const char *key)
{
    json_object *v = member(o, key);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v)
                                                          : NULL;
}

static size_t state_len(const char *key)
{
    json_object *st = fake_state();
    size_t n = json_object_array_length(member(st, key));
    json_object_put(st);
    return n;
}

/* Wait until the fake has seen at least N deletes (they may run on a
 * worker thread). */
static void wait_deletes(size_t n)
{
    int i;
    for (i = 0; i < 200 && state_len("deletes") < n; i++)
        apr_sleep(apr_time_from_msec(50));
    if (state_len("deletes") < n)
        fail_msg("still waiting after 10 s for %d delete(s); the fake saw %d", (int)n,
                 (int)state_len("deletes"));
}

static int peer_in(json_object *peers, const char *peer)
{
    size_t i;
    for (i = 0; i < json_object_array_length(peers); i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(peers, i)), peer))
            return 1;
    return 0;
}

/* How many of the connections that carried the provider's calls (creates,
 * lifetime extensions, executions, context calls, deletes) are still open. */
static int connections_open(void)
{
    static const char *const lists[] = { "creates", "timeouts", "executes", "contexts",
                                         "restarts", "deletes" };
    json_object *st = fake_state(), *closed = member(st, "closed");
    int open = 0;
    size_t l, i;
    for (l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        json_object *calls = member(st, lists[l]);
        for (i = 0; i < json_object_array_length(calls); i++)
            if (!peer_in(closed, str_member(json_object_array_get_idx(calls, i), "peer")))
                open++;
    }
    json_object_put(st);
    return open;
}

/* Wait until the provider is done with the sandbox: its delete (and the
 * retry, if any) has run and closed the last connection it had, so no call
 * of it can still come. */
static void wait_done(void)
{
    int i;
    for (i = 0; i < 200 && connections_open(); i++)
        apr_sleep(apr_time_from_msec(50));
    if (connections_open())
        fail_msg("still waiting after 10 s for the provider's connections to close "
                 "(%d open)", connections_open());
}

static void assert_no_leaks(void)
{
    json_object *st = fake_state();
    json_object *leaks = member(st, "leaks");
    if (json_object_array_length(leaks) != 0)
        fail_msg("secrets crossed planes: %s", json_object_to_json_string(leaks));
    json_object_put(st);
}

/* The provider id of the only sandbox created so far. */
static const char *created_id(apr_pool_t *p)
{
    json_object *st = fake_state();
    json_object *creates = member(st, "creates");
    const char *id;
    assert_int_equal(json_object_array_length(creates), 1);
    id = apr_pstrdup(p, str_member(json_object_array_get_idx(creates, 0), "id"));
    json_object_put(st);
    return id;
}

/* ======================================================================== */
/* helpers                                                                  */
/* ======================================================================== */

static int setup(void **state)
{
    apr_pool_t *p;
    if (apr_pool_create(&p, NULL) != APR_SUCCESS)
        return -1;
    *state = p;
    fake_reset();
    log_reset();
    return 0;
}

static int teardown(void **state)
{
    apr_pool_destroy(*state);
    return 0;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

static ci_sandbox_def *make_def(apr_pool_t *p)
{
    ci_sandbox_def *d = ci_sandbox_def_defaults(p, "cloud", ci_provider_named("e2b"));
    CI_E2B(d)->api_key = KEY;
    CI_E2B(d)->api_base = fake_base;
    CI_E2B(d)->sandbox_url = fake_base;
    return d;
}

/* No sandbox_url: the data plane is https://49999-<id>.<domain>, the domain
 * the create answer names, else api_base's (api.localhost: loopback). */
static ci_sandbox_def *def_without_sandbox_url(apr_pool_t *p)
{
    ci_sandbox_def *def = make_def(p);
    CI_E2B(def)->api_base = apr_psprintf(p, "http://api.localhost:%s/", getenv("FAKE_E2B_PORT"));
    CI_E2B(def)->sandbox_url = NULL;
    def->timeout = apr_time_from_sec(5);
    return def;
}

/* Start a sandbox in its own pool (as the session does). */
static ci_sandbox *start_ok(apr_pool_t *p, const ci_sandbox_def *def, apr_pool_t **sbpool)
{
    ci_sandbox *sb = NULL;
    const char *err = NULL;
    apr_pool_create(sbpool, p);
    if (E2B->start(*sbpool, def, TAG, &sb, &err) != APR_SUCCESS)
        fail_msg("start failed: %s", err ? err : "(no message)");
    assert_non_null(sb);
    return sb;
}

static void stop(ci_sandbox *sb, apr_pool_t *sbpool)
{
    E2B->destroy(sb);
    apr_pool_destroy(sbpool);
}

static ci_exec_result run(ci_sandbox *sb, apr_pool_t *p, const char *code)
{
    ci_exec_result res;
    memset(&res, 0xa5, sizeof(res));
    assert_int_equal(E2B->run(sb, p, code, &res), APR_SUCCESS);
    return res;
}

/* Start must fail; returns *err (checked to be free of secrets). */
static const char *start_fails(apr_pool_t *p, const ci_sandbox_def *def)
{
    apr_pool_t *sbpool;
    ci_sandbox *sb = NULL;
    const char *err = NULL, *copy;
    apr_pool_create(&sbpool, p);
    assert_int_not_equal(E2B->start(sbpool, def, TAG, &sb, &err),
                         APR_SUCCESS);
    assert_null(sb);
    assert_non_null(err);
    copy = apr_pstrdup(p, err);
    apr_pool_destroy(sbpool);
    assert_null(strstr(copy, CI_E2B(def)->api_key));
    assert_null(strstr(copy, "e2b_"));
    return copy;
}

/* Attach container TAG's sandbox (HANDLE: NULL for a new one) in its own
 * pool. */
static ci_sandbox *attach_ok(apr_pool_t *p, const ci_sandbox_def *def, const char *handle,
                             int idle, apr_pool_t **sbpool)
{
    ci_sandbox *sb = NULL;
    const char *err = NULL;
    apr_pool_create(sbpool, p);
    if (E2B->attach(*sbpool, def, TAG, handle, idle, &sb, &err) != APR_SUCCESS)
        fail_msg("attach failed: %s", err ? err : "(no message)");
    assert_non_null(sb);
    return sb;
}

/* Attach must fail with RV; returns *err (checked to be free of secrets:
 * the key and every token of the fake's sandboxes). */
static const char *attach_fails(apr_pool_t *p, const ci_sandbox_def *def, const char *handle,
                                apr_status_t rv)
{
    apr_pool_t *sbpool;
    ci_sandbox *sb = NULL;
    const char *err = NULL, *copy;
    json_object *st = fake_state();

    apr_pool_create(&sbpool, p);
    assert_int_equal(E2B->attach(sbpool, def, TAG, handle, IDLE, &sb, &err), rv);
    assert_null(sb);
    assert_non_null(err);
    copy = apr_pstrdup(p, err);
    apr_pool_destroy(sbpool);
    assert_null(strstr(copy, CI_E2B(def)->api_key));
    assert_null(strstr(copy, "e2b_"));
    json_object_object_foreach(member(st, "sandboxes"), sid, sbx) {
        (void)sid;
        assert_null(strstr(copy, str_member(sbx, "envdAccessToken")));
        assert_null(strstr(copy, str_member(sbx, "trafficAccessToken")));
    }
    json_object_put(st);
    return copy;
}

/* Let the container's sandbox go (it keeps running at the fake). */
static void let_go(ci_sandbox *sb, apr_pool_t *sbpool)
{
    E2B->release(sb);
    apr_pool_destroy(sbpool);
}

/* The id of the only execution context the provider created (in sandbox
 * ID). */
static const char *context_of(apr_pool_t *p, const char *id)
{
    json_object *st = fake_state();
    json_object *ctxs = member(st, "contexts"), *c;
    const char *cid;
    assert_int_equal(json_object_array_length(ctxs), 1);
    c = json_object_array_get_idx(ctxs, 0);
    assert_string_equal(str_member(c, "sandbox_id"), id);
    assert_int_equal(json_object_get_int(member(c, "status")), 200);
    cid = apr_pstrdup(p, str_member(c, "id"));
    json_object_put(st);
    return cid;
}

/* How many restarts of context CID the fake answered with STATUS. */
static int restarts_of(const char *cid, int status)
{
    json_object *st = fake_state(), *rs = member(st, "restarts");
    int n = 0;
    size_t i;
    for (i = 0; i < json_object_array_length(rs); i++) {
        json_object *r = json_object_array_get_idx(rs, i);
        if (!strcmp(str_member(r, "context_id"), cid) &&
            json_object_get_int(member(r, "status")) == status)
            n++;
    }
    json_object_put(st);
    return n;
}

/* Wait until the fake holds N executions at a gate. */
static void wait_held(size_t n)
{
    int i;
    for (i = 0; i < 200 && state_len("held") < n; i++)
        apr_sleep(apr_time_from_msec(50));
    if (state_len("held") != n)
        fail_msg("waited 10 s for %d held execution(s); the fake holds %d", (int)n,
                 (int)state_len("held"));
}

static void fake_release(const char *gate)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"gate\": \"%s\"}", gate);
    json_object_put(fake_call("POST", "/_release", body));
}

/* ======================================================================== */
/* tests                                                                    */
/* ======================================================================== */

/* Create, two executions sharing state, an image, an exception, delete. */
static void test_round_trip(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = start_ok(p, def, &sbpool);
    ci_exec_result r;

    r = run(sb, p, "x = 41\nprint('hello')");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_null(r.failure);
    assert_string_equal(r.text, "hello\n");
    assert_int_equal(r.text_len, 6);
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 0);
    assert_true(r.duration > 0);

    r = run(sb, p, "x + 1");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "42\n");

    r = run(sb, p, "print('__FAKE_PNG__')");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_int_equal(r.images->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(r.images, 0, const char *),
                        "data:image/png;base64," FAKE_PNG);
    assert_string_equal(r.text, "__FAKE_PNG__\n");

    r = run(sb, p, "1 / 0");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_int_equal(r.outcome == CI_EXEC_ERROR, 1);
    assert_null(r.failure);
    /* the kernel's traceback, as it formats it */
    {
        const char *head = "Traceback (most recent call last):\n";
        const char *tail = "\nZeroDivisionError: division by zero\n";
        assert_true(strlen(r.text) > strlen(head) + strlen(tail));
        assert_memory_equal(r.text, head, strlen(head));
        assert_non_null(strstr(r.text, "\n    1 / 0\n"));
        assert_string_equal(r.text + strlen(r.text) - strlen(tail), tail);
    }

    stop(sb, sbpool);
    wait_deletes(1);
    {
        json_object *st = fake_state();
        json_object *del = json_object_array_get_idx(member(st, "deletes"), 0);
        assert_int_equal(json_object_array_length(member(st, "live")), 0);
        assert_int_equal(json_object_get_int(member(del, "status")), 204);
        assert_string_equal(str_member(del, "api_key"), KEY);
        assert_int_equal(json_object_array_length(member(st, "deletes")), 1);
        json_object_put(st);
    }
    assert_no_leaks();
}

/* What the create call sends: the body, the key, and nothing of the data
 * plane. */
static void test_create_body(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = start_ok(p, def, &sbpool);
    json_object *st = fake_state();
    json_object *c = json_object_array_get_idx(member(st, "creates"), 0);
    json_object *body = member(c, "body"), *meta = member(body, "metadata");
    json_object *hdrs = member(c, "headers");

    assert_string_equal(str_member(c, "path"), "/sandboxes");
    assert_int_equal(json_object_get_int(member(c, "status")), 201);
    assert_string_equal(str_member(body, "templateID"), "code-interpreter-v1");
    assert_int_equal(json_object_get_int(member(body, "timeout")), 300);
    assert_true(json_object_is_type(member(body, "secure"), json_type_boolean));
    assert_true(json_object_get_boolean(member(body, "secure")));
    assert_true(json_object_is_type(member(body, "allow_internet_access"),
                                    json_type_boolean));
    assert_false(json_object_get_boolean(member(body, "allow_internet_access")));
    assert_string_equal(str_member(meta, "mod_code_interpreter"), "1");
    assert_string_equal(str_member(meta, "request"), TAG);
    assert_non_null(str_member(meta, "server"));
    assert_true(strlen(str_member(meta, "server")) > 0);
    assert_string_equal(str_member(hdrs, "x-api-key"), KEY);
    assert_string_equal(str_member(hdrs, "content-type"), "application/json");
    assert_null(member(hdrs, "x-access-token"));
    assert_null(member(hdrs, "e2b-traffic-access-token"));
    assert_null(member(hdrs, "expect"));
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* internet=on and lifetime= reach the create body. */
static void test_create_body_options(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    json_object *st, *body;

    def->network = 1;
    CI_E2B(def)->lifetime = 120;
    CI_E2B(def)->template_id = "my-template";
    sb = start_ok(p, def, &sbpool);
    st = fake_state();
    body = member(json_object_array_get_idx(member(st, "creates"), 0), "body");
    assert_true(json_object_get_boolean(member(body, "allow_internet_access")));
    assert_int_equal(json_object_get_int(member(body, "timeout")), 120);
    assert_string_equal(str_member(body, "templateID"), "my-template");
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A lifetime= shorter than an execution may take: the sandbox is asked to
 * live the execution timeout plus a margin, at creation and before each
 * execution. */
static void test_create_body_short_lifetime(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    json_object *st;

    CI_E2B(def)->lifetime = 10;
    def->timeout = apr_time_from_sec(60);
    sb = start_ok(p, def, &sbpool);
    run(sb, p, "print(1)");
    st = fake_state();
    assert_int_equal(json_object_get_int(member(member(json_object_array_get_idx(
                         member(st, "creates"), 0), "body"), "timeout")), 90);
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 1);
    assert_int_equal(json_object_get_int(member(json_object_array_get_idx(
                         member(st, "timeouts"), 0), "timeout")), 90);
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A domain in the create answer that is not a host name (here it would send
 * the sandbox's tokens to another host) is refused, and the sandbox the
 * service made is deleted. */
static void test_create_unusable_domain(void **state)
{
    apr_pool_t *p = *state;
    json_object *st;

    fake_switch("{\"domain\": \"sandbox.localhost@127.0.0.1:9\"}");
    assert_string_equal(start_fails(p, def_without_sandbox_url(p)),
                        "the E2B sandbox service answered with an unusable domain");
    wait_deletes(1);
    st = fake_state();
    assert_int_equal(json_object_get_int(member(st, "created")), 1);
    assert_int_equal(json_object_get_int(member(st, "deleted")), 1);
    assert_int_equal(json_object_array_length(member(st, "executes")), 0);
    json_object_put(st);
    assert_no_leaks();
}

/* Each execution first extends the lifetime, then posts /execute with the
 * sandbox's tokens and never the key. */
static void test_data_plane_headers(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = start_ok(p, def, &sbpool);
    const char *id = created_id(p);
    json_object *st, *ex, *hdrs, *sbs, *tm;
    size_t i;

    run(sb, p, "print(1)");
    run(sb, p, "print(2)");
    st = fake_state();
    sbs = member(member(st, "sandboxes"), id);
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 2);
    for (i = 0; i < 2; i++) {
        tm = json_object_array_get_idx(member(st, "timeouts"), i);
        assert_string_equal(str_member(tm, "id"), id);
        assert_int_equal(json_object_get_int(member(tm, "timeout")), 300);
        assert_int_equal(json_object_get_int(member(tm, "status")), 204);
    }
    assert_int_equal(json_object_array_length(member(st, "executes")), 2);
    ex = json_object_array_get_idx(member(st, "executes"), 0);
    hdrs = member(ex, "headers");
    assert_string_equal(str_member(ex, "path"), "/execute");
    assert_string_equal(str_member(hdrs, "x-access-token"),
                        str_member(sbs, "envdAccessToken"));
    assert_string_equal(str_member(hdrs, "e2b-traffic-access-token"),
                        str_member(sbs, "trafficAccessToken"));
    assert_string_equal(str_member(hdrs, "e2b-sandbox-id"), id);
    assert_string_equal(str_member(hdrs, "e2b-sandbox-port"), "49999");
    assert_string_equal(str_member(hdrs, "content-type"), "application/json");
    assert_null(member(hdrs, "x-api-key"));
    assert_null(member(hdrs, "expect"));
    assert_string_equal(str_member(member(ex, "body"), "code"), "print(1)");
    /* a request's sandbox runs in the default context */
    assert_null(member(member(ex, "body"), "context_id"));
    assert_int_equal(json_object_array_length(member(st, "contexts")), 0);
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* A large execution body goes out without "Expect: 100-continue" (no
 * round trip lost waiting for a go-ahead). */
static void test_large_code_no_expect(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    apr_size_t n = 2 * 1024 * 1024;
    char *code = apr_palloc(p, n + 1);
    json_object *st, *hdrs;
    ci_exec_result r;

    memset(code, 'a', n);
    memcpy(code, "print(7)  # ", 12);
    code[n] = '\0';
    r = run(sb, p, code);
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "7\n");
    st = fake_state();
    hdrs = member(json_object_array_get_idx(member(st, "executes"), 0), "headers");
    assert_null(member(hdrs, "expect"));
    assert_string_equal(str_member(hdrs, "content-length"), apr_psprintf(p, "%d", (int)n + 11));
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_garbage_lines_skipped(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"garbage_lines\": true}");
    r = run(sb, p, "print('a')\nprint('b')\n'c'");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "a\nb\n'c'\n");
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

static void test_cut_stream_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"cut_stream\": true}");
    r = run(sb, p, "print('partial')");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, CUT);
    assert_string_equal(r.text, "partial\n");
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_slow_stream_times_out(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    ci_exec_result r;

    def->timeout = apr_time_from_sec(1);
    sb = start_ok(p, def, &sbpool);
    fake_switch("{\"slow_stream\": 3}");
    r = run(sb, p, "print('a')\nprint('b')");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_TIMED_OUT);
    assert_string_equal(r.failure, "The execution timed out after 1 s and was stopped.");
    fake_switch("{\"slow_stream\": null}");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A quiet execution (keepalive lines only) is not a timeout. */
static void test_keepalive_lines_ignored(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"keepalive_interval\": 0.1}");
    r = run(sb, p, "import time\ntime.sleep(0.5)\nprint('done')");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "done\n");
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_huge_output_capped(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    ci_exec_result r;

    def->max_output = 2048;
    sb = start_ok(p, def, &sbpool);
    fake_switch("{\"huge_output\": 300000}");
    r = run(sb, p, "pass");
    assert_int_equal(ci_exec_failed(&r), 0);
    {
        /* the first 2048 bytes of the first line, then the marker */
        char *want = apr_palloc(p, 2048 + 1);
        memset(want, 'x', 2048);
        want[2048] = '\0';
        assert_string_equal(r.text, apr_pstrcat(p, want, "\n[... 297952 more bytes of "
                                                "output were cut ...]\n", NULL));
    }
    stop(sb, sbpool);
    wait_deletes(1);
}

/* Past the hard cap the transfer is stopped while it streams. */
static void test_output_past_hard_cap_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"huge_output\": 40000000}");
    r = run(sb, p, "pass");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, TOO_MUCH);
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_kernel_dies_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"kernel_dies\": true}");
    r = run(sb, p, "print(1)");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, DIED);
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_execute_502_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    fake_switch("{\"execute_status\": 502}");
    r = run(sb, p, "print(1)");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_string_equal(r.failure, "The sandbox did not answer (HTTP 502): it has timed "
                        "out or was stopped.");
    fake_switch("{\"execute_status\": 500}");
    r = run(sb, p, "print(1)");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_string_equal(r.failure, "The sandbox refused the execution (HTTP 500).");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* The lifetime extension answers 404: the sandbox is gone. */
static void test_expired_sandbox_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    ci_exec_result r;

    json_object_put(fake_call("POST", "/_expire", "{}"));
    r = run(sb, p, "print(1)");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, EXPIRED);
    assert_int_equal(state_len("executes"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
    wait_done();
    assert_int_equal(state_len("deletes"), 1);   /* answered 404: nothing to retry */
}

typedef struct runner {
    ci_sandbox *sb;
    apr_pool_t *p;
    ci_exec_result res;
    apr_status_t rv;
} runner;

static void *APR_THREAD_FUNC run_thread(apr_thread_t *t, void *data)
{
    runner *r = data;
    r->rv = E2B->run(r->sb, r->p, "import time\ntime.sleep(20)", &r->res);
    return NULL;
}

/* interrupt() from another thread stops a blocked execution promptly. */
static void test_interrupt_stops_run(void **state)
{
    apr_pool_t *p = *state, *sbpool, *rp;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    apr_thread_t *t;
    apr_status_t ignored;
    int i;
    runner r;
    ci_exec_result again;

    apr_pool_create(&rp, p);
    memset(&r, 0, sizeof(r));
    r.sb = sb;
    r.p = rp;
    assert_int_equal(apr_thread_create(&t, NULL, run_thread, &r, p), APR_SUCCESS);
    /* the execution has begun: the fake runs it */
    for (i = 0; i < 200 && state_len("executes") < 1; i++)
        apr_sleep(apr_time_from_msec(50));
    if (state_len("executes") < 1)
        fail_msg("the execution did not reach the fake within 10 s");
    E2B->interrupt(sb);
    apr_thread_join(&ignored, t);
    /* (without the interrupt it would have ended after 20 s, completed) */
    assert_int_equal(r.rv, APR_SUCCESS);
    assert_int_equal(ci_exec_failed(&r.res), 1);
    assert_int_equal(r.res.outcome, CI_EXEC_INTERRUPTED);
    assert_string_equal(r.res.failure, STOPPED);
    /* Once interrupted, nothing more runs. */
    again = run(sb, p, "print(1)");
    assert_int_equal(ci_exec_failed(&again), 1);
    assert_string_equal(again.failure, r.res.failure);
    assert_int_equal(state_len("executes"), 1);
    stop(sb, sbpool);
    wait_deletes(1);
}

static void test_create_refused(void **state)
{
    apr_pool_t *p = *state;
    static const int statuses[] = { 401, 403, 429, 500, 503 };
    /* the service's own message, from the error body (fake_e2b.py) */
    static const char *const messages[] = {
        "Invalid API key", "Forbidden", "Rate limit exceeded, please try again later",
        "Internal server error", "Service unavailable" };
    size_t i;

    for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        char sw[64];
        const char *err;
        snprintf(sw, sizeof(sw), "{\"create_status\": %d}", statuses[i]);
        fake_switch(sw);
        err = start_fails(p, make_def(p));
        assert_string_equal(err, apr_psprintf(p, REFUSED "(HTTP %d: %s)", statuses[i],
                                              messages[i]));
    }
    assert_int_equal(state_len("live"), 0);
}

/* A key the service does not know: refused, and the key is not repeated. */
static void test_wrong_key_not_in_error(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *def = make_def(p);
    const char *err;

    CI_E2B(def)->api_key = "e2b_wrong_0123456789";
    err = start_fails(p, def);
    assert_string_equal(err, REFUSED "(HTTP 401: Invalid API key)");
}

static void test_unreachable(void **state)
{
    apr_pool_t *p = *state;
    ci_sandbox_def *def = make_def(p);
    CI_E2B(def)->api_base = "http://127.0.0.1:1";
    assert_string_equal(start_fails(p, def), "the E2B sandbox service could not be "
                        "reached (Couldn't connect to server)");
}

/* A 201 without an access token fails, and the sandbox it made is deleted. */
static void test_create_without_token(void **state)
{
    apr_pool_t *p = *state;
    json_object *st;

    fake_switch("{\"create_without_token\": true}");
    assert_string_equal(start_fails(p, make_def(p)), NO_TOKEN);
    wait_deletes(1);
    st = fake_state();
    assert_int_equal(json_object_get_int(member(st, "created")), 1);
    assert_int_equal(json_object_get_int(member(st, "deleted")), 1);
    assert_int_equal(json_object_array_length(member(st, "live")), 0);
    json_object_put(st);
    assert_no_leaks();
}

static void test_delete_404_not_retried(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);

    fake_switch("{\"delete_status\": 404}");
    stop(sb, sbpool);
    wait_deletes(1);
    wait_done();
    assert_int_equal(state_len("deletes"), 1);
    assert_string_equal(log_text(p), "");
}

static void test_delete_500_retried_once(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);

    fake_switch("{\"delete_status\": 500}");
    stop(sb, sbpool);
    wait_deletes(2);
    wait_done();
    assert_int_equal(state_len("deletes"), 2);
    assert_string_equal(log_text(p), "CI0311: an E2B sandbox could not be deleted (the E2B "
                        "sandbox service answered HTTP 500); it ends when its lifetime "
                        "runs out\n");

}

/* The delete uses the key the sandbox was created with, even after the
 * configured key changed (a graceful reload rotating it). */
static void test_delete_after_key_rotation(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    char *key = apr_pstrdup(p, KEY);
    json_object *st, *del;

    CI_E2B(def)->api_key = key;
    sb = start_ok(p, def, &sbpool);
    memset(key, 'z', strlen(key));   /* the configuration's copy is gone */
    stop(sb, sbpool);
    wait_deletes(1);
    st = fake_state();
    del = json_object_array_get_idx(member(st, "deletes"), 0);
    assert_string_equal(str_member(del, "api_key"), KEY);
    assert_int_equal(json_object_get_int(member(del, "status")), 204);
    json_object_put(st);
}

/* An execution on a data plane host where nothing listens: the model is told
 * the sandbox could not be reached, the error log names the URL tried. */
static void run_unreachable(apr_pool_t *p, const ci_sandbox_def *def, const char *domain)
{
    apr_pool_t *sbpool;
    ci_sandbox *sb = start_ok(p, def, &sbpool);
    const char *id = created_id(p);
    ci_exec_result r = run(sb, p, "print(1)");

    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, NOT_REACHED);
    assert_string_equal(r.text, "");
    assert_string_equal(log_text(p), apr_psprintf(p, "CI0312: the E2B sandbox at "
                        "https://49999-%s.%s could not be reached (Couldn't connect to "
                        "server)\n", id, domain));
    assert_int_equal(state_len("executes"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* sandbox_url unset and no domain in the create answer: the data plane is
 * https://49999-<id>.<domain of api_base>. With api_base on api.localhost
 * that is a loopback name where nothing listens on 443, so the execution
 * fails as unreachable without ever leaving the host. */
static void test_default_data_host(void **state)
{
    apr_pool_t *p = *state;
    fake_switch("{\"create_without_domain\": true}");
    run_unreachable(p, def_without_sandbox_url(p), "localhost");
}

/* sandbox_url unset and a domain in the create answer: that domain, not
 * api_base's, names the data plane host. */
static void test_data_host_of_the_answer(void **state)
{
    apr_pool_t *p = *state;
    fake_switch("{\"domain\": \"sandboxes.localhost\"}");
    run_unreachable(p, def_without_sandbox_url(p), "sandboxes.localhost");
}


/* ---- containers ----------------------------------------------------------- */

/* attach without a handle: a sandbox living IDLE seconds unused, its
 * metadata naming the container, a Python context of its own that every
 * execution names. */
static void test_attach_creates_with_idle_timeout(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    const char *id = created_id(p), *cid = context_of(p, id);
    json_object *st, *body, *meta, *c, *hdrs, *sbx, *ex, *tm;
    ci_exec_result r;

    st = fake_state();
    body = member(json_object_array_get_idx(member(st, "creates"), 0), "body");
    meta = member(body, "metadata");
    assert_int_equal(json_object_get_int(member(body, "timeout")), IDLE);
    assert_string_equal(str_member(body, "templateID"), "code-interpreter-v1");
    assert_string_equal(str_member(meta, "container"), TAG);
    assert_string_equal(str_member(meta, "request"), TAG);
    assert_string_equal(str_member(meta, "mod_code_interpreter"), "1");
    c = json_object_array_get_idx(member(st, "contexts"), 0);
    assert_string_equal(str_member(c, "path"), "/contexts");
    assert_string_equal(json_object_to_json_string_ext(member(c, "body"),
                                                       JSON_C_TO_STRING_PLAIN),
                        "{\"language\":\"python\",\"cwd\":\"\\/home\\/user\"}");
    hdrs = member(c, "headers");
    sbx = member(member(st, "sandboxes"), id);
    assert_string_equal(str_member(hdrs, "e2b-traffic-access-token"),
                        str_member(sbx, "trafficAccessToken"));
    assert_string_equal(str_member(hdrs, "e2b-sandbox-id"), id);
    assert_null(member(hdrs, "x-api-key"));
    /* the default context and the container's */
    assert_int_equal(json_object_object_length(member(sbx, "contexts")), 2);
    assert_non_null(member(member(sbx, "contexts"), cid));
    assert_string_not_equal(str_member(sbx, "default_context_id"), cid);
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 0);
    json_object_put(st);

    r = run(sb, p, "x = 1\nprint(x)");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "1\n");
    st = fake_state();
    ex = json_object_array_get_idx(member(st, "executes"), 0);
    assert_string_equal(str_member(member(ex, "body"), "context_id"), cid);
    /* before the execution: the idle expiry (it exceeds what one needs) */
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 1);
    tm = json_object_array_get_idx(member(st, "timeouts"), 0);
    assert_int_equal(json_object_get_int(member(tm, "timeout")), IDLE);
    assert_int_equal(json_object_get_int(member(tm, "status")), 204);
    sbx = member(member(st, "sandboxes"), id);
    assert_int_equal(json_object_get_int(member(member(member(sbx, "contexts"), cid),
                                                "execution_count")), 1);
    assert_int_equal(json_object_get_int(member(member(member(sbx, "contexts"),
                                                       str_member(sbx, "default_context_id")),
                                                "execution_count")), 0);
    json_object_put(st);
    stop(sb, sbpool);   /* destroy deletes a container's sandbox */
    wait_deletes(1);
    assert_int_equal(state_len("live"), 0);
    assert_no_leaks();
}

/* A container whose idle expiry is shorter than an execution may take: each
 * execution is covered (timeout + 30 s), the create asks for the expiry. */
static void test_attach_short_idle(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    json_object *st;

    def->timeout = apr_time_from_sec(60);
    sb = attach_ok(p, def, NULL, 20, &sbpool);
    run(sb, p, "pass");
    st = fake_state();
    assert_int_equal(json_object_get_int(member(member(json_object_array_get_idx(
                         member(st, "creates"), 0), "body"), "timeout")), 20);
    assert_int_equal(json_object_get_int(member(json_object_array_get_idx(
                         member(st, "timeouts"), 0), "timeout")), 90);
    json_object_put(st);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* handle -> attach in a fresh ci_sandbox (another process would do the
 * same): the same sandbox and context, state kept, nothing created, its
 * life set to the idle expiry. */
static void test_handle_reattaches_same_sandbox(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    const char *id = created_id(p), *cid = context_of(p, id), *handle;
    json_object *st, *h, *sbx, *tm;
    ci_exec_result r;

    r = run(sb, p, "x = 41");
    assert_int_equal(ci_exec_failed(&r), 0);
    handle = E2B->handle(sb, p);
    assert_non_null(handle);
    assert_null(strstr(handle, KEY));
    st = fake_state();
    sbx = member(member(st, "sandboxes"), id);
    h = json_tokener_parse(handle);
    assert_non_null(h);
    assert_int_equal(json_object_object_length(h), 6);
    assert_int_equal(json_object_get_int(member(h, "version")), 1);
    assert_string_equal(str_member(h, "sandbox_id"), id);
    assert_string_equal(str_member(h, "data_url"), fake_base);
    assert_string_equal(str_member(h, "access_token"), str_member(sbx, "envdAccessToken"));
    assert_string_equal(str_member(h, "traffic_token"), str_member(sbx, "trafficAccessToken"));
    assert_string_equal(str_member(h, "context_id"), cid);
    json_object_put(h);
    json_object_put(st);
    let_go(sb, sbpool);

    CI_E2B(def)->api_key = apr_pstrdup(p, KEY);   /* the def's own copy, not the handle's */
    sb = attach_ok(p, def, handle, 300, &sbpool);
    st = fake_state();
    assert_int_equal(json_object_array_length(member(st, "creates")), 1);
    assert_int_equal(json_object_array_length(member(st, "contexts")), 1);
    assert_int_equal(json_object_array_length(member(st, "deletes")), 0);
    /* the one call attach made: the life from now on */
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 2);
    tm = json_object_array_get_idx(member(st, "timeouts"), 1);
    assert_string_equal(str_member(tm, "id"), id);
    assert_int_equal(json_object_get_int(member(tm, "timeout")), 300);
    assert_int_equal(json_object_get_int(member(tm, "status")), 204);
    assert_int_equal(json_object_array_length(member(st, "executes")), 1);
    json_object_put(st);

    r = run(sb, p, "x + 1");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "42\n");
    st = fake_state();
    assert_string_equal(str_member(member(json_object_array_get_idx(member(st, "executes"), 1),
                                          "body"), "context_id"), cid);
    json_object_put(st);
    assert_string_equal(E2B->remote_id(sb), id);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* keep_alive: POST /sandboxes/{id}/timeout with the seconds asked; a
 * sandbox that is gone is APR_NOTFOUND. */
static void test_keep_alive_sends_timeout(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    const char *id = created_id(p), *err = NULL;
    json_object *st, *tm;

    assert_int_equal(E2B->keep_alive(sb, 120, &err), APR_SUCCESS);
    st = fake_state();
    assert_int_equal(json_object_array_length(member(st, "timeouts")), 1);
    tm = json_object_array_get_idx(member(st, "timeouts"), 0);
    assert_string_equal(str_member(tm, "id"), id);
    assert_int_equal(json_object_get_int(member(tm, "timeout")), 120);
    assert_int_equal(json_object_get_int(member(tm, "status")), 204);
    json_object_put(st);

    json_object_put(fake_call("POST", "/_expire", "{}"));
    assert_int_equal(E2B->keep_alive(sb, 120, &err), APR_NOTFOUND);
    assert_string_equal(err, GONE_404);
    assert_int_equal(state_len("timeouts"), 2);
    let_go(sb, sbpool);
    wait_done();
    assert_int_equal(state_len("deletes"), 0);
    assert_no_leaks();
}

/* release leaves the sandbox running (and destroy after it deletes
 * nothing); its connections are closed. */
static void test_release_does_not_delete(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    const char *id = created_id(p);
    json_object *st;

    run(sb, p, "y = 1");
    E2B->release(sb);
    assert_null(E2B->remote_id(sb));
    assert_null(E2B->handle(sb, p));
    E2B->destroy(sb);
    apr_pool_destroy(sbpool);
    wait_done();
    st = fake_state();
    assert_int_equal(json_object_array_length(member(st, "deletes")), 0);
    assert_int_equal(json_object_array_length(member(st, "live")), 1);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(member(st, "live"),
                                                                          0)), id);
    json_object_put(st);
    assert_string_equal(log_text(p), "");
}

/* attach from the handle of a sandbox that is gone (deleted, expired) or
 * past the plan's longest life: APR_NOTFOUND, and nothing deleted or
 * created. */
static void test_attach_gone_is_notfound(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    const char *handle = E2B->handle(sb, p);

    stop(sb, sbpool);
    wait_deletes(1);
    assert_string_equal(attach_fails(p, def, handle, APR_NOTFOUND), GONE_404);

    fake_reset();
    sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    handle = E2B->handle(sb, p);
    let_go(sb, sbpool);
    fake_switch("{\"max_instance_length\": 0}");
    assert_string_equal(attach_fails(p, def, handle, APR_NOTFOUND), GONE_CAP);
    wait_done();
    {
        json_object *st = fake_state();
        json_object *tm = json_object_array_get_idx(member(st, "timeouts"), 0);
        assert_int_equal(json_object_array_length(member(st, "timeouts")), 1);
        assert_int_equal(json_object_get_int(member(tm, "timeout")), IDLE);
        assert_int_equal(json_object_get_int(member(tm, "status")), 400);
        assert_int_equal(json_object_array_length(member(st, "creates")), 1);
        assert_int_equal(json_object_array_length(member(st, "deletes")), 0);
        json_object_put(st);
    }
    assert_no_leaks();
}

/* A handle that is not one handle() made is refused without a call. */
static void test_attach_bad_handle(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    const char *id = created_id(p), *cid = context_of(p, id);
    const char *good = "{\"version\":1,\"sandbox_id\":\"%s\",\"data_url\":\"%s\","
                       "\"access_token\":\"tok\",\"context_id\":\"%s\"}";
    const char *bad[] = {
        "", "not json", "[]", "{}",
        apr_psprintf(p, "{\"version\":2,\"sandbox_id\":\"%s\",\"data_url\":\"%s\","
                     "\"access_token\":\"tok\",\"context_id\":\"%s\"}", id, fake_base, cid),
        apr_psprintf(p, good, "../x", fake_base, cid), /* check-clone: a hostile name */
        apr_psprintf(p, good, id, "ftp://127.0.0.1/", cid),
        apr_psprintf(p, good, id, "http://user@127.0.0.1/", cid),
        apr_psprintf(p, good, id, fake_base, "a/b"),
        apr_psprintf(p, "{\"version\":1,\"sandbox_id\":\"%s\",\"data_url\":\"%s\","
                     "\"access_token\":\"t k\",\"context_id\":\"%s\"}", id, fake_base, cid),
        apr_psprintf(p, "{\"version\":1,\"sandbox_id\":\"%s\",\"data_url\":\"%s\","
                     "\"context_id\":\"%s\"}", id, fake_base, cid),
    };
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_string_equal(attach_fails(p, def, bad[i], APR_EINVAL), BAD_HANDLE);
    assert_int_equal(state_len("timeouts"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* The sandbox was made but it has no context: the sandbox is deleted and
 * attach fails. */
static void test_attach_context_refused(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = NULL;
    const char *err = NULL;
    json_object *st;

    fake_switch("{\"context_status\": 500}");
    apr_pool_create(&sbpool, p);
    assert_int_equal(E2B->attach(sbpool, def, TAG, NULL, IDLE, &sb, &err), APR_EGENERAL);
    assert_null(sb);
    assert_string_equal(err, "the E2B sandbox could not get an execution context (its "
                        "code interpreter answered HTTP 500)");
    apr_pool_destroy(sbpool);
    wait_deletes(1);
    st = fake_state();
    assert_int_equal(json_object_get_int(member(st, "created")), 1);
    assert_int_equal(json_object_get_int(member(st, "deleted")), 1);
    assert_int_equal(json_object_array_length(member(st, "contexts")), 1);
    json_object_put(st);
    assert_no_leaks();
}

/* A container's execution that times out: its context is restarted, the
 * model is told its variables are gone, and the next execution runs in the
 * empty interpreter at once (not behind the one still running there). */
static void test_container_timeout_restarts_context(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    const char *id, *cid;
    ci_exec_result r;

    def->timeout = apr_time_from_sec(1);
    sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    id = created_id(p);
    cid = context_of(p, id);
    r = run(sb, p, "x = 1");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_int_equal(restarts_of(cid, 200), 0);

    fake_switch("{\"hold_execute\": \"stuck\"}");
    r = run(sb, p, "y = 2");
    assert_int_equal(ci_exec_failed(&r), 1);
    assert_int_equal(r.outcome, CI_EXEC_TIMED_OUT);
    assert_string_equal(r.failure, "The execution timed out after 1 s and was stopped."
                        RESTARTED);
    assert_int_equal(restarts_of(cid, 200), 1);
    assert_int_equal(state_len("restarts"), 1);
    assert_int_equal(state_len("held"), 1);   /* the old execution still runs */

    fake_switch("{\"hold_execute\": null}");
    r = run(sb, p, "print(globals().get('x'), globals().get('y'))");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "None None\n");
    assert_int_equal(state_len("restarts"), 1);
    /* the same sandbox, nothing created or deleted */
    assert_int_equal(state_len("creates"), 1);
    assert_int_equal(state_len("deletes"), 0);
    fake_release("stuck");
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

static void *APR_THREAD_FUNC run_held_thread(apr_thread_t *t, void *data)
{
    runner *r = data;
    r->rv = E2B->run(r->sb, r->p, "z = 3", &r->res);
    return NULL;
}

/* interrupt() while a container's execution runs: it returns interrupted,
 * the context is restarted, and the next attach finds it empty. */
static void test_container_interrupt_restarts_context(void **state)
{
    apr_pool_t *p = *state, *sbpool, *rp;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    const char *cid = context_of(p, created_id(p)), *handle;
    apr_thread_t *t;
    apr_status_t ignored;
    runner r;
    ci_exec_result again;

    run(sb, p, "x = 1");
    handle = E2B->handle(sb, p);
    fake_switch("{\"hold_execute\": \"held\"}");
    apr_pool_create(&rp, p);
    memset(&r, 0, sizeof(r));
    r.sb = sb;
    r.p = rp;
    assert_int_equal(apr_thread_create(&t, NULL, run_held_thread, &r, p), APR_SUCCESS);
    wait_held(1);
    E2B->interrupt(sb);
    apr_thread_join(&ignored, t);
    assert_int_equal(r.rv, APR_SUCCESS);
    assert_int_equal(r.res.outcome, CI_EXEC_INTERRUPTED);
    assert_string_equal(r.res.failure, STOPPED RESTARTED);
    assert_int_equal(restarts_of(cid, 200), 1);
    let_go(sb, sbpool);

    fake_switch("{\"hold_execute\": null}");
    sb = attach_ok(p, def, handle, IDLE, &sbpool);
    again = run(sb, p, "print(globals().get('x'), globals().get('z'))");
    assert_int_equal(ci_exec_failed(&again), 0);
    assert_string_equal(again.text, "None None\n");
    fake_release("held");
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* Any failed outcome of a container's run restarts its context (here the
 * kernel died); a sandbox found gone before the execution does not. */
static void test_container_lost_run_restarts(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    const char *cid = context_of(p, created_id(p));
    ci_exec_result r;

    fake_switch("{\"kernel_dies\": true}");
    r = run(sb, p, "print(1)");
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, DIED RESTARTED);
    assert_int_equal(restarts_of(cid, 200), 1);
    fake_switch("{\"kernel_dies\": null}");
    r = run(sb, p, "print(2)");
    assert_int_equal(ci_exec_failed(&r), 0);
    assert_string_equal(r.text, "2\n");

    json_object_put(fake_call("POST", "/_expire", "{}"));
    r = run(sb, p, "print(3)");
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, EXPIRED);
    assert_int_equal(state_len("restarts"), 1);
    assert_int_equal(state_len("executes"), 2);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* The restart itself fails: the model is told, the operator too. */
static void test_container_restart_refused(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    const char *cid = context_of(p, created_id(p));
    ci_exec_result r;

    fake_switch("{\"kernel_dies\": true, \"context_status\": 500}");
    r = run(sb, p, "print(1)");
    assert_int_equal(r.outcome, CI_EXEC_LOST);
    assert_string_equal(r.failure, DIED " The container's interpreter could not be "
                        "restarted (its code interpreter answered HTTP 500): its variables "
                        "may be gone.");
    assert_int_equal(restarts_of(cid, 500), 1);
    assert_string_equal(log_text(p), "CI0314: the execution context of an E2B container's "
                        "sandbox could not be restarted (its code interpreter answered "
                        "HTTP 500)\n");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* ---- container files (envd) ------------------------------------------------ */

/* A container's sandbox for the file tests: *T names it by its handle. */
static ci_sandbox *file_container(apr_pool_t *p, const ci_sandbox_def *def,
                                  ci_file_target *t, apr_pool_t **sbpool)
{
    ci_sandbox *sb = attach_ok(p, def, NULL, IDLE, sbpool);
    t->def = def;
    t->container = TAG;
    t->handle = E2B->handle(sb, p);
    assert_non_null(t->handle);
    return sb;
}

/* Run CODE, which must succeed. */
static ci_exec_result run_ok(ci_sandbox *sb, apr_pool_t *p, const char *code)
{
    ci_exec_result r = run(sb, p, code);
    if (r.outcome != CI_EXEC_COMPLETED)
        fail_msg("the code failed: %s %s", r.failure ? r.failure : "", r.text);
    return r;
}

/* Every name under the sandbox's /mnt/data, as the fake sees it ("a,b";
 * "-" when /mnt/data does not exist). */
static const char *data_names(apr_pool_t *p, const char *id)
{
    json_object *st = fake_state();
    json_object *data = member(member(member(st, "sandboxes"), id), "data");
    const char *out = data ? "" : "-";
    size_t i;
    for (i = 0; data && i < json_object_array_length(data); i++)
        out = apr_pstrcat(p, out, i ? "," : "",
                          json_object_get_string(json_object_array_get_idx(data, i)), NULL);
    json_object_put(st);
    return out;
}

/* The text of the file PATH in sandbox ID (read on the fake's side). */
static const char *sandbox_text(apr_pool_t *p, const char *id, const char *path)
{
    json_object *st = fake_state();
    const char *host = apr_pstrcat(p, str_member(member(member(st, "sandboxes"), id), "root"),
                                   path, NULL);
    char text[4096];
    size_t n;
    FILE *f = fopen(host, "rb");
    json_object_put(st);
    assert_non_null(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    return apr_pstrmemdup(p, text, n);
}

/* The envd calls of the fake whose path is PATH. */
static int envd_calls(const char *path)
{
    json_object *st = fake_state(), *calls = member(st, "envd");
    int n = 0;
    size_t i;
    for (i = 0; i < json_object_array_length(calls); i++)
        n += !strcmp(str_member(json_object_array_get_idx(calls, i), "path"), path);
    json_object_put(st);
    return n;
}

static apr_array_header_t *list_ok(apr_pool_t *p, const ci_file_target *t)
{
    apr_array_header_t *files = NULL;
    const char *err = NULL;
    if (E2B->files_list(p, t, &files, &err) != CI_FILE_OK)
        fail_msg("files_list failed: %s", err ? err : "(no message)");
    return files;
}

static int by_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The listing as "name:bytes:user,..." by name (files made in the same
 * second have no order of time). */
static const char *listed(apr_pool_t *p, const ci_file_target *t)
{
    apr_array_header_t *files = list_ok(p, t);
    const char **items = apr_pcalloc(p, sizeof(char *) * (size_t)(files->nelts + 1));
    const char *out = "";
    int i;
    for (i = 0; i < files->nelts; i++) {
        const ci_cfile *f = &APR_ARRAY_IDX(files, i, ci_cfile);
        items[i] = apr_psprintf(p, "%s:%" APR_INT64_T_FMT ":%d", f->name, f->bytes, f->user);
    }
    qsort(items, (size_t)files->nelts, sizeof(char *), by_text);
    for (i = 0; i < files->nelts; i++)
        out = apr_pstrcat(p, out, i ? "," : "", items[i], NULL);
    return out;
}

/* A sink that keeps what it is given. */
typedef struct got {
    apr_int64_t size;
    int sizes, pieces;
    buf data;
} got;

static int got_size(void *baton, apr_int64_t bytes)
{
    got *g = baton;
    assert_int_equal(g->pieces, 0);
    g->size = bytes;
    g->sizes++;
    return 0;
}

static int got_data(void *baton, const char *data, apr_size_t len)
{
    got *g = baton;
    assert_int_equal(g->sizes, 1);
    g->pieces++;
    return collect((char *)data, 1, len, &g->data) == len ? 0 : -1;
}

static ci_file_status get_file(apr_pool_t *p, const ci_file_target *t, const char *name,
                               apr_int64_t max, got *g)
{
    ci_file_sink sink = { got_size, got_data, g };
    const char *err = NULL;
    memset(g, 0, sizeof(*g));
    return E2B->file_get(p, t, name, max, &sink, &err);
}

/* A source of LEN bytes (byte i is i % 251) in pieces of at most PIECE,
 * failing once FAIL_AT bytes are given (0: never). */
typedef struct src {
    apr_size_t len, at, piece, fail_at;
    int reads;
} src;

static apr_ssize_t src_read(void *baton, char *out, apr_size_t len)
{
    src *s = baton;
    apr_size_t n = s->len - s->at, i;
    s->reads++;
    if (s->fail_at && s->at >= s->fail_at)
        return -1;
    if (n > len)
        n = len;
    if (n > s->piece)
        n = s->piece;
    for (i = 0; i < n; i++)
        out[i] = (char)((s->at + i) % 251);
    s->at += n;
    return (apr_ssize_t)n;
}

static ci_file_status put_file(apr_pool_t *p, const ci_file_target *t, const char *name,
                               apr_size_t len, const ci_file_limits *limits, apr_size_t fail_at)
{
    static const ci_file_limits none = { 0, 0, 0 };
    src s = { len, 0, 65536, fail_at, 0 };
    ci_file_source source = { src_read, &s };
    const char *err = NULL;
    ci_file_status st = E2B->file_put(p, t, name, limits ? limits : &none, &source, &err);
    if (st == CI_FILE_FAILED)
        fail_msg("file_put failed: %s", err ? err : "(no message)");
    return st;
}

/* The bytes put_file sends: LEN of them. */
static void assert_source_bytes(const buf *b, apr_size_t len)
{
    apr_size_t i;
    assert_int_equal(b->len, len);
    for (i = 0; i < len; i++)
        if ((unsigned char)b->data[i] != i % 251)
            fail_msg("byte %lu differs", (unsigned long)i);
}

#define MAKE_FILES "import os\n" \
    "open('/mnt/data/a.csv', 'w').write('1,2\\n')\n" \
    "open('/mnt/data/b.bin', 'wb').write(bytes([0, 255, 10, 13, 0]))\n" \
    "os.symlink('/etc/passwd', '/mnt/data/link')\n" \
    "os.mkdir('/mnt/data/sub')\n" \
    "open('/mnt/data/sub/inner.txt', 'w').write('x')\n"

/* A new container's sandbox has an empty /mnt/data (MakeDir at its start,
 * with the user's credentials and envd's port). */
static void test_files_dir_made_at_start(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    const char *id = created_id(p);
    json_object *st, *call, *hdrs, *sbx;

    assert_string_equal(data_names(p, id), "");
    st = fake_state();
    sbx = member(member(st, "sandboxes"), id);
    assert_int_equal(json_object_array_length(member(st, "envd")), 1);
    call = json_object_array_get_idx(member(st, "envd"), 0);
    assert_string_equal(str_member(call, "path"), "/filesystem.Filesystem/MakeDir");
    assert_int_equal(json_object_get_int(member(call, "status")), 200);
    assert_string_equal(json_object_to_json_string_ext(member(call, "body"),
                                                       JSON_C_TO_STRING_PLAIN),
                        "{\"path\":\"\\/mnt\\/data\"}");
    hdrs = member(call, "headers");
    assert_string_equal(str_member(hdrs, "content-type"), "application/json");
    assert_string_equal(str_member(hdrs, "connect-protocol-version"), "1");
    assert_string_equal(str_member(hdrs, "authorization"), "Basic dXNlcjo=");
    assert_string_equal(str_member(hdrs, "e2b-sandbox-port"), "49983");
    assert_string_equal(str_member(hdrs, "e2b-sandbox-id"), id);
    assert_string_equal(str_member(hdrs, "x-access-token"), str_member(sbx, "envdAccessToken"));
    assert_null(member(hdrs, "x-api-key"));
    json_object_put(st);
    assert_string_equal(listed(p, &t), "");
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* files_list: the regular files directly under /mnt/data; a symlink (envd
 * reports a link to a file as FILE_TYPE_FILE with symlinkTarget), a
 * directory and what is inside it are left out. */
static void test_files_list_regular_only(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    apr_array_header_t *files;
    apr_int64_t now = apr_time_sec(apr_time_now());
    const ci_cfile *a, *b;

    run_ok(sb, p, MAKE_FILES);
    files = list_ok(p, &t);
    assert_int_equal(files->nelts, 2);
    a = ci_cfiles_find(files, ci_cfile_id(p, TAG, "a.csv"));
    b = ci_cfiles_find(files, ci_cfile_id(p, TAG, "b.bin"));
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a->name, "a.csv");
    assert_int_equal(a->bytes, 4);
    assert_int_equal(a->user, 0);
    assert_string_equal(b->name, "b.bin");
    assert_int_equal(b->bytes, 5);
    assert_int_equal(b->user, 0);
    assert_true(a->created_at >= now - 5 && a->created_at <= now + 5);
    assert_true(b->created_at >= now - 5 && b->created_at <= now + 5);
    assert_string_equal(data_names(p, created_id(p)), "a.csv,b.bin,link,sub");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* file_get: the bytes as they are (binary), the size first; a 3 MB file
 * comes in several pieces. */
static void test_files_get_binary_and_large(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    static const char small[] = { 0, (char)255, 10, 13, 0 };
    got g;

    run_ok(sb, p, MAKE_FILES "open('/mnt/data/big.bin', 'wb').write("
                  "bytes(i % 251 for i in range(3 * 1024 * 1024)))\n");
    assert_int_equal(get_file(p, &t, "b.bin", 100, &g), CI_FILE_OK);
    assert_int_equal(g.sizes, 1);
    assert_int_equal(g.size, 5);
    assert_int_equal(g.data.len, 5);
    assert_memory_equal(g.data.data, small, 5);
    free(g.data.data);
    assert_int_equal(get_file(p, &t, "big.bin", 4 * 1024 * 1024, &g), CI_FILE_OK);
    assert_int_equal(g.size, 3 * 1024 * 1024);
    assert_true(g.pieces > 1);
    assert_source_bytes(&g.data, 3 * 1024 * 1024);
    free(g.data.data);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A symlink (to the sandbox's /etc/passwd), a directory, a name that is not
 * there or not acceptable: NOT_FOUND, nothing sent, no download asked. */
static void test_files_get_refuses_links(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    got g;

    run_ok(sb, p, MAKE_FILES);
    assert_int_equal(get_file(p, &t, "link", 1 << 20, &g), CI_FILE_NOT_FOUND);
    assert_int_equal(g.sizes + g.pieces, 0);
    assert_int_equal(get_file(p, &t, "sub", 1 << 20, &g), CI_FILE_NOT_FOUND);
    assert_int_equal(get_file(p, &t, "nothing", 1 << 20, &g), CI_FILE_NOT_FOUND);
    assert_int_equal(get_file(p, &t, "../etc/passwd", 1 << 20, &g), CI_FILE_NOT_FOUND); /* check-clone: a hostile name */
    assert_int_equal(g.sizes + g.pieces, 0);
    assert_int_equal(envd_calls("/files"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* Past MAX bytes: TOO_LARGE before anything is sent; at MAX: the file. */
static void test_files_get_too_large(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    got g;

    run_ok(sb, p, MAKE_FILES);
    assert_int_equal(get_file(p, &t, "b.bin", 4, &g), CI_FILE_TOO_LARGE);
    assert_int_equal(g.sizes + g.pieces, 0);
    assert_int_equal(envd_calls("/files"), 0);
    assert_int_equal(get_file(p, &t, "b.bin", 5, &g), CI_FILE_OK);
    assert_int_equal(g.size, 5);
    free(g.data.data);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* file_delete: a regular file goes; a symlink or directory is no file (and
 * stays), nor is a name already gone. */
static void test_files_delete(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    const char *err = NULL, *id = created_id(p);

    run_ok(sb, p, MAKE_FILES);
    assert_int_equal(E2B->file_delete(p, &t, "a.csv", &err), CI_FILE_OK);
    assert_string_equal(listed(p, &t), "b.bin:5:0");
    assert_int_equal(E2B->file_delete(p, &t, "a.csv", &err), CI_FILE_NOT_FOUND);
    assert_int_equal(E2B->file_delete(p, &t, "link", &err), CI_FILE_NOT_FOUND);
    assert_int_equal(E2B->file_delete(p, &t, "sub", &err), CI_FILE_NOT_FOUND);
    assert_string_equal(data_names(p, id), "b.bin,link,sub");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* file_put: the file is the user's (source) until the code changes it; a
 * 3 MB upload is streamed in pieces and comes back byte for byte; nothing
 * temporary is left under /mnt/data. */
static void test_files_put_then_list(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    const char *id = created_id(p);
    got g;

    assert_int_equal(put_file(p, &t, "up.txt", 5, NULL, 0), CI_FILE_OK);
    assert_string_equal(listed(p, &t), "up.txt:5:1");
    assert_int_equal(put_file(p, &t, "big.bin", 3 * 1024 * 1024, NULL, 0), CI_FILE_OK);
    assert_string_equal(data_names(p, id), "big.bin,up.txt");
    assert_int_equal(get_file(p, &t, "big.bin", 3 * 1024 * 1024, &g), CI_FILE_OK);
    assert_source_bytes(&g.data, 3 * 1024 * 1024);
    free(g.data.data);
    run_ok(sb, p, "open('/mnt/data/up.txt', 'a').write('more')\n");
    assert_int_equal(ci_cfiles_find(list_ok(p, &t), ci_cfile_id(p, TAG, "big.bin"))->user, 1);
    assert_int_equal(ci_cfiles_find(list_ok(p, &t), ci_cfile_id(p, TAG, "up.txt"))->user, 0);
    assert_int_equal(ci_cfiles_find(list_ok(p, &t), ci_cfile_id(p, TAG, "up.txt"))->bytes, 9);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* A put replaces a file of that name (not counted against the limits), and
 * a symlink of that name is replaced, never written through. */
static void test_files_put_replaces(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    ci_file_limits one = { 5, 2, 8 };

    run_ok(sb, p, MAKE_FILES);
    assert_int_equal(put_file(p, &t, "a.csv", 3, &one, 0), CI_FILE_OK);
    assert_string_equal(listed(p, &t), "a.csv:3:1,b.bin:5:0");
    assert_int_equal(put_file(p, &t, "link", 2, NULL, 0), CI_FILE_OK);
    assert_string_equal(sandbox_text(p, created_id(p), "/etc/passwd"),
                        "root:x:0:0:root:/root:/bin/bash\n"
                        "user:x:1000:1000::/home/user:/bin/bash\n");
    assert_int_equal(ci_cfiles_find(list_ok(p, &t), ci_cfile_id(p, TAG, "link"))->bytes, 2);
    assert_string_equal(data_names(p, created_id(p)), "a.csv,b.bin,link,sub");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* Each limit refuses with its status and leaves the files as they were. */
static void test_files_put_limits(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    const char *id = created_id(p), *before, *names;
    ci_file_limits max_file = { 100000, 0, 0 }, max_files = { 0, 2, 0 },
                   max_bytes = { 0, 0, 200000 };

    run_ok(sb, p, MAKE_FILES);
    before = listed(p, &t);
    names = data_names(p, id);
    assert_int_equal(put_file(p, &t, "new.bin", 100001, &max_file, 0), CI_FILE_TOO_LARGE);
    assert_int_equal(put_file(p, &t, "a.csv", 300000, &max_file, 0), CI_FILE_TOO_LARGE);
    assert_int_equal(put_file(p, &t, "new.bin", 1, &max_files, 0), CI_FILE_TOO_MANY);
    /* 9 bytes are there; 199992 more fit */
    assert_int_equal(put_file(p, &t, "new.bin", 199992, &max_bytes, 0), CI_FILE_NO_ROOM);
    assert_string_equal(listed(p, &t), before);
    assert_string_equal(data_names(p, id), names);
    assert_int_equal(put_file(p, &t, "new.bin", 199991, &max_bytes, 0), CI_FILE_OK);
    assert_int_equal(put_file(p, &t, "a.csv", 1, &max_files, 0), CI_FILE_OK);
    assert_string_equal(listed(p, &t), "a.csv:1:1,b.bin:5:0,new.bin:199991:1");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A source that fails mid-way: SOURCE_FAILED, and what envd wrote of it is
 * removed; the file it would have replaced is untouched. */
static void test_files_put_source_fails(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    const char *id = created_id(p);
    json_object *st, *calls;
    size_t i;
    int uploads = 0, removes = 0;

    run_ok(sb, p, MAKE_FILES);
    assert_int_equal(put_file(p, &t, "a.csv", 1 << 20, NULL, 300000), CI_FILE_SOURCE_FAILED);
    assert_int_equal(put_file(p, &t, "c.bin", 1 << 20, NULL, 300000), CI_FILE_SOURCE_FAILED);
    /* what came before the failure was written, then removed */
    st = fake_state();
    calls = member(st, "envd");
    for (i = 0; i < json_object_array_length(calls); i++) {
        json_object *c = json_object_array_get_idx(calls, i);
        if (!strcmp(str_member(c, "path"), "/files")) {
            uploads++;
            assert_string_equal(str_member(c, "method"), "POST");
            assert_int_equal(json_object_get_int(member(c, "status")), 200);
            assert_int_equal(strncmp(json_object_get_string(json_object_array_get_idx(
                                 member(c, "uploaded"), 0)), "/mnt/data/.upload-", 18), 0);
        }
        removes += !strcmp(str_member(c, "path"), "/filesystem.Filesystem/Remove");
    }
    json_object_put(st);
    assert_int_equal(uploads, 2);
    assert_int_equal(removes, 2);
    assert_string_equal(listed(p, &t), "a.csv:4:0,b.bin:5:0");
    assert_string_equal(data_names(p, id), "a.csv,b.bin,link,sub");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* No sandbox (no handle, or gone at E2B): NO_SANDBOX from every entry. */
static void test_files_no_sandbox(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target none = { def, TAG, NULL }, t;
    apr_array_header_t *files = NULL;
    const char *err = NULL;
    ci_sandbox *sb;
    got g;

    assert_int_equal(E2B->files_list(p, &none, &files, &err), CI_FILE_NO_SANDBOX);
    assert_int_equal(get_file(p, &none, "a", 10, &g), CI_FILE_NO_SANDBOX);
    assert_int_equal(E2B->file_delete(p, &none, "a", &err), CI_FILE_NO_SANDBOX);
    assert_int_equal(put_file(p, &none, "a", 1, NULL, 0), CI_FILE_NO_SANDBOX);
    sb = file_container(p, def, &t, &sbpool);
    let_go(sb, sbpool);
    json_object_put(fake_call("POST", "/_expire", "{}"));
    err = NULL;
    assert_int_equal(E2B->files_list(p, &t, &files, &err), CI_FILE_NO_SANDBOX);
    assert_string_equal(err, "the E2B sandbox no longer exists (HTTP 502)");
    assert_int_equal(get_file(p, &t, "a", 10, &g), CI_FILE_NO_SANDBOX);
    assert_int_equal(E2B->file_delete(p, &t, "a", &err), CI_FILE_NO_SANDBOX);
    assert_int_equal(put_file(p, &t, "a", 1, NULL, 0), CI_FILE_NO_SANDBOX);
    assert_no_leaks();
}

static const char *changed(apr_pool_t *p, const ci_exec_result *r)
{
    const char *out = "";
    int i;
    for (i = 0; r->files && i < r->files->nelts; i++)
        out = apr_pstrcat(p, out, i ? "," : "", APR_ARRAY_IDX(r->files, i, const char *),
                          NULL);
    return out;
}

/* A container's run reports the regular files under /mnt/data it made or
 * changed; a request's own sandbox lists nothing. */
static void test_run_reports_changed_files(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_file_target t;
    ci_sandbox *sb = file_container(p, def, &t, &sbpool);
    ci_exec_result r;

    r = run_ok(sb, p, MAKE_FILES "open('/mnt/data/x.csv', 'w').write('a,b\\n')\n");
    assert_string_equal(changed(p, &r), "a.csv,b.bin,x.csv");
    r = run_ok(sb, p, "y = 1");
    assert_string_equal(changed(p, &r), "");
    r = run_ok(sb, p, "open('/mnt/data/x.csv', 'w').write('a,b,c\\n')\n"
                      "open('/mnt/data/sub/deeper.txt', 'w').write('no')\n");
    assert_string_equal(changed(p, &r), "x.csv");
    stop(sb, sbpool);
    wait_deletes(1);

    fake_reset();
    sb = start_ok(p, def, &sbpool);
    r = run(sb, p, "print(1)");
    assert_string_equal(changed(p, &r), "");
    assert_int_equal(state_len("envd"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* ---- the hosted shell (envd's process service) ---------------------------- */

/* A shell call of the NULL-terminated COMMANDS, each bounded by TIMEOUT
 * seconds, MAX characters of output each. */
static ci_exec_result shell(ci_sandbox *sb, apr_pool_t *p, int timeout, apr_size_t max,
                            const char *const *commands)
{
    apr_array_header_t *a = apr_array_make(p, 4, sizeof(const char *));
    ci_shell_action action;
    ci_exec_result res;
    for (; *commands; commands++)
        *(const char **)apr_array_push(a) = *commands;
    action.commands = a;
    action.timeout = apr_time_from_sec(timeout);
    action.max_output = max;
    memset(&res, 0xa5, sizeof(res));
    assert_int_equal(E2B->run_commands(sb, p, &action, &res), APR_SUCCESS);
    assert_non_null(res.commands);
    return res;
}

static const ci_command_result *command_of(const ci_exec_result *r, int i)
{
    assert_true(i < r->commands->nelts);
    return &APR_ARRAY_IDX(r->commands, i, ci_command_result);
}

static void assert_command(const ci_exec_result *r, int i, const char *out, const char *err,
                           int exit_code)
{
    const ci_command_result *c = command_of(r, i);
    assert_string_equal(c->stdout_text, out);
    assert_string_equal(c->stderr_text, err);
    assert_int_equal(c->timed_out, 0);
    assert_int_equal(c->exit_code, exit_code);
}

/* The fake's records of process.Process/Start ("processes") or SendSignal
 * ("signals"). */
static int process_calls(const char *key)
{
    return (int)state_len(key);
}

/* Member KEY of the fake's Nth Start record (the caller puts the state). */
static json_object *start_record(json_object *st, int n, const char *key)
{
    return member(json_object_array_get_idx(member(st, "processes"), (size_t)n), key);
}

/* Wait until the fake's sandbox ID runs no process envd knows of (envd
 * forgets one once its pipes are closed by all and it has exited). */
static void wait_nothing_running(const char *id)
{
    int i;
    for (i = 0; i < 200; i++) {
        json_object *st = fake_state();
        size_t n = json_object_array_length(member(member(member(st, "sandboxes"), id),
                                                   "running"));
        json_object_put(st);
        if (!n)
            return;
        apr_sleep(apr_time_from_msec(50));
    }
    fail_msg("the sandbox still runs a process after 10 s");
}

/* Exit codes, stderr, a signal's 128+N, one Start per command as the SDK
 * sends it (bash in /mnt/data, the user, the stream's content type). */
static void test_shell_exit_codes(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    static const char *const cmds[] = { "echo hi; echo oops >&2; exit 3", "true",
                                        "kill -TERM $$", NULL };
    ci_exec_result r = shell(sb, p, 10, 1000, cmds);
    json_object *st, *body, *hdrs;

    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_null(r.failure);
    assert_int_equal(r.commands->nelts, 3);
    assert_command(&r, 0, "hi\n", "oops\n", 3);
    assert_command(&r, 1, "", "", 0);
    assert_command(&r, 2, "", "", 143);
    st = fake_state();
    assert_int_equal(json_object_array_length(member(st, "processes")), 3);
    body = member(start_record(st, 0, "body"), "process");
    hdrs = start_record(st, 0, "headers");
    assert_string_equal(str_member(body, "cmd"), "/bin/bash");
    assert_string_equal(str_member(body, "cwd"), "/mnt/data");
    assert_string_equal(json_object_get_string(
        json_object_array_get_idx(member(body, "args"), 3)), cmds[0]);
    assert_string_equal(str_member(hdrs, "content-type"), "application/connect+json");
    assert_string_equal(str_member(hdrs, "authorization"), "Basic dXNlcjo=");
    assert_string_equal(str_member(hdrs, "keepalive-ping-interval"), "50");
    assert_string_equal(str_member(hdrs, "e2b-sandbox-port"), "49983");
    assert_int_equal(json_object_get_int(start_record(st, 0, "status")), 200);
    json_object_put(st);
    assert_int_equal(process_calls("signals"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
    assert_no_leaks();
}

/* Commands run in /mnt/data, the container's files: what code wrote,
 * a command reads; what a command wrote, code reads (and the call reports
 * it as changed). */
static void test_shell_shares_files_with_code(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    static const char *const cmds[] = { "cat from_code.txt && printf 'from bash' > b.txt",
                                        NULL };
    ci_exec_result r;

    run_ok(sb, p, "open('/mnt/data/from_code.txt', 'w').write('from python\\n')");
    r = shell(sb, p, 10, 1000, cmds);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_command(&r, 0, "from python\n", "", 0);
    assert_string_equal(changed(p, &r), "b.txt");
    r = run_ok(sb, p, "print(open('/mnt/data/b.txt').read())");
    assert_string_equal(r.text, "from bash\n");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A request's own sandbox gets /mnt/data before its first command. */
static void test_shell_request_sandbox(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = start_ok(p, make_def(p), &sbpool);
    static const char *const cmds[] = { "echo x > f && cat f", NULL };
    ci_exec_result r = shell(sb, p, 10, 1000, cmds);

    assert_command(&r, 0, "x\n", "", 0);
    r = shell(sb, p, 10, 1000, cmds);
    assert_command(&r, 0, "x\n", "", 0);
    assert_int_equal(envd_calls("/filesystem.Filesystem/MakeDir"), 1);
    assert_string_equal(data_names(p, created_id(p)), "f");
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A command past its timeout: its group is killed (the sandbox runs
 * nothing after), it is the call's last, with what it wrote; the
 * container runs the next call. */
static void test_shell_command_timeout(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    static const char *const cmds[] = { "echo first", "echo before; sleep 60 | cat",
                                        "echo never", NULL };
    static const char *const again[] = { "echo again", NULL };
    ci_exec_result r = shell(sb, p, 1, 1000, cmds);
    const ci_command_result *c;
    json_object *st;

    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_int_equal(r.commands->nelts, 2);
    assert_command(&r, 0, "first\n", "", 0);
    c = command_of(&r, 1);
    assert_int_equal(c->timed_out, 1);
    assert_string_equal(c->stdout_text, "before\n");
    assert_int_equal(process_calls("processes"), 2);
    st = fake_state();
    assert_int_equal(json_object_array_length(member(st, "signals")), 1);
    assert_string_equal(str_member(member(json_object_array_get_idx(member(st, "signals"), 0),
                                          "body"), "signal"), "SIGNAL_SIGTERM");
    json_object_put(st);
    wait_nothing_running(created_id(p));
    r = shell(sb, p, 10, 1000, again);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_command(&r, 0, "again\n", "", 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* The whole call is bounded by the tool's timeout: past it, the call
 * fails timed out, the running command cut. */
static void test_shell_call_timeout(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox_def *def = make_def(p);
    ci_sandbox *sb;
    static const char *const cmds[] = { "sleep 60", "echo never", NULL };
    ci_exec_result r;

    def->timeout = apr_time_from_sec(1);
    sb = attach_ok(p, def, NULL, IDLE, &sbpool);
    r = shell(sb, p, 10, 1000, cmds);
    assert_int_equal(r.outcome, CI_EXEC_TIMED_OUT);
    assert_string_equal(r.failure, "The shell call timed out after 1 s and was stopped.");
    assert_int_equal(r.commands->nelts, 1);
    assert_int_equal(command_of(&r, 0)->timed_out, 1);
    assert_int_equal(process_calls("processes"), 1);
    wait_nothing_running(created_id(p));
    stop(sb, sbpool);
    wait_deletes(1);
}

/* stdout and stderr are cut together at max_output characters, stdout
 * first, never inside a character. */
static void test_shell_max_output(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    static const char *const cmds[] = {
        "printf 'a\\303\\251'; printf '\\303\\261\\360\\237\\230\\200z' >&2",
        "printf 'h\\303\\251llo w\\303\\266rld'; echo no room >&2",
        "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo tail >&2",
        "printf '\\377ab'", NULL };
    ci_exec_result r = shell(sb, p, 10, 4, cmds);

    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_command(&r, 0, "a\xc3\xa9", "\xc3\xb1\xf0\x9f\x98\x80", 0);
    assert_command(&r, 1, "h\xc3\xa9ll", "", 0);
    assert_command(&r, 2, "xxxx", "", 0);
    assert_command(&r, 3, "\xef\xbf\xbd" "ab", "", 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

/* A background process a command leaves does not hold the call: the call
 * ends while envd's stream for it is still open (no end event sent), and
 * the process lives on for the next command. */
static void test_shell_background_process(void **state)
{
    apr_pool_t *p = *state, *sbpool;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    static const char *const cmds[] = { "sleep 300 & echo $!", NULL };
    const char *check[] = { NULL, NULL };
    ci_exec_result r = shell(sb, p, 30, 1000, cmds);
    const ci_command_result *c = command_of(&r, 0);
    json_object *st;
    int i;

    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_int_equal(c->exit_code, 0);
    assert_int_equal(c->timed_out, 0);
    /* the stream was let go before envd ended it */
    for (i = 0; i < 200; i++) {
        st = fake_state();
        if (start_record(st, 0, "client_gone"))
            break;
        json_object_put(st);
        apr_sleep(apr_time_from_msec(50));
    }
    assert_true(i < 200);
    assert_true(json_object_is_type(start_record(st, 0, "end"), json_type_null));
    json_object_put(st);
    check[0] = apr_psprintf(p, "kill -0 %d && echo alive", atoi(c->stdout_text));
    r = shell(sb, p, 10, 1000, check);
    assert_command(&r, 0, "alive\n", "", 0);
    assert_int_equal(process_calls("signals"), 0);
    stop(sb, sbpool);
    wait_deletes(1);
}

typedef struct shell_runner {
    ci_sandbox *sb;
    apr_pool_t *p;
    ci_exec_result res;
    apr_status_t rv;
} shell_runner;

static void *APR_THREAD_FUNC shell_thread(apr_thread_t *t, void *data)
{
    static const char *const cmds[] = { "echo started; sleep 60", "echo never", NULL };
    shell_runner *r = data;
    apr_array_header_t *a = apr_array_make(r->p, 2, sizeof(const char *));
    ci_shell_action action = { a, apr_time_from_sec(30), 1000 };
    *(const char **)apr_array_push(a) = cmds[0];
    *(const char **)apr_array_push(a) = cmds[1];
    r->rv = E2B->run_commands(r->sb, r->p, &action, &r->res);
    return NULL;
}

/* The command has printed (its stream reached the fake's client). */
static int shell_started(void)
{
    json_object *st = fake_state();
    json_object *procs = member(st, "processes");
    int started = json_object_array_length(procs) == 1 &&
                  json_object_is_type(start_record(st, 0, "pid"), json_type_int);
    json_object_put(st);
    return started;
}

/* interrupt() from another thread: the call returns interrupted, the
 * command's group is killed, the next command never starts. */
static void test_shell_interrupt(void **state)
{
    apr_pool_t *p = *state, *sbpool, *rp;
    ci_sandbox *sb = attach_ok(p, make_def(p), NULL, IDLE, &sbpool);
    apr_thread_t *t;
    apr_status_t ignored;
    shell_runner r;
    int i;

    apr_pool_create(&rp, p);
    memset(&r, 0, sizeof(r));
    r.sb = sb;
    r.p = rp;
    assert_int_equal(apr_thread_create(&t, NULL, shell_thread, &r, p), APR_SUCCESS);
    for (i = 0; i < 200 && !shell_started(); i++)
        apr_sleep(apr_time_from_msec(50));
    assert_true(shell_started());
    E2B->interrupt(sb);
    apr_thread_join(&ignored, t);
    assert_int_equal(r.rv, APR_SUCCESS);
    assert_int_equal(r.res.outcome, CI_EXEC_INTERRUPTED);
    assert_string_equal(r.res.failure, STOPPED);
    assert_int_equal(r.res.commands->nelts, 0);
    assert_int_equal(process_calls("processes"), 1);
    assert_int_equal(process_calls("signals"), 1);
    wait_nothing_running(created_id(p));
    stop(sb, sbpool);
    wait_deletes(1);
}

static const struct CMUnitTest tests[] = {
    TEST(test_round_trip),
    TEST(test_create_body),
    TEST(test_create_body_options),
    TEST(test_create_body_short_lifetime),
    TEST(test_create_unusable_domain),
    TEST(test_data_plane_headers),
    TEST(test_large_code_no_expect),
    TEST(test_garbage_lines_skipped),
    TEST(test_cut_stream_fails),
    TEST(test_slow_stream_times_out),
    TEST(test_keepalive_lines_ignored),
    TEST(test_huge_output_capped),
    TEST(test_output_past_hard_cap_fails),
    TEST(test_kernel_dies_fails),
    TEST(test_execute_502_fails),
    TEST(test_expired_sandbox_fails),
    TEST(test_interrupt_stops_run),
    TEST(test_create_refused),
    TEST(test_wrong_key_not_in_error),
    TEST(test_unreachable),
    TEST(test_create_without_token),
    TEST(test_delete_404_not_retried),
    TEST(test_delete_500_retried_once),
    TEST(test_delete_after_key_rotation),
    TEST(test_default_data_host),
    TEST(test_data_host_of_the_answer),
    TEST(test_attach_creates_with_idle_timeout),
    TEST(test_attach_short_idle),
    TEST(test_handle_reattaches_same_sandbox),
    TEST(test_keep_alive_sends_timeout),
    TEST(test_release_does_not_delete),
    TEST(test_attach_gone_is_notfound),
    TEST(test_attach_bad_handle),
    TEST(test_attach_context_refused),
    TEST(test_container_timeout_restarts_context),
    TEST(test_container_interrupt_restarts_context),
    TEST(test_container_lost_run_restarts),
    TEST(test_container_restart_refused),
    TEST(test_files_dir_made_at_start),
    TEST(test_files_list_regular_only),
    TEST(test_files_get_binary_and_large),
    TEST(test_files_get_refuses_links),
    TEST(test_files_get_too_large),
    TEST(test_files_delete),
    TEST(test_files_put_then_list),
    TEST(test_files_put_replaces),
    TEST(test_files_put_limits),
    TEST(test_files_put_source_fails),
    TEST(test_files_no_sandbox),
    TEST(test_run_reports_changed_files),
    TEST(test_shell_exit_codes),
    TEST(test_shell_shares_files_with_code),
    TEST(test_shell_request_sandbox),
    TEST(test_shell_command_timeout),
    TEST(test_shell_call_timeout),
    TEST(test_shell_max_output),
    TEST(test_shell_background_process),
    TEST(test_shell_interrupt),
};

int main(int argc, char **argv)
{
    const char *port = getenv("FAKE_E2B_PORT");
    int rc;
    size_t i;

    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (!port || !*port) {
        fprintf(stderr, "FAKE_E2B_PORT is not set (start test/fake_e2b.py)\n");
        return 2;
    }
    apr_initialize();
    curl_global_init(CURL_GLOBAL_ALL);
    apr_pool_create(&global_pool, NULL);
    apr_thread_mutex_create(&log_lock, APR_THREAD_MUTEX_DEFAULT, global_pool);
    ci_log_set(log_sink, CI_LOG_DEBUG);
    fake_base = apr_psprintf(global_pool, "http://127.0.0.1:%s", port);
    if (!getenv("E2B_TEST_INLINE") &&
        ci_workers_start(global_pool, 4, 16) != APR_SUCCESS) {
        fprintf(stderr, "could not start the worker pool\n");
        return 2;
    }
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    rc = cmocka_run_group_tests_name(getenv("E2B_TEST_INLINE") ? "e2b (inline deletes)"
                                                               : "e2b (worker deletes)",
                                     tests, NULL, NULL);
    apr_pool_destroy(global_pool);
    curl_global_cleanup();
    apr_terminate();
    return rc;
}
