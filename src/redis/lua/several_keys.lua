-- One decision over every key in KEYS, all or nothing: each key is decided at the same
-- instant with its own algorithm; if every one allows, every one takes; if any refuses,
-- nothing is written and each key's state is reported unchanged. (A decision on one key
-- is one_key.lua, which describes the steps: this with one key, without the loop's
-- tables.)
--
-- KEYS: the keys, each once (the client adds up the permits of members on one key).
-- ARGV: for KEYS[i], ARGV[4i - 3] is its algorithm's tag and the three after it are that
-- algorithm's arguments, the last the units asked for (all zero: only the keys' states
-- are asked for, and nothing is written).
-- Reply: {granted, then for each key: left, whole_after_us, wait_ms}, as one_key.lua's
-- for its key: its own wait, 0 when it allows; the request could succeed after the
-- latest of them.

-- Each algorithm's two steps (see one_key.lua), by the tag the client sends.
local decide = {tb = tb_decide, fw = fw_decide, sl = sl_decide}
local commit = {tb = tb_commit, fw = fw_commit, sl = sl_commit}

local now = now_micros()
local refused = false
local reply = {1}
-- What each key's commit needs, three values a key.
local granted = {}
for index = 1, #KEYS do
  local at = 4 * (index - 1)
  local asked = tonumber(ARGV[at + 4])
  local wait, left, full, x, y, z = decide[ARGV[at + 1]](
    KEYS[index], now, tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), asked)
  reply[3 * index - 1], reply[3 * index] = left, full
  -- Every refusal is counted, not only the first: each key tells its own wait.
  if wait and asked > 0 then
    refused = true
    reply[3 * index + 1] = millis_ceil(wait)
  else
    reply[3 * index + 1] = 0
    granted[3 * index - 2], granted[3 * index - 1], granted[3 * index] = x, y, z
  end
end

-- Refusing writes nothing, so each refusal's wait still holds as computed. Asking for
-- nothing (every key asks for as much) takes nothing.
if refused then
  reply[1] = 0
  return reply
end
if tonumber(ARGV[4]) == 0 then
  return reply
end
for index = 1, #KEYS do
  local at = 4 * (index - 1)
  reply[3 * index - 1] = reply[3 * index - 1] - tonumber(ARGV[at + 4])
  reply[3 * index] = commit[ARGV[at + 1]](
    KEYS[index], now, granted[3 * index - 2], granted[3 * index - 1], granted[3 * index])
end
return reply
