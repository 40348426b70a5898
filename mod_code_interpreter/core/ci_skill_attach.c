/*
 * ci_skill_attach.c - the skills a request asks a container to have, and
 * what the model is told of them (ci_skill_attach.h).
 */
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_skill_attach.h"

#define MAX_SKILL_ID 64

static int bad(apr_pool_t *p, ci_error *err, const char *param, const char *msg)
{
    ci_error_set(err, 400, CI_INVALID, param, "invalid_value", p, "%s", msg);
    return -1;
}

/* A reference's "version": absent (the default), N >= 1, its text, or
 * "latest". */
static int version_of(apr_pool_t *p, json_object *e, const char *param, int *out,
                      ci_error *err)
{
    json_object *v = NULL;
    const char *text;
    char *end;
    long n;
    *out = CI_SKILL_VERSION_DEFAULT;
    if (!json_object_object_get_ex(e, "version", &v) || !v)
        return 0;
    if (json_object_is_type(v, json_type_int)) {
        n = (long)json_object_get_int64(v);
        if (n >= 1 && n <= 1000000000)
            return (*out = (int)n), 0;
    }
    else if (json_object_is_type(v, json_type_string)) {
        text = json_object_get_string(v);
        if (!strcmp(text, "latest"))
            return (*out = CI_SKILL_VERSION_LATEST), 0;
        n = strtol(text, &end, 10);
        if (*text >= '1' && *text <= '9' && !*end && n <= 1000000000)
            return (*out = (int)n), 0;
    }
    return bad(p, err, param, "A skill's 'version' must be a version number or \"latest\".");
}

static int reference_of(apr_pool_t *p, json_object *e, ci_skill_ref *ref, ci_error *err)
{
    const char *id = ci_json_str(e, "skill_id");
    if (!id || !*id || strlen(id) > MAX_SKILL_ID)
        return ci_error_bad_type(p, err, apr_pstrcat(p, ref->param, ".skill_id", NULL),
                                 "a skill id of 1 to 64 characters");
    ref->skill_id = apr_pstrdup(p, id);
    return version_of(p, e, apr_pstrcat(p, ref->param, ".version", NULL), &ref->version,
                      err);
}

static int inline_of(apr_pool_t *p, json_object *e, ci_skill_ref *ref, ci_error *err)
{
    json_object *src = ci_json_get(e, "source", json_type_object);
    json_object *data = ci_json_get(src, "data", json_type_string);
    const char *name = ci_json_str(e, "name"), *desc = ci_json_str(e, "description");
    if (!name || !*name)
        return ci_error_bad_type(p, err, apr_pstrcat(p, ref->param, ".name", NULL),
                                 "a string");
    if (!desc)
        return ci_error_bad_type(p, err, apr_pstrcat(p, ref->param, ".description", NULL),
                                 "a string");
    if (!src || !ci_json_is_type(src, "base64") || !data ||
        !ci_json_str(src, "media_type") || strcmp(ci_json_str(src, "media_type"),
                                                  "application/zip"))
        return bad(p, err, apr_pstrcat(p, ref->param, ".source", NULL),
                   "An inline skill's source must be {\"type\": \"base64\", "
                   "\"media_type\": \"application/zip\", \"data\": ...}.");
    if (json_object_get_string_len(data) > CI_SKILL_INLINE_MAX_B64)
        return bad(p, err, apr_pstrcat(p, ref->param, ".source.data", NULL),
                   "An inline skill's data is longer than 70254592 characters.");
    ref->name = apr_pstrdup(p, name);
    ref->description = apr_pstrdup(p, desc);
    /* the request's JSON lives as long as P: its text is not copied */
    ref->data = json_object_get_string(data);
    ref->data_len = (apr_size_t)json_object_get_string_len(data);
    return 0;
}

int ci_skill_attach_parse(apr_pool_t *p, json_object *list, const char *param,
                          apr_array_header_t **out, ci_error *err)
{
    size_t i, n;
    if (!json_object_is_type(list, json_type_array))
        return ci_error_bad_type(p, err, param, "an array");
    n = json_object_array_length(list);
    if (n > CI_SKILL_ATTACH_MAX)
        return bad(p, err, param, "At most 200 skills may be given.");
    *out = apr_array_make(p, (int)n + 1, sizeof(ci_skill_ref));
    for (i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        ci_skill_ref *ref = apr_array_push(*out);
        memset(ref, 0, sizeof(*ref));
        ref->param = apr_psprintf(p, "%s[%lu]", param, (unsigned long)i);
        if (!json_object_is_type(e, json_type_object))
            return ci_error_bad_type(p, err, ref->param, "an object");
        if (ci_json_is_type(e, "skill_reference")) {
            ref->kind = CI_SKILL_REFERENCE;
            if (reference_of(p, e, ref, err))
                return -1;
        }
        else if (ci_json_is_type(e, "inline")) {
            ref->kind = CI_SKILL_INLINE;
            if (inline_of(p, e, ref, err))
                return -1;
        }
        else
            return bad(p, err, apr_pstrcat(p, ref->param, ".type", NULL),
                       "A skill's 'type' must be \"skill_reference\" or \"inline\".");
    }
    return 0;
}

const char *ci_skill_attach_mount(apr_pool_t *p, const char *name, const char *hex32)
{
    return apr_pstrcat(p, name, "-", hex32, NULL);
}

const char *ci_skill_attach_context(apr_pool_t *p, json_object *skills)
{
    const char *text = "Skills are installed in your container: each is a folder with a "
                       "SKILL.md file of instructions, and often scripts. Before you use a "
                       "skill, read its SKILL.md (for example with cat) and follow it; run "
                       "its scripts from their folder's path, which is read-only.";
    size_t i, n = skills ? json_object_array_length(skills) : 0;
    for (i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(skills, i);
        text = apr_pstrcat(p, text, "\n- ", ci_json_str(s, "name"), ": ",
                           ci_json_str(s, "description"), " (" "/home/oai/skills/",
                           ci_json_str(s, "mount"), "/SKILL.md)", NULL);
    }
    return text;
}
