/*
 * ci_loop.c - bookkeeping of the agentic loop: what each round said, which
 * calls are ours, what to send next, and the response the client gets.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <apr_hash.h>
#include <apr_random.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_citations.h"
#include "ci_shell.h"

struct ci_loop {
    apr_pool_t *p;
    ci_citer *citer;            /* container_file_citation annotations, or NULL */
    ci_request *req;
    int max_rounds;
    const char *container_id;
    int rounds, executions, final_sent, client_calls;
    json_object *output;     /* what the client will see, every round */
    json_object *replay;     /* every round's items + our outputs, for follow-ups */
    json_object *new_items;  /* our outputs of the latest round (conversation) */
    json_object *last;       /* the latest upstream response */
    json_object *usage;      /* summed over rounds, NULL while none reported */
    apr_array_header_t *round_items;
    apr_array_header_t *round_calls;
    apr_hash_t *named;       /* upstream item id -> our item id (relayed) */
    apr_array_header_t *calls; /* every call of ours (ci_call *), in order */
    const char *notice;      /* told to the model with the next output */
};

ci_loop *ci_loop_create(apr_pool_t *p, ci_request *req, int max_rounds,
                        const char *container_id)
{
    ci_loop *l = apr_pcalloc(p, sizeof(*l));
    l->p = p;
    l->req = req;
    l->max_rounds = max_rounds < 1 ? 1 : max_rounds;
    l->container_id = container_id;
    l->output = ci_json_own(p, json_object_new_array());
    l->replay = ci_json_own(p, json_object_new_array());
    l->round_items = apr_array_make(p, 8, sizeof(ci_round_item));
    l->round_calls = apr_array_make(p, 4, sizeof(ci_call *));
    l->named = apr_hash_make(p);
    l->calls = apr_array_make(p, 4, sizeof(ci_call *));
    return l;
}

void ci_loop_notice(ci_loop *l, const char *text)
{
    l->notice = text;
}

int ci_loop_items(const ci_loop *l)
{
    return (int)json_object_array_length(l->output);
}

void ci_loop_name_call(ci_loop *l, const char *upstream_id, const char *item_id)
{
    apr_hash_set(l->named, apr_pstrdup(l->p, upstream_id), APR_HASH_KEY_STRING,
                 apr_pstrdup(l->p, item_id));
}

void ci_loop_begin(ci_loop *l, json_object *response)
{
    l->last = ci_json_own(l->p, json_object_get(response));
}

int ci_loop_rounds(const ci_loop *l) { return l->rounds; }
int ci_loop_executions(const ci_loop *l) { return l->executions; }
const apr_array_header_t *ci_loop_round_items(const ci_loop *l) { return l->round_items; }
const apr_array_header_t *ci_loop_round_calls(const ci_loop *l) { return l->round_calls; }
int ci_loop_round_has_client_calls(const ci_loop *l) { return l->client_calls; }

/* ---- usage ------------------------------------------------------------- */

/* Add every integer of FROM into ACC, recursing into detail objects. */
static void usage_add(json_object *acc, json_object *from)
{
    json_object_object_foreach(from, key, val) {
        json_object *have = NULL;
        json_object_object_get_ex(acc, key, &have);
        if (json_object_is_type(val, json_type_int)) {
            int64_t sum = json_object_get_int64(val);
            if (have && json_object_is_type(have, json_type_int)) {
                int64_t add = json_object_get_int64(have);
                if (__builtin_add_overflow(sum, add, &sum))   /* saturate */
                    sum = add > 0 ? INT64_MAX : INT64_MIN;
            }
            json_object_object_add(acc, key, json_object_new_int64(sum));
        }
        else if (json_object_is_type(val, json_type_object)) {
            if (!have || !json_object_is_type(have, json_type_object)) {
                have = json_object_new_object();
                json_object_object_add(acc, key, have);
            }
            usage_add(have, val);
        }
        else if (!have)
            json_object_object_add(acc, key, json_object_get(val));
    }
}

