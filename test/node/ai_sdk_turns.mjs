// A two-turn conversation through the Vercel AI SDK (`ai`'s generateText with
// the `@ai-sdk/openai` provider's Responses model and its code interpreter
// tool, openai.tools.codeInterpreter), the way an application keeps one: the
// second turn passes the first turn's messages (its result's
// response.messages) back, plus a new user message.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 API_KEY=... node ai_sdk_turns.mjs [--no-store] '<script 1>' '<script 2>'
//   --no-store  both turns with providerOptions {openai: {store: false}}
//               (default: the provider's, which does not send "store")
//   MODEL defaults to "m".
//
// Output on stdout: one line of JSON,
//   {"turns": [{"text", "content", "toolCalls", "toolResults",
//               "responseMessages", "warnings", "finishReason"}...],
//    "sent": [every request body the SDK sent, in order],
//    "error": null, or {"turn": 1|2, "name", "message", "status", "body"}}
// Exit status: 0 both turns ran; 1 a turn failed (see "error"); 2 the
// arguments are wrong.
import { generateText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";

import { die, recordingFetch } from "./common.mjs";

const args = process.argv.slice(2);
const flags = new Set(args.filter((a) => a.startsWith("--")));
const scripts = args.filter((a) => !a.startsWith("--"));
for (const f of flags) {
  if (f !== "--no-store") die(`unknown option ${f}`);
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

// Every request body the SDK sends, as it went over the wire.
const sent = [];

// The SDK logs its warnings on stdout; they are in the report instead.
globalThis.AI_SDK_LOG_WARNINGS = false;

const openai = createOpenAI({
  apiKey: process.env.API_KEY || "test-key",
  baseURL,
  fetch: recordingFetch(sent),
});
const model = openai.responses(process.env.MODEL || "m");
const tools = { code_interpreter: openai.tools.codeInterpreter({}) };
const providerOptions = flags.has("--no-store") ? { openai: { store: false } } : undefined;

function summary(result) {
  return {
    text: result.text,
    content: result.content,
    toolCalls: result.toolCalls,
    toolResults: result.toolResults,
    responseMessages: result.response.messages,
    warnings: result.warnings ?? [],
    finishReason: result.finishReason,
  };
}

const turns = [];
let error = null;
const messages = [];
for (const n of [1, 2]) {
  messages.push({ role: "user", content: "SCRIPT: " + scripts[n - 1] });
  try {
    const result = await generateText({ model, tools, messages, providerOptions,
                                        maxRetries: 0 });
    turns.push(summary(result));
    messages.push(...result.response.messages);
  } catch (e) {
    error = {
      turn: n,
      name: e?.constructor?.name ?? "Error",
      message: String(e?.message ?? e),
      status: e?.statusCode ?? null,
      body: e?.responseBody ?? null,
    };
    break;
  }
}

process.stdout.write(JSON.stringify({ turns, sent, error }) + "\n");
process.exit(error ? 1 : 0);
