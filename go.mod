module github.com/costwise/batcher

go 1.26.8

require (
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)
