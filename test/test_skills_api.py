"""OpenAI's Skills API as the module serves it (CodeInterpreterSkills On,
CodeInterpreterSkillStore): what it proves, against a real httpd of this
module's own, over plain HTTP (http.client, multipart bodies built here):

  - uploads: a folder's files (parts "files[]", each filename its path with
    the folder), one zip (part "files"), and a lone "files[]" part that is a
    zip, all give the same skill object, named and described by SKILL.md's
    front matter; the same folder gives the same content address whichever
    way it came;
  - the objects are exactly OpenAI's (skill, skill.version, list, deleted),
    checked value by value and against the published OpenAPI document;
  - listing and paging (limit, order, after) of skills and of versions,
    newest first by default, each caller seeing only its own;
  - versions: created (as default or not), retrieved by number and as
    "latest", downloaded, made the default, deleted under OpenAI's rules
    (not the default while others remain; the last one takes the skill);
  - the content routes send the bundle as a zip: the uploaded names (with
    their folder, sorted) and bytes, the same bytes each time and as stored;
  - refusals are exact (status, type, param, code, message): hostile paths,
    a missing or doubled SKILL.md, bad front matter, a symbolic link, zip
    bombs (honest or lying headers), too many files, the wrong body or
    parts; and a refused upload stores nothing;
  - the store on disk: a bundle is <store>/<2 hex>/<digest>.zip and
    <store>/<2 hex>/<digest>/ (the folder's files), kept once for every
    skill naming it and removed with the last version that names it;
  - another caller's skill reads as unknown on every route; a request
    without credentials is refused; wrong methods and unknown paths are
    answered in OpenAI's error shape;
  - the records survive a full restart (stop, start) of the server;
  - the official OpenAI Node SDK (client.skills) drives the whole API
    (test/node/skills_api.mjs).
"""
import base64
import hashlib
import io
import json
import os
import re
import time
import warnings
import zipfile

import pytest

from conftest import OPENAPI, SPEC_DIR, Httpd, count_schema_checks, require_spec
from test_node_sdk import clients, node_script, steps_report  # noqa: F401 (a fixture)

# ---------------------------------------------------------------- the server

SKILLS_CONF = """
CodeInterpreterSkillStore skills
<Location /v1>
  CodeInterpreterSkills On
</Location>
"""

BOUNDARY = "ci-skills-test-7d3f0a91"
SKILL_ID = re.compile(r"skill_[0-9a-f]{32}")
VERSION_ID = re.compile(r"skillver_[0-9a-f]{32}")
SKILL_KEYS = {"id", "object", "name", "description", "created_at", "default_version",
              "latest_version"}
VERSION_KEYS = {"id", "object", "skill_id", "version", "created_at", "name", "description"}
MAX_FILE = 25 * 1024 * 1024


def skills_server(name):
    return Httpd(name, SKILLS_CONF)


@pytest.fixture(scope="module")
def server():
    """A server of this module's own: only the Skills API (and the suite's
    own locations)."""
    s = skills_server("skills").start()
    yield s
    s.stop()


@pytest.fixture
def me(request):
    """A caller of this test's own: its listings hold only its skills."""
    return {"Authorization": "Bearer sk-skills-" + re.sub(r"\W", "-", request.node.name)}


@pytest.fixture
def other(request):
    """A second caller of this test's own."""
    return {"Authorization": "Bearer sk-other-" + re.sub(r"\W", "-", request.node.name)}


# ---------------------------------------------------------------- bodies

def skill_md(name="basic-math", description="Adds numbers.", body="# Basic math\n"):
    return ("---\nname: %s\ndescription: %s\n---\n%s" % (name, description, body)).encode()


# OpenAI's own example: folder basic_math, skill "basic-math".
BASIC = {
    "basic_math/SKILL.md": skill_md(),
    "basic_math/scripts/add.py": b"import sys\nprint(sum(int(a) for a in sys.argv[1:]))\n",
}
# A second version of it.
BASIC_V2 = {
    "basic_math/SKILL.md": skill_md(description="Adds and subtracts numbers."),
    "basic_math/scripts/add.py": BASIC["basic_math/scripts/add.py"],
    "basic_math/scripts/sub.py": b"import sys\nprint(int(sys.argv[1]) - int(sys.argv[2]))\n",
}


def other_skill(tag):
    """A small skill of its own (a bundle no other test uploads)."""
    return {"%s/SKILL.md" % tag: skill_md(name=tag.replace("_", "-"),
                                         description="Skill %s." % tag),
            "%s/notes.txt" % tag: ("notes of %s\n" % tag).encode()}


def part(name, data, filename=None, content_type="application/octet-stream"):
    return (name, filename, data, content_type if filename is not None else None)


def multipart(parts):
    """The multipart/form-data body of PARTS ((name, filename, data,
    content type) each) and its Content-Type."""
    out = io.BytesIO()
    for name, filename, data, ctype in parts:
        out.write(b"--" + BOUNDARY.encode() + b"\r\n")
        disp = 'form-data; name="%s"' % name
        if filename is not None:
            disp += '; filename="%s"' % filename.replace('"', "%22")
        out.write(b"Content-Disposition: " + disp.encode() + b"\r\n")
        if ctype:
            out.write(b"Content-Type: " + ctype.encode() + b"\r\n")
        out.write(b"\r\n" + data + b"\r\n")
    out.write(b"--" + BOUNDARY.encode() + b"--\r\n")
    return out.getvalue(), "multipart/form-data; boundary=" + BOUNDARY


def folder_parts(files):
    """A folder's files as the SDKs send a directory: one "files[]" part
    each, its filename the path with the folder."""
    return [part("files[]", data, filename=path) for path, data in files.items()]


def zip_of(files):
    """FILES ({path: bytes}) as a zip, deflated, in their order."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return out.getvalue()


def zip_part(files, filename="skill.zip"):
    return part("files", zip_of(files), filename=filename, content_type="application/zip")


def unzipped(data):
    """{name: bytes} of the zip DATA, and its names in order."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        return {n: z.read(n) for n in names}, names


