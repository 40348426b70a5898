#ifndef CI_SECRET_VALUE_H
#define CI_SECRET_VALUE_H

/* What a domain secret's value may be: one definition, for httpd's request
 * parser (which refuses a request naming another, 400) and for the egress
 * proxy (which refuses a sandbox definition holding another). Two
 * definitions once disagreed, and a container was made whose proxy then
 * refused every secret, leaving it without a network. */

#include <apr.h>

#define CI_MAX_SECRET_VALUE 16384

/* Whether VALUE (LEN bytes) may go into a request header: 1 to
 * CI_MAX_SECRET_VALUE bytes of visible ASCII, space, tab or obs-text (a
 * byte of 0x80 and above); no NUL, CR, LF, DEL or other control
 * character. */
int ci_secret_value_ok(const char *value, apr_size_t len);

#endif
