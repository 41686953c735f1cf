package corruption_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"

	"github.com/strata-log/strata/internal/corruption"
)

// Two sentinels declared as the packages declare theirs.
var (
	errJournal = corruption.Mark(errors.New("journal: corrupt"))
	errSegment = corruption.Mark(errors.New("segfile: corrupt segment"))
	errOther   = errors.New("journal: closed")
)

// located is shaped like journal.CorruptError and segfile.CorruptError: a
// type that says where and unwraps to its package's sentinel and a cause.
type located struct {
	pos   int64
	cause error
}

func (e *located) Error() string { return fmt.Sprintf("corrupt at %d: %v", e.pos, e.cause) }

func (e *located) Unwrap() []error { return []error{errSegment, e.cause} }

// C1, C4: which errors Is recognises, through every way Strata wraps.
func TestIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"a plain error", errOther, false},
		{"io.ErrUnexpectedEOF (a short read is not corruption by itself)", io.ErrUnexpectedEOF, false},
		{"the marker", corruption.ErrCorruption, true},
		{"the marker wrapped", fmt.Errorf("reading: %w", corruption.ErrCorruption), true},
		{"a marked sentinel", errJournal, true},
		{"a marked ad-hoc error", corruption.Mark(errors.New("bad header")), true},
		{"wrapped once", fmt.Errorf("%w: crc mismatch", errJournal), true},
		{"wrapped three times", fmt.Errorf("storage: %w", fmt.Errorf("read: %w", fmt.Errorf("%w: file 1", errJournal))), true},
		{"second of two %w", fmt.Errorf("%w: %w", errOther, errJournal), true},
		{"first of two %w", fmt.Errorf("%w: %w", errJournal, errOther), true},
		{"%v hides the mark", fmt.Errorf("read: %v", errJournal), false},
		{"joined with a plain error", errors.Join(errOther, fmt.Errorf("x: %w", errSegment)), true},
		{"joined plain errors", errors.Join(errOther, io.EOF), false},
		{"join inside %w", fmt.Errorf("scan: %w", errors.Join(io.EOF, errJournal)), true},
		{"a located error", &located{pos: 7, cause: io.ErrUnexpectedEOF}, true},
		{"a located error wrapped", fmt.Errorf("tier: %w", &located{pos: 7}), true},
		{"marked twice", corruption.Mark(errJournal), true},
	} {
		if got := corruption.Is(tc.err); got != tc.want {
			t.Errorf("%s: Is(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// C3: marked sentinels match themselves, through wrapping, and never each
// other or the errors they were made from.
func TestMarkedSentinelsKeepTheirIdentity(t *testing.T) {
	wrapped := fmt.Errorf("storage: ledger 1 entry 2: %w", fmt.Errorf("%w: file 3", errJournal))
	joined := errors.Join(errOther, wrapped)
	for _, tc := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"itself", errJournal, errJournal, true},
		{"itself wrapped", wrapped, errJournal, true},
		{"itself joined", joined, errJournal, true},
		{"the other plain sentinel in the join", joined, errOther, true},
		{"another marked sentinel", errJournal, errSegment, false},
		{"another marked sentinel, wrapped", wrapped, errSegment, false},
		{"a located error's sentinel", &located{pos: 1}, errSegment, true},
		{"a located error's cause", &located{pos: 1, cause: io.ErrUnexpectedEOF}, io.ErrUnexpectedEOF, true},
		{"a located error is not another sentinel", &located{pos: 1}, errJournal, false},
		{"the marker is not a sentinel", corruption.ErrCorruption, errJournal, false},
	} {
		if got := errors.Is(tc.err, tc.target); got != tc.want {
			t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tc.name, tc.err, tc.target, got, tc.want)
		}
	}
}

// C1, C2: Mark keeps the text and what errors.Is and errors.As find.
func TestMarkAddsAndHidesNothing(t *testing.T) {
	if corruption.Mark(nil) != nil {
		t.Fatal("Mark(nil) is not nil")
	}
	cause := &fs.PathError{Op: "read", Path: "/data/000001.log", Err: io.ErrUnexpectedEOF}
	for _, err := range []error{
		errors.New("journal: corrupt"),
		fmt.Errorf("chunk 4: %w", cause),
		errors.Join(errOther, cause),
	} {
		m := corruption.Mark(err)
		if m.Error() != err.Error() {
			t.Errorf("Mark(%q).Error() = %q", err, m.Error())
		}
		if !errors.Is(m, err) {
			t.Errorf("errors.Is(Mark(%q), itself) is false", err)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) != errors.As(m, &pe) {
			t.Errorf("errors.As(*fs.PathError) differs through Mark(%q)", err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) != errors.Is(m, io.ErrUnexpectedEOF) {
			t.Errorf("errors.Is(io.ErrUnexpectedEOF) differs through Mark(%q)", err)
		}
		if !corruption.Is(m) || corruption.Is(err) {
			t.Errorf("Is(Mark(%q)) = %v, Is(%q) = %v: only the marked one is corruption", err, corruption.Is(m), err, corruption.Is(err))
		}
	}
}