def digest_of(files):
    """The content address the store files FILES under (ci_skill_bundle.h):
    SHA-256 of "ci-skill-1\\0", the folder, "\\0", then per file (sorted by
    path inside the folder) its path, "\\0", its length (8 bytes, big-endian)
    and its bytes."""
    folder = next(iter(files)).split("/", 1)[0]
    h = hashlib.sha256(b"ci-skill-1\0" + folder.encode() + b"\0")
    for rel, data in sorted((p.split("/", 1)[1].encode(), d) for p, d in files.items()):
        h.update(rel + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


# ---------------------------------------------------------------- requests

def call(server, method, path, headers, body=None, content_type=None):
    """(status, {lower-case header: value}, body: parsed JSON or bytes)."""
    hdrs = dict(headers)
    if content_type:
        hdrs["Content-Type"] = content_type
    status, got, data = server.request(method, path, body, hdrs)
    got = {k.lower(): v for k, v in got}
    if got.get("content-type", "").startswith("application/json"):
        data = json.loads(data)
    return status, got, data


def api(server, method, path, headers, body=None):
    """A JSON call: (status, parsed body)."""
    status, _, data = call(server, method, path, headers, body)
    return status, data


def upload(server, path, parts, headers):
    body, ctype = multipart(parts)
    status, _, data = call(server, "POST", path, headers, body, ctype)
    return status, data


def create(server, files, headers, as_zip=False):
    """A skill of FILES, created: its object (checked)."""
    t0 = int(time.time())
    status, sk = upload(server, "/v1/skills", [zip_part(files)] if as_zip
                        else folder_parts(files), headers)
    t1 = int(time.time())
    assert status == 200, sk
    assert set(sk) == SKILL_KEYS, sk
    assert SKILL_ID.fullmatch(sk["id"]) and t0 <= sk["created_at"] <= t1, sk
    return sk


def add_version(server, sid, files, headers, default=None):
    parts = folder_parts(files)
    if default is not None:
        parts.append(part("default", default.encode()))
    t0 = int(time.time())
    status, v = upload(server, "/v1/skills/%s/versions" % sid, parts, headers)
    t1 = int(time.time())
    assert status == 200, v
    assert set(v) == VERSION_KEYS, v
    assert VERSION_ID.fullmatch(v["id"]) and t0 <= v["created_at"] <= t1, v
    return v


def skill(sk, name="basic-math", description="Adds numbers.", default="1", latest="1"):
    """The skill object SK should be (its id and time as it has them)."""
    return {"id": sk["id"], "object": "skill", "name": name, "description": description,
            "created_at": sk["created_at"], "default_version": default,
            "latest_version": latest}


def version(v, sid, number, name="basic-math", description="Adds numbers."):
    return {"id": v["id"], "object": "skill.version", "skill_id": sid, "version": number,
            "created_at": v["created_at"], "name": name, "description": description}


def listing(items):
    return {"object": "list", "data": items,
            "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None,
            "has_more": False}


def page(items, has_more):
    return dict(listing(items), has_more=has_more)


def error(message, param=None, code=None, type_="invalid_request_error"):
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def not_found(sid):
    return error("Skill with id '%s' not found." % sid, code="skill_not_found")


def no_version(sid, n):
    return error("Skill '%s' has no version '%s'." % (sid, n), param="version",
                 code="skill_version_not_found")


def refused(message, param="files"):
    return error(message, param=param)


def content(server, path, headers):
    """The zip at PATH: ({name: bytes}, names in order, raw bytes)."""
    status, hdrs, data = call(server, "GET", path, headers)
    assert status == 200, data
    assert hdrs["content-type"] == "application/zip", hdrs
    files, names = unzipped(data)
    return files, names, data, hdrs


# ---------------------------------------------------------------- the store

def store_of(server):
    return os.path.join(server.root, "skills")


def records_of(server):
    """skills.json's bytes, or None."""
    try:
        with open(os.path.join(store_of(server), "skills.json"), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def store_entries(server):
    """Every path under the store but its records, relative to it ("/" at
    the end of a folder)."""
    root = store_of(server)
    out = set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for n in dirs:
            out.add(os.path.normpath(os.path.join(rel, n)) + "/")
        for n in files:
            path = os.path.normpath(os.path.join(rel, n))
            if not path.startswith("skills.json"):
                out.add(path)
    return out


def bundle_entries(files):
    """What the store holds for the bundle of FILES: its zip, and its tree
    (the folder's files, without the folder)."""
    d = digest_of(files)
    shard = d[:2] + "/"
    out = {shard, shard + d + ".zip", shard + d + "/"}
    for path in files:
        rel = path.split("/", 1)[1].split("/")
        for i in range(1, len(rel)):
            out.add(shard + d + "/" + "/".join(rel[:i]) + "/")
        out.add(shard + d + "/" + "/".join(rel))
    return out


def stored(server, files):
    """Whether the store holds the bundle of FILES: both its zip and its
    tree, the tree's files byte for byte; False when neither is there."""
    d = digest_of(files)
    base = os.path.join(store_of(server), d[:2], d)
    there = [os.path.exists(base + ".zip"), os.path.isdir(base)]
    if there == [False, False]:
        return False
    assert there == [True, True], "half a bundle in the store: %s" % there
    tree = d[:2] + "/" + d + "/"
    assert {e for e in store_entries(server) if e.startswith(tree)} == {
        e for e in bundle_entries(files) if e.startswith(tree)}
    for path, data in files.items():
        with open(os.path.join(base, path.split("/", 1)[1]), "rb") as f:
            assert f.read() == data, path
    return True


def stored_zip(server, files):
    d = digest_of(files)
    with open(os.path.join(store_of(server), d[:2], d + ".zip"), "rb") as f:
        return f.read()


# ---------------------------------------------------------------- the schema

_OPENAPI_DOC = {}


def schema_errors(name, value):
    """The ways VALUE fails the OpenAPI document's schema NAME (counted as a
    schema check)."""
    require_spec(OPENAPI)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from jsonschema import Draft202012Validator, RefResolver
        if "doc" not in _OPENAPI_DOC:
            with open(OPENAPI) as f:
                _OPENAPI_DOC["doc"] = json.load(f)
        validator = Draft202012Validator({"$ref": "#/components/schemas/" + name},
                                         resolver=RefResolver.from_schema(_OPENAPI_DOC["doc"]))
        count_schema_checks(1)
        return [e.message for e in validator.iter_errors(value)]


# ================================================================ creating

def test_create_from_a_folders_files(server, me):
    sk = create(server, BASIC, me)
    assert sk == skill(sk)
    assert schema_errors("SkillResource", sk) == []
    assert api(server, "GET", "/v1/skills/" + sk["id"], me) == (200, sk)
    assert stored(server, BASIC)


def test_create_from_a_zip(server, me):
    files = other_skill("zipped_skill")
    sk = create(server, files, me, as_zip=True)
    assert sk == skill(sk, name="zipped-skill", description="Skill zipped_skill.")
    assert api(server, "GET", "/v1/skills/" + sk["id"], me) == (200, sk)
    assert stored(server, files)


def test_a_lone_files_array_part_that_is_a_zip_is_the_zip(server, me):
    """As the Python SDK sends files=[open("skill.zip")]: one "files[]"
    part, a zip, named without a folder."""
    files = other_skill("lone_zip")
    status, sk = upload(server, "/v1/skills", [
        part("files[]", zip_of(files), filename="lone_zip.zip",
             content_type="application/zip")], me)
    assert status == 200, sk
    assert sk == skill(sk, name="lone-zip", description="Skill lone_zip.")
    got, names, _, _ = content(server, "/v1/skills/%s/content" % sk["id"], me)
    assert got == files


def test_one_folder_is_one_bundle_whichever_way_it_comes(server, me):
    """The folder's files and the same folder zipped (its entries in
    another order, with a folder entry) are one content address: stored
    once, downloaded as the same bytes."""
    files = other_skill("either_way")
    before = store_entries(server)
    a = create(server, files, me)
    reordered = dict(reversed(list(files.items())))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("either_way/", b"")
        for path, data in reordered.items():
            z.writestr(path, data)
    status, b = upload(server, "/v1/skills", [
        part("files", out.getvalue(), filename="either_way.zip")], me)
    assert status == 200, b
    assert a["id"] != b["id"]
    assert store_entries(server) - before == bundle_entries(files) - before
    za = content(server, "/v1/skills/%s/content" % a["id"], me)[2]
    zb = content(server, "/v1/skills/%s/content" % b["id"], me)[2]
    assert za == zb == stored_zip(server, files)


def test_front_matter_quoted_and_block_values(server, me):
    md = (b"---\n# a comment\nname: 'quoted-name'\ndescription: >\n  Folded over\n"
          b"  two lines.\nmetadata:\n  owner: someone\n---\nBody.\n")
    sk = create(server, {"fm/SKILL.md": md}, me)
    assert sk == skill(sk, name="quoted-name", description="Folded over two lines.\n")


# ================================================================ content

def test_content_is_the_uploaded_folder_as_a_zip(server, me):
    files = dict(BASIC, **{"basic_math/data/b.csv": b"1,2\n", "basic_math/A.txt": b"A\n"})
    sk = create(server, files, me)
    got, names, data, hdrs = content(server, "/v1/skills/%s/content" % sk["id"], me)
    assert got == files
    # folder/path, sorted by the path's bytes; files only
    assert names == ["basic_math/A.txt", "basic_math/SKILL.md", "basic_math/data/b.csv",
                     "basic_math/scripts/add.py"]
    assert hdrs["content-disposition"] == 'attachment; filename="%s.zip"' % sk["id"]
    assert int(hdrs["content-length"]) == len(data)
    # the same bytes each time, and as stored
    assert content(server, "/v1/skills/%s/content" % sk["id"], me)[2] == data
    assert stored_zip(server, files) == data
    # version 1's own route
    assert content(server, "/v1/skills/%s/versions/1/content" % sk["id"], me)[2] == data


# ================================================================ listing

def test_list_is_the_callers_newest_first_and_pages(server, me, other):
    empty = api(server, "GET", "/v1/skills", me)
    assert empty == (200, listing([]))
    made = [create(server, other_skill("listed_%d" % i), me) for i in range(3)]
    theirs = create(server, other_skill("listed_other"), other)
    newest = list(reversed(made))

    status, all_ = api(server, "GET", "/v1/skills", me)
    assert (status, all_) == (200, listing(newest))
    assert schema_errors("SkillListResource", all_) == []
    assert api(server, "GET", "/v1/skills?order=asc", me) == (200, listing(made))
    assert api(server, "GET", "/v1/skills?order=desc", me) == (200, listing(newest))

    # paging: limit, then after the last one seen
    assert api(server, "GET", "/v1/skills?limit=2", me) == (200, page(newest[:2], True))
    assert api(server, "GET", "/v1/skills?limit=2&after=" + newest[1]["id"], me) == (
        200, page(newest[2:], False))
    assert api(server, "GET", "/v1/skills?limit=1&order=asc&after=" + made[0]["id"], me) == (
        200, page(made[1:2], True))
    # after an id the caller does not have: nothing
    assert api(server, "GET", "/v1/skills?after=" + theirs["id"], me) == (200, listing([]))

    # the other caller sees its one skill only
    assert api(server, "GET", "/v1/skills", other) == (200, listing([theirs]))


def test_list_parameters_are_checked(server, me):
    assert api(server, "GET", "/v1/skills?limit=0", me) == (400, error(
        "Invalid 'limit': expected an integer from 1 to 100.", param="limit",
        code="integer_out_of_range"))
    assert api(server, "GET", "/v1/skills?limit=101", me)[0] == 400
    assert api(server, "GET", "/v1/skills?order=sideways", me) == (400, error(
        "Invalid 'order': expected 'asc' or 'desc'.", param="order", code="invalid_value"))
    assert api(server, "GET", "/v1/skills?limit=100", me) == (200, listing([]))


def test_any_path_ending_in_skills_under_the_location(server, me):
    """The API is what follows the path's last /skills segment."""
    sk = create(server, other_skill("deep_path"), me)
    assert api(server, "GET", "/v1/org/team/skills/" + sk["id"], me) == (200, sk)
    assert api(server, "GET", "/v1/org/skills", me) == (200, listing([sk]))


def test_not_served_outside_the_location(server, me):
    status, hdrs, _ = call(server, "GET", "/elsewhere/skills", me)
    assert status == 404
    assert not hdrs.get("content-type", "").startswith("application/json"), hdrs


# ================================================================ versions

def test_versions_created_listed_retrieved_and_downloaded(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    v2 = add_version(server, sid, BASIC_V2, me)
    assert v2 == version(v2, sid, "2", description="Adds and subtracts numbers.")
    assert schema_errors("SkillVersionResource", v2) == []

    # the latest moved; the default (and so the skill's name and
    # description, and its content) did not
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(sk, latest="2"))
    assert content(server, "/v1/skills/%s/content" % sid, me)[0] == BASIC
    assert content(server, "/v1/skills/%s/versions/2/content" % sid, me)[0] == BASIC_V2
    assert content(server, "/v1/skills/%s/versions/1/content" % sid, me)[0] == BASIC

    status, versions = api(server, "GET", "/v1/skills/%s/versions" % sid, me)
    assert status == 200, versions
    v1 = versions["data"][1]
    assert v1 == version(v1, sid, "1")
    assert v1["created_at"] == sk["created_at"] and v1["id"] != v2["id"]
    assert versions == listing([v2, v1])
    assert schema_errors("SkillVersionListResource", versions) == []

    assert api(server, "GET", "/v1/skills/%s/versions/1" % sid, me) == (200, v1)
    assert api(server, "GET", "/v1/skills/%s/versions/2" % sid, me) == (200, v2)
    assert api(server, "GET", "/v1/skills/%s/versions/latest" % sid, me) == (200, v2)

    # paging by version, newest first unless asked; after is a version's id
    base = "/v1/skills/%s/versions" % sid
    assert api(server, "GET", base + "?order=asc", me) == (200, listing([v1, v2]))
    assert api(server, "GET", base + "?limit=1", me) == (200, page([v2], True))
    assert api(server, "GET", base + "?limit=1&after=" + v2["id"], me) == (
        200, page([v1], False))
    assert api(server, "GET", base + "?order=asc&after=" + v1["id"], me) == (
        200, listing([v2]))


def test_unknown_versions(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    assert api(server, "GET", "/v1/skills/%s/versions/7" % sid, me) == (404, no_version(sid, 7))
    assert api(server, "GET", "/v1/skills/%s/versions/7/content" % sid, me) == (
        404, no_version(sid, 7))
    assert api(server, "DELETE", "/v1/skills/%s/versions/7" % sid, me) == (
        404, no_version(sid, 7))
    assert api(server, "GET", "/v1/skills/%s/versions/first" % sid, me) == (400, error(
        "'first' is not a version: expected a version number, or \"latest\" to retrieve "
        "the newest.", param="version", code="invalid_version"))


def test_a_version_created_as_the_default(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    v2 = add_version(server, sid, BASIC_V2, me, default="true")
    assert v2 == version(v2, sid, "2", description="Adds and subtracts numbers.")
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(
        sk, description="Adds and subtracts numbers.", default="2", latest="2"))
    assert content(server, "/v1/skills/%s/content" % sid, me)[0] == BASIC_V2
    # "false" is the same as leaving it out
    v3 = add_version(server, sid, BASIC, me, default="false")
    assert v3["version"] == "3"
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(
        sk, description="Adds and subtracts numbers.", default="2", latest="3"))


def test_the_default_version_is_set(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    add_version(server, sid, BASIC_V2, me)
    status, got = api(server, "POST", "/v1/skills/" + sid, me, {"default_version": 2})
    assert (status, got) == (200, skill(sk, description="Adds and subtracts numbers.",
                                        default="2", latest="2"))
    assert schema_errors("SkillResource", got) == []
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, got)
    assert content(server, "/v1/skills/%s/content" % sid, me)[0] == BASIC_V2
    # as text, as the SDKs type it
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": "1"}) == (
        200, skill(sk, default="1", latest="2"))
    assert content(server, "/v1/skills/%s/content" % sid, me)[0] == BASIC


def test_setting_the_default_version_is_checked(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    missing = error("Missing required parameter: 'default_version' (a version number).",
                    param="default_version")
    assert api(server, "POST", "/v1/skills/" + sid, me, {}) == (400, missing)
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": None}) == (
        400, missing)
    assert api(server, "POST", "/v1/skills/" + sid, me, "not json") == (400, missing)
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": 9}) == (
        404, no_version(sid, 9))
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": "9"}) == (
        404, no_version(sid, 9))
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": "two"}) == (
        400, error("'two' is not a version: expected a version number, or \"latest\" to "
                   "retrieve the newest.", param="version", code="invalid_version"))
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, sk)


