package limit

import (
	"context"
	"strings"
)

// pending is one (table, key) touched by a decision on several limits: its
// state as the requests before it in the decision left it.
type pending struct {
	t       *table
	sh      *shard
	h       uint64
	key     string
	s       state
	s0      state       // the state as found (when not isNew)
	log     *rollingLog // rolling window: the key's log, possibly fresh
	extra   int64       // rolling window: cost promised, not yet logged
	isNew   bool
	changed bool
}

// AllowAll decides reqs together: all spend or none does. See Store.
func (m *Memory) AllowAll(_ context.Context, reqs []Request, out []Decision) ([]Decision, error) {
	return m.multi(reqs, out, false)
}

// CountAll counts every request, Envoy-style. See Store.
func (m *Memory) CountAll(_ context.Context, reqs []Request, out []Decision) ([]Decision, error) {
	return m.multi(reqs, out, true)
}

func (m *Memory) multi(reqs []Request, out []Decision, count bool) ([]Decision, error) {
	var pbuf [8]pending
	var ibuf [8]int
	ps, idx := pbuf[:0], ibuf[:0] // idx[i]: the pending of reqs[i]
	for _, r := range reqs {
		if r.Cost < 0 {
			return out, &CostError{Cost: r.Cost}
		}
		t, err := m.table(&r.Policy)
		if err != nil {
			return out, err
		}
		h, sh := m.shard(t, r.Key)
		j := 0
		for j < len(ps) && (ps[j].t != t || ps[j].key != r.Key) {
			j++
		}
		if j == len(ps) {
			ps = append(ps, pending{t: t, sh: sh, h: h, key: r.Key})
		}
		idx = append(idx, j)
	}
	unlock := lockAll(ps)
	defer unlock()
	now := m.now()
	for i := range ps {
		ps[i].load()
	}
	start := len(out)
	allowed := true
	for i, r := range reqs {
		p := &ps[idx[i]]
		dec := p.decide(now, r.Cost, count)
		dec.Policy = r.Policy.Name
		allowed = allowed && dec.Allowed
		out = append(out, dec)
	}
	if !allowed && !count {
		m.undo(ps, idx, reqs, out[start:], now)
		return out, nil
	}
	if err := m.commit(ps, now); err != nil {
		for i := range out[start:] {
			out[start+i] = refusal(reqs[i].Policy.Limit)
			out[start+i].Policy = reqs[i].Policy.Name
		}
		return out, err
	}
	return out, nil
}

// lockAll locks the shards of ps in the order of their ids, once each, and
// returns the function that unlocks them. A fixed order over all shards
// rules out deadlocks between concurrent decisions on several limits.
func lockAll(ps []pending) func() {
	var sbuf [8]*shard
	shs := sbuf[:0]
	for i := range ps {
		sh := ps[i].sh
		k := len(shs)
		for k > 0 && shs[k-1].id > sh.id {
			k--
		}
		if k > 0 && shs[k-1] == sh {
			continue
		}
		shs = append(shs, nil)
		copy(shs[k+1:], shs[k:])
		shs[k] = sh
	}
	for _, sh := range shs {
		sh.mu.Lock()
	}
	return func() {
		for _, sh := range shs {
			sh.mu.Unlock()
		}
	}
}

// load reads the key's state; it requires p.sh.mu.
func (p *pending) load() {
	if p.t.pr.alg == algRolling {
		p.log = p.sh.logs[p.key]
		if p.log == nil {
			p.log, p.isNew = &rollingLog{}, true
		}
		return
	}
	p.s, p.isNew = state{}, true
	if i := p.sh.t.find(p.h, p.key); i >= 0 {
		p.s, p.isNew = p.t.take(p.sh, i), false
		p.s0 = p.s
	}
}

// reset brings p back to the state load found; it requires p.sh.mu.
func (p *pending) reset() {
	p.extra, p.changed = 0, false
	if p.t.pr.alg == algRolling {
		p.load()
		return
	}
	p.s = p.s0
}

// release puts back the state of every key load took, unchanged; it
// requires the shards' locks.
func release(ps []pending) {
	for i := range ps {
		p := &ps[i]
		if p.t.pr.alg == algRolling || p.isNew {
			continue
		}
		if i := p.sh.t.find(p.h, p.key); i >= 0 {
			p.t.keep(p.sh, i, p.s0)
		}
	}
}

// decide decides cost on the state as earlier requests left it.
func (p *pending) decide(now, cost int64, count bool) Decision {
	if p.t.pr.alg == algRolling {
		dec := p.t.pr.decideRolling(p.log, now, cost, p.extra, false)
		if dec.Allowed && cost > 0 {
			p.extra += cost
			p.changed = true
		}
		return dec
	}
	dec, ns := p.t.pr.decide(p.s, now, cost, count)
	if ns != p.s {
		p.s, p.changed = ns, true
	}
	return dec
}

