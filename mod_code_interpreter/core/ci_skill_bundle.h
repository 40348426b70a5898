/*
 * ci_skill_bundle.h - a skill upload (OpenAI's Skills API) turned into a
 * validated bundle, before anything is stored: the files of one top-level
 * folder, its SKILL.md's name and description, and a content address.
 *
 * Two ways in, one set of rules:
 *   - a zip (the multipart part "files"): ci_skill_bundle_from_zip reads it
 *     from memory with libarchive, counting the bytes it actually
 *     decompresses (the sizes the zip declares are never trusted);
 *   - a directory upload (parts "files[]", each filename the path inside
 *     the folder, "basic_math/scripts/add.py"): ci_skill_builder_add per
 *     part, then ci_skill_builder_finish.
 * And one way out: ci_skill_bundle_zip writes a bundle as a zip again, the
 * same bytes for the same bundle.
 *
 * libarchive rather than libzip: it reads a zip streamed from memory and
 * says how many bytes each read really produced, so a zip bomb is stopped
 * at the cap whatever its headers claim; it tells an entry's type
 * (symbolic link, hard link, device, FIFO) instead of leaving it to the
 * external attributes; and it writes zips too, which the content routes
 * need.
 *
 * The rules (each refusal is one sentence of CI_SKILL_E_* below, naming
 * the path with any byte that is not printable UTF-8 written as \xNN):
 *   - every path is one top-level folder and a path inside it, segments
 *     separated by '/': no '..', '.' or empty segment, no leading '/', no
 *     '\' in a directory upload's names (a separator on Windows, a name
 *     character elsewhere: either reading would be a guess; the Node SDK's
 *     directory helpers send '/' (its toFile keeps only the last segment,
 *     and such an upload is refused as files at the top level); in a zip,
 *     libarchive reads '\' as '/' before we
 *     see the name, and the path is checked as such), no
 *     control character (C0, DEL, C1), valid UTF-8, at most
 *     CI_SKILL_MAX_PATH bytes and CI_SKILL_MAX_DEPTH segments below the
 *     folder;
 *   - one folder for all: a second one, or a file beside the folder, is
 *     refused;
 *   - regular files only: symbolic links, hard links, devices, FIFOs and
 *     sockets are refused, encrypted entries too; directory entries are
 *     checked as paths and otherwise skipped (a folder is implied by its
 *     files);
 *   - two files whose paths are equal, or equal but for ASCII case, are
 *     refused (a bundle is unpacked on file systems that ignore case; and
 *     SKILL.md beside skill.md would be two manifests), as is a file whose
 *     path is also a folder of another file;
 *   - exactly one manifest: SKILL.md or skill.md (any ASCII case) directly
 *     in the folder; one deeper down is an ordinary file;
 *   - the limits of ci_skill_limits; a file is refused at its first byte
 *     past max_file, the upload at its first byte past max_total;
 *   - SKILL.md: valid UTF-8, YAML front matter in the subset ci_skill.c's
 *     reader describes, with a valid name and description (see
 *     CI_SKILL_E_NAME, CI_SKILL_E_DESCRIPTION). The name need not equal
 *     the folder's: OpenAI's own example uploads folder basic_math with
 *     "name: basic-math", which a folder-equals-name rule would refuse.
 *
 * Every refusal is the client's: an invalid_request_error, status 400,
 * except CI_SKILL_E_WRITE (ci_skill_bundle_zip, a server_error). No message
 * holds anything but the upload's own paths and the limits.
 */
#ifndef CI_SKILL_BUNDLE_H
#define CI_SKILL_BUNDLE_H

#include <apr_pools.h>
#include <apr_tables.h>

#define CI_SKILL_MB ((apr_size_t)1024 * 1024)

/* A path's bounds: bytes of the whole path (folder included), and
 * segments below the folder (the file's own name included). */
#define CI_SKILL_MAX_PATH 1024
#define CI_SKILL_MAX_DEPTH 16

