/*
 * ci_skill_records.c - a server's skill records on its disk
 * (ci_skill_records.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_skill_records.h"
#include "ci_skill_store.h"

#define FORMAT 1
#define ID_HEX 32
#define NUMBER_MAX 1000000000       /* the highest version the operations read */

static const char *records_path(apr_pool_t *p, const char *dir)
{
    return apr_pstrcat(p, dir, "/skills.json", NULL);
}

/* ---- saving ------------------------------------------------------------- */

/* (A version made without a name or description, which no operation
 * makes, is saved with an empty one: json-c takes no NULL string.) */
static void add_str(json_object *j, const char *key, const char *v)
{
    json_object_object_add(j, key, json_object_new_string(v ? v : ""));
}

static void add_int(json_object *j, const char *key, apr_int64_t v)
{
    json_object_object_add(j, key, json_object_new_int64(v));
}

static json_object *version_record(const ci_skill_version *v)
{
    json_object *j = json_object_new_object();
    add_str(j, "id", v->id);
    add_int(j, "version", v->version);
    add_str(j, "name", v->name);
    add_str(j, "description", v->description);
    add_str(j, "digest", v->digest);
    add_int(j, "created_at", v->created_at);
    return j;
}

static json_object *skill_record(const ci_skill *sk)
{
    json_object *j = json_object_new_object(), *versions = json_object_new_array();
    int i;
    add_str(j, "id", sk->id);
    add_str(j, "owner", sk->owner);
    add_int(j, "created_at", sk->created_at);
    add_int(j, "default_version", sk->default_version);
    add_int(j, "latest_version", sk->latest_version);
    add_int(j, "numbered", ci_skills_numbered(sk));
    for (i = 0; i < sk->versions->nelts; i++) {
        const ci_skill_version *v = APR_ARRAY_IDX(sk->versions, i, ci_skill_version *);
        json_object_array_add(versions, version_record(v));
    }
    json_object_object_add(j, "versions", versions);
    return j;
}

/* The document of S, owned by P. */
static json_object *document(const ci_skills *s, apr_pool_t *p)
{
    json_object *doc = ci_json_own(p, json_object_new_object());
    json_object *skills = json_object_new_array();
    int i, n = ci_skills_count(s);
    add_int(doc, "format", FORMAT);
    for (i = 0; i < n; i++)
        json_object_array_add(skills, skill_record(ci_skills_at(s, i)));
    json_object_object_add(doc, "skills", skills);
    return doc;
}

/* DIR's entries on the disk: until then a crash may undo the rename, and
 * the records of a change already answered would be lost. */
static int sync_dir(apr_pool_t *p, const char *dir, const char **err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), e;
    if (fd >= 0 && fsync(fd) == 0) {
        close(fd);                  /* read-only: the sync is what counts */
        return 0;
    }
    e = errno;
    if (fd >= 0)
        close(fd);
    *err = apr_psprintf(p, "the skill records could not sync %s: %s", dir, strerror(e));
    return -1;
}

int ci_skill_records_save(const ci_skills *s, apr_pool_t *p, const char *dir,
                          const char **err)
{
    apr_size_t len;
    const char *text = ci_json_text(document(s, p), &len);
    /* 0600: the host alone reads the records (owners' keyed hashes among
     * them); unlike the bundles, no sandbox is given them */
    if (ci_skill_store_put_file(p, records_path(p, dir), text, len, 0600, err) != 0)
        return -1;
    return sync_dir(p, dir, err);
}

/* ---- loading ------------------------------------------------------------ */

/* Whether ID is PREFIX and 32 lower-case hex digits (what ci_skills mints). */
static int id_ok(const char *id, const char *prefix)
{
    size_t n = strlen(prefix);
    return id && !strncmp(id, prefix, n) && strlen(id + n) == ID_HEX &&
           strspn(id + n, "0123456789abcdef") == ID_HEX;
}

/* J's member KEY into *OUT when it is an integer from MIN to MAX: 0, or -1. */
static int int_of(json_object *j, const char *key, apr_int64_t min, apr_int64_t max,
                  apr_int64_t *out)
{
    json_object *v = ci_json_get(j, key, json_type_int);
    if (!v)
        return -1;
    *out = json_object_get_int64(v);
    return *out >= min && *out <= max ? 0 : -1;
}

static int number_of(json_object *j, const char *key, int *out)
{
    apr_int64_t n;
    if (int_of(j, key, 1, NUMBER_MAX, &n) != 0)
        return -1;
    *out = (int)n;
    return 0;
}

static int time_of(json_object *j, const char *key, apr_time_t *out)
{
    apr_int64_t t;
    if (int_of(j, key, 0, APR_INT64_MAX, &t) != 0)
        return -1;
    *out = t;
    return 0;
}

/* What is wrong with AT's member KEY, from P. */
static const char *wrong(apr_pool_t *p, const char *at, const char *key, const char *what)
{
    return apr_psprintf(p, "%s.%s %s", at, key, what);
}

/* The version J (AT in the document) restored into SK: NULL, or what is
 * wrong with it (from P). */
