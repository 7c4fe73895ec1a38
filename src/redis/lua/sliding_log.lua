-- The sliding log. Its key is a sorted set with one member per permit admitted in the
-- last window, scored by the microsecond it was admitted (server clock) and named
-- "<microsecond>:<index>" so that permits admitted in one microsecond stay distinct. A
-- permit admitted at t counts until t + window, not included. Permits that stopped
-- counting are removed when the next request is granted.
--
-- Arguments: the limit, the window in microseconds, the permits asked for.

-- The microsecond at which the permit of rank `rank` (0 the oldest, -1 the newest) was
-- admitted: the start of its name, which sl_commit makes its score. Read from the name,
-- as WITHSCORES costs Redis about 5,000 instructions more (benches/script_cost.sh).
local function sl_admitted(key, rank)
  local name = redis.call('ZRANGE', key, rank, rank)[1]
  return tonumber(string.sub(name, 1, string.find(name, ':', 1, true) - 1))
end

-- Decides; see one_key.lua for what it returns. The log is whole once its newest permit
-- stops counting.
local function sl_decide(key, now, limit, window, asked)
  local counted = redis.call('ZCOUNT', key, '(' .. integer_text(now - window), '+inf')
  local newest, full = now, 0
  if counted > 0 then
    -- The newest counts, as some permit does: it may be later than now if the clock
    -- stepped back.
    newest = sl_admitted(key, -1)
    full = newest + window - now
  end
  if counted + asked > limit then
    -- The request fits once at most limit - asked permits count: once the
    -- (limit - asked + 1)-th newest stops counting.
    return sl_admitted(key, asked - limit - 1) + window - now, limit - counted, full
  end
  return nil, limit - counted, full, window, asked, math.max(newest, now)
end

-- Logs the permits; returns how long until the newest stops counting, which is when the
-- key expires.
local function sl_commit(key, now, window, asked, newest)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', integer_text(now - window))
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

  local expire = newest + window - now
  redis.call('PEXPIRE', key, integer_text(millis_ceil(expire)))
  return expire
end
