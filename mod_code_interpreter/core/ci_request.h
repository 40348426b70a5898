/*
 * ci_request.h - the request side: decide whether a Responses API request
 * asks for the code_interpreter tool or the hosted shell (a `shell` tool
 * whose environment is container_auto or container_reference) and, if so,
 * rewrite it for an upstream that only knows function tools. Both hosted
 * tools of one request share its one container.
 *
 * Everything learnt about the request stays in the ci_request this returns
 * (request memory); nothing is hidden in the JSON sent upstream.
 */
#ifndef CI_REQUEST_H
#define CI_REQUEST_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_error.h"
#include "ci_secret_value.h"

/* The include value that asks for code_interpreter_call outputs. */
#define CI_INCLUDE_OUTPUTS "code_interpreter_call.outputs"
/* What a replayed call whose outputs are null tells the model. */
#define CI_NO_OUTPUT_RECORDED "(no output recorded)"

typedef struct ci_rewrite_opts {
    const char *function_name;        /* the function the model sees */
    const char *shell_function_name;  /* the hosted shell's; NULL: "shell" */
    const char *function_description; /* NULL: ci_default_description() */
    /* What our item ITEM_ID, returned earlier to this caller, stands for: a
     * JSON array of the items the upstream needs in its place (its function
     * call and our output), or NULL when it was never returned to this
     * caller; *CONTAINER: the container it ran in. NULL: item_references
     * pass through as they are. */
    const char *(*recall)(void *baton, const char *item_id, const char **container);
    void *recall_baton;
} ci_rewrite_opts;

typedef enum {
    CI_REQ_PASS = 0,      /* no code_interpreter tool: forward untouched */
    CI_REQ_INTERCEPT = 1, /* rewritten: send ci_request.body upstream */
    CI_REQ_ERROR = 2      /* refuse with the ci_error */
} ci_req_verdict;

#define CI_MAX_FILE_IDS 100
/* The longest conversation id taken, in characters (OpenAI's are 53). */
#define CI_MAX_CONVERSATION_ID 128

typedef struct ci_request {
    json_object *root;          /* the rewritten request (owned by the pool) */
    json_object *input;         /* root's input as an array, history translated;
                                   NULL when it goes upstream as the client
                                   wrote it (input_text; root's is a stand-in):
                                   see ci_request_input */
    json_object *client_tools;  /* tools exactly as the client sent them */
    int tool_index;             /* where the code_interpreter tool was, or -1 */
    int shell_index;            /* where the hosted shell tool was, or -1 */
    const char *shell_function; /* the hosted shell's function, NULL: none */
    const char *container_param;  /* where the explicit container was named
                                     ("tools[0].container") */
    const char *settings_param;   /* where memory_limit was given
                                     ("tools[0].container", "tools[1].environment"),
                                     or NULL */
    json_object *client_tool_choice; /* as sent; NULL when absent */
    const char *function_name;
    const char *input_text;     /* input's members serialised (once) */
    apr_size_t input_len;
    const char *body;           /* root serialised for round 1 */
    apr_size_t body_len;
    int wants_stream;           /* client sent stream:true */
    int include_outputs;        /* include asked for call outputs */
    int max_tool_calls;         /* the request's own cap, -1 when absent */
    int uses_conversation;      /* conversation set: follow-ups send new items only */
    int forced_choice;          /* tool_choice forces a tool or is "required" */
    const char *container_id;   /* tools[].container as an id, or NULL (auto) */
    const char *memory_limit;   /* tools[].container.memory_limit, or NULL */
    json_object *file_ids;      /* tools[].container.file_ids (strings), or NULL */
    apr_array_header_t *allowed_domains; /* the container's allowlist
                                      (network_policy), normalised, or NULL */
    apr_array_header_t *secrets;  /* its domain secrets (ci_domain_secret),
                                     or NULL */
    const char *network_param;  /* where it was given
                                   ("tools[0].container.network_policy") */
    const char *context_container; /* the container of the context's latest
                                      code_interpreter_call (a replayed item
                                      or a recalled reference), or NULL */
    const char *previous_response_id;
    apr_array_header_t *skills;  /* the shell's container_auto skills
                                    (ci_skill_ref), or NULL */
    const char *conversation_id;  /* conversation's id (a string, or its
                                     "id"), or NULL: with previous_response_id,
                                     the routes to the earlier turns' container
                                     (one or the other, never both) */
} ci_request;

/* True when the bytes mention "code_interpreter", "container_auto" or
 * "container_reference" at all. A body that does not is never parsed. */
int ci_body_mentions_tool(const char *body, apr_size_t len);

/* Classify and rewrite. On CI_REQ_INTERCEPT *OUT is set; on CI_REQ_ERROR ERR
 * is filled (status 400 with the offending field). Memory from P. */
ci_req_verdict ci_request_rewrite(apr_pool_t *p, const char *body,
                                  apr_size_t len, const ci_rewrite_opts *opts,
                                  ci_request **out, ci_error *err);

/* Put ITEMS (a JSON array's text) before the request's input: outputs the
 * upstream is owed for calls of a previous response. 0, or -1 when ITEMS
 * is not an array. */
int ci_request_prepend_input(apr_pool_t *p, ci_request *req, const char *items);

/* TEXT told to the model in the user's context: a user message before the
 * request's input, for round 1 and every follow-up (the body re-encoded). */
void ci_request_prepend_context(apr_pool_t *p, ci_request *req, const char *text);

/* The request's input as it goes upstream, as a tree: req->input, parsed
 * from input_text (into P, kept) when the rewrite did not need one. */
json_object *ci_request_input(apr_pool_t *p, ci_request *req);

/* The hosted shell's function when none is named. */
#define CI_SHELL_FUNCTION "shell"

/* The function tool description used when none is configured. */
const char *ci_default_description(void);
/* The description of a tool whose sandbox can (INTERNET) or cannot reach
 * the internet. */
const char *ci_function_description(int internet);

#endif