# ================================================================ deleting

def test_delete_a_skill(server, me):
    files = other_skill("deleted_skill")
    sk = create(server, files, me)
    sid = sk["id"]
    add_version(server, sid, BASIC_V2, me)
    status, gone = api(server, "DELETE", "/v1/skills/" + sid, me)
    assert (status, gone) == (200, {"id": sid, "object": "skill.deleted", "deleted": True})
    assert schema_errors("DeletedSkillResource", gone) == []
    for method, path in (("GET", ""), ("GET", "/content"), ("GET", "/versions"),
                         ("GET", "/versions/1"), ("GET", "/versions/2/content"),
                         ("DELETE", "")):
        assert api(server, method, "/v1/skills/" + sid + path, me) == (404, not_found(sid))
    assert api(server, "GET", "/v1/skills", me) == (200, listing([]))
    # its own bundle went with it
    assert not stored(server, files)


def test_delete_versions(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    v2 = add_version(server, sid, BASIC_V2, me)
    v3 = add_version(server, sid, other_skill("third_version"), me)

    # not the default while others remain
    assert api(server, "DELETE", "/v1/skills/%s/versions/1" % sid, me) == (400, error(
        "Version 1 is the default version of skill '%s': set another default version "
        "before deleting it." % sid, param="version", code="default_version"))

    # the latest: latest falls back to the newest left
    status, gone = api(server, "DELETE", "/v1/skills/%s/versions/3" % sid, me)
    assert (status, gone) == (200, {"id": v3["id"], "object": "skill.version.deleted",
                                    "deleted": True, "version": "3"})
    assert schema_errors("DeletedSkillVersionResource", gone) == []
    assert api(server, "GET", "/v1/skills/%s/versions/3" % sid, me) == (404, no_version(sid, 3))
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(sk, latest="2"))
    assert api(server, "GET", "/v1/skills/%s/versions/latest" % sid, me) == (200, v2)
    # a deleted number is not given again
    v4 = add_version(server, sid, other_skill("fourth_version"), me)
    assert v4["version"] == "4"

    # the default moved to 2: version 1 may go, and then 4
    api(server, "POST", "/v1/skills/" + sid, me, {"default_version": 2})
    assert api(server, "DELETE", "/v1/skills/%s/versions/1" % sid, me)[1]["version"] == "1"
    assert api(server, "DELETE", "/v1/skills/%s/versions/4" % sid, me)[1]["version"] == "4"
    status, versions = api(server, "GET", "/v1/skills/%s/versions" % sid, me)
    assert versions == listing([v2])
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(
        sk, description="Adds and subtracts numbers.", default="2", latest="2"))

    # the last version, default or not, takes the skill with it
    status, gone = api(server, "DELETE", "/v1/skills/%s/versions/2" % sid, me)
    assert (status, gone) == (200, {"id": v2["id"], "object": "skill.version.deleted",
                                    "deleted": True, "version": "2"})
    assert api(server, "GET", "/v1/skills/" + sid, me) == (404, not_found(sid))
    assert api(server, "GET", "/v1/skills", me) == (200, listing([]))


