/**
 * Every stored version the API lists (at most the 100 newest), newest first, the current one
 * marked in words.
 */
import { formatDateTime } from '../format';
import type { PolicyVersionEntry } from '../policies-api';

/** The most versions GET /v1/policies lists (authority/policy/versions.ts). */
const LISTED = 100;

export function PolicyVersions({ versions, current }: { versions: PolicyVersionEntry[]; current: number | null }) {
  if (versions.length === 0) return <p>No version has been stored yet.</p>;
  return (
    <>
      <ul class="versions">
        {versions.map((entry) => (
          <li key={entry.id} class="version" data-testid="policy-version" data-version={entry.version}>
            <span class="version-name">
              Version {entry.version}
              {entry.version === current && (
                <>
                  {' '}
                  <span class="badge badge-current">current</span>
                </>
              )}
            </span>
            <span class="muted">
              {' '}
              stored by <span class="who-stored">{entry.created_by}</span> on <time dateTime={entry.created_at}>{formatDateTime(entry.created_at)}</time>
            </span>
          </li>
        ))}
      </ul>
      {versions.length >= LISTED && <p class="muted">The {LISTED} newest versions are listed; older ones are kept but not listed here.</p>}
    </>
  );
}
