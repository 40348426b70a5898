/*
 * ci_error.h - errors in OpenAI's shape:
 *   {"error":{"message":..., "type":..., "param":..., "code":...}}
 */
#ifndef CI_ERROR_H
#define CI_ERROR_H

#include <apr_pools.h>

typedef struct ci_error {
    int status;           /* HTTP status to answer with */
    const char *type;     /* "invalid_request_error", "server_error", ... */
    const char *message;  /* for the client; never holds a secret */
    const char *param;    /* the offending field, or NULL */
    const char *code;     /* machine code, or NULL */
    int retry_after;      /* seconds to wait before trying again (the
                             Retry-After header), 0: none */
} ci_error;

/* What a client is told to wait after a 503 unless the error says
 * otherwise (the directory, a cap, a sandbox starting). */
#define CI_RETRY_AFTER_DEFAULT 5

/* Fill ERR and return it (message formatted into P); a 503 gets
 * CI_RETRY_AFTER_DEFAULT. */
ci_error *ci_error_set(ci_error *err, int status, const char *type,
                       const char *param, const char *code, apr_pool_t *p,
                       const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Shorthands for the two common types. */
#define CI_INVALID "invalid_request_error"
#define CI_SERVER "server_error"

/* The 400 for a member PARAM of the wrong type ("Invalid type for
 * 'PARAM': expected EXPECTED."): -1, for a parser's return. */
int ci_error_bad_type(apr_pool_t *p, ci_error *err, const char *param,
                      const char *expected);

/* The JSON body for ERR, allocated from P. */
const char *ci_error_body(apr_pool_t *p, const ci_error *err, apr_size_t *len);

#endif