static void take_usage(ci_loop *l, json_object *resp)
{
    json_object *u = ci_json_get(resp, "usage", json_type_object);
    if (!u)
        return;
    if (!l->usage)
        l->usage = ci_json_own(l->p, json_object_new_object());
    usage_add(l->usage, u);
}

/* ---- items ------------------------------------------------------------- */

/* The code of a call's arguments, or NULL with *WHY set. */
static const char *code_of(apr_pool_t *p, const char *arguments, const char **why)
{
    const char *err;
    json_object *args = arguments ? ci_json_parse(p, arguments, strlen(arguments), &err)
                                  : NULL;
    const char *code = ci_json_str(args, "code");
    if (!code)
        *why = "The arguments were not a JSON object with a string field "
               "\"code\"; nothing was run.";
    return code ? apr_pstrdup(p, code) : NULL;
}

static json_object *call_item(ci_loop *l, ci_call *c)
{
    json_object *item = json_object_new_object();
    json_object_object_add(item, "id", json_object_new_string(c->item_id));
    json_object_object_add(item, "type",
                           json_object_new_string("code_interpreter_call"));
    json_object_object_add(item, "status", json_object_new_string("in_progress"));
    json_object_object_add(item, "code", json_object_new_string(c->code ? c->code : ""));
    json_object_object_add(item, "container_id",
                           json_object_new_string(l->container_id));
    json_object_object_add(item, "outputs", NULL);
    return item;
}

/* A call of the hosted shell: its action, and its output item to come. */
static void shell_call(ci_loop *l, ci_call *c, json_object *fc)
{
    c->shell = 1;
    c->action = ci_shell_parse(l->p, ci_json_str(fc, "arguments"), &c->arguments_error);
    c->item = ci_shell_call_item(c->item_id, c->call_id, c->action, "completed",
                                 l->container_id);
    c->output_item_id = ci_mint_id(l->p, "sho_", 24);
    c->output_item = ci_json_own(l->p, ci_shell_output_item(
                                     c->output_item_id, c->call_id, NULL, "in_progress",
                                     c->action ? c->action->max_output_length : -1));
}

static ci_call *our_call(ci_loop *l, json_object *fc)
{
    ci_call *c = apr_pcalloc(l->p, sizeof(*c));
    const char *call_id = ci_json_str(fc, "call_id");
    const char *up_id = ci_json_str(fc, "id");
    const char *named = up_id ? apr_hash_get(l->named, up_id, APR_HASH_KEY_STRING)
                              : NULL;
    int shell = ci_loop_is_shell_call(l, fc);
    c->call_id = apr_pstrdup(l->p, call_id ? call_id : "");
    c->item_id = named ? named : ci_mint_id(l->p, shell ? "sh_" : "ci_", 24);
    c->round = l->rounds;
    if (shell) {
        shell_call(l, c, fc);
        return c;
    }
    c->code = code_of(l->p, ci_json_str(fc, "arguments"), &c->arguments_error);
    if (!c->code) {
        /* Show what the model sent, so the client sees why nothing ran. */
        const char *raw = ci_json_str(fc, "arguments");
        c->code = raw ? apr_pstrdup(l->p, raw) : "";
        c->item = call_item(l, c);
        c->code = NULL;
    }
    else
        c->item = call_item(l, c);
    return c;
}

int ci_loop_is_shell_call(const ci_loop *l, json_object *item)
{
    const char *name = ci_json_str(item, "name");
    return l->req->shell_function && ci_json_is_type(item, "function_call") && name &&
           !strcmp(name, l->req->shell_function);
}

int ci_loop_is_our_call(const ci_loop *l, json_object *item)
{
    const char *name = ci_json_str(item, "name");
    return ci_json_is_type(item, "function_call") && name &&
           ((l->req->tool_index >= 0 && !strcmp(name, l->req->function_name)) ||
            ci_loop_is_shell_call(l, item));
}

