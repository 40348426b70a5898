/*
 * unit_core.h - helpers the unit tests of the core share: JSON written with
 * single quotes, exact JSON and string comparisons, the request rewrite
 * (INTERCEPT, assert_rejected) and upstream rounds for the loop (resp_new,
 * add_item, add_call_args, TAKE, followup). Include after <cmocka.h> and the
 * core's headers (ci_json.h, ci_loop.h, ci_request.h).
 */
#ifndef UNIT_CORE_H
#define UNIT_CORE_H

#include "unit_pool.h"

/* A helper a test program may not use. */
#define UNIT_HELPER static __attribute__((unused))

/* JSON written with single quotes for readability: every ' becomes ". */
UNIT_HELPER char *J(apr_pool_t *p, const char *s)
{
    char *d = apr_pstrdup(p, s), *c;
    for (c = d; *c; c++)
        if (*c == '\'')
            *c = '"';
    return d;
}

/* Parse TEXT (any JSON value) with json-c itself; the root is owned by P. */
UNIT_HELPER json_object *parse_(apr_pool_t *p, const char *text, const char *file,
                           int line)
{
    enum json_tokener_error jerr;
    json_object *o = json_tokener_parse_verbose(text, &jerr);
    if (jerr != json_tokener_success) {
        print_error("test JSON does not parse (%s): %s\n",
                    json_tokener_error_desc(jerr), text);
        _fail(file, line);
    }
    return ci_json_own(p, o);
}
#define PARSE(p, sq) parse_((p), J((p), (sq)), __FILE__, __LINE__)
#define PARSE_RAW(p, s) parse_((p), (s), __FILE__, __LINE__)

UNIT_HELPER void json_eq_(apr_pool_t *p, json_object *got, const char *want_sq,
                     const char *file, int line)
{
    json_object *want = parse_(p, J(p, want_sq), file, line);
    if (!json_object_equal(got, want)) {
        print_error("JSON differs\n  got:  %s\n  want: %s\n",
                    ci_json_text(got, NULL), ci_json_text(want, NULL));
        _fail(file, line);
    }
}
#define assert_json(p, got, want_sq) json_eq_((p), (got), (want_sq), __FILE__, __LINE__)

UNIT_HELPER void json_same_(json_object *got, json_object *want, const char *file,
                       int line)
{
    if (!json_object_equal(got, want)) {
        print_error("JSON differs\n  got:  %s\n  want: %s\n",
                    ci_json_text(got, NULL), ci_json_text(want, NULL));
        _fail(file, line);
    }
}
#define assert_json_same(got, want) json_same_((got), (want), __FILE__, __LINE__)

/* String equality where NULL is a value. */
UNIT_HELPER void str_eq_(const char *got, const char *want, const char *file, int line)
{
    if (!got || !want) {
        if (got != want) {
            print_error("\"%s\" != \"%s\"\n", got ? got : "(NULL)",
                        want ? want : "(NULL)");
            _fail(file, line);
        }
        return;
    }
    _assert_string_equal(got, want, file, line);
}
#define assert_str(got, want) str_eq_((got), (want), __FILE__, __LINE__)

UNIT_HELPER void starts_with_(const char *s, const char *prefix, const char *file,
                         int line)
{
    if (!s || strncmp(s, prefix, strlen(prefix)) != 0) {
        print_error("\"%s\" does not start with \"%s\"\n", s ? s : "(NULL)", prefix);
        _fail(file, line);
    }
}
#define assert_starts_with(s, prefix) starts_with_((s), (prefix), __FILE__, __LINE__)

/* The keys of object O are exactly KEYS, in that order. */
UNIT_HELPER void keys_are_(json_object *o, const char *const *keys, const char *file,
                      int line)
{
    int i = 0;
    if (!o || !json_object_is_type(o, json_type_object)) {
        print_error("not an object: %s\n", ci_json_text(o, NULL));
        _fail(file, line);
    }
    json_object_object_foreach(o, k, v) {
        (void)v;
        if (!keys[i]) {
            print_error("unexpected key '%s' in %s\n", k, ci_json_text(o, NULL));
            _fail(file, line);
        }
        _assert_string_equal(k, keys[i], file, line);
        i++;
    }
    if (keys[i]) {
        print_error("missing key '%s' in %s\n", keys[i], ci_json_text(o, NULL));
        _fail(file, line);
    }
}
#define assert_keys(o, ...)                                                   \
    do {                                                                      \
        static const char *const k_[] = {__VA_ARGS__, NULL};                  \
        keys_are_((o), k_, __FILE__, __LINE__);                               \
    } while (0)

UNIT_HELPER int has_key(json_object *o, const char *key)
{
    return json_object_object_get_ex(o, key, NULL);
}

