package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// OffsetKind says where a consumer starts reading a partition.
type OffsetKind int

// Offset kinds of the -o grammar.
const (
	OffsetEarliest  OffsetKind = iota // the log start
	OffsetLatest                      // the high watermark: only new records
	OffsetAbsolute                    // offset N
	OffsetFromEnd                     // N before the high watermark, not before the log start
	OffsetTimestamp                   // the first record with a timestamp >= Time
)

// OffsetSpec is a parsed -o value. It names a position per partition: the
// client resolves it against each partition's log start and end.
type OffsetSpec struct {
	Kind OffsetKind
	N    int64     // OffsetAbsolute: the offset; OffsetFromEnd: how many records before the end
	Time time.Time // OffsetTimestamp
}

func (o OffsetSpec) String() string {
	switch o.Kind {
	case OffsetEarliest:
		return "earliest"
	case OffsetLatest:
		return "latest"
	case OffsetAbsolute:
		return strconv.FormatInt(o.N, 10)
	case OffsetFromEnd:
		return "-" + strconv.FormatInt(o.N, 10)
	case OffsetTimestamp:
		return "@" + strconv.FormatInt(o.Time.UnixMilli(), 10)
	}
	return fmt.Sprintf("OffsetKind(%d)", int(o.Kind))
}

const offsetGrammar = "want earliest, latest, N (absolute offset), -N (N before the end), " +
	"@TIMESTAMP_MS or @-DURATION (e.g. @-1h)"

// ParseOffset parses the consume -o grammar:
//
//	earliest (also beginning)  every record
//	latest (also end)          only records produced from now on
//	N                          from offset N (absolute, N >= 0)
//	-N                         the last N records of each partition
//	@TIMESTAMP_MS              from the first record at or after the time (Unix ms)
//	@-DURATION                 from now minus a Go duration (@-1h, @-90s)
//
// now resolves @-DURATION.
func ParseOffset(s string, now time.Time) (OffsetSpec, error) {
	v := strings.TrimSpace(s)
	bad := func(why string) (OffsetSpec, error) {
		if why != "" {
			return OffsetSpec{}, fmt.Errorf("offset %q: %s; %s", s, why, offsetGrammar)
		}
		return OffsetSpec{}, fmt.Errorf("offset %q: %s", s, offsetGrammar)
	}
	switch strings.ToLower(v) {
	case "earliest", "beginning":
		return OffsetSpec{Kind: OffsetEarliest}, nil
	case "latest", "end":
		return OffsetSpec{Kind: OffsetLatest}, nil
	case "":
		return bad("empty")
	}
	if rest, ok := strings.CutPrefix(v, "@"); ok {
		if dur, ok := strings.CutPrefix(rest, "-"); ok {
			d, err := time.ParseDuration(dur)
			if err != nil || d <= 0 {
				return bad("bad duration " + strconv.Quote(dur))
			}
			return OffsetSpec{Kind: OffsetTimestamp, Time: now.Add(-d)}, nil
		}
		ms, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ms < 0 {
			return bad("bad timestamp " + strconv.Quote(rest) + " (Unix milliseconds)")
		}
		return OffsetSpec{Kind: OffsetTimestamp, Time: time.UnixMilli(ms)}, nil
	}
	if rest, ok := strings.CutPrefix(v, "-"); ok {
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || n <= 0 {
			return bad("bad count " + strconv.Quote(rest))
		}
		return OffsetSpec{Kind: OffsetFromEnd, N: n}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return bad("")
	}
	return OffsetSpec{Kind: OffsetAbsolute, N: n}, nil
}
