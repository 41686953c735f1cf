package clockfault

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-log/strata/internal/testwait"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, " \n": 0, "+90s\n": 90 * time.Second, "-2m": -2 * time.Minute, "0s": 0} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"soon", "90", "+90s -1s"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

// The clock follows the file: it jumps forward, back, ignores a bad file
// and keeps the offset it had.
func TestClockFollowsControlFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	c := New(path, slog.New(slog.DiscardHandler))
	defer c.Close()
	if c.Offset() != 0 {
		t.Fatalf("offset %v with no file", c.Offset())
	}
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("+1h")
	testwait.Until(t, 10*time.Second, "a jump forward", func() bool { return c.Offset() == time.Hour })
	if ahead := time.Until(c.Now()); ahead < 59*time.Minute {
		t.Fatalf("the clock reads %v ahead, want an hour", ahead)
	}
	write("-30s")
	testwait.Until(t, 10*time.Second, "a jump back", func() bool { return c.Offset() == -30*time.Second })
	write("tomorrow")
	c.Reload()
	if c.Offset() != -30*time.Second {
		t.Fatalf("a bad file moved the offset to %v", c.Offset())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "no offset without the file", func() bool { return c.Offset() == 0 })
}

func TestFromEnvUnset(t *testing.T) {
	t.Setenv(EnvVar, "")
	if c, stop := FromEnv(slog.New(slog.DiscardHandler)); c != nil {
		stop()
		t.Fatal("a clock without the environment variable")
	}
}
