/*
 * ci_input.c - the request side. At locations with CodeInterpreter on, a
 * POST with a JSON body is read once (bounded) and scanned for the tool's
 * name as it arrives. A body without it is handed back to mod_proxy as the
 * very buckets it came in, never copied; one with it is flattened, parsed and
 * rewritten when it carries the tool. A replay input filter hands either to
 * mod_proxy.
 */
#include <apr_strings.h>
#include <http_core.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include "ci_settings.h"
#include "ci_json.h"
#include "ci_skill_attach.h"
#include "ci_skills_attach.h"
#include "ci_input.h"
#include "ci_loop.h"
#include "ci_output.h"
#include "ci_containers.h"
#include "ci_containers_api.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_scan.h"
#include "ci_request_state.h"
#include "ci_module.h"

static const char replay_filter_name[] = "CODE_INTERPRETER_REPLAY";
static ap_filter_rec_t *replay_filter_rec;

/* ---- replay ------------------------------------------------------------ */

/* Hands back the whole stored body and EOS on the first read, whatever
 * readbytes asks: mod_proxy then sees EOS within its prefetch and sends the
 * body with a Content-Length, without spooling it to a temporary file. The
 * body is moved, not copied; later reads get EOS alone. A speculative read
 * gets copies of the buckets (no bytes copied) and leaves the body. */
static apr_status_t replay_filter(ap_filter_t *f, apr_bucket_brigade *bb,
                                  ap_input_mode_t mode, apr_read_type_e block,
                                  apr_off_t readbytes)
{
    apr_bucket_brigade *body = f->ctx;
    apr_bucket *b;
    (void)block;
    (void)readbytes;
    if (mode != AP_MODE_READBYTES && mode != AP_MODE_SPECULATIVE &&
        mode != AP_MODE_EXHAUSTIVE && mode != AP_MODE_GETLINE)
        return APR_ENOTIMPL;
    if (APR_BRIGADE_EMPTY(body)) {
        APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(f->c->bucket_alloc));
        return APR_SUCCESS;
    }
    if (mode != AP_MODE_SPECULATIVE) {
        APR_BRIGADE_CONCAT(bb, body);
        return APR_SUCCESS;
    }
    for (b = APR_BRIGADE_FIRST(body); b != APR_BRIGADE_SENTINEL(body);
         b = APR_BUCKET_NEXT(b)) {
        apr_bucket *copy;
        apr_status_t rv = apr_bucket_copy(b, &copy);
        if (rv != APR_SUCCESS)
            return rv;
        APR_BRIGADE_INSERT_TAIL(bb, copy);
    }
    return APR_SUCCESS;
}

/* Replay BODY (its buckets, EOS last) to mod_proxy. LEN is its length;
 * the client's own Content-Length is kept when it still says that. */
static void replay(request_rec *r, apr_bucket_brigade *body, apr_off_t len,
                   int same_length)
{
    ap_add_input_filter_handle(replay_filter_rec, body, r, r->connection);
    if (same_length && !apr_table_get(r->headers_in, "Transfer-Encoding") &&
        apr_table_get(r->headers_in, "Content-Length"))
        return;
    apr_table_setn(r->headers_in, "Content-Length", apr_off_t_toa(r->pool, len));
    apr_table_unset(r->headers_in, "Transfer-Encoding");
}

