/**
 * A permit's story and the audit chain's status. `?permit=<id>` or `?evaluation=<id>` opens a
 * story (so a link, from the inbox say, can point at one); `from_sequence` and `to_sequence` name
 * the range of the chain verified. The story needs permits:read or audit:read (an evaluation id
 * needs audit:read); the chain's status and exports need audit:read.
 */
import type { SignedInSession } from '../api';
import { AuditSection } from '../components/audit-status';
import { PermitLookup, RecentPermits } from '../components/permits-lookup';
import { PermitsSection } from '../components/permits-section';
import { usePageTitle } from '../page-title';
import { targetOfSearch, type SequenceRange, type StoryTarget } from '../permits-api';
import { PATHS, setSearch, useSearch } from '../router';
import '../permits.css';

function sequenceParam(search: URLSearchParams, name: string): number | null {
  const value = search.get(name);
  return value !== null && /^\d+$/.test(value) && Number(value) >= 1 ? Number(value) : null;
}

export function PermitsPage({ session }: { session: SignedInSession }) {
  usePageTitle('Permits and audit');
  const search = useSearch();
  const target = targetOfSearch(search);
  const range: SequenceRange = { from: sequenceParam(search, 'from_sequence'), to: sequenceParam(search, 'to_sequence') };
  const canList = session.permissions.includes('permits:read');

  const open = (next: StoryTarget): void => {
    const query = new URLSearchParams(search);
    query.delete('permit');
    query.delete('evaluation');
    query.set(next.kind, next.id);
    setSearch(PATHS.permits, query);
  };

  const verify = (next: SequenceRange): void => {
    const query = new URLSearchParams(search);
    query.delete('from_sequence');
    query.delete('to_sequence');
    if (next.from !== null) query.set('from_sequence', String(next.from));
    if (next.to !== null) query.set('to_sequence', String(next.to));
    setSearch(PATHS.permits, query, { replace: true });
  };

  return (
    <div class="permits-page">
      <h1 id="page-title" tabIndex={-1}>
        Permits and audit
      </h1>
      <p>
        What became of a permit of {session.organization.name}, from the decision to the effect, each step an event in the audit chain; and the chain’s own
        verification, with a signed export to check it yourself.
      </p>
      <PermitLookup current={target} onOpen={open} />
      {target !== null && <PermitsSection key={`${target.kind}:${target.id}`} session={session} target={target} />}
      {target === null && canList && <RecentPermits onOpen={open} />}
      <AuditSection session={session} range={range} onRange={verify} />
    </div>
  );
}
