package unarygrpc

import "time"

// Limits on the control frames a peer may send. Each PING and SETTINGS
// frame asks for an answer, so a peer that sends them in a loop would have
// the server write as fast as it reads.
const (
	// DefaultKeepaliveMinTime is the shortest interval between a peer's
	// pings that is not a strike when Server.KeepalivePolicy.MinTime is 0:
	// 5 minutes, grpc-go's default.
	DefaultKeepaliveMinTime = 5 * time.Minute
	// maxPingStrikes is how many pings too early a connection is forgiven;
	// the next one ends it (GOAWAY ENHANCE_YOUR_CALM "too_many_pings"), as
	// in grpc-go.
	maxPingStrikes = 2
	// idlePingInterval is the shortest interval between pings on a
	// connection without calls when the policy does not permit them, as in
	// grpc-go.
	idlePingInterval = 2 * time.Hour
	// settingsBurst SETTINGS frames are accepted at once, then
	// settingsPerSecond a second; more end the connection (GOAWAY
	// ENHANCE_YOUR_CALM "too_many_settings"). A client sends one at the
	// start and a few more as it tunes its windows.
	settingsBurst     = 100
	settingsPerSecond = 10
)

// pingPolicy counts a peer's pings as grpc-go's keepalive enforcement
// does: a ping sooner than minTime after the last one (sooner than two
// hours while no call is open, unless permitWithoutCalls) is a strike,
// sending HEADERS or DATA forgives them all, and one strike more than
// maxPingStrikes ends the connection. It is guarded by its conn's mu.
type pingPolicy struct {
	minTime            time.Duration
	permitWithoutCalls bool
	last               time.Time
	strikes            int
	forgive            bool // the server sent HEADERS or DATA since the last ping
}

// onPing records a ping at now with calls open and reports whether the
// peer has pinged too often.
func (p *pingPolicy) onPing(now time.Time, calls int) bool {
	last := p.last
	p.last = now
	if p.forgive {
		p.forgive, p.strikes = false, 0
		return false
	}
	interval := p.minTime
	if interval <= 0 {
		interval = DefaultKeepaliveMinTime
	}
	if calls == 0 && !p.permitWithoutCalls {
		interval = idlePingInterval
	}
	if !last.IsZero() && now.Sub(last) < interval {
		p.strikes++
	}
	return p.strikes > maxPingStrikes
}

// settingsPolicy is a token bucket over a peer's SETTINGS frames: a burst
// of settingsBurst, refilled at settingsPerSecond. It is guarded by its
// conn's mu.
type settingsPolicy struct {
	used float64 // tokens taken, as of at
	at   time.Time
}

// onSettings records a SETTINGS frame at now and reports whether the peer
// sends them too often.
func (p *settingsPolicy) onSettings(now time.Time) bool {
	if !p.at.IsZero() {
		p.used = max(0, p.used-now.Sub(p.at).Seconds()*settingsPerSecond)
	}
	p.at = now
	p.used++
	return p.used > settingsBurst
}

// closedStreams remembers the streams closed last, and which the server
// reset: frames a peer sends on a stream it has not yet seen reset are
// discarded, frames on a stream the peer closed are a STREAM_CLOSED error
// (RFC 9113 5.1). It is guarded by its conn's mu.
type closedStreams struct {
	ids  [64]uint32
	byUs [64]bool
	next int
}

func (g *closedStreams) add(id uint32, byUs bool) {
	g.ids[g.next], g.byUs[g.next] = id, byUs
	g.next = (g.next + 1) % len(g.ids)
}

// find reports whether id is among the streams closed last, and whether
// the server reset it.
func (g *closedStreams) find(id uint32) (found, byUs bool) {
	if id == 0 {
		return false, false
	}
	for i, v := range g.ids {
		if v == id {
			return true, g.byUs[i]
		}
	}
	return false, false
}
