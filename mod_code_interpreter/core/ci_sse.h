/*
 * ci_sse.h - OpenAI's Responses streaming events, encoded as server-sent
 * events (`event: TYPE\ndata: JSON\n\n`, sequence_number from 0, +1 per
 * event, no [DONE]). httpd-free: frames accumulate in a buffer the glue
 * takes and flushes after each step of the loop.
 */
#ifndef CI_SSE_H
#define CI_SSE_H

#include <apr_pools.h>
#include <json-c/json.h>
#include "ci_error.h"
#include "ci_loop.h"

typedef struct ci_sse ci_sse;

/* Bytes per delta event when code or text is streamed in pieces. */
#define CI_SSE_CHUNK 64

ci_sse *ci_sse_create(apr_pool_t *p);

/* response.created and response.in_progress with SNAPSHOT. */
void ci_sse_start(ci_sse *s, json_object *snapshot);

/* A non-code item of a round, with every event its type has (reasoning,
 * message with content parts, text deltas and annotations, a function
 * call's argument deltas, or added/done for anything else). */
void ci_sse_item(ci_sse *s, const ci_round_item *ri);

/* A code call up to `interpreting`: output_item.added (in progress, empty
 * code, container id), in_progress, code deltas, code.done, interpreting. */
void ci_sse_call_start(ci_sse *s, const ci_call *call);

/* ---- relayed rounds (the upstream streams, ci_relay.c) ---- */

/* An upstream event passed on: its sequence_number replaced by the next of
 * this stream (EV is consumed). */
void ci_sse_pass(ci_sse *s, json_object *ev);

/* Hold back the events of items past OUTPUT_INDEX (our call there runs
 * before the client sees what the model wrote after it) ... */
void ci_sse_hold_after(ci_sse *s, int output_index);
/* ... until they are released, those of items up to OUTPUT_INDEX (INT_MAX:
 * all), in the order they came. */
void ci_sse_release(ci_sse *s, int output_index);

/* A code call announced while the model writes it: output_item.added (in
 * progress, empty code, CONTAINER_ID) and in_progress. */
void ci_sse_call_announce(ci_sse *s, const char *item_id, int output_index,
                          const char *container_id);

/* Code the model has written so far, LEN bytes (whole UTF-8 characters). */
void ci_sse_call_code(ci_sse *s, const char *item_id, int output_index,
                      const char *code, apr_size_t len);

/* A relayed code call, once its round is in: code.done and interpreting. */
void ci_sse_call_ready(ci_sse *s, const ci_call *call);

/* After the execution: completed and output_item.done with the item. */
void ci_sse_call_done(ci_sse *s, const ci_call *call);

/* A shell call announced while the model writes it: output_item.added (in
 * progress, no commands yet). */
void ci_sse_shell_announce(ci_sse *s, const char *item_id, const char *call_id,
                           int output_index, const char *container_id);
/* Command COMMAND (0-based) of a shell call grew by LEN bytes of TEXT (whole
 * UTF-8 characters; commands up to it are announced first). */
void ci_sse_shell_command(ci_sse *s, const char *item_id, int output_index, int command,
                          const char *text, apr_size_t len);
/* Command COMMAND is complete: TEXT. */
void ci_sse_shell_command_done(ci_sse *s, const char *item_id, int output_index,
                               int command, const char *text);
/* (ci_sse_call_start, _ready and _done serve shell calls too: the commands
 * not yet done and output_item.done; after the execution, the
 * shell_call_output item's events.) */

/* response.completed with the final response. */
void ci_sse_completed(ci_sse *s, json_object *response);

/* An `error` event (nested and flat forms) then response.failed with
 * RESPONSE (its status and error already set). */
void ci_sse_failed(ci_sse *s, const ci_error *err, json_object *response);

/* A comment line that keeps intermediaries from timing out. */
void ci_sse_keepalive(ci_sse *s);

/* The bytes produced since the last take (the buffer is then empty). */
const char *ci_sse_take(ci_sse *s, apr_size_t *len);

/* Events written so far. */
int ci_sse_events(const ci_sse *s);

/* One response.output_text.annotation.added of content part PART of
 * message ITEM_ID at output INDEX (ANNOTATION: a reference is taken). */
void ci_sse_annotation(ci_sse *s, const char *item_id, int index, int part,
                       int annotation_index, json_object *annotation);

#endif
