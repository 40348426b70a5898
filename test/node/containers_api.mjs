// The Containers API through the official OpenAI Node SDK (client.containers),
// each answer checked against the published OpenAPI document, then a
// two-turn conversation through client.responses.create in one of the
// containers made, named explicitly in the tool.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 API_KEY=... node containers_api.mjs '<turn 1 script>' '<turn 2 script>'
//   MODEL defaults to "m"; CI_SPEC_DIR is where openai-openapi.json is
//   (default the project's test/spec).
//
// What it does, in order (every step is recorded under its name):
//   empty       list({limit: 2}) auto-paginated, before anything is made
//   created     create() three times: "first" (expires_after 5 minutes),
//               "second", "third"
//   retrieved   retrieve() of "first"
//   listed      list({limit: 2}) auto-paginated: every container the
//               SDK's iterator yields, in order
//   turns       two responses.create() with tools [{type: "code_interpreter",
//               container: <id of "first">}] and the code interpreter's
//               outputs included
//   deleted     delete() of "third", then retrieve() of it
//   remaining   list({limit: 2}) auto-paginated after the delete
//   unknown     retrieve() of an id never made: the error the SDK throws
//
// Output on stdout: one line of JSON,
//   {"steps": {name: what the SDK returned...},
//    "wire": [{"method", "path" (with its query), "status", "body"} for
//             every HTTP exchange, in order; body as JSON],
//    "schema": {"skipped": reason} or {"checked": [{"what", "schema", "ok",
//               "errors"}]} (every answer of the API's GETs and create
//               against ContainerResource or ContainerListResource),
//    "error": null, or {"step", "name", "message", "status", "body"}}
// Exit status: 0 it ran to its end (whatever the checks found); 1 a step
// threw where it was not expected to (see "error"); 2 the arguments are
// wrong.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import OpenAI, { NotFoundError } from "openai";

import { openapiValidators, stepper } from "./common.mjs";


const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const SPEC = path.resolve(process.env.CI_SPEC_DIR || path.resolve(REPO, "test", "spec"),
                          "openai-openapi.json");
const UNKNOWN = "cntr_" + "0".repeat(48);

function die(msg) {
  process.stderr.write(msg + "\n");
  process.exit(2);
}

const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
const scripts = process.argv.slice(2);
if (scripts.length !== 2) die("two scripts are needed, one per turn");
for (const s of scripts) {
  try {
    JSON.parse(s);
  } catch (e) {
    die("a script is not JSON: " + e.message);
  }
}

// Every exchange as it went over the wire: the SDK reshapes some answers
// (delete() is typed void), and the schema is about the wire.
const wire = [];
const capturingFetch = async (url, init) => {
  const res = await fetch(url, init);
  const text = await res.clone().text();
  const u = new URL(url);
  let body;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  wire.push({ method: init?.method ?? "GET", path: u.pathname + u.search, status: res.status,
              body });
  return res;
};

const client = new OpenAI({
  apiKey: process.env.API_KEY || "test-key",
  baseURL,
  maxRetries: 0,
  timeout: 60_000,
  fetch: capturingFetch,
});

// Everything the SDK's auto-pagination yields, in order.
async function listAll() {
  const seen = [];
  for await (const c of client.containers.list({ limit: 2 })) seen.push(c);
  return seen;
}

const run = stepper();
const { steps, step } = run;

await step("empty", listAll);
await step("created", async () => [
  await client.containers.create({ name: "first",
                                   expires_after: { anchor: "last_active_at", minutes: 5 } }),
  await client.containers.create({ name: "second" }),
  await client.containers.create({ name: "third" }),
]);
const [first, , third] = steps.created ?? [];
await step("retrieved", () => client.containers.retrieve(first.id));
await step("listed", listAll);
await step("turns", async () => {
  const turns = [];
  for (const script of scripts) {
    turns.push(await client.responses.create({
      model: process.env.MODEL || "m",
      tools: [{ type: "code_interpreter", container: first.id }],
      include: ["code_interpreter_call.outputs"],
      input: "SCRIPT: " + script,
    }));
  }
  return turns;
});
await step("deleted", async () => ({
  answer: (await client.containers.delete(third.id)) ?? null,
  after: await client.containers.retrieve(third.id),
}));
await step("remaining", listAll);
await step("unknown", async () => {
  try {
    const c = await client.containers.retrieve(UNKNOWN);
    return { returned: c };
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    return { name: e.constructor.name, notFound: e instanceof NotFoundError,
             status: e.status, error: e.error };
  }
});

// ---- the answers against the OpenAPI document

let schema;
if (!fs.existsSync(SPEC)) {
  schema = { skipped: `${SPEC} not found` };
} else {
  const validator = openapiValidators(SPEC);
  const checked = [];
  for (const ex of wire) {
    if (ex.status !== 200 || !ex.path.includes("/containers")) continue;
    const one = /\/containers\/[^/?]+$/.test(ex.path.split("?")[0]);
    let name;
    if (ex.method === "POST" || (ex.method === "GET" && one)) name = "ContainerResource";
    else if (ex.method === "GET") name = "ContainerListResource";
    else continue;         // DELETE: the document gives its answer no schema
    const validate = validator(name);
    const ok = validate(ex.body);
    checked.push({ what: `${ex.method} ${ex.path}`, schema: name, ok,
                   errors: ok ? null : validate.errors });
  }
  schema = { checked };
}

process.stdout.write(JSON.stringify({ steps, wire, schema, error: run.error }) + "\n");
process.exit(run.error ? 1 : 0);
