/*
 * ci_buf.h - a growable byte buffer in an APR pool, bounded: appending past
 * its limit fails and leaves it as it was. Always NUL-terminated.
 */
#ifndef CI_BUF_H
#define CI_BUF_H

#include <apr_pools.h>

typedef struct ci_buf {
    apr_pool_t *p;
    char *data;           /* NULL until the first byte or reserve */
    apr_size_t len, alloc;
    apr_size_t max;       /* bytes it may hold */
} ci_buf;

/* An empty buffer of at most MAX bytes. */
void ci_buf_init(ci_buf *b, apr_pool_t *p, apr_size_t max);
/* Make room for N bytes in all (one allocation when the size is known). */
void ci_buf_reserve(ci_buf *b, apr_size_t n);
/* Append LEN bytes. 0, or -1 (nothing appended) past the limit. */
int ci_buf_append(ci_buf *b, const char *data, apr_size_t len);
/* Empty it, keeping its memory. */
void ci_buf_clear(ci_buf *b);
/* The bytes (a "" when empty). */
const char *ci_buf_str(const ci_buf *b);

#endif
