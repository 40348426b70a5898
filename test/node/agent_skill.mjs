// A skill on the Agents SDK's hosted shell: the skill is uploaded with the
// OpenAI SDK (client.skills.create, one file per file of the folder, named
// with the folder), then an Agent whose tool is shellTool with a
// container_auto environment that references it is run twice, the second
// run chained on the first with previousResponseId.
//
// Usage: BASE_URL=http://127.0.0.1:PORT/v1 API_KEY=... \
//          node agent_skill.mjs <skill folder> '<script 1>' '<script 2>'
//   In each script "@HEX@" stands for the skill id's hex (its id without
//   "skill_"), known only once the skill is made. MODEL defaults to "m".
//
// Output on stdout: one line of JSON,
//   {"skill": what skills.create returned,
//    "tool": the shell tool as the Agent holds it,
//    "turns": [{"finalOutput", "newItems", "lastResponseId"}...],
//    "sent": [every JSON request body the SDK sent, in order],
//    "error": null, or {"step", "name", "message", "status", "body"}}
// Exit status: 0 all ran; 1 a step failed (see "error"); 2 the arguments
// are wrong.
import fs from "node:fs";

import OpenAI, { toStreamingFile } from "openai";
import { Agent, run, shellTool, setDefaultOpenAIClient, setOpenAIAPI,
         setTracingDisabled } from "@openai/agents";

import { die, errorOf, folderFiles, recordingFetch } from "./common.mjs";

const [skillDir, ...scripts] = process.argv.slice(2);
const baseURL = process.env.BASE_URL;
if (!baseURL) die("BASE_URL is not set");
if (scripts.length !== 2 || !fs.existsSync(skillDir))
  die("usage: agent_skill.mjs <skill folder> '<script 1>' '<script 2>'");

const sent = [];
const client = new OpenAI({ apiKey: process.env.API_KEY || "test-key", baseURL,
                            maxRetries: 0, timeout: 60_000, fetch: recordingFetch(sent) });
setTracingDisabled(true);
setOpenAIAPI("responses");
setDefaultOpenAIClient(client);

const out = { skill: null, tool: null, turns: [], sent, error: null };
let step = "create";
try {
  // toStreamingFile: the name goes as given, folder and all (openai 6's
  // toFile sends the basename only; see skills_api.mjs)
  out.skill = await client.skills.create({ files: await folderFiles(skillDir, toStreamingFile) });
  const hex = out.skill.id.replace(/^skill_/, "");
  const tool = shellTool({ environment: {
    type: "container_auto",
    skills: [{ type: "skill_reference", skillId: out.skill.id }],
  } });
  out.tool = tool;
  const agent = new Agent({ name: "Skilled", instructions: "Use your skills.",
                            model: process.env.MODEL || "m", tools: [tool] });
  let previousResponseId;
  for (const [n, script] of scripts.entries()) {
    step = `run ${n + 1}`;
    const result = await run(agent, "SCRIPT: " + script.replaceAll("@HEX@", hex),
                             previousResponseId ? { previousResponseId } : {});
    previousResponseId = result.lastResponseId;
    out.turns.push({ finalOutput: result.finalOutput ?? null,
                     newItems: result.newItems.map((i) => i.toJSON()),
                     lastResponseId: result.lastResponseId ?? null });
  }
} catch (e) {
  out.error = { step, ...errorOf(e) };
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(out.error ? 1 : 0);
