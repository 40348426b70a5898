/*
 * ci_driver.c - the loop of an intercepted request: executions on the worker
 * pool, follow-ups with libcurl, and the client's answer (JSON, or the event
 * stream written round by round).
 */
#include <limits.h>
#include <apr_strings.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include "ci_audit.h"
#include "ci_settings.h"
#include "ci_driver.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_shell.h"
#include "ci_relay.h"
#include "ci_session.h"
#include "ci_sse.h"
#include "ci_containers.h"
#include "ci_request_state.h"
#include "ci_upstream.h"
#include "ci_module.h"

/* One run of the loop. */
struct ci_driver {
    request_rec *r;
    ap_filter_t *f;
    ci_req_state *st;
    ci_loc_conf *d;
    ci_loop *loop;
    ci_session *session;
    apr_time_t deadline_at;
    apr_time_t mark;              /* start of the current module-time slice */
    apr_interval_time_t sandbox_time, upstream_time;
    const char *url;
    apr_table_t *headers;
    ci_error err;
    int passthrough_status;       /* an upstream error answer to pass on */
    ci_upstream_answer error_answer;
    ci_sse *sse;                  /* the client asked for a stream */
    ci_relay *relay;              /* ... and the upstream streams to us */
    int round_relayed;            /* this round's items went out as they came */
    int stream_started;           /* status and headers are gone */
    apr_time_t last_write;
    int timeout_is_deadline;      /* the follow-up's limit is the deadline */
};
typedef struct ci_driver driver;

/* ---- time accounting ---------------------------------------------------- */

static void module_pause(driver *dv)
{
    dv->st->module_time += apr_time_now() - dv->mark;
}

static void module_resume(driver *dv)
{
    dv->mark = apr_time_now();
}

static void set_notes(driver *dv)
{
    request_rec *r = dv->r;
    apr_table_setn(r->notes, "ci-rounds",
                   apr_itoa(r->pool, dv->loop ? ci_loop_rounds(dv->loop) : 1));
    apr_table_setn(r->notes, "ci-executions",
                   apr_itoa(r->pool, dv->loop ? ci_loop_executions(dv->loop) : 0));
    apr_table_setn(r->notes, "ci-sandbox-us",
                   apr_psprintf(r->pool, "%" APR_TIME_T_FMT, dv->sandbox_time));
    apr_table_setn(r->notes, "ci-upstream-us",
                   apr_psprintf(r->pool, "%" APR_TIME_T_FMT, dv->upstream_time));
    apr_table_setn(r->notes, "ci-module-us",
                   apr_psprintf(r->pool, "%" APR_TIME_T_FMT, dv->st->module_time));
    if (dv->st->owner)
        apr_table_setn(r->notes, "ci-owner", dv->st->owner);
}

/* ---- streaming ---------------------------------------------------------- */

static void stream_headers(driver *dv)
{
    request_rec *r = dv->r;
    r->status = HTTP_OK;
    r->status_line = NULL;
    apr_table_unset(r->headers_out, "Content-Length");
    apr_table_unset(r->headers_out, "ETag");
    apr_table_unset(r->headers_out, "Last-Modified");
    apr_table_unset(r->headers_out, "Content-Encoding");
    apr_table_setn(r->headers_out, "Cache-Control", "no-cache");
    apr_table_setn(r->headers_out, "X-Accel-Buffering", "no");
    /* mod_deflate would hold events back until its buffer fills. */
    apr_table_setn(r->subprocess_env, "no-gzip", "1");
    ap_set_content_type(r, "text/event-stream; charset=utf-8");
    dv->stream_started = 1;
}

/* Send what the encoder produced, then FLUSH. -1 when the client is gone. */
static int flush_events(driver *dv, int eos)
{
    request_rec *r = dv->r;
    apr_bucket_alloc_t *ba = r->connection->bucket_alloc;
    apr_bucket_brigade *bb;
    apr_size_t len;
    const char *data = ci_sse_take(dv->sse, &len);
    apr_status_t rv;

    if (!len && !eos)
        return 0;
    if (!dv->stream_started)
        stream_headers(dv);
    bb = apr_brigade_create(r->pool, ba);
    if (len)
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_pool_create(data, len, r->pool, ba));
    /* FLUSH before EOS too: the last events reach the client before the
     * work the request still does (send_response) */
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(ba));
    if (eos)
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(ba));
    rv = ap_pass_brigade(dv->f->next, bb);
    apr_brigade_cleanup(bb);
    dv->last_write = apr_time_now();
    if (rv != APR_SUCCESS || r->connection->aborted) {
        r->connection->aborted = 1;
        return -1;
    }
    return 0;
}

