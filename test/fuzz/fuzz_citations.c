/*
 * fuzz_citations.c - container_file_citation annotations of a model's text
 * (ci_citer_annotations), as a hostile upstream could write anything.
 *
 * The input is the text (up to its first NUL); the container's files are a
 * fixed few, with names that prefix one another and names in UTF-8.
 * Checked: no crash, leak or undefined behaviour; each annotation names a
 * file of the container with its id; its offsets are in characters, within
 * the text, and the characters between them are exactly
 * "sandbox:/mnt/data/" and the file's name; annotations are in order and do
 * not overlap; the files are asked for once, and not at all without the
 * prefix.
 */
#include "fuzz_common.h"
#include "ci_cfiles.h"
#include "ci_citations.h"
#include "ci_json.h"

#define CNTR "cntr_fuzz"

static const char *const names[] = { "a", "a.csv", "a.csv.bak", "r\xc3\xa9sum\xc3\xa9.txt",
                                     "x y", "\xf0\x9f\x93\x88.png" };

typedef struct asked {
    apr_array_header_t *files;
    int count;
} asked;

static apr_array_header_t *files_of(void *baton, apr_pool_t *p)
{
    asked *a = baton;
    (void)p;
    a->count++;
    return a->files;
}

/* The byte offset of character N of S (LEN bytes), or -1 past its end. */
static long byte_at(const char *s, size_t len, long n)
{
    size_t i;
    long chars = 0;
    for (i = 0; i < len; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (chars == n)
                return (long)i;
            chars++;
        }
    }
    return chars == n ? (long)len : -1;
}

static void check(apr_pool_t *p, const char *text, json_object *anns)
{
    size_t i, n = json_object_array_length(anns), len = strlen(text);
    long last_end = 0;
    for (i = 0; i < n; i++) {
        json_object *a = json_object_array_get_idx(anns, i);
        const char *name = ci_json_str(a, "filename");
        long start = (long)json_object_get_int64(ci_json_get(a, "start_index", json_type_int));
        long end = (long)json_object_get_int64(ci_json_get(a, "end_index", json_type_int));
        long bs = byte_at(text, len, start), be = byte_at(text, len, end);
        const char *want;
        FUZZ_CHECK(name && ci_json_str(a, "file_id") &&
                       !strcmp(ci_json_str(a, "file_id"), ci_cfile_id(p, CNTR, name)),
                   "annotation %d names no file of the container", (int)i);
        FUZZ_CHECK(!strcmp(ci_json_str(a, "container_id"), CNTR), "another container");
        FUZZ_CHECK(start >= last_end && end > start, "annotation %d out of order", (int)i);
        FUZZ_CHECK(bs >= 0 && be >= 0, "annotation %d past the text", (int)i);
        want = apr_pstrcat(p, CI_CITATION_PREFIX, name, NULL);
        FUZZ_CHECK((size_t)(be - bs) == strlen(want) && !memcmp(text + bs, want, strlen(want)),
                   "annotation %d does not cover its link", (int)i);
        last_end = end;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    const char *text = apr_pstrndup(p, (const char *)data, size);
    asked a = { apr_array_make(p, 8, sizeof(ci_cfile)), 0 };
    ci_citer *c = ci_citer_create(p, CNTR, files_of, &a);
    json_object *anns;
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        ci_cfiles_add(p, a.files, CNTR, names[i], 1, 1, 0);
    anns = ci_json_own(p, ci_citer_annotations(c, text));
    check(p, text, anns);
    ci_json_own(p, ci_citer_annotations(c, text));
    FUZZ_CHECK(a.count == (strstr(text, CI_CITATION_PREFIX) ? 1 : 0),
               "the files asked for %d times", a.count);
    fuzz_pool_destroy(p);
    return 0;
}
