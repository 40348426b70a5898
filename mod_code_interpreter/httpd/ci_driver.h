/*
 * ci_driver.h - the loop driver of an intercepted request: given the first
 * upstream answer, it runs the model's calls in the request's sandbox,
 * sends the follow-ups, and answers the client (JSON or the event stream).
 */
#ifndef CI_DRIVER_H
#define CI_DRIVER_H

#include <util_filter.h>

/* How the first upstream answer came. */
typedef enum {
    CI_FIRST_OK = 0,       /* whole JSON, within the limit */
    CI_FIRST_STREAMED,     /* an event stream, relayed while it came */
    CI_FIRST_TOO_LARGE,    /* over CodeInterpreterMaxBody */
    CI_FIRST_BROKEN        /* cut short */
} ci_first_answer;

typedef struct ci_driver ci_driver;

/* The driver of F's request. RELAYED: the first answer is an event stream
 * that ci_driver_relay passes on while it comes (the client asked for a
 * stream, and so did we). Memory from the request pool. */
ci_driver *ci_driver_create(ap_filter_t *f, int relayed);

/* Bytes of the first answer's event stream. APR_SUCCESS: go on;
 * APR_ECONNABORTED: the client left; APR_EGENERAL: the round failed. Either
 * way ci_driver_finish answers at the end. */
apr_status_t ci_driver_relay(ci_driver *dv, const char *data, apr_size_t len);

/* The first answer is complete (BODY, LEN: whole, for CI_FIRST_OK): run the
 * loop and send the client's answer down F's chain. F is removed. */
apr_status_t ci_driver_finish(ci_driver *dv, ci_first_answer how, const char *body,
                              apr_size_t len);

#endif
