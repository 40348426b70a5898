// What test/node's scripts share.
import fs from "node:fs";
import path from "node:path";

import Ajv2020Module from "ajv/dist/2020.js";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;

export function die(msg) {
  process.stderr.write(msg + "\n");
  process.exit(2);
}

// An error thrown by the SDK, as a script reports it.
export function errorOf(e) {
  return {
    name: e?.constructor?.name ?? "Error",
    message: String(e?.message ?? e),
    status: e?.status ?? null,
    body: e?.error ?? null,
  };
}

// The validators of OpenAI's OpenAPI document SPEC: schemaOf(NAME) is
// the validator of #/components/schemas/NAME (compiled once). The
// document is OpenAPI 3.1 (JSON Schema 2020-12): strict:false lets ajv
// ignore what is not JSON Schema (x-* extensions, example, discriminator
// -- which the document also puts beside non-oneOf schemas, so ajv's own
// discriminator support cannot be enabled); OpenAPI's nullable is
// understood by ajv as it is.
export function openapiValidators(spec) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  // Formats the document uses that ajv does not define itself.
  ajv.addFormat("uri", { type: "string", validate: (s) => URL.canParse(s) });
  ajv.addFormat("unixtime", { type: "number", validate: (n) => Number.isFinite(n) && n >= 0 });
  ajv.addFormat("float", { type: "number", validate: (n) => Number.isFinite(n) });
  ajv.addFormat("binary", { type: "string", validate: () => true });
  ajv.addSchema(JSON.parse(fs.readFileSync(spec, "utf8")), "openai");
  const compiled = {};
  return (name) => (compiled[name] ??= ajv.compile(
    { $ref: `openai#/components/schemas/${name}` }));
}

// A script's steps: each named step's result in RUN.steps, until one
// throws (RUN.error then says which and why, and later steps do not run).
export function stepper() {
  const run = { steps: {}, error: null };
  run.step = async (name, fn) => {
    if (run.error) return;
    try {
      run.steps[name] = await fn();
    } catch (e) {
      run.error = { step: name, ...errorOf(e) };
    }
  };
  return run;
}

// What FN returned, or the API's refusal of it (an instance of APIERROR,
// the SDK's APIError class; anything else is thrown on).
export async function refusal(fn, apiError) {
  try {
    return { returned: await fn() };
  } catch (e) {
    if (!(e instanceof apiError)) throw e;
    return { name: e.constructor.name, status: e.status, error: e.error };
  }
}

// A folder's files as the SDK is given a directory: one file each, named
// with the folder ("basic_math/scripts/add.py"), in a stable order, each
// made by MAKE (toFile or toStreamingFile).
export async function folderFiles(dir, make) {
  const top = path.basename(dir);
  const out = [];
  const walk = (d) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })
                          .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const full = path.join(d, entry.name);
      if (entry.isDirectory()) walk(full);
      else out.push(full);
    }
  };
  walk(dir);
  return Promise.all(out.map((full) => make(fs.readFileSync(full),
                                            top + "/" + path.relative(dir, full))));
}

// A fetch that records in SENT every JSON request body, as it went over
// the wire.
export function recordingFetch(sent) {
  return async (url, init) => {
    if (typeof init?.body === "string") {
      try {
        sent.push(JSON.parse(init.body));
      } catch {
        sent.push(init.body);
      }
    }
    return fetch(url, init);
  };
}