# ================================================================ the store

def test_a_bundle_is_stored_once_and_removed_with_its_last_name(server, me, other):
    files = other_skill("shared_bundle")
    before = store_entries(server)
    a = create(server, files, me)
    b = create(server, files, other)
    # one bundle for both
    assert store_entries(server) - before == bundle_entries(files) - before
    assert stored(server, files)

    # A's goes: B still names it
    assert api(server, "DELETE", "/v1/skills/" + a["id"], me)[0] == 200
    assert stored(server, files)
    assert content(server, "/v1/skills/%s/content" % b["id"], other)[0] == files

    # B's goes: nothing names it
    assert api(server, "DELETE", "/v1/skills/" + b["id"], other)[0] == 200
    assert not stored(server, files)
    assert not (bundle_entries(files) - {digest_of(files)[:2] + "/"}) & store_entries(server)


def test_a_versions_bundle_goes_with_the_version(server, me):
    v1_files = other_skill("versioned_bundle")
    v2_files = dict(v1_files, **{"versioned_bundle/extra.txt": b"more\n"})
    sk = create(server, v1_files, me)
    add_version(server, sk["id"], v2_files, me)
    # the same bundle as version 1 again: one bundle named twice
    add_version(server, sk["id"], v1_files, me)
    assert stored(server, v1_files) and stored(server, v2_files)
    assert api(server, "DELETE", "/v1/skills/%s/versions/2" % sk["id"], me)[0] == 200
    assert not stored(server, v2_files)
    assert api(server, "DELETE", "/v1/skills/%s/versions/3" % sk["id"], me)[0] == 200
    assert stored(server, v1_files)       # version 1 still names it
    assert api(server, "DELETE", "/v1/skills/%s/versions/1" % sk["id"], me)[0] == 200
    assert not stored(server, v1_files)


