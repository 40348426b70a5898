/*
 * test_directory_ops.c - the directory's operations as the supervisor serves them:
 * JSON in, JSON out, and which containers' sandboxes must go.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_json.h"
#include "ci_directory_ops.h"
#include "unit_pool.h"

#define T0 apr_time_from_sec(1700000000)
#define ID_A "cntr_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static ci_directory *dir(apr_pool_t *p)
{
    ci_directory_limits lim = { 0, 0, apr_time_from_sec(3600), 1 << 20, 0, 0, 0 };
    return ci_directory_create(p, &lim);
}

/* Apply REQ; the answer parsed, the ids gone in *GONE. */
static json_object *ask(ci_directory *d, apr_pool_t *p, const char *req, apr_time_t now,
                        apr_array_header_t **gone)
{
    const char *err = NULL, *ans;
    apr_array_header_t *g = apr_array_make(p, 2, sizeof(const char *));
    json_object *o;
    ans = ci_dirops_apply(d, p, req, strlen(req), now, g);
    o = ci_json_parse(p, ans, strlen(ans), &err);
    assert_non_null(o);
    if (gone)
        *gone = g;
    return o;
}

static const char *status(json_object *o)
{
    return ci_json_str(o, "status");
}

static void create_a(ci_directory *d, apr_pool_t *p)
{
    json_object *o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_a\",\"id\":\"" ID_A
                         "\",\"name\":\"n\",\"tool\":\"local\",\"idle\":60}", T0, NULL);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(ci_json_get(o, "container", json_type_object), "id"),
                        ID_A);
}

static void test_create_get_owners_apart(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    json_object *o;
    ci_container c;
    create_a(d, p);
    o = ask(d, p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0, NULL);
    assert_string_equal(status(o), "ok");
    assert_int_equal(ci_dirops_container_from(p, ci_json_get(o, "container",
                                                             json_type_object), &c), 0);
    assert_string_equal(c.name, "n");
    assert_string_equal(c.tool, "local");
    assert_string_equal(c.memory_limit, "1g");
    assert_int_equal(c.idle_seconds, 60);
    assert_int_equal(c.status, CI_CNTR_RUNNING);
    assert_true(c.created_at == T0);
    o = ask(d, p, "{\"op\":\"get\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0, NULL);
    assert_string_equal(status(o), "not_found");
    assert_null(ci_json_get(o, "container", json_type_object));
    /* the same id twice is refused */
    o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_b\",\"id\":\"" ID_A
            "\",\"tool\":\"local\"}", T0, NULL);
    assert_string_equal(status(o), "not_found");
    /* no owner, no tool, no such op, no JSON */
    assert_string_equal(status(ask(d, p, "{\"op\":\"get\",\"id\":\"" ID_A "\"}", T0,
                                   NULL)), "no_owner");
    assert_string_equal(status(ask(d, p, "{\"op\":\"create\",\"owner\":\"o\"}", T0,
                                   NULL)), "bad_request");
    assert_string_equal(status(ask(d, p, "{\"op\":\"frobnicate\",\"owner\":\"o\"}", T0, NULL)),
                        "bad_request");
    assert_string_equal(status(ask(d, p, "nonsense", T0, NULL)), "bad_request");
}

static void test_touch_and_expiry(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *expired;
    create_a(d, p);
    ask(d, p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\",\"touch\":true}",
        T0 + apr_time_from_sec(50), NULL);
    expired = ci_directory_expire(d, T0 + apr_time_from_sec(100), p);
    assert_int_equal(expired->nelts, 0);
    expired = ci_directory_expire(d, T0 + apr_time_from_sec(111), p);
    assert_int_equal(expired->nelts, 1);
    assert_string_equal(status(ask(d, p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                   ID_A "\"}", T0, NULL)), "expired");
}

