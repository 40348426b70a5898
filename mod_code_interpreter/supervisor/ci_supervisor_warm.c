/*
 * ci_supervisor_warm.c - warm pools: sandboxes started in advance for the
 * definitions the server's parent wants (WARM_SET, or the configuration at
 * start), each handed whole to one request (WARM_TAKE) or to a new
 * container, and refilled in the background.
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"

/* A pool: COUNT ready sandboxes of DEF (its text DEFTEXT) wanted. */
struct want {
    apr_pool_t *pool;
    ci_sandbox_def *def;
    const char *deftext;
    int count;
    struct want *next;
};

static int warm_count(const want *w)
{
    box *b;
    int n = 0;
    for (b = sup_state.boxes; b; b = b->next)
        if (b->warm == w && !b->owner && !b->container && b->state != BOX_DEAD)
            n++;
    return n;
}

void sup_refill(void)
{
    want *w;
    sup_state.refill_due = 0;
    for (w = sup_state.wants; w; w = w->next) {
        int n = warm_count(w);
        for (; n < w->count; n++) {
            const char *err = NULL;
            int slot = sup_state.cfg->hooks->claim(w->def->name);
            box *b;
            if (slot < 0) {
                sup_state.refill_due = 1;
                return;
            }
            if (!(b = sup_box_start(w->def, w->deftext, "warm", &err))) {
                ci_log(CI_LOG_WARNING, "CI0613: a warm sandbox of tool %s could "
                       "not start: %s", w->def->name, err);
                sup_state.cfg->hooks->release(slot);
                sup_state.refill_due = 1;
                return;
            }
            b->warm = w;
            b->slot = slot;
        }
    }
}

/* Replace the wanted pools with WANTS (an array of ci_sup_want). Pools whose
 * definition is unchanged keep their sandboxes; the others are destroyed. */
static void set_wants(apr_array_header_t *wants)
{
    want *old = sup_state.wants, *w, *next;
    box *b, *bn;
    int i;
    sup_state.wants = NULL;
    for (i = 0; i < wants->nelts; i++) {
        ci_sup_want *sw = &APR_ARRAY_IDX(wants, i, ci_sup_want);
        apr_pool_t *p;
        if (sw->count <= 0)
            continue;
        apr_pool_create(&p, sup_state.p);
        w = apr_pcalloc(p, sizeof(*w));
        w->pool = p;
        w->def = ci_sandbox_def_copy(p, sw->def);
        w->deftext = apr_pstrdup(p, sw->deftext);
        w->count = sw->count;
        w->next = sup_state.wants;
        sup_state.wants = w;
    }
    /* Move warm sandboxes to the new pool of the same definition. */
    for (b = sup_state.boxes; b; b = bn) {
        bn = b->next;
        if (!b->warm || b->owner || b->container)
            continue;
        for (w = sup_state.wants; w && strcmp(w->deftext, b->deftext); w = w->next)
            ;
        if (w)
            b->warm = w;
        else
            sup_box_free(b);
    }
    for (w = old; w; w = next) {
        next = w->next;
        apr_pool_destroy(w->pool);
    }
    sup_refill();
}

void sup_handle_warm_set(conn *c, const ci_sup_frame *f)
{
    apr_pool_t *p;
    apr_array_header_t *wants;
    const char *err = NULL;
    if (!c->is_parent) {
        sup_send_text(c, CI_SUP_ERROR, 0, "only the server's parent sets the warm pools");
        return;
    }
    apr_pool_create(&p, sup_state.p);
    if (!(wants = ci_sup_warm_decode(p, f, &err)))
        sup_send_text(c, CI_SUP_ERROR, 0, err);
    else {
        set_wants(wants);
        sup_send_frame(c, CI_SUP_OK, 0, NULL, 0);
    }
    apr_pool_destroy(p);
}

/* A ready warm sandbox of DEFTEXT, or NULL. */
box *sup_warm_ready(const char *deftext)
{
    box *b;
    for (b = sup_state.boxes; b; b = b->next)
        if (b->warm && !b->owner && !b->container && b->state == BOX_IDLE &&
            !strcmp(b->deftext, deftext))
            return b;
    return NULL;
}

void sup_start_wants(apr_pool_t *p)
{
    ci_sup_frame f;
    apr_array_header_t *wants;
    const char *err = NULL;
    if (!sup_state.cfg->wants)
        return;
    f.type = CI_SUP_WARM_SET;
    f.id = 0;
    f.data = sup_state.cfg->wants;
    f.len = sup_state.cfg->wants_len;
    if ((wants = ci_sup_warm_decode(p, &f, &err)))
        set_wants(wants);
    else
        ci_log(CI_LOG_ERR, "CI0616: warm pools not understood: %s", err);
}
