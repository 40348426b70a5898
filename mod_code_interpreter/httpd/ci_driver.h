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
    CI_FIRST_OK = 0,       /* whole, within the limit */
    CI_FIRST_TOO_LARGE,    /* over CodeInterpreterMaxBody */
    CI_FIRST_BROKEN        /* cut short */
} ci_first_answer;

/* Run the loop for F's request from the first answer (BODY, LEN) and send
 * the client's answer down F's chain. The filter F is removed. */
apr_status_t ci_drive(ap_filter_t *f, ci_first_answer how, const char *body,
                      apr_size_t len);

#endif
