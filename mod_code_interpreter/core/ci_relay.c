/* ci_relay.c - a streamed upstream response relayed as the client's stream. */
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_citations.h"
#include "ci_code_decoder.h"
#include "ci_id.h"
#include "ci_json.h"
#include "ci_relay.h"
#include "ci_sse_reader.h"

/* A call of our function seen in the stream of the current round. */
typedef struct our_call {
    const char *item_id;       /* ours, "ci_..." or "sh_..." */
    int output_index;          /* the client's */
    ci_code_decoder *code;     /* its code, or a shell call's commands */
    int shell;
    ci_buf command;            /* a shell call's command being written */
} our_call;

struct ci_relay {
    apr_pool_t *p;
    apr_pool_t *evpool;        /* one event's JSON; cleared after each */
    ci_loop *loop;
    ci_sse *sse;
    const char *container_id;
    ci_sse_reader *reader;
    apr_hash_t *ours;          /* upstream item id -> our_call, this round */
    int base;                  /* output_index of the round's first item */
    apr_array_header_t *shells; /* upstream output_index of each shell call
                                   of the round (int): its output item
                                   follows it, so later items move up one */
    int started;
    ci_relay_status status;
    json_object *response;
    ci_error err;
    apr_hash_t *annotated;     /* "item_id#part" -> annotations passed on (int) */
};

static int fail(ci_relay *r, const char *code, const char *type,
                const char *fmt, const char *detail)
{
    ci_error_set(&r->err, 502, type, NULL, code, r->p, fmt, detail ? detail : "");
    r->status = CI_RELAY_FAILED;
    return -1;
}

/* ---- lifecycle ------------------------------------------------------------ */

static int on_created(ci_relay *r, json_object *ev)
{
    json_object *resp = ci_json_get(ev, "response", json_type_object);
    if (r->started)
        return 0;
    if (!resp)
        return fail(r, "bad_upstream_response", CI_SERVER, "The model upstream's "
                    "stream began without a response object.%s", NULL);
    ci_loop_begin(r->loop, resp);
    ci_sse_start(r->sse, ci_loop_snapshot(r->loop));
    r->started = 1;
    return 0;
}

static int on_completed(ci_relay *r, json_object *ev)
{
    json_object *resp = ci_json_get(ev, "response", json_type_object);
    if (!resp)
        return fail(r, "bad_upstream_response", CI_SERVER, "The model upstream "
                    "ended a round without a response object.%s", NULL);
    r->response = ci_json_own(r->p, json_object_get(resp));
    r->status = CI_RELAY_ROUND_DONE;
    return 1;                  /* nothing after it belongs to this round */
}

/* An `error` event or response.failed: the upstream's own words. */
static int on_upstream_failure(ci_relay *r, json_object *ev)
{
    json_object *nested = ci_json_get(ev, "error", json_type_object);
    json_object *resp = ci_json_get(ev, "response", json_type_object);
    json_object *src = nested ? nested
                              : resp ? ci_json_get(resp, "error", json_type_object) : ev;
    const char *msg = ci_json_str(src, "message");
    const char *code = ci_json_str(src, "code");
    const char *type = ci_json_str(src, "type");
    if (!msg)
        msg = ci_json_str(ev, "message");
    if (!code)
        code = ci_json_str(ev, "code");
    ci_error_set(&r->err, 502, apr_pstrdup(r->p, type ? type : CI_SERVER), NULL,
                 apr_pstrdup(r->p, code ? code : "server_error"), r->p,
                 "The model upstream failed while streaming%s%s", msg ? ": " : ".",
                 msg ? msg : "");
    r->status = CI_RELAY_FAILED;
    return -1;
}

/* ---- items ---------------------------------------------------------------- */

static our_call *ours_of(ci_relay *r, json_object *ev)
{
    const char *id = ci_json_str(ev, "item_id");
    return id ? apr_hash_get(r->ours, id, APR_HASH_KEY_STRING) : NULL;
}

/* The client's output_index for EV's; -1 when it has none. */
static int client_index(ci_relay *r, json_object *ev)
{
    json_object *v = ci_json_get(ev, "output_index", json_type_int);
    int up, i, moved = 0;
    if (!v)
        return -1;
    up = json_object_get_int(v);
    for (i = 0; i < r->shells->nelts; i++)
        moved += APR_ARRAY_IDX(r->shells, i, int) < up;
    return r->base + up + moved;
}

static void pass(ci_relay *r, json_object *ev, int index)
{
    json_object_object_add(ev, "output_index", json_object_new_int(index));
    ci_sse_pass(r->sse, json_object_get(ev));
}

