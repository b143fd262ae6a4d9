package redislimit

// HeldForTest returns the units the store's allowances hold unspent.
func (s *Store) HeldForTest() (held int64) {
	a := s.lent
	a.mu.Lock()
	recs := make([]*allowance, 0, len(a.recs))
	for _, r := range a.recs {
		recs = append(recs, r)
	}
	a.mu.Unlock()
	for _, r := range recs {
		r.mu.Lock()
		held += r.remaining
		r.mu.Unlock()
	}
	return held
}
