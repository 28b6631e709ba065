-- wrk script of bench/bench_anchor.py: SPARQL reads (GET ?query=) or writes (POST of a
-- small INSERT DATA), the same requests for `oxigraph serve` and for txcluster.
--
-- Arguments (after wrk's `--`):
--   read  PREFIX SUFFIX NKEYS [HEADER ...]
--       GET PREFIX .. k .. SUFFIX with k varying over 0..NKEYS-1 (a point SELECT on a
--       different existing subject per request, so no cache answers it); NKEYS 0: GET
--       PREFIX as it is (one fixed query).
--   write PATH BASE TAG NTRIPLES [HEADER ...]
--       POST PATH with INSERT DATA of NTRIPLES triples on a subject of its own per
--       request: BASE w/TAG-<thread>-<counter> (TAG differs per wrk run, so no two runs
--       insert the same subject).
--   HEADER is "Name: value" (Accept, Content-Type, Authorization when needed).
--
-- Only 2xx responses count as done: response() counts the others, done() prints one
-- line "WRK_JSON {...}" with the totals of every thread and wrk's latency percentiles
-- (microseconds), which the harness parses (bench_anchor.parse_wrk).

local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  mode = args[1]
  ok, bad, first_bad, n = 0, 0, "", 0
  local first_header
  if mode == "read" then
    prefix, suffix, nkeys = args[2], args[3], tonumber(args[4])
    first_header = 5
  elseif mode == "write" then
    path, base, tag, ntriples = args[2], args[3], args[4], tonumber(args[5])
    first_header = 6
  else
    error("sparql.lua: first argument must be read or write, not " .. tostring(mode))
  end
  headers = {}
  for i = first_header, #args do
    local name, value = args[i]:match("^([^:]+):%s*(.*)$")
    if not name then error("sparql.lua: bad header argument " .. args[i]) end
    headers[name] = value
  end
end

function request()
  n = n + 1
  if mode == "read" then
    if nkeys == 0 then
      return wrk.format("GET", prefix, headers)
    end
    -- A stride prime to NKEYS walks every subject; threads start apart.
    local k = (n * 7919 + tid * 104729) % nkeys
    return wrk.format("GET", prefix .. k .. suffix, headers)
  end
  local s = "<" .. base .. "w/" .. tag .. "-" .. tid .. "-" .. n .. ">"
  local triples = {}
  for j = 0, ntriples - 1 do
    triples[#triples + 1] = s .. " <" .. base .. "wp" .. j .. "> \"v" .. j .. "\" ."
  end
  return wrk.format("POST", path, headers, "INSERT DATA { " .. table.concat(triples, " ") .. " }")
end

function response(status, _, body)
  if status >= 200 and status < 300 then
    ok = ok + 1
  else
    bad = bad + 1
    if first_bad == "" then
      first_bad = status .. " " .. string.sub(body or "", 1, 300)
    end
  end
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end)
    .. '"'
end

function done(summary, latency, _)
  local total_ok, total_bad, first = 0, 0, ""
  for _, thread in ipairs(threads) do
    total_ok = total_ok + thread:get("ok")
    total_bad = total_bad + thread:get("bad")
    if first == "" then first = thread:get("first_bad") end
  end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"duration_us": %d, "requests": %d, "ok": %d, "bad": %d, "first_bad": %s, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
    .. '"latency_us": {"mean": %.1f, "p50": %.1f, "p90": %.1f, "p99": %.1f, "max": %.1f}}\n',
    summary.duration, summary.requests, total_ok, total_bad, json_string(first),
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max))
end