static void announce_ours(ci_relay *r, json_object *ev, json_object *item, int index)
{
    our_call *c = apr_pcalloc(r->p, sizeof(*c));
    const char *up_id = ci_json_str(item, "id");
    json_object *up_index = ci_json_get(ev, "output_index", json_type_int);
    c->shell = ci_loop_is_shell_call(r->loop, item);
    c->item_id = ci_mint_id(r->p, c->shell ? "sh_" : "ci_", 24);
    c->output_index = index;
    apr_hash_set(r->ours, apr_pstrdup(r->p, up_id), APR_HASH_KEY_STRING, c);
    ci_loop_name_call(r->loop, up_id, c->item_id);
    if (c->shell) {
        const char *call_id = ci_json_str(item, "call_id");
        c->code = ci_code_decoder_create_array(r->p, "commands");
        ci_buf_init(&c->command, r->p, APR_SIZE_MAX / 2);
        *(int *)apr_array_push(r->shells) = up_index ? json_object_get_int(up_index) : 0;
        ci_sse_shell_announce(r->sse, c->item_id, call_id ? call_id : "", index,
                              r->container_id);
    }
    else {
        c->code = ci_code_decoder_create(r->p);
        ci_sse_call_announce(r->sse, c->item_id, index, r->container_id);
    }
    /* What the model writes after this call waits until it has run. */
    ci_sse_hold_after(r->sse, index);
}

static void on_item_added(ci_relay *r, json_object *ev, int index)
{
    json_object *item = ci_json_get(ev, "item", json_type_object);
    if (item && ci_json_str(item, "id") && ci_loop_is_our_call(r->loop, item))
        announce_ours(r, ev, item, index);
    else
        pass(r, ev, index);
}

/* Our call's arguments grew: pass on the code they completed. A decoding
 * error sends nothing more; the loop refuses the call once the round is in. */
/* A shell call's arguments grew: the commands they completed go out, each
 * announced when it begins and done when its string closes. */
static void on_shell_arguments(ci_relay *r, our_call *c, const char *delta)
{
    apr_size_t len = strlen(delta);
    while (len) {
        const char *text;
        apr_size_t n, used;
        int cmd;
        if (ci_code_decoder_feed_some(c->code, delta, len, &text, &n, &used) != CI_CODE_OK)
            return;            /* the loop refuses the call once the round is in */
        if ((cmd = ci_code_decoder_element(c->code)) >= 0) {
            ci_buf_append(&c->command, text, n);
            ci_sse_shell_command(r->sse, c->item_id, c->output_index, cmd, text, n);
        }
        if (ci_code_decoder_element_ended(c->code)) {
            ci_sse_shell_command_done(r->sse, c->item_id, c->output_index, cmd,
                                      c->command.data ? c->command.data : "");
            ci_buf_clear(&c->command);
        }
        delta += used;
        len -= used;
    }
}

static void on_our_arguments(ci_relay *r, our_call *c, json_object *ev)
{
    const char *delta = ci_json_str(ev, "delta"), *code;
    apr_size_t n;
    if (!delta)
        return;
    if (c->shell) {
        on_shell_arguments(r, c, delta);
        return;
    }
    ci_code_decoder_feed(c->code, delta, strlen(delta), &code, &n);
    ci_sse_call_code(r->sse, c->item_id, c->output_index, code, n);
}

/* ---- citations: container_file_citation of the model's links to files ----
 * After a text's last delta: one annotation.added each, numbered after the
 * upstream's own; then the part's and the item's done events, and the
 * round's response, carry them too (ci_citations.h). */

static const char *part_of(ci_relay *r, json_object *ev, int *part)
{
    json_object *ci = ci_json_get(ev, "content_index", json_type_int);
    *part = ci ? json_object_get_int(ci) : 0;
    return apr_psprintf(r->p, "%s#%d", ci_json_str(ev, "item_id") ? ci_json_str(ev, "item_id")
                                                                  : "", *part);
}

/* The upstream's own annotation.added: counted, so that ours follow on. */
static void count_annotation(ci_relay *r, json_object *ev)
{
    int part;
    const char *key = part_of(r, ev, &part);
    int n = (int)(apr_uintptr_t)apr_hash_get(r->annotated, key, APR_HASH_KEY_STRING);
    apr_hash_set(r->annotated, key, APR_HASH_KEY_STRING, (void *)(apr_uintptr_t)(n + 1));
}

static void cite_text(ci_relay *r, ci_citer *citer, json_object *ev, int index)
{
    int part, i, n, before;
    const char *key = part_of(r, ev, &part), *item_id = ci_json_str(ev, "item_id");
    json_object *anns = ci_citer_part(citer, item_id, part, ci_json_str(ev, "text"));
    n = anns ? (int)json_object_array_length(anns) : 0;
    before = (int)(apr_uintptr_t)apr_hash_get(r->annotated, key, APR_HASH_KEY_STRING);
    for (i = 0; i < n; i++)
        ci_sse_annotation(r->sse, item_id, index, part, before + i,
                          json_object_array_get_idx(anns, i));
}

/* Events of messages that carry their text: annotated. 1 when EV was one. */
static void cite(ci_relay *r, const char *type, json_object *ev, int index)
{
    ci_citer *citer = ci_loop_citer(r->loop);
    int part;
    if (!citer)
        return;
    if (!strcmp(type, "response.output_text.annotation.added"))
        count_annotation(r, ev);
    else if (!strcmp(type, "response.output_text.done"))
        cite_text(r, citer, ev, index);
    else if (!strcmp(type, "response.content_part.done")) {
        part_of(r, ev, &part);
        ci_citer_apply_part(citer, ci_json_str(ev, "item_id"), part,
                            ci_json_get(ev, "part", json_type_object));
    }
    else if (!strcmp(type, "response.output_item.done"))
        ci_citer_apply_item(citer, ci_json_get(ev, "item", json_type_object));
}

