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
 * Returns {code, record id}: 1 consumed (with the id of the appended record, or ''), 0 already
 * used, -1 revoked, -2 the permit predates the epoch, -3 too late (the caller has given up).
 *
 * Order matters: the deadline first (a late consume changes nothing, not even the epoch), then
 * the epoch (created when missing: the store has lost its state, so every permit issued before
 * now may have been consumed already), then revocation, then the stream's type (a script is not
 * rolled back, so an XADD failing after SET would consume the key without its record).
 */
export const CONSUME_SCRIPT = `
${NOW_MS}
if ARGV[3] ~= '' and nowMs > tonumber(ARGV[3]) then
  return {-3, ''}
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
  return {0, ''}
end
if #KEYS > 3 then
  return {1, redis.call('XADD', KEYS[4], '*', unpack(cjson.decode(ARGV[5])))}
end
return {1, ''}
`;

/** The consume script's SHA-1, by which Redis knows it (EVALSHA in a pipeline). */
export const CONSUME_SCRIPT_SHA = createHash('sha1').update(CONSUME_SCRIPT).digest('hex');

/**
 * Undoes one consume that could not be made durable. KEYS: marker, optionally the stream.
 * ARGV: the consume's nonce, the record id ('' for none). Only the marker this consume set is
 * removed (a later consume of the same permit cannot have happened: the marker was there).
 */
export const RELEASE_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if #KEYS > 1 and ARGV[2] ~= '' then
    redis.call('XDEL', KEYS[2], ARGV[2])
  end
  return 1
end
return 0
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
