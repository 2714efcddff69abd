//! The Lua scripts that make every counter operation and every token-bucket step one atomic
//! server-side call (EVALSHA; the client reloads a script the server has lost, NOSCRIPT). The
//! clock used is Turnstile's (passed in as arguments), never the server's, so replicas with
//! different Redis nodes agree with one another and with memcached.
//!
//! Must not touch: connections, routing, error mapping.

use redis::Script;

/// Counter operations on any number of keys, in order; ARGV holds `op, n, ttl` per key, then
/// the ceiling. Returns the count after each. A counter is created with its TTL in the same
/// call and never exists without one (a key found without a TTL, e.g. written by an older
/// client, gets one). `add` with n = 0 and `lease` with n = 0 read without creating. A count
/// saturates at the ceiling (amounts are bounded by the caller, so INCRBY never overflows).
const COUNTERS: &str = r"
local out = {}
local ceiling_text = ARGV[#ARGV]
local ceiling = tonumber(ceiling_text)
for i, key in ipairs(KEYS) do
  local op, n, ttl = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local count
  if n == 0 and (op == 'add' or op == 'lease') then
    count = math.min(tonumber(redis.call('GET', key) or '0') or ceiling, ceiling)
  elseif op == 'add' or op == 'lease' then
    count = redis.call('INCRBY', key, n)
    if count > ceiling then
      redis.call('SET', key, ceiling_text, 'KEEPTTL')
      count = ceiling
    end
    if op == 'lease' or redis.call('TTL', key) < 0 then
      redis.call('EXPIRE', key, ttl)
    end
  elseif redis.call('EXISTS', key) == 1 then
    count = redis.call('DECRBY', key, n)
    if count < 0 then
      redis.call('SET', key, 0, 'KEEPTTL')
      count = 0
    end
    if op == 'release' then
      redis.call('EXPIRE', key, ttl)
    end
  else
    count = 0
  end
  out[i] = count
end
return out
";

/// GCRA steps (as `storage::token_bucket`), one per key, in order; ARGV holds six values per key:
/// now (ms), rate L, period P (ms), capacity C, n, refund (0/1). The state is `q:r` with
/// TAT = q + r/L ms (0 ≤ r < L), so every number in the script stays a whole number below 2^53
/// while C × P does (checked by the caller). Returns `admitted, q, r` per step.
const TOKEN_BUCKET: &str = r"
local function divmod(a, b)
  local q = math.floor(a / b)
  while q * b > a do q = q - 1 end
  while (q + 1) * b <= a do q = q + 1 end
  return q, a - q * b
end
local out = {}
for i, key in ipairs(KEYS) do
  local at = 6 * (i - 1)
  local now, L, P = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local C, n, refund = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), ARGV[at + 6] == '1'
  local q, r = now, 0
  local stored = redis.call('GET', key)
  if stored then
    local sq, sr = string.match(stored, '^(%d+):(%d+)$')
    sq, sr = tonumber(sq), tonumber(sr)
    if sq and sr and (sq > now or (sq == now and sr > 0)) then q, r = sq, sr end
  end
  local d = (q - now) * L + r
  local admitted, write = 1, false
  if refund then
    d = math.max(d - n * P, 0)
    write = stored ~= false and stored ~= nil
  elseif d + math.max(n, 1) * P <= C * P then
    if n > 0 then d = d + n * P; write = true end
  else
    admitted = 0
  end
  local dq, dr = divmod(d, L)
  q, r = now + dq, dr
  if write then
    redis.call('SET', key, string.format('%d:%d', q, r), 'PX', dq + 1001)
  end
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = admitted, q, r
end
return out
";

/// The scripts, hashed once.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) counters: Script,
    pub(super) token_bucket: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            counters: Script::new(COUNTERS),
            token_bucket: Script::new(TOKEN_BUCKET),
        }
    }
}
