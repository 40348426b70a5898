/*
 * ci_registry.h - the server-wide view of live sandboxes, in APR shared
 * memory created by the parent and kept across graceful restarts: the cap
 * (CodeInterpreterMaxSandboxes), per-tool counters for server-status, and
 * the slots a dead child left. Slots and counters change only through
 * atomic operations; nothing in it is a secret, and nothing read from it is
 * trusted enough to kill a process. Implemented by ci_registry.c and the
 * files ci_registry_internal.h names.
 */
#ifndef CI_REGISTRY_H
#define CI_REGISTRY_H

#include <httpd.h>
#include "ci_directory.h"
#include "ci_sandbox.h"

/* Parent, real post_config: create or reuse the segment, publish the tools. */
int ci_registry_post_config(apr_pool_t *pconf, server_rec *s);

/* Whether a request ACCEPTED at that time may use DEF (this child's
 * configuration): yes when it came before the newest reload, or when that
 * reload kept the tool with the same parameters and credentials. */
int ci_registry_tool_current(const ci_sandbox_def *def, apr_time_t accepted);

/* Claim a slot for a sandbox of tool TOOL. -1 when the server-wide cap is
 * reached (answer 503 with Retry-After). */
int ci_registry_claim(const char *tool, const char *container_id);
void ci_registry_release(int slot);
/* Mark SLOT's sandbox ready-and-waiting (1) or handed to a request (0). */
void ci_registry_set_warm(int slot, int warm);

/* Record the remote sandbox behind SLOT (the provider's id, and a digest of
 * the credentials it was made with: never the credentials themselves), so
 * that if this child dies a live child can delete it through PROVIDER. */
void ci_registry_set_remote(int slot, const char *remote_id, const char *provider,
                            const ci_reap_cred *cred);

/* A digest of the credentials DEF's remote sandboxes are deleted with (the
 * provider's reap_cred; not secret), from P, or NULL when it has none. A
 * container's record keeps it. */
const char *ci_registry_cred_digest(apr_pool_t *p, const ci_sandbox_def *def);
/* The credentials of DIGEST and their provider, as this process knows them:
 * the parent keeps those of every tool it was configured with, and of a
 * tool a reload removed for as long as a container of it may live. 0 when
 * unknown. *OUT points into memory the caller must not keep. */
int ci_registry_cred_of(const char *digest, const ci_provider **provider,
                        ci_reap_cred *out);

/* Child: a container made with credentials DIGEST (its record's "cred")
 * may live until UNTIL (it was just used, or is held): the parent keeps
 * those credentials, even retired by a reload, at least as long. */
void ci_registry_cred_needed(const char *digest, apr_time_t until);

/* Whether this process knows credentials for any remote sandbox. */
int ci_registry_remote_creds(void);

/* Child: a reload since this child was forked made a newer configuration
 * (whose children know every credential still kept, this one only those
 * of its own and older configurations). */
int ci_registry_superseded(void);

/* Child: start the thread that deletes remote sandboxes dead children left. */
void ci_registry_child_init(apr_pool_t *pchild, server_rec *s);

/* The sandbox of SLOT was just used. */
void ci_registry_touch(int slot);

/* A container's admission: the request WAITED for room, and ended with
 * WHY (a refusal at a cap or the budget is counted by its limit); EVICTED:
 * another, idle, container of its owner made room. For server-status. */
void ci_registry_admission(int waited, ci_dir_status why, int evicted);

/* Counters. */
void ci_registry_execution(const char *tool, ci_exec_outcome outcome,
                           apr_interval_time_t duration);

/* ---- what the module file calls of the registry's other files, so that
 * none of them calls another back ---------------------------------------- */

/* Parent, post_config after ci_registry_post_config: remember generation
 * GEN's credentials (ci_reap_creds.c) and publish its tools (ci_tool_table.c). */
void ci_reg_keep_credentials(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen);
void ci_reg_publish_table(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen);
/* Hooks: child_status (orphaned slots, ci_orphans.c), end_generation and
 * monitor (retired credentials, ci_reap_creds.c), mod_status (ci_status.c). */
void ci_reg_orphans_hooks(apr_pool_t *p);
void ci_reg_reap_creds_hooks(apr_pool_t *p);
void ci_reg_status_hooks(apr_pool_t *p);

#endif