# ================================================================ refusals

def bomb(lying=False):
    """A zip whose one file decompresses past 25 MB (a few kB compressed):
    by one byte, its headers saying so; or, LYING, by 4 MB, its headers
    (local and central) claiming 1000 bytes, so that only the bytes
    counted as they are decompressed can stop it. (Past the cap by more
    than a byte: libarchive itself refuses an entry longer than its claim,
    once it has decompressed all of it.)"""
    size = MAX_FILE + (4 * 1024 * 1024 if lying else 1)
    data = zip_of({"bomb/SKILL.md": skill_md(name="bomb"), "bomb/big.bin": b"\0" * size})
    if not lying:
        return data
    raw = bytearray(data)
    real = size.to_bytes(4, "little")
    fake = (1000).to_bytes(4, "little")
    # local header: uncompressed size at +22; central directory entry: at +24
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = raw.find(sig)
        while i >= 0:
            if raw[i + at:i + at + 4] == real:
                raw[i + at:i + at + 4] = fake
            i = raw.find(sig, i + 4)
    assert bytes(raw) != data
    return bytes(raw)


def symlink_zip():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("x/SKILL.md", skill_md(name="x"))
        link = zipfile.ZipInfo("x/a")
        link.create_system = 3
        link.external_attr = 0o120777 << 16
        z.writestr(link, "SKILL.md")
    return out.getvalue()


def files_parts(*paths_and_data):
    return [part("files[]", data, filename=path) for path, data in paths_and_data]


MD = skill_md()
UPLOAD_SHAPE = ("Upload one zip as 'files', or a folder's files as 'files[]', not both and "
                "not two zips.")

