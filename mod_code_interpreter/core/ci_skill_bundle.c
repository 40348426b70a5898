/*
 * ci_skill_bundle.c - a skill upload turned into a validated bundle (see
 * ci_skill_bundle.h): the paths, the limits, the manifest and its front
 * matter, the content address, and the zip in both directions.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>

#include "ci_buf.h"
#include "ci_json.h"
#include "ci_skill_bundle.h"

/* What libarchive is asked for at once while a file is decompressed: the
 * caps are checked after each such read, so a bomb is stopped within this
 * many bytes of its cap. */
#define READ_CHUNK (64 * 1024)
/* A path shown in a refusal is cut after this many bytes of it. */
#define SHOWN_MAX 200
/* The time of every entry written: 1980-01-02 00:00 UTC, the first day a
 * zip's DOS time holds in every time zone. */
#define ZIP_TIME 315619200

struct ci_skill_builder {
    apr_pool_t *p;
    ci_skill_limits limits;
    const char *folder;          /* the first path's folder */
    apr_array_header_t *files;   /* of ci_skill_file */
    apr_size_t total;
    const char *refused;         /* the first refusal, repeated after it */
};

static const ci_skill_limits default_limits = CI_SKILL_LIMITS_DEFAULT;

/* ======================================================================== */
/* a path shown safely                                                      */
/* ======================================================================== */

/* The bytes of a UTF-8 character starting with LEAD (0: not a lead byte). */
static apr_size_t utf8_width(unsigned char lead)
{
    if (lead >= 0xC2 && lead <= 0xDF)
        return 2;
    if (lead >= 0xE0 && lead <= 0xEF)
        return 3;
    if (lead >= 0xF0 && lead <= 0xF4)
        return 4;
    return 0;
}

/* Whether the character of K bytes at S is a control character: C0, DEL,
 * or C1 (U+0080 to U+009F, "\xC2\x80" to "\xC2\x9F"). */
static int is_control(const unsigned char *s, apr_size_t k)
{
    if (k == 1)
        return s[0] < 0x20 || s[0] == 0x7F;
    return k == 2 && s[0] == 0xC2 && s[1] < 0xA0;
}

/* The length of the valid, non-control UTF-8 character at S (N bytes
 * left), 0 when there is none. */
static apr_size_t printable_char(const char *s, apr_size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    apr_size_t k = u[0] < 0x80 ? 1 : utf8_width(u[0]);
    if (!k || k > n || ci_utf8_valid_prefix(s, k) != k || is_control(u, k))
        return 0;
    return k;
}

/* NAME for a message: printable UTF-8 as it is, any other byte as \xNN,
 * cut after SHOWN_MAX bytes of NAME with "...". */