static const char *restore_version(ci_skills *s, ci_skill *sk, json_object *j,
                                   const char *at, apr_pool_t *p)
{
    const char *id = ci_json_str(j, "id");
    ci_skill_upload up;
    apr_time_t made;
    int number;
    up.name = ci_json_str(j, "name");
    up.description = ci_json_str(j, "description");
    up.digest = ci_json_str(j, "digest");
    if (!id_ok(id, "skillver_"))
        return wrong(p, at, "id", "is not a version's id");
    if (number_of(j, "version", &number) != 0)
        return wrong(p, at, "version", "is not a version number");
    if (number <= sk->latest_version)
        return wrong(p, at, "version", "is not above the one before it");
    if (number > ci_skills_numbered(sk))
        return wrong(p, at, "version", "is above the skill's numbered");
    if (!up.name || !up.description)
        return wrong(p, at, up.name ? "description" : "name", "is not a string");
    if (!ci_skill_store_digest_ok(up.digest))
        return wrong(p, at, "digest", "is not a digest");
    if (time_of(j, "created_at", &made) != 0)
        return wrong(p, at, "created_at", "is not a time");
    if (!ci_skills_restore_version(s, sk, id, number, &up, made))
        return wrong(p, at, "id", "is there twice");
    return NULL;
}

/* SK's versions (the list VERSIONS), then its default and latest as J
 * (AT) names them: NULL, or what is wrong (from P). */
static const char *restore_versions(ci_skills *s, ci_skill *sk, json_object *j,
                                    json_object *versions, const char *at, apr_pool_t *p)
{
    size_t i, n = ci_json_len(versions);
    int default_version, latest;
    for (i = 0; i < n; i++) {
        const char *why = restore_version(s, sk, json_object_array_get_idx(versions, i),
                                          apr_psprintf(p, "%s.versions[%" APR_SIZE_T_FMT "]",
                                                       at, i), p);
        if (why)
            return why;
    }
    if (number_of(j, "default_version", &default_version) != 0 ||
        ci_skills_set_default(sk, default_version) != CI_SKILLS_OK)
        return wrong(p, at, "default_version", "names none of its versions");
    if (number_of(j, "latest_version", &latest) != 0 || latest != sk->latest_version)
        return wrong(p, at, "latest_version", "is not its newest version");
    return NULL;
}

/* The skill J, the I-th of the document, restored into S: NULL, or what is
 * wrong with it (from P). */
static const char *restore_skill(ci_skills *s, json_object *j, size_t i, apr_pool_t *p)
{
    const char *at = apr_psprintf(p, "skills[%" APR_SIZE_T_FMT "]", i);
    const char *id = ci_json_str(j, "id"), *owner = ci_json_str(j, "owner");
    json_object *versions = ci_json_get(j, "versions", json_type_array);
    apr_time_t made;
    int numbered;
    ci_skill *sk;
    if (!id_ok(id, "skill_"))
        return wrong(p, at, "id", "is not a skill's id");
    if (!owner || !*owner)
        return wrong(p, at, "owner", "is not an owner");
    if (time_of(j, "created_at", &made) != 0)
        return wrong(p, at, "created_at", "is not a time");
    if (number_of(j, "numbered", &numbered) != 0)
        return wrong(p, at, "numbered", "is not a version number");
    if (!ci_json_len(versions))
        return wrong(p, at, "versions", "is not a list of versions");
    if (!(sk = ci_skills_restore(s, id, owner, made, numbered)))
        return wrong(p, at, "id", "is there twice");
    return restore_versions(s, sk, j, versions, at, p);
}

/* The document DOC restored into S: NULL, or what is wrong (from P). */
static const char *restore_all(ci_skills *s, json_object *doc, apr_pool_t *p)
{
    json_object *skills = ci_json_get(doc, "skills", json_type_array);
    apr_int64_t format;
    size_t i, n;
    if (int_of(doc, "format", FORMAT, FORMAT, &format) != 0)
        return "format is not 1";
    if (!skills)
        return "skills is not a list";
    for (i = 0, n = ci_json_len(skills); i < n; i++) {
        const char *why = restore_skill(s, json_object_array_get_idx(skills, i), i, p);
        if (why)
            return why;
    }
    return NULL;
}

int ci_skill_records_load(ci_skills *s, apr_pool_t *p, const char *dir, const char **err)
{
    const char *path = records_path(p, dir), *text, *perr = NULL, *why;
    apr_size_t len;
    json_object *doc;
    int rc;
    if (ci_skills_count(s)) {
        *err = "the skill records are loaded only into no skills";
        return -1;
    }
    if ((rc = ci_skill_store_read_file(p, path, CI_SKILL_RECORDS_MAX, &text, &len, err)) != 0)
        return rc > 0 ? 0 : -1;              /* none: nothing saved yet */
    if (!(doc = ci_json_parse(p, text, len, &perr))) {
        *err = apr_psprintf(p, "the skill records in %s are not JSON: %s", path, perr);
        return -1;
    }
    if ((why = restore_all(s, doc, p))) {
        ci_skills_clear(s);                  /* what was restored before it */
        *err = apr_psprintf(p, "the skill records in %s are refused: %s", path, why);
        return -1;
    }
    return 0;
}
