/*
 * ci_directory.c - containers, owners, expiry and remembered items on one
 * node.
 *
 * Memory: the directory lives for days in one process, so nothing may pile
 * up in a pool. A container record has a pool of its own (destroyed when the
 * record is forgotten); remembered items and response ids are malloc'd and
 * freed with their container's record, or earlier, oldest first, past the
 * byte bound. Expiry scans the records: their number is bounded by the node's
 * cap plus those kept for retention, and a scan a second is cheap next to a
 * sandbox.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_crypto.h"
#include "ci_directory.h"
#include "ci_loop.h"

typedef struct rec rec;
typedef struct owner_list owner_list;

/* What a memo remembers: an item, the container a response used, or the
 * container a conversation's last turn used. */
typedef enum { MEMO_RESPONSE = 0, MEMO_ITEM, MEMO_CONVERSATION } memo_kind;

/* A remembered item, a response id or a conversation: one malloc'd block. */
typedef struct memo {
    struct memo *next_of_rec;               /* its container's, newest first */
    struct memo *older, *newer;             /* every item, by age (items only) */
    rec *container;
    const char *key;                        /* item id, response id, or
                                               conversation_key() */
    const char *text;                       /* items: what it stands for */
    apr_size_t bytes;
    int kind;                               /* memo_kind (an int: the size
                                               the items' bound counts, as
                                               ci_directory.lua does) */
} memo;

struct rec {
    ci_container c;
    apr_pool_t *pool;
    apr_time_t forget_at;                   /* expired or deleted: when it goes */
    int end_due;                            /* expired with a remote sandbox that
                                               nobody has claimed to end yet */
    rec *prev, *next;                       /* its owner's, oldest first */
    owner_list *owner;
    memo *memos;
};

struct owner_list {
    rec *first, *last;
    int live;
};

struct ci_directory {
    apr_pool_t *p;
    ci_directory_limits lim;
    apr_hash_t *by_id;                      /* container id -> rec */
    apr_hash_t *owners;                     /* owner -> owner_list (malloc'd) */
    apr_hash_t *items;                      /* item id -> memo */
    apr_hash_t *responses;                  /* response id -> memo */
    apr_hash_t *conversations;              /* conversation_key() -> memo */
    memo *oldest_item, *newest_item;
    apr_size_t item_bytes;
    int live;
    apr_uint64_t memory_live;               /* memory_bytes of running ones */
    ci_directory_busy_fn busy;              /* the host's probe, or NULL */
    void *busy_baton;
};

/* The directory's pool goes: free what was malloc'd (the records' pools go
 * with it). */
static apr_status_t free_all(void *data)
{
    ci_directory *d = data;
    apr_hash_t *maps[] = { d->items, d->responses, d->conversations, d->owners };
    int i;
    for (i = 0; i < 4; i++) {
        apr_hash_index_t *hi = apr_hash_first(NULL, maps[i]);
        for (; hi; hi = apr_hash_next(hi))
            free(apr_hash_this_val(hi));
    }
    return APR_SUCCESS;
}

ci_directory *ci_directory_create(apr_pool_t *p, const ci_directory_limits *limits)
{
    ci_directory *d;
    apr_pool_t *own;
    apr_pool_create(&own, p);
    d = apr_pcalloc(own, sizeof(*d));
    d->p = own;
    d->lim = *limits;
    d->by_id = apr_hash_make(own);
    d->owners = apr_hash_make(own);
    d->items = apr_hash_make(own);
    d->responses = apr_hash_make(own);
    d->conversations = apr_hash_make(own);
    apr_pool_pre_cleanup_register(own, d, free_all);
    return d;
}

static void bound_items(ci_directory *d);

/* ---- owners -------------------------------------------------------------- */