# (id, the parts, the refusal's message)
REFUSED_UPLOADS = [
    ("dot-dot", files_parts(("basic_math/SKILL.md", MD), ("basic_math/../evil", b"x")),  # check-clone: a path the upload refuses
     "Skill file 'basic_math/../evil' leaves the skill's folder."),  # check-clone: a path the upload refuses
    ("absolute", files_parts(("basic_math/SKILL.md", MD), ("/etc/passwd", b"x")),
     "Skill file '/etc/passwd' leaves the skill's folder."),
    ("dot-dot-in-zip", [part("files", zip_of({"basic_math/SKILL.md": MD,
                                              "basic_math/../../evil": b"x"}),  # check-clone: a path the upload refuses
                             filename="s.zip")],
     "Skill file 'basic_math/../../evil' leaves the skill's folder."),  # check-clone: a path the upload refuses
    ("empty-segment", files_parts(("basic_math/SKILL.md", MD), ("basic_math//a", b"x")),
     "Skill file 'basic_math//a' has an empty or '.' segment in its path."),
    ("backslash", files_parts(("basic_math/SKILL.md", MD), ("basic_math/a\\b.py", b"x")),
     "Skill file 'basic_math/a\\b.py' has a backslash in its name: separate folders "
     "with '/'."),
    ("top-level", files_parts(("SKILL.md", MD)),
     "Skill file 'SKILL.md' is at the top level: the skill's files must be inside one "
     "folder."),
    ("two-folders", files_parts(("a/SKILL.md", MD), ("b/x.py", b"x")),
     "Skill file 'b/x.py' is not in the skill's folder 'a': upload one folder."),
    ("no-manifest", files_parts(("basic_math/README.md", b"# hi\n")),
     "The skill has no SKILL.md at the top of its folder."),
    ("manifest-too-deep", files_parts(("basic_math/docs/SKILL.md", MD)),
     "The skill has no SKILL.md at the top of its folder."),
    ("two-manifests", files_parts(("basic_math/SKILL.md", MD), ("basic_math/Skill.MD", MD)),
     "The skill has two SKILL.md files: 'basic_math/SKILL.md' and 'basic_math/Skill.MD'."),
    ("twice", files_parts(("basic_math/SKILL.md", MD), ("basic_math/SKILL.md", MD)),
     "Skill file 'basic_math/SKILL.md' appears twice."),
    ("case", files_parts(("basic_math/SKILL.md", MD), ("basic_math/a.py", b"1"),
                         ("basic_math/A.py", b"2")),
     "Skill files 'basic_math/A.py' and 'basic_math/a.py' differ only in case."),
    ("no-front-matter", files_parts(("basic_math/SKILL.md", b"# Basic math\n")),
     "SKILL.md must begin with YAML front matter: a line '---'."),
    ("unclosed", files_parts(("basic_math/SKILL.md", b"---\nname: basic-math\n")),
     "SKILL.md's front matter has no closing '---' line."),
    ("no-name", files_parts(("basic_math/SKILL.md", b"---\ndescription: Adds.\n---\n")),
     "SKILL.md's front matter has no 'name'."),
    ("bad-name", files_parts(("basic_math/SKILL.md", skill_md(name="Basic_Math"))),
     "SKILL.md's 'name' must be 1 to 64 characters of a-z, 0-9 and '-', not starting or "
     "ending with '-' and without '--'."),
    ("no-description", files_parts(("basic_math/SKILL.md", b"---\nname: basic-math\n---\n")),
     "SKILL.md's front matter has no 'description'."),
    ("flow-yaml", files_parts(("basic_math/SKILL.md",
                               b"---\nname: basic-math\ndescription: [a, b]\n---\n")),
     "SKILL.md's front matter line 3 uses YAML that is not read here: use plain or quoted "
     "values, or a '>' or '|' block."),
    ("symlink", [part("files", symlink_zip(), filename="x.zip")],
     "Skill file 'x/a' is a symbolic link."),
    ("bomb", [part("files", bomb(), filename="bomb.zip")],
     "Skill file 'bomb/big.bin' is larger than 26214400 bytes."),
    ("lying-bomb", [part("files", bomb(lying=True), filename="bomb.zip")],
     "Skill file 'bomb/big.bin' is larger than 26214400 bytes."),
    ("not-a-zip", [part("files", b"this is not a zip", filename="skill.zip")],
     "The skill upload is not a zip archive."),
    ("too-many-files", files_parts(("many/SKILL.md", skill_md(name="many")),
                                   *[("many/f%03d.txt" % i, b"x") for i in range(500)]),
     "The skill has more than 500 files."),
    ("zip-and-files", [zip_part(BASIC)] + folder_parts(BASIC), UPLOAD_SHAPE),
    ("two-zips", [zip_part(BASIC), zip_part(BASIC)], UPLOAD_SHAPE),
    ("foo-part", [part("foo", b"bar")] + folder_parts(BASIC),
     "Unexpected part 'foo': a skill is uploaded as 'files' (one zip) or 'files[]' (a "
     "folder's files)."),
    ("files-without-filename", [part("files[]", MD)],
     "Unexpected part 'files[]': a skill is uploaded as 'files' (one zip) or 'files[]' "
     "(a folder's files)."),
    ("default-on-create", folder_parts(BASIC) + [part("default", b"true")],
     "Unexpected part 'default': a skill is uploaded as 'files' (one zip) or 'files[]' "
     "(a folder's files)."),
    ("no-parts", [], "The skill upload has no files."),
]


@pytest.mark.parametrize("parts,message", [r[1:] for r in REFUSED_UPLOADS],
                         ids=[r[0] for r in REFUSED_UPLOADS])
def test_refused_uploads_store_nothing(server, me, parts, message):
    before, records = store_entries(server), records_of(server)
    assert upload(server, "/v1/skills", parts, me) == (400, refused(message))
    assert store_entries(server) == before
    assert records_of(server) == records
    assert api(server, "GET", "/v1/skills", me) == (200, listing([]))


def test_a_file_part_past_25_mb_is_refused(server, me):
    before = store_entries(server)
    parts = files_parts(("basic_math/SKILL.md", MD),
                        ("basic_math/big.bin", b"\0" * (MAX_FILE + 1)))
    assert upload(server, "/v1/skills", parts, me) == (400, refused(
        "Skill file 'basic_math/big.bin' is larger than 26214400 bytes."))
    assert store_entries(server) == before


def test_a_body_that_is_not_multipart(server, me):
    not_multipart = refused("Upload a skill as multipart/form-data: 'files' (one zip) or "
                            "'files[]' (a folder's files).")
    assert api(server, "POST", "/v1/skills", me, {"files": "x"}) == (400, not_multipart)
    sk = create(server, BASIC, me)
    assert api(server, "POST", "/v1/skills/%s/versions" % sk["id"], me, {"files": "x"}) == (
        400, not_multipart)


