-- The candidate measured by benches/script_cost.sh, put after the prelude in place of its
-- storage: a key's two integers in one string, "<first> <second>", read with GET and
-- written with SET and PX (a hash takes HMGET, HSET and PEXPIRE). The bench makes the
-- algorithms call `read_state` where they call HMGET. Keys the hash format wrote are read
-- too (a fleet upgraded in place), and any other type is an error naming the key. It
-- measured no cheaper, so the limiters keep the hash.

local function not_a_state(key, kind)
  return error({err = 'WRONGTYPE the rate limiter key ' .. key .. ' holds ' .. kind ..
    ', not a limiter\'s state'})
end

-- The two integers at `key` as HMGET gives them: {first, second}, or {} when missing.
local function read_state(key, first, second)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    local kind = redis.call('TYPE', key).ok
    if kind ~= 'hash' then
      not_a_state(key, 'a ' .. kind)
    end
    local state = redis.call('HMGET', key, first, second)
    if not (state[1] and state[2]) then
      not_a_state(key, 'a hash without the fields ' .. first .. ' and ' .. second)
    end
    return state
  end
  if not value then
    return {}
  end
  local space = string.find(value, ' ', 1, true)
  local a, b
  if space then
    a, b = tonumber(string.sub(value, 1, space - 1)), tonumber(string.sub(value, space + 1))
  end
  if not (a and b) then
    not_a_state(key, 'a string of other text')
  end
  return {a, b}
end

-- Stores two integers at `key`, forgotten `expire` microseconds from now (at once when
-- that is zero, as PEXPIRE 0 does).
local function store_pair(key, _, first_value, _, second_value, expire)
  local millis = millis_ceil(expire)
  if millis > 0 then
    redis.call('SET', key, integer_text(first_value) .. ' ' .. integer_text(second_value),
      'PX', integer_text(millis))
  else
    redis.call('DEL', key)
  end
end
