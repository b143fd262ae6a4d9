package slogadapter_test

import (
	"log/slog"
	"os"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/logadapter/slogadapter"
)

// A batcher's events logged by log/slog: here the shutdown that Stop
// raises, with the number of operations it left unreleased. The handler
// drops the time so that the output is stable.
func ExampleListener() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	})
	b := batcher.NewBatcher()
	b.AddListener(slogadapter.Listener(slog.New(h), "orders"))
	if err := b.Start(); err != nil {
		panic(err)
	}
	b.Stop()
	// Output:
	// level=INFO msg="batcher shutdown" source=orders event=shutdown val=0
}
