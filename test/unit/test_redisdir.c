/*
 * test_redisdir.c - the container directory in Redis (ci_redis.h,
 * core/ci_directory.lua) against a real redis-server, started by the caller
 * (test/test_redisdir_unit.py):
 *
 *   REDIS_PORT        a server without a password (flushed by every test)
 *   REDIS_AUTH_PORT   one with requirepass AUTH_PASSWORD and the ACL user
 *                     AUTH_USER / AUTH_USER_PASSWORD
 *   REDIS_SERVER      the redis-server binary, REDIS_SPARE_PORT a free port:
 *                     the outage test runs a server of its own there, stops,
 *                     kills and restarts it
 *
 * Most requests are asked of both directories, the one-node one
 * (ci_dirops_apply on a ci_directory) and Redis, and the answers must be
 * the same, key for key: Redis' adds only "node" (and "auth") to a container and
 * "gone" (what ci_dirops_apply hands back in an array).
 *
 * Usage: test_redisdir [--list | NAME-PATTERN]
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <pthread.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <cmocka.h>

#include <hiredis.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_json.h"
#include "ci_redis.h"
#include "ci_directory_ops.h"

#define T0 apr_time_from_sec(1700000000)
#define SEC(n) apr_time_from_sec(n)
#define ID_A "cntr_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define AUTH_PASSWORD "pw-for-the-default-user-7f3a"
#define AUTH_USER "ci_node"
#define AUTH_USER_PASSWORD "pw-for-ci-node-91c2"

typedef struct fx {
    apr_pool_t *p;
    ci_directory *d;             /* the one-node directory, asked alike */
    apr_hash_t *busy;            /* its busy containers (its probe's set) */
    ci_redis_conf conf;
} fx;

/* The one-node directory's busy probe: the ids in the fixture's set. */
static int in_busy_set(void *baton, const ci_container *c)
{
    return apr_hash_get(baton, c->id, APR_HASH_KEY_STRING) != NULL;
}

/* ---- helpers ------------------------------------------------------------------- */

static const char *env_port(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        fail_msg("%s is not set (run test/test_redisdir_unit.py)", name);
    return v;
}

static ci_redis_conf conf_of(apr_pool_t *p, const char *url)
{
    ci_redis_conf c;
    const char *why = ci_redis_parse_url(p, url, &c);
    if (why)
        fail_msg("%s: %s", url, why);
    return c;
}

/* A command on its own connection (not the library's): setting up and
 * looking behind the directory. The integer or status reply, as a number. */
static long long admin(const char *port, const char *fmt, ...)
{
    struct timeval tv = { 2, 0 };
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
    redisReply *r;
    long long v;
    va_list ap;
    assert_non_null(ctx);
    assert_int_equal(ctx->err, 0);
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s: %s", fmt, r->str);
    v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof(*f));
    ci_directory_limits lim = { 0, 0, SEC(3600), 1 << 20, 0, 0, 0 };
    if (!f || apr_pool_create(&f->p, NULL) != APR_SUCCESS)
        return -1;
    f->d = ci_directory_create(f->p, &lim);
    f->busy = apr_hash_make(f->p);
    ci_directory_set_busy_probe(f->d, in_busy_set, f->busy);
    f->conf = conf_of(f->p, apr_pstrcat(f->p, "redis://127.0.0.1:",
                                        env_port("REDIS_PORT"), NULL));
    admin(env_port("REDIS_PORT"), "FLUSHALL");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    ci_redis_close();
    apr_pool_destroy(f->p);
    free(f);
    return 0;
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
static int teardown_spare(void **state);
#define TEST_SPARE(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown_spare)

static json_object *parse(apr_pool_t *p, const char *text)
{
    const char *err = NULL;
    json_object *o = ci_json_parse(p, text, strlen(text), &err);
    if (!o)
        fail_msg("not JSON (%s): %s", err, text);
    return o;
}

/* REQ asked of Redis through configuration C (it must answer). */
static json_object *ask_redis_as(fx *f, const ci_redis_conf *c, const char *req,
                                 apr_time_t now)
{
    const char *answer = NULL, *err = NULL;
    if (ci_redis_dir(f->p, c, req, strlen(req), now, &answer, &err) != 0)
        fail_msg("%s: %s", req, err);
    return parse(f->p, answer);
}

/* REQ asked of Redis (it must answer). */
static json_object *ask_redis(fx *f, const char *req, apr_time_t now)
{
    return ask_redis_as(f, &f->conf, req, now);
}

/* Container C without what only Redis' records carry: "node", and the
 * nodes' authenticator ("auth"; "owner" in a claim). */
static void strip_shared(json_object *c)
{
    json_object_object_del(c, "node");
    json_object_object_del(c, "auth");
    json_object_object_del(c, "owner");
}

/* The containers in ANS (an answer) without what only Redis' carry. */
static void strip_node(json_object *ans)
{
    static const char *const one[] = { "container", "evicted" };
    static const char *const many[] = { "data", "containers" };
    size_t i, j;
    for (i = 0; i < 2; i++) {
        json_object *c = ci_json_get(ans, one[i], json_type_object);
        json_object *a = ci_json_get(ans, many[i], json_type_array);
        if (c)
            strip_shared(c);
        for (j = 0; a && j < json_object_array_length(a); j++)
            strip_shared(json_object_array_get_idx(a, j));
    }
}

/* REQ asked of both directories: the same answer, and the same ids gone.
 * Redis' answer is returned. */
static json_object *both(fx *f, const char *req, apr_time_t now)
{
    apr_array_header_t *gone = apr_array_make(f->p, 2, sizeof(const char *));
    json_object *r = ask_redis(f, req, now), *rc = ci_json_own(f->p, ci_json_copy(r));
    json_object *l = parse(f->p, ci_dirops_apply(f->d, f->p, req, strlen(req), now, gone));
    json_object *lgone = ci_json_own(f->p, json_object_new_array());
    int i;
    for (i = 0; i < gone->nelts; i++)
        json_object_array_add(lgone, json_object_new_string(APR_ARRAY_IDX(gone, i,
                                                                          const char *)));
    if (!json_object_equal(ci_json_get(rc, "gone", json_type_array), lgone))
        fail_msg("%s: gone %s in Redis, %s here", req,
                 ci_json_text(ci_json_get(rc, "gone", json_type_array), NULL),
                 ci_json_text(lgone, NULL));
    json_object_object_del(rc, "gone");
    json_object_object_del(l, "gone");
    strip_node(rc);
    if (!json_object_equal(rc, l))
        fail_msg("%s:\n  Redis %s\n  here  %s", req, ci_json_text(rc, NULL),
                 ci_json_text(l, NULL));
    return r;
}

static const char *status(json_object *o)
{
    return ci_json_str(o, "status");
}

static json_object *member(json_object *o, const char *key)
{
    return ci_json_get(o, key, json_type_object);
}

static int gone_count(json_object *o)
{
    return (int)json_object_array_length(ci_json_get(o, "gone", json_type_array));
}

/* A container id made of the digit string N. */
static const char *id_of(apr_pool_t *p, int n)
{
    return apr_psprintf(p, "cntr_%048d", n);
}

static void create_a(fx *f)
{
    json_object *o = both(f, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\","
                          "\"id\":\"" ID_A "\",\"name\":\"n\",\"tool\":\"local\","
                          "\"idle\":60}", T0);
    ci_container c;
    assert_string_equal(status(o), "ok");
    assert_int_equal(ci_dirops_container_from(f->p, member(o, "container"), &c), 0);
    assert_string_equal(c.id, ID_A);
    assert_string_equal(c.node, "n1");
    assert_true(c.created_at == T0);
}

