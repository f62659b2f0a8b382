-- The tamper-evident audit log: one hash chain per organization (see authority/audit/chain.ts).
--
--   audit_chain_heads  the last sequence and hash of each organization's chain. An append locks
--                      this row, so appends of one organization are serialised (gap-free
--                      sequences) while different organizations never wait for each other.
--   audit_events       insert-only; the hash covers `payload`, which repeats every column fact.
--   audit_checkpoints  signed (organization, sequence, head hash) snapshots, insert-only, so that
--                      a truncated tail can be proven against a checkpoint kept elsewhere.

CREATE TABLE audit_chain_heads (
  org_id     uuid PRIMARY KEY REFERENCES organizations (id),
  -- 0 and the genesis hash until the first event.
  sequence   bigint NOT NULL CHECK (sequence >= 0),
  head_hash  text NOT NULL CHECK (head_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE audit_events (
  id             uuid PRIMARY KEY,
  org_id         uuid NOT NULL REFERENCES organizations (id),
  sequence       bigint NOT NULL CHECK (sequence >= 1),
  type           text NOT NULL,
  decision       text,
  actor_id       text,
  resource_type  text,
  resource_id    text,
  request_id     text,
  -- Every fact of the event (AuditPayload); the hash is computed over its canonical JSON.
  payload        jsonb NOT NULL,
  hash           text NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
  previous_hash  text NOT NULL CHECK (previous_hash ~ '^[0-9a-f]{64}$'),
  occurred_at    timestamptz NOT NULL,
  created_at     timestamptz NOT NULL,
  UNIQUE (org_id, sequence)
);

-- The list filters of GET /v1/audit/events; each ends in sequence so pages come straight from
-- the index in order. The UNIQUE constraint above serves the unfiltered listing and exports.
CREATE INDEX audit_events_by_type ON audit_events (org_id, type, sequence);
CREATE INDEX audit_events_by_actor ON audit_events (org_id, actor_id, sequence);
CREATE INDEX audit_events_by_request ON audit_events (org_id, request_id, sequence);
CREATE INDEX audit_events_by_resource ON audit_events (org_id, resource_id, sequence);
CREATE INDEX audit_events_by_time ON audit_events (org_id, occurred_at);

CREATE TABLE audit_checkpoints (
  org_id          uuid NOT NULL REFERENCES organizations (id),
  sequence        bigint NOT NULL CHECK (sequence >= 1),
  head_hash       text NOT NULL CHECK (head_hash ~ '^[0-9a-f]{64}$'),
  signed_at       timestamptz NOT NULL,
  -- base64url Ed25519 over canonicalJSON({org_id, sequence, head_hash, signed_at}).
  signature       text NOT NULL,
  signing_key_id  text NOT NULL,
  PRIMARY KEY (org_id, sequence)
);

-- Insert-only: rewriting history must not be one UPDATE away. (A superuser can still disable
-- triggers; that is what the hash chain, signed exports and checkpoints are for.)
CREATE FUNCTION audit_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is insert-only: % is not allowed', TG_TABLE_NAME, TG_OP
    USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER audit_events_insert_only
  BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
CREATE TRIGGER audit_events_no_truncate
  BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();

CREATE TRIGGER audit_checkpoints_insert_only
  BEFORE UPDATE OR DELETE ON audit_checkpoints
  FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
CREATE TRIGGER audit_checkpoints_no_truncate
  BEFORE TRUNCATE ON audit_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();
