local held = redis.call('get', KEYS[1])
if held == ARGV[1] then
  local left = redis.call('pttl', KEYS[1])
  if left >= 0 and left < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 1
end
if not held and redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 2
end
return 0
