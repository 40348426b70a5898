/*
 * files_local.h - the local provider's container-file entries (files_local.c;
 * ci_sandbox.h says what each does).
 */
#ifndef FILES_LOCAL_H
#define FILES_LOCAL_H

#include "ci_sandbox.h"

ci_file_status ci_local_files_list(apr_pool_t *p, const ci_file_target *t,
                                   apr_array_header_t **files, const char **err);
ci_file_status ci_local_file_get(apr_pool_t *p, const ci_file_target *t,
                                 const char *name, apr_int64_t max,
                                 const ci_file_sink *sink, const char **err);
ci_file_status ci_local_file_delete(apr_pool_t *p, const ci_file_target *t,
                                    const char *name, const char **err);
ci_file_status ci_local_file_put(apr_pool_t *p, const ci_file_target *t,
                                 const char *name, const ci_file_limits *limits,
                                 const ci_file_source *src, const char **err);

#endif