static void take_item(ci_loop *l, json_object *item)
{
    ci_round_item *ri = apr_array_push(l->round_items);
    ri->call = NULL;
    ri->output_index = (int)json_object_array_length(l->output);
    json_object_array_add(l->replay, json_object_get(item));
    if (ci_loop_is_our_call(l, item)) {
        ri->call = our_call(l, item);
        ri->call->output_index = ri->output_index;
        ri->item = ri->call->item;
        *(ci_call **)apr_array_push(l->round_calls) = ri->call;
        *(ci_call **)apr_array_push(l->calls) = ri->call;
        if (ri->call->shell) {
            /* its output item follows it, before what the model wrote next */
            json_object_array_add(l->output, ri->item);
            ri->call->output_item_index = ri->output_index + 1;
            json_object_array_add(l->output, json_object_get(ri->call->output_item));
            return;
        }
    }
    else {
        if (ci_json_is_type(item, "function_call"))
            l->client_calls = 1;
        ri->item = json_object_get(item);
    }
    json_object_array_add(l->output, ri->item);
}

int ci_loop_take_response(ci_loop *l, json_object *resp, ci_error *err)
{
    json_object *out = ci_json_get(resp, "output", json_type_array);
    int i, n;

    if (!out) {
        ci_error_set(err, 502, CI_SERVER, NULL, "bad_upstream_response", l->p,
                     "The model upstream answered round %d with something that "
                     "is not a Responses API response.", l->rounds + 1);
        return -1;
    }
    l->rounds++;
    l->last = resp;
    l->client_calls = 0;
    l->new_items = ci_json_own(l->p, json_object_new_array());
    apr_array_clear(l->round_items);
    apr_array_clear(l->round_calls);
    take_usage(l, resp);
    n = (int)json_object_array_length(out);
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(out, i);
        if (!json_object_is_type(item, json_type_object))
            continue;
        if (l->citer)
            ci_citer_apply_item(l->citer, item);
        take_item(l, item);
    }
    return 0;
}

void ci_loop_set_citer(ci_loop *l, ci_citer *c) { l->citer = c; }
ci_citer *ci_loop_citer(const ci_loop *l) { return l->citer; }

int ci_loop_take_round(ci_loop *l, const char *body, apr_size_t len,
                       ci_error *err)
{
    const char *perr = NULL;
    json_object *resp = ci_json_parse(l->p, body, len, &perr);

    if (!ci_json_get(resp, "output", json_type_array)) {
        ci_error_set(err, 502, CI_SERVER, NULL, "bad_upstream_response", l->p,
                     "The model upstream answered round %d with something that "
                     "is not a Responses API response%s%s.", l->rounds + 1,
                     perr ? ": " : "", perr ? perr : "");
        return -1;
    }
    return ci_loop_take_response(l, resp, err);
}

/* ---- results ----------------------------------------------------------- */

static json_object *outputs_of(const ci_exec_result *res, const char *extra)
{
    json_object *outs = json_object_new_array();
    const char *text = res->text ? res->text : "";
    int i;
    if (*text || extra) {
        json_object *logs = json_object_new_object();
        const char *both = text;
        char *joined = NULL;
        if (extra) {
            apr_size_t a = strlen(text), b = strlen(extra);
            joined = malloc(a + b + 2);
            memcpy(joined, text, a);
            if (a && text[a - 1] != '\n')
                joined[a++] = '\n';
            memcpy(joined + a, extra, b + 1);
            both = joined;
        }
        json_object_object_add(logs, "type", json_object_new_string("logs"));
        json_object_object_add(logs, "logs", json_object_new_string(both));
        json_object_array_add(outs, logs);
        free(joined);
    }
    for (i = 0; res->images && i < res->images->nelts; i++) {
        json_object *img = json_object_new_object();
        json_object_object_add(img, "type", json_object_new_string("image"));
        json_object_object_add(img, "url", json_object_new_string(
                                               APR_ARRAY_IDX(res->images, i, const char *)));
        json_object_array_add(outs, img);
    }
    return outs;
}