/* ci_directory_expire here, claim_due in Redis: the same ids. */
static void expire_both(fx *f, apr_time_t now, int expected)
{
    apr_array_header_t *here = ci_directory_expire(f->d, now, f->p);
    json_object *o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n1\"}", now);
    json_object *claimed = ci_json_get(o, "containers", json_type_array);
    int i;
    assert_string_equal(status(o), "ok");
    assert_int_equal(here->nelts, expected);
    assert_int_equal(json_object_array_length(claimed), expected);
    assert_int_equal(gone_count(o), expected);
    for (i = 0; i < expected; i++)
        assert_string_equal(ci_json_str(json_object_array_get_idx(claimed, i), "id"),
                            APR_ARRAY_IDX(here, i, ci_container *)->id);
}

/* ---- ci_directory_ops's cases ------------------------------------------------------------- */

static void test_create_get_owners_apart(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    o = both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(member(o, "container"), "memory_limit"), "1g");
    o = both(f, "{\"op\":\"get\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "not_found");
    assert_null(member(o, "container"));
    /* the same id twice is refused */
    o = both(f, "{\"op\":\"create\",\"owner\":\"own_b\",\"node\":\"n1\",\"id\":\"" ID_A
             "\",\"tool\":\"local\"}", T0);
    assert_string_equal(status(o), "not_found");
    /* no owner, no tool, no such op, no JSON */
    assert_string_equal(status(both(f, "{\"op\":\"get\",\"id\":\"" ID_A "\"}", T0)),
                        "no_owner");
    assert_string_equal(status(both(f, "{\"op\":\"create\",\"owner\":\"o\"}", T0)),
                        "bad_request");
    assert_string_equal(status(both(f, "{\"op\":\"frobnicate\",\"owner\":\"o\"}", T0)),
                        "bad_request");
    assert_string_equal(status(both(f, "nonsense", T0)), "bad_request");
    /* Redis' create names its node */
    assert_string_equal(status(ask_redis(f, "{\"op\":\"create\",\"owner\":\"o\","
                                            "\"tool\":\"local\"}", T0)), "bad_request");
}

static void test_touch_and_expiry(void **state)
{
    fx *f = *state;
    create_a(f);
    both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\",\"touch\":true}",
         T0 + SEC(50));
    expire_both(f, T0 + SEC(100), 0);
    expire_both(f, T0 + SEC(111), 1);
    assert_string_equal(status(both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                       ID_A "\"}", T0)), "expired");
}

static void test_delete_names_what_goes(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    both(f, "{\"op\":\"set_handle\",\"owner\":\"own_a\",\"id\":\"" ID_A
         "\",\"handle\":\"h1\"}", T0);
    o = both(f, "{\"op\":\"delete\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "not_found");
    assert_int_equal(gone_count(o), 0);
    o = both(f, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(member(o, "container"), "handle"), "h1");
    assert_int_equal(gone_count(o), 1);
    /* deleted: not listed, not deleted twice */
    o = both(f, "{\"op\":\"list\",\"owner\":\"own_a\"}", T0);
    assert_int_equal(json_object_array_length(ci_json_get(o, "data", json_type_array)), 0);
    o = both(f, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "expired");
    assert_int_equal(gone_count(o), 0);
}

static void test_eviction_names_the_owners_own(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    o = both(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\","
                             "\"id\":\"%s\",\"tool\":\"local\",\"limits\":{\"node\":5,"
                             "\"owner\":1,\"retention\":60}}", id_of(f->p, 1)), T0 + 1);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(member(o, "evicted"), "id"), ID_A);
    assert_string_equal(ci_json_str(member(o, "evicted"), "status"), "expired");
    assert_int_equal(gone_count(o), 1);
    o = both(f, "{\"op\":\"create\",\"owner\":\"own_b\",\"node\":\"n1\",\"tool\":\"local\","
             "\"limits\":{\"node\":1,\"owner\":1,\"retention\":60}}", T0 + 2);
    assert_string_equal(status(o), "node_full");
    assert_int_equal(gone_count(o), 0);
}

static void test_finish_response_recall(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    o = both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
             "\",\"response_id\":\"resp_1\",\"pending\":\"[1]\",\"items\":["
             "{\"id\":\"ci_1\",\"text\":\"[2]\"},{\"id\":\"msg_1\",\"text\":\"[3]\"}]}",
             T0 + 1);
    assert_string_equal(status(o), "ok");
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}", T0);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_b\",\"response_id\":\"resp_1\"}", T0);
    assert_string_equal(status(o), "not_found");
    o = both(f, "{\"op\":\"recall\",\"owner\":\"own_a\",\"item_id\":\"ci_1\"}", T0);
    assert_string_equal(ci_json_str(o, "text"), "[2]");
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(status(both(f, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                       "\"item_id\":\"msg_1\"}", T0)), "not_found");
    assert_string_equal(status(both(f, "{\"op\":\"recall\",\"owner\":\"own_b\","
                                       "\"item_id\":\"ci_1\"}", T0)), "not_found");
    assert_string_equal(status(both(f, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                       "\"item_id\":\"pending:resp_1\"}", T0)),
                        "not_found");
    /* finish touched it; a response mapped again leads to the newest */
    o = both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0);
    assert_true(json_object_get_int64(ci_json_get(member(o, "container"),
                                                  "last_active_at", json_type_int)) ==
                T0 + 1);
    both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
         "\",\"response_id\":\"resp_1\",\"items\":[{\"id\":\"ci_1\",\"text\":\"[4]\"}]}",
         T0 + 2);
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}", T0);
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    assert_string_equal(ci_json_str(both(f, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                            "\"item_id\":\"ci_1\"}", T0), "text"), "[4]");
}

static apr_int64_t last_active(json_object *o);
static const char *create_req(fx *f, const char *owner, int n, apr_uint64_t memory,
                              const char *limits);

/* A conversation's turns, in both directories alike: the conversation
 * leads to the container its last turn used, for its owner only, with
 * what its last turn left owed; a turn in another container moves it, a
 * turn owing nothing clears what it owed; with touch, the container as
 * "get" answers it. */
