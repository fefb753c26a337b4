-- wrk script for bench/http_load.sh: counts responses by status in every thread, then prints the
-- run's requests/s, p99 latency and counts, one "name value" per line.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  ok, limited, other = 0, 0, 0
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    ok = ok + 1
  elseif status == 429 then
    limited = limited + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local total_ok, total_limited, total_other = 0, 0, 0
  for _, t in ipairs(threads) do
    total_ok = total_ok + t:get("ok")
    total_limited = total_limited + t:get("limited")
    total_other = total_other + t:get("other")
  end
  local e = summary.errors
  io.write(string.format("wrk_rps %.0f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("wrk_p99_ms %.2f\n", latency:percentile(99) / 1000))
  io.write(string.format("wrk_2xx %d\nwrk_429 %d\nwrk_other %d\n", total_ok, total_limited, total_other))
  io.write(string.format("wrk_socket_errors %d\n", e.connect + e.read + e.write + e.timeout))
end
