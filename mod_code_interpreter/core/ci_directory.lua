--[[
ci_directory.lua - the container directory in Redis: the operations of ci_directory_ops
(ci_directory_ops.h) with the semantics of ci_directory (ci_directory.h), shared by
several httpd nodes. One function, called with FCALL and no KEYS (ci_redis.c
loads this source as a library, "ci_dir_" and the source's SHA1 naming both
it and its function, so that nodes of other versions keep theirs), or, on a
Redis without functions (before 7.0, or an ACL that denies FUNCTION), run as
a script with EVALSHA:

  ARGV[1]  the request, JSON, as ci_dirops_apply takes it
  ARGV[2]  now, in microseconds (the caller's clock)
  ARGV[3]  48 hex digits from the caller's random source: the id of a
           container created without one (Lua's PRNG is not a random source)

As a function its definitions are made once, when the library is loaded;
run as a script, each call makes them all again (about 45 us of Redis' time
a call, measured: more than most operations themselves).

It returns the answer, JSON, as ci_dirops_apply returns it, plus
"gone": [ids]: the containers whose sandboxes must go now (deleted,
evicted, claimed), which ci_dirops_apply hands back in an array instead.
Every operation is one script run, so each is atomic.

Keys are computed here, under the fixed prefix "ci:": Redis Cluster (which
needs every key declared in KEYS and on one slot) is not supported.

Time. Every logical decision (running or expired, when a retained record is
forgotten, which containers are due) uses ARGV[2], never Redis' clock, so
that nodes agree and tests pass any time. TTLs run on Redis' own clock: they
are only a safety net that removes garbage nobody reads any more (a node
that died, a record nobody asks for), set to what is left of a key's life
at NOW plus a minute of grace for clocks that differ between nodes.

Data model:
  ci:c:ID      string  the record, JSON: the container's fields (id, owner,
                       name, tool, memory_limit, handle, created_at,
                       last_active_at, idle_seconds, memory_bytes, status,
                       node, provider, cred, allowlist, secrets (sealed
                       for the container: AES-GCM bound to its id), skills
                       (not served with this directory yet), auth:
                       an HMAC the
                       nodes compute over id, owner, tool, provider, cred,
                       memory_limit, node and (when there is one) allowlist
                       with the server secret, and check on every read) and busy, retention (seconds, from the create's
                       limits: the container keeps it) and forget_at (when
                       an expired or deleted record is forgotten).
                       TTL: a running one's expiry plus retention, refreshed
                       on every write (a touch moves it); a retired one's
                       forget_at.
  ci:o:OWNER   zset    created_at -> id: the owner's listed records (running
                       and expired; a deleted one leaves it). Listing pages.
  ci:l:OWNER   zset    last_active_at -> id: the owner's running ones: its
                       cap and its least recently used.
  ci:n:NODE    hash    id -> memory_bytes: the running containers created on
                       NODE: the node's cap and memory budget. A container
                       counts only on its own node.
                       held_until: a request in flight holds it until then
                       (not evicted, not claimed); busy, busy_until: a run.
  ci:d         zset    expiry (last_active_at + idle) -> id: running
                       containers' deadlines, for claim_due.
  ci:r:RID     string  {c: container id, o: owner, p: whether it left output
                       pending}: the container response RID used. TTL: at
                       least its container's record's.
  ci:v:OWNER:CONV
               string  {c, o, p}: the container the owner's
                       conversation CONV last used, and whether it is owed
                       output (its item "conversation-pending:OWNER:CONV").
                       Keyed by owner: another owner's conversation of the
                       same id is another (owners are keyed hashes: no ':').
                       TTL: at least its container's record's.
  ci:i:ITEM    string  {c, o, t: text}: a remembered item ("ci_", "sh_", "sho_" ids,
                       "pending:RID" for a response's pending output, and
                       "conversation-pending:OWNER:CONV" for a conversation's).
                       TTL: at least its container's record's.
  ci:m:ID      set     the ci:r, ci:v and ci:i keys of container ID, which go with
                       it. Its TTL is their floor: raised with theirs, 10
                       minutes past the record's, once the record's passes
                       it (keep_memos).
  ci:ia        zset    sequence -> item id: every item, oldest first, for
  ci:is        hash    item id -> bytes       the byte bound (counted as
  ci:ib        string  total bytes             ci_directory counts them)
  ci:iseq      string  the items' sequence
The owner, node and index keys get the longest TTL of what they hold (and
up to 10 minutes more, so that a use does not raise them every time); ci:d
and the item bookkeeping live on, and every reader drops an entry whose
record is gone (a TTL ran out) or forgotten (by NOW).

Operations (besides ci_directory_ops's; "node" names the httpd node asking):
  create      also node (required): the container's node; the container
              JSON has "node". limits.retention is kept in the record.
              Eviction takes the owner's least recently used idle container
              among those this node can destroy: its own node's, or (for the
              owner's cap alone) one with a handle (a remote sandbox).
  finish      also limits.items? (bytes; default 64 MiB): the items' bound.
  claim_due   node, limit? (default 100): expires up to LIMIT running, not
              busy containers whose expiry has passed, of NODE or with a
              handle (any node) -> {status, containers: [container]}.
              No owner. Each due container is claimed by exactly one caller.
  which_gone  ids -> {status, gone}: which of the local sandboxes a node
              runs have no running container any more (no owner).
  busy        id, busy (boolean), lease? (seconds, default 3600) -> {status}:
              an execution runs in it (or no longer), a use (last_active_at
              = now): eviction and expiry skip a busy one until its lease
              runs out (a node that dies mid-run does not keep it busy).
              A request that holds its container (get or response with
              touch, create with hold) does not ask it: the hold does as much.
]]

local P = 'ci:'
local GRACE_MS = 60000
-- An item the module returns and remembers: a code_interpreter_call
-- ("ci_..."), a shell_call ("sh_...") or its shell_call_output ("sho_...").
local function our_item(id)
  return id ~= nil and (string.sub(id, 1, 3) == 'ci_' or string.sub(id, 1, 3) == 'sh_' or
                        string.sub(id, 1, 4) == 'sho_')
end

local MEMO_OVERHEAD = 64           -- ci_directory's per-item bookkeeping
local DEFAULT_ITEMS = 64 * 1024 * 1024
local MAX_LIST = 100
local DEFAULT_LEASE = 3600                    -- seconds a busy mark holds unless renewed
-- cjson.null (set by apply: a library's definitions run where cjson is not
-- there yet)
local NULL
-- The call's: the time asked (microseconds) and a new container's id, if it
-- makes one (set by apply: the script runs as a function Redis keeps, its
-- definitions made once, or as a script run whole each time).
local now, fresh_id
-- What this call has learnt already (reset by apply): the records it read
-- or wrote, by id (false: gone), and the TTL floor of each container's
-- memos (keep_memos), so that one operation asks Redis for each once.
local records, memo_floors

-- ---- JSON ----------------------------------------------------------------
-- cjson writes numbers with 14 digits (microsecond times have 16) and
-- empty arrays as {}: answers and records are written here.

local ARRAY = {}
local function array(t) return setmetatable(t or {}, ARRAY) end

local encode
local function encode_array(t)
  local parts = {}
  for i = 1, #t do parts[i] = encode(t[i]) end
  return '[' .. table.concat(parts, ',') .. ']'
end

-- cjson writes an object, but for what it would write wrongly: tables
-- within (an array may be empty) and numbers past 14 digits. Those are
-- written here and taken out of T while cjson writes the rest (put back
-- at once). Keys come in no particular order.
local BIG = 1e14
local function encode_object(t)
  local own
  for k, v in pairs(t) do
    local ty = type(v)
    if ty == 'table' or ty == 'number' and (v >= BIG or v <= -BIG) then
      own = own or {}
      own[#own + 1] = k
    end
  end
  if not own then return cjson.encode(t) end
  local parts, saved = {}, {}
  for i, k in ipairs(own) do
    parts[i] = cjson.encode(k) .. ':' .. encode(t[k])
    saved[i], t[k] = t[k], nil
  end
  local rest = cjson.encode(t)
  for i, k in ipairs(own) do t[k] = saved[i] end
  if rest ~= '{}' then parts[#parts + 1] = string.sub(rest, 2, -2) end
  return '{' .. table.concat(parts, ',') .. '}'
end

encode = function(v)
  local ty = type(v)
  if v == nil or v == NULL then return 'null' end
  if ty == 'string' then return cjson.encode(v) end
  if ty == 'number' then return string.format('%d', v) end   -- integers only
  if ty == 'boolean' then return tostring(v) end
  if getmetatable(v) == ARRAY then return encode_array(v) end
  return encode_object(v)
end

-- Numbers go to Redis as integers written out (Lua would write 14 digits).
local function num(n) return string.format('%d', n) end

local function str_of(t, key)
  local v = type(t) == 'table' and t[key] or nil
  return type(v) == 'string' and v or nil
end

local function int_of(t, key, dflt)
  local v = type(t) == 'table' and t[key] or nil
  if type(v) == 'number' and v == math.floor(v) then return v end
  return dflt
end

local function opt(v) if v == nil then return NULL end return v end

local function decode(text)
  if not text then return nil end
  local ok, v = pcall(cjson.decode, text)
  if ok and type(v) == 'table' then return v end
  return nil
end

-- ---- keys and TTLs ---------------------------------------------------------

local function k_rec(id) return P .. 'c:' .. id end
local function k_listed(owner) return P .. 'o:' .. owner end
local function k_live(owner) return P .. 'l:' .. owner end
local function k_node(node) return P .. 'n:' .. node end
local function k_memos(id) return P .. 'm:' .. id end
local function k_resp(rid) return P .. 'r:' .. rid end
local function k_item(item) return P .. 'i:' .. item end
local function k_conv(owner, conv) return P .. 'v:' .. owner .. ':' .. conv end
-- The item a conversation's owed outputs are remembered as (named as
-- ci_directory_ops.c names it: the items' bound counts the same bytes).
local function conv_pending(owner, conv)
  return 'conversation-pending:' .. owner .. ':' .. conv
end
local K_DEADLINES = P .. 'd'
local K_AGE, K_SIZES, K_BYTES, K_SEQ = P .. 'ia', P .. 'is', P .. 'ib', P .. 'iseq'

local function deadline(r) return r.last_active_at + r.idle_seconds * 1000000 end

-- When the record may go: a running one at its expiry plus retention.
local function horizon(r)
  if r.status == 'running' then return deadline(r) + r.retention * 1000000 end
  return r.forget_at
end

local function ttl_ms(r)
  return math.floor(math.max(horizon(r) - now, 0) / 1000) + GRACE_MS
end

-- Keys whose TTL follows what they hold are raised SLACK_MS past it when
-- they fall short, not to it: a use moves a container's horizon on a
-- little, and raising to the horizon itself would cost a PEXPIRE at every
-- use. (A key that outlives what it holds by up to SLACK_MS is garbage
-- nobody reads: every reader checks the record.)
local SLACK_MS = 600000

-- An index key lives as long as the longest-lived thing it holds.
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, num(ms + SLACK_MS)) end
end

-- ---- records ---------------------------------------------------------------

local function forgotten(r) return r.status ~= 'running' and r.forget_at <= now end

-- A container's memo keys (its response ids, items and pending outputs, in
-- the set ci:m:ID) live at least as long as its record, MS. The set's own
-- TTL is their floor (no member's is lower): when it falls below MS, all
-- of them are raised together to SLACK_MS past it. A save then costs one
-- PTTL, not a PEXPIRE per memo, and a conversation's turns no longer cost
-- more the longer it gets. Returns the floor, and whether the set exists
-- (a set not made yet takes its TTL when its first member is added).
local function keep_memos(id, ms)
  local known = memo_floors[id]
  if known and known.floor >= ms then return known.floor, known.exists end
  local set = k_memos(id)
  local floor = redis.call('PTTL', set)
  local exists = floor ~= -2
  if floor < ms then
    -- the set first: Redis' clock runs on within a call, and the floor must
    -- not end after a member
    floor = ms + SLACK_MS
    if exists then redis.call('PEXPIRE', set, num(floor)) end
    for _, key in ipairs(exists and redis.call('SMEMBERS', set) or {}) do
      redis.call('PEXPIRE', key, num(floor))
    end
  end
  memo_floors[id] = { floor = floor, exists = exists }
  return floor, exists
end

local function save(r)
  local ms = ttl_ms(r)
  redis.call('SET', k_rec(r.id), encode(r), 'PX', num(ms))
  keep_memos(r.id, ms)
end

local drop_item

-- Forget container ID and everything that leads to it (R: its record, or
-- nil when the record is already gone; then only ID's own keys go).
local function purge(id, r)
  for _, key in ipairs(redis.call('SMEMBERS', k_memos(id))) do
    local item = string.match(key, '^' .. P .. 'i:(.*)$')
    if item then drop_item(item) else redis.call('DEL', key) end
  end
  redis.call('DEL', k_memos(id), k_rec(id))
  records[id], memo_floors[id] = false, nil
  redis.call('ZREM', K_DEADLINES, id)
  if r then
    redis.call('ZREM', k_listed(r.owner), id)
    redis.call('ZREM', k_live(r.owner), id)
    redis.call('HDEL', k_node(r.node), id)
  end
end

local STATUSES = {running = true, expired = true, deleted = true}

local function is_num(v) return type(v) == 'number' end
local function is_str(v) return type(v) == 'string' end

-- Whether R is a record this script wrote for ID: every field it reads
-- there, of its type. Anything else (a record edited in Redis) reads as
-- absent, so that one bad record cannot stop the operations of others.
local function well_formed(r, id)
  return r.id == id and is_str(r.owner) and is_str(r.tool) and is_str(r.node) and
         is_str(r.memory_limit) and STATUSES[r.status] == true and
         is_num(r.created_at) and is_num(r.last_active_at) and
         is_num(r.idle_seconds) and is_num(r.memory_bytes) and
         is_num(r.retention) and is_num(r.forget_at)
end

-- The record of ID as stored, whatever NOW says (nil when gone or not one
-- of ours).
local function raw(id)
  local known = records[id]
  if known ~= nil then return known or nil end
  local r = decode(redis.call('GET', k_rec(id)))
  if not (r and well_formed(r, id)) then r = nil end
  records[id] = r or false
  return r
end

-- The record of ID, unless gone or forgotten by NOW.
local function load(id)
  local r = raw(id)
  if r and forgotten(r) then
    purge(id, r)
    return nil
  end
  return r
end

-- The record of ID when OWNER owns it: another owner's reads as unknown.
local function rec_of(id, owner)
  local r = id and load(id) or nil
  if r and r.owner == owner then return r end
  return nil
end

local function container_json(r)
  return {
    id = r.id, name = opt(r.name), tool = r.tool, memory_limit = r.memory_limit,
    handle = opt(r.handle), created_at = r.created_at,
    last_active_at = r.last_active_at, idle_seconds = r.idle_seconds,
    memory_bytes = r.memory_bytes, status = r.status, node = r.node,
    provider = opt(r.provider), cred = opt(r.cred),
    -- absent unless set, as the supervisor's directory answers
    allowlist = r.allowlist, secrets = r.secrets, skills = r.skills, auth = r.auth,
  }
end

local function retire(r, status)
  if r.status == 'running' then
    redis.call('ZREM', k_live(r.owner), r.id)
    redis.call('HDEL', k_node(r.node), r.id)
    redis.call('ZREM', K_DEADLINES, r.id)
  end
  if status == 'deleted' then redis.call('ZREM', k_listed(r.owner), r.id) end
  r.status = status
  r.forget_at = now + r.retention * 1000000
  save(r)
end

-- Busy now: marked so by a run whose lease has not run out.
local function busy_now(r)
  return r.busy == true and (r.busy_until == nil or r.busy_until > now)
end

-- A use of R at NOW, saved with whatever else changed in R: true when it
-- saved (a record is written once per operation, not once per change).
local function touch(r)
  if now > r.last_active_at then
    r.last_active_at = now
    redis.call('ZADD', k_live(r.owner), num(now), r.id)
    redis.call('ZADD', K_DEADLINES, num(deadline(r)), r.id)
    extend(k_live(r.owner), ttl_ms(r))
    extend(k_listed(r.owner), ttl_ms(r))
    extend(k_node(r.node), ttl_ms(r))
    save(r)
    return true
  end
  return false
end

-- Touch R; save it all the same when CHANGED (a use in the same
-- microsecond as the last one saves nothing by itself).
local function touch_saving(r, changed)
  if not touch(r) and changed then save(r) end
end

-- ---- admission -------------------------------------------------------------

-- The running records of a set of ids; ids whose record is gone or no
-- longer running are dropped from the set with DROP.
local function running_of(ids, drop)
  local out = {}
  for _, id in ipairs(ids) do
    local r = raw(id)
    if r and r.status == 'running' then out[#out + 1] = r else drop(id) end
  end
  return out
end

local function node_live(node)
  local key = k_node(node)
  local live = running_of(redis.call('HKEYS', key),
                          function(id) redis.call('HDEL', key, id) end)
  local memory = 0
  for _, r in ipairs(live) do memory = memory + r.memory_bytes end
  return #live, memory
end

local function owner_live(owner)
  local key = k_live(owner)
  return running_of(redis.call('ZRANGE', key, 0, -1),
                    function(id) redis.call('ZREM', key, id) end)
end

local function older(a, b)
  if a.last_active_at ~= b.last_active_at then return a.last_active_at < b.last_active_at end
  if a.created_at ~= b.created_at then return a.created_at < b.created_at end
  return a.id < b.id
end

-- The owner's least recently used idle container that evicting frees room
-- for NODE: one of NODE's; for the owner's cap alone, also a remote one
-- (a handle: any node can destroy it).
-- Held by a request in flight (made or found by it) until then.
local function held_now(r)
  return is_num(r.held_until) and r.held_until > now
end

-- In use: busy, held, or used within the grace (never evicted).
local function active(r, lim)
  return busy_now(r) or held_now(r) or r.last_active_at + lim.grace * 1000000 > now
end

local function idlest(live, node, local_only, lim)
  local best
  for _, r in ipairs(live) do
    local here = r.node == node or (not local_only and r.handle ~= nil and r.handle ~= NULL)
    if here and not active(r, lim) and (not best or older(r, best)) then best = r end
  end
  return best
end

-- The node is full for an owner holding OWNED: its cap, or all but its
-- reserve taken and the owner holding at least as many as the reserve.
local function node_full_for(n, owned, lim)
  if lim.node <= 0 then return false end
  if n >= lim.node then return true end
  return lim.reserve > 0 and lim.reserve < lim.node and n >= lim.node - lim.reserve and
         owned >= lim.reserve
end

-- Which caps a container of MEMORY bytes would pass, for an owner
-- running OWNED on a node running N that use USED bytes.
local function full_for(owned, n, used, memory, lim)
  return lim.owner > 0 and owned >= lim.owner, node_full_for(n, owned, lim),
         lim.budget > 0 and used + memory > lim.budget
end

-- What the indexes say the owner and the node run, without reading a
-- record: every running container is in them (an index outlives what it
-- holds), but an entry may outlive its record (a TTL ran out, a node
-- died), so these are upper bounds. Far from every cap they decide alone,
-- and a create costs the same whether the node runs two containers or
-- thousands; near one, admit reads the records.
local function index_counts(owner, node, lim)
  local used = 0
  if lim.budget > 0 then
    for _, bytes in ipairs(redis.call('HVALS', k_node(node))) do
      used = used + (tonumber(bytes) or 0)
    end
  end
  return redis.call('ZCARD', k_live(owner)), redis.call('HLEN', k_node(node)), used
end

-- Room under the caps and the budget, from the owner's own containers only:
-- returns a status and the evicted record (nil when none).
local function admit(owner, node, lim, memory)
  local owned, n, used = index_counts(owner, node, lim)
  local owner_full, node_full, budget_full = full_for(owned, n, used, memory, lim)
  if not owner_full and not node_full and not budget_full then return 'ok' end
  local live = owner_live(owner)
  n, used = node_live(node)
  owner_full, node_full, budget_full = full_for(#live, n, used, memory, lim)
  if not owner_full and not node_full and not budget_full then return 'ok' end
  local victim = idlest(live, node, node_full or budget_full, lim)
  if not victim then
    return node_full and 'node_full' or owner_full and 'owner_full' or 'budget_full'
  end
  if budget_full and used - victim.memory_bytes + memory > lim.budget then
    return 'budget_full'
  end
  retire(victim, 'expired')
  return 'ok', victim
end

local function limits_of(req)
  local l = type(req.limits) == 'table' and req.limits or {}
  return {
    node = int_of(l, 'node', 0), owner = int_of(l, 'owner', 0),
    retention = int_of(l, 'retention', 3600), items = int_of(l, 'items', DEFAULT_ITEMS),
    budget = int_of(l, 'budget', 0), grace = int_of(l, 'grace', 0),
    reserve = int_of(l, 'reserve', 0),
  }
end

local function new_rec(req, owner, id, node, lim, idle)
  local r = {
    id = id, owner = owner, name = opt(str_of(req, 'name')), tool = str_of(req, 'tool'),
    memory_limit = str_of(req, 'memory_limit') or '1g', handle = NULL,
    created_at = now, last_active_at = now, idle_seconds = idle,
    memory_bytes = int_of(req, 'memory_bytes', 0), status = 'running', node = node,
    busy = false, retention = lim.retention, forget_at = 0,
    provider = str_of(req, 'provider'), cred = str_of(req, 'cred'),
    allowlist = str_of(req, 'allowlist'), secrets = str_of(req, 'secrets'),
    skills = str_of(req, 'skills'), auth = str_of(req, 'auth'),
  }
  local ms = ttl_ms(r)
  redis.call('ZADD', k_listed(owner), num(now), id)
  redis.call('ZADD', k_live(owner), num(now), id)
  redis.call('HSET', k_node(node), id, num(r.memory_bytes))
  redis.call('ZADD', K_DEADLINES, num(deadline(r)), id)
  extend(k_listed(owner), ms)
  extend(k_live(owner), ms)
  extend(k_node(node), ms)
  save(r)
  records[id] = r
  return r
end

-- ---- remembered items and response ids -----------------------------------

-- Forget item ITEM (its bytes, its place in the age order, its container's
-- list).
drop_item = function(item)
  local m = decode(redis.call('GET', k_item(item)))
  local bytes = tonumber(redis.call('HGET', K_SIZES, item) or '0')
  if m then
    redis.call('SREM', k_memos(m.c), k_item(item))
    memo_floors[m.c] = nil                    -- the set may be gone with it
  end
  redis.call('DEL', k_item(item))
  redis.call('ZREM', K_AGE, item)
  redis.call('HDEL', K_SIZES, item)
  if bytes > 0 then redis.call('DECRBY', K_BYTES, num(bytes)) end
end

-- Oldest items go first past the byte bound (TOTAL: the bytes counted now).
local function bound_items(max, total)
  while max > 0 and total > max do
    local oldest = redis.call('ZRANGE', K_AGE, 0, 0)[1]
    if not oldest then break end
    drop_item(oldest)
    total = tonumber(redis.call('GET', K_BYTES) or '0')
  end
end

-- KEY (a ci:r or ci:i key) now leads to R, for as long as R is kept.
local function attach(key, value, r)
  local floor, exists = keep_memos(r.id, ttl_ms(r))
  redis.call('SADD', k_memos(r.id), key)
  -- a set made just now has no TTL yet: the floor is its first member's
  -- (set before the member's, as in keep_memos)
  if not exists then
    redis.call('PEXPIRE', k_memos(r.id), num(floor))
    memo_floors[r.id].exists = true
  end
  redis.call('SET', key, encode(value), 'PX', num(floor))
end

local function remember(item, r, text, max)
  local bytes = MEMO_OVERHEAD + #item + 1 + #text + 1
  -- an item remembered again (its sizes entry goes and comes with its key)
  if redis.call('HEXISTS', K_SIZES, item) == 1 then drop_item(item) end
  attach(k_item(item), { c = r.id, o = r.owner, t = text }, r)
  redis.call('ZADD', K_AGE, redis.call('INCR', K_SEQ), item)
  redis.call('HSET', K_SIZES, item, num(bytes))
  bound_items(max, redis.call('INCRBY', K_BYTES, num(bytes)))
end

-- RID led to R; PENDING: whether it left output pending. (p false tells
-- the next turn not to look for any. A memo without p, as older versions
-- wrote it or a response finished again after one that may have left
-- some, has it looked for.)
local function map_response(rid, r, pending)
  local old = decode(redis.call('GET', k_resp(rid)))
  local p = pending
  if old then
    redis.call('SREM', k_memos(old.c), k_resp(rid))
    memo_floors[old.c] = nil
    if not p and old.p ~= false then p = nil end
  end
  attach(k_resp(rid), { c = r.id, o = r.owner, p = p }, r)
end

-- The owner's conversation CONV goes on in R from now on, owed PENDING
-- (nil: nothing; what it was owed before was brought, and goes).
local function map_conversation(conv, r, pending, max)
  local key, item = k_conv(r.owner, conv), conv_pending(r.owner, conv)
  local old = decode(redis.call('GET', key))
  if old and old.c ~= r.id then
    redis.call('SREM', k_memos(old.c), key)
    memo_floors[old.c] = nil
  end
  attach(key, { c = r.id, o = r.owner, p = pending ~= nil }, r)
  if pending then
    remember(item, r, pending, max)
  elseif redis.call('HEXISTS', K_SIZES, item) == 1 then
    drop_item(item)
  end
end

-- What KEY (a ci:r, ci:v or ci:i key) holds, for OWNER, while its container is kept.
local function memo_of(key, owner)
  local m = decode(redis.call('GET', key))
  if m and m.o == owner and type(m.c) == 'string' and load(m.c) then return m end
  return nil
end

-- The request asking holds R for req.hold seconds (its deadline), when it
-- says so: true when that changed R (not saved here).
local function hold(r, req)
  local seconds = int_of(req, 'hold', 0)
  if seconds <= 0 then return false end
  r.held_until = now + seconds * 1000000
  return true
end

-- ---- the operations ----------------------------------------------------------

local function op_create(o)
  local tool, idle, node = str_of(o.req, 'tool'), int_of(o.req, 'idle', 20 * 60),
                           str_of(o.req, 'node')
  local lim, id = limits_of(o.req), str_of(o.req, 'id')
  if not tool or idle < 1 or not node or node == '' then
    o.ans.status = 'bad_request'
    return
  end
  if id and load(id) then
    o.ans.status = 'not_found'
    return
  end
  local st, evicted = admit(o.owner, node, lim, int_of(o.req, 'memory_bytes', 0))
  o.ans.status = st
  if evicted then
    o.ans.evicted = container_json(evicted)
    table.insert(o.ans.gone, evicted.id)
  end
  if st == 'ok' then
    local r = new_rec(o.req, o.owner, id or fresh_id, node, lim, idle)
    if hold(r, o.req) then save(r) end
    o.ans.container = container_json(r)
  end
end

-- Container ID of the asker: its status, and the record (or nil).
local function named_id(o, id)
  local r = rec_of(id, o.owner)
  if not r then return 'not_found' end
  return r.status == 'running' and 'ok' or 'expired', r
end

local function named(o) return named_id(o, str_of(o.req, 'id')) end

-- Container ID of the asker, touched and held by the asking request when
-- it says touch: its status, and the record (or nil).
local function get_for_use(o, id)
  local st, r = named_id(o, id)
  if st == 'ok' and o.req.touch == true then touch_saving(r, hold(r, o.req)) end
  return st, r
end

local function op_get(o)
  local st, r = get_for_use(o, str_of(o.req, 'id'))
  o.ans.status = st
  if r then o.ans.container = container_json(r) end
end

-- FN applied to the named container when it runs; the status either way.
local function when_running(o, fn)
  local st, r = named(o)
  if st == 'ok' then fn(r) end
  o.ans.status = st
end

local function op_set_handle(o)
  when_running(o, function(r)
    r.handle = opt(str_of(o.req, 'handle'))
    save(r)
  end)
end

local function op_delete(o)
  local st, r = named(o)
  if r and r.status ~= 'deleted' then
    o.ans.container = container_json(r)       -- as it was: its handle
    retire(r, 'deleted')
    table.insert(o.ans.gone, r.id)
    st = 'ok'
  end
  o.ans.status = st
end

local function op_expire(o)
  when_running(o, function(r)
    retire(r, 'expired')
    table.insert(o.ans.gone, r.id)
  end)
end

local function op_busy(o)
  when_running(o, function(r)
    r.busy = o.req.busy == true
    -- a lease: a node that dies mid-run does not keep it busy for ever
    r.busy_until = r.busy and now + int_of(o.req, 'lease', DEFAULT_LEASE) * 1000000 or 0
    touch_saving(r, true)                     -- a run beginning or ending is a use
  end)
end

-- The owner's listed records in ORDER, named NAME when NAME is given.
local function listed(owner, ascending, name)
  local key = k_listed(owner)
  local ids = redis.call(ascending and 'ZRANGE' or 'ZREVRANGE', key, 0, -1)
  local out = {}
  for _, id in ipairs(ids) do
    local r = load(id)
    if not r or r.status == 'deleted' then
      redis.call('ZREM', key, id)
    elseif r.owner == owner and (not name or r.name == name) then
      out[#out + 1] = r
    end
  end
  return out
end

local function op_list(o)
  local limit = int_of(o.req, 'limit', 20)
  local after = str_of(o.req, 'after')
  local all = listed(o.owner, str_of(o.req, 'order') == 'asc', str_of(o.req, 'name'))
  local data, start = array(), 1
  if limit < 1 or limit > MAX_LIST then limit = 20 end
  if after then
    start = #all + 1                          -- unknown: an empty page
    for i, r in ipairs(all) do
      if r.id == after then start = i + 1 break end
    end
  end
  local i = start
  while i <= #all and #data < limit do
    data[#data + 1] = container_json(all[i])
    i = i + 1
  end
  o.ans.status = 'ok'
  o.ans.data = data
  o.ans.has_more = i <= #all
end

-- The answer to a question that follows the earlier turns (a response's,
-- a conversation's): memo M (nil: none), and the item PENDING_ITEM holding
-- the outputs owed to the upstream, looked for when M says so.
local function answer_chain(o, m, pending_item)
  o.ans.status = m and 'ok' or 'not_found'
  if not m then return end
  o.ans.container_id = m.c
  local pending = m.p ~= false and memo_of(k_item(pending_item), o.owner) or nil
  o.ans.pending = pending and pending.t or NULL
  -- touch: the turn goes on in that container, and this one question
  -- answers what get would (a chained turn asks once, not twice)
  if type(o.req.touch) == 'boolean' then
    local st, r = get_for_use(o, m.c)
    o.ans.container_status = st
    if r then o.ans.container = container_json(r) end
  end
end

local function op_response(o)
  local rid = str_of(o.req, 'response_id')
  answer_chain(o, rid and memo_of(k_resp(rid), o.owner) or nil, rid and 'pending:' .. rid)
end

-- The owner's conversation: the container its last turn used.
local function op_conversation(o)
  local conv = str_of(o.req, 'conversation')
  answer_chain(o, conv and memo_of(k_conv(o.owner, conv), o.owner) or nil,
               conv and conv_pending(o.owner, conv))
end

local function op_finish(o)
  local rid, pending = str_of(o.req, 'response_id'), str_of(o.req, 'pending')
  local r = rec_of(str_of(o.req, 'container_id'), o.owner)
  local max = limits_of(o.req).items
  o.ans.status = r and (r.status == 'running' and 'ok' or 'expired') or 'not_found'
  if not r then return end
  -- An expired one is still what the response led to: the next turn is
  -- told its state is gone rather than nothing.
  if r.status == 'running' then
    local held = held_now(r)
    if held then r.held_until = 0 end         -- the request is done with it
    -- touch false: a hold let go unused (see ci_directory_ops.c)
    if o.req.touch == false then
      if held then save(r) end
    else
      touch_saving(r, held)
    end
  end
  for _, it in ipairs(type(o.req.items) == 'table' and o.req.items or {}) do
    local id, text = str_of(it, 'id'), str_of(it, 'text')
    if text and our_item(id) then remember(id, r, text, max) end
  end
  if rid then
    map_response(rid, r, pending ~= nil)
    if pending then remember('pending:' .. rid, r, pending, max) end
  end
  local conv = str_of(o.req, 'conversation')
  if conv then map_conversation(conv, r, pending, max) end
end

local function op_recall(o)
  local id = str_of(o.req, 'item_id')
  local m = our_item(id) and memo_of(k_item(id), o.owner) or nil
  o.ans.status = m and 'ok' or 'not_found'
  o.ans.text = m and m.t or NULL
  if m then o.ans.container_id = m.c end
end

local function op_claim_due(o)
  local node, limit = str_of(o.req, 'node'), int_of(o.req, 'limit', 100)
  local claimed = array()
  if not node or node == '' then
    o.ans.status = 'bad_request'
    return
  end
  if limit < 1 then limit = 100 end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', num(now))) do
    if #claimed >= limit then break end
    local r = raw(id)
    if not r or r.status ~= 'running' then
      redis.call('ZREM', K_DEADLINES, id)
    elseif not busy_now(r) and not held_now(r) and
           (r.node == node or (r.handle ~= nil and r.handle ~= NULL)) then
      retire(r, 'expired')
      local c = container_json(r)
      c.owner = r.owner            -- no owner asked: the caller checks auth with it
      claimed[#claimed + 1] = c
      table.insert(o.ans.gone, id)
    end
  end
  o.ans.status = 'ok'
  o.ans.containers = claimed
end

-- Which of IDS (the local sandboxes a node runs) no longer run here: their
-- records are gone (forgotten, or lost with Redis' data), expired or
-- deleted. The node ends those sandboxes. No owner.
local function op_which_gone(o)
  local ids = type(o.req.ids) == 'table' and o.req.ids or {}
  for _, id in ipairs(ids) do
    if type(id) == 'string' then
      local r = raw(id)
      if not r or r.status ~= 'running' then table.insert(o.ans.gone, id) end
    end
  end
  o.ans.status = 'ok'
end

local ops = {
  create = op_create, get = op_get, set_handle = op_set_handle, delete = op_delete,
  expire = op_expire, list = op_list, response = op_response,
  conversation = op_conversation, finish = op_finish, recall = op_recall, busy = op_busy,
}

-- ARGS: the request (JSON), the time asked, entropy for a new id.
local function apply(args)
  NULL = cjson.null
  now = tonumber(args[2])
  records, memo_floors = {}, {}
  fresh_id = 'cntr_' .. (args[3] or '')
  local req = decode(args[1])
  local o = { req = req, ans = { gone = array() } }
  local name = str_of(req, 'op')
  if name == 'claim_due' then
    op_claim_due(o)
  elseif name == 'which_gone' then
    op_which_gone(o)
  elseif name and ops[name] then
    o.owner = str_of(req, 'owner')
    if not o.owner or o.owner == '' then o.ans.status = 'no_owner' else ops[name](o) end
  else
    o.ans.status = 'bad_request'
  end
  return encode(o.ans)
end

return apply(ARGV)