static void test_finish_conversation(void **state)
{
    fx *f = *state;
    const char *mine = "{\"op\":\"conversation\",\"owner\":\"own_a\","
                       "\"conversation\":\"conv_1\"}";
    const char *theirs = "{\"op\":\"conversation\",\"owner\":\"own_b\","
                         "\"conversation\":\"conv_1\"}";
    json_object *o;
    create_a(f);
    both(f, create_req(f, "own_b", 1, 0, "{}"), T0);
    both(f, create_req(f, "own_a", 2, 0, "{}"), T0);
    assert_string_equal(status(both(f, mine, T0)), "not_found");
    o = both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
             "\",\"response_id\":\"resp_1\",\"conversation\":\"conv_1\",\"pending\":"
             "\"[1]\",\"items\":[{\"id\":\"ci_1\",\"text\":\"[2]\"}]}", T0 + 1);
    assert_string_equal(status(o), "ok");
    o = both(f, mine, T0 + 2);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    assert_string_equal(ci_json_str(both(f, "{\"op\":\"response\",\"owner\":\"own_a\","
                                            "\"response_id\":\"resp_1\"}", T0 + 2),
                                    "pending"), "[1]");
    /* another owner: none, cannot write it, and has its own */
    assert_string_equal(status(both(f, theirs, T0 + 2)), "not_found");
    assert_string_equal(status(both(f, "{\"op\":\"finish\",\"owner\":\"own_b\","
                                       "\"container_id\":\"" ID_A "\",\"conversation\":"
                                       "\"conv_1\"}", T0 + 3)), "not_found");
    both(f, apr_psprintf(f->p, "{\"op\":\"finish\",\"owner\":\"own_b\",\"container_id\":"
                               "\"%s\",\"conversation\":\"conv_1\"}", id_of(f->p, 1)),
         T0 + 3);
    assert_string_equal(ci_json_str(both(f, theirs, T0 + 4), "container_id"),
                        id_of(f->p, 1));
    assert_string_equal(ci_json_str(both(f, mine, T0 + 4), "container_id"), ID_A);
    /* the next turn goes on in another container, owed something new;
     * then one owing nothing */
    both(f, apr_psprintf(f->p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":"
                               "\"%s\",\"conversation\":\"conv_1\",\"pending\":\"[3]\"}",
                         id_of(f->p, 2)), T0 + 5);
    o = both(f, mine, T0 + 6);
    assert_string_equal(ci_json_str(o, "container_id"), id_of(f->p, 2));
    assert_string_equal(ci_json_str(o, "pending"), "[3]");
    both(f, apr_psprintf(f->p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":"
                               "\"%s\",\"conversation\":\"conv_1\"}", id_of(f->p, 2)),
         T0 + 7);
    o = both(f, mine, T0 + 8);
    assert_null(ci_json_str(o, "pending"));
    assert_int_equal(admin(env_port("REDIS_PORT"), "EXISTS ci:i:conversation-pending:own_a:"
                                                   "conv_1"), 0);
    /* touch: as get, touched and held */
    o = both(f, "{\"op\":\"conversation\",\"owner\":\"own_a\",\"conversation\":"
             "\"conv_1\",\"touch\":true,\"hold\":100}", T0 + 9);
    assert_string_equal(ci_json_str(o, "container_status"), "ok");
    assert_true(last_active(o) == T0 + 9);
    /* its old container no longer counts the conversation among its memos */
    assert_int_equal(admin(env_port("REDIS_PORT"), "SISMEMBER ci:m:%s ci:v:own_a:conv_1",
                           ID_A), 0);
}

/* Container 1 of own_a, in directories that keep 4096 bytes of items: a
 * text of 1000 bytes (from the fixture's pool) to fill them with. */
static const char *bounded_to_4k(fx *f)
{
    char *text = apr_palloc(f->p, 1001);
    memset(text, 'x', 1000);
    text[1000] = '\0';
    both(f, create_req(f, "own_a", 1, 0, "{\"items\":4096}"), T0);
    return text;
}

/* The outputs a conversation is owed count against the items' bound as in
 * the one-node directory, byte for byte, and go oldest first with them. */
static void test_conversation_pending_is_bounded_like_items(void **state)
{
    fx *f = *state;
    const char *text = bounded_to_4k(f);
    int i;
    for (i = 0; i < 6; i++)
        both(f, apr_psprintf(f->p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":"
                                   "\"%s\",\"conversation\":\"conv_%d\",\"pending\":"
                                   "\"%s\",\"limits\":{\"items\":4096}}",
                             id_of(f->p, 1), i, text), T0);
    for (i = 0; i < 6; i++) {
        json_object *o = both(f, apr_psprintf(f->p, "{\"op\":\"conversation\",\"owner\":"
                                                    "\"own_a\",\"conversation\":"
                                                    "\"conv_%d\"}", i), T0);
        assert_string_equal(status(o), "ok");
        if (i < 3)
            assert_null(ci_json_str(o, "pending"));
        else
            assert_string_equal(ci_json_str(o, "pending"), text);
    }
}

static apr_int64_t last_active(json_object *o)
{
    return json_object_get_int64(ci_json_get(member(o, "container"), "last_active_at",
                                             json_type_int));
}

/* A chained turn asks once: "response" with touch answers the container it
 * led to as "get" would, touched and held when touch is true, in both back
 * ends alike; without touch, the answer is as before. */
static void test_response_with_touch_is_get_too(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
         "\",\"response_id\":\"resp_1\",\"items\":[]}", T0 + 1);
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}",
             T0 + 2);
    assert_null(member(o, "container"));
    assert_null(ci_json_str(o, "container_status"));
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\","
             "\"touch\":false}", T0 + 3);
    assert_string_equal(ci_json_str(o, "container_status"), "ok");
    assert_string_equal(ci_json_str(member(o, "container"), "id"), ID_A);
    assert_true(last_active(o) == T0 + 1);
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\","
             "\"touch\":true,\"hold\":100}", T0 + 5);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "container_status"), "ok");
    assert_true(last_active(o) == T0 + 5);
    /* held: a new container of its owner (at most one) does not evict it */
    o = both(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":"
                             "\"n1\",\"id\":\"%s\",\"tool\":\"local\",\"limits\":"
                             "{\"node\":5,\"owner\":1,\"retention\":60}}",
                             id_of(f->p, 1)), T0 + 6);
    assert_string_equal(status(o), "owner_full");
    /* another owner's question finds nothing, and holds nothing */
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_b\",\"response_id\":\"resp_1\","
             "\"touch\":true,\"hold\":100}", T0 + 7);
    assert_string_equal(status(o), "not_found");
    assert_null(member(o, "container"));
    /* expired: the turn is told, and nothing is touched */
    both(f, "{\"op\":\"expire\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0 + 8);
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\","
             "\"touch\":true,\"hold\":100}", T0 + 9);
    assert_string_equal(ci_json_str(o, "container_status"), "expired");
    assert_true(last_active(o) == T0 + 5);
}

/* A hold let go unused ("finish" with touch false: a chained turn refused
 * after its early question) ends the hold but is no use, in both back ends:
 * the container's last use stays the question's, and a new container of
 * its owner may now evict it. */
static void test_a_hold_let_go_unused_is_no_use(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
         "\",\"response_id\":\"resp_1\",\"items\":[]}", T0 + 1);
    both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\","
         "\"touch\":true,\"hold\":100}", T0 + 5);
    o = both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
             "\",\"touch\":false}", T0 + 9);
    assert_string_equal(status(o), "ok");
    o = both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0 + 10);
    assert_true(last_active(o) == T0 + 5);
    o = both(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":"
                             "\"n1\",\"id\":\"%s\",\"tool\":\"local\",\"limits\":"
                             "{\"node\":5,\"owner\":1,\"retention\":60}}",
                             id_of(f->p, 1)), T0 + 11);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(member(o, "evicted"), "id"), ID_A);
}

static void create_named(fx *f, const char *owner, int n, const char *name, apr_time_t now)
{
    json_object *o = both(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"%s\","
                                          "\"node\":\"n1\",\"id\":\"%s\",\"name\":\"%s\","
                                          "\"tool\":\"local\"}", owner, id_of(f->p, n),
                                          name), now);
    assert_string_equal(status(o), "ok");
}

/* The ids of a list answer, as "n,n,n" (the digits of id_of). */
static const char *page_of(fx *f, json_object *o)
{
    json_object *data = ci_json_get(o, "data", json_type_array);
    const char *out = "";
    size_t i;
    for (i = 0; i < json_object_array_length(data); i++)
        out = apr_psprintf(f->p, "%s%s%d", out, i ? "," : "",
                           atoi(ci_json_str(json_object_array_get_idx(data, i), "id") + 5));
    return json_object_get_boolean(ci_json_get(o, "has_more", json_type_boolean))
               ? apr_pstrcat(f->p, out, "+", NULL) : out;
}

