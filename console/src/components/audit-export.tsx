/**
 * Downloads for checking the chain away from this server: a signed export of the range just
 * verified (POST /v1/audit/exports, the bundle's text kept byte for byte, since its signature
 * covers exactly those bytes), the audit keys that verify it (GET /v1/audit/keys, as sent), and
 * the last signed checkpoint; then the command that verifies them offline (docs/cli.md).
 */
import { useState } from 'preact/hooks';
import {
  bundleFacts,
  downloadText,
  exportAuditBundle,
  fileNamePart,
  getAuditKeysText,
  type AuditCheckpointWire,
  type SequenceRange,
} from '../permits-api';
import { messageOf, plural } from './parts';

interface Props {
  orgId: string;
  /** The range verified; null ends when the chain is empty. */
  range: SequenceRange;
  checkpoint: AuditCheckpointWire | null;
}

type Busy = 'export' | 'keys' | null;

export function AuditExport({ orgId, range, checkpoint }: Props) {
  const [busy, setBusy] = useState<Busy>(null);
  const [done, setDone] = useState<string | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const org = fileNamePart(orgId);
  const bundleName = (from: number | string, to: number | string) => `countersign-audit-${org}-${from}-${to}.json`;
  const keysName = `countersign-audit-keys-${org}.json`;
  const checkpointName = checkpoint === null ? null : `countersign-checkpoint-${org}-${checkpoint.sequence}.json`;
  const empty = range.from === null || range.to === null;

  const run = async (what: Exclude<Busy, null>, task: () => Promise<string>): Promise<void> => {
    setBusy(what);
    setProblem(null);
    setDone(null);
    try {
      setDone(await task());
    } catch (error) {
      setProblem(`${what === 'export' ? 'The export' : 'The keys'} could not be downloaded: ${messageOf(error)}`);
    } finally {
      setBusy(null);
    }
  };

  const downloadExport = () =>
    run('export', async () => {
      const text = await exportAuditBundle(range);
      const facts = bundleFacts(text);
      const name = bundleName(facts.first ?? range.from ?? 'none', facts.last ?? range.to ?? 'none');
      downloadText(name, text);
      return `Downloaded ${name}: a signed export of ${plural(facts.count ?? 0, 'event', 'events')}.`;
    });

  const downloadKeys = () =>
    run('keys', async () => {
      downloadText(keysName, await getAuditKeysText());
      return `Downloaded ${keysName}: the public keys that verify exports and checkpoints.`;
    });

  const downloadCheckpoint = (): void => {
    if (checkpoint === null || checkpointName === null) return;
    downloadText(checkpointName, `${JSON.stringify(checkpoint, null, 2)}\n`);
    setProblem(null);
    setDone(`Downloaded ${checkpointName}: the checkpoint signed at sequence ${checkpoint.sequence}.`);
  };

  return (
    <div class="audit-export" data-testid="audit-export">
      <h3>Check it yourself</h3>
      {empty ? (
        <p>There is nothing to export yet: the audit log is empty.</p>
      ) : (
        <p>
          A signed export of the range verified above (sequences {range.from} to {range.to}), and what verifies it away from this server.
        </p>
      )}
      <div class="actions">
        <button type="button" class="button primary" disabled={empty || busy !== null} onClick={() => void downloadExport()} data-testid="download-export">
          {busy === 'export' ? 'Exporting…' : 'Download a signed export'}
        </button>
        <button type="button" class="button secondary" disabled={busy !== null} onClick={() => void downloadKeys()} data-testid="download-keys">
          {busy === 'keys' ? 'Downloading…' : 'Download the audit keys'}
        </button>
        {checkpoint !== null && (
          <button type="button" class="button secondary" disabled={busy !== null} onClick={downloadCheckpoint} data-testid="download-checkpoint">
            Download the checkpoint
          </button>
        )}
      </div>
      <div role="status" data-testid="download-outcome">
        {done !== null && <p>{done}</p>}
      </div>
      {problem !== null && (
        <p role="alert" class="error" data-testid="download-error">
          {problem}
        </p>
      )}
      <p>To verify the export offline, with the keys saved beside it:</p>
      <pre class="command" data-testid="verify-command">
        <code>
          npx countersign audit verify {empty ? 'bundle.json' : bundleName(range.from ?? '', range.to ?? '')} --keys {keysName}
        </code>
      </pre>
      <p class="hint">
        It prints <code>{'{"ok": true, …}'}</code> when every hash, link and the signature check out; a modified, removed or reordered event is named as a problem and
        the command exits 1.
        {checkpointName !== null && (
          <>
            {' '}
            Add <code>--checkpoint {checkpointName}</code> to check the export against the signed checkpoint as well.
          </>
        )}
      </p>
    </div>
  );
}
