-- Verification records drained from the gates' streams in the shared store
-- (authority/verifications/drain.ts).
--
--   verification_records         the idempotency ledger: one row per stream record ever recorded,
--                                inserted in the same transaction as its audit event. A record
--                                read twice (two replicas draining at once, a crash after commit
--                                but before the stream was trimmed) conflicts here and is skipped.
--   verification_stream_cursors  the last stream id each organization's drain has committed, so
--                                the next read starts after it even when the trim failed.

CREATE TABLE verification_records (
  org_id          uuid NOT NULL REFERENCES organizations (id),
  -- The stream id (`<ms>-<seq>`), unique within the organization's stream.
  record_id       text NOT NULL,
  -- The audit event that recorded it. No foreign key: audit_events is insert-only and keyed by
  -- id alone, and the ledger row is written before the event (the append comes last).
  audit_event_id  uuid,
  drained_at      timestamptz NOT NULL,
  PRIMARY KEY (org_id, record_id)
);

CREATE TABLE verification_stream_cursors (
  org_id   uuid PRIMARY KEY REFERENCES organizations (id),
  last_id  text NOT NULL CHECK (last_id ~ '^[0-9]+-[0-9]+$')
);
