/*
 * ci_id.h - every id and random token the module makes: items, responses,
 * containers, secrets' placeholders, markers. One generator, drawn from the
 * system's. No httpd here.
 */
#ifndef CI_ID_H
#define CI_ID_H

#include <apr_pools.h>

/* NBYTES random bytes (from the system's generator) as 2 * NBYTES hex
 * digits and a NUL at OUT. */
void ci_random_hex(char *out, apr_size_t nbytes);

/* "PREFIX" + 2*NBYTES random hex digits (NBYTES at most 64). */
const char *ci_mint_id(apr_pool_t *p, const char *prefix, apr_size_t nbytes);

#endif