static owner_list *owner_of(ci_directory *d, const char *owner, int make)
{
    owner_list *o = apr_hash_get(d->owners, owner, APR_HASH_KEY_STRING);
    char *key;
    if (o || !make)
        return o;
    o = calloc(1, sizeof(*o) + strlen(owner) + 1);
    if (!o)
        return NULL;
    key = (char *)(o + 1);
    strcpy(key, owner);
    apr_hash_set(d->owners, key, APR_HASH_KEY_STRING, o);
    return o;
}

static void owner_drop_if_empty(ci_directory *d, rec *r)
{
    owner_list *o = r->owner;
    if (o->first)
        return;
    apr_hash_set(d->owners, (const char *)(o + 1), APR_HASH_KEY_STRING, NULL);
    free(o);
}

/* ---- remembered things ------------------------------------------------------ */

static void memo_unlink_age(ci_directory *d, memo *m)
{
    if (m->kind != MEMO_ITEM)
        return;
    if (m->older) m->older->newer = m->newer; else d->oldest_item = m->newer;
    if (m->newer) m->newer->older = m->older; else d->newest_item = m->older;
    d->item_bytes -= m->bytes;
}

static apr_hash_t *memos_of_kind(ci_directory *d, int kind)
{
    return kind == MEMO_ITEM ? d->items
         : kind == MEMO_CONVERSATION ? d->conversations : d->responses;
}

/* Forget M (its container's list is rebuilt by the caller when needed). */
static void memo_free(ci_directory *d, memo *m)
{
    apr_hash_set(memos_of_kind(d, m->kind), m->key, APR_HASH_KEY_STRING, NULL);
    memo_unlink_age(d, m);
    free(m);
}

static void memo_remove_from_rec(memo *m)
{
    memo **at;
    for (at = &m->container->memos; *at; at = &(*at)->next_of_rec)
        if (*at == m) {
            *at = m->next_of_rec;
            return;
        }
}

static memo *memo_make(rec *container, const char *key, const char *text, int kind)
{
    apr_size_t klen = strlen(key) + 1, tlen = text ? strlen(text) + 1 : 0;
    memo *m = calloc(1, sizeof(*m) + klen + tlen);
    char *at;
    if (!m)
        return NULL;
    at = (char *)(m + 1);
    m->key = memcpy(at, key, klen);
    m->text = text ? memcpy(at + klen, text, tlen) : NULL;
    m->bytes = sizeof(*m) + klen + tlen;
    m->container = container;
    m->kind = kind;
    m->next_of_rec = container->memos;
    container->memos = m;
    return m;
}

/* ---- records --------------------------------------------------------------- */

static void forget(ci_directory *d, rec *r)
{
    memo *m, *next;
    for (m = r->memos; m; m = next) {
        next = m->next_of_rec;
        memo_free(d, m);
    }
    apr_hash_set(d->by_id, r->c.id, APR_HASH_KEY_STRING, NULL);
    if (r->prev) r->prev->next = r->next; else r->owner->first = r->next;
    if (r->next) r->next->prev = r->prev; else r->owner->last = r->prev;
    owner_drop_if_empty(d, r);
    apr_pool_destroy(r->pool);
}

static apr_time_t expires_at(const ci_container *c)
{
    return c->last_active_at + apr_time_from_sec((apr_time_t)c->idle_seconds);
}

/* A running container stops: it is kept for retention, then forgotten. */
static void retire(ci_directory *d, rec *r, ci_cntr_status status, apr_time_t now)
{
    if (r->c.status == CI_CNTR_RUNNING) {
        d->live--;
        r->owner->live--;
        d->memory_live -= r->c.memory_bytes;
    }
    r->c.status = status;
    r->forget_at = now + d->lim.retention;
}

void ci_directory_set_busy_probe(ci_directory *d, ci_directory_busy_fn fn, void *baton)
{
    d->busy = fn;
    d->busy_baton = baton;
}

int ci_directory_busy(const ci_directory *d, const ci_container *c)
{
    return d->busy && d->busy(d->busy_baton, c);
}

