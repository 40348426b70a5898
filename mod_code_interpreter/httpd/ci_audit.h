/*
 * ci_audit.h - the opt-in audit log (CodeInterpreterAuditLog): one JSON line
 * per execution and per container admission that waited, was refused or
 * evicted another; never a key, a token or the execution's output.
 */
#ifndef CI_AUDIT_H
#define CI_AUDIT_H

#include <httpd.h>
#include <http_config.h>
#include <json-c/json.h>
#include "mod_code_interpreter.h"

const char *ci_audit_set(cmd_parms *cmd, void *dummy, const char *target);
int ci_audit_open(apr_pool_t *pconf, server_rec *s);
void ci_audit_child_init(apr_pool_t *pchild);
/* The audit log's file, absolute, for a process of the module's own to
 * append to (the egress proxy); NULL when there is none or it is piped. */
const char *ci_audit_file_path(apr_pool_t *p, server_rec *s);
/* The execution hook's function (mod_code_interpreter.h). */
int ci_audit_execution(request_rec *r, const ci_execution *e);
/* A container's admission that was not plain: EVENT "waited" (for room),
 * "refused" (REASON: owner_full, node_full, budget_full) or "evicted"
 * (EVICTED: the idle container that made room). */
void ci_audit_admission(request_rec *r, const char *tool, const char *container,
                        const char *event, const char *reason, const char *evicted);

/* The skills container CONTAINER of OWNER got when it was made (SKILLS:
 * the record ci_skills_attach.h makes): one line, event "skills", each
 * skill's id and version (or inline), name and bundle. */
void ci_audit_skills(request_rec *r, const char *container, const char *owner,
                     json_object *skills);

#endif
