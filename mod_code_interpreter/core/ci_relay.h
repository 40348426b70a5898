/*
 * ci_relay.h - one streamed response relayed to a streaming client while
 * the upstream writes it, round after round.
 *
 * The upstream's stream of each round is fed in as it arrives (any split).
 * Its events become the client's, in the same order:
 *   - response.created of round 1 becomes the client's response.created and
 *     response.in_progress (the loop's snapshot: the client's tools); the
 *     lifecycle events of each round (created, in_progress, completed) are
 *     not passed on: the client sees one response;
 *   - events of output items (messages, text, refusal and reasoning deltas,
 *     the client's own function calls) are passed on with the client's
 *     sequence_number and an output_index counted across rounds, item ids
 *     kept;
 *   - a call of our function becomes a code_interpreter_call as the model
 *     writes it: output_item.added and in_progress at once, then
 *     code_interpreter_call_code.delta events with the code decoded from
 *     each arguments delta (ci_code_decoder.h). Its code.done,
 *     interpreting, completed and output_item.done come from the driver once
 *     the round is in and the code has run (ci_sse_call_ready/_done).
 * A round ends with its response.completed (or .incomplete), whose response
 * the loop takes (ci_loop_take_response).
 *
 * httpd-free: events go into the ci_sse buffer the glue flushes after each
 * feed.
 */
#ifndef CI_RELAY_H
#define CI_RELAY_H

#include <apr_pools.h>
#include "ci_error.h"
#include "ci_loop.h"
#include "ci_sse.h"

typedef struct ci_relay ci_relay;

typedef enum {
    CI_RELAY_MORE = 0,     /* the round goes on */
    CI_RELAY_ROUND_DONE,   /* the round's response is in (ci_relay_response) */
    CI_RELAY_FAILED        /* the round failed (ci_relay_error) */
} ci_relay_status;

/* A relay for LOOP's rounds into SSE; one event at most MAX_EVENT bytes, one
 * round at most MAX_ROUND. Memory from P. */
ci_relay *ci_relay_create(apr_pool_t *p, ci_loop *loop, ci_sse *sse,
                          const char *container_id, apr_size_t max_event,
                          apr_size_t max_round);

/* Start reading a new round (the first one too). */
void ci_relay_round(ci_relay *r);

/* Bytes of the round's stream. */
ci_relay_status ci_relay_feed(ci_relay *r, const char *data, apr_size_t len);

/* The round's stream ended (the connection closed). ROUND_DONE when its
 * response came, else FAILED (the stream was cut). */
ci_relay_status ci_relay_end(ci_relay *r);

/* After ROUND_DONE: the round's response (owned by the loop's pool). */
json_object *ci_relay_response(const ci_relay *r);

/* After FAILED: why, as the error the client gets (status, type, code). */
const ci_error *ci_relay_error(const ci_relay *r);

/* Whether response.created has gone to the client. */
int ci_relay_started(const ci_relay *r);

#endif