/* While waiting: a comment line every CodeInterpreterKeepalive seconds. */
static void keepalive_if_due(driver *dv)
{
    if (dv->sse && dv->stream_started &&
        apr_time_now() - dv->last_write >= ci_loc_keepalive(dv->d)) {
        ci_sse_keepalive(dv->sse);
        flush_events(dv, 0);
    }
}

/* ---- client and deadline ------------------------------------------------ */

static int client_gone(request_rec *r)
{
    apr_socket_t *sock = ap_get_conn_socket(r->connection);
    int eof = 0;
    if (r->connection->aborted)
        return 1;
    if (sock && apr_socket_atreadeof(sock, &eof) == APR_SUCCESS && eof)
        r->connection->aborted = 1;
    return r->connection->aborted;
}

static int past_deadline(driver *dv)
{
    return apr_time_now() >= dv->deadline_at;
}

/* Called while an execution runs: give up when the client left or the
 * deadline passed. */
static int wait_tick(void *baton)
{
    driver *dv = baton;
    keepalive_if_due(dv);
    return client_gone(dv->r) || past_deadline(dv);
}

static int deadline_error(driver *dv)
{
    ci_error_set(&dv->err, 504, CI_SERVER, NULL, "deadline_exceeded", dv->r->pool,
                 "The request did not finish within this server's deadline of "
                 "%d seconds.", (int)apr_time_sec(ci_loc_deadline(dv->d)));
    return -1;
}

/* ---- executions --------------------------------------------------------- */

/* What a shell call's commands printed, stdout and stderr. */
static apr_size_t commands_bytes(const ci_exec_result *res)
{
    apr_size_t n = 0;
    int i;
    for (i = 0; res->commands && i < res->commands->nelts; i++) {
        const ci_command_result *c = &APR_ARRAY_IDX(res->commands, i, ci_command_result);
        n += (c->stdout_text ? strlen(c->stdout_text) : 0) +
             (c->stderr_text ? strlen(c->stderr_text) : 0);
    }
    return n;
}

/* The execution hook (mod_code_interpreter.h): CALL has run, from T0. */
static void tell_execution(driver *dv, const ci_call *call, apr_time_t t0)
{
    const ci_exec_result *res = call->result;
    ci_execution e;

    memset(&e, 0, sizeof(e));
    e.tool = dv->st->sandbox->name;
    e.provider = dv->st->sandbox->provider->name;
    e.container_id = dv->st->container_id;
    e.owner = dv->st->owner;
    e.call_id = call->item_id;
    e.kind = call->shell ? "commands" : "code";
    e.text = call->shell ? apr_array_pstrcat(dv->r->pool, call->action->commands, '\n')
                         : call->code;
    e.command_list = call->shell ? call->action->commands : NULL;
    e.commands = call->shell ? res->commands : NULL;
    e.outcome = res->outcome;
    e.failed = ci_exec_failed(res);
    e.failure = res->failure;
    e.output_bytes = call->shell ? commands_bytes(res) : res->text_len;
    e.images = res->images ? res->images->nelts : 0;
    e.started = t0;
    e.duration = res->duration;
    ci_run_execution(dv->r, &e);
}

