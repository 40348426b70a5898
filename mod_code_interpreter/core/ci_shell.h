/*
 * ci_shell.h - the hosted shell's side of a call: its action read from the
 * model's function arguments, its shell_call and shell_call_output items as
 * the client sees them, the output entries cut at their limit, and the
 * bounds the sandbox runs it with. httpd-free.
 *
 * What the model is told of a shell call is the output entries as JSON
 * ([{"stdout", "stderr", "outcome"}, ...]): the same text a replayed
 * shell_call_output turns into (ci_request.c), so a conversation reads the
 * same to the model whether its history is replayed or chained.
 */
#ifndef CI_SHELL_H
#define CI_SHELL_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_exec.h"

/* At most this many commands in one call. */
#define CI_SHELL_MAX_COMMANDS 100

/* A call's action, as the model wrote it. */
typedef struct ci_shell_call {
    apr_array_header_t *commands;   /* const char *, at least one */
    int timeout_ms;                 /* -1: null */
    int max_output_length;          /* -1: null */
} ci_shell_call;

/* The action of the function arguments ARGUMENTS, or NULL with *WHY (for
 * the model: nothing was run). Memory from P. */
ci_shell_call *ci_shell_parse(apr_pool_t *p, const char *arguments, const char **why);

/* {"commands": [...], "timeout_ms": N|null, "max_output_length": N|null};
 * A NULL: no commands, both null. */
json_object *ci_shell_action_json(const ci_shell_call *a);

/* The shell_call item: {id, type, call_id, action, status, environment
 * (the container, as a container_reference)}. */
json_object *ci_shell_call_item(const char *item_id, const char *call_id,
                                const ci_shell_call *a, const char *status,
                                const char *container_id);

/* The shell_call_output item: {id, type, call_id, output (OUTPUT, a
 * reference taken; NULL: []), status, max_output_length (the model's, or
 * null)}. */
json_object *ci_shell_output_item(const char *item_id, const char *call_id,
                                  json_object *output, const char *status,
                                  int max_output_length);

/* One output entry: {"stdout", "stderr", "outcome": {"type": "exit",
 * "exit_code"} or {"type": "timeout"}}. */
json_object *ci_shell_entry(const char *out, const char *err, int timed_out,
                            int exit_code);

/* The output entries of RES: one per command that ran, stdout and stderr cut
 * together at MAX_CHARS characters (stdout first; 0: no cut); when the
 * execution failed (lost, stopped, not run), a last entry whose stderr says
 * why. */
json_object *ci_shell_output(const ci_exec_result *res, apr_size_t max_chars);

/* The bounds the sandbox runs A with: its timeout_ms and max_output_length,
 * capped by the tool's TIMEOUT and MAX_OUTPUT (OUT->commands is A's). */
void ci_shell_bounds(const ci_shell_call *a, apr_interval_time_t timeout,
                     apr_size_t max_output, ci_shell_action *out);

/* The first MAX characters of the UTF-8 text S (LEN bytes): their length in
 * bytes. */
apr_size_t ci_utf8_prefix(const char *s, apr_size_t len, apr_size_t max);

#endif
