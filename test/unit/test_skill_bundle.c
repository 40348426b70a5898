/*
 * test_skill_bundle.c - unit tests of skill uploads (ci_skill_bundle): zips
 * made here with libarchive's writer, good and hostile, directory uploads
 * part by part, SKILL.md's front matter, and the zip written back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <archive.h>
#include <archive_entry.h>

#include "ci_buf.h"
#include "ci_skill_bundle.h"

#include "unit_pool.h"

#define GOOD_MD "---\nname: basic-math\ndescription: Adds numbers.\n---\n# Basic math\n"

/* One entry of a zip made here: a regular file ('f', DATA, or ZEROS bytes
 * of 0 when DATA is NULL), a directory ('d'), a symbolic link ('l') or a
 * hard link ('h') to LINK. */
typedef struct ent {
    const char *name;
    const char *data;
    char type;
    const char *link;
    apr_size_t zeros;
    time_t mtime;
} ent;

static la_ssize_t to_buf(struct archive *a, void *data, const void *buf, size_t n)
{
    return ci_buf_append(data, buf, n) < 0 ? -1 : (la_ssize_t)n;
}

static void put_data(struct archive *a, const ent *e)
{
    static const char zero[65536];
    apr_size_t left = e->zeros;
    if (e->data) {
        assert_int_equal(archive_write_data(a, e->data, strlen(e->data)),
                         (la_ssize_t)strlen(e->data));
        return;
    }
    while (left) {
        apr_size_t n = left < sizeof(zero) ? left : sizeof(zero);
        assert_int_equal(archive_write_data(a, zero, n), (la_ssize_t)n);
        left -= n;
    }
}