/* Whether C is in use: a request holds it, it was used within the grace,
 * or an execution runs in it or waits (asked last: the host's probe). */
static int active(const ci_directory *d, const ci_container *c, apr_time_t now)
{
    return c->held_until > now || c->last_active_at + d->lim.grace > now ||
           ci_directory_busy(d, c);
}

/* The owner's least recently used running container that is not active. */
static rec *idlest(const ci_directory *d, owner_list *o, apr_time_t now)
{
    rec *r, *best = NULL;
    for (r = o->first; r; r = r->next)
        if (r->c.status == CI_CNTR_RUNNING && !active(d, &r->c, now) &&
            (!best || r->c.last_active_at < best->c.last_active_at))
            best = r;
    return best;
}

/* The node is full for O: its cap reached, or all but its reserve taken and
 * O holds at least as many as the reserve. */
static int node_full_for(const ci_directory *d, const owner_list *o)
{
    int cap = d->lim.max_containers, reserve = d->lim.reserve;
    if (cap <= 0)
        return 0;
    return d->live >= cap ||
           (reserve > 0 && reserve < cap && d->live >= cap - reserve && o->live >= reserve);
}

/* Make room under the caps and the memory budget for a container of
 * MEMORY bytes, from the owner's own containers only: one, its least
 * recently used idle one. */
static ci_dir_status admit(ci_directory *d, owner_list *o, apr_uint64_t memory,
                           apr_time_t now, ci_container **evicted)
{
    int owner_full = d->lim.max_per_owner > 0 && o->live >= d->lim.max_per_owner;
    int node_full = node_full_for(d, o);
    int budget_full = d->lim.memory_budget > 0 &&
                      d->memory_live + memory > d->lim.memory_budget;
    rec *victim;
    *evicted = NULL;
    if (!owner_full && !node_full && !budget_full)
        return CI_DIR_OK;
    if (!(victim = idlest(d, o, now)))
        return node_full ? CI_DIR_NODE_FULL : owner_full ? CI_DIR_OWNER_FULL
                                                         : CI_DIR_BUDGET_FULL;
    if (budget_full &&
        d->memory_live - victim->c.memory_bytes + memory > d->lim.memory_budget)
        return CI_DIR_BUDGET_FULL;
    retire(d, victim, CI_CNTR_EXPIRED, now);
    *evicted = &victim->c;
    return CI_DIR_OK;
}

static rec *new_rec(ci_directory *d, owner_list *o, const char *id,
                    const char *name, const char *tool, const char *memory_limit,
                    apr_uint64_t memory_bytes, int idle_seconds, apr_time_t now)
{
    apr_pool_t *rp;
    rec *r;
    apr_pool_create(&rp, d->p);
    r = apr_pcalloc(rp, sizeof(*r));
    r->pool = rp;
    r->owner = o;
    r->c.id = id ? apr_pstrdup(rp, id) : ci_mint_id(rp, "cntr_", 24);
    r->c.owner = (const char *)(o + 1);
    r->c.name = name ? apr_pstrdup(rp, name) : NULL;
    r->c.tool = apr_pstrdup(rp, tool);
    r->c.memory_limit = apr_pstrdup(rp, memory_limit ? memory_limit : "1g");
    r->c.created_at = r->c.last_active_at = now;
    r->c.idle_seconds = idle_seconds;
    r->c.memory_bytes = memory_bytes;
    d->memory_live += memory_bytes;
    r->c.status = CI_CNTR_RUNNING;
    r->prev = o->last;
    if (o->last) o->last->next = r; else o->first = r;
    o->last = r;
    o->live++;
    d->live++;
    apr_hash_set(d->by_id, r->c.id, APR_HASH_KEY_STRING, r);
    return r;
}

void ci_directory_set_limits(ci_directory *d, const ci_directory_limits *limits)
{
    d->lim = *limits;
    bound_items(d);
}

