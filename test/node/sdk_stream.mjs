// One streamed request through the official OpenAI Node SDK, read the way an
// application reads it.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 node sdk_stream.mjs MODE '<script JSON>'
//   MODE "create": client.responses.create({..., stream: true}), iterating
//                  the events it yields;
//   MODE "stream": client.responses.stream({...}), events collected through
//                  its "event" listener, then finalResponse().
//   (the script may also come in the SCRIPT environment variable; MODEL
//   defaults to "m").
//
// Output on stdout: one line of JSON,
//   {"mode": MODE, "events": [every event as the SDK yielded it],
//    "final": the final response -- finalResponse() in "stream" mode, the
//             response carried by the terminal event in "create" mode}
// Exit status: 0 the stream was read to its end; 2 the request or the
// stream failed (the SDK's error on stderr) or the arguments are wrong.
import OpenAI from "openai";

function die(msg) {
  process.stderr.write(msg + "\n");
  process.exit(2);
}

const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
const mode = process.argv[2];
if (mode !== "create" && mode !== "stream") die(`unknown mode ${JSON.stringify(mode)}`);
const scriptText = process.argv[3] ?? process.env.SCRIPT;
if (!scriptText) die("no script: pass it after the mode or in SCRIPT");
let rounds;
try {
  rounds = JSON.parse(scriptText);
} catch (e) {
  die("the script is not JSON: " + e.message);
}

const client = new OpenAI({
  apiKey: "test-key",
  baseURL,
  maxRetries: 0,
  timeout: 60_000,
});

const params = {
  model: process.env.MODEL || "m",
  tools: [{ type: "code_interpreter", container: { type: "auto" } }],
  include: ["code_interpreter_call.outputs"],
  input: "SCRIPT: " + JSON.stringify(rounds),
};

const TERMINAL = new Set(["response.completed", "response.failed", "response.incomplete"]);
const events = [];
let final = null;

function describe(e) {
  const detail = e?.status ? ` (HTTP ${e.status}) ${JSON.stringify(e.error ?? null)}` : "";
  return `${e?.constructor?.name ?? "Error"}: ${e?.message}${detail}`;
}

try {
  if (mode === "create") {
    const stream = await client.responses.create({ ...params, stream: true });
    for await (const event of stream) {
      events.push(event);
      if (TERMINAL.has(event.type)) final = event.response;
    }
  } else {
    const stream = client.responses.stream(params);
    stream.on("event", (event) => events.push(event));
    final = await stream.finalResponse();
  }
} catch (e) {
  const seen = events.map((ev) => ev.type).join(", ");
  die(`the ${mode} stream failed: ${describe(e)}\nevents before the failure: ${seen}`);
}

process.stdout.write(JSON.stringify({ mode, events, final }) + "\n");
process.exit(0);
