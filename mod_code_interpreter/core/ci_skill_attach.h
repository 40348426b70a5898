/*
 * ci_skill_attach.h - the skills a request asks a new container to have
 * (the hosted shell's container_auto "skills", OpenAI's union of
 * skill_reference and inline), read and checked without httpd; and what
 * the model is told of the skills a container has. httpd-free.
 *
 *   {"type": "skill_reference", "skill_id": ID, "version"?: N | "N" | "latest"}
 *   {"type": "inline", "name": NAME, "description": TEXT,
 *    "source": {"type": "base64", "media_type": "application/zip", "data": B64}}
 *
 * A skill is shown in its container at /home/oai/skills/<name>-<32 hex>/
 * (OpenAI's place): a referenced skill's hex is its id's, an inline one's
 * the first half of its bundle's digest.
 */
#ifndef CI_SKILL_ATTACH_H
#define CI_SKILL_ATTACH_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>
#include "ci_error.h"

#define CI_SKILL_ATTACH_MAX 200
/* OpenAI's bound on an inline skill's base64 (InlineSkillSourceParam) */
#define CI_SKILL_INLINE_MAX_B64 70254592

typedef enum { CI_SKILL_REFERENCE, CI_SKILL_INLINE } ci_skill_ref_kind;

/* The version a reference asks for. */
#define CI_SKILL_VERSION_DEFAULT 0
#define CI_SKILL_VERSION_LATEST (-1)

typedef struct ci_skill_ref {
    ci_skill_ref_kind kind;
    const char *param;           /* where it was given: "tools[1].environment.skills[0]" */
    const char *skill_id;        /* a reference's */
    int version;                 /* a reference's: N >= 1, or one of the above */
    const char *name;            /* an inline's */
    const char *description;
    const char *data;            /* its zip, base64 */
    apr_size_t data_len;
} ci_skill_ref;

/* LIST (the request's "skills", at PARAM) read into *OUT (ci_skill_ref,
 * from P): 0, or -1 with *ERR (400 naming the entry). */
int ci_skill_attach_parse(apr_pool_t *p, json_object *list, const char *param,
                          apr_array_header_t **out, ci_error *err);

/* A skill's folder name in its container: NAME "-" HEX32 (from P). */
const char *ci_skill_attach_mount(apr_pool_t *p, const char *name, const char *hex32);

/* What the model is told of the container's SKILLS (a JSON array of
 * {name, description, mount}), from P: where each is, and that its SKILL.md
 * says how to use it. */
const char *ci_skill_attach_context(apr_pool_t *p, json_object *skills);

#endif
