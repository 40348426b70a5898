/*
 * fuzz_rounds.h - shared by fuzz_assembly and fuzz_sse: the fixed client
 * requests a loop is built for, the canned execution results, and the split
 * of an input into upstream round bodies.
 *
 * Input format: up to FUZZ_MAX_ROUNDS upstream response bodies separated by
 * the byte 0x1E (ASCII record separator, which JSON text never contains
 * raw). Anything after the last round taken is ignored.
 */
#ifndef FUZZ_ROUNDS_H
#define FUZZ_ROUNDS_H

#include "fuzz_common.h"
#include "ci_error.h"
#include "ci_exec.h"
#include "ci_loop.h"
#include "ci_request.h"

#define FUZZ_FNAME "python"
#define FUZZ_SEP 0x1E
#define FUZZ_MAX_ROUNDS 3

/* The intercepted requests every input is played against. */
typedef struct fuzz_variant {
    const char *body;
    int max_rounds;      /* CodeInterpreterMaxLoops */
    int max_tool_calls;  /* as in the body, -1 when absent */
} fuzz_variant;

static const fuzz_variant fuzz_variants[] = {
    /* Forced tool, outputs included, a client function beside ours. */
    { "{\"model\":\"gpt-4.1\",\"input\":\"Compute 2+2 with python\","
      "\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}},"
      "{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":"
      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],"
      "\"tool_choice\":\"required\",\"include\":[\"code_interpreter_call.outputs\"],"
      "\"stream\":true,\"stream_options\":{\"include_obfuscation\":false}}",
      3, -1 },
    /* Conversation (follow-ups send new items only), allowed_tools required,
     * max_tool_calls 2, outputs not included. */
    { "{\"model\":\"gpt-4.1\",\"conversation\":\"conv_123\",\"input\":"
      "[{\"role\":\"user\",\"content\":\"plot a sine wave\"}],"
      "\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}],"
      "\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"required\","
      "\"tools\":[{\"type\":\"code_interpreter\"}]},\"max_tool_calls\":2,"
      "\"stream\":true}",
      4, 2 },
    /* Replayed history, tool forced by type, one round only (the next is
     * the final, tool-less one). */
    { "{\"model\":\"gpt-4.1\",\"instructions\":\"Be brief.\",\"input\":["
      "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"again\"}]},"
      "{\"type\":\"code_interpreter_call\",\"id\":\"ci_old\",\"code\":\"x = 1\","
      "\"outputs\":[{\"type\":\"logs\",\"logs\":\"ok\"},{\"type\":\"image\","
      "\"url\":\"data:image/png;base64,AAAA\"}],\"status\":\"completed\","
      "\"container_id\":\"cntr_1\"}],"
      "\"tools\":[{\"type\":\"code_interpreter\",\"container\":{\"type\":\"auto\"}}],"
      "\"tool_choice\":{\"type\":\"code_interpreter\"},"
      "\"include\":[\"code_interpreter_call.outputs\",\"reasoning.encrypted_content\"],"
      "\"stream\":true}",
      1, -1 },
};
#define FUZZ_NVARIANTS ((int)(sizeof(fuzz_variants) / sizeof(fuzz_variants[0])))

static inline ci_request *fuzz_request(apr_pool_t *p, const fuzz_variant *v)
{
    ci_rewrite_opts opts = { FUZZ_FNAME, NULL };
    ci_request *req = NULL;
    ci_error err;
    ci_req_verdict verdict;
    memset(&err, 0, sizeof(err));
    verdict = ci_request_rewrite(p, v->body, strlen(v->body), &opts, &req, &err);
    FUZZ_CHECK(verdict == CI_REQ_INTERCEPT, "fixed request not intercepted: %s",
               err.message ? err.message : "");
    return req;
}

/* The K-th canned result (K counts calls over the loop). */
static inline void fuzz_canned_result(apr_pool_t *p, int k, const ci_call *call,
                               ci_exec_result *res)
{
    memset(res, 0, sizeof(*res));
    res->images = apr_array_make(p, 1, sizeof(const char *));
    res->duration = 1234;
    switch (k % 4) {
    case 0:
        res->outcome = CI_EXEC_COMPLETED;
        res->text = "4\n";
        break;
    case 1:  /* the code echoed back, with a figure */
        res->outcome = CI_EXEC_COMPLETED;
        res->text = call->code ? call->code : "";
        *(const char **)apr_array_push(res->images) =
            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==";
        break;
    case 2:
        res->outcome = CI_EXEC_TIMED_OUT;
        res->failure = "The execution timed out after 30 seconds.";
        res->text = "Traceback (most recent call last):\n  File \"<cell>\", line 1\n"
                    "ZeroDivisionError: division by zero\n";
        break;
    default:
        res->outcome = CI_EXEC_COMPLETED;
        res->text = "";
        break;
    }
    res->text_len = strlen(res->text);
}

