/*
 * ci_shared.h - the container directory shared by several nodes
 * (CodeInterpreterDirectory redis://...): the glue around ci_redis.
 *
 * With a shared directory, the records (containers, response ids,
 * remembered items, owners' lists) live in Redis and every node reads and
 * writes them there, atomically (sandbox/ci_dir.lua). What stays on a node
 * is what runs there: a local container's sandbox, in the node's sandbox
 * supervisor, which keeps a shadow record of it (ci_supdir's adopt) so that
 * ATTACH, busy marks and its own expiry work as on one node. Each answer
 * names the containers whose sandboxes must go now ("gone": deleted,
 * evicted, claimed); the node that got it destroys them: an E2B sandbox
 * from any node, a local one on its own node.
 *
 * Expiry: every child runs a thread that claims, once a second, the due
 * containers this node may end (its own local ones, and any remote one);
 * the claim is atomic, so exactly one node ends each. Every 5 seconds it
 * also checks the node's local sandboxes against the directory and ends
 * those whose containers it no longer has running (Redis lost its data).
 */
#ifndef CI_SHARED_H
#define CI_SHARED_H

#include <httpd.h>
#include <json-c/json.h>
#include "ci_directory.h"
#include "ci_error.h"
#include "ci_sandbox.h"

/* The name this node goes by in the shared directory: its ServerName and
 * the port of its first listener ("host:port"). Set at child init. */
const char *ci_shared_node(void);

/* Child init: the node's name, and with a shared directory the thread that
 * claims due containers (stopped and joined when PCHILD is cleared). */
void ci_shared_child_init(apr_pool_t *pchild, server_rec *s);

/* Ask the shared directory REQ (its "node" added): the answer (from P), or
 * NULL (logged) when Redis cannot be asked. The sandboxes the answer says
 * are gone are destroyed before it returns. */
json_object *ci_shared_ask(request_rec *r, apr_pool_t *p, json_object *req);

/* Before a local container's sandbox is attached on this node: the
 * supervisor's shadow of container C of OWNER, made or refreshed. 0, or -1
 * when the supervisor cannot be asked. No-op without a shared directory or
 * for a remote provider. */
int ci_shared_adopt(request_rec *r, const char *owner, const ci_container *c,
                    const ci_sandbox_def *def);

/* An execution begins (BUSY) or ends in OWNER's container ID: eviction and
 * expiry skip it meanwhile, for LEASE seconds at most (a node that dies
 * mid-run does not keep it busy), and either is a use. No-op without a
 * shared directory. */
void ci_shared_busy(request_rec *r, const char *owner, const char *id, int busy,
                    int lease);

/* The header naming the node that runs a local container, on a 409. */
#define CI_NODE_HEADER "X-CodeInterpreter-Node"

/* Whether container C's sandbox is local to another node (a shared
 * directory; a provider without handles): then ERR is the 409
 * container_on_other_node naming that node, and the node's name is in
 * CI_NODE_HEADER of R's answer, so that a balancer can route on it. */
int ci_shared_elsewhere(request_rec *r, const ci_container *c, ci_error *err);

/* The sandbox of the container C (its record as the directory answered
 * it), which the directory no longer keeps: destroyed where it runs, when
 * this node can reach it. */
void ci_shared_destroy(server_rec *s, apr_pool_t *p, const ci_container *c);

#endif