static const char *shown(apr_pool_t *p, const char *name)
{
    apr_size_t n = strlen(name), i = 0, o = 0;
    apr_size_t end = n > SHOWN_MAX ? SHOWN_MAX : n;
    char *out = apr_palloc(p, end * 4 + 4);
    while (i < end) {
        apr_size_t k = printable_char(name + i, n - i);
        if (k) {
            memcpy(out + o, name + i, k);
            o += k;
            i += k;
        }
        else {
            apr_snprintf(out + o, 5, "\\x%02X", (unsigned char)name[i]);
            o += 4;
            i++;
        }
    }
    if (i < n) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* ======================================================================== */
/* the builder: paths and limits                                            */
/* ======================================================================== */

static int refuse(ci_skill_builder *b, const char *why, const char **err)
{
    b->refused = why;
    *err = why;
    return -1;
}

ci_skill_builder *ci_skill_builder_make(apr_pool_t *p, const ci_skill_limits *limits)
{
    ci_skill_builder *b = apr_pcalloc(p, sizeof(*b));
    b->p = p;
    b->limits = limits ? *limits : default_limits;
    b->files = apr_array_make(p, 16, sizeof(ci_skill_file));
    return b;
}

/* Why NAME (N bytes) is not valid UTF-8 free of control characters, or
 * NULL. */
static const char *name_chars(apr_pool_t *p, const char *name, apr_size_t n)
{
    apr_size_t i;
    if (ci_utf8_valid_prefix(name, n) != n)
        return apr_psprintf(p, CI_SKILL_E_UTF8_NAME, shown(p, name));
    for (i = 0; i < n; i++) {
        const unsigned char *u = (const unsigned char *)name + i;
        if (is_control(u, u[0] == 0xC2 && i + 1 < n ? 2 : 1))
            return apr_psprintf(p, CI_SKILL_E_CONTROL, shown(p, name));
    }
    if (memchr(name, '\\', n))
        return apr_psprintf(p, CI_SKILL_E_BACKSLASH, shown(p, name));
    return NULL;
}

/* Why the segments of PATH (N bytes, no leading '/') are not a folder and a
 * plain path inside it, or NULL. A directory (IS_DIR) may be the folder
 * alone. */
static const char *name_segments(apr_pool_t *p, const char *path, apr_size_t n, int is_dir)
{
    apr_size_t start = 0, segments = 0;
    int odd = 0;
    while (start <= n) {
        const char *slash = memchr(path + start, '/', n - start);
        apr_size_t len = (slash ? (apr_size_t)(slash - path) : n) - start;
        if (len == 2 && path[start] == '.' && path[start + 1] == '.')
            return apr_psprintf(p, CI_SKILL_E_LEAVES, shown(p, path));
        if (len == 0 || (len == 1 && path[start] == '.'))
            odd = 1;             /* reported once no '..' is found */
        segments++;
        start += len + 1;
    }
    if (odd)
        return apr_psprintf(p, CI_SKILL_E_SEGMENT, shown(p, path));
    if (segments == 1 && !is_dir)
        return apr_psprintf(p, CI_SKILL_E_TOP_LEVEL, shown(p, path));
    if (segments - 1 > CI_SKILL_MAX_DEPTH)
        return apr_psprintf(p, CI_SKILL_E_DEEP, shown(p, path),
                            (unsigned long)CI_SKILL_MAX_DEPTH);
    return NULL;
}

/* Check NAME as an entry of B's folder; *REL is the path inside the folder
 * ("" for the folder itself). NULL, or why not. */
static const char *builder_path(ci_skill_builder *b, const char *name, int is_dir,
                                const char **rel)
{
    apr_pool_t *p = b->p;
    apr_size_t n = name ? strlen(name) : 0;
    const char *why, *slash;
    char *folder;
    if (!n)
        return CI_SKILL_E_EMPTY_NAME;
    if (n > CI_SKILL_MAX_PATH)
        return apr_psprintf(p, CI_SKILL_E_LONG_NAME, shown(p, name),
                            (unsigned long)CI_SKILL_MAX_PATH);
    if ((why = name_chars(p, name, n)))
        return why;
    if (name[0] == '/')
        return apr_psprintf(p, CI_SKILL_E_LEAVES, shown(p, name));
    if (is_dir && name[n - 1] == '/')
        n--;                                /* "folder/sub/" */
    if ((why = name_segments(p, apr_pstrmemdup(p, name, n), n, is_dir)))
        return why;
    slash = memchr(name, '/', n);
    folder = apr_pstrmemdup(p, name, slash ? (apr_size_t)(slash - name) : n);
    if (!b->folder)
        b->folder = folder;
    else if (strcmp(folder, b->folder))
        return apr_psprintf(p, CI_SKILL_E_TWO_FOLDERS, shown(p, name), shown(p, b->folder));
    *rel = slash ? apr_pstrmemdup(p, slash + 1, n - (slash + 1 - name)) : "";
    return NULL;
}

/* Whether one more file fits the count. */
static const char *builder_count(ci_skill_builder *b)
{
    if ((apr_size_t)b->files->nelts >= b->limits.max_files)
        return apr_psprintf(b->p, CI_SKILL_E_TOO_MANY, (unsigned long)b->limits.max_files);
    return NULL;
}

/* Whether a file NAME of SIZE bytes fits the caps. */
static const char *builder_room(ci_skill_builder *b, const char *name, apr_size_t size)
{
    if (size > b->limits.max_file)
        return apr_psprintf(b->p, CI_SKILL_E_FILE_SIZE, shown(b->p, name),
                            (unsigned long)b->limits.max_file);
    if (size > b->limits.max_total || b->total > b->limits.max_total - size)
        return apr_psprintf(b->p, CI_SKILL_E_TOTAL_SIZE, (unsigned long)b->limits.max_total);
    return NULL;
}

static void builder_push(ci_skill_builder *b, const char *rel, const char *data,
                         apr_size_t len)
{
    ci_skill_file *f = apr_array_push(b->files);
    f->path = rel;
    f->data = data;
    f->len = len;
    b->total += len;
}

int ci_skill_builder_add(ci_skill_builder *b, const char *filename, const char *data,
                         apr_size_t len, const char **err)
{
    const char *rel = NULL, *why;
    if (b->refused)
        return refuse(b, b->refused, err);
    if ((why = builder_path(b, filename, 0, &rel)) || (why = builder_count(b)) ||
        (why = builder_room(b, filename, len)))
        return refuse(b, why, err);
    builder_push(b, rel, data ? data : "", len);
    return 0;
}

/* ======================================================================== */
/* the files together: order, duplicates, the manifest                      */
/* ======================================================================== */

static int by_path(const void *a, const void *b)
{
    return strcmp(((const ci_skill_file *)a)->path, ((const ci_skill_file *)b)->path);
}

static const char *full(ci_skill_builder *b, const char *rel)
{
    return shown(b->p, apr_pstrcat(b->p, b->folder, "/", rel, NULL));
}

static const char *exact_duplicates(ci_skill_builder *b)
{
    const ci_skill_file *f = (const ci_skill_file *)b->files->elts;
    int i;
    for (i = 1; i < b->files->nelts; i++)
        if (!strcmp(f[i - 1].path, f[i].path))
            return apr_psprintf(b->p, CI_SKILL_E_DUPLICATE, full(b, f[i].path));
    return NULL;
}

/* The manifest's index in the sorted files: the one file directly in the
 * folder named SKILL.md in any ASCII case. -1 and *WHY when not one. */
static int find_manifest(ci_skill_builder *b, const char **why)
{
    const ci_skill_file *f = (const ci_skill_file *)b->files->elts;
    int i, found = -1;
    for (i = 0; i < b->files->nelts; i++) {
        if (strcasecmp(f[i].path, "SKILL.md"))
            continue;
        if (found >= 0) {
            *why = apr_psprintf(b->p, CI_SKILL_E_TWO_MANIFESTS, full(b, f[found].path),
                                full(b, f[i].path));
            return -1;
        }
        found = i;
    }
    if (found < 0)
        *why = CI_SKILL_E_NO_MANIFEST;
    return found;
}

static char *lower(apr_pool_t *p, const char *s, apr_size_t n)
{
    char *out = apr_pstrmemdup(p, s, n);
    apr_size_t i;
    for (i = 0; i < n; i++)
        out[i] = apr_tolower(out[i]);
    return out;
}

/* Paths equal but for ASCII case, and a file that is also a folder of
 * another (compared ignoring case too). */
static const char *case_clashes(ci_skill_builder *b)
{
    const ci_skill_file *f = (const ci_skill_file *)b->files->elts;
    apr_hash_t *seen = apr_hash_make(b->p);
    const char *other, *slash;
    int i;
    for (i = 0; i < b->files->nelts; i++) {
        char *key = lower(b->p, f[i].path, strlen(f[i].path));
        if ((other = apr_hash_get(seen, key, APR_HASH_KEY_STRING)))
            return apr_psprintf(b->p, CI_SKILL_E_CASE_DUPLICATE, full(b, other),
                                full(b, f[i].path));
        apr_hash_set(seen, key, APR_HASH_KEY_STRING, f[i].path);
    }
    for (i = 0; i < b->files->nelts; i++)
        for (slash = strchr(f[i].path, '/'); slash; slash = strchr(slash + 1, '/')) {
            char *key = lower(b->p, f[i].path, slash - f[i].path);
            if ((other = apr_hash_get(seen, key, APR_HASH_KEY_STRING)))
                return apr_psprintf(b->p, CI_SKILL_E_FILE_AND_DIR, full(b, other),
                                    full(b, f[i].path));
        }
    return NULL;
}

/* ======================================================================== */
/* SKILL.md's front matter                                                  */
/* ======================================================================== */
/*
 * A strict reader of the YAML that skills' front matter is written in, and
 * nothing more (no YAML library is among the module's dependencies):
 *   - the file starts (after an optional UTF-8 BOM) with a line "---"; the
 *     front matter ends at the next line "---";
 *   - between them: blank lines, comment lines ("#" in column 1), and
 *     top-level "key: value" lines, keys of [A-Za-z0-9_-], each key once;
 *   - a value is plain (up to " #", trimmed; no ": " inside, not starting
 *     with a flow, anchor, alias, tag or sequence indicator), 'single'- or
 *     "double"-quoted on its one line (\" \\ \/ \n \t \r \uXXXX), or a
 *     block scalar "|" or ">" (with "-" or "+" chomping) over the indented
 *     lines that follow, folded or literal as YAML does;
 *   - a key with no value may be followed by an indented block (a mapping
 *     such as "metadata:", a list): it is skipped unread, for any key but
 *     name and description;
 *   - anything else (an indented line where no block was opened, tabs as
 *     indentation, a plain value continued on the next line) is refused
 *     with the line's number, rather than read differently from YAML.
 * Lines end with LF or CRLF. Only name and description are kept.
 */

typedef struct fm_line {
    const char *s;
    apr_size_t n;
} fm_line;

typedef struct fm_reader {
    apr_pool_t *p;
    fm_line *lines;   /* the front matter's lines, [0] being line 2 of the file */
    int count;
    int at;           /* the next line to read */
    const char *name, *description;
    apr_hash_t *keys;
} fm_reader;

/* The lines of TEXT (N bytes), without their LF or CRLF. */
static apr_array_header_t *split_lines(apr_pool_t *p, const char *text, apr_size_t n)
{
    apr_array_header_t *lines = apr_array_make(p, 32, sizeof(fm_line));
    apr_size_t at = 0;
    while (at < n) {
        const char *nl = memchr(text + at, '\n', n - at);
        apr_size_t end = nl ? (apr_size_t)(nl - text) : n;
        fm_line *l = apr_array_push(lines);
        l->s = text + at;
        l->n = end - at;
        if (l->n && l->s[l->n - 1] == '\r')
            l->n--;
        at = end + 1;
    }
    return lines;
}

static int is_fence(const fm_line *l)
{
    apr_size_t n = l->n;
    while (n > 3 && (l->s[n - 1] == ' ' || l->s[n - 1] == '\t'))
        n--;
    return n == 3 && !memcmp(l->s, "---", 3);
}

static int is_blank(const fm_line *l)
{
    apr_size_t i;
    for (i = 0; i < l->n; i++)
        if (l->s[i] != ' ' && l->s[i] != '\t')
            return 0;
    return 1;
}

static apr_size_t indent_of(const fm_line *l)
{
    apr_size_t i = 0;
    while (i < l->n && l->s[i] == ' ')
        i++;
    return i;
}

/* The file's line number of the front matter's line I. */
static int line_no(int i)
{
    return i + 2;
}

static const char *fm_unsupported(fm_reader *r, int i)
{
    return apr_psprintf(r->p, CI_SKILL_E_FM_UNSUPPORTED, line_no(i));
}

/* The lines after the current one that belong to it (blank or indented):
 * their count. */
static int block_extent(fm_reader *r)
{
    int i = r->at;
    while (i < r->count && (is_blank(&r->lines[i]) || r->lines[i].s[0] == ' ' ||
                            r->lines[i].s[0] == '\t'))
        i++;
    return i - r->at;
}

/* S (N bytes) with trailing blanks and a " #" comment taken off: its new
 * length. */
static apr_size_t trim_comment(const char *s, apr_size_t n)
{
    apr_size_t i;
    for (i = 0; i < n; i++)
        if (s[i] == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
            n = i;
            break;
        }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return n;
}

/* A plain value S (N bytes, comment taken off). */
static const char *fm_plain(fm_reader *r, int i, const char *s, apr_size_t n,
                            const char **value)
{
    if (strchr("[]{}&*!%@`|>,", s[0]) || (n >= 2 && strchr("-?:", s[0]) && s[1] == ' ') ||
        (n == 1 && strchr("-?:", s[0])))
        return fm_unsupported(r, i);
    if (s[n - 1] == ':')
        return fm_unsupported(r, i);
    {
        apr_size_t k;
        for (k = 0; k + 1 < n; k++)
            if (s[k] == ':' && (s[k + 1] == ' ' || s[k + 1] == '\t'))
                return fm_unsupported(r, i);
    }
    *value = apr_pstrmemdup(r->p, s, n);
    return NULL;
}

/* Four hex digits at S as a number, -1 when they are not. */
static long hex4(const char *s, apr_size_t n)
{
    long v = 0;
    apr_size_t i;
    if (n < 4)
        return -1;
    for (i = 0; i < 4; i++) {
        int c = apr_tolower(s[i]);
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (c - 'a' + 10);
        else
            return -1;
    }
    return v;
}

/* Append code point CP (BMP, not a surrogate) to OUT as UTF-8. */
static void put_utf8(ci_buf *out, long cp)
{
    char u[3];
    if (cp < 0x80) {
        u[0] = (char)cp;
        ci_buf_append(out, u, 1);
    }
    else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        ci_buf_append(out, u, 2);
    }
    else {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        ci_buf_append(out, u, 3);
    }
}