/* Replay bytes of the request's pool (the rewritten body). */
static void replay_bytes(request_rec *r, const char *data, apr_size_t len)
{
    apr_bucket_alloc_t *ba = r->connection->bucket_alloc;
    apr_bucket_brigade *body = apr_brigade_create(r->pool, ba);
    if (len)
        APR_BRIGADE_INSERT_TAIL(body, apr_bucket_immortal_create(data, len, ba));
    APR_BRIGADE_INSERT_TAIL(body, apr_bucket_eos_create(ba));
    replay(r, body, (apr_off_t)len, 0);
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

/* The body as it is read: its buckets, set aside in the request's pool, in
 * order and EOS last, and the scan of their bytes. */
typedef struct body_reader {
    request_rec *r;
    apr_bucket_brigade *kept;
    apr_off_t len, limit;
    apr_size_t held;            /* memory the kept buckets may hold */
    int pieces, packed;         /* data buckets read; of them, packed */
    apr_bucket *dense;          /* our own bucket small pieces are packed in */
    ci_scan scan;
} body_reader;

/* A bucket read from the socket holds a buffer of APR_BUCKET_BUFF_SIZE
 * however few bytes came, and so does a copy of a small one (the bucket
 * allocator's smallest block for data). Kept as they come, the pieces of a
 * client that trickles its body would hold up to 200 times its size: past
 * twice the body's bytes (plus this slack), small pieces are packed into
 * buckets of our own instead. Pieces from a client that sends at speed are
 * full buffers and are kept as they are. */
#define HELD_SLACK (64 * 1024)
#define PIECE_COST(n) ((n) > APR_BUCKET_BUFF_SIZE ? (n) : APR_BUCKET_BUFF_SIZE)

/* Append DATA to our own packing bucket at the end of KEPT (a new one when
 * there is none or it is full). */
static void pack(body_reader *rd, const char *data, apr_size_t n)
{
    while (n) {
        apr_bucket *d = rd->dense;
        apr_size_t room, take;
        if (!d || APR_BRIGADE_LAST(rd->kept) != d ||
            ((apr_bucket_heap *)d->data)->alloc_len == d->length) {
            apr_bucket_alloc_t *ba = rd->r->connection->bucket_alloc;
            char *buf = apr_bucket_alloc(APR_BUCKET_BUFF_SIZE, ba);
            d = apr_bucket_heap_create(buf, APR_BUCKET_BUFF_SIZE, apr_bucket_free, ba);
            d->length = 0;
            APR_BRIGADE_INSERT_TAIL(rd->kept, d);
            rd->dense = d;
            rd->held += APR_BUCKET_BUFF_SIZE;
        }
        room = ((apr_bucket_heap *)d->data)->alloc_len - d->length;
        take = n < room ? n : room;
        memcpy(((apr_bucket_heap *)d->data)->base + d->length, data, take);
        d->length += take;
        data += take;
        n -= take;
    }
}

/* Move bucket B (N bytes at DATA) to the kept body: set aside as it is, or
 * its bytes packed when keeping it would hold too much memory. */
static apr_status_t keep(body_reader *rd, apr_bucket *b, const char *data, apr_size_t n)
{
    apr_status_t rv;
    if (rd->held + PIECE_COST(n) > 2 * (apr_size_t)rd->len + HELD_SLACK) {
        pack(rd, data, n);
        rd->packed++;
        apr_bucket_delete(b);
        return APR_SUCCESS;
    }
    /* a no-op for the heap buckets of a plain connection; a transient
     * bucket (TLS) is copied into the heap */
    if ((rv = apr_bucket_setaside(b, rd->r->pool)) != APR_SUCCESS)
        return rv;
    rd->held += PIECE_COST(n);
    APR_BUCKET_REMOVE(b);
    APR_BRIGADE_INSERT_TAIL(rd->kept, b);
    return APR_SUCCESS;
}

/* Scan and keep the buckets of BB. Returns 1 at EOS (kept too), 0 when more
 * is to come, -1 past the limit; *RV is set on a failed read. */
static int take_buckets(body_reader *rd, apr_bucket_brigade *bb, apr_status_t *rv)
{
    while (!APR_BRIGADE_EMPTY(bb)) {
        apr_bucket *b = APR_BRIGADE_FIRST(bb);
        const char *data;
        apr_size_t n;
        if (APR_BUCKET_IS_EOS(b)) {
            APR_BUCKET_REMOVE(b);
            APR_BRIGADE_INSERT_TAIL(rd->kept, b);
            return 1;
        }
        if (APR_BUCKET_IS_METADATA(b)) {
            apr_bucket_delete(b);
            continue;
        }
        if ((*rv = apr_bucket_read(b, &data, &n, APR_BLOCK_READ)) != APR_SUCCESS)
            return 0;
        if ((apr_off_t)n > rd->limit - rd->len)
            return -1;
        rd->len += (apr_off_t)n;
        rd->pieces++;
        ci_scan_feed(&rd->scan, data, n);
        if (!n)
            apr_bucket_delete(b);
        else if ((*rv = keep(rd, b, data, n)) != APR_SUCCESS)
            return 0;
    }
    return 0;
}

/* Read the whole body, at most LIMIT bytes, into RD. OK, or the status
 * already sent. */
static int read_body(request_rec *r, apr_off_t limit, body_reader *rd)
{
    const char *cl = apr_table_get(r->headers_in, "Content-Length");
    apr_off_t declared = 0;
    apr_bucket_brigade *bb;
    int state = 0;

    if (cl && (apr_strtoff(&declared, cl, NULL, 10) != APR_SUCCESS || declared < 0))
        declared = 0;
    if (declared > limit)
        return body_too_large(r, limit);
    memset(rd, 0, sizeof(*rd));
    rd->r = r;
    rd->limit = limit;
    rd->kept = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    ci_scan_init(&rd->scan);
    bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
    while (state == 0) {
        apr_status_t rv = ap_get_brigade(r->input_filters, bb, AP_MODE_READBYTES,
                                         APR_BLOCK_READ, 65536);
        if (rv == APR_SUCCESS)
            state = take_buckets(rd, bb, &rv);
        if (rv != APR_SUCCESS)
            return body_read_failed(r, rv);
    }
    apr_brigade_cleanup(bb);
    return state < 0 ? body_too_large(r, limit) : OK;
}

/* The body in one NUL-terminated piece, for the parser. */
static char *flatten(body_reader *rd, apr_size_t *len)
{
    char *buf = apr_palloc(rd->r->pool, (apr_size_t)rd->len + 1);
    *len = (apr_size_t)rd->len;
    apr_brigade_flatten(rd->kept, buf, len);
    buf[*len] = '\0';
    return buf;
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

/* The skills of the container the request names by its id (made through
 * the Containers API with skills, or by an earlier request), told to the
 * model: nothing in the request's history says it has them. */
static void named_container_skills(request_rec *r, ci_req_state *st)
{
    json_object *c = ci_json_get(st->container_found, "container", json_type_object);
    const char *skills = ci_json_str(c, "skills"), *perr = NULL;
    if (skills && st->req->container_id)
        ci_request_prepend_context(r->pool, st->req, ci_skill_attach_context(
                                       r->pool, ci_json_parse(r->pool, skills,
                                                              strlen(skills), &perr)));
}

/* The skills the request asks its new container to have, resolved now
 * (before round 1: a refusal costs no model call) and told to the model.
 * A container the request reuses keeps its own: a chained turn was told
 * of them when it was made; a container named by its id is told now. */
static int new_container_skills(request_rec *r, ci_req_state *st, ci_error *err)
{
    json_object *record;
    const char *perr = NULL;
    int rc;
    if (st->container_exists) {
        named_container_skills(r, st);
        return OK;
    }
    if (!st->req->skills)
        return OK;
    if ((rc = ci_skills_attach_resolve(r, st->sandbox, st->owner, st->req->skills,
                                       &st->skills, err)) != OK)
        return rc;
    record = ci_json_parse(r->pool, st->skills, strlen(st->skills), &perr);
    ci_request_prepend_context(r->pool, st->req, ci_skill_attach_context(r->pool, record));
    return OK;
}

static int intercept(request_rec *r, const ci_sandbox_def *sandbox, ci_request *req,
                     ci_recall_baton *recall)
{
    ci_req_state *st;
    ci_error err;
    int rc;
    if (!ci_registry_tool_current(sandbox, r->request_time)) {
        /* This child predates a reload that removed or changed the tool: a
         * request accepted now must not create anything with the old one.
         * The retry lands on a new child. */
        r->connection->keepalive = AP_CONN_CLOSE;
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0104: sandbox tool %s was "
                      "reconfigured by a reload; refused in this older child",
                      sandbox->name);
        ci_error_set(&err, 503, CI_SERVER, NULL, "sandbox_reconfigured", r->pool,
                     "The server is reloading its configuration; retry the request.");
        err.retry_after = 1;
        ci_containers_chain_early_unused(recall);
        return ci_send_error(r, &err);
    }
    if (req->shell_function && !(sandbox->provider->caps & CI_CAP_SHELL)) {
        ci_error_set(&err, 400, CI_INVALID,
                     apr_psprintf(r->pool, "tools[%d]", req->shell_index),
                     "unsupported_tool", r->pool, "The hosted shell is not available "
                     "here: this server's sandbox tool '%s' (provider %s) cannot run "
                     "commands.", sandbox->name, sandbox->provider->name);
        ci_containers_chain_early_unused(recall);
        return ci_send_error(r, &err);
    }
    st = ci_request_state_create(r);
    st->req = req;
    st->sandbox = sandbox;
    st->owner = recall->owner;
    st->early_chain = recall->early;
    st->started = apr_time_now();
    if ((rc = ci_containers_resolve(r, st, &err)) != OK ||
        (rc = new_container_skills(r, st, &err)) != OK) {
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "CI0106: refused (%d): %s",
                      err.status, err.message);
        ap_set_module_config(r->request_config, &code_interpreter_module, NULL);
        ci_containers_chain_early_unused(recall);
        return ci_send_error(r, &err);
    }
    apr_table_unset(r->headers_in, "Accept-Encoding");
    replay_bytes(r, req->body, req->body_len);
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
    ci_loc_conf *d = ci_loc_config(r);
    const ci_sandbox_def *sandbox;
    ci_rewrite_opts opts = { 0 };
    ci_recall_baton recall = { 0 };
    ci_request *req = NULL;
    ci_error err;
    body_reader rd;
    char *body;
    apr_size_t len;
    apr_time_t t0;
    int rc;

    if (d && (d->containers == 1 || d->skills == 1) && !r->main)
        ci_containers_api_fixups(r);
    if (!d || d->enabled != 1 || r->main || r->prev || r->method_number != M_POST ||
        !is_json(r))
        return DECLINED;
    if ((rc = read_body(r, ci_loc_max_body(d), &rd)) != OK)
        return rc;
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "CI0105: body of %" APR_OFF_T_FMT
                  " bytes in %d pieces (%d packed): %s", rd.len, rd.pieces, rd.packed,
                  rd.scan.found ? "the tool's name is there, parsing"
                                : "no tool, passed through as it came");
    if (!rd.scan.found) {
        replay(r, rd.kept, rd.len, 1);
        return DECLINED;
    }
    t0 = apr_time_now();
    body = flatten(&rd, &len);
    sandbox = ci_sandbox_lookup(r->server, d->sandbox);
    opts.function_name = ci_loc_function_name(d);
    opts.function_description = ci_function_description(sandbox && sandbox->network);
    /* The owner now: before mod_headers may change a header, and only for
     * a body that names the tool. */
    recall.r = r;
    recall.owner = ci_owner_of(r);
    ci_containers_ask_chain_early(&recall, body, len);
    opts.recall = ci_containers_recall;
    opts.recall_baton = &recall;
    switch (ci_request_rewrite(r->pool, body, len, &opts, &req, &err)) {
    case CI_REQ_PASS:
        ci_containers_chain_early_unused(&recall);
        replay(r, rd.kept, rd.len, 1);
        return DECLINED;
    case CI_REQ_ERROR:
        ci_containers_chain_early_unused(&recall);
        if (recall.failed)
            ci_containers_unavailable(r->pool, &err);
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                      "CI0102: refused (%d): %s", err.status, err.message);
        return ci_send_error(r, &err);
    default:
        if (!sandbox) {
            ci_containers_chain_early_unused(&recall);
            return misconfigured(r, d->sandbox);
        }
        rc = intercept(r, sandbox, req, &recall);
        if (rc == OK)           /* (an error answer sets no state) */
            ci_request_state(r)->module_time += apr_time_now() - t0;
        return rc;
    }
}

void ci_input_register_hooks(apr_pool_t *p)
{
    ap_hook_fixups(ci_fixups, NULL, NULL, APR_HOOK_REALLY_FIRST);
    replay_filter_rec = ap_register_input_filter(replay_filter_name, replay_filter,
                                                 NULL, AP_FTYPE_RESOURCE);
}