static void add_function_output(ci_loop *l, ci_call *c, const char *text)
{
    json_object *o = json_object_new_object();
    if (l->notice) {
        text = apr_pstrcat(l->p, l->notice, "\n", text, NULL);
        l->notice = NULL;
    }
    c->model_output = text;
    json_object_object_add(o, "type", json_object_new_string("function_call_output"));
    json_object_object_add(o, "call_id", json_object_new_string(c->call_id));
    json_object_object_add(o, "output", json_object_new_string(text));
    json_object_array_add(l->replay, o);
    json_object_array_add(l->new_items, json_object_get(o));
}

/* A call of ours ends "completed" however it ended: its code ran, raised,
 * timed out, lost its sandbox, or was not run at all (bad arguments, a
 * limit). "failed" and "incomplete" are valid in the Responses API, but the
 * OpenAI Agents SDK refuses to replay a code_interpreter_call in either
 * status, so the next turn of an agent that met one would fail before it is
 * sent (docs/ARCHITECTURE.md). What happened is in the outputs (the output
 * so far, then why), and the model is told (MODEL_TEXT). */
/* A shell call's output item gets its entries; the model is told them. */
static void finish_shell_call(ci_loop *l, ci_call *c, const ci_exec_result *res)
{
    json_object *output = ci_shell_output(res, c->max_chars);
    json_object_object_add(c->output_item, "output", output);
    json_object_object_add(c->output_item, "status", json_object_new_string("completed"));
    add_function_output(l, c, apr_pstrdup(l->p, ci_json_text(output, NULL)));
}

static void finish_call(ci_loop *l, ci_call *c, const ci_exec_result *res,
                        const char *model_text)
{
    if (c->shell) {
        finish_shell_call(l, c, res);
        return;
    }
    json_object_object_add(c->item, "status", json_object_new_string("completed"));
    if (l->req->include_outputs)
        json_object_object_add(c->item, "outputs",
                               outputs_of(res, ci_exec_failed(res) ? res->failure : NULL));
    add_function_output(l, c, model_text);
}

static void not_executed(ci_loop *l, ci_call *c, const char *why)
{
    ci_exec_result *res = apr_pcalloc(l->p, sizeof(*res));
    res->outcome = CI_EXEC_NOT_RUN;
    res->failure = why;
    res->text = "";
    c->result = res;
    finish_call(l, c, res, why);
}

int ci_loop_may_execute(ci_loop *l, ci_call *c)
{
    if (c->arguments_error) {
        not_executed(l, c, c->arguments_error);
        return 0;
    }
    if (l->final_sent) {
        not_executed(l, c, "Not run: this response reached its limit of code "
                           "executions.");
        return 0;
    }
    if (l->req->max_tool_calls >= 0 && l->executions >= l->req->max_tool_calls) {
        not_executed(l, c, "Not run: the request's max_tool_calls limit was "
                           "reached.");
        return 0;
    }
    return 1;
}

void ci_loop_shell_bounds(ci_loop *l, ci_call *c, apr_interval_time_t timeout,
                          apr_size_t max_output, ci_shell_action *out)
{
    (void)l;
    ci_shell_bounds(c->action, timeout, max_output, out);
    c->max_chars = out->max_output;
}

void ci_loop_record(ci_loop *l, ci_call *c, const ci_exec_result *res)
{
    c->result = ci_exec_result_copy(l->p, res);
    c->executed = 1;
    l->executions++;
    finish_call(l, c, c->result, ci_exec_model_text(l->p, c->result));
}

/* ---- what next --------------------------------------------------------- */

ci_next ci_loop_next(const ci_loop *l)
{
    if (l->round_calls->nelts == 0 || l->client_calls || l->final_sent)
        return CI_NEXT_DONE;
    if (l->rounds >= l->max_rounds ||
        (l->req->max_tool_calls >= 0 && l->executions >= l->req->max_tool_calls))
        return CI_NEXT_FINAL;
    return CI_NEXT_FOLLOWUP;
}

/* tool_choice for a follow-up: forced choices relax to auto, the last round
 * forbids tools. */
