/*
 * ci_dirclient.h - the container directory as httpd asks it: one client,
 * two back ends in a table. The directory's operations and their answers
 * are ci_directory_ops.h's JSON whichever back end serves them:
 *
 * - "supervisor": one node's directory, in the node's sandbox supervisor
 *   (ci_dirclient_supervisor.c), asked over its socket;
 * - "redis": a directory several nodes share (CodeInterpreterDirectory
 *   redis://...; ci_dirclient_redis.c), each operation one atomic script
 *   (core/ci_directory.lua), its records authenticated with the server
 *   secret. What runs on a node stays there: a local container's sandbox,
 *   in the node's supervisor, which keeps a shadow record of it (adopt) so
 *   that ATTACH, busy marks and its own expiry work as on one node.
 *
 * An answer may say that some containers' sandboxes must end now (evicted
 * to admit another, deleted, claimed when due): ci_dirclient_ask hands
 * them to its caller, which ends them (ci_dirclient_end) - never a side
 * effect of asking.
 *
 * Expiry: a child thread claims, once a second, the due containers this
 * node may end (a shared directory: its own local ones and any remote one;
 * one node's: those with a remote sandbox, when credentials for one are
 * known here); the claim is atomic, so exactly one process ends each.
 */
#ifndef CI_DIRCLIENT_H
#define CI_DIRCLIENT_H

#include <httpd.h>
#include <json-c/json.h>
#include "ci_directory.h"
#include "ci_error.h"
#include "ci_sandbox.h"

/* A question sent without waiting for its answer (ci_dirclient_send). */
typedef struct ci_dir_sent {
    json_object *req;
    const char *text;            /* REQ as the back end sent it */
    apr_size_t len;
    int sent;                    /* 0: asked at once, ANS is its answer */
    json_object *ans;
    apr_array_header_t *gone;    /* ... and GONE what it says must go */
} ci_dir_sent;

/* A back end. */
typedef struct ci_dirclient_backend {
    const char *name;
    /* REQ asked (its "node" added where the back end needs it): the
     * answer, from P, its records checked; or NULL with *ERR (no secret).
     * Its "gone" names the containers whose sandboxes must end now. */
    json_object *(*ask)(server_rec *s, apr_pool_t *p, json_object *req, const char **err);
    /* Whether this node's children claim due containers from it (the
     * client then starts each child's claimer thread). */
    int (*claims)(server_rec *s);
    /* What this node runs, for server-status (the supervisor's STATUS,
     * JSON): 0 with *ANSWER, or -1. */
    int (*status)(apr_pool_t *p, const char **answer, const char **err);
    /* Before a local container's sandbox is attached on this node: the
     * supervisor's shadow of container C of OWNER (tool DEF), made or
     * refreshed. 0, or -1 with *ERR (no secret). NULL: nothing to do (one
     * node's directory). */
    int (*adopt)(apr_pool_t *p, const char *owner, const ci_container *c,
                 const ci_sandbox_def *def, const char **err);
    /* Every few claims: end the local sandboxes whose containers the
     * directory no longer has running. NULL: nothing to reconcile. */
    void (*reconcile)(server_rec *s, apr_pool_t *p);
    /* The directory keeps busy marks (executions on other nodes must not
     * let a container be evicted or expired). */
    int marks_busy;
    /* Several nodes share the directory: a container's local sandbox may
     * run on another node (reached there only). */
    int shared;
    /* Q->req sent without waiting: 0, or -1 with *ERR; then its answer,
     * as ASK's, or NULL with *ERR. NULL: the back end cannot keep a
     * lookup that comes after from overtaking it, and is asked at once. */
    int (*send)(apr_pool_t *p, ci_dir_sent *q, const char **err);
    json_object *(*receive)(apr_pool_t *p, ci_dir_sent *q, const char **err);
} ci_dirclient_backend;

extern const ci_dirclient_backend ci_dirclient_supervisor;
extern const ci_dirclient_backend ci_dirclient_redis;

/* Child init: the node's name, then the claimer thread where the back end
 * says this node claims (ci_dirclient_claimer.c). */
void ci_dirclient_child_init(apr_pool_t *pchild, server_rec *s);

/* S's back end: chosen here, and nowhere else. */
const ci_dirclient_backend *ci_dirclient_backend_of(server_rec *s);
/* Whether S's directory is shared by several nodes (the back end's shared). */
int ci_dirclient_shared(server_rec *s);

/* The name this node goes by in a shared directory ("ServerName:port"). */
const char *ci_dirclient_node(void);

/* A request OP of OWNER (JSON, ci_directory_ops.h; owned by P). */
json_object *ci_dirclient_request(apr_pool_t *p, const char *op, const char *owner);

/* Ask REQ of S's directory (memory from P): the answer, or NULL (logged)
 * when it cannot be asked. *GONE (may be NULL when the caller knows its
 * operation ends nothing) gets the records (ci_container) whose sandboxes
 * must end now: end them with ci_dirclient_end. */
json_object *ci_dirclient_ask(server_rec *s, apr_pool_t *p, json_object *req,
                              apr_array_header_t **gone);
