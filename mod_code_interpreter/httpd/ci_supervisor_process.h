/*
 * ci_supervisor_process.h - the local sandbox supervisor's life in httpd: forked by the
 * parent, kept across graceful restarts, respawned when it dies, stopped
 * when httpd stops. The supervisor itself is supervisor/ci_supervisor.c.
 */
#ifndef CI_SUPERVISOR_PROCESS_H
#define CI_SUPERVISOR_PROCESS_H

#include <httpd.h>

/* check_config: the supervisor cannot run bubblewrap inside a ChrootDir. */
int ci_supervisor_process_check_config(apr_pool_t *ptemp, server_rec *s);
/* Parent, real post_config pass: start the supervisor or keep the running
 * one (and hand it this configuration's warm pools). */
int ci_supervisor_process_post_config(apr_pool_t *pconf, apr_pool_t *ptemp, server_rec *s);

#endif
