/*
 * ci_request_state.h - the state of one intercepted request, kept in the request's
 * own memory (r->request_config) and nowhere a client can reach; and the
 * OpenAI-shaped error answer given before any byte was sent.
 */
#ifndef CI_REQUEST_STATE_H
#define CI_REQUEST_STATE_H

#include <httpd.h>
#include "ci_directory.h"
#include "ci_error.h"
#include "ci_request.h"
#include "ci_sandbox.h"

typedef struct ci_req_state {
    ci_request *req;
    const ci_sandbox_def *sandbox;
    const char *container_id;  /* server-minted "cntr_...": what the client
                                  sees and what logs and the registry name */
    const char *owner;         /* keyed hash of the caller (ci_owner.h), or NULL */
    int container_exists;      /* container_id is in the directory (reused,
                                  explicit, or made at the first call) */
    const char *container_lost;/* the context's container, expired or on a
                                  tool not served here any more: the model
                                  is told its state is gone */
    int container_lost_tool;   /* ... because of its tool */
    const char *container_held;/* the container the directory holds for this
                                  request: let go at its end (finish) */
    struct json_object *container_found; /* the directory's answer that found
                                  container_id at resolve (touched, held),
                                  for its first call; NULL once used */
    const char *skills;        /* the new container's skills, resolved
                                  (ci_skills_attach.h), or NULL */
    apr_array_header_t *upstream_files; /* file_ids, checked at the upstream
                                  (ci_filesapi_file): put into the container
                                  when this request makes it */
    struct ci_early_chain *early_chain; /* the chain's question, sent before
                                  the parse (ci_containers_ask_chain_early) */
    const char *conversation_owed; /* the conversation's last container, when
                                  this turn brought the outputs it was owed
                                  (its finish says so, container or not) */
    apr_time_t started;
    apr_interval_time_t module_time;   /* time spent in the module's own work */
} ci_req_state;

/* The state of R, or NULL when R is not intercepted. */
ci_req_state *ci_request_state(request_rec *r);
/* Make R intercepted with a fresh state. */
ci_req_state *ci_request_state_create(request_rec *r);

/* Answer R now with ERR (OpenAI shape), before any byte was sent. */
int ci_send_error(request_rec *r, const ci_error *err);
/* ERR's headers (Retry-After) into HEADERS: every error answer's are set
 * here. */
void ci_error_headers(request_rec *r, apr_table_t *headers, const ci_error *err);

#endif
