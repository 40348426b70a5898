/*
 * e2b_files.c - a container's files on E2B: the regular files directly
 * under /mnt/data of its sandbox, reached through envd, the agent every E2B
 * sandbox runs on its own port (49983) beside the code-interpreter server:
 *
 *   - its filesystem service (Connect protocol, JSON codec, one POST per
 *     call to /filesystem.Filesystem/<Method>): ListDir, Stat, MakeDir,
 *     Move, Remove;
 *   - GET /files?path=&username= (the file's bytes) and POST /files
 *     (multipart/form-data upload).
 *
 * envd runs as root inside the sandbox and follows symlinks when it reads
 * or writes a path, while the code in the sandbox controls /mnt/data: so a
 * name is read or deleted only after Stat (which does not follow the last
 * link) says it is a regular file, and an upload goes to a fresh temporary
 * name and is then moved onto the name (a rename replaces a link, never
 * writes through it). What a sandbox can do between the check and the call
 * stays inside that sandbox (a microVM of its own): at worst a container's
 * code serves its own sandbox's files under another name.
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include <apr_hash.h>
#include <apr_strings.h>
#include <apr_time.h>
#include "ci_id.h"
#include "ci_buf.h"
#include "ci_cfiles.h"
#include "ci_json.h"
#include "e2b_internal.h"

#define DATA_DIR E2B_DATA_DIR
/* Where the sandbox keeps the record of uploads (outside /mnt/data, so it
 * is no container file). */
#define RECORD_DIR "/home/user"
#define RECORD_PATH RECORD_DIR "/.ci-uploads"
#define ENVD_TRANSFER_MS 600000L
#define MAX_RECORD ((apr_size_t)4 * 1024 * 1024)
#define MAX_ERROR_BODY ((apr_size_t)64 * 1024)
#define TEMP_HEX_BYTES 8

/* An entry of a listing, as envd's EntryInfo says it. */
typedef struct entry {
    const char *name;
    int regular;              /* a regular file, not a link to one */
    int directory;
    apr_int64_t size;
    const char *mtime;        /* modifiedTime as written (nanoseconds) */
} entry;

/* ---- calls ---------------------------------------------------------------- */

/* POST /filesystem.Filesystem/METHOD with REQ: *OUT the answer. */
static envd_rc rpc(ci_sandbox *sb, apr_pool_t *p, const char *method, json_object *req,
                   json_object **out, const char **err)
{
    return e2b_envd_rpc(sb, p, apr_pstrcat(p, "filesystem.Filesystem/", method, NULL), req,
                        out, err);
}

static json_object *path_request(apr_pool_t *p, const char *key, const char *path)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, key, json_object_new_string(path));
    return req;
}

/* Stat, Remove, MakeDir: a request of one path. */
static envd_rc rpc_path(ci_sandbox *sb, apr_pool_t *p, const char *method, const char *path,
                        json_object **out, const char **err)
{
    json_object *ignored;
    return rpc(sb, p, method, path_request(p, "path", path), out ? out : &ignored, err);
}

/* The URL of /files for PATH (as the SDKs send it: path and username). */
static const char *files_url(ci_sandbox *sb, apr_pool_t *p, const char *path)
{
    char *q = curl_easy_escape(sb->curl, path, 0);
    const char *url = q ? apr_pstrcat(p, e2b_envd_base(sb, p), "/files?path=", q,
                                      "&username=" ENVD_USER, NULL) : NULL;
    curl_free(q);
    return url;
}

/* ---- entries -------------------------------------------------------------- */

/* An int64 of protojson: a string ("123"), or a number; absent: 0. */
static apr_int64_t int64_member(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v) || !v)
        return 0;
    if (json_object_is_type(v, json_type_string))
        return apr_atoi64(json_object_get_string(v));
    return json_object_get_int64(v);
}

/* Seconds since the epoch of an RFC 3339 UTC time (protojson's
 * "2026-01-02T03:04:05.123456789Z"); 0 when it is not one. */
static apr_int64_t seconds_of(const char *text)
{
    apr_time_exp_t tm;
    apr_time_t t;
    int y, mo, d, h, mi, s;

    if (!text || sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s) != 6)
        return 0;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    if (apr_time_exp_gmt_get(&t, &tm) != APR_SUCCESS)
        return 0;
    return apr_time_sec(t);
}

