-- The fixed window. KEYS[1] is a hash {start, count}: the permits admitted in the window
-- that began at `start` (microseconds on the server's clock). A key's first request
-- starts its window; the first request after that window ends starts the next. A missing
-- key, or one whose window has ended, has admitted nothing, so the key may expire when
-- its window ends.
--
-- ARGV: the limit, the window in microseconds, the permits asked for.
-- Reply: {1, 0} when granted, {0, retry_after_ms} when not.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local asked = tonumber(ARGV[3])
local now = now_micros()

local start, count = now, 0
local state = redis.call('HMGET', key, 'start', 'count')
if state[1] and now < tonumber(state[1]) + window then
  start = tonumber(state[1])
  count = tonumber(state[2])
end

local left = start + window - now
if count + asked > limit then
  return {0, millis_ceil(left)}
end

redis.call('HSET', key, 'start', integer_text(start), 'count', integer_text(count + asked))
redis.call('PEXPIRE', key, integer_text(millis_ceil(left)))
return {1, 0}
