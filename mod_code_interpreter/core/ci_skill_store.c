/*
 * ci_skill_store.c - skill bundles on disk, content-addressed
 * (ci_skill_store.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <apr_general.h>
#include <apr_strings.h>
#include "ci_skill_store.h"

#define DIGEST_HEX 64

int ci_skill_store_digest_ok(const char *digest)
{
    return digest && strlen(digest) == DIGEST_HEX &&
           strspn(digest, "0123456789abcdef") == DIGEST_HEX;
}

static const char *shard_of(apr_pool_t *p, const char *dir, const char *digest)
{
    return apr_pstrcat(p, dir, "/", apr_pstrndup(p, digest, 2), NULL);
}

const char *ci_skill_store_tree(apr_pool_t *p, const char *dir, const char *digest)
{
    return apr_pstrcat(p, shard_of(p, dir, digest), "/", digest, NULL);
}

const char *ci_skill_store_zip(apr_pool_t *p, const char *dir, const char *digest)
{
    return apr_pstrcat(p, ci_skill_store_tree(p, dir, digest), ".zip", NULL);
}

static int is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ci_skill_store_has(apr_pool_t *p, const char *dir, const char *digest)
{
    return ci_skill_store_digest_ok(digest) && is_dir(ci_skill_store_tree(p, dir, digest));
}

/* -1 with *ERR naming WHAT and errno's reason. */
static int failed(apr_pool_t *p, const char *what, const char **err)
{
    int e = errno;
    *err = apr_psprintf(p, "the skill store could not write %s: %s", what, strerror(e));
    return -1;
}

/* A name beside FINAL that no other writer uses. */
static const char *temp_beside(apr_pool_t *p, const char *final)
{
    unsigned char r[8];
    char hex[17];
    const char *slash = strrchr(final, '/');
    int i;
    apr_generate_random_bytes(r, sizeof(r));
    for (i = 0; i < 8; i++)
        apr_snprintf(hex + 2 * i, 3, "%02x", r[i]);
    return apr_psprintf(p, "%.*s/.%s.%s", (int)(slash - final), final, slash + 1, hex);
}

/* PATH a folder (made now, or one already: never a link to one). */
static int ensure_dir(const char *path)
{
    if (mkdir(path, 0755) == 0)
        return 0;
    return errno == EEXIST && is_dir(path) ? 0 : -1;
}

static int write_all(int fd, const char *data, apr_size_t len)
{
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        len -= (apr_size_t)n;
    }
    return 0;
}

/* A new file at PATH (ROOT's descendant, its folders made as needed) with
 * DATA and MODE, on the disk before it is renamed into place. */
