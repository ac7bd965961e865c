-- wrk script for the MetaService benchmarks. Arguments after `--`:
--   static <METHOD> [BODY]              the same request on every connection (body sent as JSON)
--   cycle <JOB_PREFIX> <ROOT_PREFIX> <SINK_PREFIX> <FIRST_SNAPSHOT>
--       one job per thread (run with as many threads as connections): POST next with the job's root at a
--       new snapshot; on "process" commit the barrier with the sink at the input snapshot it names; repeat. Snapshots
--       start at FIRST_SNAPSHOT, which must exceed every snapshot of an earlier run on the same database.
--   poll <JOB_PREFIX> <ROOT_PREFIX> <SINK_PREFIX> <FIRST_SNAPSHOT>
--       the same, but the root never moves: after its first barrier each job polls `next` reporting the
--       snapshot it already reported (an idle pipeline's jobs), and every answer is a wait.
-- done() prints one line "WRK_JSON {...}" with the summary, latency percentiles (µs) and cycle counts.

local threads = {}
local counter = 0

function setup(thread)
  thread:set("index", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  mode = args[1]
  wrk.headers["Content-Type"] = "application/json"
  cycles, waits, failures, overloaded = 0, 0, 0, 0
  if mode == "static" then
    wrk.method = args[2]
    if args[3] ~= nil and args[3] ~= "" then
      wrk.body = args[3]
    end
    static = wrk.format()
  else
    job = args[2] .. index
    root = args[3] .. index
    sink = args[4] .. index
    state, snapshot, barrier, output = "next", tonumber(args[5]), nil, nil
  end
end

function request()
  if mode == "static" then
    return static
  end
  if state == "next" then
    return wrk.format("POST", "/jobs/" .. job .. "/barriers/next", nil,
      '{"root_snapshots":{"' .. root .. '":' .. snapshot .. '}}')
  end
  return wrk.format("POST", "/jobs/" .. job .. "/barriers/" .. barrier .. "/commit", nil,
    '{"snapshots":{"' .. sink .. '":' .. output .. '}}')
end

function response(status, headers, body)
  if status == 429 then
    overloaded = overloaded + 1  -- shed at once with Retry-After: counted apart from other failures
  end
  if mode == "static" then
    return
  end
  if status ~= 200 then
    failures = failures + 1
    state = "next"  -- asking again is always safe: an in-flight barrier is offered again
    return
  end
  if state == "next" then
    if body:match('"action":"(%a+)"') == "process" then
      barrier = body:match('"barrier":(%d+)')
      -- the sink is written from the input snapshot the barrier was planned with (a barrier left in flight by
      -- an earlier phase carries that phase's snapshot), as a real job does
      output = body:match('"snapshot_id":(%d+)')
      state = "commit"
    else
      waits = waits + 1
    end
  else
    cycles = cycles + 1
    if mode == "cycle" then
      snapshot = snapshot + 1
    end
    state = "next"
  end
end

function done(summary, latency, requests)
  local total_cycles, total_waits, total_failures, total_overloaded = 0, 0, 0, 0
  for _, thread in ipairs(threads) do
    total_overloaded = total_overloaded + (thread:get("overloaded") or 0)
    total_cycles = total_cycles + (thread:get("cycles") or 0)
    total_waits = total_waits + (thread:get("waits") or 0)
    total_failures = total_failures + (thread:get("failures") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},' ..
    '"cycles":%d,"waits":%d,"failures":%d,"overloaded":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    total_cycles, total_waits, total_failures, total_overloaded))
end
