package zerologadapter_test

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/costwise/batcher"
	"github.com/costwise/batcher/logadapter/zerologadapter"
)

// A batcher's events logged by zerolog: here the shutdown that Stop
// raises, with the number of operations it left unreleased. The logger
// writes no timestamp so that the output is stable.
func ExampleListener() {
	logger := zerolog.New(os.Stdout)
	b := batcher.NewBatcher()
	b.AddListener(zerologadapter.Listener(logger, "orders"))
	if err := b.Start(); err != nil {
		panic(err)
	}
	b.Stop()
	// Output:
	// {"level":"info","source":"orders","event":"shutdown","val":0,"message":"batcher shutdown"}
}
