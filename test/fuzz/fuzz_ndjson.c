/*
 * fuzz_ndjson.c - the sandbox output reader fed arbitrary NDJSON streams.
 *
 * The input is the byte stream a sandbox provider sends. A hash of the input
 * picks the reader's max_output (1 byte to 64 KiB), sometimes a hard cap
 * below the input's size, sometimes a failure reason, and the sizes of the
 * pieces the stream arrives in (1 to 64 bytes, now and then a large one).
 *
 * Checked: no crash, leak or undefined behaviour; the result text is valid
 * UTF-8 with no NUL inside and at most max_output bytes plus the cut marker;
 * images are base64 PNG data URLs; the status follows the failure, the cap
 * and the end of execution; the model's text is valid UTF-8, never empty,
 * and bounded. Then the reader is reset and fed the whole stream at once:
 * the result must not depend on how the stream was split.
 */
#include "fuzz_common.h"
#include "ci_exec.h"
#include "ci_ndjson.h"

#define MARKER_MAX "\n[... 18446744073709551615 more bytes of output were cut ...]\n"
#define FIGURE_LINE "[a PNG figure was created and is shown to the user]\n"
#define RESTART " The interpreter was restarted: variables, imports and files " \
                "from earlier calls are gone."
#define DATA_URL "data:image/png;base64,"

static const apr_size_t max_outputs[] = { 1, 2, 3, 7, 16, 64, 255, 4096, 65536 };

static int feed(ci_ndjson *nd, const uint8_t *data, size_t size, uint64_t *st,
                int one_shot)
{
    size_t at = 0;
    while (at < size) {
        uint64_t r = fuzz_next(st);
        size_t n = one_shot ? size - at
                 : (r & 0xF00) == 0 ? (size_t)(r % 4096) + 1
                                    : (size_t)(r % 64) + 1;
        char *piece;
        int rc;
        if (n > size - at)
            n = size - at;
        piece = malloc(n);   /* exact size: over-reads are caught */
        memcpy(piece, data + at, n);
        rc = ci_ndjson_feed(nd, piece, n);
        free(piece);
        at += n;
        if (rc < 0)
            return -1;
    }
    return 0;
}

static void check_result(apr_pool_t *p, const ci_exec_result *res,
                         apr_size_t max_output, const char *failure, int over,
                         int ended)
{
    const char *model;
    size_t mlen, bound;
    long bad;
    int i, nimages = res->images ? res->images->nelts : 0;

    FUZZ_CHECK(res->text != NULL, "no text");
    FUZZ_CHECK(strlen(res->text) == res->text_len, "text_len %zu, strlen %zu",
               (size_t)res->text_len, strlen(res->text));
    bad = fuzz_utf8_bad_at(res->text, res->text_len);
    FUZZ_CHECK(bad < 0, "result text is not UTF-8 at byte %ld of %zu "
               "(max_output %zu): %.*s", bad, (size_t)res->text_len,
               (size_t)max_output, (int)(res->text_len > 200 ? 200 : res->text_len),
               res->text);
    FUZZ_CHECK(res->text_len <= max_output + sizeof(MARKER_MAX) - 1,
               "text of %zu bytes, max_output %zu", (size_t)res->text_len,
               (size_t)max_output);
    for (i = 0; i < nimages; i++) {
        const char *u = APR_ARRAY_IDX(res->images, i, const char *);
        FUZZ_CHECK(u && !strncmp(u, DATA_URL, sizeof(DATA_URL) - 1) &&
                       u[sizeof(DATA_URL) - 1] &&
                       strspn(u + sizeof(DATA_URL) - 1,
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                              "0123456789+/=\n") == strlen(u + sizeof(DATA_URL) - 1),
                   "image %d is not a PNG data URL", i);
    }
    if (failure && !over)   /* past the hard cap, the reader's own reason wins */
        FUZZ_CHECK(ci_exec_failed(res) && res->failure &&
                       !strcmp(res->failure, failure),
                   "the given failure was not kept");
    if (over || !ended)
        FUZZ_CHECK(ci_exec_failed(res) && res->failure,
                   "over %d ended %d but completed", over, ended);
    if (!ci_exec_failed(res))
        FUZZ_CHECK(res->failure == NULL, "completed with a failure");
    else
        FUZZ_CHECK(res->failure && *res->failure, "failed without a reason");

    model = ci_exec_model_text(p, res);
    FUZZ_CHECK(model && *model, "empty model text");
    mlen = strlen(model);
    bad = fuzz_utf8_bad_at(model, mlen);
    FUZZ_CHECK(bad < 0, "model text is not UTF-8 at byte %ld", bad);
    bound = res->text_len + 1 + (size_t)nimages * (sizeof(FIGURE_LINE) - 1) +
            sizeof("(no output)") +
            (res->failure ? 1 + strlen(res->failure) + sizeof(RESTART) : 0);
    FUZZ_CHECK(mlen <= bound, "model text of %zu bytes, bound %zu", mlen, bound);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    uint64_t h = fuzz_hash(data, size), st = h;
    apr_size_t max_output = max_outputs[fuzz_next(&st) % 9];
    uint64_t r = fuzz_next(&st);
    apr_size_t hard_cap = (r % 4 == 0 && size > 1) ? size / 2
                                                   : (apr_size_t)32 * 1024 * 1024;
    const char *failure = (r / 4) % 5 == 0 ? "The execution timed out after 30 "
                                             "seconds." : NULL;
    ci_ndjson *nd = ci_ndjson_create(p, max_output, hard_cap);
    ci_exec_result one, two;
    int rc, ended, over;

    rc = feed(nd, data, size, &st, 0);
    over = size > hard_cap;
    FUZZ_CHECK((rc < 0) == over, "feed returned %d with %zu bytes, cap %zu", rc,
               size, (size_t)hard_cap);
    ended = ci_ndjson_ended(nd);
    (void)ci_ndjson_ready(nd);
    ci_ndjson_result(nd, failure ? CI_EXEC_TIMED_OUT : CI_EXEC_COMPLETED, failure, &one);
    check_result(p, &one, max_output, failure, over, ended || ci_ndjson_ended(nd));

    /* The same stream in one piece reads the same. */
    if (!over) {
        ci_ndjson_reset(nd);
        FUZZ_CHECK(!ci_ndjson_ended(nd) && !ci_ndjson_ready(nd), "reset kept state");
        rc = feed(nd, data, size, &st, 1);
        FUZZ_CHECK(rc == 0, "one-shot feed refused");
        ci_ndjson_result(nd, failure ? CI_EXEC_TIMED_OUT : CI_EXEC_COMPLETED, failure, &two);
        FUZZ_CHECK(one.text_len == two.text_len && !memcmp(one.text, two.text,
                                                           one.text_len),
                   "split and whole streams read differently:\n%s\n---\n%s",
                   one.text, two.text);
        FUZZ_CHECK(one.outcome == two.outcome &&
                       one.images->nelts == two.images->nelts,
                   "split and whole streams end differently");
    }
    fuzz_pool_destroy(p);
    return 0;
}