/* The N entries as a zip (deflated). */
static const char *make_zip(apr_pool_t *p, const ent *ents, int n, apr_size_t *len)
{
    struct archive *a = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    ci_buf out;
    int i;
    ci_buf_init(&out, p, APR_SIZE_MAX);
    assert_int_equal(archive_write_set_format_zip(a), ARCHIVE_OK);
    assert_int_equal(archive_write_zip_set_compression_deflate(a), ARCHIVE_OK);
    assert_int_equal(archive_write_set_bytes_in_last_block(a, 1), ARCHIVE_OK);
    assert_int_equal(archive_write_open(a, &out, NULL, to_buf, NULL), ARCHIVE_OK);
    for (i = 0; i < n; i++) {
        const ent *x = &ents[i];
        archive_entry_clear(e);
        archive_entry_copy_pathname(e, x->name);
        archive_entry_set_mtime(e, x->mtime ? x->mtime : 1700000000, 0);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_filetype(e, x->type == 'd' ? AE_IFDIR : x->type == 'l' ? AE_IFLNK
                                                                                 : AE_IFREG);
        if (x->type == 'l')
            archive_entry_copy_symlink(e, x->link);
        if (x->type == 'h')
            archive_entry_copy_hardlink(e, x->link);
        if (x->type == 'f' || !x->type)
            archive_entry_set_size(e, x->data ? (la_int64_t)strlen(x->data)
                                              : (la_int64_t)x->zeros);
        assert_true(archive_write_header(a, e) >= ARCHIVE_WARN);
        if (x->type == 'f' || !x->type)
            put_data(a, x);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    archive_entry_free(e);
    *len = out.len;
    return out.data;
}

static ci_skill_bundle *zip_ok(apr_pool_t *p, const ent *ents, int n)
{
    ci_skill_bundle *b = NULL;
    const char *err = NULL;
    apr_size_t len;
    const char *zip = make_zip(p, ents, n, &len);
    if (ci_skill_bundle_from_zip(p, zip, len, NULL, &b, &err) != 0)
        fail_msg("refused: %s", err);
    return b;
}

/* The refusal of the zip of ENTS under LIMITS (NULL: the defaults). */
static const char *zip_err(apr_pool_t *p, const ent *ents, int n, const ci_skill_limits *l)
{
    ci_skill_bundle *b = NULL;
    const char *err = NULL;
    apr_size_t len;
    const char *zip = make_zip(p, ents, n, &len);
    if (ci_skill_bundle_from_zip(p, zip, len, l, &b, &err) == 0)
        return "(accepted)";
    assert_non_null(err);
    return err;
}

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MD(folder) { folder "/SKILL.md", GOOD_MD, 'f', NULL, 0, 0 }

static void assert_file(const ci_skill_bundle *b, int i, const char *path, const char *data)
{
    const ci_skill_file *f = &APR_ARRAY_IDX(b->files, i, ci_skill_file);
    assert_string_equal(f->path, path);
    assert_int_equal(f->len, strlen(data));
    assert_memory_equal(f->data, data, f->len);
}

/* ======================================================================== */
/* good uploads                                                             */
/* ======================================================================== */

static const ent good[] = {
    { "basic_math/scripts/", NULL, 'd', NULL, 0, 0 },
    { "basic_math/scripts/add.py", "print(1 + 2)\n", 'f', NULL, 0, 0 },
    { "basic_math/", NULL, 'd', NULL, 0, 0 },
    MD("basic_math"),
    { "basic_math/README.txt", "", 'f', NULL, 0, 0 },
};

static void test_good_zip(void **state)
{
    ci_skill_bundle *b = zip_ok(*state, good, N(good));
    assert_string_equal(b->folder, "basic_math");
    assert_string_equal(b->name, "basic-math");
    assert_string_equal(b->description, "Adds numbers.");
    assert_string_equal(b->manifest, "SKILL.md");
    assert_int_equal(b->files->nelts, 3);
    assert_file(b, 0, "README.txt", "");
    assert_file(b, 1, "SKILL.md", GOOD_MD);
    assert_file(b, 2, "scripts/add.py", "print(1 + 2)\n");
    assert_int_equal(b->total, strlen(GOOD_MD) + 13);
    assert_int_equal(strlen(b->digest), 64);
    assert_int_equal(strspn(b->digest, "0123456789abcdef"), 64);
}

static void test_digest_stable(void **state)
{
    ent other[N(good)];
    int i;
    ci_skill_bundle *a = zip_ok(*state, good, N(good)), *b;
    for (i = 0; i < N(good); i++) {
        other[i] = good[N(good) - 1 - i];
        other[i].mtime = 1000000000 + i * 3600;
    }
    b = zip_ok(*state, other, N(other));
    assert_string_equal(a->digest, b->digest);
    other[0].data = "print(1 + 3)\n";   /* README.txt changed: another bundle */
    b = zip_ok(*state, other, N(other));
    assert_string_not_equal(a->digest, b->digest);
}

static void test_round_trip(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_bundle *a = zip_ok(p, good, N(good)), *b = NULL;
    const char *zip, *again, *err = NULL;
    apr_size_t len, len2;
    int i;
    assert_int_equal(ci_skill_bundle_zip(p, a, &zip, &len, &err), 0);
    assert_int_equal(ci_skill_bundle_from_zip(p, zip, len, NULL, &b, &err), 0);
    assert_string_equal(b->digest, a->digest);
    assert_string_equal(b->folder, a->folder);
    assert_int_equal(b->files->nelts, a->files->nelts);
    for (i = 0; i < a->files->nelts; i++) {
        const ci_skill_file *f = &APR_ARRAY_IDX(a->files, i, ci_skill_file);
        assert_file(b, i, f->path, f->data);
    }
    assert_int_equal(ci_skill_bundle_zip(p, b, &again, &len2, &err), 0);
    assert_int_equal(len2, len);           /* the same bytes for the same bundle */
    assert_memory_equal(again, zip, len);
}

static void test_non_ascii_round_trip(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_bundle *a = NULL, *b = NULL;
    ci_skill_builder *bl = ci_skill_builder_make(p, NULL);
    const char *zip, *err = NULL;
    apr_size_t len;
    assert_int_equal(ci_skill_builder_add(bl, "s/SKILL.md", GOOD_MD, strlen(GOOD_MD), &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "s/d\xC3\xA9j\xC3\xA0.txt", "x", 1, &err), 0);
    assert_int_equal(ci_skill_builder_finish(bl, &a, &err), 0);
    assert_int_equal(ci_skill_bundle_zip(p, a, &zip, &len, &err), 0);
    if (ci_skill_bundle_from_zip(p, zip, len, NULL, &b, &err))
        fail_msg("refused: %s", err);
    assert_string_equal(b->digest, a->digest);
    assert_file(b, 1, "d\xC3\xA9j\xC3\xA0.txt", "x");
}

static void test_directory_upload(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_builder *bl = ci_skill_builder_make(p, NULL);
    ci_skill_bundle *b = NULL, *z = zip_ok(p, good, N(good));
    const char *err = NULL;
    assert_int_equal(ci_skill_builder_add(bl, "basic_math/scripts/add.py", "print(1 + 2)\n",
                                          13, &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "basic_math/SKILL.md", GOOD_MD, strlen(GOOD_MD),
                                          &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "basic_math/README.txt", "", 0, &err), 0);
    assert_int_equal(ci_skill_builder_finish(bl, &b, &err), 0);
    assert_string_equal(b->name, "basic-math");
    assert_file(b, 0, "README.txt", "");
    assert_file(b, 2, "scripts/add.py", "print(1 + 2)\n");
    assert_string_equal(b->digest, z->digest);   /* the same bundle either way */
}

static void test_directory_refusals(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_limits small = { 100, 2, 10, 15 };
    ci_skill_builder *bl = ci_skill_builder_make(p, NULL);
    ci_skill_bundle *b = NULL;
    const char *err = NULL;
    assert_int_equal(ci_skill_builder_add(bl, "a/SKILL.md", GOOD_MD, strlen(GOOD_MD), &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "b/x.py", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'b/x.py' is not in the skill's folder 'a': upload one folder.");
    err = NULL;   /* refused once, refused for good */
    assert_int_equal(ci_skill_builder_finish(bl, &b, &err), -1);
    assert_string_equal(err, "Skill file 'b/x.py' is not in the skill's folder 'a': upload one folder.");

    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a\\SKILL.md", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a\\SKILL.md' has a backslash in its name: separate folders with '/'.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a/b\xFF", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a/b\\xFF' has a name that is not valid UTF-8.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a/b\x1b[2J", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a/b\\x1B[2J' has a control character in its name.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a/\xC2\x85x", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a/\\xC2\\x85x' has a control character in its name.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "", "", 0, &err), -1);
    assert_string_equal(err, "A skill file has an empty name.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a/./b", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a/./b' has an empty or '.' segment in its path.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, "a//b", "", 0, &err), -1);
    assert_string_equal(err, "Skill file 'a//b' has an empty or '.' segment in its path.");
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_finish(bl, &b, &err), -1);
    assert_string_equal(err, "The skill upload has no files.");

    bl = ci_skill_builder_make(p, &small);
    assert_int_equal(ci_skill_builder_add(bl, "a/x", "12345678901", 11, &err), -1);
    assert_string_equal(err, "Skill file 'a/x' is larger than 10 bytes.");
    bl = ci_skill_builder_make(p, &small);
    assert_int_equal(ci_skill_builder_add(bl, "a/x", "12345678", 8, &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "a/y", "12345678", 8, &err), -1);
    assert_string_equal(err, "The skill's files are larger than 15 bytes in all.");
    bl = ci_skill_builder_make(p, &small);
    assert_int_equal(ci_skill_builder_add(bl, "a/x", "", 0, &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "a/y", "", 0, &err), 0);
    assert_int_equal(ci_skill_builder_add(bl, "a/z", "", 0, &err), -1);
    assert_string_equal(err, "The skill has more than 2 files.");
}

static void test_path_bounds(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_builder *bl = ci_skill_builder_make(p, NULL);
    const char *err = NULL;
    char deep[64] = "a";
    char *longname = apr_palloc(p, 1100);
    int i;
    for (i = 0; i < 16; i++)
        strcat(deep, "/b");
    assert_int_equal(ci_skill_builder_add(bl, deep, "", 0, &err), 0);   /* 16 levels */
    strcat(deep, "/b");
    assert_int_equal(ci_skill_builder_add(bl, deep, "", 0, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "Skill file '%s' is nested deeper than 16 levels.",
                                          deep));
    memset(longname, 'x', 1025);
    longname[1] = '/';
    longname[1025] = '\0';
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, longname, "", 0, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "Skill file '%.200s...' has a path longer than 1024 bytes.",
                                          longname));
    longname[1024] = '\0';
    bl = ci_skill_builder_make(p, NULL);
    assert_int_equal(ci_skill_builder_add(bl, longname, "", 0, &err), 0);
}

/* ======================================================================== */
/* hostile zips                                                             */
/* ======================================================================== */

typedef struct refusal {
    const char *what;
    ent ents[4];
    int n;
    const char *expected;
} refusal;

static const refusal refusals[] = {
    { "dotdot", { MD("s"), { "s/../../etc/passwd", "x", 'f', NULL, 0, 0 } }, 2,  /* check-clone: a hostile name, refused */
      "Skill file 's/../../etc/passwd' leaves the skill's folder." },  /* check-clone: a hostile name, refused */
    { "absolute", { MD("s"), { "/s/x", "x", 'f', NULL, 0, 0 } }, 2,
      "Skill file '/s/x' leaves the skill's folder." },
    /* libarchive's zip reader turns a backslash into '/' (Windows' zips use it):
     * the path is then checked as any other */
    { "backslash", { MD("s"), { "s\\..\\x", "x", 'f', NULL, 0, 0 } }, 2,
      "Skill file 's/../x' leaves the skill's folder." },  /* check-clone: a hostile name, refused */
    { "symlink", { MD("s"), { "s/link", NULL, 'l', "/etc/passwd", 0, 0 } }, 2,
      "Skill file 's/link' is a symbolic link." },
    /* no hard link: zip has none, and libarchive's writer stores one as a
     * regular file (read back as one, as below); entry_type still refuses
     * an entry that says it is one */
    { "dotdot dir", { MD("s"), { "s/../", NULL, 'd', NULL, 0, 0 } }, 2,  /* check-clone: a hostile name, refused */
      "Skill file 's/..' leaves the skill's folder." },
    { "two manifests", { MD("s"), { "s/skill.md", GOOD_MD, 'f', NULL, 0, 0 } }, 2,
      "The skill has two SKILL.md files: 's/SKILL.md' and 's/skill.md'." },
    { "no manifest", { { "s/README.md", "x", 'f', NULL, 0, 0 } }, 1,
      "The skill has no SKILL.md at the top of its folder." },
    { "manifest in a subfolder", { { "s/sub/SKILL.md", GOOD_MD, 'f', NULL, 0, 0 } }, 1,
      "The skill has no SKILL.md at the top of its folder." },
    { "two folders", { MD("s"), MD("t") }, 2,
      "Skill file 't/SKILL.md' is not in the skill's folder 's': upload one folder." },
    { "top level", { MD("s"), { "README.md", "x", 'f', NULL, 0, 0 } }, 2,
      "Skill file 'README.md' is at the top level: the skill's files must be inside one folder." },
    { "duplicate", { MD("s"), { "s/a.py", "1", 'f', NULL, 0, 0 }, { "s/a.py", "2", 'f', NULL, 0, 0 } }, 3,
      "Skill file 's/a.py' appears twice." },
    { "case duplicate", { MD("s"), { "s/a.py", "1", 'f', NULL, 0, 0 }, { "s/A.py", "2", 'f', NULL, 0, 0 } }, 3,
      "Skill files 's/A.py' and 's/a.py' differ only in case." },
    { "file and folder", { MD("s"), { "s/a", "1", 'f', NULL, 0, 0 }, { "s/a/b", "2", 'f', NULL, 0, 0 } }, 3,
      "Skill file 's/a' is also a folder of 's/a/b'." },
    { "no files", { { "s/", NULL, 'd', NULL, 0, 0 } }, 1,
      "The skill upload has no files." },
    { "bomb", { MD("s"), { "s/zeros", NULL, 'f', NULL, 30 * 1024 * 1024, 0 } }, 2,
      "Skill file 's/zeros' is larger than 26214400 bytes." },
};

static void test_zip_refusals(void **state)
{
    int i;
    for (i = 0; i < N(refusals); i++) {
        const char *err = zip_err(*state, refusals[i].ents, refusals[i].n, NULL);
        if (strcmp(err, refusals[i].expected))
            fail_msg("%s: got \"%s\", expected \"%s\"", refusals[i].what, err,
                     refusals[i].expected);
    }
}

/* What libarchive's writer makes of a hard link: a plain file, accepted as
 * one. */
static void test_hardlink_written_as_file(void **state)
{
    static const ent e[] = { MD("s"), { "s/hard", NULL, 'h', "s/SKILL.md", 0, 0 } };
    ci_skill_bundle *b = zip_ok(*state, e, N(e));
    assert_int_equal(b->files->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(b->files, 1, ci_skill_file).path, "hard");
}

static void test_lowercase_manifest(void **state)
{
    static const ent e[] = { { "s/skill.md", GOOD_MD, 'f', NULL, 0, 0 },
                             { "s/sub/SKILL.md", "not a manifest", 'f', NULL, 0, 0 } };
    ci_skill_bundle *b = zip_ok(*state, e, N(e));
    assert_string_equal(b->manifest, "skill.md");
    assert_string_equal(b->name, "basic-math");
}

static void test_zip_limits(void **state)
{
    apr_pool_t *p = *state;
    static const ent three[] = { MD("s"), { "s/a", "1234", 'f', NULL, 0, 0 },
                                 { "s/b", "1234", 'f', NULL, 0, 0 },
                                 { "s/c", "1234", 'f', NULL, 0, 0 } };
    ci_skill_limits files = CI_SKILL_LIMITS_DEFAULT, total = CI_SKILL_LIMITS_DEFAULT;
    ci_skill_limits zipsize = CI_SKILL_LIMITS_DEFAULT;
    ci_skill_bundle *b = NULL;
    const char *err = NULL, *zip;
    apr_size_t len;
    files.max_files = 3;
    assert_string_equal(zip_err(p, three, 4, &files), "The skill has more than 3 files.");
    total.max_total = strlen(GOOD_MD) + 10;
    assert_string_equal(zip_err(p, three, 4, &total),
                        apr_psprintf(p, "The skill's files are larger than %lu bytes in all.",
                                     (unsigned long)total.max_total));
    zip = make_zip(p, three, 4, &len);
    zipsize.max_zip = len - 1;
    assert_int_equal(ci_skill_bundle_from_zip(p, zip, len, &zipsize, &b, &err), -1);
    assert_string_equal(err, apr_psprintf(p, "The skill's zip is larger than %lu bytes.",
                                          (unsigned long)len - 1));
    zipsize.max_zip = len;
    assert_int_equal(ci_skill_bundle_from_zip(p, zip, len, &zipsize, &b, &err), 0);
}

static void test_not_zip(void **state)
{
    apr_pool_t *p = *state;
    static const char garbage[] = "this is not a zip at all, just some bytes\n";
    ci_skill_bundle *b = NULL;
    const char *err = NULL, *zip;
    apr_size_t len;
    assert_int_equal(ci_skill_bundle_from_zip(p, garbage, sizeof(garbage) - 1, NULL, &b, &err), -1);
    assert_string_equal(err, "The skill upload is not a zip archive.");
    assert_int_equal(ci_skill_bundle_from_zip(p, "", 0, NULL, &b, &err), -1);
    assert_string_equal(err, "The skill upload is not a zip archive.");
    zip = make_zip(p, good, N(good), &len);
    assert_int_equal(ci_skill_bundle_from_zip(p, zip, len / 2, NULL, &b, &err), -1);
}

/* A FIFO or device entry is not tested here: libarchive's zip writer
 * refuses to write one, and a regular file's mode changed to a FIFO's in
 * the central directory is still read as a regular file (the reader takes
 * the type from elsewhere), so no zip made here carries one. The check
 * (entry_type) refuses any type but a regular file and a directory. */

/* ======================================================================== */
/* SKILL.md                                                                 */
/* ======================================================================== */

/* MD as the manifest of a directory upload: the refusal, or NULL and the
 * bundle in *OUT. */
static const char *md(apr_pool_t *p, const char *text, ci_skill_bundle **out)
{
    ci_skill_builder *bl = ci_skill_builder_make(p, NULL);
    ci_skill_bundle *b = NULL;
    const char *err = NULL;
    assert_int_equal(ci_skill_builder_add(bl, "s/SKILL.md", text, strlen(text), &err), 0);
    if (ci_skill_builder_finish(bl, &b, &err))
        return err;
    if (out)
        *out = b;
    return NULL;
}

static void md_refused(apr_pool_t *p, const char *text, const char *expected)
{
    const char *err = md(p, text, NULL);
    if (!err)
        fail_msg("accepted: %s", text);
    if (strcmp(err, expected))
        fail_msg("%s: got \"%s\", expected \"%s\"", text, err, expected);
}

/* The description MD gives, or fails. */
static const char *md_description(apr_pool_t *p, const char *text)
{
    ci_skill_bundle *b = NULL;
    const char *err = md(p, text, &b);
    if (err)
        fail_msg("refused: %s (%s)", err, text);
    return b->description;
}

static void test_front_matter_refusals(void **state)
{
    apr_pool_t *p = *state;
    char *desc = apr_palloc(p, 1100), *name = apr_palloc(p, 100);
    md_refused(p, "# no front matter\n", "SKILL.md must begin with YAML front matter: a line '---'.");
    md_refused(p, "", "SKILL.md must begin with YAML front matter: a line '---'.");
    md_refused(p, "---\nname: a\ndescription: b\n", "SKILL.md's front matter has no closing '---' line.");
    md_refused(p, "---\ndescription: b\n---\n", "SKILL.md's front matter has no 'name'.");
    md_refused(p, "---\nname: a\n---\n", "SKILL.md's front matter has no 'description'.");
    md_refused(p, "---\nname: Basic-Math\ndescription: b\n---\n", CI_SKILL_E_NAME);
    md_refused(p, "---\nname: -math\ndescription: b\n---\n", CI_SKILL_E_NAME);
    md_refused(p, "---\nname: math-\ndescription: b\n---\n", CI_SKILL_E_NAME);
    md_refused(p, "---\nname: basic--math\ndescription: b\n---\n", CI_SKILL_E_NAME);
    md_refused(p, "---\nname: basic_math\ndescription: b\n---\n", CI_SKILL_E_NAME);
    md_refused(p, "---\nname: \"\"\ndescription: b\n---\n", CI_SKILL_E_NAME);
    memset(name, 'a', 65);
    name[65] = '\0';
    md_refused(p, apr_psprintf(p, "---\nname: %s\ndescription: b\n---\n", name), CI_SKILL_E_NAME);
    name[64] = '\0';
    assert_null(md(p, apr_psprintf(p, "---\nname: %s\ndescription: b\n---\n", name), NULL));
    md_refused(p, "---\nname: a\ndescription: ''\n---\n",
               "SKILL.md's 'description' must be 1 to 1024 characters without control characters.");
    md_refused(p, "---\nname: a\ndescription:\n---\n", CI_SKILL_E_DESCRIPTION);
    memset(desc, 'd', 1025);
    desc[1025] = '\0';
    md_refused(p, apr_psprintf(p, "---\nname: a\ndescription: %s\n---\n", desc),
               CI_SKILL_E_DESCRIPTION);
    desc[1024] = '\0';
    assert_null(md(p, apr_psprintf(p, "---\nname: a\ndescription: %s\n---\n", desc), NULL));
    md_refused(p, "---\nname: a\ndescription: \"bell\\u0007\"\n---\n", CI_SKILL_E_DESCRIPTION);
    md_refused(p, "---\nname: a\nname: b\ndescription: c\n---\n",
               "SKILL.md's front matter line 3 repeats the key 'name'.");
    md_refused(p, "---\nname: a\njust text\n---\n",
               "SKILL.md's front matter line 3 is not 'key: value'.");
    md_refused(p, "---\nname: a\n  indented: x\n---\n",
               "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\n- a\n---\n", "SKILL.md's front matter line 2 is not 'key: value'.");
    md_refused(p, "---\nname: a\ndescription: \"open\n---\n",
               "SKILL.md's front matter line 3 has a quoted value that is not closed on that line, or a bad escape.");
    md_refused(p, "---\nname: a\ndescription: \"bad \\q escape\"\n---\n",
               "SKILL.md's front matter line 3 has a quoted value that is not closed on that line, or a bad escape.");
    md_refused(p, "---\nname: a\ndescription: [x, y]\n---\n",
               "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: one: two\n---\n",
               "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: first\n  continued\n---\n",
               "SKILL.md's front matter line 4 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: \"x\" y\n---\n",
               "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: \xFF\n---\n", "SKILL.md is not valid UTF-8.");
}

static void test_front_matter_values(void **state)
{
    apr_pool_t *p = *state;
    ci_skill_bundle *b = NULL;
    assert_null(md(p, "\xEF\xBB\xBF---\r\nname: 'basic-math'\r\ndescription: \"Adds \\\"two\\\" "
                      "numbers \\u00e9\" # a comment\r\nlicense: MIT\r\n---\r\nbody\r\n", &b));
    assert_string_equal(b->name, "basic-math");
    assert_string_equal(b->description, "Adds \"two\" numbers \xC3\xA9");
    assert_string_equal(md_description(p, "---\nname: a\ndescription: 'it''s # not a comment'\n---\n"),
                        "it's # not a comment");
    assert_string_equal(md_description(p, "---\nname: a\ndescription: plain value # comment\n---\n"),
                        "plain value");
    assert_string_equal(md_description(p, "---\n# comment\n\nname: a\ndescription: x\n"
                                          "metadata:\n  author: someone\n  tags:\n    - one\n"
                                          "allowed-tools: Bash(git:*) Read\n---\n"),
                        "x");
}

static void test_front_matter_blocks(void **state)
{
    apr_pool_t *p = *state;
    assert_string_equal(md_description(p, "---\nname: a\ndescription: >\n  Folded lines\n"
                                          "  become one.\n\n  A blank line stays.\n---\n"),
                        "Folded lines become one.\nA blank line stays.\n");
    assert_string_equal(md_description(p, "---\nname: a\ndescription: >-\n  Folded,\n  stripped.\n\n"
                                          "license: MIT\n---\n"),
                        "Folded, stripped.");
    assert_string_equal(md_description(p, "---\nname: a\ndescription: |\n    Literal\n      kept\n"
                                          "    lines\n---\n"),
                        "Literal\n  kept\nlines\n");
    assert_string_equal(md_description(p, "---\nname: a\ndescription: |+\n  Kept\n\n---\n"),
                        "Kept\n\n");
    assert_string_equal(md_description(p, "---\ndescription: >\n  Folded before\nname: a\n---\n"),
                        "Folded before\n");
    md_refused(p, "---\nname: a\ndescription: >\n    four\n  two\n---\n",
               "SKILL.md's front matter line 5 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: >2\n  x\n---\n",
               "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block.");
    md_refused(p, "---\nname: a\ndescription: >\n---\n", CI_SKILL_E_DESCRIPTION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_good_zip),
        TEST(test_digest_stable),
        TEST(test_round_trip),
        TEST(test_non_ascii_round_trip),
        TEST(test_directory_upload),
        TEST(test_directory_refusals),
        TEST(test_path_bounds),
        TEST(test_zip_refusals),
        TEST(test_hardlink_written_as_file),
        TEST(test_lowercase_manifest),
        TEST(test_zip_limits),
        TEST(test_not_zip),
        TEST(test_front_matter_refusals),
        TEST(test_front_matter_values),
        TEST(test_front_matter_blocks),
    };
    apr_initialize();
    return cmocka_run_group_tests_name("ci_skill_bundle", tests, NULL, NULL);
}
