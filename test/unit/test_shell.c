/*
 * test_shell.c - unit tests of the hosted shell in the core: the shell tool
 * rewritten into a function (ci_request), the decoder's array mode that
 * reads its commands while they stream (ci_code_decoder), its calls, items
 * and output entries (ci_shell), its calls in the loop (ci_loop) and a
 * relayed stream's shell call (ci_relay, ci_sse).
 *
 * The byte scan's new names are tested in test_scan.c, which is built twice
 * (the AVX2 scan and the portable one).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <apr_tables.h>
#include <json-c/json.h>

#include "ci_code_decoder.h"
#include "ci_error.h"
#include "ci_exec.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_relay.h"
#include "ci_request.h"
#include "ci_shell.h"
#include "ci_sse.h"

#include "unit_core.h"

#define SHELL_AUTO "{'type':'shell','environment':{'type':'container_auto'}}"
#define SHELL_LOCAL "{'type':'shell','environment':{'type':'local'}}"
#define SHELL_REF(id) "{'type':'shell','environment':{'type':'container_reference'," \
                      "'container_id':'" id "'}}"
#define TYPE_ERR(param, what) "Invalid type for '" param "': expected " what "."
#define CONFLICT(what, param) "The code_interpreter and shell tools of a request share " \
                              "one container; give its " what " once ('" param "')."

/* The hosted shell's function, as the rewrite writes it (description
 * aside). */
#define SHELL_PARAMETERS                                                       \
    "{'type':'object','properties':{"                                          \
    "'commands':{'type':'array','description':'The commands to run, in order.'," \
    "'items':{'type':'string','description':'One bash command.'}},"            \
    "'timeout_ms':{'description':'The most each command may take, in milliseconds.'," \
    "'type':['integer','null']},"                                              \
    "'max_output_length':{'description':'The most characters of each command\\u0027s " \
    "output to return.','type':['integer','null']}},"                          \
    "'required':['commands','timeout_ms','max_output_length'],"                \
    "'additionalProperties':false}"

/* Tool TOOLS[I] is the hosted shell's function NAME. */
static void shell_function_(apr_pool_t *p, json_object *tool, const char *name,
                            const char *file, int line)
{
    const char *d;
    keys_are_(tool, (const char *const[]){ "type", "name", "description", "parameters",
                                           "strict", NULL }, file, line);
    str_eq_(ci_json_str(tool, "type"), "function", file, line);
    str_eq_(ci_json_str(tool, "name"), name, file, line);
    json_eq_(p, member(tool, "parameters"), SHELL_PARAMETERS, file, line);
    json_eq_(p, member(tool, "strict"), "true", file, line);
    d = ci_json_str(tool, "description");
    _assert_true(d && strstr(d, "bash") && strstr(d, "/mnt/data") &&
                 strstr(d, "timeout_ms") && strstr(d, "max_output_length"),
                 "shell description", file, line);
}
#define assert_shell_function(p, tool, name) \
    shell_function_((p), (tool), (name), __FILE__, __LINE__)

/* ======================================================================== */
/* ci_request: the tool                                                     */
/* ======================================================================== */

static void rewrite_hosted_shell(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'model':'m','input':'hi','tools':[" F_TOOL ","
                                   SHELL_AUTO "]}");
    json_object *sent;

    assert_int_equal(req->tool_index, -1);
    assert_int_equal(req->shell_index, 1);
    assert_str(req->shell_function, "shell");
    assert_null(req->container_id);
    assert_null(req->container_param);
    assert_null(req->memory_limit);
    assert_null(req->file_ids);
    assert_null(req->settings_param);
    assert_int_equal(req->forced_choice, 0);
    assert_json(p, req->client_tools, "[" F_TOOL "," SHELL_AUTO "]");
    assert_int_equal(json_object_array_length(root_tools(req)), 2);
    assert_json(p, idx(root_tools(req), 0), F_TOOL);
    assert_shell_function(p, idx(root_tools(req), 1), "shell");

    /* the whole body sent, the description aside */
    sent = PARSE_RAW(p, req->body);
    assert_int_equal(strlen(req->body), req->body_len);
    json_object_object_del(idx(ci_json_get(sent, "tools", json_type_array), 1),
                           "description");
    assert_json(p, sent, "{'model':'m','input':[{'role':'user','content':'hi'}],"
                         "'tools':[" F_TOOL ",{'type':'function','name':'shell',"
                         "'parameters':" SHELL_PARAMETERS ",'strict':true}],"
                         "'stream':false}");
}

static void rewrite_shell_not_ours(void **state)
{
    apr_pool_t *p = *state;
    static const char *const bodies[] = {
        "{'model':'m','input':'x','tools':[" SHELL_LOCAL "]}",
        "{'model':'m','input':'x','tools':[{'type':'shell'}]}",
        "{'model':'m','input':'x','tools':[{'type':'shell','environment':null}]}",
        "{'model':'m','input':'x','tools':[" F_TOOL "," SHELL_LOCAL "],"
        "'tool_choice':{'type':'shell'}}",
        /* a client function named like ours, next to the client's shell */
        "{'input':'x','tools':[{'type':'function','name':'shell','parameters':{}},"
        SHELL_LOCAL "]}",
        /* the history of the client's own shell */
        "{'input':[{'type':'shell_call','call_id':'c','action':{'commands':['ls']},"
        "'environment':{'type':'local'}}],'tools':[" SHELL_LOCAL "]}",
    };
    assert_all_pass(p, bodies);
}

static void rewrite_both_tools(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'input':'x','tools':[" SHELL_AUTO "," F_TOOL ","
                                   CI_TOOL "]}");
    assert_int_equal(req->tool_index, 2);
    assert_int_equal(req->shell_index, 0);
    assert_str(req->function_name, "python");
    assert_str(req->shell_function, "shell");
    assert_shell_function(p, idx(root_tools(req), 0), "shell");
    assert_json(p, idx(root_tools(req), 1), F_TOOL);
    assert_str(ci_json_str(idx(root_tools(req), 2), "name"), "python");
    assert_str(ci_json_str(idx(root_tools(req), 2), "type"), "function");
    assert_null(req->settings_param);

    /* the client's shell next to code_interpreter stays the client's */
    req = INTERCEPT(p, "{'input':'x','tools':[" CI_TOOL "," SHELL_LOCAL "]}");
    assert_int_equal(req->tool_index, 0);
    assert_int_equal(req->shell_index, -1);
    assert_null(req->shell_function);
    assert_json(p, idx(root_tools(req), 1), SHELL_LOCAL);
}

static void rewrite_shell_function_name(void **state)
{
    apr_pool_t *p = *state;
    static const ci_rewrite_opts o = { .function_name = "python",
                                      .shell_function_name = "bash" };
    /* a client function "shell" is no clash when ours is "bash" */
    ci_request *req = INTERCEPT_OPTS(p, "{'input':'x','tools':[" SHELL_AUTO ","
                                        "{'type':'function','name':'shell','parameters':{}}],"
                                        "'tool_choice':{'type':'shell'}}", &o);
    ci_error err;
    const char *b;
    assert_str(req->shell_function, "bash");
    assert_shell_function(p, idx(root_tools(req), 0), "bash");
    assert_json(p, member(req->root, "tool_choice"), "{'type':'function','name':'bash'}");
    b = J(p, "{'tools':[" SHELL_AUTO ",{'type':'function','name':'bash','parameters':{}}]}");
    memset(&err, 0, sizeof(err));
    assert_int_equal(ci_request_rewrite(p, b, strlen(b), &o, &req, &err), CI_REQ_ERROR);
    assert_str(err.param, "tools[1].name");
    assert_str(err.code, "tool_name_clash");
    assert_str(err.message, "The function name 'bash' is reserved for the shell tool "
                            "on this server; rename your function.");
}

static void rewrite_environment_settings(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'tools':[" F_TOOL "," SHELL_REF("cntr_x") "]}");
    assert_str(req->container_id, "cntr_x");
    assert_str(req->container_param, "tools[1].environment.container_id");
    assert_null(req->settings_param);
    assert_null(req->memory_limit);

    req = INTERCEPT(p, "{'tools':[" F_TOOL ",{'type':'shell','environment':{"
                       "'type':'container_auto','memory_limit':'4g','file_ids':['file_1'],"
                       "'network_policy':{'type':'disabled'},'skills':[]}}]}");
    assert_null(req->container_id);
    assert_null(req->container_param);
    assert_str(req->memory_limit, "4g");
    assert_json(p, req->file_ids, "['file_1']");
    assert_str(req->settings_param, "tools[1].environment");

    /* one container named by both tools, with one id */
    req = INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':'cntr_a'},"
                       SHELL_REF("cntr_a") "]}");
    assert_str(req->container_id, "cntr_a");
    assert_str(req->container_param, "tools[1].environment.container_id");
    /* the same memory tier on both */
    req = INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'memory_limit':'1g'}},{'type':'shell','environment':{"
                       "'type':'container_auto','memory_limit':'1g'}}]}");
    assert_str(req->memory_limit, "1g");
    assert_str(req->settings_param, "tools[1].environment");
    /* the tier is where it was given, whatever the other tool says */
    req = INTERCEPT(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'memory_limit':'1g'}}," SHELL_AUTO "]}");
    assert_str(req->memory_limit, "1g");
    assert_str(req->settings_param, "tools[0].container");
    req = INTERCEPT(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'memory_limit':'4g'}},{'type':'code_interpreter','container':"
                       "{'type':'auto','file_ids':['file_1']}}]}");
    assert_str(req->memory_limit, "4g");
    assert_str(req->settings_param, "tools[0].environment");
    assert_json(p, req->file_ids, "['file_1']");
}