/* The round bodies of an input, each in a buffer of its exact size so that
 * reads past a body's end are caught. */
typedef struct fuzz_pieces {
    int n;
    char *body[FUZZ_MAX_ROUNDS];
    size_t len[FUZZ_MAX_ROUNDS];
} fuzz_pieces;

static inline void fuzz_split(const uint8_t *data, size_t size, fuzz_pieces *out)
{
    size_t start = 0, i;
    out->n = 0;
    for (i = 0; i <= size && out->n < FUZZ_MAX_ROUNDS; i++) {
        if (i == size || data[i] == FUZZ_SEP) {
            size_t n = i - start;
            out->body[out->n] = malloc(n ? n : 1);
            if (n)
                memcpy(out->body[out->n], data + start, n);
            out->len[out->n] = n;
            out->n++;
            start = i + 1;
        }
    }
}

static inline void fuzz_pieces_free(fuzz_pieces *pc)
{
    int i;
    for (i = 0; i < pc->n; i++)
        free(pc->body[i]);
    pc->n = 0;
}

static inline int fuzz_is_type(json_object *o, const char *type)
{
    const char *t = ci_json_str(o, "type");
    return t && !strcmp(t, type);
}

/* After a round was taken: its items are in output order, ours are
 * code_interpreter_call items in progress. FIRST_INDEX is the output index the
 * round must start at. Returns the number of items. */
static inline int fuzz_check_round(const ci_loop *l, int first_index)
{
    const apr_array_header_t *items = ci_loop_round_items(l);
    const apr_array_header_t *calls = ci_loop_round_calls(l);
    int i, ncalls = 0;
    for (i = 0; i < items->nelts; i++) {
        const ci_round_item *ri = &APR_ARRAY_IDX(items, i, ci_round_item);
        FUZZ_CHECK(ri->output_index == first_index + i, "item %d at index %d", i,
                   ri->output_index);
        FUZZ_CHECK(ri->item && json_object_is_type(ri->item, json_type_object),
                   "item %d is not an object", i);
        if (ri->call) {
            const ci_call *c = ri->call;
            FUZZ_CHECK(ncalls < calls->nelts &&
                           APR_ARRAY_IDX(calls, ncalls, ci_call *) == c,
                       "call %d out of order", ncalls);
            ncalls++;
            FUZZ_CHECK(c->item == ri->item, "call item differs");
            FUZZ_CHECK(c->output_index == ri->output_index, "call index differs");
            FUZZ_CHECK(c->item_id && !strncmp(c->item_id, "ci_", 3) &&
                           strlen(c->item_id) == 3 + 48,
                       "item id %s", c->item_id ? c->item_id : "(null)");
            FUZZ_CHECK(c->call_id != NULL, "no call_id");
            FUZZ_CHECK(c->code || c->arguments_error, "neither code nor reason");
            FUZZ_CHECK(fuzz_is_type(c->item, "code_interpreter_call"),
                       "our item has another type");
            FUZZ_CHECK(c->round == ci_loop_rounds(l), "round %d", c->round);
            FUZZ_CHECK(!c->executed && !c->result, "fresh call already ran");
        }
    }
    FUZZ_CHECK(ncalls == calls->nelts, "%d calls listed, %d found", calls->nelts,
               ncalls);
    return items->nelts;
}

/* Run or refuse CALL as the glue does; K counts calls over the loop. */
static inline void fuzz_execute(apr_pool_t *p, ci_loop *l, ci_call *c, int *k,
                         int final_sent, int max_tool_calls)
{
    ci_exec_result res;
    const char *status;
    int before = ci_loop_executions(l);
    int may = ci_loop_may_execute(l, c);
    if (may) {
        FUZZ_CHECK(c->code != NULL, "may execute a call without code");
        FUZZ_CHECK(!final_sent, "a call runs after the final round was sent");
        FUZZ_CHECK(max_tool_calls < 0 || before < max_tool_calls,
                   "max_tool_calls %d passed", max_tool_calls);
        fuzz_canned_result(p, (*k)++, c, &res);
        ci_loop_record(l, c, &res);
        FUZZ_CHECK(c->executed && c->result, "record left no result");
        FUZZ_CHECK(ci_loop_executions(l) == before + 1, "executions not counted");
    }
    else {
        FUZZ_CHECK(!c->executed && c->result && c->result->failure,
                   "refused call without a reason");
        FUZZ_CHECK(ci_loop_executions(l) == before, "refusal counted");
    }
    status = ci_json_str(c->item, "status");
    /* finished, however it ended: the only status every client replays */
    FUZZ_CHECK(status && !strcmp(status, "completed"),
               "status %s after the call", status ? status : "(null)");
    FUZZ_CHECK(c->result->text && fuzz_utf8_valid(c->result->text,
                                                  strlen(c->result->text)),
               "result text");
}

#endif