static const char *list(fx *f, const char *owner, const char *extra)
{
    return page_of(f, both(f, apr_psprintf(f->p, "{\"op\":\"list\",\"owner\":\"%s\"%s}",
                                           owner, extra), T0 + 100));
}

static void test_list_pages_and_orders(void **state)
{
    fx *f = *state;
    int i;
    for (i = 0; i < 5; i++)
        create_named(f, "own_a", i, i % 2 ? "odd" : "even", T0 + i);
    create_named(f, "own_a", 9, "odd", T0 + 3);       /* the same created_at as 3 */
    create_named(f, "own_b", 7, "even", T0);
    assert_string_equal(list(f, "own_a", ",\"limit\":2"), "4,9+");
    assert_string_equal(list(f, "own_a", apr_psprintf(f->p, ",\"limit\":2,\"after\":\"%s\"",
                                                      id_of(f->p, 9))), "3,2+");
    assert_string_equal(list(f, "own_a", apr_psprintf(f->p, ",\"after\":\"%s\"",
                                                      id_of(f->p, 2))), "1,0");
    assert_string_equal(list(f, "own_a", ",\"order\":\"asc\",\"limit\":3"), "0,1,2+");
    assert_string_equal(list(f, "own_a", apr_psprintf(
                                 f->p, ",\"order\":\"asc\",\"after\":\"%s\"",
                                 id_of(f->p, 2))), "3,9,4");
    assert_string_equal(list(f, "own_a", ",\"name\":\"odd\""), "9,3,1");
    assert_string_equal(list(f, "own_a", apr_psprintf(
                                 f->p, ",\"name\":\"odd\",\"order\":\"asc\",\"limit\":1,"
                                 "\"after\":\"%s\"", id_of(f->p, 1))), "3+");
    /* a cursor of another name, of another owner, unknown: an empty page */
    assert_string_equal(list(f, "own_a", apr_psprintf(f->p, ",\"name\":\"odd\",\"after\":"
                                                      "\"%s\"", id_of(f->p, 2))), "");
    assert_string_equal(list(f, "own_b", apr_psprintf(f->p, ",\"after\":\"%s\"",
                                                      id_of(f->p, 3))), "");
    assert_string_equal(list(f, "own_a", ",\"after\":\"cntr_nope\""), "");
    assert_string_equal(list(f, "own_b", ""), "7");
    assert_string_equal(list(f, "own_c", ""), "");
    /* out of range: 20; expired ones are listed, deleted ones are not */
    assert_string_equal(list(f, "own_a", ",\"limit\":0"), "4,9,3,2,1,0");
    both(f, apr_psprintf(f->p, "{\"op\":\"expire\",\"owner\":\"own_a\",\"id\":\"%s\"}",
                         id_of(f->p, 4)), T0 + 10);
    both(f, apr_psprintf(f->p, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"%s\"}",
                         id_of(f->p, 9)), T0 + 10);
    assert_string_equal(list(f, "own_a", ",\"limit\":101"), "4,3,2,1,0");
}

static void test_expire_at_the_provider(void **state)
{
    fx *f = *state;
    json_object *o;
    create_a(f);
    o = both(f, "{\"op\":\"expire\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "not_found");
    o = both(f, "{\"op\":\"expire\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0);
    assert_string_equal(status(o), "ok");
    assert_int_equal(gone_count(o), 1);
    assert_string_equal(status(both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                       ID_A "\"}", T0)), "expired");
    /* a response that used it still leads to it: the next turn is told */
    o = both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
             "\",\"response_id\":\"resp_2\",\"items\":[]}", T0);
    assert_string_equal(status(o), "expired");
    o = both(f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_2\"}", T0);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    /* nothing more happens to an expired one */
    assert_string_equal(status(both(f, "{\"op\":\"set_handle\",\"owner\":\"own_a\",\"id\":\""
                                       ID_A "\",\"handle\":\"h\"}", T0)), "expired");
    assert_string_equal(status(both(f, "{\"op\":\"expire\",\"owner\":\"own_a\",\"id\":\""
                                       ID_A "\"}", T0)), "expired");
}

/* ---- ci_directory's cases -------------------------------------------------------- */

static const char *create_req(fx *f, const char *owner, int n, apr_uint64_t memory,
                              const char *limits)
{
    return apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"%s\",\"node\":\"n1\","
                        "\"id\":\"%s\",\"tool\":\"local\",\"memory_bytes\":%" APR_UINT64_T_FMT
                        ",\"limits\":%s}", owner, id_of(f->p, n), memory, limits);
}

static const char *evicted_id(json_object *o)
{
    json_object *e = member(o, "evicted");
    return e ? ci_json_str(e, "id") : "";
}

static void set_busy(fx *f, const char *owner, int n, int busy)
{
    json_object *o = ask_redis(f, apr_psprintf(f->p, "{\"op\":\"busy\",\"owner\":\"%s\","
                                               "\"id\":\"%s\",\"busy\":%s}", owner,
                                               id_of(f->p, n), busy ? "true" : "false"),
                               T0);
    ci_container *c = ci_directory_find(f->d, id_of(f->p, n));   /* asked here too */
    assert_string_equal(status(o), "ok");
    if (c)
        apr_hash_set(f->busy, c->id, APR_HASH_KEY_STRING, busy ? c : NULL);
}

static void test_caps_evict_only_the_requesters_own(void **state)
{
    fx *f = *state;
    const char *caps = "{\"node\":3,\"owner\":2}";
    json_object *o;
    both(f, create_req(f, "own_a", 1, 0, caps), T0);
    both(f, create_req(f, "own_a", 2, 0, caps), T0 + 1);
    both(f, create_req(f, "own_b", 3, 0, caps), T0 + 2);
    both(f, apr_psprintf(f->p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"%s\","
                         "\"touch\":true}", id_of(f->p, 1)), T0 + 5);   /* 2 is a's LRU */
    o = both(f, create_req(f, "own_a", 4, 0, caps), T0 + 6);
    assert_string_equal(evicted_id(o), id_of(f->p, 2));
    /* the node is full: b may only evict its own; with 3 busy, refused */
    set_busy(f, "own_b", 3, 1);
    assert_string_equal(status(both(f, create_req(f, "own_b", 5, 0, caps), T0 + 7)),
                        "node_full");
    assert_string_equal(status(both(f, create_req(f, "own_c", 6, 0, caps), T0 + 8)),
                        "node_full");
    /* another owner cannot mark it */
    assert_string_equal(status(ask_redis(f, apr_psprintf(
        f->p, "{\"op\":\"busy\",\"owner\":\"own_a\",\"id\":\"%s\",\"busy\":false}",
        id_of(f->p, 3)), T0)), "not_found");
    set_busy(f, "own_b", 3, 0);
    o = both(f, create_req(f, "own_b", 7, 0, caps), T0 + 9);
    assert_string_equal(evicted_id(o), id_of(f->p, 3));
}

