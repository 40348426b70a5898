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
#include "ci_buf.h"
#include "ci_dirconf.h"
#include "ci_input.h"
#include "ci_loop.h"
#include "ci_output.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_state.h"
#include "mod_code_interpreter.h"

static const char replay_filter_name[] = "CODE_INTERPRETER_REPLAY";

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

/* Append the data buckets of BB to BUF. Returns 1 at EOS, -1 over its limit. */
static int take_buckets(apr_bucket_brigade *bb, ci_buf *buf)
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
        if (ci_buf_append(buf, data, n) < 0)
            return -1;
    }
    return 0;
}

/* Read the whole body, at most LIMIT bytes. OK, or the status already sent. */
static int read_body(request_rec *r, apr_off_t limit, char **out, apr_size_t *outlen)
{
    const char *cl = apr_table_get(r->headers_in, "Content-Length");
    apr_off_t declared = 0;
    apr_bucket_brigade *bb;
    ci_buf buf;
    int state = 0;

    if (cl && (apr_strtoff(&declared, cl, NULL, 10) != APR_SUCCESS || declared < 0))
        declared = 0;
    if (declared > limit)
        return body_too_large(r, limit);
    ci_buf_init(&buf, r->pool, (apr_size_t)limit);
    ci_buf_reserve(&buf, (apr_size_t)(declared > 0 ? declared : 8192));
    bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    while (state == 0) {
        apr_status_t rv = ap_get_brigade(r->input_filters, bb, AP_MODE_READBYTES,
                                         APR_BLOCK_READ, 65536);
        if (rv != APR_SUCCESS)
            return body_read_failed(r, rv);
        state = take_buckets(bb, &buf);
        apr_brigade_cleanup(bb);
    }
    if (state < 0)
        return body_too_large(r, limit);
    *out = buf.data;
    *outlen = buf.len;
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

static int misconfigured(request_rec *r, const char *name)
{
    ci_error err;
    /* configtest refuses this; a guard, never a crash */
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0103: CodeInterpreter names "
                  "sandbox '%s', which this server does not declare", name);
    ci_error_set(&err, 500, CI_SERVER, NULL, "server_error", r->pool,
                 "The code interpreter is misconfigured on this server.");
    return ci_send_error(r, &err);
}

static int intercept(request_rec *r, const ci_sandbox_def *sandbox, ci_request *req)
{
    ci_req_state *st;
    ci_error err;
    if (!ci_registry_tool_current(sandbox, r->request_time)) {
        /* This child predates a reload that removed or changed the tool: a
         * request accepted now must not create anything with the old one.
         * The retry lands on a new child. */
        r->connection->keepalive = AP_CONN_CLOSE;
        apr_table_setn(r->err_headers_out, "Retry-After", "1");
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0104: sandbox tool %s was "
                      "reconfigured by a reload; refused in this older child",
                      sandbox->name);
        ci_error_set(&err, 503, CI_SERVER, NULL, "sandbox_reconfigured", r->pool,
                     "The server is reloading its configuration; retry the request.");
        return ci_send_error(r, &err);
    }
    st = ci_state_create(r);
    st->req = req;
    st->sandbox = sandbox;
    st->container_id = ci_mint_id(r->pool, "cntr_", 24);
    st->owner = ci_owner_of(r);     /* now: before mod_headers may change a header */
    st->started = apr_time_now();
    apr_table_unset(r->headers_in, "Accept-Encoding");
    replay(r, req->body, req->body_len);
    ap_add_output_filter(ci_output_filter_name, NULL, r, r->connection);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "CI0101: intercepted: tool=%s container=%s stream=%d "
                  "include_outputs=%d body %" APR_SIZE_T_FMT " bytes",
                  sandbox->name, st->container_id, req->wants_stream,
                  req->include_outputs, req->body_len);
    return OK;
}

static int ci_fixups(request_rec *r)
{
    ci_dir_conf *d = ci_dir_config(r);
    const ci_sandbox_def *sandbox;
    ci_rewrite_opts opts = { 0 };
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
    sandbox = ci_sandbox_lookup(r->server, d->sandbox);
    opts.function_name = ci_dir_function_name(d);
    opts.function_description = ci_function_description(sandbox && sandbox->internet);
    switch (ci_request_rewrite(r->pool, body, len, &opts, &req, &err)) {
    case CI_REQ_PASS:
        replay(r, body, len);
        return DECLINED;
    case CI_REQ_ERROR:
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                      "CI0102: refused (%d): %s", err.status, err.message);
        return ci_send_error(r, &err);
    default:
        if (!sandbox)
            return misconfigured(r, d->sandbox);
        rc = intercept(r, sandbox, req);
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
