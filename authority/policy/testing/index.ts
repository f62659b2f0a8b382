/**
 * Policy tests: `*.tests.yaml` files of cases (an evaluate request → the expected decision,
 * reasons, action class and risk bounds), decided offline by the policy they name.
 *
 * @example
 *   const results = runSuites(await Promise.all(files.map(loadTestSuite)));
 *   textReport(results).forEach((line) => console.log(line));
 *   process.exitCode = results.failed > 0 ? 1 : 0;
 */
export { compilePolicyFile, loadTestSuite, parseTestSuite, PolicyTestFileError, type TestCase, type TestSuite } from './suite.js';
export { compareOutcome, runCase, runSuite, runSuites, type CaseResult, type RunResults, type SuiteResult } from './runner.js';
export { escapeXml, jsonReport, junitReport, textReport } from './report.js';
export { decideAsEvaluate } from '../../evaluate/decide.js';
