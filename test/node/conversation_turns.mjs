// Turns of one conversation through the official OpenAI Node SDK:
// client.responses.create with `conversation` on each turn, each turn's
// input only its own script (the upstream keeps the conversation).
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 node conversation_turns.mjs \
//          CONVERSATION_ID '<script JSON of turn 1>' ['<turn 2>' ...]
//
// Output on stdout: each turn's response as the SDK parsed it, one line of
// JSON each. Exit status: 0 all good; 2 a request failed or the arguments
// are wrong.
import OpenAI from "openai";

function die(msg) {
  process.stderr.write(msg + "\n");
  process.exit(2);
}

const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
const [conversation, ...turns] = process.argv.slice(2);
if (!conversation || !turns.length) die("usage: conversation_turns.mjs ID SCRIPT...");

const client = new OpenAI({ apiKey: "test-key", baseURL, maxRetries: 0, timeout: 60_000 });

for (const script of turns) {
  let response;
  try {
    response = await client.responses.create({
      model: process.env.MODEL || "m",
      tools: [{ type: "code_interpreter", container: { type: "auto" } }],
      include: ["code_interpreter_call.outputs"],
      conversation,
      input: "SCRIPT: " + JSON.stringify(JSON.parse(script)),
    });
  } catch (e) {
    const detail = e?.status ? ` (HTTP ${e.status}) ${JSON.stringify(e.error ?? null)}` : "";
    die(`request failed: ${e?.constructor?.name ?? "Error"}: ${e?.message}${detail}`);
  }
  process.stdout.write(JSON.stringify(response) + "\n");
}
