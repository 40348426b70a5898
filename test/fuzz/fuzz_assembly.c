/*
 * fuzz_assembly.c - the agentic loop's bookkeeping fed arbitrary upstream
 * answers.
 *
 * The input holds up to three upstream response bodies separated by 0x1E
 * (see fuzz_rounds.h). Each is played, as the glue plays it, against every
 * fixed intercepted request: take the round, run or refuse each of our calls
 * with a canned result, ask what is next, build the follow-up body, take the
 * next round; finally assemble the client's response and serialise it.
 *
 * Checked: no crash, leak or undefined behaviour; items keep output order;
 * every call ends completed (however it ended); max_tool_calls and the
 * final tool-less round are honoured; follow-up bodies and the response are
 * valid JSON; the response lists every item of every round, and the tools
 * and tool_choice the client sent.
 */
#include "ci_id.h"
#include "fuzz_rounds.h"

static void check_followup(apr_pool_t *p, const ci_request *req, const char *body,
                           apr_size_t len, ci_next next, const char *before,
                           apr_size_t before_len)
{
    const char *err = NULL;
    json_object *root, *choice, *input;
    fuzz_check_json(p, "follow-up body", body, len, json_type_object);
    root = ci_json_parse(p, body, len, &err);
    input = ci_json_get(root, "input", json_type_array);
    FUZZ_CHECK(input != NULL, "follow-up without an input array");
    json_object_object_get_ex(root, "tool_choice", &choice);
    if (next == CI_NEXT_FINAL)
        FUZZ_CHECK(choice && json_object_is_type(choice, json_type_string) &&
                       !strcmp(json_object_get_string(choice), "none"),
                   "final round allows tools");
    /* The kept request is put back as it was. */
    {
        apr_size_t n;
        const char *now = ci_json_text(req->root, &n);
        FUZZ_CHECK(n == before_len && !memcmp(now, before, n),
                   "the request was not restored after a follow-up");
    }
}

static void check_response(apr_pool_t *p, const ci_request *req, json_object *resp,
                           int total_items, const apr_array_header_t *calls)
{
    json_object *out, *v;
    int i, n;
    fuzz_check_object(p, "response", resp);
    out = ci_json_get(resp, "output", json_type_array);
    FUZZ_CHECK(out != NULL, "response without output");
    n = (int)json_object_array_length(out);
    FUZZ_CHECK(n == total_items, "output has %d items, rounds had %d", n,
               total_items);
    for (i = 0; i < calls->nelts; i++) {
        const ci_call *c = APR_ARRAY_IDX(calls, i, const ci_call *);
        const char *s = ci_json_str(c->item, "status");
        FUZZ_CHECK(c->output_index < n &&
                       json_object_array_get_idx(out, c->output_index) == c->item,
                   "call %d is not at output[%d]", i, c->output_index);
        FUZZ_CHECK(s && strcmp(s, "in_progress"), "call %d still in progress", i);
        json_object_object_get_ex(c->item, "outputs", &v);
        FUZZ_CHECK(req->include_outputs ? json_object_is_type(v, json_type_array)
                                        : v == NULL,
                   "call %d: outputs do not follow include", i);
    }
    v = ci_json_get(resp, "tools", json_type_array);
    FUZZ_CHECK(v && json_object_equal(v, req->client_tools),
               "response tools are not the client's");
    json_object_object_get_ex(resp, "tool_choice", &v);
    FUZZ_CHECK(v && (req->client_tool_choice
                         ? json_object_equal(v, req->client_tool_choice)
                         : json_object_is_type(v, json_type_string)),
               "response tool_choice is not the client's");
}

static void play(apr_pool_t *p, const fuzz_variant *var, const fuzz_pieces *pc)
{
    ci_request *req = fuzz_request(p, var);
    const char *cid = ci_mint_id(p, "cntr_", 24);
    ci_loop *l = ci_loop_create(p, req, var->max_rounds, cid);
    ci_next next = CI_NEXT_DONE;
    int r, k = 0, total = 0, final_sent = 0, failed = 0;
    apr_array_header_t *calls = apr_array_make(p, 4, sizeof(ci_call *));
    ci_error err;

    for (r = 0; r < pc->n; r++) {
        const apr_array_header_t *items;
        int i;
        if (r > 0) {
            apr_size_t len, before_len;
            const char *before = apr_pstrdup(p, ci_json_text(req->root, &before_len));
            const char *body = ci_loop_followup_body(l, p, next, &len);
            check_followup(p, req, body, len, next, before, before_len);
            if (next == CI_NEXT_FINAL)
                final_sent = 1;
        }
        memset(&err, 0, sizeof(err));
        if (ci_loop_take_round(l, pc->body[r], pc->len[r], &err)) {
            apr_size_t len;
            const char *eb;
            FUZZ_CHECK(err.status == 502 && err.message, "take_round error %d",
                       err.status);
            FUZZ_CHECK(ci_loop_rounds(l) == r, "a refused round was counted");
            eb = ci_error_body(p, &err, &len);
            fuzz_check_json(p, "error body", eb, len, json_type_object);
            failed = 1;
            break;
        }
        FUZZ_CHECK(ci_loop_rounds(l) == r + 1, "rounds %d", ci_loop_rounds(l));
        total += fuzz_check_round(l, total);
        items = ci_loop_round_items(l);
        for (i = 0; i < items->nelts; i++) {
            const ci_round_item *ri = &APR_ARRAY_IDX(items, i, ci_round_item);
            if (!ri->call)
                continue;
            fuzz_execute(p, l, ri->call, &k, final_sent, var->max_tool_calls);
            *(ci_call **)apr_array_push(calls) = ri->call;
        }
        FUZZ_CHECK(var->max_tool_calls < 0 ||
                       ci_loop_executions(l) <= var->max_tool_calls,
                   "%d executions", ci_loop_executions(l));
        next = ci_loop_next(l);
        if (final_sent)
            FUZZ_CHECK(next == CI_NEXT_DONE, "a round after the final one");
        if (next == CI_NEXT_DONE)
            break;
    }
    FUZZ_CHECK(ci_loop_rounds(l) <= var->max_rounds + 1, "%d rounds",
               ci_loop_rounds(l));
    if (ci_loop_rounds(l) > 0 && !failed)
        check_response(p, req, ci_loop_response(l), total, calls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_pieces pc;
    int v;
    fuzz_split(data, size, &pc);
    for (v = 0; v < FUZZ_NVARIANTS; v++) {
        apr_pool_t *p = fuzz_pool_create();
        play(p, &fuzz_variants[v], &pc);
        fuzz_pool_destroy(p);
    }
    fuzz_pieces_free(&pc);
    return 0;
}
