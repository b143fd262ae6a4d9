package httplimit

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

func TestWriteProblem(t *testing.T) {
	rec := httptest.NewRecorder()
	RetryAfter(rec.Header(), 2100*time.Millisecond)
	WriteProblem(rec, QuotaExceeded(2100*time.Millisecond, "per-ip"))
	if rec.Code != 429 || rec.Header().Get("Content-Type") != "application/problem+json" || rec.Header().Get("Retry-After") != "3" {
		t.Fatalf("response %d %v", rec.Code, rec.Header())
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p["type"] != QuotaExceededType || p["status"] != float64(429) || p["title"] == "" || p["retry-after"] != float64(3) {
		t.Errorf("problem %v", p)
	}
	if v, _ := p["violated-policies"].([]any); len(v) != 1 || v[0] != "per-ip" {
		t.Errorf("violated-policies %v", p["violated-policies"])
	}
	never := QuotaExceeded(0, "p")
	if never.RetryAfter != 0 || never.Detail == "" {
		t.Errorf("problem for a never-admitted request: %+v", never)
	}
	if u := Unavailable(time.Second); u.Status != 503 || u.Type != BlankType || u.Title != "Service Unavailable" {
		t.Errorf("Unavailable() = %+v", u)
	}
}
