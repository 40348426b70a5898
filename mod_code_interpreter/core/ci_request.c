/*
 * ci_request.c - classify a Responses API request and rewrite its
 * code_interpreter tool into a function tool an ordinary upstream accepts.
 */
#include <string.h>
#include <apr_hash.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_config.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_policy.h"
#include "ci_request.h"
#include "ci_skill_attach.h"

#define TOOL_TYPE "code_interpreter"
#define SHELL_TYPE "shell"
/* The hosted shell's environments: a shell with neither is the client's. */
#define ENV_AUTO "container_auto"
#define ENV_REFERENCE "container_reference"

#define DESCRIPTION_HEAD \
    "Run Python 3 code in a sandboxed interpreter, like a notebook: variables, " \
    "imports and files persist between calls, and across the turns of the " \
    "conversation while its container lives. "
#define DESCRIPTION_TAIL \
    " The working directory is /mnt/data (writable); save files there. numpy, " \
    "pandas and matplotlib are installed; figures you draw with matplotlib " \
    "are shown to the user. You see stdout, stderr, the value of the last " \
    "expression and any traceback."

static const char offline_description[] =
    DESCRIPTION_HEAD "There is no internet access." DESCRIPTION_TAIL;
static const char online_description[] =
    DESCRIPTION_HEAD "The sandbox can reach the internet." DESCRIPTION_TAIL;

const char *ci_default_description(void)
{
    return offline_description;
}

const char *ci_function_description(int internet)
{
    return internet ? online_description : offline_description;
}

/* An escaped lowercase letter or '_' (\u0061-\u007a, \u005f): encoders
 * escape only control and non-ASCII characters, so this appears only in a
 * body written to slip past the byte scan ("code\u005finterpreter"). */
static int has_escaped_name_char(const char *body, apr_size_t len)
{
    const char *at = body, *end = body + len;
    /* memchr for the backslash is several times faster than memmem for the
     * whole "\\u00" on a large body. */
    while ((at = memchr(at, '\\', (apr_size_t)(end - at))) && at + 6 <= end) {
        unsigned v = 0;
        int i;
        if (at[1] != 'u' || at[2] != '0' || at[3] != '0') {
            at += at[1] == '\\' ? 2 : 1;     /* an escaped backslash: skip both */
            continue;
        }
        for (i = 4; i < 6; i++) {
            char c = at[i];
            v = v * 16 + (unsigned)(c >= '0' && c <= '9' ? c - '0'
                                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99);
        }
        if ((v >= 'a' && v <= 'z') || v == '_')
            return 1;
        at += 6;
    }
    return 0;
}

int ci_body_mentions_tool(const char *body, apr_size_t len)
{
    return body && (memmem(body, len, TOOL_TYPE, sizeof(TOOL_TYPE) - 1) != NULL ||
                    memmem(body, len, ENV_AUTO, sizeof(ENV_AUTO) - 1) != NULL ||
                    memmem(body, len, ENV_REFERENCE, sizeof(ENV_REFERENCE) - 1) != NULL ||
                    has_escaped_name_char(body, len));
}

/* ---- small checks ------------------------------------------------------ */


/* Member KEY, which must be absent, null or of one of the given types. */
static int check_member(apr_pool_t *p, json_object *root, const char *key,
                        json_type t1, json_type t2, const char *expected,
                        ci_error *err)
{
    json_object *v;
    if (!json_object_object_get_ex(root, key, &v) || v == NULL)
        return 0;
    if (json_object_is_type(v, t1) || json_object_is_type(v, t2))
        return 0;
    return ci_error_bad_type(p, err, key, expected);
}

static int check_top_level_types(apr_pool_t *p, json_object *root, ci_error *err)
{
    if (check_member(p, root, "tools", json_type_array, json_type_array,
                     "an array", err) ||
        check_member(p, root, "stream", json_type_boolean, json_type_boolean,
                     "a boolean", err) ||
        check_member(p, root, "background", json_type_boolean,
                     json_type_boolean, "a boolean", err) ||
        check_member(p, root, "include", json_type_array, json_type_array,
                     "an array of strings", err) ||
        check_member(p, root, "max_tool_calls", json_type_int, json_type_int,
                     "an integer", err) ||
        check_member(p, root, "input", json_type_string, json_type_array,
                     "a string or an array of items", err) ||
        check_member(p, root, "tool_choice", json_type_string,
                     json_type_object, "a string or an object", err) ||
        check_member(p, root, "conversation", json_type_string,
                     json_type_object, "a string or an object", err))
        return -1;
    return 0;
}

/* ---- tools ------------------------------------------------------------- */

static json_object *our_function_tool(const ci_rewrite_opts *o)
{
    json_object *tool = json_object_new_object();
    json_object *params = json_object_new_object();
    json_object *props = json_object_new_object();
    json_object *code = json_object_new_object();
    json_object *required = json_object_new_array();

    json_object_object_add(code, "type", json_object_new_string("string"));
    json_object_object_add(code, "description",
                           json_object_new_string("The Python 3 code to run."));
    json_object_object_add(props, "code", code);
    json_object_array_add(required, json_object_new_string("code"));
    json_object_object_add(params, "type", json_object_new_string("object"));
    json_object_object_add(params, "properties", props);
    json_object_object_add(params, "required", required);
    json_object_object_add(params, "additionalProperties",
                           json_object_new_boolean(0));

    json_object_object_add(tool, "type", json_object_new_string("function"));
    json_object_object_add(tool, "name", json_object_new_string(o->function_name));
    json_object_object_add(tool, "description",
                           json_object_new_string(o->function_description
                                                      ? o->function_description
                                                      : offline_description));
    json_object_object_add(tool, "parameters", params);
    json_object_object_add(tool, "strict", json_object_new_boolean(1));
    return tool;
}

static const char shell_description[] =
    "Run shell commands with bash in the sandbox's container, one after another, "
    "in the working directory /mnt/data (writable). It is the same container as "
    "the Python tool's, if there is one: files persist between calls and across "
    "the turns of the conversation while the container lives. You see each "
    "command's stdout, stderr and exit code. A command is stopped after "
    "timeout_ms, and the commands after it are not run; output past "
    "max_output_length characters is cut (null: the server's limits).";

static json_object *typed(const char *type, const char *description)
{
    json_object *o = json_object_new_object();
    if (type)
        json_object_object_add(o, "type", json_object_new_string(type));
    json_object_object_add(o, "description", json_object_new_string(description));
    return o;
}

/* An integer or null, as strict function parameters say "optional". */
static json_object *integer_or_null(const char *description)
{
    json_object *o = typed(NULL, description), *types = json_object_new_array();
    json_object_array_add(types, json_object_new_string("integer"));
    json_object_array_add(types, json_object_new_string("null"));
    json_object_object_add(o, "type", types);
    return o;
}

