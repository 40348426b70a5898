/*
 * fuzz_skill.c - a skill upload, as a client can make it say anything: a
 * zip (ci_skill_bundle_from_zip), a directory upload's parts
 * (ci_skill_builder_*), or a SKILL.md alone (its front matter).
 *
 * The first byte picks the way in; the rest is the zip, or the parts
 * (filename, 0x00, data, 0x00, filename, ...), or the SKILL.md of a folder
 * "s". Small limits, so that every one of them is reached. Checked: no
 * crash, leak or undefined behaviour; a refusal is one of the messages
 * (no raw control byte in it); an accepted bundle has sorted, unique,
 * acceptable paths inside the limits, one manifest at the top, a valid name
 * and description, the digest of its files; and written as a zip it reads
 * back to the same digest, and that zip written again is the same bytes.
 */
#include "fuzz_common.h"
#include <strings.h>
#include "ci_skill_bundle.h"

static const ci_skill_limits limits = { 64 * 1024, 16, 8 * 1024, 32 * 1024 };

static void check_refusal(const char *err)
{
    const char *c;
    FUZZ_CHECK(err && *err, "a refusal without a message");
    for (c = err; *c; c++)
        FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f, "a control byte in '%s'", err);
}

static int name_ok(const char *name)
{
    size_t n = strlen(name), i;
    if (n < 1 || n > 64 || name[0] == '-' || name[n - 1] == '-' || strstr(name, "--"))
        return 0;
    for (i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '-'))
            return 0;
    return 1;
}

static void check_files(const ci_skill_bundle *b)
{
    apr_size_t total = 0;
    int i, manifests = 0;
    FUZZ_CHECK(b->files->nelts >= 1 && (apr_size_t)b->files->nelts <= limits.max_files,
               "%d files", b->files->nelts);
    for (i = 0; i < b->files->nelts; i++) {
        const ci_skill_file *f = &APR_ARRAY_IDX(b->files, i, ci_skill_file);
        FUZZ_CHECK(*f->path && f->path[0] != '/', "path '%s'", f->path);
        /* a path that leaves the folder: "..", or with a ".." segment */
        FUZZ_CHECK(strcmp(f->path, "..") &&
                   strncmp(f->path, "../", 3) &&  /* check-clone: data */
                   !strstr(f->path, "/../"),      /* check-clone: data */
                   "path '%s' leaves", f->path);
        FUZZ_CHECK(f->len <= limits.max_file, "a file of %lu bytes", (unsigned long)f->len);
        FUZZ_CHECK(f->data[f->len] == '\0', "data not NUL-terminated");
        if (i)
            FUZZ_CHECK(strcmp(APR_ARRAY_IDX(b->files, i - 1, ci_skill_file).path,
                              f->path) < 0, "files out of order at %d", i);
        if (!strcasecmp(f->path, "SKILL.md"))
            manifests++;
        total += f->len;
    }
    FUZZ_CHECK(manifests == 1, "%d manifests", manifests);
    FUZZ_CHECK(total == b->total && total <= limits.max_total, "total %lu", (unsigned long)total);
}

static void check_bundle(apr_pool_t *p, const ci_skill_bundle *b)
{
    const char *zip, *again, *err = NULL;
    apr_size_t len, len2;
    ci_skill_bundle *back;
    size_t dl;
    check_files(b);
    FUZZ_CHECK(name_ok(b->name), "name '%s'", b->name);
    dl = strlen(b->description);
    FUZZ_CHECK(dl >= 1, "an empty description");
    dl = strlen(b->digest);
    FUZZ_CHECK(dl == 64 && strspn(b->digest, "0123456789abcdef") == 64, "digest");
    FUZZ_CHECK(!strcmp(b->digest, ci_skill_bundle_digest(p, b->folder,
                                                         (const ci_skill_file *)b->files->elts,
                                                         b->files->nelts)), "digest of files");
    FUZZ_CHECK(ci_skill_bundle_zip(p, b, &zip, &len, &err) == 0, "not written: %s", err);
    FUZZ_CHECK(ci_skill_bundle_from_zip(p, zip, len, NULL, &back, &err) == 0,
               "its zip refused: %s", err);
    FUZZ_CHECK(!strcmp(back->digest, b->digest), "another digest read back");
    FUZZ_CHECK(ci_skill_bundle_zip(p, back, &again, &len2, &err) == 0, "not written: %s", err);
    FUZZ_CHECK(len == len2 && !memcmp(zip, again, len), "the zip is not the same bytes");
}

static int from_parts(apr_pool_t *p, const char *in, size_t n, ci_skill_bundle **out,
                      const char **err)
{
    ci_skill_builder *b = ci_skill_builder_make(p, &limits);
    size_t at = 0;
    while (at < n) {
        const char *name = in + at, *data, *end = memchr(name, '\0', n - at);
        size_t dlen;
        if (!end)
            break;
        data = end + 1;
        end = memchr(data, '\0', n - (size_t)(data - in));
        dlen = end ? (size_t)(end - data) : n - (size_t)(data - in);
        if (ci_skill_builder_add(b, name, apr_pstrmemdup(p, data, dlen), dlen, err))
            return -1;
        at = (size_t)(data - in) + dlen + 1;
    }
    return ci_skill_builder_finish(b, out, err);
}

static int from_manifest(apr_pool_t *p, const char *in, size_t n, ci_skill_bundle **out,
                         const char **err)
{
    ci_skill_builder *b = ci_skill_builder_make(p, &limits);
    if (ci_skill_builder_add(b, "s/SKILL.md", apr_pstrmemdup(p, in, n), n, err) ||
        ci_skill_builder_add(b, "s/run.sh", "echo\n", 5, err))
        return -1;
    return ci_skill_builder_finish(b, out, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p;
    ci_skill_bundle *b = NULL;
    const char *err = NULL, *in;
    int rc;
    if (size < 1)
        return 0;
    p = fuzz_pool_create();
    in = apr_pstrmemdup(p, (const char *)data + 1, size - 1);
    switch (data[0] % 3) {
    case 0:
        rc = ci_skill_bundle_from_zip(p, in, size - 1, &limits, &b, &err);
        break;
    case 1:
        rc = from_parts(p, in, size - 1, &b, &err);
        break;
    default:
        rc = from_manifest(p, in, size - 1, &b, &err);
        break;
    }
    if (rc == 0)
        check_bundle(p, b);
    else
        check_refusal(err);
    fuzz_pool_destroy(p);
    return 0;
}
