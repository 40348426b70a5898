/*
 * ci_input.h - the request side: the fixups hook that reads a POST's JSON
 * body once, decides, rewrites it when it carries the code_interpreter tool,
 * and the replay input filter that hands it to mod_proxy.
 */
#ifndef CI_INPUT_H
#define CI_INPUT_H

#include <apr_pools.h>

void ci_input_register_hooks(apr_pool_t *p);

#endif
