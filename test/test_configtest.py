"""Configuration errors are caught by configtest (httpd -t): every bad value is
refused with a message that names the directive, the bad value and what is
expected, and httpd exits non-zero. A correct configuration passes."""
import os
import re

import pytest

from conftest import MODULE, Httpd

URL_EXPECTED = "expected an absolute http:// or https:// URL with a host"
UNSET_VAR = "CI_TEST_UNSET_E2B_KEY"


@pytest.fixture(autouse=True)
def module_built():
    if not os.path.exists(MODULE):
        pytest.exit("the module is not built: %s" % MODULE, returncode=2)


def configtest(request, conf, env=None, unset=()):
    """Write a server root holding conf and run httpd -t on it."""
    name = "configtest-" + re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)
    server = Httpd(name, conf, env=env)
    for var in unset:
        server.env.pop(var, None)
    server.write_conf()
    return server, server.configtest()


def conf_path(server):
    return os.path.join(server.root, "httpd.conf")


def line_of(server, text, nth=1):
    """1-based number of the nth line of the generated httpd.conf equal to text."""
    seen = 0
    with open(conf_path(server)) as f:
        for number, line in enumerate(f, 1):
            if line.strip() == text:
                seen += 1
                if seen == nth:
                    return number
    raise AssertionError("%r not in %s" % (text, conf_path(server)))


def assert_syntax_error(server, result, directive_line, message, nth=1):
    """httpd -t refused the line with exactly this message."""
    assert result.returncode != 0, result.stderr
    lines = result.stderr.splitlines()
    where = "AH00526: Syntax error on line %d of %s:" % (
        line_of(server, directive_line, nth), conf_path(server))
    assert where in lines, result.stderr
    assert lines[lines.index(where) + 1] == message, result.stderr
    assert "Syntax OK" not in lines


def assert_passes(result):
    assert result.returncode == 0, result.stderr
    assert "Syntax OK" in result.stderr.splitlines(), result.stderr


# ------------------------------------------------------ CodeInterpreterSandbox

def test_unknown_provider(request):
    line = "CodeInterpreterSandbox s provider=docker"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: unknown provider 'docker': "
                        "expected local or e2b")


@pytest.mark.parametrize("words,message", [
    ("provider=local egress=open", "egress: 'open' is not valid: expected off or allowlist"),
    ("provider=local allowed_domains=pypi.org", "allowed_domains= needs egress=allowlist"),
    ("provider=local egress=allowlist allowed_domains=pypi.org,10.0.0.1",
     "allowed_domains: '10.0.0.1' is not a domain name"),
    ("provider=local egress=allowlist egress_proxy=https://proxy:3128",
     "egress_proxy: 'https://proxy:3128' is not valid: expected http://HOST:PORT"),
    ("provider=e2b api_key=k egress=allowlist egress_proxy=http://proxy:3128",
     "egress_proxy: provider e2b's sandboxes do not reach the internet through this server"),
], ids=["egress-value", "domains-without-egress", "ip-domain", "proxy-scheme", "e2b-proxy"])
def test_egress_keys_are_checked(request, words, message):
    line = "CodeInterpreterSandbox s " + words
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, "CodeInterpreterSandbox s: " + message)


@pytest.mark.parametrize("line,message", [
    ("CodeInterpreterSandboxCgroup sys/fs/cgroup",
     "CodeInterpreterSandboxCgroup: 'sys/fs/cgroup' is not auto, off or an absolute path"),
    ("CodeInterpreterSandboxCgroup /sys/fs/cgroup/../tmp",  # check-clone: a hostile path
     "CodeInterpreterSandboxCgroup: '/sys/fs/cgroup/../tmp' climbs with '..'"),  # check-clone: it
    ("CodeInterpreterSandboxCPUs 0",
     "CodeInterpreterSandboxCPUs: '0' is not a number of CPUs from 0.01 to 1024, nor max"),
    ("CodeInterpreterSandboxCPUs 1x",
     "CodeInterpreterSandboxCPUs: '1x' is not a number of CPUs from 0.01 to 1024, nor max"),
], ids=["cgroup-relative", "cgroup-climbs", "cpus-zero", "cpus-word"])
def test_sandbox_cgroup_directives_are_checked(request, line, message):
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, message)


