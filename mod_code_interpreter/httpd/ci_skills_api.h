/*
 * ci_skills_api.h - OpenAI's Skills API (/skills...), served where
 * CodeInterpreterSkills is On: skills and their versions, uploaded as a zip
 * or a folder's files, listed, retrieved, downloaded and deleted, each the
 * caller's own. The bundles are kept in the server's skill store
 * (CodeInterpreterSkillStore), the records by the node's supervisor.
 */
#ifndef CI_SKILLS_API_H
#define CI_SKILLS_API_H

#include <httpd.h>
#include <json-c/json.h>

/* Before each reading of the configuration: no location serves skills yet. */
void ci_skills_api_pre_config(void);
/* A location serves them (CodeInterpreterSkills On). */
void ci_skills_api_wanted(void);
/* In the parent: the store made for the children's user, when wanted. OK,
 * or HTTP_INTERNAL_SERVER_ERROR (logged). */
int ci_skills_api_post_config(apr_pool_t *p, server_rec *s);
/* Where the server secret made without CodeInterpreterSecret is kept (in
 * the store: owners must hash alike after a full restart, or nobody finds
 * their skills again), or NULL when no location serves skills. */
const char *ci_skills_api_secret_path(apr_pool_t *p, server_rec *s);
void ci_skills_api_register_hooks(apr_pool_t *p);

/* Whether a location serves skills (and so the store exists). */
int ci_skills_served(void);
/* A question OP of OWNER about the skills in STORE (ci_skill_ops.h), from
 * P; and a question asked of the records: the answer (with its "status"),
 * or NULL with *WHY. */
json_object *ci_skills_question(apr_pool_t *p, const char *op, const char *owner,
                                const char *store);
json_object *ci_skills_ask(apr_pool_t *p, json_object *req, const char **why);

#endif