static void reject_shell_tools(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'tools':[{'type':'shell','environment':'container_auto'}]}",
                    "tools[0].environment", "invalid_type",
                    TYPE_ERR("tools[0].environment", "an object"));
    assert_rejected(p, "{'tools':[" F_TOOL ",{'type':'shell','environment':{'type':'bogus'}}]}",
                    "tools[1].environment.type", "invalid_value",
                    "Invalid value: 'bogus'. Supported values are: 'container_auto', "
                    "'container_reference' and 'local'.");
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{}}]}",
                    "tools[0].environment.type", "invalid_type",
                    TYPE_ERR("tools[0].environment.type", "a string"));
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_reference'}}]}",
                    "tools[0].environment.container_id", "invalid_type",
                    TYPE_ERR("tools[0].environment.container_id", "a container id"));
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_reference',"
                       "'container_id':''}}]}",
                    "tools[0].environment.container_id", "invalid_type",
                    TYPE_ERR("tools[0].environment.container_id", "a container id"));
    assert_rejected(p, "{'tools':[" SHELL_AUTO "," F_TOOL "," SHELL_REF("cntr_x") "]}",
                    "tools[2]", "duplicate_tool", "Only one hosted shell tool may be given.");
    assert_rejected(p, "{'tools':[" SHELL_AUTO ",{'type':'function','name':'shell',"
                       "'parameters':{}}]}", "tools[1].name", "tool_name_clash",
                    "The function name 'shell' is reserved for the shell tool on this "
                    "server; rename your function.");
    assert_rejected(p, "{'tools':[{'type':'function','name':'shell','parameters':{}},"
                       CI_TOOL "," SHELL_AUTO "]}", "tools[0].name", "tool_name_clash",
                    "The function name 'shell' is reserved for the shell tool on this "
                    "server; rename your function.");
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'network_policy':{'type':'allowlist','allowed_domains':['pypi.org'],"
                       "'domain_secrets':[{'domain':'other.org','name':'T','value':'v'}]}}}]}",
                    "tools[0].environment.network_policy.domain_secrets[0].domain",
                    "invalid_value",
                    "Invalid value for "
                    "'tools[0].environment.network_policy.domain_secrets[0].domain': "
                    "'other.org' is not on the allowlist.");
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'network_policy':{'type':'allowlist','allowed_domains':"
                       "['pypi.org','10.0.0.1']}}}]}",
                    "tools[0].environment.network_policy.allowed_domains[1]", "invalid_value",
                    "Invalid value for 'tools[0].environment.network_policy.allowed_domains[1]'"
                    ": '10.0.0.1' is not a domain name.");
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'network_policy':{'type':'allowlist','allowed_domains':[]}}}]}",
                    "tools[0].environment.network_policy.allowed_domains", "invalid_type",
                    TYPE_ERR("tools[0].environment.network_policy.allowed_domains",
                             "a non-empty array of at most 256 domain names"));
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'network_policy':{'type':'open'}}}]}",
                    "tools[0].environment.network_policy", "invalid_type",
                    TYPE_ERR("tools[0].environment.network_policy",
                             "an object of type \"disabled\" or \"allowlist\""));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'network_policy':{'type':'allowlist','allowed_domains':['a.org']}}},"
                       "{'type':'shell','environment':{'type':'container_auto',"
                       "'network_policy':{'type':'allowlist','allowed_domains':['b.org']}}}]}",
                    "tools[1].environment.network_policy", "conflicting_container",
                    "The code_interpreter and shell tools of a request share one container; "
                    "give its network_policy once ('tools[1].environment.network_policy').");
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'skills':[{'type':'skill_reference','skill_id':'s_1'},"
                       "{'type':'other'}]}}]}",
                    "tools[0].environment.skills[1].type", "invalid_value",
                    "A skill's 'type' must be \"skill_reference\" or \"inline\".");
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':'cntr_a'},"
                       SHELL_REF("cntr_b") "]}",
                    "tools[1].environment.container_id", "conflicting_container",
                    CONFLICT("id", "tools[1].environment.container_id"));
    /* code_interpreter's container is checked first, wherever it is */
    assert_rejected(p, "{'tools':[" SHELL_REF("cntr_b") ","
                       "{'type':'code_interpreter','container':'cntr_a'}]}",
                    "tools[0].environment.container_id", "conflicting_container",
                    CONFLICT("id", "tools[0].environment.container_id"));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'memory_limit':'1g'}},{'type':'shell','environment':{"
                       "'type':'container_auto','memory_limit':'4g'}}]}",
                    "tools[1].environment.memory_limit", "conflicting_container",
                    CONFLICT("memory_limit", "tools[1].environment.memory_limit"));
    assert_rejected(p, "{'tools':[{'type':'code_interpreter','container':{'type':'auto',"
                       "'file_ids':['file_1']}},{'type':'shell','environment':{"
                       "'type':'container_auto','file_ids':['file_2']}}]}",
                    "tools[1].environment.file_ids", "conflicting_container",
                    CONFLICT("file_ids", "tools[1].environment.file_ids"));
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'file_ids':'file_1'}}]}",
                    "tools[0].environment.file_ids", "invalid_type",
                    TYPE_ERR("tools[0].environment.file_ids", "an array of file ids"));
    assert_rejected(p, "{'tools':[{'type':'shell','environment':{'type':'container_auto',"
                       "'memory_limit':4}}]}",
                    "tools[0].environment.memory_limit", "invalid_type",
                    TYPE_ERR("tools[0].environment.memory_limit", "a string"));
}

/* ======================================================================== */
/* ci_request: tool_choice                                                  */
/* ======================================================================== */

static void rewrite_shell_tool_choice(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'tools':[" SHELL_AUTO "],'tool_choice':{'type':'shell'}}");
    assert_json(p, member(req->root, "tool_choice"), "{'type':'function','name':'shell'}");
    assert_json(p, req->client_tool_choice, "{'type':'shell'}");
    assert_int_equal(req->forced_choice, 1);

    req = INTERCEPT(p, "{'tools':[" CI_TOOL "," SHELL_AUTO "," F_TOOL "],'tool_choice':{"
                       "'type':'allowed_tools','mode':'required','tools':[{'type':'shell'},"
                       "{'type':'function','name':'f'},{'type':'code_interpreter'}]}}");
    assert_json(p, member(req->root, "tool_choice"),
                "{'type':'allowed_tools','mode':'required','tools':["
                "{'type':'function','name':'shell'},{'type':'function','name':'f'},"
                "{'type':'function','name':'python'}]}");
    assert_int_equal(req->forced_choice, 1);
    req = INTERCEPT(p, "{'tools':[" SHELL_AUTO "],'tool_choice':{"
                       "'type':'allowed_tools','mode':'auto','tools':[{'type':'shell'}]}}");
    assert_json(p, member(req->root, "tool_choice"),
                "{'type':'allowed_tools','mode':'auto','tools':["
                "{'type':'function','name':'shell'}]}");
    assert_int_equal(req->forced_choice, 0);

    /* the client's shell is the client's to choose */
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "," SHELL_LOCAL "],'tool_choice':{'type':'shell'}}");
    assert_json(p, member(req->root, "tool_choice"), "{'type':'shell'}");
    assert_int_equal(req->forced_choice, 1);
    req = INTERCEPT(p, "{'tools':[" CI_TOOL "," SHELL_LOCAL "],'tool_choice':{"
                       "'type':'allowed_tools','mode':'auto','tools':[{'type':'shell'},"
                       "{'type':'code_interpreter'}]}}");
    assert_json(p, member(req->root, "tool_choice"),
                "{'type':'allowed_tools','mode':'auto','tools':["
                "{'type':'shell'},{'type':'function','name':'python'}]}");
    /* {"type":"code_interpreter"} without that tool is not ours either */
    req = INTERCEPT(p, "{'tools':[" SHELL_AUTO "],'tool_choice':{'type':'code_interpreter'}}");
    assert_json(p, member(req->root, "tool_choice"), "{'type':'code_interpreter'}");
}

/* ======================================================================== */
/* ci_request: history                                                      */
/* ======================================================================== */

/* ITEM is {type: function_call, call_id, name, arguments} exactly. */
static void function_call_(json_object *item, const char *call_id, const char *name,
                           const char *arguments, const char *file, int line)
{
    keys_are_(item, (const char *const[]){ "type", "call_id", "name", "arguments", NULL },
              file, line);
    str_eq_(ci_json_str(item, "type"), "function_call", file, line);
    str_eq_(ci_json_str(item, "call_id"), call_id, file, line);
    str_eq_(ci_json_str(item, "name"), name, file, line);
    str_eq_(ci_json_str(item, "arguments"), arguments, file, line);
}
#define assert_function_call(item, call_id, name, arguments) \
    function_call_((item), (call_id), (name), (arguments), __FILE__, __LINE__)

/* ITEM is {type: function_call_output, call_id, output} exactly. */
static void function_output_(json_object *item, const char *call_id, const char *output,
                             const char *file, int line)
{
    keys_are_(item, (const char *const[]){ "type", "call_id", "output", NULL }, file, line);
    str_eq_(ci_json_str(item, "type"), "function_call_output", file, line);
    str_eq_(ci_json_str(item, "call_id"), call_id, file, line);
    str_eq_(ci_json_str(item, "output"), output, file, line);
}
#define assert_function_output(item, call_id, output) \
    function_output_((item), (call_id), (output), __FILE__, __LINE__)