UNKNOWN_KEY_LINES = {
    "local": "CodeInterpreterSandbox s provider=local foo=1",
    "e2b": "CodeInterpreterSandbox s provider=e2b api_key=k foo=1",
}


KEYS = {
    "local": "provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, "
             "max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, python, "
             "memory, processes, disk, warm, preload",
    "e2b": "provider, timeout, max_output, idle, max_idle, retention, tiers, max_file, "
           "max_files, max_bytes, egress, allowed_domains, egress_proxy, egress_ca, api_key, "
           "api_base, template, lifetime, internet, sandbox_url",
}


# A key of the other provider is as unknown as any.
OTHER_PROVIDERS_KEY = {
    "local": ("CodeInterpreterSandbox s provider=local api_key=k", "api_key"),
    "e2b": ("CodeInterpreterSandbox s provider=e2b api_key=k memory=1G", "memory"),
}


@pytest.mark.parametrize("provider", ["local", "e2b"])
def test_other_providers_key_is_refused(request, provider):
    line, key = OTHER_PROVIDERS_KEY[provider]
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: unknown key '%s' for provider %s: "
                        "expected one of %s" % (key, provider, KEYS[provider]))


@pytest.mark.parametrize("provider", ["local", "e2b"])
def test_unknown_key_names_the_accepted_keys(request, provider):
    line = UNKNOWN_KEY_LINES[provider]
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: unknown key 'foo' for provider %s: "
                        "expected one of %s" % (provider, KEYS[provider]))


def test_setting_without_equals(request):
    line = "CodeInterpreterSandbox s provider=local bogus"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: 'bogus' is not valid: expected key=value")


def test_bad_size(request):
    line = "CodeInterpreterSandbox s provider=local memory=12X"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: memory: '12X' is not a valid size: "
                        "expected a positive number of bytes, optionally with K, M or G, "
                        "at most 1099511627776 bytes")


@pytest.mark.parametrize("value", ["0", "abc"])
def test_bad_duration(request, value):
    line = "CodeInterpreterSandbox s provider=local timeout=%s" % value
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: timeout: '%s' is not a valid duration: "
                        "expected whole seconds from 1 to 86400" % value)


def test_bad_count_in_sandbox(request):
    line = "CodeInterpreterSandbox s provider=local processes=-1"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: processes: '-1' is not a valid count: "
                        "expected a whole number from 1 to 4096")


def test_api_key_env_unset(request):
    line = "CodeInterpreterSandbox cloud provider=e2b api_key=env:%s" % UNSET_VAR
    server, r = configtest(request, line, unset=[UNSET_VAR])
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox cloud: api_key=env:%s: the environment "
                        "variable is not set" % UNSET_VAR)


def test_api_key_file_missing(request):
    line = "CodeInterpreterSandbox cloud provider=e2b api_key=file:/nonexistent"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox cloud: api_key=file:/nonexistent: the "
                        "file cannot be read")


def test_api_base_not_http(request):
    line = "CodeInterpreterSandbox cloud provider=e2b api_key=k api_base=ftp://x"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox cloud: api_base: 'ftp://x' is not a valid "
                        "URL: " + URL_EXPECTED)


def test_duplicate_sandbox_names_the_first_declaration(request):
    line = "CodeInterpreterSandbox twice provider=local timeout=5"
    server, r = configtest(request, line + "\n" + line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox twice: declared twice (first at %s:%d): "
                        "expected each sandbox name once"
                        % (conf_path(server), line_of(server, line)), nth=2)


# ------------------------------------------------------------ other directives

def test_workers_zero(request):
    server, r = configtest(request, "CodeInterpreterWorkers 0")
    assert_syntax_error(server, r, "CodeInterpreterWorkers 0",
                        "CodeInterpreterWorkers: '0' is not a valid count: expected a "
                        "whole number from 1 to 100000")


