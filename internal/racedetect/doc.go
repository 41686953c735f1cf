// Package racedetect says whether the binary runs under the race
// detector (go build/test -race). Tests ask it before asserting
// allocation bounds, which do not hold under the detector: it pads
// allocations and drops pooled objects at random; and before sizing work
// that the detector slows 2-20 times.
package racedetect