static void rewrite_shell_history(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req = INTERCEPT(p, "{'input':["
        "{'role':'user','content':'list'},"
        "{'type':'shell_call','id':'sh_1','call_id':'call_a','status':'completed',"
        "'action':{'commands':['ls','cat \\'a b\\''],'timeout_ms':5000,'max_output_length':null},"
        "'environment':{'type':'container_reference','container_id':'cntr_h'}},"
        "{'type':'shell_call_output','id':'sho_1','call_id':'call_a','status':'completed',"
        "'output':[{'stdout':'a\\n','stderr':'','outcome':{'type':'exit','exit_code':0}},"
        "{'stdout':'','stderr':'no /x','outcome':{'type':'timeout'}}],"
        "'max_output_length':null},"
        "{'type':'shell_call','call_id':'call_b','action':{'commands':['date'],"
        "'max_output_length':100},'environment':null},"
        "{'type':'shell_call_output','call_id':'call_b','output':[]},"
        "{'type':'shell_call','call_id':'call_l','action':{'commands':['pwd']},"
        "'environment':{'type':'local'}},"
        "{'type':'shell_call_output','call_id':'call_l','output':[{'stdout':'/'}]},"
        "{'type':'shell_call_output','call_id':'call_z','output':[]},"
        "{'type':'shell_call','call_id':'call_c','action':{'commands':[]}},"
        "{'type':'shell_call_output','call_id':'call_c','output':null}],"
        "'tools':[" SHELL_AUTO "]}");
    json_object *in = ci_request_input(p, req);

    assert_int_equal(json_object_array_length(in), 10);
    assert_json(p, idx(in, 0), "{'role':'user','content':'list'}");
    assert_function_call(idx(in, 1), "call_a", "shell",
                         "{\"commands\":[\"ls\",\"cat \\\"a b\\\"\"],\"timeout_ms\":5000,"
                         "\"max_output_length\":null}");
    /* the output is what the model was told: the entries' JSON text */
    assert_function_output(idx(in, 2), "call_a",
                           "[{\"stdout\":\"a\\n\",\"stderr\":\"\",\"outcome\":{\"type\":"
                           "\"exit\",\"exit_code\":0}},{\"stdout\":\"\",\"stderr\":\"no /x\","
                           "\"outcome\":{\"type\":\"timeout\"}}]");
    assert_function_call(idx(in, 3), "call_b", "shell",
                         "{\"commands\":[\"date\"],\"timeout_ms\":null,"
                         "\"max_output_length\":100}");
    assert_function_output(idx(in, 4), "call_b", "[]");
    /* the client's own shell, and an output of no call of ours, pass */
    assert_json(p, idx(in, 5), "{'type':'shell_call','call_id':'call_l','action':"
                               "{'commands':['pwd']},'environment':{'type':'local'}}");
    assert_json(p, idx(in, 6), "{'type':'shell_call_output','call_id':'call_l',"
                               "'output':[{'stdout':'/'}]}");
    assert_json(p, idx(in, 7), "{'type':'shell_call_output','call_id':'call_z','output':[]}");
    /* without an environment the call is the hosted shell's; an output
     * without entries tells the model so */
    assert_function_call(idx(in, 8), "call_c", "shell",
                         "{\"commands\":[],\"timeout_ms\":null,\"max_output_length\":null}");
    assert_function_output(idx(in, 9), "call_c", CI_NO_OUTPUT_RECORDED);
    assert_str(req->context_container, "cntr_h");
    assert_json_same(member(PARSE_RAW(p, req->body), "input"), in);

    /* with code_interpreter only, the shell_call of a local shell passes */
    req = INTERCEPT(p, "{'input':[{'type':'shell_call','call_id':'call_l','action':"
                       "{'commands':['pwd']},'environment':{'type':'local'}}],"
                       "'tools':[" CI_TOOL "," SHELL_LOCAL "]}");
    assert_json(p, idx(ci_request_input(p, req), 0), "{'type':'shell_call','call_id':'call_l','action':"
                                       "{'commands':['pwd']},'environment':{'type':'local'}}");
    assert_null(req->context_container);
}

static void reject_shell_history(void **state)
{
    apr_pool_t *p = *state;
    assert_rejected(p, "{'input':[{'role':'user','content':'x'},{'type':'shell_call',"
                       "'action':{'commands':['ls']}}],'tools':[" SHELL_AUTO "]}",
                    "input[1].call_id", "invalid_type",
                    TYPE_ERR("input[1].call_id", "a string of 1 to 64 characters"));
    assert_rejected(p, "{'input':[{'type':'shell_call','call_id':'c','action':{}}],"
                       "'tools':[" SHELL_AUTO "]}",
                    "input[0].action.commands", "invalid_type",
                    TYPE_ERR("input[0].action.commands", "an array of strings"));
}

/* ======================================================================== */
/* ci_code_decoder: array mode                                              */
/* ======================================================================== */

#define MAX_ELEMENTS 4

/* What an array decoder gave for one way of cutting the text. */
typedef struct elements {
    ci_code_status feed_st, finish_st;
    char text[MAX_ELEMENTS][128];
    apr_size_t len[MAX_ELEMENTS];
    int ended[MAX_ELEMENTS];         /* times element_ended() said so */
    apr_size_t ended_at[MAX_ELEMENTS]; /* the offset just past its closing quote */
    int last;                        /* ci_code_decoder_element() at the end */
} elements;

/* Feed TEXT to D cut at CUTS (offsets, ascending), each piece fed again
 * from where feed_some stopped until it is used up. */
static void decode_elements(ci_code_decoder *d, const char *text, apr_size_t len,
                            const apr_size_t *cuts, int ncuts, elements *e)
{
    apr_size_t at = 0;
    int i;
    memset(e, 0, sizeof(*e));
    ci_code_decoder_reset(d);
    assert_int_equal(ci_code_decoder_element(d), -1);
    for (i = 0; i <= ncuts; i++) {
        apr_size_t end = i < ncuts ? cuts[i] : len;
        while (at < end) {
            const char *out;
            apr_size_t n, used = 12345;
            int el;
            e->feed_st = ci_code_decoder_feed_some(d, text + at, end - at, &out, &n, &used);
            assert_true(used >= 1 && used <= end - at);
            assert_int_equal(out[n], '\0');
            el = ci_code_decoder_element(d);
            if (n) {
                assert_true(el >= 0 && el < MAX_ELEMENTS);
                assert_true(e->len[el] + n < sizeof(e->text[el]));
                memcpy(e->text[el] + e->len[el], out, n);
                e->len[el] += n;
            }
            if (ci_code_decoder_element_ended(d)) {
                assert_true(el >= 0 && el < MAX_ELEMENTS);
                assert_int_equal(text[at + used - 1], '"');
                e->ended[el]++;
                e->ended_at[el] = at + used;
            }
            else
                assert_int_equal(used, end - at);
            at += used;
            if (e->feed_st != CI_CODE_OK)
                at = end;
        }
    }
    e->last = ci_code_decoder_element(d);
    e->finish_st = ci_code_decoder_finish(d);
}

static void same_elements(const elements *a, const elements *b, const char *how)
{
    int i;
    if (a->feed_st != b->feed_st || a->finish_st != b->finish_st || a->last != b->last)
        fail_msg("%s: status %d/%d, last %d; expected %d/%d, %d", how, a->feed_st,
                 a->finish_st, a->last, b->feed_st, b->finish_st, b->last);
    for (i = 0; i < MAX_ELEMENTS; i++)
        if (a->len[i] != b->len[i] || memcmp(a->text[i], b->text[i], a->len[i]) ||
            a->ended[i] != b->ended[i] || a->ended_at[i] != b->ended_at[i])
            fail_msg("%s: element %d is \"%.*s\" (ended %d at %zu), expected \"%.*s\" "
                     "(ended %d at %zu)", how, i, (int)a->len[i], a->text[i], a->ended[i],
                     (size_t)a->ended_at[i], (int)b->len[i], b->text[i], b->ended[i],
                     (size_t)b->ended_at[i]);
}

/* TEXT decoded whole must give what json-c reads as its "commands", each
 * element ended once just past its closing quote; and the same cut at every
 * position, at every pair of positions and byte by byte. */
static void decode_commands_every_way(apr_pool_t *p, const char *text)
{
    apr_size_t len = strlen(text), a, b, *bytes;
    ci_code_decoder *d = ci_code_decoder_create_array(p, "commands");
    const char *perr;
    json_object *ref = ci_json_get(ci_json_parse(p, text, len, &perr), "commands",
                                   json_type_array);
    elements whole, got;
    int i, n;

    assert_non_null(ref);
    n = (int)json_object_array_length(ref);
    assert_true(n <= MAX_ELEMENTS);
    decode_elements(d, text, len, NULL, 0, &whole);
    assert_int_equal(whole.feed_st, CI_CODE_OK);
    assert_int_equal(whole.finish_st, CI_CODE_OK);
    assert_int_equal(whole.last, n - 1);
    assert_true(ci_code_decoder_ended(d));
    for (i = 0; i < MAX_ELEMENTS; i++) {
        if (i >= n) {
            assert_int_equal(whole.len[i], 0);
            assert_int_equal(whole.ended[i], 0);
            continue;
        }
        json_object *s = json_object_array_get_idx(ref, i);
        assert_int_equal(whole.len[i], json_object_get_string_len(s));
        assert_memory_equal(whole.text[i], json_object_get_string(s), whole.len[i]);
        assert_int_equal(whole.ended[i], 1);
    }
    for (a = 0; a <= len; a++)
        for (b = a; b <= len; b++) {
            apr_size_t cuts[2] = { a, b };
            decode_elements(d, text, len, cuts, 2, &got);
            same_elements(&got, &whole, apr_psprintf(p, "cut at %zu and %zu",
                                                     (size_t)a, (size_t)b));
        }
    bytes = apr_palloc(p, len * sizeof(*bytes));
    for (a = 0; a + 1 < len; a++)
        bytes[a] = a + 1;
    decode_elements(d, text, len, bytes, (int)len - 1, &got);
    same_elements(&got, &whole, "byte by byte");
}

static void array_every_split(void **state)
{
    apr_pool_t *p = *state;
    static const char args[] =
        "{\"commands\":[\"ls -l\",\"echo \\\"hi\\\" \\u00e9\"],\"timeout_ms\":null}";
    ci_code_decoder *d = ci_code_decoder_create_array(p, "commands");
    elements e;

    decode_commands_every_way(p, args);
    decode_elements(d, args, sizeof(args) - 1, NULL, 0, &e);
    assert_int_equal(e.len[0], 5);
    assert_memory_equal(e.text[0], "ls -l", 5);
    assert_int_equal(e.len[1], 12);
    assert_memory_equal(e.text[1], "echo \"hi\" \xc3\xa9", 12);
    assert_int_equal(e.ended_at[0], strstr(args, "-l\"") + 3 - args);
    assert_int_equal(e.ended_at[1], strstr(args, "e9\"") + 3 - args);

    /* other members, with arrays and a nested "commands", before and
     * after; whitespace everywhere; an empty element; a surrogate pair */
    decode_commands_every_way(p, " { \"timeout_ms\" : [1, [2, \"]\"]], \"x\": {\"commands\":"
                                 " [\"no\"]}, \"commands\" : [ \"a\" , \"\" , "
                                 "\"b\\ud83d\\ude00\" ] , \"y\": [[\"z\"], \"w\"],"
                                 " \"max_output_length\": null } ");
    decode_commands_every_way(p, "{\"commands\":[]}");
    decode_commands_every_way(p, "{\"commands\":[\"\"]}");
}