/* The hosted shell as a function: OpenAI's action as its parameters. */
static json_object *shell_function_tool(const char *name)
{
    json_object *tool = json_object_new_object();
    json_object *params = json_object_new_object();
    json_object *props = json_object_new_object();
    json_object *commands = typed("array", "The commands to run, in order.");
    json_object *required = json_object_new_array();

    json_object_object_add(commands, "items", typed("string", "One bash command."));
    json_object_object_add(props, "commands", commands);
    json_object_object_add(props, "timeout_ms", integer_or_null(
                               "The most each command may take, in milliseconds."));
    json_object_object_add(props, "max_output_length", integer_or_null(
                               "The most characters of each command's output to return."));
    json_object_array_add(required, json_object_new_string("commands"));
    json_object_array_add(required, json_object_new_string("timeout_ms"));
    json_object_array_add(required, json_object_new_string("max_output_length"));
    json_object_object_add(params, "type", json_object_new_string("object"));
    json_object_object_add(params, "properties", props);
    json_object_object_add(params, "required", required);
    json_object_object_add(params, "additionalProperties", json_object_new_boolean(0));

    json_object_object_add(tool, "type", json_object_new_string("function"));
    json_object_object_add(tool, "name", json_object_new_string(name));
    json_object_object_add(tool, "description", json_object_new_string(shell_description));
    json_object_object_add(tool, "parameters", params);
    json_object_object_add(tool, "strict", json_object_new_boolean(1));
    return tool;
}

/* The two hosted tools of a request share one container: their settings
 * of it may not differ. */
static int conflicting(apr_pool_t *p, ci_error *err, const char *param, const char *what)
{
    ci_error_set(err, 400, CI_INVALID, param, "conflicting_container", p,
                 "The code_interpreter and shell tools of a request share one "
                 "container; give its %s once ('%s').", what, param);
    return -1;
}

static int refuse_container(apr_pool_t *p, ci_error *err, int index,
                            const char *field, const char *what)
{
    const char *param = apr_psprintf(p, "tools[%d].container%s%s", index,
                                     field ? "." : "", field ? field : "");
    ci_error_set(err, 400, CI_INVALID, param, "unsupported_parameter", p,
                 "%s are not supported by this server's code_interpreter "
                 "('%s'); use \"container\": {\"type\": \"auto\"}.", what, param);
    return -1;
}

/* file_ids: an array of file ids of the upstream's Files API (checked
 * there by the glue, before round 1); at most one tool gives them. */
static int check_file_ids(apr_pool_t *p, json_object *v, const char *at, ci_request *req,
                          ci_error *err)
{
    const char *param = apr_pstrcat(p, at, ".file_ids", NULL);
    size_t i, n;
    if (!json_object_is_type(v, json_type_array))
        return ci_error_bad_type(p, err, param, "an array of file ids");
    n = json_object_array_length(v);
    if (n > CI_MAX_FILE_IDS) {
        ci_error_set(err, 400, CI_INVALID, param, "array_above_max_length", p,
                     "Invalid '%s': array too long. Expected an array with maximum "
                     "length %d, but got an array with length %d instead.", param,
                     CI_MAX_FILE_IDS, (int)n);
        return -1;
    }
    for (i = 0; i < n; i++) {
        json_object *id = json_object_array_get_idx(v, i);
        if (!json_object_is_type(id, json_type_string) ||
            json_object_get_string_len(id) == 0 || json_object_get_string_len(id) > 128)
            return ci_error_bad_type(p, err, apr_psprintf(p, "%s[%d]", param, (int)i),
                            "a file id");
    }
    if (n && req->file_ids)
        return conflicting(p, err, param, "file_ids");
    req->file_ids = n ? ci_json_own(p, json_object_get(v)) : NULL;
    return 0;
}

static int check_network_policy(apr_pool_t *p, json_object *c, const char *at,
                                ci_request *req, ci_error *err);

/* The settings of a new container ({"type":"auto"} of code_interpreter,
 * {"type":"container_auto"} of the shell) at AT: an optional memory tier
 * and allowlist (checked against the tool's by the glue) and file_ids. */
static int check_auto_settings(apr_pool_t *p, json_object *c, const char *at,
                               ci_request *req, ci_error *err)
{
    json_object *v;
    if (json_object_object_get_ex(c, "file_ids", &v) && v != NULL &&
        check_file_ids(p, v, at, req, err) < 0)
        return -1;
    if (json_object_object_get_ex(c, "memory_limit", &v) && v != NULL) {
        const char *param = apr_pstrcat(p, at, ".memory_limit", NULL);
        if (!json_object_is_type(v, json_type_string))
            return ci_error_bad_type(p, err, param, "a string");
        if (req->memory_limit && strcmp(req->memory_limit, json_object_get_string(v)))
            return conflicting(p, err, param, "memory_limit");
        req->memory_limit = apr_pstrdup(p, json_object_get_string(v));
        req->settings_param = at;
    }
    return check_network_policy(p, c, at, req, err);
}

/* The network policy of the container tool TOOL asks for, at AT: one per
 * request (both tools may give it, the same). */
static int check_network_policy(apr_pool_t *p, json_object *c, const char *at,
                                ci_request *req, ci_error *err)
{
    const char *param = apr_pstrcat(p, at, ".network_policy", NULL), *joined, *given;
    apr_array_header_t *domains, *secrets;
    json_object *v;
    if (!json_object_object_get_ex(c, "network_policy", &v) || v == NULL)
        return 0;
    if (ci_network_policy_parse(p, v, param, &domains, &secrets, err) < 0)
        return -1;
    if (req->network_param && (secrets || req->secrets))
        return conflicting(p, err, param, "network_policy");
    joined = ci_domains_join(p, domains);
    given = ci_domains_join(p, req->allowed_domains);
    if (req->network_param && strcmp(joined ? joined : "", given ? given : ""))
        return conflicting(p, err, param, "network_policy");
    req->allowed_domains = domains;
    req->secrets = secrets;
    req->network_param = param;
    return 0;
}

/* The one explicit container of a request, named at PARAM. */
static int name_container(apr_pool_t *p, const char *id, const char *param,
                          ci_request *req, ci_error *err)
{
    if (req->container_id && strcmp(req->container_id, id))
        return conflicting(p, err, param, "id");
    req->container_id = apr_pstrdup(p, id);
    req->container_param = param;
    return 0;
}

/* container is a container's id, or {"type":"auto"} with an optional
 * memory tier (checked against the tool's by the glue) and file_ids; no
 * allowlist yet. A "disabled" network policy is what we do anyway. */
static int check_container(apr_pool_t *p, json_object *tool, int index,
                           ci_request *req, ci_error *err)
{
    json_object *c;
    if (!json_object_object_get_ex(tool, "container", &c) || c == NULL)
        return 0;
    if (json_object_is_type(c, json_type_string)) {
        const char *id = json_object_get_string(c);
        if (!*id || strlen(id) > 128)
            return ci_error_bad_type(p, err, apr_psprintf(p, "tools[%d].container", index),
                            "a container id or an object");
        return name_container(p, id, apr_psprintf(p, "tools[%d].container", index),
                              req, err);
    }
    if (!json_object_is_type(c, json_type_object))
        return ci_error_bad_type(p, err, apr_psprintf(p, "tools[%d].container", index),
                        "an object");
    if (!ci_json_is_type(c, "auto"))
        return refuse_container(p, err, index, "type",
                                "Container types other than \"auto\"");
    return check_auto_settings(p, c, apr_psprintf(p, "tools[%d].container", index), req,
                               err);
}

