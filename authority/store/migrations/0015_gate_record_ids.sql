-- The gate's own id for each verification record (`gate_record_id`), beside its stream id.
--
-- A gate that did not learn whether an append reached the stream (a timeout, a connection lost
-- after the write) appends the record again later, under a new stream id. The ledger skips a
-- stream id it has recorded before; this index makes it skip a gate record id it has recorded
-- before as well, so such a retry does not become a second audit event. Records from gates that
-- do not send the field have NULL here and are told apart by their stream id alone, as before.

ALTER TABLE verification_records ADD COLUMN gate_record_id text;

CREATE UNIQUE INDEX verification_records_gate_record_id ON verification_records (org_id, gate_record_id) WHERE gate_record_id IS NOT NULL;
