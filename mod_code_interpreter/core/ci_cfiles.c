/*
 * ci_cfiles.c - container files: the kernel's listing parsed, stable ids,
 * paging (ci_cfiles.h).
 */
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <apr_strings.h>
#include "ci_cfiles.h"
#include "ci_json.h"

int ci_cfile_name_ok(const char *name, apr_size_t len)
{
    if (!name || len == 0 || len > CI_CFILE_MAX_NAME)
        return 0;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    return !memchr(name, '/', len) && !memchr(name, '\0', len) &&
           !memchr(name, '\n', len) && !memchr(name, '\r', len) &&
           ci_utf8_valid_prefix(name, len) == len;    /* a name JSON can carry */
}

const char *ci_cfile_id(apr_pool_t *p, const char *container, const char *name)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0, i;
    apr_size_t clen = strlen(container), nlen = strlen(name);
    char *in = apr_palloc(p, clen + nlen + 1), *out = apr_palloc(p, 6 + 32 + 1);
    memcpy(in, container, clen);
    in[clen] = '\0';
    memcpy(in + clen + 1, name, nlen);
    EVP_Digest(in, clen + 1 + nlen, md, &mdlen, EVP_sha256(), NULL);
    memcpy(out, "cfile_", 6);
    for (i = 0; i < 16 && i < mdlen; i++) {
        out[6 + 2 * i] = hex[md[i] >> 4];
        out[7 + 2 * i] = hex[md[i] & 15];
    }
    out[6 + 2 * i] = '\0';
    return out;
}

static int by_time(const void *a, const void *b)
{
    const ci_cfile *x = a, *y = b;
    if (x->created_at != y->created_at)
        return x->created_at < y->created_at ? -1 : 1;
    return strcmp(x->id, y->id);
}

apr_array_header_t *ci_cfiles_parse(apr_pool_t *p, const char *container,
                                    const char *line, apr_size_t len)
{
    const char *err = NULL, *type;
    json_object *o = ci_json_parse(p, line, len, &err), *files;
    apr_array_header_t *out;
    size_t i, n;
    if (!(type = ci_json_str(o, "type")) || strcmp(type, "files") ||
        !(files = ci_json_get(o, "files", json_type_array)))
        return NULL;
    n = json_object_array_length(files);
    out = apr_array_make(p, n ? (int)n : 1, sizeof(ci_cfile));
    for (i = 0; i < n && out->nelts < CI_CFILE_MAX_LISTED; i++) {
        json_object *f = json_object_array_get_idx(files, i);
        json_object *name = ci_json_get(f, "name", json_type_string);
        json_object *bytes = ci_json_get(f, "bytes", json_type_int);
        json_object *mtime = ci_json_get(f, "mtime", json_type_int);
        const char *source = ci_json_str(f, "source");
        if (!name || !bytes || !mtime || json_object_get_int64(bytes) < 0 ||
            !ci_cfile_name_ok(json_object_get_string(name),
                              (apr_size_t)json_object_get_string_len(name)))
            continue;
        ci_cfiles_add(p, out, container, json_object_get_string(name),
                      json_object_get_int64(bytes), json_object_get_int64(mtime),
                      source && !strcmp(source, "user"));
    }
    ci_cfiles_sort(out);
    return out;
}

ci_cfile *ci_cfiles_add(apr_pool_t *p, apr_array_header_t *files, const char *container,
                        const char *name, apr_int64_t bytes, apr_int64_t mtime, int user)
{
    ci_cfile *c = apr_array_push(files);
    c->name = apr_pstrdup(p, name);
    c->id = ci_cfile_id(p, container, c->name);
    c->bytes = bytes;
    c->created_at = mtime;
    c->user = user;
    return c;
}

void ci_cfiles_sort(apr_array_header_t *files)
{
    qsort(files->elts, (size_t)files->nelts, sizeof(ci_cfile), by_time);
}

const ci_cfile *ci_cfiles_find(const apr_array_header_t *files, const char *id)
{
    int i;
    for (i = 0; files && id && i < files->nelts; i++)
        if (!strcmp(APR_ARRAY_IDX(files, i, ci_cfile).id, id))
            return &APR_ARRAY_IDX(files, i, ci_cfile);
    return NULL;
}

apr_array_header_t *ci_cfiles_page(apr_pool_t *p, const apr_array_header_t *files,
                                   const char *after, int limit, int desc,
                                   int *has_more)
{
    apr_array_header_t *out = apr_array_make(p, limit > 0 ? limit : 1, sizeof(ci_cfile));
    int n = files->nelts, k = 0, i;
    *has_more = 0;
    if (after) {
        for (k = 0; k < n; k++)
            if (!strcmp(APR_ARRAY_IDX(files, desc ? n - 1 - k : k, ci_cfile).id, after))
                break;
        k++;                      /* past it; past the end when unknown */
    }
    for (i = k; i < n; i++) {
        if (out->nelts == limit) {
            *has_more = 1;
            break;
        }
        *(ci_cfile *)apr_array_push(out) =
            APR_ARRAY_IDX(files, desc ? n - 1 - i : i, ci_cfile);
    }
    return out;
}
