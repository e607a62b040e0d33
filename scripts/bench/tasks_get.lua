-- wrk script: every request is a tasks/get of one task (TASK_ID) on the 2026-07-28 wire.
local task = os.getenv("TASK_ID")
local meta = '{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"},' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tasks/get"
wrk.headers["Mcp-Name"] = task
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"' .. task .. '","_meta":' .. meta .. '}}'

local bad = 0
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, '"status":"working"', 1, true) then
    bad = bad + 1
  end
end

done = function(summary, latency, requests)
  io.write(string.format("BENCH rps=%.0f p50_ms=%.2f p99_ms=%.2f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