static json_object *followup_choice(ci_loop *l, ci_next next, json_object *choice)
{
    if (next == CI_NEXT_FINAL)
        return json_object_new_string("none");
    if (!l->req->forced_choice)
        return choice ? json_object_get(choice) : NULL;
    if (choice && ci_json_is_type(choice, "allowed_tools")) {
        json_object *relaxed = ci_json_copy(choice);
        json_object_object_add(relaxed, "mode", json_object_new_string("auto"));
        return relaxed;
    }
    return json_object_new_string("auto");
}

/* The follow-up body is spliced rather than re-serialised: the original
 * input was encoded once (ci_request), only the new items are encoded here.
 * Every round then costs a copy of the conversation, not a re-encoding. */
const char *ci_loop_followup_body(ci_loop *l, apr_pool_t *p, ci_next next,
                                  apr_size_t *len)
{
    json_object *root = l->req->root;
    json_object *choice = NULL, *saved_choice;
    const char *orig = "", *fresh, *body;
    apr_size_t orig_len = 0, fresh_len;

    json_object_object_get_ex(root, "tool_choice", &choice);
    saved_choice = choice ? json_object_get(choice) : NULL;
    if ((choice = followup_choice(l, next, saved_choice)))
        json_object_object_add(root, "tool_choice", choice);
    if (!l->req->uses_conversation) {
        orig = l->req->input_text;
        orig_len = l->req->input_len;
    }
    fresh = ci_json_array_members(l->req->uses_conversation ? l->new_items
                                                               : l->replay, &fresh_len);
    body = ci_json_with_array(p, root, "input", orig, orig_len, fresh, fresh_len, len);

    /* Put tool_choice back as it was. */
    if (saved_choice)
        json_object_object_add(root, "tool_choice", saved_choice);
    else
        json_object_object_del(root, "tool_choice");
    if (next == CI_NEXT_FINAL)
        l->final_sent = 1;
    return body;
}

/* Whether the upstream's echo UP has our function NAME at INDEX (-1: no
 * such tool of ours, nothing to check). */
static int echoed_at(json_object *up, int index, const char *name)
{
    json_object *at;
    const char *got;
    return index < 0 || ((at = json_object_array_get_idx(up, (size_t)index)) &&
                         (got = ci_json_str(at, "name")) && !strcmp(got, name));
}

/* The tools to echo: the upstream's own echo (it completes the client's
 * function tools, e.g. with "strict", as OpenAI does) with our functions put
 * back as the client's code_interpreter and shell tools; the client's tools
 * verbatim when the upstream echoed something else. */
static json_object *echo_tools(ci_loop *l)
{
    json_object *up = ci_json_get(l->last, "tools", json_type_array);
    json_object *tools;
    const ci_request *req = l->req;
    int idx[2] = { req->tool_index, req->shell_index }, i;
    if (!up || json_object_array_length(up) != json_object_array_length(req->client_tools) ||
        !echoed_at(up, req->tool_index, req->function_name) ||
        !echoed_at(up, req->shell_index, req->shell_function))
        return ci_json_copy(req->client_tools);
    tools = ci_json_copy(up);
    for (i = 0; i < 2; i++)
        if (idx[i] >= 0)
            json_object_array_put_idx(tools, (size_t)idx[i], ci_json_copy(
                                          json_object_array_get_idx(req->client_tools,
                                                                    (size_t)idx[i])));
    return tools;
}

/* ---- what outlives the request ------------------------------------------ */

/* The upstream's own function call of C (as it sent it), or NULL. */
static json_object *upstream_call(ci_loop *l, const ci_call *c)
{
    int i, n = (int)json_object_array_length(l->replay);
    for (i = 0; i < n; i++) {
        json_object *it = json_object_array_get_idx(l->replay, i);
        const char *cid = ci_json_str(it, "call_id");
        if (ci_json_is_type(it, "function_call") && cid && !strcmp(cid, c->call_id))
            return it;
    }
    return NULL;
}

static json_object *output_item(const ci_call *c)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string("function_call_output"));
    json_object_object_add(o, "call_id", json_object_new_string(c->call_id));
    json_object_object_add(o, "output", json_object_new_string(c->model_output));
    return o;
}

