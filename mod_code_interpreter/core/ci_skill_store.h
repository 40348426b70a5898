/*
 * ci_skill_store.h - skill bundles on a server's disk, content-addressed:
 * a version is written once, whoever uploads the same bundle again.
 * httpd-free.
 *
 * Under the store's directory, for a bundle of digest D (ci_skill_bundle's
 * 64 hex digits), in the folder of its first two digits:
 *
 *   D2/D.zip    the bundle as a zip (ci_skill_bundle_zip: the same bytes
 *               for the same bundle): what the content routes send and a
 *               remote sandbox is given;
 *   D2/D/       the folder's files as a tree (SKILL.md at its top): what a
 *               local sandbox mounts read-only.
 *
 * Each is made beside its place under a name of its own and renamed into
 * it, so that a reader finds the whole of it or nothing, and two writers of
 * one bundle (two children, two nodes on a shared disk) both succeed with
 * the same result. The tree is renamed last: where it is, the zip is.
 * Nothing is followed through a symbolic link: the bundle's paths were
 * checked (ci_skill_bundle.h) and every folder here is made by the store.
 */
#ifndef CI_SKILL_STORE_H
#define CI_SKILL_STORE_H

#include <sys/types.h>
#include <apr_pools.h>
#include <apr_time.h>
#include "ci_skill_bundle.h"

/* Whether DIGEST is 64 lower-case hex digits (the only names the store
 * makes paths of). */
int ci_skill_store_digest_ok(const char *digest);

/* Where the tree of DIGEST is (or would be) in the store DIR, from P. */
const char *ci_skill_store_tree(apr_pool_t *p, const char *dir, const char *digest);
/* ... and its zip. */
const char *ci_skill_store_zip(apr_pool_t *p, const char *dir, const char *digest);

/* Whether the store DIR holds the bundle DIGEST (its tree, and so its zip). */
int ci_skill_store_has(apr_pool_t *p, const char *dir, const char *digest);

/* Store B in DIR (its zip ZIP, LEN bytes, as ci_skill_bundle_zip wrote
 * it): 0 when it is there (now, or already), or -1 with *ERR (from P; a
 * path of the store and the system's reason, no content). */
int ci_skill_store_put(apr_pool_t *p, const char *dir, const ci_skill_bundle *b,
                       const char *zip, apr_size_t len, const char **err);

/* The zip of DIGEST read whole into P: 0, *ZIP and *LEN; 1 when the store
 * has no such bundle; -1 with *ERR. */
int ci_skill_store_read_zip(apr_pool_t *p, const char *dir, const char *digest,
                            const char **zip, apr_size_t *len, const char **err);

/* The file at PATH (a path of the store) given DATA (LEN bytes) whole, as
 * a bundle's zip is: written to a new file beside it (MODE; never through
 * a link) under a name no other writer uses, on the disk, then renamed
 * over it, so that a reader finds the old file or the new one, never a
 * part of either. 0, or -1 with *ERR (as ci_skill_store_put's) and nothing
 * left beside PATH. What the store keeps besides bundles (ci_skill_records.h)
 * is written with it too. */
int ci_skill_store_put_file(apr_pool_t *p, const char *path, const char *data,
                            apr_size_t len, mode_t mode, const char **err);

/* The file at PATH (never through a link), at most MAX bytes, read whole
 * into P with a NUL after it: 0, *DATA and *LEN; 1 when there is no such
 * file; -1 with *ERR (from P; the path and the reason) when it cannot be
 * read, is not a file or is larger. */
int ci_skill_store_read_file(apr_pool_t *p, const char *path, apr_size_t max,
                             const char **data, apr_size_t *len, const char **err);

/* Remove DIGEST's tree and zip (the last version that names it is gone):
 * 0 (also when it was not there), or -1 with *ERR. */
int ci_skill_store_remove(apr_pool_t *p, const char *dir, const char *digest,
                          const char **err);

/* The store DIR swept: what was last changed before OLDER_THAN and is a
 * bundle KEEP (called with BATON) says nothing names any more, or a
 * leftover of an interrupted write or removal (a folder a sandbox had
 * bound), removed. How many entries went. */
int ci_skill_store_clean(apr_pool_t *p, const char *dir, apr_time_t older_than,
                         int (*keep)(void *baton, const char *digest), void *baton);

#endif
