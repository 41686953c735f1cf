package cli

import (
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// DefaultProgressInterval is how often a ProgressLine is redrawn at most.
const DefaultProgressInterval = 250 * time.Millisecond

// ProgressLine shows a long command's progress on one line (of stderr),
// rewritten in place: a carriage return, the text, and spaces over what
// is left of the previous text (no terminal escape codes, so a forced
// progress line in a file stays readable). It redraws at most once per
// Interval however often Update is called. A nil *ProgressLine shows
// nothing, so a command can always call it. It is safe for concurrent use.
type ProgressLine struct {
	W        io.Writer
	Interval time.Duration    // 0: DefaultProgressInterval
	Now      func() time.Time // nil: time.Now

	mu struct {
		sync.Mutex
		drawn time.Time // when the line was last drawn; zero: never
		width int       // runes on the line now; 0: none shown
	}
}

// NewProgressLine returns a ProgressLine on w when show is true, nil (show
// nothing) otherwise.
func NewProgressLine(w io.Writer, show bool) *ProgressLine {
	if !show {
		return nil
	}
	return &ProgressLine{W: w}
}

// Update shows text, unless the line was drawn less than Interval ago.
func (p *ProgressLine) Update(text string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	interval := p.Interval
	if interval == 0 {
		interval = DefaultProgressInterval
	}
	if !p.mu.drawn.IsZero() && now.Sub(p.mu.drawn) < interval {
		return
	}
	p.mu.drawn = now
	p.drawLocked(text)
}

// Clear erases the line, if one is shown, and leaves the cursor at its
// start, so that other output (a result, a summary) starts on a clean line.
// The next Update draws at once.
func (p *ProgressLine) Clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.width > 0 {
		io.WriteString(p.W, "\r"+strings.Repeat(" ", p.mu.width)+"\r")
		p.mu.width = 0
	}
	p.mu.drawn = time.Time{}
}

// drawLocked writes text over the current line.
// REQUIRES: p.mu held.
func (p *ProgressLine) drawLocked(text string) {
	w := utf8.RuneCountInString(text)
	pad := max(0, p.mu.width-w)
	io.WriteString(p.W, "\r"+text+strings.Repeat(" ", pad))
	p.mu.width = w
}

func (p *ProgressLine) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// IsTerminal reports whether w is a terminal (a character device), where
// a line rewritten in place makes sense.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