static void array_feed_some_stops(void **state)
{
    apr_pool_t *p = *state;
    static const char args[] =
        "{\"commands\":[\"ls -l\",\"echo \\\"hi\\\" \\u00e9\"],\"timeout_ms\":null}";
    ci_code_decoder *d = ci_code_decoder_create_array(p, "commands");
    const char *at = args, *out;
    apr_size_t left = sizeof(args) - 1, n, used;

    assert_int_equal(ci_code_decoder_element(d), -1);
    assert_int_equal(ci_code_decoder_element_ended(d), 0);
    assert_int_equal(ci_code_decoder_feed_some(d, at, left, &out, &n, &used), CI_CODE_OK);
    assert_int_equal(n, 5);
    assert_string_equal(out, "ls -l");
    assert_int_equal(used, 20);                 /* {"commands":["ls -l" */
    assert_int_equal(ci_code_decoder_element(d), 0);
    assert_int_equal(ci_code_decoder_element_ended(d), 1);
    assert_false(ci_code_decoder_ended(d));
    at += used, left -= used;
    assert_int_equal(ci_code_decoder_feed_some(d, at, left, &out, &n, &used), CI_CODE_OK);
    assert_int_equal(n, 12);
    assert_string_equal(out, "echo \"hi\" \xc3\xa9");
    assert_int_equal(used, 21);                 /* ,"echo \"hi\" \u00e9" */
    assert_int_equal(ci_code_decoder_element(d), 1);
    assert_int_equal(ci_code_decoder_element_ended(d), 1);
    at += used, left -= used;
    assert_int_equal(left, 20);                 /* ],"timeout_ms":null} */
    assert_int_equal(ci_code_decoder_feed_some(d, at, left, &out, &n, &used), CI_CODE_OK);
    assert_int_equal(n, 0);
    assert_string_equal(out, "");
    assert_int_equal(used, left);
    assert_int_equal(ci_code_decoder_element(d), 1);
    assert_int_equal(ci_code_decoder_element_ended(d), 0);
    assert_true(ci_code_decoder_ended(d));
    assert_int_equal(ci_code_decoder_length(d), 17);
    assert_int_equal(ci_code_decoder_finish(d), CI_CODE_OK);
    assert_null(ci_code_decoder_error(d));

    /* a feed that ends inside an element is used whole */
    ci_code_decoder_reset(d);
    assert_int_equal(ci_code_decoder_feed_some(d, args, 17, &out, &n, &used), CI_CODE_OK);
    assert_int_equal(used, 17);
    assert_string_equal(out, "ls ");
    assert_int_equal(ci_code_decoder_element(d), 0);
    assert_int_equal(ci_code_decoder_element_ended(d), 0);

    /* code mode reads everything, past the end of its string */
    d = ci_code_decoder_create(p);
    assert_int_equal(ci_code_decoder_feed_some(d, "{\"code\":\"x\"} ", 13, &out, &n, &used),
                     CI_CODE_OK);
    assert_int_equal(used, 13);
    assert_string_equal(out, "x");
    assert_int_equal(ci_code_decoder_element(d), -1);
    assert_int_equal(ci_code_decoder_element_ended(d), 0);
}

/* Decoding TEXT whole fails with WANT and MESSAGE; later feeds say so too. */
static void array_error_(apr_pool_t *p, const char *text, ci_code_status want,
                         const char *message, const char *file, int line)
{
    ci_code_decoder *d = ci_code_decoder_create_array(p, "commands");
    elements e;
    const char *out;
    apr_size_t n, used;
    decode_elements(d, text, strlen(text), NULL, 0, &e);
    _assert_int_equal(e.feed_st, want, file, line);
    _assert_int_equal(e.finish_st, want, file, line);
    str_eq_(ci_code_decoder_error(d), message, file, line);
    _assert_int_equal(ci_code_decoder_feed_some(d, "x", 1, &out, &n, &used), want,
                      file, line);
    _assert_int_equal(n, 0, file, line);
    _assert_int_equal(used, 1, file, line);
    str_eq_(out, "", file, line);
}
#define assert_array_error(p, text, want, message) \
    array_error_((p), (text), (want), (message), __FILE__, __LINE__)

#define AT_BYTE(n) " at byte " #n " of the function arguments"
#define NOT_AN_ELEMENT(n) "an element of \"commands\" is not a string" AT_BYTE(n)

static void array_errors(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *text; ci_code_status want; const char *error; } cases[] = {
        { "{\"commands\":\"ls\"}", CI_CODE_NOT_STRING, "\"commands\" is not an array" AT_BYTE(12) },
        { "{\"commands\":{\"a\":\"b\"}}", CI_CODE_NOT_STRING,
          "\"commands\" is not an array" AT_BYTE(12) },
        { "{\"commands\":[\"ls\",5]}", CI_CODE_NOT_STRING, NOT_AN_ELEMENT(18) },
        { "{\"commands\":[[\"ls\"]]}", CI_CODE_NOT_STRING, NOT_AN_ELEMENT(13) },
        { "{\"commands\":[null]}", CI_CODE_NOT_STRING, NOT_AN_ELEMENT(13) },
        { "{\"commands\":[\"a\",]}", CI_CODE_NOT_STRING, NOT_AN_ELEMENT(17) },
        { "{\"commands\":[\"a\"],\"commands\":[\"b\"]}", CI_CODE_DUPLICATE,
          "a second \"commands\" member" AT_BYTE(27) },
        { "{\"commands\":[\"a\"]} x", CI_CODE_SYNTAX,
          "'x' where nothing after the arguments object was expected" AT_BYTE(19) },
        { "{\"commands\":[\"a\xff\"]}", CI_CODE_BAD_UTF8, "invalid UTF-8 in a string" AT_BYTE(15) },
    };
    unsigned i;
    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++)
        assert_array_error(p, cases[i].text, cases[i].want, cases[i].error);
}

static void array_finish(void **state)
{
    apr_pool_t *p = *state;
    static const struct { const char *text; ci_code_status want; const char *error; } cases[] = {
        { "{\"commands\":[\"ls\"]}", CI_CODE_OK, NULL },
        { "{\"commands\":[]}", CI_CODE_OK, NULL },
        { "{\"commands\":[\"ls\"]", CI_CODE_TRUNCATED,
          "the function arguments end before their object does" },
        { "{\"commands\":[\"ls\"", CI_CODE_TRUNCATED,
          "the function arguments end before their object does" },
        { "", CI_CODE_TRUNCATED, "the function arguments end before their object does" },
        { "{\"timeout_ms\":null}", CI_CODE_MISSING,
          "the function arguments have no \"commands\" member" },
        { "{\"x\":{\"commands\":[\"ls\"]}}", CI_CODE_MISSING,
          "the function arguments have no \"commands\" member" },
        { "{\"command\":[\"ls\"],\"commandss\":[\"x\"]}", CI_CODE_MISSING,
          "the function arguments have no \"commands\" member" },
    };
    unsigned i;
    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        ci_code_decoder *d = ci_code_decoder_create_array(p, "commands");
        elements e;
        decode_elements(d, cases[i].text, strlen(cases[i].text), NULL, 0, &e);
        assert_int_equal(e.feed_st, CI_CODE_OK);
        if (e.finish_st != cases[i].want)
            fail_msg("%s: finish %d, expected %d", cases[i].text, e.finish_st, cases[i].want);
        assert_str(ci_code_decoder_error(d), cases[i].error);
        /* finish says it again */
        assert_int_equal(ci_code_decoder_finish(d), cases[i].want);
    }
}

/* ======================================================================== */
/* ci_shell                                                                 */
/* ======================================================================== */

#define BAD_ARGUMENTS                                                          \
    "The arguments were not a JSON object with \"commands\" (an array of 1 to 100 " \
    "strings), \"timeout_ms\" and \"max_output_length\" (positive integers or null); " \
    "nothing was run."

static void shell_parse(void **state)
{
    apr_pool_t *p = *state;
    const char *why = "unset";
    ci_shell_call *a = ci_shell_parse(p, "{\"commands\":[\"ls\",\"echo \\u00e9\"],"
                                         "\"timeout_ms\":1500,\"max_output_length\":null}",
                                      &why);
    static const char *const bad[] = {
        "{\"timeout_ms\":1}", "{\"commands\":[]}", "{\"commands\":\"ls\"}",
        "{\"commands\":[\"ls\",7]}", "{\"commands\":[null]}",
        "{\"commands\":[\"ls\"],\"timeout_ms\":0}",
        "{\"commands\":[\"ls\"],\"timeout_ms\":-5}",
        "{\"commands\":[\"ls\"],\"timeout_ms\":\"10\"}",
        "{\"commands\":[\"ls\"],\"timeout_ms\":1.5}",
        "{\"commands\":[\"ls\"],\"timeout_ms\":2147483648}",
        "{\"commands\":[\"ls\"],\"max_output_length\":0}",
        "{\"commands\":[\"ls\"],\"max_output_length\":true}",
        "not json", "[\"ls\"]", "",
    };
    unsigned i;
    char *many;

    assert_non_null(a);
    assert_null(why);
    assert_int_equal(a->commands->nelts, 2);
    assert_string_equal(APR_ARRAY_IDX(a->commands, 0, const char *), "ls");
    assert_string_equal(APR_ARRAY_IDX(a->commands, 1, const char *), "echo \xc3\xa9");
    assert_int_equal(a->timeout_ms, 1500);
    assert_int_equal(a->max_output_length, -1);
    assert_json(p, ci_json_own(p, ci_shell_action_json(a)),
                "{'commands':['ls','echo \\u00e9'],'timeout_ms':1500,'max_output_length':null}");
    assert_keys(ci_json_own(p, ci_shell_action_json(a)), "commands", "timeout_ms",
                "max_output_length");
    assert_json(p, ci_json_own(p, ci_shell_action_json(NULL)),
                "{'commands':[],'timeout_ms':null,'max_output_length':null}");

    /* both limits absent: null */
    a = ci_shell_parse(p, "{\"commands\":[\"x\"]}", &why);
    assert_non_null(a);
    assert_int_equal(a->timeout_ms, -1);
    assert_int_equal(a->max_output_length, -1);
    a = ci_shell_parse(p, "{\"commands\":[\"x\"],\"timeout_ms\":2147483647,"
                          "\"max_output_length\":1}", &why);
    assert_non_null(a);
    assert_int_equal(a->timeout_ms, 2147483647);
    assert_int_equal(a->max_output_length, 1);

    for (i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        why = NULL;
        if (ci_shell_parse(p, bad[i], &why))
            fail_msg("parsed: %s", bad[i]);
        assert_str(why, BAD_ARGUMENTS);
    }
    why = NULL;
    assert_null(ci_shell_parse(p, NULL, &why));
    assert_str(why, BAD_ARGUMENTS);

    /* 100 commands, and 101 */
    many = apr_pstrdup(p, "{\"commands\":[\"c\"");
    for (i = 1; i < CI_SHELL_MAX_COMMANDS; i++)
        many = apr_pstrcat(p, many, ",\"c\"", NULL);
    a = ci_shell_parse(p, apr_pstrcat(p, many, "]}", NULL), &why);
    assert_non_null(a);
    assert_int_equal(a->commands->nelts, 100);
    assert_null(ci_shell_parse(p, apr_pstrcat(p, many, ",\"c\"]}", NULL), &why));
    assert_str(why, BAD_ARGUMENTS);
}

