/*
 * ci_skill_api.c - a Skills API request's path and upload, and OpenAI's
 * objects (ci_skill_api.h).
 */
#include <stdio.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_buf.h"
#include "ci_json.h"
#include "ci_skill_api.h"

/* A part's header section (its filename holds a path of at most
 * CI_SKILL_MAX_PATH bytes, percent-encoded at worst) */
#define MAX_PART_HEADER (8 * 1024)
#define MAX_FIELD 16

/* ---- the path ------------------------------------------------------------- */

/* What follows the last "/skills" segment of URI, or NULL. */
static const char *after_skills(const char *uri)
{
    const char *at = NULL, *p = uri;
    while ((p = strstr(p, "/skills"))) {
        if (p[7] == '\0' || p[7] == '/')
            at = p + 7;
        p += 7;
    }
    return at;
}

/* The first segment of *REST (non-empty, up to '/' or the end), from P,
 * *REST moved past it and its '/'; NULL when it is empty. */
static const char *segment(apr_pool_t *p, const char **rest)
{
    const char *slash = strchr(*rest, '/');
    apr_size_t n = slash ? (apr_size_t)(slash - *rest) : strlen(*rest);
    const char *seg;
    if (!n)
        return NULL;
    seg = apr_pstrmemdup(p, *rest, n);
    *rest += n + (slash ? 1 : 0);
    return seg;
}

/* REST follows "{id}/": content, or versions[/{version}[/content]]. */
static ci_skapi_kind below_skill(apr_pool_t *p, const char *rest, ci_skapi_route *out)
{
    const char *seg = segment(p, &rest);
    if (!seg)
        return CI_SKAPI_NO_SUCH_PATH;
    if (!strcmp(seg, "content"))
        return *rest ? CI_SKAPI_NO_SUCH_PATH : CI_SKAPI_SKILL_CONTENT;
    if (strcmp(seg, "versions"))
        return CI_SKAPI_NO_SUCH_PATH;
    if (!*rest)
        return CI_SKAPI_VERSIONS;
    if (!(out->version = segment(p, &rest)))
        return CI_SKAPI_NO_SUCH_PATH;
    if (!*rest)
        return CI_SKAPI_VERSION;
    return !strcmp(rest, "content") ? CI_SKAPI_VERSION_CONTENT : CI_SKAPI_NO_SUCH_PATH;
}

void ci_skapi_route_of(apr_pool_t *p, const char *uri, ci_skapi_route *out)
{
    const char *rest = uri ? after_skills(uri) : NULL;
    memset(out, 0, sizeof(*out));
    if (!rest)
        return;
    if (*rest == '/')
        rest++;
    if (!*rest) {
        out->kind = CI_SKAPI_SKILLS;
        return;
    }
    if (!(out->skill_id = segment(p, &rest))) {
        out->kind = CI_SKAPI_NO_SUCH_PATH;
        return;
    }
    out->kind = *rest ? below_skill(p, rest, out) : CI_SKAPI_SKILL;
    if (out->kind == CI_SKAPI_NO_SUCH_PATH)
        out->skill_id = out->version = NULL;
}

/* ---- an upload ------------------------------------------------------------ */

typedef enum { PART_NONE, PART_ZIP, PART_FILE, PART_DEFAULT } part_kind;

struct ci_skapi_upload {
    apr_pool_t *p;
    ci_skill_limits limits;
    int with_default;
    ci_multipart *mp;
    ci_skill_builder *builder;
    part_kind kind;              /* of the part being read */
    ci_buf part;                 /* its bytes */
    const char *zip;             /* the "files" part, once read */
    apr_size_t zip_len;
    const char *held;            /* the first "files[]" part: it may be the zip */
    apr_size_t held_len;
    const char *held_name;
    int file_parts;
    const char *default_field;   /* the "default" field, once read */
    ci_error err;
    int failed;
};

/* Refuse the upload (400, about PARAM): -1 from a callback stops the reader. */
static int refuse(ci_skapi_upload *u, const char *param, const char *msg)
{
    if (!u->failed)
        ci_error_set(&u->err, 400, CI_INVALID, param, NULL, u->p, "%s", msg);
    u->failed = 1;
    return -1;
}

static part_kind kind_of(ci_skapi_upload *u, const ci_multipart_part *part)
{
    if (!strcmp(part->name, "files") && part->filename)
        return PART_ZIP;
    if (!strcmp(part->name, "files[]") && part->filename)
        return PART_FILE;
    if (!strcmp(part->name, "default") && !part->filename && u->with_default)
        return PART_DEFAULT;
    return PART_NONE;
}

static apr_size_t cap_of(const ci_skapi_upload *u, part_kind kind)
{
    return kind == PART_ZIP ? u->limits.max_zip
         : kind == PART_FILE ? (u->limits.max_file > u->limits.max_zip
                                ? u->limits.max_file : u->limits.max_zip)
         : MAX_FIELD;
}