/* One escape of a double-quoted value at S[*K] (after the backslash);
 * -1 when it is not one read here. */
static int fm_escape(ci_buf *out, const char *s, apr_size_t n, apr_size_t *k)
{
    static const char from[] = "\"\\/ntr", to[] = "\"\\/\n\t\r";
    const char *at;
    long cp;
    if (*k >= n)
        return -1;
    if (s[*k] != 'u') {
        if (!s[*k] || !(at = strchr(from, s[*k])))
            return -1;
        ci_buf_append(out, to + (at - from), 1);
        (*k)++;
        return 0;
    }
    cp = hex4(s + *k + 1, n - *k - 1);
    if (cp < 0 || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    put_utf8(out, cp);
    *k += 5;
    return 0;
}

/* A quoted value starting at S[0] (its quote) on line I: *VALUE, and what
 * follows the closing quote must be blank or a comment. */
static const char *fm_quoted(fm_reader *r, int i, const char *s, apr_size_t n,
                             const char **value)
{
    char q = s[0];
    apr_size_t k = 1;
    ci_buf out;
    ci_buf_init(&out, r->p, n);
    for (;;) {
        if (k >= n)
            return apr_psprintf(r->p, CI_SKILL_E_FM_QUOTE, line_no(i));
        if (s[k] == q && q == '\'' && k + 1 < n && s[k + 1] == '\'') {
            ci_buf_append(&out, "'", 1);
            k += 2;
        }
        else if (s[k] == q) {
            k++;
            break;
        }
        else if (q == '"' && s[k] == '\\') {
            k++;
            if (fm_escape(&out, s, n, &k) < 0)
                return apr_psprintf(r->p, CI_SKILL_E_FM_QUOTE, line_no(i));
        }
        else
            ci_buf_append(&out, s + k++, 1);
    }
    if (k < n && ((s[k] != ' ' && s[k] != '\t') || trim_comment(s + k, n - k) != 0))
        return fm_unsupported(r, i);      /* only a comment may follow */
    *value = apr_pstrdup(r->p, ci_buf_str(&out));
    return NULL;
}

/* What goes between two lines of a block scalar (AFTER: not before its
 * first), BLANKS blank lines between them: a literal block keeps every line
 * break; a folded one makes a single break a space, unless a line is more
 * indented (MORE), and keeps the breaks of blank lines alone. */
static void fm_join(ci_buf *out, char style, int after, int blanks, int more)
{
    if (after && style == '>' && !blanks && !more)
        ci_buf_append(out, " ", 1);
    else if (after && (style == '|' || !blanks))
        blanks++;
    for (; blanks > 0; blanks--)
        ci_buf_append(out, "\n", 1);
}

/* The block scalar whose header (after '|' or '>') is S (N bytes), its
 * lines being the COUNT lines after the current one. */
static const char *fm_block(fm_reader *r, int i, char style, const char *s, apr_size_t n,
                            int count, const char **value)
{
    char chomp = n && (s[0] == '-' || s[0] == '+') ? s[0] : 0;
    apr_size_t indent = 0, hdr = chomp ? 1 : 0;
    int j, last = -1, blanks = 0, prev = -1, prev_more = 0;
    ci_buf out;
    if (trim_comment(s + hdr, n - hdr) != 0 || (hdr < n && s[hdr] != ' ' && s[hdr] != '\t'))
        return fm_unsupported(r, i);
    for (j = r->at; j < r->at + count; j++) {
        const fm_line *l = &r->lines[j];
        if (is_blank(l))
            continue;
        if (l->s[0] == '\t' || (indent && indent_of(l) < indent))
            return fm_unsupported(r, j);
        if (!indent)
            indent = indent_of(l);
        last = j;
    }
    ci_buf_init(&out, r->p, APR_SIZE_MAX);
    for (j = r->at; j <= last; j++) {
        const fm_line *l = &r->lines[j];
        int more;
        if (is_blank(l)) {
            blanks++;
            continue;
        }
        more = l->n > indent && l->s[indent] == ' ';
        fm_join(&out, style, prev >= 0, blanks, more || prev_more);
        ci_buf_append(&out, l->s + indent, l->n - indent);
        blanks = 0;
        prev = j;
        prev_more = more;
    }
    if (last >= 0 && chomp != '-')
        ci_buf_append(&out, "\n", 1);
    if (last >= 0 && chomp == '+')
        for (j = last + 1; j < r->at + count; j++)
            ci_buf_append(&out, "\n", 1);
    *value = apr_pstrdup(r->p, ci_buf_str(&out));
    r->at += count;
    return NULL;
}

/* The value of the key on line I, S (N bytes) being what follows "key:". */
static const char *fm_value(fm_reader *r, int i, int wanted, const char *s, apr_size_t n,
                            const char **value)
{
    int count;
    const char *why;
    while (n && (s[0] == ' ' || s[0] == '\t')) {
        s++;
        n--;
    }
    count = block_extent(r);
    if (n && (s[0] == '|' || s[0] == '>'))
        return fm_block(r, i, s[0], s + 1, n - 1, count, value);
    if (trim_comment(s, n) == 0) {
        int j;
        for (j = r->at; j < r->at + count; j++)
            if (!is_blank(&r->lines[j]) && wanted)
                return fm_unsupported(r, j);
        r->at += count;        /* a nested block of another key, unread */
        *value = "";
        return NULL;
    }
    if (s[0] == '"' || s[0] == '\'')
        why = fm_quoted(r, i, s, n, value);
    else
        why = fm_plain(r, i, s, trim_comment(s, n), value);
    if (why)
        return why;
    for (; count > 0; count--, r->at++)
        if (!is_blank(&r->lines[r->at]))
            return fm_unsupported(r, r->at);
    return NULL;
}

/* One top-level line I ("key: value", a comment or blank). */
static const char *fm_entry(fm_reader *r)
{
    int i = r->at++;
    const fm_line *l = &r->lines[i];
    apr_size_t k = 0;
    const char *key, *value = NULL, *why;
    int wanted;
    if (is_blank(l) || l->s[0] == '#')
        return NULL;
    while (k < l->n && (apr_isalnum(l->s[k]) || l->s[k] == '_' || l->s[k] == '-'))
        k++;
    if (!k || k >= l->n || l->s[k] != ':' ||
        (k + 1 < l->n && l->s[k + 1] != ' ' && l->s[k + 1] != '\t'))
        return apr_psprintf(r->p, CI_SKILL_E_FM_LINE, line_no(i));
    key = apr_pstrmemdup(r->p, l->s, k);
    if (apr_hash_get(r->keys, key, APR_HASH_KEY_STRING))
        return apr_psprintf(r->p, CI_SKILL_E_FM_REPEATED, line_no(i), shown(r->p, key));
    apr_hash_set(r->keys, key, APR_HASH_KEY_STRING, key);
    wanted = !strcmp(key, "name") || !strcmp(key, "description");
    if ((why = fm_value(r, i, wanted, l->s + k + 1, l->n - k - 1, &value)))
        return why;
    if (!strcmp(key, "name"))
        r->name = value;
    else if (!strcmp(key, "description"))
        r->description = value;
    return NULL;
}

/* Whether NAME is 1 to 64 of [a-z0-9-], no hyphen first, last or doubled. */
static int valid_name(const char *name)
{
    apr_size_t n = strlen(name), i;
    if (n < 1 || n > 64 || name[0] == '-' || name[n - 1] == '-' || strstr(name, "--"))
        return 0;
    for (i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || apr_isdigit(name[i]) || name[i] == '-'))
            return 0;
    return 1;
}

