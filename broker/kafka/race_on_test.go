//go:build race

package kafka

// raceEnabled: the race detector is on (its allocator pads objects, so
// heap measurements do not hold).
const raceEnabled = true
