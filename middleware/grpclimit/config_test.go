package grpclimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/costwise/batcher/limit"
	"github.com/costwise/batcher/middleware/grpclimit"
	"github.com/costwise/batcher/middleware/httplimit"
)

// Every bad option is a *ConfigError naming grpclimit, for the server and
// the client interceptor alike.
func TestConfigErrors(t *testing.T) {
	store := memStore(t, newFakeClock())
	good := grpclimit.Policy{Name: "p", Limit: limit.FixedWindow(1, time.Second)}
	for _, tc := range []struct {
		name   string
		opts   grpclimit.Options
		client bool // a ClientOptions of the same Store and Policies is bad too
	}{
		{"no policies", grpclimit.Options{Store: store}, true},
		{"no store", grpclimit.Options{Policies: []grpclimit.Policy{good}}, true},
		{"bad name", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{{Name: "é", Limit: good.Limit}}}, true},
		{"duplicate name", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{good, good}}, true},
		{"bad limit", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{{Name: "p", Limit: limit.FixedWindow(0, time.Second)}}}, true},
		{"unknown fail mode", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{good}, OnStoreError: 7}, false},
		{"negative replicas", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{good}, FallbackReplicas: -1}, false},
		{"not a registerer", grpclimit.Options{Store: store, Policies: []grpclimit.Policy{good}, Registerer: "reg"}, false},
	} {
		_, err := grpclimit.New(tc.opts)
		var ce *grpclimit.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "grpclimit: invalid ") {
			t.Errorf("%s: err %v, want a *ConfigError of grpclimit", tc.name, err)
		}
		if !tc.client {
			continue
		}
		_, err = grpclimit.NewClient(grpclimit.ClientOptions{Store: tc.opts.Store, Policies: tc.opts.Policies})
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "grpclimit: invalid ") {
			t.Errorf("%s: client err %v, want a *ConfigError of grpclimit", tc.name, err)
		}
	}
}

// The names grpclimit's options took from httplimit before the two shared
// package limitcore still work: they are the same types and constants.
func TestHTTPLimitNamesStillWork(t *testing.T) {
	store := memStore(t, newFakeClock())
	opts := grpclimit.Options{
		Policies:     []grpclimit.Policy{{Name: "p", Limit: limit.FixedWindow(1, time.Second)}},
		Store:        store,
		OnStoreError: httplimit.FailFallback,
		Headers:      httplimit.HeaderX,
		Metrics:      httplimit.MetricsOptions{Namespace: "x"},
	}
	if _, err := grpclimit.New(opts); err != nil {
		t.Fatal(err)
	}
	var mode grpclimit.FailMode = httplimit.FailFallback
	if mode != grpclimit.FailFallback || httplimit.HeaderX != grpclimit.HeaderX {
		t.Errorf("httplimit's and grpclimit's constants differ")
	}
	opts.Policies = nil
	_, err := grpclimit.New(opts)
	var ce *httplimit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Policies" {
		t.Errorf("err %v, want a *httplimit.ConfigError (the same type) on Policies", err)
	}
}