def test_max_loops_zero(request):
    server, r = configtest(request, "<Location /v1/responses>\n"
                                    "CodeInterpreter On\n"
                                    "CodeInterpreterMaxLoops 0\n"
                                    "</Location>")
    assert_syntax_error(server, r, "CodeInterpreterMaxLoops 0",
                        "CodeInterpreterMaxLoops: '0' is not a valid count: expected a "
                        "whole number from 1 to 1000")


def test_max_body_zero(request):
    server, r = configtest(request, "<Location /v1/responses>\n"
                                    "CodeInterpreterMaxBody 0\n"
                                    "</Location>")
    assert_syntax_error(server, r, "CodeInterpreterMaxBody 0",
                        "CodeInterpreterMaxBody: '0' is not a valid size: expected a "
                        "positive number of bytes, optionally with K, M or G, at most "
                        "4294967296 bytes")


def test_upstream_not_a_url(request):
    server, r = configtest(request, "<Location /v1/responses>\n"
                                    "CodeInterpreterUpstream not-a-url\n"
                                    "</Location>")
    assert_syntax_error(server, r, "CodeInterpreterUpstream not-a-url",
                        "CodeInterpreterUpstream: 'not-a-url' is not a valid URL: "
                        + URL_EXPECTED)


def test_function_name_with_space(request):
    line = 'CodeInterpreterFunctionName "bad name"'
    server, r = configtest(request, "<Location /v1/responses>\n%s\n</Location>" % line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterFunctionName: 'bad name' is not a valid function "
                        "name: expected 1 to 64 letters, digits, '_' or '-'")


# ------------------------------------------- CodeInterpreter NAME, any order

def test_undeclared_sandbox(request):
    server, r = configtest(request, "<Location /v1/responses>\n"
                                    "CodeInterpreter cloudy\n"
                                    "</Location>")
    assert r.returncode != 0, r.stderr
    lines = r.stderr.splitlines()
    assert ("CI0001: CodeInterpreter cloudy (%s:%d): no sandbox of that name is "
            "declared; expected On, Off or a name declared with CodeInterpreterSandbox"
            % (conf_path(server), line_of(server, "CodeInterpreter cloudy"))
            in lines), r.stderr
    assert "Syntax OK" not in lines


def test_sandbox_declared_after_its_use(request):
    server, r = configtest(request, "<Location /v1/responses>\n"
                                    "CodeInterpreter cloudy\n"
                                    "</Location>\n"
                                    "CodeInterpreterSandbox cloudy provider=local timeout=5")
    assert_passes(r)


def test_virtual_host_uses_a_main_server_sandbox(request):
    server, r = configtest(request, "CodeInterpreterSandbox shared provider=local timeout=5\n"
                                    "<VirtualHost 127.0.0.1:*>\n"
                                    "ServerName a.example\n"
                                    "<Location /v1/responses>\n"
                                    "CodeInterpreter shared\n"
                                    "</Location>\n"
                                    "</VirtualHost>")
    assert_passes(r)


def test_sandbox_declared_in_another_virtual_host(request):
    server, r = configtest(request, "<VirtualHost 127.0.0.1:*>\n"
                                    "ServerName a.example\n"
                                    "<Location /v1/responses>\n"
                                    "CodeInterpreter cloudy\n"
                                    "</Location>\n"
                                    "</VirtualHost>\n"
                                    "<VirtualHost 127.0.0.1:*>\n"
                                    "ServerName b.example\n"
                                    "CodeInterpreterSandbox cloudy provider=local timeout=5\n"
                                    "</VirtualHost>")
    assert r.returncode != 0, r.stderr
    assert ("CI0001: CodeInterpreter cloudy (%s:%d): no sandbox of that name is "
            "declared; expected On, Off or a name declared with CodeInterpreterSandbox"
            % (conf_path(server), line_of(server, "CodeInterpreter cloudy"))
            in r.stderr.splitlines()), r.stderr


# ------------------------------------------------------- a correct configuration

