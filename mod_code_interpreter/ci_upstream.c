/*
 * ci_upstream.c - follow-up POSTs to the model upstream with libcurl.
 * Proxies from the environment are ignored; only http and https; no
 * redirects; the answer is capped while it arrives.
 */
#include <string.h>
#include <curl/curl.h>
#include <apr_strings.h>
#include "ci_upstream.h"

typedef struct answer_buf {
    apr_pool_t *p;
    char *data;
    apr_size_t len, alloc, max;
    int over;
    const char *content_type;
    const char *retry_after;
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

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    answer_buf *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n > b->max) {
        b->over = 1;
        return 0;               /* makes curl stop with CURLE_WRITE_ERROR */
    }
    if (b->len + n + 1 > b->alloc) {
        apr_size_t want = (b->len + n + 1) * 2;
        char *grown;
        if (want > b->max + 1)
            want = b->max + 1;
        grown = apr_palloc(b->p, want);
        if (b->len)
            memcpy(grown, b->data, b->len);
        b->data = grown;
        b->alloc = want;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
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
    if ((v = header_value(b->p, line, n, "Content-Type")))
        b->content_type = v;
    else if ((v = header_value(b->p, line, n, "Retry-After")))
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

static int on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    const ci_upstream_opts *o = clientp;
    return o->progress(o->progress_baton) ? 1 : 0;
}

static void set_transport(CURL *h, const ci_upstream_opts *o)
{
    long ms_connect = (long)apr_time_as_msec(o->connect_timeout);
    long ms_total = (long)apr_time_as_msec(o->timeout);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms_connect > 0 ? ms_connect : 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms_total > 0 ? ms_total : 1L);
    /* An empty proxy string disables proxies, environment ones included. */
    curl_easy_setopt(h, CURLOPT_PROXY, o->proxy ? o->proxy : "");
    if (o->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, o->ca_file);
    if (o->client_cert)
        curl_easy_setopt(h, CURLOPT_SSLCERT, o->client_cert);
    if (o->client_key)
        curl_easy_setopt(h, CURLOPT_SSLKEY, o->client_key);
    if (o->progress) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)o);
    }
}

static apr_status_t map_curl_error(CURLcode rc, const answer_buf *b)
{
    if (b->over)
        return APR_ENOSPC;
    if (rc == CURLE_ABORTED_BY_CALLBACK)
        return APR_ECONNABORTED;
    if (rc == CURLE_OPERATION_TIMEDOUT)
        return APR_TIMEUP;
    return APR_ECONNREFUSED;
}

apr_status_t ci_upstream_post(apr_pool_t *p, const char *url,
                              const apr_table_t *headers, const char *body,
                              apr_size_t len, const ci_upstream_opts *opts,
                              ci_upstream_answer *ans, const char **err)
{
    CURL *h = curl_easy_init();
    struct curl_slist *list;
    answer_buf b;
    CURLcode rc;
    long status = 0;

    if (!h) {
        *err = "could not create an HTTP client handle";
        return APR_ENOMEM;
    }
    memset(&b, 0, sizeof(b));
    b.p = p;
    b.max = opts->max_body;
    list = header_list(headers);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &b);
    set_transport(h, opts);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(list);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK) {
        *err = b.over ? "the answer exceeds the size limit"
                      : apr_pstrdup(p, curl_easy_strerror(rc));
        return map_curl_error(rc, &b);
    }
    ans->status = (int)status;
    ans->body = b.data ? b.data : "";
    ans->len = b.len;
    if (b.data)
        b.data[b.len] = '\0';
    ans->content_type = b.content_type;
    ans->retry_after = b.retry_after;
    return APR_SUCCESS;
}