ci_dir_status ci_directory_create_container(ci_directory *d, const char *owner,
                                            const char *id, const char *name, const char *tool,
                                            const char *memory_limit,
                                            apr_uint64_t memory_bytes, int idle_seconds,
                                            apr_time_t now, ci_container **out,
                                            ci_container **evicted)
{
    owner_list *o;
    ci_dir_status st;
    *out = *evicted = NULL;
    if (!owner || !*owner)
        return CI_DIR_NO_OWNER;
    if (id && apr_hash_get(d->by_id, id, APR_HASH_KEY_STRING))
        return CI_DIR_NOT_FOUND;
    if (!(o = owner_of(d, owner, 1)))
        return CI_DIR_NODE_FULL;
    if ((st = admit(d, o, memory_bytes, now, evicted)) != CI_DIR_OK) {
        if (!o->first) {
            apr_hash_set(d->owners, owner, APR_HASH_KEY_STRING, NULL);
            free(o);
        }
        return st;
    }
    *out = &new_rec(d, o, id, name, tool, memory_limit, memory_bytes, idle_seconds,
                    now)->c;
    return CI_DIR_OK;
}

static rec *rec_of(ci_directory *d, const char *id, const char *owner)
{
    rec *r = id ? apr_hash_get(d->by_id, id, APR_HASH_KEY_STRING) : NULL;
    return r && ci_secret_equal(r->c.owner, owner) ? r : NULL;
}

static rec *rec_from(ci_container *c)
{
    return (rec *)((char *)c - offsetof(rec, c));
}

ci_dir_status ci_directory_get(ci_directory *d, const char *id, const char *owner,
                               ci_container **out)
{
    rec *r = rec_of(d, id, owner);
    *out = r ? &r->c : NULL;
    if (!r)
        return CI_DIR_NOT_FOUND;
    return r->c.status == CI_CNTR_RUNNING ? CI_DIR_OK : CI_DIR_EXPIRED;
}

void ci_directory_set_origin(ci_directory *d, ci_container *c, const char *provider,
                             const char *cred)
{
    apr_pool_t *rp = rec_from(c)->pool;
    c->provider = provider ? apr_pstrdup(rp, provider) : NULL;
    c->cred = cred ? apr_pstrdup(rp, cred) : NULL;
}

void ci_directory_set_network(ci_directory *d, ci_container *c, const char *allowlist,
                              const char *secrets)
{
    apr_pool_t *rp = rec_from(c)->pool;
    (void)d;
    c->allowlist = allowlist && *allowlist ? apr_pstrdup(rp, allowlist) : NULL;
    c->secrets = c->allowlist && secrets && *secrets ? apr_pstrdup(rp, secrets) : NULL;
}

void ci_directory_set_skills(ci_directory *d, ci_container *c, const char *skills)
{
    (void)d;
    c->skills = skills && *skills ? apr_pstrdup(rec_from(c)->pool, skills) : NULL;
}

void ci_directory_set_handle(ci_directory *d, ci_container *c, const char *handle)
{
    c->handle = handle ? apr_pstrdup(rec_from(c)->pool, handle) : NULL;
}

void ci_directory_hold(ci_directory *d, ci_container *c, apr_time_t until)
{
    (void)d;
    c->held_until = until;
}

void ci_directory_touch(ci_directory *d, ci_container *c, apr_time_t now)
{
    if (now > c->last_active_at)
        c->last_active_at = now;
}

ci_container *ci_directory_find(ci_directory *d, const char *id)
{
    rec *r = id ? apr_hash_get(d->by_id, id, APR_HASH_KEY_STRING) : NULL;
    return r ? &r->c : NULL;
}

void ci_directory_touch_id(ci_directory *d, const char *id, apr_time_t now)
{
    ci_container *c = ci_directory_find(d, id);
    if (c && c->status == CI_CNTR_RUNNING)
        ci_directory_touch(d, c, now);
}

