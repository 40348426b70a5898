/*
 * ci_redis.c - the shared container directory in Redis (ci_redis.h).
 *
 * A connection lives in thread-specific data, malloc'd (it outlives every
 * pool of the requests that use it), and is freed when its thread exits,
 * when another configuration is asked for, or after any failure: a context
 * that failed once (a timeout in the middle of a reply, a reset) is not
 * trusted with the next command.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <hiredis.h>
#include <apr_sha1.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_json.h"
#include "ci_redis.h"

#define SCHEME "redis://"
#define SHA1_HEX 40
#define ID_BYTES 24               /* a container id's 48 hex digits */
#define LIBRARY_PREFIX "ci_dir_"
/* The source's last line, which runs it as a script; a library registers
 * its function there instead. */
#define SCRIPT_TAIL "return apply(ARGV)\n"

extern const char ci_directory_lua_source[];

/* ---- the URL --------------------------------------------------------------- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* S (N bytes) with its %XX escapes decoded, or NULL when one is broken (or
 * decodes to a NUL). */
static char *unescape(apr_pool_t *p, const char *s, apr_size_t n)
{
    char *out = apr_palloc(p, n + 1), *at = out;
    apr_size_t i;
    for (i = 0; i < n; i++) {
        int hi, lo;
        if (s[i] != '%') {
            *at++ = s[i];
            continue;
        }
        if (n - i < 3)
            return NULL;
        if ((hi = hex_digit(s[i + 1])) < 0 || (lo = hex_digit(s[i + 2])) < 0 ||
            !(hi | lo))
            return NULL;
        *at++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *at = '\0';
    return out;
}

/* The decimal number S (N bytes, digits only) when it is MIN..MAX. */
static int number_of(const char *s, apr_size_t n, long min, long max, long *out)
{
    long v = 0;
    apr_size_t i;
    if (n == 0 || n > 9)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return v >= min && v <= max ? 0 : -1;
}

/* "user:password" or ":password" (N bytes at S). */
static const char *parse_userinfo(apr_pool_t *p, const char *s, apr_size_t n,
                                  ci_redis_conf *out)
{
    const char *colon = memchr(s, ':', n);
    char *user, *password;
    if (!colon)
        return "its credentials must be user:password@ or :password@";
    user = unescape(p, s, (apr_size_t)(colon - s));
    password = unescape(p, colon + 1, n - (apr_size_t)(colon + 1 - s));
    if (!user || !password)
        return "its user or password has a broken %-escape";
    if (!*password)
        return "its password is empty";
    out->user = *user ? user : NULL;
    out->password = password;
    return NULL;
}

/* "HOST:PORT[/DB]" at S. */
static const char *parse_hostport(apr_pool_t *p, const char *s, ci_redis_conf *out)
{
    const char *slash = strchr(s, '/'), *end = slash ? slash : s + strlen(s);
    const char *host = s, *host_end, *colon;
    long port, db = 0;
    if (*s == '[') {                              /* [IPv6]:PORT */
        host = s + 1;
        if (!(host_end = memchr(host, ']', (apr_size_t)(end - host))))
            return "its [IPv6 address] has no closing bracket";
        colon = host_end + 1;
    }
    else {
        colon = host_end = memchr(s, ':', (apr_size_t)(end - s));
        if (!colon)
            return "it has no port (redis://HOST:PORT)";
    }
    if (host_end == host)
        return "it has no host (redis://HOST:PORT)";
    if (*colon != ':' ||
        number_of(colon + 1, (apr_size_t)(end - colon - 1), 1, 65535, &port) != 0)
        return "its port must be a number from 1 to 65535 (redis://HOST:PORT)";
    if (slash && number_of(slash + 1, strlen(slash + 1), 0, 1000000, &db) != 0)
        return "its database must be a number after the port (redis://HOST:PORT/DB)";
    out->host = apr_pstrmemdup(p, host, (apr_size_t)(host_end - host));
    out->port = (int)port;
    out->db = (int)db;
    return NULL;
}

const char *ci_redis_parse_url(apr_pool_t *p, const char *url, ci_redis_conf *out)
{
    const char *rest, *at;
    const char *why;
    memset(out, 0, sizeof(*out));
    out->connect_timeout = CI_REDIS_CONNECT_TIMEOUT;
    out->command_timeout = CI_REDIS_COMMAND_TIMEOUT;
    if (!url || strncmp(url, SCHEME, strlen(SCHEME)))
        return "the directory's URL must start with redis:// (rediss:// and other "
               "schemes are not supported)";
    rest = url + strlen(SCHEME);
    /* The password may hold anything, '@' and '/' included: the host starts
     * after the last '@'. */
    if ((at = strrchr(rest, '@')) &&
        (why = parse_userinfo(p, rest, (apr_size_t)(at - rest), out)))
        return apr_pstrcat(p, "the directory's URL is wrong: ", why, NULL);
    if ((why = parse_hostport(p, at ? at + 1 : rest, out)))
        return apr_pstrcat(p, "the directory's URL is wrong: ", why, NULL);
    return NULL;
}

/* ---- this thread's connection ------------------------------------------------ */

typedef struct conn {
    redisContext *ctx;
    char *made_for;               /* the configuration it was made with: it
                                     holds the password, wiped when freed */
    apr_size_t made_for_len;
    char sha[SHA1_HEX + 1];       /* the script's, loaded on this connection */
    char fn[sizeof(LIBRARY_PREFIX) + SHA1_HEX];   /* the library's and its function's
                                     name: LIBRARY_PREFIX and the source's SHA1 */
    int functions;                /* the library is loaded: FCALL, not EVALSHA */
} conn;

static pthread_key_t conn_key;
static pthread_once_t conn_once = PTHREAD_ONCE_INIT;
static int conn_key_made;

static void conn_free(void *data)
{
    conn *k = data;
    if (!k)
        return;
    if (k->ctx)
        redisFree(k->ctx);
    if (k->made_for) {
        memset(k->made_for, 0, k->made_for_len);
        free(k->made_for);
    }
    free(k);
}

static void make_key(void)
{
    conn_key_made = pthread_key_create(&conn_key, conn_free) == 0;
}

void ci_redis_close(void)
{
    pthread_once(&conn_once, make_key);
    if (!conn_key_made)
        return;
    conn_free(pthread_getspecific(conn_key));
    pthread_setspecific(conn_key, NULL);
}

static struct timeval timeval_of(apr_interval_time_t t)
{
    struct timeval tv;
    tv.tv_sec = (time_t)apr_time_sec(t);
    tv.tv_usec = (suseconds_t)apr_time_usec(t);
    return tv;
}

/* Why reply R (to WHAT on CTX) is not one of type TYPE; NULL when it is. */
static const char *check(apr_pool_t *p, redisContext *ctx, const redisReply *r, int type,
                         const char *what)
{
    if (!r && ctx->err == REDIS_ERR_IO && !strcmp(ctx->errstr, strerror(EAGAIN)))
        return apr_psprintf(p, "cannot be reached (%s): no answer within the timeout",
                            what);
    if (!r)
        return apr_psprintf(p, "cannot be reached (%s): %s", what,
                            ctx->errstr[0] ? ctx->errstr : "no answer");
    if (r->type == REDIS_REPLY_ERROR)
        return apr_psprintf(p, "answered %s with an error: %.*s", what, (int)r->len,
                            r->str);
    if (r->type != type)
        return apr_psprintf(p, "answered %s with a reply of another type", what);
    return NULL;
}

/* Send ARGV (C strings); the reply, of type TYPE, goes to *OUT (the caller
 * frees it, whatever it is). NULL, or why not. */
static const char *command(apr_pool_t *p, redisContext *ctx, int argc, const char **argv,
                           int type, const char *what, redisReply **out)
{
    *out = redisCommandArgv(ctx, argc, argv, NULL);
    return check(p, ctx, *out, type, what);
}

/* ARGV (C strings) sent; only whether it went well matters. */
static const char *command_ok(apr_pool_t *p, redisContext *ctx, int argc,
                              const char **argv, const char *what)
{
    redisReply *r;
    const char *why = command(p, ctx, argc, argv, REDIS_REPLY_STATUS, what, &r);
    if (r)
        freeReplyObject(r);
    return why;
}

static const char *authenticate(apr_pool_t *p, const ci_redis_conf *c, redisContext *ctx)
{
    const char *with_user[] = { "AUTH", c->user, c->password };
    const char *alone[] = { "AUTH", c->password };
    if (!c->password)
        return NULL;
    return c->user ? command_ok(p, ctx, 3, with_user, "AUTH")
                   : command_ok(p, ctx, 2, alone, "AUTH");
}

static const char *select_db(apr_pool_t *p, const ci_redis_conf *c, redisContext *ctx)
{
    const char *argv[] = { "SELECT", apr_itoa(p, c->db) };
    return c->db ? command_ok(p, ctx, 2, argv, "SELECT") : NULL;
}

static const char *load_script(apr_pool_t *p, conn *k)
{
    const char *argv[] = { "SCRIPT", "LOAD", ci_directory_lua_source };
    redisReply *r;
    const char *why = command(p, k->ctx, 3, argv, REDIS_REPLY_STRING, "SCRIPT LOAD",
                              &r);
    if (!why && r->len != SHA1_HEX)
        why = "answered SCRIPT LOAD with something else than a SHA1";
    if (!why)
        memcpy(k->sha, r->str, SHA1_HEX + 1);
    if (r)
        freeReplyObject(r);
    return why;
}

/* LIBRARY_PREFIX and the source's SHA1, into K->fn. */
static void name_function(conn *k)
{
    unsigned char d[APR_SHA1_DIGESTSIZE];
    apr_sha1_ctx_t ctx;
    char *at = k->fn + sizeof(LIBRARY_PREFIX) - 1;
    int i;
    apr_sha1_init(&ctx);
    apr_sha1_update(&ctx, ci_directory_lua_source,
                    (unsigned int)strlen(ci_directory_lua_source));
    apr_sha1_final(d, &ctx);
    memcpy(k->fn, LIBRARY_PREFIX, sizeof(LIBRARY_PREFIX) - 1);
    for (i = 0; i < APR_SHA1_DIGESTSIZE; i++, at += 2)
        apr_snprintf(at, 3, "%02x", d[i]);
}

/* Whether the source ends as a script does: only then can it be made a
 * library (else it runs as a script). */
static int ends_as_script(void)
{
    apr_size_t n = strlen(ci_directory_lua_source), tail = sizeof(SCRIPT_TAIL) - 1;
    return n >= tail && !strcmp(ci_directory_lua_source + n - tail, SCRIPT_TAIL);
}

/* The source as a function library named K->fn, or NULL when it cannot be
 * one. */
static const char *library_source(apr_pool_t *p, const conn *k)
{
    apr_size_t n = strlen(ci_directory_lua_source) - (sizeof(SCRIPT_TAIL) - 1);
    if (!ends_as_script())
        return NULL;
    return apr_psprintf(p, "#!lua name=%s\n%.*sredis.register_function('%s', "
                        "function(keys, args) return apply(args) end)\n", k->fn,
                        (int)n, ci_directory_lua_source, k->fn);
}

/* The directory loaded into K: as a function library (its definitions made
 * once, not at every call) where Redis has functions and the ACL allows
 * them, else as a script. Loaded already (by another connection or node of
 * this version) is as good; another error answer to FUNCTION LOAD (an
 * unknown command before 7.0, NOPERM) means a script; a broken connection,
 * a failure. */
static const char *load_directory(apr_pool_t *p, conn *k)
{
    const char *lib = library_source(p, k);
    const char *argv[] = { "FUNCTION", "LOAD", lib };
    redisReply *r;
    const char *why;
    k->functions = 0;
    if (!lib)
        return load_script(p, k);
    r = redisCommandArgv(k->ctx, 3, argv, NULL);
    if (r && r->type == REDIS_REPLY_ERROR && !strstr(r->str, "already exists")) {
        freeReplyObject(r);
        return load_script(p, k);
    }
    why = r && r->type == REDIS_REPLY_ERROR ? NULL
        : check(p, k->ctx, r, REDIS_REPLY_STRING, "FUNCTION LOAD");
    k->functions = !why;
    if (r)
        freeReplyObject(r);
    return why;
}

/* Connect, authenticate, select and load into K. */
static const char *open_conn(apr_pool_t *p, const ci_redis_conf *c, conn *k)
{
    const char *why;
    k->ctx = redisConnectWithTimeout(c->host, c->port, timeval_of(c->connect_timeout));
    if (!k->ctx)
        return "cannot be reached: no memory for a connection";
    if (k->ctx->err)
        return apr_psprintf(p, "cannot be reached: %s", k->ctx->errstr);
    if (redisSetTimeout(k->ctx, timeval_of(c->command_timeout)) != REDIS_OK)
        return apr_psprintf(p, "cannot be reached: %s", k->ctx->errstr);
    if ((why = authenticate(p, c, k->ctx)) || (why = select_db(p, c, k->ctx)))
        return why;
    /* The library is most often there already (a name per version of the
     * source): called at once, and loaded only when Redis says it is not
     * (run()), since loading compiles it (0.8 ms of Redis' time, measured). */
    name_function(k);
    k->functions = ends_as_script();
    return k->functions ? NULL : load_script(p, k);
}

/* What a connection is made for: another configuration needs another. */
static const char *fingerprint(apr_pool_t *p, const ci_redis_conf *c)
{
    return apr_psprintf(p, "%s|%d|%d|%d:%s|%d:%s|%" APR_TIME_T_FMT "|%" APR_TIME_T_FMT,
                        c->host, c->port, c->db, !!c->user, c->user ? c->user : "",
                        !!c->password, c->password ? c->password : "",
                        c->connect_timeout, c->command_timeout);
}

/* This thread's connection for C: the one it has, or a new one (*FRESH). */
static conn *connection(apr_pool_t *p, const ci_redis_conf *c, int *fresh,
                        const char **why)
{
    const char *made_for = fingerprint(p, c);
    conn *k;
    pthread_once(&conn_once, make_key);
    if (!conn_key_made) {
        *why = "cannot be used: no thread-specific data for a connection";
        return NULL;
    }
    k = pthread_getspecific(conn_key);
    *fresh = 0;
    if (k && !strcmp(k->made_for, made_for))
        return k;
    *fresh = 1;
    ci_redis_close();
    if (!(k = calloc(1, sizeof(*k))) || !(k->made_for = strdup(made_for))) {
        free(k);
        *why = "cannot be used: no memory for a connection";
        return NULL;
    }
    k->made_for_len = strlen(made_for);
    pthread_setspecific(conn_key, k);             /* freed by ci_redis_close */
    *why = open_conn(p, c, k);
    return *why ? NULL : k;
}

/* Whether R (to K's call) says Redis does not have the directory: its
 * script (a restart, SCRIPT FLUSH), or its function (never loaded, FUNCTION
 * FLUSH, a restart without persistence, or no functions at all: an unknown
 * command before 7.0, an ACL that denies FCALL). */
static int is_unloaded(const conn *k, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return 0;
    if (!k->functions)
        return !strncmp(r->str, "NOSCRIPT", 8);
    return !strncmp(r->str, "ERR Function not found", 22) ||
           !strncmp(r->str, "ERR unknown command", 19) || !strncmp(r->str, "NOPERM", 6);
}

/* ARGV[2..5] (LENS) sent to the directory's function, or script. */
static redisReply *call(conn *k, const char **argv, size_t *lens)
{
    argv[0] = k->functions ? "FCALL" : "EVALSHA";
    argv[1] = k->functions ? k->fn : k->sha;
    lens[0] = strlen(argv[0]);
    lens[1] = strlen(argv[1]);
    return redisCommandArgv(k->ctx, 6, argv, lens);
}

/* The directory on REQ: its answer into *ANSWER. A Redis that lost it gets
 * it again, once. */
static const char *run(apr_pool_t *p, conn *k, const char *req, apr_size_t len,
                       apr_time_t now, const char **answer)
{
    char entropy[2 * ID_BYTES + 1];
    const char *when = apr_psprintf(p, "%" APR_TIME_T_FMT, now);
    const char *argv[] = { NULL, NULL, "0", req, when, entropy };
    size_t lens[6];
    redisReply *r;
    const char *why;
    int i;
    ci_random_hex(entropy, ID_BYTES);
    for (i = 2; i < 6; i++)
        lens[i] = strlen(argv[i]);
    lens[3] = len;
    r = call(k, argv, lens);
    if (is_unloaded(k, r)) {
        freeReplyObject(r);
        if ((why = load_directory(p, k)))
            return why;
        r = call(k, argv, lens);
    }
    why = check(p, k->ctx, r, REDIS_REPLY_STRING, "the directory's function");
    if (!why)
        *answer = apr_pstrmemdup(p, r->str, r->len);
    if (r)
        freeReplyObject(r);
    return why;
}

/* K's connection is broken (closed, reset), as a kept connection is after
 * Redis restarted: not a timeout (the command may still be applied), not
 * an error answer. */
static int connection_lost(const conn *k)
{
    return k->ctx->err && !(k->ctx->err == REDIS_ERR_IO &&
                            !strcmp(k->ctx->errstr, strerror(EAGAIN)));
}

int ci_redis_dir(apr_pool_t *p, const ci_redis_conf *c, const char *req, apr_size_t len,
                 apr_time_t now, const char **answer, const char **err)
{
    const char *why = NULL;
    int fresh = 0;
    conn *k = connection(p, c, &fresh, &why);
    *answer = NULL;
    if (k)
        why = run(p, k, req, len, now, answer);
    /* A kept connection found broken: once more on a new one. */
    if (why && k && !fresh && connection_lost(k)) {
        ci_redis_close();
        if ((k = connection(p, c, &fresh, &why)))
            why = run(p, k, req, len, now, answer);
    }
    if (!why)
        return 0;
    *err = apr_psprintf(p, "the container directory (Redis at %s:%d) %s", c->host,
                        c->port, why);
    ci_redis_close();
    return -1;
}
