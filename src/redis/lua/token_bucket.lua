-- The token bucket. Its key is a hash {parts, time}: the tokens held, counted in parts of
-- a token, as of `time` (microseconds on the server's clock). A missing key is a full
-- bucket, so the key may expire once the bucket would be full again.
--
-- Arguments: the capacity in parts, the parts gained each microsecond, the parts asked for.
-- The bucket at `key` as of `now`: the parts it holds and the time they are counted at
-- (later than now when leases are reserved ahead, or while a server clock that stepped
-- back catches up).
local function tb_level(key, now, capacity, gain)
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
  return parts, time
end

-- How long the key must live: until the bucket would be full again.
local function tb_expiry(now, capacity, gain, parts, time)
  return (time - now) + ceil_div(capacity - parts, gain)
end

-- Decides; see one_key.lua for what it returns. The bucket is whole when full: what it
-- lacks comes back at the rate, after the parts counted at a later time are there.
local function tb_decide(key, now, capacity, gain, asked)
  local parts, time = tb_level(key, now, capacity, gain)
  local full = tb_expiry(now, capacity, gain, parts, time)
  -- Parts counted at a later time (leases reserved ahead, or a server clock that stepped
  -- back) are not there before it.
  if time > now then
    -- Refusing changes nothing: the refill is the same computed now or later.
    return (time - now) + ceil_div(math.max(0, asked - parts), gain), 0, full
  end
  if parts < asked then
    return ceil_div(asked - parts, gain), parts, full
  end
  local left = parts - asked
  return nil, parts, full, left, time, tb_expiry(now, capacity, gain, left, time)
end

-- Writes the bucket; returns how long until it is full, which is when the key expires.
local function tb_commit(key, now, parts, time, expire)
  store_pair(key, 'parts', parts, 'time', time, expire)
  return expire
end
