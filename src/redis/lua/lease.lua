-- Leases of a token bucket's tokens (after token_bucket.lua): a leased front takes tokens
-- in batches and gives back those it did not use. The key is the token bucket's own, so
-- leased fronts and plain limiters on one key share one bucket.
--
-- A lease may be reserved ahead: its tokens are those the bucket holds at the instant it
-- begins, up to `ahead` microseconds from now, and the bucket's state moves on to that
-- instant. Fronts that each ask when they run short thus take turns on the bucket's
-- schedule, rather than each asking again and again for tokens another took first.
--
-- A give-back is applied once, however often it is sent (a cluster connection may send
-- it again after a dropped connection, not knowing whether it ran). The front names a
-- lease by the server's microsecond `now` of the take that made it: Redis runs one
-- script at a time, each for microseconds, so no two takes share one. (A server clock
-- stepped back, or a failover to a node whose clock is behind, could repeat one; then a
-- give-back is not applied: the bucket is stricter, never looser.) Nothing on the take,
-- the hot path, is added for it.
--
-- KEYS[1]: the bucket's key. KEYS[2], to give back only: a key named after the lease, in
-- KEYS[1]'s hash slot, that remembers it was given back.
-- ARGV: 'take' or 'give', the capacity in parts, the parts gained each microsecond, the
-- parts in a token, then
--   take: the fewest tokens, the most tokens, how far ahead a lease may begin (µs).
--     Reply {tokens, now, began} when it took (began: the server's microsecond at which
--     the tokens are there, at least now), {0, now, retry_after_ms} when fewer than the
--     fewest are there by `ahead` (nothing taken).
--   give: the tokens to give back and the microsecond their lease began. Reply {parts}:
--     the parts given back; sent again, the same while the record lives, and 0 once the
--     lease could return nothing anyway.
local key = KEYS[1]
local capacity, gain, per_token = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_micros()
local parts, time = tb_level(key, now, capacity, gain)

-- The instant at which the bucket, holding `parts` at `time`, holds `wanted` parts.
local function when_held(wanted)
  return time + ceil_div(math.max(0, wanted - parts), gain)
end

if ARGV[1] == 'take' then
  local fewest, most, ahead = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  local horizon = now + ahead
  local tokens = 0
  if horizon >= time then
    -- The product may pass 2^53 and round, but only when it is far above the capacity.
    local reachable = math.min(capacity, parts + (horizon - time) * gain)
    tokens = math.min(most, floor_div(reachable, per_token))
  end
  if tokens < fewest then
    return {0, now, millis_ceil(when_held(fewest * per_token) - horizon)}
  end
  local began = when_held(tokens * per_token)
  -- `began` is rounded up to a whole microsecond, in which the bucket may gain more than
  -- it lacked: it still holds no more than its capacity.
  parts = math.min(capacity, parts + (began - time) * gain) - tokens * per_token
  tb_commit(key, now, parts, began, tb_expiry(now, capacity, gain, parts, began))
  return {tokens, now, began}
end

-- Giving back: the unused tokens, less what the bucket gained since the lease began, at
-- the bucket's time (which is never before the lease began). While the tokens were out
-- the bucket may have filled to its capacity and stopped gaining; had they never been
-- taken, it would have stopped gaining sooner. Taking off the gain since the lease began
-- (at least what was lost to the cap) leaves the bucket never fuller than it would be
-- had the lease been only the tokens used, which keeps the bound of any interval of
-- length t at capacity + rate × (t + lifetime).
local tokens, began = tonumber(ARGV[5]), tonumber(ARGV[6])
-- The product may pass 2^53 and round, but only when it is far above the parts given.
local owed = tokens * per_token - math.max(0, time - began) * gain
if owed <= 0 then
  -- Sent again later, it owes no more: the bucket's time only moves on.
  return {0}
end
local back = math.min(owed, capacity - parts)
-- Remembered until the bucket's time passes the instant it owes nothing, after which a
-- give-back sent again returns nothing anyway (above): so remembered no longer than the
-- bucket takes to gain the lease's tokens.
local owed_until = began + ceil_div(tokens * per_token, gain)
local first = redis.call('SET', KEYS[2], integer_text(back), 'PX',
  integer_text(millis_ceil(owed_until - now)), 'NX')
if not first then
  return {tonumber(redis.call('GET', KEYS[2]))}
end
if back == 0 then
  return {0}
end
parts = parts + back
tb_commit(key, now, parts, time, tb_expiry(now, capacity, gain, parts, time))
return {back}
