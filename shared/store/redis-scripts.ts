/**
 * The Lua scripts of the Redis store. Each touches only keys of one Redis Cluster slot (the
 * caller's `{org}` hash tag), and each is one atomic step: nothing else runs between its reads
 * and its writes.
 *
 * Times are read from the store's own clock (`TIME`), never from the caller's: a gate whose clock
 * is off cannot move the epoch, and a deadline is compared with the clock of the server that
 * would write.
 */
import { createHash } from 'node:crypto';

/** Redis `TIME` in whole milliseconds. Shared prelude of the scripts that read the clock. */
const NOW_MS = `
local time = redis.call('TIME')
local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`;

/**
 * The record id a consume's marker holds when its value carries `nonce` (the consume's own marker),
 * '' for a consume without a record; nil for no marker or another consume's. The marker's value
 * is the nonce, then `|` and the record's id when there is a record. Shared prelude of the scripts
 * that find a consume by its marker.
 */
const MARKED_RECORD = `
local function marked_record(marker, nonce)
  local value = redis.call('GET', marker)
  if not value then
    return nil
  end
  local bar = string.find(value, '|', 1, true)
  if (bar and string.sub(value, 1, bar - 1) or value) ~= nonce then
    return nil
  end
  return bar and string.sub(value, bar + 1) or ''
end
`;

/**
 * ensureEpoch. KEYS[1]: the epoch key. Returns the epoch (ms, as a string) and 1 when this call
 * created it. Without a TTL: the epoch must outlive every permit.
 */
export const ENSURE_EPOCH_SCRIPT = `
local epoch = redis.call('GET', KEYS[1])
if epoch then
  return {epoch, 0}
end
${NOW_MS}
redis.call('SET', KEYS[1], string.format('%.0f', nowMs))
return {string.format('%.0f', nowMs), 1}
`;

/**
 * consumePermit. KEYS: marker, revocation entry, epoch, and optionally the record stream.
 * ARGV: TTL in ms; the permit's issue time in ms ('' for no fence); the deadline in Redis ms ('' for
 * none); the marker's value (a nonce that lets release undo exactly this consume); then, with a
 * record, its fields as one JSON array [field, value, ...] (redis-arguments.ts: one
 * argument for the client to encode per consume instead of two dozen).
 *
 * The marker's value is the nonce, then `|` and the record's id when there is a record: an undo
 * whose consume's answer was lost (the connection dropped) still finds the record it must remove.
 *
 * Returns {code, record id}: 1 consumed (with the id of the appended record, or ''), 0 already
 * used, -1 revoked, -2 the permit predates the epoch, -3 too late (the caller has given up).
 *
 * The same consume can arrive twice: the client sends a command again when the server it went to
 * failed before answering (ioredis does in a Cluster, to the replica promoted in its place, which
 * may hold the first one's effect). Where the script would answer "too late" or "already used",
 * a marker holding this consume's nonce is this consume, done (`done_before`): it answers 1 with
 * its record's id, so the caller counts it or, having given up, undoes it; otherwise the first
 * delivery's marker and record would stay behind, a use nobody was told of. A consume that goes
 * through reads nothing more.
 *
 * Order matters: the deadline first (a late consume changes nothing, not even the epoch), then
 * the epoch (created when missing: the store has lost its state, so every permit issued before
 * now may have been consumed already), then revocation, then the stream's type (a script is not
 * rolled back, so an XADD failing after SET would consume the key without its record).
 */
export const CONSUME_SCRIPT = `
${MARKED_RECORD}
local function done_before()
  local id = marked_record(KEYS[1], ARGV[4])
  return id and {1, id}
end
${NOW_MS}
if ARGV[3] ~= '' and nowMs > tonumber(ARGV[3]) then
  return done_before() or {-3, ''}
end
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  redis.call('SET', KEYS[3], string.format('%.0f', nowMs))
  epoch = nowMs
end
if ARGV[2] ~= '' and tonumber(ARGV[2]) < tonumber(epoch) then
  return {-2, ''}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1, ''}
end
if #KEYS > 3 then
  local kind = redis.call('TYPE', KEYS[4])['ok']
  if kind ~= 'none' and kind ~= 'stream' then
    return redis.error_reply('WRONGTYPE the record stream key holds a ' .. kind)
  end
end
if not redis.call('SET', KEYS[1], ARGV[4], 'NX', 'PX', ARGV[1]) then
  return done_before() or {0, ''}
end
if #KEYS > 3 then
  local id = redis.call('XADD', KEYS[4], '*', unpack(cjson.decode(ARGV[5])))
  redis.call('SET', KEYS[1], ARGV[4] .. '|' .. id, 'KEEPTTL')
  return {1, id}
end
return {1, ''}
`;

/** The consume script's SHA-1, by which Redis knows it (EVALSHA in a pipeline). */
export const CONSUME_SCRIPT_SHA = createHash('sha1').update(CONSUME_SCRIPT).digest('hex');

/**
 * Undoes one consume that did not count: not durable, too late for its caller, or whose answer was
 * lost. KEYS: marker, optionally the stream. ARGV: the consume's nonce. Only the marker this
 * consume set is removed, with the record its value names (a later consume of the same permit
 * cannot have happened: the marker was there). Returns 1 when it undid the consume, 0 when there
 * was nothing of it to undo. Safe to run again, and on another server after a failover.
 */
export const RELEASE_SCRIPT = `
${MARKED_RECORD}
local id = marked_record(KEYS[1], ARGV[1])
if not id then
  return 0
end
redis.call('DEL', KEYS[1])
if #KEYS > 1 and id ~= '' then
  redis.call('XDEL', KEYS[2], id)
end
return 1
`;

/**
 * Mirrors takeFromBucket in token-bucket.ts operation for operation. KEYS[1]: the bucket hash.
 * ARGV: capacity, refillPerMinute, nowMs, expiry margin in ms. Numbers travel as '%.17g' strings
 * both ways: a double survives that exactly, while Lua truncates a returned number to an integer
 * and its default tostring keeps only 14 digits.
 */
export const TAKE_TOKEN_SCRIPT = `
local capacity = tonumber(ARGV[1])
local perMinute = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
local tokens = capacity
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updatedAtMs')
if state[1] and state[2] then
  local updated = tonumber(state[2])
  now = math.max(now, updated)
  tokens = math.min(capacity, tonumber(state[1]) + ((now - updated) * perMinute) / 60000)
end
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
local tokensText = string.format('%.17g', tokens)
local nowText = string.format('%.17g', now)
redis.call('HSET', KEYS[1], 'tokens', tokensText, 'updatedAtMs', nowText)
-- msUntilFull in token-bucket.ts
local untilFull = math.max(0, math.ceil(((capacity - tokens) * 60000) / perMinute))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', untilFull + margin))
return {allowed, tokensText, nowText}
`;
