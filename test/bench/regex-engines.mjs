#!/usr/bin/env node
/**
 * Which linear-time engine runs CEL `matches`: re2js (pure JS) against re2-wasm (RE2
 * in WebAssembly) and, for reference, the backtracking RegExp they replace. The native `re2`
 * binding is not measured: it installs by downloading a prebuilt binary from GitHub or compiling
 * with node-gyp, and an install must need nothing but the npm registry.
 *
 * Usage: node test/bench/regex-engines.mjs   (re2-wasm is optional: skipped when not installed)
 */
import { performance } from 'node:perf_hooks';
import { RE2JS } from 're2js';

let RE2Wasm = null;
try {
  ({ RE2: RE2Wasm } = await import('re2-wasm'));
} catch {
  RE2Wasm = null;
}

const cases = [
  { name: 'literal prefix', pattern: '^prod', input: 'production' },
  { name: 'account code', pattern: '^[A-Z]{3}-[0-9]{3}$', input: 'OPS-001' },
  { name: 'email-ish, 64 chars', pattern: '^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$', input: `${'a'.repeat(50)}@example.com` },
  { name: 'hostile (a+)+$, 28 chars', pattern: '^(a+)+$', input: `${'a'.repeat(27)}!` },
  { name: 'hostile, 4096 chars', pattern: '^(a+)+$', input: `${'a'.repeat(4095)}!`, noBacktracking: true },
];

function measure(run, iterations) {
  for (let i = 0; i < Math.min(iterations, 200); i++) run();
  const start = performance.now();
  for (let i = 0; i < iterations; i++) run();
  return ((performance.now() - start) * 1000) / iterations; // µs per call
}

const engines = {
  re2js: (pattern) => {
    const re = RE2JS.compile(pattern);
    return (input) => re.test(input);
  },
  're2-wasm': RE2Wasm
    ? (pattern) => {
        const re = new RE2Wasm(pattern, 'u');
        return (input) => re.test(input);
      }
    : null,
  RegExp: (pattern) => {
    const re = new RegExp(pattern, 'u');
    return (input) => re.test(input);
  },
};

const rows = [];
for (const c of cases) {
  const row = { case: c.name };
  for (const [name, make] of Object.entries(engines)) {
    if (!make) continue;
    if (name === 'RegExp' && c.noBacktracking) {
      row[name] = 'years';
      continue;
    }
    const test = make(c.pattern);
    const iterations = name === 'RegExp' && c.name.startsWith('hostile') ? 1 : 20_000;
    row[name] = `${measure(() => test(c.input), iterations).toFixed(2)} µs`;
  }
  rows.push(row);
}
const compileRow = { case: 'compile ^[A-Z]{3}-[0-9]{3}$' };
for (const [name, make] of Object.entries(engines)) if (make) compileRow[name] = `${measure(() => make('^[A-Z]{3}-[0-9]{3}$'), 5_000).toFixed(2)} µs`;
rows.push(compileRow);
console.table(rows);