static void test_delete_names_what_goes(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *gone;
    json_object *o;
    create_a(d, p);
    ask(d, p, "{\"op\":\"set_handle\",\"owner\":\"own_a\",\"id\":\"" ID_A
        "\",\"handle\":\"h1\"}", T0, NULL);
    o = ask(d, p, "{\"op\":\"delete\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0, &gone);
    assert_string_equal(status(o), "not_found");
    assert_int_equal(gone->nelts, 0);
    o = ask(d, p, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0, &gone);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(ci_json_get(o, "container", json_type_object),
                                    "handle"), "h1");
    assert_int_equal(gone->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(gone, 0, const char *), ID_A);
    /* deleted: not listed, not deleted twice */
    o = ask(d, p, "{\"op\":\"list\",\"owner\":\"own_a\"}", T0, NULL);
    assert_int_equal(json_object_array_length(ci_json_get(o, "data", json_type_array)), 0);
    o = ask(d, p, "{\"op\":\"delete\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0, &gone);
    assert_string_equal(status(o), "expired");
    assert_int_equal(gone->nelts, 0);
}

static void test_eviction_names_the_owners_own(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *gone;
    json_object *o;
    create_a(d, p);
    o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_a\",\"tool\":\"local\","
            "\"limits\":{\"node\":5,\"owner\":1,\"retention\":60}}", T0 + 1, &gone);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(ci_json_get(o, "evicted", json_type_object), "id"),
                        ID_A);
    assert_int_equal(gone->nelts, 1);
    o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_b\",\"tool\":\"local\","
            "\"limits\":{\"node\":1,\"owner\":1,\"retention\":60}}", T0 + 2, &gone);
    assert_string_equal(status(o), "node_full");
    assert_int_equal(gone->nelts, 0);
}

static void test_finish_response_recall(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    json_object *o;
    create_a(d, p);
    o = ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
            "\",\"response_id\":\"resp_1\",\"pending\":\"[1]\",\"items\":["
            "{\"id\":\"ci_1\",\"text\":\"[2]\"},{\"id\":\"msg_1\",\"text\":\"[3]\"}]}",
            T0, NULL);
    assert_string_equal(status(o), "ok");
    o = ask(d, p, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}",
            T0, NULL);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    o = ask(d, p, "{\"op\":\"response\",\"owner\":\"own_b\",\"response_id\":\"resp_1\"}",
            T0, NULL);
    assert_string_equal(status(o), "not_found");
    assert_null(ci_json_str(o, "container_id"));
    o = ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_a\",\"item_id\":\"ci_1\"}", T0, NULL);
    assert_string_equal(ci_json_str(o, "text"), "[2]");
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    /* only our ids are remembered; another owner recalls nothing */
    assert_string_equal(status(ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                   "\"item_id\":\"msg_1\"}", T0, NULL)), "not_found");
    assert_string_equal(status(ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_b\","
                                   "\"item_id\":\"ci_1\"}", T0, NULL)), "not_found");
    /* a pending entry is not an item */
    assert_string_equal(status(ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                   "\"item_id\":\"pending:resp_1\"}", T0, NULL)),
                        "not_found");
}

#define ID_B "cntr_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_C "cntr_cccccccccccccccccccccccccccccccccccccccccccccccc"

/* REQ applied as the supervisor applies a lookup: whether it missed. */
static int missed_by(ci_directory *d, apr_pool_t *p, const char *req)
{
    apr_array_header_t *g = apr_array_make(p, 2, sizeof(const char *));
    int missed = -1;
    ci_dirops_apply_lookup(d, p, req, strlen(req), T0, g, &missed);
    return missed;
}

static void create_owned(ci_directory *d, apr_pool_t *p, const char *owner, const char *id)
{
    assert_string_equal(status(ask(d, p, apr_psprintf(
        p, "{\"op\":\"create\",\"owner\":\"%s\",\"id\":\"%s\",\"tool\":\"local\","
           "\"idle\":60}", owner, id), T0, NULL)), "ok");
}

/* A conversation's turn finished in a container: the conversation leads
 * there for its owner only (another owner's conversation of the same id is
 * another), to the latest container its turns used, with the outputs owed
 * by its last turn, and a miss is one the supervisor waits for. */
