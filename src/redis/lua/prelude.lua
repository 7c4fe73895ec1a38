-- Shared by every limiter script: the server's clock and exact integer helpers.
--
-- Lua's numbers are doubles, which hold integers exactly below 2^53. The limiters refuse
-- settings that could take a value past that (see the Rust side), so every sum, product
-- and comparison below is exact.

-- Redis before 5 replicates a script by its text unless told otherwise, and then refuses
-- a write after TIME; later versions replicate effects and keep this as a no-op.
if redis.replicate_commands then
  redis.replicate_commands()
end

-- Microseconds since 1970 on the Redis server's clock: the only clock the limiters use,
-- so application servers whose clocks disagree still share one schedule.
local function now_micros()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- The smallest integer at least numerator / denominator, for non-negative integers whose
-- sum is below 2^53. The division rounds, but exactly enough: a quotient that is not a
-- whole number is then at least 1/denominator away from the nearest one, more than the
-- rounding error, so math.ceil lands on the right side. (A bucket's wait may come within
-- 1000 µs of 2^53, about 285 years, where its milliseconds could be one short.)
local function ceil_div(numerator, denominator)
  return math.ceil(numerator / denominator)
end

-- Milliseconds rounded up, so a wait told to the caller is never shorter than the wait.
local function millis_ceil(micros)
  return ceil_div(micros, 1000)
end

-- An integer as Redis should store it: tostring would print 1.7e+15 and lose digits.
local function integer_text(number)
  return string.format('%d', number)
end

-- Stores two integer fields in the hash at `key`, which may be forgotten `expire`
-- microseconds from now.
local function store_pair(key, first, first_value, second, second_value, expire)
  redis.call('HSET', key, first, integer_text(first_value), second, integer_text(second_value))
  redis.call('PEXPIRE', key, integer_text(millis_ceil(expire)))
end

-- The largest integer at most numerator / denominator, for non-negative integers below
-- 2^53: exact for the reason ceil_div is (a whole quotient is computed exactly).
local function floor_div(numerator, denominator)
  return math.floor(numerator / denominator)
end
