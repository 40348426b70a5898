/*
 * fuzz_cfiles.c - the kernel's listing of a container's files, as code in
 * the container could make it say anything (ci_cfiles_parse), then paged.
 *
 * The input is the listing's line. Checked: no crash, leak or undefined
 * behaviour; every file kept has an acceptable name and the id of its name;
 * the files are in order (created_at, then id); walking the pages with
 * `after` (both orders, a page size picked by a hash of the input) yields
 * every file exactly once, in order, and has_more is false only at the end.
 */
#include "fuzz_common.h"
#include <apr_hash.h>
#include "ci_cfiles.h"

#define CNTR "cntr_fuzz"

static void walk(apr_pool_t *p, const apr_array_header_t *files, int limit, int desc)
{
    const char *after = NULL;
    int seen = 0, more = 1, rounds = 0;
    while (more) {
        apr_array_header_t *page = ci_cfiles_page(p, files, after, limit, desc, &more);
        int i;
        FUZZ_CHECK(page->nelts <= limit, "a page of %d, limit %d", page->nelts, limit);
        FUZZ_CHECK(page->nelts > 0 || !more, "an empty page with more to come");
        for (i = 0; i < page->nelts; i++, seen++) {
            const ci_cfile *want = &APR_ARRAY_IDX(files, desc ? files->nelts - 1 - seen
                                                              : seen, ci_cfile);
            FUZZ_CHECK(seen < files->nelts, "more files paged than listed");
            FUZZ_CHECK(!strcmp(APR_ARRAY_IDX(page, i, ci_cfile).id, want->id),
                       "file %d out of order", seen);
        }
        if (page->nelts)
            after = APR_ARRAY_IDX(page, page->nelts - 1, ci_cfile).id;
        FUZZ_CHECK(++rounds <= files->nelts + 1, "paging does not end");
    }
    FUZZ_CHECK(seen == files->nelts, "%d of %d files paged", seen, files->nelts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    uint64_t st = fuzz_hash(data, size);
    apr_array_header_t *files = ci_cfiles_parse(p, CNTR, (const char *)data, size);
    int i;
    if (files) {
        for (i = 0; i < files->nelts; i++) {
            const ci_cfile *f = &APR_ARRAY_IDX(files, i, ci_cfile);
            FUZZ_CHECK(ci_cfile_name_ok(f->name, strlen(f->name)), "a bad name kept");
            FUZZ_CHECK(!strcmp(f->id, ci_cfile_id(p, CNTR, f->name)), "a wrong id");
            FUZZ_CHECK(f->bytes >= 0, "a negative size");
            FUZZ_CHECK(ci_cfiles_find(files, f->id) != NULL, "a file not found by id");
            if (i) {
                const ci_cfile *prev = f - 1;
                FUZZ_CHECK(prev->created_at < f->created_at ||
                               (prev->created_at == f->created_at &&
                                strcmp(prev->id, f->id) <= 0), "out of order at %d", i);
            }
        }
        /* Two files of one name share an id: paging by id is then ambiguous,
         * and the kernel never lists a name twice; walk only unique lists. */
        apr_hash_t *ids = apr_hash_make(p);
        for (i = 0; i < files->nelts; i++) {
            const char *id = APR_ARRAY_IDX(files, i, ci_cfile).id;
            if (apr_hash_get(ids, id, APR_HASH_KEY_STRING))
                break;
            apr_hash_set(ids, id, APR_HASH_KEY_STRING, id);
        }
        if (i >= files->nelts) {
            int limit = 1 + (int)(fuzz_next(&st) % 4);
            walk(p, files, limit, 0);
            walk(p, files, limit, 1);
        }
    }
    fuzz_pool_destroy(p);
    return 0;
}
