-- One decision over every key in KEYS, all or nothing: each key is decided at the same
-- instant with its own algorithm; if every one allows, every one takes; if any refuses,
-- nothing is written and the reply's wait is the latest of the refusals'. (A decision on
-- one key is one_key.lua: this with one key, without the loop's tables.)
--
-- KEYS: the keys, each once (the client adds up the permits of members on one key).
-- ARGV: for KEYS[i], ARGV[4i - 3] is its algorithm's tag and the three after it are that
-- algorithm's arguments.
-- Reply: {1, 0} when granted, {0, retry_after_ms} when not.

-- Each algorithm's two steps (see one_key.lua), by the tag the client sends.
local decide = {tb = tb_decide, fw = fw_decide, sl = sl_decide}
local commit = {tb = tb_commit, fw = fw_commit, sl = sl_commit}

local now = now_micros()
local wait = nil
-- What each key's commit needs, three values a key.
local granted = {}
for index = 1, #KEYS do
  local at = 4 * (index - 1)
  local refused, x, y, z = decide[ARGV[at + 1]](
    KEYS[index], now, tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]))
  if refused then
    -- Every refusal is counted, not only the first: the wait is when all would allow.
    wait = math.max(wait or 0, refused)
  else
    granted[3 * index - 2], granted[3 * index - 1], granted[3 * index] = x, y, z
  end
end

-- Refusing writes nothing, so each refusal's wait still holds as computed.
if wait then
  return {0, millis_ceil(wait)}
end
for index = 1, #KEYS do
  commit[ARGV[4 * index - 3]](
    KEYS[index], now, granted[3 * index - 2], granted[3 * index - 1], granted[3 * index])
end
return {1, 0}
