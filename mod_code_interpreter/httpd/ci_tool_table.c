/*
 * ci_tool_table.c - the newest configuration's sandbox tools, in the
 * registry's shared memory: published by the parent at each generation,
 * read by the children to tell whether a request accepted before a reload
 * may still use its tool (ci_registry_tool_current).
 */
#include <apr_atomic.h>
#include <apr_strings.h>
#include "ci_settings.h"
#include "ci_registry_internal.h"

static void params_digest(const ci_sandbox_def *d, char *out)
{
    apr_pool_t *tmp;
    ci_reap_cred text;
    apr_pool_create(&tmp, NULL);
    text.locator = ci_sandbox_def_fingerprint(tmp, d);
    text.secret = "";
    ci_reg_digest_of("", &text, out);
    apr_pool_destroy(tmp);
}

static void table_entry(reg_tool_entry *e, const ci_sandbox_def *d)
{
    ci_reap_cred cred;
    memset(e, 0, sizeof(*e));
    apr_cpystrn(e->name, d->name, sizeof(e->name));
    params_digest(d, e->params);
    if (d->provider->reap_cred && d->provider->reap_cred(d, &cred))
        ci_reg_digest_of(d->provider->name, &cred, e->cred);
}

/* Parent: write the new tool table into the copy readers are not using,
 * then flip the sequence. */
void ci_reg_publish_table(apr_pool_t *pconf, server_rec *s, apr_uint32_t gen)
{
    apr_uint32_t seq = apr_atomic_read32(&ci_reg->table_seq);
    reg_tool_table *t = &ci_reg->tables[((seq >> 1) + 1) & 1];
    server_rec *v;
    memset(t, 0, sizeof(*t));
    t->generation = gen;
    t->published_at = apr_time_now();
    for (v = s; v; v = v->next) {
        ci_server_conf *vc = ci_server_config(v);
        apr_hash_index_t *hi;
        const ci_sandbox_def *local = apr_hash_get(vc->sandboxes, CI_DEFAULT_TOOL,
                                                   APR_HASH_KEY_STRING);
        if (!local && v == s && t->n < REG_TOOLS)
            table_entry(&t->e[t->n++], ci_sandbox_lookup(s, CI_DEFAULT_TOOL));
        for (hi = apr_hash_first(pconf, vc->sandboxes); hi; hi = apr_hash_next(hi)) {
            const ci_sandbox_def *d = apr_hash_this_val(hi);
            apr_uint32_t i;
            for (i = 0; i < t->n && strcmp(t->e[i].name, d->name); i++)
                ;
            if (i == t->n && t->n < REG_TOOLS)
                table_entry(&t->e[t->n++], d);
        }
    }
    apr_atomic_set32(&ci_reg->table_seq, seq + 2);
}

/* A consistent copy of the current tool table. */
static void read_table(reg_tool_table *out)
{
    for (;;) {
        apr_uint32_t seq = apr_atomic_read32(&ci_reg->table_seq);
        memcpy(out, &ci_reg->tables[(seq >> 1) & 1], sizeof(*out));
        if (apr_atomic_read32(&ci_reg->table_seq) == seq)
            return;
    }
}

int ci_registry_tool_current(const ci_sandbox_def *def, apr_time_t accepted)
{
    reg_tool_table t;
    reg_tool_entry mine;
    apr_uint32_t i;
    if (!ci_reg || !apr_atomic_read32(&ci_reg->table_seq))
        return 1;
    read_table(&t);
    if (accepted < t.published_at)
        return 1;      /* accepted before the reload: its own configuration */
    table_entry(&mine, def);
    for (i = 0; i < t.n; i++)
        if (!strcmp(t.e[i].name, def->name))
            return !strcmp(t.e[i].params, mine.params) &&
                   !strcmp(t.e[i].cred, mine.cred);
    return 0;
}
