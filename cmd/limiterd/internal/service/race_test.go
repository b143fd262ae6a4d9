//go:build race

package service

// raceBuild is true when the tests run with the race detector, so that a
// limiterd they build runs with it too.
const raceBuild = true