static void test_finish_conversation(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    const char *mine = "{\"op\":\"conversation\",\"owner\":\"own_a\","
                       "\"conversation\":\"conv_1\"}";
    const char *theirs = "{\"op\":\"conversation\",\"owner\":\"own_b\","
                         "\"conversation\":\"conv_1\"}";
    json_object *o;
    create_a(d, p);
    create_owned(d, p, "own_b", ID_B);
    create_owned(d, p, "own_a", ID_C);
    assert_int_equal(missed_by(d, p, mine), 1);
    assert_string_equal(status(ask(d, p, mine, T0, NULL)), "not_found");
    o = ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
            "\",\"response_id\":\"resp_1\",\"conversation\":\"conv_1\",\"pending\":"
            "\"[1]\",\"items\":[{\"id\":\"ci_1\",\"text\":\"[2]\"}]}", T0, NULL);
    assert_string_equal(status(o), "ok");
    o = ask(d, p, mine, T0, NULL);
    assert_string_equal(status(o), "ok");
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    assert_null(ci_json_get(o, "container", json_type_object));
    assert_int_equal(missed_by(d, p, mine), 0);
    /* the response of that turn leads there too */
    assert_string_equal(ci_json_str(ask(d, p, "{\"op\":\"response\",\"owner\":\"own_a\","
                                            "\"response_id\":\"resp_1\"}", T0, NULL),
                                    "container_id"), ID_A);
    /* another owner: nothing, and its own conversation of that id is its own */
    assert_string_equal(status(ask(d, p, theirs, T0, NULL)), "not_found");
    assert_string_equal(status(ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_b\","
                                   "\"container_id\":\"" ID_A "\",\"conversation\":"
                                   "\"conv_1\"}", T0, NULL)), "not_found");
    assert_string_equal(status(ask(d, p, theirs, T0, NULL)), "not_found");
    ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_b\",\"container_id\":\"" ID_B
        "\",\"conversation\":\"conv_1\"}", T0, NULL);
    o = ask(d, p, theirs, T0, NULL);
    assert_string_equal(ci_json_str(o, "container_id"), ID_B);
    assert_null(ci_json_str(o, "pending"));
    assert_string_equal(ci_json_str(ask(d, p, mine, T0, NULL), "container_id"), ID_A);
    /* a turn in another container: the conversation goes on there, owed
     * nothing now (what it was owed was brought) */
    ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_C
        "\",\"conversation\":\"conv_1\",\"items\":[]}", T0 + 1, NULL);
    o = ask(d, p, mine, T0, NULL);
    assert_string_equal(ci_json_str(o, "container_id"), ID_C);
    assert_null(ci_json_str(o, "pending"));
    /* with touch, the container as get answers it, touched and held */
    o = ask(d, p, "{\"op\":\"conversation\",\"owner\":\"own_a\",\"conversation\":"
            "\"conv_1\",\"touch\":true,\"hold\":30}", T0 + 5, NULL);
    assert_string_equal(ci_json_str(o, "container_status"), "ok");
    assert_string_equal(ci_json_str(ci_json_get(o, "container", json_type_object), "id"),
                        ID_C);
    assert_true(json_object_get_int64(ci_json_get(ci_json_get(o, "container",
                                                              json_type_object),
                                                  "last_active_at", json_type_int)) ==
                T0 + 5);
    /* no conversation named: nothing */
    assert_string_equal(status(ask(d, p, "{\"op\":\"conversation\",\"owner\":\"own_a\"}",
                                   T0, NULL)), "not_found");
    /* the owed outputs are no item anyone can recall */
    assert_string_equal(status(ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_a\","
                                   "\"item_id\":\"conversation-pending:own_a:conv_1\"}",
                                   T0, NULL)), "not_found");
}

/* A conversation is kept as long as its container's record, as a
 * response id is: an expired container still answers (the next turn is
 * told), a forgotten one does not. */
static void test_conversation_retention(void **state)
{
    apr_pool_t *p = *state;
    ci_directory_limits lim = { 0, 0, apr_time_from_sec(30), 1 << 20, 0, 0, 0 };
    ci_directory *d = ci_directory_create(p, &lim);
    const char *mine = "{\"op\":\"conversation\",\"owner\":\"own_a\","
                       "\"conversation\":\"conv_1\",\"touch\":true}";
    json_object *o;
    create_a(d, p);
    ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
        "\",\"conversation\":\"conv_1\",\"pending\":\"[1]\"}", T0, NULL);
    assert_int_equal(ci_directory_expire(d, T0 + apr_time_from_sec(60), p)->nelts, 1);
    o = ask(d, p, mine, T0 + apr_time_from_sec(89), NULL);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
    assert_string_equal(ci_json_str(o, "container_status"), "expired");
    assert_string_equal(ci_json_str(o, "pending"), "[1]");
    ci_directory_expire(d, T0 + apr_time_from_sec(90), p);
    assert_string_equal(status(ask(d, p, mine, T0 + apr_time_from_sec(90), NULL)),
                        "not_found");
}

