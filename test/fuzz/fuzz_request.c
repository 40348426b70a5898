/*
 * fuzz_request.c - ci_request_rewrite on arbitrary client bodies.
 *
 * The input is a Responses API request body. Whatever it holds, the rewrite
 * must not crash or leak, must classify it, and:
 *   PASS       only when there is no code_interpreter tool in a "tools" array;
 *   ERROR      a 400 with a message, whose error body is valid JSON;
 *   INTERCEPT  a body that is valid JSON, streams nothing, carries exactly
 *              our function tool in place of the code_interpreter tool, and
 *              has an input array without code_interpreter_call items;
 *              the input items the client sent kept as it wrote them or
 *              encoded, either way the tree the rewrite holds, with no raw
 *              control character, and an input it leaves alone sent as the
 *              parser reads it (the scan that skips its parse agrees); a
 *              body the parser refuses refused in its words; and previous_response_id, when
 *              ci_json_top_string finds it without a parse, is the one the
 *              rewrite read.
 */
#include "fuzz_common.h"
#include "ci_error.h"
#include "ci_request.h"

#define FNAME "python"

static int is_type(json_object *o, const char *type)
{
    const char *t = ci_json_str(o, "type");
    return t && !strcmp(t, type);
}

static void check_intercept(apr_pool_t *p, ci_request *req,
                            const char *body, size_t size)
{
    const char *err = NULL;
    json_object *root, *tools, *input, *v;
    int i, n, ours = 0;

    FUZZ_CHECK(req != NULL, "INTERCEPT without a request");
    FUZZ_CHECK(req->body && strlen(req->body) == req->body_len,
               "body length %zu, strlen %zu", (size_t)req->body_len,
               req->body ? strlen(req->body) : 0);
    FUZZ_CHECK(req->function_name && !strcmp(req->function_name, FNAME),
               "function name changed");
    /* The glue parses only bodies that pass this pre-filter: a request the
     * rewrite intercepts must pass it, or it goes upstream untouched. */
    FUZZ_CHECK(ci_body_mentions_tool(body, size),
               "intercepted a body the pre-filter lets through unparsed");
    fuzz_check_json(p, "rewritten body", req->body, req->body_len,
                    json_type_object);
    root = ci_json_parse(p, req->body, req->body_len, &err);

    /* Streamed upstream exactly when the client asked for a stream (its
     * rounds are relayed); a JSON client's rounds come whole. */
    v = ci_json_get(root, "stream", json_type_boolean);
    FUZZ_CHECK(v && json_object_get_boolean(v) == req->wants_stream,
               "upstream stream flag is not the client's");
    if (!req->wants_stream)
        FUZZ_CHECK(!json_object_object_get_ex(root, "stream_options", NULL),
                   "stream_options kept for a JSON client");

    /* Our tool replaced theirs; nothing of type code_interpreter is left. */
    tools = ci_json_get(root, "tools", json_type_array);
    FUZZ_CHECK(tools != NULL, "tools gone");
    n = (int)json_object_array_length(tools);
    for (i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(tools, i);
        const char *name = ci_json_str(t, "name");
        FUZZ_CHECK(!is_type(t, "code_interpreter"), "tools[%d] still ours", i);
        if (is_type(t, "function") && name && !strcmp(name, FNAME))
            ours++;
    }
    FUZZ_CHECK(ours == 1, "%d function tools named " FNAME, ours);

    /* History translated. */
    input = ci_json_get(root, "input", json_type_array);
    FUZZ_CHECK(input != NULL, "input is not an array");
    n = (int)json_object_array_length(input);
    for (i = 0; i < n; i++)
        FUZZ_CHECK(!is_type(json_object_array_get_idx(input, i),
                            "code_interpreter_call"),
                   "input[%d] untranslated", i);
    FUZZ_CHECK(ci_request_input(p, req) &&
                   json_object_is_type(ci_request_input(p, req), json_type_array) &&
                   (int)json_object_array_length(ci_request_input(p, req)) == n,
               "req->input differs from the body's input");

    /* The include value we answer ourselves is not forwarded. */
    if ((v = ci_json_get(root, "include", json_type_array))) {
        n = (int)json_object_array_length(v);
        FUZZ_CHECK(n > 0, "empty include forwarded");
        for (i = 0; i < n; i++) {
            json_object *s = json_object_array_get_idx(v, i);
            FUZZ_CHECK(!json_object_is_type(s, json_type_string) ||
                           strcmp(json_object_get_string(s), CI_INCLUDE_OUTPUTS),
                       "include still asks for call outputs");
        }
    }

    FUZZ_CHECK(req->max_tool_calls == -1 ||
                   (req->max_tool_calls >= 1 && req->max_tool_calls <= 1000000),
               "max_tool_calls %d", req->max_tool_calls);
    fuzz_check_object(p, "client tools", req->client_tools);
    if (req->client_tool_choice)
        fuzz_check_object(p, "client tool_choice", req->client_tool_choice);
    /* The kept root is the body sent (the input's items kept as the
     * client wrote them, the rest encoded), and the body is strict JSON:
     * no raw control character, whatever the parser let through. */
    {
        json_object *kept = ci_json_own(p, ci_json_copy(req->root));
        json_object_object_add(kept, "input", json_object_get(ci_request_input(p, req)));
        FUZZ_CHECK(json_object_equal(kept, root), "the body sent is not the kept root");
    }
    FUZZ_CHECK(!ci_json_has_control_byte(req->body, req->body_len),
               "a raw control character in the body sent");
    FUZZ_CHECK(req->input_len == 0 ||
                   (req->body_len > req->input_len &&
                    memmem(req->body, req->body_len, req->input_text, req->input_len)),
               "the input's text is not in the body");
}

