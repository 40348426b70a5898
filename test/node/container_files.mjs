// Container files through the official OpenAI Node SDK
// (client.containers.files): a container is made, one responses.create()
// runs code in it that writes files, then the files are listed (the SDK's
// auto-pagination, two a page), retrieved, downloaded (files.content), one
// deleted and retrieved again, another caller lists them, and one is
// uploaded (files.create with toFile) and read back; every JSON
// answer of the file endpoints is checked against the OpenAPI document.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 API_KEY=... OTHER_KEY=...
//        node container_files.mjs '<script of the turn>'
//
// Output on stdout: one line of JSON,
//   {"container": id, "steps": {name: what the SDK returned...},
//    "wire": [{"method", "path", "status"}...],
//    "schema": {"skipped": reason} or {"checked": [{"what", "schema", "ok", "errors"}]},
//    "error": null, or {"step", "name", "message", "status", "body"}}
// Downloads are reported as base64. Exit status: 0 it ran to its end, 1 a
// step threw where it was not expected to, 2 the arguments are wrong.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import OpenAI, { toFile } from "openai";

import { openapiValidators, refusal, stepper } from "./common.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const SPEC = path.resolve(process.env.CI_SPEC_DIR || path.resolve(REPO, "test", "spec"),
                          "openai-openapi.json");

if (!process.env.BASE_URL || process.argv.length !== 3) {
  process.stderr.write("BASE_URL and one script are needed\n");
  process.exit(2);
}

const wire = [];
const capturingFetch = async (url, init) => {
  const res = await fetch(url, init);
  const u = new URL(url);
  let body = null;
  if ((res.headers.get("content-type") || "").startsWith("application/json")) {
    try {
      body = JSON.parse(await res.clone().text());
    } catch {
      body = null;
    }
  }
  wire.push({ method: init?.method ?? "GET", path: u.pathname + u.search, status: res.status,
              body });
  return res;
};
const make = (key) => new OpenAI({ apiKey: key, baseURL: process.env.BASE_URL,
                                   maxRetries: 0, timeout: 60_000, fetch: capturingFetch });
const client = make(process.env.API_KEY || "test-key");
const other = make(process.env.OTHER_KEY || "other-key");

const run = stepper();
const { steps, step } = run;
const refused = (fn) => refusal(fn, OpenAI.APIError);

let cid;
await step("created", async () => (cid = (await client.containers.create({ name: "files" })).id));
await step("turn", async () => (await client.responses.create({
  model: process.env.MODEL || "m",
  tools: [{ type: "code_interpreter", container: cid }],
  input: "SCRIPT: " + process.argv[2],
})).status);
await step("listed", async () => {
  const seen = [];
  for await (const f of client.containers.files.list(cid, { limit: 2, order: "asc" })) seen.push(f);
  return seen;
});
await step("retrieved", async () => Promise.all(steps.listed.map(
  (f) => client.containers.files.retrieve(f.id, { container_id: cid }))));
await step("downloaded", async () => {
  const out = {};
  for (const f of steps.listed) {
    const res = await client.containers.files.content.retrieve(f.id, { container_id: cid });
    out[f.path] = { type: res.headers.get("content-type"),
                    length: res.headers.get("content-length"),
                    b64: Buffer.from(await res.arrayBuffer()).toString("base64") };
  }
  return out;
});
await step("deleted", async () => {
  const f = steps.listed[0];
  const answer = await client.containers.files.delete(f.id, { container_id: cid });
  return { answer: answer ?? null,
           after: await refused(() => client.containers.files.retrieve(f.id,
                                                                      { container_id: cid })) };
});
await step("foreign", async () => refused(() => other.containers.files.list(cid)));
// an upload: the SDK's multipart, from toFile
const UPLOAD = Buffer.from("name,n\nup,1\n\u00e9\u0000\u00ff", "latin1");
await step("uploaded", async () => client.containers.files.create(cid, {
  file: await toFile(UPLOAD, "up.csv", { type: "text/csv" }) }));
await step("uploaded_back", async () => {
  const res = await client.containers.files.content.retrieve(steps.uploaded.id,
                                                             { container_id: cid });
  return Buffer.from(await res.arrayBuffer()).equals(UPLOAD);
});

let schema;
if (!fs.existsSync(SPEC)) {
  schema = { skipped: `${SPEC} not found` };
} else {
  const validator = openapiValidators(SPEC);
  const checked = [];
  for (const ex of wire) {
    const p = ex.path.split("?")[0];
    if (!["GET", "POST"].includes(ex.method) || ex.status !== 200 ||
        !/\/files(\/[^/]+)?$/.test(p)) continue;
    const name = p.endsWith("/files") && ex.method === "GET" ? "ContainerFileListResource"
                                                             : "ContainerFileResource";
    const validate = validator(name);
    const ok = validate(ex.body);
    checked.push({ what: `${ex.method} ${ex.path}`, schema: name, ok,
                   errors: ok ? null : validate.errors });
  }
  schema = { checked };
}
for (const w of wire) delete w.body;
process.stdout.write(JSON.stringify({ container: cid, steps, wire, schema,
                                     error: run.error }) + "\n");
process.exit(run.error ? 1 : 0);
