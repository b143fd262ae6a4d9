package redisstore

import "context"

// SweepForTest runs the allowance sweep once, as its ticker does.
func (s *Store) SweepForTest() { s.lend.sweep(context.Background(), false) }