typedef struct ci_skill_limits {
    apr_size_t max_zip;    /* bytes of an uploaded zip */
    apr_size_t max_files;  /* files in a bundle (directories not counted) */
    apr_size_t max_file;   /* uncompressed bytes of one file */
    apr_size_t max_total;  /* uncompressed bytes of all files */
} ci_skill_limits;

/* OpenAI's limits, and a total of our own: 500 files of 25 MB would be
 * 12.5 GB held in memory for one upload. 256 MB is ten of the largest
 * files, five times the largest zip; a bundle is held whole while it is
 * checked and stored, so this is what one upload may cost. */
#define CI_SKILL_LIMITS_DEFAULT { 50 * CI_SKILL_MB, 500, 25 * CI_SKILL_MB, 256 * CI_SKILL_MB }

typedef struct ci_skill_file {
    const char *path;      /* relative to the folder, '/'-separated */
    const char *data;      /* LEN bytes, NUL after them */
    apr_size_t len;
} ci_skill_file;

typedef struct ci_skill_bundle {
    const char *folder;       /* the top-level folder's name */
    const char *name;         /* SKILL.md's front matter */
    const char *description;
    const char *manifest;     /* the manifest's path: "SKILL.md" or another case */
    apr_array_header_t *files;   /* of ci_skill_file, sorted by path (bytes) */
    apr_size_t total;         /* bytes of all files */
    const char *digest;       /* 64 hex digits, see ci_skill_bundle_digest */
} ci_skill_bundle;

/* ---- the refusals: printf formats; %s is a sanitised path, %lu a limit -- */
#define CI_SKILL_E_EMPTY_NAME     "A skill file has an empty name."
#define CI_SKILL_E_LONG_NAME      "Skill file '%s' has a path longer than %lu bytes."
#define CI_SKILL_E_UTF8_NAME      "Skill file '%s' has a name that is not valid UTF-8."
#define CI_SKILL_E_CONTROL        "Skill file '%s' has a control character in its name."
#define CI_SKILL_E_BACKSLASH      "Skill file '%s' has a backslash in its name: separate folders with '/'."
#define CI_SKILL_E_LEAVES         "Skill file '%s' leaves the skill's folder."
#define CI_SKILL_E_SEGMENT        "Skill file '%s' has an empty or '.' segment in its path."
#define CI_SKILL_E_DEEP           "Skill file '%s' is nested deeper than %lu levels."
#define CI_SKILL_E_TOP_LEVEL      "Skill file '%s' is at the top level: the skill's files must be inside one folder."
#define CI_SKILL_E_TWO_FOLDERS    "Skill file '%s' is not in the skill's folder '%s': upload one folder."
#define CI_SKILL_E_SYMLINK        "Skill file '%s' is a symbolic link."
#define CI_SKILL_E_HARDLINK       "Skill file '%s' is a hard link."
#define CI_SKILL_E_NOT_REGULAR    "Skill file '%s' is not a regular file."
#define CI_SKILL_E_ENCRYPTED      "Skill file '%s' is encrypted."
#define CI_SKILL_E_FILE_SIZE      "Skill file '%s' is larger than %lu bytes."
#define CI_SKILL_E_TOTAL_SIZE     "The skill's files are larger than %lu bytes in all."
#define CI_SKILL_E_TOO_MANY       "The skill has more than %lu files."
#define CI_SKILL_E_DUPLICATE      "Skill file '%s' appears twice."
#define CI_SKILL_E_CASE_DUPLICATE "Skill files '%s' and '%s' differ only in case."
#define CI_SKILL_E_FILE_AND_DIR   "Skill file '%s' is also a folder of '%s'."
#define CI_SKILL_E_NO_FILES       "The skill upload has no files."
#define CI_SKILL_E_NO_MANIFEST    "The skill has no SKILL.md at the top of its folder."
#define CI_SKILL_E_TWO_MANIFESTS  "The skill has two SKILL.md files: '%s' and '%s'."
#define CI_SKILL_E_ZIP_SIZE       "The skill's zip is larger than %lu bytes."
#define CI_SKILL_E_NOT_ZIP        "The skill upload is not a zip archive."
#define CI_SKILL_E_BAD_ZIP        "The skill's zip is damaged and could not be read."
#define CI_SKILL_E_WRITE          "The skill could not be written as a zip."
/* SKILL.md's front matter (see the reader in ci_skill_bundle.c) */
#define CI_SKILL_E_MD_UTF8        "SKILL.md is not valid UTF-8."
#define CI_SKILL_E_FM_MISSING     "SKILL.md must begin with YAML front matter: a line '---'."
#define CI_SKILL_E_FM_UNCLOSED    "SKILL.md's front matter has no closing '---' line."
#define CI_SKILL_E_FM_LINE        "SKILL.md's front matter line %d is not 'key: value'."
#define CI_SKILL_E_FM_UNSUPPORTED "SKILL.md's front matter line %d uses YAML that is not read here: use plain or quoted values, or a '>' or '|' block."
#define CI_SKILL_E_FM_QUOTE       "SKILL.md's front matter line %d has a quoted value that is not closed on that line, or a bad escape."
#define CI_SKILL_E_FM_REPEATED    "SKILL.md's front matter line %d repeats the key '%s'."
#define CI_SKILL_E_NO_NAME        "SKILL.md's front matter has no 'name'."
#define CI_SKILL_E_NAME           "SKILL.md's 'name' must be 1 to 64 characters of a-z, 0-9 and '-', not starting or ending with '-' and without '--'."
#define CI_SKILL_E_NO_DESCRIPTION "SKILL.md's front matter has no 'description'."
#define CI_SKILL_E_DESCRIPTION    "SKILL.md's 'description' must be 1 to 1024 characters without control characters."

