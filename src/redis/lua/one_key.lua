-- A decision on one key, KEYS[1], by one algorithm, whose two steps the script binds
-- before this as `decide` and `commit`:
--   decide(key, now, a, b, asked) reads the key's state and writes nothing. It returns
--     the wait in microseconds after which the request could succeed, if nobody takes
--     first (nil to grant); what the key has left now, in the units of `asked`; how many
--     microseconds until it is whole again, if nobody takes (0 when it is whole now);
--     and, to grant, up to three values for commit.
--   commit(key, now, x, y, z) writes those values, the new state and its expiry, and
--     returns how many microseconds until the key is whole again: the key expires then.
-- Once an algorithm allows a request it keeps allowing it as time passes, as long as
-- nobody takes: so the first instant at which several keys all allow is the latest of
-- their waits (several_keys.lua decides them so, all or nothing; with one key it is
-- this, which skips that loop's tables and lookups: 10 percent of a call's cost).
--
-- ARGV: the algorithm's tag (which this script does not read), then its three arguments,
-- the last the units asked for: zero asks only for the key's state, and writes nothing.
-- Reply: {granted, left, whole_after_us, wait_ms}: 1 and the key's state after the take
-- when granted (wait_ms 0), 0 and its state unchanged when not (wait_ms the wait, in
-- milliseconds rounded up).
local key, now, asked = KEYS[1], now_micros(), tonumber(ARGV[4])
local wait, left, full, x, y, z = decide(key, now, tonumber(ARGV[2]), tonumber(ARGV[3]), asked)
if asked == 0 then
  return {1, left, full, 0}
end
if wait then
  return {0, left, full, millis_ceil(wait)}
end
return {1, left - asked, commit(key, now, x, y, z), 0}