static int write_new(apr_pool_t *p, const char *root, const char *path, const char *data,
                     apr_size_t len, mode_t mode)
{
    char *rel = apr_pstrdup(p, path), *slash;
    int fd, rc;
    for (slash = strchr(rel, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (ensure_dir(apr_pstrcat(p, root, "/", rel, NULL)) != 0)
            return -1;
        *slash = '/';
    }
    fd = open(apr_pstrcat(p, root, "/", rel, NULL),
              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    rc = write_all(fd, data, len) == 0 && fsync(fd) == 0 ? 0 : -1;
    return close(fd) == 0 ? rc : -1;
}

static int unlink_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* The tree at PATH removed, nothing followed through a link. */
static int remove_tree(const char *path)
{
    return nftw(path, unlink_one, 16, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT ? 0 : -1;
}

int ci_skill_store_put_file(apr_pool_t *p, const char *final, const char *data,
                            apr_size_t len, mode_t mode, const char **err)
{
    const char *temp = temp_beside(p, final);
    const char *slash = strrchr(temp, '/');
    const char *root = apr_pstrndup(p, temp, slash - temp);
    if (write_new(p, root, slash + 1, data, len, mode) != 0 || rename(temp, final) != 0) {
        failed(p, final, err);
        unlink(temp);
        return -1;
    }
    return 0;
}

static int put_tree(apr_pool_t *p, const char *final, const ci_skill_bundle *b,
                    const char **err)
{
    const char *temp = temp_beside(p, final);
    int i;
    if (mkdir(temp, 0755) != 0)
        return failed(p, temp, err);
    for (i = 0; i < b->files->nelts; i++) {
        const ci_skill_file *f = &APR_ARRAY_IDX(b->files, i, ci_skill_file);
        if (write_new(p, temp, f->path, f->data, f->len, 0644) != 0) {
            failed(p, apr_pstrcat(p, final, "/", f->path, NULL), err);
            remove_tree(temp);
            return -1;
        }
    }
    if (rename(temp, final) == 0)
        return 0;
    /* another writer of the same bundle came first: its tree is this one */
    if ((errno == ENOTEMPTY || errno == EEXIST) && is_dir(final)) {
        remove_tree(temp);
        return 0;
    }
    failed(p, final, err);
    remove_tree(temp);
    return -1;
}

int ci_skill_store_put(apr_pool_t *p, const char *dir, const ci_skill_bundle *b,
                       const char *zip, apr_size_t len, const char **err)
{
    if (!ci_skill_store_digest_ok(b->digest)) {
        *err = "the skill store was given a bundle without a digest";
        return -1;
    }
    if (ci_skill_store_has(p, dir, b->digest))
        return 0;
    if (ensure_dir(shard_of(p, dir, b->digest)) != 0)
        return failed(p, shard_of(p, dir, b->digest), err);
    if (ci_skill_store_put_file(p, ci_skill_store_zip(p, dir, b->digest), zip, len, 0644,
                                err) != 0)
        return -1;
    return put_tree(p, ci_skill_store_tree(p, dir, b->digest), b, err);
}

int ci_skill_store_read_file(apr_pool_t *p, const char *path, apr_size_t max,
                             const char **data, apr_size_t *len, const char **err)
{
    struct stat st;
    char *buf;
    apr_size_t got = 0;
    int fd;
    if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        if (errno == ENOENT)
            return 1;
        *err = apr_psprintf(p, "the skill store could not read %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *err = apr_psprintf(p, "the skill store's %s is not a file", path);
        return -1;
    }
    if ((apr_uint64_t)st.st_size > max) {
        close(fd);
        *err = apr_psprintf(p, "the skill store's %s is larger than %" APR_SIZE_T_FMT
                               " bytes", path, max);
        return -1;
    }
    buf = apr_palloc(p, (apr_size_t)st.st_size + 1);
    while (got < (apr_size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (apr_size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (apr_size_t)n;
    }
    close(fd);
    if (got != (apr_size_t)st.st_size) {
        *err = apr_psprintf(p, "the skill store could not read %s whole", path);
        return -1;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

int ci_skill_store_read_zip(apr_pool_t *p, const char *dir, const char *digest,
                            const char **zip, apr_size_t *len, const char **err)
{
    if (!ci_skill_store_digest_ok(digest))
        return 1;
    return ci_skill_store_read_file(p, ci_skill_store_zip(p, dir, digest), APR_SIZE_MAX, zip,
                                    len, err);
}

int ci_skill_store_remove(apr_pool_t *p, const char *dir, const char *digest,
                          const char **err)
{
    const char *tree, *gone;
    if (!ci_skill_store_digest_ok(digest))
        return 0;
    tree = ci_skill_store_tree(p, dir, digest);
    /* out of its place first: a reader finds the whole tree or none */
    gone = temp_beside(p, tree);
    if ((rename(tree, gone) != 0 && errno != ENOENT) ||
        (unlink(ci_skill_store_zip(p, dir, digest)) != 0 && errno != ENOENT)) {
        *err = apr_psprintf(p, "the skill store could not remove %s: %s", tree,
                            strerror(errno));
        return -1;
    }
    /* The bundle is gone from its place. A folder a sandbox that is still
     * exiting has bound (EBUSY) stays under its temporary name, emptied,
     * for ci_skill_store_clean to take later. */
    if (remove_tree(gone) != 0 && errno != EBUSY) {
        *err = apr_psprintf(p, "the skill store could not remove %s: %s", gone,
                            strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether NAME is one the store makes beside a place: "." NAME "." 16 hex
 * digits, NAME a digest (a tree) or a digest ".zip" (a zip). */
static int leftover_name(const char *name)
{
    apr_size_t n = strlen(name);
    return n > 1 + 64 + 1 + 16 && name[0] == '.' && name[n - 17] == '.' &&
           strspn(name + 1, "0123456789abcdef") == 64 &&
           strspn(name + n - 16, "0123456789abcdef") == 16;
}

int ci_skill_store_clean(apr_pool_t *p, const char *dir, apr_time_t older_than,
                         int (*keep)(void *baton, const char *digest), void *baton)
{
    DIR *top = opendir(dir), *sub;
    struct dirent *e, *f;
    struct stat st;
    const char *err;
    int removed = 0;
    while (top && (e = readdir(top))) {
        const char *folder = apr_pstrcat(p, dir, "/", e->d_name, NULL);
        if (strlen(e->d_name) != 2 || strspn(e->d_name, "0123456789abcdef") != 2 ||
            !(sub = opendir(folder)))
            continue;
        while ((f = readdir(sub))) {
            const char *path = apr_pstrcat(p, folder, "/", f->d_name, NULL);
            if (lstat(path, &st) != 0 || apr_time_from_sec(st.st_mtime) >= older_than)
                continue;
            if (leftover_name(f->d_name))
                removed += remove_tree(path) == 0;
            else if (ci_skill_store_digest_ok(f->d_name) && !keep(baton, f->d_name))
                removed += ci_skill_store_remove(p, dir, f->d_name, &err) == 0;
        }
        closedir(sub);
    }
    if (top)
        closedir(top);
    return removed;
}
