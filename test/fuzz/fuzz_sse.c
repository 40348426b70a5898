/*
 * fuzz_sse.c - the streaming encoder fed the rounds of arbitrary upstream
 * answers.
 *
 * Same input as fuzz_assembly (up to three upstream bodies separated by
 * 0x1E), played as the glue streams them: response.created/in_progress with
 * the snapshot, every item of every round (ci_sse_item, or for our calls
 * ci_sse_call_start, the canned execution, ci_sse_call_done), then
 * response.completed; or, when a follow-up answer is not a response (or the
 * input ends while the loop wants another round), the error event and
 * response.failed.
 *
 * Every byte produced must be a sequence of frames
 *   event: TYPE\ndata: JSON\n\n      (or a ": comment\n\n" keepalive)
 * where JSON is valid (strict RFC 8259, valid UTF-8), an object whose
 * "type" is TYPE and whose "sequence_number" counts from 0 without gaps.
 */
#include "ci_id.h"
#include "fuzz_rounds.h"
#include "ci_sse.h"

typedef struct stream_check {
    apr_pool_t *p;
    ci_sse *s;
    int seq;              /* next sequence_number expected */
    int completed, failed;
} stream_check;

/* Check and consume everything the encoder produced since the last take. */
static void drain(stream_check *sc, const char *step)
{
    apr_size_t len;
    const char *buf = ci_sse_take(sc->s, &len);
    size_t at = 0;
    char *copy;

    if (len == 0)
        return;
    FUZZ_CHECK(buf != NULL, "%s: NULL buffer of %zu bytes", step, (size_t)len);
    /* An exact-size copy, so the scan below cannot run past it unseen. */
    copy = malloc(len);
    memcpy(copy, buf, len);
    while (at < len) {
        const char *f = copy + at;
        size_t left = len - at;
        const char *nl, *data, *end;
        size_t tlen, dlen;
        char type[128];
        const char *err = NULL;
        json_object *o, *v;

        if (f[0] == ':') {   /* a comment frame */
            const char *e = memmem(f, left, "\n\n", 2);
            FUZZ_CHECK(e != NULL, "%s: unterminated comment", step);
            at += (size_t)(e - f) + 2;
            continue;
        }
        FUZZ_CHECK(left > 7 && !memcmp(f, "event: ", 7), "%s: frame at byte %zu "
                   "does not start with 'event: ': %.*s", step, at,
                   (int)(left > 80 ? 80 : left), f);
        nl = memchr(f + 7, '\n', left - 7);
        FUZZ_CHECK(nl != NULL, "%s: event line not terminated", step);
        tlen = (size_t)(nl - (f + 7));
        FUZZ_CHECK(tlen > 0 && tlen < sizeof(type), "%s: event type of %zu bytes",
                   step, tlen);
        memcpy(type, f + 7, tlen);
        type[tlen] = '\0';
        FUZZ_CHECK(strcspn(type, "\r\n:") == tlen, "%s: bad event type", step);
        data = nl + 1;
        FUZZ_CHECK((size_t)(copy + len - data) > 6 && !memcmp(data, "data: ", 6),
                   "%s: event %s has no data line", step, type);
        data += 6;
        end = memchr(data, '\n', (size_t)(copy + len - data));
        FUZZ_CHECK(end != NULL, "%s: data line of %s not terminated", step, type);
        dlen = (size_t)(end - data);
        FUZZ_CHECK(memchr(data, '\r', dlen) == NULL, "%s: CR in data", step);
        FUZZ_CHECK((size_t)(copy + len - end) >= 2 && end[1] == '\n',
                   "%s: event %s not followed by a blank line", step, type);
        fuzz_check_json(sc->p, type, data, dlen, json_type_object);
        o = ci_json_parse(sc->p, data, dlen, &err);
        FUZZ_CHECK(ci_json_str(o, "type") && !strcmp(ci_json_str(o, "type"), type),
                   "%s: event %s carries type %s", step, type,
                   ci_json_str(o, "type") ? ci_json_str(o, "type") : "(none)");
        v = ci_json_get(o, "sequence_number", json_type_int);
        FUZZ_CHECK(v && json_object_get_int(v) == sc->seq,
                   "%s: event %s has sequence_number %d, expected %d", step, type,
                   v ? json_object_get_int(v) : -1, sc->seq);
        sc->seq++;
        if (!strcmp(type, "response.completed") || !strcmp(type, "response.failed")) {
            json_object *r = ci_json_get(o, "response", json_type_object);
            FUZZ_CHECK(r && ci_json_get(r, "output", json_type_array),
                       "%s: %s without a response", step, type);
            if (type[9] == 'c')
                sc->completed++;
            else
                sc->failed++;
        }
        at = (size_t)(end + 2 - copy);
    }
    free(copy);
    FUZZ_CHECK(ci_sse_events(sc->s) == sc->seq, "%d events counted, %d seen",
               ci_sse_events(sc->s), sc->seq);
}

