/*
 * ci_declare.h - what mod_code_interpreter.so exports.
 *
 * The module is built with -fvisibility=hidden: httpd loads every module
 * into one global symbol space, so a helper of ours (ci_json_get, say) must
 * not be seen by, or collide with, another module's. What another module
 * may call - the functions of the installed headers and the execution
 * hook's registration - is marked CI_DECLARE and is the only thing the
 * shared object exports besides the module record.
 */
#ifndef CI_DECLARE_H
#define CI_DECLARE_H

#if defined(__GNUC__) && __GNUC__ >= 4
#define CI_EXPORT __attribute__((visibility("default")))
#else
#define CI_EXPORT
#endif

/* A function another module may call (apr's and httpd's naming). */
#define CI_DECLARE(type) CI_EXPORT type
#define CI_DECLARE_NONSTD(type) CI_EXPORT type
/* Data another module may read (the module record). */
#define CI_DECLARE_DATA CI_EXPORT

#endif
