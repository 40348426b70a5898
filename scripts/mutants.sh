#!/bin/sh
# Mutants: does the suite notice when the module is wrong? Each mutant below
# is a one-line change to the module. The script builds a scratch copy of the
# tracked files once (configured and built like scripts/build.sh), then for
# each mutant: copies that tree (so only what the mutant changes is rebuilt),
# applies the change, rebuilds with make -j2, and runs only the tests listed
# for it -- pytest tests against the mutant's module (CI_MODULE) and its
# tree (CI_TREE: test_e2b_unit.py builds test/unit/test_e2b there), "unit:X"
# the mutant's own test/unit/X. A mutant must make one of its tests fail.
#
# The run fails when a mutant survives (its tests all pass), when one no
# longer applies (its original text is not found exactly once: the code
# moved on, update the list) or does not compile (that is no kill), when
# a listed test fails on the unmutated tree (a kill would mean nothing), and
# when tests leave what they started running (HARNESS: killed, and named).
# docs/TESTING.md says what each mutant breaks and which test kills it.
#
# Usage: scripts/mutants.sh [NAME...]     (default: every mutant)
# Environment: MUTANTS_DIR (scratch directory, default a new temporary one,
# removed afterwards), MUTANTS_KEEP=1 keeps it.
set -e
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PYTHON'
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# name, file, the original text (found exactly once), its replacement,
# what it breaks, the tests that must catch it.
MUTANTS = [
    # ---- JSON (core/ci_json.c)
    ("tokener-not-reset", "mod_code_interpreter/core/ci_json.c",
     "    else\n        json_tokener_reset(tok);",
     "    else\n        (void)tok;",
     "a parse that stopped part way leaves its state to the thread's next parse",
     ["unit:test_core"]),
    # ---- the request rewrite (core/ci_request.c)
    ("request-replayed-output-lost", "mod_code_interpreter/core/ci_request.c",
     "if (!outputs || !json_object_is_type(outputs, json_type_array))",
     "if (outputs || !json_object_is_type(outputs, json_type_array))",
     "a replayed code_interpreter_call reaches the model without its logs",
     ["test/test_loop.py::test_replayed_code_interpreter_calls_translated"]),
    ("request-forced-choice-kept", "mod_code_interpreter/core/ci_request.c",
     "    req->forced_choice = 1;\n    if ((fname = our_choice(req, choice)))",
     "    req->forced_choice = 0;\n    if ((fname = our_choice(req, choice)))",
     "a tool_choice forcing the tool stays forced on follow-ups (the model can never answer)",
     ["test/test_loop.py::test_tools_and_tool_choice_echoed"]),
    ("request-max-tool-calls-zero", "mod_code_interpreter/core/ci_request.c",
     "if (n < 1 || n > 1000000) {",
     "if (n < 0 || n > 1000000) {",
     "max_tool_calls 0 is accepted instead of refused",
     ["test/test_rejections.py::test_invalid_fields"]),
    # ---- the loop (core/ci_loop.c)
    ("loop-final-round-keeps-tools", "mod_code_interpreter/core/ci_loop.c",
     'return json_object_new_string("none");',
     'return json_object_new_string("auto");',
     "the last follow-up at the loop cap lets the model call the tool again",
     ["test/test_loop.py::test_loop_cap_ends_with_tool_choice_none"]),
    ("loop-max-tool-calls-off-by-one", "mod_code_interpreter/core/ci_loop.c",
     "if (l->req->max_tool_calls >= 0 && l->executions >= l->req->max_tool_calls) {",
     "if (l->req->max_tool_calls >= 0 && l->executions > l->req->max_tool_calls) {",
     "one execution more than max_tool_calls allows",
     ["test/test_loop.py::test_max_tool_calls_limits_executions"]),
    ("loop-failure-not-in-outputs", "mod_code_interpreter/core/ci_loop.c",
     "outputs_of(res, ci_exec_failed(res) ? res->failure : NULL));",
     "outputs_of(res, NULL));",
     "a call that timed out shows no reason in its outputs",
     ["test/test_sandbox_local.py::test_timeout_keeps_output_printed_before_it"]),
    ("loop-failed-status", "mod_code_interpreter/core/ci_loop.c",
     'json_object_object_add(c->item, "status", json_object_new_string("completed"));',
     'json_object_object_add(c->item, "status", json_object_new_string('
     'ci_exec_failed(res) ? "failed" : "completed"));',
     "a failed call is returned \"failed\": the Agents SDK's next turn throws",
     ["test/test_agents_sdk.py::test_a_failed_call_can_be_replayed"]),
    ("loop-client-call-continues", "mod_code_interpreter/core/ci_loop.c",
     "if (l->round_calls->nelts == 0 || l->client_calls || l->final_sent)",
     "if (l->round_calls->nelts == 0 || l->final_sent)",
     "a round that also calls a client function does not end the loop",
     ["test/test_loop.py::test_client_function_in_same_round_ends_loop"]),
    # ---- the output filter and the loop driver (httpd/)
    ("output-buffers-upstream-errors", "mod_code_interpreter/httpd/ci_output.c",
     "if (r->status != HTTP_OK || r->header_only)",
     "if (r->status >= 500 || r->header_only)",
     "an upstream 4xx answer to round 1 is reworked instead of passed through",
     ["test/test_rejections.py::test_upstream_error_on_first_round_passed_through"]),
    ("output-no-size-bound", "mod_code_interpreter/httpd/ci_output.c",
     "        ctx->over = 1;",
     "        ctx->over = 0;",
     "a first answer past CodeInterpreterMaxBody is handled as if it were whole",
     ["test/test_rejections.py::test_upstream_answer_too_large"]),
    ("driver-drops-upstream-message", "mod_code_interpreter/httpd/ci_driver.c",
     'const char *msg = ci_json_str(e, "message");',
     "const char *msg = NULL;",
     "the mid-stream error event no longer quotes the upstream's message",
     ["test/test_stream.py::test_followup_failure_ends_with_error_and_failed"]),
    ("driver-drops-retry-after", "mod_code_interpreter/httpd/ci_driver.c",
     'apr_table_setn(dv->r->headers_out, "Retry-After", dv->error_answer.retry_after);',
     "(void)dv->error_answer.retry_after;",
     "an upstream's Retry-After on a follow-up error is not relayed",
     ["test/test_rejections.py::test_upstream_error_on_followup_passed_through"]),
    # ---- the local sandbox's arguments and process (sandbox/sandbox_local.c)
    ("bwrap-shares-the-network", "mod_code_interpreter/sandbox/sandbox_local.c",
     'push(a, "--unshare-all");',
     'push(a, "--unshare-pid");',
     "the sandbox shares the host's network (and ipc, uts, cgroup)",
     ["test/test_sandbox_local.py::test_no_network"]),
    ("bwrap-allows-nested-namespaces", "mod_code_interpreter/sandbox/sandbox_local.c",
     'push(a, "--disable-userns");',
     'push(a, "--new-session");',
     "code in the sandbox may create user namespaces of its own (and so the others)",
     ["test/test_containment.py::test_nested_namespaces_are_refused"]),
    ("bwrap-root-writable", "mod_code_interpreter/sandbox/sandbox_local.c",
     'push3(a, "--remount-ro", "/", NULL);',
     'push3(a, "--remount-ro", "/usr", NULL);',
     "the sandbox's root (outside /mnt/data and /tmp) is writable",
     ["test/test_containment.py::test_writes_outside_the_sandbox_are_refused"]),
    ("bwrap-binds-all-of-etc", "mod_code_interpreter/sandbox/sandbox_local.c",
     'push3(a, "--ro-bind-try", "/etc/localtime", "/etc/localtime");',
     'push3(a, "--ro-bind-try", "/etc", "/etc");',
     "the sandbox sees all of /etc (/etc/apache2 holds the server's secrets)",
     ["test/test_sandbox_local.py::test_host_files_not_visible"]),
    ("local-no-memory-limit", "mod_code_interpreter/sandbox/sandbox_local.c",
     "lim->address_space = CI_LOCAL(def)->memory;",
     "lim->address_space = 0;",
     "memory= is not applied",
     ["test/test_containment.py::test_large_allocations_fail_with_memory_error"]),
    ("supervisor-keeps-a-dead-childs-sandboxes", "mod_code_interpreter/supervisor/ci_supervisor.c",
     "        if (b->owner == c) {\n            sup_box_free(b);",
     "        if (0 && b->owner == c) {\n            sup_box_free(b);",
     "a child that dies leaves its sandboxes running under the supervisor, unowned",
     ["test/test_supervisor.py::test_child_killed_mid_execution_leaves_no_sandbox"]),
    ("output-line-uncapped", "mod_code_interpreter/core/ci_ndjson.c",
     "    if (want > nd->line_cap) {\n        nd->line_over = 1;",
     "    if (0 && want > nd->line_cap) {\n        nd->line_over = 1;",
     "a line of the interpreter's output without a newline grows its reader up to the hard cap",
     ["unit:test_core", "test/test_supervisor.py::test_a_sandboxs_output_line_is_bounded_and_freed"]),
    ("killed-sandbox-keeps-its-reader", "mod_code_interpreter/supervisor/ci_supervisor_boxes.c",
     "    sup_outq_free(&b->input);\n    drop_reader(b);",
     "    sup_outq_free(&b->input);\n    (void)drop_reader;",
     "a killed sandbox's output reader (a line half read) is kept until its next run",
     ["test/test_supervisor.py::test_a_sandboxs_output_line_is_bounded_and_freed"]),
    ("sandbox-threads-not-idled", "mod_code_interpreter/supervisor/ci_supervisor_procs.c",
     "        if (tid <= 0 || tid == keep || sched_getscheduler(tid) == SCHED_IDLE)",
     "        if (1 || tid == keep || sched_getscheduler(tid) == SCHED_IDLE)",
     "what a container's code leaves running keeps its priority: busy processes take CPU from other owners' executions",
     ["test/test_supervisor.py::test_what_a_container_leaves_running_is_at_sched_idle"]),
    ("sandbox-outside-its-cgroup", "mod_code_interpreter/core/ci_workers.c",
     "    if (req->limits->join_cgroup && write(req->limits->cgroup_fd, \"0\", 1) != 1)",
     "    if (0 && req->limits->join_cgroup && write(req->limits->cgroup_fd, \"0\", 1) != 1)",
     "a sandbox runs in the supervisor's cgroup: none of its cgroup's bounds hold it",
     ["test/test_cgroup.py::test_each_sandbox_is_a_cgroup_of_its_own_killed_whole_at_its_end"]),
    ("sandbox-cgroup-outlives-it", "mod_code_interpreter/supervisor/ci_supervisor_boxes.c",
     "    sup_cgroup_end(b);              /* what outlived bubblewrap's init too */",
     "    (void)sup_cgroup_end;",
     "an ended sandbox's cgroup stays, with whatever still runs in it",
     ["test/test_cgroup.py::test_each_sandbox_is_a_cgroup_of_its_own_killed_whole_at_its_end"]),
    ("cgroup-leftovers-kept", "mod_code_interpreter/httpd/ci_supervisor_process.c",
     "        ci_cgroup_sweep(p, d, CI_CGROUP_SANDBOX_PREFIX, NULL, NULL);",
     "        (void)ci_cgroup_sweep;",
     "what an earlier supervisor's sandboxes left running in their cgroups runs on, unowned",
     ["test/test_cgroup.py::test_a_supervisor_starting_kills_what_an_earlier_one_left"]),
    ("sandbox-sessions-allowed", "mod_code_interpreter/core/ci_workers.c",
     "        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)",
     "        (0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0))",
     "a sandbox's process may start a session, an autogroup of its own that SCHED_IDLE does not hold",
     ["test/test_supervisor.py::test_what_a_container_leaves_running_is_at_sched_idle"]),
    ("local-no-disk-limit", "mod_code_interpreter/sandbox/sandbox_local.c",
     "lim->file_size = CI_LOCAL(def)->disk;",
     "lim->file_size = 0;",
     "disk= does not bound a file written by the sandbox",
     ["test/test_containment.py::test_disk_is_capped"]),
    # ---- the request's sandbox (httpd/ci_session.c)
    ("session-destroy-only-logs", "mod_code_interpreter/httpd/ci_session.c",
     '    ci_box_destroy(s->box, "request ended");',
     '    box_event(s, CI_BOX_DESTROYED, NULL, "request ended");',
     "the request's sandbox is logged as destroyed but left running",
     ["test/test_basic.py", "test/test_e2b.py::test_each_request_gets_its_own_sandbox"]),
    ("warm-pool-one-short", "mod_code_interpreter/supervisor/ci_supervisor_warm.c",
     "        for (; n < w->count; n++) {",
     "        for (; n < w->count - 1; n++) {",
     "the supervisor keeps one warm sandbox fewer than warm= asks (and never refills the last)",
     ["test/test_warm.py::test_warm_sandbox_serves_one_request_only"]),
    ("session-slot-not-released", "mod_code_interpreter/httpd/ci_session.c",
     "    ci_registry_release(s->slot);\n    session_pool_destroy(s->root);",
     "    (void)s->slot;\n    session_pool_destroy(s->root);",
     "a request's registry slot is never given back (the cap fills up)",
     ["test/test_registry.py::test_cap_holds_for_requests_without_an_owner"]),
    # ---- the registry (httpd/ci_registry.c, httpd/ci_orphans.c)
    ("registry-cap-off-by-one", "mod_code_interpreter/httpd/ci_registry.c",
     "if (live >= ci_reg->max_live)",
     "if (live > ci_reg->max_live)",
     "CodeInterpreterMaxSandboxes allows one sandbox more",
     ["test/test_registry.py::test_cap_holds_for_requests_without_an_owner"]),
    ("registry-dead-child-not-reaped", "mod_code_interpreter/httpd/ci_orphans.c",
     "if (sl->remote_id[0] &&",
     "if (0 && sl->remote_id[0] &&",
     "the remote sandbox of a child that died is never deleted",
     ["test/test_reload.py::test_killed_child_sandbox_is_deleted"]),
    # ---- the E2B provider (sandbox/sandbox_e2b.c, e2b_control.c, e2b_http.c)
    ("e2b-data-host-plain-http", "mod_code_interpreter/sandbox/sandbox_e2b.c",
     'apr_pstrcat(sb->p, "https://" E2B_PORT "-", sb->id, ".",',
     'apr_pstrcat(sb->p, "http://" E2B_PORT "-", sb->id, ".",',
     "the default data plane is reached over plain http",
     ["test/test_e2b_unit.py -k test_default_data_host"]),
    ("e2b-delete-404-retried", "mod_code_interpreter/sandbox/sandbox_e2b.c",
     "(status == 204 || status == 404 || status == 200)",
     "(status == 204 || status == 200)",
     "a delete answered 404 (already gone) is retried and logged as failed",
     ["test/test_e2b_unit.py -k test_delete_404_not_retried"]),
    ("e2b-expiry-not-noticed", "mod_code_interpreter/sandbox/e2b_control.c",
     "if (rc == CURLE_OK && status == 404) {",
     "if (rc == CURLE_OK && status == 410) {",
     "an expired sandbox is not recognised before the execution",
     ["test/test_e2b.py::test_sandbox_expired_between_calls"]),
    ("e2b-create-not-secure", "mod_code_interpreter/sandbox/sandbox_e2b.c",
     'json_object_object_add(body, "secure", json_object_new_boolean(1));',
     'json_object_object_add(body, "secure", json_object_new_boolean(0));',
     "sandboxes are created without secured (token-protected) data planes",
     ["test/test_e2b.py::test_create_body"]),
    ("e2b-lifetime-without-margin", "mod_code_interpreter/sandbox/e2b_control.c",
     "#define LIFETIME_MARGIN_S 30",
     "#define LIFETIME_MARGIN_S 0",
     "a sandbox whose lifetime= is short may expire during an execution",
     ["test/test_e2b_unit.py -k test_create_body_short_lifetime"]),
    ("e2b-any-domain-accepted", "mod_code_interpreter/sandbox/sandbox_e2b.c",
     "else if (domain && *domain && !valid_domain(domain))",
     "else if (0)",
     "a domain in the create answer that is no host name goes into the data-plane URL",
     ["test/test_e2b_unit.py -k test_create_unusable_domain"]),
    ("e2b-key-on-the-data-plane", "mod_code_interpreter/sandbox/e2b_http.c",
     'add_header(hdrs, "X-Access-Token", sb->envd_token) ||',
     'add_header(hdrs, "X-Access-Token", sb->api_key) ||',
     "the API key is sent to the sandbox instead of its access token",
     ["test/test_e2b_unit.py -k test_data_plane_headers"]),
    # ---- containers (core/ci_directory.c, supervisor/ci_supervisor_runs.c)
    ("directory-owners-not-compared", "mod_code_interpreter/core/ci_directory.c",
     "return r && ci_secret_equal(r->c.owner, owner) ? r : NULL;",
     "return r;",
     "any caller reaches another's container by its id",
     ["test/test_containers.py::test_unknown_and_foreign_ids_read_the_same"]),
    ("container-timeout-kills-at-once", "mod_code_interpreter/supervisor/ci_supervisor_runs.c",
     "            interrupt_kernel(b, CI_EXEC_TIMED_OUT);",
     "            sup_stop_run(b, CI_EXEC_TIMED_OUT);",
     "a container's timed-out run is killed, not interrupted: its state is lost",
     ["test/test_containers.py::test_timeout_interrupts_and_the_state_lives_on"]),
    # ---- container files (sandbox/ci_kernel.py, httpd/ci_containers_api.c)
    ("files-kernel-follows-symlinks", "mod_code_interpreter/sandbox/ci_kernel.py",
     "fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,",
     "fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC,",
     "a download follows a symlink the code made (swapped in after the listing)",
     ["test/test_kernel_files.py::test_symlinks_and_fifos_are_not_followed"]),
    ("files-kernel-lists-symlinks", "mod_code_interpreter/sandbox/ci_kernel.py",
     "        try:\n            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)",
     "        try:\n            st = os.stat(name, dir_fd=dfd, follow_symlinks=True)",
     "a symlink is listed as a container file",
     ["test/test_container_files.py::test_symlinks_and_fifos_are_never_served"]),
    ("files-list-owner-unchecked", "mod_code_interpreter/core/ci_directory_ops.c",
     '    return ci_directory_get(o->d, id, o->owner, c);',
     '    return (*c = ci_directory_find(o->d, id)) ? CI_DIR_OK : CI_DIR_NOT_FOUND;',
     "a container is found whoever owns it: another caller's container's files are listed",
     ["test/test_container_files.py::test_foreign_and_unknown_read_as_not_found"]),
    ("files-fileop-jumps-the-queue", "mod_code_interpreter/supervisor/ci_supervisor_runs.c",
     "    else if (!(b = sup_container_box(id)) || b->state == BOX_DEAD)",
     "    else if (!(b = sup_container_box(id)) || b->state != BOX_IDLE)",
     "a file operation does not wait for the run in progress (it finds no files)",
     ["test/test_container_files.py::test_a_file_operation_waits_for_the_run_in_progress"]),
    ("files-upload-commits-when-abandoned", "mod_code_interpreter/supervisor/ci_supervisor_runs.c",
     "        sup_end_upload(b, 0);         /* nothing half-written */",
     "        sup_end_upload(b, 1);",
     "a child that dies mid-upload leaves its partial file in the container",
     ["test/test_supervisor.py::test_child_killed_mid_upload_leaves_nothing"]),
    ("files-upload-sender-commits-anyway", "mod_code_interpreter/sandbox/ci_supervisor_client.c",
     "    commit = up->outcome == CI_UPLOAD_SENT;",
     "    commit = 1;",
     "a client that leaves mid-upload leaves its partial file in the container",
     ["test/test_container_uploads.py::test_a_client_leaving_mid_upload_leaves_nothing"]),
    ("files-max-bytes-not-sent", "mod_code_interpreter/sandbox/files_local.c",
     '    add_limit(op, "max_bytes", limits->max_bytes);',
     "",
     "max_bytes= is not enforced on uploads",
     ["test/test_container_uploads.py::test_the_limits_each_refused_and_nothing_half_written"]),
    ("files-api-without-credentials", "mod_code_interpreter/httpd/ci_files_in.c",
     '    static const char *const passed[] = { "Authorization", "OpenAI-Organization",',
     '    static const char *const passed[] = { "X-Not-Authorization", "OpenAI-Organization",',
     "the upstream's Files API is asked without the caller's credentials",
     ["test/test_container_uploads.py::test_upload_by_file_id_from_the_upstream_files_api"]),
    ("held-run-marked-busy", "mod_code_interpreter/httpd/ci_session.c",
     "    return s->container && !(held && !strcmp(held, s->container_id));",
     "    return s->container && held;",
     "a run in a container its request holds asks the directory twice more",
     ["test/test_shared_directory.py::test_a_chained_turn_asks_the_directory_twice"]),
    ("chained-turn-asks-twice", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (!(ans = named == chained && found ? found : lookup(r, st->owner, named, 1)))",
     "    if (!(ans = lookup(r, st->owner, named, 1)))",
     "a chained turn looks its container up again after the response's answer had it",
     ["test/test_shared_directory.py::test_a_chained_turn_asks_the_directory_twice"]),
    ("first-call-asks-again", "mod_code_interpreter/httpd/ci_containers.c",
     "        if (!(ans = found_at_resolve(r, st)) &&",
     "        if (!(ans = (found_at_resolve(r, st), NULL)) &&",
     "a turn's first call asks the directory for the container its resolve had just found",
     ["test/test_containers.py::test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call"]),
    ("attach-refusal-not-gone", "mod_code_interpreter/sandbox/sandbox_local.c",
     "? APR_NOTFOUND : APR_EGENERAL;",
     "? APR_EGENERAL : APR_EGENERAL;",
     "a container deleted while its turn waited fails the whole request (503) instead "
     "of answering the call",
     ["test/test_containers.py::test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call"]),
    ("attach-ignores-directory", "mod_code_interpreter/supervisor/ci_supervisor_containers.c",
     "    else if (!(rec = ci_directory_find(sup_state.dir, id)) ||\n             rec->status != CI_CNTR_RUNNING)",
     "    else if (!(rec = ci_directory_find(sup_state.dir, id)) && 0)",
     "the supervisor starts a sandbox for a container deleted since the request found it",
     ["test/test_containers.py::test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call"]),
    ("redis-directory-as-script", "mod_code_interpreter/core/ci_redis.c",
     "    k->functions = ends_as_script();\n    return k->functions ? NULL : load_script(p, k);",
     "    return load_script(p, k);",
     "the Redis directory runs as a script, its definitions made again at every call",
     ["test/test_redisdir_unit.py::test_redis_directory[test_function_or_script]"]),
    ("redis-memo-ttls-never-raised", "mod_code_interpreter/core/ci_directory.lua",
     "  if floor < ms then\n",
     "  if false then\n",
     "a container's response ids and items expire in Redis before its record",
     ["test/test_redisdir_unit.py::test_redis_directory[test_memo_ttls_follow_the_record]"]),
    ("redis-record-read-twice", "mod_code_interpreter/core/ci_directory.lua",
     "  if known ~= nil then return known or nil end",
     "  if false then return known or nil end",
     "every question reads a record from Redis again each time it needs it",
     ["test/test_redisdir_unit.py::test_redis_directory[test_a_chained_turn_costs_few_commands]"]),
    ("redis-index-ttl-raised-every-use", "mod_code_interpreter/core/ci_directory.lua",
     "redis.call('PEXPIRE', key, num(ms + SLACK_MS))",
     "redis.call('PEXPIRE', key, num(ms))",
     "every use of a container raises its owner's and node's index TTLs again",
     ["test/test_redisdir_unit.py::test_redis_directory[test_a_chained_turn_costs_few_commands]"]),
    ("redis-pending-always-asked", "mod_code_interpreter/core/ci_directory.lua",
     "  local pending = m.p ~= false and memo_of(",
     "  local pending = memo_of(",
     "a chained turn asks Redis for pending output its response never left",
     ["test/test_redisdir_unit.py::test_redis_directory[test_a_chained_turn_costs_few_commands]"]),
    ("finish-waited-before-answer", "mod_code_interpreter/httpd/ci_driver.c",
     "    rv = send_body(dv, 200, \"application/json\", body, len);\n"
     "    ci_containers_finished(dv->r, finish);",
     "    ci_containers_finished(dv->r, finish);\n"
     "    rv = send_body(dv, 200, \"application/json\", body, len);",
     "a turn's answer waits for the directory to record it",
     ["test/test_containers.py::test_the_answer_leaves_before_the_directory_records_it"]),
    ("answer-not-flushed", "mod_code_interpreter/httpd/ci_driver.c",
     "    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_flush_create(r->connection->bucket_alloc));\n",
     "",
     "the core holds a turn's answer until the request ends, after the directory's answer",
     ["test/test_containers.py::test_the_answer_leaves_before_the_directory_records_it"]),
    ("lookup-miss-not-drained", "mod_code_interpreter/supervisor/ci_supervisor_containers.c",
     "    if (missed) {",
     "    if (0 && missed) {",
     "a chained turn's lookup overtakes the finish its predecessor sent before answering",
     ["unit:test_supervisor_order"]),
    ("nested-lookup-answered-at-once", "mod_code_interpreter/supervisor/ci_supervisor_containers.c",
     "    if (missed) {",
     "    static int nested;\n    if (missed && !nested++) {",
     "a lookup met while the supervisor reads for another one that missed is answered "
     "not_found at once: under load, a chained turn loses its container",
     ["unit:test_supervisor_order"]),
    ("early-hold-kept-when-refused", "mod_code_interpreter/httpd/ci_containers.c",
     "        let_go_early(e->r, p, e->owner, ans);",
     "        (void)ans;",
     "a request refused after its chain's early question keeps that container held "
     "(not evicted) for the hold's length",
     ["test/test_containers.py::test_a_refused_chained_turn_holds_nothing"]),
    ("early-hold-kept-for-another", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (early && !goes_on)\n        let_go_early(r, r->pool, st->owner, ans);",
     "    (void)goes_on;",
     "a chained turn that names another container keeps the chain's container held",
     ["test/test_containers.py::test_a_chained_turn_in_another_container_holds_only_its_own"]),
    ("early-chain-never-asked", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (!b->owner || !ci_dirclient_sends_ahead(r->server) ||",
     "    if (1 || !b->owner || !ci_dirclient_sends_ahead(r->server) ||",
     "a chained turn's directory question waits for the parse",
     ["test/test_containers.py::test_a_chained_turns_question_goes_out_before_the_parse"]),
    ("evicted-e2b-sandbox-left", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (ans)\n        ci_dirclient_end(r->server, r->pool, evicted);",
     "    (void)evicted;",
     "an evicted container's E2B sandbox is left to E2B's own timeout",
     ["test/test_e2b_containers.py::test_an_evicted_containers_sandbox_is_deleted_at_once"]),
    ("shared-gone-not-ended", "mod_code_interpreter/httpd/ci_dirclient.c",
     "    if (ans)\n        ci_dirclient_end(s, p, gone);\n    return ans;",
     "    return ans;",
     "with a shared directory, a deleted container's E2B sandbox is left running",
     ["test/test_shared_directory.py::test_e2b_conversation_across_nodes"]),
    # ---- containers of a removed tool (httpd/ci_dirclient*.c, httpd/ci_reap_creds.c)
    ("removed-tool-e2b-left", "mod_code_interpreter/httpd/ci_dirclient_supervisor.c",
     "    return ci_registry_remote_creds();",
     "    return 0;",
     "an expired E2B container's sandbox is left to E2B's own timeout (no child claims it)",
     ["test/test_removed_tool.py::test_a_removed_tools_containers_end_with_their_idle_time"]),
    ("removed-tool-cred-unknown", "mod_code_interpreter/httpd/ci_reap_creds.c",
     "    cred *c = digest ? ci_reg_cred_find(digest) : NULL;",
     "    cred *c = NULL;",
     "a removed tool's containers cannot be deleted with the credentials they were made with",
     ["test/test_removed_tool.py::test_a_removed_tools_containers_end_with_their_idle_time"]),
    ("removed-tool-chain-hold-kept", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (st->container_held && strcmp(st->container_held, id))\n"
     "        let_go_now(r, r->pool, st);\n    else if (!st->container_held)",
     "    if (!st->container_held)",
     "a container made just before the reload that removed its tool stays held by the "
     "next turn (moved to a new container) for its whole lease: its E2B sandbox outlives "
     "its idle time",
     ["test/test_removed_tool.py::"
      "test_a_container_made_across_the_reload_that_removed_its_tool_is_deleted"]),
    ("removed-tool-container-used", "mod_code_interpreter/httpd/ci_containers.c",
     "        if (!still_served(r, ans)) {",
     "        if (0) {",
     "a turn on a removed tool's container gets a new one without being told",
     ["test/test_removed_tool.py::test_a_turn_on_a_removed_tools_container_is_told"]),
    # ---- many conversations of one key (core/ci_directory.c)
    ("eviction-ignores-grace", "mod_code_interpreter/core/ci_directory.c",
     "    return c->held_until > now || c->last_active_at + d->lim.grace > now ||",
     "    return c->held_until > now ||",
     "a container used a moment ago is evicted for a new conversation: its state is lost",
     ["test/test_many_conversations.py::test_128_conversations_on_a_64_container_server[local]"]),
    ("busy-never-asked", "mod_code_interpreter/core/ci_directory.c",
     "    return d->busy && d->busy(d->busy_baton, c);",
     "    return 0;",
     "a container running code is expired, evicted or dropped from under its run",
     ["unit:test_directory_ops", "unit:test_directory"]),
    ("reserve-not-kept", "mod_code_interpreter/core/ci_directory.c",
     "           (reserve > 0 && reserve < cap && d->live >= cap - reserve && o->live >= reserve);",
     "           (reserve > 0 && 0);",
     "one caller fills the server: another caller's conversations are refused",
     ["test/test_many_conversations.py::test_128_conversations_on_a_64_container_server[local]"]),
    # ---- hostile input on the state surfaces
    ("upload-limits-kernel-trusted", "mod_code_interpreter/supervisor/ci_supervisor_runs.c",
     "    if (raw == RAW_PUT && (refusal = sup_put_limits(b, code, len))) {",
     "    if (raw == RAW_PUT && (refusal = sup_put_limits(b, code, len)) && 0) {",
     "max_files= is held only by the kernel, which the container's code can switch off",
     ["test/test_hostile_state.py::test_limits_hold_when_the_container_switches_off_its_kernels"]),
    ("upload-max-file-kernel-room", "mod_code_interpreter/sandbox/files_local.c",
     "        a->up->max = a->max_file && (a->bytes < 0 || a->bytes > a->max_file)",
     "        a->up->max = 0 && (a->bytes < 0 || a->bytes > a->max_file)",
     "max_file= is held only by the kernel's room, which the container's code can switch off",
     ["test/test_hostile_state.py::test_limits_hold_when_the_container_switches_off_its_kernels"]),
    ("upload-kept-before-body-end", "mod_code_interpreter/httpd/ci_files_in.c",
     "        if (u->file_done && u->status == CI_MULTIPART_DONE && u->eos)",
     "        if (u->file_done && u->status == CI_MULTIPART_DONE)",
     "an upload is kept although the request body never reached its length",
     ["test/test_hostile_state.py::test_an_upload_whose_body_never_ends_is_not_kept"]),
    ("capi-query-not-utf8", "mod_code_interpreter/core/ci_capi.c",
     "    return !v || ci_utf8_valid_prefix(v, strlen(v)) == strlen(v);",
     "    return 1;",
     "a list's name or after that is not UTF-8 goes to the directory",
     ["test/test_hostile_state.py::test_query_strings_that_are_not_utf8_are_refused"]),
    ("redis-records-unchecked", "mod_code_interpreter/httpd/ci_dirclient_redis.c",
     "    check_records(s, p, ans, ci_json_str(req, \"owner\"));",
     "    (void)check_records;",
     "a record whose owner was changed in Redis hands the container to that owner",
     ["test/test_shared_directory.py::test_a_record_given_to_another_owner_in_redis_reads_as_unknown"]),
    ("secret-equal-prefix", "mod_code_interpreter/core/ci_crypto.c",
     "    return n == strlen(b) && CRYPTO_memcmp(a, b, n) == 0;",
     "    return CRYPTO_memcmp(a, b, n) == 0;",
     "an authenticator's prefix passes for it",
     ["unit:test_crypto"]),
    ("secret-value-any-control", "mod_code_interpreter/core/ci_secret_value.c",
     "        if ((c < 0x20 && c != '\\t') || c == 0x7f)",
     "        if (c == '\\r' || c == '\\n')",
     "a secret's value with a control character is taken, and the egress proxy, judging alike, sends it",
     ["unit:test_egress_parse", "unit:test_core"]),
    ("seal-not-bound", "mod_code_interpreter/core/ci_crypto.c",
     "         (!aad || EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)aad,",
     "         (1 || EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)aad,",
     "a sealed handle copied into another container's record opens the first one's sandbox",
     ["test/test_shared_directory.py::test_a_handle_copied_into_another_record_opens_nothing"]),
    ("redis-malformed-record-read", "mod_code_interpreter/core/ci_directory.lua",
     "  if not (r and well_formed(r, id)) then r = nil end",
     "  if not r then r = nil end",
     "one malformed record in Redis stops every create on its node",
     ["test/test_shared_directory.py::test_a_malformed_record_does_not_stop_the_others"]),
    # ---- the hosted shell (core/ci_shell.c, ci_relay.c, ci_request.c, the kernel)
    ("shell-stderr-not-cut", "mod_code_interpreter/core/ci_shell.c",
     "        elen = ci_utf8_prefix(err, elen, left);\n",
     "        elen = ci_utf8_prefix(err, elen, left + elen);\n",
     "a command's stderr passes max_output_length where the sandbox did not cut it",
     ["unit:test_shell"]),
    ("relay-shell-output-not-counted", "mod_code_interpreter/core/ci_relay.c",
     "        moved += APR_ARRAY_IDX(r->shells, i, int) < up;",
     "        moved += 0;",
     "what the model writes after a shell call in its round streams at the output item's index",
     ["unit:test_shell"]),
    ("request-local-shell-intercepted", "mod_code_interpreter/core/ci_request.c",
     '    return !json_object_is_type(env, json_type_object) || !ci_json_is_type(env, "local");',
     "    return 1;",
     "a client's own (local) shell is taken for the hosted one and refused",
     ["test/test_shell.py::test_a_local_shell_is_the_clients"]),
    ("kernel-shell-group-left", "mod_code_interpreter/sandbox/ci_kernel.py",
     "        os.killpg(proc.pid, signal.SIGKILL)    # its leader unreaped: the group is ours",
     "        os.kill(proc.pid, signal.SIGKILL)",
     "a command past its timeout leaves its children running",
     ["test/test_kernel_shell.py::test_a_timeout_kills_the_group_and_stops_the_call"]),
    # ---- network allowlists
    ("egress-private-address-public", "mod_code_interpreter/egress/ci_egress_parse.c",
     "    if (in_v4(a, 0x0a000000U, 8) || in_v4(a, 0xac100000U, 12)",
     "    if (0 || in_v4(a, 0xac100000U, 12)",
     "a name that resolves to 10.0.0.0/8 is connected to",
     ["unit:test_egress_parse",
      "test/test_egress.py::test_refusals_name_the_domain_and_why"]),
    ("egress-ceiling-ignored", "mod_code_interpreter/httpd/ci_containers.c",
     "        if (ci_sandbox_def_domain_allowed(p, tool, d))",
     "        if (tool)",
     "a client lists a domain outside the tool's allowed_domains=",
     ["test/test_egress.py::test_a_policy_the_server_does_not_allow_is_refused"]),
    ("egress-container-allowlist-dropped", "mod_code_interpreter/sandbox/ci_sandbox.c",
     "    def = ci_sandbox_def_allowlist(p, def, allowlist);",
     "    def = ci_sandbox_def_allowlist(p, def, NULL);",
     "a container's sandbox starts without its allowlist (no way out at all)",
     ["test/test_egress.py::test_an_allowlisted_domain_answers_over_http_and_https"]),
    ("egress-budget-not-renewed", "mod_code_interpreter/supervisor/ci_supervisor_runs.c",
     "        sup_egress_execution(b);",
     "        (void)b;",
     "a container that used its byte budget stays cut off in later executions",
     ["test/test_egress.py::test_a_huge_download_is_cut_by_the_byte_budget"]),
    ("egress-owner-share-ignored", "mod_code_interpreter/egress/ci_egress.c",
     "    ok = o->open < limits.max_per_owner;",
     "    ok = 1;",
     "one owner's containers take the whole egress pool; another owner is refused",
     ["unit:test_egress",
      "test/test_egress_fair.py::test_one_owner_at_its_limit_leaves_room_for_another"]),
    ("egress-claim-owner-dropped", "mod_code_interpreter/egress/ci_egress.c",
     "    b->owner = owner_attach(json_string_or(o, \"owner\", NULL));",
     "    b->owner = NULL;",
     "a warm sandbox that becomes a container's counts in no owner's share",
     ["unit:test_egress"]),
    ("egress-pool-setting-ignored", "mod_code_interpreter/supervisor/ci_supervisor_egress.c",
     "        lim->max_total = cfg->egress_max_total;",
     "        (void)cfg;",
     "CodeInterpreterEgressConnections does not bound the egress pool",
     ["test/test_egress_fair.py::test_one_owner_at_its_limit_leaves_room_for_another"]),
    ("egress-descriptors-not-raised", "mod_code_interpreter/egress/ci_egress.c",
     "        rl.rlim_cur = rl.rlim_max;",
     "        rl.rlim_cur = rl.rlim_cur;",
     "the egress proxy keeps the service's low soft limit on descriptors: a burst of "
     "CONNECTs is not answered as documented",
     ["test/test_egress_fair.py::test_every_connect_of_a_burst_is_answered"]),
    ("egress-lifetime-ignored", "mod_code_interpreter/egress/ci_egress.c",
     "        if (ms_left(end_of_life) < left)",
     "        if (0 && ms_left(end_of_life) < left)",
     "an egress connection outlives CodeInterpreterEgressLifetime",
     ["test/test_egress_fair.py::test_a_tunnel_is_closed_at_its_lifetime"]),
    ("egress-site-proxy-gets-the-name", "mod_code_interpreter/egress/ci_egress.c",
     "        ts = site_proxy_tunnel(c, res ? res->ai_addr : NULL, req->host, req->port, &fd,",
     "        ts = site_proxy_tunnel(c, NULL, req->host, req->port, &fd,",
     "the site proxy is asked for the name, and resolves it again, not the address checked",
     ["test/test_egress.py::test_an_allowlisted_domain_answers_over_http_and_https"]),
    ("egress-unresolved-to-site-proxy", "mod_code_interpreter/egress/ci_egress.c",
     "    if (!res && !limits.proxy_resolves) {",
     "    if (!res && 0) {",
     "a name that does not resolve here is handed to the site proxy unchecked",
     ["unit:test_egress",
      "test/test_egress.py::test_a_name_that_does_not_resolve_here_is_not_handed_to_the_site_proxy"]),
    ("egress-refusals-logged-each", "mod_code_interpreter/egress/ci_egress.c",
     "    if (r->last_line_ms == 0 || now - r->last_line_ms >= REFUSAL_LOG_MS) {",
     "    if (1) {",
     "every refused connection is a line of its own in the audit and error logs",
     ["test/test_egress_fair.py::"
      "test_refused_connections_are_logged_at_a_bounded_rate_with_their_count"]),
    # ---- domain secrets and tunnels (sandbox/ci_egress*.c)
    ("egress-plain-http-gets-secrets", "mod_code_interpreter/egress/ci_egress.c",
     "    if (!req->is_connect && secrets->nelts > 0) {",
     "    if (0) {",
     "plain http to a secret's domain is relayed (the value's placeholder in clear)",
     ["unit:test_egress",
      "test/test_egress.py::test_a_secret_is_injected_for_its_domain_only"]),
    ("egress-connect-80-tunnelled", "mod_code_interpreter/egress/ci_egress.c",
     "    if (req->is_connect && req->port == 80) {",
     "    if (0) {",
     "a tunnel to port 80 of an allowed name carries requests for any other host",
     ["unit:test_egress", "test/test_egress.py::test_a_tunnel_carries_only_its_own_name"]),
    ("egress-sni-not-checked", "mod_code_interpreter/egress/ci_egress.c",
     "    if (strcmp(name, req->host))",
     "    if (0)",
     "a tunnel to an allowed name reaches another name (SNI) behind the same address",
     ["unit:test_egress", "test/test_egress.py::test_a_tunnel_carries_only_its_own_name"]),
    ("egress-terminated-sni-not-checked", "mod_code_interpreter/egress/ci_egress_tls.c",
     "        if (!strcmp(name, check->host))",
     "        if (1)",
     "a terminated tunnel accepts a ClientHello for another name",
     ["unit:test_egress"]),
    ("egress-other-host-malformed", "mod_code_interpreter/egress/ci_egress.c",
     "    if (rc == CI_EGRESS_OTHER_HOST) {",
     "    if (0) {",
     "a request for another host in a terminated tunnel is refused as malformed (400), "
     "not for what it is",
     ["unit:test_egress"]),
    ("egress-secret-in-path", "mod_code_interpreter/egress/ci_egress_parse.c",
     "    if (req->path && inject_into_query(p, &st, &req->path))",
     "    if (req->path && (inject_into_query(p, &st, &req->path) ||\n"
     "                      inject_one(p, &st, &req->path, 1)))",
     "a placeholder in the path before the query is replaced by the value",
     ["unit:test_egress_parse",
      "test/test_egress.py::test_a_reflected_secret_never_reaches_the_sandbox"]),
    ("egress-answer-not-scrubbed", "mod_code_interpreter/egress/ci_egress.c",
     "    int rc = ci_egress_answer_filter_feed(o->answer, in, n, eof, out, out_len);",
     "    int rc = ((void)eof, *out = in, *out_len = n, 0);",
     "an origin that echoes the request hands the value to the sandbox",
     ["unit:test_egress",
      "test/test_egress.py::test_a_reflected_secret_never_reaches_the_sandbox"]),
    ("egress-scrub-split-missed", "mod_code_interpreter/egress/ci_egress_scrub.c",
     "        else if (m == M_UNDECIDED) {",
     "        else if (0) {",
     "a value split across two reads of the answer is not removed",
     ["unit:test_egress_parse"]),
    ("egress-scrub-encoded-missed", "mod_code_interpreter/egress/ci_egress_scrub.c",
     "            if (hi >= 0 && lo >= 0 && (unsigned char)(hi * 16 + lo) == want) {",
     "            if (0) {",
     "a percent-encoded value (a Location's query) is not removed",
     ["unit:test_egress_parse", "unit:test_egress"]),
    ("egress-chunks-not-decoded", "mod_code_interpreter/egress/ci_egress_scrub.c",
     "    else if (te && !f->head_only && status != 204 && status != 304)",
     "    else if (0)",
     "a value split across two chunks of a chunked answer is not removed",
     ["unit:test_egress_parse", "unit:test_egress"]),
    ("egress-compressed-answer-relayed", "mod_code_interpreter/egress/ci_egress_scrub.c",
     '    if (status < 0 || twice || (ce && strcasecmp(ce, "identity")) ||',
     "    if (status < 0 || twice || (ce && 0) ||",
     "a compressed answer, which cannot be scanned, reaches the sandbox",
     ["unit:test_egress_parse", "unit:test_egress"]),
    ("egress-encoding-not-identity", "mod_code_interpreter/egress/ci_egress.c",
     "    ci_egress_identity_encoding(c->pool, &req);",
     "    (void)req;",
     "a terminated request asks for compressed answers, which cannot be scanned",
     ["unit:test_egress",
      "test/test_egress.py::test_a_reflected_secret_never_reaches_the_sandbox"]),
    ("egress-second-request-relayed", "mod_code_interpreter/egress/ci_egress.c",
     "        (body > 0 && dir_send_first(c, up, buf + head_len, (apr_size_t)body)))",
     "        (got > head_len && dir_send_first(c, up, buf + head_len, got - head_len)))",
     "a second request on a terminated connection reaches the origin unchecked",
     ["unit:test_egress"]),
    ("citations-count-bytes", "mod_code_interpreter/core/ci_json.c",
     "        n += ((unsigned char)s[i] & 0xC0) != 0x80;",
     "        n++;",
     "a citation's offsets count bytes, not characters",
     ["test/test_citations.py::test_generated_file_cited_listed_and_downloaded"]),
    ("input-encoded-again", "mod_code_interpreter/core/ci_request.c",
     "    if (kept->nelts && scan->n >= 0 && scan->n == sent)",
     "    if (0 && kept->nelts && scan->n >= 0 && scan->n == sent)",
     "the conversation is encoded again instead of kept as the client wrote it",
     ["test/test_loop.py::test_the_clients_items_go_upstream_as_written"]),
    ("raw-control-byte-kept", "mod_code_interpreter/core/ci_request.c",
     "    return !ci_json_has_control_byte(span->at, span->len);",
     "    return 1;",
     "an item with a raw control character goes upstream as it came, not strict JSON",
     ["unit:test_core"]),
    ("input-parsed-anyway", "mod_code_interpreter/core/ci_request.c",
     "    scan_input(p, body, len, &scan);",
     "    scan_input(p, body, len, &scan);\n    scan.way = INPUT_PARSED;",
     "an input the rewrite leaves alone is parsed and encoded, not sent as written",
     ["test/test_loop.py::test_a_string_input_goes_upstream_as_written", "unit:test_core"]),
    ("mixed-input-parsed-whole", "mod_code_interpreter/core/ci_request.c",
     "    else if (!parse_mixed(p, scan, translated))",
     "    else if (0 && !parse_mixed(p, scan, translated))",
     "a history with code_interpreter_call items is parsed whole, not only those items",
     ["unit:test_core"]),
    ("stand-ins-kept-as-input", "mod_code_interpreter/core/ci_request.c",
     "        req->input = NULL;",
     "        (void)0;",
     "the rewrite's stand-ins for the items it did not parse are taken for the input",
     ["unit:test_core"]),
    ("translated-type-passes-unparsed", "mod_code_interpreter/core/ci_request.c",
     "            !memcmp(type->at + 1, translated[i], type->len - 2))",
     "            !memcmp(type->at + 1, translated[i], type->len - 2) && 0)",
     "a code_interpreter_call in the history reaches the model untranslated",
     ["test/test_loop.py::test_replayed_code_interpreter_calls_translated"]),
    ("strict-check-takes-surrogates", "mod_code_interpreter/core/ci_json.c",
     "                 !((b[2] == 'd' || b[2] == 'D') && strchr(\"89abcdefABCDEF\", b[3])))",
     "                 1)",
     "a lone surrogate escape goes upstream as written, where the parser would make U+FFFD of it",
     ["unit:test_core"]),
    ("dropped-shadow-taken-on", "mod_code_interpreter/core/ci_directory_ops.c",
     "    else if (c && c->status == CI_CNTR_DELETED)",
     "    else if (0 && c && c->status == CI_CNTR_DELETED)",
     "a shared directory's container deleted while its turn waits runs its call in a new sandbox",
     ["unit:test_directory_ops",
      "test/test_shared_directory.py::"
      "test_a_container_deleted_while_its_turn_waits_is_gone_for_its_call"]),
    ("create-reads-every-record", "mod_code_interpreter/core/ci_directory.lua",
     "  local owned, n, used = index_counts(owner, node, lim)",
     "  local owned, n, used = 1e9, 1e9, 1e18",
     "every create in Redis reads the record of each container the node and the owner run",
     ["test/test_redisdir_unit.py::test_redis_directory[test_a_create_reads_records_only_near_a_cap]"]),
    ("chained-turn-asks-redis-again", "mod_code_interpreter/httpd/ci_containers.c",
     "    if (!ans || ci_dirclient_container(r->pool, ans, \"container\", &c) ||",
     "    if (!ans || ci_server_directory(r->server) ||\n"
     "        ci_dirclient_container(r->pool, ans, \"container\", &c) ||",
     "a chained turn asks the shared directory for its container again at the first call",
     ["test/test_shared_directory.py::test_a_chained_turn_asks_the_directory_twice"]),
    # ---- skills (sandbox/sandbox_local.c, sandbox/ci_supervisor_wire.c,
    # supervisor/ci_supervisor_skills.c)
    ("skill-bound-writable", "mod_code_interpreter/sandbox/sandbox_local.c",
     "        push3(a, \"--ro-bind\", apr_pstrdup(p, ci_json_str(s, \"tree\")),",
     "        push3(a, \"--bind\", apr_pstrdup(p, ci_json_str(s, \"tree\")),",
     "a container can write its skill's folder, the store's bundle that other owners' "
     "containers show",
     ["test/test_skills_attach.py::test_a_referenced_skill_is_in_the_container_read_only_and_told"]),
    ("skill-paths-unchecked", "mod_code_interpreter/sandbox/ci_supervisor_wire.c",
     "        if (!mount_ok(mount) || !store_path_ok(ci_json_str(s, \"tree\"), \"\") ||",
     "        if (!mount_ok(mount) || !ci_json_str(s, \"tree\") ||",
     "the supervisor binds a folder a definition names without checking it is one of the store's",
     ["unit:test_supervisor_wire"]),
    ("skill-bundle-removed-while-shown", "mod_code_interpreter/supervisor/ci_supervisor_skills.c",
     "    if (!ci_skill_store_digest_ok(digest) || (skills && ci_skills_digest_uses(skills, digest)) ||\n"
     "        shown_by_a_container(p, digest))",
     "    if (!ci_skill_store_digest_ok(digest) || (skills && ci_skills_digest_uses(skills, digest)))",
     "deleting a skill empties the folder of a running container that shows it",
     ["test/test_skills_attach.py::test_a_deleted_version_stays_while_a_container_shows_it"]),
]

TOP = os.getcwd()
PYTEST = ["/usr/bin/python3", "-m", "pytest", "-q", "-x", "-rfE", "-p", "no:cacheprovider"]
MAKE = ["make", "-j2"]


def say(*args):
    print(*args, flush=True)


def run(cmd, cwd, env=None, log=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log:
        with open(log, "a") as f:
            f.write("$ %s\n%s\n" % (" ".join(cmd), r.stdout))
    return r


# What the tests start that must be gone when they end, pass or fail: the
# test servers, the fakes, Redis, sandboxes.
HARNESS = ("redis-server", "fake_e2b.py", "fake_model.py", "bwrap",
           "apache2 -d " + os.path.join(TOP, "test", ".run"))


def harness_processes():
    """{pid: command line} of the processes the tests may start."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if any(h in cmd for h in HARNESS):
            found[int(pid)] = cmd
    return found


def strays(before):
    """What the tests left running (started since BEFORE), once what is
    still ending has had its time; killed, and named."""
    deadline = time.monotonic() + 30
    while True:
        left = {pid: cmd for pid, cmd in harness_processes().items() if pid not in before}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return sorted("%d %s" % (pid, cmd[:120]) for pid, cmd in left.items())


def unit_binaries(tests):
    return sorted({t[len("unit:"):] for t in tests if t.startswith("unit:")})


def run_tests(tree, tests, log):
    """Run TESTS against TREE's build; (True, "") when all pass, else (False,
    the first failure pytest or the binary names)."""
    env = dict(os.environ, CI_MODULE=os.path.join(tree, ".libs", "mod_code_interpreter.so"),
               CI_TREE=tree)
    env.pop("CI_SANITIZE", None)
    for t in tests:
        if t.startswith("unit:"):
            r = run([os.path.join(tree, "test", "unit", t[5:])], tree, env, log)
            if r.returncode != 0:
                return False, t
            continue
        r = run(PYTEST + t.split(), TOP, env, log)
        if r.returncode == 1:
            failed = [l.split(" ", 1)[1].split(" - ")[0] for l in r.stdout.splitlines()
                      if l.startswith(("FAILED ", "ERROR "))]
            return False, failed[0] if failed else t
        if r.returncode != 0:
            raise SystemExit("mutants: pytest could not run %s (exit %d):\n%s"
                             % (t, r.returncode, r.stdout[-3000:]))
    return True, ""


def main(names):
    chosen = [m for m in MUTANTS if not names or m[0] in names]
    unknown = set(names) - {m[0] for m in MUTANTS}
    if unknown:
        raise SystemExit("mutants: no mutant named %s" % ", ".join(sorted(unknown)))
    scratch = os.environ.get("MUTANTS_DIR") or tempfile.mkdtemp(prefix="ci-mutants-")
    base = os.path.join(scratch, "base")
    log = os.path.join(scratch, "mutants.log")
    t0 = time.monotonic()
    problems = []
    try:
        # The base tree: the tracked files, configured and built once.
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        files = subprocess.run(["git", "ls-files", "-z"], cwd=TOP, check=True,
                               stdout=subprocess.PIPE).stdout.split(b"\0")
        for rel in filter(None, (f.decode() for f in files)):
            if os.path.isfile(os.path.join(TOP, rel)):
                os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
                shutil.copy2(os.path.join(TOP, rel), os.path.join(base, rel))
        units = unit_binaries([t for m in chosen for t in m[5]])
        steps = [["./autogen.sh"], ["./configure"] + os.environ.get("CONFIGURE_FLAGS", "").split(),
                 MAKE]
        if units:
            steps.append(MAKE + ["test/unit/" + u for u in units])
        for step in steps:
            r = run(step, base, log=log)
            if r.returncode != 0:
                raise SystemExit("mutants: %s failed in the base tree:\n%s"
                                 % (" ".join(step), r.stdout[-3000:]))
        say("mutants: base tree built in %s (%.0f s)" % (base, time.monotonic() - t0))

        # Every listed test passes on the unmutated tree (else a "kill" means nothing).
        listed = sorted({t for m in chosen for t in m[5]})
        before = harness_processes()
        ok, failed = run_tests(base, listed, log)
        left = strays(before)
        if left:
            raise SystemExit("mutants: the listed tests left running on the unmutated "
                             "tree:\n  " + "\n  ".join(left))
        if not ok:
            raise SystemExit("mutants: %s fails on the unmutated tree (see %s)" % (failed, log))
        say("mutants: the %d listed tests pass unmutated (%.0f s)"
            % (len(listed), time.monotonic() - t0))

        work = os.path.join(scratch, "mutant")
        for name, rel, old, new, breaks, tests in chosen:
            began = time.monotonic()
            shutil.rmtree(work, ignore_errors=True)
            subprocess.run(["cp", "-a", base, work], check=True)
            path = os.path.join(work, rel)
            with open(path) as f:
                text = f.read()
            if text.count(old) != 1:
                problems.append("%s: the original text is found %d times in %s"
                                % (name, text.count(old), rel))
                say("NOT APPLIED  %-34s %s" % (name, problems[-1]))
                continue
            with open(path, "w") as f:
                f.write(text.replace(old, new))
            units = unit_binaries(tests)
            r = run(MAKE + ["test/unit/" + u for u in units] if units else MAKE, work, log=log)
            if r.returncode == 0 and units:
                r = run(MAKE, work, log=log)
            if r.returncode != 0:
                problems.append("%s: does not compile (see %s)" % (name, log))
                say("NO BUILD     %-34s" % name)
                continue
            with open(log, "a") as f:
                f.write("==== mutant %s\n" % name)
            before = harness_processes()
            survived, killer = run_tests(work, tests, log)
            took = time.monotonic() - began
            left = strays(before)
            if left:
                problems.append("%s: its tests left running: %s" % (name, "; ".join(left)))
                say("LEFT RUNNING %-34s %s" % (name, "; ".join(left)))
            if survived:
                problems.append("%s survived %s: %s" % (name, " ".join(tests), breaks))
                say("SURVIVED     %-34s (%.0f s) %s" % (name, took, breaks))
            else:
                say("killed       %-34s (%.0f s) by %s" % (name, took, killer))
    finally:
        if not os.environ.get("MUTANTS_KEEP") and not problems:
            shutil.rmtree(scratch, ignore_errors=True)
    say("mutants: %d run, %d problem(s), %.0f s" % (len(chosen), len(problems),
                                                   time.monotonic() - t0))
    for p in problems:
        say("  " + p)
    if problems:
        say("(log and trees kept in %s)" % scratch)
        sys.exit(1)


main(sys.argv[1:])
PYTHON