/* The hosted shell's environment: a new container (container_auto) or one
 * of the caller's (container_reference). */
static int check_environment(apr_pool_t *p, json_object *tool, int index,
                             ci_request *req, ci_error *err)
{
    const char *at = apr_psprintf(p, "tools[%d].environment", index);
    json_object *env = ci_json_get(tool, "environment", json_type_object), *v;
    if (ci_json_is_type(env, ENV_REFERENCE)) {
        const char *param = apr_pstrcat(p, at, ".container_id", NULL);
        const char *id = ci_json_str(env, "container_id");
        if (!id || !*id || strlen(id) > 128)
            return ci_error_bad_type(p, err, param, "a container id");
        return name_container(p, id, param, req, err);
    }
    if (check_auto_settings(p, env, at, req, err))
        return -1;
    if (json_object_object_get_ex(env, "skills", &v) && v &&
        ci_skill_attach_parse(p, v, apr_pstrcat(p, at, ".skills", NULL), &req->skills, err))
        return -1;
    if (req->skills && !req->skills->nelts)
        req->skills = NULL;
    return 0;
}

/* A shell tool whose environment is ours (container_auto or
 * container_reference). Without one, or with "local", the shell is the
 * client's: it runs the commands itself. */
static int is_hosted_shell(json_object *t)
{
    json_object *env;
    if (!ci_json_is_type(t, SHELL_TYPE) ||
        !json_object_object_get_ex(t, "environment", &env) || env == NULL)
        return 0;
    return !json_object_is_type(env, json_type_object) || !ci_json_is_type(env, "local");
}

/* Whether TOOLS has code_interpreter or a shell that is not the client's. */
static int has_our_tool(json_object *tools)
{
    int i, n = (int)json_object_array_length(tools);
    for (i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(tools, i);
        if (ci_json_is_type(t, TOOL_TYPE) || is_hosted_shell(t))
            return 1;
    }
    return 0;
}

static int duplicate_tool(apr_pool_t *p, ci_error *err, int i, const char *what)
{
    ci_error_set(err, 400, CI_INVALID, apr_psprintf(p, "tools[%d]", i), "duplicate_tool",
                 p, "Only one %s tool may be given.", what);
    return -1;
}

/* A hosted shell's environment must be one of ours: an object of a type
 * this server knows. */
static int check_environment_type(apr_pool_t *p, json_object *t, int i, ci_error *err)
{
    json_object *env = NULL;
    const char *type;
    json_object_object_get_ex(t, "environment", &env);
    if (!json_object_is_type(env, json_type_object))
        return ci_error_bad_type(p, err, apr_psprintf(p, "tools[%d].environment", i),
                                 "an object");
    type = ci_json_str(env, "type");
    if (!type)
        return ci_error_bad_type(p, err, apr_psprintf(p, "tools[%d].environment.type", i),
                        "a string");
    if (strcmp(type, ENV_AUTO) && strcmp(type, ENV_REFERENCE)) {
        ci_error_set(err, 400, CI_INVALID, apr_psprintf(p, "tools[%d].environment.type", i),
                     "invalid_value", p, "Invalid value: '%s'. Supported values are: "
                     "'container_auto', 'container_reference' and 'local'.", type);
        return -1;
    }
    return 0;
}

/* The function name NAME is reserved next to our tools: a client function
 * of that name is refused. */
static int name_clash(apr_pool_t *p, ci_error *err, int i, const char *name,
                      const char *tool)
{
    ci_error_set(err, 400, CI_INVALID, apr_psprintf(p, "tools[%d].name", i),
                 "tool_name_clash", p,
                 "The function name '%s' is reserved for the %s tool on this server; "
                 "rename your function.", name, tool);
    return -1;
}

/* Find the code_interpreter tool and the hosted shell (req->tool_index,
 * req->shell_index), refusing duplicates and bad environments. A client
 * function with one of our names is refused only next to that tool:
 * without it, the client's function is the client's business. 0 or -1. */
static int find_tools(apr_pool_t *p, json_object *tools, const char *fname,
                      const char *sname, ci_request *req, ci_error *err)
{
    int i, n = (int)json_object_array_length(tools), clash = -1, shell_clash = -1;
    req->tool_index = req->shell_index = -1;
    for (i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(tools, i);
        const char *name;
        if (!json_object_is_type(t, json_type_object))
            return ci_error_bad_type(p, err, apr_psprintf(p, "tools[%d]", i), "an object");
        if (ci_json_is_type(t, TOOL_TYPE)) {
            if (req->tool_index >= 0)
                return duplicate_tool(p, err, i, "code_interpreter");
            req->tool_index = i;
        }
        else if (is_hosted_shell(t)) {
            if (req->shell_index >= 0)
                return duplicate_tool(p, err, i, "hosted shell");
            if (check_environment_type(p, t, i, err))
                return -1;
            req->shell_index = i;
        }
        else if (ci_json_is_type(t, "function") && (name = ci_json_str(t, "name"))) {
            if (clash < 0 && !strcmp(name, fname))
                clash = i;
            if (shell_clash < 0 && !strcmp(name, sname))
                shell_clash = i;
        }
    }
    if (req->tool_index >= 0 && clash >= 0)
        return name_clash(p, err, clash, fname, "code_interpreter");
    if (req->shell_index >= 0 && shell_clash >= 0)
        return name_clash(p, err, shell_clash, sname, "shell");
    return 0;
}

/* ---- tool_choice ------------------------------------------------------- */

static json_object *function_choice(const char *fname)
{
    json_object *c = json_object_new_object();
    json_object_object_add(c, "type", json_object_new_string("function"));
    json_object_object_add(c, "name", json_object_new_string(fname));
    return c;
}

/* The function a tool choice CHOICE names when it is one of our tools
 * ({"type":"code_interpreter"}, {"type":"shell"} with a hosted shell), else
 * NULL. */
static const char *our_choice(const ci_request *req, json_object *choice)
{
    if (req->tool_index >= 0 && ci_json_is_type(choice, TOOL_TYPE))
        return req->function_name;
    if (req->shell_index >= 0 && ci_json_is_type(choice, SHELL_TYPE))
        return req->shell_function;
    return NULL;
}