UNIT_HELPER json_object *idx(json_object *arr, int i)
{
    assert_true(json_object_is_type(arr, json_type_array));
    assert_true(i < (int)json_object_array_length(arr));
    return json_object_array_get_idx(arr, i);
}

UNIT_HELPER json_object *member(json_object *o, const char *key)
{
    json_object *v = NULL;
    assert_true(json_object_object_get_ex(o, key, &v));
    return v;
}

/* ---- request helpers ---------------------------------------------------- */

#define CI_TOOL "{'type':'code_interpreter','container':{'type':'auto'}}"
#define F_TOOL "{'type':'function','name':'f','parameters':{'type':'object'}}"

static const ci_rewrite_opts OPTS = { .function_name = "python" };

/* The request's root as its body has it: the input in place of the
 * stand-in the rewrite keeps when the input goes as the client wrote it. */
UNIT_HELPER json_object *root_as_sent(apr_pool_t *p, ci_request *req)
{
    json_object *root = ci_json_own(p, ci_json_copy(req->root));
    json_object_object_add(root, "input", json_object_get(ci_request_input(p, req)));
    return root;
}

UNIT_HELPER ci_req_verdict rewrite_raw(apr_pool_t *p, const char *body, apr_size_t len,
                                  const ci_rewrite_opts *o, ci_request **req,
                                  ci_error *err)
{
    *req = NULL;
    memset(err, 0, sizeof(*err));
    return ci_request_rewrite(p, body, len, o ? o : &OPTS, req, err);
}

UNIT_HELPER ci_request *intercept_(apr_pool_t *p, const char *body_sq,
                              const ci_rewrite_opts *o, const char *file, int line)
{
    ci_request *req;
    ci_error err;
    const char *b = J(p, body_sq);
    ci_req_verdict v = rewrite_raw(p, b, strlen(b), o, &req, &err);
    if (v != CI_REQ_INTERCEPT || !req) {
        print_error("expected INTERCEPT, got %d (%s) for %s\n", (int)v,
                    v == CI_REQ_ERROR ? err.message : "-", b);
        _fail(file, line);
    }
    return req;
}
#define INTERCEPT(p, body_sq) intercept_((p), (body_sq), NULL, __FILE__, __LINE__)
#define INTERCEPT_OPTS(p, body_sq, o) intercept_((p), (body_sq), (o), __FILE__, __LINE__)

UNIT_HELPER void rejected_(apr_pool_t *p, const char *body, apr_size_t len,
                      const char *param, const char *code, const char *message,
                      const char *file, int line)
{
    ci_request *req;
    ci_error err;
    ci_req_verdict v = rewrite_raw(p, body, len, NULL, &req, &err);
    _assert_int_equal(v, CI_REQ_ERROR, file, line);
    _assert_true(req == NULL, "req == NULL", file, line);
    _assert_int_equal(err.status, 400, file, line);
    str_eq_(err.type, "invalid_request_error", file, line);
    str_eq_(err.param, param, file, line);
    str_eq_(err.code, code, file, line);
    str_eq_(err.message, message, file, line);
}
#define assert_rejected(p, body_sq, param, code, msg)                         \
    do {                                                                      \
        const char *b_ = J((p), (body_sq));                                   \
        rejected_((p), b_, strlen(b_), (param), (code), (msg), __FILE__, __LINE__); \
    } while (0)
#define assert_rejected_raw(p, body, len, param, code, msg)                   \
    rejected_((p), (body), (len), (param), (code), (msg), __FILE__, __LINE__)

/* Each of the N bodies (single quotes) is not ours: it passes untouched. */
UNIT_HELPER void passes_(apr_pool_t *p, const char *const *bodies_sq, int n,
                         const char *file, int line)
{
    int i;
    for (i = 0; i < n; i++) {
        const char *b = J(p, bodies_sq[i]);
        ci_request *req;
        ci_error err;
        ci_req_verdict v = rewrite_raw(p, b, strlen(b), NULL, &req, &err);
        if (v != CI_REQ_PASS || req || err.status) {
            print_error("expected PASS, got %d for %s\n", (int)v, b);
            _fail(file, line);
        }
    }
}
#define assert_all_pass(p, bodies) \
    passes_((p), (bodies), (int)(sizeof(bodies) / sizeof(*(bodies))), __FILE__, __LINE__)

UNIT_HELPER json_object *root_tools(ci_request *req)
{
    json_object *t = ci_json_get(req->root, "tools", json_type_array);
    assert_non_null(t);
    return t;
}

/* ---- loop helpers ------------------------------------------------------- */

UNIT_HELPER ci_loop *loop_for(apr_pool_t *p, const char *body_sq, int max_rounds,
                         ci_request **req_out)
{
    ci_request *req = INTERCEPT(p, body_sq);
    if (req_out)
        *req_out = req;
    return ci_loop_create(p, req, max_rounds, "cntr_test");
}

