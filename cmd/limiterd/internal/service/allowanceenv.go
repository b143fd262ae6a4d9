package service

// applyAllowanceEnv reads REDIS_LOCAL_ALLOWANCE (true or false), which,
// when set, wins over backends.redis.local_allowance.
func applyAllowanceEnv(cfg *Config, lookup func(string) (string, bool)) error {
	e := envReader{lookup: lookup}
	cfg.Backends.Redis.LocalAllowance = e.bool("REDIS_LOCAL_ALLOWANCE", cfg.Backends.Redis.LocalAllowance)
	return e.err
}
