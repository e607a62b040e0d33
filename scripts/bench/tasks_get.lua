-- wrk script: every request is a tasks/get of one task (TASK_ID) on the 2026-07-28 wire.
-- With EXPECT=404 the same request goes to an unrouted path (the URL given to wrk) and a 404 is
-- the expected answer: the HTTP floor of the server's own stack.
local task = os.getenv("TASK_ID")
local expect = tonumber(os.getenv("EXPECT") or "200")
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

-- Each thread counts its wrong answers; done() sums them through the threads' own states.
local threads = {}
function setup(thread) table.insert(threads, thread) end
bad = 0
response = function(status, headers, body)
  if status ~= expect or (expect == 200 and not string.find(body, '"status":"working"', 1, true)) then
    bad = bad + 1
  end
end

done = function(summary, latency, requests)
  local wrong = 0
  for _, t in ipairs(threads) do wrong = wrong + t:get("bad") end
  io.write(string.format("BENCH rps=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.requests,
    wrong + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
