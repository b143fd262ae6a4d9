package azureblob

import (
	"net/http"
	"time"
)

// noteTime records the Date of a response to a request sent at sent.
func (m *TableLeaseManager) noteTime(date *time.Time, sent time.Time) {
	if date == nil {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.date, m.sent, m.recv = *date, sent, now
}

// noteRawTime records the Date header of resp, when it has one.
func (m *TableLeaseManager) noteRawTime(resp *http.Response, sent time.Time) {
	if resp == nil {
		return
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		m.noteTime(&d, sent)
	}
}

// serviceTime returns bounds of the storage service's clock at the local
// time t: the service's time is at least lo and less than hi. Date has
// one-second resolution and was stamped between the request's sending and
// the response's arrival. ok is false before any response arrived.
func (m *TableLeaseManager) serviceTime(t time.Time) (lo, hi time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.date.IsZero() {
		return time.Time{}, time.Time{}, false
	}
	return m.date.Add(t.Sub(m.recv)), m.date.Add(serverTimeGranularity + t.Sub(m.sent)), true
}

// endAfter returns the service time, in whole seconds, at which something
// that must last d from the local time t ends: never before the service's
// time at t plus d.
func (m *TableLeaseManager) endAfter(t time.Time, d time.Duration) time.Time {
	_, hi, _ := m.serviceTime(t)
	end := hi.Add(d)
	if tr := end.Truncate(time.Second); tr.Before(end) {
		end = tr.Add(time.Second)
	}
	return end
}

// latestDate returns the Date of the latest response.
func (m *TableLeaseManager) latestDate() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.date
}