static void test_memory_budget(void **state)
{
    fx *f = *state;
    const char *budget = "{\"budget\":200}";
    json_object *o;
    both(f, create_req(f, "own_a", 1, 96, budget), T0);
    both(f, create_req(f, "own_a", 2, 96, budget), T0 + 1);
    /* full: another owner is refused, nothing of a's touched */
    assert_string_equal(status(both(f, create_req(f, "own_b", 3, 96, budget), T0 + 2)),
                        "budget_full");
    /* too big to fit even after one eviction: refused, nothing evicted */
    o = both(f, create_req(f, "own_a", 4, 150, budget), T0 + 3);
    assert_string_equal(status(o), "budget_full");
    assert_null(member(o, "evicted"));
    /* a's own LRU makes room; a remote one (0 bytes) always fits */
    o = both(f, create_req(f, "own_a", 5, 96, budget), T0 + 4);
    assert_string_equal(evicted_id(o), id_of(f->p, 1));
    o = both(f, create_req(f, "own_b", 6, 0, budget), T0 + 5);
    assert_string_equal(status(o), "ok");
    assert_null(member(o, "evicted"));
    /* deleting frees its share */
    both(f, apr_psprintf(f->p, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"%s\"}",
                         id_of(f->p, 2)), T0 + 6);
    assert_string_equal(status(both(f, create_req(f, "own_b", 7, 96, budget), T0 + 7)),
                        "ok");
}

static void test_items_bounded_oldest_first(void **state)
{
    fx *f = *state;
    const char *items = "\"limits\":{\"items\":4096}";
    const char *text = bounded_to_4k(f);
    int i;
    for (i = 0; i < 10; i++)
        both(f, apr_psprintf(f->p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":"
                             "\"%s\",\"items\":[{\"id\":\"ci_%d\",\"text\":\"%s\"}],%s}",
                             id_of(f->p, 1), i, text, items), T0);
    for (i = 0; i < 10; i++)
        assert_string_equal(status(both(f, apr_psprintf(f->p, "{\"op\":\"recall\","
                                                        "\"owner\":\"own_a\",\"item_id\":"
                                                        "\"ci_%d\"}", i), T0)),
                            i < 7 ? "not_found" : "ok");
}

/* Records, response ids and items go after retention, by the time asked
 * (Redis' TTLs only clear what nobody reads). */
static void test_retention(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT");
    const char *get = "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}";
    const char *resp = "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}";
    const char *recall = "{\"op\":\"recall\",\"owner\":\"own_a\",\"item_id\":\"ci_1\"}";
    const char *conv = "{\"op\":\"conversation\",\"owner\":\"own_a\",\"conversation\":"
                       "\"conv_1\"}";
    long long ttl;
    both(f, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\",\"id\":\"" ID_A
         "\",\"tool\":\"local\",\"idle\":60,\"limits\":{\"retention\":30}}", T0);
    both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
         "\",\"response_id\":\"resp_1\",\"conversation\":\"conv_1\",\"items\":"
         "[{\"id\":\"ci_1\",\"text\":\"[1]\"}]}", T0);
    /* the safety net: expiry plus retention (and a minute's grace) */
    ttl = admin(port, "PTTL ci:c:%s", ID_A);
    assert_true(ttl > 80000 && ttl <= 150000);
    assert_true(admin(port, "PTTL ci:r:resp_1") > 80000);
    assert_true(admin(port, "PTTL ci:v:own_a:conv_1") > 80000);
    assert_true(admin(port, "PTTL ci:i:ci_1") > 80000);
    expire_both(f, T0 + SEC(60), 1);
    assert_string_equal(status(both(f, get, T0 + SEC(89))), "expired");
    assert_string_equal(status(both(f, resp, T0 + SEC(89))), "ok");
    assert_string_equal(status(both(f, recall, T0 + SEC(89))), "ok");
    assert_string_equal(status(both(f, conv, T0 + SEC(89))), "ok");
    ci_directory_expire(f->d, T0 + SEC(90), f->p);         /* forgotten here */
    assert_string_equal(status(both(f, resp, T0 + SEC(90))), "not_found");
    assert_string_equal(status(both(f, conv, T0 + SEC(90))), "not_found");
    assert_string_equal(status(both(f, recall, T0 + SEC(90))), "not_found");
    assert_string_equal(status(both(f, get, T0 + SEC(90))), "not_found");
    assert_int_equal(admin(port, "EXISTS ci:c:%s ci:r:resp_1 ci:i:ci_1 ci:m:%s "
                                 "ci:v:own_a:conv_1", ID_A, ID_A), 0);
    /* and far later, the id is free again */
    create_a(f);
}

/* A container's response ids and items never expire before its record:
 * their TTLs are raised together, past the record's, whenever the record's
 * passes them (and not at every save). */
static void test_memo_ttls_follow_the_record(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT");
    long long rec;
    both(f, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\",\"id\":\"" ID_A
         "\",\"tool\":\"local\",\"idle\":3600,\"limits\":{\"retention\":30}}", T0);
    both(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
         "\",\"response_id\":\"resp_1\",\"conversation\":\"conv_1\",\"items\":"
         "[{\"id\":\"ci_1\",\"text\":\"[1]\"}]}", T0);
    rec = admin(port, "PEXPIRETIME ci:c:%s", ID_A);
    assert_true(admin(port, "PEXPIRETIME ci:r:resp_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:v:own_a:conv_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:i:ci_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:m:%s", ID_A) <= admin(port, "PEXPIRETIME ci:i:ci_1"));
    /* as if Redis' clock had run on (the TTLs count in its time, the
     * record's in the caller's): a use raises them all past the record */
    admin(port, "PEXPIRE ci:m:%s 5000", ID_A);
    admin(port, "PEXPIRE ci:r:resp_1 5000");
    admin(port, "PEXPIRE ci:v:own_a:conv_1 5000");
    admin(port, "PEXPIRE ci:i:ci_1 5000");
    assert_string_equal(status(both(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                       ID_A "\",\"touch\":true}", T0 + SEC(1200))), "ok");
    assert_true(admin(port, "PTTL ci:c:%s", ID_A) > 3600 * 1000);
    rec = admin(port, "PEXPIRETIME ci:c:%s", ID_A);
    assert_true(admin(port, "PEXPIRETIME ci:r:resp_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:v:own_a:conv_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:i:ci_1") >= rec);
    assert_true(admin(port, "PEXPIRETIME ci:m:%s", ID_A) >= rec);
}

/* A response id's memo as versions before the pending flag wrote it (no
 * "p"): its pending output is still looked for, in a cluster of mixed
 * versions. */
static void test_an_older_response_memo_still_finds_pending(void **state)
{
    fx *f = *state;
    ask_redis(f, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\",\"id\":\"" ID_A
              "\",\"tool\":\"local\",\"idle\":600}", T0);
    ask_redis(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
              "\",\"response_id\":\"resp_1\",\"pending\":\"[1]\"}", T0 + 1);
    admin(env_port("REDIS_PORT"), "SET ci:r:resp_1 %s KEEPTTL",
          "{\"c\":\"" ID_A "\",\"o\":\"own_a\"}");
    assert_string_equal(ci_json_str(ask_redis(f, "{\"op\":\"response\",\"owner\":"
                                              "\"own_a\",\"response_id\":\"resp_1\"}",
                                              T0 + 2), "pending"), "[1]");
}

/* The commands Redis has run in all (its INFO commandstats), less the ones
 * that are not the directory's own work: the calls that run it and the
 * tests' questions about it. */
