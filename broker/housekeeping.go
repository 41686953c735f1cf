package broker

import (
	"context"
	"sync"
	"time"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/retention"
	"github.com/strata-log/strata/broker/partlog/tierpass"
)

// passes are the broker's background work over the partitions it
// serves: retention and tiering rounds (this file), the compactor
// (compactor.go) and consumer-group lag (lag.go).
type passes struct {
	b *Broker
}

// retentionWorkers: how many served logs apply retention at once. A round
// that cuts is one list CAS and up to 16 deletions in flight (partlog);
// one that does not is a few microseconds.
const retentionWorkers = 4

// retentionLoop applies every served log's retention every
// --retention-check-interval (P6), written to or idle.
func (p *passes) retentionLoop(ctx context.Context) {
	b := p.b
	b.passes.everyServedLog(ctx, b.cfg.RetentionCheckInterval, retentionWorkers, func(l *partlog.Log, _ int) {
		retention.Round(l)
	})
}

// tierLoop runs every served log's tier work every --tier-check-interval
// (uploads, local deletions, garbage; the orphan sweep every 10th round).
// Uploads are bounded by
// --tier-uploads on their own; the rest of a round is store lists and
// deletes.
func (p *passes) tierLoop(ctx context.Context) {
	b := p.b
	if b.tier == nil {
		return
	}
	b.passes.everyServedLog(ctx, b.cfg.TierCheckInterval, b.cfg.TierUploads+retentionWorkers, func(l *partlog.Log, round int) {
		tierpass.Round(l, round%10 == 0)
	})
}

// everyServedLog calls fn for every served log once per interval, at most
// workers at a time (sweepEvery).
func (p *passes) everyServedLog(ctx context.Context, interval time.Duration, workers int, fn func(l *partlog.Log, round int)) {
	b := p.b
	sweepEvery(ctx, interval, workers, b.servedLogs, fn)
}

// sweepEvery calls fn for every item list returns, once per interval
// (round counts from 1), at most workers at a time, until ctx ends; it
// returns once the calls it started have. An item whose previous call
// has not returned (a long upload) is skipped in that round, not waited
// for, so one slow item does not hold the others.
func sweepEvery[T comparable](ctx context.Context, interval time.Duration, workers int, list func() []T, fn func(item T, round int)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	busy := map[T]bool{}
	for round := 1; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, item := range list() {
			mu.Lock()
			skip := busy[item]
			busy[item] = true
			mu.Unlock()
			if skip {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				delete(busy, item)
				mu.Unlock()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(item, round)
				mu.Lock()
				delete(busy, item)
				mu.Unlock()
				<-sem
			}()
		}
	}
}
