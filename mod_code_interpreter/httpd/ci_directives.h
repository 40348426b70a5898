/*
 * ci_directives.h - the module's directives: the table httpd reads them
 * with (each fills the records of ci_settings.h) and the checks across
 * directives.
 */
#ifndef CI_DIRECTIVES_H
#define CI_DIRECTIVES_H

#include <httpd.h>
#include <http_config.h>
#include "ci_sandbox.h"

extern const command_rec ci_directives[];

/* pre_config: forget the previous generation's CodeInterpreter uses. */
void ci_directives_pre_config(apr_pool_t *pconf);
/* check_config: every CodeInterpreter NAME names a declared sandbox; a
 * shared directory has CodeInterpreterSecret beside it. */
int ci_directives_check(server_rec *s);
/* The sandbox tool NAME of S when a CodeInterpreter location uses it, else
 * NULL (the start-up probe checks only the tools in use). */
const ci_sandbox_def *ci_directives_used(server_rec *s, const char *name);

#endif
