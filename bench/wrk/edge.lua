-- wrk script for B3's cross-check: GET /bench/<mode>/<random id> against
-- `lockd serve --manifest` serving guest/edge-bench (docs/benchmarks.md).
--
--   wrk -t1 -c1 -d10s --latency -s bench/wrk/edge.lua http://127.0.0.1:7450 -- ephemeral
--
-- mode: nolock, ephemeral or persistent (default ephemeral). A fresh random
-- id per request, so a lock per request never waits on another.
local mode = "ephemeral"
local counter = 0
local tag

-- Each thread gets a number of its own (wrk does not seed math.random, so
-- every thread would draw the same one).
local threads = 0
function setup(thread)
   threads = threads + 1
   thread:set("id", threads)
end

function init(args)
   if args[1] ~= nil then mode = args[1] end
   tag = tostring(id) .. "-" .. tostring(os.time())
end

function request()
   counter = counter + 1
   return wrk.format("GET", "/bench/" .. mode .. "/wrk" .. tag .. "-" .. counter)
end

function done(summary, latency, requests)
   io.write(string.format("non-2xx/3xx as counted by wrk: %d\n", summary.errors.status))
end