static long long commands_run(const char *port)
{
    static const char *const not_work[] = { "fcall", "evalsha", "eval", "function", "info",
                                            "ping", "hello", "auth", "client", NULL };
    struct timeval tv = { 2, 0 };
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
    redisReply *r;
    long long total = 0;
    const char *line;
    assert_non_null(ctx);
    r = redisCommand(ctx, "INFO commandstats");
    assert_true(r && r->type == REDIS_REPLY_STRING);
    for (line = strstr(r->str, "cmdstat_"); line; line = strstr(line + 1, "cmdstat_")) {
        const char *name = line + strlen("cmdstat_"), *colon = strchr(name, ':');
        const char *calls = strstr(name, "calls=");
        int i, skip = 0;
        for (i = 0; not_work[i]; i++)
            skip |= (size_t)(colon - name) == strlen(not_work[i]) &&
                    !strncmp(name, not_work[i], colon - name);
        if (!skip)
            total += atoll(calls + strlen("calls="));
    }
    freeReplyObject(r);
    redisFree(ctx);
    return total;
}

/* A chained turn's two questions (response with touch, then finish with
 * its item) cost Redis few commands: each record is read once per
 * question, a use raises no TTL that is already far enough, the byte
 * bound is checked from the count it just made, a response that left no
 * output pending is not asked for it. (35 before these were
 * counted; a regression shows here before it shows in a benchmark.) */
static void test_a_chained_turn_costs_few_commands(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT");
    long long before, used, ttl;
    ask_redis(f, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\",\"id\":\"" ID_A
              "\",\"tool\":\"local\",\"idle\":600,\"hold\":60}", T0);
    ask_redis(f, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
              "\",\"response_id\":\"resp_1\",\"items\":[{\"id\":\"ci_1\",\"text\":\"[1]\"}]}",
              T0 + 1);
    /* Redis' clock moves on before the next turn (a TTL raised to the
     * horizon itself would now fall short of it): waited for, not slept */
    ttl = admin(port, "PTTL ci:n:n1");
    while (admin(port, "PTTL ci:n:n1") >= ttl)
        ;
    before = commands_run(port);
    assert_string_equal(json_object_get_string(json_object_object_get(ask_redis(
        f, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\","
           "\"touch\":true,\"hold\":60}", T0 + SEC(5)), "container_status")), "ok");
    assert_string_equal(status(ask_redis(f, "{\"op\":\"finish\",\"owner\":\"own_a\","
                                         "\"container_id\":\"" ID_A "\",\"response_id\":"
                                         "\"resp_2\",\"items\":[{\"id\":\"ci_2\",\"text\":"
                                         "\"[2]\"}]}", T0 + SEC(6))), "ok");
    used = commands_run(port) - before;
    if (used > 27)
        fail_msg("a chained turn ran %lld commands in Redis (at most 27)", used);
}

/* ---- what only a shared directory has ----------------------------------------------- */

static json_object *create_on(fx *f, const char *node, const char *owner, int n,
                              const char *limits)
{
    return ask_redis(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"%s\",\"node\":"
                                     "\"%s\",\"id\":\"%s\",\"tool\":\"local\",\"idle\":60,"
                                     "\"limits\":%s}", owner, node, id_of(f->p, n), limits),
                     T0 + n);
}

static void test_nodes_count_apart(void **state)
{
    fx *f = *state;
    const char *one = "{\"node\":1}";
    json_object *o;
    assert_string_equal(status(create_on(f, "n1", "own_a", 1, one)), "ok");
    o = create_on(f, "n2", "own_b", 2, one);             /* n1's does not count */
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(member(o, "container"), "node"), "n2");
    /* n2 is full: b's own there goes; a's on n1 frees nothing on n2 */
    assert_string_equal(evicted_id(create_on(f, "n2", "own_b", 3, one)), id_of(f->p, 2));
    assert_string_equal(status(create_on(f, "n2", "own_a", 4, one)), "node_full");
    /* the budget too is the node's */
    assert_string_equal(status(create_on(f, "n3", "own_c", 5, "{\"budget\":100}")), "ok");
    /* the owner's cap counts every node; an idle remote one (a handle) on
     * another node may go for it, a local one there may not */
    assert_string_equal(status(create_on(f, "n3", "own_a", 6, "{\"owner\":1}")),
                        "owner_full");
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"set_handle\",\"owner\":\"own_a\",\"id\":\"%s\","
                              "\"handle\":\"sealed\"}", id_of(f->p, 1)), T0);
    assert_string_equal(evicted_id(create_on(f, "n3", "own_a", 7, "{\"owner\":1}")),
                        id_of(f->p, 1));
}

/* A create far from every cap costs Redis as many commands with 42
 * containers running as with 2: the indexes' counts decide, no record is
 * read. Near a cap the records are read, and an index entry whose record
 * is gone (its TTL ran out) takes no room and leaves the index. */
static void test_a_create_reads_records_only_near_a_cap(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT");
    const char *roomy = "{\"node\":100,\"owner\":100,\"budget\":1000000}";
    long long before, few, many;
    json_object *o;
    int i;
    for (i = 1; i <= 2; i++)
        assert_string_equal(status(create_on(f, "n1", "own_a", i, roomy)), "ok");
    before = commands_run(port);
    assert_string_equal(status(create_on(f, "n1", "own_a", 3, roomy)), "ok");
    few = commands_run(port) - before;
    for (i = 4; i <= 42; i++)
        assert_string_equal(status(create_on(f, "n1", "own_a", i, roomy)), "ok");
    before = commands_run(port);
    assert_string_equal(status(create_on(f, "n1", "own_a", 43, roomy)), "ok");
    many = commands_run(port) - before;
    assert_int_equal(many, few);
    /* 43 entries, 42 records: at a cap of 43 there is room, nothing evicted */
    admin(port, "DEL ci:c:%s", id_of(f->p, 1));
    o = create_on(f, "n1", "own_b", 44, "{\"node\":43}");
    assert_string_equal(status(o), "ok");
    assert_null(member(o, "evicted"));
    assert_int_equal(admin(port, "HEXISTS ci:n:n1 %s", id_of(f->p, 1)), 0);
    assert_int_equal(admin(port, "HLEN ci:n:n1"), 43);
}

typedef struct claimer {
    const ci_redis_conf *conf;
    const char *node;
    apr_time_t now;
    pthread_barrier_t *start;
    char ids[64][64];
    int n, failed;
} claimer;

/* Claim one due container at a time until none is left. */
static void *claim_all(void *data)
{
    claimer *c = data;
    apr_pool_t *p;
    const char *req;
    apr_pool_create(&p, NULL);
    req = apr_psprintf(p, "{\"op\":\"claim_due\",\"node\":\"%s\",\"limit\":1}", c->node);
    pthread_barrier_wait(c->start);
    for (;;) {
        const char *answer, *err, *perr;
        json_object *o, *got;
        if (ci_redis_dir(p, c->conf, req, strlen(req), c->now, &answer, &err) != 0 ||
            !(o = ci_json_parse(p, answer, strlen(answer), &perr))) {
            c->failed = 1;
            break;
        }
        got = ci_json_get(o, "containers", json_type_array);
        if (!got || json_object_array_length(got) == 0 || c->n == 64)
            break;
        snprintf(c->ids[c->n++], 64, "%s",
                 ci_json_str(json_object_array_get_idx(got, 0), "id"));
    }
    ci_redis_close();
    apr_pool_destroy(p);
    return NULL;
}