/* Whether DESC is 1 to 1024 characters, none a control but LF and tab. */
static int valid_description(const char *desc)
{
    apr_size_t n = strlen(desc), i, chars = ci_utf8_chars(desc, n);
    if (chars < 1 || chars > 1024)
        return 0;
    for (i = 0; i < n; i++) {
        const unsigned char *u = (const unsigned char *)desc + i;
        if (u[0] != '\n' && u[0] != '\t' && is_control(u, u[0] == 0xC2 && i + 1 < n ? 2 : 1))
            return 0;
    }
    return 1;
}

/* The front matter's lines of MD: from after the opening fence to before
 * the closing one. */
static const char *fm_lines(fm_reader *r, const char *md, apr_size_t n)
{
    apr_array_header_t *lines;
    fm_line *l;
    int i;
    if (n >= 3 && !memcmp(md, "\xEF\xBB\xBF", 3)) {
        md += 3;
        n -= 3;
    }
    lines = split_lines(r->p, md, n);
    l = (fm_line *)lines->elts;
    if (!lines->nelts || !is_fence(&l[0]))
        return CI_SKILL_E_FM_MISSING;
    for (i = 1; i < lines->nelts; i++)
        if (is_fence(&l[i])) {
            r->lines = l + 1;
            r->count = i - 1;
            return NULL;
        }
    return CI_SKILL_E_FM_UNCLOSED;
}

