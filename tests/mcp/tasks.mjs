// tasks.mjs - task-augmented tools/call (protocol 2025-11-25): the
// CreateTaskResult at once, tasks/get, tasks/list, tasks/result, tasks/cancel.
import { CallToolResultSchema, ToolListChangedNotificationSchema }
  from '@modelcontextprotocol/sdk/types.js';
import { check, connect, deadline, fail } from './common.mjs';

deadline(60000);
const { client } = await connect();
const tasks = client.experimental.tasks;
// The task tools (get_running_tasks, cancel_task) come and go with live
// tasks in the core; they are not on the MCP list, so no list_changed.
let changed = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema,
                              () => { changed++; });
await client.listTools(); // the SDK picks task mode from the tool list

// The stream: taskCreated, (taskStatus)*, result.
const kinds = [];
let result = null, taskId = null;
for await (const msg of tasks.callToolStream(
  { name: 'echo_async', arguments: { text: 'as a task', steps: 3, delay_ms: 30 },
    task: { ttl: 60000 } }, CallToolResultSchema)) {
  kinds.push(msg.type);
  if (msg.type === 'taskCreated') taskId = msg.task.taskId;
  if (msg.type === 'result') result = msg.result;
  if (msg.type === 'error') fail(`task stream error: ${msg.error}`);
}
check(kinds[0] === 'taskCreated', `first message: ${kinds}`);
check(result && result.content[0].text === 'as a task',
      `task result: ${JSON.stringify(result)}`);

const got = await tasks.getTask(taskId);
check(got.status === 'completed', `tasks/get: ${JSON.stringify(got)}`);
const list = await tasks.listTasks();
check(list.tasks.some((t) => t.taskId === taskId),
      `tasks/list: ${JSON.stringify(list)}`);
// An async call made without `task` runs as a task in the core, but it is
// not an MCP task: tasks/list leaves it out.
const plain = await client.callTool({ name: 'echo_async',
  arguments: { text: 'plain', steps: 1, delay_ms: 1 } });
const plainId = String(plain._meta['toolhost/call_id']);
const list2 = await tasks.listTasks();
check(plain.content[0].text === 'plain' &&
      !list2.tasks.some((t) => String(t.taskId) === plainId) &&
      list2.tasks.some((t) => t.taskId === taskId),
      `tasks/list lists a plain call ${plainId}: ${JSON.stringify(list2)}`);
const again = await tasks.getTaskResult(taskId, CallToolResultSchema);
check(again.content[0].text === 'as a task', 'tasks/result after the end');

// A long task, cancelled.
let longId = null;
const it = tasks.callToolStream(
  { name: 'echo_async', arguments: { text: 'never', steps: 1000, delay_ms: 50 },
    task: { ttl: 60000 } }, CallToolResultSchema);
const first = await it.next();
check(first.value.type === 'taskCreated', 'long task created');
longId = first.value.task.taskId;
const c = await tasks.cancelTask(longId);
check(c.status === 'cancelled', `tasks/cancel: ${JSON.stringify(c)}`);
const g2 = await tasks.getTask(longId);
check(g2.status === 'cancelled', `after cancel: ${JSON.stringify(g2)}`);
// Cancelling it again is an error (terminal).
try {
  await tasks.cancelTask(longId);
  fail('second cancel succeeded');
} catch (e) {
  check(e.code === -32602, `second cancel code ${e.code}`);
}
await new Promise((r) => setTimeout(r, 300));
check(changed === 0, `list_changed sent for task tools (${changed})`);
await client.close();
console.log('tasks: ok');