static int rewrite_allowed_tools(apr_pool_t *p, json_object *choice,
                                 ci_request *req, ci_error *err)
{
    json_object *tools = ci_json_get(choice, "tools", json_type_array);
    const char *mode = ci_json_str(choice, "mode"), *fname;
    int i, n;
    if (!tools)
        return ci_error_bad_type(p, err, "tool_choice.tools", "an array");
    n = (int)json_object_array_length(tools);
    for (i = 0; i < n; i++) {
        json_object *t = json_object_array_get_idx(tools, i);
        if (!json_object_is_type(t, json_type_object))
            return ci_error_bad_type(p, err, apr_psprintf(p, "tool_choice.tools[%d]", i),
                            "an object");
        if ((fname = our_choice(req, t)))
            json_object_array_put_idx(tools, i, function_choice(fname));
    }
    req->forced_choice = mode && !strcmp(mode, "required");
    return 0;
}

static int rewrite_tool_choice(apr_pool_t *p, json_object *root,
                               ci_request *req, ci_error *err)
{
    json_object *choice;
    const char *fname;
    if (!json_object_object_get_ex(root, "tool_choice", &choice) || !choice)
        return 0;
    req->client_tool_choice = ci_json_own(p, ci_json_copy(choice));
    if (json_object_is_type(choice, json_type_string)) {
        const char *s = json_object_get_string(choice);
        if (strcmp(s, "none") && strcmp(s, "auto") && strcmp(s, "required")) {
            ci_error_set(err, 400, CI_INVALID, "tool_choice", "invalid_value", p,
                         "Invalid value for 'tool_choice': '%s'; expected "
                         "'none', 'auto', 'required' or an object.", s);
            return -1;
        }
        req->forced_choice = !strcmp(s, "required");
        return 0;
    }
    if (!ci_json_str(choice, "type"))
        return ci_error_bad_type(p, err, "tool_choice.type", "a string");
    if (ci_json_is_type(choice, "allowed_tools"))
        return rewrite_allowed_tools(p, choice, req, err);
    req->forced_choice = 1;
    if ((fname = our_choice(req, choice)))
        json_object_object_add(root, "tool_choice", function_choice(fname));
    return 0;
}

/* ---- input ------------------------------------------------------------- */

/* The logs of a replayed call, as the model would have seen them. */
static const char *replayed_output(apr_pool_t *p, json_object *outputs)
{
    int i, n;
    const char *text = NULL;
    if (!outputs || !json_object_is_type(outputs, json_type_array))
        return CI_NO_OUTPUT_RECORDED;
    n = (int)json_object_array_length(outputs);
    for (i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(outputs, i);
        const char *piece = ci_json_is_type(o, "logs") ? ci_json_str(o, "logs")
                          : ci_json_is_type(o, "image") ? "[image/png figure]" : NULL;
        if (piece)
            text = text ? apr_pstrcat(p, text, "\n", piece, NULL) : piece;
    }
    return text && *text ? text : "(no output)";
}

static int translate_call(apr_pool_t *p, json_object *item, int index,
                          const char *fname, json_object *into, ci_request *req,
                          ci_error *err)
{
    const char *id = ci_json_str(item, "id");
    json_object *code_v = NULL, *outputs = NULL, *args, *call, *out;
    const char *code = "";

    if (!id || !*id || strlen(id) > 64)
        return ci_error_bad_type(p, err, apr_psprintf(p, "input[%d].id", index),
                        "a string of 1 to 64 characters");
    if (json_object_object_get_ex(item, "code", &code_v) && code_v) {
        if (!json_object_is_type(code_v, json_type_string))
            return ci_error_bad_type(p, err, apr_psprintf(p, "input[%d].code", index),
                            "a string or null");
        code = json_object_get_string(code_v);
    }
    json_object_object_get_ex(item, "outputs", &outputs);
    if (ci_json_str(item, "container_id"))
        req->context_container = apr_pstrdup(p, ci_json_str(item, "container_id"));

    args = json_object_new_object();
    json_object_object_add(args, "code", json_object_new_string(code));
    call = json_object_new_object();
    json_object_object_add(call, "type", json_object_new_string("function_call"));
    json_object_object_add(call, "call_id", json_object_new_string(id));
    json_object_object_add(call, "name", json_object_new_string(fname));
    json_object_object_add(call, "arguments",
                           json_object_new_string(ci_json_text(args, NULL)));
    json_object_put(args);
    out = json_object_new_object();
    json_object_object_add(out, "type",
                           json_object_new_string("function_call_output"));
    json_object_object_add(out, "call_id", json_object_new_string(id));
    json_object_object_add(out, "output",
                           json_object_new_string(replayed_output(p, outputs)));
    json_object_array_add(into, call);
    json_object_array_add(into, out);
    return 0;
}

/* An item_reference to one of our items ("ci_..."): what it stands for
 * (the upstream's own function call and our output), spliced into ITEMS.
 * 0, 1 when it is not ours to resolve (it passes as it is), -1 with ERR. */
static int resolve_reference(apr_pool_t *p, const ci_rewrite_opts *o,
                             json_object *item, json_object *items, ci_request *req,
                             ci_error *err)
{
    const char *id = ci_json_str(item, "id"), *text, *perr, *container = NULL;
    json_object *stands;
    int k, n;
    int shell = id && (!strncmp(id, "sh_", 3) || !strncmp(id, "sho_", 4));
    if (!o->recall || !id || (strncmp(id, "ci_", 3) && !shell))
        return 1;
    text = o->recall(o->recall_baton, id, &container);
    if (container)
        req->context_container = container;
    stands = text ? ci_json_parse(p, text, strlen(text), &perr) : NULL;
    /* A shell's ids look like OpenAI's: one we never returned may be a
     * local shell's, which is the upstream's to resolve. */
    if (!stands && shell)
        return 1;
    if (!json_object_is_type(stands, json_type_array)) {
        /* As OpenAI answers an id it never returned to this caller. */
        ci_error_set(err, 400, CI_INVALID, "input", NULL, p,
                     "Item with id '%s' not found.", id);
        return -1;
    }
    n = (int)json_object_array_length(stands);
    for (k = 0; k < n; k++)
        json_object_array_add(items, json_object_get(json_object_array_get_idx(stands, k)));
    return 0;
}

/* A replayed shell_call of the hosted shell (environment a container
 * reference, or none given): the function call the upstream made. */
