-- wrk script for B4's cross-check: lock + unlock pairs over lockd's REST
-- API (POST /v1/locks/lock, then POST /v1/locks/unlock with the token the
-- lock answered), as the suite's REST callers do (docs/benchmarks.md).
--
--   wrk -t64 -c64 -d10s --latency -s bench/wrk/rest_pairs.lua http://127.0.0.1:7450 -- persistent
--
-- Run it with as many threads as connections (-tN -cN): wrk's callbacks do
-- not say which connection answered, so each connection needs a thread (and
-- a Lua state) of its own to pair an unlock with its lock. durability:
-- persistent or ephemeral (default persistent). wrk counts requests: pairs/s
-- is half its Requests/sec, and its latency is per request, not per pair.
local durability = "persistent"
local owner
local n = 0
local name
local token = nil
failures = 0

-- Each thread gets a number of its own (wrk does not seed math.random, so
-- every thread would draw the same one).
local threads = {}
function setup(thread)
   table.insert(threads, thread)
   thread:set("id", #threads)
end

function init(args)
   if args[1] ~= nil then durability = args[1] end
   owner = "wrk-" .. tostring(id) .. "-" .. tostring(os.time())
end

local headers = { ["Content-Type"] = "application/json" }

function request()
   if token == nil then
      n = n + 1
      name = owner .. "/" .. n
      return wrk.format("POST", "/v1/locks/lock", headers, string.format(
         '{"name":"%s","owner":"%s","ttl_ms":30000,"durability":"%s"}', name, owner, durability))
   end
   local body = string.format('{"name":"%s","owner":"%s","fencing_token":%s}', name, owner, token)
   token = nil
   return wrk.format("POST", "/v1/locks/unlock", headers, body)
end

function response(status, hdrs, body)
   if status ~= 200 then
      failures = failures + 1
      token = nil
      return
   end
   local t = string.match(body, '"fencing_token":(%d+)')
   if t ~= nil then token = t end
end

function done(summary, latency, requests)
   local failed = 0
   for _, thread in ipairs(threads) do
      failed = failed + thread:get("failures")
   end
   io.write(string.format("pairs/s: %.0f; refused requests (not 200): %d\n",
      summary.requests / 2 / (summary.duration / 1e6), failed))
end
