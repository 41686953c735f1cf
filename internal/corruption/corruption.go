package corruption

import "errors"

// ErrCorruption is the marker every corruption error matches. Match it with
// Is (or errors.Is); wrapping it directly with %w also marks an error.
var ErrCorruption = errors.New("corruption")

// Mark returns err marked as corruption: it reads as err and matches what
// err matches, and also ErrCorruption (C1-C3). Mark(nil) is nil.
func Mark(err error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err}
}

// Is reports whether err, or any error it wraps, is marked as corruption
// (C4).
func Is(err error) bool {
	return errors.Is(err, ErrCorruption)
}

// marked is an error with the corruption mark. It is a pointer so that a
// marked sentinel is comparable and errors.Is matches it by identity.
type marked struct {
	err error
}

func (m *marked) Error() string { return m.err.Error() }

// Unwrap lets errors.Is and errors.As see the marked error and its chain.
func (m *marked) Unwrap() error { return m.err }

// Is makes errors.Is(m, ErrCorruption) hold; every other target is left to
// the chain under m.
func (m *marked) Is(target error) bool { return target == ErrCorruption }