/* ---- a zip -------------------------------------------------------------- */

/* The bundle in the LEN bytes of ZIP (a zip with one top-level folder),
 * checked against LIMITS (NULL: the defaults). 0 and *OUT, or -1 and *ERR
 * (one of the refusals above). Memory from P; ZIP is not kept. */
int ci_skill_bundle_from_zip(apr_pool_t *p, const char *zip, apr_size_t len,
                             const ci_skill_limits *limits, ci_skill_bundle **out,
                             const char **err);

/* ---- a directory upload ------------------------------------------------- */

typedef struct ci_skill_builder ci_skill_builder;

/* A builder under LIMITS (NULL: the defaults); memory from P. */
ci_skill_builder *ci_skill_builder_make(apr_pool_t *p, const ci_skill_limits *limits);

/* One part: FILENAME is the path with its top-level folder
 * ("basic_math/SKILL.md"); DATA (LEN bytes) is not copied and must live as
 * long as P. 0, or -1 and *ERR; after a refusal every call refuses again. */
int ci_skill_builder_add(ci_skill_builder *b, const char *filename, const char *data,
                         apr_size_t len, const char **err);

/* The bundle of the parts added: 0 and *OUT, or -1 and *ERR. */
int ci_skill_builder_finish(ci_skill_builder *b, ci_skill_bundle **out, const char **err);

/* ---- out ---------------------------------------------------------------- */

/* The bundle as a zip: folder/path entries in the files' order, deflated,
 * mode 0644, owner 0, a fixed time (1980-01-02), nothing else of the host:
 * the same bytes for the same bundle. 0, or -1 and *ERR (CI_SKILL_E_WRITE). */
int ci_skill_bundle_zip(apr_pool_t *p, const ci_skill_bundle *b, const char **zip,
                        apr_size_t *len, const char **err);

/* The content address of FOLDER and the N FILES (sorted by path): SHA-256,
 * in hex, of "ci-skill-1\0", the folder, "\0", then per file its path,
 * "\0", its length as 8 bytes big-endian and its bytes. The folder is in
 * it because it is in the zip written back: one digest, one zip. */
const char *ci_skill_bundle_digest(apr_pool_t *p, const char *folder,
                                   const ci_skill_file *files, int n);

#endif
