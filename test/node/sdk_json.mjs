// One non-streamed request through the official OpenAI Node SDK, then a
// check of what came back against the published OpenAPI document.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 node sdk_json.mjs '<script JSON>'
//   (or the script in the SCRIPT environment variable; MODEL defaults to "m";
//   TOOLS, a JSON array, replaces the code_interpreter tool).
//
// Output on stdout:
//   line 1    the response as the SDK parsed it, as one line of JSON
//   then      "SCHEMA-OK: <what>" for each check that passed, or
//             "SKIP-SCHEMA: <path> not found" when the document is absent
// Exit status: 0 all good; 1 the response does not match the schema (the
// ajv errors are printed on stderr and stdout); 2 the request itself failed
// or the arguments are wrong.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import OpenAI from "openai";
import Ajv2020Module from "ajv/dist/2020.js";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
// The directory of OpenAI's documents: CI_SPEC_DIR, else the project's test/spec.
const SPEC = path.resolve(process.env.CI_SPEC_DIR || path.resolve(REPO, "test", "spec"),
                          "openai-openapi.json");

function die(msg) {
  process.stderr.write(msg + "\n");
  process.exit(2);
}

const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
const scriptText = process.argv[2] ?? process.env.SCRIPT;
if (!scriptText) die("no script: pass it as the first argument or in SCRIPT");
let rounds;
try {
  rounds = JSON.parse(scriptText);
} catch (e) {
  die("the script is not JSON: " + e.message);
}

// Keep the body exactly as it came over the wire: the SDK adds convenience
// fields (output_text) to what it returns, and the schema is about the wire.
let wireText = null;
const capturingFetch = async (url, init) => {
  const res = await fetch(url, init);
  wireText = await res.clone().text();
  return res;
};

const client = new OpenAI({
  apiKey: "test-key",
  baseURL,
  maxRetries: 0,
  timeout: 60_000,
  fetch: capturingFetch,
});

let response;
try {
  response = await client.responses.create({
    model: process.env.MODEL || "m",
    tools: process.env.TOOLS ? JSON.parse(process.env.TOOLS)
                             : [{ type: "code_interpreter", container: { type: "auto" } }],
    include: ["code_interpreter_call.outputs"],
    input: "SCRIPT: " + JSON.stringify(rounds),
  });
} catch (e) {
  const detail = e?.status ? ` (HTTP ${e.status}) ${JSON.stringify(e.error ?? null)}` : "";
  die(`request failed: ${e?.constructor?.name ?? "Error"}: ${e?.message}${detail}`);
}

process.stdout.write(JSON.stringify(response) + "\n");

if (!fs.existsSync(SPEC)) {
  process.stdout.write(`SKIP-SCHEMA: ${SPEC} not found\n`);
  process.exit(0);
}

let wire;
try {
  wire = JSON.parse(wireText);
} catch (e) {
  die("the response body is not JSON: " + e.message);
}

// The document is OpenAPI 3.1 (JSON Schema 2020-12 dialect). strict:false lets
// ajv ignore what is not JSON Schema (x-* extensions, example, discriminator
// -- which the document also puts beside non-oneOf schemas, so ajv's own
// discriminator support cannot be enabled); OpenAPI's nullable is understood
// by ajv as it is.
const ajv = new Ajv2020({ strict: false, allErrors: true });
// Formats the document uses that ajv does not define itself.
ajv.addFormat("uri", { type: "string", validate: (s) => URL.canParse(s) });
ajv.addFormat("unixtime", { type: "number", validate: (n) => Number.isFinite(n) && n >= 0 });
ajv.addFormat("float", { type: "number", validate: (n) => Number.isFinite(n) });
ajv.addSchema(JSON.parse(fs.readFileSync(SPEC, "utf8")), "openai");

const validateCall = ajv.compile({ $ref: "openai#/components/schemas/CodeInterpreterToolCall" });
const validateShellCall = ajv.compile({ $ref: "openai#/components/schemas/FunctionShellCall" });
const validateShellOutput = ajv.compile({
  $ref: "openai#/components/schemas/FunctionShellCallOutput" });
const validateResponse = ajv.compile({ $ref: "openai#/components/schemas/Response" });

const failures = [];
function check(what, validate, value) {
  if (validate(value)) {
    process.stdout.write(`SCHEMA-OK: ${what}\n`);
  } else {
    failures.push({ what, errors: validate.errors });
  }
}

const items = Array.isArray(wire.output) ? wire.output : [];
items.forEach((item, i) => {
  if (item?.type === "code_interpreter_call") {
    check(`output[${i}] CodeInterpreterToolCall`, validateCall, item);
  }
  if (item?.type === "shell_call") {
    check(`output[${i}] FunctionShellCall`, validateShellCall, item);
  }
  if (item?.type === "shell_call_output") {
    check(`output[${i}] FunctionShellCallOutput`, validateShellOutput, item);
  }
});
// Two fields come verbatim from the upstream and fail the published schema
// even in OpenAI's own recorded response: "user": null (the schema says
// string) and usage.input_tokens_details without cache_write_tokens. They
// are normalised in a copy so the check covers what this server builds.
const normalised = structuredClone(wire);
if (normalised.user === null) delete normalised.user;
const details = normalised.usage?.input_tokens_details;
if (details && !("cache_write_tokens" in details)) details.cache_write_tokens = 0;
check("Response (upstream-verbatim user/cache_write_tokens normalised)",
      validateResponse, normalised);

if (failures.length) {
  for (const f of failures) {
    const text = `SCHEMA-FAIL: ${f.what}: ${JSON.stringify(f.errors, null, 1)}`;
    process.stdout.write(text.replace(/\n\s*/g, " ") + "\n");
    process.stderr.write(text + "\n");
  }
  process.exit(1);
}
process.exit(0);
