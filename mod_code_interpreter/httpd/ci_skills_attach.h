/*
 * ci_skills_attach.h - the skills a request asks its new container to have
 * (the hosted shell's container_auto "skills"), resolved into what the
 * container's record keeps and its sandbox shows.
 */
#ifndef CI_SKILLS_ATTACH_H
#define CI_SKILLS_ATTACH_H

#include <httpd.h>
#include <apr_tables.h>
#include "ci_error.h"
#include "ci_sandbox.h"

/* REFS (ci_skill_ref) of OWNER, for a container of TOOL: OK with *RECORD (a
 * JSON array of {mount, tree, zip, name, description, digest, skill_id?,
 * version?}: as ci_sandbox_def.skills, with what the model and the audit
 * are told), or an HTTP status with ERR (400 naming the entry: an unknown
 * skill or version, an inline zip refused, skills not served here). */
int ci_skills_attach_resolve(request_rec *r, const ci_sandbox_def *tool, const char *owner,
                             const apr_array_header_t *refs, const char **record,
                             ci_error *err);

/* The log line, and the audit log's, naming the skills (id and version,
 * or inline; bundle) container CONTAINER_ID of OWNER got, from its RECORD. */
void ci_skills_attach_audit(request_rec *r, const char *container_id, const char *owner,
                            const char *record);

#endif
