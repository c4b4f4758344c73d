if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('publish', ARGV[3], 'elected')
  return {1}
end
return {0, redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