static ci_exec_result *shell_result(apr_pool_t *p, ci_exec_outcome outcome,
                                    const char *failure)
{
    ci_exec_result *r = apr_pcalloc(p, sizeof(*r));
    r->outcome = outcome;
    r->failure = failure;
    r->text = "";
    r->images = apr_array_make(p, 1, sizeof(const char *));
    r->commands = apr_array_make(p, 2, sizeof(ci_command_result));
    return r;
}

static void add_command(ci_exec_result *r, const char *out, const char *err, int timed_out,
                        int exit_code)
{
    ci_command_result *c = apr_array_push(r->commands);
    c->stdout_text = out;
    c->stderr_text = err;
    c->timed_out = timed_out;
    c->exit_code = exit_code;
}

static void shell_output_cut(void **state)
{
    apr_pool_t *p = *state;
    /* 11 characters (13 bytes) of stdout, 4 (6 bytes) of stderr */
    ci_exec_result *r = shell_result(p, CI_EXEC_COMPLETED, NULL);
    add_command(r, "h\xc3\xa9llo w\xc3\xb6rld", "\xc3\xa9rr!", 0, 3);
    add_command(r, NULL, NULL, 0, 0);

    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)),
                "[{'stdout':'h\xc3\xa9llo w\xc3\xb6rld','stderr':'\xc3\xa9rr!',"
                "'outcome':{'type':'exit','exit_code':3}},"
                "{'stdout':'','stderr':'','outcome':{'type':'exit','exit_code':0}}]");
    {
        /* the first N characters, stdout first, stderr gets the rest */
        static const struct { apr_size_t n; const char *out, *err; } cuts[] = {
            { 1, "h", "" },
            { 2, "h\xc3\xa9", "" },
            { 8, "h\xc3\xa9llo w\xc3\xb6", "" },
            { 11, "h\xc3\xa9llo w\xc3\xb6rld", "" },
            { 12, "h\xc3\xa9llo w\xc3\xb6rld", "\xc3\xa9" },
            { 14, "h\xc3\xa9llo w\xc3\xb6rld", "\xc3\xa9rr" },
            { 15, "h\xc3\xa9llo w\xc3\xb6rld", "\xc3\xa9rr!" },
            { 1000, "h\xc3\xa9llo w\xc3\xb6rld", "\xc3\xa9rr!" },
        };
        unsigned i;
        for (i = 0; i < sizeof(cuts) / sizeof(*cuts); i++) {
            json_object *out = ci_json_own(p, ci_shell_output(r, cuts[i].n));
            assert_int_equal(json_object_array_length(out), 2);
            assert_keys(idx(out, 0), "stdout", "stderr", "outcome");
            assert_str(ci_json_str(idx(out, 0), "stdout"), cuts[i].out);
            assert_str(ci_json_str(idx(out, 0), "stderr"), cuts[i].err);
            assert_json(p, member(idx(out, 0), "outcome"), "{'type':'exit','exit_code':3}");
            assert_json(p, idx(out, 1), "{'stdout':'','stderr':'','outcome':"
                                        "{'type':'exit','exit_code':0}}");
        }
    }
    /* a 4-byte character counts as one */
    r = shell_result(p, CI_EXEC_COMPLETED, NULL);
    add_command(r, "\xf0\x9f\x98\x80" "a", "\xf0\x9f\x98\x80" "b", 0, 0);
    assert_json(p, ci_json_own(p, ci_shell_output(r, 3)),
                "[{'stdout':'\xf0\x9f\x98\x80" "a','stderr':'\xf0\x9f\x98\x80',"
                "'outcome':{'type':'exit','exit_code':0}}]");
    /* no commands at all */
    r = shell_result(p, CI_EXEC_COMPLETED, NULL);
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)), "[]");
    r->commands = NULL;
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)), "[]");
}

static void shell_output_outcomes(void **state)
{
    apr_pool_t *p = *state;
    ci_exec_result *r = shell_result(p, CI_EXEC_COMPLETED, NULL);
    json_object *out;
    add_command(r, "started\n", "", 0, 0);
    add_command(r, "half", "", 1, 137);
    out = ci_json_own(p, ci_shell_output(r, 0));
    assert_json(p, out, "[{'stdout':'started\\n','stderr':'','outcome':{'type':'exit',"
                        "'exit_code':0}},{'stdout':'half','stderr':'','outcome':"
                        "{'type':'timeout'}}]");
    assert_keys(idx(out, 1), "stdout", "stderr", "outcome");
    assert_keys(member(idx(out, 1), "outcome"), "type");
    assert_keys(member(idx(out, 0), "outcome"), "type", "exit_code");

    /* the sandbox was lost after the first command: a last entry says why */
    r = shell_result(p, CI_EXEC_LOST, "The sandbox stopped.");
    add_command(r, "one\n", "", 0, 0);
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)),
                "[{'stdout':'one\\n','stderr':'','outcome':{'type':'exit','exit_code':0}},"
                "{'stdout':'','stderr':'The sandbox stopped.','outcome':{'type':'exit',"
                "'exit_code':1}}]");
    /* the failure's entry is not cut */
    assert_json(p, idx(ci_json_own(p, ci_shell_output(r, 3)), 1),
                "{'stdout':'','stderr':'The sandbox stopped.','outcome':{'type':'exit',"
                "'exit_code':1}}");
    r = shell_result(p, CI_EXEC_TIMED_OUT, "Stopped after 30 s.");
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)),
                "[{'stdout':'','stderr':'Stopped after 30 s.','outcome':{'type':'timeout'}}]");
    r = shell_result(p, CI_EXEC_NOT_RUN, NULL);
    r->commands = NULL;
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)),
                "[{'stdout':'','stderr':'The commands did not run.','outcome':"
                "{'type':'exit','exit_code':1}}]");
    /* a command that raised (exit code) is no failure of the call */
    r = shell_result(p, CI_EXEC_ERROR, "unused");
    add_command(r, "", "boom", 0, 2);
    assert_json(p, ci_json_own(p, ci_shell_output(r, 0)),
                "[{'stdout':'','stderr':'boom','outcome':{'type':'exit','exit_code':2}}]");
}

static void shell_items(void **state)
{
    apr_pool_t *p = *state;
    const char *why;
    ci_shell_call *a = ci_shell_parse(p, "{\"commands\":[\"ls\"],\"timeout_ms\":null,"
                                         "\"max_output_length\":20}", &why);
    json_object *item = ci_json_own(p, ci_shell_call_item("sh_1", "call_1", a, "completed",
                                                          "cntr_1"));
    json_object *entries = ci_json_own(p, json_object_new_array()), *out;
    assert_keys(item, "id", "type", "call_id", "action", "status", "environment");
    assert_json(p, item, "{'id':'sh_1','type':'shell_call','call_id':'call_1','action':"
                         "{'commands':['ls'],'timeout_ms':null,'max_output_length':20},"
                         "'status':'completed','environment':{'type':'container_reference',"
                         "'container_id':'cntr_1'}}");
    json_object_array_add(entries, ci_shell_entry("o", NULL, 0, 0));
    out = ci_json_own(p, ci_shell_output_item("sho_1", "call_1", entries, "completed", 20));
    assert_keys(out, "id", "type", "call_id", "output", "status", "max_output_length");
    assert_json(p, out, "{'id':'sho_1','type':'shell_call_output','call_id':'call_1',"
                        "'output':[{'stdout':'o','stderr':'','outcome':{'type':'exit',"
                        "'exit_code':0}}],'status':'completed','max_output_length':20}");
    /* the output is shared, not copied */
    assert_ptr_equal(member(out, "output"), entries);
    out = ci_json_own(p, ci_shell_output_item("sho_2", "call_2", NULL, "in_progress", -1));
    assert_json(p, out, "{'id':'sho_2','type':'shell_call_output','call_id':'call_2',"
                        "'output':[],'status':'in_progress','max_output_length':null}");
}

static void shell_bounds(void **state)
{
    apr_pool_t *p = *state;
    const char *why;
    ci_shell_action act;
    ci_shell_call *a = ci_shell_parse(p, "{\"commands\":[\"ls\"]}", &why);

    /* the model's limits (-1: null), capped by the tool's (30 s, 4096) */
    static const struct { int timeout_ms, max_output_length; apr_interval_time_t timeout;
                          apr_size_t max_output; } cases[] = {
        { -1, -1, APR_USEC_PER_SEC * 30, 4096 },
        { 1500, 100, 1500000, 100 },
        { 60000, 5000, APR_USEC_PER_SEC * 30, 4096 },
        { 30000, 4096, APR_USEC_PER_SEC * 30, 4096 },
        { 29999, 4095, 29999000, 4095 },
    };
    unsigned i;
    for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        a->timeout_ms = cases[i].timeout_ms;
        a->max_output_length = cases[i].max_output_length;
        memset(&act, 0, sizeof(act));
        ci_shell_bounds(a, apr_time_from_sec(30), 4096, &act);
        assert_ptr_equal(act.commands, a->commands);
        assert_int_equal(act.timeout, cases[i].timeout);
        assert_int_equal(act.max_output, cases[i].max_output);
    }
}

static void utf8_prefix(void **state)
{
    static const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";   /* a é € 😀 z */
    apr_size_t len = sizeof(s) - 1;
    (void)state;
    assert_int_equal(ci_utf8_prefix(s, len, 0), 0);
    assert_int_equal(ci_utf8_prefix(s, len, 1), 1);
    assert_int_equal(ci_utf8_prefix(s, len, 2), 3);
    assert_int_equal(ci_utf8_prefix(s, len, 3), 6);
    assert_int_equal(ci_utf8_prefix(s, len, 4), 10);
    assert_int_equal(ci_utf8_prefix(s, len, 5), 11);
    assert_int_equal(ci_utf8_prefix(s, len, 6), 11);
    assert_int_equal(ci_utf8_prefix(s, len, (apr_size_t)-1), 11);
    assert_int_equal(ci_utf8_prefix("", 0, 3), 0);
    /* a character cut by LEN counts as far as it goes */
    assert_int_equal(ci_utf8_prefix(s, 5, 3), 5);
    assert_int_equal(ci_utf8_prefix(s, 5, 2), 3);
}

/* ======================================================================== */
/* ci_loop                                                                  */
/* ======================================================================== */