UNIT_HELPER json_object *resp_new(apr_pool_t *p, const char *id)
{
    json_object *r = PARSE(p, "{'object':'response','status':'completed',"
                              "'error':null,'model':'m','output':[]}");
    json_object_object_add(r, "id", json_object_new_string(id));
    return r;
}

UNIT_HELPER json_object *add_item(apr_pool_t *p, json_object *r, const char *item_sq)
{
    json_object *it = json_tokener_parse(J(p, item_sq));
    assert_non_null(it);
    json_object_array_add(ci_json_get(r, "output", json_type_array), it);
    return it;
}

UNIT_HELPER json_object *add_call_args(json_object *r, const char *call_id,
                                  const char *name, const char *arguments)
{
    json_object *it = json_object_new_object();
    char id[80];
    snprintf(id, sizeof(id), "fc_%s", call_id);
    json_object_object_add(it, "type", json_object_new_string("function_call"));
    json_object_object_add(it, "id", json_object_new_string(id));
    json_object_object_add(it, "call_id", json_object_new_string(call_id));
    json_object_object_add(it, "name", json_object_new_string(name));
    json_object_object_add(it, "arguments", json_object_new_string(arguments));
    json_object_object_add(it, "status", json_object_new_string("completed"));
    json_object_array_add(ci_json_get(r, "output", json_type_array), it);
    return it;
}

UNIT_HELPER json_object *add_call(json_object *r, const char *call_id,
                             const char *name, const char *code)
{
    json_object *args = json_object_new_object(), *it;
    json_object_object_add(args, "code", json_object_new_string(code));
    it = add_call_args(r, call_id, name, ci_json_text(args, NULL));
    json_object_put(args);
    return it;
}

UNIT_HELPER void set_usage(apr_pool_t *p, json_object *r, int in, int cached, int out,
                      int reasoning)
{
    json_object_object_add(r, "usage", json_tokener_parse(apr_psprintf(p,
        "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},"
        "\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":%d},"
        "\"total_tokens\":%d}", in, cached, out, reasoning, in + out)));
}

UNIT_HELPER void take_(ci_loop *l, apr_pool_t *p, json_object *r, const char *file,
                  int line)
{
    apr_size_t len;
    const char *b = ci_json_pstr(p, r, &len);
    ci_error err;
    memset(&err, 0, sizeof(err));
    if (ci_loop_take_round(l, b, len, &err) != 0) {
        print_error("take_round failed: %s\n", err.message);
        _fail(file, line);
    }
}
#define TAKE(l, p, r) take_((l), (p), (r), __FILE__, __LINE__)

UNIT_HELPER ci_exec_result *res_new(apr_pool_t *p, ci_exec_outcome st, const char *text,
                               const char *failure)
{
    ci_exec_result *r = apr_pcalloc(p, sizeof(*r));
    r->outcome = st;
    r->text = text;
    r->text_len = strlen(text);
    r->failure = failure;
    r->images = apr_array_make(p, 1, sizeof(const char *));
    return r;
}
#define RES_OK(p, text) res_new((p), CI_EXEC_COMPLETED, (text), NULL)

UNIT_HELPER void res_add_image(ci_exec_result *r, const char *url)
{
    *(const char **)apr_array_push(r->images) = url;
}

UNIT_HELPER ci_call *round_call(ci_loop *l, int i)
{
    const apr_array_header_t *calls = ci_loop_round_calls(l);
    assert_true(i < calls->nelts);
    return APR_ARRAY_IDX(calls, i, ci_call *);
}

/* Execute every call of the round that may run, with result RES. */
UNIT_HELPER void run_round(ci_loop *l, const ci_exec_result *res)
{
    const apr_array_header_t *calls = ci_loop_round_calls(l);
    int i;
    for (i = 0; i < calls->nelts; i++) {
        ci_call *c = APR_ARRAY_IDX(calls, i, ci_call *);
        if (ci_loop_may_execute(l, c))
            ci_loop_record(l, c, res);
    }
}

UNIT_HELPER json_object *followup(ci_loop *l, apr_pool_t *p, ci_next next)
{
    apr_size_t len = 0;
    const char *b = ci_loop_followup_body(l, p, next, &len);
    assert_non_null(b);
    assert_int_equal(strlen(b), len);
    return PARSE_RAW(p, b);
}

UNIT_HELPER const char *root_text(apr_pool_t *p, ci_request *req)
{
    return ci_json_pstr(p, req->root, NULL);
}

UNIT_HELPER int is_hex_id(const char *s, const char *prefix, apr_size_t hex)
{
    apr_size_t i, n = strlen(prefix);
    if (strncmp(s, prefix, n) || strlen(s) != n + hex)
        return 0;
    for (i = n; s[i]; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

#endif