/* An EntryInfo. A symlink is reported with its target's type and a
 * symlinkTarget member: it is no regular file, whatever it points to. */
static void take_entry(apr_pool_t *p, json_object *o, entry *e)
{
    const char *type = ci_json_str(o, "type");
    int link = ci_json_get(o, "symlinkTarget", json_type_string) != NULL;
    const char *name = ci_json_str(o, "name");

    e->name = name ? apr_pstrdup(p, name) : "";
    e->regular = !link && type && !strcmp(type, "FILE_TYPE_FILE");
    e->directory = !link && type && !strcmp(type, "FILE_TYPE_DIRECTORY");
    e->size = int64_member(o, "size");
    e->mtime = apr_pstrdup(p, ci_json_str(o, "modifiedTime") ? ci_json_str(o, "modifiedTime")
                                                             : "");
}

/* ListDir /mnt/data, depth 1: *ENTRIES, an array of entry (names the
 * container may not have left out). A /mnt/data that does not exist (yet)
 * is empty. */
static envd_rc list_data(ci_sandbox *sb, apr_pool_t *p, apr_array_header_t **entries,
                         const char **err)
{
    json_object *req = path_request(p, "path", DATA_DIR), *out, *list;
    envd_rc rc;
    size_t i, n;

    json_object_object_add(req, "depth", json_object_new_int(1));
    *entries = apr_array_make(p, 16, sizeof(entry));
    rc = rpc(sb, p, "ListDir", req, &out, err);
    if (rc == ENVD_MISSING)
        return ENVD_OK;
    if (rc != ENVD_OK)
        return rc;
    list = ci_json_get(out, "entries", json_type_array);
    n = list ? json_object_array_length(list) : 0;
    for (i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(list, i);
        entry e;
        if (!json_object_is_type(o, json_type_object))
            continue;
        take_entry(p, o, &e);
        if (ci_cfile_name_ok(e.name, strlen(e.name)))
            *(entry *)apr_array_push(*entries) = e;
    }
    return ENVD_OK;
}

/* The regular file NAME under /mnt/data (Stat: the name itself, not what
 * a link points to): ENVD_MISSING when there is none. */
static envd_rc stat_regular(ci_sandbox *sb, apr_pool_t *p, const char *name, entry *e,
                            const char **err)
{
    json_object *out, *info;
    envd_rc rc = rpc_path(sb, p, "Stat", apr_pstrcat(p, DATA_DIR "/", name, NULL), &out, err);
    if (rc != ENVD_OK)
        return rc;
    if (!(info = ci_json_get(out, "entry", json_type_object)))
        return ENVD_MISSING;
    take_entry(p, info, e);
    return e->regular ? ENVD_OK : ENVD_MISSING;
}

/* ---- the sandbox of a target ---------------------------------------------- */

static ci_file_status file_status(envd_rc rc)
{
    switch (rc) {
    case ENVD_OK:
        return CI_FILE_OK;
    case ENVD_MISSING:
        return CI_FILE_NOT_FOUND;
    case ENVD_GONE:
        return CI_FILE_NO_SANDBOX;
    default:
        return CI_FILE_FAILED;
    }
}

/* T's sandbox, reached in OP (a pool the caller destroys: that wipes the
 * tokens and closes the connection). */
static ci_file_status open_target(apr_pool_t *op, const ci_file_target *t, ci_sandbox **sb,
                                  const char **err)
{
    if (!t->handle) {
        *err = "the container has no sandbox";
        return CI_FILE_NO_SANDBOX;
    }
    return e2b_open(op, t->def, t->handle, sb, err) == APR_SUCCESS ? CI_FILE_OK
                                                                  : CI_FILE_FAILED;
}

/* ERR copied into P (the operation's pool is about to go). */
static ci_file_status leave(apr_pool_t *p, apr_pool_t *op, ci_file_status st,
                            const char **err)
{
    if (st != CI_FILE_OK && *err)
        *err = apr_pstrdup(p, *err);
    apr_pool_destroy(op);
    return st;
}

/* ---- the record of uploads ---------------------------------------------------
 * {"NAME": {"size": N, "modifiedTime": "..."}}: the files an upload put
 * there, as they were then. A file is the user's while it is unchanged
 * (same size, same modification time to the nanosecond). The record lives
 * in the sandbox, where the code can rewrite it: that changes no more than
 * the "source" label of its own container's files. */