def test_correct_configuration_passes(request):
    key_var = "CI_TEST_E2B_KEY"
    name = "configtest-" + request.node.name
    root = Httpd(name, "").root
    key_file = os.path.join(root, "e2b.key")
    ca_file = os.path.join(root, "ca.pem")
    conf = f"""
CodeInterpreterSandbox local provider=local timeout=60 max_output=128k python=/usr/bin/python3 memory=1G processes=32 disk=128M warm=0 preload=json,math
CodeInterpreterSandbox cloud provider=e2b api_key=env:{key_var} api_base=https://api.e2b.app template=code-interpreter-v1 lifetime=600 internet=off
CodeInterpreterSandbox cloud2 provider=e2b api_key=file:{key_file} sandbox_url=http://127.0.0.1:9
CodeInterpreterWorkers 4
CodeInterpreterQueueLimit 16
CodeInterpreterMaxSandboxes 8
<Location /v1/responses>
    ProxyPass http://127.0.0.1:9/v1/responses
    CodeInterpreter On
    CodeInterpreterMaxLoops 5
    CodeInterpreterMaxBody 8M
    CodeInterpreterDeadline 300
    CodeInterpreterKeepalive 10
    CodeInterpreterUpstream http://127.0.0.1:9/v1/responses
    CodeInterpreterFunctionName run_code
    CodeInterpreterConnectTimeout 5
    CodeInterpreterUpstreamTimeout 120
    CodeInterpreterCAFile {ca_file}
    CodeInterpreterProxy none
</Location>
<Location /cloud/v1/responses>
    ProxyPass http://127.0.0.1:9/v1/responses
    CodeInterpreter cloud
</Location>
<Location /off/v1/responses>
    CodeInterpreter Off
</Location>
"""
    os.makedirs(root, exist_ok=True)
    with open(key_file, "w") as f:
        f.write("e2b_test_key\n")
    with open(ca_file, "w") as f:
        f.write("")
    server, r = configtest(request, conf, env={key_var: "e2b_test_key"})
    assert server.root == root
    assert_passes(r)


# ------------------------------------------------------------- containers

@pytest.mark.parametrize("value", ["20", "0m", "2d", "31d"])
def test_bad_idle(request, value):
    line = "CodeInterpreterSandbox s provider=local idle=%s" % value
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: idle: '%s' is not a valid duration: "
                        "expected a whole number of seconds, minutes or hours (30s, 20m, "
                        "1h) up to 2592000 s" % value)


def test_idle_beyond_max_idle(request):
    line = "CodeInterpreterSandbox s provider=local idle=2h max_idle=1h"
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line,
                        "CodeInterpreterSandbox s: idle=7200 s exceeds max_idle=3600 s: "
                        "the default expiry must be one a client could ask for")


def test_container_settings_accepted(request):
    server, r = configtest(request, "\n".join([
        "CodeInterpreterSandbox s provider=local idle=30s max_idle=2h retention=10m",
        "CodeInterpreterMaxContainersPerOwner 0",
        "<Location /v1/containers>", "  CodeInterpreterContainers On", "</Location>"]))
    assert_passes(r)


def test_bad_containers_switch(request):
    line = "  CodeInterpreterContainers maybe"
    server, r = configtest(request, "\n".join(["<Location /v1/containers>", line,
                                               "</Location>"]))
    assert_syntax_error(server, r, line.strip(),
                        "CodeInterpreterContainers: 'maybe' is not valid: expected on or "
                        "off")


@pytest.mark.parametrize("value,message", [
    ("2g:1G", "tiers: '2g:1G' is not valid: expected NAME:VALUE with NAME one of 1g, "
              "4g, 16g, 64g"),
    ("4g:1G,4g:2G", "tiers: 4g is named twice"),
    ("4g:lots", "tiers: 4g: 'lots' is not a valid size: expected a positive number of "
                "bytes, optionally with K, M or G, at most 1099511627776 bytes"),
])
def test_bad_tiers(request, value, message):
    line = "CodeInterpreterSandbox s provider=local tiers=%s" % value
    server, r = configtest(request, line)
    assert_syntax_error(server, r, line, "CodeInterpreterSandbox s: " + message)


def test_memory_budget_and_tiers_accepted(request):
    server, r = configtest(request, "\n".join([
        "CodeInterpreterSandbox s provider=local tiers=1g:768M,4g:3G",
        "CodeInterpreterMemoryBudget 8G"]))
    assert_passes(r)