static void test_claim_due_exactly_once(void **state)
{
    fx *f = *state;
    pthread_barrier_t start;
    pthread_t th[2];
    claimer c[2];
    apr_hash_t *seen = apr_hash_make(f->p);
    int i, j, total = 0;
    for (i = 1; i <= 30; i++)                            /* due, n1's */
        create_on(f, "n1", "own_a", i, "{}");
    create_on(f, "n2", "own_a", 31, "{}");               /* n2's: not ours */
    create_on(f, "n2", "own_a", 32, "{}");               /* n2's, remote: any node's */
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"set_handle\",\"owner\":\"own_a\",\"id\":\"%s\","
                              "\"handle\":\"sealed\"}", id_of(f->p, 32)), T0);
    create_on(f, "n1", "own_a", 33, "{}");               /* busy */
    set_busy(f, "own_a", 33, 1);
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\","
                              "\"id\":\"%s\",\"tool\":\"local\",\"idle\":600}",
                              id_of(f->p, 34)), T0);     /* not due */
    pthread_barrier_init(&start, NULL, 2);
    for (i = 0; i < 2; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].conf = &f->conf;
        c[i].node = "n1";
        c[i].now = T0 + SEC(200);
        c[i].start = &start;
        assert_int_equal(pthread_create(&th[i], NULL, claim_all, &c[i]), 0);
    }
    for (i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (i = 0; i < 2; i++) {
        assert_false(c[i].failed);
        for (j = 0; j < c[i].n; j++) {
            assert_null(apr_hash_get(seen, c[i].ids[j], APR_HASH_KEY_STRING));
            apr_hash_set(seen, c[i].ids[j], APR_HASH_KEY_STRING, "");
            total++;
        }
    }
    assert_int_equal(total, 31);                         /* 1..30 and 32 */
    assert_non_null(apr_hash_get(seen, id_of(f->p, 32), APR_HASH_KEY_STRING));
    /* the busy one once it is done; n2's by n2 */
    set_busy(f, "own_a", 33, 0);
    {
        json_object *o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n1\"}", T0 + SEC(200));
        json_object *got = ci_json_get(o, "containers", json_type_array);
        assert_int_equal(json_object_array_length(got), 1);
        assert_string_equal(ci_json_str(json_object_array_get_idx(got, 0), "id"),
                            id_of(f->p, 33));
        o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n2\"}", T0 + SEC(200));
        assert_int_equal(gone_count(o), 1);
        assert_string_equal(json_object_get_string(json_object_array_get_idx(
                                ci_json_get(o, "gone", json_type_array), 0)),
                            id_of(f->p, 31));
    }
    assert_string_equal(status(ask_redis(f, "{\"op\":\"claim_due\"}", T0)), "bad_request");
}

/* A busy mark holds for its lease: a node that dies mid-run does not keep
 * its container from expiring for ever. */
static void test_busy_lease_runs_out(void **state)
{
    fx *f = *state;
    json_object *o;
    create_on(f, "n1", "own_a", 1, "{}");
    create_on(f, "n1", "own_a", 2, "{}");
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"busy\",\"owner\":\"own_a\",\"id\":\"%s\","
                              "\"busy\":true,\"lease\":100}", id_of(f->p, 1)), T0);
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"busy\",\"owner\":\"own_a\",\"id\":\"%s\","
                              "\"busy\":true,\"lease\":1000}", id_of(f->p, 2)), T0);
    /* due (idle past) but busy: neither is claimed within its lease */
    o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n1\"}", T0 + SEC(90));
    assert_int_equal(gone_count(o), 0);
    /* past the first lease only */
    o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n1\"}", T0 + SEC(200));
    assert_int_equal(gone_count(o), 1);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(
                            ci_json_get(o, "gone", json_type_array), 0)), id_of(f->p, 1));
    o = ask_redis(f, "{\"op\":\"claim_due\",\"node\":\"n1\"}", T0 + SEC(1001));
    assert_int_equal(gone_count(o), 1);
}

/* A node's local sandboxes checked against the directory: those whose
 * containers no longer run there (unknown, deleted) are named gone. */
static void test_which_gone(void **state)
{
    fx *f = *state;
    json_object *o, *gone;
    create_on(f, "n1", "own_a", 1, "{}");
    create_on(f, "n1", "own_a", 2, "{}");
    ask_redis(f, apr_psprintf(f->p, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"%s\"}",
                              id_of(f->p, 2)), T0);
    o = ask_redis(f, apr_psprintf(f->p, "{\"op\":\"which_gone\",\"ids\":[\"%s\",\"%s\","
                                  "\"cntr_unknown\"]}", id_of(f->p, 1), id_of(f->p, 2)), T0);
    gone = ci_json_get(o, "gone", json_type_array);
    assert_string_equal(status(o), "ok");
    assert_int_equal(json_object_array_length(gone), 2);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(gone, 0)),
                        id_of(f->p, 2));
    assert_string_equal(json_object_get_string(json_object_array_get_idx(gone, 1)),
                        "cntr_unknown");
}

/* ---- the connection ---------------------------------------------------------------- */

static void test_parse_url(void **state)
{
    fx *f = *state;
    ci_redis_conf c;
    const char *bad[] = {
        "http://h:1", "redis://h", "redis://h:0", "redis://h:65536", "redis://h:12x",
        "redis://:6379", "redis://h:1/", "redis://h:1/x", "redis://h:1/2/3",
        "redis://[::1:6379", "redis://[::1]6379", "redis://secret-pw@h:1",
        "redis://u:@h:1", "redis://u:se%zzcret@h:1", "redis://h:1?db=2", NULL,
    };
    int i;
    assert_null(ci_redis_parse_url(f->p, "redis://127.0.0.1:6379", &c));
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 6379);
    assert_int_equal(c.db, 0);
    assert_null(c.user);
    assert_null(c.password);
    assert_true(c.connect_timeout > 0 && c.command_timeout > 0);
    assert_null(ci_redis_parse_url(f->p, "redis://u:p%40ss:w@rd@redis.example:7000/3", &c));
    assert_string_equal(c.user, "u");
    assert_string_equal(c.password, "p@ss:w@rd");
    assert_string_equal(c.host, "redis.example");
    assert_int_equal(c.port, 7000);
    assert_int_equal(c.db, 3);
    assert_null(ci_redis_parse_url(f->p, "redis://:only-pw@[::1]:6380", &c));
    assert_null(c.user);
    assert_string_equal(c.password, "only-pw");
    assert_string_equal(c.host, "::1");
    for (i = 0; bad[i]; i++) {
        const char *why = ci_redis_parse_url(f->p, bad[i], &c);
        if (!why)
            fail_msg("%s was accepted", bad[i]);
        assert_null(strstr(why, "secret"));
        assert_null(strstr(why, bad[i]));
    }
}

static int dir_call(apr_pool_t *p, const ci_redis_conf *c, const char **err)
{
    const char *req = "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}";
    const char *answer;
    int rc;
    *err = NULL;
    rc = ci_redis_dir(p, c, req, strlen(req), T0, &answer, err);
    print_message("%s: %s\n", rc ? "failed" : "answered", rc ? *err : answer);
    return rc;
}

static void test_auth(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_AUTH_PORT"), *err;
    ci_redis_conf c;
    c = conf_of(f->p, apr_psprintf(f->p, "redis://:%s@127.0.0.1:%s", AUTH_PASSWORD, port));
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    c = conf_of(f->p, apr_psprintf(f->p, "redis://%s:%s@127.0.0.1:%s/2", AUTH_USER,
                                   AUTH_USER_PASSWORD, port));
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    c = conf_of(f->p, apr_psprintf(f->p, "redis://:wrong-pw-3141@127.0.0.1:%s", port));
    assert_int_equal(dir_call(f->p, &c, &err), -1);
    assert_non_null(strstr(err, "AUTH"));
    assert_null(strstr(err, "wrong-pw-3141"));
    c = conf_of(f->p, apr_psprintf(f->p, "redis://%s:wrong-pw-2718@127.0.0.1:%s", AUTH_USER,
                                   port));
    assert_int_equal(dir_call(f->p, &c, &err), -1);
    assert_null(strstr(err, "wrong-pw-2718"));
    c = conf_of(f->p, apr_psprintf(f->p, "redis://127.0.0.1:%s", port));
    assert_int_equal(dir_call(f->p, &c, &err), -1);      /* NOAUTH */
    assert_non_null(strstr(err, "127.0.0.1"));
}