/* The call as the upstream needs it in an input: without its id (the
 * upstream's item ids are the upstream's to resolve, and a stateless one
 * refuses ids it does not know). */
static json_object *call_for_input(json_object *fc)
{
    json_object *o = json_object_new_object();
    static const char *const keys[] = { "type", "call_id", "name", "arguments" };
    unsigned i;
    for (i = 0; i < sizeof(keys) / sizeof(*keys); i++) {
        json_object *v;
        if (json_object_object_get_ex(fc, keys[i], &v))
            json_object_object_add(o, keys[i], json_object_get(v));
    }
    return o;
}

apr_array_header_t *ci_loop_memory(ci_loop *l, apr_pool_t *p, const char **pending)
{
    apr_array_header_t *out = apr_array_make(p, l->calls->nelts, sizeof(ci_memory));
    json_object *owed = NULL;
    int i;
    *pending = NULL;
    for (i = 0; i < l->calls->nelts; i++) {
        ci_call *c = APR_ARRAY_IDX(l->calls, i, ci_call *);
        json_object *fc = upstream_call(l, c), *pair;
        ci_memory *m;
        if (!fc || !c->model_output)
            continue;
        pair = ci_json_own(p, json_object_new_array());
        json_object_array_add(pair, call_for_input(fc));
        json_object_array_add(pair, output_item(c));
        m = apr_array_push(out);
        m->item_id = c->item_id;
        m->text = ci_json_pstr(p, pair, NULL);
        if (c->shell) {
            /* a reference to the output stands for nothing more: the call's
             * brings both */
            m = apr_array_push(out);
            m->item_id = c->output_item_id;
            m->text = "[]";
        }
        /* Calls of the last round (it ended the loop: the model called a
         * client function too, or a limit was met): the upstream's stored
         * response holds them without their outputs, which a request
         * chained to it must bring. */
        if (c->round == l->rounds) {
            if (!owed)
                owed = ci_json_own(p, json_object_new_array());
            json_object_array_add(owed, output_item(c));
        }
    }
    if (owed)
        *pending = ci_json_pstr(p, owed, NULL);
    return out;
}

/* ---- the answer -------------------------------------------------------- */

json_object *ci_loop_response(ci_loop *l)
{
    json_object *resp = l->last;
    json_object_object_add(resp, "output", json_object_get(l->output));
    if (l->usage)
        json_object_object_add(resp, "usage", json_object_get(l->usage));
    json_object_object_add(resp, "tools", echo_tools(l));
    json_object_object_add(resp, "tool_choice",
                           l->req->client_tool_choice
                               ? ci_json_copy(l->req->client_tool_choice)
                               : json_object_new_string("auto"));
    return resp;
}

/* The latest round's response as the client should see it, with OUTPUT. */
static json_object *client_view(ci_loop *l, json_object *output)
{
    json_object *resp = ci_json_copy(l->last);
    json_object_object_add(resp, "output", output);
    json_object_object_add(resp, "tools", echo_tools(l));
    json_object_object_add(resp, "tool_choice",
                           l->req->client_tool_choice
                               ? ci_json_copy(l->req->client_tool_choice)
                               : json_object_new_string("auto"));
    return ci_json_own(l->p, resp);
}

json_object *ci_loop_snapshot(ci_loop *l)
{
    json_object *resp = client_view(l, json_object_new_array());
    json_object_object_add(resp, "status", json_object_new_string("in_progress"));
    json_object_object_add(resp, "usage", NULL);
    return resp;
}

json_object *ci_loop_failed_response(ci_loop *l, const char *code,
                                     const char *message)
{
    json_object *resp = client_view(l, json_object_get(l->output));
    json_object *err = json_object_new_object();
    json_object_object_add(err, "code", json_object_new_string(code));
    json_object_object_add(err, "message", json_object_new_string(message));
    json_object_object_add(resp, "status", json_object_new_string("failed"));
    json_object_object_add(resp, "error", err);
    if (l->usage)
        json_object_object_add(resp, "usage", json_object_get(l->usage));
    return resp;
}