void ci_directory_expire_now(ci_directory *d, ci_container *c, apr_time_t now)
{
    if (c->status == CI_CNTR_RUNNING)
        retire(d, rec_from(c), CI_CNTR_EXPIRED, now);
}

void ci_directory_revive(ci_directory *d, ci_container *c, int idle_seconds,
                         apr_time_t now)
{
    rec *r = rec_from(c);
    if (c->status != CI_CNTR_RUNNING) {
        d->live++;
        r->owner->live++;
        d->memory_live += c->memory_bytes;
        c->status = CI_CNTR_RUNNING;
        r->forget_at = 0;
    }
    c->idle_seconds = idle_seconds;
    ci_directory_touch(d, c, now);
}

void ci_directory_delete(ci_directory *d, ci_container *c, apr_time_t now)
{
    retire(d, rec_from(c), CI_CNTR_DELETED, now);
}

apr_array_header_t *ci_directory_expire(ci_directory *d, apr_time_t now, apr_pool_t *p)
{
    apr_array_header_t *out = apr_array_make(p, 4, sizeof(ci_container *));
    apr_array_header_t *gone = apr_array_make(p, 4, sizeof(rec *));
    apr_hash_index_t *hi;
    int i;
    for (hi = apr_hash_first(p, d->by_id); hi; hi = apr_hash_next(hi)) {
        rec *r = apr_hash_this_val(hi);
        if (r->c.status == CI_CNTR_RUNNING && r->c.held_until <= now &&
            expires_at(&r->c) <= now && !ci_directory_busy(d, &r->c)) {
            retire(d, r, CI_CNTR_EXPIRED, now);
            r->end_due = r->c.handle != NULL;
            *(ci_container **)apr_array_push(out) = &r->c;
        }
        else if (r->c.status != CI_CNTR_RUNNING && r->forget_at <= now)
            *(rec **)apr_array_push(gone) = r;
    }
    for (i = 0; i < gone->nelts; i++)   /* not while iterating the hash */
        forget(d, APR_ARRAY_IDX(gone, i, rec *));
    return out;
}

apr_array_header_t *ci_directory_claim_ends(ci_directory *d, int limit, apr_pool_t *p)
{
    apr_array_header_t *out = apr_array_make(p, 4, sizeof(ci_container *));
    apr_hash_index_t *hi;
    for (hi = apr_hash_first(p, d->by_id); hi && out->nelts < limit; hi = apr_hash_next(hi)) {
        rec *r = apr_hash_this_val(hi);
        if (r->end_due) {
            r->end_due = 0;
            *(ci_container **)apr_array_push(out) = &r->c;
        }
    }
    return out;
}

apr_array_header_t *ci_directory_running_ids(const ci_directory *d, apr_pool_t *p)
{
    apr_array_header_t *out = apr_array_make(p, 8, sizeof(const char *));
    apr_hash_index_t *hi;
    for (hi = apr_hash_first(p, d->by_id); hi; hi = apr_hash_next(hi)) {
        const rec *r = apr_hash_this_val(hi);
        if (r->c.status == CI_CNTR_RUNNING)
            *(const char **)apr_array_push(out) = apr_pstrdup(p, r->c.id);
    }
    return out;
}

apr_time_t ci_directory_next_expiry(const ci_directory *d)
{
    apr_hash_index_t *hi;
    apr_time_t next = 0;
    for (hi = apr_hash_first(NULL, d->by_id); hi; hi = apr_hash_next(hi)) {
        const rec *r = apr_hash_this_val(hi);
        if (r->c.status == CI_CNTR_RUNNING && (!next || expires_at(&r->c) < next))
            next = expires_at(&r->c);
    }
    return next;
}

