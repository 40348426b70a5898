/* ci_sse.c - Responses API streaming events as server-sent events. */
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_json.h"
#include "ci_shell.h"
#include "ci_sse.h"

struct ci_sse {
    apr_pool_t *p;
    apr_hash_t *commands; /* a relayed shell call's item id -> shell_progress */
    int seq;
    ci_buf out;           /* framed events not yet taken */
    int hold_after;       /* events of items past this output_index wait; -1: none */
    apr_array_header_t *held;   /* json_object *, in order */
};

ci_sse *ci_sse_create(apr_pool_t *p)
{
    ci_sse *s = apr_pcalloc(p, sizeof(*s));
    s->p = p;
    ci_buf_init(&s->out, p, APR_SIZE_MAX / 2);
    s->hold_after = -1;
    s->held = apr_array_make(p, 16, sizeof(json_object *));
    s->commands = apr_hash_make(p);
    return s;
}

int ci_sse_events(const ci_sse *s) { return s->seq; }

static void put(ci_sse *s, const char *data, apr_size_t n)
{
    ci_buf_append(&s->out, data, n);   /* unbounded: never fails */
}

const char *ci_sse_take(ci_sse *s, apr_size_t *len)
{
    const char *out = s->out.data;
    *len = s->out.len;
    ci_buf_init(&s->out, s->p, s->out.max);
    return out;
}

void ci_sse_keepalive(ci_sse *s)
{
    put(s, ": keepalive\n\n", 13);
}

/* A new event object: {"type": TYPE, "sequence_number": (set when it goes
 * out)}. */
static json_object *event(ci_sse *s, const char *type)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "type", json_object_new_string(type));
    json_object_object_add(e, "sequence_number", json_object_new_int(0));
    return e;
}

/* Number, frame and free E. */
static void frame(ci_sse *s, json_object *e)
{
    apr_size_t n;
    const char *type, *data;
    json_object_object_add(e, "sequence_number", json_object_new_int(s->seq++));
    type = ci_json_str(e, "type");
    data = ci_json_text(e, &n);
    put(s, "event: ", 7);
    put(s, type, strlen(type));
    put(s, "\ndata: ", 7);
    put(s, data, n);
    put(s, "\n\n", 2);
    json_object_put(e);
}

/* An event goes out now, or waits when it belongs to an item held back. */
static void emit(ci_sse *s, json_object *e)
{
    json_object *idx;
    if (s->hold_after >= 0 && json_object_object_get_ex(e, "output_index", &idx) &&
        json_object_get_int(idx) > s->hold_after) {
        *(json_object **)apr_array_push(s->held) = e;
        return;
    }
    frame(s, e);
}

void ci_sse_hold_after(ci_sse *s, int output_index)
{
    if (s->hold_after < 0 || output_index < s->hold_after)
        s->hold_after = output_index;
}

void ci_sse_release(ci_sse *s, int output_index)
{
    apr_array_header_t *keep = apr_array_make(s->p, s->held->nelts + 1,
                                              sizeof(json_object *));
    int i;
    for (i = 0; i < s->held->nelts; i++) {
        json_object *e = APR_ARRAY_IDX(s->held, i, json_object *), *idx;
        json_object_object_get_ex(e, "output_index", &idx);
        if (json_object_get_int(idx) <= output_index)
            frame(s, e);
        else
            *(json_object **)apr_array_push(keep) = e;
    }
    s->held = keep;
    if (!keep->nelts)
        s->hold_after = -1;
    else if (output_index > s->hold_after)
        s->hold_after = output_index;
}

static void add_int(json_object *e, const char *k, int v)
{
    json_object_object_add(e, k, json_object_new_int(v));
}

static void add_str(json_object *e, const char *k, const char *v)
{
    json_object_object_add(e, k, json_object_new_string(v ? v : ""));
}

static void emit_with_response(ci_sse *s, const char *type, json_object *resp)
{
    json_object *e = event(s, type);
    json_object_object_add(e, "response", json_object_get(resp));
    emit(s, e);
}

void ci_sse_start(ci_sse *s, json_object *snapshot)
{
    emit_with_response(s, "response.created", snapshot);
    emit_with_response(s, "response.in_progress", snapshot);
}