static void fail(stream_check *sc, ci_loop *l, const ci_error *err)
{
    ci_sse_failed(sc->s, err, ci_loop_failed_response(l, err->status == 429
                                                              ? "rate_limit_exceeded"
                                                              : "server_error",
                                                      err->message));
    drain(sc, "failed");
}

static void play(apr_pool_t *p, const fuzz_variant *var, const fuzz_pieces *pc)
{
    ci_request *req = fuzz_request(p, var);
    ci_loop *l = ci_loop_create(p, req, var->max_rounds, ci_mint_id(p, "cntr_", 24));
    stream_check sc;
    ci_error err;
    ci_next next;
    int r = 0, k = 0, total = 0, final_sent = 0;

    memset(&sc, 0, sizeof(sc));
    sc.p = p;
    sc.s = ci_sse_create(p);
    memset(&err, 0, sizeof(err));
    /* A first answer that is not a response is refused before any event. */
    if (ci_loop_take_round(l, pc->body[0], pc->len[0], &err))
        return;
    ci_sse_start(sc.s, ci_loop_snapshot(l));
    drain(&sc, "start");
    ci_sse_keepalive(sc.s);
    drain(&sc, "keepalive");
    for (;;) {
        const apr_array_header_t *items = ci_loop_round_items(l);
        int i;
        total += fuzz_check_round(l, total);
        for (i = 0; i < items->nelts; i++) {
            const ci_round_item *ri = &APR_ARRAY_IDX(items, i, ci_round_item);
            if (!ri->call) {
                ci_sse_item(sc.s, ri);
                drain(&sc, "item");
                continue;
            }
            ci_sse_call_start(sc.s, ri->call);
            drain(&sc, "call_start");
            fuzz_execute(p, l, ri->call, &k, final_sent, var->max_tool_calls);
            ci_sse_call_done(sc.s, ri->call);
            drain(&sc, "call_done");
        }
        next = ci_loop_next(l);
        if (next == CI_NEXT_DONE) {
            ci_sse_completed(sc.s, ci_loop_response(l));
            drain(&sc, "completed");
            break;
        }
        if (++r >= pc->n) {
            /* The input ends where the loop wants another answer: as if the
             * follow-up timed out. */
            ci_error_set(&err, 504, CI_SERVER, NULL, "upstream_timeout", p,
                         "The model upstream did not answer a follow-up call "
                         "in time.");
            fail(&sc, l, &err);
            break;
        }
        {
            apr_size_t len;
            const char *body = ci_loop_followup_body(l, p, next, &len);
            fuzz_check_json(p, "follow-up body", body, len, json_type_object);
            if (next == CI_NEXT_FINAL)
                final_sent = 1;
        }
        memset(&err, 0, sizeof(err));
        if (ci_loop_take_round(l, pc->body[r], pc->len[r], &err)) {
            if (r == 2)   /* as a relayed upstream error, with param and code */
                ci_error_set(&err, 429, "rate_limit_error", "input",
                             "rate_limit_exceeded", p,
                             "The model upstream answered a follow-up call with "
                             "status 429: Rate limit \"reached\"\n\t\x01.");
            fail(&sc, l, &err);
            break;
        }
    }
    FUZZ_CHECK(sc.completed + sc.failed == 1, "%d completed, %d failed events",
               sc.completed, sc.failed);
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
