-- Identities and separation of duties (docs/approvals.md, "Who may approve: separation of duties").
--
-- An identity is a person or a root credential: a user token by `user:<sub>`, an API key by its
-- owner. A key's owner is recorded when it is created: the creating user, or the creating key's
-- owner, so keys minted by keys lead back to one root; a key created outside the API (bootstrap,
-- CLI) is its own root. Approvals and votes are then judged per identity, so one person minting
-- several keys is still one approver, and cannot approve what they asked for.

-- Keys that exist already were not minted with an owner on record: each is its own root.
ALTER TABLE api_keys ADD COLUMN owner text;
UPDATE api_keys SET owner = 'api_key:' || id::text;
ALTER TABLE api_keys ALTER COLUMN owner SET NOT NULL;
-- A key inserted without an owner (an operator's SQL, an older tool) is its own root, never
-- someone else's: a column default cannot name the row's own id, so a trigger fills it in.
CREATE FUNCTION countersign_api_key_owner() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.owner IS NULL THEN
    NEW.owner := 'api_key:' || NEW.id::text;
  END IF;
  RETURN NEW;
END;
$$;
CREATE TRIGGER api_keys_owner BEFORE INSERT ON api_keys FOR EACH ROW EXECUTE FUNCTION countersign_api_key_owner();

-- The identity that asked for the held action: it may not resolve the request. Existing requests
-- take their evaluation's credential, which is its own identity (every key is its own root above).
ALTER TABLE approval_requests ADD COLUMN requested_by text;
UPDATE approval_requests r SET requested_by = e.credential FROM evaluations e WHERE e.id = r.evaluation_id;
UPDATE approval_requests SET requested_by = 'unknown' WHERE requested_by IS NULL;
ALTER TABLE approval_requests ALTER COLUMN requested_by SET NOT NULL;

-- The identity that created the escalation: it may not vote (nor may its agent, as before).
ALTER TABLE escalations ADD COLUMN creator_identity text;
UPDATE escalations SET creator_identity = created_by;
ALTER TABLE escalations ALTER COLUMN creator_identity SET NOT NULL;

-- One vote per identity and escalation: two keys of one owner are one voter. `user_id` keeps the
-- credential that cast the vote, for the record.
ALTER TABLE escalation_votes ADD COLUMN voter_identity text;
UPDATE escalation_votes SET voter_identity = user_id;
ALTER TABLE escalation_votes ALTER COLUMN voter_identity SET NOT NULL;
CREATE UNIQUE INDEX escalation_votes_one_per_identity ON escalation_votes (escalation_id, voter_identity);