static int on_begin(void *baton, const ci_multipart_part *part)
{
    ci_skapi_upload *u = baton;
    u->kind = kind_of(u, part);
    if (u->kind == PART_NONE)
        return refuse(u, "files", apr_psprintf(u->p, "Unexpected part '%s': a skill is "
                                               "uploaded as 'files' (one zip) or 'files[]' "
                                               "(a folder's files)%s.", part->name,
                                               u->with_default ? ", with 'default'" : ""));
    if (u->kind == PART_ZIP && (u->zip || u->file_parts))
        return refuse(u, "files", "Upload one zip as 'files', or a folder's files as "
                                  "'files[]', not both and not two zips.");
    if (u->kind == PART_FILE && u->zip)
        return refuse(u, "files", "Upload one zip as 'files', or a folder's files as "
                                  "'files[]', not both and not two zips.");
    if (u->kind == PART_DEFAULT && u->default_field)
        return refuse(u, "default", "'default' is given twice.");
    /* each part's bytes are kept: a fresh buffer, freed with the upload */
    ci_buf_init(&u->part, u->p, cap_of(u, u->kind));
    return 0;
}

static int on_data(void *baton, const ci_multipart_part *part, const char *data,
                   apr_size_t len)
{
    ci_skapi_upload *u = baton;
    if (ci_buf_append(&u->part, data, len) == 0)
        return 0;
    if (u->kind == PART_ZIP)
        return refuse(u, "files", apr_psprintf(u->p, CI_SKILL_E_ZIP_SIZE,
                                               (unsigned long)u->limits.max_zip));
    if (u->kind == PART_FILE)
        return refuse(u, "files", apr_psprintf(u->p, CI_SKILL_E_FILE_SIZE, part->filename,
                                               (unsigned long)u->limits.max_file));
    return refuse(u, "default", "'default' must be true or false.");
}

/* The first "files[]" part is held back: a lone one that is a zip is the
 * zip. The builder gets it once a second part comes, or at the end. */
static int add_file(ci_skapi_upload *u, const char *name, const char *data,
                    apr_size_t len)
{
    const char *err;
    if (ci_skill_builder_add(u->builder, name, data, len, &err) == 0)
        return 0;
    return refuse(u, "files", err);
}

static int on_end(void *baton, const ci_multipart_part *part)
{
    ci_skapi_upload *u = baton;
    const char *data = ci_buf_str(&u->part);
    apr_size_t len = u->part.len;
    switch (u->kind) {
    case PART_ZIP:
        u->zip = data;
        u->zip_len = len;
        return 0;
    case PART_DEFAULT:
        u->default_field = data;
        return 0;
    case PART_FILE:
        if (++u->file_parts == 1) {
            u->held_name = apr_pstrdup(u->p, part->filename);
            u->held = data;              /* held back, see add_file */
            u->held_len = len;
            return 0;
        }
        if (u->file_parts == 2 && add_file(u, u->held_name, u->held, u->held_len))
            return -1;
        return add_file(u, part->filename, data, len);
    default:
        return -1;
    }
}

ci_skapi_upload *ci_skapi_upload_make(apr_pool_t *p, const char *boundary,
                                      const ci_skill_limits *limits, int with_default)
{
    static const ci_multipart_callbacks cb = { on_begin, on_data, on_end };
    static const ci_skill_limits defaults = CI_SKILL_LIMITS_DEFAULT;
    ci_skapi_upload *u = apr_pcalloc(p, sizeof(*u));
    ci_multipart_limits ml;
    u->p = p;
    u->limits = limits ? *limits : defaults;
    u->with_default = with_default;
    u->builder = ci_skill_builder_make(p, &u->limits);
    ml.max_header = MAX_PART_HEADER;
    /* every file, "default", and one more: the refusal names the limit */
    ml.max_parts = u->limits.max_files + 2;
    ml.max_body = cap_of(u, PART_FILE) + 1;
    u->mp = ci_multipart_create(p, boundary, &ml, &cb, u);
    return u;
}

/* The reader's own failure, as the client's 400. */
static int reader_failed(ci_skapi_upload *u, ci_multipart_status st)
{
    if (u->failed)
        return -1;
    if (st == CI_MULTIPART_TOO_MANY_PARTS)
        return refuse(u, "files", apr_psprintf(u->p, CI_SKILL_E_TOO_MANY,
                                               (unsigned long)u->limits.max_files));
    return refuse(u, "files", apr_psprintf(u->p, "The upload is not valid "
                                           "multipart/form-data: %s",
                                           ci_multipart_error(u->mp)));
}

int ci_skapi_upload_feed(ci_skapi_upload *u, const char *data, apr_size_t len)
{
    ci_multipart_status st;
    if (u->failed)
        return -1;
    st = ci_multipart_feed(u->mp, data, len);
    if (st == CI_MULTIPART_OK)
        return 0;
    if (st == CI_MULTIPART_DONE)
        return 1;
    return reader_failed(u, st);
}

