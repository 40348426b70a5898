/*
 * ci_cfiles.h - container files as the Containers API shows them: the
 * kernel's listing of /mnt/data (one NDJSON line, ci_kernel.py's
 * file_list) parsed, each file given its stable id, sorted and paged.
 * httpd-free.
 *
 * Why ids are computed, not recorded: a container file is whatever regular
 * file lies directly under /mnt/data when asked. The code in the container
 * controls that tree and changes it at any time (rm, mv, a background
 * process), so a list kept beside the container would go stale and need
 * reconciling anyway. An id derived from the container and the name
 * ("cfile_" + the first 32 hex digits of SHA-256(container id, NUL, name))
 * is the same on every listing, in every child, across graceful restarts,
 * with nothing to store or keep in step; the same path keeps its id when
 * rewritten. Knowing an id gives nothing: every lookup first checks that the
 * container is the caller's.
 */
#ifndef CI_CFILES_H
#define CI_CFILES_H

#include <apr_pools.h>
#include <apr_tables.h>
#include "ci_declare.h"

#define CI_CFILE_MAX_NAME 255
#define CI_CFILE_MAX_LISTED 10000

typedef struct ci_cfile {
    const char *id;
    const char *name;           /* directly under /mnt/data */
    apr_int64_t bytes;
    apr_int64_t created_at;     /* seconds: the file's last change */
    int user;                   /* put there by an upload and unchanged since
                                   (source "user"; else "assistant") */
} ci_cfile;

/* Whether NAME (LEN bytes) may name a container file: not empty, at most
 * CI_CFILE_MAX_NAME bytes, not "." or "..", no '/', NUL, CR or LF. */
CI_DECLARE(int) ci_cfile_name_ok(const char *name, apr_size_t len);

/* The id of the file NAME of container CONTAINER. */
CI_DECLARE(const char *) ci_cfile_id(apr_pool_t *p, const char *container, const char *name);

/* The kernel's "files" line (LINE, LEN bytes: {"type":"files","files":
 * [{"name","bytes","mtime","source"?}]}) of CONTAINER: an array of
 * ci_cfile sorted by created_at then id, ascending; names that are not
 * acceptable are left out. NULL when the line is not a listing. */
CI_DECLARE(apr_array_header_t *) ci_cfiles_parse(apr_pool_t *p, const char *container,
                                    const char *line, apr_size_t len);

/* Add the file NAME (not checked: see ci_cfile_name_ok) of CONTAINER to
 * FILES, an array of ci_cfile, with its id; strings copied into P. */
CI_DECLARE(ci_cfile *) ci_cfiles_add(apr_pool_t *p, apr_array_header_t *files, const char *container,
                        const char *name, apr_int64_t bytes, apr_int64_t mtime, int user);

/* Sort FILES by created_at then id, ascending (as ci_cfiles_parse does). */
CI_DECLARE(void) ci_cfiles_sort(apr_array_header_t *files);

/* The file with ID in FILES (ci_cfiles_parse), or NULL. */
CI_DECLARE(const ci_cfile *) ci_cfiles_find(const apr_array_header_t *files, const char *id);

/* A page of FILES: after the file AFTER (NULL: from the start; unknown:
 * nothing), at most LIMIT, newest first when DESC. *HAS_MORE says whether
 * more follow. An array of ci_cfile (copies). */
CI_DECLARE(apr_array_header_t *) ci_cfiles_page(apr_pool_t *p, const apr_array_header_t *files,
                                   const char *after, int limit, int desc,
                                   int *has_more);

#endif
