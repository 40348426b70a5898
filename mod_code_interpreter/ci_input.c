/*
 * ci_input.c - the request side. At locations with CodeInterpreter on, a
 * POST with a JSON body is read once (bounded), scanned for the bytes
 * "code_interpreter", rewritten when it carries the tool, and handed back to
 * mod_proxy by a replay input filter.
 */
#include <apr_strings.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include "ci_registry.h"
#include "mod_code_interpreter.h"

static const char replay_filter_name[] = "CODE_INTERPRETER_REPLAY";

ci_req_state *ci_state_get(request_rec *r)
{
    return ap_get_module_config(r->request_config, &code_interpreter_module);
}

int ci_send_error(request_rec *r, const ci_error *err)
{
    apr_size_t len;
    const char *body = ci_error_body(r->pool, err, &len);
    r->status = err->status;
    r->status_line = NULL;
    apr_table_unset(r->headers_out, "Content-Length");
    ap_set_content_type(r, "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    ap_rwrite(body, (int)len, r);
    return DONE;
}

/* ---- replay ------------------------------------------------------------ */

typedef struct replay_ctx {
    const char *data;
    apr_size_t len;
    int sent;
} replay_ctx;

/* Hands back the whole stored body and EOS on the first read, whatever
 * readbytes asks: mod_proxy then sees EOS within its prefetch and sends the
 * body with a Content-Length, without spooling it to a temporary file. */
static apr_status_t replay_filter(ap_filter_t *f, apr_bucket_brigade *bb,
                                  ap_input_mode_t mode, apr_read_type_e block,
                                  apr_off_t readbytes)
{
    replay_ctx *ctx = f->ctx;
    apr_bucket_alloc_t *ba = f->c->bucket_alloc;
    if (mode != AP_MODE_READBYTES && mode != AP_MODE_SPECULATIVE &&
        mode != AP_MODE_EXHAUSTIVE && mode != AP_MODE_GETLINE)
        return APR_ENOTIMPL;
    if (!ctx->sent && ctx->len > 0)
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_immortal_create(ctx->data, ctx->len, ba));
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(ba));
    if (mode != AP_MODE_SPECULATIVE)
        ctx->sent = 1;
    return APR_SUCCESS;
}

static void replay(request_rec *r, const char *data, apr_size_t len)
{
    replay_ctx *ctx = apr_pcalloc(r->pool, sizeof(*ctx));
    ctx->data = data;
    ctx->len = len;
    ap_add_input_filter(replay_filter_name, ctx, r, r->connection);
    apr_table_setn(r->headers_in, "Content-Length",
                   apr_psprintf(r->pool, "%" APR_SIZE_T_FMT, len));
    apr_table_unset(r->headers_in, "Transfer-Encoding");
}

/* ---- reading the body -------------------------------------------------- */

static int body_too_large(request_rec *r, apr_off_t limit)
{
    ci_error err;
    r->connection->keepalive = AP_CONN_CLOSE;
    ci_error_set(&err, 413, CI_INVALID, NULL, "request_too_large", r->pool,
                 "The request body exceeds this server's limit of %" APR_OFF_T_FMT
                 " bytes.", limit);
    return ci_send_error(r, &err);
}

static int body_read_failed(request_rec *r, apr_status_t rv)
{
    ci_error err;
    int status = ap_map_http_request_error(rv, HTTP_BAD_REQUEST);
    r->connection->keepalive = AP_CONN_CLOSE;
    if (status == HTTP_REQUEST_ENTITY_TOO_LARGE)
        return body_too_large(r, (apr_off_t)ap_get_limit_req_body(r));
    ci_error_set(&err, status == HTTP_REQUEST_TIME_OUT ? 408 : 400, CI_INVALID,
                 NULL, "body_read_error", r->pool,
                 status == HTTP_REQUEST_TIME_OUT
                     ? "Timed out reading the request body."
                     : "The request body could not be read.");
    return ci_send_error(r, &err);
}

/* Append the data buckets of BB to *BUF. Returns 1 at EOS, -1 over LIMIT. */
static int take_buckets(apr_bucket_brigade *bb, char **buf, apr_size_t *len,
                        apr_size_t *alloc, apr_off_t limit, apr_pool_t *p)
{
    apr_bucket *b;
    for (b = APR_BRIGADE_FIRST(bb); b != APR_BRIGADE_SENTINEL(bb);
         b = APR_BUCKET_NEXT(b)) {
        const char *data;
        apr_size_t n;
        if (APR_BUCKET_IS_EOS(b))
            return 1;
        if (APR_BUCKET_IS_METADATA(b) ||
            apr_bucket_read(b, &data, &n, APR_BLOCK_READ) != APR_SUCCESS || !n)
            continue;
        if ((apr_off_t)(*len + n) > limit)
            return -1;
        if (*len + n + 1 > *alloc) {
            apr_size_t want = (*len + n + 1) * 2;
            char *grown = apr_palloc(p, want);
            memcpy(grown, *buf, *len);
            *buf = grown;
            *alloc = want;
        }
        memcpy(*buf + *len, data, n);
        *len += n;
    }
    return 0;
}

