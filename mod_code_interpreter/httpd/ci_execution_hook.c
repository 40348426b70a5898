/*
 * ci_execution_hook.c - the execution hook of the public interface
 * (include/mod_code_interpreter.h): every function another module (or the
 * audit log) registers is run once per execution, by the driver. Its own
 * file, below the driver and the module file alike.
 */
#include <httpd.h>
#include "mod_code_interpreter.h"

APR_IMPLEMENT_OPTIONAL_HOOK_RUN_ALL(ci, CI, int, execution,
                                    (request_rec *r, const ci_execution *e),
                                    (r, e), OK, DECLINED)