static json_object *read_record(ci_sandbox *sb, apr_pool_t *p)
{
    ci_buf body;
    envd_call c = { .answer = &body, .total_ms = ENVD_CALL_MS };
    json_object *root;
    const char *perr;
    long status;

    ci_buf_init(&body, p, MAX_RECORD);
    if (!(c.url = files_url(sb, p, RECORD_PATH)) ||
        e2b_envd_perform(sb, &c, &status) != CURLE_OK || status != 200 || !body.len ||
        !(root = ci_json_parse(p, body.data, body.len, &perr)) ||
        !json_object_is_type(root, json_type_object))
        return NULL;
    return root;
}

static int uploaded(json_object *record, const entry *e)
{
    json_object *r = record ? ci_json_get(record, e->name, json_type_object) : NULL;
    const char *mtime = r ? ci_json_str(r, "modifiedTime") : NULL;
    return mtime && !strcmp(mtime, e->mtime) && int64_member(r, "size") == e->size;
}

static json_object *record_item(apr_int64_t size, const char *mtime)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "size", json_object_new_int64(size));
    json_object_object_add(o, "modifiedTime", json_object_new_string(mtime));
    return o;
}

/* ---- uploads ---------------------------------------------------------------- */

/* An upload's body, counted as the source gives it. Past the limits or
 * when the source fails (WHY), it ends there, cleanly: the upload then
 * completes with what was sent, and the temporary file is removed once
 * envd has answered. Aborting the transfer instead would race: envd may
 * still be writing the bytes it had received when the removal arrives on
 * another connection, and the file would come back. */
typedef struct feed {
    const ci_file_source *src;
    apr_uint64_t got;
    apr_uint64_t max_file;        /* 0: none */
    int bounded;                  /* ROOM applies */
    apr_uint64_t room;            /* bytes the container may still take */
    ci_file_status why;
} feed;

static size_t on_feed(char *buf, size_t size, size_t nitems, void *baton)
{
    feed *f = baton;
    apr_ssize_t n = f->why != CI_FILE_OK ? 0 : f->src->read(f->src->baton, buf, size * nitems);
    if (n < 0) {
        f->why = CI_FILE_SOURCE_FAILED;
        return 0;
    }
    f->got += (apr_uint64_t)n;
    if (f->max_file && f->got > f->max_file)
        f->why = CI_FILE_TOO_LARGE;
    else if (f->bounded && f->got > f->room)
        f->why = CI_FILE_NO_ROOM;
    return f->why != CI_FILE_OK ? 0 : (size_t)n;
}

/* POST /files?path=PATH: one multipart part "file", streamed from F's
 * source with no length (chunked). */
static ci_file_status upload(ci_sandbox *sb, apr_pool_t *p, const char *path, feed *f,
                             const char **err)
{
    ci_buf answer;
    envd_call c = { .answer = &answer, .total_ms = ENVD_TRANSFER_MS };
    curl_mimepart *part;
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    long status = 0;

    ci_buf_init(&answer, p, MAX_ERROR_BODY);
    c.url = files_url(sb, p, path);
    if (c.url && (c.mime = curl_mime_init(sb->curl)) && (part = curl_mime_addpart(c.mime)) &&
        curl_mime_name(part, "file") == CURLE_OK &&
        curl_mime_filename(part, path) == CURLE_OK &&
        curl_mime_type(part, "application/octet-stream") == CURLE_OK &&
        curl_mime_data_cb(part, -1, on_feed, NULL, NULL, f) == CURLE_OK)
        rc = e2b_envd_perform(sb, &c, &status);
    curl_mime_free(c.mime);
    if (f->why != CI_FILE_OK)
        return f->why;          /* what was sent is removed (put_via_temp) */
    if (rc == CURLE_OK && status == 200)
        return CI_FILE_OK;
    if (rc == CURLE_OK && status == 507) {
        *err = "the E2B sandbox's disk is full";
        return CI_FILE_NO_ROOM;
    }
    return file_status(e2b_envd_failure(p, rc, status, &answer, err));
}

/* A fresh name under DIR that no one can have made a link of. */
static const char *temp_name(apr_pool_t *p, const char *dir)
{
    char hex[2 * TEMP_HEX_BYTES + 1];
    ci_random_hex(hex, TEMP_HEX_BYTES);
    return apr_pstrcat(p, dir, "/.upload-", hex, NULL);
}