static int execute_call(driver *dv, ci_call *call)
{
    ci_shell_action action;
    ci_exec_result res;
    apr_time_t t0;
    apr_status_t rv;

    if (!ci_loop_may_execute(dv->loop, call))
        return 0;
    if (!dv->session)
        dv->session = ci_session_create(dv->r, dv->st);
    module_pause(dv);
    t0 = apr_time_now();
    if (call->shell)
        ci_loop_shell_bounds(dv->loop, call, dv->st->sandbox->timeout,
                             dv->st->sandbox->max_output, &action);
    rv = ci_session_run(dv->session, call->shell ? NULL : call->code,
                        call->shell ? &action : NULL, &res, apr_time_from_msec(250),
                        wait_tick, dv, &dv->err);
    dv->sandbox_time += apr_time_now() - t0;
    module_resume(dv);
    if (rv != APR_SUCCESS)
        return -1;
    if (past_deadline(dv))
        return deadline_error(dv);
    /* Interrupted because the client left (seen while waiting)? Then it is
     * not recorded. A departure not yet seen is noticed before the next
     * execution or follow-up: no system call after every step. */
    if (dv->r->connection->aborted)
        return -1;
    ci_loop_record(dv->loop, call, &res);
    tell_execution(dv, call, t0);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, dv->r,
                  "CI0201: round %d call %s: %s in %" APR_TIME_T_FMT " us, "
                  "%" APR_SIZE_T_FMT " bytes of output", call->round,
                  call->item_id, ci_exec_outcome_name(res.outcome),
                  res.duration, res.text_len);
    return 0;
}

/* Walk the round's items in output order: stream each (when streaming) and
 * run our calls as they come, so a client sees a call's code before it runs
 * and its result before the next round starts. */
static void log_round(driver *dv, apr_size_t bytes)
{
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, dv->r,
                  "CI0209: round %d: %d items, %d code calls%s",
                  ci_loop_rounds(dv->loop), ci_loop_round_items(dv->loop)->nelts,
                  ci_loop_round_calls(dv->loop)->nelts,
                  ci_loop_round_has_client_calls(dv->loop) ? ", client calls" : "");
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, dv->r,
                  "CI0210: round %d answer: %" APR_SIZE_T_FMT " bytes",
                  ci_loop_rounds(dv->loop), bytes);
}

/* The events of item RI before its execution: all of them for a round that
 * came whole; for a relayed one, those held back behind an earlier call,
 * then code.done and interpreting for a call. */
static int item_events(driver *dv, const ci_round_item *ri)
{
    if (!dv->sse)
        return 0;
    if (dv->round_relayed) {
        ci_sse_release(dv->sse, ri->output_index);
        if (ri->call)
            ci_sse_call_ready(dv->sse, ri->call);
    }
    else if (ri->call)
        ci_sse_call_start(dv->sse, ri->call);
    else
        ci_sse_item(dv->sse, ri);
    return flush_events(dv, 0);
}

static int play_round(driver *dv)
{
    const apr_array_header_t *items = ci_loop_round_items(dv->loop);
    int i;
    for (i = 0; i < items->nelts; i++) {
        const ci_round_item *ri = &APR_ARRAY_IDX(items, i, ci_round_item);
        if (ri->call) {
            if (past_deadline(dv))
                return deadline_error(dv);
            if (client_gone(dv->r))     /* nobody to run it for */
                return -1;
        }
        if (item_events(dv, ri))
            return -1;
        if (!ri->call)
            continue;
        if (execute_call(dv, ri->call))
            return -1;
        if (dv->sse) {
            ci_sse_call_done(dv->sse, ri->call);
            if (flush_events(dv, 0))
                return -1;
        }
    }
    if (dv->sse && dv->round_relayed) {
        ci_sse_release(dv->sse, INT_MAX);   /* what no item of the round claimed */
        return flush_events(dv, 0);
    }
    return 0;
}

/* ---- follow-ups --------------------------------------------------------- */

/* Headers that describe one connection, never forwarded (RFC 9110 7.6.1). */
static int is_hop_by_hop(const char *name)
{
    static const char *const names[] = {
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
        "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade", NULL };
    int i;
    for (i = 0; names[i]; i++)
        if (!strcasecmp(name, names[i]))
            return 1;
    return 0;
}

/* Headers each follow-up sets itself (ci_upstream.c): its own host and body,
 * no 100-continue wait, a plain JSON answer. */
static int is_set_per_call(const char *name)
{
    static const char *const names[] = {
        "Host", "Content-Length", "Content-Type", "Expect", "Accept-Encoding", NULL };
    int i;
    for (i = 0; names[i]; i++)
        if (!strcasecmp(name, names[i]))
            return 1;
    return 0;
}

