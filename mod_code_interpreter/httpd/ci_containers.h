/*
 * ci_containers.h - a request's container: which one it uses (an explicit
 * id, or for "auto" the one its context names), made lazily when the model
 * first calls the tool, and what the response leaves behind for the next
 * turn (its id leads to the container; our items are remembered), asked
 * of the container directory (ci_dirclient.h).
 *
 * A request without an owner (ci_owner.h) has a container nobody can
 * reuse: nothing is recorded and its sandbox ends with the request.
 */
#ifndef CI_CONTAINERS_H
#define CI_CONTAINERS_H

#include <httpd.h>
#include <json-c/json.h>
#include "ci_directory.h"
#include "ci_error.h"
#include "ci_loop.h"
#include "ci_request.h"
#include "ci_sandbox.h"

struct ci_req_state;
struct ci_dir_sent;

/* The recall entry of ci_rewrite_opts, with a ci_recall_baton: what our
 * item stands for, when it was returned to OWNER. */
typedef struct ci_recall_baton {
    request_rec *r;
    const char *owner;
    int failed;                 /* the directory could not be asked */
    struct ci_early_chain *early; /* the chain's question, asked ahead */
} ci_recall_baton;

/* Before the request is parsed: when its body names a previous response
 * (ci_json_top_string) and the directory takes questions without waiting
 * (the supervisor's), the question that follows the chain is sent now and
 * its answer read at resolve, after the parse (B->early). Whatever the
 * request becomes, its answer is read and any hold it took let go. */
void ci_containers_ask_chain_early(ci_recall_baton *b, const char *body, apr_size_t len);
/* The request will not go on in the chain's container (refused, or passed
 * through): the early question's answer is read and its hold let go now,
 * before the request's answer is sent, so that the caller's next request
 * finds it let go. (Otherwise the request pool's cleanup does it.) */
void ci_containers_chain_early_unused(ci_recall_baton *b);
const char *ci_containers_recall(void *baton, const char *item_id,
                                 const char **container);

/* The 503 answers: the directory cannot be asked; the memory budget is
 * full (memory from P). */
void ci_containers_unavailable(apr_pool_t *p, ci_error *err);
/* Whether WHY refuses a container for want of room (a cap, the budget). */
int ci_containers_capacity(ci_dir_status why);
/* The refusal for WHY (a capacity status), with STATUS (503 for a turn, 429
 * for the Containers API), naming the limit, with Retry-After. */
void ci_containers_refused(request_rec *r, ci_dir_status why, int status, ci_error *err);
/* Create REQ, asked again while it is refused for room, until UNTIL at the
 * latest (*WAITED: it was refused at least once): the last answer, NULL
 * when the directory could not be asked. */
json_object *ci_containers_create_waiting(request_rec *r, json_object *req, apr_time_t until,
                                          int *waited);
/* A create's admission (ANS, after WAITED) counted for server-status and
 * written to the audit log when it waited, evicted or was refused. */
void ci_containers_note_admission(request_rec *r, const char *tool, const char *container,
                                  int waited, json_object *ans);

/* A create request for OWNER's new container of TOOL in memory tier TIER
 * (NULL: the default), with the network policy ALLOWLIST (comma separated;
 * NULL: none), ID (NULL: one minted by the directory), NAME, IDLE seconds,
 * and the server's caps and budget. */
/* HOLD: seconds the asking request holds the new container (0: none). */
/* SECRETS: its domain secrets, sealed for ID (ci_dirclient_seal_secrets;
 * NULL: none). */
json_object *ci_containers_create_request(request_rec *r, const char *owner,
                                          const ci_sandbox_def *tool, const char *tier,
                                          const char *allowlist, const char *secrets,
                                          const char *id, const char *name, int idle,
                                          int hold);

/* A client's allowlist DOMAINS and SECRETS (given at PARAM; NULL: none)
 * against TOOL's ceiling: OK, or 400 with ERR (egress off, a domain outside
 * allowed_domains, secrets on a provider without them). */
int ci_containers_check_allowlist(apr_pool_t *p, const ci_sandbox_def *tool,
                                  const apr_array_header_t *domains,
                                  const apr_array_header_t *secrets, const char *param,
                                  ci_error *err);


/* Fixups, after the rewrite: the container of the request (ST->container_id
 * and the rest), outputs owed to a chained response put before the input.
 * OK, or an answer status with ERR filled (404 unknown or foreign, 400
 * expired or a tier not offered, 503 no directory). */
int ci_containers_resolve(request_rec *r, struct ci_req_state *st, ci_error *err);

/* The first execution: the container's record, made now if the request's
 * container is a new one. *OUT is a copy (its handle too). APR_SUCCESS, or
 * APR_EAGAIN / APR_EGENERAL with ERR (503). */
apr_status_t ci_containers_ensure(request_rec *r, struct ci_req_state *st,
                                  ci_container *out, ci_error *err);

/* The container's sandbox can now be reached with HANDLE: recorded.
 * Memory from P (a worker thread calls it, not the request's). */
void ci_containers_set_handle(request_rec *r, apr_pool_t *p, struct ci_req_state *st,
                              const char *handle);

/* The tool container C runs on: the one it was made with, as declared now
 * on the same provider; NULL when a reload removed or changed it. */
const ci_sandbox_def *ci_containers_tool(request_rec *r, const ci_container *c);

/* The container's sandbox is gone at its provider (E2B's lifetime cap):
 * the container is expired. */
void ci_containers_expired(request_rec *r, struct ci_req_state *st);

/* The response RESPONSE_ID is final: it leads to the container, and our
 * items in LOOP are remembered for item_references and chains. Sent before
 * the response leaves (a next turn finds what it records), its answer read
 * after with ci_containers_finished; NULL when there is nothing to record. */
struct ci_dir_sent *ci_containers_finish(request_rec *r, struct ci_req_state *st,
                                         ci_loop *loop, const char *response_id);
void ci_containers_finished(request_rec *r, struct ci_dir_sent *sent);

/* The citer of ST's final text (ci_citations.h): links to the container's
 * files get container_file_citation annotations. NULL for a request without
 * an owner (its sandbox ends with it). */
struct ci_citer;
struct ci_citer *ci_containers_citer(request_rec *r, struct ci_req_state *st);
/* What a notice to the model says when the context's container expired. */
const char *ci_containers_lost_notice(apr_pool_t *p, const char *old_id, int tool_gone);

#endif
