/**
 * The proxy benchmark's MCP rows: what the MCP gate costs an agent, in the same run as the HTTP
 * rows. The bench upstream serves the demo MCP server of `countersign start` at `/mcp`
 * (bench-servers.mjs); the proxy has an MCP route in front of it (proxy-setup.mjs). Each row is
 * measured closed loop and open loop, like the others:
 *
 *   mcp tools/call direct        `tools/call get_ticket {"id":"T-1"}` straight to the upstream
 *   mcp tools/call gated         the same call through the gate, a fresh permit per call in
 *                                `params._meta["countersign/permit"]` (minted with POST
 *                                /v1/evaluate like the enforced route's: target bench/get_ticket,
 *                                the arguments' digest bound)
 *   mcp tools/list direct        `tools/list` straight to the upstream
 *   mcp tools/list gated         the same through the gate (a method that passes without a permit)
 *   mcp tools/call inline        the call without a permit, from the agent an `x-agent-id` header
 *                                names: the gate evaluates it at the authority (running, unlike
 *                                in the permit rows), then verifies and consumes the permit it got
 *
 * Then the ratios: each gated row against its direct row (throughput, CPU per call, added p99),
 * and against the HTTP rows of the same run when they ran (a call with a permit against the
 * enforced route, tools/list against pass-through). The inline row is set against the call with a
 * permit and against the same evaluation sent straight to the authority, all three in an open loop,
 * at 100/s and at 250/s (`INLINE_RATES`): what deciding inline adds should be one evaluation's
 * round trip.
 *
 * @example
 *   const mcp = await runMcpRows({ proxy, upstream, evaluation: { server: authority, request: mcpEvaluateRequest(key) }, measure, mint: mintMcpCalls, gatedClosedLoop, options, log });
 *   reportMcp(log, mcp, { http: rows, rate: 1000 });
 */
import { createHash } from 'node:crypto';
import { request } from 'undici';
import { fmt, formatTable } from './bench-common.mjs';
import { cpuPerRequest, perRequest, table } from './proxy-report.mjs';
import { ACTOR, mintRequests } from './proxy-setup.mjs';

const MCP_PATH = '/mcp';
const TOOL = 'get_ticket';
const ARGUMENTS = { id: 'T-1' };
/** The SHA-256 of the arguments' canonical JSON: one string key, so JSON.stringify is canonical. */
const ARGUMENTS_DIGEST = createHash('sha256').update(JSON.stringify(ARGUMENTS)).digest('hex');
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

const message = (method, params) => JSON.stringify({ jsonrpc: '2.0', id: 1, method, ...(params ? { params } : {}) });
const mcpRequest = (body) => ({ method: 'POST', path: MCP_PATH, headers: HEADERS, body });

/** The rows' `tools/call` without a permit (what goes straight to the MCP server), and their `tools/list`. */
export const CALL = mcpRequest(message('tools/call', { name: TOOL, arguments: ARGUMENTS }));
export const LIST = mcpRequest(message('tools/list'));
/** The rows' `tools/call` with `token` in `_meta`, as a caller that evaluated first sends it. */
export const callWithPermit = (token) => mcpRequest(message('tools/call', { name: TOOL, arguments: ARGUMENTS, _meta: { 'countersign/permit': token } }));
/** The call an unmodified client makes: no permit, the agent named by the header the route trusts. */
const INLINE_CALL = { ...CALL, headers: { ...HEADERS, 'x-agent-id': ACTOR } };
/**
 * The open-loop rates of the inline comparison. At 250/s the evaluations alone keep the 2-core
 * machine about 70 % busy (the authority, Postgres and Redis), so the inline row, which adds the
 * proxy's work, measures queueing as much as the round trip; at 100/s the machine is not
 * saturated and the difference is the round trip itself.
 */
const INLINE_RATES = [100, 250];

export const MCP_ROWS = {
  callDirect: 'mcp tools/call direct',
  callGated: 'mcp tools/call gated',
  callInline: 'mcp tools/call inline',
  listDirect: 'mcp tools/list direct',
  listGated: 'mcp tools/list gated',
};

/** The evaluation that allows one tool call: what a caller asks before bringing a permit, and what the gate asks inline. */
export const CALL_EVALUATION = {
  action_type: 'agent.tool.invoke',
  actor_id: ACTOR,
  context: { target: { type: 'tool', id: `bench/${TOOL}` }, arguments_digest: ARGUMENTS_DIGEST },
};

/** `POST /v1/evaluate` of the call, as the load generator sends it to the authority (any allow answer will do). */
export function mcpEvaluateRequest(key) {
  return { method: 'POST', path: '/v1/evaluate', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(CALL_EVALUATION) };
}