/* The request headers mod_proxy sent, less hop-by-hop ones (and those the
 * Connection header names). */
static apr_table_t *followup_headers(request_rec *r)
{
    const apr_array_header_t *arr = apr_table_elts(r->headers_in);
    const apr_table_entry_t *e = (const apr_table_entry_t *)arr->elts;
    const char *conn = apr_table_get(r->headers_in, "Connection");
    apr_table_t *out = apr_table_make(r->pool, arr->nelts);
    int i;
    for (i = 0; i < arr->nelts; i++) {
        if (!e[i].key || is_hop_by_hop(e[i].key) || is_set_per_call(e[i].key))
            continue;
        if (conn && ap_find_token(r->pool, conn, e[i].key))
            continue;
        apr_table_addn(out, e[i].key, e[i].val);
    }
    return out;
}

static const char *followup_url(driver *dv)
{
    return ci_loc_upstream_url(dv->r, dv->d);
}

static int followup_progress(void *baton)
{
    driver *dv = baton;
    keepalive_if_due(dv);
    return client_gone(dv->r);
}

static void upstream_opts(driver *dv, ci_upstream_opts *o)
{
    apr_interval_time_t left = dv->deadline_at - apr_time_now();
    ci_loc_conf *d = dv->d;
    memset(o, 0, sizeof(*o));
    apr_interval_time_t own = ci_loc_upstream_timeout(d);
    ci_loc_transport(d, &o->transport);
    dv->timeout_is_deadline = !(own > 0 && own < left);
    o->transport.timeout = dv->timeout_is_deadline ? left : own;
    o->transport.abort = followup_progress;
    o->transport.abort_baton = dv;
    o->max_body = (apr_size_t)ci_loc_max_body(d);
}

static int followup_failed(driver *dv, apr_status_t rv, const char *why)
{
    ap_log_rerror(APLOG_MARK, APLOG_ERR, rv, dv->r,
                  "CI0202: follow-up to %s failed: %s", dv->url, why);
    if (rv == APR_ECONNABORTED)
        return -1;
    /* The call's limit was what was left of the deadline (rounded to
     * milliseconds): its timing out is the deadline passing. */
    if (rv == APR_TIMEUP && (past_deadline(dv) || dv->timeout_is_deadline))
        return deadline_error(dv);
    if (rv == APR_TIMEUP)
        ci_error_set(&dv->err, 504, CI_SERVER, NULL, "upstream_timeout", dv->r->pool,
                     "The model upstream did not answer a follow-up call in time.");
    else if (rv == APR_ENOSPC)
        ci_error_set(&dv->err, 502, CI_SERVER, NULL, "upstream_too_large", dv->r->pool,
                     "The model upstream's answer exceeds this server's limit.");
    else
        ci_error_set(&dv->err, 502, CI_SERVER, NULL, "upstream_unreachable",
                     dv->r->pool, "The model upstream could not be reached for a "
                                  "follow-up call.");
    return -1;
}

/* ---- relayed rounds ------------------------------------------------------ */

static int relay_failed(driver *dv)
{
    dv->err = *ci_relay_error(dv->relay);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, dv->r,
                  "CI0213: the upstream's stream of round %d failed: %s",
                  ci_loop_rounds(dv->loop) + 1, dv->err.message);
    return -1;
}

/* The round's stream is over: take the response it ended with. */
static int take_relayed_round(driver *dv)
{
    ci_relay_status st = ci_relay_end(dv->relay);
    if (st != CI_RELAY_ROUND_DONE)
        return relay_failed(dv);
    if (ci_loop_take_response(dv->loop, ci_relay_response(dv->relay), &dv->err))
        return -1;
    log_round(dv, 0);
    /* A stream that went straight to its end (no response.created) passed
     * nothing on: the round is played as if it had come whole. */
    dv->round_relayed = ci_relay_started(dv->relay);
    if (!dv->round_relayed) {
        ci_sse_start(dv->sse, ci_loop_snapshot(dv->loop));
        return flush_events(dv, 0);
    }
    return 0;
}

