-- wrk script for bench/http_load.sh. Prints the run as "name value" lines: requests/s, p99
-- latency, socket errors and non-2xx responses. With WRK_COUNT_STATUS=1 it also counts responses
-- by status in every thread (2xx, 429, other); that costs wrk a Lua call per response, so the
-- script measures throughput without it and checks statuses in a separate run.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

if os.getenv("WRK_COUNT_STATUS") == "1" then
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
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk_requests %d\n", summary.requests))
  io.write(string.format("wrk_rps %.0f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("wrk_p99_ms %.2f\n", latency:percentile(99) / 1000))
  io.write(string.format("wrk_socket_errors %d\n", e.connect + e.read + e.write + e.timeout))
  io.write(string.format("wrk_non_2xx %d\n", e.status))
  if os.getenv("WRK_COUNT_STATUS") == "1" then
    local ok, limited, other = 0, 0, 0
    for _, t in ipairs(threads) do
      ok = ok + t:get("ok")
      limited = limited + t:get("limited")
      other = other + t:get("other")
    end
    io.write(string.format("wrk_2xx %d\nwrk_429 %d\nwrk_other %d\n", ok, limited, other))
  end
end