static void test_list_pages_and_orders(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    json_object *o, *data;
    int i;
    for (i = 0; i < 3; i++)
        ask(d, p, apr_psprintf(p, "{\"op\":\"create\",\"owner\":\"own_a\",\"name\":"
                               "\"n%d\",\"tool\":\"local\"}", i), T0 + i, NULL);
    o = ask(d, p, "{\"op\":\"list\",\"owner\":\"own_a\",\"limit\":2,\"order\":\"asc\"}",
            T0, NULL);
    data = ci_json_get(o, "data", json_type_array);
    assert_int_equal(json_object_array_length(data), 2);
    assert_string_equal(ci_json_str(json_object_array_get_idx(data, 0), "name"), "n0");
    assert_true(json_object_get_boolean(ci_json_get(o, "has_more", json_type_boolean)));
    o = ask(d, p, "{\"op\":\"list\",\"owner\":\"own_a\",\"name\":\"n2\"}", T0, NULL);
    data = ci_json_get(o, "data", json_type_array);
    assert_int_equal(json_object_array_length(data), 1);
    assert_false(json_object_get_boolean(ci_json_get(o, "has_more", json_type_boolean)));
    o = ask(d, p, "{\"op\":\"list\",\"owner\":\"own_b\"}", T0, NULL);
    assert_int_equal(json_object_array_length(ci_json_get(o, "data", json_type_array)), 0);
}

static void test_expire_at_the_provider(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *gone;
    json_object *o;
    create_a(d, p);
    o = ask(d, p, "{\"op\":\"expire\",\"owner\":\"own_b\",\"id\":\"" ID_A "\"}", T0,
            &gone);
    assert_string_equal(status(o), "not_found");
    assert_int_equal(gone->nelts, 0);
    o = ask(d, p, "{\"op\":\"expire\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0,
            &gone);
    assert_string_equal(status(o), "ok");
    assert_int_equal(gone->nelts, 1);
    assert_string_equal(status(ask(d, p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\""
                                   ID_A "\"}", T0, NULL)), "expired");
    /* a response that used it still leads to it: the next turn is told */
    o = ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
            "\",\"response_id\":\"resp_2\",\"items\":[]}", T0, NULL);
    assert_string_equal(status(o), "expired");
    o = ask(d, p, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_2\"}",
            T0, NULL);
    assert_string_equal(ci_json_str(o, "container_id"), ID_A);
}

/* A container with a remote sandbox that the directory's clock expires
 * waits to be ended at its provider: claim_due (no owner) hands it out
 * once, with where it was made (provider, cred) and its handle; a local
 * one (no handle) is the supervisor's own to end and is never handed out. */
static void test_claim_due_hands_out_expired_remote_ones_once(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *expired;
    json_object *o, *list;
    ci_container c;
    o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_a\",\"id\":\"" ID_A
            "\",\"tool\":\"cloud\",\"provider\":\"e2b\",\"cred\":\"d1gest\",\"idle\":60}",
            T0, NULL);
    assert_string_equal(status(o), "ok");
    assert_string_equal(status(ask(d, p, "{\"op\":\"set_handle\",\"owner\":\"own_a\","
                                   "\"id\":\"" ID_A "\",\"handle\":\"sealed\"}", T0, NULL)),
                        "ok");
    assert_string_equal(status(ask(d, p, "{\"op\":\"create\",\"owner\":\"own_a\","
                                   "\"tool\":\"local\",\"idle\":60}", T0, NULL)), "ok");
    /* nothing is due before the clock expires it */
    o = ask(d, p, "{\"op\":\"claim_due\"}", T0, NULL);
    assert_string_equal(status(o), "ok");
    assert_int_equal(json_object_array_length(ci_json_get(o, "containers",
                                                          json_type_array)), 0);
    expired = ci_directory_expire(d, T0 + apr_time_from_sec(61), p);
    assert_int_equal(expired->nelts, 2);
    o = ask(d, p, "{\"op\":\"claim_due\",\"limit\":16}", T0, NULL);
    list = ci_json_get(o, "containers", json_type_array);
    assert_int_equal(json_object_array_length(list), 1);
    assert_int_equal(ci_dirops_container_from(p, json_object_array_get_idx(list, 0), &c), 0);
    assert_string_equal(c.id, ID_A);
    assert_string_equal(c.provider, "e2b");
    assert_string_equal(c.cred, "d1gest");
    assert_string_equal(c.handle, "sealed");
    assert_int_equal(c.status, CI_CNTR_EXPIRED);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(
                            ci_json_get(o, "gone", json_type_array), 0)), ID_A);
    o = ask(d, p, "{\"op\":\"claim_due\"}", T0, NULL);
    assert_int_equal(json_object_array_length(ci_json_get(o, "containers",
                                                          json_type_array)), 0);
}