static int translate_shell_call(apr_pool_t *p, json_object *item, int index,
                                json_object *into, ci_request *req, apr_hash_t *calls,
                                ci_error *err)
{
    const char *call_id = ci_json_str(item, "call_id");
    json_object *action = ci_json_get(item, "action", json_type_object);
    json_object *env = ci_json_get(item, "environment", json_type_object);
    json_object *commands = ci_json_get(action, "commands", json_type_array), *args, *call;
    static const char *const limits[] = { "timeout_ms", "max_output_length" };
    unsigned k;
    if (!call_id || !*call_id || strlen(call_id) > 64)
        return ci_error_bad_type(p, err, apr_psprintf(p, "input[%d].call_id", index),
                        "a string of 1 to 64 characters");
    if (!commands)
        return ci_error_bad_type(p, err, apr_psprintf(p, "input[%d].action.commands", index),
                        "an array of strings");
    if (ci_json_str(env, "container_id"))
        req->context_container = apr_pstrdup(p, ci_json_str(env, "container_id"));
    args = json_object_new_object();
    json_object_object_add(args, "commands", json_object_get(commands));
    for (k = 0; k < sizeof(limits) / sizeof(*limits); k++) {
        json_object *v = ci_json_get(action, limits[k], json_type_int);
        json_object_object_add(args, limits[k], v ? json_object_get(v) : NULL);
    }
    call = json_object_new_object();
    json_object_object_add(call, "type", json_object_new_string("function_call"));
    json_object_object_add(call, "call_id", json_object_new_string(call_id));
    json_object_object_add(call, "name", json_object_new_string(req->shell_function));
    json_object_object_add(call, "arguments",
                           json_object_new_string(ci_json_text(args, NULL)));
    json_object_put(args);
    json_object_array_add(into, call);
    apr_hash_set(calls, apr_pstrdup(p, call_id), APR_HASH_KEY_STRING, "");
    return 0;
}

/* A replayed shell_call_output of a call translated above: what the model
 * was told (the output entries, as JSON). */
static void translate_shell_output(json_object *item, json_object *into)
{
    json_object *out = json_object_new_object();
    json_object *output = ci_json_get(item, "output", json_type_array);
    json_object_object_add(out, "type", json_object_new_string("function_call_output"));
    json_object_object_add(out, "call_id",
                           json_object_new_string(ci_json_str(item, "call_id")));
    json_object_object_add(out, "output", json_object_new_string(
                               output ? ci_json_text(output, NULL) : CI_NO_OUTPUT_RECORDED));
    json_object_array_add(into, out);
}

/* Whether ITEM is a shell_call_output of a call in CALLS. */
static int ours_shell_output(json_object *item, apr_hash_t *calls)
{
    const char *call_id = ci_json_str(item, "call_id");
    return ci_json_is_type(item, "shell_call_output") && call_id &&
           apr_hash_get(calls, call_id, APR_HASH_KEY_STRING) != NULL;
}

/* Whether ITEM is a shell_call of the hosted shell (not a local one's). */
static int hosted_shell_call(const ci_request *req, json_object *item)
{
    json_object *env = ci_json_get(item, "environment", json_type_object);
    return req->shell_index >= 0 && ci_json_is_type(item, "shell_call") &&
           !ci_json_is_type(env, "local");
}

/* One input item, translated into ITEMS: 0, or -1 with ERR. */
static int translate_item(apr_pool_t *p, json_object *item, int i,
                          const ci_rewrite_opts *o, const char *fname,
                          json_object *items, ci_request *req, apr_hash_t *shell_calls,
                          ci_error *err)
{
    if (ci_json_is_type(item, "item_reference")) {
        int rc = resolve_reference(p, o, item, items, req, err);
        if (rc <= 0)
            return rc;
    }
    if (ci_json_is_type(item, "code_interpreter_call"))
        return translate_call(p, item, i, fname, items, req, err);
    if (hosted_shell_call(req, item))
        return translate_shell_call(p, item, i, items, req, shell_calls, err);
    if (ours_shell_output(item, shell_calls))
        translate_shell_output(item, items);
    else
        json_object_array_add(items, json_object_get(item));
    return 0;
}

/* An item of the translated input that is the client's own, unchanged:
 * its index there (OUT) and in the client's input (IN). */
typedef struct ci_kept_item {
    int out, in;
} ci_kept_item;

/* INPUT as an array of items with code_interpreter_call history translated
 * into function_call + function_call_output pairs, and the hosted shell's
 * shell_call and shell_call_output into a function call and its output.
 * The items that pass as they are go into KEPT. */
static json_object *translate_input(apr_pool_t *p, json_object *input,
                                    const ci_rewrite_opts *o, const char *fname,
                                    ci_request *req, apr_array_header_t *kept,
                                    ci_error *err)
{
    json_object *items = json_object_new_array();
    apr_hash_t *shell_calls;
    int i, n;

    if (!input)
        return items;
    if (json_object_is_type(input, json_type_string)) {
        json_object *msg = json_object_new_object();
        json_object_object_add(msg, "role", json_object_new_string("user"));
        json_object_object_add(msg, "content", json_object_get(input));
        json_object_array_add(items, msg);
        return items;
    }
    n = (int)json_object_array_length(input);
    shell_calls = apr_hash_make(p);
    for (i = 0; i < n; i++) {
        json_object *item = json_object_array_get_idx(input, i);
        int before;
        if (!json_object_is_type(item, json_type_object)) {
            ci_error_bad_type(p, err, apr_psprintf(p, "input[%d]", i), "an object");
            json_object_put(items);
            return NULL;
        }
        before = (int)json_object_array_length(items);
        if (translate_item(p, item, i, o, fname, items, req, shell_calls, err)) {
            json_object_put(items);
            return NULL;
        }
        if ((int)json_object_array_length(items) == before + 1 &&
            json_object_array_get_idx(items, before) == item) {
            ci_kept_item *k = apr_array_push(kept);
            k->out = before;
            k->in = i;
        }
    }
    return items;
}

/* ---- the rest ---------------------------------------------------------- */

static void strip_include(json_object *root, ci_request *req)
{
    json_object *inc = ci_json_get(root, "include", json_type_array);
    json_object *kept;
    int i, n;
    if (!inc)
        return;
    kept = json_object_new_array();
    n = (int)json_object_array_length(inc);
    for (i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(inc, i);
        if (json_object_is_type(v, json_type_string) &&
            !strcmp(json_object_get_string(v), CI_INCLUDE_OUTPUTS))
            req->include_outputs = 1;
        else
            json_object_array_add(kept, json_object_get(v));
    }
    if (json_object_array_length(kept) == 0) {
        json_object_put(kept);
        json_object_object_del(root, "include");
    }
    else
        json_object_object_add(root, "include", kept);
}

/* Whether ID (a JSON string) can name a conversation: 1 to
 * CI_MAX_CONVERSATION_ID characters, no NUL (it is a key of the directory,
 * kept as a C string). Its UTF-8 is valid: the parser checked it. */
static int conversation_id_fits(json_object *id)
{
    const char *s = json_object_get_string(id);
    int len = json_object_get_string_len(id), chars = 0, i;
    if (len < 1 || strlen(s) != (size_t)len)
        return 0;
    for (i = 0; i < len; i++)
        chars += ((unsigned char)s[i] & 0xC0) != 0x80;  /* not a continuation byte */
    return chars <= CI_MAX_CONVERSATION_ID;
}

/* `conversation`, an id or {"id": ...} (its type was checked with the top
 * level's): the id into REQ, the container route of its turns. */