/* Bytes of a round's stream: relayed to the client as they come. Non-zero
 * stops the upstream call (the round failed, or the client left). */
static int relay_sink(void *baton, const char *data, apr_size_t len)
{
    driver *dv = baton;
    ci_relay_status st;
    module_resume(dv);
    st = ci_relay_feed(dv->relay, data, len);
    module_pause(dv);
    if (flush_events(dv, 0))
        return 1;
    return st == CI_RELAY_FAILED;
}

/* Send the next round and take its answer. -1 on failure (dv->err or an
 * upstream error to relay). */
static int follow_up(driver *dv, ci_next next)
{
    ci_upstream_opts opts;
    ci_upstream_answer ans;
    const char *body, *why = NULL;
    apr_size_t len;
    apr_status_t rv;
    apr_time_t t0;

    if (!dv->url && !(dv->url = followup_url(dv))) {
        ci_error_set(&dv->err, 502, CI_SERVER, NULL, "no_upstream", dv->r->pool,
                     "This server does not know where to send follow-up calls.");
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, dv->r, "CI0203: no follow-up URL "
                      "for %s: set CodeInterpreterUpstream", dv->r->filename);
        return -1;
    }
    if (!dv->headers)
        dv->headers = followup_headers(dv->r);
    body = ci_loop_followup_body(dv->loop, dv->r->pool, next, &len);
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, dv->r,
                  "CI0211: follow-up to %s: %" APR_SIZE_T_FMT " bytes", dv->url, len);
    upstream_opts(dv, &opts);
    if (dv->relay) {
        ci_relay_round(dv->relay);
        opts.sink = relay_sink;
        opts.sink_baton = dv;
    }
    module_pause(dv);
    t0 = apr_time_now();
    rv = ci_upstream_post(dv->r->pool, dv->url, dv->headers, body, len, &opts, &ans, &why);
    dv->upstream_time += apr_time_now() - t0;
    module_resume(dv);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, rv, dv->r,
                  "CI0204: follow-up round %d%s: status %d in %" APR_TIME_T_FMT
                  " us", ci_loop_rounds(dv->loop) + 1,
                  next == CI_NEXT_FINAL ? " (final, tool_choice none)" : "",
                  rv == APR_SUCCESS ? ans.status : 0, apr_time_now() - t0);
    if (rv == APR_EOF)            /* the relay or the client stopped it */
        return dv->r->connection->aborted ? -1 : relay_failed(dv);
    if (ans.streamed && rv != APR_TIMEUP && rv != APR_ECONNABORTED)
        return take_relayed_round(dv);   /* whole, or cut: the relay knows */
    if (rv != APR_SUCCESS)
        return followup_failed(dv, rv, why);
    if (ans.status != 200) {
        dv->passthrough_status = ans.status;
        dv->error_answer = ans;
        return -1;
    }
    dv->round_relayed = 0;
    if (ci_loop_take_round(dv->loop, ans.body, ans.len, &dv->err))
        return -1;
    log_round(dv, ans.len);
    return 0;
}

/* ---- the loop ----------------------------------------------------------- */

/* Play the round taken, then follow up while the model calls for it. */
static int run_rounds(driver *dv)
{
    ci_next next;
    for (;;) {
        if (play_round(dv))
            return -1;
        next = ci_loop_next(dv->loop);
        if (next == CI_NEXT_DONE)
            return 0;
        if (client_gone(dv->r))
            return -1;
        if (past_deadline(dv))
            return deadline_error(dv);
        if (follow_up(dv, next))
            return -1;
    }
}

/* Round 1 came whole, as JSON. */
static int run_loop(driver *dv, const char *first, apr_size_t first_len)
{
    if (ci_loop_take_round(dv->loop, first, first_len, &dv->err))
        return -1;
    log_round(dv, first_len);
    if (dv->sse) {
        ci_sse_start(dv->sse, ci_loop_snapshot(dv->loop));
        if (flush_events(dv, 0))
            return -1;
    }
    return run_rounds(dv);
}

/* ---- answering ---------------------------------------------------------- */

