-- The fixed window. Its key is a hash {start, count}: the permits admitted in the window
-- that began at `start` (microseconds on the server's clock). A key's first request
-- starts its window; the first request after that window ends starts the next. A missing
-- key, or one whose window has ended, has admitted nothing, so the key may expire when
-- its window ends.
--
-- Arguments: the limit, the window in microseconds, the permits asked for.
local function fw_decide(key, now, limit, window, asked)
  local start, count = now, 0
  local state = redis.call('HMGET', key, 'start', 'count')
  if state[1] and now < tonumber(state[1]) + window then
    start = tonumber(state[1])
    count = tonumber(state[2])
  end

  local left = start + window - now
  if count + asked > limit then
    return left
  end
  return nil, start, count + asked, left
end

local function fw_commit(key, now, start, count, expire)
  store_pair(key, 'start', start, 'count', count, expire)
end

