/*
 * ci_upstream.c - follow-up POSTs to the model upstream with libcurl.
 * Proxies from the environment are ignored; only http and https; no
 * redirects; the answer is capped while it arrives.
 *
 * Connections are kept: a follow-up takes an idle easy handle of this
 * process and gives it back, reset, when done. The handle keeps its live
 * connections, so the next follow-up to the same upstream (of this request or
 * another) skips the connect and the TLS handshake; the DNS cache and TLS
 * sessions are shared between all the handles of the process. curl only
 * reuses a connection whose TLS and proxy settings match the call's.
 */
#include <string.h>
#include <curl/curl.h>
#include <apr_strings.h>
#include <apr_thread_mutex.h>
#include "ci_buf.h"
#include "ci_curl.h"
#include "ci_idle.h"
#include "ci_upstream.h"

/* Idle handles kept per process: enough for the follow-ups in flight at
 * once in a busy child; more are closed when given back. */
#define IDLE_MAX 64

static struct {
    ci_idle *idle;                /* NULL: none kept (every call its own handle) */
    CURLSH *share;
    apr_thread_mutex_t *share_locks[CURL_LOCK_DATA_LAST];
} handles;

typedef struct answer_buf {
    ci_buf body;
    int over;
    const char *content_type;
    const char *retry_after;
    CURL *h;
    const ci_upstream_opts *opts;
    int streamed;         /* the body went to opts->sink */
    int sink_stopped;     /* the sink asked to stop */
    int decided;          /* streamed or not, decided at the first byte */
} answer_buf;

static apr_status_t curl_cleanup(void *data)
{
    curl_global_cleanup();
    return APR_SUCCESS;
}

apr_status_t ci_upstream_global_init(apr_pool_t *pconf)
{
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
        return APR_EGENERAL;
    apr_pool_cleanup_register(pconf, NULL, curl_cleanup, apr_pool_cleanup_null);
    return APR_SUCCESS;
}

/* ---- the handle pool ---------------------------------------------------- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *u)
{
    (void)h; (void)access; (void)u;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST && handles.share_locks[data])
        apr_thread_mutex_lock(handles.share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *u)
{
    (void)h; (void)u;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST && handles.share_locks[data])
        apr_thread_mutex_unlock(handles.share_locks[data]);
}

static void close_handle(void *h)
{
    curl_easy_cleanup(h);
}

/* After the kept handles are closed (a handle still in use keeps the share:
 * CURLSHE_IN_USE, left to the exit). */
static apr_status_t close_share(void *data)
{
    (void)data;
    if (handles.share && curl_share_cleanup(handles.share) == CURLSHE_OK)
        handles.share = NULL;
    return APR_SUCCESS;
}

static CURLSH *make_share(apr_pool_t *p)
{
    /* CURL_LOCK_DATA_SHARE guards the share itself (handles joining and
     * leaving it from several threads): it needs a lock too. */
    static const curl_lock_data locked[] = { CURL_LOCK_DATA_SHARE, CURL_LOCK_DATA_DNS,
                                             CURL_LOCK_DATA_SSL_SESSION };
    CURLSH *sh = curl_share_init();
    apr_size_t i;
    if (!sh)
        return NULL;
    for (i = 0; i < sizeof(locked) / sizeof(locked[0]); i++) {
        if (apr_thread_mutex_create(&handles.share_locks[locked[i]],
                                    APR_THREAD_MUTEX_DEFAULT, p) != APR_SUCCESS ||
            (locked[i] != CURL_LOCK_DATA_SHARE &&
             curl_share_setopt(sh, CURLSHOPT_SHARE, locked[i]) != CURLSHE_OK)) {
            curl_share_cleanup(sh);
            return NULL;
        }
    }
    curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, share_unlock);
    return sh;
}

apr_status_t ci_upstream_child_init(apr_pool_t *pchild)
{
    if (handles.idle)
        return APR_SUCCESS;
    handles.share = make_share(pchild);   /* without it: no sharing, still kept */
    apr_pool_cleanup_register(pchild, NULL, close_share, apr_pool_cleanup_null);
    /* (Registered later, so its cleanup closes the handles before the share.) */
    handles.idle = ci_idle_create(pchild, IDLE_MAX, close_handle);
    return handles.idle ? APR_SUCCESS : APR_ENOMEM;
}

static CURL *take_handle(void)
{
    CURL *h = ci_idle_take(handles.idle);
    if (!h && (h = curl_easy_init()) && handles.share)
        curl_easy_setopt(h, CURLOPT_SHARE, handles.share);
    return h;
}

/* Back to the pool with its options cleared (the request's headers, body,
 * callbacks and TLS files go; its connections, caches and share stay). A
 * failed call's handle is closed: its connection's state is unknown. */
static void give_back(CURL *h, int reusable)
{
    if (!reusable) {
        curl_easy_cleanup(h);
        return;
    }
    curl_easy_reset(h);
    ci_idle_give(handles.idle, h, close_handle);
}

