package faultfs

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// EnvVar names the environment variable that holds the control file's
// path. Unset or empty: FromEnv wraps nothing.
const EnvVar = "STRATA_DISK_FAULTS"

// Faults are the faults in force. The zero value is healthy.
type Faults struct {
	// SyncStall delays every sync by this much (0: none).
	SyncStall time.Duration
	// SyncEIO, WriteEIO and ReadEIO fail every sync, write or read with
	// EIO.
	SyncEIO, WriteEIO, ReadEIO bool
}

// Healthy reports whether no fault is in force.
func (f Faults) Healthy() bool { return f == Faults{} }

// String is the faults as control file lines joined by ", ", or "healthy".
func (f Faults) String() string {
	var parts []string
	if f.SyncStall > 0 {
		parts = append(parts, "sync-stall "+f.SyncStall.String())
	}
	for _, m := range []struct {
		on   bool
		name string
	}{{f.SyncEIO, "sync-eio"}, {f.WriteEIO, "write-eio"}, {f.ReadEIO, "read-eio"}} {
		if m.on {
			parts = append(parts, m.name)
		}
	}
	if len(parts) == 0 {
		return "healthy"
	}
	return strings.Join(parts, ", ")
}

// Parse reads control file content (doc.go, "Control file"). It returns
// the faults of every line it understands and an error naming each line
// it does not.
func Parse(content string) (Faults, error) {
	var f Faults
	var errs []error
	for i, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		bad := func(why string) {
			errs = append(errs, fmt.Errorf("faultfs: line %d %q: %s", i+1, line, why))
		}
		switch name, args := fields[0], fields[1:]; name {
		case "sync-stall":
			if len(args) != 1 {
				bad("want sync-stall DURATION")
				continue
			}
			d, err := time.ParseDuration(args[0])
			if err != nil || d < 0 {
				bad("want a non-negative duration such as 3s")
				continue
			}
			f.SyncStall = d
		case "sync-eio", "write-eio", "read-eio":
			if len(args) != 0 {
				bad("takes no argument")
				continue
			}
			switch name {
			case "sync-eio":
				f.SyncEIO = true
			case "write-eio":
				f.WriteEIO = true
			default:
				f.ReadEIO = true
			}
		default:
			bad("unknown fault (want sync-stall, sync-eio, write-eio or read-eio)")
		}
	}
	return f, errors.Join(errs...)
}
