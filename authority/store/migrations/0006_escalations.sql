-- Human-in-the-loop escalations and their votes (authority/escalations/).
--
--   escalations        one row per escalation; a vote, a timeout or a resolution locks it
--                      (SELECT … FOR UPDATE) so concurrent votes settle it exactly once.
--   escalation_votes   the approval records: one per voter and escalation (UNIQUE), tagged with
--                      the tier they were cast in, since only the current tier's votes count.

CREATE TABLE escalations (
  id                 uuid PRIMARY KEY,
  org_id             uuid NOT NULL REFERENCES organizations (id),
  status             text NOT NULL
                     CHECK (status IN ('pending', 'escalated', 'approved', 'rejected', 'timed_out', 'auto_approved')),
  agent_id           text NOT NULL,
  escalation_reason  text NOT NULL,
  proposed_action    jsonb,
  risk_score         double precision CHECK (risk_score >= 0 AND risk_score <= 1),
  -- [{quorumRequired, approverPoolSize, timeoutMs}, …]: the first tier, then the chain.
  tiers              jsonb NOT NULL,
  -- Index in tiers of the tier being asked.
  tier               integer NOT NULL DEFAULT 0 CHECK (tier >= 0),
  min_approvers      integer,
  fallback_decision  text NOT NULL CHECK (fallback_decision IN ('approve', 'reject')),
  -- When the current tier times out.
  timeout_at         timestamptz NOT NULL,
  metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
  -- The action's binding hash when evaluate opened it; NULL for escalations created via the API.
  binding_hash       text,
  created_by         text NOT NULL,
  request_id         text,
  resolution         text CHECK (resolution IN ('quorum', 'fallback', 'timeout', 'auto_approve')),
  outcome            text CHECK (outcome IN ('approve', 'reject')),
  resolved_at        timestamptz,
  created_at         timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL,
  -- Open escalations have no outcome; final ones always have one.
  CHECK ((status IN ('pending', 'escalated')) = (outcome IS NULL))
);

-- GET /v1/escalations: an organization's escalations newest first, optionally by status.
CREATE INDEX escalations_by_org_time ON escalations (org_id, created_at DESC, id DESC);
CREATE INDEX escalations_by_org_status ON escalations (org_id, status, created_at DESC, id DESC);
-- The sweeper and reads look for open escalations whose tier has run out.
CREATE INDEX escalations_open_by_timeout ON escalations (timeout_at) WHERE status IN ('pending', 'escalated');

CREATE TABLE escalation_votes (
  id             uuid PRIMARY KEY,
  escalation_id  uuid NOT NULL REFERENCES escalations (id),
  org_id         uuid NOT NULL REFERENCES organizations (id),
  tier           integer NOT NULL CHECK (tier >= 0),
  -- The voter's credential: user:<id> or api_key:<id>.
  user_id        text NOT NULL,
  decision       text NOT NULL CHECK (decision IN ('approve', 'reject')),
  note           text,
  created_at     timestamptz NOT NULL,
  -- One vote per voter and escalation, across its tiers.
  UNIQUE (escalation_id, user_id)
);
CREATE INDEX escalation_votes_by_escalation ON escalation_votes (escalation_id, tier, created_at);
