package cli

import (
	"bytes"
	"os"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	p := &ProgressLine{W: &buf, Interval: time.Second, Now: func() time.Time { return now }}
	steps := []struct {
		advance time.Duration
		update  string
		clear   bool
		want    string // what this step writes
	}{
		{update: "1/10 objects", want: "\r1/10 objects"},
		{advance: 500 * time.Millisecond, update: "2/10 objects", want: ""}, // too soon
		{advance: 500 * time.Millisecond, update: "3/10", want: "\r3/10        "},
		{clear: true, want: "\r    \r"},
		{update: "4/10", want: "\r4/10"}, // drawn at once after a Clear
		{clear: true, want: "\r    \r"},
		{clear: true, want: ""},
	}
	for i, s := range steps {
		buf.Reset()
		now = now.Add(s.advance)
		if s.clear {
			p.Clear()
		} else {
			p.Update(s.update)
		}
		if got := buf.String(); got != s.want {
			t.Fatalf("step %d: wrote %q, want %q", i, got, s.want)
		}
	}
}

func TestProgressLineNil(t *testing.T) {
	p := NewProgressLine(os.Stderr, false)
	if p != nil {
		t.Fatal("NewProgressLine(w, false) is not nil")
	}
	p.Update("x") // no panic, no output
	p.Clear()
}

func TestIsTerminal(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a buffer is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Fatal("a regular file is not a terminal")
	}
}