static int read_conversation(apr_pool_t *p, json_object *root, ci_request *req,
                             ci_error *err)
{
    json_object *v, *id;
    const char *param = "conversation";
    if (!json_object_object_get_ex(root, "conversation", &v) || v == NULL)
        return 0;
    if (json_object_is_type(v, json_type_object)) {
        param = "conversation.id";
        if (!json_object_object_get_ex(v, "id", &id) ||
            !json_object_is_type(id, json_type_string))
            return ci_error_bad_type(p, err, param, "a string");
        v = id;
    }
    if (!conversation_id_fits(v))
        return ci_error_bad_type(p, err, param,
                                 apr_psprintf(p, "a string of 1 to %d characters",
                                              CI_MAX_CONVERSATION_ID));
    req->conversation_id = apr_pstrdup(p, json_object_get_string(v));
    return 0;
}

/* A turn goes on from a previous response or in a conversation, never both
 * (OpenAI's contract): refused before anything reaches the upstream, in the
 * words OpenAI-compatible servers use. */
static int refuse_both_chains(apr_pool_t *p, json_object *root, const ci_request *req,
                              ci_error *err)
{
    json_object *prev;
    if (!req->conversation_id ||
        !json_object_object_get_ex(root, "previous_response_id", &prev) || prev == NULL)
        return 0;
    ci_error_set(err, 400, CI_INVALID, NULL, "mutually_exclusive_parameters", p,
                 "Mutually exclusive parameters. Ensure you are only providing one of: "
                 "'previous_response_id' or 'conversation'.");
    return -1;
}

static int read_flags(apr_pool_t *p, json_object *root, ci_request *req,
                      ci_error *err)
{
    json_object *v;
    if ((v = ci_json_get(root, "background", json_type_boolean)) &&
        json_object_get_boolean(v)) {
        ci_error_set(err, 400, CI_INVALID, "background", "unsupported_parameter",
                     p, "Background mode is not supported with the "
                        "code_interpreter tool on this server.");
        return -1;
    }
    req->wants_stream = (v = ci_json_get(root, "stream", json_type_boolean)) &&
                        json_object_get_boolean(v);
    req->max_tool_calls = -1;
    if ((v = ci_json_get(root, "max_tool_calls", json_type_int))) {
        int64_t n = json_object_get_int64(v);
        if (n < 1 || n > 1000000) {
            ci_error_set(err, 400, CI_INVALID, "max_tool_calls", "invalid_value",
                         p, "Invalid value for 'max_tool_calls': expected an "
                            "integer of at least 1.");
            return -1;
        }
        req->max_tool_calls = (int)n;
    }
    req->uses_conversation =
        json_object_object_get_ex(root, "conversation", &v) && v != NULL;
    if ((v = ci_json_get(root, "previous_response_id", json_type_string)))
        req->previous_response_id = apr_pstrdup(p, json_object_get_string(v));
    if (read_conversation(p, root, req, err) || refuse_both_chains(p, root, req, err))
        return -1;
    return 0;
}

/* Round 1's body: the request with the input's text in place; every
 * follow-up splices the same text in. */
static void encode_body(apr_pool_t *p, ci_request *req)
{
    req->body = ci_json_with_array(p, req->root, "input", req->input_text,
                                   req->input_len, "", 0, &req->body_len);
}

/* SPAN as it goes upstream unchanged: strict JSON, whatever the parser
 * let through (a raw control character in a string is re-encoded). */
static int span_passes(const ci_json_span *span)
{
    return !ci_json_has_control_byte(span->at, span->len);
}

/* The members of the translated input as text, the items the client sent
 * that pass unchanged (KEPT, at SPANS in the client's body) copied as the
 * client wrote them: a long conversation is not encoded again, only the
 * items the rewrite made. */
static const char *splice_input(apr_pool_t *p, json_object *input,
                                const ci_json_span *spans,
                                const apr_array_header_t *kept, apr_size_t *len)
{
    int n = (int)json_object_array_length(input), k, next = 0;
    ci_json_span *piece = apr_palloc(p, sizeof(*piece) * (apr_size_t)(n ? n : 1));
    apr_size_t total = 0;
    char *text, *w;
    for (k = 0; k < n; k++) {
        const ci_kept_item *kk = next < kept->nelts
                                     ? &APR_ARRAY_IDX(kept, next, ci_kept_item) : NULL;
        if (kk && kk->out == k) {
            next++;
            if (span_passes(&spans[kk->in])) {
                piece[k] = spans[kk->in];
                total += piece[k].len + 1;
                continue;
            }
        }
        /* (each item's text is its own: encoding the next leaves it be) */
        piece[k].at = ci_json_text(json_object_array_get_idx(input, k), &piece[k].len);
        total += piece[k].len + 1;
    }
    w = text = apr_palloc(p, total + 1);
    for (k = 0; k < n; k++) {
        if (k)
            *w++ = ',';
        memcpy(w, piece[k].at, piece[k].len);
        w += piece[k].len;
    }
    *w = '\0';
    *len = (apr_size_t)(w - text);
    return text;
}

/* What the scan makes of a body's input (scan_input). */
typedef enum {
    INPUT_PARSED = 0,            /* parsed whole: the scan is not sure of it */
    INPUT_PASSES,                /* goes upstream as the client wrote it */
    INPUT_MIXED                  /* objects, some of a type the rewrite translates */
} input_way;

typedef struct input_scan {
    input_way way;
    ci_json_span in;             /* the input's text in the body */
    ci_json_span text;           /* INPUT_PASSES: its members as they go upstream */
    ci_json_span *items;         /* each member's text (n < 0: not found) */
    int n;
    json_object *mixed;          /* INPUT_MIXED: the input as translate_input
                                    takes it, the translated items parsed, a
                                    stand-in for each other (an empty object,
                                    which translates to itself) */
} input_scan;

/* The input's text (most of a long conversation), made once: the client's
 * own bytes where the scan found its SENT members and they pass unchanged,
 * else encoded. */
static void encode_input(apr_pool_t *p, ci_request *req, const input_scan *scan,
                         int sent, const apr_array_header_t *kept)
{
    if (kept->nelts && scan->n >= 0 && scan->n == sent)
        req->input_text = splice_input(p, req->input, scan->items, kept, &req->input_len);
    else
        req->input_text = ci_json_array_members(req->input, &req->input_len);
    encode_body(p, req);
}

/* A function of a container with an allowlist: its description says what
 * it reaches (the model would not try otherwise). */
static json_object *with_network_note(apr_pool_t *p, json_object *tool,
                                      const apr_array_header_t *domains,
                                      const apr_array_header_t *secrets)
{
    const char *text = ci_json_str(tool, "description"), *list;
    char *at;
    int i;
    if (!domains)
        return tool;
    list = apr_array_pstrcat(p, domains, ',');
    text = apr_pstrcat(p, text, " Internet access: only these domains (\"*.\" is any "
                       "subdomain), over http and https on ports 80 and 443, through "
                       "the proxy the environment already sets (HTTP_PROXY, "
                       "HTTPS_PROXY): ", list, ".", NULL);
    for (i = 0; secrets && i < secrets->nelts; i++) {
        const ci_domain_secret *sec = &APR_ARRAY_IDX(secrets, i, ci_domain_secret);
        text = apr_pstrcat(p, text, i ? "," : " Credentials: the environment variable",
                           secrets->nelts > 1 && !i ? "s " : " ", sec->name, " (for ",
                           sec->domain, ")", NULL);
    }
    if (secrets)
        text = apr_pstrcat(p, text, " hold", secrets->nelts > 1 ? "" : "s",
                           " a stand-in that the proxy replaces with the real value in "
                           "request headers and URLs to that domain: use it as the "
                           "credential.", NULL);
    /* the Python tool's own sentence would say otherwise */
    if ((at = strstr(text, "There is no internet access. ")))
        memmove(at, at + 29, strlen(at + 29) + 1);
    json_object_object_add(tool, "description", json_object_new_string(text));
    return tool;
}

