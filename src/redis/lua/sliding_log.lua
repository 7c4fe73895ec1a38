-- The sliding log. KEYS[1] is a sorted set with one member per permit admitted in the
-- last window, scored by the microsecond it was admitted (server clock) and named
-- "<microsecond>:<index>" so that permits admitted in one microsecond stay distinct. A
-- permit admitted at t counts until t + window, not included.
--
-- ARGV: the limit, the window in microseconds, the permits asked for.
-- Reply: {1, 0} when granted, {0, retry_after_ms} when not.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local asked = tonumber(ARGV[3])
local now = now_micros()

redis.call('ZREMRANGEBYSCORE', key, '-inf', integer_text(now - window))
local counted = redis.call('ZCARD', key)

if counted + asked > limit then
  -- The request fits once the (counted + asked - limit)-th oldest permit stops counting.
  local index = counted + asked - limit - 1
  local blocking = redis.call('ZRANGE', key, index, index, 'WITHSCORES')
  return {0, millis_ceil(tonumber(blocking[2]) + window - now)}
end

-- Members scored `now` are named now:0 .. now:(n-1) and leave together, so numbering
-- from their count never reuses a name.
local stamp = integer_text(now)
local first = redis.call('ZCOUNT', key, stamp, stamp)
-- ZADD in batches: unpack has a limit of a few thousand values.
local batch = {}
for index = first, first + asked - 1 do
  batch[#batch + 1] = stamp
  batch[#batch + 1] = stamp .. ':' .. integer_text(index)
  if #batch == 1000 then
    redis.call('ZADD', key, unpack(batch))
    batch = {}
  end
end
if #batch > 0 then
  redis.call('ZADD', key, unpack(batch))
end

-- The newest permit counts longest (it may be later than now if the clock stepped back).
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, integer_text(millis_ceil(tonumber(newest[2]) + window - now)))
return {1, 0}
