package compact

// Rewritten batches are encoded by recordbatch.EncodeWithHeader, which
// keeps the header this package chooses (offsets with gaps, a delete
// horizon in BaseTimestamp) and the records' own offset deltas.

// Attribute bits this package reads or writes (recordbatch/doc.go).
const (
	attrCompressionMask = 0x07
	attrLogAppendTime   = 0x08
	attrDeleteHorizon   = 0x40 // KIP-534: baseTimestamp holds the delete horizon
)