/* One event of an output item. Our call's own events (arguments, done) stay
 * here: the driver finishes its item once the code has run. */
static void on_item_event(ci_relay *r, const char *type, json_object *ev, int index)
{
    our_call *c = ours_of(r, ev);
    cite(r, type, ev, index);
    if (!strcmp(type, "response.output_item.added")) {
        on_item_added(r, ev, index);
        return;
    }
    if (!strcmp(type, "response.output_item.done")) {
        json_object *item = ci_json_get(ev, "item", json_type_object);
        const char *id = ci_json_str(item, "id");
        if (id && apr_hash_get(r->ours, id, APR_HASH_KEY_STRING))
            return;
        pass(r, ev, index);
        return;
    }
    if (c) {
        if (!strcmp(type, "response.function_call_arguments.delta"))
            on_our_arguments(r, c, ev);
        return;
    }
    pass(r, ev, index);
}

/* ---- events --------------------------------------------------------------- */

static int dispatch(ci_relay *r, const char *type, json_object *ev)
{
    int index;
    if (!strcmp(type, "response.created"))
        return on_created(r, ev);
    if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete"))
        return on_completed(r, ev);
    if (!strcmp(type, "error") || !strcmp(type, "response.failed"))
        return on_upstream_failure(r, ev);
    if ((index = client_index(r, ev)) < 0)
        return 0;              /* lifecycle (in_progress, queued) and the like */
    if (!r->started)
        return fail(r, "bad_upstream_response", CI_SERVER, "The model upstream "
                    "streamed output before response.created.%s", NULL);
    on_item_event(r, type, ev, index);
    return 0;
}

static int on_event(void *baton, const ci_sse_event *sev)
{
    ci_relay *r = baton;
    json_object *ev;
    const char *type, *why = NULL;
    int rc;
    if (ci_sse_event_json(r->evpool, sev, &ev, &type, &why) != CI_SSE_READ_OK)
        rc = fail(r, "bad_upstream_response", CI_SERVER, "The model upstream "
                  "streamed an event that is not a Responses API event: %s", why);
    else
        rc = dispatch(r, type, ev);
    apr_pool_clear(r->evpool);
    return rc;
}

/* ---- the reader ------------------------------------------------------------ */

ci_relay *ci_relay_create(apr_pool_t *p, ci_loop *loop, ci_sse *sse,
                          const char *container_id, apr_size_t max_event,
                          apr_size_t max_round)
{
    ci_relay *r = apr_pcalloc(p, sizeof(*r));
    r->p = p;
    r->loop = loop;
    r->sse = sse;
    r->container_id = container_id;
    apr_pool_create(&r->evpool, p);
    r->reader = ci_sse_reader_create(p, max_event, max_round, on_event, r);
    ci_relay_round(r);
    return r;
}

void ci_relay_round(ci_relay *r)
{
    ci_sse_reader_reset(r->reader);
    r->ours = apr_hash_make(r->p);
    r->shells = apr_array_make(r->p, 2, sizeof(int));
    r->annotated = apr_hash_make(r->p);
    r->base = ci_loop_items(r->loop);
    r->status = CI_RELAY_MORE;
    r->response = NULL;
}

/* What the reader's own status means for the round. */
static ci_relay_status reader_failed(ci_relay *r, ci_sse_read_status st)
{
    if (st == CI_SSE_READ_EVENT_TOO_LARGE || st == CI_SSE_READ_ROUND_TOO_LARGE)
        fail(r, "upstream_too_large", CI_SERVER, "The model upstream's answer "
             "exceeds this server's limit.%s", NULL);
    else
        fail(r, "upstream_broken", CI_SERVER, "The model upstream's answer was cut "
             "short.%s", NULL);
    return r->status;
}

ci_relay_status ci_relay_feed(ci_relay *r, const char *data, apr_size_t len)
{
    ci_sse_read_status st;
    if (r->status != CI_RELAY_MORE)
        return r->status;      /* what follows the end of a round is not read */
    st = ci_sse_reader_feed(r->reader, data, len);
    if (r->status != CI_RELAY_MORE)
        return r->status;      /* the callback decided */
    if (st == CI_SSE_READ_OK)
        return CI_RELAY_MORE;
    return reader_failed(r, st);
}

ci_relay_status ci_relay_end(ci_relay *r)
{
    if (r->status != CI_RELAY_MORE)
        return r->status;
    ci_sse_reader_end(r->reader);
    return reader_failed(r, CI_SSE_READ_TRUNCATED);
}

json_object *ci_relay_response(const ci_relay *r) { return r->response; }
const ci_error *ci_relay_error(const ci_relay *r) { return &r->err; }
int ci_relay_started(const ci_relay *r) { return r->started; }
