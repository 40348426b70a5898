/*
 * ci_output.c - the response side's output filter: a 200 JSON answer to an
 * intercepted request is buffered (bounded) and handed to the loop driver;
 * a 200 event stream is relayed to the client as it comes (the driver's
 * relay, core/ci_relay.c), its rounds run as their calls arrive; anything
 * else goes through untouched.
 */
#include <apr_strings.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include "ci_buf.h"
#include "ci_settings.h"
#include "ci_driver.h"
#include "ci_output.h"
#include "ci_request_state.h"
#include "ci_module.h"

const char ci_output_filter_name[] = "CODE_INTERPRETER_OUT";

typedef struct out_ctx {
    ci_buf body;            /* the first upstream answer, when it is JSON */
    ci_driver *dv;
    int over, broken, passthrough;
    int relayed;            /* it is an event stream, relayed as it comes */
    int relay_stopped;      /* the relay failed or the client left */
} out_ctx;

/* ---- the filter --------------------------------------------------------- */

/* Only a 200 JSON answer in plain encoding is ours to rework; anything else
 * (an upstream error with its status, body and Retry-After) goes through. */
static int should_pass_through(request_rec *r)
{
    const char *enc = apr_table_get(r->headers_out, "Content-Encoding");
    const char *type = r->content_type;
    if (r->status != HTTP_OK || r->header_only)
        return 1;
    if (enc && strcasecmp(enc, "identity"))
        return 1;
    return type && !ap_strcasestr(type, "json");
}

/* The client asked for a stream, so we did: an event stream is relayed as
 * it comes (a JSON answer is still taken whole). */
static int is_event_stream(request_rec *r)
{
    const ci_req_state *st = ci_request_state(r);
    return st && st->req->wants_stream && r->content_type &&
           !strncasecmp(r->content_type, "text/event-stream", 17);
}

static void take(out_ctx *ctx, const char *data, apr_size_t n)
{
    if (ctx->relayed) {
        if (!ctx->relay_stopped && ci_driver_relay(ctx->dv, data, n) != APR_SUCCESS)
            ctx->relay_stopped = 1;   /* the rest is read and dropped */
        return;
    }
    if (!ctx->over && ci_buf_append(&ctx->body, data, n) < 0)
        ctx->over = 1;
}

static apr_status_t finish(ap_filter_t *f, out_ctx *ctx)
{
    ci_first_answer how = ctx->over ? CI_FIRST_TOO_LARGE
                          : ctx->broken ? CI_FIRST_BROKEN
                          : ctx->relayed ? CI_FIRST_STREAMED : CI_FIRST_OK;
    return ci_driver_finish(ctx->dv, how, ci_buf_str(&ctx->body), ctx->body.len);
}

static out_ctx *make_ctx(ap_filter_t *f)
{
    request_rec *r = f->r;
    out_ctx *ctx = apr_pcalloc(r->pool, sizeof(*ctx));
    const char *cl = apr_table_get(r->headers_out, "Content-Length");
    apr_off_t max = ci_loc_max_body(ci_loc_config(r)), n;
    ci_buf_init(&ctx->body, r->pool, (apr_size_t)max);
    if (cl && apr_strtoff(&n, cl, NULL, 10) == APR_SUCCESS && n > 0 && n <= max)
        ci_buf_reserve(&ctx->body, (apr_size_t)n);  /* one allocation, no regrowth */
    ctx->relayed = ci_request_state(r) && r->status == HTTP_OK && !r->header_only &&
                   is_event_stream(r) && !apr_table_get(r->headers_out, "Content-Encoding");
    ctx->passthrough = !ctx->relayed && (!ci_request_state(r) || should_pass_through(r));
    if (!ctx->passthrough)
        ctx->dv = ci_driver_create(f, ctx->relayed);
    f->ctx = ctx;
    return ctx;
}

static apr_status_t ci_output_filter(ap_filter_t *f, apr_bucket_brigade *bb)
{
    out_ctx *ctx = f->ctx ? f->ctx : make_ctx(f);
    apr_bucket *b;

    if (ctx->passthrough) {
        ap_remove_output_filter(f);
        return ap_pass_brigade(f->next, bb);
    }
    for (b = APR_BRIGADE_FIRST(bb); b != APR_BRIGADE_SENTINEL(bb);
         b = APR_BUCKET_NEXT(b)) {
        const char *data;
        apr_size_t n;
        if (APR_BUCKET_IS_EOS(b)) {
            apr_brigade_cleanup(bb);
            return finish(f, ctx);
        }
        if (AP_BUCKET_IS_ERROR(b))
            ctx->broken = 1;
        if (APR_BUCKET_IS_METADATA(b))
            continue;
        if (apr_bucket_read(b, &data, &n, APR_BLOCK_READ) != APR_SUCCESS) {
            ctx->broken = 1;
            continue;
        }
        take(ctx, data, n);
    }
    apr_brigade_cleanup(bb);
    return APR_SUCCESS;
}

void ci_output_register_hooks(apr_pool_t *p)
{
    ap_register_output_filter(ci_output_filter_name, ci_output_filter, NULL,
                              AP_FTYPE_RESOURCE);
}
