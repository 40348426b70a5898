/*
 * ci_ndjson.h - the incremental reader of an execution's output stream: one
 * JSON object per line ({"type": "stdout"|"stderr"|"result"|"error"|
 * "files"|"command"|"ready"|"end_of_execution", ...}), as the local kernel
 * and E2B's /execute write it; bounded, and cut at max_output for the model.
 * A hosted shell call's "command" lines become the result's commands.
 */
#ifndef CI_NDJSON_H
#define CI_NDJSON_H

#include <apr_pools.h>
#include "ci_exec.h"

typedef struct ci_ndjson ci_ndjson;

/* A reader keeping at most MAX_OUTPUT bytes of text and refusing to read more
 * than HARD_CAP bytes in all (images included). Memory from P. */
ci_ndjson *ci_ndjson_create(apr_pool_t *p, apr_size_t max_output,
                            apr_size_t hard_cap);

/* One line of the stream holds at most ci_ndjson_line_cap(max_output,
 * hard_cap) bytes: CI_NDJSON_LINE_BASE (a figure's PNG in base64) plus
 * CI_NDJSON_LINE_ESCAPE times max_output (a shell call's two outputs, each
 * character escaped as JSON), never more than the hard cap. Past it the
 * execution is stopped and the line's buffer freed: code that writes
 * without a newline on the interpreter's channel cannot grow a reader's
 * memory further. */
#define CI_NDJSON_LINE_BASE ((apr_size_t)8 * 1024 * 1024)
#define CI_NDJSON_LINE_ESCAPE 12
apr_size_t ci_ndjson_line_cap(apr_size_t max_output, apr_size_t hard_cap);

/* Feed bytes as they arrive. Returns 0, or -1 once the hard cap or the
 * line cap is passed (stop reading: the execution failed). */
int ci_ndjson_feed(ci_ndjson *nd, const char *data, apr_size_t len);

/* True once {"type":"end_of_execution"} was read. */
int ci_ndjson_ended(const ci_ndjson *nd);
/* True once {"type":"ready"} was read (local kernel start-up). */
int ci_ndjson_ready(const ci_ndjson *nd);

/* Build the result. STOPPED is how the provider stopped reading early
 * (CI_EXEC_TIMED_OUT, CI_EXEC_LOST, CI_EXEC_INTERRUPTED, with FAILURE telling
 * the model why), or CI_EXEC_COMPLETED when it read to the end of the stream:
 * then the stream says how it ended (no end_of_execution: lost, "the output
 * stream was cut"; a malformed command line: lost, a protocol error).
 * OUT->commands: the command lines read (NULL: none). Memory from the
 * reader's pool. */
void ci_ndjson_result(ci_ndjson *nd, ci_exec_outcome stopped, const char *failure,
                      ci_exec_result *out);

/* Reset for the next execution of the same sandbox. */
void ci_ndjson_reset(ci_ndjson *nd);

#endif