/** `count` tool calls for the gate, each with a fresh permit of its own in `_meta`. */
export function mintMcpCalls(authority, key, count, signal) {
  const evaluation = CALL_EVALUATION;
  return mintRequests(authority, key, count, signal, () => ({
    evaluation,
    request: callWithPermit,
  }));
}

/** The upstream's own answer to `req`: what every row's answer must be, gated or direct. */
export async function answerOf(upstream, req) {
  const response = await request(`${upstream.url}${req.path}`, { method: req.method, headers: req.headers, body: req.body });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`the bench upstream's MCP server answered ${response.statusCode}: ${text.slice(0, 300)}`);
  return text;
}

/**
 * Runs the four rows, closed loop then open loop, through `proxy` and straight to `upstream`.
 * `measure`, `gatedClosedLoop` and `mint(tag, count)` (which mints tool calls) are the proxy
 * bench's. Resolves the rows, the gated calls answered as expected (each reached the upstream
 * once) and the probes.
 */
export async function runMcpRows({ proxy, upstream, evaluation, measure, mint, gatedClosedLoop, options, log }) {
  const expect = { call: { status: 200, body: await answerOf(upstream, CALL) }, list: { status: 200, body: await answerOf(upstream, LIST) } };
  const warmupMs = options.warmupSeconds * 1000;
  const windowMs = options.seconds * 1000;
  const rows = { closed: {}, open: {} };
  const probes = [];
  const ungated = [
    [MCP_ROWS.callDirect, upstream, CALL, expect.call],
    [MCP_ROWS.listDirect, upstream, LIST, expect.list],
    [MCP_ROWS.listGated, proxy, LIST, expect.list],
  ];
  if (options.processWarmupSeconds > 0) {
    log(`running: ${MCP_ROWS.listGated}, process warm-up (${options.processWarmupSeconds} s, closed loop)`);
    probes.push(await measure({ name: `${MCP_ROWS.listGated} (process warm-up)`, server: proxy, mode: 'closed', requests: [LIST], reuse: true, expect: expect.list, warmupMs: options.processWarmupSeconds * 1000, windowMs: 250 }));
  }
  for (const mode of ['closed', 'open']) {
    for (const [name, server, req, answer] of ungated) {
      log(`running: ${name}, ${mode} loop`);
      rows[mode][name] = await measure({ name, server, mode, requests: [req], reuse: true, expect: answer, warmupMs, windowMs });
    }
  }
  const measureCall = (args) => measure({ ...args, expect: expect.call });
  log(`running: ${MCP_ROWS.callGated}, closed loop (process warm-up and probe, then fresh permits for the window)`);
  const gated = await gatedClosedLoop({ measure: measureCall, mint, name: MCP_ROWS.callGated, server: proxy, upperBound: rows.closed[MCP_ROWS.listGated].perSecond, options, log });
  rows.closed[MCP_ROWS.callGated] = gated.result;
  probes.push(gated.probe);
  log(`running: ${MCP_ROWS.callGated}, open loop`);
  const openCalls = await mint(`${MCP_ROWS.callGated}-open`, Math.ceil(((warmupMs + windowMs) / 1000) * options.rate) + 10);
  rows.open[MCP_ROWS.callGated] = await measureCall({ name: MCP_ROWS.callGated, server: proxy, mode: 'open', requests: openCalls, reuse: false, warmupMs, windowMs, pauseAuthority: true });
  log(`running: ${MCP_ROWS.callInline}, closed loop (the authority running: it evaluates every call)`);
  rows.closed[MCP_ROWS.callInline] = await measureCall({ name: MCP_ROWS.callInline, server: proxy, mode: 'closed', requests: [INLINE_CALL], reuse: true, warmupMs, windowMs });
  // Both ways at the same rate, the permits minted beforehand and the authority paused for the
  // permit row as in the rows above; running for the inline row.
  const inline = [];
  for (const rate of INLINE_RATES) {
    log(`running: ${MCP_ROWS.callGated}, open loop at ${rate}/s`);
    const slowCalls = await mint(`${MCP_ROWS.callGated}-${rate}`, Math.ceil(((warmupMs + windowMs) / 1000) * rate) + 10);
    const permit = await measureCall({ name: MCP_ROWS.callGated, server: proxy, mode: 'open', rate, requests: slowCalls, reuse: false, warmupMs, windowMs, pauseAuthority: true });
    log(`running: ${MCP_ROWS.callInline}, open loop at ${rate}/s`);
    const called = await measureCall({ name: MCP_ROWS.callInline, server: proxy, mode: 'open', rate, requests: [INLINE_CALL], reuse: true, warmupMs, windowMs });
    log(`running: POST /v1/evaluate straight to the authority, open loop at ${rate}/s`);
    const evaluate = await measure({ name: 'POST /v1/evaluate', server: evaluation.server, mode: 'open', rate, requests: [evaluation.request], reuse: true, expect: { status: 200 }, warmupMs, windowMs });
    inline.push({ permit, inline: called, evaluate });
  }
  // Every call answered with the tool's result reached the upstream with a permit, inline ones too.
  const gatedOk = gated.probe.ok + gated.result.ok + rows.open[MCP_ROWS.callGated].ok + rows.closed[MCP_ROWS.callInline].ok +
    inline.reduce((sum, rate) => sum + rate.permit.ok + rate.inline.ok, 0);
  return { rows, inline, probes, gatedOk };
}

