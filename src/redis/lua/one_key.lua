-- A decision on one key, KEYS[1], by one algorithm, whose two steps the script binds
-- before this as `decide` and `commit`:
--   decide(key, now, a, b, asked) reads the key's state and writes nothing. To refuse it
--     returns the wait in microseconds after which the request could succeed, if nobody
--     takes first; to grant, nil and up to three values for commit.
--   commit(key, now, x, y, z) writes those values: the new state and the expiry.
-- Once an algorithm allows a request it keeps allowing it as time passes, as long as
-- nobody takes: so the first instant at which several keys all allow is the latest of
-- their waits (several_keys.lua decides them so, all or nothing; with one key it is
-- this, which skips that loop's tables and lookups: 10 percent of a call's cost).
--
-- ARGV: the algorithm's tag (which this script does not read), then its three arguments.
-- Reply: {1, 0} when granted, {0, retry_after_ms} when not.
local key, now = KEYS[1], now_micros()
local refused, x, y, z = decide(key, now, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
if refused then
  return {0, millis_ceil(refused)}
end
commit(key, now, x, y, z)
return {1, 0}