/* Read the whole body, at most LIMIT bytes. OK, or the status already sent. */
static int read_body(request_rec *r, apr_off_t limit, char **out, apr_size_t *outlen)
{
    const char *cl = apr_table_get(r->headers_in, "Content-Length");
    apr_off_t declared = 0;
    apr_bucket_brigade *bb;
    apr_size_t len = 0, alloc;
    char *buf;
    int state = 0;

    if (cl && (apr_strtoff(&declared, cl, NULL, 10) != APR_SUCCESS || declared < 0))
        declared = 0;
    if (declared > limit)
        return body_too_large(r, limit);
    alloc = (apr_size_t)(declared > 0 ? declared + 1 : 8192);
    buf = apr_palloc(r->pool, alloc);
    bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    while (state == 0) {
        apr_status_t rv = ap_get_brigade(r->input_filters, bb, AP_MODE_READBYTES,
                                         APR_BLOCK_READ, 65536);
        if (rv != APR_SUCCESS)
            return body_read_failed(r, rv);
        state = take_buckets(bb, &buf, &len, &alloc, limit, r->pool);
        apr_brigade_cleanup(bb);
    }
    if (state < 0)
        return body_too_large(r, limit);
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    return OK;
}

/* ---- the fixups hook --------------------------------------------------- */

static int is_json(request_rec *r)
{
    const char *ct = apr_table_get(r->headers_in, "Content-Type");
    if (!ct)
        return 0;
    return !strncasecmp(ct, "application/json", 16) ||
           (ap_strcasestr(ct, "+json") != NULL);
}

static int intercept(request_rec *r, ci_dir_conf *d, ci_request *req)
{
    ci_req_state *st = apr_pcalloc(r->pool, sizeof(*st));
    ci_error err;
    st->req = req;
    st->sandbox = ci_sandbox_lookup(r->server, d->sandbox);
    if (!st->sandbox) {
        /* configtest refuses this; a guard, never a crash */
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0103: CodeInterpreter names "
                      "sandbox '%s', which this server does not declare", d->sandbox);
        ci_error_set(&err, 500, CI_SERVER, NULL, "server_error", r->pool,
                     "The code interpreter is misconfigured on this server.");
        return ci_send_error(r, &err);
    }
    if (!ci_registry_tool_current(st->sandbox, r->request_time)) {
        /* This child predates a reload that removed or changed the tool: a
         * request accepted now must not create anything with the old one.
         * The retry lands on a new child. */
        r->connection->keepalive = AP_CONN_CLOSE;
        apr_table_setn(r->err_headers_out, "Retry-After", "1");
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0104: sandbox tool %s was "
                      "reconfigured by a reload; refused in this older child",
                      st->sandbox->name);
        ci_error_set(&err, 503, CI_SERVER, NULL, "sandbox_reconfigured", r->pool,
                     "The server is reloading its configuration; retry the request.");
        return ci_send_error(r, &err);
    }
    st->tag = ci_mint_id(r->pool, "cntr_", 24);
    st->container_id = st->tag;
    st->started = apr_time_now();
    ap_set_module_config(r->request_config, &code_interpreter_module, st);
    apr_table_unset(r->headers_in, "Accept-Encoding");
    replay(r, req->body, req->body_len);
    ap_add_output_filter(ci_output_filter_name, NULL, r, r->connection);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "CI0101: intercepted: tool=%s container=%s stream=%d "
                  "include_outputs=%d body %" APR_SIZE_T_FMT " bytes",
                  st->sandbox ? st->sandbox->name : "?", st->container_id,
                  req->wants_stream, req->include_outputs, req->body_len);
    return OK;
}

static int ci_fixups(request_rec *r)
{
    ci_dir_conf *d = ap_get_module_config(r->per_dir_config, &code_interpreter_module);
    ci_rewrite_opts opts;
    ci_request *req = NULL;
    ci_error err;
    char *body = NULL;
    apr_size_t len = 0;
    apr_time_t t0;
    int rc;

    if (!d || d->enabled != 1 || r->main || r->prev || r->method_number != M_POST ||
        !is_json(r))
        return DECLINED;
    if ((rc = read_body(r, ci_dir_max_body(d), &body, &len)) != OK)
        return rc;
    t0 = apr_time_now();
    if (!ci_body_mentions_tool(body, len)) {
        replay(r, body, len);
        return DECLINED;
    }
    opts.function_name = ci_dir_function_name(d);
    opts.function_description = NULL;
    switch (ci_request_rewrite(r->pool, body, len, &opts, &req, &err)) {
    case CI_REQ_PASS:
        replay(r, body, len);
        return DECLINED;
    case CI_REQ_ERROR:
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                      "CI0102: refused (%d): %s", err.status, err.message);
        return ci_send_error(r, &err);
    default:
        rc = intercept(r, d, req);
        if (rc == OK)           /* (an error answer sets no state) */
            ci_state_get(r)->module_time += apr_time_now() - t0;
        return rc;
    }
}

void ci_input_register_hooks(apr_pool_t *p)
{
    ap_hook_fixups(ci_fixups, NULL, NULL, APR_HOOK_REALLY_FIRST);
    ap_register_input_filter(replay_filter_name, replay_filter, NULL,
                             AP_FTYPE_RESOURCE);
}
