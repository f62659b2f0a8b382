-- A batch of evaluations in one statement (authority/evaluate/store.ts): their rows, their permits
-- and their audit events, appended to the chain. Group commit used to spend six round trips per
-- batch (BEGIN, three inserts, the head lock, COMMIT); as one statement the batch is one round
-- trip and its own transaction.
--
-- The chain is the one authority/audit/chain.ts defines: hash = hex(SHA-256(previous_hash ||
-- canonical payload)). The caller canonicalizes each payload and splits it around its sequence
-- number (`text_before` || sequence || `text_after`), which only the head lock here can assign; every other
-- byte is the caller's. Heads are locked in org_id order, as appendAuditEvents does.
--
--   evaluations  [{id, org_id, request_id, request_fingerprint, action_type, actor_id, decision,
--                  mode, risk_score, binding_hash, policy_version, response, credential, created_at}]
--   permits      [{id, org_id, evaluation_id, request_id, action_type, actor_id, binding_hash,
--                  bound_facts, kid, issued_at, expires_at}]
--   events       [{evaluation_id, id, org_id, type, decision, actor_id, resource_type, resource_id,
--                  request_id, text_before, text_after, occurred_at}], in chain order per organization
--   Returns the ids of the evaluations inserted (a request_id already used is skipped, with its
--   permit and events).

CREATE FUNCTION countersign_store_evaluations(batch_evaluations jsonb, batch_permits jsonb, batch_events jsonb, batch_recorded_at timestamptz, genesis_hash text)
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

  UPDATE audit_chain_heads AS head SET sequence = moved.s, head_hash = moved.h
  FROM unnest(h_orgs, h_sequences, h_hashes) AS moved(o, s, h)
  WHERE head.org_id = moved.o;

  RETURN QUERY SELECT unnest(stored);
END;
$$;
