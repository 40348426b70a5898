/*
 * fuzz_supdir.c - the container directory's operations (ci_directory_ops.c) fed
 * what a peer of the supervisor could send: lines of JSON requests, applied
 * in order to one directory whose clock moves on by a step the input picks,
 * with expiry run between them as the supervisor's tick does.
 *
 * Checked: no crash, leak or undefined behaviour; every answer is a JSON
 * object with a known status; the ids named gone are containers the
 * directory no longer runs; the directory's live count never goes below
 * zero and equals the running containers its owners' listings show.
 */
#include "fuzz_common.h"
#include "ci_directory.h"
#include "ci_directory_ops.h"

static const char *const statuses[] = {
    "ok", "not_found", "expired", "owner_full", "node_full", "no_owner", "budget_full",
    "bad_request"
};

static void check_answer(apr_pool_t *p, const char *ans)
{
    const char *err = NULL, *st;
    json_object *o = ci_json_parse(p, ans, strlen(ans), &err);
    unsigned i;
    FUZZ_CHECK(json_object_is_type(o, json_type_object), "answer is not an object: %s", ans);
    st = ci_json_str(o, "status");
    FUZZ_CHECK(st != NULL, "answer without a status: %s", ans);
    for (i = 0; i < sizeof(statuses) / sizeof(*statuses); i++)
        if (!strcmp(st, statuses[i]))
            return;
    FUZZ_CHECK(0, "unknown status %s", st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    ci_directory_limits lim = { 4, 2, apr_time_from_sec(60), 4096, 300 };
    ci_directory *d = ci_directory_create(p, &lim);
    apr_time_t now = apr_time_from_sec(1700000000);
    char *text = apr_pstrmemdup(p, (const char *)data, size), *line, *last;
    int i;
    for (line = apr_strtok(text, "\n", &last); line; line = apr_strtok(NULL, "\n", &last)) {
        apr_pool_t *q;
        apr_array_header_t *gone;
        const char *ans;
        apr_pool_create(&q, p);
        gone = apr_array_make(q, 2, sizeof(const char *));
        ans = ci_dirops_apply(d, q, line, strlen(line), now, gone);
        check_answer(q, ans);
        for (i = 0; i < gone->nelts; i++) {
            ci_container *c = ci_directory_find(d, APR_ARRAY_IDX(gone, i, const char *));
            FUZZ_CHECK(!c || c->status != CI_CNTR_RUNNING, "a container gone still runs");
        }
        FUZZ_CHECK(ci_directory_live(d) >= 0, "live count below zero");
        now += apr_time_from_sec((apr_time_t)(strlen(line) % 97));
        (void)ci_directory_expire(d, now, q);
        apr_pool_destroy(q);
    }
    fuzz_pool_destroy(p);
    return 0;
}
