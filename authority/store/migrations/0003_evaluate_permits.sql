-- Signing keys, policies, evaluations and permits: the decision half of the chain.

-- Ed25519 keys that sign permits and audit exports. Generated keys keep their private half here,
-- encrypted with AES-256-GCM under the configured secret key; keys loaded from files keep only
-- their public half here, so they stay published after the file is replaced.
CREATE TABLE signing_keys (
  kid                    text PRIMARY KEY,
  purpose                text NOT NULL CHECK (purpose IN ('permit', 'audit')),
  public_jwk             jsonb NOT NULL,
  private_key_encrypted  text,
  source                 text NOT NULL CHECK (source IN ('generated', 'file')),
  created_at             timestamptz NOT NULL,
  -- Signing starts here: a rotated-in key is published before it is used.
  activates_at           timestamptz NOT NULL,
  -- Signing stopped here; still published until every permit it signed has expired.
  retired_at             timestamptz
);
CREATE INDEX signing_keys_by_purpose ON signing_keys (purpose, activates_at DESC);

-- One versioned policy document per organization; PUT makes a new version.
CREATE TABLE policies (
  id          uuid PRIMARY KEY,
  org_id      uuid NOT NULL REFERENCES organizations (id),
  version     integer NOT NULL CHECK (version > 0),
  document    jsonb NOT NULL,
  source      text NOT NULL,
  format      text NOT NULL CHECK (format IN ('yaml', 'json')),
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL,
  UNIQUE (org_id, version)
);

-- The organization's current version, read with the credential on every request so evaluate
-- needs no extra query to know which compiled policy applies.
ALTER TABLE organizations ADD COLUMN policy_version integer;

CREATE TABLE evaluations (
  id                   uuid PRIMARY KEY,
  org_id               uuid NOT NULL REFERENCES organizations (id),
  -- The caller's idempotency key (or a generated one): a repeat returns the original response.
  request_id           text NOT NULL,
  -- SHA-256 of the canonical request: the same request_id with other content is a conflict.
  request_fingerprint  text NOT NULL,
  action_type          text NOT NULL,
  actor_id             text NOT NULL,
  decision             text NOT NULL CHECK (decision IN ('allow', 'deny', 'hold', 'escalate')),
  mode                 text NOT NULL CHECK (mode IN ('live', 'shadow')),
  risk_score           double precision NOT NULL,
  binding_hash         text NOT NULL,
  policy_version       integer,
  response             jsonb NOT NULL,
  credential           text NOT NULL,
  created_at           timestamptz NOT NULL,
  UNIQUE (org_id, request_id)
);
CREATE INDEX evaluations_by_org_time ON evaluations (org_id, created_at);

CREATE TABLE permits (
  id                 text PRIMARY KEY,
  org_id             uuid NOT NULL REFERENCES organizations (id),
  evaluation_id      uuid NOT NULL REFERENCES evaluations (id),
  request_id         text NOT NULL,
  action_type        text NOT NULL,
  actor_id           text NOT NULL,
  binding_hash       text NOT NULL,
  bound_facts        jsonb NOT NULL,
  kid                text NOT NULL REFERENCES signing_keys (kid),
  -- 'expired' is not stored: an issued permit past expires_at is expired.
  status             text NOT NULL CHECK (status IN ('issued', 'consumed', 'revoked')),
  issued_at          timestamptz NOT NULL,
  expires_at         timestamptz NOT NULL,
  consumed_at        timestamptz,
  revoked_at         timestamptz,
  revoked_by         text,
  revocation_reason  text
);
CREATE INDEX permits_by_org_time ON permits (org_id, issued_at DESC);
CREATE INDEX permits_by_org_actor ON permits (org_id, actor_id, issued_at DESC);