// undo turns the decisions of a denied all-or-nothing decision into what
// they are with nothing spent: the allowed ones become ReasonOtherLimit.
// It requires the shards' locks.
func (m *Memory) undo(ps []pending, idx []int, reqs []Request, ds []Decision, now int64) {
	for i := range ps {
		ps[i].reset()
	}
	defer release(ps)
	for i := range ds {
		if !ds[i].Allowed {
			continue
		}
		p := &ps[idx[i]]
		dec := p.decide(now, 0, false)
		dec.Allowed, dec.Reason, dec.Policy = false, ReasonOtherLimit, reqs[i].Policy.Name
		ds[i] = dec
	}
}

// commit writes the changed states; it requires the shards' locks. New keys
// are admitted first, so that a refusal leaves everything unchanged.
func (m *Memory) commit(ps []pending, now int64) error {
	admitted := 0
	for i := range ps {
		if ps[i].changed && ps[i].isNew {
			if err := m.admitKey(ps[i].t, ps[i].sh, ps[i].h, now); err != nil {
				m.keys.Add(int64(-admitted))
				release(ps)
				return err
			}
			admitted++
		}
	}
	for i := range ps {
		p := &ps[i]
		if !p.changed {
			continue
		}
		if p.t.pr.alg == algRolling {
			// Making room for a new key may have dropped this one's log,
			// at rest until now: it is held again.
			if p.sh.logs[p.key] != p.log {
				if !p.isNew {
					m.keys.Add(1)
				}
				p.sh.logs[strings.Clone(p.key)] = p.log // a copy, as slots.insert keeps
				p.sh.peak = max(p.sh.peak, len(p.sh.logs))
			}
			p.log.push(p.log.now(now), p.extra)
			p.t.lowerRest(p.sh, p.log.restAt(p.t.pr.w), -1, p.key)
			continue
		}
		// Found again: admitting a key may have moved the slots.
		i := p.sh.t.find(p.h, p.key)
		if i < 0 {
			// New, or dropped while it was at rest to make room.
			i = p.sh.t.insert(p.h, p.key)
			if !p.isNew {
				m.keys.Add(1)
			}
		}
		p.t.put(p.sh, i, p.s, m.used(now))
	}
	for i := range ps {
		p := &ps[i]
		if p.changed || p.isNew || p.t.pr.alg == algRolling {
			continue
		}
		if i := p.sh.t.find(p.h, p.key); i >= 0 {
			p.t.keep(p.sh, i, p.s0)
		}
	}
	return nil
}

// Settle charges or refunds key under p. See Store.
func (m *Memory) Settle(_ context.Context, key string, p Policy, delta int64) (Decision, error) {
	t, err := m.table(&p)
	if err != nil {
		return Decision{}, err
	}
	now := m.now()
	h, sh := m.shard(t, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var dec Decision
	if t.pr.alg == algRolling {
		dec, err = m.settleRolling(t, sh, key, now, delta)
	} else {
		dec, err = m.settleState(t, sh, h, key, now, delta)
	}
	if err != nil {
		return dec, err
	}
	dec.Allowed, dec.Policy = true, p.Name
	return dec, nil
}

// settleRolling requires sh.mu.
func (m *Memory) settleRolling(t *table, sh *shard, key string, now, delta int64) (Decision, error) {
	l := sh.logs[key]
	if l == nil {
		if delta <= 0 {
			return t.pr.decideRolling(&rollingLog{}, now, 0, 0, false), nil
		}
		if err := m.admitKey(t, sh, 0, now); err != nil {
			return refusal(t.pr.limit), err
		}
		l = &rollingLog{}
		sh.logs[strings.Clone(key)] = l // a copy, as slots.insert keeps
		sh.peak = max(sh.peak, len(sh.logs))
	}
	dec := t.pr.settleRolling(l, now, delta)
	t.lowerRest(sh, l.restAt(t.pr.w), -1, key)
	return dec, nil
}

// settleState requires sh.mu.
func (m *Memory) settleState(t *table, sh *shard, h uint64, key string, now, delta int64) (Decision, error) {
	i := sh.t.find(h, key)
	var s state
	if i >= 0 {
		s = t.take(sh, i)
	}
	dec, ns := t.pr.settle(s, now, delta)
	switch {
	case t.pr.atRest(ns, now):
		if i >= 0 {
			sh.t.remove(i)
			m.dropped(&m.cleaned)
		}
		return dec, nil
	case i < 0:
		if err := m.admitKey(t, sh, h, now); err != nil {
			return refusal(t.pr.limit), err
		}
		i = sh.t.insert(h, key)
	}
	t.put(sh, i, ns, m.used(now))
	return dec, nil
}

// Reset drops key's state under p.
func (m *Memory) Reset(_ context.Context, key string, p Policy) error {
	t, err := m.table(&p)
	if err != nil {
		return err
	}
	h, sh := m.shard(t, key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.t.find(h, key); i >= 0 {
		t.take(sh, i)
		sh.t.remove(i)
		m.keys.Add(-1)
	}
	if _, ok := sh.logs[key]; ok {
		delete(sh.logs, key)
		m.keys.Add(-1)
	}
	return nil
}