/* Whether the client's input IN (as the parser reads it) passes the
 * rewrite untouched: items none of a type it translates. */
static int untouched_input(json_object *in)
{
    static const char *const translated[] = {
        "item_reference", "code_interpreter_call", "shell_call", "shell_call_output"
    };
    int i, n;
    unsigned k;
    if (!json_object_is_type(in, json_type_array))
        return 0;
    n = (int)json_object_array_length(in);
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(in, i);
        if (!json_object_is_type(item, json_type_object))
            return 0;
        for (k = 0; k < sizeof(translated) / sizeof(*translated); k++)
            if (is_type(item, translated[k]))
                return 0;
    }
    return 1;
}

/* The rewrite against the parser alone: a body it cannot parse is refused
 * in its words; an input the rewrite leaves alone is sent as the parser
 * reads it (the scan that skips the parse of such an input must agree). */
static void check_against_the_parser(apr_pool_t *p, const char *body, size_t size,
                                     ci_req_verdict v, ci_request *req, const ci_error *err)
{
    const char *perr = NULL;
    json_object *orig = ci_json_parse(p, body, size, &perr), *in = NULL;
    if (!orig) {
        FUZZ_CHECK(v == CI_REQ_ERROR && err->code && !strcmp(err->code, "invalid_json") &&
                       !strcmp(err->message, apr_psprintf(
                           p, "We could not parse the JSON body of your request: %s.",
                           perr)),
                   "a body the parser refuses (%s) was not refused in its words", perr);
        return;
    }
    if (v != CI_REQ_INTERCEPT)
        return;
    json_object_object_get_ex(orig, "input", &in);
    if (json_object_is_type(in, json_type_string)) {
        json_object *msg = json_object_new_object(), *want = json_object_new_array();
        json_object_object_add(msg, "role", json_object_new_string("user"));
        json_object_object_add(msg, "content", json_object_get(in));
        json_object_array_add(want, msg);
        FUZZ_CHECK(json_object_equal(ci_request_input(p, req), want),
                   "a string input was not sent as one user message");
        json_object_put(want);
    }
    else if (untouched_input(in))
        FUZZ_CHECK(json_object_equal(ci_request_input(p, req), in),
                   "an input the rewrite leaves alone was sent changed");
}

