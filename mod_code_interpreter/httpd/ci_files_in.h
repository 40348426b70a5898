/*
 * ci_files_in.h - files into containers: uploads (a multipart body read as
 * it arrives), files of the upstream's Files API (file_ids), the sandbox a
 * container needs to hold them, and the answers a refused file gets.
 *
 * Nothing is held whole in the child: an upload goes from the request's
 * body to the sandbox in pieces; a file of the Files API is spooled to an
 * unlinked temporary file first (the upstream and the sandbox run at their
 * own speeds; memory stays flat), then sent on.
 */
#ifndef CI_FILES_IN_H
#define CI_FILES_IN_H

#include <httpd.h>
#include <json-c/json.h>
#include "ci_cfiles.h"
#include "ci_directory.h"
#include "ci_settings.h"
#include "ci_error.h"
#include "ci_filesapi.h"
#include "ci_sandbox.h"

/* The file objects of the upstream file ids IDS (at the Files API beside
 * ci_loc_upstream_url) (a JSON array; PARAM names
 * it in errors), checked with R's credentials: OK with *FILES (an array of
 * ci_filesapi_file), or an HTTP status with ERR (400 naming an unknown id,
 * or an upstream without a Files API; 502 when it cannot be read). */
int ci_files_check_ids(request_rec *r, const ci_loc_conf *d, json_object *ids,
                       const char *param, apr_array_header_t **files, ci_error *err);

/* Where container C's files go (its tool in its tier, its sandbox's
 * handle); with START, its sandbox is started first when it has none (and
 * its handle recorded for OWNER). A remote sandbox with a handle is kept
 * alive from now (any file operation is a use). OK, or an HTTP status with
 * ERR (501 for a provider without files). */
int ci_files_target(request_rec *r, const char *owner, const ci_container *c, int start,
                    ci_file_target *t, ci_error *err);

/* Put the upstream file F into T (within T's tool's limits): OK with *OUT
 * (the stored file, from P), or an HTTP status with ERR. */
int ci_files_put_upstream(request_rec *r, const ci_loc_conf *d, const ci_file_target *t,
                          const ci_filesapi_file *f, ci_cfile *out, ci_error *err);

/* Put the "file" part of R's multipart/form-data body into T: OK with *OUT,
 * or an HTTP status with ERR (400 for a malformed body or a missing part). */
int ci_files_put_multipart(request_rec *r, const ci_file_target *t, ci_cfile *out,
                           ci_error *err);

/* Put the upstream files FILES into container C of OWNER, starting its
 * sandbox (*HANDLE: its new handle, unsealed, when it got one; else left):
 * OK, or an HTTP status with ERR (the files before the failing one stay). */
int ci_files_provision(request_rec *r, const ci_loc_conf *d, const char *owner,
                       const ci_container *c, const apr_array_header_t *files,
                       const char **handle, ci_error *err);

#endif