/* A shared directory's container whose local sandbox runs here: its
 * shadow is made, touched, made running again after its own expiry, kept
 * from another owner, and dropped (its sandbox named gone). */
static void test_shadows_of_shared_containers(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    apr_array_header_t *gone;
    const char *adopt = "{\"op\":\"adopt\",\"owner\":\"own_a\",\"id\":\"" ID_A
                        "\",\"tool\":\"local\",\"idle\":60}";
    ci_container *c;
    assert_string_equal(status(ask(d, p, adopt, T0, NULL)), "ok");
    assert_int_equal(ci_directory_get(d, ID_A, "own_a", &c), CI_DIR_OK);
    assert_int_equal(c->idle_seconds, 60);
    /* its own expiry: the safety net when no claim comes */
    ci_directory_expire(d, T0 + apr_time_from_sec(61), p);
    assert_int_equal(ci_directory_get(d, ID_A, "own_a", &c), CI_DIR_EXPIRED);
    /* used again: running again, for the idle it is given now */
    assert_string_equal(status(ask(d, p, adopt, T0 + apr_time_from_sec(70), NULL)), "ok");
    assert_int_equal(ci_directory_get(d, ID_A, "own_a", &c), CI_DIR_OK);
    assert_true(c->last_active_at == T0 + apr_time_from_sec(70));
    assert_int_equal(ci_directory_live(d), 1);
    {
        json_object *o = ask(d, p, "{\"op\":\"shadows\"}", T0, NULL);
        json_object *ids = ci_json_get(o, "ids", json_type_array);
        assert_string_equal(status(o), "ok");
        assert_int_equal(json_object_array_length(ids), 1);
        assert_string_equal(json_object_get_string(json_object_array_get_idx(ids, 0)), ID_A);
    }
    /* another owner cannot take it on */
    assert_string_equal(status(ask(d, p, "{\"op\":\"adopt\",\"owner\":\"own_b\",\"id\":\""
                                   ID_A "\",\"tool\":\"local\",\"idle\":60}", T0, NULL)),
                        "not_found");
    assert_string_equal(status(ask(d, p, "{\"op\":\"adopt\",\"owner\":\"own_a\",\"id\":\""
                                   ID_A "\",\"tool\":\"local\"}", T0, NULL)),
                        "bad_request");
    /* dropped, whoever asks: its sandbox goes */
    assert_string_equal(status(ask(d, p, "{\"op\":\"drop\",\"id\":\"" ID_A "\"}",
                                   T0 + apr_time_from_sec(71), &gone)), "ok");
    assert_int_equal(gone->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(gone, 0, const char *), ID_A);
    assert_int_equal(ci_directory_live(d), 0);
    assert_string_equal(status(ask(d, p, "{\"op\":\"drop\",\"id\":\"cntr_none\"}",
                                   T0, &gone)), "not_found");
    assert_int_equal(gone->nelts, 0);
    /* a request that found it before the drop adopts it at its first call:
     * not taken on again (its ATTACH finds it gone) */
    assert_string_equal(status(ask(d, p, adopt, T0 + apr_time_from_sec(72), NULL)), "expired");
    assert_int_equal(ci_directory_get(d, ID_A, "own_a", &c), CI_DIR_EXPIRED);
    assert_int_equal(c->status, CI_CNTR_DELETED);
    assert_int_equal(ci_directory_live(d), 0);
}

/* A shadow that expired by its own clock, then dropped (the shared
 * directory's claim came after it): dropped for good all the same. */