/* ---- an input that passes as the client wrote it ------------------------ */

/* Whether an input item of type TYPE (its value's text; at NULL: none) is
 * one the rewrite leaves alone, as far as the scan can tell. */
static int type_passes(const ci_json_span *type)
{
    static const char *const translated[] = {
        "item_reference", "code_interpreter_call", "shell_call", "shell_call_output"
    };
    unsigned i;
    if (!type->at)
        return 1;
    if (type->len < 2 || type->at[0] != '"' || memchr(type->at, '\\', type->len))
        return 0;
    for (i = 0; i < sizeof(translated) / sizeof(*translated); i++)
        if (type->len - 2 == strlen(translated[i]) &&
            !memcmp(type->at + 1, translated[i], type->len - 2))
            return 0;
    return 1;
}

/* The texts of SCAN's members (those PICK flags; all when NULL), joined
 * with commas between OPEN and CLOSE (each "" or one character): into
 * *OUT, from P. */
static void join_members(apr_pool_t *p, const input_scan *scan, const char *pick,
                         const char *open, const char *close, ci_json_span *out)
{
    apr_size_t total = 3;
    char *w;
    int i, first = 1;
    for (i = 0; i < scan->n; i++)
        total += !pick || pick[i] ? scan->items[i].len + 1 : 0;
    out->at = w = apr_palloc(p, total);
    w = apr_cpystrn(w, open, 2);
    for (i = 0; i < scan->n; i++)
        if (!pick || pick[i]) {
            if (!first)
                *w++ = ',';
            first = 0;
            memcpy(w, scan->items[i].at, scan->items[i].len);
            w += scan->items[i].len;
        }
    w = apr_cpystrn(w, close, 2);
    out->len = (apr_size_t)(w - out->at);
}

/* SCAN's input for translate_input, its items of TRANSLATED (one flag per
 * member) parsed, in one parse of their texts joined (a parse each would
 * cost a tokenizer each): 0, or -1 when they do not parse after all. */
static int parse_mixed(apr_pool_t *p, input_scan *scan, const char *translated)
{
    const char *perr = NULL;
    ci_json_span text;
    json_object *parsed;
    int i, k = 0;
    join_members(p, scan, translated, "[", "]", &text);
    if (!(parsed = ci_json_parse(p, text.at, text.len, &perr)) ||
        !json_object_is_type(parsed, json_type_array))
        return -1;
    scan->mixed = ci_json_own(p, json_object_new_array());
    for (i = 0; i < scan->n; i++) {
        json_object *item = translated[i] ? json_object_array_get_idx(parsed, k++) : NULL;
        if (translated[i] && !item)
            return -1;
        json_object_array_add(scan->mixed, item ? json_object_get(item)
                                                : json_object_new_object());
    }
    return (apr_size_t)k == json_object_array_length(parsed) ? 0 : -1;
}

/* What BODY's input is to the rewrite, read by a scan (*SCAN):
 * - INPUT_PASSES: it goes upstream exactly as the client wrote it, not
 *   parsed: a string (one user message), or an array of objects the scan
 *   reads as strict JSON, none of a type the rewrite translates;
 * - INPUT_MIXED: such an array with items the rewrite translates: only
 *   those are parsed, the others go upstream as written;
 * - INPUT_PARSED: anything else, parsed whole (the members' text found,
 *   when it can be, for the items that pass unchanged). */
static void scan_input(apr_pool_t *p, const char *body, apr_size_t len, input_scan *scan)
{
    ci_json_span type;
    char *translated;
    int i, mixed = 0;
    memset(scan, 0, sizeof(*scan));
    scan->n = -1;
    if (ci_json_top_value(body, len, "input", &scan->in.at, &scan->in.len))
        return;
    if (*scan->in.at == '"') {
        if (ci_json_strict_value(scan->in.at, scan->in.len))
            return;
        scan->text.at = apr_pstrcat(p, "{\"role\":\"user\",\"content\":",
                                    apr_pstrmemdup(p, scan->in.at, scan->in.len), "}",
                                    NULL);
        scan->text.len = strlen(scan->text.at);
        scan->way = INPUT_PASSES;
        return;
    }
    if ((scan->n = ci_json_array_spans(p, scan->in.at, scan->in.len, -1,
                                       &scan->items)) < 0)
        return;
    translated = apr_pcalloc(p, (apr_size_t)scan->n + 1);
    for (i = 0; i < scan->n; i++) {
        if (ci_json_strict_object(scan->items[i].at, scan->items[i].len, "type", &type))
            return;
        mixed |= translated[i] = !type_passes(&type);
    }
    if (!mixed) {
        join_members(p, scan, NULL, "", "", &scan->text);
        scan->way = INPUT_PASSES;
    }
    else if (!parse_mixed(p, scan, translated))
        scan->way = INPUT_MIXED;
}

/* BODY with the text IN (a part of it) replaced by an empty array. */
static const char *without(apr_pool_t *p, const char *body, apr_size_t len,
                           const ci_json_span *in, apr_size_t *out_len)
{
    apr_size_t head = (apr_size_t)(in->at - body), tail = len - head - in->len;
    char *out = apr_palloc(p, head + 2 + tail + 1);
    memcpy(out, body, head);
    memcpy(out + head, "[]", 2);
    memcpy(out + head + 2, in->at + in->len, tail);
    out[head + 2 + tail] = '\0';
    *out_len = head + 2 + tail;
    return out;
}

