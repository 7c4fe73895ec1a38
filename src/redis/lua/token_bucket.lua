-- The token bucket. KEYS[1] is a hash {parts, time}: the tokens held, counted in parts
-- of a token, as of `time` (microseconds on the server's clock). A missing key is a full
-- bucket, so the key may expire once the bucket would be full again.
--
-- ARGV: the capacity in parts, the parts gained each microsecond, the parts asked for.
-- Reply: {1, 0} when granted, {0, retry_after_ms} when not.
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local gain = tonumber(ARGV[2])
local asked = tonumber(ARGV[3])
local now = now_micros()

local parts, time = capacity, now
local state = redis.call('HMGET', key, 'parts', 'time')
if state[1] then
  parts = tonumber(state[1])
  time = tonumber(state[2])
  -- A server clock that stepped back gains nothing until it passes `time` again.
  if now > time then
    -- The product may pass 2^53 and round, but only when it is far above the room left.
    if (now - time) * gain >= capacity - parts then
      parts = capacity
    else
      parts = parts + (now - time) * gain
    end
    time = now
  end
end

if parts < asked then
  -- Refusing changes nothing: the refill is the same computed now or later.
  return {0, millis_ceil((time - now) + ceil_div(asked - parts, gain))}
end

parts = parts - asked
redis.call('HSET', key, 'parts', integer_text(parts), 'time', integer_text(time))
redis.call('PEXPIRE', key, integer_text(millis_ceil((time - now) + ceil_div(capacity - parts, gain))))
return {1, 0}
