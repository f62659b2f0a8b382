/**
 * Policy test results for people (text: one line per case, what differed on a failure, a
 * summary), for machines (JSON) and for CI (JUnit XML: a testsuite per file, a testcase per case,
 * a failure element carrying what differed).
 *
 * @example
 *   for (const line of textReport(results)) console.log(line);
 *   await writeFile('policy-tests.xml', junitReport(results));
 */
import type { CaseResult, RunResults } from './runner.js';

const plural = (n: number, word: string): string => `${n} ${word}`;

function actualSummary(result: CaseResult): string {
  const { actual } = result;
  return `got ${actual.decision} [${actual.reasons.join(', ')}], class ${actual.action_class ?? 'none'}, risk ${actual.risk.score} (${actual.risk.band})`;
}

export function textReport(results: RunResults): string[] {
  const lines: string[] = [];
  for (const suite of results.suites) {
    lines.push(`${suite.file} (policy ${suite.policyFile})`);
    for (const result of suite.cases) {
      lines.push(`  ${result.passed ? '✓' : '✗'} ${result.name}`);
      if (result.passed) continue;
      for (const failure of result.failures) lines.push(`      ${failure}`);
      lines.push(`      ${actualSummary(result)}`);
    }
  }
  lines.push('');
  lines.push(`${plural(results.passed, 'passed')}, ${plural(results.failed, 'failed')}`);
  return lines;
}

export function jsonReport(results: RunResults): unknown {
  return {
    passed: results.passed,
    failed: results.failed,
    suites: results.suites.map((suite) => ({
      file: suite.file,
      policy: suite.policyFile,
      passed: suite.passed,
      failed: suite.failed,
      cases: suite.cases.map((result) => ({
        name: result.name,
        line: result.line,
        passed: result.passed,
        failures: result.failures,
        expected: result.expected,
        actual: result.actual,
      })),
    })),
  };
}

// XML 1.0 has no way to carry these characters, even escaped: they are replaced.
// eslint-disable-next-line no-control-regex
const NOT_XML = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Text safe inside an XML attribute value or element. */
export function escapeXml(text: string): string {
  return text
    .replace(NOT_XML, '\uFFFD')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

const seconds = (time: number): string => time.toFixed(3);

export function junitReport(results: RunResults): string {
  const total = results.passed + results.failed;
  const time = results.suites.reduce((sum, suite) => sum + suite.time, 0);
  const out: string[] = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="countersign policy test" tests="${total}" failures="${results.failed}" errors="0" time="${seconds(time)}">`,
  ];
  for (const suite of results.suites) {
    const name = escapeXml(suite.file);
    out.push(
      `  <testsuite name="${name}" tests="${suite.cases.length}" failures="${suite.failed}" errors="0" skipped="0" time="${seconds(suite.time)}">`,
    );
    out.push(`    <properties><property name="policy" value="${escapeXml(suite.policyFile)}"/></properties>`);
    for (const result of suite.cases) {
      const open = `    <testcase classname="${name}" name="${escapeXml(result.name)}" time="${seconds(result.time)}"`;
      if (result.passed) {
        out.push(`${open}/>`);
        continue;
      }
      const message = escapeXml(result.failures.join('; '));
      const body = escapeXml([...result.failures, actualSummary(result)].join('\n'));
      out.push(`${open}>`);
      out.push(`      <failure message="${message}" type="PolicyTestFailure">${body}</failure>`);
      out.push('    </testcase>');
    }
    out.push('  </testsuite>');
  }
  out.push('</testsuites>');
  return `${out.join('\n')}\n`;
}
