/*
 * ci_id.c - ids and random tokens (ci_id.h).
 */
#include <pthread.h>
#include <string.h>
#include <apr_general.h>
#include <apr_strings.h>
#include "ci_id.h"

/* ---- random hex -----------------------------------------------------------
 * Drawn from the system's generator 256 bytes at a time per thread: one
 * system call serves the ids of several requests instead of one per id.
 * Every byte is handed out once; a forked process starts afresh. */
static _Thread_local struct {
    unsigned char b[256];
    apr_size_t left;
} rnd;

static void forget_random(void)
{
    rnd.left = 0;
}

static void register_forget(void)
{
    pthread_atfork(NULL, NULL, forget_random);
}

void ci_random_hex(char *out, apr_size_t nbytes)
{
    static const char digits[] = "0123456789abcdef";
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    apr_size_t i;
    pthread_once(&once, register_forget);
    for (i = 0; i < nbytes; i++) {
        unsigned char c;
        if (!rnd.left) {
            if (apr_generate_random_bytes(rnd.b, sizeof(rnd.b)) != APR_SUCCESS)
                memset(rnd.b, 0, sizeof(rnd.b));   /* not reached on Linux */
            rnd.left = sizeof(rnd.b);
        }
        c = rnd.b[sizeof(rnd.b) - rnd.left];
        rnd.b[sizeof(rnd.b) - rnd.left--] = 0;
        out[2 * i] = digits[c >> 4];
        out[2 * i + 1] = digits[c & 15];
    }
    out[2 * nbytes] = '\0';
}

const char *ci_mint_id(apr_pool_t *p, const char *prefix, apr_size_t nbytes)
{
    char hex[129];
    if (nbytes > 64)
        nbytes = 64;            /* ids never need more than 128 hex digits */
    ci_random_hex(hex, nbytes);
    return apr_pstrcat(p, prefix, hex, NULL);
}
