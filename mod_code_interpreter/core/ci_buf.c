/* ci_buf.c - a bounded growable buffer in a pool. */
#include <string.h>
#include "ci_buf.h"

void ci_buf_init(ci_buf *b, apr_pool_t *p, apr_size_t max)
{
    b->p = p;
    b->data = NULL;
    b->len = b->alloc = 0;
    b->max = max;
}

/* Pool memory is not freed one block at a time: growing doubles, so the
 * copies add up to at most twice the final size. */
void ci_buf_reserve(ci_buf *b, apr_size_t n)
{
    char *grown;
    if (n + 1 <= b->alloc)
        return;
    grown = apr_palloc(b->p, n + 1);
    if (b->len)
        memcpy(grown, b->data, b->len);
    grown[b->len] = '\0';
    b->data = grown;
    b->alloc = n + 1;
}

int ci_buf_append(ci_buf *b, const char *data, apr_size_t len)
{
    apr_size_t want;
    if (len > b->max || b->len > b->max - len)
        return -1;
    if (b->len + len + 1 > b->alloc) {
        want = (b->len + len) * 2;
        ci_buf_reserve(b, want < b->max ? want : b->max);
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

void ci_buf_clear(ci_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

const char *ci_buf_str(const ci_buf *b)
{
    return b->data ? b->data : "";
}
