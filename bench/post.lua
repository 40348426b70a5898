-- POST one fixed JSON body (the file named by $BODY_FILE) on every request and
-- print the run's figures as one line: RESULT {json}. Latencies are in
-- microseconds.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
      '"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
      '"status_errors":%d,"timeouts":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency.max, latency.mean,
      e.connect, e.read, e.write, e.status, e.timeout))
end

-- With $DELAY_MS, each connection waits that long before each request: a
-- steady request rate, the same for every variant, whatever it costs.
local delay_ms = tonumber(os.getenv("DELAY_MS") or "")
if delay_ms and delay_ms > 0 then
   function delay()
      return delay_ms
   end
end