def test_refused_version_uploads_change_nothing(server, me):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    before, records = store_entries(server), records_of(server)
    path = "/v1/skills/%s/versions" % sid
    for parts, message, param in (
            (folder_parts(BASIC_V2) + [part("default", b"maybe")],
             "'default' must be true or false.", "default"),
            (folder_parts(BASIC_V2) + [part("default", b"true"), part("default", b"true")],
             "'default' is given twice.", "default"),
            ([part("foo", b"bar")],
             "Unexpected part 'foo': a skill is uploaded as 'files' (one zip) or 'files[]' "
             "(a folder's files), with 'default'.", "files"),
            (files_parts(("basic_math/SKILL.md", MD), ("basic_math/../x", b"x")),  # check-clone: a path the upload refuses
             "Skill file 'basic_math/../x' leaves the skill's folder.", "files")):  # check-clone: a path the upload refuses
        assert upload(server, path, parts, me) == (400, refused(message, param))
    assert store_entries(server) == before
    assert records_of(server) == records
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, sk)
    status, versions = api(server, "GET", path, me)
    assert [v["version"] for v in versions["data"]] == ["1"]


# ================================================================ owners

def test_another_callers_skill_is_unknown(server, me, other):
    sk = create(server, BASIC, me)
    sid = sk["id"]
    add_version(server, sid, BASIC_V2, me)
    nf = (404, not_found(sid))
    assert api(server, "GET", "/v1/skills/" + sid, other) == nf
    assert api(server, "GET", "/v1/skills/%s/content" % sid, other) == nf
    assert api(server, "GET", "/v1/skills/%s/versions" % sid, other) == nf
    assert api(server, "GET", "/v1/skills/%s/versions/1" % sid, other) == nf
    assert api(server, "GET", "/v1/skills/%s/versions/latest" % sid, other) == nf
    assert api(server, "GET", "/v1/skills/%s/versions/2/content" % sid, other) == nf
    assert api(server, "POST", "/v1/skills/" + sid, other, {"default_version": 2}) == nf
    assert upload(server, "/v1/skills/%s/versions" % sid, folder_parts(BASIC), other) == nf
    assert api(server, "DELETE", "/v1/skills/%s/versions/2" % sid, other) == nf
    assert api(server, "DELETE", "/v1/skills/" + sid, other) == nf
    assert api(server, "GET", "/v1/skills", other) == (200, listing([]))
    # untouched
    assert api(server, "GET", "/v1/skills/" + sid, me) == (200, skill(sk, latest="2"))
    assert [v["version"] for v in api(server, "GET", "/v1/skills/%s/versions" % sid,
                                       me)[1]["data"]] == ["2", "1"]


def test_an_unknown_skill(server, me):
    sid = "skill_" + "0" * 32
    nf = (404, not_found(sid))
    for method, path in (("GET", ""), ("DELETE", ""), ("GET", "/content"),
                         ("GET", "/versions"), ("GET", "/versions/1"),
                         ("GET", "/versions/1/content"), ("DELETE", "/versions/1")):
        assert api(server, method, "/v1/skills/" + sid + path, me) == nf, (method, path)
    assert api(server, "POST", "/v1/skills/" + sid, me, {"default_version": 1}) == nf
    assert upload(server, "/v1/skills/%s/versions" % sid, folder_parts(BASIC), me) == nf


def test_a_request_without_credentials_is_refused(server):
    anonymous = {"Authorization": None}
    want = (401, error("The Skills API needs a caller: this request carries no credentials.",
                       code="missing_credentials"))
    assert api(server, "GET", "/v1/skills", anonymous) == want
    assert api(server, "GET", "/v1/skills/skill_" + "0" * 32, anonymous) == want
    before = store_entries(server)
    assert upload(server, "/v1/skills", folder_parts(BASIC), anonymous) == want
    assert store_entries(server) == before


# ================================================================ routes

@pytest.mark.parametrize("method,path,allow", [
    ("PUT", "/v1/skills", "GET, POST"),
    ("DELETE", "/v1/skills", "GET, POST"),
    ("PATCH", "/v1/skills/skill_x", "GET, POST, DELETE"),
    ("PUT", "/v1/skills/skill_x/versions", "GET, POST"),
    ("POST", "/v1/skills/skill_x/versions/1", "GET, DELETE"),
    ("DELETE", "/v1/skills/skill_x/content", "GET"),
    ("POST", "/v1/skills/skill_x/versions/1/content", "GET"),
])
def test_wrong_methods(server, me, method, path, allow):
    status, hdrs, body = call(server, method, path, me)
    assert (status, body) == (405, error("Method %s is not allowed here (allowed: %s)."
                                         % (method, allow), code="method_not_allowed"))
    assert hdrs["allow"] == allow


@pytest.mark.parametrize("path", [
    "/v1/skills/x/nope", "/v1/skills/x/content/more", "/v1/skills/x/versions/1/nope",
    "/v1/skills/x/versions/1/content/more",
])
def test_unknown_paths(server, me, path):
    assert api(server, "GET", path, me) == (404, error("No such Skills API path: " + path,
                                                       code="not_found"))


# ================================================================ restart

def test_records_survive_a_restart():
    """Stop the server, start it again: the skills, their versions, their
    defaults and their content are as they were, and numbering goes on."""
    caller = {"Authorization": "Bearer sk-skills-restart"}
    s = skills_server("skills-restart").start()
    try:
        sk = create(s, BASIC, caller)
        sid = sk["id"]
        v2 = add_version(s, sid, BASIC_V2, caller, default="true")
        other = create(s, other_skill("restarted"), caller)
        before = {p: api(s, "GET", p, caller) for p in (
            "/v1/skills", "/v1/skills/" + sid, "/v1/skills/%s/versions" % sid,
            "/v1/skills/%s/versions/1" % sid, "/v1/skills/%s/versions/latest" % sid,
            "/v1/skills/" + other["id"])}
        zips = {p: content(s, p, caller)[2] for p in (
            "/v1/skills/%s/content" % sid, "/v1/skills/%s/versions/1/content" % sid)}
        records = records_of(s)
        assert records is not None and sid.encode() in records and v2["id"].encode() in records
        # without CodeInterpreterSecret, the secret owners are hashed with is
        # made once and kept in the store, the parent's alone, so that each
        # caller is the same owner after the restart
        secret_path = os.path.join(store_of(s), "server.secret")
        st = os.stat(secret_path)
        assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
        with open(secret_path) as f:
            secret = f.read()
        assert re.fullmatch(r"[0-9a-f]{64}\n", secret)

        s.stop()
        s.start()

        with open(secret_path) as f:
            assert f.read() == secret

        assert {p: api(s, "GET", p, caller) for p in before} == before
        assert before["/v1/skills/" + sid] == (200, skill(
            sk, description="Adds and subtracts numbers.", default="2", latest="2"))
        assert {p: content(s, p, caller)[2] for p in zips} == zips
        v3 = add_version(s, sid, other_skill("after_restart"), caller)
        assert v3["version"] == "3"
    finally:
        s.stop()


