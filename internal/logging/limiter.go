package logging

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter lets one warning through per Every and says how many it held
// back since the last (similar_not_logged), so that a condition that
// repeats in a loop (a client sending bad requests, a slow disk) cannot
// flood the log; metrics count every one. Safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu      sync.Mutex
	next    time.Time
	dropped int
}

// Warn logs msg with args on logger unless a line went through less than
// Every before now.
func (l *Limiter) Warn(logger *slog.Logger, now time.Time, msg string, args ...any) {
	l.mu.Lock()
	if now.Before(l.next) {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.next, l.dropped = now.Add(l.Every), 0
	l.mu.Unlock()
	logger.Warn(msg, append(args, "similar_not_logged", dropped)...)
}