#define SHELL_ARGS "{\"commands\":[\"echo hi\",\"ls\"],\"timeout_ms\":null," \
                   "\"max_output_length\":50}"
#define MESSAGE(id, text) "{'type':'message','id':'" id "','role':'assistant'," \
                          "'status':'completed','content':[{'type':'output_text'," \
                          "'text':'" text "','annotations':[]}]}"

/* The model's entries of the loop tests: the second command's stdout is
 * cut at 50 characters. */
#define TEN_X "xxxxxxxxxx"
#define FIFTY_X TEN_X TEN_X TEN_X TEN_X TEN_X
#define SIXTY_X FIFTY_X TEN_X
#define ENTRIES_TEXT                                                            \
    "[{\"stdout\":\"hi\\n\",\"stderr\":\"\",\"outcome\":{\"type\":\"exit\",\"exit_code\":0}}," \
    "{\"stdout\":\"" FIFTY_X "\",\"stderr\":\"\",\"outcome\":{\"type\":\"exit\","   \
    "\"exit_code\":2}}]"

static void loop_shell_round(void **state)
{
    apr_pool_t *p = *state;
    ci_request *req;
    ci_loop *l = loop_for(p, "{'model':'m','input':'go','tools':[" F_TOOL "," SHELL_AUTO "]}",
                          4, &req);
    json_object *r = resp_new(p, "resp_1"), *fc, *body, *in, *resp, *out, *up_tools;
    const apr_array_header_t *items;
    ci_exec_result *res = shell_result(p, CI_EXEC_COMPLETED, NULL);
    ci_shell_action act;
    apr_array_header_t *mem;
    const char *pending = "unset", *cut;
    ci_call *c;

    add_item(p, r, "{'type':'reasoning','id':'rs_1','summary':[]}");
    fc = add_call_args(r, "call_s", "shell", SHELL_ARGS);
    add_item(p, r, MESSAGE("msg_1", "Running."));
    TAKE(l, p, r);

    assert_true(ci_loop_is_shell_call(l, fc));
    assert_true(ci_loop_is_our_call(l, fc));
    assert_int_equal(ci_loop_round_calls(l)->nelts, 1);
    c = round_call(l, 0);
    assert_int_equal(c->shell, 1);
    assert_true(is_hex_id(c->item_id, "sh_", 48));
    assert_true(is_hex_id(c->output_item_id, "sho_", 48));
    assert_str(c->call_id, "call_s");
    assert_null(c->arguments_error);
    assert_null(c->code);
    assert_non_null(c->action);
    assert_int_equal(c->action->commands->nelts, 2);
    assert_int_equal(c->action->max_output_length, 50);
    assert_int_equal(c->round, 1);
    assert_int_equal(c->output_index, 1);
    assert_int_equal(c->output_item_index, 2);
    /* the output item follows its call, before what the model wrote next */
    items = ci_loop_round_items(l);
    assert_int_equal(items->nelts, 3);
    assert_int_equal(APR_ARRAY_IDX(items, 0, ci_round_item).output_index, 0);
    assert_null(APR_ARRAY_IDX(items, 0, ci_round_item).call);
    assert_int_equal(APR_ARRAY_IDX(items, 1, ci_round_item).output_index, 1);
    assert_ptr_equal(APR_ARRAY_IDX(items, 1, ci_round_item).call, c);
    assert_int_equal(APR_ARRAY_IDX(items, 2, ci_round_item).output_index, 3);
    assert_null(APR_ARRAY_IDX(items, 2, ci_round_item).call);
    assert_int_equal(ci_loop_items(l), 4);
    assert_false(ci_loop_round_has_client_calls(l));

    assert_true(ci_loop_may_execute(l, c));
    ci_loop_shell_bounds(l, c, apr_time_from_sec(30), 1000, &act);
    assert_ptr_equal(act.commands, c->action->commands);
    assert_int_equal(act.timeout, apr_time_from_sec(30));
    assert_int_equal(act.max_output, 50);
    assert_int_equal(c->max_chars, 50);
    add_command(res, "hi\n", "", 0, 0);
    add_command(res, SIXTY_X SIXTY_X, "ls: warning\n", 0, 2);
    ci_loop_record(l, c, res);
    assert_int_equal(c->executed, 1);
    assert_int_equal(ci_loop_executions(l), 1);
    assert_str(c->model_output, ENTRIES_TEXT);
    cut = strstr(c->model_output, FIFTY_X);
    assert_non_null(cut);
    assert_int_equal(strspn(cut, "x"), 50);

    /* the follow-up tells the model the entries */
    assert_int_equal(ci_loop_next(l), CI_NEXT_FOLLOWUP);
    body = followup(l, p, CI_NEXT_FOLLOWUP);
    in = member(body, "input");
    assert_int_equal(json_object_array_length(in), 5);
    assert_json(p, idx(in, 0), "{'role':'user','content':'go'}");
    assert_json_same(idx(in, 2), fc);
    assert_function_output(idx(in, 4), "call_s", ENTRIES_TEXT);

    /* round 2: the model is done; the upstream echoes the tools it got */
    r = resp_new(p, "resp_2");
    add_item(p, r, MESSAGE("msg_2", "Done."));
    up_tools = ci_json_copy(root_tools(req));
    json_object_object_add(idx(up_tools, 0), "strict", json_object_new_boolean(1));
    json_object_object_add(r, "tools", up_tools);
    TAKE(l, p, r);
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);
    resp = ci_loop_response(l);
    out = member(resp, "output");
    assert_int_equal(json_object_array_length(out), 5);
    assert_json(p, idx(out, 0), "{'type':'reasoning','id':'rs_1','summary':[]}");
    assert_keys(idx(out, 1), "id", "type", "call_id", "action", "status", "environment");
    assert_str(ci_json_str(idx(out, 1), "id"), c->item_id);
    json_object_object_del(idx(out, 1), "id");
    assert_json(p, idx(out, 1), "{'type':'shell_call','call_id':'call_s','action':"
                                "{'commands':['echo hi','ls'],'timeout_ms':null,"
                                "'max_output_length':50},'status':'completed',"
                                "'environment':{'type':'container_reference',"
                                "'container_id':'cntr_test'}}");
    assert_keys(idx(out, 2), "id", "type", "call_id", "output", "status",
                "max_output_length");
    assert_str(ci_json_str(idx(out, 2), "id"), c->output_item_id);
    json_object_object_del(idx(out, 2), "id");
    assert_json(p, idx(out, 2), "{'type':'shell_call_output','call_id':'call_s','output':"
                                "[{'stdout':'hi\\n','stderr':'','outcome':{'type':'exit',"
                                "'exit_code':0}},{'stdout':'" FIFTY_X "','stderr':'',"
                                "'outcome':{'type':'exit','exit_code':2}}],"
                                "'status':'completed','max_output_length':50}");
    assert_json(p, idx(out, 3), MESSAGE("msg_1", "Running."));
    assert_json(p, idx(out, 4), MESSAGE("msg_2", "Done."));
    /* the client's tools, with the upstream's completion of its own */
    assert_json(p, member(resp, "tools"), "[{'type':'function','name':'f','parameters':"
                                          "{'type':'object'},'strict':true}," SHELL_AUTO "]");
    assert_json(p, member(resp, "tool_choice"), "'auto'");

    /* what the ids stand for upstream */
    mem = ci_loop_memory(l, p, &pending);
    assert_null(pending);
    assert_int_equal(mem->nelts, 2);
    assert_str(APR_ARRAY_IDX(mem, 0, ci_memory).item_id, c->item_id);
    {
        json_object *pair = PARSE_RAW(p, APR_ARRAY_IDX(mem, 0, ci_memory).text);
        assert_int_equal(json_object_array_length(pair), 2);
        assert_function_call(idx(pair, 0), "call_s", "shell", SHELL_ARGS);
        assert_function_output(idx(pair, 1), "call_s", ENTRIES_TEXT);
    }
    assert_str(APR_ARRAY_IDX(mem, 1, ci_memory).item_id, c->output_item_id);
    assert_str(APR_ARRAY_IDX(mem, 1, ci_memory).text, "[]");
}

static void loop_shell_refused(void **state)
{
    apr_pool_t *p = *state;
    ci_loop *l = loop_for(p, "{'input':'go','tools':[" CI_TOOL "," SHELL_REF("cntr_r") "],"
                             "'tool_choice':{'type':'shell'}}", 4, NULL);
    json_object *r = resp_new(p, "resp_1"), *resp, *out;
    const char *pending = NULL;
    apr_array_header_t *mem;
    ci_call *c, *code;

    add_call_args(r, "call_s", "shell", "{\"commands\":\"ls\"}");
    add_call(r, "call_p", "python", "print(1)");
    add_call_args(r, "call_f", "f", "{}");
    TAKE(l, p, r);
    assert_int_equal(ci_loop_round_calls(l)->nelts, 2);
    c = round_call(l, 0);
    code = round_call(l, 1);
    assert_int_equal(c->shell, 1);
    assert_null(c->action);
    assert_str(c->arguments_error, BAD_ARGUMENTS);
    assert_int_equal(c->output_index, 0);
    assert_int_equal(c->output_item_index, 1);
    assert_int_equal(code->shell, 0);
    assert_true(is_hex_id(code->item_id, "ci_", 48));
    assert_int_equal(code->output_index, 2);
    assert_true(ci_loop_round_has_client_calls(l));

    assert_false(ci_loop_may_execute(l, c));
    assert_int_equal(c->executed, 0);
    assert_str(c->model_output, "[{\"stdout\":\"\",\"stderr\":\"" "The arguments were not "
               "a JSON object with \\\"commands\\\" (an array of 1 to 100 strings), "
               "\\\"timeout_ms\\\" and \\\"max_output_length\\\" (positive integers or "
               "null); nothing was run.\",\"outcome\":{\"type\":\"exit\",\"exit_code\":1}}]");
    assert_true(ci_loop_may_execute(l, code));
    ci_loop_record(l, code, res_new(p, CI_EXEC_COMPLETED, "1\n", NULL));
    assert_int_equal(ci_loop_next(l), CI_NEXT_DONE);

    resp = ci_loop_response(l);
    out = member(resp, "output");
    assert_int_equal(json_object_array_length(out), 4);
    json_object_object_del(idx(out, 0), "id");
    /* the call as the model wrote it could not be read: no commands */
    assert_json(p, idx(out, 0), "{'type':'shell_call','call_id':'call_s','action':"
                                "{'commands':[],'timeout_ms':null,'max_output_length':null},"
                                "'status':'completed','environment':{'type':"
                                "'container_reference','container_id':'cntr_test'}}");
    json_object_object_del(idx(out, 1), "id");
    assert_str(ci_json_str(idx(member(idx(out, 1), "output"), 0), "stderr"), BAD_ARGUMENTS);
    json_object_object_add(idx(member(idx(out, 1), "output"), 0), "stderr",
                           json_object_new_string("why"));
    assert_json(p, idx(out, 1), "{'type':'shell_call_output','call_id':'call_s','output':"
                                "[{'stdout':'','stderr':'why','outcome':"
                                "{'type':'exit','exit_code':1}}],'status':'completed',"
                                "'max_output_length':null}");
    assert_str(ci_json_str(idx(out, 2), "type"), "code_interpreter_call");
    assert_str(ci_json_str(idx(out, 3), "name"), "f");
    assert_json(p, member(resp, "tools"), "[" CI_TOOL "," SHELL_REF("cntr_r") "]");
    assert_json(p, member(resp, "tool_choice"), "{'type':'shell'}");

    /* the round ended on a client call: the upstream is owed both outputs */
    mem = ci_loop_memory(l, p, &pending);
    assert_int_equal(mem->nelts, 3);
    assert_str(APR_ARRAY_IDX(mem, 0, ci_memory).item_id, c->item_id);
    assert_str(APR_ARRAY_IDX(mem, 1, ci_memory).item_id, c->output_item_id);
    assert_str(APR_ARRAY_IDX(mem, 1, ci_memory).text, "[]");
    assert_str(APR_ARRAY_IDX(mem, 2, ci_memory).item_id, code->item_id);
    assert_non_null(pending);
    {
        json_object *owed = PARSE_RAW(p, pending);
        assert_int_equal(json_object_array_length(owed), 2);
        assert_function_output(idx(owed, 0), "call_s", c->model_output);
        assert_str(ci_json_str(idx(owed, 1), "call_id"), "call_p");
    }
}

