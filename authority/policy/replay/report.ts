/**
 * A replay report for people: totals, the transitions per action class, then every changed
 * decision with its evaluation id, time, action, and old → new decision and reasons. The JSON form
 * is the ReplayReport itself.
 *
 * @example
 *   replayText(report, 'candidate.yaml').forEach((line) => console.log(line));
 *   // payments: hold→escalate 3
 */
import type { ReplayReport } from './replay.js';

const reasons = (codes: readonly string[]): string => `[${codes.join(', ')}]`;

export function replayText(report: ReplayReport, candidateFile: string): string[] {
  const { totals } = report;
  const scope = report.orgs.length === 1 ? `organization ${report.orgs[0]}` : `${report.orgs.length} organizations`;
  const lines = [
    `Replayed ${totals.replayed} evaluations recorded since ${report.since} (${scope}) under ${candidateFile}`,
    `  ${totals.unchanged} unchanged, ${totals.changed} changed` +
      (totals.reasons_changed > 0 ? ` (${totals.reasons_changed} more keep their decision with other reasons)` : ''),
  ];
  if (report.truncated) {
    lines.push(`  stopped at --limit ${report.limit}: later evaluations were not replayed (raise --limit or narrow --since/--org)`);
  }
  if (totals.changed === 0) return lines;
  lines.push('', 'By action class:');
  for (const group of report.groups) lines.push(`  ${group.action_class ?? '(no class)'}: ${group.from}→${group.to} ${group.count}`);
  lines.push('', 'Changed decisions:');
  for (const change of report.changes) {
    lines.push(
      `  ${change.at}  ${change.evaluation_id}  ${change.org}  ${change.action_type} by ${change.actor_id} (${change.action_class ?? 'no class'})`,
      `      ${change.from.decision} ${reasons(change.from.reasons)} → ${change.to.decision} ${reasons(change.to.reasons)}`,
    );
  }
  return lines;
}