/* Ask REQ, and end what its answer says must go. */
json_object *ci_dirclient_ask_and_end(server_rec *s, apr_pool_t *p, json_object *req);
/* REQ sent without waiting for its answer, where the back end keeps the
 * order (a later lookup on another connection cannot overtake it); else
 * asked at once. Then, after other work (nothing else asked of the
 * directory on this thread in between), its answer, with what it says must
 * go ended: the answer, or NULL (logged). */
ci_dir_sent *ci_dirclient_send(server_rec *s, apr_pool_t *p, json_object *req);
/* Whether S's back end sends without waiting (ci_dirclient_send does not
 * ask at once). */
int ci_dirclient_sends_ahead(server_rec *s);
json_object *ci_dirclient_receive_and_end(server_rec *s, apr_pool_t *p, ci_dir_sent *q);
/* The records ANS carries (container, evicted, containers[]) whose ids its
 * "gone" names: an array of ci_container, from P. */
apr_array_header_t *ci_dirclient_gone_of(apr_pool_t *p, json_object *ans);
/* End the sandboxes of GONE (ci_container) where they run, when this node
 * can reach them (ci_dirclient_end.c). */
void ci_dirclient_end(server_rec *s, apr_pool_t *p, const apr_array_header_t *gone);

/* An answer's status, and its record KEY ("container", "evicted") into *C:
 * 0, or -1 when it has none. A running container read so may be used: the
 * credentials it was made with are needed until its idle expiry
 * (ci_dirclient_needs_cred). */
ci_dir_status ci_dirclient_status_of(json_object *ans);
int ci_dirclient_container(apr_pool_t *p, json_object *ans, const char *key,
                           ci_container *c);

/* Running container C's credentials are needed until its idle expiry
 * counted from UNTIL (a request's hold ends then; ci_registry_cred_needed). */
void ci_dirclient_needs_cred(const ci_container *c, apr_time_t until);

/* What this node's supervisor says it runs (server-status). */
int ci_dirclient_status(server_rec *s, apr_pool_t *p, const char **answer,
                        const char **err);

/* Before container C's local sandbox is attached here (the back end's
 * adopt). 0, or -1 (logged for R). */
int ci_dirclient_adopt(request_rec *r, const char *owner, const ci_container *c,
                       const ci_sandbox_def *def);

/* An execution begins (BUSY) or ends in OWNER's container ID: with a
 * directory that keeps busy marks, eviction and expiry skip it meanwhile,
 * for LEASE seconds at most (a node that dies mid-run does not keep it
 * busy), and either is a use. */
void ci_dirclient_busy(request_rec *r, const char *owner, const char *id, int busy,
                       int lease);

/* The header naming the node that runs a local container, on a 409. */
#define CI_NODE_HEADER "X-CodeInterpreter-Node"

/* Whether container C's sandbox is local to another node (a shared
 * directory; a provider whose sandboxes are not remote): then ERR is the
 * 409 container_on_other_node naming that node, and the node's name is in
 * CI_NODE_HEADER of R's answer, so that a balancer can route on it. */
int ci_dirclient_elsewhere(request_rec *r, const ci_container *c, ci_error *err);

/* The container's sandbox can now be reached with HANDLE: recorded,
 * sealed with the server secret and bound to the container's id. */
void ci_dirclient_record_handle(request_rec *r, apr_pool_t *p, const char *owner,
                                const char *container_id, const char *handle);

/* ---- sealed in the directory (ci_dirclient_seal.c) --------------------- */
/* SECRETS (ci_domain_secret) sealed for container ID, each with a new
 * placeholder: what its record keeps. From P. */
const char *ci_dirclient_seal_secrets(apr_pool_t *p, const char *id,
                                      const apr_array_header_t *secrets);
/* C's domain secrets opened: a JSON array of {domain, name, placeholder,
 * value}, or NULL (none, or not sealed with this server's secret: logged). */
const char *ci_dirclient_unseal_secrets(request_rec *r, const ci_container *c);

/* A handle as the directory keeps it (sealed), opened; NULL for NULL. */
const char *ci_dirclient_unseal(request_rec *r, const ci_container *c);


/* ---- for the back ends (ci_dirclient_local.c, ci_dirclient_supervisor.c:
 * below the client and the back ends, calling neither) ------------------- */

/* This node's name ("ServerName:port" of the first listener), set at child
 * init. */
void ci_dirclient_set_node(apr_pool_t *pchild, server_rec *s);
/* A shadow request OP (with ID when not NULL) for this node's supervisor
 * (ci_directory_ops's adopt, drop, shadows), owned by P. */
json_object *ci_dirclient_shadow_request(apr_pool_t *p, const char *op, const char *id);
/* REQ asked of this node's supervisor: its answer whatever its status, or
 * NULL with *ERR. */
json_object *ci_dirclient_supervisor_answer(apr_pool_t *p, json_object *req,
                                            const char **err);
/* REQ asked of this node's supervisor: its answer with status "ok", or
 * NULL with *ERR. */
json_object *ci_dirclient_ask_supervisor(apr_pool_t *p, json_object *req,
                                         const char **err);
/* This node's supervisor drops its shadow of ID, and the local sandbox with
 * it (IF_IDLE: unless a request uses it right now). */
void ci_dirclient_drop_local(server_rec *s, apr_pool_t *p, const char *id, int if_idle);

#endif