/* A replayed reference to our shell ids: the call's stands for the
 * function call and its output, the output's for nothing more. */
typedef struct recall_map { const char *sh, *sho, *text; } recall_map;

static const char *recall(void *baton, const char *item_id, const char **container)
{
    recall_map *m = baton;
    if (!strcmp(item_id, m->sh)) {
        *container = "cntr_m";
        return m->text;
    }
    return !strcmp(item_id, m->sho) ? "[]" : NULL;
}

static void loop_memory_recalled(void **state)
{
    apr_pool_t *p = *state;
    recall_map m = { "sh_1", "sho_1", "[{\"type\":\"function_call\",\"call_id\":\"c1\","
                     "\"name\":\"shell\",\"arguments\":\"{}\"},{\"type\":"
                     "\"function_call_output\",\"call_id\":\"c1\",\"output\":\"[]\"}]" };
    ci_rewrite_opts o = { .function_name = "python", .recall = recall, .recall_baton = &m };
    ci_request *req = INTERCEPT_OPTS(p, "{'input':[{'type':'item_reference','id':'sh_1'},"
                                        "{'type':'item_reference','id':'sho_1'},"
                                        "{'type':'item_reference','id':'sh_other'}],"
                                        "'tools':[" SHELL_AUTO "]}", &o);
    assert_int_equal(json_object_array_length(ci_request_input(p, req)), 3);
    assert_function_call(idx(ci_request_input(p, req), 0), "c1", "shell", "{}");
    assert_function_output(idx(ci_request_input(p, req), 1), "c1", "[]");
    /* one we never returned may be a local shell's: the upstream's */
    assert_json(p, idx(ci_request_input(p, req), 2), "{'type':'item_reference','id':'sh_other'}");
    assert_str(req->context_container, "cntr_m");
}

/* ======================================================================== */
/* ci_relay: a streamed shell call                                          */
/* ======================================================================== */

/* Append the event E (its type from E) to TEXT as a server-sent event. */
static char *sse_append(apr_pool_t *p, char *text, json_object *e)
{
    return apr_pstrcat(p, text, "event: ", ci_json_str(e, "type"), "\ndata: ",
                       ci_json_text(e, NULL), "\n\n", NULL);
}

#define RELAY_ARGS "{\"commands\":[\"ls -l\",\"echo \\\"hi\\\" \\u00e9\"]," \
                   "\"timeout_ms\":null,\"max_output_length\":null}"
#define RELAY_FC(status, args) "{'type':'function_call','id':'fc_1','call_id':'call_s'," \
                               "'name':'shell','arguments':" args ",'status':'" status "'}"

/* One round: a shell call whose arguments come in deltas cut at CUTS,
 * then a message. */
static char *relay_stream(apr_pool_t *p, const apr_size_t *cuts, int ncuts)
{
    static const char *const head[] = {
        "{'type':'response.created','sequence_number':0,'response':{'id':'resp_1',"
        "'object':'response','status':'in_progress','model':'m','output':[]}}",
        "{'type':'response.in_progress','sequence_number':1,'response':{'id':'resp_1',"
        "'object':'response','status':'in_progress','model':'m','output':[]}}",
        "{'type':'response.output_item.added','sequence_number':2,'output_index':0,"
        "'item':" RELAY_FC("in_progress", "''") "}",
    };
    static const char *const message[] = {
        "{'type':'response.output_item.added','sequence_number':11,'output_index':1,"
        "'item':{'type':'message','id':'msg_1','role':'assistant','status':'in_progress',"
        "'content':[]}}",
        "{'type':'response.output_text.delta','sequence_number':12,'item_id':'msg_1',"
        "'output_index':1,'content_index':0,'delta':'Done.'}",
        "{'type':'response.output_item.done','sequence_number':13,'output_index':1,"
        "'item':" MESSAGE("msg_1", "Done.") "}",
    };
    const char *args = RELAY_ARGS;
    apr_size_t len = strlen(args), at = 0;
    char *text = "";
    json_object *done;
    unsigned k;
    int i;
    for (k = 0; k < sizeof(head) / sizeof(*head); k++)
        text = sse_append(p, text, PARSE(p, head[k]));
    for (i = 0; i <= ncuts; i++) {
        apr_size_t end = i < ncuts ? cuts[i] : len;
        json_object *e = PARSE(p, "{'type':'response.function_call_arguments.delta',"
                                  "'sequence_number':3,'item_id':'fc_1','output_index':0}");
        if (end == at)
            continue;
        json_object_object_add(e, "delta", json_object_new_string_len(args + at,
                                                                      (int)(end - at)));
        text = sse_append(p, text, e);
        at = end;
    }
    done = PARSE(p, "{'type':'response.function_call_arguments.done','sequence_number':9,"
                    "'item_id':'fc_1','output_index':0}");
    json_object_object_add(done, "arguments", json_object_new_string(args));
    text = sse_append(p, text, done);
    done = PARSE(p, "{'type':'response.output_item.done','sequence_number':10,"
                    "'output_index':0,'item':" RELAY_FC("completed", "''") "}");
    json_object_object_add(member(done, "item"), "arguments", json_object_new_string(args));
    text = sse_append(p, text, done);
    for (k = 0; k < sizeof(message) / sizeof(*message); k++)
        text = sse_append(p, text, PARSE(p, message[k]));
    done = PARSE(p, "{'type':'response.completed','sequence_number':14,'response':"
                    "{'id':'resp_1','object':'response','status':'completed','model':'m',"
                    "'output':[" RELAY_FC("completed", "''") "," MESSAGE("msg_1", "Done.")
                    "]}}");
    json_object_object_add(idx(member(member(done, "response"), "output"), 0), "arguments",
                           json_object_new_string(args));
    return sse_append(p, text, done);
}

/* The events SSE produced since the last take, parsed; each frame's event
 * name is its type, and sequence numbers go on from *SEQ. */
static apr_array_header_t *take_events(apr_pool_t *p, ci_sse *sse, int *seq)
{
    apr_size_t len;
    const char *at = ci_sse_take(sse, &len), *end = at + len;
    apr_array_header_t *evs = apr_array_make(p, 16, sizeof(json_object *));
    while (at < end) {
        const char *nl = memchr(at, '\n', (apr_size_t)(end - at)), *data, *stop;
        json_object *e;
        assert_non_null(nl);
        assert_memory_equal(at, "event: ", 7);
        data = nl + 1;
        assert_memory_equal(data, "data: ", 6);
        stop = memchr(data, '\n', (apr_size_t)(end - data));
        assert_non_null(stop);
        assert_int_equal(stop[1], '\n');
        e = parse_(p, apr_pstrmemdup(p, data + 6, (apr_size_t)(stop - data - 6)),
                   __FILE__, __LINE__);
        assert_int_equal(strlen(ci_json_str(e, "type")), (apr_size_t)(nl - at - 7));
        assert_memory_equal(ci_json_str(e, "type"), at + 7, nl - at - 7);
        assert_int_equal(json_object_get_int(member(e, "sequence_number")), *seq);
        (*seq)++;
        json_object_object_del(e, "sequence_number");
        *(json_object **)apr_array_push(evs) = e;
        at = stop + 2;
    }
    return evs;
}

static json_object *ev(const apr_array_header_t *evs, int i)
{
    assert_true(i < evs->nelts);
    return APR_ARRAY_IDX(evs, i, json_object *);
}

/* The command events of a relayed call at output 0, from event *AT on: per
 * command added, deltas that make it up, done. */
static void command_events_(apr_pool_t *p, const apr_array_header_t *evs, int *at,
                            const char *const *commands, int n, const char *file, int line)
{
    int k;
    for (k = 0; k < n; k++) {
        const char *built = "";
        json_object *e = ev(evs, (*at)++);
        json_eq_(p, e, apr_psprintf(p, "{'type':'response.shell_call_command.added',"
                                       "'output_index':0,'command_index':%d,'command':''}", k),
                 file, line);
        while (*at < evs->nelts &&
               !strcmp(ci_json_str(e = ev(evs, *at), "type"), "response.shell_call_command.delta")) {
            keys_are_(e, (const char *const[]){ "type", "output_index", "command_index",
                                                "delta", NULL }, file, line);
            _assert_int_equal(json_object_get_int(member(e, "output_index")), 0, file, line);
            _assert_int_equal(json_object_get_int(member(e, "command_index")), k, file, line);
            _assert_true(*ci_json_str(e, "delta") != '\0', "non-empty delta", file, line);
            built = apr_pstrcat(p, built, ci_json_str(e, "delta"), NULL);
            (*at)++;
        }
        str_eq_(built, commands[k], file, line);
        e = ev(evs, (*at)++);
        keys_are_(e, (const char *const[]){ "type", "output_index", "command_index",
                                            "command", NULL }, file, line);
        str_eq_(ci_json_str(e, "type"), "response.shell_call_command.done", file, line);
        _assert_int_equal(json_object_get_int(member(e, "output_index")), 0, file, line);
        _assert_int_equal(json_object_get_int(member(e, "command_index")), k, file, line);
        str_eq_(ci_json_str(e, "command"), commands[k], file, line);
    }
}
#define assert_command_events(p, evs, at, commands, n) \
    command_events_((p), (evs), (at), (commands), (n), __FILE__, __LINE__)

