"""Installation: "make install DESTDIR=..." (through apxs) puts the module where
Debian's httpd loads it from, and the Debian package (it takes a minute or
two: run under CI=true, or with CI_TEST_DEB=1) builds from a clean tree and
holds a loadable module with its .load and .conf files.

Each test works on a copy of the tracked (and not ignored) files in a
temporary directory, so nothing is built inside the checkout."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import CI, HTTPD, MODDIR, TOP, require

MODULE_PATH = "usr/lib/apache2/modules/mod_code_interpreter.so"
# What another module builds against (test_provider_module.py builds one).
HEADER_PATHS = ["usr/include/apache2/" + h
                for h in ("ci_cfiles.h", "ci_declare.h", "ci_exec.h", "ci_provider.h",
                          "mod_code_interpreter.h")]
PACKAGE = "libapache2-mod-code-interpreter"
DROPIN = "lib/systemd/system/apache2.service.d/code-interpreter.conf"
BUILD_TIMEOUT = 900


@pytest.fixture(scope="module", autouse=True)
def prerequisites():
    require(os.geteuid() == 0, "installation tests run as root")
    require(shutil.which("dpkg-buildpackage") is not None,
            "dpkg-buildpackage is missing (apt-get install dpkg-dev)")
    require(shutil.which("git") is not None and git_toplevel() == os.path.realpath(TOP),
            "%s is not a git checkout (or git is missing): the files to copy are unknown"
            % TOP)


def git_toplevel():
    """The top of the git work tree holding TOP (a clone or a worktree), or None."""
    r = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=TOP,
                       capture_output=True, text=True)
    return os.path.realpath(r.stdout.strip()) if r.returncode == 0 else None


def run(cmd, cwd, **kw):
    """Run a command; fail the test with its output if it fails."""
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT, **kw)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(cmd), r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return r


def copy_tree(dest):
    """Copy the files a clone would hold (plus new, not ignored ones) to dest."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=TOP, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        try:
            shutil.copy2(os.path.join(TOP, rel), os.path.join(dest, rel))
        except (FileNotFoundError, IsADirectoryError):
            pass  # deleted (or replaced) since it was listed
    return dest


def configtest_with(root, load_lines, extra=""):
    """httpd -t, and its module list, on a minimal server root that loads the
    module with load_lines."""
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    conf = os.path.join(root, "httpd.conf")
    with open(conf, "w") as f:
        f.write(f"""ServerRoot "{root}"
ServerName 127.0.0.1
Listen 127.0.0.1:9
PidFile "{root}/httpd.pid"
DefaultRuntimeDir "{root}"
ErrorLog "{root}/logs/error_log"
LoadModule mpm_event_module {MODDIR}/mod_mpm_event.so
LoadModule authz_core_module {MODDIR}/mod_authz_core.so
LoadModule proxy_module {MODDIR}/mod_proxy.so
LoadModule proxy_http_module {MODDIR}/mod_proxy_http.so
{load_lines}
{extra}
""")
    base = [HTTPD, "-d", root, "-f", conf, "-t"]
    return (subprocess.run(base, capture_output=True, text=True),
            subprocess.run(base + ["-D", "DUMP_MODULES"], capture_output=True, text=True))


def assert_loaded(results):
    check, modules = results
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Syntax OK" in check.stderr.splitlines(), check.stderr
    assert modules.returncode == 0, modules.stdout + modules.stderr
    assert " code_interpreter_module (shared)" in modules.stdout.splitlines(), modules.stdout


SAMPLE_USE = """
<Location /v1/responses>
    ProxyPass http://127.0.0.1:9/v1/responses
    CodeInterpreter On
</Location>
"""


# ------------------------------------------------------------- make install

@pytest.fixture(scope="module")
def built():
    """A configured and built copy of the tree: (work directory, source tree)."""
    work = tempfile.mkdtemp(prefix="ci-install-")
    try:
        src = copy_tree(os.path.join(work, "src"))
        run(["./autogen.sh"], src)
        run(["./configure", "--with-apxs=" + (shutil.which("apxs") or "/usr/bin/apxs")],
            src)
        run(["make", "-j%d" % (os.cpu_count() or 2)], src)
        yield work, src
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_make_install_destdir_into_empty_directory(built):
    work, src = built
    dest = os.path.join(work, "dest-empty")
    r = subprocess.run(["make", "install", "DESTDIR=" + dest], cwd=src,
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert os.path.isfile(os.path.join(dest, MODULE_PATH))


def test_make_install_destdir_puts_a_loadable_module(built):
    work, src = built
    dest = os.path.join(work, "dest")
    os.makedirs(os.path.join(dest, os.path.dirname(MODULE_PATH)))
    run(["make", "install", "DESTDIR=" + dest], src)
    so = os.path.join(dest, MODULE_PATH)
    assert os.path.isfile(so)
    # Nothing is installed but the module and its public headers.
    installed = [os.path.relpath(os.path.join(d, f), dest)
                 for d, _, files in os.walk(dest) for f in files]
    assert sorted(installed) == sorted([MODULE_PATH] + HEADER_PATHS)
    # It does not point back into the build tree.
    dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True)
    if dyn.returncode == 0:
        assert work not in dyn.stdout, dyn.stdout
    root = os.path.join(work, "root-make")
    assert_loaded(configtest_with(
        root, "LoadModule code_interpreter_module %s" % so, SAMPLE_USE))