static void clear_entity_headers(request_rec *r)
{
    apr_table_unset(r->headers_out, "Content-Length");
    apr_table_unset(r->headers_out, "ETag");
    apr_table_unset(r->headers_out, "Content-MD5");
    apr_table_unset(r->headers_out, "Last-Modified");
    apr_table_unset(r->headers_out, "Content-Encoding");
}

static apr_status_t send_body(driver *dv, int status, const char *type,
                              const char *body, apr_size_t len)
{
    request_rec *r = dv->r;
    apr_bucket_brigade *bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    r->status = status;
    r->status_line = NULL;
    clear_entity_headers(r);
    ap_set_content_type(r, type ? type : "application/json");
    ap_set_content_length(r, (apr_off_t)len);
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_pool_create(body, len, r->pool,
                                                       r->connection->bucket_alloc));
    /* FLUSH: the core would hold a small answer until the request ends;
     * the client has it before the work the request still does
     * (send_response) */
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(r->connection->bucket_alloc));
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(r->connection->bucket_alloc));
    set_notes(dv);
    ap_remove_output_filter(dv->f);
    return ap_pass_brigade(dv->f->next, bb);
}

/* The upstream's error answer as a ci_error (for an event mid-stream). */
static void relay_as_error(driver *dv)
{
    const char *perr;
    json_object *body = ci_json_parse(dv->r->pool, dv->error_answer.body, dv->error_answer.len, &perr);
    json_object *e = ci_json_get(body, "error", json_type_object);
    const char *msg = ci_json_str(e, "message");
    ci_error_set(&dv->err, dv->passthrough_status,
                 ci_json_str(e, "type") ? apr_pstrdup(dv->r->pool, ci_json_str(e, "type"))
                                        : CI_SERVER,
                 ci_json_str(e, "param") ? apr_pstrdup(dv->r->pool, ci_json_str(e, "param"))
                                         : NULL,
                 ci_json_str(e, "code") ? apr_pstrdup(dv->r->pool, ci_json_str(e, "code"))
                                        : NULL,
                 dv->r->pool, "The model upstream answered a follow-up call with "
                              "status %d%s%s", dv->passthrough_status,
                 msg ? ": " : ".", msg ? msg : "");
}

/* Failure after the stream started: an error event, then response.failed. */
static apr_status_t stream_error(driver *dv)
{
    const char *code;
    if (dv->passthrough_status)
        relay_as_error(dv);
    code = dv->err.status == 429 ? "rate_limit_exceeded" : "server_error";
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, dv->r,
                  "CI0208: stream failed after %d events: %s",
                  ci_sse_events(dv->sse), dv->err.message);
    ci_sse_failed(dv->sse, &dv->err,
                  ci_loop_failed_response(dv->loop, code, dv->err.message));
    set_notes(dv);
    flush_events(dv, 1);
    ap_remove_output_filter(dv->f);
    return APR_SUCCESS;
}

static apr_status_t send_error(driver *dv)
{
    apr_size_t len;
    const char *body;
    if (dv->stream_started && !dv->r->connection->aborted)
        return stream_error(dv);
    if (dv->passthrough_status) {
        if (dv->error_answer.retry_after)
            apr_table_setn(dv->r->headers_out, "Retry-After", dv->error_answer.retry_after);
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, dv->r,
                      "CI0205: relaying the upstream's %d answer to a follow-up",
                      dv->passthrough_status);
        return send_body(dv, dv->passthrough_status, dv->error_answer.content_type,
                         dv->error_answer.body, dv->error_answer.len);
    }
    if (dv->r->connection->aborted) {
        ap_remove_output_filter(dv->f);
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, dv->r,
                      "CI0206: client went away; loop stopped after round %d",
                      dv->loop ? ci_loop_rounds(dv->loop) : 1);
        set_notes(dv);
        return APR_ECONNABORTED;
    }
    ci_error_headers(dv->r, dv->r->headers_out, &dv->err);
    body = ci_error_body(dv->r->pool, &dv->err, &len);
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, dv->r, "CI0207: answering %d: %s",
                  dv->err.status, dv->err.message);
    return send_body(dv, dv->err.status, "application/json", body, len);
}

