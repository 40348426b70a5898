/*
 * ci_sse_reader.h - an incremental reader of server-sent events, for the
 * upstream model's stream (the reading side; ci_sse.h is the writing side).
 *
 * Fed the body in chunks of any size, split anywhere, it hands each complete
 * event to a callback, as the WHATWG "event stream interpretation" says:
 *   - lines end with CRLF, LF or CR (a CR at the end of one chunk and the LF
 *     at the start of the next are one line end);
 *   - one leading U+FEFF (EF BB BF) is skipped;
 *   - `:` starts a comment line (keepalives), ignored;
 *   - `field: value` (one space after the colon is dropped), or `field`
 *     alone for an empty value; `event` names the event, `data` lines are
 *     joined with "\n", `id` sets the last event id (kept across events,
 *     ignored when its value holds a NUL), `retry` and unknown fields are
 *     ignored;
 *   - a blank line ends the event; it is dispatched only when it had at
 *     least one `data` line; its name is "message" when no `event` was given.
 * `data: [DONE]` (the Chat Completions terminator) ends the stream: it is
 * not passed to the callback and every later byte is ignored.
 *
 * The bytes are passed on as they came: the reader does not check UTF-8
 * (ci_sse_event_json does, through ci_json_parse).
 *
 * Bounds. max_event bounds one event: the bytes of its lines, line ends not
 * counted (comment and ignored lines count too). max_round bounds the bytes
 * fed since the reader was created or reset, all of them. Both are refused at
 * the first byte past the bound, so what is read does not depend on how the
 * stream was split. APR_SIZE_MAX means no bound.
 *
 * Memory comes from the pool given at creation. The buffers of an event are
 * reused for the next, so a stream of any number of events holds at most a
 * few times max_event (see ci_sse_reader_footprint).
 */
#ifndef CI_SSE_READER_H
#define CI_SSE_READER_H

#include <apr_pools.h>
#include <json-c/json.h>

typedef enum {
    CI_SSE_READ_OK = 0,          /* everything fed was read; more may come */
    CI_SSE_READ_DONE,            /* `data: [DONE]` was read: the stream is over */
    CI_SSE_READ_EVENT_TOO_LARGE, /* an event passed max_event */
    CI_SSE_READ_ROUND_TOO_LARGE, /* the stream passed max_round */
    CI_SSE_READ_STOPPED,         /* the callback asked to stop */
    CI_SSE_READ_TRUNCATED,       /* (ci_sse_reader_end) the stream ended inside an event */
    CI_SSE_READ_BAD_JSON,        /* (ci_sse_event_json) the data is not a JSON object */
    CI_SSE_READ_NO_TYPE          /* (ci_sse_event_json) the object has no string "type" */
} ci_sse_read_status;

/* One event. The strings are NUL-terminated (data may also hold NULs: use
 * data_len) and valid only during the callback. */
typedef struct ci_sse_event {
    const char *event;      /* the `event` field, or "message" */
    apr_size_t event_len;
    const char *data;       /* the `data` lines joined with "\n" */
    apr_size_t data_len;
    const char *id;         /* the last event id so far, "" when none */
} ci_sse_event;

/* Called once per event, in order. Return 0 to go on; anything else stops
 * the reader (status CI_SSE_READ_STOPPED, the rest of the input unread). The
 * callback must not feed the reader that called it. */
typedef int (*ci_sse_event_fn)(void *baton, const ci_sse_event *ev);

typedef struct ci_sse_reader ci_sse_reader;

/* A reader handing events to FN with BATON. Memory from P. */
ci_sse_reader *ci_sse_reader_create(apr_pool_t *p, apr_size_t max_event,
                                    apr_size_t max_round, ci_sse_event_fn fn,
                                    void *baton);

/* Read LEN bytes of the stream; every event they complete goes to the
 * callback before this returns. Returns CI_SSE_READ_OK, or DONE,
 * EVENT_TOO_LARGE, ROUND_TOO_LARGE or STOPPED; those last, and every later
 * call returns the same without reading (ci_sse_reader_error says why). */
ci_sse_read_status ci_sse_reader_feed(ci_sse_reader *r, const char *buf,
                                      apr_size_t len);

/* The end of the stream. Returns the status a feed last returned when it was
 * not OK; else CI_SSE_READ_TRUNCATED when bytes after the last blank line
 * are left (an event cut short, discarded); else CI_SSE_READ_OK. */
ci_sse_read_status ci_sse_reader_end(ci_sse_reader *r);

/* Why the reader stopped (English, for a log or an error event), or NULL
 * while its status is OK or DONE. */
const char *ci_sse_reader_error(const ci_sse_reader *r);

/* Events handed to the callback since creation or the last reset. */
apr_size_t ci_sse_reader_events(const ci_sse_reader *r);

/* Bytes of buffer the reader holds now (they are reused from event to event
 * and kept across resets). */
apr_size_t ci_sse_reader_footprint(const ci_sse_reader *r);

/* Forget the stream (status, counts, the last event id, the bytes of an
 * unfinished event) and start a new one with the same bounds and callback,
 * keeping the buffers. */
void ci_sse_reader_reset(ci_sse_reader *r);

/* EV's data parsed as JSON (strictly, by ci_json_parse; the root is owned
 * by P: clear P between events so a long stream does not pile them up).
 * Returns CI_SSE_READ_OK with *OBJ the object and *TYPE its "type"; else
 * CI_SSE_READ_BAD_JSON (not JSON, or not an object) or CI_SSE_READ_NO_TYPE,
 * with *OBJ and *TYPE NULL and *ERR (when ERR is not NULL) saying why, in P.
 * The JSON "type" is what counts: it is not compared with EV's name. */
ci_sse_read_status ci_sse_event_json(apr_pool_t *p, const ci_sse_event *ev,
                                     json_object **obj, const char **type,
                                     const char **err);

#endif