/* F's source as FINAL (in DIR), all or nothing: uploaded to a temporary
 * name, then moved (a rename: it replaces a file or a link of that name,
 * never writes through one). *MOVED: the file's entry. On failure the
 * temporary is removed (envd keeps what arrived of a cut upload). */
static ci_file_status put_via_temp(ci_sandbox *sb, apr_pool_t *p, const char *dir,
                                   const char *final, feed *f, entry *moved,
                                   const char **err)
{
    const char *temp = temp_name(p, dir), *ignored;
    json_object *req = path_request(p, "source", temp), *out, *info;
    ci_file_status st = upload(sb, p, temp, f, err);

    if (st == CI_FILE_OK) {
        json_object_object_add(req, "destination", json_object_new_string(final));
        st = file_status(rpc(sb, p, "Move", req, &out, err));
        if (st == CI_FILE_NOT_FOUND) {
            *err = "the uploaded file vanished before it was moved into place";
            st = CI_FILE_FAILED;
        }
    }
    if (st != CI_FILE_OK) {
        rpc_path(sb, p, "Remove", temp, NULL, &ignored);
        return st;
    }
    if ((info = ci_json_get(out, "entry", json_type_object)))
        take_entry(p, info, moved);
    else
        memset(moved, 0, sizeof(*moved));
    return CI_FILE_OK;
}

typedef struct memory_source {
    const char *data;
    apr_size_t len, at;
} memory_source;

static apr_ssize_t read_memory(void *baton, char *buf, apr_size_t len)
{
    memory_source *m = baton;
    apr_size_t n = m->len - m->at < len ? m->len - m->at : len;
    memcpy(buf, m->data + m->at, n);
    m->at += n;
    return (apr_ssize_t)n;
}

/* The record after NAME's upload (MOVED): the files of LISTING still as
 * recorded, and NAME. Best effort: it only labels files. */
static void record_upload(ci_sandbox *sb, apr_pool_t *p, const apr_array_header_t *listing,
                          const char *name, const entry *moved)
{
    json_object *old = read_record(sb, p), *now = ci_json_own(p, json_object_new_object());
    memory_source m = { NULL, 0, 0 };
    ci_file_source src = { read_memory, &m };
    feed f = { &src, 0, 0, 0, 0, CI_FILE_OK };
    const char *err;
    entry done;
    int i;

    for (i = 0; i < listing->nelts; i++) {
        const entry *e = &APR_ARRAY_IDX(listing, i, entry);
        if (e->regular && strcmp(e->name, name) && uploaded(old, e))
            json_object_object_add(now, e->name, record_item(e->size, e->mtime));
    }
    if (moved->mtime && *moved->mtime)
        json_object_object_add(now, name, record_item(moved->size, moved->mtime));
    m.data = ci_json_pstr(p, now, &m.len);
    put_via_temp(sb, p, RECORD_DIR, RECORD_PATH, &f, &done, &err);
}

/* What the upload of NAME may take, from the listing before it: the
 * container's other regular files count, the one it replaces does not.
 * CI_FILE_OK with F's limits set, or why it cannot go ahead. */
static ci_file_status plan_put(const apr_array_header_t *listing, const char *name,
                               const ci_file_limits *limits, feed *f, const char **err)
{
    apr_uint64_t files = 0, bytes = 0;
    int i, replaces = 0;

    for (i = 0; i < listing->nelts; i++) {
        const entry *e = &APR_ARRAY_IDX(listing, i, entry);
        if (!strcmp(e->name, name)) {
            if (e->directory) {
                *err = "a directory of that name is in the container";
                return CI_FILE_FAILED;
            }
            replaces = e->regular;
            continue;
        }
        if (e->regular) {
            files++;
            bytes += (apr_uint64_t)(e->size > 0 ? e->size : 0);
        }
    }
    if (limits->max_files && !replaces && files + 1 > limits->max_files)
        return CI_FILE_TOO_MANY;
    f->max_file = limits->max_file;
    f->bounded = limits->max_bytes != 0;
    if (f->bounded && bytes > limits->max_bytes)
        return CI_FILE_NO_ROOM;
    f->room = f->bounded ? limits->max_bytes - bytes : 0;
    return CI_FILE_OK;
}

/* ---- the provider's entries ----------------------------------------------- */

