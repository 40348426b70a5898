"""Files out: a file the code writes under /mnt/data is told to the model (its
path), becomes a container file, and the model's link to it
("sandbox:/mnt/data/NAME") gets a container_file_citation annotation whose
indices are character offsets of the link target - in JSON and, streaming,
as response.output_text.annotation.added after the text's last delta."""
import json

from test_containers import api, make_container, me  # noqa: F401
from test_container_files import cfile_id, content, files
from test_loop import calls_of, ci_body, fc_outputs
from test_stream import stream, stream_body, types

WRITE = "open('/mnt/data/out.csv', 'w').write('a,b\\n1,2\\n')\nprint('written')"
# Non-ASCII before the link: offsets count characters, not bytes.
ANSWER = ("Voilà — the file’s here: [Download out.csv](sandbox:/mnt/data/out.csv). "
          "Also [missing](sandbox:/mnt/data/nope.txt) and sandbox:/mnt/data/out.csv.bak")
LINK = "sandbox:/mnt/data/out.csv"


def tool(cid):
    return {"type": "code_interpreter", "container": cid}


def citations_in(text, cid):
    """Where LINK is in TEXT, as the annotations should say (str offsets are
    code points)."""
    start = text.index(LINK)
    return [{"type": "container_file_citation", "container_id": cid,
             "end_index": start + len(LINK), "file_id": cfile_id(cid, "out.csv"),
             "filename": "out.csv", "start_index": start}]


def test_generated_file_cited_listed_and_downloaded(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"call": WRITE}], [{"text": ANSWER}]], include=True, tools=[tool(cid)]),
        headers=me)
    assert status == 200, out
    # the model was told the file's path
    last = [r for r in model.requests() if r["path"] == "/v1/responses"][-1]
    assert fc_outputs(last)[-1][1] == (
        "written\n[files saved: /mnt/data/out.csv; link to one as "
        "sandbox:/mnt/data/<name>]\n")
    msg = out["output"][-1]
    part = msg["content"][0]
    assert part["text"] == ANSWER
    anns = part["annotations"]
    assert anns == citations_in(ANSWER, cid)
    assert ANSWER[anns[0]["start_index"]:anns[0]["end_index"]] == LINK
    # the file the citation names is listed and downloads byte-identical
    listed = files(httpd, cid, me)["data"]
    assert [(f["id"], f["path"], f["source"]) for f in listed] == [
        (anns[0]["file_id"], "/mnt/data/out.csv", "assistant")]
    status, hdrs, data = content(httpd, cid, anns[0]["file_id"], me)
    assert (status, hdrs["content-type"], data) == (200, "text/csv", b"a,b\n1,2\n")
    assert calls_of(out)[0]["outputs"] == [{"type": "logs", "logs": "written\n"}]


def test_streamed_annotation_after_the_last_delta(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    sse = stream(httpd, "/v1/responses", stream_body(
        [[{"call": WRITE}], [{"text": ANSWER}]], tools=[tool(cid)]), headers=me)
    events = [e["data"] for e in sse.events() if e["data"]]
    want = citations_in(ANSWER, cid)
    kinds = types(sse.events())
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert [e["annotation"] for e in added] == want
    at = kinds.index("response.output_text.annotation.added")
    msg_id = added[0]["item_id"]
    text_events = [e for e in events if e.get("item_id") == msg_id]
    # after every delta of the text, just before its done event
    assert [e["type"] for e in text_events][-4:] == [
        "response.output_text.delta", "response.output_text.annotation.added",
        "response.output_text.done", "response.content_part.done"]
    assert kinds[at + 1] == "response.output_text.done"
    assert (added[0]["annotation_index"], added[0]["content_index"],
            added[0]["output_index"]) == (0, 0, events[-1]["response"]["output"].index(
                [o for o in events[-1]["response"]["output"] if o["id"] == msg_id][0]))
    assert list(added[0]) == ["type", "sequence_number", "item_id", "output_index",
                              "content_index", "annotation_index", "annotation"]
    part_done = [e for e in events if e["type"] == "response.content_part.done"][-1]
    item_done = [e for e in events if e["type"] == "response.output_item.done"][-1]
    final = events[-1]["response"]["output"][-1]
    assert part_done["part"]["annotations"] == want
    assert item_done["item"]["content"][0]["annotations"] == want
    assert final["content"][0]["annotations"] == want
    assert events[-1]["type"] == "response.completed"


def test_a_later_turn_cites_an_earlier_turns_file(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"call": WRITE}], [{"text": "made it"}]], tools=[tool(cid)]), headers=me)
    assert status == 200, out
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"text": "Here again: " + LINK}]], tools=[tool(cid)]), headers=me)
    assert status == 200, out
    assert out["output"][-1]["content"][0]["annotations"] == citations_in(
        "Here again: " + LINK, cid)


def test_no_owner_no_citation(httpd, model):
    from conftest import ANONYMOUS
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"call": WRITE}], [{"text": ANSWER}]]), headers=ANONYMOUS)
    assert status == 200, out
    assert out["output"][-1]["content"][0]["annotations"] == []


def test_text_without_links_asks_for_no_listing(httpd, model, me):
    cid = make_container(httpd, headers=me)["id"]
    status, _, out = httpd.post("/v1/responses", ci_body(
        [[{"call": WRITE}], [{"text": "done, no link"}]], tools=[tool(cid)]), headers=me)
    assert status == 200, out
    assert out["output"][-1]["content"][0]["annotations"] == []
    assert json.dumps(out).count("container_file_citation") == 0