apr_hash_t *ci_directory_tally(const ci_directory *d, apr_pool_t *p, int *retained)
{
    apr_hash_t *by_tool = apr_hash_make(p);
    apr_hash_index_t *hi;
    *retained = 0;
    for (hi = apr_hash_first(p, d->by_id); hi; hi = apr_hash_next(hi)) {
        const rec *r = apr_hash_this_val(hi);
        int *n;
        if (r->c.status != CI_CNTR_RUNNING) {
            (*retained)++;
            continue;
        }
        if (!(n = apr_hash_get(by_tool, r->c.tool, APR_HASH_KEY_STRING))) {
            n = apr_pcalloc(p, sizeof(*n));
            apr_hash_set(by_tool, apr_pstrdup(p, r->c.tool), APR_HASH_KEY_STRING, n);
        }
        (*n)++;
    }
    return by_tool;
}

int ci_directory_live(const ci_directory *d)
{
    return d->live;
}

int ci_directory_live_of(const ci_directory *d, const char *owner)
{
    const owner_list *o = owner ? apr_hash_get(d->owners, owner, APR_HASH_KEY_STRING)
                                : NULL;
    return o ? o->live : 0;
}

/* ---- listing ----------------------------------------------------------------- */

static int newer_first(const void *a, const void *b)
{
    const ci_container *x = *(ci_container *const *)a, *y = *(ci_container *const *)b;
    if (x->created_at != y->created_at)
        return x->created_at > y->created_at ? -1 : 1;
    return strcmp(y->id, x->id);
}

static int older_first(const void *a, const void *b)
{
    return newer_first(b, a);
}

apr_array_header_t *ci_directory_list(ci_directory *d, const char *owner,
                                      const char *after, int limit, int ascending,
                                      const char *name, int *has_more, apr_pool_t *p)
{
    owner_list *o = owner ? owner_of(d, owner, 0) : NULL;
    apr_array_header_t *all = apr_array_make(p, 8, sizeof(ci_container *));
    apr_array_header_t *page = apr_array_make(p, limit > 0 ? limit : 1,
                                              sizeof(ci_container *));
    rec *r;
    int i, start = 0;
    *has_more = 0;
    for (r = o ? o->first : NULL; r; r = r->next)
        if (r->c.status != CI_CNTR_DELETED &&
            (!name || (r->c.name && !strcmp(r->c.name, name))))
            *(ci_container **)apr_array_push(all) = &r->c;
    qsort(all->elts, all->nelts, sizeof(ci_container *),
          ascending ? older_first : newer_first);
    if (after) {
        for (i = 0; i < all->nelts; i++)
            if (!strcmp(APR_ARRAY_IDX(all, i, ci_container *)->id, after))
                break;
        start = i < all->nelts ? i + 1 : all->nelts;   /* unknown: an empty page */
    }
    for (i = start; i < all->nelts && page->nelts < limit; i++)
        *(ci_container **)apr_array_push(page) = APR_ARRAY_IDX(all, i, ci_container *);
    *has_more = i < all->nelts;
    return page;
}

/* ---- what the module returned -------------------------------------------------- */

/* Forget the memo KEY of MAP, if any, from its container's list too. */
static void memo_replace(ci_directory *d, apr_hash_t *map, const char *key)
{
    memo *old = apr_hash_get(map, key, APR_HASH_KEY_STRING);
    if (old) {
        memo_remove_from_rec(old);
        memo_free(d, old);
    }
}

/* KEY (a memo of KIND without text: a response id, a conversation) leads
 * to R from now on. */
static void lead_to(ci_directory *d, rec *r, const char *key, int kind)
{
    apr_hash_t *map = memos_of_kind(d, kind);
    memo *m;
    memo_replace(d, map, key);
    if ((m = memo_make(r, key, NULL, kind)))
        apr_hash_set(map, m->key, APR_HASH_KEY_STRING, m);
}

/* The container M leads to, when M is OWNER's; NULL otherwise. */
static const char *led_to(const memo *m, const char *owner)
{
    return m && ci_secret_equal(m->container->c.owner, owner) ? m->container->c.id
                                                                 : NULL;
}

