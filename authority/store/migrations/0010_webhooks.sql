-- Webhooks (authority/webhooks/): subscriptions, the outbox of deliveries, and each attempt.
--
--   webhook_subscriptions  one per (organization, name); the signing secret sealed with the
--                          configured secret key (AES-256-GCM, authority/signing/secret-box.ts).
--   webhook_deliveries     the outbox: one row per event and matching subscription, written in the
--                          transaction that appends the event. status pending | delivered |
--                          failed (will retry) | dead_lettered. A worker claims a due row with
--                          FOR UPDATE SKIP LOCKED, counts the attempt and moves next_attempt_at to
--                          the end of a lease; if it never reports back (it crashed), the row is
--                          due again when the lease ends and the next attempt goes out.
--   webhook_attempts       each attempt's outcome: in_flight until reported; succeeded, failed, or
--                          abandoned (its worker never reported; it may or may not have arrived).
--
-- countersign_store_evaluations (0009) is replaced with the same function plus the outbox insert,
-- because evaluation events are appended in SQL where enqueueWebhookEvents cannot see them.

CREATE TABLE webhook_subscriptions (
  id               uuid PRIMARY KEY,
  org_id           uuid NOT NULL REFERENCES organizations (id),
  name             text NOT NULL,
  url              text NOT NULL CHECK (url ~ '^https?://'),
  -- NULL: every event type.
  event_types      text[],
  is_active        boolean NOT NULL,
  max_attempts     integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 20),
  timeout_seconds  integer NOT NULL CHECK (timeout_seconds BETWEEN 1 AND 60),
  secret_sealed    text NOT NULL,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL,
  UNIQUE (org_id, name)
);
-- The outbox insert looks up an organization's active subscriptions for every appended event.
CREATE INDEX webhook_subscriptions_active_by_org ON webhook_subscriptions (org_id) WHERE is_active;

