// The Skills API through the official OpenAI Node SDK (client.skills), each
// JSON answer checked against the published OpenAPI document.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 API_KEY=... \
//          node skills_api.mjs <skill folder> <version 2 folder> <skill zip>
//   Each folder is a skill's top folder (its name is the folder the upload
//   names, "basic_math"); the zip holds another skill. CI_SPEC_DIR is where
//   openai-openapi.json is (default the project's test/spec).
//
// What it does, in order (every step is recorded under its name):
//   tofile           skills.create({files: [toFile(bytes, "<folder>/<path>")
//                    per file of the folder]}): openai 6 sends each File's
//                    basename only ("SKILL.md"; openai/openai-node#1807), so
//                    the upload has no folder and is refused: {name, status,
//                    error}; openai 7 sends the name as given and the skill
//                    is made: {returned, deleted} (deleted at once)
//   created          the same with toStreamingFile(bytes, "<folder>/<path>"),
//                    whose name the SDK sends as given (as "files[]" parts)
//   created_zip      skills.create({files: toFile(<zip>)}) (one "files" part)
//   retrieved        skills.retrieve() of "created"
//   listed           skills.list() auto-paginated: every skill it yields
//   version          skills.versions.create() of the version 2 folder
//                    (toStreamingFile), with default: true
//   after_version    skills.retrieve() of "created"
//   versions         skills.versions.list({limit: 1}) auto-paginated
//   latest           skills.versions.retrieve("latest")
//   updated          skills.update({default_version: "1"})
//   content          skills.content.retrieve(): {type, zip (base64)}
//   version_content  skills.versions.content.retrieve("2"): base64
//   version_deleted  skills.versions.delete("2")
//   deleted          skills.delete() of both skills
//   unknown          skills.retrieve() of the deleted skill: the error thrown
//   remaining        skills.list() auto-paginated
//
// Output on stdout: one line of JSON,
//   {"steps": {name: what the SDK returned...},
//    "wire": [{"method", "path" (with its query), "status", "body" (JSON,
//             or {"bytes": n} for a zip), "parts" ([name, filename] of a
//             multipart request)} for every HTTP exchange, in order],
//    "schema": {"skipped": reason} or {"checked": [{"what", "schema", "ok",
//               "errors"}]},
//    "error": null, or {"step", "name", "message", "status", "body"}}
// Exit status: 0 it ran to its end (whatever the checks found); 1 a step
// threw where it was not expected to (see "error"); 2 the arguments are
// wrong.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import OpenAI, { toFile, toStreamingFile } from "openai";

import { die, folderFiles, openapiValidators, refusal, stepper } from "./common.mjs";


const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const SPEC = path.resolve(process.env.CI_SPEC_DIR || path.resolve(REPO, "test", "spec"),
                          "openai-openapi.json");

const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
const [skillDir, v2Dir, zipPath] = process.argv.slice(2);
if (!zipPath) die("usage: skills_api.mjs <skill folder> <version 2 folder> <skill zip>");
for (const p of [skillDir, v2Dir, zipPath])
  if (!fs.existsSync(p)) die(`${p} does not exist`);

// Every exchange as it went over the wire (the SDK's own probe of FormData
// support fetches a data: URL; it is not an exchange with the server).
const wire = [];
const capturingFetch = async (url, init) => {
  const u = new URL(url);
  if (u.protocol !== "http:" && u.protocol !== "https:") return fetch(url, init);
  let parts;
  if (init?.body instanceof FormData) {
    parts = [...init.body.entries()]
      .map(([name, v]) => [name, typeof v === "string" ? null : v.name]);
  } else if (init?.body instanceof ReadableStream) {
    // a streamed multipart body (toStreamingFile): read whole, its parts'
    // names read from it, and sent as bytes
    const bytes = new Uint8Array(await new Response(init.body).arrayBuffer());
    const text = Buffer.from(bytes).toString("latin1");
    const disposition = /Content-Disposition: form-data; name="([^"]*)"(?:; filename="([^"]*)")?/g;
    parts = [...text.matchAll(disposition)].map((m) => [m[1], m[2] ?? null]);
    init = { ...init, body: bytes };
    delete init.duplex;
  }
  const res = await fetch(url, init);
  let body;
  if ((res.headers.get("content-type") || "").startsWith("application/zip")) {
    body = { bytes: (await res.clone().arrayBuffer()).byteLength };
  } else {
    const text = await res.clone().text();
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
  }
  wire.push({ method: init?.method ?? "GET", path: u.pathname + u.search, status: res.status,
              body, ...(parts ? { parts } : {}) });
  return res;
};

