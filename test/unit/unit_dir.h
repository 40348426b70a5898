/*
 * unit_dir.h - folders for the tests of what writes to disk: a fresh one
 * under /tmp, the names in one, one removed whole. Include after <cmocka.h>
 * and <apr_pools.h>.
 */
#ifndef UNIT_DIR_H
#define UNIT_DIR_H

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>

/* A new empty folder /tmp/NAME.XXXXXX, its path from P. */
static const char *unit_temp_dir(apr_pool_t *p, const char *name)
{
    char *dir = apr_pstrcat(p, "/tmp/", name, ".XXXXXX", NULL);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void unit_remove_dir(apr_pool_t *p, const char *dir)
{
    assert_int_equal(system(apr_psprintf(p, "rm -rf '%s'", dir)), 0);
}

/* The names in DIR (sorted, joined with spaces), dot-names too. */
static const char *unit_names_in(apr_pool_t *p, const char *dir)
{
    struct dirent **list;
    const char *out = "";
    int n = scandir(dir, &list, NULL, alphasort), i;
    assert_true(n >= 0);
    for (i = 0; i < n; i++) {
        if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
            out = *out ? apr_pstrcat(p, out, " ", list[i]->d_name, NULL)
                       : apr_pstrdup(p, list[i]->d_name);
        free(list[i]);
    }
    free(list);
    return out;
}

#endif