static void log_done(driver *dv)
{
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, dv->r,
                  "CI0212: done: %d rounds, %d executions; sandbox %" APR_TIME_T_FMT
                  " us, upstream %" APR_TIME_T_FMT " us, module %" APR_TIME_T_FMT " us",
                  ci_loop_rounds(dv->loop), ci_loop_executions(dv->loop),
                  dv->sandbox_time, dv->upstream_time, dv->st->module_time);
}

/* The final answer. The directory's "finish" is sent before it and its
 * answer read after: the client has the response while the directory
 * records it, and a next turn still finds what it records (see
 * ci_dirclient_send). That wait is not the module's time: the client
 * does not wait for it. */
static apr_status_t send_response(driver *dv)
{
    apr_size_t len;
    const char *body;
    apr_status_t rv;
    json_object *final = ci_loop_response(dv->loop);
    struct ci_dir_sent *finish;
    log_done(dv);
    finish = ci_containers_finish(dv->r, dv->st, dv->loop, ci_json_str(final, "id"));
    if (dv->sse) {
        ci_sse_completed(dv->sse, final);
        module_pause(dv);
        set_notes(dv);
        flush_events(dv, 1);
        ap_remove_output_filter(dv->f);
        ci_containers_finished(dv->r, finish);
        return dv->r->connection->aborted ? APR_ECONNABORTED : APR_SUCCESS;
    }
    body = ci_json_text(final, &len);
    module_pause(dv);
    rv = send_body(dv, 200, "application/json", body, len);
    ci_containers_finished(dv->r, finish);
    return rv;
}

ci_driver *ci_driver_create(ap_filter_t *f, int relayed)
{
    driver *dv = apr_pcalloc(f->r->pool, sizeof(*dv));
    apr_size_t max;
    dv->r = f->r;
    dv->f = f;
    dv->st = ci_request_state(f->r);
    dv->d = ci_loc_config(f->r);
    dv->deadline_at = dv->st->started + ci_loc_deadline(dv->d);
    dv->loop = ci_loop_create(f->r->pool, dv->st->req, ci_loc_max_loops(dv->d),
                              dv->st->container_id);
    ci_loop_set_citer(dv->loop, ci_containers_citer(f->r, dv->st));
    if (dv->st->container_lost)
        ci_loop_notice(dv->loop, ci_containers_lost_notice(f->r->pool,
                                                           dv->st->container_lost,
                                                           dv->st->container_lost_tool));
    if (dv->st->req->wants_stream)
        dv->sse = ci_sse_create(f->r->pool);
    if (dv->sse && relayed) {
        max = (apr_size_t)ci_loc_max_body(dv->d);
        dv->relay = ci_relay_create(f->r->pool, dv->loop, dv->sse,
                                    dv->st->container_id, max, max);
    }
    return dv;
}

apr_status_t ci_driver_relay(ci_driver *dv, const char *data, apr_size_t len)
{
    ci_relay_status st;
    module_resume(dv);
    st = ci_relay_feed(dv->relay, data, len);
    module_pause(dv);
    if (flush_events(dv, 0))
        return APR_ECONNABORTED;
    return st == CI_RELAY_FAILED ? APR_EGENERAL : APR_SUCCESS;
}

apr_status_t ci_driver_finish(ci_driver *dv, ci_first_answer how, const char *body,
                              apr_size_t len)
{
    request_rec *r = dv->r;
    module_resume(dv);
    if (how == CI_FIRST_TOO_LARGE)
        ci_error_set(&dv->err, 502, CI_SERVER, NULL, "upstream_too_large", r->pool,
                     "The model upstream's answer exceeds this server's limit.");
    else if (how == CI_FIRST_BROKEN)
        ci_error_set(&dv->err, 502, CI_SERVER, NULL, "upstream_broken", r->pool,
                     "The model upstream's answer was cut short.");
    if (how == CI_FIRST_TOO_LARGE || how == CI_FIRST_BROKEN)
        return send_error(dv);
    if (r->connection->aborted)
        return send_error(dv);
    if (how == CI_FIRST_STREAMED ? take_relayed_round(dv) || run_rounds(dv)
                                 : run_loop(dv, body, len))
        return send_error(dv);
    return send_response(dv);
}