static void test_a_dropped_shadow_stays_dropped(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    const char *adopt = "{\"op\":\"adopt\",\"owner\":\"own_a\",\"id\":\"" ID_A
                        "\",\"tool\":\"local\",\"idle\":60}";
    apr_array_header_t *gone;
    ci_container *c;
    assert_string_equal(status(ask(d, p, adopt, T0, NULL)), "ok");
    ci_directory_expire(d, T0 + apr_time_from_sec(61), p);
    assert_int_equal(ci_directory_get(d, ID_A, "own_a", &c), CI_DIR_EXPIRED);
    assert_string_equal(status(ask(d, p, "{\"op\":\"drop\",\"id\":\"" ID_A "\"}",
                                   T0 + apr_time_from_sec(62), &gone)), "ok");
    assert_int_equal(gone->nelts, 1);
    assert_int_equal(c->status, CI_CNTR_DELETED);
    assert_string_equal(status(ask(d, p, adopt, T0 + apr_time_from_sec(63), NULL)), "expired");
    assert_int_equal(ci_directory_live(d), 0);
}

/* The host's busy probe, counted: ID_A is busy while *busy is set. */
typedef struct probe {
    int busy, asked;
} probe;

static int count_busy(void *baton, const ci_container *c)
{
    probe *pr = baton;
    pr->asked++;
    return pr->busy && !strcmp(c->id, ID_A);
}

/* The supervisor's sandboxes say which containers are busy, asked only
 * where it matters: a turn's questions (response, finish, recall, get) and
 * a create with room ask nothing; eviction, a drop if idle and expiry do,
 * and a busy container is kept by each. */
static void test_busy_asked_only_where_it_matters(void **state)
{
    apr_pool_t *p = *state;
    ci_directory *d = dir(p);
    probe pr = { 1, 0 };
    apr_array_header_t *gone;
    json_object *o;
    const char *drop_if_idle = "{\"op\":\"drop\",\"id\":\"" ID_A "\",\"if_idle\":true}";
    ci_directory_set_busy_probe(d, count_busy, &pr);
    create_a(d, p);
    ask(d, p, "{\"op\":\"finish\",\"owner\":\"own_a\",\"container_id\":\"" ID_A
        "\",\"response_id\":\"resp_1\",\"items\":[{\"id\":\"ci_1\",\"text\":\"[2]\"}]}",
        T0, NULL);
    ask(d, p, "{\"op\":\"response\",\"owner\":\"own_a\",\"response_id\":\"resp_1\"}",
        T0, NULL);
    ask(d, p, "{\"op\":\"recall\",\"owner\":\"own_a\",\"item_id\":\"ci_1\"}", T0, NULL);
    ask(d, p, "{\"op\":\"get\",\"owner\":\"own_a\",\"id\":\"" ID_A "\"}", T0, NULL);
    assert_int_equal(pr.asked, 0);
    /* at the owner's cap: its only container is busy, so none is evicted */
    o = ask(d, p, "{\"op\":\"create\",\"owner\":\"own_a\",\"tool\":\"local\","
            "\"limits\":{\"node\":5,\"owner\":1,\"retention\":60}}", T0 + 1, &gone);
    assert_string_equal(status(o), "owner_full");
    assert_int_equal(gone->nelts, 0);
    assert_int_equal(pr.asked, 1);
    /* past its expiry, busy: kept, then dropped if idle: kept */
    assert_int_equal(ci_directory_expire(d, T0 + apr_time_from_sec(61), p)->nelts, 0);
    assert_int_equal(pr.asked, 2);
    assert_string_equal(status(ask(d, p, drop_if_idle, T0 + apr_time_from_sec(62), &gone)),
                        "ok");
    assert_int_equal(gone->nelts, 0);
    assert_int_equal(pr.asked, 3);
    /* done running: expired at the next check */
    pr.busy = 0;
    assert_int_equal(ci_directory_expire(d, T0 + apr_time_from_sec(63), p)->nelts, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_busy_asked_only_where_it_matters),
        TEST(test_shadows_of_shared_containers),
        TEST(test_a_dropped_shadow_stays_dropped),
        TEST(test_create_get_owners_apart),
        TEST(test_touch_and_expiry),
        TEST(test_delete_names_what_goes),
        TEST(test_eviction_names_the_owners_own),
        TEST(test_finish_response_recall),
        TEST(test_finish_conversation),
        TEST(test_conversation_retention),
        TEST(test_list_pages_and_orders),
        TEST(test_expire_at_the_provider),
        TEST(test_claim_due_hands_out_expired_remote_ones_once),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("ci_directory_ops", tests, NULL, NULL);
    apr_terminate();
    return rc;
}