# ================================================================ the Node SDK

NODE_KEY = "sk-node-skills-0123"


def run_skills_script(server, tmp_path, clients):
    """Run test/node/skills_api.mjs against SERVER; its report."""
    skill_dir = tmp_path / "dir"
    for path, data in BASIC.items():
        (skill_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (skill_dir / path).write_bytes(data)
    v2_dir = tmp_path / "v2"
    for path, data in BASIC_V2.items():
        (v2_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (v2_dir / path).write_bytes(data)
    zip_path = tmp_path / "node_zip.zip"
    zip_path.write_bytes(zip_of(other_skill("node_zip")))
    server.callers.add("Bearer " + NODE_KEY)
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % server.port, API_KEY=NODE_KEY,
               CI_SPEC_DIR=SPEC_DIR)
    proc = node_script(clients, "skills_api.mjs", str(skill_dir / "basic_math"),
                       str(v2_dir / "basic_math"), str(zip_path), env=env)
    return steps_report(proc)


def test_skills_api_through_the_node_sdk(server, clients, tmp_path):  # noqa: F811
    report = run_skills_script(server, tmp_path, clients)
    steps = report["steps"]
    caller = {"Authorization": "Bearer " + NODE_KEY}

    uploads = [w for w in report["wire"] if w["method"] == "POST" and w["path"] == "/v1/skills"]
    if clients == "pinned":
        # toFile: openai 6 sends each file's basename (openai/openai-node#1807),
        # so the folder is lost and the upload refused, as OpenAI refuses it
        assert steps["tofile"] == {"name": "BadRequestError", "status": 400, "error": refused(
            "Skill file 'SKILL.md' is at the top level: the skill's files must be inside one "
            "folder.")["error"]}
        assert uploads[0]["parts"] == [["files[]", "SKILL.md"], ["files[]", "add.py"]]
    else:
        # openai 7 sends the name as given, folder and all: the skill is made
        made = steps["tofile"]["returned"]
        assert made == skill(made)
        assert steps["tofile"]["deleted"] == {"id": made["id"], "object": "skill.deleted",
                                              "deleted": True}
        assert uploads[0]["parts"] == [["files[]", "basic_math/SKILL.md"],
                                       ["files[]", "basic_math/scripts/add.py"]]

    # created from a directory (files[] parts, named with their folder by
    # toStreamingFile), and from a zip
    sk = steps["created"]
    assert SKILL_ID.fullmatch(sk["id"]), sk
    assert sk == skill(sk)
    zipped = steps["created_zip"]
    assert zipped == skill(zipped, name="node-zip", description="Skill node_zip.")
    assert [w["parts"] for w in uploads[1:]] == [
        [["files[]", "basic_math/SKILL.md"], ["files[]", "basic_math/scripts/add.py"]],
        [["files", "node_zip.zip"]]]
    assert steps["retrieved"] == sk
    assert steps["listed"] == [zipped, sk]

    # a version, made the default by the SDK's boolean
    v2 = steps["version"]
    assert v2 == version(v2, sk["id"], "2", description="Adds and subtracts numbers.")
    assert steps["after_version"] == skill(sk, description="Adds and subtracts numbers.",
                                           default="2", latest="2")
    assert steps["versions"][0] == v2 and len(steps["versions"]) == 2
    v1 = steps["versions"][1]
    assert v1 == version(v1, sk["id"], "1")
    assert steps["latest"] == v2
    # the SDK pages versions one at a time: after is the last version's id
    pages = [w["path"] for w in report["wire"]
             if w["method"] == "GET" and "/versions?" in w["path"]]
    assert pages == ["/v1/skills/%s/versions?limit=1" % sk["id"],
                     "/v1/skills/%s/versions?limit=1&after=%s" % (sk["id"], v2["id"])]

    # the default set back to 1 (the SDK types it as text)
    assert steps["updated"] == skill(sk, default="1", latest="2")

    # content: the default's zip, and version 2's
    files, names = unzipped(base64.b64decode(steps["content"]["zip"]))
    assert files == BASIC and names == sorted(BASIC)
    assert steps["content"]["type"] == "application/zip"
    assert unzipped(base64.b64decode(steps["version_content"]))[0] == BASIC_V2
    # the very bytes a plain client downloads for the same folder
    plain = {"Authorization": "Bearer sk-skills-node-compare"}
    same = create(server, BASIC, plain)
    assert base64.b64decode(steps["content"]["zip"]) == content(
        server, "/v1/skills/%s/content" % same["id"], plain)[2]
    assert api(server, "DELETE", "/v1/skills/" + same["id"], plain)[0] == 200

    # deletions
    assert steps["version_deleted"] == {"id": v2["id"], "object": "skill.version.deleted",
                                        "deleted": True, "version": "2"}
    assert steps["deleted"] == [{"id": sk["id"], "object": "skill.deleted", "deleted": True},
                                {"id": zipped["id"], "object": "skill.deleted",
                                 "deleted": True}]
    assert steps["unknown"] == {"name": "NotFoundError", "status": 404,
                                "error": not_found(sk["id"])["error"]}
    assert steps["remaining"] == []
    assert api(server, "GET", "/v1/skills", caller) == (200, listing([]))

    # every answer against the published OpenAPI document
    schema = report["schema"]
    assert "skipped" not in schema, schema
    bad = [c for c in schema["checked"] if not c["ok"]]
    assert bad == [], json.dumps(bad, indent=1)
    assert sorted({c["schema"] for c in schema["checked"]}) == [
        "DeletedSkillResource", "DeletedSkillVersionResource", "SkillListResource",
        "SkillResource", "SkillVersionListResource", "SkillVersionResource"]
    count_schema_checks(len(schema["checked"]))
