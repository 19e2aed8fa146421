//go:build race

package e2e

// raceDetector says the tests run under the race detector, which allows
// at most 8,128 goroutines alive at once.
const raceDetector = true
