/* ci_curl.c - the transport settings of every outgoing call. */
#include "ci_curl.h"

static int on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    const ci_curl_transport *t = clientp;
    return t->abort(t->abort_baton) ? 1 : 0;
}

static long at_least_1ms(apr_interval_time_t t)
{
    long ms = (long)apr_time_as_msec(t);
    return ms > 0 ? ms : 1L;
}

void ci_curl_set_transport(CURL *h, const ci_curl_transport *t)
{
    long total = at_least_1ms(t->timeout);
    long connect = at_least_1ms(t->connect_timeout);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect < total ? connect : total);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, total);
    /* An empty proxy string disables proxies, environment ones included. */
    curl_easy_setopt(h, CURLOPT_PROXY, t->proxy ? t->proxy : "");
    if (t->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
    if (t->client_cert)
        curl_easy_setopt(h, CURLOPT_SSLCERT, t->client_cert);
    if (t->client_key)
        curl_easy_setopt(h, CURLOPT_SSLKEY, t->client_key);
    if (t->abort) {
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)t);
    }
}
