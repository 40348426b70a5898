/*
 * ci_scan.h - the byte scan that decides whether a request body can mention
 * the code_interpreter tool, fed piece by piece as the body arrives.
 *
 * Fed the pieces of a body in order, it answers exactly what
 * ci_body_mentions_tool() answers for the whole body: the bytes
 * "code_interpreter", "container_auto" or "container_reference" (the hosted
 * shell's environments), or an escaped lowercase letter or '_' (\u0061-\u007a,
 * \u005f: no encoder writes one, so it appears only in a body written to slip
 * past the scan). A match split across pieces is found; nothing is copied
 * but the last few bytes of each piece.
 */
#ifndef CI_SCAN_H
#define CI_SCAN_H

#include <apr.h>

/* The longest a match can be, minus one: what a piece must carry over. */
#define CI_SCAN_CARRY 18

typedef struct ci_scan {
    int found;                        /* sticky: set once a match is seen */
    apr_size_t carry_len;             /* the last bytes seen, at most CARRY */
    apr_size_t resume;                /* where the escape scan resumes, in carry */
    char carry[CI_SCAN_CARRY];
} ci_scan;

/* A scan that has seen nothing. */
void ci_scan_init(ci_scan *s);

/* Scan the next LEN bytes of the body. Returns 1 once the body so far
 * mentions the tool (and then ignores what it is fed), else 0. */
int ci_scan_feed(ci_scan *s, const char *data, apr_size_t len);

#endif