static int same_text(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

/* BODY (rewritten as V, REQ, ERR) rewritten once more with the input scan
 * made to give up (an escaped top-level key first, "\u0078", which the
 * rewrite does not read), so that the parser reads the whole input: the
 * same verdict, the same error, the same input sent, whether the scan read
 * the input (passing it as written, or parsing only what it translates) or
 * the parser did. */
static void check_against_a_whole_parse(apr_pool_t *p, const char *body, size_t size,
                                        ci_req_verdict v, ci_request *req,
                                        const ci_error *err)
{
    static const char key[] = "\"\\u0078\":0,";
    const char *brace = memchr(body, '{', size);
    ci_rewrite_opts opts = { FNAME, NULL };
    ci_request *whole = NULL;
    ci_error werr;
    ci_req_verdict wv;
    size_t head, n;
    char *other;
    if (v == CI_REQ_PASS || !brace || (err->code && !strcmp(err->code, "invalid_json")))
        return;                  /* (a parser's error names a byte offset) */
    head = (size_t)(brace - body) + 1;
    n = size + sizeof(key) - 1;
    other = malloc(n);
    memcpy(other, body, head);
    memcpy(other + head, key, sizeof(key) - 1);
    memcpy(other + head + sizeof(key) - 1, body + head, size - head);
    memset(&werr, 0, sizeof(werr));
    wv = ci_request_rewrite(p, other, n, &opts, &whole, &werr);
    free(other);
    FUZZ_CHECK(wv == v, "verdict %d, %d when the input is parsed whole", v, wv);
    if (v == CI_REQ_ERROR)
        FUZZ_CHECK(werr.status == err->status && !strcmp(werr.message, err->message),
                   "refused with \"%s\", with \"%s\" when the input is parsed whole",
                   err->message, werr.message);
    else
        FUZZ_CHECK(json_object_equal(ci_request_input(p, req), ci_request_input(p, whole)) &&
                       same_text(req->context_container, whole->context_container),
                   "the input sent differs from the one sent when it is parsed whole");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    ci_rewrite_opts opts = { FNAME, NULL };
    ci_request *req = NULL;
    ci_error err;
    ci_req_verdict v;
    char *body;

    /* Exactly SIZE bytes, so reads past the end are caught. */
    body = malloc(size ? size : 1);
    if (size)
        memcpy(body, data, size);
    memset(&err, 0, sizeof(err));

    (void)ci_body_mentions_tool(body, size);
    v = ci_request_rewrite(p, body, size, &opts, &req, &err);
    check_against_the_parser(p, body, size, v, req, &err);
    check_against_a_whole_parse(p, body, size, v, req, &err);
    switch (v) {
    case CI_REQ_PASS:
        break;
    case CI_REQ_INTERCEPT: {
        /* The scan's hint, when it gives one, is what the parser read. */
        const char *hint = ci_json_top_string(p, body, size, "previous_response_id");
        check_intercept(p, req, body, size);
        FUZZ_CHECK(!hint || (req->previous_response_id &&
                             !strcmp(hint, req->previous_response_id)),
                   "the scan found previous_response_id \"%s\", the parser \"%s\"", hint,
                   req->previous_response_id ? req->previous_response_id : "(none)");
        break;
    }
    case CI_REQ_ERROR: {
        apr_size_t len;
        const char *eb;
        FUZZ_CHECK(err.status == 400 && err.message && err.type,
                   "error %d %s", err.status, err.message ? err.message : "(null)");
        eb = ci_error_body(p, &err, &len);
        fuzz_check_json(p, "error body", eb, len, json_type_object);
        break;
    }
    default:
        FUZZ_CHECK(0, "verdict %d", (int)v);
    }
    free(body);
    fuzz_pool_destroy(p);
    return 0;
}
