-- A rewrite of countersign_store_evaluations (migrations 0009, 0010, 0014), for
-- test/bench/store-batches.mjs to compare with the migrated function on the same batches; it was
-- not adopted (docs/architecture.md, "The evaluation's write in Postgres": 0.96× the backend's CPU
-- per batch). What differs: the chain heads are locked and read in one statement instead of a
-- lock and a read per organization; the loop walks the events' JSON by index and keeps four arrays
-- instead of thirteen; the webhook outbox is written from the events' insert (RETURNING).
--
--   node test/bench/store-batches.mjs test/bench/variants/heads_in_one_statement.sql

CREATE OR REPLACE FUNCTION heads_in_one_statement(batch_evaluations jsonb, batch_permits jsonb, batch_events jsonb, batch_recorded_at timestamptz, genesis_hash text)
RETURNS SETOF uuid
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  stored uuid[];
  event_orgs uuid[];
  h_orgs uuid[];
  h_sequences bigint[];
  h_hashes text[];
  e_sequences bigint[] := '{}';
  e_payloads text[] := '{}';
  e_hashes text[] := '{}';
  e_previous text[] := '{}';
  ev jsonb;
  head integer;
  event_payload text;
BEGIN
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

  INSERT INTO audit_chain_heads (org_id, sequence, head_hash)
  SELECT o, 0, genesis_hash FROM unnest(event_orgs) AS o
  WHERE NOT EXISTS (SELECT 1 FROM audit_chain_heads h WHERE h.org_id = o)
  ON CONFLICT (org_id) DO NOTHING;
  SELECT array_agg(h.org_id ORDER BY h.org_id), array_agg(h.sequence ORDER BY h.org_id), array_agg(h.head_hash ORDER BY h.org_id)
  INTO h_orgs, h_sequences, h_hashes
  FROM (SELECT org_id, sequence, head_hash FROM audit_chain_heads WHERE org_id = ANY (event_orgs) ORDER BY org_id FOR UPDATE) AS h;

  FOR i IN 1 .. jsonb_array_length(batch_events) LOOP
    ev := batch_events -> (i - 1);
    CONTINUE WHEN NOT (ev ->> 'evaluation_id')::uuid = ANY (stored);
    head := array_position(h_orgs, (ev ->> 'org_id')::uuid);
    h_sequences[head] := h_sequences[head] + 1;
    event_payload := (ev ->> 'text_before') || h_sequences[head] || (ev ->> 'text_after');
    e_previous[i] := h_hashes[head];
    h_hashes[head] := encode(sha256(convert_to(h_hashes[head] || event_payload, 'UTF8')), 'hex');
    e_sequences[i] := h_sequences[head];
    e_payloads[i] := event_payload;
    e_hashes[i] := h_hashes[head];
  END LOOP;

  WITH appended AS (
    INSERT INTO audit_events (id, org_id, sequence, type, decision, actor_id, resource_type, resource_id, request_id,
                              payload, hash, previous_hash, occurred_at, created_at)
    SELECT a.id, a.org_id, x.sequence, a.type, a.decision, a.actor_id, a.resource_type, a.resource_id, a.request_id,
           x.payload::jsonb, x.hash, x.previous_hash, a.occurred_at, batch_recorded_at
    FROM ROWS FROM (jsonb_to_recordset(batch_events) AS (id uuid, org_id uuid, type text, decision text, actor_id text,
           resource_type text, resource_id text, request_id text, occurred_at timestamptz))
         WITH ORDINALITY AS a(id, org_id, type, decision, actor_id, resource_type, resource_id, request_id, occurred_at, position)
    JOIN unnest(e_sequences, e_payloads, e_hashes, e_previous) WITH ORDINALITY AS x(sequence, payload, hash, previous_hash, position)
      ON x.position = a.position
    WHERE x.sequence IS NOT NULL
    RETURNING id, org_id, sequence, type, payload
  )
  INSERT INTO webhook_deliveries (id, org_id, subscription_id, event_id, event_sequence, event_type, payload, status,
                                  attempts, replay_base, next_attempt_at, created_at, updated_at)
  SELECT gen_random_uuid(), e.org_id, sub.id, e.id, e.sequence, e.type, e.payload, 'pending', 0, 0, batch_recorded_at, batch_recorded_at, batch_recorded_at
  FROM appended AS e
  JOIN webhook_subscriptions sub
    ON sub.org_id = e.org_id AND sub.is_active AND (sub.event_types IS NULL OR e.type = ANY (sub.event_types));

  UPDATE audit_chain_heads AS head SET sequence = moved.s, head_hash = moved.h
  FROM unnest(h_orgs, h_sequences, h_hashes) AS moved(o, s, h)
  WHERE head.org_id = moved.o;

  RETURN QUERY SELECT unnest(stored);
END;
$$;