ci_file_status e2b_files_list(apr_pool_t *p, const ci_file_target *t,
                              apr_array_header_t **files, const char **err)
{
    apr_array_header_t *listing, *out;
    json_object *record;
    ci_sandbox *sb;
    apr_pool_t *op;
    ci_file_status st;
    int i;

    apr_pool_create(&op, p);
    if ((st = open_target(op, t, &sb, err)) != CI_FILE_OK ||
        (st = file_status(list_data(sb, op, &listing, err))) != CI_FILE_OK)
        return leave(p, op, st, err);
    record = read_record(sb, op);
    out = apr_array_make(p, listing->nelts ? listing->nelts : 1, sizeof(ci_cfile));
    for (i = 0; i < listing->nelts && out->nelts < CI_CFILE_MAX_LISTED; i++) {
        const entry *e = &APR_ARRAY_IDX(listing, i, entry);
        if (e->regular)
            ci_cfiles_add(p, out, t->container, e->name, e->size, seconds_of(e->mtime),
                          uploaded(record, e));
    }
    ci_cfiles_sort(out);
    *files = out;
    return leave(p, op, CI_FILE_OK, err);
}

/* A download: the file's size told once (from Content-Length, else from
 * Stat), then its bytes, never more than that size. */
typedef struct fetch {
    CURL *h;
    const ci_file_sink *sink;
    long status;
    apr_int64_t max, size, got;
    int told;
    ci_file_status why;
} fetch;

static int tell_size(fetch *f)
{
    curl_off_t length = -1;
    curl_easy_getinfo(f->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length >= 0)
        f->size = (apr_int64_t)length;
    f->told = 1;
    if (f->size > f->max)
        f->why = CI_FILE_TOO_LARGE;
    else if (f->sink->size(f->sink->baton, f->size))
        f->why = CI_FILE_SINK_FAILED;
    return f->why == CI_FILE_OK;
}

static size_t on_fetch(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    fetch *f = userdata;
    size_t n = size * nmemb;
    if (!f->status)
        curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &f->status);
    if (f->status != 200)
        return n;                       /* an error body: dropped */
    if (!f->told && !tell_size(f))
        return 0;
    if (f->got + (apr_int64_t)n > f->size) {
        f->why = CI_FILE_FAILED;        /* it grew while it was read */
        return 0;
    }
    if (f->sink->data(f->sink->baton, ptr, n)) {
        f->why = CI_FILE_SINK_FAILED;
        return 0;
    }
    f->got += (apr_int64_t)n;
    return n;
}

static ci_file_status download(ci_sandbox *sb, apr_pool_t *p, const char *name, fetch *f,
                               const char **err)
{
    envd_call c = { .on_data = on_fetch, .baton = f, .total_ms = ENVD_TRANSFER_MS };
    CURLcode rc;
    long status;

    if (!(c.url = files_url(sb, p, apr_pstrcat(p, DATA_DIR "/", name, NULL))))
        return CI_FILE_FAILED;
    f->h = sb->curl;
    rc = e2b_envd_perform(sb, &c, &status);
    if (f->why != CI_FILE_OK) {
        if (f->why == CI_FILE_FAILED)
            *err = "the file changed while it was read";
        return f->why;
    }
    if (rc != CURLE_OK || status != 200)
        return file_status(e2b_envd_failure(p, rc, status, NULL, err));
    if (!f->told && !tell_size(f))
        return f->why;
    if (f->got != f->size) {
        *err = "the file changed while it was read";
        return CI_FILE_FAILED;
    }
    return CI_FILE_OK;
}

/* The regular file NAME of T, *E, in its sandbox *SB reached in *OP (a
 * pool of P that leave() destroys). */
static ci_file_status find_regular(apr_pool_t *p, const ci_file_target *t, const char *name,
                                   apr_pool_t **op, ci_sandbox **sb, entry *e,
                                   const char **err)
{
    ci_file_status st;
    apr_pool_create(op, p);
    if (!ci_cfile_name_ok(name, strlen(name)))
        return CI_FILE_NOT_FOUND;
    if ((st = open_target(*op, t, sb, err)) != CI_FILE_OK)
        return st;
    return file_status(stat_regular(*sb, *op, name, e, err));
}

