/*
 * ci_module.h - the module record, for the glue files' use of
 * ap_get_module_config and their log lines (APLOG_USE_MODULE).
 */
#ifndef CI_MODULE_H
#define CI_MODULE_H

#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include "ci_declare.h"

extern CI_DECLARE_DATA module AP_MODULE_DECLARE_DATA code_interpreter_module;
#ifndef CI_MODULE_MAIN
APLOG_USE_MODULE(code_interpreter);
#endif

#endif
