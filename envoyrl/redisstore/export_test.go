package redisstore

import "context"

// SweepForTest runs the allowance sweep once, as its ticker does.
func (s *Store) SweepForTest() { s.lend.sweep(context.Background(), false) }

// SetGiveBackHookForTest sets the hook close runs before its give-backs.
func SetGiveBackHookForTest(f func()) { testHookGiveBack = f }