/* A lone "files[]" part: the zip when it is one and names no folder. */
static int lone_part_is_zip(const ci_skapi_upload *u)
{
    return u->file_parts == 1 && !strchr(u->held_name, '/') && u->held_len >= 4 &&
           !memcmp(u->held, "PK\003\004", 4);
}

static int default_of(ci_skapi_upload *u, int *make_default)
{
    *make_default = 0;
    if (!u->default_field || !strcmp(u->default_field, "false"))
        return 0;
    if (!strcmp(u->default_field, "true")) {
        *make_default = 1;
        return 0;
    }
    return refuse(u, "default", "'default' must be true or false.");
}

/* The bundle the parts make. */
static int bundle_of(ci_skapi_upload *u, ci_skill_bundle **out)
{
    const char *err = NULL;
    int rc;
    if (lone_part_is_zip(u)) {
        u->zip = u->held;
        u->zip_len = u->held_len;
    } else if (u->file_parts == 1 && add_file(u, u->held_name, u->held, u->held_len)) {
        return -1;
    }
    if (u->zip)
        rc = ci_skill_bundle_from_zip(u->p, u->zip, u->zip_len, &u->limits, out, &err);
    else if (u->file_parts)
        rc = ci_skill_builder_finish(u->builder, out, &err);
    else
        return refuse(u, "files", CI_SKILL_E_NO_FILES);
    return rc ? refuse(u, "files", err) : 0;
}

int ci_skapi_upload_finish(ci_skapi_upload *u, ci_skill_bundle **out, int *make_default,
                           ci_error *err)
{
    ci_multipart_status st = u->failed ? CI_MULTIPART_STOPPED : ci_multipart_end(u->mp);
    if (!u->failed && st != CI_MULTIPART_DONE)
        reader_failed(u, st);
    if (!u->failed && default_of(u, make_default) == 0)
        bundle_of(u, out);
    if (u->failed) {
        *err = u->err;
        return -1;
    }
    return 0;
}

/* ---- the answers ---------------------------------------------------------- */

static void copy(json_object *to, json_object *from, const char *key)
{
    json_object_object_add(to, key, json_object_get(json_object_object_get(from, key)));
}

/* An integer of FROM as OpenAI's string. */
static void copy_as_text(json_object *to, json_object *from, const char *key)
{
    json_object_object_add(to, key, json_object_new_string(
                               json_object_get_string(json_object_object_get(from, key))));
}

json_object *ci_skapi_skill(json_object *sk)
{
    json_object *o = json_object_new_object();
    copy(o, sk, "id");
    json_object_object_add(o, "object", json_object_new_string("skill"));
    copy(o, sk, "name");
    copy(o, sk, "description");
    copy(o, sk, "created_at");
    copy_as_text(o, sk, "default_version");
    copy_as_text(o, sk, "latest_version");
    return o;
}

json_object *ci_skapi_version(json_object *v)
{
    json_object *o = json_object_new_object();
    copy(o, v, "id");
    json_object_object_add(o, "object", json_object_new_string("skill.version"));
    copy(o, v, "skill_id");
    copy_as_text(o, v, "version");
    copy(o, v, "created_at");
    copy(o, v, "name");
    copy(o, v, "description");
    return o;
}

/* {id, object: OBJECT, deleted: true}: a deletion's answer. */
static json_object *deleted(const char *id, const char *object)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_string(id));
    json_object_object_add(o, "object", json_object_new_string(object));
    json_object_object_add(o, "deleted", json_object_new_boolean(1));
    return o;
}

json_object *ci_skapi_skill_deleted(const char *id)
{
    return deleted(id, "skill.deleted");
}

json_object *ci_skapi_version_deleted(const char *id, int version)
{
    json_object *o = deleted(id, "skill.version.deleted");
    char text[16];
    snprintf(text, sizeof(text), "%d", version);
    json_object_object_add(o, "version", json_object_new_string(text));
    return o;
}

void ci_skapi_refusal(apr_pool_t *p, const char *status, const char *skill_id,
                      const char *version, ci_error *err)
{
    if (!strcmp(status, "not_found"))
        ci_error_set(err, 404, CI_INVALID, NULL, "skill_not_found", p,
                     "Skill with id '%s' not found.", skill_id);
    else if (!strcmp(status, "no_version"))
        ci_error_set(err, 404, CI_INVALID, "version", "skill_version_not_found", p,
                     "Skill '%s' has no version '%s'.", skill_id, version ? version : "");
    else if (!strcmp(status, "default"))
        ci_error_set(err, 400, CI_INVALID, "version", "default_version", p,
                     "Version %s is the default version of skill '%s': set another "
                     "default version before deleting it.", version ? version : "",
                     skill_id);
    else if (!strcmp(status, "bad_request") && version)
        ci_error_set(err, 400, CI_INVALID, "version", "invalid_version", p,
                     "'%s' is not a version: expected a version number, or \"latest\" "
                     "to retrieve the newest.", version);
    else
        ci_error_set(err, 500, CI_SERVER, NULL, NULL, p,
                     "The skills' records could not answer (%s).", status);
}
