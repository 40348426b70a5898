/*
 * ci_loop.h - the agentic loop's bookkeeping, free of httpd and I/O.
 *
 * The glue feeds each upstream answer in (ci_loop_take_round), runs the calls
 * this returns in the sandbox, records their results, asks whether and how to
 * follow up, and finally asks for the assembled response. One assembly serves
 * the JSON and the streaming paths.
 */
#ifndef CI_LOOP_H
#define CI_LOOP_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_error.h"
#include "ci_exec.h"
#include "ci_request.h"

struct ci_shell_call;

typedef struct ci_call {
    const char *call_id;         /* the model's call_id */
    const char *item_id;         /* our "ci_..." id ("sh_..." for the shell) */
    const char *code;            /* NULL when the arguments were refused */
    const char *arguments_error; /* why they were refused (NULL: runnable) */
    /* The hosted shell's calls: their action (NULL when refused), and their
     * output item, at OUTPUT_ITEM_INDEX, right after the call's. */
    int shell;
    struct ci_shell_call *action;
    const char *output_item_id;  /* "sho_..." */
    json_object *output_item;
    int output_item_index;
    apr_size_t max_chars;        /* each command's output cut (0: none) */
    int round;                   /* 1-based round that asked for it */
    int output_index;            /* index of its item in the final output */
    int executed;                /* 1 once a result was recorded */
    json_object *item;           /* the code_interpreter_call or shell_call item */
    const ci_exec_result *result;
    const char *model_output;    /* the function output the model was given */
} ci_call;

/* One output item of a round, as the client will see it. */
typedef struct ci_round_item {
    json_object *item;   /* assembled form (a code_interpreter_call for ours) */
    int output_index;
    ci_call *call;       /* ours, or NULL */
} ci_round_item;

typedef struct ci_loop ci_loop;

/* MAX_ROUNDS: rounds whose calls are executed (CodeInterpreterMaxLoops); the
 * request's max_tool_calls, when set, caps executed calls. CONTAINER_ID: the
 * request's minted "cntr_..." id. */
ci_loop *ci_loop_create(apr_pool_t *p, ci_request *req, int max_rounds,
                        const char *container_id);

/* Tell the model TEXT before the next function output (once). */
void ci_loop_notice(ci_loop *l, const char *text);

/* What each of our calls in the response stands for upstream. */
typedef struct ci_memory {
    const char *item_id;         /* our "ci_..." id */
    const char *text;            /* JSON array: the upstream's function call
                                    and our output */
} ci_memory;
/* Our calls' memories (ci_memory), and in *PENDING the outputs a request
 * chained to this response must bring along (a JSON array's text), or NULL:
 * when the response ended on a round where the model called one of the
 * client's functions too, the upstream holds our calls of that round
 * without their outputs. Memory from P. */
apr_array_header_t *ci_loop_memory(ci_loop *l, apr_pool_t *p, const char **pending);

/* Take one upstream answer, already parsed (a relayed round's
 * response.completed). Returns 0, or -1 with ERR filled. */
int ci_loop_take_response(ci_loop *l, json_object *response, ci_error *err);

/* Items of every round so far: the output_index of the next round's first. */
int ci_loop_items(const ci_loop *l);

/* The upstream item UPSTREAM_ID (a call of our function, seen while it
 * streams) is to become our call ITEM_ID. */
void ci_loop_name_call(ci_loop *l, const char *upstream_id, const char *item_id);

/* A relayed stream began with RESPONSE (response.created of round 1): the
 * snapshot is made from it. */
void ci_loop_begin(ci_loop *l, json_object *response);

/* Whether ITEM is a call of one of our functions. */
int ci_loop_is_our_call(const ci_loop *l, json_object *item);
/* Whether ITEM is a call of the hosted shell's function. */
int ci_loop_is_shell_call(const ci_loop *l, json_object *item);

/* The bounds CALL (a shell call that may run) runs with: its limits
 * capped by the tool's TIMEOUT and MAX_OUTPUT; each command's output is cut
 * to the same when the result is recorded. */
void ci_loop_shell_bounds(ci_loop *l, ci_call *call, apr_interval_time_t timeout,
                          apr_size_t max_output, ci_shell_action *out);

/* Take one upstream answer (status 200). Returns 0, or -1 with ERR filled
 * (502: the upstream answered something that is not a response). */
int ci_loop_take_round(ci_loop *l, const char *body, apr_size_t len,
                       ci_error *err);

/* The items of the round just taken, in output order (ci_round_item). */
const apr_array_header_t *ci_loop_round_items(const ci_loop *l);

/* Our calls of the round just taken, in output order (ci_call *). */
const apr_array_header_t *ci_loop_round_calls(const ci_loop *l);

/* Whether CALL may run now (arguments valid, max_tool_calls not used up). A
 * call that may not is recorded as not executed, with the reason. */
int ci_loop_may_execute(ci_loop *l, ci_call *call);

/* Record the result of CALL (copied into the loop's memory). */
void ci_loop_record(ci_loop *l, ci_call *call, const ci_exec_result *res);

/* Whether the model also called one of the client's own functions this round. */
int ci_loop_round_has_client_calls(const ci_loop *l);

typedef enum {
    CI_NEXT_DONE = 0,     /* answer the client */
    CI_NEXT_FOLLOWUP = 1, /* another round, tools allowed */
    CI_NEXT_FINAL = 2     /* the cap is reached: one last round, tool_choice none */
} ci_next;

/* After the round's calls ran: what to do next. */
ci_next ci_loop_next(const ci_loop *l);

/* The follow-up request body for NEXT (FOLLOWUP or FINAL). Memory from P. */
const char *ci_loop_followup_body(ci_loop *l, apr_pool_t *p, ci_next next,
                                  apr_size_t *len);

/* The final response object (owned by the loop's pool): the last round's
 * response with every round's output, our calls as code_interpreter_call
 * items, usage summed, tools and tool_choice as the client sent them. */
json_object *ci_loop_response(ci_loop *l);

/* The response as announced by response.created: the first round's
 * response, status in_progress, no output, no usage, the client's tools. */
json_object *ci_loop_snapshot(ci_loop *l);

/* The response for response.failed: status failed, error {CODE, MESSAGE},
 * the output so far. */
json_object *ci_loop_failed_response(ci_loop *l, const char *code,
                                     const char *message);

/* Rounds taken so far; calls executed so far. */
int ci_loop_rounds(const ci_loop *l);
int ci_loop_executions(const ci_loop *l);

/* Messages the upstream writes get container_file_citation annotations
 * from C (ci_citations.h) as each round's response is taken; NULL: none. */
struct ci_citer;
void ci_loop_set_citer(ci_loop *l, struct ci_citer *c);
struct ci_citer *ci_loop_citer(const ci_loop *l);

#endif
