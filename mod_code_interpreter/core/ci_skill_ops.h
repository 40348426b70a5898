/*
 * ci_skill_ops.h - the skills' operations, JSON in and out, as the host of
 * a server's skills (ci_skills.h) is asked them: the supervisor for one
 * node, over its DIR frames, like the container directory's operations
 * (ci_directory_ops.h). httpd-free.
 *
 * A request is {"op", "owner", ...}; an answer {"status", ...}. Status:
 * "ok", "not_found" (no such skill, or another owner's), "no_version",
 * "default" (the default version, with others left), "no_owner",
 * "bad_request". The operations:
 *
 *   skill_create  {upload}                 -> {skill, version}
 *   skill_get     {id}                     -> {skill}
 *   skill_list    {after?, limit?, order?} -> {data: [skill], has_more}
 *   skill_default {id, version}            -> {skill}
 *   skill_delete  {id}                     -> {skill, unnamed}
 *   version_create {id, upload, default?}  -> {skill, version}
 *   version_get   {id, version}            -> {skill, version}
 *   version_list  {id, after?, limit?, order?} -> {data: [version], has_more}
 *   version_delete {id, version}           -> {skill, version, skill_deleted, unnamed}
 *
 * upload: {name, description, digest}; version: an integer, its text, or
 * "latest" (version_get); order: "asc" or "desc" (the default); limit: 1
 * to 100 (20). A skill: {id, created_at (seconds), default_version,
 * latest_version, name, description (its default version's)}; a version:
 * {id, skill_id, version, name, description, digest, created_at}. unnamed:
 * the digests no version names any more, for the host to remove from its
 * store.
 */
#ifndef CI_SKILL_OPS_H
#define CI_SKILL_OPS_H

#include <apr_pools.h>
#include <apr_time.h>
#include "ci_skills.h"

/* Whether OP names one of these operations. */
int ci_skill_ops_is(const char *op);

/* Apply REQ (LEN bytes of JSON) to S at NOW: the answer's text, from P. */
const char *ci_skill_ops_apply(ci_skills *s, apr_pool_t *p, const char *req,
                               apr_size_t len, apr_time_t now);

#endif