static int rewrite(apr_pool_t *p, json_object *root, const input_scan *scan,
                   const ci_rewrite_opts *opts, ci_request *req, ci_error *err)
{
    json_object *tools = ci_json_get(root, "tools", json_type_array);
    json_object *input = NULL;
    apr_array_header_t *kept = apr_array_make(p, 8, sizeof(ci_kept_item));
    int sent = -1;

    req->client_tools = ci_json_own(p, ci_json_copy(tools));
    if (req->secrets)
        ci_redact_secrets(req->client_tools);
    if (req->tool_index >= 0)
        json_object_array_put_idx(tools, req->tool_index, with_network_note(
                                      p, our_function_tool(opts), req->allowed_domains,
                                      req->secrets));
    if (req->shell_index >= 0)
        json_object_array_put_idx(tools, req->shell_index, with_network_note(
                                      p, shell_function_tool(req->shell_function),
                                      req->allowed_domains, req->secrets));
    if (read_flags(p, root, req, err) || rewrite_tool_choice(p, root, req, err))
        return -1;
    if (scan->way == INPUT_PASSES) {
        /* (root's input is an empty stand-in: the text is the input) */
        req->input_text = scan->text.at;
        req->input_len = scan->text.len;
    }
    else {
        if (scan->way == INPUT_MIXED)
            input = scan->mixed;
        else
            json_object_object_get_ex(root, "input", &input);
        req->input = ci_json_own(p, translate_input(p, input, opts, req->function_name,
                                                    req, kept, err));
        if (!req->input)
            return -1;
        sent = json_object_is_type(input, json_type_array)
                   ? (int)json_object_array_length(input) : -1;
        json_object_object_add(root, "input", json_object_get(req->input));
    }
    strip_include(root, req);
    /* A streaming client's rounds stream too (relayed as they come,
     * ci_relay.c); a JSON client's rounds come whole. */
    if (!req->wants_stream) {
        json_object_object_add(root, "stream", json_object_new_boolean(0));
        json_object_object_del(root, "stream_options");
    }
    if (scan->way == INPUT_PASSES)
        encode_body(p, req);
    else
        encode_input(p, req, scan, sent, kept);
    if (scan->way == INPUT_MIXED) {
        /* its stand-ins are no input: the text is (ci_request_input) */
        req->input = NULL;
        json_object_object_add(root, "input", json_object_new_array());
    }
    return 0;
}

int ci_request_prepend_input(apr_pool_t *p, ci_request *req, const char *items)
{
    const char *perr = NULL;
    json_object *add = ci_json_parse(p, items, strlen(items), &perr);
    const char *text;
    apr_size_t len;
    int i, n;
    if (!json_object_is_type(add, json_type_array))
        return -1;
    if (req->input) {
        json_object *input = ci_json_own(p, json_object_new_array());
        n = (int)json_object_array_length(add);
        for (i = 0; i < n; i++)
            json_object_array_add(input,
                                  json_object_get(json_object_array_get_idx(add, i)));
        n = (int)json_object_array_length(req->input);
        for (i = 0; i < n; i++)
            json_object_array_add(input, json_object_get(
                                             json_object_array_get_idx(req->input, i)));
        req->input = input;
        json_object_object_add(req->root, "input", json_object_get(input));
    }
    /* the items owed first, then the input's text as it was made */
    text = ci_json_array_members(add, &len);
    if (len && req->input_len)
        text = apr_pstrcat(p, apr_pstrmemdup(p, text, len), ",",
                           apr_pstrmemdup(p, req->input_text, req->input_len), NULL);
    else if (len)
        text = apr_pstrmemdup(p, text, len);
    else
        text = apr_pstrmemdup(p, req->input_text, req->input_len);
    req->input_text = text;
    req->input_len = strlen(text);
    encode_body(p, req);
    return 0;
}

void ci_request_prepend_context(apr_pool_t *p, ci_request *req, const char *text)
{
    json_object *item = ci_json_own(p, json_object_new_object());
    json_object *content = json_object_new_array(), *part = json_object_new_object();
    const char *item_text;
    apr_size_t item_len;
    json_object_object_add(part, "type", json_object_new_string("input_text"));
    json_object_object_add(part, "text", json_object_new_string(text));
    json_object_array_add(content, part);
    json_object_object_add(item, "type", json_object_new_string("message"));
    json_object_object_add(item, "role", json_object_new_string("user"));
    json_object_object_add(item, "content", content);
    item_text = ci_json_text(item, &item_len);
    req->input_text = req->input_len
        ? apr_pstrcat(p, item_text, ",", apr_pstrmemdup(p, req->input_text, req->input_len),
                      NULL)
        : apr_pstrdup(p, item_text);
    req->input_len = item_len + (req->input_len ? req->input_len + 1 : 0);
    req->input = NULL;              /* parsed again from the text when asked */
    encode_body(p, req);
}

json_object *ci_request_input(apr_pool_t *p, ci_request *req)
{
    const char *perr = NULL;
    if (!req->input)
        req->input = ci_json_parse(p, apr_pstrcat(p, "[", apr_pstrmemdup(p, req->input_text,
                                                                          req->input_len),
                                                  "]", NULL),
                                   req->input_len + 2, &perr);
    return req->input;
}

ci_req_verdict ci_request_rewrite(apr_pool_t *p, const char *body,
                                  apr_size_t len, const ci_rewrite_opts *opts,
                                  ci_request **out, ci_error *err)
{
    const char *perr = NULL, *parsed = body;
    apr_size_t parsed_len = len;
    input_scan scan;
    json_object *root, *tools;
    ci_request *req;

    /* The input's items that go upstream as they are are checked by a
     * scan, not parsed: most of a long conversation. */
    scan_input(p, body, len, &scan);
    if (scan.way != INPUT_PARSED)
        parsed = without(p, body, len, &scan.in, &parsed_len);
    root = ci_json_parse(p, parsed, parsed_len, &perr);
    if (!root && scan.way != INPUT_PARSED) {
        scan.way = INPUT_PARSED;        /* the error as the whole body has it */
        root = ci_json_parse(p, body, len, &perr);
    }
    if (!root) {
        ci_error_set(err, 400, CI_INVALID, NULL, "invalid_json", p,
                     "We could not parse the JSON body of your request: %s.", perr);
        return CI_REQ_ERROR;
    }
    if (!json_object_is_type(root, json_type_object)) {
        ci_error_set(err, 400, CI_INVALID, NULL, "invalid_json", p,
                     "The request body must be a JSON object.");
        return CI_REQ_ERROR;
    }
    /* Without our tool the request is not ours: its other fields are the
     * upstream's to judge. */
    if (!(tools = ci_json_get(root, "tools", json_type_array)) ||
        !has_our_tool(tools))
        return CI_REQ_PASS;
    if (check_top_level_types(p, root, err))
        return CI_REQ_ERROR;
    req = apr_pcalloc(p, sizeof(*req));
    req->function_name = opts->function_name;
    req->shell_function = opts->shell_function_name ? opts->shell_function_name
                                                    : CI_SHELL_FUNCTION;
    if (find_tools(p, tools, req->function_name, req->shell_function, req, err))
        return CI_REQ_ERROR;
    if (req->tool_index >= 0 &&
        check_container(p, json_object_array_get_idx(tools, req->tool_index),
                        req->tool_index, req, err))
        return CI_REQ_ERROR;
    if (req->shell_index >= 0 &&
        check_environment(p, json_object_array_get_idx(tools, req->shell_index),
                          req->shell_index, req, err))
        return CI_REQ_ERROR;
    if (req->shell_index < 0)
        req->shell_function = NULL;
    req->root = root;
    if (rewrite(p, root, &scan, opts, req, err))
        return CI_REQ_ERROR;
    *out = req;
    return CI_REQ_INTERCEPT;
}