# ------------------------------------------------------------ Debian package

@pytest.mark.skipif(not CI and os.environ.get("CI_TEST_DEB") != "1",
                    reason="building the Debian package takes a minute or two: "
                           "it runs under CI=true, or with CI_TEST_DEB=1")
def test_debian_package():
    work = tempfile.mkdtemp(prefix="ci-deb-")
    try:
        src = copy_tree(os.path.join(work, "mod-code-interpreter"))
        # A distribution's build, which runs the unit tests (dh_auto_test):
        # CI=true is not its business.
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        run(["dpkg-buildpackage", "-us", "-uc", "-b"], src, env=env)
        debs = [f for f in os.listdir(work)
                if f.startswith(PACKAGE + "_") and f.endswith(".deb")]
        assert len(debs) == 1, os.listdir(work)
        deb = os.path.join(work, debs[0])

        def field(name):
            return run(["dpkg-deb", "-f", deb, name], work).stdout.strip()

        assert field("Package") == PACKAGE
        assert field("Section") == "httpd"
        depends = [d.strip() for d in field("Depends").split(",")]
        for dep in ("bubblewrap", "python3"):
            assert dep in depends, depends
        assert any(d.startswith("apache2-api-") for d in depends), depends
        assert any(d.startswith("libjson-c") for d in depends), depends
        assert any(d.startswith("libcurl") for d in depends), depends
        assert [d.strip() for d in field("Recommends").split(",")] == [
            "python3-numpy", "python3-pandas", "python3-matplotlib"]

        listing = run(["dpkg-deb", "-c", deb], work).stdout
        for path in ["./" + MODULE_PATH] + ["./" + h for h in HEADER_PATHS] + [
                     "./etc/apache2/mods-available/code_interpreter.load",
                     "./etc/apache2/mods-available/code_interpreter.conf",
                     "./usr/share/doc/%s/copyright" % PACKAGE,
                     "./usr/share/doc/%s/CONFIGURATION.md" % PACKAGE,
                     "./" + DROPIN]:
            assert path in listing, listing

        control = os.path.join(work, "control")
        run(["dpkg-deb", "-e", deb, control], work)
        with open(os.path.join(control, "conffiles")) as f:
            assert f.read().split() == [
                "/etc/apache2/mods-available/code_interpreter.conf",
                "/etc/apache2/mods-available/code_interpreter.load"]
        # Removing the package disables the module.
        for script in ("prerm", "postrm"):
            with open(os.path.join(control, script)) as f:
                assert "apache2_invoke dismod" in f.read()

        tree = os.path.join(work, "tree")
        run(["dpkg-deb", "-x", deb, tree], work)
        # apache2's cgroup delegated to httpd, for the sandboxes' cgroups
        with open(os.path.join(tree, DROPIN)) as f:
            assert [l for l in f.read().splitlines() if l and not l.startswith("#")] == [
                "[Service]", "Delegate=cpu memory pids"]
        mods = os.path.join(tree, "etc/apache2/mods-available")
        with open(os.path.join(mods, "code_interpreter.load")) as f:
            load = f.read()
        assert "# Depends: proxy proxy_http" in load.splitlines()
        assert ("LoadModule code_interpreter_module /" + MODULE_PATH) in load.splitlines()
        # The packaged .load and .conf, pointed at the extracted module, pass configtest.
        load = load.replace("/" + MODULE_PATH, os.path.join(tree, MODULE_PATH))
        with open(os.path.join(mods, "code_interpreter.conf")) as f:
            packaged_conf = f.read()
        assert_loaded(configtest_with(os.path.join(work, "root-deb"), load,
                                      packaged_conf + SAMPLE_USE))
    finally:
        shutil.rmtree(work, ignore_errors=True)