static const char *const relay_commands[] = { "ls -l", "echo \"hi\" \xc3\xa9" };

/* Relay STREAM fed in pieces of PIECE bytes (0: whole) with a loop of its
 * own; check the events of the round as it streams. Returns the sh_ id. */
static const char *relay_round(apr_pool_t *p, const char *stream, apr_size_t piece,
                               ci_loop **lp, ci_relay **rp, ci_sse **sp, int *seq)
{
    ci_loop *l = loop_for(p, "{'input':'go','stream':true,'tools':[" SHELL_AUTO "]}", 4, NULL);
    ci_sse *sse = ci_sse_create(p);
    ci_relay *r = ci_relay_create(p, l, sse, "cntr_test", 1 << 20, 8 << 20);
    apr_size_t len = strlen(stream), at = 0;
    ci_relay_status st = CI_RELAY_MORE;
    apr_array_header_t *evs;
    const char *sh_id;
    int i = 0;

    while (at < len) {
        apr_size_t n = piece && len - at > piece ? piece : len - at;
        assert_int_equal(st, CI_RELAY_MORE);
        st = ci_relay_feed(r, stream + at, n);
        at += n;
    }
    assert_int_equal(st, CI_RELAY_ROUND_DONE);
    *seq = 0;
    evs = take_events(p, sse, seq);
    assert_str(ci_json_str(ev(evs, i++), "type"), "response.created");
    assert_str(ci_json_str(ev(evs, i++), "type"), "response.in_progress");
    /* the call, announced at once as a shell_call in progress */
    assert_keys(ev(evs, i), "type", "output_index", "item");
    assert_str(ci_json_str(ev(evs, i), "type"), "response.output_item.added");
    assert_int_equal(json_object_get_int(member(ev(evs, i), "output_index")), 0);
    sh_id = apr_pstrdup(p, ci_json_str(member(ev(evs, i), "item"), "id"));
    assert_true(is_hex_id(sh_id, "sh_", 48));
    json_object_object_del(member(ev(evs, i), "item"), "id");
    assert_json(p, member(ev(evs, i++), "item"),
                "{'type':'shell_call','call_id':'call_s','action':{'commands':[],"
                "'timeout_ms':null,'max_output_length':null},'status':'in_progress',"
                "'environment':{'type':'container_reference','container_id':'cntr_test'}}");
    assert_command_events(p, evs, &i, relay_commands, 2);
    /* the message after it waits until the call has run */
    assert_int_equal(i, evs->nelts);
    *lp = l;
    *rp = r;
    *sp = sse;
    return sh_id;
}

static void relay_shell_call(void **state)
{
    apr_pool_t *p = *state;
    const char *stream = relay_stream(p, NULL, 0), *sh_id;
    ci_loop *l;
    ci_relay *r;
    ci_sse *sse;
    ci_error err;
    const apr_array_header_t *items;
    apr_array_header_t *evs;
    ci_exec_result *res = shell_result(p, CI_EXEC_COMPLETED, NULL);
    ci_shell_action act;
    ci_call *c;
    int seq, i = 0;

    sh_id = relay_round(p, stream, 0, &l, &r, &sse, &seq);
    memset(&err, 0, sizeof(err));
    assert_int_equal(ci_loop_take_response(l, ci_relay_response(r), &err), 0);
    items = ci_loop_round_items(l);
    assert_int_equal(items->nelts, 2);
    c = APR_ARRAY_IDX(items, 0, ci_round_item).call;
    assert_non_null(c);
    assert_str(c->item_id, sh_id);
    assert_int_equal(c->output_index, 0);
    assert_int_equal(c->output_item_index, 1);
    assert_int_equal(APR_ARRAY_IDX(items, 1, ci_round_item).output_index, 2);

    /* as the driver plays a relayed round */
    ci_sse_release(sse, 0);
    ci_sse_call_ready(sse, c);
    assert_true(ci_loop_may_execute(l, c));
    ci_loop_shell_bounds(l, c, apr_time_from_sec(30), 1000, &act);
    add_command(res, "total 0\n", "", 0, 0);
    add_command(res, "\"hi\" \xc3\xa9\n", "", 0, 0);
    ci_loop_record(l, c, res);
    ci_sse_call_done(sse, c);
    ci_sse_release(sse, 2);
    ci_sse_release(sse, INT_MAX);
    evs = take_events(p, sse, &seq);

    /* the call is done, with its commands */
    json_object_object_del(member(ev(evs, i), "item"), "id");
    assert_json(p, ev(evs, i++), "{'type':'response.output_item.done','output_index':0,"
                                 "'item':{'type':'shell_call','call_id':'call_s','action':"
                                 "{'commands':['ls -l','echo \\'hi\\' \\u00e9'],"
                                 "'timeout_ms':null,'max_output_length':null},"
                                 "'status':'completed','environment':{'type':"
                                 "'container_reference','container_id':'cntr_test'}}}");
    /* then its output item, at the next index */
    assert_str(ci_json_str(member(ev(evs, i), "item"), "id"), c->output_item_id);
    json_object_object_del(member(ev(evs, i), "item"), "id");
    assert_json(p, ev(evs, i++), "{'type':'response.output_item.added','output_index':1,"
                                 "'item':{'type':'shell_call_output','call_id':'call_s',"
                                 "'output':[],'status':'in_progress','max_output_length':null}}");
    assert_json(p, ev(evs, i++), apr_psprintf(p, "{'type':'response.shell_call_output_content.delta',"
                                 "'item_id':'%s','output_index':1,'command_index':0,"
                                 "'delta':{'stdout':'total 0\\n','stderr':''}}",
                                 c->output_item_id));
    assert_json(p, ev(evs, i++), apr_psprintf(p, "{'type':'response.shell_call_output_content.done',"
                                 "'item_id':'%s','output_index':1,'command_index':0,"
                                 "'output':[{'stdout':'total 0\\n','stderr':'','outcome':"
                                 "{'type':'exit','exit_code':0}}]}", c->output_item_id));
    assert_json(p, ev(evs, i++), apr_psprintf(p, "{'type':'response.shell_call_output_content.delta',"
                                 "'item_id':'%s','output_index':1,'command_index':1,"
                                 "'delta':{'stdout':'\\'hi\\' \\u00e9\\n','stderr':''}}",
                                 c->output_item_id));
    assert_json(p, ev(evs, i++), apr_psprintf(p, "{'type':'response.shell_call_output_content.done',"
                                 "'item_id':'%s','output_index':1,'command_index':1,"
                                 "'output':[{'stdout':'\\'hi\\' \\u00e9\\n','stderr':'',"
                                 "'outcome':{'type':'exit','exit_code':0}}]}",
                                 c->output_item_id));
    json_object_object_del(member(ev(evs, i), "item"), "id");
    assert_json(p, ev(evs, i++), "{'type':'response.output_item.done','output_index':1,"
                                 "'item':{'type':'shell_call_output','call_id':'call_s',"
                                 "'output':[{'stdout':'total 0\\n','stderr':'','outcome':"
                                 "{'type':'exit','exit_code':0}},{'stdout':"
                                 "'\\'hi\\' \\u00e9\\n','stderr':'','outcome':{'type':'exit',"
                                 "'exit_code':0}}],'status':'completed',"
                                 "'max_output_length':null}}");
    /* the message, held back until now, one index further */
    assert_json(p, ev(evs, i++), "{'type':'response.output_item.added','output_index':2,"
                                 "'item':{'type':'message','id':'msg_1','role':'assistant',"
                                 "'status':'in_progress','content':[]}}");
    assert_json(p, ev(evs, i++), "{'type':'response.output_text.delta','item_id':'msg_1',"
                                 "'output_index':2,'content_index':0,'delta':'Done.'}");
    assert_json(p, ev(evs, i++), "{'type':'response.output_item.done','output_index':2,"
                                 "'item':" MESSAGE("msg_1", "Done.") "}");
    assert_int_equal(i, evs->nelts);
    assert_int_equal(ci_sse_events(sse), seq);
}

/* The arguments' deltas cut every way, the stream fed in pieces: the same
 * command events (their deltas differ, their concatenation does not). */
static void relay_shell_call_every_cut(void **state)
{
    apr_pool_t *p = *state;
    apr_size_t len = strlen(RELAY_ARGS), a, *bytes;
    ci_loop *l;
    ci_relay *r;
    ci_sse *sse;
    int seq;
    for (a = 0; a <= len; a++) {
        apr_pool_t *sub;
        apr_pool_create(&sub, p);
        relay_round(sub, relay_stream(sub, &a, 1), a % 7 ? a : 0, &l, &r, &sse, &seq);
        apr_pool_destroy(sub);
    }
    bytes = apr_palloc(p, len * sizeof(*bytes));
    for (a = 0; a + 1 < len; a++)
        bytes[a] = a + 1;
    relay_round(p, relay_stream(p, bytes, (int)len - 1), 1, &l, &r, &sse, &seq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(rewrite_hosted_shell),
        TEST(rewrite_shell_not_ours),
        TEST(rewrite_both_tools),
        TEST(rewrite_shell_function_name),
        TEST(rewrite_environment_settings),
        TEST(reject_shell_tools),
        TEST(rewrite_shell_tool_choice),
        TEST(rewrite_shell_history),
        TEST(reject_shell_history),
        TEST(array_every_split),
        TEST(array_feed_some_stops),
        TEST(array_errors),
        TEST(array_finish),
        TEST(shell_parse),
        TEST(shell_output_cut),
        TEST(shell_output_outcomes),
        TEST(shell_items),
        TEST(shell_bounds),
        TEST(utf8_prefix),
        TEST(loop_shell_round),
        TEST(loop_shell_refused),
        TEST(loop_memory_recalled),
        TEST(relay_shell_call),
        TEST(relay_shell_call_every_cut),
    };
    apr_initialize();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
