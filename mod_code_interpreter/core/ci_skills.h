/*
 * ci_skills.h - the skills of a server, as OpenAI's Skills API shows them:
 * each a record of its owner with numbered versions, a default one and a
 * latest one; each version names its bundle by digest (ci_skill_store.h
 * keeps the bytes). A data structure with no I/O and no locks: its host
 * serialises every call, as for the container directory (ci_directory.h).
 * httpd-free.
 *
 * Owners are keyed hashes; another owner's skill reads exactly like an
 * unknown one. The rules the API states:
 *   - a new skill has version 1, its default and its latest;
 *   - a new version is the latest (the highest number yet plus one: a
 *     deleted number is never given again), and the default when asked;
 *   - the default version cannot be deleted while others remain (set
 *     another first); deleting the last version deletes the skill;
 *   - deleting a skill deletes its versions.
 * A bundle may be named by versions of several skills (the same upload
 * twice, by any owner): what a deletion leaves unnamed is handed to the
 * host, which removes it from the store.
 */
#ifndef CI_SKILLS_H
#define CI_SKILLS_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>

typedef struct ci_skill_version {
    const char *id;              /* "skillver_" + 32 hex digits */
    const char *skill_id;
    int version;                 /* 1, 2, ... */
    const char *name;            /* from its SKILL.md */
    const char *description;
    const char *digest;          /* its bundle (ci_skill_bundle's digest) */
    apr_time_t created_at;
} ci_skill_version;

typedef struct ci_skill {
    const char *id;              /* "skill_" + 32 hex digits */
    const char *owner;
    apr_time_t created_at;
    int default_version;
    int latest_version;
    apr_array_header_t *versions;   /* ci_skill_version *, by number */
} ci_skill;

typedef enum {
    CI_SKILLS_OK = 0,
    CI_SKILLS_NOT_FOUND,         /* no such skill (or another owner's) */
    CI_SKILLS_NO_VERSION,        /* the skill has no such version */
    CI_SKILLS_DEFAULT,           /* the default version, with others left */
    CI_SKILLS_NO_OWNER           /* an empty owner keeps nothing */
} ci_skills_status;

typedef struct ci_skills ci_skills;

/* The skills; memory their own (under P, destroyed with it). */
ci_skills *ci_skills_create(apr_pool_t *p);

/* What a new version is made of (the bundle's SKILL.md and digest). */
typedef struct ci_skill_upload {
    const char *name;
    const char *description;
    const char *digest;
} ci_skill_upload;

/* A new skill of OWNER with version 1 of UP, made at NOW. */
ci_skills_status ci_skills_create_skill(ci_skills *s, const char *owner,
                                        const ci_skill_upload *up, apr_time_t now,
                                        ci_skill **out);

/* The skill ID of OWNER. */
ci_skills_status ci_skills_get(ci_skills *s, const char *owner, const char *id,
                               ci_skill **out);

/* Version VERSION of SK; 0: its latest; -1: its default. */
ci_skill_version *ci_skills_version(const ci_skill *sk, int version);

/* A skill's name and description: its default version's. */
const ci_skill_version *ci_skills_shown(const ci_skill *sk);

/* OWNER's skills by creation (newest first unless ASCENDING), after the
 * one AFTER (NULL: from the start; unknown: nothing), at most LIMIT.
 * *HAS_MORE says whether more follow. Of ci_skill *, from P. */
apr_array_header_t *ci_skills_list(ci_skills *s, const char *owner, const char *after,
                                   int limit, int ascending, int *has_more, apr_pool_t *p);

/* SK's versions by number (descending unless ASCENDING), after the version
 * whose id is AFTER, at most LIMIT, as ci_skills_list. */
apr_array_header_t *ci_skills_versions(const ci_skill *sk, const char *after, int limit,
                                       int ascending, int *has_more, apr_pool_t *p);

/* A new version of SK from UP at NOW: the latest, and the default when
 * MAKE_DEFAULT. */
ci_skill_version *ci_skills_add_version(ci_skills *s, ci_skill *sk,
                                        const ci_skill_upload *up, int make_default,
                                        apr_time_t now);

/* Make VERSION SK's default: OK or NO_VERSION. */
ci_skills_status ci_skills_set_default(ci_skill *sk, int version);

/* Delete version VERSION of SK (its last one: the skill). The digests no
 * longer named by any version go to UNNAMED (const char *, from its pool).
 * *SKILL_GONE says whether the skill went with it (SK is then freed). */
ci_skills_status ci_skills_delete_version(ci_skills *s, ci_skill *sk, int version,
                                          apr_array_header_t *unnamed, int *skill_gone);

/* Delete SK and its versions (SK is freed); the digests as above. */
void ci_skills_delete(ci_skills *s, ci_skill *sk, apr_array_header_t *unnamed);

/* How many versions, of all skills, name DIGEST. */
int ci_skills_digest_uses(const ci_skills *s, const char *digest);

/* How many skills S holds; the skill I of them by creation (0: the
 * oldest), NULL past the last. For a host that saves them
 * (ci_skill_records.h). */
int ci_skills_count(const ci_skills *s);
ci_skill *ci_skills_at(const ci_skills *s, int i);

/* The highest number SK has given a version, deleted ones too: its next
 * version is this plus one. */
int ci_skills_numbered(const ci_skill *sk);

/* A skill as it was saved: ID of OWNER made at CREATED_AT, NUMBERED the
 * highest number it gave (>= 1), the newest in S's order, without versions
 * yet. NULL (nothing kept) when S has a skill ID already, OWNER is empty
 * or NUMBERED is not a number. Its versions follow, oldest first, with
 * ci_skills_restore_version, then its default with ci_skills_set_default:
 * until then it is not a skill the calls above expect. */
ci_skill *ci_skills_restore(ci_skills *s, const char *id, const char *owner,
                            apr_time_t created_at, int numbered);

/* Version VERSION of SK as it was saved: ID, UP, made at CREATED_AT; SK's
 * latest now, its digest named once more. NULL (nothing kept) when a
 * version of SK has ID already, or VERSION is not above SK's latest or is
 * above the highest number SK gave. */
ci_skill_version *ci_skills_restore_version(ci_skills *s, ci_skill *sk, const char *id,
                                            int version, const ci_skill_upload *up,
                                            apr_time_t created_at);

/* Every skill of S gone (freed), and every digest's count with them: S as
 * made, for a load that failed halfway. Nothing goes to the host: the
 * store keeps its bundles. */
void ci_skills_clear(ci_skills *s);

#endif
