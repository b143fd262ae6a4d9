module github.com/costwise/batcher/bench/httppeers

go 1.26.8

require github.com/costwise/batcher v0.0.0

require (
	github.com/didip/tollbooth/v7 v7.0.2 // indirect
	github.com/go-chi/chi/v5 v5.5.0 // indirect
	github.com/go-chi/httprate v0.16.1 // indirect
	github.com/go-pkgz/expirable-cache/v3 v3.0.0 // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/sethvargo/go-limiter v0.7.1 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/costwise/batcher => ../..
