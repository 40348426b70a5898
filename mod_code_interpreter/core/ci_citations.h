/*
 * ci_citations.h - container_file_citation annotations: where the model's
 * text links to a file of the container ("sandbox:/mnt/data/NAME", the
 * convention OpenAI's models follow), the link target gets an annotation
 * naming the file:
 *   {"type":"container_file_citation","container_id","file_id","filename",
 *    "start_index","end_index"}
 * with start and end the offsets, in characters (Unicode code points, not
 * bytes), of "sandbox:/mnt/data/NAME" in the text - as OpenAI's own
 * responses count them. Only files that exist in the container are cited:
 * a link to anything else is left as written. httpd-free.
 *
 * The container's files are asked for (a callback: it costs a trip to the
 * sandbox) only when a text has such a link, and once per citer.
 */
#ifndef CI_CITATIONS_H
#define CI_CITATIONS_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <json-c/json.h>

#define CI_CITATION_PREFIX "sandbox:/mnt/data/"

/* The files of the container (an array of ci_cfile, ci_cfiles.h), or NULL
 * when they cannot be read (nothing is cited). Memory from P. */
typedef apr_array_header_t *(*ci_citer_files_fn)(void *baton, apr_pool_t *p);

typedef struct ci_citer ci_citer;

/* A citer for CONTAINER_ID's files. Memory from P. */
ci_citer *ci_citer_create(apr_pool_t *p, const char *container_id,
                          ci_citer_files_fn files, void *baton);

/* The annotations of TEXT (a JSON array, empty when nothing is cited; owned
 * by the caller). */
json_object *ci_citer_annotations(ci_citer *c, const char *text);

/* The annotations of content part INDEX of message ITEM_ID, whose whole
 * text is TEXT: computed once, then the same array (borrowed) whenever
 * asked again, with or without TEXT (NULL). NULL when not known. */
json_object *ci_citer_part(ci_citer *c, const char *item_id, int index, const char *text);

/* Append the annotations of each output_text part of ITEM (a message) to
 * its "annotations"; those known for the part (ci_citer_part) are used,
 * else they are computed from the part's text. */
void ci_citer_apply_item(ci_citer *c, json_object *item);

/* The same for one content PART of message ITEM_ID at INDEX. */
void ci_citer_apply_part(ci_citer *c, const char *item_id, int index, json_object *part);

#endif
