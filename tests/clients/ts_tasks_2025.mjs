// Drives flowgate with the TypeScript SDK 1.x client's experimental tasks API (protocol 2025-11-25).
//
// Run by scripts/clients against flowgate serving tests/clients/tools.yaml on the local engine:
//
//     node tests/clients/ts_tasks_2025.mjs MODULES_DIR http://127.0.0.1:PORT/mcp
//     node tests/clients/ts_tasks_2025.mjs MODULES_DIR FUNCTION_URL/mcp --lambda SECONDS
//
// With `--lambda SECONDS` (flowgate as a Lambda function whose timeout is shorter than SECONDS), a
// task that runs SECONDS is also fetched with tasks/result (`getTaskResult`) at once: each hold
// ends before the invocation's deadline, and the transport's resumable-stream reconnect (GET with
// Last-Event-ID) resumes it until the result comes.
//
// MODULES_DIR is the node_modules folder holding @modelcontextprotocol/sdk. Everything goes through
// the SDK's own public client API, unmodified: `Client.connect` over `StreamableHTTPClientTransport`
// (which negotiates 2025-11-25), `listTools`, and `client.experimental.tasks`: `callToolStream`
// with a `task` option (which creates the task, polls tasks/get and fetches tasks/result, where
// an approval's question arrives as elicitation/create for the client's request handler),
// `getTask`, `cancelTask` and `listTasks`. Any failed check throws, and the process exits non-zero.

import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, url, flag, lambdaSeconds] = process.argv.slice(2);
const sdk = (file) => import(pathToFileURL(path.join(modules, '@modelcontextprotocol/sdk/dist/esm', file)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { CallToolResultSchema, ElicitRequestSchema } = await sdk('types.js');

function check(condition, what) {
  if (!condition) throw new Error(what);
}
const text = (result) => (result.content ?? []).map((b) => b.text ?? '').join('');

const client = new Client({ name: 'flowgate-ts-2025', version: '1.0.0' }, { capabilities: { elicitation: {} } });
// The revision's own input path: tasks/result streams a question as elicitation/create.
const questions = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  questions.push(request.params.message);
  return { action: 'accept', content: { confirm: true } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const caps = client.getServerCapabilities();
check(caps?.tasks?.requests?.tools?.call, `flowgate declares no tasks.requests.tools.call: ${JSON.stringify(caps)}`);
const tools = (await client.listTools()).tools;
const support = Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport]));
check(support.long_report === 'required', `taskSupport: ${JSON.stringify(support)}`);
console.log(`ok  initialized with 2025-11-25; taskSupport: ${JSON.stringify(support)}`);

// A long tool, as a task, to its result: the SDK polls tasks/get and fetches tasks/result.
const started = Date.now();
let taskId;
let result;
const seen = [];
for await (const message of client.experimental.tasks.callToolStream(
  { name: 'long_report', arguments: { days: 4, seconds: 2 } },
  CallToolResultSchema,
  { task: { ttl: 60000 } },
)) {
  if (message.type === 'taskCreated') taskId = message.task.taskId;
  if (message.type === 'taskStatus') seen.push(message.task.status);
  if (message.type === 'result') result = message.result;
  if (message.type === 'error') throw message.error;
}
const took = (Date.now() - started) / 1000;
check(taskId, 'no task was created');
check(text(result) === 'Report for 4 days is ready', `long_report returned ${JSON.stringify(result)}`);
check(took >= 2, `finished in ${took}s, before its 2 s of work`);
console.log(`ok  long tool ran as a task (statuses seen: ${[...new Set(seen)].join(', ')}) and finished in ${took.toFixed(1)}s`);

// An approval: input_required, the question through tasks/result, then the result.
let approved;
for await (const message of client.experimental.tasks.callToolStream(
  { name: 'approve_deploy', arguments: { service: 'billing' } },
  CallToolResultSchema,
  { task: { ttl: 60000 } },
)) {
  if (message.type === 'result') approved = message.result;
  if (message.type === 'error') throw message.error;
}
check(text(approved) === 'Deployed billing', `approve_deploy returned ${JSON.stringify(approved)}`);
check(questions.length === 1 && questions[0] === 'Deploy billing to production?', `questions: ${JSON.stringify(questions)}`);
console.log(`ok  approval: the question came through tasks/result (${questions[0]}) and the tool said ${text(approved)}`);

// A cancel while the task runs.
let cancelled;
for await (const message of client.experimental.tasks.callToolStream(
  { name: 'long_report', arguments: { days: 9, seconds: 60 } },
  CallToolResultSchema,
  { task: { ttl: 60000 } },
)) {
  if (message.type === 'taskCreated') {
    cancelled = message.task.taskId;
    const answer = await client.experimental.tasks.cancelTask(cancelled);
    check(answer.status === 'cancelled', `cancel answered ${answer.status}`);
  }
  if (message.type === 'error' || message.type === 'result') break;
}
const after = await client.experimental.tasks.getTask(cancelled);
check(after.status === 'cancelled', `after cancel the task is ${after.status}`);
console.log('ok  cancel: the running task is cancelled');

const listed = await client.experimental.tasks.listTasks();
check(listed.tasks.length >= 2, `tasks/list shows ${listed.tasks.length} tasks`);
console.log(`ok  tasks/list shows this caller's ${listed.tasks.length} tasks`);

for (const bad of [taskId.slice(0, -4) + 'AAAA', 'fg1.nope.x', 'not-a-task']) {
  let code;
  try {
    await client.experimental.tasks.getTask(bad);
  } catch (e) {
    code = e.code;
  }
  check(code === -32602, `forged id ${bad.slice(0, 16)}... gave ${code}`);
}
console.log('ok  forged task ids refused with -32602');
if (flag === '--lambda') {
  const seconds = Number(lambdaSeconds);
  const created = await client.experimental.tasks.callToolStream(
    { name: 'long_report', arguments: { days: 6, seconds } },
    CallToolResultSchema,
    { task: { ttl: 120000 } },
  ).next();
  check(created.value?.type === 'taskCreated', `no task: ${JSON.stringify(created.value)}`);
  const begun = Date.now();
  const long = await client.experimental.tasks.getTaskResult(created.value.task.taskId, CallToolResultSchema, { timeout: 120000 });
  const tookLong = (Date.now() - begun) / 1000;
  check(text(long) === 'Report for 6 days is ready', `tasks/result returned ${JSON.stringify(long)}`);
  check(tookLong >= seconds - 1, `tasks/result answered in ${tookLong}s, before the task's ${seconds}s`);
  console.log(`ok  a ${seconds}s task outlived the function's timeout: tasks/result resumed until the result (${tookLong.toFixed(1)}s)`);
}
await client.close();
