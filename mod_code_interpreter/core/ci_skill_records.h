/*
 * ci_skill_records.h - a server's skill records (ci_skills.h) kept on its
 * disk, beside the bundles they name (ci_skill_store.h), so that the host
 * (the supervisor of a node) finds them again after a restart: saved after
 * each change, loaded at its first use. httpd-free.
 *
 * One JSON document, DIR/skills.json, the whole of the records:
 *
 *   {"format": 1,
 *    "skills": [{"id", "owner", "created_at", "default_version",
 *                "latest_version", "numbered",
 *                "versions": [{"id", "version", "name", "description",
 *                              "digest", "created_at"}, ...]}, ...]}
 *
 * Skills in the order they were made (a listing's order), versions by
 * number; times in microseconds (apr_time_t: the API shows seconds, the
 * records keep what the server had). "numbered" is the highest number the
 * skill ever gave: a deleted number is not given again after a reload
 * either. "format" names this layout; a reader of another refuses it.
 *
 * A save writes the whole document to a new file beside skills.json and
 * renames it over the old one, the file and then the folder synced: a
 * reader (the next start, after a crash at any moment) finds the whole old
 * document or the whole new one, never a mixture or a part. A document is
 * small next to the bundles (a few hundred bytes a version), and a change
 * is a person's upload or deletion: writing it whole each time is simpler
 * than any journal, and cannot leave one half applied.
 *
 * A load trusts nothing it reads (a disk can be edited, truncated or
 * damaged): every id, digest, number and time is checked, and a document
 * that fails any check is refused whole.
 */
#ifndef CI_SKILL_RECORDS_H
#define CI_SKILL_RECORDS_H

#include <apr_pools.h>
#include "ci_skills.h"

/* The largest skills.json a load reads. */
#define CI_SKILL_RECORDS_MAX (256u * 1024 * 1024)

/* Every record of S written to DIR/skills.json as above (P: the memory of
 * this save): 0, or -1 with *ERR (from P: the path and the system's
 * reason, none of the records) with skills.json as it was and nothing
 * left beside it. */
int ci_skill_records_save(const ci_skills *s, apr_pool_t *p, const char *dir,
                          const char **err);

/* The records in DIR/skills.json restored into S, which holds none (P: the
 * memory of this load; the records' own is S's): 0 (also when there is no
 * such file: nothing saved yet), or -1 with *ERR (from P: the path and
 * what is wrong) and S still empty. */
int ci_skill_records_load(ci_skills *s, apr_pool_t *p, const char *dir, const char **err);

#endif
