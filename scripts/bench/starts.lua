-- wrk script: every request is a task-augmented tools/call of quick_job (scripts/bench/flowgate.yaml)
-- on the 2026-07-28 wire: each one starts a run on the local engine and answers with its task.
local meta = '{"io.modelcontextprotocol/protocolVersion":"2026-07-28",' ..
  '"io.modelcontextprotocol/clientInfo":{"name":"wrk","version":"1"},' ..
  '"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "quick_job"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick_job","arguments":{},"_meta":' .. meta .. '}}'

local threads = {}
function setup(thread) table.insert(threads, thread) end
bad = 0
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, '"taskId"', 1, true) then bad = bad + 1 end
end

done = function(summary, latency, requests)
  local wrong = 0
  for _, t in ipairs(threads) do wrong = wrong + t:get("bad") end
  io.write(string.format("BENCH rps=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.requests,
    wrong + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
