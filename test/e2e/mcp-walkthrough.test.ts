/**
 * docs/mcp.md's "Five minutes with an agent", as a reader runs it: `countersign start` in an empty
 * folder (the shipped configuration: the demo upstream's MCP server behind the MCP route, decided
 * inline for clients without permits), then the page's own `agent.mjs`, taken from the page, run
 * with Node in that folder with the MCP SDK installed there (`node_modules` linked, as `npm install
 * @modelcontextprotocol/sdk` would leave it). Its output must be the page's, line by line (`…`
 * stands for what changes from run to run). The held refund is approved with the bootstrap key, as
 * the page does in the console, then `node agent.mjs again` must print the page's second output,
 * and a third run must be held again. The gate's own counters must show exactly the calls the page
 * says ran. Runs the compiled CLI.
 *
 * Then a client nobody here wrote, the MCP Inspector's CLI (`@modelcontextprotocol/inspector-cli`),
 * against the same gated endpoint: the list it prints, an allowed call, a held call with its
 * approval link, a blocked tool, and a call without a caller.
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/mcp-walkthrough.test.js
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { repoPath } from '../helpers/repo.js';

const CLI = resolve('dist/bin/countersign.js');

/** The fenced blocks of a Markdown page, in order, with their language. */
function fences(markdown: string): Array<{ language: string; text: string }> {
  return [...markdown.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((match) => ({ language: match[1]!, text: match[2]! }));
}

/** The walkthrough's script (the `js` block that starts `// agent.mjs`) and the outputs the page shows for its two runs. */
async function walkthrough(): Promise<{ script: string; first: string[]; again: string[] }> {
  const page = await readFile(repoPath('docs', 'mcp.md'), 'utf8');
  const section = page.slice(page.indexOf('## Five minutes with an agent'), page.indexOf('## Configuration'));
  const blocks = fences(section);
  const script = blocks.find((block) => block.language === 'js' && block.text.startsWith('// agent.mjs'));
  const [first, again] = blocks.filter((block) => block.language === 'text').map((block) => block.text.trimEnd().split('\n'));
  if (!script || !first || !again) throw new Error("docs/mcp.md's walkthrough has no agent.mjs, or not its two outputs");
  return { script: script.text, first, again };
}

/** A line of the page's output as a pattern: literal, with `…` for anything (possibly nothing). */
const linePattern = (line: string) => new RegExp(`^${line.split('…').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);

// `countersign start` opens an embedded database and three servers on a machine the other test files keep busy.
t.setTimeout(5 * 60_000);

// As the reader starts it, from their own folder on the shipped configuration; on ports the OS picks.
const folder = await mkdtemp(join(tmpdir(), 'countersign-mcp-walkthrough-'));
await symlink(resolve('node_modules'), join(folder, 'node_modules'), 'dir');
const env = {
  PATH: process.env.PATH,
  COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_PROXY_LISTEN: '127.0.0.1:0',
  COUNTERSIGN_PROXY_ADMIN_LISTEN: '127.0.0.1:0',
};
const start = spawn(process.execPath, [CLI, 'start', '--upstream-listen', '127.0.0.1:0'], { cwd: folder, env });
t.teardown(() => start.kill('SIGKILL'));
let log = '';
start.stdout.on('data', (chunk) => (log += String(chunk)));
start.stderr.on('data', (chunk) => (log += String(chunk)));
const ready = await new Promise<{ authority: string; proxy: string; admin: [string, string] }>((resolveReady, reject) => {
  start.stdout.on('data', () => {
    const line = log.split('\n').find((candidate) => candidate.includes('"msg":"ready:'));
    if (line) resolveReady(JSON.parse(line));
  });
  start.once('exit', (code) => reject(new Error(`countersign start exited with ${code}:\n${log}`)));
});

t.test("docs/mcp.md's walkthrough runs as written", async (t) => {
  const expected = await walkthrough();
  await writeFile(join(folder, 'agent.mjs'), expected.script);

  /** Runs `node agent.mjs ...args` in the folder; resolves its output, with the test's authority address as the page's. */
  const runAgent = async (...args: string[]): Promise<string[]> => {
    const agent = spawn(process.execPath, ['agent.mjs', ...args], { cwd: folder, env: { ...env, GATE: ready.proxy } });
    let output = '';
    let errors = '';
    agent.stdout.on('data', (chunk) => (output += String(chunk)));
    agent.stderr.on('data', (chunk) => (errors += String(chunk)));
    const [code] = await once(agent, 'exit');
    t.equal(code, 0, `node agent.mjs ${args.join(' ')} exits 0${errors ? `:\n${errors}` : ''}`);
    // The page shows the console at the default address; the test's authority listens elsewhere.
    return output.trimEnd().split('\n').map((line) => line.replaceAll(ready.authority, 'http://127.0.0.1:7070'));
  };
  const matches = (lines: string[], expected: string[], what: string) => {
    t.equal(lines.length, expected.length, `${what}: as many lines as the page shows`, { output: lines });
    expected.forEach((line, i) => t.match(lines[i], linePattern(line), `${what}, line ${i + 1}: ${line}`));
  };

  const first = await runAgent();
  matches(first, expected.first, 'node agent.mjs');
  const approvalId = /\?approval=([0-9a-f-]+)/.exec(first.join('\n'))?.[1];
  t.ok(approvalId, 'the held refund names its approval');

  // The page approves in the console, signed in with the bootstrap key; here, through the same API.
  const { api_key: adminKey } = JSON.parse(await readFile(join(folder, '.countersign', 'bootstrap.json'), 'utf8')) as { api_key: string };
  const resolved = await request(`${ready.authority}/v1/approvals/${approvalId}/resolve`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'approve' }),
  });
  t.equal(resolved.statusCode, 200, 'the bootstrap key approves what the MCP gate asked for', { body: await resolved.body.text() });

  matches(await runAgent('again'), expected.again, 'node agent.mjs again');
  const third = await runAgent('again');
  t.match(third[0], /: refused \(APPROVAL_REQUIRED\)$/, 'a third run is held again: the approval was used once');

  // What the gate decided, from its own counters: three permits (get_ticket, the 40 USD refund and
  // the approved 500 USD refund), each verified once; the blocked tool refused once.
  const metrics = await (await request(`${ready.admin[1]}/metrics`)).body.text();
  const count = (result: string, reason?: string) =>
    metrics
      .split('\n')
      .filter((line) => line.startsWith('countersign_proxy_verifications_total{') && line.includes('route="helpdesk-mcp"') && line.includes(`result="${result}"`))
      .filter((line) => reason === undefined || line.includes(`reason="${reason}"`))
      .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
  t.equal(count('verified'), 3, 'three permits verified and consumed at the gate');
  t.equal(count('rejected', 'TOOL_BLOCKED'), 1, 'the blocked tool refused once');
  t.equal(count('rejected', 'APPROVAL_REQUIRED'), 2, 'the refund held twice: before its approval, and after it was used');

});

/** The Inspector's CLI reads its own package.json relative to the working directory: it runs from its build folder. */
const INSPECTOR = resolve('node_modules/@modelcontextprotocol/inspector-cli/build');

/** What the Inspector's CLI prints for tools/list and tools/call, as far as the test reads it. */
interface InspectorOutput {
  tools?: Array<{ name: string }>;
  content?: unknown;
  isError?: boolean;
  _meta?: Record<string, unknown>;
}

t.test("the MCP Inspector's CLI, pointed at the gate, lists and calls tools as the policy says", async (t) => {
  /** Runs the Inspector's CLI against the gate's MCP endpoint; resolves its exit code and what it printed as JSON (or text). */
  const inspect = async (headers: string[], ...args: string[]): Promise<{ code: number; output: InspectorOutput | null; text: string }> => {
    const cli = spawn(process.execPath, ['index.js', `${ready.proxy}/mcp`, '--transport', 'http', ...headers.flatMap((header) => ['--header', header]), ...args], { cwd: INSPECTOR, env: { PATH: process.env.PATH } });
    let text = '';
    cli.stdout.on('data', (chunk) => (text += String(chunk)));
    cli.stderr.on('data', (chunk) => (text += String(chunk)));
    const [code] = await once(cli, 'exit');
    let output: InspectorOutput | null = null;
    try {
      output = JSON.parse(text) as InspectorOutput;
    } catch {
      // Not JSON: an error the CLI printed; `text` holds it.
    }
    return { code: code as number, output, text };
  };
  const agent = ['x-agent-id: support-agent'];
  const call = (headers: string[], tool: string, ...toolArgs: string[]) => inspect(headers, '--method', 'tools/call', '--tool-name', tool, '--tool-arg', ...toolArgs);

  const listed = await inspect(agent, '--method', 'tools/list');
  t.equal(listed.code, 0, 'tools/list succeeds', { output: listed.text });
  t.same(listed.output?.tools?.map((tool) => tool.name), ['get_ticket', 'issue_refund', 'send_email'], 'the blocked drop_database is not listed');

  const ticket = await call(agent, 'get_ticket', 'id=T-1');
  t.equal(ticket.code, 0, 'get_ticket: the CLI succeeds', { output: ticket.text });
  t.same(ticket.output?.content, [{ type: 'text', text: 'ticket T-1: open, the customer asks for a refund on order A-17' }], 'get_ticket runs: the server\'s own result');
  t.notOk(ticket.output?.isError, 'and not as an error');

  const held = await call(agent, 'issue_refund', 'order=A-18', 'amount_usd=900');
  t.equal(held.output?.isError, true, 'the 900 USD refund does not run', { output: held.text });
  t.equal(held.output?._meta?.['countersign/reason'], 'APPROVAL_REQUIRED', 'it waits for an approval');
  t.match(String(held.output?._meta?.['countersign/approval_url']), new RegExp(`^${ready.authority}/console/\\?approval=[0-9a-f-]+$`), 'with a link to it in the console');

  const dropped = await call(agent, 'drop_database', 'name=tickets');
  t.equal(dropped.output?.isError, true, 'drop_database does not run', { output: dropped.text });
  t.equal(dropped.output?._meta?.['countersign/reason'], 'TOOL_BLOCKED', 'it is blocked');

  const anonymous = await call([], 'get_ticket', 'id=T-1');
  t.not(anonymous.code, 0, 'a call without the caller header fails', { output: anonymous.text });
  t.notMatch(anonymous.text, /ticket T-1: open/, 'and does not run');
});

t.test('countersign start stops cleanly', async (t) => {
  start.kill('SIGTERM');
  t.equal((await once(start, 'exit'))[0], 0);
});