/** "a ÷ b = r" of two figures, or why it cannot be said. */
function versus(a, b, unit, digits = 0) {
  if (!(Number.isFinite(a) && Number.isFinite(b)) || b === 0) return 'not measured';
  return `${fmt(a, digits)} ${unit} ÷ ${fmt(b, digits)} ${unit} = ${fmt(a / b, 2)}×`;
}

/**
 * Prints the MCP rows and their ratios. `http` holds the HTTP rows of the same run (closed and
 * open), when they ran: the comparisons with the enforced route and pass-through need them.
 */
export function reportMcp(log, mcp, { http, rate }) {
  const { closed, open } = mcp.rows;
  const order = [MCP_ROWS.callDirect, MCP_ROWS.callGated, MCP_ROWS.listDirect, MCP_ROWS.listGated];
  log('');
  log('MCP rows, closed loop (throughput):');
  log(table([...order, MCP_ROWS.callInline].map((name) => closed[name])));
  log('');
  log(`MCP rows, open loop at ${rate}/s:`);
  log(table(order.map((name) => open[name])));
  const added = (gated, direct) => open[gated].p99 - open[direct].p99;
  const httpAdded = (name) => (http?.open[name] && http.open['direct upstream'] ? http.open[name].p99 - http.open['direct upstream'].p99 : Number.NaN);
  const cells = [
    [MCP_ROWS.callGated, MCP_ROWS.callDirect, 'countersign enforce'],
    [MCP_ROWS.listGated, MCP_ROWS.listDirect, 'countersign pass-through'],
  ].map(([gated, direct, httpRow]) => [
    gated,
    fmt(closed[gated].perSecond / closed[direct].perSecond, 2),
    fmt(perRequest(closed[gated]), 0),
    fmt(added(gated, direct), 2),
    httpRow,
    http?.closed[httpRow] ? fmt(perRequest(http.closed[httpRow]), 0) : '-',
    fmt(httpAdded(httpRow), 2),
  ]);
  log('');
  log('MCP ratios (each gated row against the same call straight to the MCP server, and against the HTTP row it should cost no more than):');
  log(formatTable(['row', '÷ direct, per s', 'proxy µs/call', `added p99 ms at ${rate}/s`, 'HTTP row', 'HTTP proxy µs/req', 'HTTP added p99 ms'], cells, 1));
  log(`  tools/call with a permit, proxy CPU per call against the enforced route's: ${versus(perRequest(closed[MCP_ROWS.callGated]), http?.closed['countersign enforce'] ? perRequest(http.closed['countersign enforce']) : Number.NaN, 'µs')}`);
  log(`  tools/list, proxy CPU per call against pass-through's:                     ${versus(perRequest(closed[MCP_ROWS.listGated]), http?.closed['countersign pass-through'] ? perRequest(http.closed['countersign pass-through']) : Number.NaN, 'µs')}`);
  for (const { permit, inline, evaluate } of mcp.inline) {
    log('');
    log(`MCP inline decisions against a permit the caller brings, and the evaluation alone, open loop at ${permit.load}:`);
    log(table([permit, inline, evaluate]));
    log(`  inline adds ${fmt(inline.p50 - permit.p50, 2)} ms at p50 and ${fmt(inline.p99 - permit.p99, 2)} ms at p99; ` +
      `the evaluation alone takes ${fmt(evaluate.p50, 2)} ms at p50 and ${fmt(evaluate.p99, 2)} ms at p99`);
  }
  const closedInline = closed[MCP_ROWS.callInline];
  log(`  CPU per call, closed loop: proxy ${fmt(perRequest(closedInline), 0)} µs inline against ${fmt(perRequest(closed[MCP_ROWS.callGated]), 0)} µs with a permit; ` +
    `authority ${fmt(cpuPerRequest(closedInline, 'authority'), 0)} µs and Redis + Postgres ${fmt(cpuPerRequest(closedInline, 'stores'), 0)} µs for the evaluation`);
  const inlineRows = mcp.inline.flatMap(({ permit, inline, evaluate }) => [permit, inline, evaluate]);
  for (const row of [...Object.values(closed), ...Object.values(open), ...inlineRows, ...mcp.probes]) {
    for (const { kind, count, example } of row.errorKinds) log(`errors in "${row.name}" (${row.load}): ${count} × ${kind}, e.g. ${example}`);
  }
}
