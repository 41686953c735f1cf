// Package clockfault is a clock whose reading a control file moves: a test
// seam for fault-injection runs that make one node's clock jump forward or
// back while the others keep time.
//
// A process opts in through the environment only: when STRATA_CLOCK_FAULTS
// (EnvVar) names a file, FromEnv returns a Clock that follows it; when the
// variable is unset or empty (production) it returns nil, and the node
// keeps reading time.Now directly.
//
// # Control file
//
// The file holds one Go duration with an optional sign ("+90s", "-2m",
// "0s"): the offset added to every reading of the clock. It is read when
// FromEnv returns and again every PollInterval (50 ms); a missing or empty
// file means no offset. A change of the offset is a jump of the node's
// clock, forward or back, by the difference, and is logged ("clock offset
// changed"), so a test can see when a process picked it up. A file that
// does not parse is logged and leaves the offset as it was. Write it
// atomically (a temporary file renamed over it).
//
// # What moves
//
// Now returns time.Now() plus the offset, monotonic reading included: for
// the code that reads the time through the Clock (a broker's record and
// creation stamps, ages and expiries; a bookie's deletion stamps and
// tombstone expiry) the jump is as real as the
// operating system's wall clock jumping under code that compares wall
// times. Timers, tickers and time.Since of the runtime do not move; nor
// does what other nodes read.
package clockfault

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EnvVar names the environment variable that holds the control file's
// path.
const EnvVar = "STRATA_CLOCK_FAULTS"

// PollInterval is how often the control file is read.
const PollInterval = 50 * time.Millisecond

// Clock is time.Now moved by the control file's offset.
type Clock struct {
	path   string
	log    *slog.Logger
	offset atomic.Int64

	mu struct {
		sync.Mutex
		content string
	}
	stop, done chan struct{}
	closeOnce  sync.Once
}

// FromEnv returns a Clock following the control file EnvVar names and a
// function that stops it, or nil and a no-op when EnvVar is unset.
func FromEnv(log *slog.Logger) (*Clock, func()) {
	path := os.Getenv(EnvVar)
	if path == "" {
		return nil, func() {}
	}
	c := New(path, log)
	return c, c.Close
}

// New returns a Clock following the control file at path; Close stops it.
func New(path string, log *slog.Logger) *Clock {
	c := &Clock{path: path, log: log.With("clock_faults", path), stop: make(chan struct{}), done: make(chan struct{})}
	c.Reload()
	go c.poll()
	return c
}

// Now is the time as this clock reads it.
func (c *Clock) Now() time.Time { return time.Now().Add(c.Offset()) }

// Offset is the offset in force.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Parse reads control file content: an optional sign and a Go duration,
// blank for none.
func Parse(content string) (time.Duration, error) {
	s := strings.TrimSpace(content)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("clockfault: want a duration such as +90s or -2m, got " + s)
	}
	return d, nil
}

// Reload reads the control file now, without waiting for the next poll.
func (c *Clock) Reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := os.ReadFile(c.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Error("reading the clock control file; offset unchanged", "err", err)
		return
	}
	content := string(b)
	if content == c.mu.content {
		return
	}
	c.mu.content = content
	d, err := Parse(content)
	if err != nil {
		c.log.Error("clock control file ignored", "err", err)
		return
	}
	if old := c.Offset(); old != d {
		c.offset.Store(int64(d))
		c.log.Warn("clock offset changed", "offset", d, "jump", d-old)
	}
}

func (c *Clock) poll() {
	defer close(c.done)
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.Reload()
		}
	}
}

// Close stops following the control file; the offset stays as it was.
func (c *Clock) Close() {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
	})
}
