/**
 * docs/mcp.md's "Five minutes with an agent", as a reader runs it: `countersign start` in an empty
 * folder (the shipped configuration: the demo upstream's MCP server behind the MCP route), then the
 * page's own `agent.mjs`, taken from the page, run with Node in that folder with the MCP SDK
 * installed there (`node_modules` linked, as `npm install @modelcontextprotocol/sdk` would leave
 * it). Its output must be the page's, line by line (`…` stands for what changes from run to run),
 * and the MCP server must have run exactly the calls the page says ran. Runs the compiled CLI.
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

/** The walkthrough's script (the `js` block that starts `// agent.mjs`) and the output the page shows for it. */
async function walkthrough(): Promise<{ script: string; expected: string[] }> {
  const page = await readFile(repoPath('docs', 'mcp.md'), 'utf8');
  const section = page.slice(page.indexOf('## Five minutes with an agent'), page.indexOf('## Configuration'));
  const blocks = fences(section);
  const script = blocks.find((block) => block.language === 'js' && block.text.startsWith('// agent.mjs'));
  const output = blocks.find((block) => block.language === 'text');
  if (!script || !output) throw new Error("docs/mcp.md's walkthrough has no agent.mjs or no output block");
  return { script: script.text, expected: output.text.trimEnd().split('\n') };
}

/** A line of the page's output as a pattern: literal, with `…` for anything (possibly nothing). */
const linePattern = (line: string) => new RegExp(`^${line.split('…').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);

// `countersign start` opens an embedded database and three servers on a machine the other test files keep busy.
t.setTimeout(5 * 60_000);

t.test("docs/mcp.md's walkthrough runs as written", async (t) => {
  const { script, expected } = await walkthrough();
  const folder = await mkdtemp(join(tmpdir(), 'countersign-mcp-walkthrough-'));
  await symlink(resolve('node_modules'), join(folder, 'node_modules'), 'dir');
  await writeFile(join(folder, 'agent.mjs'), script);

  // As the reader starts it, from their own folder on the shipped configuration; on ports the OS picks.
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

  const agent = spawn(process.execPath, ['agent.mjs'], { cwd: folder, env: { ...env, AUTHORITY: ready.authority, GATE: ready.proxy } });
  let output = '';
  let errors = '';
  agent.stdout.on('data', (chunk) => (output += String(chunk)));
  agent.stderr.on('data', (chunk) => (errors += String(chunk)));
  const [code] = await once(agent, 'exit');
  t.equal(code, 0, `node agent.mjs exits 0${errors ? `:\n${errors}` : ''}`);

  // The page shows the console at the default address; the test's authority listens elsewhere.
  const lines = output.trimEnd().split('\n').map((line) => line.replaceAll(ready.authority, 'http://127.0.0.1:7070'));
  t.equal(lines.length, expected.length, 'as many lines as the page shows', { output });
  expected.forEach((line, i) => t.match(lines[i], linePattern(line), `line ${i + 1}: ${line}`));

  // What the gate decided, from its own counters: the two allowed calls, each verified once, and
  // the call without a permit refused. The denied and held calls never reached it.
  const metrics = await (await request(`${ready.admin[1]}/metrics`)).body.text();
  const count = (result: string, reason?: string) =>
    metrics
      .split('\n')
      .filter((line) => line.startsWith('countersign_proxy_verifications_total{') && line.includes('route="helpdesk-mcp"') && line.includes(`result="${result}"`))
      .filter((line) => reason === undefined || line.includes(`reason="${reason}"`))
      .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
  t.equal(count('verified'), 2, 'two permits verified and consumed at the gate: get_ticket and the 40 USD refund');
  t.equal(count('rejected'), 1, 'one refusal');
  t.equal(count('rejected', 'MISSING_PERMIT'), 1, 'the call without a permit');

  start.kill('SIGTERM');
  t.equal((await once(start, 'exit'))[0], 0, 'countersign start stops cleanly');
});