/* Read the manifest MD (N bytes) into BUNDLE's name and description. */
static const char *read_manifest(apr_pool_t *p, const char *md, apr_size_t n,
                                 ci_skill_bundle *bundle)
{
    fm_reader r;
    const char *why;
    if (ci_utf8_valid_prefix(md, n) != n)
        return CI_SKILL_E_MD_UTF8;
    memset(&r, 0, sizeof(r));
    r.p = p;
    r.keys = apr_hash_make(p);
    if ((why = fm_lines(&r, md, n)))
        return why;
    while (r.at < r.count)
        if ((why = fm_entry(&r)))
            return why;
    if (!r.name)
        return CI_SKILL_E_NO_NAME;
    if (!valid_name(r.name))
        return CI_SKILL_E_NAME;
    if (!r.description)
        return CI_SKILL_E_NO_DESCRIPTION;
    if (!valid_description(r.description))
        return CI_SKILL_E_DESCRIPTION;
    bundle->name = r.name;
    bundle->description = r.description;
    return NULL;
}

/* ======================================================================== */
/* the bundle                                                               */
/* ======================================================================== */

const char *ci_skill_bundle_digest(apr_pool_t *p, const char *folder,
                                   const ci_skill_file *files, int n)
{
    static const char tag[] = "ci-skill-1";
    unsigned char md[EVP_MAX_MD_SIZE], size[8];
    unsigned int mdlen = 0, k;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char *hex;
    int i, ok;
    if (!ctx)
        return NULL;
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
         EVP_DigestUpdate(ctx, tag, sizeof(tag)) &&
         EVP_DigestUpdate(ctx, folder, strlen(folder) + 1);
    for (i = 0; ok && i < n; i++) {
        apr_uint64_t len = files[i].len;
        for (k = 0; k < 8; k++)
            size[k] = (unsigned char)(len >> (56 - 8 * k));
        ok = EVP_DigestUpdate(ctx, files[i].path, strlen(files[i].path) + 1) &&
             EVP_DigestUpdate(ctx, size, 8) &&
             EVP_DigestUpdate(ctx, files[i].data, files[i].len);
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return NULL;
    hex = apr_palloc(p, mdlen * 2 + 1);
    for (k = 0; k < mdlen; k++)
        apr_snprintf(hex + 2 * k, 3, "%02x", md[k]);
    return hex;
}

int ci_skill_builder_finish(ci_skill_builder *b, ci_skill_bundle **out, const char **err)
{
    ci_skill_bundle *bundle;
    const ci_skill_file *files = (const ci_skill_file *)b->files->elts;
    const char *why = NULL;
    int manifest;
    if (b->refused)
        return refuse(b, b->refused, err);
    if (!b->files->nelts)
        return refuse(b, CI_SKILL_E_NO_FILES, err);
    qsort(b->files->elts, b->files->nelts, sizeof(ci_skill_file), by_path);
    if ((why = exact_duplicates(b)))
        return refuse(b, why, err);
    if ((manifest = find_manifest(b, &why)) < 0)
        return refuse(b, why, err);
    if ((why = case_clashes(b)))
        return refuse(b, why, err);
    bundle = apr_pcalloc(b->p, sizeof(*bundle));
    if ((why = read_manifest(b->p, files[manifest].data, files[manifest].len, bundle)))
        return refuse(b, why, err);
    bundle->folder = b->folder;
    bundle->manifest = files[manifest].path;
    bundle->files = b->files;
    bundle->total = b->total;
    bundle->digest = ci_skill_bundle_digest(b->p, b->folder, files, b->files->nelts);
    if (!bundle->digest)
        return refuse(b, CI_SKILL_E_WRITE, err);
    *out = bundle;
    return 0;
}

/* ======================================================================== */
/* a zip in                                                                 */
/* ======================================================================== */

/* The entry's type, when it is not a regular file or a directory: why. */
static const char *entry_type(apr_pool_t *p, struct archive_entry *e, const char *name)
{
    mode_t type = archive_entry_filetype(e);
    if (archive_entry_hardlink(e))
        return apr_psprintf(p, CI_SKILL_E_HARDLINK, shown(p, name));
    if (type == AE_IFLNK || archive_entry_symlink(e))
        return apr_psprintf(p, CI_SKILL_E_SYMLINK, shown(p, name));
    if (type != AE_IFREG)
        return apr_psprintf(p, CI_SKILL_E_NOT_REGULAR, shown(p, name));
    if (archive_entry_is_encrypted(e))
        return apr_psprintf(p, CI_SKILL_E_ENCRYPTED, shown(p, name));
    return NULL;
}

/* The entry's data into SCRATCH (emptied first), counted as it is
 * decompressed: refused at the first chunk past a cap. */
static const char *entry_data(ci_skill_builder *b, struct archive *a, const char *name,
                              ci_buf *scratch)
{
    char chunk[READ_CHUNK];
    const char *why;
    la_ssize_t got;
    ci_buf_clear(scratch);
    while ((got = archive_read_data(a, chunk, sizeof(chunk))) > 0) {
        if ((why = builder_room(b, name, scratch->len + (apr_size_t)got)))
            return why;
        ci_buf_append(scratch, chunk, (apr_size_t)got);
    }
    return got < 0 ? CI_SKILL_E_BAD_ZIP : NULL;
}

/* One entry of the zip: a directory checked and skipped, a regular file
 * checked, read and added. */
static const char *zip_entry(ci_skill_builder *b, struct archive *a, struct archive_entry *e,
                             ci_buf *scratch)
{
    const char *name = archive_entry_pathname_utf8(e), *rel = NULL, *why;
    int is_dir = archive_entry_filetype(e) == AE_IFDIR;
    if (!name)
        name = archive_entry_pathname(e);
    if ((why = builder_path(b, name, is_dir, &rel)))
        return why;
    if (is_dir && !archive_entry_hardlink(e))
        return NULL;
    if ((why = entry_type(b->p, e, name)) || (why = builder_count(b)))
        return why;
    if (archive_entry_size_is_set(e) && archive_entry_size(e) >= 0 &&
        (why = builder_room(b, name, (apr_size_t)archive_entry_size(e))))
        return why;          /* what it claims is enough to refuse, never to accept */
    if ((why = entry_data(b, a, name, scratch)))
        return why;
    builder_push(b, rel, apr_pstrmemdup(b->p, scratch->data ? scratch->data : "", scratch->len),
                 scratch->len);
    return NULL;
}

/* Every entry of the open zip A into B. */
static const char *zip_entries(ci_skill_builder *b, struct archive *a, apr_pool_t *scratch_pool)
{
    struct archive_entry *e;
    ci_buf scratch;
    const char *why;
    int rc, first = 1;
    ci_buf_init(&scratch, scratch_pool, APR_SIZE_MAX);
    while ((rc = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
        if (rc < ARCHIVE_WARN)
            return first ? CI_SKILL_E_NOT_ZIP : CI_SKILL_E_BAD_ZIP;
        first = 0;
        if ((why = zip_entry(b, a, e, &scratch)))
            return why;
    }
    return NULL;
}

int ci_skill_bundle_from_zip(apr_pool_t *p, const char *zip, apr_size_t len,
                             const ci_skill_limits *limits, ci_skill_bundle **out,
                             const char **err)
{
    ci_skill_builder *b = ci_skill_builder_make(p, limits);
    struct archive *a;
    apr_pool_t *scratch;
    const char *why;
    if (len > b->limits.max_zip)
        return refuse(b, apr_psprintf(p, CI_SKILL_E_ZIP_SIZE,
                                      (unsigned long)b->limits.max_zip), err);
    if (!(a = archive_read_new()))
        return refuse(b, CI_SKILL_E_BAD_ZIP, err);
    archive_read_support_format_zip(a);
    if (archive_read_open_memory(a, zip, len) != ARCHIVE_OK) {
        archive_read_free(a);
        return refuse(b, CI_SKILL_E_NOT_ZIP, err);
    }
    apr_pool_create(&scratch, p);
    why = zip_entries(b, a, scratch);
    archive_read_free(a);
    apr_pool_destroy(scratch);
    if (why)
        return refuse(b, why, err);
    return ci_skill_builder_finish(b, out, err);
}

/* ======================================================================== */
/* a zip out                                                                */
/* ======================================================================== */

static la_ssize_t zip_write_cb(struct archive *a, void *data, const void *buf, size_t n)
{
    return ci_buf_append(data, buf, n) < 0 ? -1 : (la_ssize_t)n;
}

/* One file's entry and data. */
static int zip_put(struct archive *a, struct archive_entry *e, const char *folder,
                   const ci_skill_file *f, apr_pool_t *p)
{
    archive_entry_clear(e);
    archive_entry_set_pathname_utf8(e, apr_pstrcat(p, folder, "/", f->path, NULL));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)f->len);
    archive_entry_set_mtime(e, ZIP_TIME, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        return -1;
    if (f->len && archive_write_data(a, f->data, f->len) != (la_ssize_t)f->len)
        return -1;
    return archive_write_finish_entry(a) == ARCHIVE_OK ? 0 : -1;
}

/* A zip writer into OUT; NULL on failure. */
static struct archive *zip_writer(ci_buf *out)
{
    struct archive *a = archive_write_new();
    if (!a)
        return NULL;
    if (archive_write_set_format_zip(a) != ARCHIVE_OK ||
        archive_write_zip_set_compression_deflate(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open(a, out, NULL, zip_write_cb, NULL) != ARCHIVE_OK) {
        archive_write_free(a);
        return NULL;
    }
    return a;
}

int ci_skill_bundle_zip(apr_pool_t *p, const ci_skill_bundle *b, const char **zip,
                        apr_size_t *len, const char **err)
{
    const ci_skill_file *f = (const ci_skill_file *)b->files->elts;
    struct archive_entry *e = archive_entry_new();
    struct archive *a;
    ci_buf out;
    int i, ok = e != NULL;
    ci_buf_init(&out, p, APR_SIZE_MAX);
    a = ok ? zip_writer(&out) : NULL;
    ok = a != NULL;
    for (i = 0; ok && i < b->files->nelts; i++)
        ok = zip_put(a, e, b->folder, &f[i], p) == 0;
    if (a) {
        ok = archive_write_close(a) == ARCHIVE_OK && ok;
        archive_write_free(a);
    }
    if (e)
        archive_entry_free(e);
    if (!ok) {
        *err = CI_SKILL_E_WRITE;
        return -1;
    }
    *zip = ci_buf_str(&out);
    *len = out.len;
    return 0;
}
