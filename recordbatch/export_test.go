package recordbatch

// Decompress is decompress: the whole records section at once, the
// reference a streaming scan is checked against.
var Decompress = decompress

// InflatingSlots is how many decompressions may run at once.
func InflatingSlots() int { return cap(inflating()) }