void ci_sse_completed(ci_sse *s, json_object *response)
{
    emit_with_response(s, "response.completed", response);
}

/* Length of the next delta: at most CI_SSE_CHUNK bytes, never splitting a
 * UTF-8 sequence. */
static apr_size_t chunk_len(const char *text, apr_size_t left)
{
    apr_size_t n = left < CI_SSE_CHUNK ? left : CI_SSE_CHUNK;
    while (n < left && n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
        n--;
    return n ? n : left;
}

/* ---- item events -------------------------------------------------------- */

static void item_event(ci_sse *s, const char *type, int index, json_object *item)
{
    json_object *e = event(s, type);
    add_int(e, "output_index", index);
    json_object_object_add(e, "item", item);
    emit(s, e);
}

/* A copy of ITEM as first announced: in progress, empty of content. */
static json_object *announced(json_object *item, const char *emptied,
                              json_object *empty_value)
{
    json_object *copy = ci_json_copy(item);
    if (json_object_object_get_ex(copy, "status", NULL))
        json_object_object_add(copy, "status", json_object_new_string("in_progress"));
    if (emptied)
        json_object_object_add(copy, emptied, empty_value);
    else
        json_object_put(empty_value);
    return copy;
}

/* Events of one part of a message: {item_id, output_index, content_index}. */
static json_object *part_event(ci_sse *s, const char *type, const char *item_id,
                               int index, int part)
{
    json_object *e = event(s, type);
    add_str(e, "item_id", item_id);
    add_int(e, "output_index", index);
    add_int(e, "content_index", part);
    return e;
}

/* ---- deltas --------------------------------------------------------------
 * Text, arguments and code go out in deltas of at most CI_SSE_CHUNK bytes,
 * whole UTF-8 characters each; HEAD makes the event each delta is added to. */

typedef json_object *event_head(ci_sse *s, const char *type, const void *ref);

typedef struct part_ref {
    const char *item_id;
    int index, part;
} part_ref;

static json_object *part_head(ci_sse *s, const char *type, const void *ref)
{
    const part_ref *r = ref;
    return part_event(s, type, r->item_id, r->index, r->part);
}

static void deltas(ci_sse *s, const char *type, event_head *head, const void *ref,
                   const char *text, int logprobs)
{
    apr_size_t left = text ? strlen(text) : 0;
    while (left > 0) {
        apr_size_t n = chunk_len(text, left);
        json_object *e = head(s, type, ref);
        json_object_object_add(e, "delta", json_object_new_string_len(text, (int)n));
        if (logprobs)
            json_object_object_add(e, "logprobs", json_object_new_array());
        emit(s, e);
        text += n;
        left -= n;
    }
}

static json_object *empty_part(json_object *part)
{
    json_object *p = json_object_new_object();
    const char *type = ci_json_str(part, "type");
    add_str(p, "type", type);
    if (type && !strcmp(type, "refusal"))
        add_str(p, "refusal", "");
    else {
        json_object_object_add(p, "annotations", json_object_new_array());
        json_object_object_add(p, "logprobs", json_object_new_array());
        add_str(p, "text", "");
    }
    return p;
}

static void text_deltas(ci_sse *s, const char *type, const char *item_id,
                        int index, int part, const char *text, int logprobs)
{
    const part_ref ref = { item_id, index, part };
    deltas(s, type, part_head, &ref, text, logprobs);
}

void ci_sse_annotation(ci_sse *s, const char *item_id, int index, int part,
                       int annotation_index, json_object *annotation)
{
    json_object *e = part_event(s, "response.output_text.annotation.added", item_id,
                                index, part);
    add_int(e, "annotation_index", annotation_index);
    json_object_object_add(e, "annotation", json_object_get(annotation));
    emit(s, e);
}

static void annotations(ci_sse *s, const char *item_id, int index, int part,
                        json_object *list)
{
    int i, n = list ? (int)json_object_array_length(list) : 0;
    for (i = 0; i < n; i++)
        ci_sse_annotation(s, item_id, index, part, i, json_object_array_get_idx(list, i));
}

static void content_part(ci_sse *s, const char *item_id, int index, int i,
                         json_object *part)
{
    const char *type = ci_json_str(part, "type");
    int refusal = type && !strcmp(type, "refusal");
    json_object *e = part_event(s, "response.content_part.added", item_id, index, i);
    json_object_object_add(e, "part", empty_part(part));
    emit(s, e);
    if (refusal) {
        const char *text = ci_json_str(part, "refusal");
        text_deltas(s, "response.refusal.delta", item_id, index, i, text ? text : "", 0);
        e = part_event(s, "response.refusal.done", item_id, index, i);
        add_str(e, "refusal", text);
    }
    else {
        const char *text = ci_json_str(part, "text");
        json_object *lp = ci_json_get(part, "logprobs", json_type_array);
        text_deltas(s, "response.output_text.delta", item_id, index, i,
                    text ? text : "", 1);
        annotations(s, item_id, index, i,
                    ci_json_get(part, "annotations", json_type_array));
        e = part_event(s, "response.output_text.done", item_id, index, i);
        add_str(e, "text", text);
        json_object_object_add(e, "logprobs",
                               lp ? json_object_get(lp) : json_object_new_array());
    }
    emit(s, e);
    e = part_event(s, "response.content_part.done", item_id, index, i);
    json_object_object_add(e, "part", json_object_get(part));
    emit(s, e);
}

static void message_events(ci_sse *s, json_object *item, int index)
{
    json_object *content = ci_json_get(item, "content", json_type_array);
    const char *id = ci_json_str(item, "id");
    int i, n = content ? (int)json_object_array_length(content) : 0;
    item_event(s, "response.output_item.added", index,
               announced(item, "content", json_object_new_array()));
    for (i = 0; i < n; i++)
        content_part(s, id, index, i, json_object_array_get_idx(content, i));
}

/* Events of a function call: {item_id, output_index}. */
static json_object *function_call_head(ci_sse *s, const char *type, const void *ref)
{
    const part_ref *r = ref;
    json_object *e = event(s, type);
    add_str(e, "item_id", r->item_id);
    add_int(e, "output_index", r->index);
    return e;
}

static void function_call_events(ci_sse *s, json_object *item, int index)
{
    const part_ref ref = { ci_json_str(item, "id"), index, 0 };
    json_object *e;
    item_event(s, "response.output_item.added", index,
               announced(item, "arguments", json_object_new_string("")));
    deltas(s, "response.function_call_arguments.delta", function_call_head, &ref,
           ci_json_str(item, "arguments"), 0);
    e = function_call_head(s, "response.function_call_arguments.done", &ref);
    add_str(e, "name", ci_json_str(item, "name"));
    add_str(e, "arguments", ci_json_str(item, "arguments"));
    emit(s, e);
}

void ci_sse_item(ci_sse *s, const ci_round_item *ri)
{
    if (ci_json_is_type(ri->item, "message"))
        message_events(s, ri->item, ri->output_index);
    else if (ci_json_is_type(ri->item, "function_call"))
        function_call_events(s, ri->item, ri->output_index);
    else if (ci_json_is_type(ri->item, "reasoning"))
        item_event(s, "response.output_item.added", ri->output_index,
                   announced(ri->item, "summary", json_object_new_array()));
    else
        item_event(s, "response.output_item.added", ri->output_index,
                   ci_json_copy(ri->item));
    item_event(s, "response.output_item.done", ri->output_index,
               json_object_get(ri->item));
}

/* ---- code calls --------------------------------------------------------- */

static json_object *code_event(ci_sse *s, const char *type, const char *item_id,
                               int output_index)
{
    json_object *e = event(s, type);
    add_int(e, "output_index", output_index);
    add_str(e, "item_id", item_id);
    return e;
}

static json_object *call_event(ci_sse *s, const char *type, const ci_call *c)
{
    return code_event(s, type, c->item_id, c->output_index);
}

static json_object *call_head(ci_sse *s, const char *type, const void *ref)
{
    return call_event(s, type, ref);
}

static void shell_start(ci_sse *s, const ci_call *c);
static void shell_ready(ci_sse *s, const ci_call *c);
static void shell_done(ci_sse *s, const ci_call *c);

void ci_sse_call_start(ci_sse *s, const ci_call *c)
{
    if (c->shell) {
        shell_start(s, c);
        return;
    }
    json_object *item = announced(c->item, "code", json_object_new_string(""));

    json_object_object_add(item, "outputs", json_object_new_array());
    item_event(s, "response.output_item.added", c->output_index, item);
    emit(s, call_event(s, "response.code_interpreter_call.in_progress", c));
    deltas(s, "response.code_interpreter_call_code.delta", call_head, c,
           ci_json_str(c->item, "code"), 0);
    ci_sse_call_ready(s, c);
}

void ci_sse_pass(ci_sse *s, json_object *ev)
{
    emit(s, ev);
}

void ci_sse_call_announce(ci_sse *s, const char *item_id, int output_index,
                          const char *container_id)
{
    json_object *item = json_object_new_object();
    add_str(item, "id", item_id);
    add_str(item, "type", "code_interpreter_call");
    add_str(item, "status", "in_progress");
    add_str(item, "code", "");
    add_str(item, "container_id", container_id);
    json_object_object_add(item, "outputs", json_object_new_array());
    item_event(s, "response.output_item.added", output_index, item);
    emit(s, code_event(s, "response.code_interpreter_call.in_progress", item_id,
                       output_index));
}

void ci_sse_call_code(ci_sse *s, const char *item_id, int output_index,
                      const char *code, apr_size_t len)
{
    json_object *e;
    if (!len)
        return;
    e = code_event(s, "response.code_interpreter_call_code.delta", item_id,
                   output_index);
    json_object_object_add(e, "delta", json_object_new_string_len(code, (int)len));
    emit(s, e);
}

void ci_sse_call_ready(ci_sse *s, const ci_call *c)
{
    json_object *e;
    if (c->shell) {
        shell_ready(s, c);
        return;
    }
    e = call_event(s, "response.code_interpreter_call_code.done", c);
    add_str(e, "code", ci_json_str(c->item, "code"));
    emit(s, e);
    emit(s, call_event(s, "response.code_interpreter_call.interpreting", c));
}

void ci_sse_call_done(ci_sse *s, const ci_call *c)
{
    if (c->shell) {
        shell_done(s, c);
        return;
    }
    emit(s, call_event(s, "response.code_interpreter_call.completed", c));
    item_event(s, "response.output_item.done", c->output_index,
               json_object_get(c->item));
}

/* ---- shell calls --------------------------------------------------------
 * A shell_call's events: output_item.added (in progress, no commands yet),
 * per command shell_call_command.added, .delta(s) and .done, then
 * output_item.done; once it has run, its shell_call_output: added, per
 * command shell_call_output_content.delta and .done, and done. */

/* What of a relayed call's commands has gone out. */
typedef struct shell_progress {
    int added;     /* commands announced */
    int done;      /* commands whose done went out */
} shell_progress;

static shell_progress *progress_of(ci_sse *s, const char *item_id)
{
    shell_progress *pr = apr_hash_get(s->commands, item_id, APR_HASH_KEY_STRING);
    if (!pr) {
        pr = apr_pcalloc(s->p, sizeof(*pr));
        apr_hash_set(s->commands, apr_pstrdup(s->p, item_id), APR_HASH_KEY_STRING, pr);
    }
    return pr;
}

static json_object *command_event(ci_sse *s, const char *type, int index, int command)
{
    json_object *e = event(s, type);
    add_int(e, "output_index", index);
    add_int(e, "command_index", command);
    return e;
}

void ci_sse_shell_announce(ci_sse *s, const char *item_id, const char *call_id,
                           int output_index, const char *container_id)
{
    item_event(s, "response.output_item.added", output_index,
               ci_shell_call_item(item_id, call_id, NULL, "in_progress", container_id));
    progress_of(s, item_id);
}

void ci_sse_shell_command(ci_sse *s, const char *item_id, int output_index, int command,
                          const char *text, apr_size_t len)
{
    shell_progress *pr = progress_of(s, item_id);
    json_object *e;
    while (pr->added <= command) {
        e = command_event(s, "response.shell_call_command.added", output_index, pr->added++);
        add_str(e, "command", "");
        emit(s, e);
    }
    if (!len)
        return;
    e = command_event(s, "response.shell_call_command.delta", output_index, command);
    json_object_object_add(e, "delta", json_object_new_string_len(text, (int)len));
    emit(s, e);
}

void ci_sse_shell_command_done(ci_sse *s, const char *item_id, int output_index,
                               int command, const char *text)
{
    shell_progress *pr = progress_of(s, item_id);
    json_object *e;
    ci_sse_shell_command(s, item_id, output_index, command, "", 0);
    e = command_event(s, "response.shell_call_command.done", output_index, command);
    add_str(e, "command", text);
    emit(s, e);
    pr->done = command + 1;
}

static const char *command_text(const ci_call *c, int i)
{
    return APR_ARRAY_IDX(c->action->commands, i, const char *);
}

/* The commands of C not yet done (all of them for a round that came whole),
 * then the call's output_item.done. */
static void shell_ready(ci_sse *s, const ci_call *c)
{
    shell_progress *pr = progress_of(s, c->item_id);
    int i, n = c->action ? c->action->commands->nelts : 0;
    for (i = pr->done; i < n; i++) {
        const char *text = command_text(c, i);
        if (i >= pr->added)
            ci_sse_shell_command(s, c->item_id, c->output_index, i, text, strlen(text));
        ci_sse_shell_command_done(s, c->item_id, c->output_index, i, text);
    }
    item_event(s, "response.output_item.done", c->output_index, json_object_get(c->item));
}

static void shell_start(ci_sse *s, const ci_call *c)
{
    ci_sse_shell_announce(s, c->item_id, c->call_id, c->output_index,
                          ci_json_str(ci_json_get(c->item, "environment", json_type_object),
                                      "container_id"));
    shell_ready(s, c);
}

static json_object *output_event(ci_sse *s, const char *type, const ci_call *c, int command)
{
    json_object *e = event(s, type);
    add_str(e, "item_id", c->output_item_id);
    add_int(e, "output_index", c->output_item_index);
    add_int(e, "command_index", command);
    return e;
}

/* One entry of the output: its delta (stdout and stderr) and done. */
static void output_entry(ci_sse *s, const ci_call *c, int i, json_object *entry)
{
    json_object *e = output_event(s, "response.shell_call_output_content.delta", c, i);
    json_object *delta = json_object_new_object(), *list = json_object_new_array();
    add_str(delta, "stdout", ci_json_str(entry, "stdout"));
    add_str(delta, "stderr", ci_json_str(entry, "stderr"));
    json_object_object_add(e, "delta", delta);
    emit(s, e);
    e = output_event(s, "response.shell_call_output_content.done", c, i);
    json_object_array_add(list, json_object_get(entry));
    json_object_object_add(e, "output", list);
    emit(s, e);
}

static void shell_done(ci_sse *s, const ci_call *c)
{
    json_object *output = ci_json_get(c->output_item, "output", json_type_array);
    json_object *added = announced(c->output_item, "output", json_object_new_array());
    int i, n = output ? (int)json_object_array_length(output) : 0;
    /* before what the model wrote after the call, held back until now */
    ci_sse_release(s, c->output_item_index);
    item_event(s, "response.output_item.added", c->output_item_index, added);
    for (i = 0; i < n; i++)
        output_entry(s, c, i, json_object_array_get_idx(output, (size_t)i));
    item_event(s, "response.output_item.done", c->output_item_index,
               json_object_get(c->output_item));
}

void ci_sse_failed(ci_sse *s, const ci_error *err, json_object *response)
{
    json_object *e = event(s, "error");
    json_object *nested = json_object_new_object();
    json_object *code = err->code ? json_object_new_string(err->code) : NULL;
    json_object *param = err->param ? json_object_new_string(err->param) : NULL;

    json_object_object_add(e, "code", code);
    add_str(e, "message", err->message);
    json_object_object_add(e, "param", param);
    add_str(nested, "type", err->type);
    json_object_object_add(nested, "code", code ? json_object_get(code) : NULL);
    add_str(nested, "message", err->message);
    json_object_object_add(nested, "param", param ? json_object_get(param) : NULL);
    json_object_object_add(e, "error", nested);
    emit(s, e);
    emit_with_response(s, "response.failed", response);
}