CREATE TABLE webhook_deliveries (
  id               uuid PRIMARY KEY,
  org_id           uuid NOT NULL REFERENCES organizations (id),
  subscription_id  uuid NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  -- The audit event delivered; NULL for a `webhook.test` delivery, which records no event.
  event_id         uuid,
  event_sequence   bigint,
  event_type       text NOT NULL,
  -- The audit event's payload (the exact chained facts), or the test payload.
  payload          jsonb NOT NULL,
  status           text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed', 'dead_lettered')),
  -- Attempts started, over the delivery's whole life (X-Service-Attempt of the last one).
  attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  -- `attempts` when the last replay happened: attempts - replay_base is this round's count.
  replay_base      integer NOT NULL DEFAULT 0 CHECK (replay_base >= 0),
  -- When a worker may claim it next: the retry time, or the end of an attempt's lease.
  next_attempt_at  timestamptz NOT NULL,
  last_status_code integer,
  last_error       text,
  delivered_at     timestamptz,
  dead_lettered_at timestamptz,
  created_at       timestamptz NOT NULL,
  updated_at       timestamptz NOT NULL
);
-- Workers: due rows that may still be sent.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'failed');
-- list_deliveries: an organization's (or a subscription's) deliveries, newest first.
CREATE INDEX webhook_deliveries_by_org_time ON webhook_deliveries (org_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_by_subscription_time ON webhook_deliveries (subscription_id, created_at DESC, id DESC);

CREATE TABLE webhook_attempts (
  delivery_id      uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempt          integer NOT NULL CHECK (attempt >= 1),
  outcome          text NOT NULL CHECK (outcome IN ('in_flight', 'succeeded', 'failed', 'abandoned')),
  started_at       timestamptz NOT NULL,
  finished_at      timestamptz,
  status_code      integer,
  duration_ms      integer,
  error            text,
  PRIMARY KEY (delivery_id, attempt)
);

CREATE OR REPLACE FUNCTION countersign_store_evaluations(batch_evaluations jsonb, batch_permits jsonb, batch_events jsonb, batch_recorded_at timestamptz, genesis_hash text)
RETURNS SETOF uuid
LANGUAGE plpgsql
AS $$
DECLARE
  stored uuid[];
  event_orgs uuid[];
  ev record;
  current_org uuid := NULL;
  next_sequence bigint;
  chain_hash text;
  event_payload text;
  event_hash text;
  e_ids uuid[] := '{}';
  e_orgs uuid[] := '{}';
  e_sequences bigint[] := '{}';
  e_types text[] := '{}';
  e_decisions text[] := '{}';
  e_actors text[] := '{}';
  e_resource_types text[] := '{}';
  e_resource_ids text[] := '{}';
  e_request_ids text[] := '{}';
  e_payloads text[] := '{}';
  e_hashes text[] := '{}';
  e_previous text[] := '{}';
  e_occurred timestamptz[] := '{}';
  h_orgs uuid[] := '{}';
  h_sequences bigint[] := '{}';
  h_hashes text[] := '{}';
BEGIN
  -- In (org_id, request_id) order: two batches inserting the same request_ids wait, never deadlock.
  WITH inserted AS (
    INSERT INTO evaluations (id, org_id, request_id, request_fingerprint, action_type, actor_id, decision, mode,
                             risk_score, binding_hash, policy_version, response, credential, created_at)
    SELECT e.id, e.org_id, e.request_id, e.request_fingerprint, e.action_type, e.actor_id, e.decision, e.mode,
           e.risk_score, e.binding_hash, e.policy_version, e.response, e.credential, e.created_at
    FROM jsonb_to_recordset(batch_evaluations) AS e(id uuid, org_id uuid, request_id text, request_fingerprint text, action_type text,
         actor_id text, decision text, mode text, risk_score double precision, binding_hash text, policy_version integer,
         response jsonb, credential text, created_at timestamptz)
    ORDER BY e.org_id, e.request_id
    ON CONFLICT (org_id, request_id) DO NOTHING
    RETURNING id
  )
  SELECT coalesce(array_agg(id), '{}') INTO stored FROM inserted;

  INSERT INTO permits (id, org_id, evaluation_id, request_id, action_type, actor_id, binding_hash, bound_facts, kid, status, issued_at, expires_at)
  SELECT p.id, p.org_id, p.evaluation_id, p.request_id, p.action_type, p.actor_id, p.binding_hash, p.bound_facts, p.kid, 'issued', p.issued_at, p.expires_at
  FROM jsonb_to_recordset(batch_permits) AS p(id text, org_id uuid, evaluation_id uuid, request_id text, action_type text, actor_id text,
       binding_hash text, bound_facts jsonb, kid text, issued_at timestamptz, expires_at timestamptz)
  WHERE p.evaluation_id = ANY (stored);

  SELECT coalesce(array_agg(DISTINCT a.org_id ORDER BY a.org_id), '{}') INTO event_orgs
  FROM jsonb_to_recordset(batch_events) AS a(evaluation_id uuid, org_id uuid)
  WHERE a.evaluation_id = ANY (stored);
  IF cardinality(event_orgs) = 0 THEN
    RETURN QUERY SELECT unnest(stored);
    RETURN;
  END IF;

  -- An organization's first events: create its head (a racing first append waits on the conflict).
  INSERT INTO audit_chain_heads (org_id, sequence, head_hash)
  SELECT o, 0, genesis_hash FROM unnest(event_orgs) AS o
  WHERE NOT EXISTS (SELECT 1 FROM audit_chain_heads h WHERE h.org_id = o)
  ON CONFLICT (org_id) DO NOTHING;
  PERFORM 1 FROM audit_chain_heads WHERE org_id = ANY (event_orgs) ORDER BY org_id FOR UPDATE;

  FOR ev IN
    SELECT a.* FROM ROWS FROM (jsonb_to_recordset(batch_events) AS (evaluation_id uuid, id uuid, org_id uuid, type text, decision text,
           actor_id text, resource_type text, resource_id text, request_id text, text_before text, text_after text, occurred_at timestamptz))
         WITH ORDINALITY AS a(evaluation_id, id, org_id, type, decision, actor_id, resource_type, resource_id, request_id, text_before, text_after, occurred_at, position)
    WHERE a.evaluation_id = ANY (stored)
    ORDER BY a.org_id, a.position
  LOOP
    IF current_org IS DISTINCT FROM ev.org_id THEN
      IF current_org IS NOT NULL THEN
        h_orgs := h_orgs || current_org; h_sequences := h_sequences || next_sequence; h_hashes := h_hashes || chain_hash;
      END IF;
      current_org := ev.org_id;
      SELECT h.sequence, h.head_hash INTO next_sequence, chain_hash FROM audit_chain_heads h WHERE h.org_id = ev.org_id;
    END IF;
    next_sequence := next_sequence + 1;
    event_payload := ev.text_before || next_sequence::text || ev.text_after;
    event_hash := encode(sha256(convert_to(chain_hash || event_payload, 'UTF8')), 'hex');
    e_ids := e_ids || ev.id; e_orgs := e_orgs || ev.org_id; e_sequences := e_sequences || next_sequence;
    e_types := e_types || ev.type; e_decisions := e_decisions || ev.decision; e_actors := e_actors || ev.actor_id;
    e_resource_types := e_resource_types || ev.resource_type; e_resource_ids := e_resource_ids || ev.resource_id;
    e_request_ids := e_request_ids || ev.request_id; e_payloads := e_payloads || event_payload; e_hashes := e_hashes || event_hash;
    e_previous := e_previous || chain_hash; e_occurred := e_occurred || ev.occurred_at;
    chain_hash := event_hash;
  END LOOP;
  h_orgs := h_orgs || current_org; h_sequences := h_sequences || next_sequence; h_hashes := h_hashes || chain_hash;

  INSERT INTO audit_events (id, org_id, sequence, type, decision, actor_id, resource_type, resource_id, request_id,
                            payload, hash, previous_hash, occurred_at, created_at)
  SELECT i, o, s, t, d, act, rt, rid, req, p::jsonb, h, prev, occ, batch_recorded_at
  FROM unnest(e_ids, e_orgs, e_sequences, e_types, e_decisions, e_actors, e_resource_types, e_resource_ids, e_request_ids,
              e_payloads, e_hashes, e_previous, e_occurred) AS x(i, o, s, t, d, act, rt, rid, req, p, h, prev, occ);

  -- The webhook outbox (migration 0010): one delivery per event and matching active subscription,
  -- in this same statement, so a delivery exists exactly when its event does.
  INSERT INTO webhook_deliveries (id, org_id, subscription_id, event_id, event_sequence, event_type, payload, status,
                                  attempts, replay_base, next_attempt_at, created_at, updated_at)
  SELECT gen_random_uuid(), x.o, sub.id, x.i, x.s, x.t, x.p::jsonb, 'pending', 0, 0, batch_recorded_at, batch_recorded_at, batch_recorded_at
  FROM unnest(e_ids, e_orgs, e_sequences, e_types, e_payloads) AS x(i, o, s, t, p)
  JOIN webhook_subscriptions sub
    ON sub.org_id = x.o AND sub.is_active AND (sub.event_types IS NULL OR x.t = ANY (sub.event_types));

  UPDATE audit_chain_heads AS head SET sequence = moved.s, head_hash = moved.h
  FROM unnest(h_orgs, h_sequences, h_hashes) AS moved(o, s, h)
  WHERE head.org_id = moved.o;

  RETURN QUERY SELECT unnest(stored);
END;
$$;