void ci_directory_map_response(ci_directory *d, const char *response_id,
                               const char *owner, const char *container_id)
{
    rec *r = rec_of(d, container_id, owner);
    if (r)
        lead_to(d, r, response_id, MEMO_RESPONSE);
}

const char *ci_directory_response_container(ci_directory *d, const char *response_id,
                                            const char *owner)
{
    return led_to(apr_hash_get(d->responses, response_id, APR_HASH_KEY_STRING), owner);
}

/* Oldest items go first past the byte bound. */
static void bound_items(ci_directory *d)
{
    while (d->lim.max_items_bytes && d->item_bytes > d->lim.max_items_bytes &&
           d->oldest_item) {
        memo *m = d->oldest_item;
        memo_remove_from_rec(m);
        memo_free(d, m);
    }
}

void ci_directory_remember(ci_directory *d, const char *item_id, const char *owner,
                           const char *container_id, const char *text, apr_time_t now)
{
    rec *r = rec_of(d, container_id, owner);
    memo *m;
    if (!r)
        return;
    memo_replace(d, d->items, item_id);
    if (!(m = memo_make(r, item_id, text, MEMO_ITEM)))
        return;
    apr_hash_set(d->items, m->key, APR_HASH_KEY_STRING, m);
    m->older = d->newest_item;
    if (d->newest_item) d->newest_item->newer = m; else d->oldest_item = m;
    d->newest_item = m;
    d->item_bytes += m->bytes;
    bound_items(d);
}

/* OWNER's CONVERSATION as the directory keys it (malloc'd; NULL when out of
 * memory): "OWNER:CONVERSATION". Owners are keyed hashes, which hold no
 * ':', so no two owners' keys meet; each memo's owner is checked anyway. */
static char *conversation_key(const char *owner, const char *conversation)
{
    size_t olen = strlen(owner), clen = strlen(conversation);
    char *key = malloc(olen + 1 + clen + 1);
    if (!key)
        return NULL;
    memcpy(key, owner, olen);
    key[olen] = ':';
    memcpy(key + olen + 1, conversation, clen + 1);
    return key;
}

void ci_directory_map_conversation(ci_directory *d, const char *owner,
                                   const char *conversation, const char *container_id)
{
    rec *r = rec_of(d, container_id, owner);
    char *key = r ? conversation_key(owner, conversation) : NULL;
    if (!key)
        return;
    lead_to(d, r, key, MEMO_CONVERSATION);
    free(key);
}

const char *ci_directory_conversation_container(ci_directory *d, const char *owner,
                                                const char *conversation)
{
    char *key = conversation_key(owner, conversation);
    memo *m = key ? apr_hash_get(d->conversations, key, APR_HASH_KEY_STRING) : NULL;
    free(key);
    return led_to(m, owner);
}

void ci_directory_forget_item(ci_directory *d, const char *item_id, const char *owner)
{
    memo *m = apr_hash_get(d->items, item_id, APR_HASH_KEY_STRING);
    if (m && ci_secret_equal(m->container->c.owner, owner)) {
        memo_remove_from_rec(m);
        memo_free(d, m);
    }
}

const char *ci_directory_recall(ci_directory *d, const char *item_id, const char *owner)
{
    memo *m = apr_hash_get(d->items, item_id, APR_HASH_KEY_STRING);
    return m && ci_secret_equal(m->container->c.owner, owner) ? m->text : NULL;
}

const char *ci_directory_item_container(ci_directory *d, const char *item_id,
                                        const char *owner)
{
    return led_to(apr_hash_get(d->items, item_id, APR_HASH_KEY_STRING), owner);
}

int ci_directory_our_item(const char *id)
{
    return id && (!strncmp(id, "ci_", 3) || !strncmp(id, "sh_", 3) ||
                  !strncmp(id, "sho_", 4));
}
