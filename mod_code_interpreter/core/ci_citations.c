/*
 * ci_citations.c - container_file_citation annotations (ci_citations.h).
 */
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_citations.h"
#include "ci_cfiles.h"
#include "ci_json.h"

struct ci_citer {
    apr_pool_t *p;
    const char *container_id;
    ci_citer_files_fn files_fn;
    void *baton;
    int asked;
    apr_array_header_t *files;   /* ci_cfile, once asked */
    apr_hash_t *parts;           /* "item_id#index" -> json array (owned) */
};

ci_citer *ci_citer_create(apr_pool_t *p, const char *container_id,
                          ci_citer_files_fn files, void *baton)
{
    ci_citer *c = apr_pcalloc(p, sizeof(*c));
    c->p = p;
    c->container_id = apr_pstrdup(p, container_id);
    c->files_fn = files;
    c->baton = baton;
    c->parts = apr_hash_make(p);
    return c;
}

static const apr_array_header_t *files_of(ci_citer *c)
{
    if (!c->asked) {
        c->asked = 1;
        c->files = c->files_fn ? c->files_fn(c->baton, c->p) : NULL;
    }
    return c->files;
}

/* Whether a link's target may end before AFTER: at the text's end, a space,
 * a closing bracket or quote, or punctuation that ends a sentence or
 * clause ("see sandbox:/mnt/data/a.csv." cites a.csv; ".../a.csv.bak" does
 * not). */
static int ends_link(const char *after)
{
    if (!*after || strchr(" \t\r\n)]>\"'`*_", *after))
        return 1;
    return strchr(".,;:!?", *after) &&
           (!after[1] || strchr(" \t\r\n)]>\"'`*_", after[1]));
}

/* The longest file name that NAME_AT (LEFT bytes) begins with and that
 * ends the link there, or NULL. */
static const ci_cfile *file_at(const apr_array_header_t *files, const char *name_at,
                               apr_size_t left)
{
    const ci_cfile *best = NULL;
    apr_size_t best_len = 0;
    int i;
    for (i = 0; i < files->nelts; i++) {
        const ci_cfile *f = &APR_ARRAY_IDX(files, i, ci_cfile);
        apr_size_t n = strlen(f->name);
        if (n > best_len && n <= left && !memcmp(name_at, f->name, n) &&
            ends_link(name_at + n)) {
            best = f;
            best_len = n;
        }
    }
    return best;
}

static json_object *citation(ci_citer *c, const ci_cfile *f, apr_size_t start,
                             apr_size_t end)
{
    json_object *a = json_object_new_object();
    json_object_object_add(a, "type", json_object_new_string("container_file_citation"));
    json_object_object_add(a, "container_id", json_object_new_string(c->container_id));
    json_object_object_add(a, "end_index", json_object_new_int64((int64_t)end));
    json_object_object_add(a, "file_id", json_object_new_string(f->id));
    json_object_object_add(a, "filename", json_object_new_string(f->name));
    json_object_object_add(a, "start_index", json_object_new_int64((int64_t)start));
    return a;
}

json_object *ci_citer_annotations(ci_citer *c, const char *text)
{
    static const apr_size_t plen = sizeof(CI_CITATION_PREFIX) - 1;
    json_object *out = json_object_new_array();
    const apr_array_header_t *files;
    const char *at = text, *counted = text;
    apr_size_t chars = 0, len = text ? strlen(text) : 0;
    if (!text || !strstr(text, CI_CITATION_PREFIX) || !(files = files_of(c)))
        return out;
    while ((at = strstr(at, CI_CITATION_PREFIX))) {
        const char *name = at + plen;
        const ci_cfile *f = file_at(files, name, len - (apr_size_t)(name - text));
        if (!f) {
            at = name;
            continue;
        }
        chars += ci_utf8_chars(counted, (apr_size_t)(at - counted));
        counted = at;
        json_object_array_add(out, citation(c, f, chars,
                                            chars + plen + ci_utf8_chars(f->name,
                                                                    strlen(f->name))));
        at = name + strlen(f->name);
    }
    return out;
}

static const char *part_key(apr_pool_t *p, const char *item_id, int index)
{
    return apr_psprintf(p, "%s#%d", item_id ? item_id : "", index);
}

json_object *ci_citer_part(ci_citer *c, const char *item_id, int index, const char *text)
{
    const char *key = part_key(c->p, item_id, index);
    json_object *known = apr_hash_get(c->parts, key, APR_HASH_KEY_STRING);
    if (known || !text)
        return known;
    known = ci_json_own(c->p, ci_citer_annotations(c, text));
    apr_hash_set(c->parts, key, APR_HASH_KEY_STRING, known);
    return known;
}

void ci_citer_apply_part(ci_citer *c, const char *item_id, int index, json_object *part)
{
    json_object *anns, *have;
    size_t i, n;
    if (!ci_json_is_type(part, "output_text"))
        return;
    anns = ci_citer_part(c, item_id, index, ci_json_str(part, "text"));
    if (!anns || !(n = json_object_array_length(anns)))
        return;
    if (!(have = ci_json_get(part, "annotations", json_type_array))) {
        have = json_object_new_array();
        json_object_object_add(part, "annotations", have);
    }
    for (i = 0; i < n; i++)
        json_object_array_add(have, json_object_get(json_object_array_get_idx(anns, i)));
}

void ci_citer_apply_item(ci_citer *c, json_object *item)
{
    json_object *content = ci_json_get(item, "content", json_type_array);
    const char *id = ci_json_str(item, "id");
    size_t i, n = content ? json_object_array_length(content) : 0;
    if (!ci_json_is_type(item, "message"))
        return;
    for (i = 0; i < n; i++)
        ci_citer_apply_part(c, id, (int)i, json_object_array_get_idx(content, i));
}
