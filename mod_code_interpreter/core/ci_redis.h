/*
 * ci_redis.h - the container directory shared by several nodes, in Redis,
 * through hiredis: the operations of ci_directory_ops (one JSON request in, one
 * JSON answer out) run by one Lua script (core/ci_directory.lua, compiled in),
 * each atomic. The script's header describes its keys, their TTLs and the
 * operations it adds (claim_due, busy); its answers carry "gone": [ids],
 * the containers whose sandboxes must go now.
 *
 * Each thread has its own connection (a hiredis context is not
 * thread-safe), made on first use and again after any failure, with a
 * connect and a command timeout. hiredis 0.14 has no TLS: the connection is
 * plain TCP. Redis Cluster is not supported (the script computes its keys).
 * hiredis writes with write(2): the process must ignore SIGPIPE (httpd
 * does), or a Redis that goes away kills it.
 */
#ifndef CI_REDIS_H
#define CI_REDIS_H

#include <apr_pools.h>
#include <apr_time.h>

typedef struct ci_redis_conf {
    const char *host;
    int port;
    int db;                      /* SELECTed when not 0 */
    const char *user;            /* NULL: AUTH with the password alone */
    const char *password;        /* NULL: no AUTH */
    apr_interval_time_t connect_timeout;
    apr_interval_time_t command_timeout;
} ci_redis_conf;

#define CI_REDIS_CONNECT_TIMEOUT apr_time_from_sec(2)
#define CI_REDIS_COMMAND_TIMEOUT apr_time_from_sec(2)

/* "redis://[user:password@]HOST:PORT[/DB]" (":password@" for a password
 * alone; %XX escapes in user and password; HOST may be [IPv6]) into *OUT,
 * with the default timeouts. NULL, or what is wrong (from P; it never
 * contains the password). */
const char *ci_redis_parse_url(apr_pool_t *p, const char *url, ci_redis_conf *out);

/* Apply request REQ (LEN bytes of JSON) at NOW to the directory C names.
 * 0 with *ANSWER (JSON, from P); -1 with *ERR (from P, no secret in it)
 * when Redis cannot be reached, refuses the credentials or answers an
 * error: this thread's connection is then dropped, and the next call
 * connects again. A kept connection found broken (Redis restarted since)
 * is replaced at once, and the request sent once more on the new one. A -1 after a timeout does not say that the request was
 * not applied: a Redis that was only slow runs it when it reads it. */
int ci_redis_dir(apr_pool_t *p, const ci_redis_conf *c, const char *req, apr_size_t len,
                 apr_time_t now, const char **answer, const char **err);

/* Close this thread's connection, if any (a thread's own is also closed
 * when it exits). */
void ci_redis_close(void);

#endif
