//go:build !race

package tiering

// raceEnabled: the race detector is on. It pads allocations and drops
// pooled objects at random, so allocation bounds do not hold.
const raceEnabled = false