static void test_db_and_lost_scripts(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT");
    ci_redis_conf c = conf_of(f->p, apr_psprintf(f->p, "redis://127.0.0.1:%s/5", port));
    const char *req = "{\"op\":\"create\",\"owner\":\"own_a\",\"node\":\"n1\",\"id\":\""
                      ID_A "\",\"tool\":\"local\"}";
    const char *answer, *err;
    assert_int_equal(ci_redis_dir(f->p, &c, req, strlen(req), T0, &answer, &err), 0);
    assert_int_equal(admin(port, "EXISTS ci:c:%s", ID_A), 0);   /* not in db 0 */
    /* a Redis that lost its scripts gets it again */
    admin(port, "SCRIPT FLUSH");
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    assert_string_equal(status(ask_redis(f, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                            ID_A "\"}", T0)), "not_found");
}

/* The directory's libraries Redis at PORT holds ("ci_dir_" and a SHA1). */
static size_t libraries(const char *port)
{
    struct timeval tv = { 2, 0 };
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
    redisReply *r;
    size_t n;
    assert_non_null(ctx);
    r = redisCommand(ctx, "FUNCTION LIST LIBRARYNAME ci_dir_*");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    n = r->elements;
    freeReplyObject(r);
    redisFree(ctx);
    return n;
}

/* Where Redis has functions the directory is one (its definitions made once,
 * not at every call), loaded again when Redis lost it; a user whose ACL
 * denies FUNCTION gets the same directory as a script. */
static void test_function_or_script(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_PORT"), *err;
    ci_redis_conf c = conf_of(f->p, apr_psprintf(f->p, "redis://127.0.0.1:%s", port));
    ci_redis_conf scripts_only = conf_of(
        f->p, apr_psprintf(f->p, "redis://ci_scripts:scripts-pw-1@127.0.0.1:%s", port));
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    assert_int_equal(libraries(port), 1);
    /* lost (FUNCTION FLUSH, a restart without persistence): loaded again */
    admin(port, "FUNCTION FLUSH");
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    assert_int_equal(libraries(port), 1);
    admin(port, "FUNCTION FLUSH");
    admin(port, "ACL SETUSER ci_scripts on >scripts-pw-1 ~* &* +@all -function");
    assert_string_equal(status(ask_redis_as(f, &scripts_only, "{\"op\":\"create\",\"owner\":"
                                            "\"own_a\",\"node\":\"n1\",\"id\":\"" ID_A
                                            "\",\"tool\":\"local\"}", T0)), "ok");
    assert_string_equal(status(ask_redis_as(f, &scripts_only, "{\"op\":\"get\",\"owner\":"
                                            "\"own_a\",\"id\":\"" ID_A "\"}", T0)), "ok");
    assert_int_equal(libraries(port), 0);
    admin(port, "ACL DELUSER ci_scripts");
}

/* ---- outages: a server of the test's own ------------------------------------------------ */

static pid_t spare_pid;

static pid_t start_spare(const char *port)
{
    const char *server = getenv("REDIS_SERVER") ? getenv("REDIS_SERVER") : "redis-server";
    pid_t pid = fork();
    int i;
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execlp(server, server, "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 100; i++) {                           /* up within 5 s */
        struct timeval tv = { 0, 100000 };
        redisContext *ctx = redisConnectWithTimeout("127.0.0.1", atoi(port), tv);
        int up = ctx && !ctx->err;
        if (ctx)
            redisFree(ctx);
        if (up)
            return pid;
        usleep(50000);
    }
    fail_msg("redis-server did not start on port %s", port);
    return -1;
}

static void stop_spare(void)
{
    if (spare_pid > 0) {
        kill(spare_pid, SIGCONT);
        kill(spare_pid, SIGKILL);
        waitpid(spare_pid, NULL, 0);
    }
    spare_pid = 0;
}

static int teardown_spare(void **state)
{
    stop_spare();
    return teardown(state);
}

/* -1 within a bound (the timeouts), with a message. */
static void fails_quickly(apr_pool_t *p, const ci_redis_conf *c)
{
    apr_time_t t = apr_time_now();
    const char *err;
    assert_int_equal(dir_call(p, c, &err), -1);
    assert_true(apr_time_now() - t < apr_time_from_msec(1500));
    assert_non_null(err);
    assert_non_null(strstr(err, "cannot be reached"));
}

static void test_outage_and_reconnect(void **state)
{
    fx *f = *state;
    const char *port = env_port("REDIS_SPARE_PORT"), *err;
    ci_redis_conf c = conf_of(f->p, apr_psprintf(f->p, "redis://127.0.0.1:%s", port));
    c.connect_timeout = apr_time_from_msec(300);
    c.command_timeout = apr_time_from_msec(300);
    spare_pid = start_spare(port);
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    /* a server that does not answer: the command times out */
    kill(spare_pid, SIGSTOP);
    fails_quickly(f->p, &c);
    fails_quickly(f->p, &c);            /* connects (the kernel accepts), times out */
    kill(spare_pid, SIGCONT);
    assert_int_equal(dir_call(f->p, &c, &err), 0);
    /* a server gone: refused; back: the same thread connects again */
    stop_spare();
    fails_quickly(f->p, &c);
    spare_pid = start_spare(port);
    assert_int_equal(dir_call(f->p, &c, &err), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        TEST(test_create_get_owners_apart),
        TEST(test_touch_and_expiry),
        TEST(test_delete_names_what_goes),
        TEST(test_eviction_names_the_owners_own),
        TEST(test_finish_response_recall),
        TEST(test_finish_conversation),
        TEST(test_conversation_pending_is_bounded_like_items),
        TEST(test_a_hold_let_go_unused_is_no_use),
        TEST(test_response_with_touch_is_get_too),
        TEST(test_list_pages_and_orders),
        TEST(test_expire_at_the_provider),
        TEST(test_caps_evict_only_the_requesters_own),
        TEST(test_memory_budget),
        TEST(test_items_bounded_oldest_first),
        TEST(test_retention),
        TEST(test_memo_ttls_follow_the_record),
        TEST(test_a_chained_turn_costs_few_commands),
        TEST(test_an_older_response_memo_still_finds_pending),
        TEST(test_nodes_count_apart),
        TEST(test_a_create_reads_records_only_near_a_cap),
        TEST(test_claim_due_exactly_once),
        TEST(test_busy_lease_runs_out),
        TEST(test_which_gone),
        TEST(test_parse_url),
        TEST(test_auth),
        TEST(test_db_and_lost_scripts),
        TEST(test_function_or_script),
        TEST_SPARE(test_outage_and_reconnect),
    };
    size_t i;
    int rc;
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (!getenv("REDIS_PORT")) {
        fprintf(stderr, "REDIS_PORT is not set (run test/test_redisdir_unit.py)\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);           /* hiredis writes with write(2) */
    apr_initialize();
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    rc = cmocka_run_group_tests_name("ci_redis", tests, NULL, NULL);
    apr_terminate();
    return rc;
}
