-- The fixed window. Its key is a hash {start, count}: the permits admitted in the window
-- that began at `start` (microseconds on the server's clock). A key's first request
-- starts its window; the first request after that window ends starts the next. A missing
-- key, or one whose window has ended, has admitted nothing, so the key may expire when
-- its window ends.
--
-- Arguments: the limit, the window in microseconds, the permits asked for.

-- Decides; see one_key.lua for what it returns. The window is whole when it has admitted
-- nothing (no state, or its window ended), else once it ends.
local function fw_decide(key, now, limit, window, asked)
  local start, count = now, 0
  local state = redis.call('HMGET', key, 'start', 'count')
  if state[1] and now < tonumber(state[1]) + window then
    start = tonumber(state[1])
    count = tonumber(state[2])
  end

  local left = start + window - now
  -- A refused request finds a count above zero (none asks for more than the limit).
  if count + asked > limit then
    return left, limit - count, left
  end
  local full = 0
  if count > 0 then
    full = left
  end
  return nil, limit - count, full, start, count + asked, left
end

-- Writes the window; returns how long until it ends, which is when the key expires.
local function fw_commit(key, now, start, count, expire)
  store_pair(key, 'start', start, 'count', count, expire)
  return expire
end