ci_file_status e2b_file_get(apr_pool_t *p, const ci_file_target *t, const char *name,
                            apr_int64_t max, const ci_file_sink *sink, const char **err)
{
    fetch f = { NULL, sink, 0, max, 0, 0, 0, CI_FILE_OK };
    ci_sandbox *sb;
    apr_pool_t *op;
    entry e;
    ci_file_status st = find_regular(p, t, name, &op, &sb, &e, err);

    if (st != CI_FILE_OK)
        return leave(p, op, st, err);
    if (e.size > max)
        return leave(p, op, CI_FILE_TOO_LARGE, err);
    f.size = e.size;
    return leave(p, op, download(sb, op, name, &f, err), err);
}

ci_file_status e2b_file_delete(apr_pool_t *p, const ci_file_target *t, const char *name,
                               const char **err)
{
    ci_sandbox *sb;
    apr_pool_t *op;
    entry e;
    ci_file_status st = find_regular(p, t, name, &op, &sb, &e, err);

    if (st == CI_FILE_OK)
        st = file_status(rpc_path(sb, op, "Remove",
                                  apr_pstrcat(op, DATA_DIR "/", name, NULL), NULL, err));
    return leave(p, op, st, err);
}

ci_file_status e2b_file_put(apr_pool_t *p, const ci_file_target *t, const char *name,
                            const ci_file_limits *limits, const ci_file_source *src,
                            const char **err)
{
    feed f = { src, 0, 0, 0, 0, CI_FILE_OK };
    apr_array_header_t *listing;
    ci_sandbox *sb;
    apr_pool_t *op;
    ci_file_status st;
    entry moved;

    if (!ci_cfile_name_ok(name, strlen(name))) {
        *err = "the name is not one a container file may have";
        return CI_FILE_FAILED;
    }
    apr_pool_create(&op, p);
    if ((st = open_target(op, t, &sb, err)) != CI_FILE_OK ||
        (st = file_status(list_data(sb, op, &listing, err))) != CI_FILE_OK ||
        (st = plan_put(listing, name, limits, &f, err)) != CI_FILE_OK ||
        (st = put_via_temp(sb, op, DATA_DIR, apr_pstrcat(op, DATA_DIR "/", name, NULL),
                           &f, &moved, err)) != CI_FILE_OK)
        return leave(p, op, st, err);
    record_upload(sb, op, listing, name, &moved);
    return leave(p, op, CI_FILE_OK, err);
}

/* ---- the provider's own uses ----------------------------------------------- */

const char *e2b_files_prepare(ci_sandbox *sb, apr_pool_t *p)
{
    const char *err = NULL;
    envd_rc rc = rpc_path(sb, p, "MakeDir", DATA_DIR, NULL, &err);
    if (rc == ENVD_OK || rc == ENVD_EXISTS)
        return NULL;
    return apr_pstrcat(p, "the E2B sandbox could not make " DATA_DIR " (",
                       err ? err : "envd did not find it", ")", NULL);
}

apr_hash_t *e2b_files_snapshot(ci_sandbox *sb, apr_pool_t *p)
{
    apr_array_header_t *listing;
    apr_hash_t *h;
    const char *err;
    int i;

    if (list_data(sb, p, &listing, &err) != ENVD_OK)
        return NULL;
    h = apr_hash_make(p);
    for (i = 0; i < listing->nelts; i++) {
        entry *e = &APR_ARRAY_IDX(listing, i, entry);
        if (e->regular)
            apr_hash_set(h, e->name, APR_HASH_KEY_STRING, e);
    }
    return h;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void e2b_files_changed(ci_sandbox *sb, apr_pool_t *p, apr_hash_t *before,
                       ci_exec_result *res)
{
    apr_hash_t *after = before ? e2b_files_snapshot(sb, p) : NULL;
    apr_array_header_t *names;
    apr_hash_index_t *hi;

    if (!after)
        return;
    names = apr_array_make(p, 4, sizeof(const char *));
    for (hi = apr_hash_first(p, after); hi; hi = apr_hash_next(hi)) {
        const entry *now = apr_hash_this_val(hi);
        const entry *was = apr_hash_get(before, now->name, APR_HASH_KEY_STRING);
        if (!was || was->size != now->size || strcmp(was->mtime, now->mtime))
            *(const char **)apr_array_push(names) = apr_pstrdup(p, now->name);
    }
    qsort(names->elts, (size_t)names->nelts, sizeof(const char *), by_name);
    if (names->nelts > CI_EXEC_MAX_FILES)
        names->nelts = CI_EXEC_MAX_FILES;
    res->files = names;
}
