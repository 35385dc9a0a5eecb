#!lua name=lockd_fencing
-- Fencing lockd tokens in Redis 7 (docs/fencing.md): a function library.
--
-- Install once (it is kept with the data, like any Redis function):
--
--   redis-cli FUNCTION LOAD REPLACE "$(cat contrib/fencing/redis.lua)"
--
-- FCALL lockd_fenced_set 2 <fence key> <key> <token> <value>
--   sets <key> to <value> if <token> is at least the highest token seen at
--   <fence key>, and records <token> there; else answers the error
--   `STALE ...` and changes nothing. Atomic: a function runs alone.
--
-- From the shell, under `lockd exec`:
--
--   lockd exec acct -- sh -c 'redis-cli FCALL lockd_fenced_set 2 fence:acct acct \
--       "$LOCKD_FENCING_TOKEN" 70'
--
-- From a program: the same FCALL with the token sent as a string of digits.
--
-- Tokens are u64 and Lua numbers are doubles, exact only up to 2^53: tokens
-- are never turned into numbers here. They are compared as decimal strings
-- without leading zeros: the shorter is smaller, and at equal lengths the
-- byte order is the numeric order.

local U64_MAX = '18446744073709551615'

-- Whether `token` is a decimal u64 from 1 up, without leading zeros.
local function is_token(token)
    if type(token) ~= 'string' or not token:match('^[1-9]%d*$') then
        return false
    end
    return #token < #U64_MAX or (#token == #U64_MAX and token <= U64_MAX)
end

-- Whether token `a` is below token `b` (both checked by is_token).
local function below(a, b)
    if #a ~= #b then
        return #a < #b
    end
    return a < b
end

local function fenced_set(keys, args)
    if #keys ~= 2 or #args ~= 2 then
        return redis.error_reply(
            'ERR lockd_fenced_set takes 2 keys (fence key, key) and 2 arguments (token, value)')
    end
    local fence, key, token, value = keys[1], keys[2], args[1], args[2]
    if not is_token(token) then
        return redis.error_reply('ERR lockd_fenced_set: ' .. token ..
            ' is not a lockd fencing token (decimal digits, 1 to 2^64 - 1, no leading zeros)')
    end
    local highest = redis.call('GET', fence)
    if highest and is_token(highest) and below(token, highest) then
        return redis.error_reply('STALE fencing token ' .. token .. ' for ' .. key ..
            ': token ' .. highest .. ' was already seen')
    end
    if highest ~= token then
        redis.call('SET', fence, token)
    end
    return redis.call('SET', key, value)
end

redis.register_function('lockd_fenced_set', fenced_set)
