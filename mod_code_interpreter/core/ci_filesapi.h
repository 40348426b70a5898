/*
 * ci_filesapi.h - the model upstream's Files API, read for file_ids:
 * GET {base}/files/{id} (the file object: filename, bytes) and
 * GET {base}/files/{id}/content (the bytes, streamed to a sink), with the
 * caller's own credentials. httpd-free (libcurl through ci_upstream).
 *
 * {base} is the Responses URL with its last "/responses" segment taken
 * away ("https://api.openai.com/v1/responses" -> ".../v1"): the Files API
 * lives beside the Responses API at OpenAI and its compatible servers.
 */
#ifndef CI_FILESAPI_H
#define CI_FILESAPI_H

#include <apr_pools.h>
#include <apr_tables.h>
#include "ci_upstream.h"

typedef enum {
    CI_FILESAPI_OK = 0,
    CI_FILESAPI_NOT_FOUND,   /* the upstream says no such file (404) */
    CI_FILESAPI_DENIED,      /* the upstream refuses the caller (401, 403) */
    CI_FILESAPI_NO_API,      /* the upstream has no Files API there */
    CI_FILESAPI_TOO_LARGE,   /* more bytes than the caller accepts */
    CI_FILESAPI_FAILED       /* unreachable, timed out, a bad answer */
} ci_filesapi_status;

typedef struct ci_filesapi_file {
    const char *id;
    const char *filename;    /* as the upstream names it (not checked) */
    apr_int64_t bytes;
} ci_filesapi_file;

/* The Files API's URL of FILE_ID (and "/content" when CONTENT) beside
 * RESPONSES_URL, or NULL when that URL has no "/responses" segment to
 * replace. FILE_ID is %-escaped. */
const char *ci_filesapi_url(apr_pool_t *p, const char *responses_url, const char *file_id,
                            int content);

/* The file object of FILE_ID, into *OUT. On failure *ERR says why (no
 * secret). */
ci_filesapi_status ci_filesapi_get(apr_pool_t *p, const char *responses_url,
                                   const apr_table_t *headers,
                                   const ci_upstream_opts *opts, const char *file_id,
                                   ci_filesapi_file *out, const char **err);

/* The bytes of FILE_ID, handed to SINK as they arrive (non-zero from SINK
 * stops: CI_FILESAPI_FAILED), at most MAX bytes (CI_FILESAPI_TOO_LARGE). */
ci_filesapi_status ci_filesapi_content(apr_pool_t *p, const char *responses_url,
                                       const apr_table_t *headers,
                                       const ci_upstream_opts *opts,
                                       const char *file_id, apr_int64_t max,
                                       int (*sink)(void *baton, const char *data,
                                                   apr_size_t len),
                                       void *baton, const char **err);

#endif
