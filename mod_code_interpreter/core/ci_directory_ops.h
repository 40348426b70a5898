/*
 * ci_directory_ops.h - the container directory's operations as the supervisor
 * serves them: one JSON request in, one JSON answer out, applied to a
 * ci_directory. httpd-free and I/O-free, so that every operation is tested
 * without a supervisor.
 *
 * Requests are {"op": NAME, "owner": KEYED_HASH, ...}:
 *   create      id?, name?, tool, provider?, cred?, memory_limit?,
 *               memory_bytes?, idle (seconds), hold? (seconds: the request
 *               holds it so long at most), limits {node, owner, retention
 *               (s), items (bytes), budget (bytes), grace (s: used within
 *               it, never evicted), reserve (the node's last places, for
 *               owners holding fewer)}
 *               -> {status, container, evicted?}
 *   get         id, touch?, hold? -> {status, container?}
 *   set_handle  id, handle -> {status}
 *   delete      id -> {status, container?}
 *   expire      id -> {status}    (its sandbox is gone at the provider)
 *   list        after?, limit, order ("asc"|"desc"), name?
 *               -> {status, data: [container], has_more}
 *   response    response_id, touch?, hold? -> {status, container_id?,
 *               pending?, container_status?, container?}: with touch (a
 *               boolean), the container it led to as get answers it
 *               (touched and held when true): a chained turn's one question
 *   conversation conversation, touch?, hold? -> as response: the
 *               container the owner's conversation of that id last used
 *               (keyed by owner and id: another owner's is another)
 *   finish      container_id, response_id?, conversation?, items [{id,
 *               text}], pending?, touch? -> {status}   (the request lets go
 *               of its hold; a use unless touch is false: a hold let go
 *               unused). With conversation, it goes on in container_id,
 *               owed pending (none: what it was owed was brought)
 *   recall      item_id -> {status, text?, container_id?}
 *   adopt       id, tool, memory_limit?, idle -> {status}: a shadow of a
 *               shared directory's container, whose local sandbox runs here
 *   drop        id, if_idle? (no owner) -> {status}: the shared directory
 *               ended it (IF_IDLE: unless a request is using it now)
 *   shadows     (no owner) -> {status, ids}: the running containers'
 *               ids, for a node to check against the shared directory
 *   claim_due   limit? (no owner) -> {status, containers, gone}: the
 *               containers with a remote sandbox (a handle) that expired
 *               here and that nobody has ended yet, each handed out once
 * Every answer has "gone": the ids of the containers whose sandboxes must go
 * now (deleted, evicted, expired, dropped; claim_due's own), as the shared
 * directory's scripts answer; the caller ends those it can reach.
 * status is "ok", "not_found", "expired", "owner_full", "node_full",
 * "no_owner", "budget_full" or "bad_request". A container is {id, name, tool,
 * memory_limit, handle, created_at, last_active_at (microseconds),
 * idle_seconds, memory_bytes, status, provider?, cred?}, and node in a
 * shared directory (ci_redis.h): the handle is secret and never leaves
 * httpd.
 */
#ifndef CI_DIRECTORY_OPS_H
#define CI_DIRECTORY_OPS_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_directory.h"

/* Apply request REQ at NOW. The answer's text is from P. The ids of
 * containers whose sandboxes must go now (deleted, evicted) are pushed to
 * GONE (const char *, from P). */
const char *ci_dirops_apply(ci_directory *d, apr_pool_t *p, const char *req,
                            apr_size_t len, apr_time_t now, apr_array_header_t *gone);

/* As ci_dirops_apply; *MISSED is 1 when REQ looked up what an earlier
 * request's "finish" records (a response's container: "response"; a
 * conversation's: "conversation"; an item: "recall") and found nothing. */
const char *ci_dirops_apply_lookup(ci_directory *d, apr_pool_t *p, const char *req,
                                   apr_size_t len, apr_time_t now,
                                   apr_array_header_t *gone, int *missed);

/* A container from JSON into *OUT (memory from P). 0, or -1 when it is not one. */
int ci_dirops_container_from(apr_pool_t *p, json_object *j, ci_container *out);

/* The status names, both ways. */
const char *ci_dirops_status_name(ci_dir_status st);
ci_dir_status ci_dirops_status_of(const char *name);

#endif
