/*
 * ci_output.h - the response side's output filter: it steps aside for any
 * answer that is not a 200 JSON one, else buffers the first upstream answer
 * (bounded) and hands it to the loop driver (ci_driver.h).
 */
#ifndef CI_OUTPUT_H
#define CI_OUTPUT_H

#include <apr_pools.h>

extern const char ci_output_filter_name[];
void ci_output_register_hooks(apr_pool_t *p);

#endif