/* ---- one call ------------------------------------------------------------ */

/* A 200 event stream goes to the sink as it arrives, when there is one;
 * anything else (an error answer, a plain JSON one) is kept whole. */
static int goes_to_sink(answer_buf *b)
{
    long status = 0;
    if (!b->decided) {
        b->decided = 1;
        curl_easy_getinfo(b->h, CURLINFO_RESPONSE_CODE, &status);
        b->streamed = b->opts->sink && status == 200 &&
                      (b->opts->sink_any || (b->content_type &&
                       !strncasecmp(b->content_type, "text/event-stream", 17)));
    }
    return b->streamed;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    answer_buf *b = userdata;
    size_t n = size * nmemb;
    if (goes_to_sink(b)) {
        if (b->opts->sink(b->opts->sink_baton, ptr, n)) {
            b->sink_stopped = 1;
            return 0;
        }
        return n;
    }
    if (ci_buf_append(&b->body, ptr, n) < 0) {
        b->over = 1;
        return 0;               /* makes curl stop with CURLE_WRITE_ERROR */
    }
    return n;
}

static const char *header_value(apr_pool_t *p, const char *line, size_t n,
                                const char *name)
{
    size_t k = strlen(name);
    const char *v;
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':')
        return NULL;
    v = line + k + 1;
    while (v < line + n && (*v == ' ' || *v == '\t'))
        v++;
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == '\n'))
        n--;
    return line + n > v ? apr_pstrmemdup(p, v, line + n - v) : "";
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata)
{
    answer_buf *b = userdata;
    size_t n = size * nmemb;
    const char *v;
    if ((v = header_value(b->body.p, line, n, "Content-Type")))
        b->content_type = v;
    else if ((v = header_value(b->body.p, line, n, "Retry-After")))
        b->retry_after = v;
    return n;
}

static struct curl_slist *header_list(const apr_table_t *headers)
{
    const apr_array_header_t *arr = apr_table_elts(headers);
    const apr_table_entry_t *e = (const apr_table_entry_t *)arr->elts;
    struct curl_slist *list = NULL;
    int i;
    char line[8192];
    for (i = 0; i < arr->nelts; i++) {
        if (!e[i].key || !e[i].val)
            continue;
        apr_snprintf(line, sizeof(line), "%s: %s", e[i].key, e[i].val);
        list = curl_slist_append(list, line);
    }
    list = curl_slist_append(list, "Content-Type: application/json");
    list = curl_slist_append(list, "Expect:");          /* no 100-continue wait */
    list = curl_slist_append(list, "Accept-Encoding:"); /* plain JSON back */
    return list;
}

static apr_status_t map_curl_error(CURLcode rc, const answer_buf *b)
{
    if (b->over)
        return APR_ENOSPC;
    if (b->sink_stopped)
        return APR_EOF;
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        return APR_ECONNABORTED;
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return APR_TIMEUP;
    return APR_ECONNREFUSED;
}

/* One exchange: a POST of BODY (LEN bytes), or a GET when BODY is NULL. */
static apr_status_t exchange(apr_pool_t *p, const char *url, const apr_table_t *headers,
                             const char *body, apr_size_t len,
                             const ci_upstream_opts *opts, ci_upstream_answer *ans,
                             const char **err)
{
    CURL *h = take_handle();
    struct curl_slist *list;
    answer_buf b;
    CURLcode rc;
    long status = 0;

    if (!h) {
        *err = "could not create an HTTP client handle";
        return APR_ENOMEM;
    }
    memset(&b, 0, sizeof(b));
    ci_buf_init(&b.body, p, opts->max_body);
    b.h = h;
    b.opts = opts;
    list = header_list(headers);
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &b);
    ci_curl_set_transport(h, &opts->transport);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(list);
    give_back(h, rc == CURLE_OK);
    memset(ans, 0, sizeof(*ans));
    ans->streamed = b.streamed;   /* set on failure too: the stream was cut */
    if (rc != CURLE_OK) {
        *err = b.over ? "the answer exceeds the size limit"
                      : apr_pstrdup(p, curl_easy_strerror(rc));
        return map_curl_error(rc, &b);
    }
    ans->status = (int)status;
    ans->body = ci_buf_str(&b.body);
    ans->len = b.body.len;
    ans->content_type = b.content_type;
    ans->retry_after = b.retry_after;
    return APR_SUCCESS;
}

apr_status_t ci_upstream_post(apr_pool_t *p, const char *url,
                              const apr_table_t *headers, const char *body,
                              apr_size_t len, const ci_upstream_opts *opts,
                              ci_upstream_answer *ans, const char **err)
{
    return exchange(p, url, headers, body ? body : "", len, opts, ans, err);
}

apr_status_t ci_upstream_get(apr_pool_t *p, const char *url, const apr_table_t *headers,
                             const ci_upstream_opts *opts, ci_upstream_answer *ans,
                             const char **err)
{
    return exchange(p, url, headers, NULL, 0, opts, ans, err);
}