const client = new OpenAI({
  apiKey: process.env.API_KEY || "test-key",
  baseURL,
  maxRetries: 0,
  timeout: 60_000,
  fetch: capturingFetch,
});

async function all(iterable) {
  const seen = [];
  for await (const x of iterable) seen.push(x);
  return seen;
}

const run = stepper();
const { steps, step } = run;
const refused = (fn) => refusal(fn, OpenAI.APIError);

await step("tofile", async () => {
  const outcome = await refused(
    async () => client.skills.create({ files: await folderFiles(skillDir, toFile) }));
  // openai 7 sends the name as given: the skill is made, and deleted here so
  // that the steps after see the same skills with either SDK
  if (outcome.returned) outcome.deleted = await client.skills.delete(outcome.returned.id);
  return outcome;
});
await step("created", async () => client.skills.create({
  files: await folderFiles(skillDir, toStreamingFile),
}));
await step("created_zip", async () => client.skills.create({
  files: await toFile(fs.readFileSync(zipPath), path.basename(zipPath),
                      { type: "application/zip" }),
}));
const id = steps.created?.id;
const zipId = steps.created_zip?.id;
await step("retrieved", () => client.skills.retrieve(id));
await step("listed", () => all(client.skills.list()));
await step("version", async () => client.skills.versions.create(id, {
  files: await folderFiles(v2Dir, toStreamingFile), default: true,
}));
await step("after_version", () => client.skills.retrieve(id));
await step("versions", () => all(client.skills.versions.list(id, { limit: 1 })));
await step("latest", () => client.skills.versions.retrieve("latest", { skill_id: id }));
await step("updated", () => client.skills.update(id, { default_version: "1" }));
await step("content", async () => {
  const res = await client.skills.content.retrieve(id);
  return { type: res.headers.get("content-type"),
           zip: Buffer.from(await res.arrayBuffer()).toString("base64") };
});
await step("version_content", async () => {
  const res = await client.skills.versions.content.retrieve("2", { skill_id: id });
  return Buffer.from(await res.arrayBuffer()).toString("base64");
});
await step("version_deleted", () => client.skills.versions.delete("2", { skill_id: id }));
await step("deleted", async () => [await client.skills.delete(id),
                                   await client.skills.delete(zipId)]);
await step("unknown", () => refused(() => client.skills.retrieve(id)));
await step("remaining", () => all(client.skills.list()));

// ---- the answers against the OpenAPI document

// The schema of a JSON answer, by method and route; null: none (a zip).
function schemaOf(method, pathname) {
  const rest = pathname.replace(/^.*\/skills/, "");
  if (rest === "") return method === "GET" ? "SkillListResource" : "SkillResource";
  if (/^\/[^/]+$/.test(rest))
    return method === "DELETE" ? "DeletedSkillResource" : "SkillResource";
  if (/^\/[^/]+\/versions$/.test(rest))
    return method === "GET" ? "SkillVersionListResource" : "SkillVersionResource";
  if (/^\/[^/]+\/versions\/[^/]+$/.test(rest))
    return method === "DELETE" ? "DeletedSkillVersionResource" : "SkillVersionResource";
  return null;
}

let schema;
if (!fs.existsSync(SPEC)) {
  schema = { skipped: `${SPEC} not found` };
} else {
  const validator = openapiValidators(SPEC);
  const checked = [];
  for (const ex of wire) {
    const name = ex.status === 200 ? schemaOf(ex.method, ex.path.split("?")[0]) : null;
    if (!name) continue;
    const validate = validator(name);
    const ok = validate(ex.body);
    checked.push({ what: `${ex.method} ${ex.path}`, schema: name, ok,
                   errors: ok ? null : validate.errors });
  }
  schema = { checked };
}

process.stdout.write(JSON.stringify({ steps, wire, schema, error: run.error }) + "\n");
process.exit(run.error ? 1 : 0);
