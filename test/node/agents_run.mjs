// A two-turn conversation through the OpenAI Agents SDK: an Agent whose only
// tool is the hosted code interpreter, run once, then run again on the first
// run's whole history (its code_interpreter_call items included) plus a new
// user message.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 node agents_run.mjs [OPTIONS] '<script 1>' '<script 2>'
//   OPTIONS: --no-outputs  the tool without includeOutputs (no
//                          "code_interpreter_call.outputs" in include)
//            --stream      both runs streamed (run(..., {stream: true}))
//            --shell       the hosted shell too (shellTool with a
//                          container_auto environment)
//   MODEL defaults to "m".
//
// Output on stdout: one line of JSON,
//   {"turns": [{"finalOutput", "history", "newItems", "lastResponseId",
//               "events"}...],
//    "sent": [every request body the SDK sent, in order],
//    "error": null, or {"turn": 1|2, "name", "message", "status", "body"}}
//   ("events": the streamed run's events, null when not streamed: the
//   Responses stream events as "model:<type>", the SDK's own model events as
//   "raw:<type>", run items as "item:<name>", others by their type)
// Exit status: 0 both turns ran; 1 a turn failed (see "error"); 2 the
// arguments are wrong.
import OpenAI from "openai";
import {
  Agent,
  run,
  codeInterpreterTool,
  shellTool,
  setDefaultOpenAIClient,
  setOpenAIAPI,
  setTracingDisabled,
} from "@openai/agents";

import { die, errorOf, recordingFetch } from "./common.mjs";

const args = process.argv.slice(2);
const flags = new Set(args.filter((a) => a.startsWith("--")));
const scripts = args.filter((a) => !a.startsWith("--"));
for (const f of flags) {
  if (f !== "--no-outputs" && f !== "--stream" && f !== "--shell") die(`unknown option ${f}`);
}
const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
if (scripts.length !== 2) die("two scripts are needed, one per turn");
for (const s of scripts) {
  try {
    JSON.parse(s);
  } catch (e) {
    die("a script is not JSON: " + e.message);
  }
}
const streamed = flags.has("--stream");

// Every request body the SDK sends, as it went over the wire.
const sent = [];

setTracingDisabled(true);
setOpenAIAPI("responses");
setDefaultOpenAIClient(new OpenAI({
  apiKey: "test-key",
  baseURL,
  maxRetries: 0,
  timeout: 60_000,
  fetch: recordingFetch(sent),
}));

const agent = new Agent({
  name: "Calculator",
  instructions: "Use the code interpreter for arithmetic.",
  model: process.env.MODEL || "m",
  tools: [
    codeInterpreterTool(flags.has("--no-outputs") ? {} : { includeOutputs: true }),
    ...(flags.has("--shell") ? [shellTool({ environment: { type: "container_auto" } })] : []),
  ],
});

async function turn(input) {
  if (!streamed) {
    const result = await run(agent, input);
    return { result, events: null };
  }
  const result = await run(agent, input, { stream: true });
  const events = [];
  for await (const event of result) {
    if (event.type === "raw_model_stream_event") {
      // "model" wraps an event of the Responses stream as it arrived.
      events.push(event.data?.type === "model" ? `model:${event.data.event?.type}`
        : `raw:${event.data?.type}`);
    } else if (event.type === "run_item_stream_event") {
      events.push(`item:${event.name}`);
    } else {
      events.push(event.type);
    }
  }
  await result.completed;
  if (result.error) throw result.error;
  return { result, events };
}

function summary({ result, events }) {
  return {
    finalOutput: result.finalOutput ?? null,
    history: result.history,
    newItems: result.newItems.map((i) => i.toJSON()),
    lastResponseId: result.lastResponseId ?? null,
    events,
  };
}

const turns = [];
let error = null;
let input = "SCRIPT: " + scripts[0];
for (const n of [1, 2]) {
  try {
    const outcome = await turn(input);
    turns.push(summary(outcome));
    input = [...outcome.result.history, { role: "user", content: "SCRIPT: " + scripts[1] }];
  } catch (e) {
    error = { turn: n, ...errorOf(e) };
    break;
  }
}

process.stdout.write(JSON.stringify({ turns, sent, error }) + "\n");
process.exit(error ? 1 : 0);
