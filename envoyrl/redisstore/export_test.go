package redisstore

import "context"

// SweepForTest runs the allowance sweep once, as its ticker does.
func (s *Store) SweepForTest() { s.lend.sweep(context.Background(), false) }

// SetGiveBackHookForTest sets the hook close runs before its give-backs.
func SetGiveBackHookForTest(f func()) { testHookGiveBack = f }

// SetCoolGiveBackHookForTest sets the hook a cooling sweep runs before its
// give-backs.
func SetCoolGiveBackHookForTest(f func()) { testHookCoolGiveBack = f }

// HeldForTest is what the store holds unspent of the counter key.
func (s *Store) HeldForTest(key string) uint64 {
	sh := s.lend.shard(seriesOf(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if se := sh.m[seriesOf(key)]; se != nil && se.key == key {
		return se.left
	}
	return 0
}
